/* dispatch.c — runs: launch, the execution of ready nodes, completion, wait/poll/cancel.
 *
 * Protocol. At launch every node's `pending` counter holds its number of predecessors (the
 * plan's build sets them, and each node sets its own back when it is taken: taken_skipped),
 * and the roots are handed to the pool. A worker that runs node x then *releases* x's
 * outgoing edges: each successor's counter is decremented, and a successor that reaches zero
 * is ready; a successor of one predecessor is ready at its one release, with no decrement (a
 * locked instruction a node of every chain and tree paid, which also waits for the worker's
 * stores before it). The worker keeps the first ready successor and runs it next on the same
 * thread (no queue, no wake-up: a chain runs as a loop), and queues the others where idle
 * workers can steal them. The acq_rel decrement orders x's writes before the successor's reads
 * (with one predecessor: the same thread, or the queue's release and a thief's acquire).
 *
 * Asynchronous backends (CUDA): launch returns WEFT__PENDING once the work is enqueued. Edges
 * to successors on the same asynchronous backend are released right then ("early": the
 * device orders them through streams and events, so the host never waits for the GPU before
 * enqueuing a GPU successor); the other edges are released when the backend reports
 * completion through weft__sched_complete, from whatever thread observed it. A launch may also
 * return WEFT__DEFERRED (another thread is enqueueing on the node's stream and takes the node
 * with it): the backend then reports the issue through weft__sched_issued, which does what this
 * loop would have done with the status, from the thread that enqueued the node.
 *
 * Failures. A node that fails records the run's first error (status, node, message) and
 * poisons its successors; a poisoned node is skipped and poisons its own successors, so only
 * what depends on the failure is cancelled and every independent node still runs.
 * weft_run_cancel skips every node not yet started.
 *
 * Completion counting is batched per worker: a worker counts the nodes it finished for the
 * current run and subtracts them from run->remaining when it switches runs or runs out of
 * work (weft__dispatch_flush), so a 100 000-node chain costs one shared atomic, not 100 000.
 * The subtraction that reaches zero finishes the run. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "sched/sched.h"
#include "weft/report.h"


static _Thread_local struct {
  weft_run *run;
  uint32_t count;
  uint64_t t; /* timing: when this worker's last node ended; 0 once it has gone idle */
} tls;

enum { SKIPPED = 3 }; /* internal: the node did not run (poisoned or cancelled) */

static void finish_run(weft_run *r);

static void count_done(weft_run *r, uint32_t k) {
  if (atomic_fetch_sub_explicit(&r->remaining, k, memory_order_acq_rel) == k) finish_run(r);
}

void weft__dispatch_flush(void) {
  if (tls.count != 0) {
    uint32_t k = tls.count;
    tls.count = 0;
    count_done(tls.run, k);
  }
  tls.run = NULL;
  tls.t = 0;
}

/* Records the run's first failure; x is NULL for a failure no single node can be named for. */
static void record_failure(weft_run *r, weft__xnode *x, int status, const char *msg) {
  int expected = WEFT_OK;
  if (!atomic_compare_exchange_strong_explicit(&r->status, &expected, status,
                                               memory_order_acq_rel, memory_order_relaxed))
    return; /* not the first */
  char desc[300];
  if (x != NULL)
    weft_node_describe(x->node, desc, sizeof desc);
  else
    snprintf(desc, sizeof desc, "the run");
  weft__mutex_lock(&r->lock);
  r->failed_node = x != NULL ? x->id : UINT32_MAX;
  snprintf(r->error, sizeof r->error, "%s: %s%s%s", desc, weft_strerror(status),
           msg && *msg ? ": " : "", msg ? msg : "");
  weft__mutex_unlock(&r->lock);
}

/* Releases x's outgoing edges: `which` is RELEASE_EARLY or RELEASE_LATE for one kind of edge,
 * RELEASE_ALL for every edge of a node that finished synchronously (one pass over its
 * successors, not two). The first successor to become ready (of backend `only`, when not NULL)
 * is returned in *next when next is not NULL; others are queued (pushed on this worker's deque,
 * with one wake-up call for all of them after the loop, or injected when `only` says this
 * thread is not a worker). */
enum { RELEASE_LATE = 0, RELEASE_EARLY = 1, RELEASE_ALL = 2 };

/* Inlined at every call (as it was while the workers were its only callers): out of line, the
 * chain of a worker paid a call a node more (bench_overhead's indep and wave, about 8%). */
