/* weft.h — the public API of weft: dataflow graphs of ops and copies, run on CPU threads and
 * CUDA GPUs with automatic parallelism.
 *
 * The model in one paragraph: a graph is a program. Tensors are typed n-d arrays with a home
 * device; nodes (ops and copies) are added in order, and each declares which tensors it reads
 * and writes. weft infers the dependencies (read-after-write, write-after-read,
 * write-after-write), runs independent nodes at the same time, and guarantees that the result
 * is what running the nodes one by one in insertion order gives ("serial equivalence").
 * Tensor contents persist between runs, so an iterative program is one graph run N times.
 *
 * Conventions:
 *   - Calls that can fail return a status: WEFT_OK (0) or a negative WEFT_E* code. On failure
 *     weft_last_error() returns a message for the calling thread that says what is wrong and
 *     where (node, op, device, and the .weft file:line where there is one).
 *   - Objects weft allocates have create/destroy pairs; destroy(NULL) is a no-op.
 *   - Tensors and nodes belong to their graph and live until the graph is destroyed.
 *   - Ops that produce a result take `weft_tensor **out`: if *out is NULL, a new tensor of the
 *     inferred shape is created on the op's device and stored in *out; otherwise the result is
 *     written into the existing tensor *out, which must have the inferred shape and dtype
 *     (it may be one of the inputs: the op then updates it in place).
 *   - Thread safety: a runtime may be used from many threads. A graph is built from one thread
 *     at a time; different graphs may be built and launched from different threads at once.
 *
 * Headers: this one carries no CUDA, pthread or libuv type. CUDA-specific calls are in
 * weft/cuda.h, the libuv adapter in weft/uv.h. */
#ifndef WEFT_WEFT_H
#define WEFT_WEFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(WEFT_STATIC)
#define WEFT_API
#elif defined(WEFT_BUILDING)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

#if defined(__GNUC__) || defined(__clang__)
#define WEFT_NODISCARD __attribute__((warn_unused_result))
#else
#define WEFT_NODISCARD
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0

/* ---------------------------------------------------------------------------------------- */
/* Status codes                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* X(NAME, value, message). One list generates the enum, weft_strerror and
 * weft_status_name. New codes are appended. */
#define WEFT_STATUS_MAP(X)                                                                 \
  X(OK, 0, "success")                                                                      \
  X(EINVAL, -1, "invalid argument")                                                        \
  X(ENOMEM, -2, "out of host memory")                                                      \
  X(ESHAPE, -3, "shape mismatch")                                                          \
  X(EDTYPE, -4, "dtype mismatch")                                                          \
  X(EDEVICE, -5, "device unavailable or wrong device")                                    \
  X(ECYCLE, -6, "dependency cycle")                                                        \
  X(EKERNEL, -7, "kernel failed")                                                          \
  X(ECANCELED, -8, "canceled")                                                             \
  X(EBUSY, -9, "busy: a run of this graph is in flight")                                  \
  X(EAGAIN, -10, "not finished yet")                                                       \
  X(ECUDA, -11, "CUDA error")                                                              \
  X(ECUBLAS, -12, "cuBLAS error")                                                          \
  X(EDEVMEM, -13, "out of device memory")                                                  \
  X(ENOTSUP, -14, "not supported")                                                         \
  X(ESTATE, -15, "invalid state")                                                          \
  X(EPARSE, -16, "parse error")                                                            \
  X(EIO, -17, "input/output error")                                                        \
  X(ENOENT, -18, "not found")                                                              \
  X(ELIMIT, -19, "limit exceeded")

typedef enum weft_status {
#define WEFT_STATUS_ENUM(name, value, msg) WEFT_##name = (value),
  WEFT_STATUS_MAP(WEFT_STATUS_ENUM)
#undef WEFT_STATUS_ENUM
} weft_status;

/* Returns a static English description of `status` ("shape mismatch"). Thread-safe: yes. */
WEFT_API const char *weft_strerror(int status);

/* Returns the code's name without the prefix ("ESHAPE"), or "UNKNOWN". Thread-safe: yes. */
WEFT_API const char *weft_status_name(int status);

/* Returns the message of the last failing weft call on the calling thread: what went wrong and
 * where. The string is owned by weft and valid until the next failing call on this thread.
 * Returns "" if no call has failed. Thread-safe: yes (the message is per thread). */
WEFT_API const char *weft_last_error(void);

/* ---------------------------------------------------------------------------------------- */
/* Allocator hook                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* Every host allocation weft makes goes through these functions. Tests use them to fail each
 * allocation site in turn. */
typedef struct weft_allocator {
  void *(*malloc_fn)(size_t size, void *user);
  void *(*realloc_fn)(void *ptr, size_t size, void *user);
  void (*free_fn)(void *ptr, void *user);
  void *user;
} weft_allocator;

/* Installs `a` (copied) as the allocator, or restores the C library's with NULL. Must be
 * called when no weft object exists. Thread-safe: no. */
WEFT_API void weft_set_allocator(const weft_allocator *a);

/* ---------------------------------------------------------------------------------------- */
/* Devices                                                                                   */
/* ---------------------------------------------------------------------------------------- */

typedef enum weft_device_kind { WEFT_DEVICE_CPU = 0, WEFT_DEVICE_CUDA = 1, WEFT_DEVICE_AUTO = 2 } weft_device_kind;

/* A device is a value: {WEFT_DEVICE_CPU, 0} is "cpu", {WEFT_DEVICE_CUDA, 1} is "cuda:1". */
typedef struct weft_device {
  int kind;  /* weft_device_kind */
  int index; /* 0 for the CPU */
  int rank;  /* the process that owns it, in a run across processes (MPI); 0 otherwise */
} weft_device;

/* The CPU device. */
WEFT_API weft_device weft_cpu(void);
/* "auto": weft decides. A tensor created on auto lives where the planner puts it (its home,
 * chosen at the first launch: the device of its last writer, or of its first reader when no
 * node writes it), and has a copy wherever a node reads it; an op whose result is auto runs on
 * the device where it would finish first (docs/placement.md, "auto"). weft_tensor_device then
 * tells the home; weft_tensor_is_auto that it was chosen. On several GPUs a partitioned auto
 * tensor that only its tiles' nodes use is split: each tile has a home of its own (its
 * weft_tensor_device), the whole is read and written tile by tile, and weft_tensor_device
 * gives the host for it. */
