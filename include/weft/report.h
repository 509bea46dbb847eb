/* report.h — what a run did: statistics, the overlap of copies with compute and why it fell
 * short, a Chrome trace, an SVG timeline, progress while a run is in flight, and the clock
 * they are measured on.
 *
 * Every node of a run is timed (unless the runtime was created with WEFT_RUNTIME_NO_TIMING):
 * its start and end on its lane — a CPU worker, or a stream of a device — on one clock
 * (weft_clock_ns, below). After a run has finished, weft_run_stats_create takes a snapshot of
 * those times and analyses it:
 *
 *   weft_run *run;
 *   weft_run_stats *st;
 *   CHECK(weft_graph_launch(g, &run));
 *   CHECK(weft_run_wait(run));
 *   CHECK(weft_run_stats_create(run, &st));   // before the graph is launched again
 *   weft_run_stats_print(st, stdout);          // the text summary
 *   CHECK(weft_run_stats_save(st, WEFT_REPORT_TRACE, "out.json"));  // opens in Perfetto
 *   CHECK(weft_run_stats_save(st, WEFT_REPORT_SVG, "out.svg"));
 *   weft_run_stats_destroy(st);
 *
 * The snapshot needs the run's graph (for names) until it is destroyed; it does not need the
 * run. Definitions (docs/observability.md has them with examples):
 *   makespan        from the first node's start to the last node's end;
 *   critical path   the longest chain of dependent nodes, by their measured durations;
 *   busy time       of a lane: the time during which one of its nodes was running;
 *   hidden copy     the part of a copy's interval during which some compute node (any node that
 *                   is not a copy) ran on a device the copy touches (its source or its
 *                   destination); the hidden fraction is hidden copy time / copy time. */
#ifndef WEFT_REPORT_H
#define WEFT_REPORT_H

#include <stdio.h>

#include "weft/weft.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_run_stats weft_run_stats;

/* Why (part of) a copy was not hidden behind compute. */
typedef enum weft_copy_why {
  WEFT_WHY_NONE = 0,     /* fully hidden */
  WEFT_WHY_PAGEABLE,     /* host side in pageable memory: the copy cannot run asynchronously */
  WEFT_WHY_DEPENDENCY,   /* the device's next compute needed this copy (its result, or to
                            overwrite what it reads) */
  WEFT_WHY_HOST_SYNC,    /* a host node read data and the device waited for it */
  WEFT_WHY_CHAIN,        /* a chain: every compute node depends on the copy or feeds it */
  WEFT_WHY_SERIALISED,   /* it queued behind other copies on one copy engine */
  WEFT_WHY_NOTHING_LEFT, /* no independent compute was left to run beside it */
  WEFT_WHY_IDLE,         /* independent compute came later; it waited for something else */
  WEFT_WHY_COUNT
} weft_copy_why;

/* A short name of the reason ("pageable", "serialised", ...), as in the JSON; "unknown" for a
 * value out of range. Thread-safe: yes. */
WEFT_API const char *weft_copy_why_name(int why);

/* Takes a snapshot of a finished run's timing and analyses it. Fails with WEFT_EINVAL for a
 * NULL argument, WEFT_EAGAIN while the run is in flight, WEFT_ESTATE when the graph was
 * launched again (or changed and re-planned) since this run, WEFT_ENOTSUP when timing is off
 * (WEFT_RUNTIME_NO_TIMING or WEFT_TIMING=0), WEFT_ENOMEM. Works for failed and cancelled runs
 * (nodes that did not run are left out). The graph must outlive the snapshot.
 * Thread-safe: yes, with respect to other runs; not concurrently with a launch or a change of
 * the same graph. */
WEFT_NODISCARD WEFT_API int weft_run_stats_create(weft_run *run, weft_run_stats **out);
/* Frees the snapshot. NULL is a no-op. Thread-safe: no (with respect to the snapshot). */
WEFT_API void weft_run_stats_destroy(weft_run_stats *st);

