/* cuda_plan.c — the CUDA part of a plan: which stream each node runs on, which events it
 * records and waits for, and the memory plan of temporaries.
 *
 * Streams (computed in a topological order, over the graph's data edges):
 *   - copies go to their device's copy streams: host to device on the destination's H2D
 *     stream, device to host on the source's D2H stream, device to device on the source's peer
 *     stream (or, between GPUs without peer access, staged through pinned host memory: the
 *     source's D2H stream, then the destination's H2D stream);
 *   - a compute node continues the stream of a predecessor that chose it as its heir: each
 *     node names as heir the successor on its device with the longest path below it (by a
 *     cost estimate: 2mnk for products, the element count otherwise), so the critical chain
 *     stays on one stream and side branches (a norm that is logged, say) fork off;
 *   - a compute node with no stream to continue goes to the device's main stream 0 when it
 *     fills the GPU on its own (a product with at least one 128x128 output tile per SM, or an
 *     elementwise op over 2048 elements per SM): independent large products run one after
 *     the other, in program order, which is as fast as running them at once and lets each
 *     result's copy start as soon as it is done; a small node goes round-robin to the compute
 *     streams, where several run at once.
 * Events: a node records its event only when a successor (or a later free of one of its
 * temporaries) is on another stream, or when a CPU node waits for it (CU_NOTIFY); a node waits
 * (cudaStreamWaitEvent) only for its predecessors on other streams.
 *
 * Memory plan. A temporary (analysis: an op's result whose final value a later node reads and
 * that is not kept) whose every accessor is a CUDA node on its device gets no storage at
 * materialisation: its first writer allocates it from the device pool (stream-ordered) and the
 * last reader of its final value frees it after its work, once the other readers of that value,
 * on other streams, are done. That alone does not bound memory, because the host enqueues far
 * ahead of the device: fifty products would allocate fifty buffers before the first copy is
 * done. So the plan throttles: walking the nodes in order, a node that allocates a temporary
 * waits for the frees of older temporaries on its device, keeping unclaimed only the most
 * recent frees that add up to a budget (max(2 x the new buffer, 64 MiB)). Each wait is an
 * edge from the freeing node to the allocating one (plan_edges), pointing forward in the
 * walk's topological order, so no cycle can arise; the pool then reuses the freed buffer
 * because the allocating stream waits on an event recorded after the free. The reference
 * graph 50 x (y = x.x; copy y to the host) runs in x plus three buffers, and the products
 * never wait (a copy takes half a product's time). */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

#define NONE UINT32_MAX

typedef struct pair {
  uint32_t owner, value;
} pair;

/* Scratch of one plan build. */
typedef struct build {
  cu_state *st;
  cu_plan *cp;
  weft__plan *p;
  weft_graph *g;
  uint32_t n, nt;
  uint32_t *soff, *succ, *poff, *pred; /* data edges, CSR */
  uint32_t *pos;
  double *cost, *height;
  uint32_t *heir;
  uint32_t *first, *last_final; /* per tensor: allocating node, freeing node */
  weft__vec waits, fwaits, allocs, frees; /* pair */
} build;

static int is_cuda(const build *bd, uint32_t i) { return bd->cp->x[i].dev >= 0; }

static int push_pair(weft__vec *v, uint32_t owner, uint32_t value) {
  pair pr = {owner, value};
  return weft__vec_push(v, &pr);
}

/* ---- data edges and a topological order ------------------------------------------------- */

static int build_csr(build *bd) {
  weft__edge *e = bd->g->edges.data;
  size_t m = bd->g->edges.len;
  uint32_t n = bd->n;
  bd->soff = weft__calloc((size_t)n + 1, sizeof(uint32_t));
  bd->poff = weft__calloc((size_t)n + 1, sizeof(uint32_t));
  bd->succ = weft__malloc((m ? m : 1) * sizeof(uint32_t));
  bd->pred = weft__malloc((m ? m : 1) * sizeof(uint32_t));
  uint32_t *cur = weft__malloc(((size_t)n + 1) * sizeof(uint32_t));
  if (!bd->soff || !bd->poff || !bd->succ || !bd->pred || !cur) {
    weft__free(cur);
    return weft__oom("the CUDA plan");
  }
  for (size_t k = 0; k < m; k++) {
    bd->soff[e[k].from + 1]++;
    bd->poff[e[k].to + 1]++;
  }
  for (uint32_t i = 0; i < n; i++) {
    bd->soff[i + 1] += bd->soff[i];
    bd->poff[i + 1] += bd->poff[i];
  }
  memcpy(cur, bd->soff, ((size_t)n + 1) * sizeof(uint32_t));
  for (size_t k = 0; k < m; k++) bd->succ[cur[e[k].from]++] = e[k].to;
  memcpy(cur, bd->poff, ((size_t)n + 1) * sizeof(uint32_t));
  for (size_t k = 0; k < m; k++) bd->pred[cur[e[k].to]++] = e[k].from;
  weft__free(cur);
  return WEFT_OK;
}

