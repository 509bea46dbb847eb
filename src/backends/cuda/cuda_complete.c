/* cuda_complete.c — how the scheduler learns that GPU work has finished: one completion thread
 * per device, and the run drain.
 *
 * Each device's thread owns a queue of requests (cu_item): "when this event has completed,
 * report node N of run R" (a node with a CPU successor) or "... report this device's part of
 * run R's drain". The thread takes the whole queue, polls every pending event with
 * cudaEventQuery and reports those done, in whatever order they finish (so a short copy is not
 * held behind a long product on another stream); when nothing is done it polls (hot, then
 * yielding the core between polls, see SPIN_NS) and after a quarter of a second blocks in
 * cudaEventSynchronize on the oldest request (events are created with cudaEventBlockingSync,
 * so the thread then sleeps instead of burning a core through a long run). No CUDA call is made
 * from a CUDA callback and nothing synchronises a whole device.
 *
 * A failed event (an asynchronous fault: the device context is then unusable) is reported as
 * the node's or the run's error instead of hanging the run; the message names the last node
 * enqueued on that device and says how to pin the fault exactly (WEFT_LAUNCH_BLOCKING=1).
 *
 * Drain: once every node of a run is issued, run_drain records an event on each stream the plan
 * uses and queues a drain request for each. Where the run left temporaries to free (ones no
 * node claimed, or a failed or skipped node's), the device's join stream waits for those
 * events and frees them, and its one event is the device's request instead. The last request to
 * complete calls weft__sched_drained. A replayed run has one event after its graph. */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

/* Waiting for the device: poll hot for HOT_NS, then poll yielding the core between polls
 * until SPIN_NS, then sleep in cudaEventSynchronize. A wake-up from that sleep costs tens of
 * microseconds, which even a run of a single large product would notice; a core polling and
 * yielding costs the CPU workers almost nothing (PyTorch's synchronize spins likewise). */
#define HOT_NS 50000ull
#define SPIN_NS 250000000ull

/* With nothing to poll, the thread watches its queue for IDLE_NS before it sleeps on it: a
 * program that runs graph after graph then queues its next run's requests to a thread that is
 * awake: waking it would add to the drain, on the path of every short run (a run's fixed cost:
 * docs/benchmarks.md, "Diagnostics"). While an eager run that uses the device is in flight, its
 * drain is coming: the thread watches on, yielding its core between looks (as it does while an
 * event is pending), up to SPIN_NS, so that a run that outlasts IDLE_NS (small_ops' 100
 * products do) does not find it asleep at its drain. */
#define IDLE_NS 200000ull

static void idle_watch(cu_device *d) {
  uint64_t t0 = weft__now_ns();
  while (atomic_load_explicit(&d->qcount, memory_order_acquire) == 0) {
    uint64_t t = weft__now_ns() - t0;
    if (t < IDLE_NS)
      for (int k = 0; k < 16; k++) weft__cpu_relax();
    else if (t < SPIN_NS && atomic_load_explicit(&d->eager_runs, memory_order_relaxed) > 0)
      weft__thread_yield();
    else
      break;
  }
}

int weft__cu_push(cu_device *d, const cu_item *items, size_t n) {
  int rc = WEFT_OK;
  weft__mutex_lock(&d->qlock);
  if (d->qlen + n > d->qcap) {
    size_t nc = d->qcap ? d->qcap * 2 : 64;
    while (nc < d->qlen + n) nc *= 2;
    cu_item *q = weft__realloc(d->queue, nc * sizeof *q);
    if (q == NULL) {
      rc = weft__oom("a completion request");
    } else {
      d->queue = q;
      d->qcap = nc;
    }
  }
  if (rc == WEFT_OK) {
    memcpy(d->queue + d->qlen, items, n * sizeof *items);
    d->qlen += n;
    atomic_fetch_add_explicit(&d->qcount, (int)n, memory_order_release);
    weft__cond_signal(&d->qcond);
  }
  weft__mutex_unlock(&d->qlock);
  return rc;
}

