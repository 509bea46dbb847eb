/* backend.h — the table every device backend fills (cpu, cuda, sim), in the manner of
 * SQLite's sqlite3_io_methods: versioned, append-only, one designated-initializer instance
 * per backend. The scheduler reaches devices only through this table, and a backend sees of
 * the scheduler only this header and the plan (sched/plan/plan.h): never sched/sched.h.
 *
 * Storage: `alloc` gives a tensor storage on its device (t->data) and `free` releases it; a
 * backend may leave t->data NULL for tensors it manages per run (GPU temporaries). `read` and
 * `write` are synchronous transfers between a tensor and a host buffer; `init_tensor` applies
 * the tensor's creation initialiser.
 *
 * Execution: `launch` runs one node (ctx->node) and returns WEFT_OK when its work is done, or
 * WEFT__PENDING when the work is enqueued on the device and completion will be reported later
 * by calling weft__sched_complete(ctx->run, ctx->index, status, message) from any thread, or an
 * error; only a backend flagged WEFT__BACKEND_ASYNC or WEFT__BACKEND_PENDING may return it (the
 * issuing worker then holds the run open while it finishes with the node). A backend whose flags include WEFT__BACKEND_ASYNC orders its own nodes on the device
 * (streams and events): the scheduler then releases an edge between two of its nodes as soon
 * as the predecessor is *issued*, so a GPU node's GPU successors are enqueued without the host
 * waiting. All other edges are released at completion.
 *
 * Plans: the planner (src/sched/plan/) decides every node's lane, events, memory and batches,
 * for the machine the GPUs' backend describes through `gpu_target`; each backend's `plan`
 * hook then attaches its own objects (events, staging buffers, costs) to p->bstate[b->index],
 * and `plan_free` undoes it. `run_begin` and `run_end` bracket each run.
 *
 * Asynchronous backends:
 *   - A node whose launch enqueued its work and that has no late successors may return
 *     WEFT_OK at once ("issued"): the scheduler counts it done, and the backend promises that
 *     the run does not end before the work has finished, through `run_drain`: called once
 *     every node of the run has been issued or completed, it returns WEFT_OK when nothing is
 *     left in flight, or WEFT__PENDING and later calls weft__sched_drained. So only nodes
 *     with a CPU successor cost a host notification each; the rest cost one per run.
 *   - `run_begin` may return WEFT__PENDING to say "this backend runs the whole plan" (a
 *     replayed CUDA graph): the scheduler then dispatches no node and ends the run through
 *     `run_drain`. A backend may do so only when every node of the plan is its own.
 *   - `launch` may return WEFT__DEFERRED: the backend keeps the node and reports its issue
 *     later through weft__sched_issued (from any thread); until then the scheduler releases
 *     none of its edges and does not count it done.
 *
 * The protocol of one run, as a sequence (docs/architecture.md draws it):
 *   plan build:  gpu_target -> (planner) -> plan (each backend)
 *   launch:      run_begin (each backend) -> launch (each node, in dependency order)
 *                -> weft__sched_complete / weft__sched_issued (asynchronous nodes)
 *   end:         run_drain (each asynchronous backend) -> weft__sched_drained
 *                -> run_end (each backend) -> the run is done
 *
 * Version 8 appends GPU memory shared between the processes of a host (CUDA IPC): the
 * transport's copies between the GPUs of two ranks (backends/mpi) go as one copy of the
 * sender's GPU into the receiver's tensor, which the receiver exports (`ipc_export`: a handle
 * it sends when it is ready to receive) and the sender maps and writes (`ipc_put`, then
 * `ipc_test` until done); the transport's messages say when.
 *
 * Version 4 appends two settings the runtime's public calls reach through the table, so that
 * runtime.c needs no `#if` for them: `set_batching` (weft_runtime_set_batching) and
 * `blas_threads` (weft_runtime_blas_threads). */
#ifndef WEFT_BACKEND_H
#define WEFT_BACKEND_H

#include "sched/plan/plan.h"

#define WEFT__BACKEND_VERSION 8

