/* sched.h — the scheduler's internal objects: the runtime, the plan of a graph, runs and the
 * worker pool. See dispatch.c for the execution protocol and pool.c for the workers.
 *
 * Lock order: run->lock is a leaf; pool->inject_lock is a leaf; rt->ops_lock is a leaf.
 * No lock is held while a kernel runs. */
#ifndef WEFT_SCHED_H
#define WEFT_SCHED_H

#include <stdatomic.h>

#include "backends/backend.h"
#include "sched/plan/plan.h"
#include "sched/report/timing.h"
#include "sched/thread.h"
#include "sched/wsq.h"
#include "weft/report.h"

typedef struct weft__pool weft__pool;
typedef struct weft__blockpool weft__blockpool;

/* blockpool.c */
int weft__blockpool_create(weft__blockpool **out);
void weft__blockpool_destroy(weft__blockpool *p);
const weft__mem *weft__blockpool_mem(weft__blockpool *p);
/* From now on, the idle workers of `workers` warm blocks ahead of demand (blockpool.c). */
void weft__blockpool_warm_with(weft__blockpool *p, weft__pool *workers);
/* Warms the blocks a runtime's first graph takes (blockpool.c) on every worker and the calling
 * thread, and returns when they are on the lists; the bytes primed (0 without workers). */
size_t weft__blockpool_prime(weft__blockpool *p);
/* The bytes of the blocks on the lists now. */
size_t weft__blockpool_cached(weft__blockpool *p);
/* The blocks on the list of `size`'s class now, and (warming not NULL) those being warmed. */
int weft__blockpool_listed(weft__blockpool *p, size_t size, int *warming);


/* A step of what happens before a run's first node (its "setup", shown by the statistics, the
 * trace and the timeline): the runtime's creation (reported with the runtime's first run),
 * auto placement, the plan, each tensor given storage or initialised, the backends' start of
 * the run. */
enum { WEFT__SETUP_RUNTIME, WEFT__SETUP_PLACE, WEFT__SETUP_PLAN, WEFT__SETUP_TENSOR, WEFT__SETUP_BACKENDS };
typedef struct weft__setup_rec {
  uint64_t t0, t1;    /* weft__clock_now() when recorded; ns from the setup's start in a run */
  uint64_t bytes;     /* TENSOR: its bytes; RUNTIME: what the step readied (the block pool) */
  uint32_t tensor;    /* TENSOR: its id in the run's graph (UINT32_MAX: `count` small ones) */
  uint32_t count;     /* TENSOR: tensors in the step */
  uint8_t kind;
  uint8_t pinned;     /* TENSOR: in pinned host memory */
  const char *what;   /* RUNTIME: what was made (a static string) */
} weft__setup_rec;

/* What auto placement takes of the machine (place.c), the same on every rank: under MPI rank 0's,
 * broadcast when the runtime is made, so that ranks on hosts of other sizes, or with other
 * shares of their host's GPUs, still place alike (their graphs are compared at each launch). */
typedef struct weft__place_facts {
  int gpus;         /* GPUs a rank */
  int lanes;        /* CPU workers a rank, as placement counts them */
  int per_host;     /* ranks a host (ranks fill hosts in order: rank r on host r / per_host) */
  int peer;         /* a rank's GPUs copy to each other over the peer link */
  int ipc;          /* the GPUs of ranks on one host copy to each other directly (CUDA IPC,
                       the transport's GPU copies): weft__gpu_direct */
  double gpu_bytes; /* a GPU's memory (0: no GPU) */
} weft__place_facts;