static void fault_message(cu_device *d, cu_plan *cp, cudaError_t e, char *msg, size_t size) {
  char desc[256] = "none";
  uint32_t last = atomic_load_explicit(&cp->last_issued[d - cp->st->dev], memory_order_relaxed);
  if (last < cp->n) weft_node_describe(cp->p->x[last].node, desc, sizeof desc);
  snprintf(msg, size,
           "the device work of this run on cuda:%d failed asynchronously: %s (%s); the last node "
           "enqueued there was %s; run with WEFT_LAUNCH_BLOCKING=1 to stop at the failing node",
           d->ordinal, cudaGetErrorName(e), cudaGetErrorString(e), desc);
}

/* The first potrf or trtri (in the plan's order) that failed on its matrix (not positive
 * definite; singular), from the info each copied back after it; UINT32_MAX if none. The run's
 * work is done when this is asked. */
static uint32_t failed_la(const cu_plan *cp, char *msg, size_t size) {
  if (cp->la_info == NULL) return UINT32_MAX;
  for (uint32_t k = 0; k < cp->n; k++) {
    uint32_t i = cp->order[k];
    const weft_node *nd = cp->p->x[i].node;
    int info = cp->la_info[i];
    if ((nd->kind != WEFT__OP_POTRF && nd->kind != WEFT__OP_TRTRI) || cp->x[i].dev < 0 || info == 0) continue;
    if (nd->kind == WEFT__OP_TRTRI) /* n - r for the first zero at row r (cuda_kernels.h) */
      snprintf(msg, size, "%s is singular: its diagonal element %lld is zero", weft_tensor_name(nd->args[0].t),
               (long long)(nd->args[0].t->shape[0] - info + 1));
    else if (info > 0)
      snprintf(msg, size, "%s is not positive definite: its leading minor of order %d is not positive",
               weft_tensor_name(nd->args[0].t), info);
    else
      snprintf(msg, size, "cuSOLVER potrf refused argument %d", -info);
    return i;
  }
  return UINT32_MAX;
}

/* Reports one finished request. After this the item's run and plan may be gone. */
static void report(cu_device *d, const cu_item *it, cudaError_t e) {
  char msg[768];
  cu_plan *cp = it->plan;
  if (it->kind == CU_ITEM_NODE) {
    if (e != cudaSuccess) fault_message(d, cp, e, msg, sizeof msg);
    else if (cp->tm != NULL) weft__cu_timing_node(cp, it->node, it->run);
    weft__sched_complete(it->run, it->node, e == cudaSuccess ? WEFT_OK : WEFT_ECUDA, e == cudaSuccess ? NULL : msg);
    return;
  }
  if (e != cudaSuccess) {
    int expected = WEFT_OK;
    if (atomic_compare_exchange_strong(&cp->drain_status, &expected, WEFT_ECUDA)) {
      weft__mutex_lock(&cp->msg_lock);
      fault_message(d, cp, e, cp->drain_msg, sizeof cp->drain_msg);
      weft__mutex_unlock(&cp->msg_lock);
    }
  }
  if (atomic_fetch_sub_explicit(&cp->drains_left, 1, memory_order_acq_rel) != 1) return;
  /* The last device: report for the run. drain_msg is copied by the scheduler. */
  int st = atomic_load_explicit(&cp->drain_status, memory_order_acquire);
  if (st == WEFT_OK) {
    if (cp->tm != NULL) weft__cu_timing_run(cp, it->run);
    uint32_t bad = failed_la(cp, msg, sizeof msg);
    weft__sched_drained(it->run, bad, bad == UINT32_MAX ? WEFT_OK : WEFT_EKERNEL, bad == UINT32_MAX ? NULL : msg);
    return;
  }
  weft__mutex_lock(&cp->msg_lock);
  snprintf(msg, sizeof msg, "%s", cp->drain_msg);
  weft__mutex_unlock(&cp->msg_lock);
  uint32_t last = atomic_load_explicit(&cp->last_issued[d - cp->st->dev], memory_order_relaxed);
  weft__sched_drained(it->run, last, st, msg);
}