WEFT_API weft_device weft_auto(void);
/* The device cuda:index (which may or may not exist: see weft_device_exists). */
WEFT_API weft_device weft_cuda(int index);
/* Device d of process `rank` (MPI, docs/distributed.md): weft_cpu() and weft_cuda(i) are rank
 * 0's. Every process builds the same graph; a node runs on the rank that owns what it writes. */
WEFT_API weft_device weft_on_rank(weft_device d, int rank);
/* Returns 1 if a and b are the same device (of the same rank). */
WEFT_API int weft_device_equal(weft_device a, weft_device b);
/* Writes "cpu", "cuda:N", or for another rank than 0 "rank R cpu" / "rank R cuda:N", into buf
 * (at most size bytes, NUL-terminated); returns buf. */
WEFT_API char *weft_device_str(weft_device d, char *buf, size_t size);
/* Parses "cpu", "cuda", "cuda:N", "gpu:N" or "auto", each optionally after "rank R " (R a
 * number). Returns WEFT_OK or WEFT_EINVAL. */
WEFT_NODISCARD WEFT_API int weft_device_parse(const char *text, weft_device *out);

/* ---------------------------------------------------------------------------------------- */
/* Runtime                                                                                   */
/* ---------------------------------------------------------------------------------------- */

typedef struct weft_runtime weft_runtime;

enum {
  /* Do not print the one-line notice when no GPU is found. */
  WEFT_RUNTIME_QUIET = 1u << 0,
  /* Synchronise after every GPU node so that an asynchronous fault is reported at its node
   * (the environment variable WEFT_LAUNCH_BLOCKING=1 sets it too). */
  WEFT_RUNTIME_LAUNCH_BLOCKING = 1u << 1,
  /* Allow TF32 tensor-core math for fp32 matrix products on the GPU (default: exact fp32),
   * the products inside the dense linear-algebra ops included (an f32 trtri's too). */
  WEFT_RUNTIME_ALLOW_TF32 = 1u << 2,
  /* Do not record when and where each node ran (weft/report.h then has no timeline to show).
   * Timing is on by default and costs one clock read a CPU node; docs/benchmarks.md, "What
   * node timing costs", has the measured cost. The environment variable WEFT_TIMING=0 sets
   * this flag too. */
  WEFT_RUNTIME_NO_TIMING = 1u << 3,
  /* With `simulate`: also compute every node's result on the CPU, so that tensors can be read
   * after a simulated run (the environment variable WEFT_SIM_COMPUTE=1 sets it too). Without
   * it a simulated machine models time only, and its GPU tensors hold no data. */
  WEFT_RUNTIME_SIM_COMPUTE = 1u << 4,
};

/* Options of a runtime. Fill with weft_runtime_options_init, then change what you need.
 * Fields are only ever appended. */
typedef struct weft_runtime_options {
  /* CPU worker threads. 0: one per core. */
  int cpu_workers;
  /* The most threads one CPU matrix product uses. 0: every worker. weft's workers own the
   * cores (docs/architecture.md, "Threads and the cores"): each BLAS call runs on one thread,
   * and a large product is split into tiles that the pool's idle workers run, at most this many
   * at once; a value above cpu_workers means cpu_workers. */
  int blas_threads;
  /* GPUs to use: -1 all that are visible (default), 0 none (CPU only), N the first N. */
  int max_gpus;
  /* WEFT_RUNTIME_* flags. */
  unsigned flags;
  /* NULL for real devices; else a machine profile (a JSON file path or a shipped name such as
   * "h100" or "h200x8") whose virtual devices the runtime simulates instead. */
  const char *simulate;
  /* The placement policy, by name; NULL for the default, "fixed": every node runs on the device
   * the program gave it (docs/architecture.md, "Plan"). An unknown name fails
   * weft_runtime_create with WEFT_EINVAL and the list of policies. */
  const char *policy;
  /* The machine profile that prices `auto` placement (docs/placement.md): a JSON file written
   * by `weft calibrate` for this machine, or a shipped name. NULL: the simulated machine's
   * profile, else the shipped one of a machine like this one ("h100" with one GPU or none,
   * "h200xN" with N GPUs). One that cannot be loaded fails weft_runtime_create. */
  const char *profile;
  /* The bytes of each GPU that `auto` placement may fill (0: the device's memory less a
   * sixteenth, at least 2 GiB). A node whose operands do not fit beside the tensors already
   * living on a GPU is not placed there; one that fits no device it has a kernel for fails the
   * launch, naming it and the bytes. Data larger than the budget streams through the GPU (out of
   * core: docs/placement.md), its buffers there within the budget in any order of the plan. */
  size_t device_memory_limit;
  /* Whether each CPU worker is bound to a core (weft_bind): WEFT_BIND_AUTO (the default: bound
   * when the pool has a worker for every hardware thread the process may use, as the default
   * pool does, or on a machine of several NUMA nodes; else not), WEFT_BIND_CORES or
   * WEFT_BIND_NONE. The environment variable WEFT_BIND (auto, cores, none) overrides it. */
  int bind;
  /* The first GPU to use: weft's cuda:0 is that GPU of those visible, cuda:1 the next, ...
   * (max_gpus then counts from it). -1 (default): the first, except in an MPI run whose ranks
   * share a host that has at least as many visible GPUs as ranks there: each rank then takes its
   * own share, local rank r of L the GPUs r G/L to (r + 1) G/L - 1 of the G visible (one rank a
   * GPU when L = G), so that ranks started by `mpirun -np G` on one host do not all use the
   * first. One beyond the visible GPUs fails weft_runtime_create (a machine without GPUs has
   * none to use, and is not an error). */
  int first_gpu;
  /* With simulate: the simulated job's ranks (0 or 1: one process), every one of them run in
   * this process on the simulated machine, as `mpirun -np sim_ranks` would run them
   * (docs/simulator.md, "Several ranks"): weft_runtime_ranks says sim_ranks, tensors and nodes
   * may be any rank's, and a copy between ranks is priced as a message over the profile's
   * `ranks` link (ranks of one host) or `network` link (between hosts). Each rank has its own
   * CPU workers (cpu_workers each, else its share of the host's cores, less one for its progress
   * thread when ranks share the host, as a real rank has) and its share of the host's GPUs
   * (max_gpus caps it). */
  int sim_ranks;
  /* ... how many of them share one simulated host (0: all of them). */
  int sim_ranks_per_host;
} weft_runtime_options;

typedef enum weft_bind { WEFT_BIND_AUTO = 0, WEFT_BIND_NONE = 1, WEFT_BIND_CORES = 2 } weft_bind;