/* weft_run_wait watches the run this long (ns), yielding its core, before it sleeps
 * (src/sched/dispatch.c); the simulator prices the wake-up of a caller that slept (des.c). */
#define WEFT__WAIT_SPIN_NS 200000ull

enum {
  WEFT__BACKEND_ASYNC = 1u << 0,     /* launch may return WEFT__PENDING; orders its nodes itself */
  WEFT__BACKEND_SIMULATED = 1u << 1, /* its devices are a simulated machine's */
  WEFT__BACKEND_PENDING = 1u << 2,   /* launch may return WEFT__PENDING; its nodes are ordered by
                                      * the scheduler like synchronous ones (a transport) */
};

struct weft__backend;

/* GPU memory another process of the host may map (CUDA IPC): the allocation's handle, the
 * tensor's offset in it and its bytes. Travels in a message as it is. */
typedef struct weft__ipc_handle {
  unsigned char handle[64]; /* cudaIpcMemHandle_t */
  uint64_t offset, bytes;
} weft__ipc_handle;

enum { WEFT__CTX_INLINE = 16 };

/* What a kernel sees. Built by the scheduler on the worker's stack for each node. */
struct weft_kernel_ctx {
  weft_node *node;
  weft_graph *graph;
  weft_run *run;
  weft__plan *plan;      /* the plan the run executes */
  uint32_t index;        /* the node's id */
  weft_device device;
  struct weft__backend *backend;
  void *stream;          /* cuda: the cudaStream_t the node runs on */
  void *blas;            /* cuda: the cublasHandle_t bound to that stream */
  void **data;           /* per argument: its storage on the node's device (weft__ctx_bind) */
  void *inline_data[WEFT__CTX_INLINE]; /* data's room for up to WEFT__CTX_INLINE arguments */
  char *err;             /* weft_ctx_fail writes here */
  size_t err_size;
};

