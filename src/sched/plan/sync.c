/* sync.c — how GPU nodes on different lanes order each other, and the order in which some of
 * them take their stream.
 *
 * Events. A node records its event only when a successor (or a later free of one of its
 * temporaries) is on another stream, or when a CPU node waits for it (WEFT__G_NOTIFY); a node
 * waits (cudaStreamWaitEvent, or the simulator's equivalent) only for its predecessors on
 * other streams, and for the readers of the temporaries it claims (memory.c).
 *
 * Turns. A stream runs its work in the order the host enqueued it, and in an eager run the
 * workers enqueue the nodes that are ready together in whatever order they take them. For the
 * products of the reference graph 50 x (y = x.x; copy y to the host) that order follows the
 * claims of the memory plan in three interleaved runs (product i + 3 becomes ready when copy i
 * is issued), so a copy enqueued early waits for a product enqueued early, the copies of
 * finished products queue behind it, and products that claim their buffers wait for those
 * copies (docs/cuda.md, "Enqueueing"; the overlap benchmark, docs/benchmarks.md, "GPU: the
 * CUDA backend"). So the nodes that hold a stream long take it in the plan's order: large
 * products on the main stream (WEFT__G_BIG) and copies on the copy streams, each given a
 * *turn* on its stream in the plan's order; one that comes before its turn is parked and
 * enqueued by the thread that enqueues the turn before it (the CUDA backend's cuda_launch.c,
 * "Turns").
 *
 * Only nodes that become ready through GPU nodes alone get turns ("host-free": every
 * predecessor, by data or by claim, is a host-free GPU node): a turn could otherwise keep the
 * nodes after it waiting for a CPU node, when they could run meanwhile. Among host-free nodes
 * no turn can wait for a later one: a node's predecessors all come before it in the plan's
 * order, so the earliest node not yet enqueued is ready, and its turn has come.
 *
 * The tail split. The last product on a stream, whose result only goes to the host, leaves its
 * copy exposed: nothing is left to hide it behind (in 50 x (y = x.x; copy y) it is the one copy
 * of fifty that costs time). Such a product is computed in two row halves with an event between
 * them, and its copies move the first half while the second is computed, halving the exposed
 * tail. Each half still fills the device (the product must have at least 256 rows and be
 * large). */
#include <stdlib.h>
#include <string.h>

#include "sched/plan/planner.h"

static int same_lane(const weft__gnode *a, int dev, int stream) { return a->dev == dev && a->stream == stream; }

int weft__sync_waits(weft__pbuild *bd) {
  int rc = WEFT_OK;
  for (uint32_t i = 0; i < bd->n && rc == WEFT_OK; i++) {
    weft__gnode *x = &bd->x[i];
    if (x->dev < 0) continue;
    for (uint32_t e = bd->poff[i]; e < bd->poff[i + 1] && rc == WEFT_OK; e++) {
      uint32_t pr = bd->pred[e];
      if (!weft__pbuild_is_gpu(bd, pr) || same_lane(&bd->x[pr], x->start_dev, x->start_stream)) continue;
      rc = weft__pair_push(&bd->waits, i, pr);
    }
    for (uint32_t e = bd->soff[i]; e < bd->soff[i + 1]; e++)
      if (!weft__pbuild_is_gpu(bd, bd->succ[e])) x->flags |= WEFT__G_NOTIFY | WEFT__G_RECORD;
  }
  return rc;
}

void weft__sync_tail_split(weft__pbuild *bd) {
  uint32_t(*last)[WEFT__PLAN_MAX_STREAMS] = bd->lane_tail; /* the lanes are placed: reused */
  memset(last, 0xff, (size_t)bd->t->ngpus * sizeof *last);
  for (uint32_t k = 0; k < bd->n; k++) {
    uint32_t i = bd->p->order[k];
    if (bd->x[i].dev >= 0) last[bd->x[i].dev][bd->x[i].stream] = i;
  }
  for (uint32_t i = 0; i < bd->n; i++) {
    weft__gnode *x = &bd->x[i];
    const weft_node *nd = bd->p->x[i].node;
    if (x->dev < 0 || nd->kind != WEFT__OP_MM || !(x->flags & WEFT__G_BIG) || last[x->dev][x->stream] != i) continue;
    const weft_tensor *out = nd->args[2].t;
    if (out == nd->args[0].t || out == nd->args[1].t || out->shape[0] < 256) continue;
    int ok = bd->soff[i + 1] > bd->soff[i];
    for (uint32_t e = bd->soff[i]; e < bd->soff[i + 1] && ok; e++) {
      uint32_t c = bd->succ[e];
      const weft_node *cn = bd->p->x[c].node;
      ok = bd->x[c].dev >= 0 && bd->x[c].why == WEFT__WHY_D2H && cn->args[0].t == out && bd->soff[c + 1] == bd->soff[c] &&
           weft__tensor_contiguous(cn->args[1].t); /* a strided destination is one 2-D copy */
    }
    if (!ok) continue;
    x->flags |= WEFT__G_SPLIT | WEFT__G_RECORD;
    for (uint32_t e = bd->soff[i]; e < bd->soff[i + 1]; e++) {
      bd->x[bd->succ[e]].flags |= WEFT__G_SPLIT_COPY;
      bd->x[bd->succ[e]].split_of = i;
    }
  }
}

