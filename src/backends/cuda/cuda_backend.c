/* cuda_backend.c — the CUDA backend's devices and storage: discovery, per-device streams,
 * cuBLAS handles and memory pool, the storage hooks of kept tensors, the pinned host pool, the
 * memory statistics of weft/cuda.h, and the backend's table.
 *
 * Devices. cuda:i is CUDA device first + i as the runtime numbers them (so CUDA_VISIBLE_DEVICES
 * applies), max_gpus of them at most; `first` is the first_gpu option, or, where MPI ranks share
 * the host and it has a GPU for each, this rank's share (local rank r of L: r G/L, G/L GPUs). A
 * machine with no driver or no GPU gives zero devices and no error: the runtime then runs on the
 * CPU alone. Each device gets:
 *   - CU_DEFAULT_COMPUTE compute streams (WEFT_CUDA_STREAMS=1..8 changes it), each with its own
 *     cuBLAS handle and workspace and a scratch buffer for reductions, and one stream per
 *     copy direction (host to device, device to host, device to peer), so copies use the copy
 *     engines while kernels run;
 *   - a `sync` stream for the synchronous calls (tensor reads and writes, initialisers) and a
 *     `join` stream on which a run's drain waits for every stream;
 *   - one memory pool (cudaMemPoolCreate) that keeps what it reserves (release threshold at
 *     the maximum) and reuses memory across streams only where stream order or events allow it
 *     (internal dependencies off: the plan orders reuse itself, see src/sched/plan/memory.c);
 *   - a completion thread (cuda_complete.c).
 * Peer access is enabled for every pair that supports it, for both the devices and the pools.
 *
 * Pinned host pool. CPU tensors that GPUs copy to or from get page-locked memory, so the
 * copies are truly asynchronous. Blocks up to 1 MiB come from 4 MiB slabs split into power-of-
 * two classes; larger blocks are allocated one by one and kept on release, up to
 * PINNED_CACHE bytes, for the next graph (pinning memory costs about as much as copying it).
 * One mutex guards the pool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"
#include "sched/plan/plan.h"
#include "weft/cuda.h"

enum {
  PINNED_SMALL_MAX = 1 << 20,
  PINNED_SLAB = 4 << 20,
  PINNED_MIN_CLASS = 6,
  PINNED_MAX_CLASS = 20,
};
#define PINNED_CACHE ((size_t)2 << 30)


const char *weft__cu_errname(cudaError_t e) { return cudaGetErrorName(e); }

const char *weft__cu_blasname(cublasStatus_t s) { return cublasGetStatusName(s); }

int weft__cu_set_device(cu_device *d) {
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur == d->ordinal) return WEFT_OK;
  cudaError_t e = cudaSetDevice(d->ordinal);
  if (e != cudaSuccess)
    return weft__err(WEFT_ECUDA, "cudaSetDevice(%d) failed: %s (%s)", d->ordinal, cudaGetErrorName(e),
                     cudaGetErrorString(e));
  return WEFT_OK;
}

int weft__cu_error(cudaError_t e, const char *call, int dev) {
  cudaGetLastError(); /* clear a non-sticky error */
  return weft__err(e == cudaErrorMemoryAllocation ? WEFT_EDEVMEM : WEFT_ECUDA,
                   "%s on cuda:%d failed: %s (%s)", call, dev, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* ---- pinned host pool ------------------------------------------------------------------- */

typedef struct pinned_slab {
  char *base;
  int cls;
} pinned_slab;

typedef struct pinned_big {
  void *p;
  size_t size;
  int live;
} pinned_big;

struct cu_pinned {
  weft__mutex lock;
  void *free_small[PINNED_MAX_CLASS + 1];
  pinned_slab *slabs;
  size_t nslabs, capslabs;
  pinned_big *bigs;
  size_t nbigs, capbigs;
  size_t cached;
};

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return WEFT_OK;
  size_t nc = *cap ? *cap * 2 : 16;
  while (nc < need) nc *= 2;
  void *a = weft__realloc(*arr, nc * elem);
  if (a == NULL) return weft__oom("the pinned pool's index");
  *arr = a;
  *cap = nc;
  return WEFT_OK;
}

