/* build.c — turns an analysed graph into a plan (plan.h): the order, each node's backend, the
 * GPU part (gpu.c, through the runtime's policy), the successor and predecessor lists (CSR)
 * over the graph's edges and the claims, the roots, the batches, and for each edge whether it
 * is released at issue ("early": both ends on the same asynchronous backend, which orders
 * them) or at completion. Then each backend attaches its own objects (events, buffers, costs)
 * through its `plan` hook.
 *
 * A plan is rebuilt only when the graph's version moved; re-running an unchanged graph reuses
 * it, including the dispatcher's per-run state, which launch resets in one pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/plan/planner.h"
#include "sched/sched.h"

/* Array sizes, in one place for allocation and release. */
#define X_BYTES(n) ((size_t)((n) ? (n) : 1) * sizeof(weft__xnode))
#define U32_BYTES(k) ((size_t)((k) ? (k) : 1) * sizeof(uint32_t))
#define U8_BYTES(k) ((size_t)((k) ? (k) : 1))

static void gpu_free(weft__gpu_plan *gp) {
  weft__free(gp->target.dev);
  weft__free(gp->turns);
  weft__free(gp->turn_base);
  weft__free(gp->used);
  weft__free(gp->node);
  weft__free(gp->lists);
  weft__free(gp->temp);
  weft__free(gp->batches);
  memset(gp, 0, sizeof *gp);
}

static void plan_free_arrays(weft__plan *p) {
  const weft__mem *mem = p->mem;
  weft__mem_put(mem, p->x, X_BYTES(p->n));
  weft__mem_put(mem, p->order, U32_BYTES(p->n));
  weft__mem_put(mem, p->succ, U32_BYTES(p->m));
  weft__mem_put(mem, p->succ_early, U8_BYTES(p->m));
  weft__mem_put(mem, p->pred, U32_BYTES(p->m));
  weft__mem_put(mem, p->indeg, U32_BYTES(p->n));
  weft__mem_put(mem, p->roots, U32_BYTES(p->n));
  weft__mem_put(mem, p->args_room, p->nargs_room * sizeof(void *));
  gpu_free(&p->gpu);
  weft__exec_free(p);
}

/* Frees a plan whose backends' hooks ran for backends [0, hooked). */
static void plan_free(weft_runtime *rt, weft__plan *p, int hooked) {
  for (int b = 0; b < hooked; b++)
    if (rt->backends[b].vt->plan_free != NULL) rt->backends[b].vt->plan_free(&rt->backends[b], p);
  plan_free_arrays(p);
  weft__free(p);
}

void weft__plan_free(weft_runtime *rt, weft__plan *p) {
  if (p != NULL) plan_free(rt, p, rt->nbackends);
}

/* The node records, RECORD_TILE nodes a tile (node_records; the CSR's node steps too). */
enum { RECORD_TILE = 1024 };

/* Adds each edge of `e` to the CSR arrays; x[].succ_end and pred_end are the fill cursors. */
static void fill_edges(weft__plan *p, const weft__edge *e, size_t len) {
  for (size_t k = 0; k < len; k++) {
    weft__xnode *from = &p->x[e[k].from], *to = &p->x[e[k].to];
    uint32_t s = from->succ_end++;
    p->succ[s] = e[k].to;
    p->succ_early[s] = from->backend == to->backend &&
                       (from->backend->vt->flags & WEFT__BACKEND_ASYNC) != 0;
    p->pred[to->pred_end++] = e[k].from;
  }
}

static void count_edges(weft__plan *p, const weft__edge *e, size_t len) {
  for (size_t k = 0; k < len; k++) {
    p->x[e[k].from].succ_end++;
    p->x[e[k].to].pred_end++;
  }
}

/* ---- the CSR of a large graph, with the pool's idle workers --------------------------------
 *
 * At the first launch of a Task Bench graph of 8000 tasks on 16 cores the serial CSR took
 * 0.13-1.1 ms (1 to 16 edges a task), the launching thread alone while the pool waited for
 * the first node; the records it reads were written by other threads (node_records), each a
 * miss. The analysis appends each node's edges as the node is appended, so the graph's edges
 * are sorted by target: a node's predecessors are the run of edges into it, in place, and only
 * the successors need a transpose. In parallel: count each node's successors (edge tiles,
 * atomic counts), their offsets (one serial scan of the counts), the records' offsets and
 * predecessor runs (node tiles), the fill (edge tiles, an atomic cursor per node), then each
 * node's successors sorted by target, which is the order the serial fill gives them (edges in
 * order of target, one per pair): the same plan whoever built it. */
enum { EDGE_TILE = 2048, PAR_EDGES_MIN = 4096, PAR_WORKERS_MIN = 4 }; /* its extra passes pay from 4 */

