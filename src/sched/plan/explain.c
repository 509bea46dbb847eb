/* explain.c — where the plan runs a node and why, in words: weft_node_placement, which
 * `weft explain` prints. A GPU node is described from its plan (lanes.c, sync.c, batches.c); a
 * CPU node by the dispatcher's rules (src/sched/dispatch.c): roots go to any idle worker, a
 * worker that releases a node's last dependency runs that node next itself, and other ready
 * nodes are stolen. */
#include <stdio.h>
#include <string.h>

#include "sched/plan/planner.h"
#include "sched/plan/policy.h"
#include "sched/sched.h"

static void cpu_reason(const weft__plan *p, uint32_t i, weft_placement *out) {
  const weft__xnode *x = &p->x[i];
  uint32_t npred = x->pred_end - x->pred_begin;
  snprintf(out->lane, sizeof out->lane, "cpu workers");
  if (npred == 0)
    snprintf(out->why, sizeof out->why, "no dependencies: any idle worker takes it as soon as the run starts");
  else if (npred == 1)
    snprintf(out->why, sizeof out->why,
             "continues #%u's chain on the worker that ran it (an idle worker steals it when #%u "
             "readies several nodes at once)",
             p->pred[x->pred_begin], p->pred[x->pred_begin]);
  else
    snprintf(out->why, sizeof out->why, "joins %u dependencies: runs on the worker that finishes the last of them",
             npred);
}

/* A node the transport serves (backends/mpi): a message between this rank and another, or a
 * node of another rank. */
static void rank_reason(const weft_graph *g, const weft_node *n, weft_placement *out) {
  int me = g->rt->rank;
  snprintf(out->lane, sizeof out->lane, "mpi transport");
  if (n->kind == WEFT__OP_COPY && n->nargs == 2) {
    int from = n->args[0].t->device.rank, to = n->args[1].t->device.rank;
    if (from != to && (from == me || to == me)) {
      snprintf(out->why, sizeof out->why,
               "a message from rank %d to rank %d: this rank %s it when its inputs are ready, and the "
               "transport's progress thread completes it; the nodes after it start when it has arrived",
               from, to, from == me ? "sends" : "posts the receive for");
      return;
    }
  }
  snprintf(out->why, sizeof out->why, "runs on rank %d: nothing of it runs here", n->device.rank);
}

static void gpu_reason(const weft__plan *p, uint32_t i, weft_placement *out) {
  const weft__gpu_plan *gp = &p->gpu;
  const weft__gnode *x = &gp->node[i];
  int ncompute = gp->target.dev[x->dev].compute, s = x->stream;
  char dev[48]; /* the plan's GPU x->dev: a rank's in a simulated job of several (weft__gpu_slot) */
  weft_device_str(weft__gpu_of_slot(p->graph->rt, x->dev), dev, sizeof dev);
  if (s < ncompute)
    snprintf(out->lane, sizeof out->lane, "%s stream %d", dev, s);
  else
    snprintf(out->lane, sizeof out->lane, "%s copy %s", dev,
             s - ncompute == WEFT__COPY_H2D ? "h2d" : s - ncompute == WEFT__COPY_D2H ? "d2h" : "peer");
  int nw = (int)(x->wait_e - x->wait_b);
  char waits[64] = "";
  if (nw > 0) snprintf(waits, sizeof waits, "; waits for %d event%s", nw, nw == 1 ? "" : "s");
  switch (x->why) {
    case WEFT__WHY_CHAIN:
      snprintf(out->why, sizeof out->why, "continues the stream of node %u, whose longest path goes through it%s",
               x->heir_of, waits);
      break;
    case WEFT__WHY_BIG:
      snprintf(out->why, sizeof out->why, "fills the GPU on its own, so it runs in the plan's order (%s) on the main stream%s%s",
               p->graph->rt->policy == &weft__policy_heft ? "list scheduling: the critical path first" : "the program's",
               x->flags & WEFT__G_SPLIT ? "; the last there, its result going to the host: computed in two row "
                                          "halves so the copy of the first overlaps the second"
                                        : "",
               waits);
      break;
    case WEFT__WHY_SPREAD:
      snprintf(out->why, sizeof out->why,
               "starts a chain; small nodes are spread over the device's %d compute streams to run at once%s",
               ncompute, waits);
      break;
    case WEFT__WHY_H2D:
      snprintf(out->why, sizeof out->why, "host-to-device copy, on its own copy engine beside the kernels%s", waits);
      break;
    case WEFT__WHY_D2H:
      snprintf(out->why, sizeof out->why, "device-to-host copy into pinned memory, on its own copy engine%s", waits);
      break;
    case WEFT__WHY_PEER:
      snprintf(out->why, sizeof out->why, "device-to-device copy over peer access%s", waits);
      break;
    case WEFT__WHY_STAGED:
      snprintf(out->why, sizeof out->why, "device-to-device copy staged through pinned host memory (no peer access)%s",
               waits);
      break;
    default:
      snprintf(out->why, sizeof out->why, "copy within one device, on a compute stream%s", waits);
      break;
  }
  if (x->batch != WEFT__NONE) {
    const weft__gbatch *bt = &gp->batches[x->batch];
    size_t used = strlen(out->why);
    snprintf(out->why + used, sizeof out->why - used,
             "; batched: nodes %u..%u (%u small elementwise ops) run as one kernel", bt->first, bt->last, bt->len);
  }
}