struct weft_runtime {
  weft_runtime_options opts;
  int cores;
  int intra;   /* the most workers (the caller included) that run one op's tiles */
  weft_blas_info blas; /* the BLAS loaded when the runtime was created (cpu_blas.c) */
  weft__backend backends[WEFT__MAX_BACKENDS];
  int nbackends;
  weft__backend *by_kind[2]; /* CPU, CUDA */
  weft__backend *pinned;     /* the backend whose host_alloc gives pinned memory, or NULL */
  weft__backend *remote;     /* the transport to the other ranks (MPI), or NULL */
  int rank, nranks;          /* this process's rank among nranks (0 of 1 without a transport) */
  int all_ranks;             /* 1: a simulated job whose every rank runs here (sim_ranks) */
  int rank_lanes;            /* ... the report's CPU lanes of each of its ranks (workers, messages) */
  int rank_gpus;             /* ... the GPUs of each of its ranks (the plan's slots: weft__gpu_slot) */
  int local_rank, local_ranks; /* among the ranks on this host (0 of 1 without a transport) */
  int *rank_host;            /* under MPI: each rank's host, as the transport found them (the
                                lowest rank on it); NULL: ranks fill hosts in order (per_host) */
  const struct weft__policy *policy; /* placement (src/sched/plan/policy.h) */
  weft__pool *pool;
  weft__blockpool *blocks;
  weft__spare spare; /* the pool's idle workers for its graphs' analyses (post NULL: none) */
  weft__mutex ops_lock;
  weft__vec ops; /* weft_op * */
  atomic_int graphs; /* live graphs, to catch destroy-before-graphs */
  atomic_int running; /* runs launched and not ended: a graph's follower gives way to them */
  struct weft__cost_model *place_model; /* auto placement's prices, made at its first use (ops_lock) */
  char *place_profile;                  /* ... from this profile (a path or a shipped name) */
  struct weft__learned *learned;        /* ... refined by measured node times (place.c; ops_lock) */
  weft__place_facts place_facts;        /* ... on this machine, agreed by the ranks (runtime.c) */
  struct weft__topology *topology; /* cores, caches, NUMA nodes; the workers' binding */
  weft__vec setup;      /* weft__setup_rec: the runtime's creation, given to its first run */
  atomic_int setup_told; /* 1 once a run has taken `setup` */
  atomic_size_t host_bytes, host_peak; /* host tensors' storage now, and at most (storage.c) */
};

/* Whether rank `rank`'s tensors and nodes are this process's: its own rank's, or every rank's
 * in a simulated job of several ranks (sim_ranks). */
static inline int weft__rank_here(const weft_runtime *rt, int rank) { return rank == rt->rank || rt->all_ranks; }

/* A GPU's index in this process's plan (its streams, lanes and memory): its own index, or in a
 * simulated job of several ranks rank r's GPU i is slot r * rank_gpus + i. */
static inline int weft__gpu_slot(const weft_runtime *rt, weft_device d) {
  return rt->all_ranks ? d.rank * rt->rank_gpus + d.index : d.index;
}

/* The GPU of a plan's slot (the inverse of weft__gpu_slot). */
static inline weft_device weft__gpu_of_slot(const weft_runtime *rt, int slot) {
  if (!rt->all_ranks || rt->rank_gpus <= 0) return weft_cuda(slot);
  return weft_on_rank(weft_cuda(slot % rt->rank_gpus), slot / rt->rank_gpus);
}

/* The ranks of a host in a simulated job of several (sim_ranks_per_host; all of them by
 * default). */
static inline int weft__sim_ranks_per_host(const weft_runtime_options *o) {
  int ranks = o->sim_ranks > 1 ? o->sim_ranks : 1;
  return o->sim_ranks_per_host > 0 && o->sim_ranks_per_host < ranks ? o->sim_ranks_per_host : ranks;
}

/* The ranks a host holds, a simulated job's or, under MPI, the launcher's count of this host's
 * (messages between hosts take the network). */
static inline int weft__ranks_per_host(const weft_runtime *rt) {
  if (rt->all_ranks) return weft__sim_ranks_per_host(&rt->opts);
  return rt->local_ranks > 0 ? rt->local_ranks : 1;
}

/* Whether ranks a and b share a host: as the transport found them, else ranks filling hosts in
 * order, per_host a host. */
static inline int weft__same_host(const weft_runtime *rt, int per_host, int a, int b) {
  if (rt->rank_host != NULL) return rt->rank_host[a] == rt->rank_host[b];
  return per_host > 0 && a / per_host == b / per_host;
}

/* Whether the job's ranks are other processes (a gather is then collective). */
static inline int weft__ranks_apart(const weft_runtime *rt) { return rt->nranks > 1 && !rt->all_ranks; }