static inline __attribute__((always_inline)) void release(weft__pool *pool, weft__plan *pl, weft__xnode *x,
                                                          int which, int poisoned, weft__xnode **next,
                                                          const weft__backend *only) {
  atomic_uchar *poison = pl->exec->poison;
  int queued = 0, burst = 0;
  for (uint32_t k = x->succ_begin; k < x->succ_end; k++) {
    if (which != RELEASE_ALL && pl->succ_early[k] != which) continue;
    uint32_t s = pl->succ[k];
    if (poisoned) atomic_store_explicit(&poison[s], 1, memory_order_relaxed);
    weft__xnode *xs = &pl->x[s];
    if (xs->pred_end - xs->pred_begin == 1 ||
        atomic_fetch_sub_explicit(&xs->pending, 1, memory_order_acq_rel) == 1) {
      WEFT__PREFETCH(xs->node); /* the first of the misses its run chases (node, args, tensors) */
      if (next != NULL && *next == NULL && (only == NULL || xs->backend == only))
        *next = xs;
      else if (next != NULL && only == NULL)
        queued += weft__pool_queue(pool, xs, &burst);
      else /* from a completion or a report of issue: first in, first out (the order matters
            * to a run of copies: a deque's owner would take the newest first) */
        weft__pool_inject(pool, xs);
    }
  }
  if (queued > 0) weft__pool_wake(pool, queued);
}

/* How many threads weft__ctx_parallel may run the context's tiles on at most: the runtime's
 * intra-op width when the node runs on a worker of a run, else 1. */
static int ctx_threads(const weft_kernel_ctx *ctx) {
  const weft_runtime *rt = ctx->run != NULL ? ctx->graph->rt : NULL;
  return rt != NULL && rt->intra > 1 && weft__pool_is_worker(rt->pool) ? rt->intra : 1;
}

void weft__ctx_parallel(weft_kernel_ctx *ctx, uint32_t ntiles, void (*fn)(void *arg, uint32_t tile), void *arg) {
  weft_runtime *rt = ctx->run != NULL ? ctx->graph->rt : NULL;
  if (ntiles > 1 && ctx_threads(ctx) > 1) {
    uint32_t helpers = (uint32_t)rt->intra - 1;
    weft__pool_parallel(rt->pool, ntiles, helpers, fn, arg);
    return;
  }
  for (uint32_t t = 0; t < ntiles; t++) fn(arg, t);
}

void weft__ctx_bind(weft_kernel_ctx *ctx) {
  const weft_node *n = ctx->node;
  ctx->data = n->nargs <= WEFT__CTX_INLINE ? ctx->inline_data : ctx->plan->x[ctx->index].args_room;
  for (int i = 0; i < n->nargs; i++) ctx->data[i] = n->args[i].t->data;
}

/* Runs node x through its backend. With timing on, the node's record gets its lane, a start
 * and an end. One clock read a node: the end of a worker's node is the start of its next one,
 * so the dispatcher's own work between two nodes (releasing edges, taking the next node from a
 * deque) counts with the second; a worker that went idle (weft__dispatch_flush) reads the
 * clock afresh for its next node. The clock read is most of what timing adds to an empty task
 * (docs/benchmarks.md, "What node timing costs"), which is why there is one, not two. A node
 * whose work completes later (WEFT__PENDING) gets its end at completion, from its backend or
 * weft__sched_complete. */
static inline __attribute__((always_inline)) int run_node(weft__xnode *x, weft_run *r, int worker, char *err,
                                                          size_t err_size) {
  weft_node *n = x->node;
  weft_kernel_ctx ctx;
  ctx.node = n;
  ctx.graph = n->graph;
  ctx.run = r;
  ctx.plan = x->plan;
  ctx.index = x->id;
  ctx.device = n->device;
  ctx.backend = x->backend;
  ctx.stream = NULL;
  ctx.blas = NULL;
  weft__ctx_bind(&ctx);
  err[0] = '\0';
  ctx.err = err;
  ctx.err_size = err_size;
  weft__ntime *tm = x->plan->exec->times;
  if (tm == NULL) return x->backend->vt->launch(x->backend, &ctx);
  tm += x->id;
  /* A node of another device gets its host-side launch interval, marked as such, until its
   * backend reports where and when it ran on the device. */
  uint32_t lane = n->device.kind == WEFT_DEVICE_CPU
                      ? WEFT__LANE(WEFT__LANE_CPU, 0, worker)
                      : WEFT__LANE(WEFT__LANE_HOSTSIDE, n->device.index, 0);
  atomic_store_explicit(&tm->lane, lane, memory_order_relaxed);
  atomic_store_explicit(&tm->start, tls.t != 0 ? tls.t : weft__clock_now(), memory_order_relaxed);
  int st = x->backend->vt->launch(x->backend, &ctx);
  tls.t = weft__clock_now();
  if (st != WEFT__PENDING && st != WEFT__DEFERRED) atomic_store_explicit(&tm->end, tls.t, memory_order_relaxed);
  return st;
}