/* The host's CPU as the runtime found it (hwloc), counted within the cores this process may
 * run on. */
typedef struct weft_cpu_topology {
  int packages, numa_nodes, cores, pus; /* pus: hardware threads */
  size_t l1d_bytes, l2_bytes, l3_bytes; /* the caches of the first core (0: unknown) */
  int workers;                          /* the CPU workers */
  int bound;                            /* 1: worker i runs on core i (mod cores) */
} weft_cpu_topology;

/* Fills *out. Returns WEFT_OK, or WEFT_EINVAL for a NULL argument. Thread-safe: yes. */
WEFT_API int weft_runtime_cpu_topology(const weft_runtime *rt, weft_cpu_topology *out);

/* Fills `o` with the defaults. */
WEFT_API void weft_runtime_options_init(weft_runtime_options *o);

/* This process's rank and the number of ranks: a runtime created in a process started by
 * mpirun (or after the application's MPI_Init) spans the job's processes (docs/distributed.md);
 * otherwise 0 and 1. */
WEFT_API int weft_runtime_rank(const weft_runtime *rt);
WEFT_API int weft_runtime_ranks(const weft_runtime *rt);

/* Creates a runtime: the CPU worker pool and, where there are GPUs, their streams and
 * allocators. `o` may be NULL for the defaults. On a machine with no GPU (or no driver) the
 * runtime starts with the CPU alone and says so once on stderr (unless WEFT_RUNTIME_QUIET).
 * Returns WEFT_OK and stores the runtime in *out, or an error. Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_runtime_create(const weft_runtime_options *o,
                                                weft_runtime **out);

/* Destroys the runtime. Every graph of it must have been destroyed. NULL is a no-op. */
WEFT_API void weft_runtime_destroy(weft_runtime *rt);

/* Number of devices of `kind` (WEFT_DEVICE_CPU: always 1). Thread-safe: yes. */
WEFT_API int weft_device_count(const weft_runtime *rt, int kind);

/* Returns 1 if `d` is a device of this runtime. Thread-safe: yes. */
WEFT_API int weft_device_exists(const weft_runtime *rt, weft_device d);

/* Returns cuda:i if that GPU exists, else the CPU (the reference notes' try_gpu). */
WEFT_API weft_device weft_try_gpu(const weft_runtime *rt, int i);

/* Stores every GPU in out[0..cap) and returns how many there are; with no GPU, stores the CPU
 * and returns 1 (the reference notes' try_all_gpus). */
WEFT_API int weft_all_gpus(const weft_runtime *rt, weft_device *out, int cap);

/* Properties of a device, for `weft devices` and for planning. */
typedef struct weft_device_info {
  weft_device device;
  char name[128];        /* "NVIDIA H100 80GB HBM3", or the CPU's model name */
  size_t memory_bytes;   /* total memory (host RAM for the CPU) */
  int copy_engines;      /* asynchronous copy engines (0 for the CPU) */
  int compute_major;     /* compute capability (0 for the CPU) */
  int compute_minor;
  int multiprocessors;   /* SMs, or cores for the CPU */
  int simulated;         /* 1 if this device is virtual (simulate option) */
  int ordinal;           /* a GPU's index among those this process sees (CUDA_VISIBLE_DEVICES
                            applied): cuda:i is GPU first_gpu + i (weft_runtime_options); 0 for
                            the CPU */
} weft_device_info;

/* Fills *out for device `d`. Returns WEFT_EDEVICE if the runtime has no such device. */
WEFT_NODISCARD WEFT_API int weft_device_info_get(const weft_runtime *rt, weft_device d,
                                                 weft_device_info *out);

/* The memory a device holds for weft's tensors: now, at most at once since the runtime was
 * created, and what weft holds from the system or driver for them. The host: the storage of
 * host tensors (pageable and pinned) of more than 256 bytes; a GPU: weft's pool's allocations (kept tensors,
 * temporaries, replayed graphs) and what the pool and the libraries' workspaces hold. What
 * `weft serve` reports per device (/metrics, /v1/devices, the dashboard). */
typedef struct weft_memory_usage {
  size_t in_use;   /* bytes in use by tensors now */
  size_t peak;     /* the most in use at once */
  size_t reserved; /* held by weft for the device (host: in_use) */
} weft_memory_usage;

/* Fills *out for device `d`. WEFT_EDEVICE for a device the runtime lacks; WEFT_ENOTSUP for a
 * simulated GPU (it holds no memory: weft_sim_peak_bytes models it per run). Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_device_memory_usage(weft_runtime *rt, weft_device d,
                                                     weft_memory_usage *out);

/* Returns 1 if device a can read device b's memory directly (peer access), else 0. */
WEFT_API int weft_device_can_access_peer(const weft_runtime *rt, weft_device a,
                                         weft_device b);

/* Number of CPU worker threads of the runtime. */
WEFT_API int weft_runtime_cpu_workers(const weft_runtime *rt);

/* Returns the most threads one CPU matrix product of the runtime uses (its tiles run on that
 * many workers): the blas_threads option, else every worker. On a simulated runtime, the
 * simulated host's, by which it prices a CPU product, by the same rule. Thread-safe: yes. */
WEFT_API int weft_runtime_blas_threads(const weft_runtime *rt);

/* How the BLAS library behind the CPU's matrix products runs a call (weft_blas_info). */
typedef enum weft_blas_threading {
  WEFT_BLAS_SEQUENTIAL = 0, /* on the calling thread alone (a serial build) */
  WEFT_BLAS_PTHREADS = 1,   /* on threads of its own (OpenBLAS's pthreads build keeps a pool) */
  WEFT_BLAS_OPENMP = 2,     /* on OpenMP threads (OpenBLAS's or BLIS's OpenMP build) */
  WEFT_BLAS_THREADED = 3,   /* on threads of its own of a kind it does not say (MKL) */
  WEFT_BLAS_UNKNOWN = 4,    /* a library weft cannot ask (not OpenBLAS, BLIS or MKL) */
} weft_blas_threading;