static void *thread_main(void *arg) {
  cu_device *d = arg;
  cudaSetDevice(d->ordinal);
  cu_item *mine = NULL;
  size_t n = 0, cap = 0;
  uint64_t idle_since = 0;
  for (;;) {
    if (n == 0) idle_watch(d);
    weft__mutex_lock(&d->qlock);
    while (!d->stop && d->qlen == 0 && n == 0) weft__cond_wait(&d->qcond, &d->qlock);
    if (d->qlen > 0 && n + d->qlen > cap) {
      size_t nc = cap ? cap : 64;
      while (nc < n + d->qlen) nc *= 2;
      cu_item *m = weft__realloc(mine, nc * sizeof *m);
      if (m != NULL) {
        mine = m;
        cap = nc;
      }
    }
    size_t take = d->qlen < cap - n ? d->qlen : cap - n;
    memcpy(mine + n, d->queue, take * sizeof *mine);
    memmove(d->queue, d->queue + take, (d->qlen - take) * sizeof *mine);
    d->qlen -= take;
    n += take;
    atomic_fetch_sub_explicit(&d->qcount, (int)take, memory_order_relaxed);
    int stop = d->stop && n == 0 && d->qlen == 0;
    weft__mutex_unlock(&d->qlock);
    if (stop) break;
    /* Report what is done, keeping the rest in order. */
    size_t kept = 0;
    for (size_t k = 0; k < n; k++) {
      cudaError_t e = cudaEventQuery(mine[k].ev);
      if (e == cudaErrorNotReady) {
        mine[kept++] = mine[k];
        continue;
      }
      cudaGetLastError();
      report(d, &mine[k], e);
    }
    int progress = kept < n;
    n = kept;
    if (n == 0 || progress) {
      idle_since = 0;
      continue;
    }
    uint64_t now = weft__now_ns();
    if (idle_since == 0) idle_since = now;
    if (now - idle_since < HOT_NS) {
      for (int k = 0; k < 64 && atomic_load_explicit(&d->qcount, memory_order_acquire) == 0; k++) weft__cpu_relax();
      continue;
    }
    if (now - idle_since < SPIN_NS) {
      weft__thread_yield();
      continue;
    }
    /* A long wait: sleep until the oldest request's event completes. */
    cudaEventSynchronize(mine[0].ev);
    cudaGetLastError();
    idle_since = 0;
  }
  weft__free(mine);
  return NULL;
}

int weft__cu_threads_start(cu_state *st) {
  for (int i = 0; i < st->ndev; i++) {
    cu_device *d = &st->dev[i];
    int rc = weft__thread_create(&d->thread, thread_main, d);
    if (rc != WEFT_OK) return rc;
    d->thread_started = 1;
  }
  return WEFT_OK;
}

void weft__cu_threads_stop(cu_state *st) {
  for (int i = 0; i < st->ndev; i++) {
    cu_device *d = &st->dev[i];
    if (!d->thread_started) continue;
    weft__mutex_lock(&d->qlock);
    d->stop = 1;
    weft__cond_broadcast(&d->qcond);
    weft__mutex_unlock(&d->qlock);
    weft__thread_join(d->thread);
    d->thread_started = 0;
  }
}

/* The drain itself failed to enqueue work: the run fails with what and where. */
static void drain_failed(cu_plan *cp, cudaError_t e, uint32_t node) {
  int expected = WEFT_OK;
  if (!atomic_compare_exchange_strong(&cp->drain_status, &expected, WEFT_ECUDA)) return;
  char desc[256];
  weft_node_describe(cp->p->x[node].node, desc, sizeof desc);
  weft__mutex_lock(&cp->msg_lock);
  snprintf(cp->drain_msg, sizeof cp->drain_msg, "launching the batch of elementwise ops that ends at %s failed: %s (%s)",
           desc, cudaGetErrorName(e), cudaGetErrorString(e));
  weft__mutex_unlock(&cp->msg_lock);
  cudaGetLastError();
}

/* Device d's part of the drain: the events whose completion means the run's work there is done,
 * appended to it[] (*n of them). Each stream the plan used gets one event after its last node (the
 * one timing records to close the stream's last group, when it does). Only when the run leaves
 * temporaries to free does the device's join stream wait for all of them, free them, and give one
 * event instead: a drain through the join stream adds a wait for each stream's event and a
 * record on the join stream to the host's calls, and the drain is on the path of every short
 * run (a run's fixed cost: docs/benchmarks.md, "Diagnostics"). */