/* Takes node x, ready, to run or skip; returns whether it is not to run (an input failed:
 * poisoned; or the run was cancelled): such a node is marked skipped, and its backend told (a
 * transport still owes its messages). Every predecessor has released x, and none will again in
 * this run: x sets its counter back for the next run (and clears its poison), so a run that
 * ends leaves every node armed and a launch resets nothing (the plan's build arms them first).
 * A counter of one predecessor or none was never decremented (release) and is left alone: the
 * record of such a node is only read in a run. */
static int taken_skipped(weft__plan *pl, weft_run *r, weft__xnode *x) {
  uint32_t preds = x->pred_end - x->pred_begin;
  if (preds > 1) atomic_store_explicit(&x->pending, preds, memory_order_relaxed);
  int poisoned = atomic_load_explicit(&pl->exec->poison[x->id], memory_order_relaxed);
  if (!poisoned && !atomic_load_explicit(&r->cancel, memory_order_relaxed)) return 0;
  if (poisoned) atomic_store_explicit(&pl->exec->poison[x->id], 0, memory_order_relaxed);
  weft__timing_skip(pl, x->id);
  if (x->backend->vt->skip != NULL) x->backend->vt->skip(x->backend, r, x->id);
  return 1;
}

void weft__dispatch_chain(weft__pool *pool, int worker, weft__xnode *x) {
  char err[512];
  while (x != NULL) {
    weft__plan *pl = x->plan;
    weft_run *r = pl->exec->run;
    if (tls.run != r) {
      weft__dispatch_flush();
      tls.run = r;
    }
    int st, held = 0;
    if (taken_skipped(pl, r, x)) {
      st = SKIPPED;
    } else {
      /* A node of an asynchronous backend may complete on another thread before launch even
       * returns, and that completion may be the run's last: the issuing worker holds one
       * extra count on the run until it is done reading the plan (dropped below), so the run
       * cannot end, and its graph be destroyed, under it. */
      held = (x->backend->vt->flags & (WEFT__BACKEND_ASYNC | WEFT__BACKEND_PENDING)) != 0;
      if (held) atomic_fetch_add_explicit(&r->remaining, 1, memory_order_acq_rel);
      st = run_node(x, r, worker, err, sizeof err);
      assert(held || (st != WEFT__PENDING && st != WEFT__DEFERRED));
    }
    weft__xnode *next = NULL;
    if (st == WEFT__PENDING) {
      /* Completion (and the late edges) come through weft__sched_complete. */
      release(pool, pl, x, RELEASE_EARLY, 0, &next, NULL);
    } else if (st == WEFT__DEFERRED) {
      /* The backend enqueues it later and reports through weft__sched_issued, which also
       * drops the count held above: until the report, the run cannot end (a node whose
       * completion is reported before its issue, it may be, must not end it). */
      held = 0;
    } else {
      if (st != WEFT_OK && st != SKIPPED) record_failure(r, x, st, err);
      release(pool, pl, x, RELEASE_ALL, st != WEFT_OK, &next, NULL);
      tls.count++;
    }
    if (held) tls.count++;
    x = next;
  }
}

void weft__sched_issued(weft_run *r, uint32_t index, int status, const char *message) {
  weft__plan *pl = r->plan;
  weft__xnode *x = &pl->x[index];
  weft__pool *pool = r->graph->rt->pool;
  if (pl->exec->times != NULL && status != WEFT__PENDING)
    atomic_store_explicit(&pl->exec->times[index].end, weft__clock_now(), memory_order_relaxed);
  if (status == WEFT__PENDING) {
    release(pool, pl, x, RELEASE_EARLY, 0, NULL, NULL);
  } else {
    if (status != WEFT_OK) record_failure(r, x, status, message);
    release(pool, pl, x, RELEASE_ALL, status != WEFT_OK, NULL, NULL);
  }
  /* The dispatcher's hold on the run (weft__dispatch_chain), and the node itself unless its
   * completion is still to come. The last thing done with the run: this may end it. */
  count_done(r, status == WEFT__PENDING ? 1 : 2);
}