/* place.c: auto placement. Where a node of a program with auto devices runs, and why. */
typedef struct weft__node_place {
  weft_device device, other; /* chosen, and the runner-up (== device when there was none) */
  double start_s, finish_s;  /* its estimated start and finish there */
  double other_finish_s;     /* its estimated finish on the runner-up */
  int auto_placed;           /* 1: the planner chose (a node created on auto) */
  int forced;                /* 1: its fixed device */
  int no_room;               /* 1: a GPU was left out for want of memory */
  double model_s;            /* the model's cost there, before the measured factor */
  double factor;             /* the measured factor applied (1: none yet) */
} weft__node_place;
typedef struct weft__placement weft__placement;
/* The graph to run for program g: g itself, or (with auto devices) its placed graph, rebuilt
 * when g changed. WEFT_OK or an error (no device can run a node; out of memory). */
int weft__place(weft_graph *g, weft_graph **out);
/* Loads rt->place_model from rt->place_profile if it is not loaded: WEFT_OK or the profile's
 * error (named). */
int weft__place_model_load(weft_runtime *rt);
/* Frees g's placement (its placed graph). */
void weft__placement_free(weft_graph *g);
/* Frees what the runtime learned of node times. */
void weft__learned_free(weft_runtime *rt);
/* Where program node `node` was placed (NULL when g has no current placement) and its node in
 * the placed graph. */
const weft__node_place *weft__placement_of(const weft_graph *g, uint32_t node, const weft_graph **pg, uint32_t *pnode);

/* The dispatcher's per-run state of a plan (plan.h holds the plan itself), allocated with it
 * and reused by every run of it. */
typedef struct weft__plan_exec {
  atomic_uchar *poison; /* per node: a predecessor failed or was skipped */
  weft_run *run;        /* the run in flight, if any */
  weft__ntime *times;   /* per node: start, end, lane of the latest run; NULL: timing off */
  weft__timing *timing; /* memory samples of the latest run (src/sched/report/timing.c) */
  uint64_t last_run;    /* id of the latest run launched from this plan */
} weft__plan_exec;

/* dispatch.c: p->exec, for a plan being built (its nodes and edges need not exist yet). */
int weft__exec_init(weft__plan *p);
void weft__exec_free(weft__plan *p);

struct weft_run {
  weft_graph *graph;   /* the graph that runs: the program's, or its placed graph */
  weft_graph *program; /* the graph the user launched */
  weft__plan *plan;
  _Alignas(64) atomic_uint remaining; /* nodes not yet completed */
  _Alignas(64) atomic_uint root_next; /* next unclaimed root */
  atomic_int cancel;
  atomic_int status; /* first failure, or WEFT_OK */
  atomic_int ended; /* the outcome is final (set before the callback): error, failed node */
  atomic_int done;
  atomic_uint drains; /* finish_run's pending asynchronous backends, plus one */
  weft_run_cb cb;
  void *cb_arg;
  weft__mutex lock;
  weft__cond cond;
  uint32_t failed_node; /* UINT32_MAX: none */
  char error[1024];
  uint64_t t_launch, t_end; /* weft__clock_now() base, as the node times */
  weft__vec setup;          /* weft__setup_rec of the launch, times from the setup's start */
  const weft__setup_rec *setup_runtime; /* the runtime's creation (rt->setup), on its first run: */
  size_t nsetup_runtime;    /* laid end to end from 0, before the launch's steps */
  uint64_t setup_ns;        /* the setup's start to t_launch */
  weft_pool_counts pool_launch, pool_end; /* the pool's counts at launch and at the end */
  uint64_t id;              /* unique in the process; plan->last_run while it is the latest */
  struct weft_run *next_rootrun; /* pool's list of runs with unclaimed roots */
};

/* topology.c */
typedef struct weft__topology weft__topology;
int weft__topology_load(int bind_option, int workers, weft__topology **out);
void weft__topology_free(weft__topology *tp);
/* Binds the calling thread, worker `worker`, to its core when the policy binds. */
void weft__topology_bind_worker(const weft__topology *tp, int worker);

/* storage.c */
/* Gives every tensor of g its storage and initial contents; with `setup` not NULL, records a
 * WEFT__SETUP_TENSOR step for each tensor it allocated or initialised. */
int weft__storage_materialise(weft_graph *g, weft__vec *setup);
int weft__storage_prepare(weft_tensor *t);
void weft__storage_release_all(weft_graph *g);
/* Releases one tensor's storage (it has none after). */
void weft__storage_release(weft_tensor *t);
/* A whole contiguous tensor's contents to or from a host buffer (its storage prepared),
 * whatever device it is on; no check of the graph's state. */
