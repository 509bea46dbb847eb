/* planner.h — what the files of the planner (src/sched/plan/) share while a plan is built: the
 * scratch of one build and the steps, in the order build.c calls them:
 *
 *   gpu.c       the GPU part, step by step over the graph's data edges:
 *   lanes.c       each GPU node's kind of lane and heir, then its stream (the policy's `place`)
 *   memory.c      temporaries, the window and its claims (edges appended to `extra`)
 *   sync.c        waits and records, turns, the split of a stream's last product, and packing
 *                 the per-node lists
 *   batches.c   after the plan's final edges exist (claims included)
 *
 * Everything here runs on one thread, at plan time; nothing is shared with a run. */
#ifndef WEFT_SCHED_PLANNER_H
#define WEFT_SCHED_PLANNER_H

#include "sched/plan/plan.h"

#define WEFT__NONE UINT32_MAX

typedef struct weft__pair {
  uint32_t owner, value;
} weft__pair;

/* The scratch of one build of a plan's GPU part. */
typedef struct weft__pbuild {
  weft__plan *p;
  weft_graph *g;
  const weft__gpu_target *t;
  weft__gnode *x;                      /* p->gpu.node */
  uint32_t n, nt;                      /* nodes, tensors */
  uint32_t *soff, *succ, *poff, *pred; /* the graph's edges, CSR (the claims are not among them) */
  uint32_t *pos;                       /* each node's position in p->order */
  double *cost, *height;               /* work of a node, and of its longest path to a sink */
  uint32_t *heir;                      /* the successor that continues its stream, or NONE */
  uint32_t *first, *last_final;        /* per tensor: allocating node, last reader of its final value */
  weft__vec waits, allocs, pfrees;     /* weft__pair (node, node or tensor) */
  weft__vec readers;                   /* weft__pair (tensor, reader of its final value) */
  weft__vec *extra;                    /* weft__edge: the claims' ordering edges */
  /* Per device, scratch of lanes.c and sync.c: the last node placed on each stream, the heir
   * each compute stream is kept for, the round-robin cursor. */
  uint32_t (*lane_tail)[WEFT__PLAN_MAX_STREAMS];
  uint32_t (*lane_kept)[WEFT__PLAN_MAX_COMPUTE];
  int *lane_rr;
} weft__pbuild;

static inline int weft__pbuild_is_gpu(const weft__pbuild *bd, uint32_t i) { return bd->x[i].dev >= 0; }

int weft__pair_push(weft__vec *v, uint32_t owner, uint32_t value);
/* Sorts pairs by owner (ties in any order). */
void weft__pairs_sort(weft__vec *v);

/* gpu.c: plans the GPU nodes of p for target t (p->gpu, which takes t's dev array), appending
 * the claims' edges to extra. */
int weft__plan_gpu(weft__plan *p, const weft__gpu_target *t, weft__vec *extra);

/* lanes.c */
/* Sets dev, start_dev, the copy lanes and the BIG / STAGED flags of GPU node i. */
void weft__lanes_classify(weft__pbuild *bd, uint32_t i);
/* Heights (longest work path to a sink) and each compute node's heir. */
void weft__lanes_heirs(weft__pbuild *bd);
/* Each compute node's stream: its heir's predecessor's, the main stream or round-robin. */
int weft__lanes_assign(weft__pbuild *bd);

/* heft.c: reorders p->order (and pos) by list scheduling on the devices' engines. */
int weft__heft_order(weft__pbuild *bd);

/* memory.c */
int weft__memory_temporaries(weft__pbuild *bd);
int weft__memory_window(weft__pbuild *bd);

/* sync.c */
int weft__sync_waits(weft__pbuild *bd);
int weft__sync_turns(weft__pbuild *bd);
void weft__sync_tail_split(weft__pbuild *bd);
/* Packs the waits, frees and allocations into p->gpu.lists and the nodes' ranges. */
int weft__sync_pack(weft__pbuild *bd);

/* batches.c: after the final edges; needs the waits and frees packed. */
int weft__plan_batches(weft__plan *p);

#endif