static void drain_device(cu_state *st, cu_plan *cp, weft_run *run, int dev, cu_item *it, size_t *n) {
  cu_device *d = &st->dev[dev];
  weft_tensor **ts = cp->p->graph->tensors.data;
  /* Batches a failure or a cancel left unlaunched: their nodes were reported done. */
  for (uint32_t k = 0; k < cp->nbatches; k++) {
    cu_batch *bt = &cp->batches[k];
    if (bt->count == 0 || cp->x[bt->last].dev != dev) continue;
    cudaError_t e = weft__cu_batch_flush(st, cp, bt);
    if (e != cudaSuccess) drain_failed(cp, e, bt->last);
  }
  int temps = 0;
  for (uint32_t t = 0; t < cp->ntensors && !temps; t++) temps = cp->tptr[t] != NULL && ts[t]->device.index == dev;
  cudaSetDevice(d->ordinal);
  if (temps) weft__cu_lock(&d->join);
  for (int s = 0; s < d->nstreams; s++) {
    if (!(cp->used[dev] >> s & 1)) continue;
    cudaEvent_t ev = cp->tm != NULL ? weft__cu_timing_drain_stream(cp, dev, s, d->streams[s].s) : NULL;
    if (ev == NULL) {
      ev = cp->tail[dev][s];
      cudaEventRecord(ev, d->streams[s].s);
    }
    if (temps)
      cudaStreamWaitEvent(d->join.s, ev, 0);
    else
      it[(*n)++] = (cu_item){ev, run, cp, UINT32_MAX, CU_ITEM_DRAIN};
  }
  if (!temps) return;
  for (uint32_t t = 0; t < cp->ntensors; t++)
    if (cp->tptr[t] != NULL && ts[t]->device.index == dev) {
      cudaFreeAsync(cp->tptr[t], d->join.s);
      cp->tptr[t] = NULL;
    }
  cudaEventRecord(cp->drained[dev], d->join.s);
  weft__cu_unlock(&d->join);
  it[(*n)++] = (cu_item){cp->drained[dev], run, cp, UINT32_MAX, CU_ITEM_DRAIN};
}

int weft__cu_run_drain(weft__backend *b, weft__plan *p, weft_run *run) {
  cu_state *st = b->state;
  cu_plan *cp = weft__cu_plan_of(b, p);
  if (cp == NULL) return WEFT_OK;
  atomic_store(&cp->drain_status, WEFT_OK);
  if (cp->replaying) {
    atomic_store(&cp->drains_left, 1);
    cu_item it = {cp->replay_done, run, cp, UINT32_MAX, CU_ITEM_DRAIN};
    if (weft__cu_push(&st->dev[cp->origin_dev], &it, 1) == WEFT_OK) return WEFT__PENDING;
    cudaSetDevice(st->dev[cp->origin_dev].ordinal);
    if (cudaEventSynchronize(cp->replay_done) == cudaSuccess && cp->tm != NULL) weft__cu_timing_run(cp, run);
    cudaGetLastError();
    return WEFT_OK;
  }
  /* Every device's events first, then the count, then the requests: a request may complete as
   * soon as it is queued. */
  cu_item it[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3];
  size_t n[CU_MAX_DEVICES] = {0}, total = 0;
  for (int d = 0; d < st->ndev; d++) {
    if (cp->used[d] == 0) continue;
    drain_device(st, cp, run, d, it[d], &n[d]);
    total += n[d];
  }
  if (total == 0) return WEFT_OK;
  atomic_store(&cp->drains_left, (int)total);
  int pending = 0, done = 0;
  for (int d = 0; d < st->ndev && !done; d++) {
    if (n[d] == 0) continue;
    if (weft__cu_push(&st->dev[d], it[d], n[d]) == WEFT_OK) {
      pending = 1;
      continue;
    }
    /* Out of host memory for the requests: wait here for this device (rare). */
    cudaSetDevice(st->dev[d].ordinal);
    for (size_t k = 0; k < n[d]; k++) cudaEventSynchronize(it[d][k].ev);
    cudaGetLastError();
    if (atomic_fetch_sub(&cp->drains_left, (int)n[d]) == (int)n[d]) {
      if (cp->tm != NULL && atomic_load(&cp->drain_status) == WEFT_OK) weft__cu_timing_run(cp, run);
      done = 1;
    }
  }
  /* The drain is queued (or done): the completion threads need not watch for it any more. Only
   * what is local is read here: once queued, the run (and its plan) may end at any moment. */
  for (int d = 0; d < st->ndev; d++)
    if (n[d] > 0) atomic_fetch_sub_explicit(&st->dev[d].eager_runs, 1, memory_order_relaxed);
  return done ? WEFT_OK : pending ? WEFT__PENDING : WEFT_OK;
}