static void *pinned_small(cu_pinned *pp, size_t bytes) {
  int cls = PINNED_MIN_CLASS;
  while (((size_t)1 << cls) < bytes) cls++;
  void *blk = pp->free_small[cls];
  if (blk == NULL) {
    if (grow((void **)&pp->slabs, &pp->capslabs, pp->nslabs + 1, sizeof *pp->slabs) != WEFT_OK) return NULL;
    char *base = NULL;
    if (cudaHostAlloc((void **)&base, PINNED_SLAB, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      return NULL;
    }
    pp->slabs[pp->nslabs++] = (pinned_slab){base, cls};
    size_t sz = (size_t)1 << cls;
    for (size_t off = PINNED_SLAB; off >= sz; off -= sz) {
      void *b = base + off - sz;
      *(void **)b = pp->free_small[cls];
      pp->free_small[cls] = b;
    }
    blk = pp->free_small[cls];
  }
  pp->free_small[cls] = *(void **)blk;
  return blk;
}

static void *pinned_big_alloc(cu_pinned *pp, size_t bytes) {
  size_t best = SIZE_MAX;
  for (size_t i = 0; i < pp->nbigs; i++)
    if (!pp->bigs[i].live && pp->bigs[i].size >= bytes && pp->bigs[i].size <= bytes + bytes / 4 &&
        (best == SIZE_MAX || pp->bigs[i].size < pp->bigs[best].size))
      best = i;
  if (best != SIZE_MAX) {
    pp->bigs[best].live = 1;
    pp->cached -= pp->bigs[best].size;
    return pp->bigs[best].p;
  }
  if (grow((void **)&pp->bigs, &pp->capbigs, pp->nbigs + 1, sizeof *pp->bigs) != WEFT_OK) return NULL;
  size_t size = (bytes + 4095) & ~(size_t)4095;
  void *p = NULL;
  if (cudaHostAlloc(&p, size, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    /* Give cached blocks back to the system and try once more. */
    for (size_t i = 0; i < pp->nbigs;) {
      if (!pp->bigs[i].live) {
        cudaFreeHost(pp->bigs[i].p);
        pp->cached -= pp->bigs[i].size;
        pp->bigs[i] = pp->bigs[--pp->nbigs];
      } else {
        i++;
      }
    }
    if (cudaHostAlloc(&p, size, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      return NULL;
    }
  }
  pp->bigs[pp->nbigs++] = (pinned_big){p, size, 1};
  return p;
}

void *weft__cu_pinned_alloc(cu_state *st, size_t bytes) {
  cu_pinned *pp = st->pinned;
  if (pp == NULL || bytes == 0) return NULL;
  weft__mutex_lock(&pp->lock);
  void *p = bytes <= PINNED_SMALL_MAX ? pinned_small(pp, bytes) : pinned_big_alloc(pp, bytes);
  weft__mutex_unlock(&pp->lock);
  return p;
}

void weft__cu_pinned_free(cu_state *st, void *p) {
  cu_pinned *pp = st->pinned;
  if (pp == NULL || p == NULL) return;
  weft__mutex_lock(&pp->lock);
  int done = 0;
  for (size_t i = 0; i < pp->nbigs && !done; i++) {
    if (pp->bigs[i].p != p) continue;
    done = 1;
    if (pp->cached + pp->bigs[i].size <= PINNED_CACHE) {
      pp->bigs[i].live = 0;
      pp->cached += pp->bigs[i].size;
    } else {
      cudaFreeHost(p);
      pp->bigs[i] = pp->bigs[--pp->nbigs];
    }
  }
  for (size_t i = 0; i < pp->nslabs && !done; i++) {
    char *base = pp->slabs[i].base;
    if ((char *)p < base || (char *)p >= base + PINNED_SLAB) continue;
    done = 1;
    int cls = pp->slabs[i].cls;
    *(void **)p = pp->free_small[cls];
    pp->free_small[cls] = p;
  }
  weft__mutex_unlock(&pp->lock);
  WEFT_ASSERT(done);
}

static int pinned_create(cu_pinned **out) {
  cu_pinned *pp = weft__calloc(1, sizeof *pp);
  if (pp == NULL) return weft__oom("the pinned host pool");
  int rc = weft__mutex_init(&pp->lock);
  if (rc != WEFT_OK) {
    weft__free(pp);
    return rc;
  }
  *out = pp;
  return WEFT_OK;
}

static void pinned_destroy(cu_pinned *pp) {
  if (pp == NULL) return;
  for (size_t i = 0; i < pp->nslabs; i++) cudaFreeHost(pp->slabs[i].base);
  for (size_t i = 0; i < pp->nbigs; i++) cudaFreeHost(pp->bigs[i].p);
  weft__free(pp->slabs);
  weft__free(pp->bigs);
  weft__mutex_destroy(&pp->lock);
  weft__free(pp);
}

static void *cu_host_alloc(weft__backend *b, size_t bytes) {
  return weft__cu_pinned_alloc(b->state, bytes);
}

static void cu_host_free(weft__backend *b, void *p) { weft__cu_pinned_free(b->state, p); }

/* ---- devices ---------------------------------------------------------------------------- */

/* A stream; compute streams also get a cuBLAS handle in `math` mode with its workspace and a
 * reduction scratch buffer. */
static int stream_init(cu_stream *s, int dev, int kind, size_t workspace, cublasMath_t math, int priority) {
  cudaError_t e = cudaStreamCreateWithPriority(&s->s, cudaStreamNonBlocking, priority);
  if (e != cudaSuccess) return weft__cu_error(e, "cudaStreamCreate", dev);
  s->kind = kind;
  atomic_init(&s->lock, 0);
  atomic_init(&s->pending, NULL);
  if (kind != CU_S_COMPUTE) return WEFT_OK;
  if ((e = cudaMalloc((void **)&s->scratch, WEFT__CU_REDUCE_BLOCKS * sizeof(double))) != cudaSuccess)
    return weft__cu_error(e, "cudaMalloc (reduction scratch)", dev);
  if (workspace > 0 && (e = cudaMalloc(&s->workspace, workspace)) != cudaSuccess)
    return weft__cu_error(e, "cudaMalloc (cuBLAS workspace)", dev);
  cublasStatus_t bs = cublasCreate(&s->blas);
  if (bs != CUBLAS_STATUS_SUCCESS) {
    s->blas = NULL;
    return weft__err(bs == CUBLAS_STATUS_ALLOC_FAILED ? WEFT_EDEVMEM : WEFT_ECUBLAS,
                     "cublasCreate on cuda:%d failed: %s", dev, cublasGetStatusName(bs));
  }
  if ((bs = cublasSetStream(s->blas, s->s)) != CUBLAS_STATUS_SUCCESS ||
      (workspace > 0 && (bs = cublasSetWorkspace(s->blas, s->workspace, workspace)) != CUBLAS_STATUS_SUCCESS) ||
      (bs = cublasSetMathMode(s->blas, math)) != CUBLAS_STATUS_SUCCESS)
    return weft__err(WEFT_ECUBLAS, "configuring cuBLAS on cuda:%d failed: %s", dev, cublasGetStatusName(bs));
  return WEFT_OK;
}

static void stream_fini(cu_stream *s) {
  if (s->solver_params != NULL) cusolverDnDestroyParams(s->solver_params);
  if (s->solver != NULL) cusolverDnDestroy(s->solver);
  if (s->solver_info != NULL) cudaFree(s->solver_info);
  weft__free(s->solver_host);
  if (s->blas != NULL) cublasDestroy(s->blas);
  if (s->workspace != NULL) cudaFree(s->workspace);
  if (s->scratch != NULL) cudaFree(s->scratch);
  if (s->s != NULL) cudaStreamDestroy(s->s);
  memset(s, 0, sizeof *s);
}

static int device_init(cu_state *st, cu_device *d, int ordinal, int ncompute) {
  d->ordinal = ordinal;
  int rc = weft__cu_set_device(d);
  if (rc != WEFT_OK) return rc;
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, ordinal);
  if (e != cudaSuccess) return weft__cu_error(e, "cudaGetDeviceProperties", ordinal);
  snprintf(d->name, sizeof d->name, "%.127s", prop.name);
  d->memory_bytes = prop.totalGlobalMem;
  d->copy_engines = prop.asyncEngineCount;
  d->major = prop.major;
  d->minor = prop.minor;
  d->sms = prop.multiProcessorCount;

  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  if ((e = cudaMemPoolCreate(&d->pool, &props)) != cudaSuccess) return weft__cu_error(e, "cudaMemPoolCreate", ordinal);
  uint64_t keep = UINT64_MAX;
  int off = 0;
  if ((e = cudaMemPoolSetAttribute(d->pool, cudaMemPoolAttrReleaseThreshold, &keep)) != cudaSuccess ||
      (e = cudaMemPoolSetAttribute(d->pool, cudaMemPoolReuseAllowInternalDependencies, &off)) != cudaSuccess)
    return weft__cu_error(e, "cudaMemPoolSetAttribute", ordinal);

  /* Exact fp32 products by default; TF32 tensor cores only when the runtime allows them. */
  cublasMath_t math = st->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  d->ncompute = ncompute;
  d->h2d = ncompute;
  d->d2h = ncompute + 1;
  d->peer = ncompute + 2;
  d->nstreams = ncompute + 3;
  /* The side compute streams carry chains and small nodes (lanes.c), which a large product on
   * the main stream would otherwise hold back block by block: they get the device's highest
   * priority, the main stream the default. */
  int least = 0, side = 0;
  if (cudaDeviceGetStreamPriorityRange(&least, &side) != cudaSuccess) side = 0;
  for (int i = 0; i < ncompute; i++)
    if ((rc = stream_init(&d->streams[i], ordinal, CU_S_COMPUTE, WEFT__CU_WORKSPACE(i), math, i > 0 ? side : 0)) != WEFT_OK)
      return rc;
  if ((rc = stream_init(&d->streams[d->h2d], ordinal, CU_S_H2D, 0, math, 0)) != WEFT_OK ||
      (rc = stream_init(&d->streams[d->d2h], ordinal, CU_S_D2H, 0, math, 0)) != WEFT_OK ||
      (rc = stream_init(&d->streams[d->peer], ordinal, CU_S_PEER, 0, math, 0)) != WEFT_OK ||
      (rc = stream_init(&d->sync, ordinal, CU_S_PEER, 0, math, 0)) != WEFT_OK ||
      (rc = stream_init(&d->join, ordinal, CU_S_PEER, 0, math, 0)) != WEFT_OK ||
      (rc = stream_init(&d->clk, ordinal, CU_S_PEER, 0, math, 0)) != WEFT_OK ||
      (rc = stream_init(&d->ipc, ordinal, CU_S_PEER, 0, math, 0)) != WEFT_OK)
    return rc;
  if ((rc = weft__mutex_init(&d->qlock)) != WEFT_OK) return rc;
  d->have_qlock = 1;
  if ((rc = weft__cond_init(&d->qcond)) != WEFT_OK) return rc;
  d->have_qcond = 1;
  atomic_init(&d->qcount, 0);
  return WEFT_OK;
}

static void device_fini(cu_device *d) {
  if (d->ordinal >= 0 && cudaSetDevice(d->ordinal) == cudaSuccess) cudaDeviceSynchronize();
  for (int i = 0; i < CU_MAX_COMPUTE + 3; i++) stream_fini(&d->streams[i]);
  stream_fini(&d->sync);
  stream_fini(&d->join);
  stream_fini(&d->clk);
  stream_fini(&d->ipc);
  if (d->pool != NULL) cudaMemPoolDestroy(d->pool);
  if (d->have_qcond) weft__cond_destroy(&d->qcond);
  if (d->have_qlock) weft__mutex_destroy(&d->qlock);
  weft__free(d->queue);
  d->queue = NULL;
}

/* Peer access belongs to the process's device contexts, which outlive runtimes: enable each
 * pair once per process (a second cudaDeviceEnablePeerAccess fails, and compute-sanitizer
 * reports that as an API error). */
static atomic_uchar peer_enabled[CU_MAX_DEVICES][CU_MAX_DEVICES];

static void enable_peers(cu_state *st) {
  for (int i = 0; i < st->ndev; i++) {
    cu_device *d = &st->dev[i];
    if (cudaSetDevice(d->ordinal) != cudaSuccess) continue;
    for (int j = 0; j < st->ndev; j++) {
      int can = 0;
      if (i == j || cudaDeviceCanAccessPeer(&can, d->ordinal, st->dev[j].ordinal) != cudaSuccess || !can)
        continue;
      if (!atomic_exchange(&peer_enabled[i][j], 1)) {
        cudaError_t e = cudaDeviceEnablePeerAccess(st->dev[j].ordinal, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
          atomic_store(&peer_enabled[i][j], 0);
          cudaGetLastError();
          continue;
        }
      }
      /* Device i may read and write the pool of device j. */
      struct cudaMemAccessDesc acc;
      memset(&acc, 0, sizeof acc);
      acc.location.type = cudaMemLocationTypeDevice;
      acc.location.id = d->ordinal;
      acc.flags = cudaMemAccessFlagsProtReadWrite;
      if (cudaMemPoolSetAccess(st->dev[j].pool, &acc, 1) != cudaSuccess) continue;
      d->peer_ok[j] = 1;
    }
    cudaGetLastError();
  }
}

static int env_int(const char *name, int lo, int hi, int dflt) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  return (*end == '\0' && x >= lo && x <= hi) ? (int)x : dflt;
}

static void cu_fini(weft__backend *b) {
  cu_state *st = b->state;
  if (st == NULL) return;
  weft__cu_threads_stop(st);
  weft__cu_ipc_fini(st);
  for (int i = 0; i < st->ndev; i++) device_fini(&st->dev[i]);
  pinned_destroy(st->pinned);
  weft__free(st->dev);
  weft__free(st);
  b->state = NULL;
}

static int cu_init(weft__backend *b, const weft_runtime_options *o) {
  cu_state *st = weft__calloc(1, sizeof *st);
  if (st == NULL) return weft__oom("the CUDA backend");
  b->state = st;
  st->b = b;
  st->launch_blocking = (o->flags & WEFT_RUNTIME_LAUNCH_BLOCKING) != 0;
  st->allow_tf32 = (o->flags & WEFT_RUNTIME_ALLOW_TF32) != 0;
  atomic_init(&st->replay, env_int("WEFT_CUDA_REPLAY", 0, 1, 1));
  weft__cu_set_pdl(env_int("WEFT_CUDA_PDL", 0, 1, 1));
  st->capture_run = (unsigned)env_int("WEFT_CUDA_CAPTURE_RUN", 1, 1000, 2);
  /* Batches of small elementwise nodes (src/sched/plan/batches.c); never under WEFT_LAUNCH_BLOCKING, which
   * must pin a fault on one node. */
  atomic_init(&st->batch, !st->launch_blocking && env_int("WEFT_CUDA_BATCH", 0, 1, 1));
  st->window_count = WEFT__PLAN_WINDOW_COUNT;
  st->window_bytes_min = (size_t)env_int("WEFT_CUDA_WINDOW_MIB", 0, 1 << 30, WEFT__PLAN_WINDOW_MIN_MIB) << 20;
  /* Node timing on the device (when the runtime times nodes at all): WEFT_CUDA_TIMING=0 keeps
   * the host-side intervals; replays record a tick per WEFT_CUDA_TIMING_GROUP_US of estimated
   * device time (0: a tick per node). See cuda_timing.c. */
  st->device_timing = env_int("WEFT_CUDA_TIMING", 0, 1, 1);
  st->group_ns = (uint64_t)env_int("WEFT_CUDA_TIMING_GROUP_US", 0, 1000000, 1000) * 1000;
  st->timing_check = env_int("WEFT_CUDA_TIMING_CHECK", 0, 1, 0);
  st->eager_group_ns = st->group_ns == 0 ? 0 : 50000;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError(); /* no driver or no device: the CPU alone, not an error */
    count = 0;
  }
  /* The first GPU: the option's, else this rank's share of a host shared by local ranks. */
  int first = o->first_gpu, rank, ranks, rc;
  if ((rc = weft__cu_ipc_init(st)) != WEFT_OK) goto fail;
  weft__runtime_local(b->rt, &rank, &ranks);
  if (first < 0 && ranks > 1 && count >= ranks) {
    first = rank * (count / ranks);
    count = count / ranks;
  } else if (first < 0 || count == 0) {
    first = 0;
  } else if (first >= count) {
    rc = weft__err(WEFT_EDEVICE, "weft_runtime_create: first_gpu is %d, and this process sees %d GPU%s (0 to %d)",
                   first, count, count == 1 ? "" : "s", count - 1);
    goto fail;
  } else {
    count -= first;
  }
  if (o->max_gpus >= 0 && count > o->max_gpus) count = o->max_gpus;
  if (count > CU_MAX_DEVICES) count = CU_MAX_DEVICES;
  if (count == 0) return WEFT_OK;
  if ((rc = pinned_create(&st->pinned)) != WEFT_OK) goto fail;
  st->dev = weft__calloc((size_t)count, sizeof *st->dev);
  if (st->dev == NULL) {
    rc = weft__oom("the CUDA devices");
    goto fail;
  }
  for (int i = 0; i < count; i++) st->dev[i].ordinal = -1;
  st->ndev = count;
  int ncompute = env_int("WEFT_CUDA_STREAMS", 1, CU_MAX_COMPUTE, CU_DEFAULT_COMPUTE);
  for (int i = 0; i < count; i++)
    if ((rc = device_init(st, &st->dev[i], first + i, ncompute)) != WEFT_OK) goto fail;
  enable_peers(st);
  if ((rc = weft__cu_threads_start(st)) != WEFT_OK) goto fail;
  return WEFT_OK;
fail:
  cu_fini(b);
  return rc;
}