typedef struct weft__backend_vtable {
  int version; /* WEFT__BACKEND_VERSION */
  const char *name;
  int device_kind; /* weft_device_kind served */
  unsigned flags;  /* WEFT__BACKEND_* */
  int (*init)(struct weft__backend *b, const weft_runtime_options *o);
  void (*fini)(struct weft__backend *b);
  int (*device_count)(const struct weft__backend *b);
  int (*device_info)(const struct weft__backend *b, int index, weft_device_info *out);
  int (*can_access_peer)(const struct weft__backend *b, int a, int c);
  int (*alloc)(struct weft__backend *b, weft_tensor *t);
  void (*free)(struct weft__backend *b, weft_tensor *t);
  int (*read)(struct weft__backend *b, weft_tensor *t, void *dst);
  int (*write)(struct weft__backend *b, weft_tensor *t, const void *src);
  int (*init_tensor)(struct weft__backend *b, weft_tensor *t);
  int (*plan)(struct weft__backend *b, weft__plan *p);
  void (*plan_free)(struct weft__backend *b, weft__plan *p);
  int (*run_begin)(struct weft__backend *b, weft__plan *p, weft_run *run);
  void (*run_end)(struct weft__backend *b, weft__plan *p, weft_run *run);
  int (*launch)(struct weft__backend *b, weft_kernel_ctx *ctx);
  /* Pinned host memory for CPU tensors that GPUs copy to or from (NULL: none). */
  void *(*host_alloc)(struct weft__backend *b, size_t bytes);
  void (*host_free)(struct weft__backend *b, void *p);
  /* See above: WEFT_OK when nothing of the run is in flight on the backend, or
   * WEFT__PENDING, and weft__sched_drained is called later. Called on the thread that
   * completed the run's last node; must not block. */
  int (*run_drain)(struct weft__backend *b, weft__plan *p, weft_run *run);
  /* Node `index` of `run` will not be launched (a failure upstream, a cancel): the scheduler
   * tells its backend when it skips it, so that nothing the backend holds back waits for it.
   * May be NULL. */
  void (*skip)(struct weft__backend *b, weft_run *run, uint32_t index);
  /* The backend serving GPUs describes them for the planner (streams, SMs, peer access, the
   * batching and window knobs as they are now). May be NULL for a backend without GPUs. */
  int (*gpu_target)(const struct weft__backend *b, weft__gpu_target *out);
  /* Version 4. Batches on or off for graphs planned afterwards (weft_runtime_set_batching).
   * NULL: the backend makes no batches. Called from any thread. */
  void (*set_batching)(struct weft__backend *b, int on);
  /* Version 4. The threads one CPU matrix product of the backend uses, for the backend that
   * serves the CPU (weft_runtime_blas_threads). NULL: the runtime's thread policy. */
  int (*blas_threads)(const struct weft__backend *b);
  /* Version 5. The transport between ranks (MPI): `bytes` of buf from rank `root` to every
   * rank (a collective: every rank calls it). NULL for device backends. */
  int (*bcast)(struct weft__backend *b, void *buf, size_t bytes, int root);
  /* Version 6. The transport: at a launch that planned the graph anew, every rank says how its
   * launch went so far (`status`: WEFT_OK with the plan `p`, or its error, p then possibly
   * NULL) and all get one answer (a collective): WEFT_OK when every rank got this far with the
   * same graph, else an error (another rank's, naming it; a difference of the graphs). So a
   * launch that fails on one rank before its first node fails on every rank, and none waits for
   * its messages. NULL for device backends. */
  int (*launch_agree)(struct weft__backend *b, weft__plan *p, int status);
  /* Version 7. The memory device `index` holds for weft (weft_device_memory_usage). NULL: the
   * backend has none to report. Called from any thread. */
  int (*memory_usage)(const struct weft__backend *b, int index, weft_memory_usage *out);
  /* Version 8 (above). NULL for a backend without GPUs. `ipc_capable`: every two GPUs of
   * this host map each other's memory, so ranks sharing the host may copy between them
   * directly. `ipc_export`: tensor t's storage (a GPU tensor given storage the host's other
   * processes can map: weft_tensor.ipc) as a handle. `ipc_map`: the handle's memory mapped for
   * this process's GPU `index` (*base: the allocation's start), a reference the caller gives
   * back with `ipc_unmap` (the mapping closes with the last: before the other process frees
   * the memory, or its next allocation there cannot be mapped). `ipc_put`: enqueues the copy of
   * `src` (this process's GPU tensor, a strided tile too) to `dst` (in a mapping); *token then
   * names the copy for `ipc_test`, which answers 1 once it is done (the token freed), 0 while
   * it runs, or an error (the token freed). Callable from any thread; they never wait for the
   * device. */
  int (*ipc_capable)(const struct weft__backend *b);
  int (*ipc_export)(struct weft__backend *b, const weft_tensor *t, weft__ipc_handle *out);
  int (*ipc_map)(struct weft__backend *b, int index, const weft__ipc_handle *h, void **base);
  void (*ipc_unmap)(struct weft__backend *b, void *base);
  int (*ipc_put)(struct weft__backend *b, const weft_tensor *src, void *dst, void **token);
  int (*ipc_test)(struct weft__backend *b, void *token);
} weft__backend_vtable;

typedef struct weft__backend {
  const weft__backend_vtable *vt;
  weft_runtime *rt;
  int index;   /* in the runtime's table: its slot in weft__plan.bstate */
  void *state; /* the backend's own */
} weft__backend;

/* The backend serving device kind `kind` in rt (WEFT_DEVICE_CPU or WEFT_DEVICE_CUDA), or NULL. */
weft__backend *weft__runtime_backend(const weft_runtime *rt, int kind);
/* This process's index among the ranks that share its host, and their number (0 and 1 outside
 * an MPI run): the CUDA backend's share of the host's GPUs (weft_runtime_options.first_gpu). */
void weft__runtime_local(const weft_runtime *rt, int *rank, int *ranks);
/* The transport sets the process's rank and the number of ranks (1 and 0 without one). */
void weft__runtime_set_ranks(weft_runtime *rt, int rank, int nranks);
/* The transport says each rank's host (host[r]: the same number for ranks sharing one; nranks
 * of them, the same on every rank), after weft__runtime_set_ranks. */
int weft__runtime_set_hosts(weft_runtime *rt, const int *host);