/* Insertion order is topological unless an explicit edge points backward; then Kahn's
 * algorithm (the analysis has already rejected cycles). */
static int topo_order(build *bd) {
  uint32_t n = bd->n, *order = bd->cp->order;
  int backward = 0;
  weft__edge *e = bd->g->edges.data;
  for (size_t k = 0; k < bd->g->edges.len && !backward; k++) backward = e[k].from > e[k].to;
  if (!backward) {
    for (uint32_t i = 0; i < n; i++) order[i] = i;
  } else {
    uint32_t *indeg = weft__calloc(n ? n : 1, sizeof *indeg);
    if (indeg == NULL) return weft__oom("the CUDA plan");
    for (uint32_t i = 0; i < n; i++) indeg[i] = bd->poff[i + 1] - bd->poff[i];
    uint32_t qt = 0;
    for (uint32_t i = 0; i < n; i++)
      if (indeg[i] == 0) order[qt++] = i;
    for (uint32_t qh = 0; qh < qt; qh++)
      for (uint32_t k = bd->soff[order[qh]]; k < bd->soff[order[qh] + 1]; k++)
        if (--indeg[bd->succ[k]] == 0) order[qt++] = bd->succ[k];
    weft__free(indeg);
    WEFT_ASSERT(qt == n);
  }
  for (uint32_t k = 0; k < n; k++) bd->pos[order[k]] = k;
  return WEFT_OK;
}

/* ---- lanes -------------------------------------------------------------------------------- */

static double node_cost(const weft_node *nd) {
  if (nd->nargs == 0) return 1;
  const weft_tensor *a = nd->args[0].t;
  switch (nd->kind) {
    case WEFT__OP_MM:
      return 2.0 * (double)a->shape[0] * (double)a->shape[1] * (double)nd->args[1].t->shape[1];
    case WEFT__OP_LINEAR:
      return 2.0 * (double)a->shape[0] * (double)a->shape[1] * (double)nd->args[1].t->shape[0];
    case WEFT__OP_USER:
      if (nd->user_op->desc.cost != NULL) {
        const weft_tensor *args[WEFT_MAX_ARGS];
        for (int i = 0; i < nd->nargs; i++) args[i] = nd->args[i].t;
        return nd->user_op->desc.cost(args, nd->nargs, nd->params, nd->user_op->desc.user);
      }
      return (double)a->numel;
    default:
      return (double)a->numel + 1;
  }
}

/* True when the node keeps every SM busy on its own. */
static int fills_device(const weft_node *nd, const cu_device *d) {
  if (nd->nargs == 0) return 0;
  const weft_tensor *a = nd->args[0].t, *out = nd->args[nd->nargs - 1].t;
  switch (nd->kind) {
    case WEFT__OP_MM:
    case WEFT__OP_LINEAR: {
      int64_t tiles = ((out->shape[0] + 127) / 128) * ((out->shape[1] + 127) / 128);
      return tiles >= d->sms;
    }
    case WEFT__OP_USER:
      return 0;
    default:
      return a->numel >= (int64_t)d->sms * 2048;
  }
}

