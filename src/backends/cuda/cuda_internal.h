/* cuda_internal.h — what the files of the CUDA backend share: the per-device objects (streams,
 * cuBLAS handles, the memory pool, the completion thread), the per-plan state (each node's
 * stream, the events it records and waits for, the temporaries it allocates and frees), and
 * the calls between the files. Only src/backends/cuda includes CUDA headers.
 *
 *   cuda_backend.c   devices, streams, pools, storage hooks, pinned host pool, statistics
 *   cuda_plan.c      the CUDA objects of a plan (events, staging buffers, batches), gpu_target
 *   cuda_launch.c    enqueueing one node (kernels, copies, waits, allocations, frees)
 *   cuda_complete.c  the completion threads and run_drain
 *   cuda_replay.c    capturing a plan into a CUDA graph and replaying it
 *   cuda_timing.c    device-side node times from CUDA events, and the memory track
 *   cuda_ipc.c       GPU memory shared with the host's other processes (the transport's copies)
 *   cuda_kernels.cu  elementwise, reduction, fill and bias kernels
 *
 * Lock order: a stream's lock is taken alone (never two at once); a device's queue lock and
 * the pinned pool's lock are leaves. */
#ifndef WEFT_CUDA_INTERNAL_H
#define WEFT_CUDA_INTERNAL_H

#include <cublas_v2.h>
/* cusolverDn.h declares a function without a prototype (cusolverGetVersion's neighbours). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cusolverDn.h>
#pragma GCC diagnostic pop
#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"
#include "backends/backend.h"
#include "util/clock.h"
#include "sched/thread.h"

/* Streams of a device, by index: compute streams first, then the copy streams. */
enum {
  CU_MAX_COMPUTE = WEFT__PLAN_MAX_COMPUTE,
  CU_DEFAULT_COMPUTE = 4,
  CU_MAX_DEVICES = 16,
};

/* cuBLAS workspaces: stream 0 (large products) gets PyTorch's Hopper default, the other
 * compute streams less. A replayed graph's stream gets the size of the stream it mirrors, so
 * cuBLAS picks the same algorithms and replays give the eager runs' bits. */
#define WEFT__CU_MAIN_WORKSPACE ((size_t)32 << 20)
#define WEFT__CU_SIDE_WORKSPACE ((size_t)4 << 20)
#define WEFT__CU_WORKSPACE(stream) ((stream) == 0 ? WEFT__CU_MAIN_WORKSPACE : WEFT__CU_SIDE_WORKSPACE)

enum cu_stream_kind { CU_S_COMPUTE = 0, CU_S_H2D, CU_S_D2H, CU_S_PEER };

struct cu_defer;

typedef struct cu_stream {
  cudaStream_t s;
  cublasHandle_t blas;   /* compute streams only */
  /* cuSOLVER (potrf), made at the stream's first potrf or trtri: its handle and parameters,
   * its info word on the device (trtri's too), a host workspace (LAPACK's potrf asks for none
   * today). */
  cusolverDnHandle_t solver;
  cusolverDnParams_t solver_params;
  int *solver_info;
  void *solver_host;
  size_t solver_host_bytes;
  void *workspace;       /* cuBLAS workspace of `blas` */
  double *scratch;       /* partial sums of reductions run on this stream */
  atomic_int lock;       /* serialises enqueueing onto the stream and the use of `blas` */
  _Atomic(struct cu_defer *) pending; /* nodes left to the lock's holder (cuda_launch.c) */
  int kind;              /* cu_stream_kind */
} cu_stream;

/* A node left to the thread that holds its stream (cuda_launch.c, "Combining"): one a node of a
 * plan, in cu_plan.defer; `status` and `msg` (heap, on failure) are its issue's outcome. */
typedef struct cu_defer {
  struct cu_defer *next;
  struct cu_plan *cp;
  weft_run *run;
  uint32_t index;
  int status;
  char *msg;
} cu_defer;

/* A stream's lock is held for a few CUDA calls (microseconds). A worker that finds a compute
 * or copy stream taken leaves its node to the holder (cuda_launch.c, "Combining") and does not
 * wait; the few other takers (a staged copy, a replay's launch, a drain, the sync and join
 * streams) spin briefly, then yield the core, rather than sleep in the kernel (a futex wake-up
 * costs more than the whole enqueue). Acquire on taking, release on giving back, so what one
 * enqueue wrote is seen by the next. */