/* The BLAS library that serves the CPU's matrix products, as found loaded in the process. */
typedef struct weft_blas_info {
  char library[256]; /* the file that provides cblas_sgemm, as the loader loaded it ("" when it
                        cannot tell) */
  char name[32];     /* "BLIS 0.9.0", "OpenBLAS 0.3.21", "MKL", or "unknown" */
  char config[160];  /* the library's own description of its build (OpenBLAS's
                        openblas_get_config, BLIS's version and kernels, MKL's version
                        string), or "" */
  int threading;     /* weft_blas_threading */
  int threads;       /* threads one call may use, the caller's included, as the library was set
                        before weft's first runtime (OPENBLAS_NUM_THREADS, else the cores, for
                        OpenBLAS): 1 when sequential, 0 when unknown */
  int competes;      /* 1 when the library runs threads of its own (threading is neither
                        sequential nor unknown, and threads > 1): they compete with weft's
                        workers for the cores */
  int thread_safe;   /* 0 when the library cannot be called from two threads at once: a serial
                        OpenBLAS built without USE_LOCKING (Debian 12's libopenblas0-serial;
                        OpenBLAS says so only from 0.3.28). weft then makes one BLAS call at a
                        time, in every runtime of the process */
  char message[512]; /* when the library competes, is not thread-safe or has a known fault
                        (BLIS before 2.0 reads out of bounds): what that costs and what to
                        change, as `weft devices` and the run statistics say it; else "" */
  int stopped;       /* 1 when the library is OpenBLAS's pthreads build whose pool of threads,
                        started when it was loaded, weft stopped when it loaded (it holds
                        the library to one thread a call, which needs no pool): it no longer
                        competes */
} weft_blas_info;

/* Fills *out with the BLAS library that serves the runtime's CPU matrix products, found when
 * the runtime was created: which file the loader bound weft's cblas_sgemm to, and how it runs.
 * weft links a serial, thread-safe BLAS where its build finds one, which starts no thread, and
 * else OpenBLAS's pthreads build held to one thread a call, whose pool of threads starts when
 * it is loaded; an application that linked or preloaded another CBLAS first replaces weft's for
 * the whole process. A library's own threads compete with weft's workers for the cores
 * (docs/architecture.md, "Threads and the cores"); `message` says so, and what to change.
 * Returns WEFT_OK, or WEFT_EINVAL for a NULL argument. Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_runtime_blas_info(const weft_runtime *rt, weft_blas_info *out);

/* The name of a weft_blas_threading value: "sequential", "pthreads", "openmp", "threaded" or
 * "unknown" (also for a value out of range). Thread-safe: yes. */
WEFT_API const char *weft_blas_threading_name(int threading);

/* Turns batches on or off for the runtime's GPUs, real or simulated, for graphs planned
 * afterwards (new or changed ones). A batch is a chain of small elementwise GPU nodes (add,
 * sub, mul, scale, relu over at most 16 384 elements, each node the only successor of the one
 * before, on one stream) launched as one kernel of up to 128 ops, so that such chains do not
 * pay a launch per node on a first run; the results are those of one kernel per node, bit for
 * bit (docs/cuda.md, "Batches"). On by default; WEFT_CUDA_BATCH=0 turns it off at runtime
 * creation, and this call overrides it. Batches stay off on real GPUs under
 * WEFT_LAUNCH_BLOCKING, and on a simulated machine whose profile does not price them (no
 * batch_op_s). A runtime without GPUs ignores the call.
 * Thread-safe: yes (graphs planned before keep their plans). */
WEFT_API void weft_runtime_set_batching(weft_runtime *rt, int enabled);

/* ---------------------------------------------------------------------------------------- */
/* Graphs, tensors and nodes                                                                 */
/* ---------------------------------------------------------------------------------------- */

typedef struct weft_graph weft_graph;
typedef struct weft_tensor weft_tensor;
typedef struct weft_node weft_node;
typedef struct weft_op weft_op;
typedef struct weft_run weft_run;

#define WEFT_MAX_DIMS 4

typedef enum weft_dtype { WEFT_F32 = 0, WEFT_F64 = 1 } weft_dtype;

/* Size in bytes of one element of `dt` (0 for an unknown dtype). */
WEFT_API size_t weft_dtype_size(weft_dtype dt);
/* "f32" or "f64". */
WEFT_API const char *weft_dtype_name(weft_dtype dt);

/* Creates an empty graph of runtime `rt`. Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_graph_create(weft_runtime *rt, weft_graph **out);

/* Destroys the graph, its tensors and nodes; waits for a run in flight to finish first.
 * NULL is a no-op. */
WEFT_API void weft_graph_destroy(weft_graph *g);

/* The runtime of the graph. */
WEFT_API weft_runtime *weft_graph_runtime(const weft_graph *g);

/* Strict device mode: an op whose input lives on another device is an error instead of
 * getting a copy node inserted automatically. Off by default. */
WEFT_API void weft_graph_set_strict(weft_graph *g, int strict);

/* How a tensor's contents start. Applied once, when the tensor's storage is first
 * materialised (at the first launch or the first read/write), not on every run. */
typedef enum weft_init_kind {
  WEFT_INIT_ZEROS = 0,
  WEFT_INIT_ONES,
  WEFT_INIT_FULL,    /* a = value */
  WEFT_INIT_UNIFORM, /* uniform in [a, b), from seed */
  WEFT_INIT_NORMAL,  /* normal with mean a and standard deviation b, from seed */
  WEFT_INIT_EYE,     /* a on the diagonal (row == column), 0 elsewhere; 2-D tensors only. The
                      * tensor (or fill) stores its row length in seed */
} weft_init_kind;

typedef struct weft_init {
  int kind; /* weft_init_kind */
  double a, b;
  uint64_t seed;
} weft_init;

WEFT_API weft_init weft_zeros(void);
WEFT_API weft_init weft_ones(void);
WEFT_API weft_init weft_full(double value);
/* Uniform in [lo, hi). The same seed gives the same values on every run: the generator is
 * Philox-4x32-10 keyed by the seed and counted by element index, so a tensor's values do not
 * depend on the device, the number of threads or the order of execution. */
WEFT_API weft_init weft_uniform(double lo, double hi, uint64_t seed);
/* Normal(mean, std) by Box-Muller over the same Philox stream. */
WEFT_API weft_init weft_normal(double mean, double std, uint64_t seed);
/* `value` on the diagonal, 0 elsewhere (weft_eye(1): the identity); for 2-D tensors. */
WEFT_API weft_init weft_eye(double value);

/* Creates a tensor of `ndim` (0..4) dimensions `shape` on `device`, initialised by `init`.
 * `name` (may be NULL: then "t<id>") is copied; it is used in messages and by the .weft
 * writer. Fails with WEFT_EDEVICE if the runtime has no such device, WEFT_ESHAPE for a
 * negative dimension, more than 4 dimensions or too many elements, WEFT_EDTYPE for an unknown
 * dtype, WEFT_EINVAL for a bad initialiser (uniform with lo > hi, normal with std < 0) and
 * WEFT_EBUSY while a run of g is in flight. The tensor is kept: its contents persist between
 * runs and can be read after a run. */