/* Sets dev, start_dev, the copy lanes and the CU_BIG / CU_STAGED flags of CUDA node i. */
static void classify(build *bd, uint32_t i) {
  cu_state *st = bd->st;
  cu_node *x = &bd->cp->x[i];
  const weft_node *nd = bd->p->x[i].node;
  int dev = nd->device.index;
  x->dev = x->start_dev = (int16_t)dev;
  x->why = CU_WHY_CHAIN;
  if (nd->kind == WEFT__OP_COPY) {
    weft_device s = nd->args[0].t->device, t = nd->args[1].t->device;
    if (s.kind == WEFT_DEVICE_CPU) {
      x->dev = x->start_dev = (int16_t)t.index;
      x->stream = x->start_stream = (uint8_t)st->dev[t.index].h2d;
      x->why = CU_WHY_H2D;
      return;
    }
    if (t.kind == WEFT_DEVICE_CPU) {
      x->stream = x->start_stream = (uint8_t)st->dev[s.index].d2h;
      x->why = CU_WHY_D2H;
      return;
    }
    if (s.index != t.index) {
      if (st->dev[s.index].peer_ok[t.index]) {
        x->stream = x->start_stream = (uint8_t)st->dev[s.index].peer;
        x->why = CU_WHY_PEER;
      } else {
        x->flags |= CU_STAGED;
        x->start_dev = (int16_t)s.index;
        x->start_stream = (uint8_t)st->dev[s.index].d2h;
        x->dev = (int16_t)t.index;
        x->stream = (uint8_t)st->dev[t.index].h2d;
        x->why = CU_WHY_STAGED;
      }
      return;
    }
    x->why = CU_WHY_LOCAL_COPY;
  }
  if (fills_device(nd, &st->dev[dev])) x->flags |= CU_BIG;
}

/* A node on a compute stream (kernels, user ops, copies within one device). */
static int is_compute(const build *bd, uint32_t i) {
  const cu_node *x = &bd->cp->x[i];
  return x->dev >= 0 && x->why != CU_WHY_H2D && x->why != CU_WHY_D2H && x->why != CU_WHY_PEER &&
         x->why != CU_WHY_STAGED;
}

/* Heights (longest cost path to a sink) and each compute node's heir. */
static void choose_heirs(build *bd) {
  const uint32_t *order = bd->cp->order;
  for (uint32_t k = bd->n; k-- > 0;) {
    uint32_t i = order[k];
    double best = 0;
    uint32_t heir = NONE;
    for (uint32_t e = bd->soff[i]; e < bd->soff[i + 1]; e++) {
      uint32_t s = bd->succ[e];
      if (bd->height[s] > best) best = bd->height[s];
      if (!is_compute(bd, i) || !is_compute(bd, s) || bd->cp->x[s].dev != bd->cp->x[i].dev) continue;
      if (heir == NONE || bd->height[s] > bd->height[heir] ||
          (bd->height[s] == bd->height[heir] && bd->pos[s] < bd->pos[heir]))
        heir = s;
    }
    bd->height[i] = bd->cost[i] + best;
    bd->heir[i] = heir;
  }
}

static void assign_streams(build *bd) {
  cu_state *st = bd->st;
  uint32_t tail[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3];
  int rr[CU_MAX_DEVICES];
  for (int d = 0; d < CU_MAX_DEVICES; d++) {
    rr[d] = 0;
    for (int s = 0; s < CU_MAX_COMPUTE + 3; s++) tail[d][s] = NONE;
  }
  for (uint32_t k = 0; k < bd->n; k++) {
    uint32_t i = bd->cp->order[k];
    cu_node *x = &bd->cp->x[i];
    if (x->dev < 0) continue;
    if (is_compute(bd, i)) {
      cu_device *d = &st->dev[x->dev];
      uint32_t cont = NONE;
      for (uint32_t e = bd->poff[i]; e < bd->poff[i + 1] && cont == NONE; e++) {
        uint32_t pr = bd->pred[e];
        if (bd->heir[pr] == i && tail[x->dev][bd->cp->x[pr].stream] == pr) cont = pr;
      }
      int local_copy = x->why == CU_WHY_LOCAL_COPY;
      if (cont != NONE) {
        x->stream = bd->cp->x[cont].stream;
        x->heir_of = cont;
        x->why = CU_WHY_CHAIN;
      } else if (x->flags & CU_BIG) {
        x->stream = 0;
        x->why = CU_WHY_BIG;
      } else {
        x->stream = (uint8_t)(rr[x->dev]++ % d->ncompute);
        x->why = CU_WHY_SPREAD;
      }
      if (local_copy && cont == NONE) x->why = CU_WHY_LOCAL_COPY;
      x->start_stream = x->stream;
    }
    tail[x->dev][x->stream] = i;
    bd->cp->used[x->dev] |= (uint16_t)(1u << x->stream);
    bd->cp->used[x->start_dev] |= (uint16_t)(1u << x->start_stream);
  }
}

/* ---- memory plan ------------------------------------------------------------------------ */

/* Marks the temporaries this plan manages and their allocating and freeing nodes; adds the
 * free-order edges (other readers of the final value -> the freeing node). */
