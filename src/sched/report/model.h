/* model.h — the report's model of one finished run, and the analyses over it.
 *
 * The model is a snapshot: per node its interval (nanoseconds from the run's launch), lane,
 * device and whether it is a copy; the lanes; the dependency edges (CSR both ways). It is
 * built from a run by weft_run_stats_create (stats.c) or directly by the unit tests, which is
 * why the analyses take nothing but the model: the critical path, the busy time of each lane,
 * and the overlap accounting with its "why" classification can be checked on intervals made
 * up by hand.
 *
 * Overlap, as defined here (docs/observability.md says the same to users): a copy's hidden
 * time is the part of its interval during which at least one compute node (any node that is
 * not a copy) was running on a device the copy touches — its source's or its destination's.
 * hidden fraction = sum of hidden time / sum of copy time, over the copies that ran. Nodes with
 * host-side times only (`hostside`) take no part: their intervals say when the host enqueued
 * them, not when the device ran them.
 *
 * Why a copy was not hidden: for each copy with exposed time, one reason from the intervals
 * and the edges, tried in this order (the first that applies wins). "The copy's device" is
 * the device whose compute could have hidden it: its non-CPU end (both for a peer copy), or
 * the CPU for a copy between host tensors.
 *   PAGEABLE     a host<->device copy whose host side is pageable memory;
 *   CHAIN        every compute node on the copy's device is an ancestor or a descendant of
 *                the copy: a chain with nothing to overlap with;
 *   DEPENDENCY   the first compute on the copy's device after the first exposed instant
 *                depends on the copy directly (needs its result, or overwrites what it reads);
 *   HOST_SYNC    ... depends on it through a host (CPU) compute node, which had to wait for
 *                the copy before the device could go on: a host read forced a
 *                synchronisation at that node;
 *   DEPENDENCY   ... depends on it through other nodes;
 *   SERIALISED   the copy became ready well before it started (more than half its exposed
 *                time) and another copy held its lane meanwhile: copies serialised on one
 *                copy engine;
 *   NOTHING_LEFT no independent compute was left to run once the copy started (the tail of
 *                the program, or its head before the first compute could start);
 *   HOST_SYNC    independent compute came later but waited for a host node;
 *   IDLE         independent compute came later and waited for something else (named).
 *
 * Thread-safe: a model is used by one thread at a time; the analyses allocate scratch
 * through the allocation hook and fail with WEFT_ENOMEM (message set). */
#ifndef WEFT_REPORT_MODEL_H
#define WEFT_REPORT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "weft/report.h"
#include "weft/weft.h"

#define WEFT__REP_NONE UINT32_MAX

typedef struct weft__rnode {
  uint64_t start, end;      /* ns from the launch; end >= start */
  uint32_t lane;            /* index into rep->lanes, or WEFT__REP_NONE: did not run */
  uint8_t copy;             /* 1: a copy node */
  uint8_t pageable;         /* copy between host and device with a pageable host side */
  uint8_t critical;         /* filled by weft__rep_critical_path */
  uint8_t hostside;         /* a device node with only its host-side launch interval: left out
                               of the overlap accounting (WEFT__LANE_HOSTSIDE) */
  weft_device device;       /* where the node runs (a copy: its destination) */
  weft_device src, dst;     /* a copy's two ends (both = device for other nodes) */
  uint64_t bytes;           /* a copy's bytes */
} weft__rnode;

typedef struct weft__rlane {
  uint32_t code;            /* WEFT__LANE(...) */
  weft_device device;
  uint64_t busy;            /* filled by weft__rep_lanes: the union of its nodes' intervals */
  uint32_t nodes;
  uint8_t copies_only;      /* every node that ran on it is a copy */
} weft__rlane;

/* Per copy: filled by weft__rep_overlap. */
typedef struct weft__rcopy {
  uint32_t node;
  uint64_t duration, hidden;
  int why;                  /* weft_copy_why, WEFT_WHY_NONE when fully hidden */
  uint32_t culprit;         /* the node the reason names, or WEFT__REP_NONE */
  uint8_t hazard;           /* DEPENDENCY through a direct edge: its weft_hazard, else 0 */
  uint32_t waited_for;      /* IDLE: the predecessor the culprit waited for, if it ended after
                               the copy's first exposed instant; else WEFT__REP_NONE */
} weft__rcopy;

typedef struct weft__rep {
  uint32_t n;
  weft__rnode *node;
  uint32_t nlanes;
  weft__rlane *lanes;
  /* Edges, CSR both ways: the predecessors of i are pred[pred_off[i] .. pred_off[i+1]). */
  size_t m;
  uint32_t *pred_off, *pred, *succ_off, *succ;
  uint8_t *succ_hazard;     /* weft_hazard of succ[k] (0 unknown) */
  uint64_t wall;            /* launch to the end of the run */
  /* Results. */
  uint64_t span_begin, span_end; /* first start, last end over the nodes that ran */
  uint64_t critical_length;
  uint32_t *critical;       /* the critical path's nodes in order */
  uint32_t ncritical;
  weft__rcopy *copies;
  uint32_t ncopies;
  uint64_t copy_total, copy_hidden;
  /* The CPU nodes (on a worker's lane) with a predecessor that ran: how long each waited from
   * ready (its last predecessor's end) to its start, over them; nearest-rank percentiles. */
  uint32_t nwaits;
  uint64_t wait_p50, wait_p99, wait_max;
} weft__rep;

/* Allocates a model for n nodes, `nlanes` lanes and m edges (arrays zeroed; every node's
 * lane WEFT__REP_NONE). Returns NULL (message set) when out of memory. */
weft__rep *weft__rep_new(uint32_t n, uint32_t nlanes, size_t m);
void weft__rep_free(weft__rep *r);

/* Fills succ/succ_off/succ_hazard from pred/pred_off (which the builder fills), or the
 * reverse when `from_succ` is set. */
int weft__rep_mirror_edges(weft__rep *r, int from_succ);

/* The analyses, in this order (each uses the ones before). */
void weft__rep_lanes(weft__rep *r);           /* span, and each lane's busy time */
int weft__rep_critical_path(weft__rep *r);     /* longest path by duration over the edges */
int weft__rep_overlap(weft__rep *r);           /* hidden copy time and the reasons */
int weft__rep_ready_waits(weft__rep *r);       /* CPU nodes' waits from ready to start */
/* All four. */
int weft__rep_analyse(weft__rep *r);

/* The nodes that ran, by lane and then start: lane l's are order[begin[l] .. begin[l + 1]).
 * Both arrays come from the allocation hook (weft__free them). WEFT_OK or WEFT_ENOMEM. */
int weft__rep_lane_order(const weft__rep *r, uint32_t **order, uint32_t **begin);

/* Measure of [s, e) covered by the union of two sorted lists of disjoint intervals
 * (a[2k], a[2k+1]) — exposed for the unit tests. */
uint64_t weft__rep_covered(const uint64_t *a, size_t na, const uint64_t *b, size_t nb,
                           uint64_t s, uint64_t e);

#endif