static int cu_device_count(const weft__backend *b) {
  const cu_state *st = b->state;
  return st != NULL ? st->ndev : 0;
}

static int cu_device_info(const weft__backend *b, int index, weft_device_info *out) {
  const cu_state *st = b->state;
  const cu_device *d = &st->dev[index];
  snprintf(out->name, sizeof out->name, "%s", d->name);
  out->memory_bytes = d->memory_bytes;
  out->copy_engines = d->copy_engines;
  out->compute_major = d->major;
  out->compute_minor = d->minor;
  out->multiprocessors = d->sms;
  out->ordinal = d->ordinal;
  return WEFT_OK;
}

static int cu_can_access_peer(const weft__backend *b, int a, int c) {
  const cu_state *st = b->state;
  return a != c && st->dev[a].peer_ok[c];
}

/* ---- memory statistics and messages ----------------------------------------------------- */

static size_t pool_attr(cudaMemPool_t pool, enum cudaMemPoolAttr a) {
  uint64_t v = 0;
  if (cudaMemPoolGetAttribute(pool, a, &v) != cudaSuccess) cudaGetLastError();
  return (size_t)v;
}

static size_t graph_attr(int dev, enum cudaGraphMemAttributeType a) {
  uint64_t v = 0;
  if (cudaDeviceGetGraphMemAttribute(dev, a, &v) != cudaSuccess) cudaGetLastError();
  return (size_t)v;
}