/* The scalar statistics. Fields are only ever appended. */
typedef struct weft_stats_summary {
  double wall_s;               /* launch to the end of the run */
  double makespan_s;           /* first node start to last node end */
  double critical_path_s;      /* sum of the durations along the critical path */
  double copy_s;               /* time spent in copies, summed over copies */
  double hidden_copy_s;        /* the part of copy_s hidden behind compute */
  double hidden_copy_fraction; /* hidden_copy_s / copy_s; -1 when no copy ran */
  size_t nodes;                /* nodes of the graph */
  size_t nodes_run;            /* nodes that ran in this run */
  size_t edges;                /* dependency edges */
  size_t events;               /* edges between nodes on different lanes (each needs an event
                                  or a host notification) */
  size_t copies;               /* copy nodes */
  size_t inserted_copies;      /* copies weft inserted for inputs on another device */
  size_t critical_path_nodes;
  size_t lanes;
  size_t mem_samples_dropped;  /* memory samples over the per-run bound */
  size_t host_timed_nodes;     /* device nodes whose backend reported no device times: their
                                  intervals are the host's launch, on a "host-side" lane, and
                                  they are left out of the copy accounting */
  uint64_t bytes_h2d, bytes_d2h; /* bytes the copies that ran moved: host to device, device to
                                    host, */
  uint64_t bytes_peer, bytes_local; /* between two GPUs, and within one device */
  uint64_t bytes_ranks;        /* sent to or received from other ranks by this one (MPI); a
                                  simulated job's: every message between its ranks */
  /* The run's setup: what happened between the launch call and the launch of its first node
   * (auto placement, the plan, tensors given storage and initial contents, the backends' start
   * of the run) and, in a runtime's first run, the runtime's creation (device contexts, library
   * handles, the worker pool). weft_run_stats_setup lists its steps. */
  double setup_s;              /* all of it: the run's first node starts setup_s after it begins */
  double setup_runtime_s;      /* the runtime's creation (0 but in its first run) */
  double setup_tensors_s;      /* tensors given storage or initialised */
  size_t setup_tensors;        /* ... how many */
  uint64_t setup_bytes;        /* ... their bytes */
  /* How long CPU nodes waited for a worker: from ready (the end of the last of their
   * predecessors) to their start, over the CPU nodes with a predecessor that ran (roots are left
   * out); nearest-rank percentiles. A node its predecessor's worker runs next waits 0 (the
   * dispatcher's work between two nodes counts in the second's duration); a wait is a queue, a
   * steal or a sleeping worker's wake-up. Long waits with busy workers mean too little
   * parallelism; with idle ones, slow hand-offs. */
  double ready_wait_p50_s, ready_wait_p99_s, ready_wait_max_s;
  size_t ready_wait_nodes;
} weft_stats_summary;

/* Fills *out. Thread-safe: yes (the snapshot is read-only). */
WEFT_API void weft_run_stats_summary(const weft_run_stats *st, weft_stats_summary *out);

/* A step of a run's setup (weft_stats_summary.setup_s), in the order they happened. */
typedef struct weft_setup_step {
  const char *kind;       /* "runtime", "place", "plan", "tensor" or "backends" */
  const char *what;       /* runtime: what was made; tensor: the tensor's name (NULL for the
                             step of the small ones); else NULL */
  size_t count;           /* tensor: the tensors of the step: 1, or all those under 64 KiB
                             together (their step comes after the larger ones') */
  weft_device device;     /* tensor: its device (the CPU for the small ones) */
  uint64_t bytes;         /* tensor: its bytes, or theirs; runtime: the memory the step
                             readied, where it has some (the block pool's), else 0 */
  int pinned;             /* tensor: 1 if in pinned host memory (copies to GPUs are asynchronous) */
  double start_s, end_s;  /* from the setup's start (the runtime's steps laid end to end before
                             the launch call) */
} weft_setup_step;

/* The run's setup steps: *steps points into the snapshot (valid until it is destroyed); returns
 * their count. Thread-safe: yes. */
WEFT_API size_t weft_run_stats_setup(const weft_run_stats *st, const weft_setup_step **steps);

/* What the CPU worker pool did from a run's launch to its end: counted pool-wide, so runs in
 * flight at the same time share their counts. These say where a short run's time went: a
 * node that waits for a sleeping worker pays a wake-up; steals are how ready nodes spread. */