WEFT_NODISCARD WEFT_API int weft_tensor_create(weft_graph *g, const char *name, weft_dtype dt,
                                               int ndim, const int64_t *shape,
                                               weft_device device, weft_init init,
                                               weft_tensor **out);

/* Marks a tensor created by an op (with *out == NULL) as kept. By default such a tensor is a
 * temporary if a later node of the graph reads it: its storage may be released after its last
 * use, and reading it after a run is an error (WEFT_ESTATE). A tensor no later node reads is a
 * result and is always kept. */
WEFT_API void weft_tensor_keep(weft_tensor *t);
/* Returns 1 if the tensor is kept (its contents are readable after a run). */
WEFT_API int weft_tensor_is_kept(const weft_tensor *t);

WEFT_API weft_dtype weft_tensor_dtype(const weft_tensor *t);
WEFT_API int weft_tensor_ndim(const weft_tensor *t);
/* Size of dimension i (0 <= i < ndim). */
WEFT_API int64_t weft_tensor_dim(const weft_tensor *t, int i);
WEFT_API int64_t weft_tensor_numel(const weft_tensor *t);
WEFT_API size_t weft_tensor_bytes(const weft_tensor *t);
WEFT_API weft_device weft_tensor_device(const weft_tensor *t);
WEFT_API const char *weft_tensor_name(const weft_tensor *t);
/* Renames the tensor (the name is copied). WEFT_EBUSY while a run of its graph is in flight
 * (a failing node's message may be reading the name). */
WEFT_NODISCARD WEFT_API int weft_tensor_set_name(weft_tensor *t, const char *name);
/* The tensor's position in creation order (0-based). */
WEFT_API size_t weft_tensor_id(const weft_tensor *t);
WEFT_API weft_graph *weft_tensor_graph(const weft_tensor *t);
/* How the tensor was initialised at creation. */
WEFT_API weft_init weft_tensor_init(const weft_tensor *t);
/* 1 for a tensor created on weft_auto() (its device is the planner's choice). */
WEFT_API int weft_tensor_is_auto(const weft_tensor *t);

/* Copies the tensor's contents (row-major; `size` must equal weft_tensor_bytes) into `dst`.
 * Works for any device (a GPU tensor is copied back). It does not wait for a run: while a run
 * of the graph is in flight it fails with WEFT_EBUSY. Reading a temporary after a run fails
 * with WEFT_ESTATE (see weft_tensor_keep). Thread-safe: no (with respect to its graph). */
WEFT_NODISCARD WEFT_API int weft_tensor_read(weft_tensor *t, void *dst, size_t size);
/* As weft_tensor_read, on every rank of a run across processes (docs/distributed.md): a
 * collective call (every rank calls it, for the same tensors in the same order); the rank that
 * owns the tensor reads it and every rank gets its contents. weft_tensor_read of another rank's
 * tensor fails with WEFT_EDEVICE. Without MPI it is weft_tensor_read. */
WEFT_NODISCARD WEFT_API int weft_tensor_read_all(weft_tensor *t, void *dst, size_t size);
/* Copies `size` bytes (== weft_tensor_bytes) from `src` into the tensor. Same rules. */
WEFT_NODISCARD WEFT_API int weft_tensor_write(weft_tensor *t, const void *src, size_t size);
/* Reads element `index` (flat, row-major) converted to double. */
WEFT_NODISCARD WEFT_API int weft_tensor_get(weft_tensor *t, int64_t index, double *out);

/* Tiles. weft_tensor_tiles partitions a 2-D tensor x [m,n] into a grid of tiles of
 * tile_rows x tile_cols (the last row and column of tiles take what is left: a ragged edge).
 * A tile is a tensor that views its part of x: it owns no storage, lives on x's device, and
 * nodes read and write it like any tensor. Dependencies are tracked per tile, and a node that
 * uses the whole of x depends on (and orders) every tile, so tiles and the whole tensor mix
 * freely in one graph. A tile narrower than x is strided (its rows are x's rows): the dense
 * linear-algebra ops below and copies (weft_copy: a 2-D copy) take it; the other ops and user
 * ops need contiguous data and refuse it with WEFT_ESHAPE. The tiles are created in row-major grid order, after x.
 * Fails with WEFT_ESHAPE if x is not 2-D or a tile size is not positive, WEFT_ESTATE if x is
 * a tile or is already partitioned, WEFT_EBUSY while a run is in flight. */
WEFT_NODISCARD WEFT_API int weft_tensor_tiles(weft_graph *g, weft_tensor *x, int64_t tile_rows,
                                              int64_t tile_cols);
/* Distributes the tiles of a partitioned tensor 2-D block-cyclically over a P x Q grid of
 * places, the layout of ScaLAPACK and of every distributed dense solver: tile (i, j) is owned
 * by place p = (i mod P) * Q + (j mod Q), lives there only (in storage of its own, contiguous:
 * x itself has none), and the nodes that write it run there (owner computes); the tiles a node
 * reads from other places come as copies (another GPU: over the peer link) or, from another
 * rank, as messages (docs/distributed.md). The places: for a tensor on the CPU, the ranks of an
 * MPI run (place p is rank p's CPU); for a tensor on a GPU, every GPU of every rank (place p
 * is GPU p mod G of rank p / G, G the GPUs each rank has): in one process, its GPUs. Every
 * rank calls it, before any node uses x or its tiles. x itself then has no one home: ops take
 * its tiles (an op on the whole of x fails with WEFT_EDEVICE); weft_tensor_read gathers it
 * (across ranks: weft_tensor_read_all, on every rank); weft_tensor_write on any rank writes
 * the tiles that rank owns from a buffer of the whole; its initialiser gives every element
 * the value it would have without distribution.
 * Fails with WEFT_ESTATE if x has no tiles, is distributed already or is used by a node,
 * WEFT_EDEVICE if P x Q exceeds the places (or x is on a GPU and the run has none),
 * WEFT_ENOTSUP if x is on auto (the planner places its tiles). */
WEFT_NODISCARD WEFT_API int weft_tensor_distribute(weft_graph *g, weft_tensor *x, int P, int Q);
/* Tile (i, j) of a partitioned tensor, or NULL when x is not partitioned or (i, j) is outside
 * its grid. */