typedef struct edges_job {
  weft__plan *p;
  const weft__edge *e;
  size_t m;
  atomic_uint *cur;   /* per node: its successors counted, then its offset, then the fill cursor */
  atomic_int unsorted; /* an edge whose target is below its predecessor's: the serial build */
} edges_job;

static void count_tile(void *arg, uint32_t t) {
  edges_job *j = arg;
  size_t lo = (size_t)t * EDGE_TILE, hi = j->m - lo < EDGE_TILE ? j->m : lo + EDGE_TILE;
  int bad = 0;
  for (size_t k = lo; k < hi; k++) {
    atomic_fetch_add_explicit(&j->cur[j->e[k].from], 1, memory_order_relaxed);
    bad |= k > 0 && j->e[k].to < j->e[k - 1].to;
  }
  if (bad) atomic_store_explicit(&j->unsorted, 1, memory_order_relaxed);
}

/* First edge index whose target is >= node. */
static size_t first_into(const edges_job *j, uint32_t node) {
  size_t lo = 0, hi = j->m;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (j->e[mid].to < node) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void nodes_tile(void *arg, uint32_t t) {
  edges_job *j = arg;
  weft__plan *p = j->p;
  uint32_t lo = t * RECORD_TILE, hi = p->n - lo < RECORD_TILE ? p->n : lo + RECORD_TILE;
  size_t k = first_into(j, lo);
  for (uint32_t i = lo; i < hi; i++) {
    weft__xnode *x = &p->x[i];
    uint32_t begin = atomic_load_explicit(&j->cur[i], memory_order_relaxed);
    uint32_t end = i + 1 < p->n ? atomic_load_explicit(&j->cur[i + 1], memory_order_relaxed) : (uint32_t)j->m;
    x->succ_begin = begin;
    x->succ_end = end;
    x->pred_begin = (uint32_t)k;
    while (k < j->m && j->e[k].to == i) k++;
    x->pred_end = (uint32_t)k;
    p->indeg[i] = x->pred_end - x->pred_begin;
  }
}

static void fill_tile(void *arg, uint32_t t) {
  edges_job *j = arg;
  weft__plan *p = j->p;
  size_t lo = (size_t)t * EDGE_TILE, hi = j->m - lo < EDGE_TILE ? j->m : lo + EDGE_TILE;
  for (size_t k = lo; k < hi; k++) {
    const weft__edge *e = &j->e[k];
    p->succ[atomic_fetch_add_explicit(&j->cur[e->from], 1, memory_order_relaxed)] = e->to;
    p->pred[k] = e->from;
  }
}

/* Each node's successors in order of target (insertion sort for the usual few; a node that
 * many read, a constant every node of a large graph reads, by qsort), then their early marks. */
static void sort_tile(void *arg, uint32_t t) {
  edges_job *j = arg;
  weft__plan *p = j->p;
  uint32_t lo = t * RECORD_TILE, hi = p->n - lo < RECORD_TILE ? p->n : lo + RECORD_TILE;
  for (uint32_t i = lo; i < hi; i++) {
    uint32_t first = p->x[i].succ_begin, end = p->x[i].succ_end;
    if (end - first > 32) {
      qsort(p->succ + first, end - first, sizeof *p->succ, weft__cmp_u32);
    } else {
      for (uint32_t a = first + 1; a < end; a++) {
        uint32_t v = p->succ[a], b = a;
        for (; b > first && p->succ[b - 1] > v; b--) p->succ[b] = p->succ[b - 1];
        p->succ[b] = v;
      }
    }
    const weft__backend *from = p->x[i].backend;
    int async = (from->vt->flags & WEFT__BACKEND_ASYNC) != 0;
    for (uint32_t a = first; a < end; a++) p->succ_early[a] = async && p->x[p->succ[a]].backend == from;
  }
}

/* The CSR in parallel; WEFT_EAGAIN (nothing written but the counts) if the edges are not sorted
 * by target, which the serial build then takes. */
static int build_edges_parallel(weft__plan *p, weft__pool *pool) {
  weft_graph *g = p->graph;
  size_t m = g->edges.len, cur_bytes = (size_t)p->n * sizeof(atomic_uint);
  edges_job j = {.p = p, .e = g->edges.data, .m = m};
  atomic_init(&j.unsorted, 0);
  if ((j.cur = weft__mem_get(p->mem, cur_bytes)) == NULL) return weft__oom("a plan");
  memset(j.cur, 0, cur_bytes);
  uint32_t etiles = (uint32_t)((m + EDGE_TILE - 1) / EDGE_TILE), ntiles = (p->n + RECORD_TILE - 1) / RECORD_TILE;
  uint32_t helpers = (uint32_t)weft__pool_size(pool) - 1; /* the launching thread takes a core */
  weft__pool_parallel(pool, etiles, helpers, count_tile, &j);
  if (atomic_load_explicit(&j.unsorted, memory_order_relaxed)) {
    weft__mem_put(p->mem, j.cur, cur_bytes);
    return WEFT_EAGAIN;
  }
  uint32_t off = 0;
  for (uint32_t i = 0; i < p->n; i++) {
    uint32_t c = atomic_load_explicit(&j.cur[i], memory_order_relaxed);
    atomic_store_explicit(&j.cur[i], off, memory_order_relaxed);
    off += c;
  }
  weft__pool_parallel(pool, ntiles, helpers, nodes_tile, &j);
  weft__pool_parallel(pool, etiles, helpers, fill_tile, &j);
  weft__pool_parallel(pool, ntiles, helpers, sort_tile, &j);
  weft__mem_put(p->mem, j.cur, cur_bytes);
  for (uint32_t i = 0; i < p->n; i++)
    if (p->indeg[i] == 0) p->roots[p->nroots++] = i;
  return WEFT_OK;
}

static int build_edges(weft__plan *p, const weft__vec *extra) {
  weft_graph *g = p->graph;
  size_t m = g->edges.len + extra->len;
  p->m = m;
  p->succ = weft__mem_get(p->mem, U32_BYTES(m));
  p->succ_early = weft__mem_get(p->mem, U8_BYTES(m));
  p->pred = weft__mem_get(p->mem, U32_BYTES(m));
  if (!p->succ || !p->succ_early || !p->pred) return weft__oom("a plan");
  weft__pool *pool = g->rt->pool;
  if (extra->len == 0 && m >= PAR_EDGES_MIN && m < UINT32_MAX && weft__pool_size(pool) >= PAR_WORKERS_MIN) {
    int rc = build_edges_parallel(p, pool);
    if (rc != WEFT_EAGAIN) return rc;
  }
  /* Counts, then prefix sums; x[i].succ_end and pred_end serve as fill cursors. */
  count_edges(p, g->edges.data, g->edges.len);
  count_edges(p, extra->data, extra->len);
  uint32_t so = 0, po = 0;
  for (uint32_t i = 0; i < p->n; i++) {
    weft__xnode *x = &p->x[i];
    p->indeg[i] = x->pred_end;
    uint32_t sc = x->succ_end, pc = x->pred_end;
    x->succ_begin = x->succ_end = so;
    x->pred_begin = x->pred_end = po;
    so += sc;
    po += pc;
  }
  fill_edges(p, g->edges.data, g->edges.len);
  fill_edges(p, extra->data, extra->len);
  for (uint32_t i = 0; i < p->n; i++)
    if (p->indeg[i] == 0) p->roots[p->nroots++] = i;
  return WEFT_OK;
}

/* The GPU part, when the plan has GPU nodes (`any`): planned for the machine the GPUs' backend
 * describes. */
static int plan_gpus(weft__plan *p, int any, weft__vec *extra) {
  weft_runtime *rt = p->graph->rt;
  const weft__backend *gb = rt->by_kind[WEFT_DEVICE_CUDA];
  if (!any || gb == NULL || gb->vt->gpu_target == NULL) return WEFT_OK;
  weft__gpu_target t;
  memset(&t, 0, sizeof t);
  t.ngpus = gb->vt->device_count(gb);
  if (rt->all_ranks) t.ngpus *= rt->nranks; /* every rank's GPUs: weft__gpu_slot */
  t.backend = gb;
  if ((t.dev = weft__calloc(t.ngpus > 0 ? (size_t)t.ngpus : 1, sizeof *t.dev)) == NULL) return weft__oom("a plan");
  int rc = gb->vt->gpu_target(gb, &t);
  if (rc == WEFT_OK) return weft__plan_gpu(p, &t, extra); /* takes t.dev */
  weft__free(t.dev);
  return rc;
}


typedef struct records_job {
  weft__plan *p;
  weft_node **nodes;
  uint8_t *gpu;  /* per tile: a GPU node among its nodes */
  size_t *room;  /* per tile: the argument slots its nodes need beyond the inline ones */
} records_job;

/* Tile t's records: the one pass over its nodes (each a cache miss in a large graph built a
 * while ago): what the plan needs of a node is read here, and its record written whole. */
static void records_tile(void *arg, uint32_t t) {
  records_job *j = arg;
  weft__plan *p = j->p;
  weft_runtime *rt = p->graph->rt;
  uint32_t lo = t * RECORD_TILE, hi = p->n - lo < RECORD_TILE ? p->n : lo + RECORD_TILE;
  size_t room = 0;
  int gpu = 0;
  for (uint32_t i = lo; i < hi; i++) {
    const weft_node *nd = j->nodes[i];
    if (i + WEFT__AHEAD < hi) WEFT__PREFETCH(j->nodes[i + WEFT__AHEAD]);
    p->x[i] = (weft__xnode){.node = j->nodes[i], .plan = p, .id = i, .backend = weft__node_backend(rt, nd)};
    gpu |= nd->device.kind == WEFT_DEVICE_CUDA;
    if (nd->nargs > WEFT__CTX_INLINE) room += nd->nargs;
  }
  j->gpu[t] = (uint8_t)gpu;
  j->room[t] = room;
}

/* Writes every node's record and says whether any runs on a GPU and how many argument slots
 * the nodes need beyond the inline ones. A large graph's records are shared with the pool's
 * idle workers (weft__pool_parallel from the launching thread): at the first launch of a
 * 32 000-node graph they were about a third of the launch, which the launching thread made
 * alone while the workers waited for the first node. Each record is its node's alone, so
 * who writes it does not matter. */
static int node_records(weft__plan *p, weft_node **nodes, int *gpu, size_t *room) {
  uint32_t tiles = (p->n + RECORD_TILE - 1) / RECORD_TILE;
  uint8_t gpu1;
  size_t room1;
  records_job j = {p, nodes, &gpu1, &room1};
  if (tiles > 1) {
    j.gpu = weft__malloc(tiles);
    j.room = weft__malloc(tiles * sizeof *j.room);
    if (j.gpu == NULL || j.room == NULL) {
      weft__free(j.gpu);
      weft__free(j.room);
      return weft__oom("a plan");
    }
    weft__pool *pool = p->graph->rt->pool;
    uint32_t helpers = (uint32_t)weft__pool_size(pool) - 1; /* the launching thread takes a core */
    weft__pool_parallel(pool, tiles, helpers, records_tile, &j);
  } else if (tiles == 1) {
    records_tile(&j, 0);
  }
  for (uint32_t t = 0; t < tiles; t++) {
    *gpu |= j.gpu[t];
    *room += j.room[t];
  }
  if (tiles > 1) {
    weft__free(j.gpu);
    weft__free(j.room);
  }
  return WEFT_OK;
}

int weft__plan_build(weft_graph *g) {
  if (g->plan != NULL && g->plan->version == g->version) return WEFT_OK;
  int rc = weft__graph_analyse(g);
  if (rc != WEFT_OK) return rc;
  weft_runtime *rt = g->rt;
  uint32_t n = (uint32_t)g->nodes.len;
  weft__vec extra; /* weft__edge: the claims' edges */
  weft__vec_init(&extra, sizeof(weft__edge));
  int hooked = 0; /* backends whose plan hook ran, for the cleanup */
  weft__plan *p = weft__calloc(1, sizeof *p);
  if (p == NULL) return weft__oom("a plan");
  p->graph = g;
  p->n = n;
  p->mem = g->mem;
  p->x = weft__mem_get(p->mem, X_BYTES(n));
  p->order = weft__mem_get(p->mem, U32_BYTES(n));
  p->roots = weft__mem_get(p->mem, U32_BYTES(n));
  p->indeg = weft__mem_get(p->mem, U32_BYTES(n));
  if (!p->x || !p->order || !p->roots || !p->indeg) {
    rc = weft__oom("a plan");
    goto fail;
  }
  if ((rc = weft__exec_init(p)) != WEFT_OK) goto fail;
  weft__graph_order(g, p->order);
  weft_node **nodes = g->nodes.data;
  size_t room = 0;
  int gpu = 0;
  if ((rc = node_records(p, nodes, &gpu, &room)) != WEFT_OK) goto fail;
  if (room > 0) {
    if ((p->args_room = weft__mem_get(p->mem, room * sizeof(void *))) == NULL) {
      rc = weft__oom("a plan");
      goto fail;
    }
    p->nargs_room = room;
    for (uint32_t i = 0, at = 0; i < n; i++)
      if (nodes[i]->nargs > WEFT__CTX_INLINE) {
        p->x[i].args_room = p->args_room + at;
        at += nodes[i]->nargs;
      }
  }
  if ((rc = plan_gpus(p, gpu, &extra)) != WEFT_OK || (rc = build_edges(p, &extra)) != WEFT_OK) goto fail;
  if (p->gpu.node != NULL && (rc = weft__plan_batches(p)) != WEFT_OK) goto fail;
  weft__vec_fini(&extra);
  for (int b = 0; b < rt->nbackends; b++) {
    hooked = b + 1;
    if (rt->backends[b].vt->plan != NULL && (rc = rt->backends[b].vt->plan(&rt->backends[b], p)) != WEFT_OK)
      goto fail;
  }
  weft__plan_free(rt, g->plan);
  p->version = g->version;
  g->plan = p;
  return WEFT_OK;
fail:
  /* plan_free undoes whatever part of `plan` a backend got through (it must accept a plan it
   * attached nothing to). */
  weft__vec_fini(&extra);
  plan_free(rt, p, hooked);
  return rc;
}
