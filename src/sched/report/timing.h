/* timing.h — the per-node times of a run, owned by the plan and written by the dispatcher and
 * the backends (the contract for backends is in backends/backend.h, "Node timing").
 *
 * Layout: one weft__ntime per node in plan->times (24 bytes: start, end, lane), allocated with
 * the plan's other arrays from p->mem, or NULL when timing is off. The fields are relaxed
 * atomics: on x86-64 and AArch64 a relaxed store is a plain store, so the hot path pays only
 * for the clock read (one a CPU node: dispatch.c, run_node); the atomics keep a progress poll
 * that reads them while workers write them free of data races. A run's records are complete
 * when the run is done (the completion count that ends the run orders every record before it).
 *
 * A record belongs to the current run when its end is at or after the run's launch time:
 * records are never cleared between runs, because ends only grow (the clock is monotonic and
 * a run launches after the previous one finished). A node that is still running, or that was
 * enqueued and has not completed, keeps the previous run's end (or 0), which is how the
 * progress poll tells done from not done without a counter on the hot path. */
#ifndef WEFT_REPORT_TIMING_H
#define WEFT_REPORT_TIMING_H

#include <stdatomic.h>
#include <stdint.h>

#include "util/clock.h"
#include "sched/thread.h"
#include "weft/weft.h"

struct weft__plan;

typedef struct weft__ntime {
  _Atomic uint64_t start, end; /* ns, weft__clock_now() base */
  _Atomic uint32_t lane;       /* WEFT__LANE(...) or WEFT__LANE_NONE */
  uint32_t reserved;
} weft__ntime;

/* One report of a backend's device memory in use. */
typedef struct weft__mem_sample {
  uint64_t t_ns, bytes;
  weft_device device;
} weft__mem_sample;


/* The plan's timing state besides the per-node records. */
typedef struct weft__timing {
  weft__mutex lock; /* guards the samples; a leaf */
  weft__mem_sample *samples;
  size_t nsamples, cap, dropped;
} weft__timing;

/* Allocates p->times and p->timing when timing is on for p's runtime (the default; off with
 * the runtime flag WEFT_RUNTIME_NO_TIMING or the environment variable WEFT_TIMING=0), and
 * calibrates the clock on first use. Returns WEFT_OK or WEFT_ENOMEM (message set). */
int weft__timing_plan_init(struct weft__plan *p);
/* Clears the records of nodes [lo, hi): the plan's build does, a tile of nodes at a time on the
 * pool's workers (a plan's records are cleared once; runs only overwrite them). */
void weft__timing_plan_clear(struct weft__plan *p, uint32_t lo, uint32_t hi);
/* Frees what weft__timing_plan_init allocated. */
void weft__timing_plan_free(struct weft__plan *p);
/* Called by launch before the run starts: forgets the previous run's memory samples, refines
 * the clock and returns the new run's id (unique in the process, never 0), which it also
 * stores as p->last_run. */
uint64_t weft__timing_run_begin(struct weft__plan *p);
/* Marks node `index` as not run in this run (skipped or cancelled). */
void weft__timing_skip(struct weft__plan *p, uint32_t index);
/* Called when a node launched with WEFT__PENDING completes: stamps its end with the time now
 * unless its backend reported the node's times. */
void weft__timing_complete(struct weft__plan *p, uint32_t index);

#endif
