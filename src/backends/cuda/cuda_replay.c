/* cuda_replay.c — run_begin: eager runs, and the capture and replay of unchanged graphs.
 *
 * A plan's first run is eager: the scheduler dispatches its nodes and each is enqueued as it
 * becomes ready (cuda_launch.c). At its second run, if every node of the plan is a CUDA node
 * (so the CPU never has to act in between), none is a user op (whose kernel might do host
 * work that a replay would skip) and every host buffer a copy touches is pinned (a capture
 * cannot record copies to pageable memory), the whole plan is enqueued once more, in a
 * topological order, inside a stream capture, and the resulting CUDA graph is instantiated.
 * From then on run_begin launches that graph with one call and tells the scheduler it runs the
 * whole plan (WEFT__PENDING); the run ends through run_drain, with one event after the graph.
 *
 * The capture uses private streams, one per stream the plan uses, forked from and joined into
 * an origin stream, so the graph keeps the plan's concurrency and no work of other graphs that
 * share the devices' streams can slip into it. Each captured compute stream has the plan's own
 * cuBLAS handle, workspace (of the size of the stream it mirrors, so cuBLAS picks the same
 * algorithms) and reduction scratch, because a replay may run beside eager nodes of other
 * graphs that use the devices' shared ones. Temporaries become the
 * graph's memory nodes. A capture that fails is abandoned: the plan then runs eagerly for good
 * (weft_cuda_run_stats counts it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

static int replayable(cu_state *st, cu_plan *cp) {
  if (!atomic_load(&st->replay) || st->launch_blocking || !cp->all_cuda || cp->eager_only || cp->n == 0)
    return 0;
  weft__plan *p = cp->p;
  for (uint32_t i = 0; i < cp->n; i++) {
    const weft_node *nd = p->x[i].node;
    if (nd->kind != WEFT__OP_COPY) continue;
    for (int a = 0; a < 2; a++) {
      const weft_tensor *t = nd->args[a].t;
      if (t->device.kind == WEFT_DEVICE_CPU && t->bytes > 0 && weft__storage_owner(t)->storage_kind != WEFT__S_PINNED)
        return 0;
    }
  }
  return 1;
}

void weft__cu_replay_free(cu_plan *cp) {
  cu_state *st = cp->st;
  if (cp->exec != NULL && cp->origin_dev >= 0) {
    cudaSetDevice(st->dev[cp->origin_dev].ordinal);
    cudaGraphExecDestroy(cp->exec);
  }
  cp->exec = NULL;
  if (cp->replay_done != NULL && cp->origin_dev >= 0) {
    cudaSetDevice(st->dev[cp->origin_dev].ordinal);
    cudaEventDestroy(cp->replay_done);
  }
  cp->replay_done = NULL;
  for (int d = 0; d < st->ndev; d++)
    for (int s = 0; s < CU_MAX_COMPUTE; s++) {
      if (cp->replay_scratch[d][s] == NULL && cp->replay_workspace[d][s] == NULL && cp->replay_blas[d][s] == NULL)
        continue;
      cudaSetDevice(st->dev[d].ordinal);
      if (cp->replay_blas[d][s] != NULL) cublasDestroy(cp->replay_blas[d][s]);
      cudaFree(cp->replay_scratch[d][s]);
      cudaFree(cp->replay_workspace[d][s]);
      cp->replay_blas[d][s] = NULL;
      cp->replay_scratch[d][s] = NULL;
      cp->replay_workspace[d][s] = NULL;
    }
  cudaGetLastError();
}

/* Enqueues every node of the plan into a capture and instantiates the graph. */
static int capture(cu_state *st, cu_plan *cp) {
  weft__plan *p = cp->p;
  cu_streams cs;
  memset(&cs, 0, sizeof cs);
  cs.capture = 1;
  cudaEvent_t fork = NULL, join[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3];
  memset(join, 0, sizeof join);
  int od = -1, os = -1;
  cudaError_t e = cudaSuccess;
  char err[512] = "";
  int rc = WEFT_OK;
  for (int d = 0; d < st->ndev && e == cudaSuccess; d++)
    for (int s = 0; s < st->dev[d].nstreams && e == cudaSuccess; s++) {
      if (!(cp->used[d] >> s & 1)) continue;
      if (od < 0) {
        od = d;
        os = s;
      }
      if ((e = cudaSetDevice(st->dev[d].ordinal)) != cudaSuccess ||
          (e = cudaStreamCreateWithFlags(&cs.s[d][s], cudaStreamNonBlocking)) != cudaSuccess ||
          (e = cudaEventCreateWithFlags(&join[d][s], cudaEventDisableTiming)) != cudaSuccess)
        break;
      if (s < st->dev[d].ncompute && cp->replay_scratch[d][s] == NULL &&
          ((e = cudaMalloc((void **)&cp->replay_scratch[d][s], WEFT__CU_REDUCE_BLOCKS * sizeof(double))) != cudaSuccess ||
           (e = cudaMalloc(&cp->replay_workspace[d][s], WEFT__CU_WORKSPACE(s))) != cudaSuccess))
        break;
      if (s < st->dev[d].ncompute && cp->replay_blas[d][s] == NULL) {
        cublasHandle_t h = NULL;
        if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
          e = cudaErrorMemoryAllocation;
          break;
        }
        cp->replay_blas[d][s] = h;
        if (cublasSetStream(h, cs.s[d][s]) != CUBLAS_STATUS_SUCCESS ||
            cublasSetWorkspace(h, cp->replay_workspace[d][s], WEFT__CU_WORKSPACE(s)) != CUBLAS_STATUS_SUCCESS ||
            cublasSetMathMode(h, st->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
          e = cudaErrorInvalidValue;
          break;
        }
      }
    }
  int capturing = 0;
  if (e == cudaSuccess && od >= 0) {
    cudaStream_t origin = cs.s[od][os];
    cp->origin_dev = od;
    if ((e = cudaSetDevice(st->dev[od].ordinal)) == cudaSuccess &&
        (e = cudaEventCreateWithFlags(&fork, cudaEventDisableTiming)) == cudaSuccess &&
        (e = cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal)) == cudaSuccess) {
      capturing = 1;
      e = cudaEventRecord(fork, origin);
      for (int d = 0; d < st->ndev && e == cudaSuccess; d++)
        for (int s = 0; s < st->dev[d].nstreams && e == cudaSuccess; s++)
          if ((cp->used[d] >> s & 1) && !(d == od && s == os)) e = cudaStreamWaitEvent(cs.s[d][s], fork, 0);
    }
    for (uint32_t k = 0; k < cp->n && e == cudaSuccess && rc == WEFT_OK; k++) {
      uint32_t i = cp->order[k];
      weft_node *nd = p->x[i].node;
      weft_kernel_ctx ctx;
      memset(&ctx, 0, sizeof ctx);
      ctx.node = nd;
      ctx.graph = nd->graph;
      ctx.plan = p;
      ctx.index = i;
      ctx.device = nd->device;
      ctx.backend = st->b;
      weft__ctx_bind(&ctx);
      ctx.err = err;
      ctx.err_size = sizeof err;
      rc = weft__cu_enqueue(st, cp, &ctx, &cs, 0);
    }
    if (capturing) {
      for (int d = 0; d < st->ndev && e == cudaSuccess; d++)
        for (int s = 0; s < st->dev[d].nstreams && e == cudaSuccess; s++)
          if ((cp->used[d] >> s & 1) && !(d == od && s == os)) {
            cudaSetDevice(st->dev[d].ordinal);
            if ((e = cudaEventRecord(join[d][s], cs.s[d][s])) == cudaSuccess) e = cudaStreamWaitEvent(origin, join[d][s], 0);
          }
      /* Temporaries no node claimed are freed at the end of the graph, as the drain does. */
      cudaSetDevice(st->dev[od].ordinal);
      for (uint32_t t = 0; t < cp->ntensors && e == cudaSuccess; t++)
        if (cp->tptr[t] != NULL) e = cudaFreeAsync(cp->tptr[t], origin);
      cudaGraph_t graph = NULL;
      cudaError_t ee = cudaStreamEndCapture(origin, &graph);
      if (e == cudaSuccess) e = ee;
      if (e == cudaSuccess && rc == WEFT_OK) e = cudaGraphInstantiate(&cp->exec, graph, 0);
      if (e == cudaSuccess && rc == WEFT_OK) e = cudaEventCreateWithFlags(&cp->replay_done, cudaEventDisableTiming | cudaEventBlockingSync);
      if (graph != NULL) cudaGraphDestroy(graph);
    }
  }
  /* Allocations made in the capture belong to the graph. */
  memset(cp->tptr, 0, cp->ntensors * sizeof *cp->tptr);
  /* A capture that stopped early leaves ops in its batches: they were never launched. */
  for (uint32_t k = 0; k < cp->nbatches; k++) cp->batches[k].count = 0;
  for (int d = 0; d < st->ndev; d++)
    for (int s = 0; s < CU_MAX_COMPUTE + 3; s++) {
      if (cs.s[d][s] == NULL && join[d][s] == NULL) continue;
      cudaSetDevice(st->dev[d].ordinal);
      if (cs.s[d][s] != NULL) cudaStreamDestroy(cs.s[d][s]);
      if (join[d][s] != NULL) cudaEventDestroy(join[d][s]);
    }
  if (fork != NULL) {
    cudaSetDevice(st->dev[od].ordinal);
    cudaEventDestroy(fork);
  }
  cudaGetLastError();
  if (e == cudaSuccess && rc == WEFT_OK && cp->exec != NULL && (rc = weft__cu_timing_capture_ready(st, cp)) == WEFT_OK) {
    atomic_fetch_add(&st->captures, 1);
    return WEFT_OK;
  }
  weft__cu_replay_free(cp);
  cp->capture_failed = 1;
  atomic_fetch_add(&st->capture_failures, 1);
  const char *dbg = getenv("WEFT_CUDA_DEBUG");
  if (dbg != NULL && strcmp(dbg, "1") == 0)
    fprintf(stderr, "weft: capturing a graph of %u nodes failed (%s%s%s); it runs eagerly\n", cp->n,
            e != cudaSuccess ? cudaGetErrorName(e) : "", e != cudaSuccess && err[0] ? "; " : "", err);
  return WEFT_ECUDA;
}

