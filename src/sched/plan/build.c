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

/* Node tiles: the records, and in a large graph the CSR's node steps (plan_job). */
enum { NODE_TILE = 256 };

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

/* Sets the counters of nodes [lo, hi) for the plan's first run (each node sets its own back as
 * it is taken afterwards: dispatch.c). */
static void arm(weft__plan *p, uint32_t lo, uint32_t hi) {
  for (uint32_t i = lo; i < hi; i++) {
    atomic_store_explicit(&p->x[i].pending, p->x[i].pred_end - p->x[i].pred_begin, memory_order_relaxed);
    atomic_store_explicit(&p->exec->poison[i], 0, memory_order_relaxed);
  }
}

/* ---- a large graph's plan, with the pool's idle workers -------------------------------------
 *
 * Before a first launch's first node the launching thread builds the plan while the pool waits.
 * A large graph's plan is built in node tiles that the idle
 * workers share (weft__pool_parallel), in three passes:
 *
 *   records  each node's record (its node read once: in a large graph built a while ago, each a
 *            miss), its timing record cleared, and — when the CSR is built here too — the
 *            offsets of its successors within its tile, from the counts the analysis kept
 *            (dep_analysis.c), with the tile's total;
 *   (serial) the tiles' totals scanned into their first offsets (a few hundred numbers);
 *   CSR      each node's lists: the analysis appends a node's edges with the node, so the
 *            graph's edges are sorted by target and a node's predecessors are the run of edges
 *            into it, in place; each of them gets the node as a successor through the
 *            predecessor's fill cursor (an atomic add: two tiles may fill one list); the
 *            node's counter is armed, and a root is listed at its tile's place;
 *   sort     each node's successors sorted by target, which is the order the serial fill gives
 *            them (edges in order of target, one a pair): the same plan whoever built it; then
 *            their early marks. The roots are packed in order at the end (serial).
 *
 * At the first launch of a Task Bench graph of 8000 tasks on 16 cores (the H200 host) the six
 * passes of the build before (a count of the successors with atomics, and tiles of 1024 and
 * 2048 edges), the launch's reset of the counters and the timing records' clearing took
 * 0.3-0.42 ms, each pass 20-80 us; these three, in tiles of 256 nodes, 0.24-0.37 ms. Of that
 * the records pass is 70-150 us, mostly the workers' wake-up (their own time on it is 40-50 ns
 * a node; a broadcast from the launching thread shortened the pass to 55 us but took as long
 * itself, and a tree of wake-ups, 2 or 3 a worker, did nothing). A GPU's plan (claims' edges)
 * takes the serial build, and so does a pool of fewer than 4 workers: on 2 cores the tiles'
 * passes cost more than the second thread saves (dev, 100 000-node chain: 30 ns a node in
 * tiles, 22-24 serial). */
enum { PAR_EDGES_MIN = 4096, PAR_WORKERS_MIN = 4 }; /* its extra passes pay from 4 workers */

typedef struct plan_job {
  weft__plan *p;
  weft_node **nodes;
  uint8_t *gpu;  /* per tile: a GPU node among its nodes */
  size_t *room;  /* per tile: the argument slots its nodes need beyond the inline ones */
  /* The CSR's, when it is built in node tiles (dn not NULL): */
  const weft__dep_node *dn; /* per node: its successors, counted by the analysis */
  const weft__edge *e;      /* the graph's edges, sorted by target */
  size_t m;
  atomic_uint *cur;         /* per node: its next successor's offset within its tile's */
  uint32_t *base;           /* per tile: its successors, then the offset of its first */
  uint32_t *roots;          /* per tile: its roots, listed from roots[its first node] */
} plan_job;

static void job_free(plan_job *j) {
  weft__free(j->gpu);
  weft__free(j->room);
  weft__free(j->cur);
  weft__free(j->base);
  weft__free(j->roots);
  memset(j, 0, sizeof *j);
}

/* Tile t's records: the one pass over its nodes; what the plan needs of a node is read here,
 * and its record written whole. Each record is its node's alone, so who writes it does not
 * matter. */