static int plan_temporaries(build *bd, weft__vec *extra) {
  weft_graph *g = bd->g;
  weft_tensor **ts = g->tensors.data;
  weft_node **nodes = g->nodes.data;
  cu_plan *cp = bd->cp;
  uint32_t nt = bd->nt;
  uint32_t *last_write = weft__malloc((nt ? nt : 1) * sizeof(uint32_t));
  uint32_t *stamp = weft__malloc((nt ? nt : 1) * sizeof(uint32_t));
  uint8_t *first_reads = weft__calloc(nt ? nt : 1, 1);
  if (!last_write || !stamp || !first_reads) {
    weft__free(last_write);
    weft__free(stamp);
    weft__free(first_reads);
    return weft__oom("the CUDA memory plan");
  }
  for (uint32_t t = 0; t < nt; t++) {
    const weft_tensor *tt = ts[t];
    cp->temp[t] = tt->device.kind == WEFT_DEVICE_CUDA && tt->device.index < bd->st->ndev &&
                  (tt->flags & WEFT__T_TEMP) && tt->storage_kind == WEFT__S_NONE && tt->bytes > 0;
    last_write[t] = bd->first[t] = bd->last_final[t] = stamp[t] = NONE;
  }
  for (uint32_t i = 0; i < bd->n; i++) {
    const weft_node *nd = nodes[i];
    const cu_node *x = &cp->x[i];
    for (int a = 0; a < nd->nargs; a++) {
      uint32_t t = nd->args[a].t->id;
      if (!cp->temp[t]) continue;
      /* Every accessor must run on the tensor's device, on one device. */
      if (x->dev < 0 || x->dev != nd->args[a].t->device.index || x->start_dev != x->dev ||
          x->why == CU_WHY_PEER) {
        cp->temp[t] = 0;
        continue;
      }
      if (nd->args[a].mode & WEFT_WRITE) last_write[t] = i;
      if (bd->first[t] == NONE || bd->pos[i] < bd->pos[bd->first[t]]) {
        bd->first[t] = i;
        first_reads[t] = 0;
      }
      if (bd->first[t] == i && (nd->args[a].mode & WEFT_READ)) first_reads[t] = 1;
    }
  }
  /* Readers of the final value: nodes after the last write that read the tensor. */
  for (uint32_t i = 0; i < bd->n; i++) {
    const weft_node *nd = nodes[i];
    for (int a = 0; a < nd->nargs; a++) {
      uint32_t t = nd->args[a].t->id;
      if (!cp->temp[t] || !(nd->args[a].mode & WEFT_READ) || last_write[t] == NONE || i <= last_write[t])
        continue;
      if (bd->last_final[t] == NONE || bd->pos[i] > bd->pos[bd->last_final[t]]) bd->last_final[t] = i;
    }
  }
  int rc = WEFT_OK;
  for (uint32_t t = 0; t < nt; t++)
    if (cp->temp[t] && (first_reads[t] || bd->last_final[t] == NONE || bd->first[t] == NONE)) cp->temp[t] = 0;
  /* The other final readers must be done before the free: order them before the freeing
   * node (issue order) and make it wait for their events before freeing (fwaits). */
  for (uint32_t i = 0; i < bd->n && rc == WEFT_OK; i++) {
    const weft_node *nd = nodes[i];
    for (int a = 0; a < nd->nargs && rc == WEFT_OK; a++) {
      uint32_t t = nd->args[a].t->id, f = bd->last_final[t];
      if (!cp->temp[t] || !(nd->args[a].mode & WEFT_READ) || i <= last_write[t] || i == f || stamp[t] == i)
        continue;
      stamp[t] = i;
      weft__edge e = {i, f, NONE, WEFT__HAZARD_RESOURCE};
      if ((rc = weft__vec_push(extra, &e)) == WEFT_OK) rc = push_pair(&bd->fwaits, f, i);
    }
  }
  for (uint32_t t = 0; t < nt && rc == WEFT_OK; t++)
    if (cp->temp[t] && (rc = push_pair(&bd->allocs, bd->first[t], t)) == WEFT_OK)
      rc = push_pair(&bd->frees, bd->last_final[t], t);
  weft__free(last_write);
  weft__free(stamp);
  weft__free(first_reads);
  return rc;
}

typedef struct pending_free {
  uint32_t node;
  size_t bytes;
} pending_free;

static int by_owner(const void *a, const void *b) {
  const pair *x = a, *y = b;
  return x->owner < y->owner ? -1 : x->owner > y->owner;
}