WEFT_API weft_tensor *weft_tensor_tile(const weft_tensor *x, int64_t i, int64_t j);
/* The number of tiles down (dim 0) or across (dim 1) x's grid; 0 when x is not partitioned. */
WEFT_API int64_t weft_tensor_tile_count(const weft_tensor *x, int dim);
/* The tensor a tile views, or NULL for a tensor that is not a tile. */
WEFT_API weft_tensor *weft_tensor_parent(const weft_tensor *t);

/* ---------------------------------------------------------------------------------------- */
/* Ops                                                                                       */
/* ---------------------------------------------------------------------------------------- */

/* Every op runs on the device of its result (*out when given, else its first input). An
 * input that lives on another device gets a copy node inserted before the op (listed by
 * `weft explain`), or, in strict mode, the op fails with WEFT_EDEVICE. Shapes and dtypes are
 * checked here; the error names the node and what is wrong. Each call adds exactly one node
 * (plus any inserted copies) and returns WEFT_OK, or an error and adds nothing. */

/* Matrix product: a [m,k] x b [k,n] -> [m,n]. cuBLAS on a GPU, OpenBLAS on the CPU. */
WEFT_NODISCARD WEFT_API int weft_mm(weft_graph *g, weft_tensor *a, weft_tensor *b,
                                    weft_tensor **out);
/* Elementwise a + b, a - b, a * b (same shape and dtype). */
WEFT_NODISCARD WEFT_API int weft_add(weft_graph *g, weft_tensor *a, weft_tensor *b,
                                     weft_tensor **out);
WEFT_NODISCARD WEFT_API int weft_sub(weft_graph *g, weft_tensor *a, weft_tensor *b,
                                     weft_tensor **out);
WEFT_NODISCARD WEFT_API int weft_mul(weft_graph *g, weft_tensor *a, weft_tensor *b,
                                     weft_tensor **out);
/* alpha * x. */
WEFT_NODISCARD WEFT_API int weft_scale(weft_graph *g, weft_tensor *x, double alpha,
                                       weft_tensor **out);
/* max(x, 0). */
WEFT_NODISCARD WEFT_API int weft_relu(weft_graph *g, weft_tensor *x, weft_tensor **out);
/* Sum of all elements, as a 0-d tensor. */
WEFT_NODISCARD WEFT_API int weft_sum(weft_graph *g, weft_tensor *x, weft_tensor **out);
/* Frobenius norm sqrt(sum x^2), as a 0-d tensor. */
WEFT_NODISCARD WEFT_API int weft_norm(weft_graph *g, weft_tensor *x, weft_tensor **out);
/* x [n,in] . w[out,in]^T + b[out] -> [n,out]; b may be NULL. */
WEFT_NODISCARD WEFT_API int weft_linear(weft_graph *g, weft_tensor *x, weft_tensor *w,
                                        weft_tensor *b, weft_tensor **out);
/* Copies src to `device` (a new tensor when *out is NULL), or into *out (same shape and dtype,
 * any device; `device` is then ignored). Device-to-host copies land in pinned memory. */
WEFT_NODISCARD WEFT_API int weft_copy(weft_graph *g, weft_tensor *src, weft_device device,
                                      weft_tensor **out);
/* A node that sets every element of t from `init` on every run (unlike a tensor's creation
 * initialiser, which applies once). */
WEFT_NODISCARD WEFT_API int weft_fill(weft_graph *g, weft_tensor *t, weft_init init);

/* Dense linear algebra in place, for tiled factorisations: cuBLAS/cuSOLVER on a GPU, OpenBLAS
 * (BLAS and its LAPACK) on the CPU, f32 and f64, on whole 2-D tensors or tiles (strided tiles
 * included). The updated tensor is read and written (trtri's W only written); the others are
 * read. All operands must share the dtype. The node runs on the updated tensor's device; an
 * operand on another device gets a copy node as for every op (a strided tile a 2-D copy into a
 * contiguous replica; in strict mode: WEFT_EDEVICE); an operand on auto beside a fixed one is
 * WEFT_EDEVICE. Row-major, as every weft tensor. `uplo` names the triangle used, as in LAPACK:
 * WEFT_LOWER or WEFT_UPPER.
 *
 * weft_gemm:  C = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T (trans_a, trans_b).
 * weft_potrf: the Cholesky factor of the symmetric positive definite A, in A's `uplo` triangle
 *             (only that triangle is read; the other strict triangle is left as it was):
 *             lower, A = L L^T; upper, A = U^T U. A matrix that is not positive definite fails
 *             the node, naming it and the tile.
 * weft_trsm:  B = alpha * B * op(T)^-1 (right, the tiled Cholesky's panel solve) or
 *             B = alpha * op(T)^-1 * B (left), T triangular (its `uplo` triangle with the
 *             diagonal; the other strict triangle is not read).
 * weft_trmm:  B = alpha * B * op(T) (right) or B = alpha * op(T) * B (left), T as for trsm:
 *             with T the inverse of a factor, a panel solve as a product (docs/placement.md).
 * weft_trtri: W = T^-1, T triangular (its `uplo` triangle with the diagonal; the other strict
 *             triangle is not read); W (T's shape, apart from T) is written whole, its other
 *             strict triangle zero: the inverted diagonal factor of a panel solved by trmm. A
 *             zero on T's diagonal fails the node, naming it and the row.
 * weft_syrk:  C = alpha * A * A^T + beta * C (trans 0) or alpha * A^T * A + beta * C (trans 1),
 *             on C's `uplo` triangle (the other strict triangle is left as it was). */
typedef enum weft_side { WEFT_LEFT = 0, WEFT_RIGHT = 1 } weft_side;
typedef enum weft_uplo { WEFT_LOWER = 0, WEFT_UPPER = 1 } weft_uplo;
WEFT_NODISCARD WEFT_API int weft_gemm(weft_graph *g, weft_tensor *a, int trans_a, weft_tensor *b,
                                      int trans_b, double alpha, double beta, weft_tensor *c);
WEFT_NODISCARD WEFT_API int weft_potrf(weft_graph *g, weft_uplo uplo, weft_tensor *a);
WEFT_NODISCARD WEFT_API int weft_trsm(weft_graph *g, weft_side side, weft_uplo uplo, int trans,
                                      double alpha, weft_tensor *t, weft_tensor *b);
WEFT_NODISCARD WEFT_API int weft_trmm(weft_graph *g, weft_side side, weft_uplo uplo, int trans,
                                      double alpha, weft_tensor *t, weft_tensor *b);