static void mem_stats(cu_device *d, weft_cuda_memory_stats *out) {
  memset(out, 0, sizeof *out);
  out->allocated = pool_attr(d->pool, cudaMemPoolAttrUsedMemCurrent) +
                   graph_attr(d->ordinal, cudaGraphMemAttrUsedMemCurrent);
  out->peak = pool_attr(d->pool, cudaMemPoolAttrUsedMemHigh) +
              graph_attr(d->ordinal, cudaGraphMemAttrUsedMemHigh);
  out->reserved = pool_attr(d->pool, cudaMemPoolAttrReservedMemCurrent) +
                  graph_attr(d->ordinal, cudaGraphMemAttrReservedMemCurrent);
  out->reserved_peak = pool_attr(d->pool, cudaMemPoolAttrReservedMemHigh) +
                       graph_attr(d->ordinal, cudaGraphMemAttrReservedMemHigh);
  for (int i = 0; i < d->ncompute; i++)
    out->workspace += WEFT__CU_WORKSPACE(i) + WEFT__CU_REDUCE_BLOCKS * sizeof(double);
  /* Tensors other ranks copy into: memory of their own, outside the pool (cuda_ipc.c). */
  size_t ipc = atomic_load_explicit(&d->ipc_bytes, memory_order_relaxed);
  size_t ipc_peak = atomic_load_explicit(&d->ipc_peak, memory_order_relaxed);
  out->allocated += ipc;
  out->reserved += ipc;
  out->peak += ipc_peak; /* the two peaks' sum: at most that */
  out->reserved_peak += ipc_peak;
}