/* The throttle described at the top: allocation waits for old frees on the same device. */
static int plan_window(build *bd, weft__vec *extra) {
  weft_tensor **ts = bd->g->tensors.data;
  cu_plan *cp = bd->cp;
  /* allocs and frees sorted by node, to walk them with the order. */
  qsort(bd->allocs.data, bd->allocs.len, sizeof(pair), by_owner);
  qsort(bd->frees.data, bd->frees.len, sizeof(pair), by_owner);
  const pair *al = bd->allocs.data, *fr = bd->frees.data;
  uint32_t *aoff = weft__calloc((size_t)bd->n + 1, sizeof(uint32_t));
  uint32_t *foff = weft__calloc((size_t)bd->n + 1, sizeof(uint32_t));
  pending_free *fifo = weft__malloc((bd->frees.len ? bd->frees.len : 1) * sizeof *fifo);
  if (!aoff || !foff || !fifo) {
    weft__free(aoff);
    weft__free(foff);
    weft__free(fifo);
    return weft__oom("the CUDA memory plan");
  }
  for (size_t k = 0; k < bd->allocs.len; k++) aoff[al[k].owner + 1]++;
  for (size_t k = 0; k < bd->frees.len; k++) foff[fr[k].owner + 1]++;
  for (uint32_t i = 0; i < bd->n; i++) {
    aoff[i + 1] += aoff[i];
    foff[i + 1] += foff[i];
  }
  int rc = WEFT_OK;
  for (int dev = 0; dev < bd->st->ndev && rc == WEFT_OK; dev++) {
    size_t head = 0, tailq = 0, sum = 0;
    for (uint32_t k = 0; k < bd->n && rc == WEFT_OK; k++) {
      uint32_t i = cp->order[k];
      if (cp->x[i].dev != dev) continue;
      uint32_t last_claimed = NONE;
      for (uint32_t a = aoff[i]; a < aoff[i + 1] && rc == WEFT_OK; a++) {
        size_t bytes = ts[al[a].value]->bytes;
        size_t budget = (size_t)bd->st->window_count * bytes;
        if (budget < bd->st->window_bytes_min) budget = bd->st->window_bytes_min;
        while (head < tailq && sum > budget && rc == WEFT_OK) {
          uint32_t f = fifo[head].node;
          sum -= fifo[head++].bytes;
          if (f == i || f == last_claimed) continue;
          last_claimed = f;
          weft__edge e = {f, i, NONE, WEFT__HAZARD_RESOURCE};
          if ((rc = weft__vec_push(extra, &e)) == WEFT_OK) rc = push_pair(&bd->waits, i, f);
        }
      }
      for (uint32_t f = foff[i]; f < foff[i + 1]; f++) {
        fifo[tailq++] = (pending_free){i, ts[fr[f].value]->bytes};
        sum += ts[fr[f].value]->bytes;
      }
    }
  }
  weft__free(aoff);
  weft__free(foff);
  weft__free(fifo);
  return rc;
}

/* ---- waits and events ------------------------------------------------------------------- */

static int same_lane(const cu_node *a, int dev, int stream) { return a->dev == dev && a->stream == stream; }

static int plan_waits(build *bd) {
  cu_plan *cp = bd->cp;
  int rc = WEFT_OK;
  for (uint32_t i = 0; i < bd->n && rc == WEFT_OK; i++) {
    cu_node *x = &cp->x[i];
    if (x->dev < 0) continue;
    for (uint32_t e = bd->poff[i]; e < bd->poff[i + 1] && rc == WEFT_OK; e++) {
      uint32_t pr = bd->pred[e];
      if (!is_cuda(bd, pr) || same_lane(&cp->x[pr], x->start_dev, x->start_stream)) continue;
      rc = push_pair(&bd->waits, i, pr);
    }
    for (uint32_t e = bd->soff[i]; e < bd->soff[i + 1]; e++)
      if (!is_cuda(bd, bd->succ[e])) x->flags |= CU_NOTIFY | CU_RECORD;
  }
  return rc;
}

/* Sorts `v` by owner, drops repeated (owner, value) pairs and those on the owner's own lane
 * (for fwaits: the lane it frees on), appends the values to the plan's lists and sets the
 * owners' ranges through `field` (offset of the begin index; the end follows it). Marks the
 * waited-for nodes CU_RECORD. */
