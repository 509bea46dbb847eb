/* batches.c — chains of small elementwise GPU nodes launched as one kernel.
 *
 * A small elementwise kernel costs the device about a microsecond but the host a whole launch,
 * so a chain of them is bound by the launches (docs/cuda.md, "Batches"; the dispatch
 * benchmark, docs/benchmarks.md, "GPU: the CUDA backend"). Consecutive links of such a chain
 * on one stream are therefore batched: each node but the last adds its op to the batch
 * (WEFT__G_DEFER) and the last (WEFT__G_FLUSH) launches all of them as one kernel, so a chain
 * pays a launch per WEFT__PLAN_BATCH_MAX nodes. The members of a batch that wait for, free and
 * allocate nothing are *held*: they only write their op into the batch.
 *
 * A link i -> j qualifies when nothing but j can observe that i's op has not been launched yet
 * when i returns: both are elementwise ops over at most WEFT__PLAN_BATCH_NUMEL elements, j is
 * i's only successor and i j's only predecessor (the plan's final edges, claims included), j
 * continues i's stream, i records no event and notifies no CPU node, and j waits for no event
 * and frees nothing (a free would precede the ops still held). A batch's first node may wait
 * and free as any node; any node may allocate (the allocation is enqueued before the batch's
 * kernel). If a run stops before a batch's last node (a failure elsewhere, a cancel), the
 * backend launches what the batch holds at the run's drain, so every node reported done has
 * run. */
#include <string.h>

#include "sched/plan/planner.h"

/* An op a batch can hold: an elementwise op over at most WEFT__PLAN_BATCH_NUMEL elements. */
static int batchable(const weft_node *nd) {
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

/* Whether node j may follow node i in a batch, as far as the edges say: both batchable, j the
 * only successor of i and i the only predecessor of j (edges may repeat in the lists). */
static int edges_link(const weft__plan *p, uint32_t i, uint32_t j) {
  const weft__xnode *x = p->x;
  if (!batchable(x[i].node) || !batchable(x[j].node) || x[i].succ_begin == x[i].succ_end) return 0;
  for (uint32_t e = x[i].succ_begin; e < x[i].succ_end; e++)
    if (p->succ[e] != j) return 0;
  for (uint32_t e = x[j].pred_begin; e < x[j].pred_end; e++)
    if (p->pred[e] != i) return 0;
  return 1;
}

int weft__plan_batches(weft__plan *p) {
  weft__gpu_plan *gp = &p->gpu;
  weft__gnode *g = gp->node;
  if (!gp->target.batch || gp->nnodes < 2) return WEFT_OK;
  weft__vec found; /* weft__gbatch */
  weft__vec_init(&found, sizeof(weft__gbatch));
  for (uint32_t k = 0; k < p->n; k++) {
    uint32_t i = p->order[k];
    if (g[i].dev < 0 || g[i].batch != WEFT__NONE || !batchable(p->x[i].node)) continue;
    uint32_t len = 1, cur = i;
    while (len < WEFT__PLAN_BATCH_MAX) {
      const weft__gnode *c = &g[cur];
      if (p->x[cur].succ_begin == p->x[cur].succ_end || (c->flags & (WEFT__G_RECORD | WEFT__G_NOTIFY))) break;
      uint32_t j = p->succ[p->x[cur].succ_begin];
      const weft__gnode *y = &g[j];
      if (!edges_link(p, cur, j) || y->dev != c->dev || y->stream != c->stream || y->heir_of != cur ||
          y->start_dev != y->dev || y->start_stream != y->stream || y->wait_b != y->wait_e || y->free_b != y->free_e)
        break;
      cur = j;
      len++;
    }
    if (len < 2) continue;
    weft__gbatch bt = {i, cur, len};
    uint32_t index = (uint32_t)found.len;
    if (weft__vec_push(&found, &bt) != WEFT_OK) {
      weft__vec_fini(&found);
      return weft__oom("the plan's batches");
    }
    for (uint32_t m = i;; m = p->succ[p->x[m].succ_begin]) {
      g[m].batch = index;
      g[m].flags |= m == cur ? WEFT__G_FLUSH : WEFT__G_DEFER;
      if (m == cur) break;
    }
  }
  int rc = WEFT_OK;
  if (found.len > 0) {
    gp->batches = weft__malloc(found.len * sizeof(weft__gbatch));
    if (gp->batches == NULL) {
      rc = weft__oom("the plan's batches");
    } else {
      memcpy(gp->batches, found.data, found.len * sizeof(weft__gbatch));
      gp->nbatches = (uint32_t)found.len;
    }
  }
  weft__vec_fini(&found);
  return rc;
}