typedef struct weft_pool_counts {
  uint64_t steals;   /* ready nodes a worker took from another worker's queue */
  uint64_t injected; /* ready nodes queued from outside the workers (GPU completions, reports) */
  uint64_t sleeps;   /* times a worker went to sleep for want of work */
  uint64_t wakeups;  /* times a sleeping worker was signalled */
  uint64_t handoffs; /* ready nodes a worker handed to a searching worker (a burst's, after its
                      * first two: the rest of a burst is not queued to be stolen); one another
                      * worker took out of the searcher's hands counts too */
} weft_pool_counts;

/* Fills *out with the run's pool counts. Thread-safe: yes. */
WEFT_API void weft_run_stats_pool(const weft_run_stats *st, weft_pool_counts *out);

/* One lane: a CPU worker or a stream of a device. */
typedef struct weft_lane_stats {
  char name[48];       /* "cpu worker 0", "cuda:0 compute 0", "cuda:0 copy d2h 0" */
  const char *kind;    /* "cpu", "compute", "copy" (a device stream that ran only copies), or
                          "host-side" (device nodes with host-side times only) */
  weft_device device;
  double busy_s;       /* time during which one of its nodes ran */
  double utilisation;  /* busy_s / makespan_s (0 when the makespan is 0) */
  size_t nodes;        /* nodes that ran on it */
} weft_lane_stats;

/* In a run across ranks (MPI): the bytes this rank sent to rank `peer` and received from it
 * (the messages of the copies between them). In a simulated job of several ranks (sim_ranks),
 * whose every rank runs in this process: the bytes rank `peer` sent to and received from all
 * the others. WEFT_EINVAL for a rank the run does not have. */
WEFT_NODISCARD WEFT_API int weft_run_stats_rank_bytes(const weft_run_stats *st, int peer, uint64_t *sent,
                                                      uint64_t *received);

/* Lanes, CPU workers first (all of the runtime's, including idle ones), then device lanes
 * by device and role. The snapshot is read-only: every accessor below is thread-safe. */
WEFT_API size_t weft_run_stats_lane_count(const weft_run_stats *st);
/* Fills *out with lane i; WEFT_EINVAL when i is out of range. Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_run_stats_lane(const weft_run_stats *st, size_t i,
                                                weft_lane_stats *out);

/* Stores up to `cap` nodes of the critical path, in order, in out and returns its length in
 * nodes (which may exceed cap). Thread-safe: yes. */
WEFT_API size_t weft_run_stats_critical_path(const weft_run_stats *st, weft_node **out,
                                             size_t cap);

/* One node's interval. */
typedef struct weft_node_timing {
  int ran;         /* 0: the node did not run (skipped after a failure, or cancelled) */
  double start_s;  /* from the run's launch */
  double end_s;
  long lane;       /* index for weft_run_stats_lane, or -1 */
  int critical;    /* on the critical path */
} weft_node_timing;

/* Fills *out for node `node_id` (weft_node_id); WEFT_EINVAL when out of range.
 * Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_run_stats_node(const weft_run_stats *st, size_t node_id,
                                                weft_node_timing *out);

/* Memory of one device over the run. */
typedef struct weft_device_memory {
  weft_device device;
  uint64_t peak_bytes;
  uint64_t current_bytes; /* at the end of the run */
  const char *source;     /* "allocator": reported by the device's backend during the run;
                             "tensors": the bytes of the tensors with storage on the device */
} weft_device_memory;

/* Devices with memory to report (the CPU first, then GPUs by index), and device i's memory
 * (WEFT_EINVAL when out of range). Thread-safe: yes. */
WEFT_API size_t weft_run_stats_device_count(const weft_run_stats *st);
WEFT_NODISCARD WEFT_API int weft_run_stats_device(const weft_run_stats *st, size_t i,
                                                  weft_device_memory *out);

/* Copy time not hidden behind compute, grouped by reason, the largest first. */
typedef struct weft_copy_diagnostic {
  int why;           /* weft_copy_why */
  double exposed_s;  /* copy time not hidden, over the copies of this reason */
  size_t copies;
  char message[320]; /* in the user's terms, naming the copy with the most exposed time and,
                        where there is one, the node or copy that caused it */
} weft_copy_diagnostic;

