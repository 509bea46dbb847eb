/* sim_internal.h — what the files of the simulator share: the simulated machine (the backend's
 * state), the per-plan model of a graph (each node's cost, stream and engine from the plan and
 * the cost model, the temporaries' lifetimes) and the results of its latest run in virtual
 * time.
 *
 * Files: sim_backend.c (the vtable: devices, storage, pricing the plan, launch, drain) and
 * des.c (the discrete-event simulation of a planned run). The plan is the planner's
 * (src/sched/plan/), the prices the cost model's (src/sched/cost/). */
#ifndef WEFT_SIM_INTERNAL_H
#define WEFT_SIM_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "backends/backend.h"
#include "sched/cost/cost.h"

/* The simulated machine. Read-only after init, so any thread may read it. */
typedef struct weft__sim {
  weft__cost_model cost; /* the profile; host_lanes: the runtime's cpu_workers option, else the
                            cores; blas_threads: of one CPU GEMM (all cores with one worker) */
  int compute;      /* 1: nodes also compute their results on the CPU (the oracle's mode) */
  int ranks;        /* the simulated job's ranks (sim_ranks; 1: one process), each with
                       cost.host_lanes workers of its own */
  int per_host;     /* ranks a host: a message between ranks of one host takes the profile's
                       `ranks` link, between hosts its `network` link */
  int rank_gpus;    /* GPUs of each rank (its share of its host's; the profile's with one rank) */
  int slots;        /* the plan's GPUs: ranks x rank_gpus (weft__gpu_slot) */
  int turns;        /* plans give turns, as the CUDA backend's do (not under launch blocking) */
  atomic_int batch; /* 1: GPU plans batch as the CUDA backend does (the table's set_batching;
                       the one field that changes after init) */
} weft__sim;

/* The model of one node, fixed when the plan is built. */
typedef struct weft__sim_node {
  double cost;       /* modelled duration on its engine or CPU worker, seconds */
  double cost_wide;  /* a CPU product or tile op: its duration on one worker while others are
                      * busy (the profile's wide GEMM rate); -1: none (des.c) */
  double submit;     /* GPU: host time to enqueue it on the first run (launch + events) */
  double submit_min; /* GPU: the least its enqueue takes with others ready (a product's
                      * gemm_f32_wide_s); 0: none */
  int32_t dev;       /* GPU index, or -1 for a CPU node */
  uint16_t stream;   /* GPU: index among the device's streams (see above) */
  uint8_t engine;    /* GPU: 0 the compute engine, 1 + k copy engine k */
  uint8_t is_copy;   /* a copy node (the report counts every copy node as a copy) */
  uint8_t msg;       /* a copy between ranks: a message on its sender's link, one at a time */
  uint8_t splits;    /* a CPU product the backend splits over idle workers (des.c, cpu_cost) */
  int32_t rank;      /* CPU nodes and messages: the rank whose workers (link) run it */
  uint32_t lane;     /* GPU: WEFT__LANE(...) of its stream */
  double share;      /* GPU compute: the part of the device it needs to run at full speed,
                      * (0, 1] (des.c shares the device in start order) */
  uint32_t batch_last; /* in a batch (src/sched/plan/batches.c): the batch's last node, which
                          launches it; UINT32_MAX: not in a batch */
  uint32_t batch_next; /* in a batch but not its last: the next node of the batch */
  uint32_t batch_first; /* in a batch: its first node */
} weft__sim_node;

/* Virtual-time results of the plan's latest run. */
typedef struct weft__sim_result {
  double makespan_s;      /* launch to the host seeing the last node end */
  double critical_path_s; /* longest chain of dependent nodes, by modelled cost */
  double copy_s;          /* summed duration of copies between devices */
  double hidden_copy_s;   /* the part of it during which a device it touches computed */
  size_t nodes_run;
  int replayed;           /* 1: the run was modelled as a replay (replay_node_s per node) */
  /* The first allocation that did not fit its device: the device (-1: none), the node that
   * asked (UINT32_MAX: the resident tensors alone do not fit), the bytes asked, the use it
   * would have made. */
  int oom_dev;
  uint32_t oom_node;
  uint64_t oom_asked, oom_total;
} weft__sim_result;

/* The simulator's state for one plan. */
typedef struct weft__sim_plan {
  uint32_t n;
  int ngpus;
  weft__sim_node *nodes;
  uint8_t *ran;          /* per node: launched in the current run (not skipped) */
  uint32_t runs;         /* runs launched from this plan */
  int all_gpu;           /* every node is a GPU node: re-runs are replays */
  /* Temporaries (WEFT__T_TEMP tensors on a GPU): bytes, device, and how many nodes use each;
   * per node, the temporaries it allocates (as their first writer) and the ones it uses. */
  uint32_t ntemps;
  uint64_t *temp_bytes;
  int32_t *temp_dev;
  uint32_t *temp_users;
  uint32_t *alloc_off, *alloc_ids; /* CSR over nodes */
  uint32_t *use_off, *use_ids;     /* CSR over nodes */
  uint32_t *claim_off, *claim_ids; /* CSR over nodes: dead temporaries it frees as it starts */
  uint64_t *resident;    /* per GPU: bytes of its tensors that are not temporaries */
  /* Results of the latest run. */
  double *start, *end;   /* per node, seconds from the launch; NaN for a node that did not run */
  uint32_t *cpu_lane;    /* per CPU node: the virtual worker it ran on */
  uint64_t *peak;        /* per GPU: peak bytes */
  weft__sim_result res;
} weft__sim_plan;

/* The backend's table; runtime.c registers it for both device kinds of a simulating runtime. */
extern const weft__backend_vtable weft__sim_backend;

/* The plan state of the sim backend `b` for plan `p`. */
weft__sim_plan *weft__sim_plan_of(const weft__backend *b, const weft__plan *p);

/* Runs the plan's latest run in virtual time: fills sp->start, end, cpu_lane, peak and res.
 * `run` (may be NULL) receives the node times and memory samples (weft__sched_node_time and
 * weft__sched_mem_sample, at `t0_ns` plus the virtual offsets). Returns WEFT_OK or
 * WEFT_ENOMEM. */
int weft__sim_simulate(const weft__sim *m, weft__sim_plan *sp, const weft__plan *p,
                       weft_run *run, uint64_t t0_ns);

#endif