static inline void weft__cu_lock(cu_stream *s) {
  for (int spins = 0;; spins++) {
    if (!atomic_load_explicit(&s->lock, memory_order_relaxed) &&
        !atomic_exchange_explicit(&s->lock, 1, memory_order_acquire))
      return;
    if (spins < 256)
      weft__cpu_relax();
    else
      weft__thread_yield();
  }
}

/* Only for the sync, join and clk streams: a compute or copy stream is let go through
 * weft__cu_release, whose unlock is an exchange the combining protocol relies on. */
static inline void weft__cu_unlock(cu_stream *s) { atomic_store_explicit(&s->lock, 0, memory_order_release); }

static inline int weft__cu_trylock(cu_stream *s) {
  return !atomic_load_explicit(&s->lock, memory_order_relaxed) &&
         !atomic_exchange_explicit(&s->lock, 1, memory_order_acquire);
}

/* One completion request: when `ev` has completed, report node `node` of `run` (kind NODE) or
 * the device's part of a run's drain (kind DRAIN). */
typedef struct cu_item {
  cudaEvent_t ev;
  weft_run *run;
  struct cu_plan *plan;
  uint32_t node;
  int kind;
} cu_item;

enum { CU_ITEM_NODE = 0, CU_ITEM_DRAIN = 1 };

typedef struct cu_device {
  int ordinal;
  char name[128];
  size_t memory_bytes;
  int copy_engines, major, minor, sms;
  cudaMemPool_t pool;
  int ncompute;
  int nstreams;              /* ncompute + 3 */
  cu_stream streams[CU_MAX_COMPUTE + 3];
  cu_stream sync;            /* synchronous reads, writes, allocations and initialisers */
  cu_stream join;            /* run drains: waits for every stream, frees leftovers */
  cu_stream clk;             /* always idle: the reference events of node timing */
  cu_stream ipc;             /* the transport's copies into other processes' GPUs (cuda_ipc.c) */
  atomic_size_t ipc_bytes, ipc_peak; /* ... and the storage of tensors they copy into here */
  int h2d, d2h, peer;        /* indices of the copy streams */
  uint8_t peer_ok[CU_MAX_DEVICES];
  /* The completion thread: a queue of items, taken in batches. */
  weft__thread thread;
  int thread_started;
  weft__mutex qlock;
  weft__cond qcond;
  cu_item *queue;
  size_t qlen, qcap;
  atomic_int qcount;
  atomic_int eager_runs;     /* eager runs in flight here whose drain is not yet queued */
  int stop;
  int have_qlock, have_qcond;
} cu_device;

/* The pinned host pool (cuda_backend.c). */
typedef struct cu_pinned cu_pinned;

typedef struct cu_state {
  weft__backend *b;
  int ndev;
  cu_device *dev;
  int launch_blocking;
  int allow_tf32;
  atomic_int batch;           /* 1: chains of small elementwise nodes are batched (WEFT_CUDA_BATCH) */
  atomic_int replay;          /* 1: unchanged graphs are captured and replayed */
  unsigned capture_run;       /* the run of a plan that captures it (2; WEFT_CUDA_CAPTURE_RUN) */
  size_t window_bytes_min;    /* memory plan: frees left unclaimed, at least this many bytes */
  int window_count;           /*   ... and at least this many of the largest temporaries */
  cu_pinned *pinned;
  struct cu_ipc_maps *ipc;    /* other processes' GPU memory mapped here (cuda_ipc.c) */
  int device_timing;          /* 0: WEFT_CUDA_TIMING=0, GPU nodes keep host-side times */
  uint64_t group_ns;          /* replays: a tick per this much estimated device time (ns) */
  uint64_t eager_group_ns;    /* eager runs: likewise (small nodes only; 0: a tick per node) */
  int timing_check;           /* WEFT_CUDA_TIMING_CHECK=1: compare derived starts with events */
  atomic_ullong captures, replays, eager_runs, capture_failures, combined;
} cu_state;

/* ---- per plan --------------------------------------------------------------------------
 *
 * The planner (src/sched/plan/) has decided each node's stream, events, memory, turn and batch
 * (weft__gnode, WEFT__G_* flags); the backend keeps the CUDA objects those decisions need and
 * its per-run state. */

