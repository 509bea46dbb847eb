/* cuda_ipc.c — GPU memory shared with the other processes of the host (CUDA IPC), for the
 * transport's copies between the GPUs of two ranks on one host (backends/mpi; backend.h,
 * version 8).
 *
 * A tensor another rank's GPU copies into (weft_tensor.ipc, marked at materialisation) gets
 * its own cudaMalloc: memory of the stream-ordered pool cannot be exported by the legacy IPC
 * calls, and the pool's own export needs a file descriptor passed between the processes. Its
 * rank exports it (a 64-byte handle) in the message that says it is ready to receive; the
 * sending rank maps it (cudaIpcOpenMemHandle, once a process: the transport's plans that use a
 * mapping hold it, and the last one's end closes it, before the receiver's memory can be given
 * to another tensor, which a stale mapping would refuse with cudaErrorAlreadyMapped) and copies
 * into it on its device's `ipc` stream, over the peer link, a strided tile as one 2-D copy; an event says when the copy is done, and the transport
 * then tells the receiver. The receiver's kernels that read the tensor start after that message,
 * so they see the whole copy. Why not a CUDA-aware MPI: the GPU hosts' Open MPI is not one, and
 * this moves a tile in one copy engine pass with no staging (docs/distributed.md). */
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"
#include "sched/thread.h"

/* One mapping: another process's allocation, mapped into device `ordinal`'s context. */
typedef struct cu_ipc_map {
  unsigned char handle[64];
  int ordinal;
  void *base;
  int refs; /* the transport's plans that use it (ipc_map, ipc_unmap) */
} cu_ipc_map;

/* A copy in flight (ipc_put's token). */
typedef struct cu_ipc_copy {
  cudaEvent_t ev;
  int ordinal;
} cu_ipc_copy;

typedef struct cu_ipc_maps {
  weft__mutex lock;
  cu_ipc_map *v;
  size_t n, cap;
} cu_ipc_maps;

int weft__cu_ipc_capable(const weft__backend *b) {
  (void)b;
  int n = 0, ok = 1;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
    cudaGetLastError();
    return 0;
  }
  for (int a = 0; a < n && ok; a++)
    for (int c = 0; c < n && ok; c++)
      if (a != c && (cudaDeviceCanAccessPeer(&ok, a, c) != cudaSuccess)) ok = 0;
  cudaGetLastError();
  return ok;
}

int weft__cu_ipc_init(cu_state *st) {
  cu_ipc_maps *m = weft__calloc(1, sizeof *m);
  if (m == NULL) return weft__oom("the CUDA backend");
  int rc = weft__mutex_init(&m->lock);
  if (rc != WEFT_OK) {
    weft__free(m);
    return rc;
  }
  st->ipc = m;
  return WEFT_OK;
}

int weft__cu_ipc_alloc(cu_device *d, weft_tensor *t) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, t->bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (e == cudaErrorMemoryAllocation) {
      char msg[512], what[200];
      snprintf(what, sizeof what, "tensor %s (memory another rank's GPU copies into)", weft__tensor_name(t));
      weft__cu_oom_message(d, t->bytes, what, msg, sizeof msg);
      return weft__err(WEFT_EDEVMEM, "%s", msg);
    }
    return weft__err(WEFT_ECUDA, "cudaMalloc of %zu bytes for tensor %s on cuda:%d failed: %s (%s)", t->bytes,
                     weft__tensor_name(t), d->ordinal, cudaGetErrorName(e), cudaGetErrorString(e));
  }
  t->data = p;
  t->storage_kind = WEFT__S_IPC;
  weft__storage_owned(t);
  size_t now = atomic_fetch_add_explicit(&d->ipc_bytes, t->bytes, memory_order_relaxed) + t->bytes;
  size_t peak = atomic_load_explicit(&d->ipc_peak, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak(&d->ipc_peak, &peak, now)) {
  }
  return WEFT_OK;
}

void weft__cu_ipc_free(cu_device *d, weft_tensor *t) {
  if (cudaFree(t->data) != cudaSuccess) cudaGetLastError(); /* the caller made d current */
  atomic_fetch_sub_explicit(&d->ipc_bytes, t->bytes, memory_order_relaxed);
}

int weft__cu_ipc_export(weft__backend *b, const weft_tensor *t, weft__ipc_handle *out) {
  cu_state *st = b->state;
  const weft_tensor *owner = weft__storage_owner(t);
  char dev[32];
  if (owner->storage_kind != WEFT__S_IPC || t->device.kind != WEFT_DEVICE_CUDA || t->device.index >= st->ndev)
    return weft__err(WEFT_ENOTSUP, "tensor %s on %s has no storage another process can map (it was given storage "
                     "before a copy from another rank's GPU was added into it)", weft__tensor_name(t),
                     weft_device_str(t->device, dev, sizeof dev));
  cu_device *d = &st->dev[t->device.index];
  int rc = weft__cu_set_device(d);
  if (rc != WEFT_OK) return rc;
  cudaIpcMemHandle_t h;
  cudaError_t e = cudaIpcGetMemHandle(&h, owner->data);
  if (e != cudaSuccess) return weft__cu_error(e, "cudaIpcGetMemHandle", d->ordinal);
  memcpy(out->handle, &h, sizeof out->handle);
  out->offset = (uint64_t)((const char *)t->data - (const char *)owner->data);
  out->bytes = t->bytes;
  return WEFT_OK;
}

