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
 *     the other, in program order (their turns, below), which is as fast as running them at
 *     once and lets each result's copy start as soon as it is done; a small node goes
 *     round-robin to the compute streams, where several run at once.
 * Events: a node records its event only when a successor (or a later free of one of its
 * temporaries) is on another stream, or when a CPU node waits for it (CU_NOTIFY); a node waits
 * (cudaStreamWaitEvent) only for its predecessors on other streams.
 *
 * Memory plan. A temporary (analysis: an op's result whose final value a later node reads and
 * that is not kept) whose every accessor is a CUDA node on its device gets no storage at
 * materialisation: its first writer allocates it from the device pool, stream-ordered, just
 * before its kernel. When to give it back is the plan's choice, because the host enqueues far
 * ahead of the device: freeing each temporary after its last reader and letting the pool
 * reuse memory across streams bounds nothing (fifty products allocate fifty buffers before
 * the first copy is done) and stalls a stream behind the side branches that read with it. So,
 * walking the nodes in order, a temporary is *dead* once the last reader of its final value is
 * passed, and a node that allocates *claims* the oldest dead temporaries of its device beyond
 * a budget (max(2 x the new buffer, 64 MiB) stays unclaimed): it waits for their readers (an
 * edge from each reader, added through plan_edges and pointing forward in the walk's
 * topological order, so no cycle can arise; and their events) and frees them on its own stream
 * right before allocating, so the pool reuses their memory in stream order. What nobody
 * claims is freed by the run's drain (or at the end of a captured graph). The reference graph
 * 50 x (y = x.x; copy y to the host) runs in x plus three buffers and no product waits (a copy
 * takes half a product's time); 1000 small logged products free nothing during the run. */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"
#include "backends/plan_rules.h"

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
  uint32_t *first, *last_final; /* per tensor: allocating node, last reader of its final value */
  weft__vec waits, allocs, pfrees; /* pair (node, node or tensor) */
  weft__vec readers;               /* pair (tensor, reader of its final value) */
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
  if (weft__plan_fills_device(nd, st->dev[dev].sms)) x->flags |= CU_BIG;
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
  /* tail: the last node placed on each stream; kept: the heir a stream is kept for until it
   * is placed (a small node starting a chain does not take a stream a chain will continue). */
  uint32_t tail[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3], kept[CU_MAX_DEVICES][CU_MAX_COMPUTE];
  int rr[CU_MAX_DEVICES];
  for (int d = 0; d < CU_MAX_DEVICES; d++) {
    rr[d] = 0;
    for (int s = 0; s < CU_MAX_COMPUTE + 3; s++) tail[d][s] = NONE;
    for (int s = 0; s < CU_MAX_COMPUTE; s++) kept[d][s] = NONE;
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
        int s = rr[x->dev] % d->ncompute;
        for (int j = 0; j < d->ncompute && kept[x->dev][s] != NONE; j++) s = (s + 1) % d->ncompute;
        if (kept[x->dev][s] != NONE) s = rr[x->dev] % d->ncompute; /* every stream is kept: share */
        rr[x->dev] = s + 1;
        x->stream = (uint8_t)s;
        x->why = CU_WHY_SPREAD;
      }
      if (local_copy && cont == NONE) x->why = CU_WHY_LOCAL_COPY;
      x->start_stream = x->stream;
      for (int j = 0; j < d->ncompute; j++)
        if (kept[x->dev][j] == i) kept[x->dev][j] = NONE; /* placed: no longer waited for */
      kept[x->dev][x->stream] = bd->heir[i];
    }
    tail[x->dev][x->stream] = i;
    bd->cp->used[x->dev] |= (uint16_t)(1u << x->stream);
    bd->cp->used[x->start_dev] |= (uint16_t)(1u << x->start_stream);
  }
}

/* ---- memory plan ------------------------------------------------------------------------ */