/* What a backend may know of a run besides its plan. */
/* The plan the run executes. */
weft__plan *weft__run_plan(const weft_run *run);
/* The time of the run's launch, weft__clock_ns() base. */
uint64_t weft__run_launch_ns(const weft_run *run);
/* The plan of a finished run that is still its graph's latest, for the results a backend
 * keeps in its plan state; else an error naming `what` (still in flight: WEFT_EAGAIN; launched
 * again since: WEFT_ESTATE). */
int weft__run_latest_plan(const weft_run *run, const char *what, const weft__plan **out);


extern const weft__backend_vtable weft__cpu_backend;
#if WEFT_HAVE_MPI
extern const weft__backend_vtable weft__mpi_backend;
/* 1 when the process runs under MPI: initialised by the application, or started by mpirun. */
int weft__mpi_wanted(void);
/* The ranks of the run on this host, as the launcher says (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE,
 * MPICH's MPI_LOCALNRANKS); 1 when it says nothing. */
int weft__mpi_local_ranks(void);
/* This rank's index among them (the launcher's OMPI_COMM_WORLD_LOCAL_RANK or MPI_LOCALRANKID),
 * 0 when it does not say. */
int weft__mpi_local_rank(void);
#endif
#if WEFT_HAVE_CUDA
extern const weft__backend_vtable weft__cuda_backend;
#endif

/* Reports the completion of a node a backend launched with WEFT__PENDING. `message` (may be
 * NULL) explains a failure; WEFT__UPSTREAM skips the node's successors without making this
 * node the run's failure (a transport's input that another process did not compute). Callable from any thread, including CUDA host callbacks: it takes
 * no CUDA call and never blocks on the device. */
void weft__sched_complete(weft_run *run, uint32_t index, int status, const char *message);
/* As weft__sched_complete, from a backend's own thread that may launch the node's successors of
 * the same backend itself: each one the completion makes ready runs here, at once (its launch
 * through this backend, on this thread), and so do those it makes ready in turn; any other
 * goes to the workers as usual. For a backend whose launches are cheap and never block (the
 * MPI transport: a launch posts messages), so that a message answering a message leaves
 * without a hand-off to a worker. Its nodes' records show them on a CPU lane after the
 * workers' ("the progress thread"). Not from a worker, nor with a lock held that a launch of
 * the backend takes. */
void weft__sched_complete_here(weft_run *run, uint32_t index, int status, const char *message);

/* Reports the issue of a node whose launch returned WEFT__DEFERRED: `status` is what launch
 * would have returned (WEFT_OK: enqueued and done as far as the scheduler is concerned;
 * WEFT__PENDING: enqueued, completion through weft__sched_complete; or an error, explained by
 * `message`, which may be NULL). Until this report the run cannot end, even if the node's
 * completion is reported first (the dispatcher's hold on the run passes to the report); after
 * it, the backend must not touch the run or its plan on the node's behalf. A backend defers a
 * node when another thread is enqueueing on the stream the node needs: that thread enqueues it
 * too before it lets the stream go (cuda_launch.c, "Combining"), so no worker waits for a
 * stream. Must not be called with a lock held that the run's drain takes (the call may end the
 * run). Callable from any thread. */
void weft__sched_issued(weft_run *run, uint32_t index, int status, const char *message);

/* Node ctx->index runs in another process (a transport's node of another rank): it gets no
 * record in this process's timing, statistics or trace. Call from `launch`. */
void weft__sched_elsewhere(const weft_kernel_ctx *ctx);

/* The run's outcome so far: its first failure (status, node or UINT32_MAX, error text), or
 * WEFT_ECANCELED when it was cancelled, or WEFT_OK. For a transport that agrees on the outcome
 * with other processes (backends/mpi). */
int weft__run_outcome(weft_run *run, uint32_t *node, char *error, size_t size);

/* Records another process's failure as the run's, verbatim (`error` is that run's error text,
 * `node` its failed node: the graphs are the same), unless this run failed first. */
void weft__sched_fail_as(weft_run *run, uint32_t node, int status, const char *error);