/* A batch (src/sched/plan/batches.c): a chain of small elementwise nodes on one stream,
 * launched as one kernel by its last node. Its nodes run one after the other (each the only
 * successor of the one before), so one thread at a time fills `ops`. */
typedef struct cu_batch {
  uint32_t first, last; /* its first and last nodes */
  uint32_t count;       /* ops added in this run and not launched yet */
  uint32_t len;         /* nodes in it (<= WEFT__CU_BATCH_MAX) */
  weft__cu_bop *ops;
} cu_batch;

/* WEFT__G_SPLIT: the rows of a split product's first half (a multiple of 128). */
static inline int64_t weft__cu_split_rows(int64_t m) { return (m / 2 + 127) / 128 * 128; }

/* The CUDA objects of one GPU node. */
typedef struct cu_node {
  cudaEvent_t event;         /* WEFT__G_RECORD: recorded after its work */
  cudaEvent_t stage_event;   /* staged copies: the source half is done; split products: the
                                first row half is done */
  void *stage;               /* staged copies: the pinned buffer */
} cu_node;

/* Node timing of a plan (cuda_timing.c); per node unless said otherwise. */
typedef struct cu_timing {
  cudaEvent_t *tick;       /* timing event recorded right after the node's work */
  uint32_t *stamp;         /* eager: the run (cu_plan.runs) whose tick was recorded */
  uint32_t *eprev;         /* eager: the node this plan enqueued before it on its stream */
  uint64_t *t_enq;         /* eager: host time just before its work was enqueued */
  uint32_t *rprev, *rnext; /* replays: its neighbours on its stream in the capture's order */
  uint8_t *rtick;          /* replays: 1 if the graph records its tick (a group ends there) */
  uint64_t *est;           /* estimated device time, ns: shares within a group */
  uint64_t *start, *end;   /* the drain's computation */
  uint8_t *have;           /*   ... bit 0: end known, bit 1: start known */
  uint32_t elast[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3]; /* eager: last enqueued per stream */
  uint64_t eacc[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3];  /* eager: estimate since its last tick */
  cudaEvent_t etail[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3]; /* eager: closes a stream's last group */
  uint8_t etail_rec[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3]; /*   ... recorded in this run */
  uint32_t *seq;                    /* the drain's scratch: one stream's nodes in order, */
  uint64_t *lb;                     /*   ... and the earliest each may start */
  uint32_t *mem, nmem;              /* the nodes that free or allocate temporaries, in order, */
  int64_t *mem_delta;               /*   ... and the bytes each allocates less those it frees */
  uint64_t temp_bytes[CU_MAX_DEVICES]; /* per device: the plan's temporaries, all together */
  cudaEvent_t ref[CU_MAX_DEVICES];  /* per device: this run's reference event ... */
  uint64_t ref_ns[CU_MAX_DEVICES];  /*   ... and its host time */
  int ref_ok[CU_MAX_DEVICES];
  uint64_t mem_base[CU_MAX_DEVICES]; /* the pool's bytes in use at run_begin */
  cudaEvent_t replay_start;         /* recorded before the replayed graph, on its stream */
  cudaEvent_t *tick0;               /* WEFT_CUDA_TIMING_CHECK=1: an event before the work too */
} cu_timing;