static int pack(build *bd, weft__vec *v, size_t field, int waits, uint32_t **lists, size_t *len, size_t *cap) {
  cu_plan *cp = bd->cp;
  pair *pr = v->data;
  qsort(pr, v->len, sizeof(pair), by_owner);
  size_t k = 0;
  while (k < v->len) {
    uint32_t owner = pr[k].owner;
    uint32_t *range = (uint32_t *)((char *)&cp->x[owner] + field);
    range[0] = (uint32_t)*len;
    for (; k < v->len && pr[k].owner == owner; k++) {
      uint32_t val = pr[k].value;
      int dup = 0;
      for (uint32_t j = range[0]; j < *len && !dup; j++) dup = (*lists)[j] == val;
      if (dup) continue;
      if (waits) {
        /* A wait at the start is on the start lane; a wait before the frees on the end lane. */
        const cu_node *o = &cp->x[owner], *w = &cp->x[val];
        int fw = field == offsetof(cu_node, fwait_b);
        if (same_lane(w, fw ? o->dev : o->start_dev, fw ? o->stream : o->start_stream)) continue;
        cp->x[val].flags |= CU_RECORD;
      }
      if (*len == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        uint32_t *nl = weft__realloc(*lists, nc * sizeof(uint32_t));
        if (nl == NULL) return weft__oom("the CUDA plan");
        *lists = nl;
        *cap = nc;
      }
      (*lists)[(*len)++] = val;
    }
    range[1] = (uint32_t)*len;
  }
  return WEFT_OK;
}

static void build_free(build *bd) {
  weft__free(bd->soff);
  weft__free(bd->succ);
  weft__free(bd->poff);
  weft__free(bd->pred);
  weft__free(bd->pos);
  weft__free(bd->cost);
  weft__free(bd->height);
  weft__free(bd->heir);
  weft__free(bd->first);
  weft__free(bd->last_final);
  weft__vec_fini(&bd->waits);
  weft__vec_fini(&bd->fwaits);
  weft__vec_fini(&bd->allocs);
  weft__vec_fini(&bd->frees);
}

int weft__cu_plan_edges(weft__backend *b, weft__plan *p, weft__vec *extra) {
  cu_state *st = b->state;
  uint32_t n = p->n, mine = 0;
  for (uint32_t i = 0; i < n; i++) mine += p->x[i].backend == b;
  if (mine == 0) return WEFT_OK;
  weft_graph *g = p->graph;
  build bd;
  memset(&bd, 0, sizeof bd);
  weft__vec_init(&bd.waits, sizeof(pair));
  weft__vec_init(&bd.fwaits, sizeof(pair));
  weft__vec_init(&bd.allocs, sizeof(pair));
  weft__vec_init(&bd.frees, sizeof(pair));
  int rc = WEFT_OK;
  cu_plan *cp = weft__calloc(1, sizeof *cp);
  if (cp == NULL) {
    rc = weft__oom("the CUDA plan");
    goto done;
  }
  p->bstate[weft__cu_index(b)] = cp; /* from here on plan_free cleans up */
  cp->st = st;
  cp->p = p;
  cp->n = n;
  cp->ntensors = (uint32_t)g->tensors.len;
  cp->ncuda = mine;
  cp->all_cuda = mine == n;
  cp->origin_dev = -1;
  if ((rc = weft__mutex_init(&cp->msg_lock)) != WEFT_OK) goto done;
  cp->have_msg_lock = 1;
  size_t nn = n ? n : 1, nt = cp->ntensors ? cp->ntensors : 1;
  cp->x = weft__calloc(nn, sizeof *cp->x);
  cp->order = weft__malloc(nn * sizeof *cp->order);
  cp->temp = weft__calloc(nt, 1);
  cp->tptr = weft__calloc(nt, sizeof(void *));
  bd.st = st;
  bd.cp = cp;
  bd.p = p;
  bd.g = g;
  bd.n = n;
  bd.nt = cp->ntensors;
  bd.pos = weft__malloc(nn * sizeof(uint32_t));
  bd.cost = weft__malloc(nn * sizeof(double));
  bd.height = weft__malloc(nn * sizeof(double));
  bd.heir = weft__malloc(nn * sizeof(uint32_t));
  bd.first = weft__malloc(nt * sizeof(uint32_t));
  bd.last_final = weft__malloc(nt * sizeof(uint32_t));
  if (!cp->x || !cp->order || !cp->temp || !cp->tptr || !bd.pos || !bd.cost || !bd.height || !bd.heir ||
      !bd.first || !bd.last_final) {
    rc = weft__oom("the CUDA plan");
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) {
    cu_node *x = &cp->x[i];
    x->dev = x->start_dev = -1;
    x->heir_of = NONE;
    const weft_node *nd = p->x[i].node;
    bd.cost[i] = node_cost(nd);
    if (p->x[i].backend != b) continue;
    if (nd->kind == WEFT__OP_USER) cp->has_user = 1;
    classify(&bd, i);
  }
  if ((rc = build_csr(&bd)) != WEFT_OK || (rc = topo_order(&bd)) != WEFT_OK) goto done;
  choose_heirs(&bd);
  assign_streams(&bd);
  if ((rc = plan_temporaries(&bd, extra)) != WEFT_OK || (rc = plan_window(&bd, extra)) != WEFT_OK ||
      (rc = plan_waits(&bd)) != WEFT_OK)
    goto done;
  uint32_t *lists = NULL;
  size_t len = 0, cap = 0;
  if ((rc = pack(&bd, &bd.waits, offsetof(cu_node, wait_b), 1, &lists, &len, &cap)) == WEFT_OK &&
      (rc = pack(&bd, &bd.fwaits, offsetof(cu_node, fwait_b), 1, &lists, &len, &cap)) == WEFT_OK &&
      (rc = pack(&bd, &bd.allocs, offsetof(cu_node, alloc_b), 0, &lists, &len, &cap)) == WEFT_OK)
    rc = pack(&bd, &bd.frees, offsetof(cu_node, free_b), 0, &lists, &len, &cap);
  cp->lists = lists;
done:
  build_free(&bd);
  return rc;
}