void weft__cu_mem_query(cu_device *d, size_t *used, size_t *peak, size_t *reserved) {
  weft_cuda_memory_stats s;
  mem_stats(d, &s);
  *used = s.allocated;
  *peak = s.peak;
  *reserved = s.reserved;
}

void weft__cu_oom_message(cu_device *d, size_t bytes, const char *what, char *msg, size_t size) {
  size_t used, peak, reserved, free_b = 0, total = 0;
  weft__cu_mem_query(d, &used, &peak, &reserved);
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) cudaGetLastError();
  snprintf(msg, size,
           "out of device memory on cuda:%d asking for %zu bytes for %s; weft has %zu bytes in "
           "use (peak %zu), %zu reserved; the device has %zu of %zu bytes free",
           d->ordinal, bytes, what, used, peak, reserved, free_b, total);
}

/* Allocates from the device's pool on `stream`; on failure gives the pool's unused memory back
 * to the driver and tries once more (as PyTorch's caching allocator does). */
cudaError_t weft__cu_pool_alloc(cu_device *d, void **p, size_t bytes, cudaStream_t s) {
  cudaError_t e = cudaMallocFromPoolAsync(p, bytes, d->pool, s);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    cudaMemPoolTrimTo(d->pool, 0);
    e = cudaMallocFromPoolAsync(p, bytes, d->pool, s);
  }
  if (e != cudaSuccess) cudaGetLastError();
  return e;
}

