/* plan_rules.h — the rules a GPU backend's plan uses to place nodes on streams, shared by the
 * CUDA backend (src/backends/cuda/cuda_plan.c) and the simulator (src/backends/sim), which must
 * place nodes exactly as the CUDA backend does for its virtual timelines to be the real ones.
 *
 *   work          a node's work, for the longest-path "heir" each node names: 2mnk for a
 *                 product, the user op's cost hint, else its first argument's element count;
 *   fills_device  whether a node keeps every SM busy on its own (a product with at least one
 *                 128x128 output tile per SM, an elementwise op over 2048 elements per SM): such
 *                 a node starting a chain goes to stream 0, a smaller one round-robin;
 *   the window    a dead temporary (its last reader passed, in the plan's order) is freed only
 *                 when a later allocation on its device claims it: the oldest dead ones beyond
 *                 max(WINDOW_COUNT x the new buffer, WINDOW_MIN_BYTES) (cuda_plan.c,
 *                 plan_window; the simulator's memory follows the same rule);
 *   batches       a chain of small elementwise nodes on one stream, each the only successor
 *                 of the one before and the only predecessor of the one after, is launched as
 *                 one kernel of up to WEFT__PLAN_BATCH_MAX ops by its last node
 *                 (weft__plan_batch_link says which links qualify; cuda_plan.c, "Batches"). */
#define WEFT__PLAN_BATCH_MAX 128
#define WEFT__PLAN_BATCH_NUMEL 16384
#define WEFT__PLAN_WINDOW_COUNT 2
#define WEFT__PLAN_WINDOW_MIN_MIB 64
#ifndef WEFT_BACKENDS_PLAN_RULES_H
#define WEFT_BACKENDS_PLAN_RULES_H

#include "graph/graph.h"
#include "sched/sched.h"

static inline double weft__plan_work(const weft_node *nd) {
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

static inline int weft__plan_fills_device(const weft_node *nd, int sms) {
  if (nd->nargs == 0) return 0;
  const weft_tensor *a = nd->args[0].t, *out = nd->args[nd->nargs - 1].t;
  switch (nd->kind) {
    case WEFT__OP_MM:
    case WEFT__OP_LINEAR:
      return ((out->shape[0] + 127) / 128) * ((out->shape[1] + 127) / 128) >= sms;
    case WEFT__OP_USER:
      return 0;
    default:
      return a->numel >= (int64_t)sms * 2048;
  }
}

/* An op a batch can hold: an elementwise op over at most WEFT__PLAN_BATCH_NUMEL elements. */
static inline int weft__plan_batchable(const weft_node *nd) {
  switch (nd->kind) {
    case WEFT__OP_ADD:
    case WEFT__OP_SUB:
    case WEFT__OP_MUL:
    case WEFT__OP_SCALE:
    case WEFT__OP_RELU: break;
    default: return 0;
  }
  int64_t n = nd->args[0].t->numel;
  return n > 0 && n <= WEFT__PLAN_BATCH_NUMEL;
}

/* Whether node j may follow node i in a batch, as far as the plan's edges say: both batchable,
 * j the only successor of i and i the only predecessor of j (edges may repeat in the lists).
 * The backend adds its own conditions (one stream, no event between them, no wait or free
 * before j). */
static inline int weft__plan_batch_link(const weft__plan *p, uint32_t i, uint32_t j) {
  const weft__xnode *x = p->x;
  if (!weft__plan_batchable(x[i].node) || !weft__plan_batchable(x[j].node) || x[i].succ_begin == x[i].succ_end)
    return 0;
  for (uint32_t e = x[i].succ_begin; e < x[i].succ_end; e++)
    if (p->succ[e] != j) return 0;
  for (uint32_t e = x[j].pred_begin; e < x[j].pred_end; e++)
    if (p->pred[e] != i) return 0;
  return 1;
}

#endif