static void records_tile(void *arg, uint32_t t) {
  plan_job *j = arg;
  weft__plan *p = j->p;
  weft_runtime *rt = p->graph->rt;
  uint32_t lo = t * NODE_TILE, hi = p->n - lo < NODE_TILE ? p->n : lo + NODE_TILE;
  size_t room = 0;
  int gpu = 0;
  uint32_t succ = 0; /* the tile's successors so far */
  for (uint32_t i = lo; i < hi; i++) {
    const weft_node *nd = j->nodes[i];
    if (i + WEFT__AHEAD < hi) WEFT__PREFETCH(j->nodes[i + WEFT__AHEAD]);
    p->x[i] = (weft__xnode){.node = j->nodes[i], .plan = p, .id = i, .backend = weft__node_backend(rt, nd)};
    gpu |= nd->device.kind == WEFT_DEVICE_CUDA;
    if (nd->nargs > WEFT__CTX_INLINE) room += nd->nargs;
    if (j->dn != NULL) {
      atomic_init(&j->cur[i], succ);
      p->x[i].succ_begin = succ; /* the tile's offset is added by csr_tile */
      succ += j->dn[i].nsucc;
    }
  }
  weft__timing_plan_clear(p, lo, hi);
  j->gpu[t] = (uint8_t)gpu;
  j->room[t] = room;
  if (j->dn != NULL) j->base[t] = succ;
}