WEFT_NODISCARD WEFT_API int weft_trtri(weft_graph *g, weft_uplo uplo, weft_tensor *t, weft_tensor *w);
WEFT_NODISCARD WEFT_API int weft_syrk(weft_graph *g, weft_uplo uplo, int trans, double alpha,
                                      weft_tensor *a, double beta, weft_tensor *c);

/* ---------------------------------------------------------------------------------------- */
/* User ops                                                                                  */
/* ---------------------------------------------------------------------------------------- */

typedef enum weft_access {
  WEFT_READ = 1,
  WEFT_WRITE = 2,
  WEFT_READ_WRITE = 3,
} weft_access;

/* The arguments an op desc lists one by one; an op with `rest` set takes any number more, up to
 * WEFT_MAX_CALL_ARGS in all. */
#define WEFT_MAX_ARGS 16
#define WEFT_MAX_CALL_ARGS 65535

/* What a kernel sees: its node's tensors (on the node's device), its parameters, and (in
 * weft/cuda.h) its stream and cuBLAS handle. Valid only during the kernel call. */
typedef struct weft_kernel_ctx weft_kernel_ctx;

/* A kernel: does the node's work (on the CPU) or enqueues it on the context's stream (on a
 * GPU), and returns WEFT_OK or an error (use weft_ctx_fail for a message). */
typedef int (*weft_kernel_fn)(weft_kernel_ctx *ctx);

typedef struct weft_op_desc {
  const char *name;              /* unique in the runtime; [A-Za-z_][A-Za-z0-9_]* */
  int nargs;                     /* the listed arguments, 0..WEFT_MAX_ARGS */
  weft_access access[WEFT_MAX_ARGS];
  weft_kernel_fn cpu;            /* kernel for the CPU, or NULL */
  weft_kernel_fn cuda;           /* kernel for CUDA devices, or NULL */
  void *user;                    /* passed to kernels through weft_ctx_user */
  /* Optional cost hint in floating-point operations for planners and the simulator. */
  double (*cost)(const weft_tensor *const *args, int nargs, const void *params, void *user);
  /* 0 (the default): the op takes exactly its nargs listed arguments. Else an access mode: a
   * call may pass any number of further arguments after the listed ones, each with this mode
   * (WEFT_READ for an op that reads a varying number of inputs, as Task Bench's all_to_all
   * tasks do), up to WEFT_MAX_CALL_ARGS in all. */
  weft_access rest;
} weft_op_desc;

/* Registers a user op in the runtime (the desc is copied). Returns WEFT_EINVAL for a bad or
 * duplicate name, a bad arity or access mode, or no kernel at all. Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_op_register(weft_runtime *rt, const weft_op_desc *desc,
                                             const weft_op **out);
/* Finds a user op by name, or returns NULL. Thread-safe: yes. */
WEFT_API const weft_op *weft_op_find(const weft_runtime *rt, const char *name);
WEFT_API const char *weft_op_name(const weft_op *op);

/* Adds a node running user op `op` on `args` (nargs must match the op, or be at least its
 * listed arguments for an op with `rest`), with a copy of `params` (params_size bytes; may be
 * 0). The node runs on the device of its first written
 * argument (else its first argument); every written argument must live there. */
WEFT_NODISCARD WEFT_API int weft_call(weft_graph *g, const weft_op *op,
                                      weft_tensor *const *args, int nargs, const void *params,
                                      size_t params_size);