void weft__sched_complete(weft_run *r, uint32_t index, int status, const char *message) {
  weft__plan *pl = r->plan;
  weft__xnode *x = &pl->x[index];
  weft__timing_complete(pl, index);
  if (status != WEFT_OK && status != WEFT__UPSTREAM) {
    record_failure(r, x, status, message);
    /* Early edges were released at issue; their nodes are on the device already. */
  }
  release(r->graph->rt->pool, pl, x, RELEASE_LATE, status != WEFT_OK, NULL, NULL);
  count_done(r, 1);
}

void weft__sched_complete_here(weft_run *r, uint32_t index, int status, const char *message) {
  weft__plan *pl = r->plan;
  weft__xnode *x = &pl->x[index];
  weft__pool *pool = r->graph->rt->pool;
  weft__timing_complete(pl, index);
  if (status != WEFT_OK && status != WEFT__UPSTREAM) record_failure(r, x, status, message);
  weft__xnode *y = NULL;
  release(pool, pl, x, RELEASE_LATE, status != WEFT_OK, &y, x->backend);
  /* The completed node still counts on the run until the end: the run cannot end under the
   * launches below. */
  uint32_t done = 1;
  int lane = weft__pool_size(pool); /* the CPU lane after the workers' */
  char err[512];
  tls.t = 0; /* each node's start read afresh: this thread is no worker's chain */
  while (y != NULL) {
    weft__xnode *next = NULL;
    int st = taken_skipped(pl, r, y) ? SKIPPED : run_node(y, r, lane, err, sizeof err);
    assert(st != WEFT__DEFERRED);
    if (st == WEFT__PENDING) {
      release(pool, pl, y, RELEASE_EARLY, 0, &next, y->backend); /* its completion counts it */
    } else {
      if (st != WEFT_OK && st != SKIPPED) record_failure(r, y, st, err);
      release(pool, pl, y, RELEASE_ALL, st != WEFT_OK, &next, y->backend);
      done++;
    }
    y = next;
  }
  tls.t = 0;
  count_done(r, done);
}

void weft__sched_elsewhere(const weft_kernel_ctx *ctx) { weft__timing_skip(ctx->plan, ctx->index); }

int weft__run_outcome(weft_run *r, uint32_t *node, char *error, size_t size) {
  int st = atomic_load_explicit(&r->status, memory_order_acquire);
  weft__mutex_lock(&r->lock);
  *node = r->failed_node;
  snprintf(error, size, "%s", st != WEFT_OK ? r->error : "");
  weft__mutex_unlock(&r->lock);
  if (st == WEFT_OK && atomic_load_explicit(&r->cancel, memory_order_relaxed)) {
    *node = UINT32_MAX;
    snprintf(error, size, "the run was cancelled");
    return WEFT_ECANCELED;
  }
  return st;
}

void weft__sched_fail_as(weft_run *r, uint32_t node, int status, const char *error) {
  int expected = WEFT_OK;
  if (!atomic_compare_exchange_strong_explicit(&r->status, &expected, status, memory_order_acq_rel,
                                               memory_order_relaxed))
    return; /* this process failed first: its own error stands */
  weft__mutex_lock(&r->lock);
  r->failed_node = node < r->plan->n ? node : UINT32_MAX;
  snprintf(r->error, sizeof r->error, "%s", error);
  weft__mutex_unlock(&r->lock);
}

uint32_t weft__run_claim_roots(weft_run *r, weft__xnode **out, uint32_t max) {
  weft__plan *pl = r->plan;
  uint32_t begin = atomic_fetch_add_explicit(&r->root_next, max, memory_order_relaxed);
  if (begin >= pl->nroots) return 0;
  uint32_t end = begin + max > pl->nroots ? pl->nroots : begin + max;
  for (uint32_t i = begin; i < end; i++) out[i - begin] = &pl->x[pl->roots[i]];
  return end - begin;
}

int weft__run_has_roots(weft_run *r) {
  return atomic_load_explicit(&r->root_next, memory_order_relaxed) < r->plan->nroots;
}

static void end_run(weft_run *r);