/* ---- plan: device objects ---------------------------------------------------------------- */

static int cuda_err(cudaError_t e, const char *what, int dev) {
  cudaGetLastError();
  return weft__err(e == cudaErrorMemoryAllocation ? WEFT_EDEVMEM : WEFT_ECUDA, "%s on cuda:%d failed: %s (%s)",
                   what, dev, cudaGetErrorName(e), cudaGetErrorString(e));
}

static int new_event(cu_device *d, cudaEvent_t *ev) {
  int rc = weft__cu_set_device(d);
  if (rc != WEFT_OK) return rc;
  cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming | cudaEventBlockingSync);
  return e == cudaSuccess ? WEFT_OK : cuda_err(e, "cudaEventCreate", d->ordinal);
}

/* Tensors that an earlier plan managed per run and this one does not need storage now, since
 * materialisation has passed them. */
static int adopt_former_temporaries(weft__backend *b, cu_plan *cp) {
  /* Not b->vt->alloc: that consults the graph's current plan, which is still the old one. */
  weft_graph *g = cp->p->graph;
  weft_tensor **ts = g->tensors.data;
  for (size_t t = 0; t < g->materialised && t < cp->ntensors; t++) {
    weft_tensor *tt = ts[t];
    if (tt->device.kind != WEFT_DEVICE_CUDA || tt->storage_kind != WEFT__S_NONE || tt->bytes == 0 || cp->temp[t])
      continue;
    int rc = weft__cu_alloc_storage(b->state, tt);
    if (rc == WEFT_OK && !tt->initialised) {
      rc = b->vt->init_tensor(b, tt);
      tt->initialised = rc == WEFT_OK;
    }
    if (rc != WEFT_OK) return rc;
  }
  return WEFT_OK;
}

int weft__cu_plan(weft__backend *b, weft__plan *p) {
  cu_state *st = b->state;
  cu_plan *cp = weft__cu_plan_of(b, p);
  if (cp == NULL) return WEFT_OK;
  int rc;
  for (uint32_t i = 0; i < cp->n; i++) {
    cu_node *x = &cp->x[i];
    if (x->dev < 0) continue;
    if ((x->flags & CU_RECORD) && (rc = new_event(&st->dev[x->dev], &x->event)) != WEFT_OK) return rc;
    if (x->flags & CU_STAGED) {
      if ((rc = new_event(&st->dev[x->start_dev], &x->stage_event)) != WEFT_OK) return rc;
      size_t bytes = p->x[i].node->args[0].t->bytes;
      if (bytes > 0 && (x->stage = weft__cu_pinned_alloc(st, bytes)) == NULL)
        return weft__err(WEFT_ENOMEM, "no pinned host memory (%zu bytes) to stage the copy of node %u", bytes, i);
    }
  }
  for (int d = 0; d < st->ndev; d++) {
    if (cp->used[d] == 0) continue;
    for (int s = 0; s < st->dev[d].nstreams; s++)
      if ((cp->used[d] >> s & 1) && (rc = new_event(&st->dev[d], &cp->tail[d][s])) != WEFT_OK) return rc;
    if ((rc = new_event(&st->dev[d], &cp->drained[d])) != WEFT_OK) return rc;
  }
  return adopt_former_temporaries(b, cp);
}