/* Marks the temporaries this plan manages, their allocating node (first[t]), the readers of
 * their final value (bd->readers: (tensor, reader)) and the last of those in the walk's order
 * (last_final[t]), after which the tensor is dead. */
static int plan_temporaries(build *bd) {
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
  for (uint32_t i = 0; i < bd->n && rc == WEFT_OK; i++) {
    const weft_node *nd = nodes[i];
    for (int a = 0; a < nd->nargs && rc == WEFT_OK; a++) {
      uint32_t t = nd->args[a].t->id;
      if (!cp->temp[t] || !(nd->args[a].mode & WEFT_READ) || i <= last_write[t] || stamp[t] == i) continue;
      stamp[t] = i;
      rc = push_pair(&bd->readers, t, i);
    }
  }
  for (uint32_t t = 0; t < nt && rc == WEFT_OK; t++)
    if (cp->temp[t]) rc = push_pair(&bd->allocs, bd->first[t], t);
  weft__free(last_write);
  weft__free(stamp);
  weft__free(first_reads);
  return rc;
}

typedef struct dead_temp {
  uint32_t tensor;
  size_t bytes;
} dead_temp;

static int by_owner(const void *a, const void *b) {
  const pair *x = a, *y = b;
  return x->owner < y->owner ? -1 : x->owner > y->owner;
}

/* Counts pairs per owner into off[owner + 1] and turns the counts into offsets (off has n + 2
 * entries); v must be sorted by owner. */
static uint32_t *offsets(const weft__vec *v, uint32_t n) {
  uint32_t *off = weft__calloc((size_t)n + 2, sizeof(uint32_t));
  if (off == NULL) return NULL;
  const pair *pr = v->data;
  for (size_t k = 0; k < v->len; k++) off[pr[k].owner + 1]++;
  for (uint32_t i = 0; i <= n; i++) off[i + 1] += off[i];
  return off;
}

/* The throttle described at the top. Walking the nodes in order, a temporary becomes dead
 * once its last final reader is passed; a node that allocates claims the oldest dead ones of
 * its device beyond the budget: it waits for their readers (edges reader -> node, and events)
 * and frees them on its own stream before allocating, so the pool reuses their memory in
 * stream order. Dead temporaries nobody claims are freed by the run's drain. */
static int plan_window(build *bd, weft__vec *extra) {
  weft_tensor **ts = bd->g->tensors.data;
  cu_plan *cp = bd->cp;
  qsort(bd->allocs.data, bd->allocs.len, sizeof(pair), by_owner);
  qsort(bd->readers.data, bd->readers.len, sizeof(pair), by_owner);
  const pair *al = bd->allocs.data, *rd = bd->readers.data;
  /* dying[node]: the temporaries whose last final reader it is. */
  weft__vec dying;
  weft__vec_init(&dying, sizeof(pair));
  int rc = WEFT_OK;
  for (uint32_t t = 0; t < bd->nt && rc == WEFT_OK; t++)
    if (cp->temp[t]) rc = push_pair(&dying, bd->last_final[t], t);
  if (rc != WEFT_OK) {
    weft__vec_fini(&dying);
    return rc;
  }
  qsort(dying.data, dying.len, sizeof(pair), by_owner);
  const pair *dy = dying.data;
  uint32_t *aoff = offsets(&bd->allocs, bd->n), *doff = offsets(&dying, bd->n), *roff = offsets(&bd->readers, bd->nt);
  dead_temp *fifo = weft__malloc((dying.len ? dying.len : 1) * sizeof *fifo);
  if (!aoff || !doff || !roff || !fifo) rc = weft__oom("the CUDA memory plan");
  for (int dev = 0; dev < bd->st->ndev && rc == WEFT_OK; dev++) {
    size_t head = 0, tailq = 0, sum = 0;
    for (uint32_t k = 0; k < bd->n && rc == WEFT_OK; k++) {
      uint32_t i = cp->order[k];
      if (cp->x[i].dev != dev) continue;
      for (uint32_t a = aoff[i]; a < aoff[i + 1] && rc == WEFT_OK; a++) {
        size_t budget = (size_t)bd->st->window_count * ts[al[a].value]->bytes;
        if (budget < bd->st->window_bytes_min) budget = bd->st->window_bytes_min;
        while (head < tailq && sum > budget && rc == WEFT_OK) {
          uint32_t u = fifo[head].tensor;
          sum -= fifo[head++].bytes;
          rc = push_pair(&bd->pfrees, i, u);
          for (uint32_t r = roff[u]; r < roff[u + 1] && rc == WEFT_OK; r++) {
            weft__edge e = {rd[r].value, i, NONE, WEFT__HAZARD_RESOURCE};
            if ((rc = weft__vec_push(extra, &e)) == WEFT_OK) rc = push_pair(&bd->waits, i, rd[r].value);
          }
        }
      }
      for (uint32_t f = doff[i]; f < doff[i + 1]; f++) {
        fifo[tailq++] = (dead_temp){dy[f].value, ts[dy[f].value]->bytes};
        sum += ts[dy[f].value]->bytes;
      }
    }
  }
  weft__free(aoff);
  weft__free(doff);
  weft__free(roff);
  weft__free(fifo);
  weft__vec_fini(&dying);
  return rc;
}