static void drain_done(weft_run *r) {
  if (atomic_fetch_sub_explicit(&r->drains, 1, memory_order_acq_rel) == 1) end_run(r);
}

/* Every node is issued or done: asynchronous backends may still have work in flight, and say
 * so through run_drain; the run ends when the last of them reports (drain_done). The count
 * starts at one for this function, so a backend that reports at once cannot end the run
 * before the others were asked. */
static void finish_run(weft_run *r) {
  weft_runtime *rt = r->graph->rt;
  atomic_store_explicit(&r->drains, 1, memory_order_relaxed);
  for (int b = 0; b < rt->nbackends; b++) {
    if (rt->backends[b].vt->run_drain == NULL) continue;
    atomic_fetch_add_explicit(&r->drains, 1, memory_order_relaxed);
    if (rt->backends[b].vt->run_drain(&rt->backends[b], r->plan, r) != WEFT__PENDING) drain_done(r);
  }
  drain_done(r);
}

void weft__sched_drained(weft_run *r, uint32_t index, int status, const char *message) {
  if (status != WEFT_OK)
    record_failure(r, index < r->plan->n ? &r->plan->x[index] : NULL, status, message);
  drain_done(r);
}

static void end_run(weft_run *r) {
  weft_graph *g = r->graph;
  weft__plan *pl = r->plan;
  weft_runtime *rt = g->rt;
  for (int b = 0; b < rt->nbackends; b++)
    if (rt->backends[b].vt->run_end != NULL) rt->backends[b].vt->run_end(&rt->backends[b], pl, r);
  int st = atomic_load_explicit(&r->status, memory_order_acquire);
  if (st == WEFT_OK && atomic_load_explicit(&r->cancel, memory_order_relaxed)) {
    st = WEFT_ECANCELED;
    atomic_store_explicit(&r->status, st, memory_order_release);
    weft__mutex_lock(&r->lock);
    snprintf(r->error, sizeof r->error, "the run was cancelled");
    weft__mutex_unlock(&r->lock);
  }
  r->t_end = weft__clock_now();
  weft__pool_counts(rt->pool, &r->pool_end);
  pl->exec->run = NULL;
  atomic_fetch_sub_explicit(&rt->running, 1, memory_order_relaxed);
  atomic_store_explicit(&g->busy, 0, memory_order_release);
  if (r->program != g) atomic_store_explicit(&r->program->busy, 0, memory_order_release);
  /* The callback may ask for the run's error and failed node: publish them first. */
  atomic_store_explicit(&r->ended, 1, memory_order_release);
  if (r->cb != NULL) r->cb(r, st, r->cb_arg);
  weft__mutex_lock(&r->lock);
  atomic_store_explicit(&r->done, 1, memory_order_release);
  weft__cond_broadcast(&r->cond);
  weft__mutex_unlock(&r->lock);
}

/* ---- the plan's per-run state, and what backends may know of a run ------------------------ */

#define EXEC_U8(n) ((size_t)((n) ? (n) : 1))

int weft__exec_init(weft__plan *p) {
  weft__plan_exec *e = weft__calloc(1, sizeof *e);
  if (e == NULL) return weft__oom("a plan");
  p->exec = e;
  e->poison = weft__mem_get(p->mem, EXEC_U8(p->n));
  if (e->poison == NULL) return weft__oom("a plan");
  return weft__timing_plan_init(p);
}

void weft__exec_free(weft__plan *p) {
  weft__plan_exec *e = p->exec;
  if (e == NULL) return;
  weft__timing_plan_free(p);
  weft__mem_put(p->mem, e->poison, EXEC_U8(p->n));
  weft__free(e);
  p->exec = NULL;
}

weft__plan *weft__run_plan(const weft_run *run) { return run->plan; }

uint64_t weft__run_launch_ns(const weft_run *run) { return run->t_launch; }

int weft__run_latest_plan(const weft_run *run, const char *what, const weft__plan **out) {
  if (run == NULL) return weft__err(WEFT_EINVAL, "%s: run is NULL", what);
  if (!atomic_load_explicit(&run->done, memory_order_acquire))
    return weft__err(WEFT_EAGAIN, "%s: the run is still in flight; wait for it first", what);
  const weft__plan *p = run->graph->plan;
  if (p != run->plan || p->exec->last_run != run->id)
    return weft__err(WEFT_ESTATE, "%s: the graph was launched again since this run", what);
  *out = p;
  return WEFT_OK;
}

