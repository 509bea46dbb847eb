/* profile.h — a machine profile: what the simulator knows of a machine, and how it is read.
 *
 * A profile describes one host (CPU cores and their rates) and N identical GPUs (GEMM rate as a
 * function of size, memory bandwidth, kernel, launch and event costs, streams and copy
 * engines), and the links between them (host-to-device, device-to-host, pinned and pageable,
 * device-to-device). The JSON format is documented in docs/simulator.md; `weft calibrate`
 * (src/tools/calibrate/calibrate.c) writes it and profiles/ ships measured or derived ones,
 * which are compiled into the library (profiles_data.c, generated) so that "h100" works
 * wherever weft is installed.
 *
 * Names: a `simulate` option that contains a '/' or ends in ".json" is a file; otherwise it is
 * a shipped name ("h100", "h200x2"), or a shipped family with a device count ("h200x8": the
 * h200 profile with the most GPUs, scaled to 8 identical GPUs with the same links).
 *
 * Rates are curves: points (n, value) sorted by n, read by interpolation in log-log space and
 * held flat beyond the end points. For GEMM, n is the cube root of m*n*k, so a 4000x4000x4000
 * product reads the curve at 4000. */
#ifndef WEFT_SIM_PROFILE_H
#define WEFT_SIM_PROFILE_H

#include <stddef.h>

#include "util/util.h"

#define WEFT__SIM_CURVE_MAX 32
#define WEFT__SIM_MAX_GPUS 4096
/* The linear-algebra ops with rate curves of their own, in the order of the profile's la
 * tables: potrf, trsm, syrk, trtri (their names in weft__sim_la_ops). */
#define WEFT__SIM_LA_OPS 4
extern const char *const weft__sim_la_ops[WEFT__SIM_LA_OPS];

typedef struct weft__sim_curve {
  int n;
  double x[WEFT__SIM_CURVE_MAX]; /* ascending, > 0 */
  double y[WEFT__SIM_CURVE_MAX]; /* > 0 */
} weft__sim_curve;

typedef struct weft__sim_link {
  double bandwidth; /* bytes per second */
  double latency_s; /* fixed cost of one transfer */
} weft__sim_link;

typedef struct weft__sim_host {
  char name[128];
  int cores;
  size_t memory_bytes;
  weft__sim_curve gemm[2];   /* flop/s of one BLAS thread of a product split over every
                              * worker (a chain of products); [0] f32, [1] f64 */
  weft__sim_curve gemm_wide[2]; /* optional (empty: not priced): flop/s of one worker while
                              * every worker runs a product of its own (many independent
                              * ones), which a tiled program's products run at */
  weft__sim_curve la_wide[WEFT__SIM_LA_OPS][2]; /* optional: potrf, trsm, syrk, trtri ([0] f32, [1] f64), flop/s of
                              * one worker while every worker runs its own, by tile side (as the
                              * GPU's la curves); empty: priced as wide products */
  double memory_bandwidth;   /* bytes/s one thread streams (elementwise ops, copies) */
  double fill_rate;          /* elements/s one thread fills with random values */
  double node_s;             /* the dispatcher's cost per CPU node */
  double wake_s;             /* optional (0: not priced): a sleeping thread's wake-up, which the
                              * caller of weft_run_wait pays when a run outlasts its watch
                              * (WEFT__WAIT_SPIN_NS) */
} weft__sim_host;

