/* lanes.c — which stream each GPU node runs on (computed in the plan's topological order, over
 * the graph's data edges):
 *
 *   - copies go to their device's copy streams: host to device on the destination's H2D
 *     stream, device to host on the source's D2H stream, device to device on the source's peer
 *     stream (or, between GPUs without peer access, staged through pinned host memory: the
 *     source's D2H stream, then the destination's H2D stream);
 *   - a compute node continues the stream of a predecessor that chose it as its *heir*: each
 *     node names as heir the successor on its device with the longest path below it (by
 *     weft__plan_work), so the critical chain stays on one stream and side branches (a norm
 *     that is logged, say) fork off;
 *   - a compute node with no stream to continue goes to the device's main stream 0 when it
 *     fills the GPU on its own: independent large products run one after the other, in program
 *     order (their turns, sync.c), which is as fast as running them at once and lets each
 *     result's copy start as soon as it is done; a small node goes round-robin to the compute
 *     streams, where several run at once, skipping a stream *kept* for a chain's next node.
 *
 * The rules also hold what "work" and "fills the device" mean, which the cost model shares
 * (src/sched/cost). */
#include <math.h>
#include <string.h>

#include "backends/backend.h"
#include "sched/plan/planner.h"
#include "sched/sched.h"

double weft__plan_work(const weft_node *nd) {
  if (nd->nargs == 0) return 1;
  const weft_tensor *a = nd->args[0].t;
  switch (nd->kind) {
    case WEFT__OP_MM:
      return 2.0 * (double)a->shape[0] * (double)a->shape[1] * (double)nd->args[1].t->shape[1];
    case WEFT__OP_LINEAR:
      return 2.0 * (double)a->shape[0] * (double)a->shape[1] * (double)nd->args[1].t->shape[0];
    case WEFT__OP_GEMM:
    case WEFT__OP_POTRF:
    case WEFT__OP_TRSM:
    case WEFT__OP_TRMM:
    case WEFT__OP_TRTRI:
    case WEFT__OP_SYRK:
      return weft__la_flops(nd);
    case WEFT__OP_USER:
      if (nd->user_op->desc.cost != NULL) {
        /* A hint below zero (or NaN) counts as none: the orders built on it need it so. */
        double c = nd->user_op->desc.cost(weft__node_targs(nd), nd->nargs, nd->params, nd->user_op->desc.user);
        return c > 0 ? c : 0;
      }
      return (double)a->numel;
    default:
      return (double)a->numel + 1;
  }
}

int weft__plan_fills_device(const weft_node *nd, int sms) {
  if (nd->nargs == 0) return 0;
  const weft_tensor *a = nd->args[0].t, *out = nd->args[nd->nargs - 1].t;
  switch (nd->kind) {
    case WEFT__OP_MM:
    case WEFT__OP_LINEAR:
    case WEFT__OP_GEMM:
    case WEFT__OP_TRMM:
    case WEFT__OP_SYRK:
      return ((out->shape[0] + 127) / 128) * ((out->shape[1] + 127) / 128) >= sms;
    case WEFT__OP_POTRF:
    case WEFT__OP_TRSM:
    case WEFT__OP_TRTRI:
      /* Chains of panel kernels, each far smaller than the device: they go to a side stream,
       * whose priority lets them through beside the large updates (measured on a tiled
       * Cholesky, docs/benchmarks.md). */
      return 0;
    case WEFT__OP_USER:
      return 0;
    default:
      return a->numel >= (int64_t)sms * 2048;
  }
}

void weft__lanes_classify(weft__pbuild *bd, uint32_t i) {
  const weft__gpu_target *t = bd->t;
  weft__gnode *x = &bd->x[i];
  const weft_node *nd = bd->p->x[i].node;
  const weft_runtime *rt = bd->p->graph->rt;
  int dev = weft__gpu_slot(rt, nd->device);
  x->dev = x->start_dev = (int16_t)dev;
  x->why = WEFT__WHY_CHAIN;
  if (nd->kind == WEFT__OP_COPY) {
    weft_device s = nd->args[0].t->device, d = nd->args[1].t->device;
    s.index = s.kind == WEFT_DEVICE_CUDA ? weft__gpu_slot(rt, s) : s.index; /* the plan's GPUs */
    d.index = d.kind == WEFT_DEVICE_CUDA ? weft__gpu_slot(rt, d) : d.index;
    if (s.kind == WEFT_DEVICE_CPU) {
      x->dev = x->start_dev = (int16_t)d.index;
      x->stream = x->start_stream = (uint8_t)weft__plan_copy_stream(t, d.index, WEFT__COPY_H2D);
      x->why = WEFT__WHY_H2D;
      return;
    }
    if (d.kind == WEFT_DEVICE_CPU) {
      x->stream = x->start_stream = (uint8_t)weft__plan_copy_stream(t, s.index, WEFT__COPY_D2H);
      x->why = WEFT__WHY_D2H;
      return;
    }
    if (s.index != d.index) {
      if (t->backend->vt->can_access_peer(t->backend, s.index, d.index)) {
        x->stream = x->start_stream = (uint8_t)weft__plan_copy_stream(t, s.index, WEFT__COPY_PEER);
        x->why = WEFT__WHY_PEER;
      } else {
        x->flags |= WEFT__G_STAGED;
        x->start_dev = (int16_t)s.index;
        x->start_stream = (uint8_t)weft__plan_copy_stream(t, s.index, WEFT__COPY_D2H);
        x->dev = (int16_t)d.index;
        x->stream = (uint8_t)weft__plan_copy_stream(t, d.index, WEFT__COPY_H2D);
        x->why = WEFT__WHY_STAGED;
      }
      return;
    }
    x->why = WEFT__WHY_LOCAL_COPY;
  }
  if (weft__plan_fills_device(nd, t->dev[dev].sms)) x->flags |= WEFT__G_BIG;
}