typedef struct cu_plan {
  cu_state *st;
  weft__plan *p;
  uint32_t n, ntensors;
  const weft__gnode *x;      /* per node of the plan: the planner's decisions */
  cu_node *ev;               /* per node: its events and staging buffer */
  const uint32_t *lists;     /* the planner's waits, frees and allocations */
  const uint32_t *order;     /* the plan's topological order */
  const uint8_t *temp;       /* per tensor: 1 if its storage is made and freed in each run */
  void **tptr;               /* per tensor: this run's device pointer of a temporary */
  uint32_t ncuda;            /* CUDA nodes */
  int all_cuda;              /* every node of the plan is a CUDA node */
  cu_timing *tm;             /* node timing; NULL when timing is off */
  int eager_only;            /* never replayed (plan.h's weft__gpu_plan.eager_only) */
  int *la_info;              /* per node, pinned: a potrf's LAPACK info or a trtri's (cuda_kernels.h),
                                copied back after it; NULL when the plan has neither */
  cu_defer *defer;           /* per node: its record when it is left to its stream's holder */
  /* Turns (cuda_launch.c): the nodes that take their stream in the plan's order. */
  uint32_t *parked;          /* per turn (turn_base + turn): this run's node parked there, or
                                CU_TURN_OPEN, or CU_TURN_SKIPPED */
  const uint32_t (*turn_base)[CU_MAX_COMPUTE + 3]; /* the planner's */
  const uint32_t (*turns)[CU_MAX_COMPUTE + 3];     /* turns per stream (the planner's) */
  uint32_t turn_next[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3]; /* this run: the turn to enqueue next */
  uint32_t nturns;
  cu_batch *batches;         /* chains of small elementwise nodes launched as one kernel */
  uint32_t nbatches;
  const uint16_t *used;      /* per device: bit mask of the streams the plan uses */
  cudaEvent_t tail[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3];
  cudaEvent_t drained[CU_MAX_DEVICES];
  /* This run. */
  int replaying;
  atomic_int drains_left;
  atomic_int drain_status;
  weft__mutex msg_lock;
  int have_msg_lock;
  char drain_msg[512];
  atomic_uint last_issued[CU_MAX_DEVICES]; /* for messages about asynchronous faults */
  /* Replay. */
  unsigned runs;             /* runs of this plan so far */
  int capture_failed;
  cudaGraphExec_t exec;
  int origin_dev;
  cudaEvent_t replay_done;
  double *replay_scratch[CU_MAX_DEVICES][CU_MAX_COMPUTE];
  void *replay_workspace[CU_MAX_DEVICES][CU_MAX_COMPUTE];
  cublasHandle_t replay_blas[CU_MAX_DEVICES][CU_MAX_COMPUTE];
} cu_plan;

enum { CU_TURN_OPEN = UINT32_MAX, CU_TURN_SKIPPED = UINT32_MAX - 1 };

/* ---- calls between the files ------------------------------------------------------------ */

/* The plan's CUDA state, or NULL when it has no CUDA node. */
static inline cu_plan *weft__cu_plan_of(const weft__backend *b, const weft__plan *p) {
  return (cu_plan *)p->bstate[b->index];
}

/* cuda_backend.c */
int weft__cu_set_device(cu_device *d);
/* A failed CUDA call as a weft status: WEFT_EDEVMEM for an allocation, else WEFT_ECUDA, with
 * "WHAT on cuda:DEV failed: NAME (DESCRIPTION)" as the message. Clears a non-sticky error. */
int weft__cu_error(cudaError_t e, const char *what, int dev);
const char *weft__cu_errname(cudaError_t e);
const char *weft__cu_blasname(cublasStatus_t s);
/* Bytes the device's pool has in use now, at its peak, and reserved (graph memory included). */
void weft__cu_mem_query(cu_device *d, size_t *used, size_t *peak, size_t *reserved);
/* Writes "out of device memory on cuda:N allocating B bytes for tensor T (...)" into msg. */
void weft__cu_oom_message(cu_device *d, size_t bytes, const char *what, char *msg, size_t size);
/* Allocates from the device's pool, stream-ordered on s; on failure trims the pool and tries
 * once more. The error is cleared from CUDA's per-thread state. */
cudaError_t weft__cu_pool_alloc(cu_device *d, void **p, size_t bytes, cudaStream_t s);
/* Persistent storage for a kept tensor (t->data, storage kind WEFT__S_DEVICE). */
int weft__cu_alloc_storage(cu_state *st, weft_tensor *t);
void *weft__cu_pinned_alloc(cu_state *st, size_t bytes);
void weft__cu_pinned_free(cu_state *st, void *p);

/* cuda_plan.c */
int weft__cu_plan(weft__backend *b, weft__plan *p);
void weft__cu_plan_free(weft__backend *b, weft__plan *p);
int weft__cu_gpu_target(const weft__backend *b, weft__gpu_target *out);

/* cuda_launch.c */
/* Streams a node is enqueued on: the devices' own (eager runs) or a capture's private ones. */
typedef struct cu_streams {
  cudaStream_t s[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3];
  int capture; /* 1: inside a stream capture (private streams, no locks, no notification) */
} cu_streams;
/* Enqueues node `index` of run `run` (waits, allocations, work, frees, event). Returns WEFT_OK
 * or an error with the message in ctx->err. `locked`: the caller holds the node's stream. */