typedef struct weft__sim_gpu {
  char name[128];
  size_t memory_bytes;
  int cc_major, cc_minor;
  int multiprocessors;
  int compute_streams;       /* streams the plan spreads independent chains over */
  int copy_engines;          /* 1..3: H2D, D2H and peer copies share them in that order */
  weft__sim_curve gemm[2];   /* flop/s; [0] f32, [1] f64 */
  weft__sim_curve gemm_t[2]; /* optional: gemm with a transposed operand (a tiled Cholesky's
                              * updates) on random values, flop/s by side; empty: gemm[] */
  double memory_bandwidth;   /* bytes/s an elementwise kernel moves */
  double fill_bandwidth;     /* bytes/s a random fill writes */
  double kernel_s;           /* the shortest a kernel takes, back to back on a stream */
  double launch_s;           /* host time to enqueue one node */
  double gemm_launch_s;      /* ... one product (a cuBLAS call); 0: launch_s */
  double event_s;            /* host time per cross-stream edge (record + wait) */
  double notify_s;           /* from a node's end on the device to a host thread seeing it */
  double replay_node_s;      /* a replayed graph's executor time per node; 0: no replays */
  /* Optional figures (0 or an empty curve: not priced, or computed): */
  weft__sim_curve gemm_share; /* f32 products that do not fill the device: the part of it one
                               * occupies (K independent products over a chain of K) */
  weft__sim_curve la[WEFT__SIM_LA_OPS][2]; /* potrf, trsm, syrk, trtri ([0] f32, [1] f64): flop/s by tile side (the
                               * triangular tile's, the updated tile's for syrk). Empty: priced
                               * as products of the same flops, which they run far slower than */
  weft__sim_curve gemm_wide_s; /* ... the same products, in an eager run with many ready: the
                                * time each adds to the run (K independent products), the
                                * least the host takes to launch one among others */
  double temp_s;             /* host time per temporary of an eager run (allocation, free) */
  double replay_temp_s;      /* device time per temporary of a replayed graph (its memory
                              * nodes: the frees at the graph's end run one after another) */
  double launch_lanes;       /* launches the host makes at once on one device when several
                              * nodes are ready (workers enqueue on different streams in
                              * parallel); 0 or 1: one at a time */
  double batch_node_s;       /* host time per node of a batch (src/sched/plan/batches.c) in an
                              * eager run; 0 (with batch_op_s): batches are not modelled */
  double batch_op_s;         /* device time per op inside a batch's kernel */
  double run_s;              /* a run's fixed cost when it has GPU nodes, eager: from the
                              * launch call to the first node and from the device's last work
                              * to the caller's return (wake-ups, the drain) */
  double replay_run_s;       /* ... when the run is a replay */
} weft__sim_gpu;

typedef struct weft__sim_profile {
  char name[64];
  char source[1024];
  weft__sim_host host;
  int ngpus;
  weft__sim_gpu gpu;
  weft__sim_link h2d, d2h;                   /* pinned host memory */
  weft__sim_link h2d_pageable, d2h_pageable; /* pageable host memory */
  int peer_access;                           /* 0: device-to-device copies go through the host */
  weft__sim_link peer;
  /* Messages between ranks (a simulated job of several, sim_ranks), as weft moves them (its
   * progress threads included): between ranks of one host (MPI over shared memory), and
   * between hosts. Optional: absent, WEFT__SIM_RANKS_LINK and WEFT__SIM_NETWORK_LINK. */
  weft__sim_link ranks, network;
  int rank_links; /* bit 0: `ranks` was given, bit 1: `network` (written back only then) */
} weft__sim_profile;

/* The default links between ranks: one host's as weft measured them on nvidia-h200-x2 (32 cores,
 * Open MPI 4.1.6, 2026-11-26: a 256 MiB tensor at 7.97 GB/s, 1.29 us a message of a ping-pong),
 * and a 400 Gb/s network with a nominal 2 us (not measured: no run across hosts yet). */
#define WEFT__SIM_RANKS_LINK ((weft__sim_link){7.97e9, 1.29e-6})
#define WEFT__SIM_NETWORK_LINK ((weft__sim_link){5e10, 2e-6})

/* The link a message from rank `from` to rank `to` takes: `ranks` between ranks of one host
 * (ranks fill hosts in order, per_host a host), else the `network`. */
static inline const weft__sim_link *weft__sim_rank_link(const weft__sim_profile *p, int per_host, int from, int to) {
  return from / per_host == to / per_host ? &p->ranks : &p->network;
}

/* A profile shipped in the library: its name and JSON text (profiles_data.c). */
typedef struct weft__sim_shipped {
  const char *name;
  const char *json;
} weft__sim_shipped;
extern const weft__sim_shipped weft__sim_shipped_profiles[];
extern const int weft__sim_shipped_count;

/* Parses a profile from JSON text; `what` names it in messages. Returns WEFT_OK, WEFT_EPARSE
 * (syntax, with line and column), WEFT_EINVAL (a missing, unknown, repeated or out-of-range
 * field, named by its path, e.g. "gpu.gemm_f32_flops[2]") or WEFT_ENOMEM. */
int weft__sim_profile_parse(const char *json, size_t len, const char *what,
                            weft__sim_profile *out);

/* Resolves a `simulate` option (a path, a shipped name, or a shipped family with a count, see
 * above) into *out. Returns WEFT_OK, or WEFT_ENOENT with the shipped names listed, or the
 * error of reading or parsing the file. */
int weft__sim_profile_load(const char *spec, weft__sim_profile *out);

/* Writes `p` as JSON (the format weft__sim_profile_parse reads) to `path`. */
int weft__sim_profile_write(const weft__sim_profile *p, const char *path);

/* The curve's value at x (log-log interpolation, flat beyond the ends). */
double weft__sim_curve_at(const weft__sim_curve *c, double x);

#endif