/* ---- the tail of a compute chain ------------------------------------------------------- */

/* The last product on a stream, whose result only goes to the host, leaves its copy exposed:
 * nothing is left to hide it behind (in 50 x (y = x.x; copy y) it is the one copy of fifty
 * that costs time). Such a product is computed in two row halves with an event between them,
 * and its copies move the first half while the second is computed, halving the exposed tail.
 * Each half still fills the device (the product must have at least 256 rows and be large). */
static void plan_tail_split(build *bd) {
  cu_plan *cp = bd->cp;
  uint32_t last[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3];
  memset(last, 0xff, sizeof last);
  for (uint32_t k = 0; k < bd->n; k++) {
    uint32_t i = cp->order[k];
    if (cp->x[i].dev >= 0) last[cp->x[i].dev][cp->x[i].stream] = i;
  }
  for (uint32_t i = 0; i < bd->n; i++) {
    cu_node *x = &cp->x[i];
    const weft_node *nd = bd->p->x[i].node;
    if (x->dev < 0 || nd->kind != WEFT__OP_MM || !(x->flags & CU_BIG) || last[x->dev][x->stream] != i) continue;
    const weft_tensor *out = nd->args[2].t;
    if (out == nd->args[0].t || out == nd->args[1].t || out->shape[0] < 256) continue;
    int ok = bd->soff[i + 1] > bd->soff[i];
    for (uint32_t e = bd->soff[i]; e < bd->soff[i + 1] && ok; e++) {
      uint32_t c = bd->succ[e];
      const weft_node *cn = bd->p->x[c].node;
      ok = cp->x[c].dev >= 0 && cp->x[c].why == CU_WHY_D2H && cn->args[0].t == out && bd->soff[c + 1] == bd->soff[c];
    }
    if (!ok) continue;
    x->flags |= CU_SPLIT | CU_RECORD;
    for (uint32_t e = bd->soff[i]; e < bd->soff[i + 1]; e++) {
      cp->x[bd->succ[e]].flags |= CU_SPLIT_COPY;
      cp->x[bd->succ[e]].split_of = i;
    }
  }
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

/* Sorts `v` by owner, drops repeated (owner, value) pairs and, for waits, those on the lane
 * the owner starts on; appends the values to the plan's lists and sets the owners' ranges
 * through `field` (offset of the begin index; the end follows it). Marks the waited-for nodes
 * CU_RECORD. */
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
        const cu_node *o = &cp->x[owner], *w = &cp->x[val];
        if (same_lane(w, o->start_dev, o->start_stream)) continue; /* the stream orders them */
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
  weft__vec_fini(&bd->allocs);
  weft__vec_fini(&bd->pfrees);
  weft__vec_fini(&bd->readers);
}