int weft__cu_ipc_map(weft__backend *b, int index, const weft__ipc_handle *h, void **base) {
  cu_state *st = b->state;
  if (index < 0 || index >= st->ndev)
    return weft__err(WEFT_EDEVICE, "mapping another rank's GPU memory: this runtime has no cuda:%d", index);
  cu_device *d = &st->dev[index];
  cu_ipc_maps *m = st->ipc;
  int rc = WEFT_OK;
  weft__mutex_lock(&m->lock);
  for (size_t i = 0; i < m->n; i++)
    if (m->v[i].ordinal == d->ordinal && memcmp(m->v[i].handle, h->handle, sizeof m->v[i].handle) == 0) {
      m->v[i].refs++;
      *base = m->v[i].base;
      goto out;
    }
  if (m->n == m->cap) {
    size_t cap = m->cap ? 2 * m->cap : 16;
    cu_ipc_map *v = weft__realloc(m->v, cap * sizeof *v);
    if (v == NULL) {
      rc = weft__oom("the GPU memory mapped from other processes");
      goto out;
    }
    m->v = v;
    m->cap = cap;
  }
  if ((rc = weft__cu_set_device(d)) != WEFT_OK) goto out;
  cudaIpcMemHandle_t ch;
  memcpy(&ch, h->handle, sizeof ch);
  cudaError_t e = cudaIpcOpenMemHandle(base, ch, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    cudaGetLastError();
    rc = weft__err(WEFT_ECUDA, "mapping another rank's GPU memory on cuda:%d failed: %s (%s); WEFT_GPU_IPC=0 "
                   "sends GPU tensors between ranks through host memory", d->ordinal, cudaGetErrorName(e),
                   cudaGetErrorString(e));
    goto out;
  }
  cu_ipc_map *x = &m->v[m->n++];
  memcpy(x->handle, h->handle, sizeof x->handle);
  x->ordinal = d->ordinal;
  x->base = *base;
  x->refs = 1;
out:
  weft__mutex_unlock(&m->lock);
  return rc;
}

/* Closes mapping i (the maps' lock held). */
static void unmap_at(cu_ipc_maps *m, size_t i) {
  if (cudaSetDevice(m->v[i].ordinal) != cudaSuccess || cudaIpcCloseMemHandle(m->v[i].base) != cudaSuccess)
    cudaGetLastError();
  m->v[i] = m->v[--m->n];
}

void weft__cu_ipc_unmap(weft__backend *b, void *base) {
  cu_state *st = b->state;
  cu_ipc_maps *m = st->ipc;
  weft__mutex_lock(&m->lock);
  for (size_t i = 0; i < m->n; i++)
    if (m->v[i].base == base) {
      if (--m->v[i].refs == 0) unmap_at(m, i);
      break;
    }
  weft__mutex_unlock(&m->lock);
}

int weft__cu_ipc_put(weft__backend *b, const weft_tensor *src, void *dst, void **token) {
  cu_state *st = b->state;
  char dev[32];
  if (src->device.kind != WEFT_DEVICE_CUDA || src->device.index >= st->ndev)
    return weft__err(WEFT_EDEVICE, "tensor %s lives on %s, which this runtime does not have", weft__tensor_name(src),
                     weft_device_str(src->device, dev, sizeof dev));
  cu_device *d = &st->dev[src->device.index];
  int rc = weft__cu_set_device(d);
  if (rc != WEFT_OK) return rc;
  cu_ipc_copy *c = weft__malloc(sizeof *c);
  if (c == NULL) return weft__oom("a copy into another rank's GPU");
  c->ordinal = d->ordinal;
  cudaEvent_t ev = NULL;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    weft__free(c);
    return weft__cu_error(e, "cudaEventCreate", d->ordinal);
  }
  c->ev = ev;
  weft__cu_lock(&d->ipc);
  if (weft__tensor_contiguous(src)) {
    e = cudaMemcpyAsync(dst, src->data, src->bytes, cudaMemcpyDeviceToDevice, d->ipc.s);
  } else { /* a tile: its rows into the contiguous tensor there */
    size_t es = weft_dtype_size(src->dtype), width = (size_t)src->shape[1] * es;
    e = cudaMemcpy2DAsync(dst, width, src->data, (size_t)weft__tensor_ld(src) * es, width, (size_t)src->shape[0],
                          cudaMemcpyDeviceToDevice, d->ipc.s);
  }
  if (e == cudaSuccess) e = cudaEventRecord(ev, d->ipc.s);
  weft__cu_unlock(&d->ipc);
  if (e != cudaSuccess) {
    cudaEventDestroy(ev);
    weft__free(c);
    return weft__cu_error(e, "copying into another rank's GPU memory", d->ordinal);
  }
  *token = c;
  return WEFT_OK;
}

int weft__cu_ipc_test(weft__backend *b, void *token) {
  (void)b;
  cu_ipc_copy *c = token;
  cudaError_t e = cudaEventQuery(c->ev);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return 0;
  }
  cudaEventDestroy(c->ev);
  int ordinal = c->ordinal;
  weft__free(c);
  if (e == cudaSuccess) return 1;
  return weft__cu_error(e, "copying into another rank's GPU memory", ordinal);
}

void weft__cu_ipc_fini(cu_state *st) {
  cu_ipc_maps *m = st->ipc;
  if (m == NULL) return;
  while (m->n > 0) unmap_at(m, m->n - 1);
  weft__mutex_destroy(&m->lock);
  weft__free(m->v);
  weft__free(m);
  st->ipc = NULL;
}