/* Kernel context accessors. */
WEFT_API void *weft_ctx_data(const weft_kernel_ctx *ctx, int i);
WEFT_API const weft_tensor *weft_ctx_tensor(const weft_kernel_ctx *ctx, int i);
WEFT_API int weft_ctx_nargs(const weft_kernel_ctx *ctx);
WEFT_API const void *weft_ctx_params(const weft_kernel_ctx *ctx, size_t *size);
WEFT_API void *weft_ctx_user(const weft_kernel_ctx *ctx);
WEFT_API weft_device weft_ctx_device(const weft_kernel_ctx *ctx);
/* Records a formatted message for the node's failure and returns WEFT_EKERNEL. */
WEFT_API int weft_ctx_fail(weft_kernel_ctx *ctx, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---------------------------------------------------------------------------------------- */
/* Nodes, edges and introspection                                                            */
/* ---------------------------------------------------------------------------------------- */

/* The node added last, or NULL. */
WEFT_API weft_node *weft_graph_last_node(const weft_graph *g);
WEFT_API size_t weft_graph_node_count(const weft_graph *g);
WEFT_API weft_node *weft_graph_node(const weft_graph *g, size_t i);
WEFT_API size_t weft_graph_tensor_count(const weft_graph *g);
WEFT_API weft_tensor *weft_graph_tensor(const weft_graph *g, size_t i);
/* Finds a tensor by name (the first with that name), or NULL. */
WEFT_API weft_tensor *weft_graph_find_tensor(const weft_graph *g, const char *name);

/* Adds an explicit edge: `after` starts only when `before` has finished. Both must belong to
 * g. An edge from a node to itself fails at once with WEFT_ECYCLE; a longer cycle is reported
 * at the next launch or analyse. An edge that repeats one weft inferred (or an earlier
 * explicit one) is listed once. */
WEFT_NODISCARD WEFT_API int weft_graph_add_edge(weft_graph *g, weft_node *before,
                                                weft_node *after);

/* Runs the dependency analysis now (launch does it when the graph changed). Returns
 * WEFT_ECYCLE, naming the nodes of a cycle, if explicit edges made one. */
WEFT_NODISCARD WEFT_API int weft_graph_analyse(weft_graph *g);

typedef enum weft_hazard {
  WEFT_HAZARD_RAW = 1,      /* reads what the other wrote */
  WEFT_HAZARD_WAR = 2,      /* writes what the other read */
  WEFT_HAZARD_WAW = 3,      /* writes what the other wrote */
  WEFT_HAZARD_EXPLICIT = 4, /* added by weft_graph_add_edge */
} weft_hazard;

typedef struct weft_edge {
  weft_node *from, *to;
  int hazard;               /* weft_hazard */
  weft_tensor *tensor;      /* the tensor that causes it; NULL for explicit edges */
} weft_edge;

/* After analysis: the number of edges, and edge i. Edges implied by others are omitted
 * (a writer waits for the readers since the last write, not also for that write). */
WEFT_API size_t weft_graph_edge_count(const weft_graph *g);
WEFT_NODISCARD WEFT_API int weft_graph_edge(const weft_graph *g, size_t i, weft_edge *out);

/* Stores in *out the number of nodes on the longest chain of dependent nodes (0 for an empty
 * graph), analysing the graph first if it changed. Returns WEFT_OK, or the analysis's error.
 * Thread-safe: no (not while the graph is being changed or launched). */
WEFT_NODISCARD WEFT_API int weft_graph_depth(weft_graph *g, size_t *out);
/* An estimate, made before anything is allocated, of the most memory the graph's tensors take
 * at once on `device` (weft_cpu(): the host; tensors on auto count there, where placement may
 * leave them; weft_cuda(k): that GPU), into *bytes: every tensor that lives through the run
 * (declared, results, copies), plus the most its temporaries (results of ops that a later node
 * reads and nobody keeps) take at once in the program's order. A parallel schedule may hold a
 * few temporaries more for a moment. `weft serve` admits submissions by it. Analyses the graph
 * if needed: the analysis's errors are returned. */
WEFT_NODISCARD WEFT_API int weft_graph_memory_estimate(weft_graph *g, weft_device device, size_t *bytes);

/* Where the plan runs a node, and why (what `weft explain` prints). */
typedef struct weft_placement {
  weft_device device; /* the node's device */
  char lane[64];      /* "cpu workers", "cuda:0 stream 2", "cuda:0 copy d2h", with
                         " (simulated)" on a simulated machine */
  char why[320];      /* the rule of the plan that put it there, in a sentence or two */
  size_t order;       /* the node's position in the plan's order (0-based): the program's
                         with the `fixed` policy, list scheduling's with `heft` */
} weft_placement;

/* Fills *out with where node n runs and why, building the graph's plan as a launch would
 * (nothing runs). Returns WEFT_OK,
 * WEFT_EBUSY while a run of the graph is in flight, WEFT_EINVAL for a node of another graph,
 * or the error of the analysis or the plan. Thread-safe: no (one thread per graph). */
WEFT_NODISCARD WEFT_API int weft_node_placement(weft_graph *g, const weft_node *n, weft_placement *out);

WEFT_API size_t weft_node_id(const weft_node *n);
/* The op's name: "mm", "add", ..., "copy", "fill", or the user op's name. */
WEFT_API const char *weft_node_op_name(const weft_node *n);
/* The user op of a weft_call node, or NULL for a built-in. */
WEFT_API const weft_op *weft_node_user_op(const weft_node *n);
/* The device the node runs on. */
WEFT_API weft_device weft_node_device(const weft_node *n);
WEFT_API int weft_node_nargs(const weft_node *n);
/* Argument i and its access mode. Built-in ops list their inputs first, their result last. */
WEFT_API weft_tensor *weft_node_arg(const weft_node *n, int i, weft_access *mode);
/* Scalar parameter of a built-in op (scale's alpha; a fill's weft_init through
 * weft_node_fill_init), or the user op's parameter bytes. */
WEFT_API double weft_node_alpha(const weft_node *n);
WEFT_API weft_init weft_node_fill_init(const weft_node *n);
WEFT_API const void *weft_node_params(const weft_node *n, size_t *size);
/* 1 if weft inserted this node (an automatic copy), else 0. */
WEFT_API int weft_node_is_inserted(const weft_node *n);
WEFT_API const char *weft_node_name(const weft_node *n);
/* Names the node (copied), used in messages. WEFT_EBUSY while a run of its graph is in flight;
 * likewise weft_node_set_origin. */
WEFT_NODISCARD WEFT_API int weft_node_set_name(weft_node *n, const char *name);
/* Where the node comes from in a .weft file ("file.weft:3:5"), used in messages. */
WEFT_NODISCARD WEFT_API int weft_node_set_origin(weft_node *n, const char *origin);
WEFT_API const char *weft_node_origin(const weft_node *n);
/* Writes a one-line description ("node 7 'mm' (y3) on cuda:0 at f.weft:3:5"). */
WEFT_API char *weft_node_describe(const weft_node *n, char *buf, size_t size);

/* ---------------------------------------------------------------------------------------- */
/* Runs                                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* Called once when a run finishes, on a weft thread; must not block (so it must not wait for
 * or destroy its run). weft_run_error and weft_run_failed_node already answer inside it, and
 * it has returned by the time weft_run_wait returns. */
typedef void (*weft_run_cb)(weft_run *run, int status, void *arg);

/* Starts a run of the graph and returns at once with a handle in *out. The graph is analysed
 * and planned first if it changed. Fails with WEFT_EBUSY if a run of this graph is still in
 * flight, WEFT_ECYCLE for a cycle of explicit edges. If it fails, no run exists and `cb`
 * (weft_graph_launch_cb) is never called. Thread-safe: yes, for different graphs. */
WEFT_NODISCARD WEFT_API int weft_graph_launch(weft_graph *g, weft_run **out);
WEFT_NODISCARD WEFT_API int weft_graph_launch_cb(weft_graph *g, weft_run_cb cb, void *arg,
                                                 weft_run **out);

/* Blocks until the run has finished; returns its status: WEFT_OK, the first error of a node
 * (weft_run_error names it), or WEFT_ECANCELED. May be called more than once. */
WEFT_NODISCARD WEFT_API int weft_run_wait(weft_run *run);
/* Returns WEFT_EAGAIN while the run is in flight, else what weft_run_wait returns. */
WEFT_NODISCARD WEFT_API int weft_run_poll(weft_run *run);
/* Asks the run to stop: nodes not yet started are skipped, nodes already running finish. The
 * run's status becomes WEFT_ECANCELED, unless a node failed (one that was running when the
 * cancel came may still fail, and its error is the status then). A run that has finished is
 * not changed. NULL is a no-op. Returns at once. Thread-safe: yes. */
WEFT_API void weft_run_cancel(weft_run *run);
/* The run's error message ("" when it succeeded or is still running; set once it has finished,
 * in its callback too). */
WEFT_API const char *weft_run_error(const weft_run *run);
/* The node whose failure the status reports, or NULL. */
WEFT_API weft_node *weft_run_failed_node(const weft_run *run);
WEFT_API weft_graph *weft_run_graph(const weft_run *run);
/* Waits for the run if it is still in flight, then frees it. NULL is a no-op. */
WEFT_API void weft_run_destroy(weft_run *run);

/* Launches, waits and destroys the run: the blocking convenience. On failure the message is
 * in weft_last_error(). */
WEFT_NODISCARD WEFT_API int weft_graph_run(weft_graph *g);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_WEFT_H */