/* ---- storage hooks ----------------------------------------------------------------------- */

static int device_of(cu_state *st, const weft_tensor *t, cu_device **out) {
  char name[32];
  if (t->device.kind != WEFT_DEVICE_CUDA || t->device.index < 0 || t->device.index >= st->ndev)
    return weft__err(WEFT_EDEVICE, "tensor %s lives on %s, which this runtime does not have",
                     weft__tensor_name(t), weft_device_str(t->device, name, sizeof name));
  *out = &st->dev[t->device.index];
  return weft__cu_set_device(*out);
}

/* Runs `e` (the result of enqueueing on d->sync) to completion and turns a failure into a
 * status naming `what`. Call with d->sync.lock held. */
static int sync_finish(cu_device *d, cudaError_t e, const char *what, const weft_tensor *t) {
  if (e == cudaSuccess) e = cudaStreamSynchronize(d->sync.s);
  if (e == cudaSuccess) return WEFT_OK;
  cudaGetLastError();
  return weft__err(WEFT_ECUDA, "%s of tensor %s on cuda:%d failed: %s (%s)", what, weft__tensor_name(t),
                   d->ordinal, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Storage for a tensor at materialisation. A temporary of the current plan gets none: its
 * storage is made in each run (src/sched/plan/memory.c). */
static int cu_alloc(weft__backend *b, weft_tensor *t) {
  weft_graph *g = t->graph;
  if (g->plan != NULL) {
    cu_plan *cp = weft__cu_plan_of(b, g->plan);
    if (cp != NULL && t->id < cp->ntensors && cp->temp[t->id]) return WEFT_OK;
  }
  return weft__cu_alloc_storage(b->state, t);
}

int weft__cu_alloc_storage(cu_state *st, weft_tensor *t) {
  cu_device *d = NULL;
  int rc = device_of(st, t, &d);
  if (rc != WEFT_OK) return rc;
  if (t->ipc) return weft__cu_ipc_alloc(d, t);
  void *p = NULL;
  weft__cu_lock(&d->sync);
  cudaError_t e = weft__cu_pool_alloc(d, &p, t->bytes, d->sync.s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(d->sync.s);
  weft__cu_unlock(&d->sync);
  if (e != cudaSuccess) {
    char msg[512], what[160];
    snprintf(what, sizeof what, "tensor %s", weft__tensor_name(t));
    cudaGetLastError();
    if (e == cudaErrorMemoryAllocation) {
      weft__cu_oom_message(d, t->bytes, what, msg, sizeof msg);
      return weft__err(WEFT_EDEVMEM, "%s", msg);
    }
    return weft__err(WEFT_ECUDA, "allocating %zu bytes for %s on cuda:%d failed: %s (%s)", t->bytes, what,
                     d->ordinal, cudaGetErrorName(e), cudaGetErrorString(e));
  }
  t->data = p;
  t->storage_kind = WEFT__S_DEVICE;
  weft__storage_owned(t);
  return WEFT_OK;
}

static void cu_free(weft__backend *b, weft_tensor *t) {
  cu_state *st = b->state;
  cu_device *d = NULL;
  if (t->data == NULL || device_of(st, t, &d) != WEFT_OK) return;
  if (t->storage_kind == WEFT__S_IPC) {
    weft__cu_ipc_free(d, t);
    return;
  }
  weft__cu_lock(&d->sync);
  if (cudaFreeAsync(t->data, d->sync.s) != cudaSuccess) cudaGetLastError();
  weft__cu_unlock(&d->sync);
}

static int cu_read(weft__backend *b, weft_tensor *t, void *dst) {
  cu_state *st = b->state;
  cu_device *d = NULL;
  int rc = device_of(st, t, &d);
  if (rc != WEFT_OK) return rc;
  weft__cu_lock(&d->sync);
  rc = sync_finish(d, cudaMemcpyAsync(dst, t->data, t->bytes, cudaMemcpyDeviceToHost, d->sync.s), "reading", t);
  weft__cu_unlock(&d->sync);
  return rc;
}

static int cu_write(weft__backend *b, weft_tensor *t, const void *src) {
  cu_state *st = b->state;
  cu_device *d = NULL;
  int rc = device_of(st, t, &d);
  if (rc != WEFT_OK) return rc;
  weft__cu_lock(&d->sync);
  rc = sync_finish(d, cudaMemcpyAsync(t->data, src, t->bytes, cudaMemcpyHostToDevice, d->sync.s), "writing", t);
  weft__cu_unlock(&d->sync);
  return rc;
}

static int cu_init_tensor(weft__backend *b, weft_tensor *t) {
  cu_state *st = b->state;
  cu_device *d = NULL;
  int rc = device_of(st, t, &d);
  if (rc != WEFT_OK) return rc;
  weft__cu_lock(&d->sync);
  cudaError_t e = (cudaError_t)weft__cu_fill(t->dtype, t->numel, t->data, weft__tensor_init(t), d->sync.s);
  rc = sync_finish(d, e, "initialising", t);
  weft__cu_unlock(&d->sync);
  return rc;
}

static int cu_memory_usage(const weft__backend *b, int index, weft_memory_usage *out) {
  cu_state *st = b->state;
  cu_device *d = &st->dev[index];
  int rc = weft__cu_set_device(d);
  if (rc != WEFT_OK) return rc;
  weft_cuda_memory_stats s;
  mem_stats(d, &s);
  out->in_use = s.allocated;
  out->peak = s.peak;
  out->reserved = s.reserved + s.workspace;
  return WEFT_OK;
}

/* ---- weft/cuda.h ----------------------------------------------------------------------------- */

static cu_state *state_of(const weft_runtime *rt) {
  const weft__backend *b = weft__runtime_backend(rt, WEFT_DEVICE_CUDA);
  return b != NULL && b->vt == &weft__cuda_backend ? b->state : NULL;
}

static int device_arg(weft_runtime *rt, int device, const char *what, cu_device **out) {
  cu_state *st = state_of(rt);
  if (rt == NULL) return weft__err(WEFT_EINVAL, "%s: runtime is NULL", what);
  if (st == NULL || device < 0 || device >= st->ndev)
    return weft__err(WEFT_EDEVICE, "%s: the runtime has no device cuda:%d (%d GPUs)", what, device,
                     st != NULL ? st->ndev : 0);
  *out = &st->dev[device];
  return weft__cu_set_device(*out);
}

cudaStream_t weft_ctx_cuda_stream(const weft_kernel_ctx *ctx) {
  return ctx->device.kind == WEFT_DEVICE_CUDA ? (cudaStream_t)ctx->stream : NULL;
}

cublasHandle_t weft_ctx_cublas(const weft_kernel_ctx *ctx) {
  return ctx->device.kind == WEFT_DEVICE_CUDA ? (cublasHandle_t)ctx->blas : NULL;
}

int weft_cuda_memory_stats_get(weft_runtime *rt, int device, weft_cuda_memory_stats *out) {
  cu_device *d = NULL;
  if (out == NULL) return weft__err(WEFT_EINVAL, "weft_cuda_memory_stats_get: out is NULL");
  int rc = device_arg(rt, device, "weft_cuda_memory_stats_get", &d);
  if (rc != WEFT_OK) return rc;
  mem_stats(d, out);
  return WEFT_OK;
}

int weft_cuda_memory_reset_peak(weft_runtime *rt, int device) {
  cu_device *d = NULL;
  int rc = device_arg(rt, device, "weft_cuda_memory_reset_peak", &d);
  if (rc != WEFT_OK) return rc;
  uint64_t zero = 0;
  cudaMemPoolSetAttribute(d->pool, cudaMemPoolAttrUsedMemHigh, &zero);
  cudaMemPoolSetAttribute(d->pool, cudaMemPoolAttrReservedMemHigh, &zero);
  cudaDeviceSetGraphMemAttribute(d->ordinal, cudaGraphMemAttrUsedMemHigh, &zero);
  cudaDeviceSetGraphMemAttribute(d->ordinal, cudaGraphMemAttrReservedMemHigh, &zero);
  cudaGetLastError();
  return WEFT_OK;
}

int weft_cuda_memory_trim(weft_runtime *rt, int device, size_t keep_bytes) {
  cu_state *st = state_of(rt);
  int first = device, last = device;
  if (device == -1) {
    first = 0;
    last = (st != NULL ? st->ndev : 0) - 1;
  }
  for (int i = first; i <= last; i++) {
    cu_device *d = NULL;
    int rc = device_arg(rt, i, "weft_cuda_memory_trim", &d);
    if (rc != WEFT_OK) return rc;
    /* Frees enqueued by finished runs complete on the device first; no run is in flight. */
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaDeviceGraphMemTrim(d->ordinal);
    if (e == cudaSuccess) e = cudaMemPoolTrimTo(d->pool, keep_bytes);
    if (e != cudaSuccess) return weft__cu_error(e, "weft_cuda_memory_trim", d->ordinal);
  }
  return WEFT_OK;
}

void weft_cuda_set_replay(weft_runtime *rt, int enabled) {
  cu_state *st = state_of(rt);
  if (st != NULL) atomic_store(&st->replay, enabled != 0);
}

void weft_cuda_run_stats_get(const weft_runtime *rt, weft_cuda_run_stats *out) {
  const cu_state *st = state_of(rt);
  memset(out, 0, sizeof *out);
  if (st == NULL) return;
  out->eager_runs = atomic_load(&st->eager_runs);
  out->captures = atomic_load(&st->captures);
  out->replays = atomic_load(&st->replays);
  out->capture_failures = atomic_load(&st->capture_failures);
  out->combined = atomic_load(&st->combined);
}

/* weft_runtime_set_batching. */
static void cu_set_batching(weft__backend *b, int on) {
  cu_state *st = b->state;
  atomic_store(&st->batch, on != 0 && !st->launch_blocking);
}

const weft__backend_vtable weft__cuda_backend = {
    .version = WEFT__BACKEND_VERSION,
    .name = "cuda",
    .device_kind = WEFT_DEVICE_CUDA,
    .flags = WEFT__BACKEND_ASYNC,
    .init = cu_init,
    .fini = cu_fini,
    .device_count = cu_device_count,
    .device_info = cu_device_info,
    .can_access_peer = cu_can_access_peer,
    .memory_usage = cu_memory_usage,
    .ipc_capable = weft__cu_ipc_capable,
    .ipc_export = weft__cu_ipc_export,
    .ipc_map = weft__cu_ipc_map,
    .ipc_unmap = weft__cu_ipc_unmap,
    .ipc_put = weft__cu_ipc_put,
    .ipc_test = weft__cu_ipc_test,
    .alloc = cu_alloc,
    .free = cu_free,
    .read = cu_read,
    .write = cu_write,
    .init_tensor = cu_init_tensor,
    .plan = weft__cu_plan,
    .plan_free = weft__cu_plan_free,
    .run_begin = weft__cu_run_begin,
    .launch = weft__cu_launch,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .run_drain = weft__cu_run_drain,
    .skip = weft__cu_skip,
    .gpu_target = weft__cu_gpu_target,
    .set_batching = cu_set_batching,
};