/* A node of a program with auto devices: the placement's choice, then the plan of the placed
 * graph for the node that stands for it. */
static int auto_reason(weft_graph *g, const weft_node *n, weft_placement *out) {
  weft_graph *pg;
  int rc = weft__place(g, &pg);
  const weft_graph *pgc;
  uint32_t at;
  const weft__node_place *np = rc == WEFT_OK ? weft__placement_of(g, n->id, &pgc, &at) : NULL;
  if (rc != WEFT_OK) return rc;
  if (np == NULL) return weft__err(WEFT_ESTATE, "weft_node_placement: node %u has no placement", n->id);
  if ((rc = weft_node_placement(pg, weft_graph_node(pg, at), out)) != WEFT_OK) return rc;
  char d1[32], d2[32], tail[sizeof out->why];
  /* The lane's reason counts nodes of the placed graph, whose numbers include its transfers. */
  if (at != n->id)
    snprintf(tail, sizeof tail, "as placed node %u: %.240s", at, out->why);
  else
    snprintf(tail, sizeof tail, "%.300s", out->why);
  if (np->auto_placed && !np->forced && !weft_device_equal(np->device, np->other))
    snprintf(out->why, sizeof out->why, "auto: finishes first there (est. %.3g ms, against %.3g ms on %s); %.200s",
             np->finish_s * 1e3, np->other_finish_s * 1e3, weft_device_str(np->other, d2, sizeof d2), tail);
  else if (np->auto_placed)
    snprintf(out->why, sizeof out->why, "auto: %s (est. finish %.3g ms); %.200s",
             np->no_room ? "its operands do not fit a GPU's memory budget" : "the only device with a kernel for it",
             np->finish_s * 1e3, tail);
  (void)d1;
  return WEFT_OK;
}

int weft_node_placement(weft_graph *g, const weft_node *n, weft_placement *out) {
  if (g == NULL || n == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_node_placement: NULL argument");
  if (n->graph != g) return weft__err(WEFT_EINVAL, "weft_node_placement: node %u is not a node of this graph", n->id);
  int rc = weft__graph_check_idle(g, "weft_node_placement");
  if (rc != WEFT_OK) return rc;
  if (g->nauto > 0) return auto_reason(g, n, out);
  if ((rc = weft__plan_build(g)) != WEFT_OK) return rc;
  const weft__plan *p = g->plan;
  memset(out, 0, sizeof *out);
  out->device = n->device;
  for (uint32_t k = 0; k < p->n; k++)
    if (p->order[k] == n->id) out->order = k;
  if (g->rt->remote != NULL && p->x[n->id].backend == g->rt->remote)
    rank_reason(g, n, out);
  else if (p->gpu.node != NULL && p->gpu.node[n->id].dev >= 0)
    gpu_reason(p, n->id, out);
  else
    cpu_reason(p, n->id, out);
  if (p->x[n->id].backend->vt->flags & WEFT__BACKEND_SIMULATED) {
    size_t used = strlen(out->lane);
    snprintf(out->lane + used, sizeof out->lane - used, " (simulated)");
  }
  return WEFT_OK;
}