/* ---- turns --------------------------------------------------------------------------------
 *
 * A stream runs its work in the order the host enqueued it, and in an eager run the workers
 * enqueue the nodes that are ready together in whatever order they take them. For the
 * products of the reference graph 50 x (y = x.x; copy y to the host) that order followed the
 * claims of the memory plan in three interleaved runs (product i + 3 becomes ready when copy i
 * is issued), so a copy enqueued early waited for a product enqueued early, the copies of
 * finished products queued behind it, and products that claim their buffers waited for those
 * copies: 9.6 ms of a 140 ms run on the H100 (docs/benchmarks.md, "Turns"). So the nodes that
 * hold a stream long take it in the plan's order: large products on the main stream (CU_BIG)
 * and copies on the copy streams, each given a *turn* on its stream in the walk's order; one
 * that comes before its turn is parked and enqueued by the thread that enqueues the turn
 * before it (cuda_launch.c, "Turns").
 *
 * Only nodes that become ready through GPU nodes alone get turns ("host-free": every
 * predecessor, by data or by claim, is a host-free CUDA node): a turn could otherwise keep
 * the nodes after it waiting for a CPU node, when they could run meanwhile. Among host-free
 * nodes no turn can wait for a later one: a node's predecessors all come before it in the
 * walk, so the earliest node not yet enqueued is ready, and its turn has come. */
static int plan_turns(build *bd, const weft__vec *extra) {
  cu_plan *cp = bd->cp;
  uint32_t n = bd->n;
  cp->turn_of = weft__malloc((n ? n : 1) * sizeof *cp->turn_of);
  uint8_t *hf = weft__calloc(n ? n : 1, 1);
  uint32_t *eoff = weft__calloc((size_t)n + 1, sizeof *eoff);
  uint32_t *epred = weft__malloc((extra->len ? extra->len : 1) * sizeof *epred);
  int rc = WEFT_OK;
  if (cp->turn_of == NULL || hf == NULL || eoff == NULL || epred == NULL) {
    rc = weft__oom("the CUDA plan's turns");
    goto done;
  }
  /* The backends' edges (the claims), by target. */
  const weft__edge *e = extra->data;
  for (size_t k = 0; k < extra->len; k++) eoff[e[k].to + 1]++;
  for (uint32_t i = 0; i < n; i++) eoff[i + 1] += eoff[i];
  for (size_t k = 0; k < extra->len; k++) epred[eoff[e[k].to]++] = e[k].from; /* eoff[i]: i's end */
  for (uint32_t i = n; i > 0; i--) eoff[i] = eoff[i - 1];
  eoff[0] = 0;
  for (uint32_t i = 0; i < n; i++) cp->turn_of[i] = NONE;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t i = cp->order[k];
    int ok = is_cuda(bd, i);
    for (uint32_t q = bd->poff[i]; q < bd->poff[i + 1] && ok; q++) ok = hf[bd->pred[q]];
    for (uint32_t q = eoff[i]; q < eoff[i + 1] && ok; q++) ok = hf[epred[q]];
    hf[i] = (uint8_t)ok;
    const cu_node *x = &cp->x[i];
    int why = x->why;
    if (!ok || bd->st->launch_blocking ||
        !(why == CU_WHY_BIG || why == CU_WHY_H2D || why == CU_WHY_D2H || why == CU_WHY_PEER))
      continue;
    cp->turn_of[i] = cp->turns[x->dev][x->stream]++;
    cp->nturns++;
  }
  uint32_t base = 0;
  for (int d = 0; d < CU_MAX_DEVICES; d++)
    for (int k = 0; k < CU_MAX_COMPUTE + 3; k++) {
      cp->turn_base[d][k] = base;
      base += cp->turns[d][k];
    }
  if ((cp->parked = weft__malloc((cp->nturns ? cp->nturns : 1) * sizeof *cp->parked)) == NULL)
    rc = weft__oom("the CUDA plan's turns");