int weft__sync_turns(weft__pbuild *bd) {
  weft__gpu_plan *gp = &bd->p->gpu;
  uint32_t n = bd->n;
  const weft__vec *extra = bd->extra;
  uint8_t *hf = weft__calloc(n ? n : 1, 1);
  uint32_t *eoff = weft__calloc((size_t)n + 1, sizeof *eoff);
  uint32_t *epred = weft__malloc((extra->len ? extra->len : 1) * sizeof *epred);
  int rc = WEFT_OK;
  if (hf == NULL || eoff == NULL || epred == NULL) {
    rc = weft__oom("the plan's turns");
    goto done;
  }
  /* The claims' edges, by target. */
  const weft__edge *e = extra->data;
  for (size_t k = 0; k < extra->len; k++) eoff[e[k].to + 1]++;
  for (uint32_t i = 0; i < n; i++) eoff[i + 1] += eoff[i];
  for (size_t k = 0; k < extra->len; k++) epred[eoff[e[k].to]++] = e[k].from; /* eoff[i]: i's end */
  for (uint32_t i = n; i > 0; i--) eoff[i] = eoff[i - 1];
  eoff[0] = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t i = bd->p->order[k];
    int ok = weft__pbuild_is_gpu(bd, i);
    for (uint32_t q = bd->poff[i]; q < bd->poff[i + 1] && ok; q++) ok = hf[bd->pred[q]];
    for (uint32_t q = eoff[i]; q < eoff[i + 1] && ok; q++) ok = hf[epred[q]];
    hf[i] = (uint8_t)ok;
    weft__gnode *x = &bd->x[i];
    int why = x->why;
    if (!ok || !bd->t->turns ||
        !(why == WEFT__WHY_BIG || why == WEFT__WHY_H2D || why == WEFT__WHY_D2H || why == WEFT__WHY_PEER))
      continue;
    x->turn = gp->turns[x->dev][x->stream]++;
    gp->nturns++;
  }
  uint32_t base = 0;
  for (int d = 0; d < bd->t->ngpus; d++)
    for (int k = 0; k < WEFT__PLAN_MAX_STREAMS; k++) {
      gp->turn_base[d][k] = base;
      base += gp->turns[d][k];
    }
done:
  weft__free(hf);
  weft__free(eoff);
  weft__free(epred);
  return rc;
}

/* Sorts `v` by owner, drops repeated (owner, value) pairs and, for waits, those on the lane
 * the owner starts on; appends the values to the plan's lists and sets the owners' ranges
 * through `field` (offset of the begin index; the end follows it). Marks the waited-for nodes
 * WEFT__G_RECORD. */
static int pack(weft__pbuild *bd, weft__vec *v, size_t field, int waits, size_t *len, size_t *cap) {
  weft__gpu_plan *gp = &bd->p->gpu;
  weft__pairs_sort(v);
  weft__pair *pr = v->data;
  size_t k = 0;
  while (k < v->len) {
    uint32_t owner = pr[k].owner;
    uint32_t *range = (uint32_t *)((char *)&bd->x[owner] + field);
    range[0] = (uint32_t)*len;
    for (; k < v->len && pr[k].owner == owner; k++) {
      uint32_t val = pr[k].value;
      int dup = 0;
      for (uint32_t j = range[0]; j < *len && !dup; j++) dup = gp->lists[j] == val;
      if (dup) continue;
      if (waits) {
        const weft__gnode *o = &bd->x[owner], *w = &bd->x[val];
        if (same_lane(w, o->start_dev, o->start_stream)) continue; /* the stream orders them */
        bd->x[val].flags |= WEFT__G_RECORD;
      }
      if (*len == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        uint32_t *nl = weft__realloc(gp->lists, nc * sizeof(uint32_t));
        if (nl == NULL) return weft__oom("the plan's lists");
        gp->lists = nl;
        *cap = nc;
      }
      gp->lists[(*len)++] = val;
    }
    range[1] = (uint32_t)*len;
  }
  return WEFT_OK;
}

int weft__sync_pack(weft__pbuild *bd) {
  size_t len = 0, cap = 0;
  int rc;
  if ((rc = pack(bd, &bd->waits, offsetof(weft__gnode, wait_b), 1, &len, &cap)) != WEFT_OK) return rc;
  if ((rc = pack(bd, &bd->pfrees, offsetof(weft__gnode, free_b), 0, &len, &cap)) != WEFT_OK) return rc;
  return pack(bd, &bd->allocs, offsetof(weft__gnode, alloc_b), 0, &len, &cap);
}