int weft__storage_copy_out(weft_tensor *t, void *dst);
int weft__storage_copy_in(weft_tensor *t, const void *src);
/* Splits partitioned tensor x: tile q (in row-major order) gets storage of its own on homes[q],
 * holding its part of x's contents (or its initialiser's values where x has none), and x
 * releases its storage (it lives on this rank's CPU, for the calls that take the whole). On an
 * error x is as it was. Joining is the reverse: x gets storage on this rank's CPU holding every
 * tile's contents, and the tiles are views of it again. (Auto placement: sched/plan/place.c.) */
int weft__storage_split(weft_tensor *x, const weft_device *homes);
int weft__storage_join(weft_tensor *x);

/* pool.c */
int weft__pool_create(weft_runtime *rt, int nworkers, weft__pool **out);
void weft__pool_destroy(weft__pool *p);
int weft__pool_size(const weft__pool *p);
/* Makes a run's roots available to the workers. */
void weft__pool_submit_roots(weft__pool *p, weft_run *run);
/* Queues a ready node on the calling worker's deque, or hands it to a searching worker (a
 * burst's third node on, pool.c), and returns 1: the caller then wakes workers for what it
 * queued (weft__pool_wake), once for a batch. *burst is the caller's count of the nodes it has
 * queued in one go (0 at first; -1 once no searcher was free, or for no hand-off). Where it
 * cannot queue (not a worker of p, or the deque cannot grow), injects the node (which wakes a
 * worker) and returns 0. */
int weft__pool_queue(weft__pool *p, weft__xnode *x, int *burst);
/* Hand-offs on or off (by default on where the pool has no more workers than the process has
 * cores; tests turn them on in any pool). Call while the pool is idle. */
void weft__pool_set_hand_offs(weft__pool *p, int on);
/* Wakes sleeping workers for k nodes just queued: k less the workers searching for work. */
void weft__pool_wake(weft__pool *p, int k);
/* Queues a ready node from any thread (the injection list) and wakes a worker. */
void weft__pool_inject(weft__pool *p, weft__xnode *x);
/* Runs fn(arg, t) for every t in [0, ntiles) on the calling thread and on up to `helpers` idle
 * workers of p, never more than ntiles - 1 (pool.c, "Parallel jobs"); returns when every tile
 * is done. The caller is one of
 * p's workers (a node's kernel), or a thread launching a run (the plan's node records). */
void weft__pool_parallel(weft__pool *p, uint32_t ntiles, uint32_t helpers, void (*fn)(void *arg, uint32_t tile),
                         void *arg);
/* Whether the calling thread is one of p's workers. */
int weft__pool_is_worker(const weft__pool *p);
/* Queues t for a worker that finds nothing else to run (after its deque, the injection list,
 * roots, steals and parallel jobs), and wakes one. Thread-safe: yes. */
void weft__pool_background(weft__pool *p, weft__bgtask *t);
/* Runs the queued background tasks on the calling thread until none is left. */
void weft__pool_run_background(weft__pool *p);
/* The pool's counts since it was created (steals, injections, sleeps, wake-ups), summed over
 * its workers; a run keeps the difference between its launch and its end. Thread-safe: yes
 * (each count is read atomically; the sum is not a snapshot). */
void weft__pool_counts(const weft__pool *p, weft_pool_counts *out);

/* dispatch.c: called by the pool */
void weft__dispatch_chain(weft__pool *p, int worker, weft__xnode *x);
/* Claims up to `max` roots of `run`; returns how many were stored in out. */
uint32_t weft__run_claim_roots(weft_run *run, weft__xnode **out, uint32_t max);
int weft__run_has_roots(weft_run *run);
/* Called by the pool when a worker is about to look elsewhere for work: publishes the
 * completions it has counted. */
void weft__dispatch_flush(void);

/* runtime.c */
weft__backend *weft__backend_for(weft_runtime *rt, weft_device d);
/* The backend that runs node n here: its device's, or the transport's for a node of another
 * rank or one that moves a tensor between ranks. */
weft__backend *weft__node_backend(weft_runtime *rt, const weft_node *n);

#endif