/* A node on a compute stream (kernels, user ops, copies within one device). */
static int is_compute(const weft__pbuild *bd, uint32_t i) {
  const weft__gnode *x = &bd->x[i];
  return x->dev >= 0 && x->why != WEFT__WHY_H2D && x->why != WEFT__WHY_D2H && x->why != WEFT__WHY_PEER &&
         x->why != WEFT__WHY_STAGED;
}

void weft__lanes_heirs(weft__pbuild *bd) {
  const uint32_t *order = bd->p->order;
  for (uint32_t k = bd->n; k-- > 0;) {
    uint32_t i = order[k];
    double best = 0;
    uint32_t heir = WEFT__NONE;
    for (uint32_t e = bd->soff[i]; e < bd->soff[i + 1]; e++) {
      uint32_t s = bd->succ[e];
      if (bd->height[s] > best) best = bd->height[s];
      if (!is_compute(bd, i) || !is_compute(bd, s) || bd->x[s].dev != bd->x[i].dev) continue;
      if (heir == WEFT__NONE || bd->height[s] > bd->height[heir] ||
          (bd->height[s] == bd->height[heir] && bd->pos[s] < bd->pos[heir]))
        heir = s;
    }
    bd->height[i] = bd->cost[i] + best;
    bd->heir[i] = heir;
  }
}

int weft__lanes_assign(weft__pbuild *bd) {
  const weft__gpu_target *t = bd->t;
  weft__gpu_plan *gp = &bd->p->gpu;
  /* tail: the last node placed on each stream; kept: the heir a stream is kept for until it
   * is placed (a small node starting a chain does not take a stream a chain will continue). */
  uint32_t(*tail)[WEFT__PLAN_MAX_STREAMS] = bd->lane_tail, (*kept)[WEFT__PLAN_MAX_COMPUTE] = bd->lane_kept;
  int *rr = bd->lane_rr;
  for (uint32_t k = 0; k < bd->n; k++) {
    uint32_t i = bd->p->order[k];
    weft__gnode *x = &bd->x[i];
    if (x->dev < 0) continue;
    if (is_compute(bd, i)) {
      int ncompute = t->dev[x->dev].compute;
      uint32_t cont = WEFT__NONE;
      for (uint32_t e = bd->poff[i]; e < bd->poff[i + 1] && cont == WEFT__NONE; e++) {
        uint32_t pr = bd->pred[e];
        if (bd->heir[pr] == i && tail[x->dev][bd->x[pr].stream] == pr) cont = pr;
      }
      int local_copy = x->why == WEFT__WHY_LOCAL_COPY;
      if (cont != WEFT__NONE) {
        x->stream = bd->x[cont].stream;
        x->heir_of = cont;
        x->why = WEFT__WHY_CHAIN;
      } else if (x->flags & WEFT__G_BIG) {
        x->stream = 0;
        x->why = WEFT__WHY_BIG;
      } else {
        int s = rr[x->dev] % ncompute;
        for (int j = 0; j < ncompute && kept[x->dev][s] != WEFT__NONE; j++) s = (s + 1) % ncompute;
        if (kept[x->dev][s] != WEFT__NONE) s = rr[x->dev] % ncompute; /* every stream is kept: share */
        rr[x->dev] = s + 1;
        x->stream = (uint8_t)s;
        x->why = WEFT__WHY_SPREAD;
      }
      if (local_copy && cont == WEFT__NONE) x->why = WEFT__WHY_LOCAL_COPY;
      x->start_stream = x->stream;
      for (int j = 0; j < ncompute; j++)
        if (kept[x->dev][j] == i) kept[x->dev][j] = WEFT__NONE; /* placed: no longer waited for */
      kept[x->dev][x->stream] = bd->heir[i];
    }
    tail[x->dev][x->stream] = i;
    gp->used[x->dev] |= (uint16_t)(1u << x->stream);
    gp->used[x->start_dev] |= (uint16_t)(1u << x->start_stream);
  }
  return WEFT_OK;
}