int weft__cu_enqueue(cu_state *st, cu_plan *cp, weft_kernel_ctx *ctx, const cu_streams *cap, int locked);
int weft__cu_launch(weft__backend *b, weft_kernel_ctx *ctx);
void weft__cu_skip(weft__backend *b, weft_run *run, uint32_t index);
/* Lets go of a compute or copy stream the caller holds, after enqueueing the nodes other
 * workers left on it meanwhile and before reporting their issue ("Combining"). Every holder of
 * such a stream lets it go through this call. */
void weft__cu_release(cu_state *st, cu_stream *s);
/* Launches what a batch holds (after a failure or a cancel skipped its last node) on its
 * stream, and empties it. Returns the CUDA error. */
cudaError_t weft__cu_batch_flush(cu_state *st, cu_plan *cp, cu_batch *bt);

/* cuda_complete.c */
int weft__cu_threads_start(cu_state *st);
void weft__cu_threads_stop(cu_state *st);
/* Queues a completion request on device d's thread. Returns WEFT_OK or WEFT_ENOMEM. */
int weft__cu_push(cu_device *d, const cu_item *items, size_t n); /* all or none */
int weft__cu_run_drain(weft__backend *b, weft__plan *p, weft_run *run);

/* cuda_timing.c */
/* Sets up the plan's node timing when the runtime times nodes (cp->tm; NULL otherwise). */
int weft__cu_timing_plan(cu_state *st, cu_plan *cp);
void weft__cu_timing_free(cu_state *st, cu_plan *cp);
/* After a successful capture: the event recorded before each replay. */
int weft__cu_timing_capture_ready(cu_state *st, cu_plan *cp);
/* Per run, before any node is enqueued or the graph launched: the reference events. */
void weft__cu_timing_run_begin(cu_state *st, cu_plan *cp);
/* Eager, when node i's lane is opened (before its waits; its stream's lock held): closes the
 * stream's open group with a tick when node i will tick alone. */
cudaError_t weft__cu_timing_open(cu_plan *cp, uint32_t i, cudaStream_t s);
/* Drain, per stream the plan used: closes an eager run's last group on it. */
cudaEvent_t weft__cu_timing_drain_stream(cu_plan *cp, int dev, int stream, cudaStream_t s);
/* Eager, right before node i's work (its stream's lock held): the host time, and under
 * WEFT_CUDA_TIMING_CHECK the start event. */
void weft__cu_timing_before(cu_plan *cp, uint32_t i, cudaStream_t s);
/* Records node i's tick on s, right after its work (under its stream's lock when eager). */
cudaError_t weft__cu_timing_tick(cu_plan *cp, uint32_t i, cudaStream_t s, int capture);
/* Reports node i's device interval (eager; its event has completed). */
void weft__cu_timing_node(cu_plan *cp, uint32_t i, weft_run *run);
/* Reports every node's device interval and the memory track, once the run's work is done. */
void weft__cu_timing_run(cu_plan *cp, weft_run *run);

/* cuda_ipc.c (backend.h, version 8) */
int weft__cu_ipc_capable(const weft__backend *b);
int weft__cu_ipc_init(cu_state *st);
/* Storage other processes of the host can map, for a tensor flagged `ipc` (storage kind
 * WEFT__S_IPC); freed by weft__cu_ipc_free. */
int weft__cu_ipc_alloc(cu_device *d, weft_tensor *t);
void weft__cu_ipc_free(cu_device *d, weft_tensor *t);
int weft__cu_ipc_export(weft__backend *b, const weft_tensor *t, weft__ipc_handle *out);
int weft__cu_ipc_map(weft__backend *b, int index, const weft__ipc_handle *h, void **base);
void weft__cu_ipc_unmap(weft__backend *b, void *base);
int weft__cu_ipc_put(weft__backend *b, const weft_tensor *src, void *dst, void **token);
int weft__cu_ipc_test(weft__backend *b, void *token);
/* Unmaps what this process mapped (the backend's end). */
void weft__cu_ipc_fini(cu_state *st);

/* cuda_replay.c */
int weft__cu_run_begin(weft__backend *b, weft__plan *p, weft_run *run);
void weft__cu_replay_free(cu_plan *cp);

#endif