/* A setup step of `kind` from t0 to now. */
static int setup_step(weft__vec *setup, int kind, uint64_t t0) {
  weft__setup_rec rec = {.t0 = t0, .t1 = weft__clock_now(), .kind = (uint8_t)kind, .tensor = UINT32_MAX};
  return weft__vec_push(setup, &rec);
}

/* Gives the run its setup (`setup` is left empty), with times from the setup's start: on the
 * runtime's first run its creation first, its steps laid end to end just before the launch
 * call (what came between is the application's), then the launch's steps. */
static void setup_take(weft_runtime *rt, weft__vec *setup, uint64_t t_enter, weft_run *r) {
  uint64_t before = 0;
  int first = atomic_exchange_explicit(&rt->setup_told, 1, memory_order_acq_rel) == 0;
  const weft__setup_rec *made = rt->setup.data;
  if (first)
    for (size_t i = 0; i < rt->setup.len; i++) before += made[i].t1 - made[i].t0;
  weft__setup_rec *mine = setup->data;
  for (size_t i = 0; i < setup->len; i++) {
    mine[i].t0 = before + (mine[i].t0 - t_enter);
    mine[i].t1 = before + (mine[i].t1 - t_enter);
  }
  r->setup_ns = before + (r->t_launch - t_enter);
  r->setup = *setup; /* moved */
  weft__vec_init(setup, sizeof(weft__setup_rec));
  r->setup_runtime = first ? made : NULL;
  r->nsetup_runtime = first ? rt->setup.len : 0;
}

/* Ends the run on backends [0, nb) after a failed launch. */
static void end_backends(weft_runtime *rt, weft__plan *pl, weft_run *r, int nb) {
  for (int k = 0; k < nb; k++)
    if (rt->backends[k].vt->run_end != NULL) rt->backends[k].vt->run_end(&rt->backends[k], pl, r);
  weft__cond_destroy(&r->cond);
  weft__mutex_destroy(&r->lock);
}