/* Reports that the run's work on a backend whose run_drain returned WEFT__PENDING has finished.
 * A failure found then (an asynchronous device fault) is recorded as the run's error against
 * node `index`, or against no node when `index` is UINT32_MAX. Callable from any thread; takes
 * no CUDA call. */
void weft__sched_drained(weft_run *run, uint32_t index, int status, const char *message);

/* ---- Node timing (implemented in src/sched/report/timing.c) ------------------------------
 *
 * Every node of a run gets a start, an end and a lane, in nanoseconds on one time base:
 * weft__clock_ns(), a monotonic clock on the CLOCK_MONOTONIC epoch (read from the invariant
 * TSC where there is one, calibrated against CLOCK_MONOTONIC). The dispatcher records every
 * node it launches around the backend's `launch` call: for a CPU node that is the kernel, for
 * a GPU node only the host-side enqueue. A backend whose work runs later on a device replaces
 * that with the device-side interval through weft__sched_node_time:
 *   - for a node whose launch returned WEFT__PENDING: before weft__sched_complete for it (the
 *     dispatcher writes no end for such a node; if the backend reports nothing, completion
 *     stamps the end with the time it observed the completion);
 *   - for a node whose launch returned WEFT_OK with work still in flight ("issued"), and for
 *     the nodes of a whole-plan replay: from run_drain, or before weft__sched_drained. The
 *     dispatcher has written its own record of every node by then, so nothing overwrites
 *     the device-side times.
 * With CUDA (backends/cuda/cuda_timing.c): an event after each timed node (or group of small
 * nodes) on its stream, starts derived from the stream's order and the waits; to place event
 * times on this base, a reference event per device per run whose host time is known (recorded
 * on an idle stream, with weft__clock_ns() read right after cudaEventRecord returns), plus
 * cudaEventElapsedTime(reference, event). A simulator reports virtual times as the run's
 * launch time plus its virtual offsets, so that they sort after every earlier run.
 *
 * A lane is where a node ran: a CPU worker, or a stream of a device, by its role. Copies
 * are told apart from compute by the node (a copy node), not by the lane; the role of a lane
 * says which copy engine a stream feeds, so that copies serialised on one engine can be
 * named. Lanes of roles other than CPU belong to a device of kind WEFT_DEVICE_CUDA (real or
 * simulated). */
enum {
  WEFT__LANE_CPU = 0,     /* a CPU worker; number = the worker's index */
  WEFT__LANE_COMPUTE = 1, /* a compute stream of a device; number = the stream's index */
  WEFT__LANE_H2D = 2,     /* a host-to-device copy stream */
  WEFT__LANE_D2H = 3,     /* a device-to-host copy stream */
  WEFT__LANE_PEER = 4,    /* a device-to-device (peer) copy stream */
  /* Set by the dispatcher, never by a backend: a device node's record still holds the host-side
   * launch interval because its backend reported no device times. The statistics leave such
   * nodes out of the overlap accounting and say how many there were. */
  WEFT__LANE_HOSTSIDE = 5,
};
/* A CPU product of this many flops or more is split into tiles that the pool's idle workers run
 * (cpu_kernels.c); a smaller one, and every other dense linear-algebra op, runs on its worker. */
#define WEFT__CPU_SPLIT_FLOPS (2.0 * (double)(1 << 30))

#define WEFT__LANE(role, device, number)                                                  \
  (((uint32_t)(role) << 28) | (((uint32_t)(device) & 0xfffu) << 16) |                      \
   ((uint32_t)(number) & 0xffffu))
#define WEFT__LANE_ROLE(lane) ((uint32_t)(lane) >> 28)
#define WEFT__LANE_DEVICE(lane) (((uint32_t)(lane) >> 16) & 0xfffu)
#define WEFT__LANE_NUMBER(lane) ((uint32_t)(lane) & 0xffffu)
#define WEFT__LANE_NONE 0xffffffffu /* the node did not run (skipped or cancelled) */

/* The time base of node timing, in nanoseconds. Thread-safe: yes. */
uint64_t weft__clock_ns(void);

/* Whether the runs of plan p record node times (timing is on for its runtime). */
int weft__timing_on(const weft__plan *p);