int weft__cu_run_begin(weft__backend *b, weft__plan *p, weft_run *run) {
  (void)run;
  cu_state *st = b->state;
  cu_plan *cp = weft__cu_plan_of(b, p);
  if (cp == NULL) return WEFT_OK;
  cp->replaying = 0;
  cp->runs++;
  memset(cp->turn_next, 0, sizeof cp->turn_next); /* turns (cuda_launch.c) */
  for (uint32_t t = 0; t < cp->nturns; t++) cp->parked[t] = CU_TURN_OPEN;
  for (int d = 0; d < CU_MAX_DEVICES; d++) atomic_store_explicit(&cp->last_issued[d], UINT32_MAX, memory_order_relaxed);
  if (cp->tm != NULL) weft__cu_timing_run_begin(st, cp);
  if (cp->runs >= st->capture_run && !cp->capture_failed && (cp->exec != NULL || replayable(st, cp)) &&
      atomic_load(&st->replay) && (cp->exec != NULL || capture(st, cp) == WEFT_OK)) {
    cu_device *d = &st->dev[cp->origin_dev];
    cu_stream *s = &d->streams[0];
    cudaSetDevice(d->ordinal);
    weft__cu_lock(s);
    cudaError_t e = cp->tm != NULL ? cudaEventRecord(cp->tm->replay_start, s->s) : cudaSuccess;
    if (e == cudaSuccess) e = cudaGraphLaunch(cp->exec, s->s);
    if (e == cudaSuccess) e = cudaEventRecord(cp->replay_done, s->s);
    weft__cu_release(st, s);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return weft__err(WEFT_ECUDA, "replaying the captured CUDA graph of this graph on cuda:%d failed: %s (%s)",
                       d->ordinal, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    cp->replaying = 1;
    atomic_fetch_add(&st->replays, 1);
    return WEFT__PENDING;
  }
  atomic_fetch_add(&st->eager_runs, 1);
  /* Their completion threads watch for the drain instead of sleeping (cuda_complete.c). */
  for (int d = 0; d < st->ndev; d++)
    if (cp->used[d] != 0) atomic_fetch_add_explicit(&st->dev[d].eager_runs, 1, memory_order_relaxed);
  return WEFT_OK;
}