/* The diagnostics, and diagnostic i (WEFT_EINVAL when out of range). Thread-safe: yes. */
WEFT_API size_t weft_run_stats_diagnostic_count(const weft_run_stats *st);
WEFT_NODISCARD WEFT_API int weft_run_stats_diagnostic(const weft_run_stats *st, size_t i,
                                                      weft_copy_diagnostic *out);

/* ---- outputs -------------------------------------------------------------------------- */

typedef enum weft_report_format {
  WEFT_REPORT_TEXT = 0,  /* the short summary `weft run` prints */
  WEFT_REPORT_JSON = 1,  /* the statistics as one JSON object (`weft run --json`) */
  WEFT_REPORT_TRACE = 2, /* Chrome trace-event JSON: opens in Perfetto and chrome://tracing */
  WEFT_REPORT_SVG = 3,   /* a self-contained SVG timeline */
} weft_report_format;

/* Writes the snapshot in `format` to f. The SVG is 1600 pixels wide. Returns WEFT_OK, or
 * WEFT_EIO when writing fails, WEFT_EINVAL for a bad format. Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_run_stats_write(const weft_run_stats *st, int format, FILE *f);
/* Same, to a file created (or truncated) at `path`; the error names the path and the reason.
 * Thread-safe: yes (for different paths). */
WEFT_NODISCARD WEFT_API int weft_run_stats_save(const weft_run_stats *st, int format,
                                                const char *path);
/* In a run across ranks (MPI), collective: every rank calls it with its statistics of the same
 * run. WEFT_REPORT_TRACE: rank 0 writes one trace with every rank's lanes (processes named
 * "rank R: cpu", pids from 1000 R; on one host the ranks' times share rank 0's clock); the
 * other formats: rank 0 writes its own. In one process, weft_run_stats_save. */
WEFT_NODISCARD WEFT_API int weft_run_stats_save_all(const weft_run_stats *st, int format, const char *path);
/* The text summary (WEFT_REPORT_TEXT) to f; returns what weft_run_stats_write returns.
 * Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_run_stats_print(const weft_run_stats *st, FILE *f);

/* ---- progress ------------------------------------------------------------------------- */

/* Nodes of the run that have finished (or were skipped) so far, and the run's node count.
 * Reads the timing records, so it is exact at any moment and costs the run nothing; with
 * timing off it counts what the workers have published so far. Must not race with a launch
 * of the same graph or its destruction. Thread-safe: yes, otherwise. */
WEFT_NODISCARD WEFT_API int weft_run_progress(const weft_run *run, size_t *done, size_t *total);

/* Waits for the run like weft_run_wait, and meanwhile draws a progress bar on `tty` when it is
 * a terminal (nothing when it is NULL or not a terminal): "run 3/10 [=====     ] 52% 5200/10000
 * nodes 1.3 s". `index` and `count` number the run among repeats (0 and 1 for a single run).
 * The bar appears only after 200 ms, so short runs draw nothing, and is erased at the end.
 * Returns the run's status, as weft_run_wait, or WEFT_EINVAL for a NULL run or an index not in
 * [0, count). Thread-safe: as weft_run_wait; draw on one terminal from one thread. */
WEFT_NODISCARD WEFT_API int weft_run_wait_progress(weft_run *run, FILE *tty, int index,
                                                   int count);

/* ---- the clock ----------------------------------------------------------------------------- */

/* Returns the time now in nanoseconds on weft's clock: the time base of node times, traces
 * and statistics. It is monotonic and on the CLOCK_MONOTONIC epoch (read from the invariant
 * TSC where the CPU has one, calibrated against CLOCK_MONOTONIC); the first call in a process
 * that has not timed a run yet calibrates it, which takes about 2 ms. Use it to measure
 * intervals that are to be set against weft's own times. Thread-safe: yes. */
WEFT_API uint64_t weft_clock_ns(void);

/* Stores in *out when `run` ended, on weft_clock_ns's clock: the moment its last node was done
 * and weft recorded the end, before weft_run_wait's callers are woken and before the run's
 * callback. weft_clock_ns() - *out, read when weft_run_wait returns, is how late the caller
 * learnt of the end. Recorded with timing on or off. Fails with WEFT_EINVAL for a NULL
 * argument, WEFT_EAGAIN while the run is in flight (it answers inside the run's callback).
 * Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_run_end_ns(const weft_run *run, uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_REPORT_H */