static void destroy_event(cu_device *d, cudaEvent_t *ev) {
  if (*ev == NULL) return;
  if (cudaSetDevice(d->ordinal) == cudaSuccess) cudaEventDestroy(*ev);
  *ev = NULL;
}

void weft__cu_plan_free(weft__backend *b, weft__plan *p) {
  cu_state *st = b->state;
  cu_plan *cp = weft__cu_plan_of(b, p);
  if (cp == NULL) return;
  weft__cu_replay_free(cp);
  if (cp->x != NULL)
    for (uint32_t i = 0; i < cp->n; i++) {
      cu_node *x = &cp->x[i];
      if (x->dev < 0) continue;
      destroy_event(&st->dev[x->dev], &x->event);
      destroy_event(&st->dev[x->start_dev], &x->stage_event);
      weft__cu_pinned_free(st, x->stage);
    }
  for (int d = 0; d < st->ndev; d++) {
    for (int s = 0; s < CU_MAX_COMPUTE + 3; s++) destroy_event(&st->dev[d], &cp->tail[d][s]);
    destroy_event(&st->dev[d], &cp->drained[d]);
  }
  cudaGetLastError();
  if (cp->have_msg_lock) weft__mutex_destroy(&cp->msg_lock);
  weft__free(cp->x);
  weft__free(cp->lists);
  weft__free(cp->order);
  weft__free(cp->temp);
  weft__free(cp->tptr);
  weft__free(cp);
  p->bstate[weft__cu_index(b)] = NULL;
}

/* ---- explain ------------------------------------------------------------------------------- */

int weft__cu_explain(const weft__backend *b, const weft__plan *p, uint32_t index, weft__placement *out) {
  const cu_state *st = b->state;
  const cu_plan *cp = weft__cu_plan_of(b, p);
  if (cp == NULL || index >= cp->n || cp->x[index].dev < 0)
    return weft__err(WEFT_EINVAL, "node %u is not a CUDA node of this plan", index);
  const cu_node *x = &cp->x[index];
  const cu_device *d = &st->dev[x->dev];
  int s = x->stream;
  if (s < d->ncompute)
    snprintf(out->lane, sizeof out->lane, "cuda:%d stream %d", x->dev, s);
  else
    snprintf(out->lane, sizeof out->lane, "cuda:%d copy %s", x->dev,
             s == d->h2d ? "h2d" : s == d->d2h ? "d2h" : "peer");
  int nw = (int)(x->wait_e - x->wait_b);
  char waits[64] = "";
  if (nw > 0) snprintf(waits, sizeof waits, "; waits for %d event%s", nw, nw == 1 ? "" : "s");
  switch (x->why) {
    case CU_WHY_CHAIN:
      snprintf(out->why, sizeof out->why, "continues the stream of node %u, whose longest path goes through it%s",
               x->heir_of, waits);
      break;
    case CU_WHY_BIG:
      snprintf(out->why, sizeof out->why, "fills the GPU on its own, so it runs in program order on the main stream%s", waits);
      break;
    case CU_WHY_SPREAD:
      snprintf(out->why, sizeof out->why, "starts a chain; small nodes are spread over the compute streams to run at once%s", waits);
      break;
    case CU_WHY_H2D:
      snprintf(out->why, sizeof out->why, "host-to-device copy, on its own copy engine beside the kernels%s", waits);
      break;
    case CU_WHY_D2H:
      snprintf(out->why, sizeof out->why, "device-to-host copy into pinned memory, on its own copy engine%s", waits);
      break;
    case CU_WHY_PEER:
      snprintf(out->why, sizeof out->why, "device-to-device copy over peer access%s", waits);
      break;
    case CU_WHY_STAGED:
      snprintf(out->why, sizeof out->why, "device-to-device copy staged through pinned host memory (no peer access)%s", waits);
      break;
    default:
      snprintf(out->why, sizeof out->why, "copy within one device, on a compute stream%s", waits);
      break;
  }
  return WEFT_OK;
}
