/* cuda.h — the CUDA-specific part of weft's API: the stream and cuBLAS handle a user op's CUDA
 * kernel runs on, per-device memory statistics and the pool trim, and the replay switch.
 *
 * weft.h stays free of CUDA types; include this header (after weft.h or alone) where you
 * write CUDA kernels for user ops or read device statistics. It needs the CUDA toolkit's
 * headers (cuda_runtime_api.h, cublas_v2.h). In a weft built without CUDA these calls exist
 * only when WEFT_HAVE_CUDA is 1; check weft_device_count(rt, WEFT_DEVICE_CUDA) at run time.
 *
 * Memory model in one paragraph: every device has one stream-ordered memory pool
 * (cudaMallocFromPoolAsync). Kept tensors get storage from it when they are materialised;
 * temporaries (an op's result that a later node reads and that is not kept) get storage when
 * their first writer is enqueued and give it back on the device's timeline: once its last
 * reader is passed, a temporary is freed when a later allocation on its device claims it (the
 * oldest such ones beyond a window of the most recent), or else by the run's drain, so a graph
 * such as 50 x (y = x.x; copy y to the host) runs in a few buffers (docs/cuda.md, "Memory").
 * The pool keeps what it has reserved (like PyTorch's caching allocator) until
 * weft_cuda_memory_trim. */
#ifndef WEFT_CUDA_H
#define WEFT_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "weft/weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The stream the kernel of a user op must enqueue its work on (CUDA nodes only; NULL on the
 * CPU). The work must be enqueued, not waited for: weft orders the stream after the node's
 * inputs and reports completion itself. Valid only during the kernel call. Thread-safe: yes. */
WEFT_API cudaStream_t weft_ctx_cuda_stream(const weft_kernel_ctx *ctx);

/* A cuBLAS handle bound to weft_ctx_cuda_stream(ctx), with weft's math mode (exact fp32 unless
 * the runtime allows TF32). Use it only during the kernel call and do not change its stream or
 * workspace. NULL on the CPU. Thread-safe: yes. */
WEFT_API cublasHandle_t weft_ctx_cublas(const weft_kernel_ctx *ctx);

/* Memory of one device, in bytes. */
typedef struct weft_cuda_memory_stats {
  size_t allocated;     /* in use now by tensors (kept and temporaries) */
  size_t peak;          /* the most in use at once since the last reset */
  size_t reserved;      /* held by weft's pool (and replayed graphs) from the driver */
  size_t reserved_peak; /* the most held at once since the last reset */
  size_t workspace;     /* cuBLAS workspaces and reduction scratch, outside the pool */
} weft_cuda_memory_stats;

/* Fills *out for cuda:device. Returns WEFT_EDEVICE if the runtime has no such GPU.
 * Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_cuda_memory_stats_get(weft_runtime *rt, int device,
                                                       weft_cuda_memory_stats *out);

/* Starts the peaks of cuda:device afresh (peak = allocated, reserved_peak = reserved).
 * Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_cuda_memory_reset_peak(weft_runtime *rt, int device);

/* Gives memory the pool holds but does not use back to the driver, keeping at least
 * `keep_bytes` reserved; also trims the memory of replayed CUDA graphs. Device -1: every GPU.
 * Call it with no run in flight on the device. Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_cuda_memory_trim(weft_runtime *rt, int device, size_t keep_bytes);

/* Replay: when an unchanged graph whose nodes all run on GPUs runs again, weft captures it
 * into a CUDA graph at its second run and replays that graph from then on, so many small
 * nodes stop paying one launch each. On by default; the environment variable
 * WEFT_CUDA_REPLAY=0 turns it off at runtime creation. Graphs with user ops, CPU nodes or
 * host memory that is not pinned run eagerly always, as do all graphs under
 * WEFT_LAUNCH_BLOCKING. Thread-safe: yes (runs launched afterwards see the change). */
WEFT_API void weft_cuda_set_replay(weft_runtime *rt, int enabled);

/* Counts since the runtime was created, for tests and benchmarks. */
typedef struct weft_cuda_run_stats {
  unsigned long long eager_runs;       /* runs whose CUDA nodes were enqueued one by one */
  unsigned long long captures;         /* graphs captured into CUDA graphs */
  unsigned long long replays;          /* runs that replayed a captured graph */
  unsigned long long capture_failures; /* captures that failed (the run went eager) */
  unsigned long long combined;         /* nodes a worker found their stream busy for, and left
                                          to the thread enqueueing there (eager runs) */
} weft_cuda_run_stats;

/* Fills *out (all zero on a runtime without GPUs). Thread-safe: yes. */
WEFT_API void weft_cuda_run_stats_get(const weft_runtime *rt, weft_cuda_run_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_CUDA_H */