static int launch(weft_graph *program, weft_run_cb cb, void *arg, weft_run **out) {
  if (program == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_graph_launch: NULL argument");
  int expected = 0;
  if (!atomic_compare_exchange_strong_explicit(&program->busy, &expected, 1, memory_order_acq_rel,
                                               memory_order_relaxed))
    return weft__err(WEFT_EBUSY, "weft_graph_launch: a run of this graph is already in flight");
  int rc;
  weft_run *r = NULL;
  weft__vec setup; /* what happens before the first node, as it happens */
  weft__vec_init(&setup, sizeof(weft__setup_rec));
  uint64_t t_enter = weft__clock_now();
  /* The analysis of a large build's last nodes, where a worker follows it (graph/dep_analysis.c):
   * part of the plan step, unless the graph is placed (then of the placement's). */
  weft__graph_follow_close(program, 1);
  /* A program with auto devices runs as its placed graph (src/sched/plan/place.c), which only
   * its runs use: it is idle whenever the program is. */
  /* Across ranks, a launch that plans the program anew is agreed on by every rank once it has
   * planned and materialised, or failed: the ranks compare their graphs, and a failure on one
   * fails them all, so that none waits for a rank that will not run (backends/mpi). */
  weft__backend *agreer = program->rt->remote;
  int agreeing = agreer != NULL && agreer->vt->launch_agree != NULL && program->agreed_version != program->version + 1;
  weft_graph *g = program;
  if ((rc = weft__place(program, &g)) != WEFT_OK) goto fail;
  if (g != program) {
    atomic_store_explicit(&g->busy, 1, memory_order_relaxed);
    if ((rc = setup_step(&setup, WEFT__SETUP_PLACE, t_enter)) != WEFT_OK) goto fail;
  }
  uint64_t t_plan = g != program ? weft__clock_now() : t_enter;
  if ((rc = weft__plan_build(g)) != WEFT_OK) goto fail;
  if ((rc = setup_step(&setup, WEFT__SETUP_PLAN, t_plan)) != WEFT_OK) goto fail;
  if ((rc = weft__storage_materialise(g, &setup)) != WEFT_OK) goto fail;
  /* The placed graph's twins gave every tensor of the program its storage. */
  if (g != program) program->materialised = program->tensors.len;
  if (agreeing) {
    agreeing = 0;
    if ((rc = agreer->vt->launch_agree(agreer, g->plan, WEFT_OK)) != WEFT_OK) goto fail;
    program->agreed_version = program->version + 1;
  }
  /* A run holds 64-byte-aligned counters; the allocator hook only promises malloc's alignment. */
  r = weft__aligned_alloc(64, sizeof *r);
  if (r == NULL) {
    rc = weft__oom("a run");
    goto fail;
  }
  memset(r, 0, sizeof *r);
  if ((rc = weft__mutex_init(&r->lock)) != WEFT_OK) goto fail;
  if ((rc = weft__cond_init(&r->cond)) != WEFT_OK) {
    weft__mutex_destroy(&r->lock);
    goto fail;
  }
  weft__plan *pl = g->plan;
  weft_runtime *rt = g->rt;
  r->id = weft__timing_run_begin(pl);
  uint64_t t_backends = weft__clock_now();
  r->graph = g;
  r->program = program;
  if (g != program) atomic_fetch_add_explicit(&g->handles, 1, memory_order_relaxed);
  r->plan = pl;
  int owned = 0; /* a backend runs the whole plan (a replayed CUDA graph) */
  for (int b = 0; b < rt->nbackends; b++) {
    if (rt->backends[b].vt->run_begin == NULL) continue;
    rc = rt->backends[b].vt->run_begin(&rt->backends[b], pl, r);
    if (rc == WEFT__PENDING) {
      owned = 1;
      rc = WEFT_OK;
    }
    if (rc != WEFT_OK) {
      end_backends(rt, pl, r, b);
      goto fail;
    }
  }
  /* The run's time zero: after the backends' start of the run (setup), unless a backend runs
   * the whole plan — a replayed CUDA graph is launched by its run_begin, and its first nodes
   * may end before run_begin returns (their records would look older than the run): then the
   * run starts where run_begin did, and the backends' step overlaps its start. */
  if (rt->nbackends > 0 && (rc = setup_step(&setup, WEFT__SETUP_BACKENDS, t_backends)) != WEFT_OK) {
    end_backends(rt, pl, r, rt->nbackends);
    goto fail;
  }
  weft__pool_counts(rt->pool, &r->pool_launch);
  r->t_launch = owned ? t_backends : weft__clock_now();
  setup_take(rt, &setup, t_enter, r);
  r->cb = cb;
  r->cb_arg = arg;
  r->failed_node = UINT32_MAX;
  atomic_init(&r->remaining, pl->n);
  atomic_init(&r->root_next, 0);
  atomic_init(&r->cancel, 0);
  atomic_init(&r->status, WEFT_OK);
  atomic_init(&r->ended, 0);
  atomic_init(&r->done, 0);
  atomic_init(&r->drains, 0);
  atomic_fetch_add_explicit(&rt->running, 1, memory_order_relaxed);
  pl->exec->run = r;
  *out = r;
  if (pl->n == 0 || owned) {
    atomic_store_explicit(&r->remaining, 0, memory_order_relaxed);
    finish_run(r);
  } else {
    weft__pool_submit_roots(rt->pool, r); /* the pool's lock publishes the run */
  }
  return WEFT_OK;
fail:
  if (agreeing) (void)agreer->vt->launch_agree(agreer, NULL, rc); /* rc and its message stand */
  weft__vec_fini(&setup);
  weft__aligned_free(r);
  atomic_store_explicit(&g->busy, 0, memory_order_release);
  atomic_store_explicit(&program->busy, 0, memory_order_release);
  return rc;
}

int weft_graph_launch(weft_graph *g, weft_run **out) { return launch(g, NULL, NULL, out); }

int weft_graph_launch_cb(weft_graph *g, weft_run_cb cb, void *arg, weft_run **out) {
  return launch(g, cb, arg, out);
}

/* A waiter that sleeps pays a wake-up when the run ends (docs/benchmarks.md, "Diagnostics": the
 * caller's wake-up), so it first watches the run for WEFT__WAIT_SPIN_NS, yielding its core to
 * whoever wants it. It then still takes the lock: the run's end publishes `done` under it, and
 * the run may be destroyed as soon as this returns. */
int weft_run_wait(weft_run *r) {
  if (r == NULL) return weft__err(WEFT_EINVAL, "weft_run_wait: run is NULL");
  uint64_t t0 = weft__now_ns();
  while (!atomic_load_explicit(&r->done, memory_order_acquire) && weft__now_ns() - t0 < WEFT__WAIT_SPIN_NS)
    weft__thread_yield();
  weft__mutex_lock(&r->lock);
  while (!atomic_load_explicit(&r->done, memory_order_acquire)) weft__cond_wait(&r->cond, &r->lock);
  weft__mutex_unlock(&r->lock);
  int st = atomic_load_explicit(&r->status, memory_order_acquire);
  if (st != WEFT_OK) weft__set_last_error(r->error);
  return st;
}

int weft_run_poll(weft_run *r) {
  if (r == NULL) return weft__err(WEFT_EINVAL, "weft_run_poll: run is NULL");
  if (!atomic_load_explicit(&r->done, memory_order_acquire)) return WEFT_EAGAIN;
  return weft_run_wait(r);
}

void weft_run_cancel(weft_run *r) {
  if (r != NULL) atomic_store_explicit(&r->cancel, 1, memory_order_relaxed);
}

const char *weft_run_error(const weft_run *r) {
  return (r != NULL && atomic_load_explicit(&r->ended, memory_order_acquire)) ? r->error : "";
}

weft_node *weft_run_failed_node(const weft_run *r) {
  if (r == NULL || !atomic_load_explicit(&r->ended, memory_order_acquire) ||
      r->failed_node == UINT32_MAX)
    return NULL;
  weft_node *n = weft_graph_node(r->graph, r->failed_node);
  /* A placed graph's node stands for one of the program's, unless it is a transfer. */
  const weft__placement *pl = r->program->placement;
  if (r->program != r->graph && pl != NULL)
    for (size_t i = 0; i < r->program->nodes.len; i++) {
      const weft_graph *pg;
      uint32_t at;
      if (weft__placement_of(r->program, (uint32_t)i, &pg, &at) != NULL && at == r->failed_node)
        return weft_graph_node(r->program, i);
    }
  return n;
}

weft_graph *weft_run_graph(const weft_run *r) { return r->program; }

void weft_run_destroy(weft_run *r) {
  if (r == NULL) return;
  int rc = weft_run_wait(r); /* the status is the caller's to have read already */
  (void)rc;
  if (r->graph != r->program) atomic_fetch_sub_explicit(&r->graph->handles, 1, memory_order_release);
  weft__vec_fini(&r->setup);
  weft__cond_destroy(&r->cond);
  weft__mutex_destroy(&r->lock);
  weft__aligned_free(r);
}

int weft_graph_run(weft_graph *g) {
  weft_run *r;
  int rc = weft_graph_launch(g, &r);
  if (rc != WEFT_OK) return rc;
  rc = weft_run_wait(r);
  weft_run_destroy(r);
  return rc;
}

/* ---- kernel context -------------------------------------------------------------------- */

void *weft_ctx_data(const weft_kernel_ctx *ctx, int i) {
  return (i >= 0 && i < ctx->node->nargs) ? ctx->data[i] : NULL;
}
const weft_tensor *weft_ctx_tensor(const weft_kernel_ctx *ctx, int i) {
  return (i >= 0 && i < ctx->node->nargs) ? ctx->node->args[i].t : NULL;
}
int weft_ctx_nargs(const weft_kernel_ctx *ctx) { return ctx->node->nargs; }
const void *weft_ctx_params(const weft_kernel_ctx *ctx, size_t *size) {
  if (size != NULL) *size = ctx->node->params_size;
  return ctx->node->params;
}
void *weft_ctx_user(const weft_kernel_ctx *ctx) {
  return ctx->node->user_op != NULL ? ctx->node->user_op->desc.user : NULL;
}
weft_device weft_ctx_device(const weft_kernel_ctx *ctx) { return ctx->device; }

int weft_ctx_fail(weft_kernel_ctx *ctx, const char *fmt, ...) {
  if (ctx->err != NULL && ctx->err_size > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, ctx->err_size, fmt, ap);
    va_end(ap);
  }
  return WEFT_EKERNEL;
}

/* ---- the run's end (weft/report.h) ------------------------------------------------------- */

int weft_run_end_ns(const weft_run *run, uint64_t *out) {
  if (run == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_run_end_ns: NULL argument");
  /* end_run writes t_end before its release store of `ended`. */
  if (!atomic_load_explicit(&run->ended, memory_order_acquire))
    return weft__err(WEFT_EAGAIN, "weft_run_end_ns: the run is still in flight; wait for it first");
  *out = run->t_end;
  return WEFT_OK;
}