done:
  weft__free(hf);
  weft__free(eoff);
  weft__free(epred);
  return rc;
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
  weft__vec_init(&bd.allocs, sizeof(pair));
  weft__vec_init(&bd.pfrees, sizeof(pair));
  weft__vec_init(&bd.readers, sizeof(pair));
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
  cp->defer = weft__calloc(nn, sizeof *cp->defer);
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
  if (!cp->x || !cp->defer || !cp->order || !cp->temp || !cp->tptr || !bd.pos || !bd.cost || !bd.height || !bd.heir ||
      !bd.first || !bd.last_final) {
    rc = weft__oom("the CUDA plan");
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) {
    cu_node *x = &cp->x[i];
    x->dev = x->start_dev = -1;
    x->heir_of = x->split_of = x->batch = NONE;
    const weft_node *nd = p->x[i].node;
    bd.cost[i] = weft__plan_work(nd);
    if (p->x[i].backend != b) continue;
    if (nd->kind == WEFT__OP_USER) cp->has_user = 1;
    classify(&bd, i);
  }
  if ((rc = build_csr(&bd)) != WEFT_OK || (rc = topo_order(&bd)) != WEFT_OK) goto done;
  choose_heirs(&bd);
  assign_streams(&bd);
  if ((rc = plan_temporaries(&bd)) != WEFT_OK || (rc = plan_window(&bd, extra)) != WEFT_OK ||
      (rc = plan_waits(&bd)) != WEFT_OK || (rc = plan_turns(&bd, extra)) != WEFT_OK)
    goto done;
  plan_tail_split(&bd);
  uint32_t *lists = NULL;
  size_t len = 0, cap = 0;
  if ((rc = pack(&bd, &bd.waits, offsetof(cu_node, wait_b), 1, &lists, &len, &cap)) == WEFT_OK &&
      (rc = pack(&bd, &bd.pfrees, offsetof(cu_node, free_b), 0, &lists, &len, &cap)) == WEFT_OK)
    rc = pack(&bd, &bd.allocs, offsetof(cu_node, alloc_b), 0, &lists, &len, &cap);
  cp->lists = lists;
done:
  build_free(&bd);
  return rc;
}

/* ---- batches ------------------------------------------------------------------------------ */

/* Batches. A small elementwise kernel costs the device about a microsecond but the host a
 * launch (3 to 5 us on the GPU machines' VMs), so a chain of them is bound by the launches: a
 * chain of 10 000 one-element adds took 3.5-4.5 us a node eager. Consecutive links of such a
 * chain on one stream are therefore batched: each node but the last adds its op to the batch
 * (CU_DEFER) and the last (CU_FLUSH) launches all of them as one kernel (cuda_kernels.cu,
 * weft__cu_batch), so a chain pays a launch per WEFT__PLAN_BATCH_MAX nodes.
 *
 * A link i -> j qualifies when nothing but j can observe that i's op has not been launched yet
 * when i returns: j is i's only successor and i j's only predecessor (plan_rules.h; the plan's
 * edges include the memory plan's claims), j continues i's stream, i records no event and
 * notifies no CPU node, and j waits for no event and frees nothing (a free would precede the
 * ops still held). A batch's first node may wait and free as any node; any node may allocate
 * (the allocation is enqueued before the batch's kernel). If a run stops before a batch's last
 * node (a failure elsewhere, a cancel), the run's drain launches what the batch holds, so
 * every node reported done has run. Replays capture the batches' kernels like any other. */
_Static_assert(WEFT__PLAN_BATCH_MAX == WEFT__CU_BATCH_MAX, "the plan's batches must fit the batch kernel");