/* Reports node `index`'s interval [start_ns, end_ns] (weft__clock_ns base) on `lane`
 * (WEFT__LANE(...)), replacing the dispatcher's record; see above for when to call it.
 * Does nothing when timing is off. Callable from any thread, for distinct nodes at once. */
void weft__sched_node_time(weft_run *run, uint32_t index, uint64_t start_ns, uint64_t end_ns,
                           uint32_t lane);

/* Reports that `bytes` of device `device`'s memory were in use at time `t_ns` (weft__clock_ns
 * base), for the memory track of the trace and the peak per device in the statistics. A
 * backend calls it where its allocator's use changes (or once per run with its peak); the
 * statistics take the largest sample as the peak. Samples beyond a bound per run
 * (WEFT__MEM_SAMPLES_MAX) are dropped, and the statistics say so. Callable from any thread; takes a leaf lock. */
enum { WEFT__MEM_SAMPLES_MAX = 65536 };
void weft__sched_mem_sample(weft_run *run, weft_device device, uint64_t t_ns, uint64_t bytes);

/* Points ctx->data at room for the arguments of node ctx->index of ctx->plan and fills it with
 * each argument's storage (t->data): the context's own room up to WEFT__CTX_INLINE arguments,
 * else the node's room in the plan (a node runs once at a time). The caller may then replace
 * entries (a GPU temporary's memory of this run). */
void weft__ctx_bind(weft_kernel_ctx *ctx);

/* Intra-op parallelism: runs fn(arg, t) for every tile t in [0, ntiles) and returns when all
 * are done. The calling thread runs tiles, and so do the pool's idle workers when the context's
 * node runs on a worker of a run (never more than the runtime's intra-op width, and only
 * workers that have nothing else to run: inter-op work comes first). Outside a run (the serial
 * interpreter) the tiles run one after the other on the calling thread. Which thread runs a
 * tile varies, so a kernel's tiles must be fixed by the op alone — never by the number of
 * workers — for its results to be the same bits on every machine. fn must not block on other
 * work of the pool. */
void weft__ctx_parallel(weft_kernel_ctx *ctx, uint32_t ntiles, void (*fn)(void *arg, uint32_t tile), void *arg);

/* The CPU kernels, shared by the CPU backend, the serial interpreter and (for host-side
 * checks) other backends: executes `ctx->node` with host pointers in ctx->data. */
int weft__cpu_exec(weft_kernel_ctx *ctx);
/* cpu_blas.c. Sets the threads each call of a threaded BLAS (OpenBLAS, BLIS) may use
 * (process-wide); a serial one has none to set. */
void weft__cpu_set_blas_threads(int n);
/* Fills *out with the BLAS library loaded in the process and how it runs
 * (weft_runtime_blas_info). Call it before weft__cpu_set_blas_threads: the first call keeps the
 * library's own thread count. */
void weft__cpu_blas_probe(weft_blas_info *out);
/* Bracket every BLAS call of the kernels: enter takes the process's BLAS lock when the loaded
 * library cannot be called from two threads at once (and returns 1), leave releases what enter
 * took. */
int weft__cpu_blas_enter(void);
void weft__cpu_blas_leave(int locked);
/* Applies `init` to n elements of dtype at p (element indices start at 0). */
void weft__cpu_fill(void *p, int dtype, int64_t n, weft_init init);
/* Writes elements first .. first + n - 1 of a tensor initialised by `init` to dst[0 .. n - 1]
 * (cpu_fill.c): the values of weft__cpu_fill's elements of those indices. */
void weft__cpu_fill_at(void *dst, int dtype, int64_t first, int64_t n, weft_init init);
/* The generator's variant this CPU runs: "avx512", "avx2" or "scalar" (the best the CPU has,
 * unless weft__cpu_fill_select chose one: the tests compare them; returns 0 if the CPU lacks
 * it). */
const char *weft__cpu_fill_variant(void);
int weft__cpu_fill_select(const char *variant);
/* The widest vector instructions this CPU has, for the kernels' per-ISA copies: 2 AVX-512 (F
 * and DQ), 1 AVX2, 0 neither (or not x86-64). */
int weft__cpu_isa(void);

#endif