/* First edge index whose target is >= node. */
static size_t first_into(const plan_job *j, uint32_t node) {
  size_t lo = 0, hi = j->m;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (j->e[mid].to < node) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void csr_tile(void *arg, uint32_t t) {
  plan_job *j = arg;
  weft__plan *p = j->p;
  uint32_t lo = t * NODE_TILE, hi = p->n - lo < NODE_TILE ? p->n : lo + NODE_TILE, roots = 0;
  size_t k = first_into(j, lo);
  for (uint32_t i = lo; i < hi; i++) {
    weft__xnode *x = &p->x[i];
    x->succ_begin += j->base[t];
    x->succ_end = x->succ_begin + j->dn[i].nsucc;
    x->pred_begin = (uint32_t)k;
    for (; k < j->m && j->e[k].to == i; k++) {
      uint32_t from = j->e[k].from;
      p->pred[k] = from;
      p->succ[j->base[from / NODE_TILE] + atomic_fetch_add_explicit(&j->cur[from], 1, memory_order_relaxed)] = i;
    }
    x->pred_end = (uint32_t)k;
    if (x->pred_end == x->pred_begin) p->roots[lo + roots++] = i;
  }
  arm(p, lo, hi);
  j->roots[t] = roots;
}

/* Each node's successors in order of target (insertion sort for the usual few; a node that
 * many read, a constant every node of a large graph reads, by qsort), then their early marks. */
static void sort_tile(void *arg, uint32_t t) {
  plan_job *j = arg;
  weft__plan *p = j->p;
  uint32_t lo = t * NODE_TILE, hi = p->n - lo < NODE_TILE ? p->n : lo + NODE_TILE;
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

/* The CSR in node tiles (the records pass counted each tile's successors); WEFT_EAGAIN, with
 * nothing written, when the analysis's counts do not add up to the edges (never seen: the
 * serial build then takes it). */
static int build_edges_parallel(weft__plan *p, plan_job *j, uint32_t tiles) {
  weft__pool *pool = p->graph->rt->pool;
  uint32_t off = 0;
  for (uint32_t t = 0; t < tiles; t++) {
    uint32_t c = j->base[t];
    j->base[t] = off;
    off += c;
  }
  if (off != j->m) return WEFT_EAGAIN;
  uint32_t helpers = (uint32_t)weft__pool_size(pool) - 1; /* the launching thread takes a core */
  weft__pool_parallel(pool, tiles, helpers, csr_tile, j);
  weft__pool_parallel(pool, tiles, helpers, sort_tile, j);
  for (uint32_t t = 0; t < tiles; t++) {
    memmove(p->roots + p->nroots, p->roots + (size_t)t * NODE_TILE, j->roots[t] * sizeof *p->roots);
    p->nroots += j->roots[t];
  }
  return WEFT_OK;
}

static int build_edges(weft__plan *p, const weft__vec *extra, plan_job *j, uint32_t tiles) {
  weft_graph *g = p->graph;
  size_t m = g->edges.len + extra->len;
  p->m = m;
  p->succ = weft__mem_get(p->mem, U32_BYTES(m));
  p->succ_early = weft__mem_get(p->mem, U8_BYTES(m));
  p->pred = weft__mem_get(p->mem, U32_BYTES(m));
  if (!p->succ || !p->succ_early || !p->pred) return weft__oom("a plan");
  if (j->dn != NULL && extra->len == 0 && build_edges_parallel(p, j, tiles) == WEFT_OK) return WEFT_OK;
  /* Counts, then prefix sums; x[i].succ_end and pred_end serve as fill cursors. */
  count_edges(p, g->edges.data, g->edges.len);
  count_edges(p, extra->data, extra->len);
  uint32_t so = 0, po = 0;
  for (uint32_t i = 0; i < p->n; i++) {
    weft__xnode *x = &p->x[i];
    uint32_t sc = x->succ_end, pc = x->pred_end;
    x->succ_begin = x->succ_end = so;
    x->pred_begin = x->pred_end = po;
    so += sc;
    po += pc;
  }
  fill_edges(p, g->edges.data, g->edges.len);
  fill_edges(p, extra->data, extra->len);
  for (uint32_t i = 0; i < p->n; i++)
    if (p->x[i].pred_end == p->x[i].pred_begin) p->roots[p->nroots++] = i;
  arm(p, 0, p->n);
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

/* Writes every node's record (in tiles that the pool's idle workers share, for a large graph:
 * at the first launch of a 32 000-node graph the records were about a third of the launch, made
 * by the launching thread alone while the workers waited for the first node) and says whether
 * any runs on a GPU and how many argument slots the nodes need beyond the inline ones. With
 * the CSR built in tiles too (j->dn), each tile also lays out its nodes' successor lists. */
static void node_records(plan_job *j, uint32_t tiles, int *gpu, size_t *room) {
  weft__pool *pool = j->p->graph->rt->pool;
  uint32_t helpers = (uint32_t)weft__pool_size(pool) - 1; /* the launching thread takes a core */
  weft__pool_parallel(pool, tiles, helpers, records_tile, j);
  for (uint32_t t = 0; t < tiles; t++) {
    *gpu |= j->gpu[t];
    *room += j->room[t];
  }
}

/* The job's arrays; j->dn is set (the CSR to be built in tiles) for a graph large enough, on a
 * pool wide enough, whose analysis counted each node's successors. */
static int job_init(plan_job *j, weft__plan *p, uint32_t tiles) {
  weft_graph *g = p->graph;
  memset(j, 0, sizeof *j);
  j->p = p;
  j->nodes = g->nodes.data;
  j->gpu = weft__malloc(tiles ? tiles : 1);
  j->room = weft__malloc((tiles ? tiles : 1) * sizeof *j->room);
  if (j->gpu == NULL || j->room == NULL) return weft__oom("a plan");
  size_t m = g->edges.len;
  if (tiles > 1 && m >= PAR_EDGES_MIN && m < UINT32_MAX && g->dep_node.len == p->n &&
      weft__pool_size(g->rt->pool) >= PAR_WORKERS_MIN) {
    j->e = g->edges.data;
    j->m = m;
    j->cur = weft__malloc((size_t)p->n * sizeof *j->cur);
    j->base = weft__malloc(tiles * sizeof *j->base);
    j->roots = weft__malloc(tiles * sizeof *j->roots);
    if (j->cur == NULL || j->base == NULL || j->roots == NULL) return weft__oom("a plan");
    j->dn = g->dep_node.data;
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
  plan_job job;
  memset(&job, 0, sizeof job);
  int hooked = 0; /* backends whose plan hook ran, for the cleanup */
  weft__plan *p = weft__calloc(1, sizeof *p);
  if (p == NULL) return weft__oom("a plan");
  p->graph = g;
  p->n = n;
  p->mem = g->mem;
  p->x = weft__mem_get(p->mem, X_BYTES(n));
  p->order = weft__mem_get(p->mem, U32_BYTES(n));
  p->roots = weft__mem_get(p->mem, U32_BYTES(n));
  if (!p->x || !p->order || !p->roots) {
    rc = weft__oom("a plan");
    goto fail;
  }
  if ((rc = weft__exec_init(p)) != WEFT_OK) goto fail;
  weft__graph_order(g, p->order);
  weft_node **nodes = g->nodes.data;
  size_t room = 0;
  int gpu = 0;
  uint32_t tiles = (n + NODE_TILE - 1) / NODE_TILE;
  if ((rc = job_init(&job, p, tiles)) != WEFT_OK) goto fail;
  node_records(&job, tiles, &gpu, &room);
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
  if ((rc = plan_gpus(p, gpu, &extra)) != WEFT_OK || (rc = build_edges(p, &extra, &job, tiles)) != WEFT_OK)
    goto fail;
  job_free(&job);
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
  job_free(&job);
  plan_free(rt, p, hooked);
  return rc;
}