static int plan_batches(cu_state *st, cu_plan *cp) {
  weft__plan *p = cp->p;
  if (!atomic_load(&st->batch) || cp->ncuda < 2) return WEFT_OK;
  weft__vec found; /* cu_batch, ops not yet set */
  weft__vec_init(&found, sizeof(cu_batch));
  size_t members = 0;
  for (uint32_t k = 0; k < cp->n; k++) {
    uint32_t i = cp->order[k];
    if (cp->x[i].dev < 0 || cp->x[i].batch != NONE || !weft__plan_batchable(p->x[i].node)) continue;
    uint32_t len = 1, cur = i;
    while (len < WEFT__PLAN_BATCH_MAX) {
      const cu_node *c = &cp->x[cur];
      if (p->x[cur].succ_begin == p->x[cur].succ_end || (c->flags & (CU_RECORD | CU_NOTIFY))) break;
      uint32_t j = p->succ[p->x[cur].succ_begin];
      const cu_node *y = &cp->x[j];
      if (!weft__plan_batch_link(p, cur, j) || y->dev != c->dev || y->stream != c->stream || y->heir_of != cur ||
          y->start_dev != y->dev || y->start_stream != y->stream || y->wait_b != y->wait_e || y->free_b != y->free_e)
        break;
      cur = j;
      len++;
    }
    if (len < 2) continue;
    cu_batch bt = {i, cur, 0, len, NULL};
    uint32_t index = (uint32_t)found.len;
    if (weft__vec_push(&found, &bt) != WEFT_OK) {
      weft__vec_fini(&found);
      return weft__oom("the CUDA plan's batches");
    }
    for (uint32_t m = i;; m = p->succ[p->x[m].succ_begin]) {
      cp->x[m].batch = index;
      cp->x[m].flags |= m == cur ? CU_FLUSH : CU_DEFER;
      if (m == cur) break;
    }
    members += len;
  }
  int rc = WEFT_OK;
  if (found.len > 0) {
    /* One block: the batches, then their ops. */
    cp->batches = weft__malloc(found.len * sizeof(cu_batch) + members * sizeof(weft__cu_bop));
    if (cp->batches == NULL) {
      rc = weft__oom("the CUDA plan's batches");
    } else {
      memcpy(cp->batches, found.data, found.len * sizeof(cu_batch));
      cp->nbatches = (uint32_t)found.len;
      weft__cu_bop *ops = (weft__cu_bop *)(cp->batches + cp->nbatches);
      for (uint32_t k = 0; k < cp->nbatches; k++) {
        cp->batches[k].ops = ops;
        ops += cp->batches[k].len;
      }
    }
  }
  weft__vec_fini(&found);
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
  if ((rc = plan_batches(st, cp)) != WEFT_OK) return rc;
  for (uint32_t i = 0; i < cp->n; i++) {
    cu_node *x = &cp->x[i];
    if (x->dev < 0) continue;
    if ((x->flags & CU_RECORD) && (rc = new_event(&st->dev[x->dev], &x->event)) != WEFT_OK) return rc;
    if ((x->flags & CU_SPLIT) && (rc = new_event(&st->dev[x->dev], &x->stage_event)) != WEFT_OK) return rc;
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
  if ((rc = weft__cu_timing_plan(st, cp)) != WEFT_OK) return rc;
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
  weft__cu_replay_free(cp); /* the graph first: its event-record nodes use the ticks */
  weft__cu_timing_free(st, cp);
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
  weft__free(cp->defer);
  weft__free(cp->turn_of);
  weft__free(cp->parked);
  weft__free(cp->batches);
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
      snprintf(out->why, sizeof out->why, "fills the GPU on its own, so it runs in program order on the main stream%s%s",
               x->flags & CU_SPLIT ? "; the last there, its result going to the host: computed in two row halves "
                                     "so the copy of the first overlaps the second" : "",
               waits);
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
  if (x->batch != NONE) {
    const cu_batch *bt = &cp->batches[x->batch];
    size_t used = strlen(out->why);
    snprintf(out->why + used, sizeof out->why - used, "; batched: nodes %u..%u (%u small elementwise ops) run as one kernel",
             bt->first, bt->last, bt->len);
  }
  return WEFT_OK;
}
