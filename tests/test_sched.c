/* test_sched.c — src/sched: runtime options, launch / wait / poll / cancel, re-runs keeping
 * tensor contents, WEFT_EBUSY for a launch or a change while a run is in flight, callbacks
 * called exactly once (and never for a launch that fails), weft_run_error and
 * weft_run_failed_node, independent nodes and several graphs running at the same time,
 * concurrent launches of one graph, a graph destroyed while its run is in flight, and many
 * small tensors made by the pool's workers at a launch as one thread makes them, and the first
 * launch of a large graph failing at each of its allocations in turn.
 *
 * Nodes are held in flight with a gate: a user kernel that waits until the test opens it
 * (with a timeout, so a broken scheduler fails the test instead of hanging it). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/graph.h"
#include "testutil.h"
#include "weft/report.h"

/* ---- gates, barriers, counters ------------------------------------------------------------ */

typedef struct gate {
  atomic_int open;
  atomic_int arrived;
} gate;

static void nap_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Waits until the gate is open (up to 20 s). */
static int gate_kernel(weft_kernel_ctx *ctx) {
  gate *gt = weft_ctx_user(ctx);
  atomic_fetch_add(&gt->arrived, 1);
  for (int i = 0; i < 200000 && !atomic_load(&gt->open); i++) nap_us(100);
  return atomic_load(&gt->open) ? WEFT_OK : weft_ctx_fail(ctx, "the gate never opened");
}

/* Waits until the gate has seen `n` arrivals. */
static int wait_arrivals(gate *gt, int n) {
  for (int i = 0; i < 200000; i++) {
    if (atomic_load(&gt->arrived) >= n) return 1;
    nap_us(100);
  }
  return 0;
}

/* A rendezvous: each node waits until `want` nodes have arrived; fails after 10 s, which
 * happens only if the nodes were not running at the same time. */
typedef struct barrier {
  atomic_int arrived;
  int want;
} barrier;

static int barrier_kernel(weft_kernel_ctx *ctx) {
  barrier *b = weft_ctx_user(ctx);
  atomic_fetch_add(&b->arrived, 1);
  for (int i = 0; i < 100000; i++) {
    if (atomic_load(&b->arrived) >= b->want) return WEFT_OK;
    nap_us(100);
  }
  return weft_ctx_fail(ctx, "only %d of %d nodes ran at the same time", atomic_load(&b->arrived), b->want);
}

/* Adds 1 to every element of its read-write f64 argument and counts its calls. */
static atomic_int inc_calls;
static int inc_kernel(weft_kernel_ctx *ctx) {
  double *x = weft_ctx_data(ctx, 0);
  for (int64_t i = 0; i < weft_tensor_numel(weft_ctx_tensor(ctx, 0)); i++) x[i] += 1;
  atomic_fetch_add(&inc_calls, 1);
  return WEFT_OK;
}

static atomic_int boom_calls;
static int boom_kernel(weft_kernel_ctx *ctx) {
  atomic_fetch_add(&boom_calls, 1);
  size_t size;
  const int *code = weft_ctx_params(ctx, &size);
  return weft_ctx_fail(ctx, "boom %d", size == sizeof *code ? *code : -1);
}

/* The fixture's gate (one test at a time uses it) and ops. */
static gate gt;
static const weft_op *gate_op, *inc_op, *boom_op;

static int setup(void **state) {
  tu_setup(state);
  tu_fixture *f = *state;
  atomic_store(&gt.open, 0);
  atomic_store(&gt.arrived, 0);
  gate_op = tu_op(f->rt, "gate", 1, (weft_access[]){WEFT_READ_WRITE}, gate_kernel, &gt);
  inc_op = tu_op(f->rt, "inc", 1, (weft_access[]){WEFT_READ_WRITE}, inc_kernel, NULL);
  boom_op = tu_op(f->rt, "boom", 1, (weft_access[]){WEFT_READ_WRITE}, boom_kernel, NULL);
  atomic_store(&inc_calls, 0);
  atomic_store(&boom_calls, 0);
  return 0;
}

static int teardown(void **state) {
  atomic_store(&gt.open, 1); /* never leave a worker waiting */
  return tu_teardown(state);
}

static void call1(weft_graph *g, const weft_op *op, weft_tensor *t) { CHECK(weft_call(g, op, &t, 1, NULL, 0)); }

/* ---- the runtime -------------------------------------------------------------------------- */

static void runtime_options(void **state) {
  (void)state;
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  assert_int_equal(o.cpu_workers, 0);
  assert_int_equal(o.blas_threads, 0);
  assert_int_equal(o.max_gpus, -1);
  assert_int_equal(o.first_gpu, -1);
  assert_int_equal(o.flags, 0);
  assert_null(o.simulate);
  weft_runtime *rt = NULL;
  o.max_gpus = 0;
  o.flags = WEFT_RUNTIME_QUIET;
  o.cpu_workers = -1;
  assert_int_equal(weft_runtime_create(&o, &rt), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "cpu_workers is -1"));
  o.cpu_workers = 5000;
  assert_int_equal(weft_runtime_create(&o, &rt), WEFT_EINVAL);
  o.cpu_workers = 1;
  o.blas_threads = -2;
  assert_int_equal(weft_runtime_create(&o, &rt), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "blas_threads is -2"));
  o.blas_threads = 0;
  o.first_gpu = -2;
  assert_int_equal(weft_runtime_create(&o, &rt), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "first_gpu is -2"));
  o.first_gpu = -1;
  o.cpu_workers = 1;
  o.blas_threads = 100000; /* more than the workers: a product's threads are workers */
  CHECK(weft_runtime_create(&o, &rt));
  assert_int_equal(weft_runtime_blas_threads(rt), 1);
  weft_runtime_destroy(rt);
  rt = NULL;
  assert_int_equal(weft_runtime_create(&o, NULL), WEFT_EINVAL);
  o.blas_threads = 0;
  o.cpu_workers = 3;
  CHECK(weft_runtime_create(&o, &rt));
  assert_int_equal(weft_runtime_cpu_workers(rt), 3);
  weft_runtime_destroy(rt);
  o.cpu_workers = 0; /* one per core */
  CHECK(weft_runtime_create(&o, &rt));
  int cores = weft_runtime_cpu_workers(rt);
  assert_true(cores >= 1);
  assert_int_equal(weft_runtime_blas_threads(rt), cores); /* its tiles on every worker */
  weft_runtime_destroy(rt);
  /* A product's threads: the option, else every worker; one worker is one thread. */
  o.cpu_workers = 1;
  CHECK(weft_runtime_create(&o, &rt));
  assert_int_equal(weft_runtime_blas_threads(rt), 1);
  weft_runtime_destroy(rt);
  o.blas_threads = 1;
  CHECK(weft_runtime_create(&o, &rt));
  assert_int_equal(weft_runtime_blas_threads(rt), 1);
  weft_runtime_destroy(rt);
  weft_runtime_destroy(NULL);
  weft_graph_destroy(NULL);
  weft_run_destroy(NULL);
  weft_run_cancel(NULL);
  assert_int_equal(weft_run_wait(NULL), WEFT_EINVAL);
  assert_int_equal(weft_run_poll(NULL), WEFT_EINVAL);
  assert_string_equal(weft_run_error(NULL), "");
  assert_null(weft_run_failed_node(NULL));
  weft_graph *g;
  assert_int_equal(weft_graph_create(NULL, &g), WEFT_EINVAL);
  weft_run *run;
  assert_int_equal(weft_graph_launch(NULL, &run), WEFT_EINVAL);
}

/* ---- launch, wait, poll ------------------------------------------------------------------- */

static void launch_wait_poll(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_scalar(g, "x", 1), *y = NULL;
  call1(g, gate_op, x);
  CHECK(weft_scale(g, x, 3, &y));
  weft_run *run = NULL;
  CHECK(weft_graph_launch(g, &run));
  assert_non_null(run);
  assert_ptr_equal(weft_run_graph(run), g);
  assert_true(wait_arrivals(&gt, 1));
  assert_int_equal(weft_run_poll(run), WEFT_EAGAIN);
  assert_string_equal(weft_run_error(run), "");
  assert_null(weft_run_failed_node(run));
  atomic_store(&gt.open, 1);
  CHECK(weft_run_wait(run));
  CHECK(weft_run_wait(run)); /* again: same answer */
  CHECK(weft_run_poll(run));
  assert_string_equal(weft_run_error(run), "");
  assert_null(weft_run_failed_node(run));
  weft_run_destroy(run);
  assert_true(tu_value(y) == 3.0);
  /* Poll until done, without wait. */
  CHECK(weft_graph_launch(g, &run));
  int rc;
  while ((rc = weft_run_poll(run)) == WEFT_EAGAIN) nap_us(50);
  CHECK(rc);
  weft_run_destroy(run);
  /* Destroying a run without waiting for it waits. */
  CHECK(weft_graph_launch(g, &run));
  weft_run_destroy(run);
  assert_true(tu_value(y) == 3.0);
}

static void empty_graph_runs(void **state) {
  tu_fixture *f = *state;
  weft_run *run;
  CHECK(weft_graph_launch(f->g, &run));
  CHECK(weft_run_wait(run));
  weft_run_destroy(run);
  CHECK(weft_graph_run(f->g));
}

/* Contents persist from run to run: ten runs of x += 1 give 10. */
static void reruns_keep_contents(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_scalar(g, "x", 0), *v = tu_tensor(g, "v", WEFT_F64, 1, (int64_t[]){100}, weft_zeros());
  call1(g, inc_op, x);
  call1(g, inc_op, v);
  call1(g, inc_op, x);
  for (int r = 1; r <= 10; r++) {
    CHECK(weft_graph_run(g));
    assert_true(tu_value(x) == 2.0 * r);
  }
  double buf[100];
  tu_read_doubles(v, buf);
  for (int i = 0; i < 100; i++) assert_true(buf[i] == 10.0);
  /* A host write between runs is the new starting point. */
  double five = 5;
  CHECK(weft_tensor_write(x, &five, sizeof five));
  CHECK(weft_graph_run(g));
  assert_true(tu_value(x) == 7.0);
  /* Adding a node after runs: the next run plans again and runs it. */
  call1(g, inc_op, x);
  CHECK(weft_graph_run(g));
  assert_true(tu_value(x) == 10.0);
  assert_int_equal(atomic_load(&inc_calls), 11 * 3 + 4);
}

/* ---- busy graphs -------------------------------------------------------------------------- */

static int cb_calls;
static void count_cb(weft_run *run, int status, void *arg) {
  (void)run;
  (void)status;
  (void)arg;
  __atomic_fetch_add(&cb_calls, 1, __ATOMIC_SEQ_CST);
}

static void busy_graph_refuses_launches_and_changes(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_scalar(g, "x", 1), *o = NULL;
  call1(g, gate_op, x);
  weft_run *run = NULL, *second = NULL;
  CHECK(weft_graph_launch(g, &run));
  assert_true(wait_arrivals(&gt, 1));
  cb_calls = 0;
  assert_int_equal(weft_graph_launch(g, &second), WEFT_EBUSY);
  assert_true(tu_contains(weft_last_error(), "already in flight"));
  assert_int_equal(weft_graph_launch_cb(g, count_cb, NULL, &second), WEFT_EBUSY);
  assert_null(second);
  assert_int_equal(weft_graph_run(g), WEFT_EBUSY);
  weft_tensor *t = NULL;
  assert_int_equal(weft_tensor_create(g, "t", WEFT_F32, 0, NULL, weft_cpu(), weft_zeros(), &t), WEFT_EBUSY);
  assert_int_equal(weft_add(g, x, x, &o), WEFT_EBUSY);
  assert_int_equal(weft_scale(g, x, 2, &o), WEFT_EBUSY);
  assert_int_equal(weft_fill(g, x, weft_zeros()), WEFT_EBUSY);
  assert_int_equal(weft_copy(g, x, weft_cpu(), &o), WEFT_EBUSY);
  assert_int_equal(weft_call(g, inc_op, &x, 1, NULL, 0), WEFT_EBUSY);
  assert_int_equal(weft_tensor_set_name(x, "renamed"), WEFT_EBUSY);
  assert_int_equal(weft_node_set_name(weft_graph_node(g, 0), "n"), WEFT_EBUSY);
  assert_int_equal(weft_node_set_origin(weft_graph_node(g, 0), "f.weft:1:1"), WEFT_EBUSY);
  assert_string_equal(weft_tensor_name(x), "x");
  double v;
  assert_int_equal(weft_tensor_read(x, &v, sizeof v), WEFT_EBUSY);
  assert_true(tu_contains(weft_last_error(), "weft_tensor_read: a run of this graph is in flight"));
  assert_int_equal(weft_tensor_write(x, &v, sizeof v), WEFT_EBUSY);
  assert_int_equal(weft_tensor_get(x, 0, &v), WEFT_EBUSY);
  assert_int_equal(weft_graph_node_count(g), 1);
  assert_int_equal(weft_graph_tensor_count(g), 1);
  atomic_store(&gt.open, 1);
  CHECK(weft_run_wait(run));
  weft_run_destroy(run);
  assert_int_equal(cb_calls, 0); /* failed launches never call back */
  CHECK(weft_graph_run(g)); /* idle again */
  CHECK(weft_add(g, x, x, &o));
  CHECK(weft_graph_run(g));
  assert_true(tu_value(o) == 2.0);
}

/* ---- callbacks ---------------------------------------------------------------------------- */

typedef struct cb_record {
  atomic_int calls;
  int status;
  weft_run *run;
  char error[256];
  int failed_node_seen;
} cb_record;

static void record_cb(weft_run *run, int status, void *arg) {
  cb_record *rec = arg;
  rec->status = status;
  rec->run = run;
  snprintf(rec->error, sizeof rec->error, "%s", weft_run_error(run));
  rec->failed_node_seen = weft_run_failed_node(run) != NULL;
  atomic_fetch_add(&rec->calls, 1);
}

static void callbacks_called_exactly_once(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_scalar(g, "x", 0);
  for (int i = 0; i < 20; i++) call1(g, inc_op, x);
  cb_record rec;
  for (int r = 0; r < 50; r++) {
    memset(&rec, 0, sizeof rec);
    rec.status = 12345;
    weft_run *run;
    CHECK(weft_graph_launch_cb(g, record_cb, &rec, &run));
    CHECK(weft_run_wait(run));
    /* The callback has returned by the time wait returns. */
    assert_int_equal(atomic_load(&rec.calls), 1);
    assert_int_equal(rec.status, WEFT_OK);
    assert_ptr_equal(rec.run, run);
    weft_run_destroy(run);
    assert_int_equal(atomic_load(&rec.calls), 1);
  }
  assert_true(tu_value(x) == 1000.0);
  /* An empty graph calls back once too. */
  weft_graph *e;
  CHECK(weft_graph_create(f->rt, &e));
  memset(&rec, 0, sizeof rec);
  weft_run *run;
  CHECK(weft_graph_launch_cb(e, record_cb, &rec, &run));
  CHECK(weft_run_wait(run));
  weft_run_destroy(run);
  assert_int_equal(atomic_load(&rec.calls), 1);
  /* A launch that fails (a cycle) never calls back. */
  weft_tensor *y = tu_scalar(e, "y", 0);
  call1(e, inc_op, y);
  call1(e, inc_op, y);
  CHECK(weft_graph_add_edge(e, weft_graph_node(e, 1), weft_graph_node(e, 0)));
  memset(&rec, 0, sizeof rec);
  run = NULL;
  assert_int_equal(weft_graph_launch_cb(e, record_cb, &rec, &run), WEFT_ECYCLE);
  assert_null(run);
  assert_int_equal(atomic_load(&rec.calls), 0);
  weft_graph_destroy(e);
}

/* The callback sees the run's outcome: its status, and the error and failed node that
 * weft_run_error and weft_run_failed_node give once the run has finished. */
static void callback_sees_the_failure(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_scalar(g, "x", 0);
  int code = 17;
  CHECK(weft_call(g, boom_op, &x, 1, &code, sizeof code));
  cb_record rec;
  memset(&rec, 0, sizeof rec);
  weft_run *run;
  CHECK(weft_graph_launch_cb(g, record_cb, &rec, &run));
  assert_int_equal(weft_run_wait(run), WEFT_EKERNEL);
  assert_int_equal(atomic_load(&rec.calls), 1);
  assert_int_equal(rec.status, WEFT_EKERNEL);
  assert_true(tu_contains(rec.error, "node 0 'boom'"));
  assert_true(tu_contains(rec.error, "boom 17"));
  assert_true(rec.failed_node_seen);
  weft_run_destroy(run);
}

/* ---- errors of a run ---------------------------------------------------------------------- */

static void run_error_and_failed_node(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_scalar(g, "x", 0), *y = tu_scalar(g, "y", 0);
  call1(g, inc_op, x);
  int code = 42;
  CHECK(weft_call(g, boom_op, &y, 1, &code, sizeof code));
  CHECK(weft_node_set_name(weft_graph_node(g, 1), "exploder"));
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  assert_int_equal(weft_run_wait(run), WEFT_EKERNEL);
  const char *err = weft_run_error(run);
  assert_true(tu_contains(err, "node 1 'boom' \"exploder\" on cpu"));
  assert_true(tu_contains(err, "kernel failed"));
  assert_true(tu_contains(err, "boom 42"));
  assert_string_equal(weft_last_error(), err); /* wait set the caller's message */
  assert_ptr_equal(weft_run_failed_node(run), weft_graph_node(g, 1));
  assert_int_equal(weft_run_poll(run), WEFT_EKERNEL);
  weft_run_destroy(run);
  assert_true(tu_value(x) == 1.0); /* the independent node ran */
  assert_int_equal(weft_graph_run(g), WEFT_EKERNEL);
  assert_true(tu_contains(weft_last_error(), "boom 42"));
}

/* ---- cancel ------------------------------------------------------------------------------- */

static void cancel_skips_what_has_not_started(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_scalar(g, "x", 0);
  call1(g, gate_op, x);
  for (int i = 0; i < 100; i++) call1(g, inc_op, x);
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  assert_true(wait_arrivals(&gt, 1));
  weft_run_cancel(run);
  weft_run_cancel(run); /* twice is harmless */
  atomic_store(&gt.open, 1);
  assert_int_equal(weft_run_wait(run), WEFT_ECANCELED);
  assert_true(tu_contains(weft_run_error(run), "cancelled"));
  assert_null(weft_run_failed_node(run));
  weft_run_destroy(run);
  assert_int_equal(atomic_load(&inc_calls), 0);
  assert_true(tu_value(x) == 0.0);
  /* The next run is not cancelled. */
  CHECK(weft_graph_run(g));
  assert_true(tu_value(x) == 100.0);
  /* Cancelling a finished run changes nothing. */
  CHECK(weft_graph_launch(g, &run));
  CHECK(weft_run_wait(run));
  weft_run_cancel(run);
  CHECK(weft_run_wait(run));
  weft_run_destroy(run);
  assert_true(tu_value(x) == 200.0);
}

/* A node that failed first keeps its error over a later cancel. */
static void failure_wins_over_cancel(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_scalar(g, "x", 0), *y = tu_scalar(g, "y", 0);
  int code = 3;
  CHECK(weft_call(g, boom_op, &y, 1, &code, sizeof code));
  call1(g, gate_op, x);
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  assert_true(wait_arrivals(&gt, 1));
  /* The failing node is independent of the gate: wait until it has failed. */
  for (int i = 0; i < 100000 && atomic_load(&boom_calls) == 0; i++) nap_us(100);
  weft_run_cancel(run);
  atomic_store(&gt.open, 1);
  assert_int_equal(weft_run_wait(run), WEFT_EKERNEL);
  weft_run_destroy(run);
}

/* ---- concurrency -------------------------------------------------------------------------- */

/* Independent nodes of one graph run at the same time on two workers. */
static void independent_nodes_run_at_once(void **state) {
  tu_fixture *f = *state;
  static barrier b;
  const weft_op *bar = tu_op(f->rt, "bar", 1, (weft_access[]){WEFT_WRITE}, barrier_kernel, &b);
  weft_graph *g = f->g;
  weft_tensor *p = tu_scalar(g, "p", 0), *q = tu_scalar(g, "q", 0);
  call1(g, bar, p);
  call1(g, bar, q);
  for (int r = 0; r < 5; r++) {
    atomic_store(&b.arrived, 0);
    b.want = 2;
    CHECK(weft_graph_run(g));
  }
}

/* Two graphs launched from one thread run at the same time. */
static void several_graphs_at_once(void **state) {
  tu_fixture *f = *state;
  static barrier b;
  const weft_op *bar = tu_op(f->rt, "bar2", 1, (weft_access[]){WEFT_WRITE}, barrier_kernel, &b);
  enum { NG = 8 };
  weft_graph *gs[NG];
  weft_tensor *xs[NG];
  for (int i = 0; i < NG; i++) {
    CHECK(weft_graph_create(f->rt, &gs[i]));
    xs[i] = tu_scalar(gs[i], "x", i);
    for (int k = 0; k <= i; k++) call1(gs[i], inc_op, xs[i]);
  }
  /* The first two graphs start with a rendezvous. */
  for (int i = 0; i < 2; i++) {
    weft_tensor *p = tu_scalar(gs[i], "p", 0);
    call1(gs[i], bar, p);
  }
  for (int r = 1; r <= 10; r++) {
    atomic_store(&b.arrived, 0);
    b.want = 2;
    weft_run *runs[NG];
    for (int i = 0; i < NG; i++) CHECK(weft_graph_launch(gs[i], &runs[i]));
    for (int i = NG - 1; i >= 0; i--) {
      CHECK(weft_run_wait(runs[i]));
      weft_run_destroy(runs[i]);
    }
    for (int i = 0; i < NG; i++) assert_true(tu_value(xs[i]) == i + (double)r * (i + 1));
  }
  for (int i = 0; i < NG; i++) weft_graph_destroy(gs[i]);
}

typedef struct racer {
  weft_graph *g;
  atomic_int *go;
  int ok, busy;
} racer;

static void *race_launches(void *arg) {
  racer *rc = arg;
  while (!atomic_load(rc->go)) {
  }
  for (int i = 0; i < 200; i++) {
    weft_run *run;
    int st = weft_graph_launch(rc->g, &run);
    if (st == WEFT_EBUSY) {
      rc->busy++;
      continue;
    }
    if (st != WEFT_OK || weft_run_wait(run) != WEFT_OK) {
      rc->ok = -1000000;
      return NULL;
    }
    weft_run_destroy(run);
    rc->ok++;
  }
  return NULL;
}

/* Threads racing to launch one graph: one run at a time, every launch that succeeded ran. */
static void concurrent_launches_of_one_graph(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_scalar(g, "x", 0);
  for (int i = 0; i < 10; i++) call1(g, inc_op, x);
  enum { NT = 4 };
  pthread_t th[NT];
  racer rs[NT];
  atomic_int go = 0;
  for (int i = 0; i < NT; i++) {
    rs[i] = (racer){g, &go, 0, 0};
    assert_int_equal(pthread_create(&th[i], NULL, race_launches, &rs[i]), 0);
  }
  atomic_store(&go, 1);
  int ok = 0, busy = 0;
  for (int i = 0; i < NT; i++) {
    pthread_join(th[i], NULL);
    ok += rs[i].ok;
    busy += rs[i].busy;
  }
  assert_true(ok > 0);
  assert_int_equal(ok + busy, NT * 200);
  assert_true(tu_value(x) == 10.0 * ok);
}

/* Several threads waiting on one run all see its status. */
static void *wait_thread(void *arg) {
  intptr_t st = weft_run_wait(arg);
  return (void *)st;
}

static void many_waiters(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_scalar(g, "x", 0);
  call1(g, gate_op, x);
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  pthread_t th[4];
  for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, wait_thread, run), 0);
  nap_us(2000);
  atomic_store(&gt.open, 1);
  for (int i = 0; i < 4; i++) {
    void *st;
    pthread_join(th[i], &st);
    assert_int_equal((intptr_t)st, WEFT_OK);
  }
  weft_run_destroy(run);
}

/* "gated_boom": waits at the gate, then fails (its message describes the node, naming the
 * tensor it writes). */
static int gated_boom_kernel(weft_kernel_ctx *ctx) {
  int rc = gate_kernel(ctx);
  return rc != WEFT_OK ? rc : weft_ctx_fail(ctx, "after the gate");
}

/* While a run is in flight its failure is described on a worker: the names it reads are the
 * ones the launching thread may ask for at the same moment (a default name is made on
 * demand), and that must be safe. */
static void names_read_while_a_failure_is_described(void **state) {
  tu_fixture *f = *state;
  const weft_op *gb = tu_op(f->rt, "gated_boom", 1, (weft_access[]){WEFT_WRITE}, gated_boom_kernel, &gt);
  for (int i = 0; i < 20; i++) {
    weft_graph *g;
    CHECK(weft_graph_create(f->rt, &g));
    weft_tensor *x = tu_tensor(g, NULL, WEFT_F64, 0, NULL, weft_zeros());
    CHECK(weft_call(g, gb, &x, 1, NULL, 0));
    atomic_store(&gt.open, 0);
    atomic_store(&gt.arrived, 0);
    weft_run *run;
    CHECK(weft_graph_launch(g, &run));
    assert_true(wait_arrivals(&gt, 1));
    atomic_store(&gt.open, 1);
    char buf[200];
    assert_string_equal(weft_tensor_name(x), "t0");
    weft_node_describe(weft_graph_node(g, 0), buf, sizeof buf);
    assert_string_equal(buf, "node 0 'gated_boom' (t0) on cpu");
    assert_int_equal(weft_run_wait(run), WEFT_EKERNEL);
    assert_true(tu_contains(weft_run_error(run), "node 0 'gated_boom' (t0) on cpu"));
    weft_run_destroy(run);
    weft_graph_destroy(g);
  }
}

static void *open_later(void *arg) {
  nap_us(20000);
  atomic_store(&((gate *)arg)->open, 1);
  return NULL;
}

/* Destroying a graph whose run is in flight waits for the run; the run handle stays valid. */
static void destroy_waits_for_the_run(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_scalar(g, "x", 0);
  call1(g, gate_op, x);
  call1(g, inc_op, x);
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  assert_true(wait_arrivals(&gt, 1));
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, open_later, &gt), 0);
  weft_graph_destroy(g);
  f->g = NULL;
  assert_int_equal(atomic_load(&inc_calls), 1); /* the run finished before the graph went */
  CHECK(weft_run_wait(run));
  weft_run_destroy(run);
  pthread_join(th, NULL);
}

/* Adds 1 to its read-write f64 scalar (its other arguments are only read); fails instead when
 * its parameter, an int, is `flaky_at` (-1: none). */
static atomic_int flaky_at = -1;
static int step_kernel(weft_kernel_ctx *ctx) {
  const int *index = weft_ctx_params(ctx, NULL);
  if (*index == atomic_load(&flaky_at)) return weft_ctx_fail(ctx, "flaky");
  *(double *)weft_ctx_data(ctx, 0) += 1;
  return WEFT_OK;
}

/* Every node re-arms its own counter as it is taken, and a plan's build arms them all (in tiles
 * on a large graph with 4 workers: build.c), so a launch resets none: runs of a stencil of
 * 6400 nodes each add exactly one a step to every column — the first, the ones after it, and
 * the one after a failed run, whose skipped nodes leave no poison behind. With 1 worker and
 * with 4. (Fails with the counters not armed at build, not re-armed when taken, or the poison
 * left set.) */
static void runs_rearm_every_counter(void **state) {
  (void)state;
  enum { W = 8, S = 800 };
  for (int workers = 1; workers <= 4; workers += 3) {
    weft_runtime *rt = tu_runtime_cpu(workers);
    const weft_op *op = tu_op(rt, "step", 3, (weft_access[]){WEFT_READ_WRITE, WEFT_READ, WEFT_READ}, step_kernel, NULL);
    weft_graph *g = tu_graph(rt);
    weft_tensor *col[W];
    for (int c = 0; c < W; c++) col[c] = tu_scalar(g, NULL, 0);
    for (int s = 0; s < S; s++)
      for (int c = 0; c < W; c++) {
        weft_tensor *args[3] = {col[c], col[(c + 1) % W], col[(c + W - 1) % W]};
        int index = s * W + c;
        CHECK(weft_call(g, op, args, 3, &index, sizeof index));
      }
    for (int run = 1; run <= 4; run++) {
      double before[W];
      for (int c = 0; c < W; c++) before[c] = tu_value(col[c]);
      atomic_store(&flaky_at, run == 2 ? 10 * W : -1); /* step 10, column 0 */
      int rc = weft_graph_run(g);
      if (run == 2) {
        assert_int_equal(rc, WEFT_EKERNEL);
        assert_true(tu_value(col[0]) - before[0] == 10); /* its steps before the failure ran */
        continue;
      }
      CHECK(rc);
      for (int c = 0; c < W; c++) assert_true(tu_value(col[c]) - before[c] == S);
    }
    atomic_store(&flaky_at, -1);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
}

static int write_one(weft_kernel_ctx *ctx) {
  *(float *)weft_ctx_data(ctx, 0) = 1.0f;
  return WEFT_OK;
}

/* 3000 host tensors at one launch, most small (the workers make those in tiles: storage.c,
 * small_in_parallel), of both dtypes and sizes across the small limit, with every kind of
 * initialiser, a tiled one among them: with 4 workers each holds what it holds with 1 (the
 * one-by-one loop), bit for bit, small ones aligned as the arena aligns them (16 bytes up to
 * 32, 64 above), and the launch's setup counts them all; and a second batch made at a second
 * launch of the same graph too. */
static void many_small_tensors_made_alike(void **state) {
  (void)state;
  enum { N = 3000 };
  unsigned char *vals[2];
  size_t total = 0;
  for (int w = 0; w < 2; w++) {
    weft_runtime *rt = tu_runtime_cpu(w == 0 ? 1 : 4);
    const weft_op *op = tu_op(rt, "write_one", 1, (weft_access[]){WEFT_WRITE}, write_one, NULL);
    weft_graph *g = tu_graph(rt);
    weft_tensor *t[2 * N];
    for (int batch = 0; batch < 2; batch++) {
      for (int i = batch * N; i < (batch + 1) * N; i++) {
        int64_t numel = 1 + (i * 7) % 70;
        weft_dtype dt = i % 3 == 0 ? WEFT_F64 : WEFT_F32;
        weft_init init = i % 4 == 0 ? weft_zeros() : i % 4 == 1 ? weft_full(i) : i % 4 == 2 ? weft_uniform(-1, 1, (uint64_t)i) : weft_normal(0, 1, (uint64_t)i);
        if (i == 100) {
          CHECK(weft_tensor_create(g, NULL, WEFT_F32, 2, (int64_t[]){8, 8}, weft_cpu(), weft_eye(2), &t[i]));
          CHECK(weft_tensor_tiles(g, t[i], 4, 4));
        } else {
          CHECK(weft_tensor_create(g, NULL, dt, 1, &numel, weft_cpu(), init, &t[i]));
        }
      }
      CHECK(weft_call(g, op, &t[batch * N + 1], 1, NULL, 0));
      /* The launch's setup counts every tensor it made (not the tiles: views), with its bytes,
       * as the one-by-one loop counts them. */
      weft_run *run;
      CHECK(weft_graph_launch(g, &run));
      CHECK(weft_run_wait(run));
      weft_run_stats *st;
      CHECK(weft_run_stats_create(run, &st));
      const weft_setup_step *steps;
      size_t nsteps = weft_run_stats_setup(st, &steps), made = 0, made_bytes = 0, want_bytes = 0;
      for (size_t k = 0; k < nsteps; k++)
        if (strcmp(steps[k].kind, "tensor") == 0) {
          made += steps[k].count;
          made_bytes += steps[k].bytes;
        }
      for (int i = batch * N; i < (batch + 1) * N; i++) want_bytes += weft_tensor_bytes(t[i]);
      assert_int_equal(made, N);
      assert_int_equal(made_bytes, want_bytes);
      weft_run_stats_destroy(st);
      weft_run_destroy(run);
    }
    size_t nt = weft_graph_tensor_count(g), at = 0;
    if (w == 0) {
      for (size_t i = 0; i < nt; i++) total += weft_tensor_bytes(weft_graph_tensor(g, i));
    } else {
      assert_int_equal(nt, weft_graph_tensor_count(g)); /* same graph shape */
    }
    vals[w] = malloc(total);
    for (size_t i = 0; i < nt; i++) {
      weft_tensor *x = weft_graph_tensor(g, i);
      size_t b = weft_tensor_bytes(x);
      if (x->view == NULL && b <= 256) assert_int_equal((uintptr_t)x->data % (b <= 32 ? 16 : 64), 0);
      CHECK(weft_tensor_read(x, vals[w] + at, b));
      at += b;
    }
    assert_int_equal(at, total);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  assert_memory_equal(vals[0], vals[1], total);
  free(vals[0]);
  free(vals[1]);
}

static int write_first(weft_kernel_ctx *ctx) {
  *(float *)weft_ctx_data(ctx, 0) = 2.0f;
  return WEFT_OK;
}

/* The first launch of a graph large enough for the workers' passes (the plan's CSR, 4096 edges
 * or more; the small tensors, 2048 or more), with each of its allocations failing in turn:
 * WEFT_ENOMEM, nothing leaked, and the launch after it runs the graph whole. */
static void large_first_launch_survives_every_failed_allocation(void **state) {
  (void)state;
  enum { N = 2500 };
  int failures = 0;
  for (long at = 0;; at++) {
    tu_alloc_install(-1);
    weft_runtime *rt = tu_runtime_cpu(4); /* the workers' passes: from 4 workers */
    const weft_op *op = tu_op(rt, "w_rr", 3, (weft_access[]){WEFT_WRITE, WEFT_READ, WEFT_READ}, write_first, NULL);
    weft_graph *g = tu_graph(rt);
    weft_tensor *t[N];
    for (int i = 0; i < N; i++) t[i] = tu_tensor(g, NULL, WEFT_F32, 1, (int64_t[]){1}, weft_full(1));
    for (int i = 2; i < N; i++) CHECK(weft_call(g, op, (weft_tensor *[]){t[i], t[i / 2], t[i - 1]}, 3, NULL, 0));
    CHECK(weft_graph_analyse(g));
    assert_true(weft_graph_edge_count(g) >= 4096);
    tu_alloc_fail_at(at);
    int rc = weft_graph_run(g);
    int failed = tu_alloc_failed();
    tu_alloc_fail_at(-1);
    if (failed) {
      assert_int_equal(rc, WEFT_ENOMEM);
      failures++;
      CHECK(weft_graph_run(g)); /* memory is back: it runs */
    } else {
      CHECK(rc);
    }
    assert_true(tu_value(t[0]) == 1.0 && tu_value(t[2]) == 2.0 && tu_value(t[N - 1]) == 2.0);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
    long live = tu_alloc_live();
    tu_alloc_uninstall();
    if (live != 0) fail_msg("failing allocation %ld of the first launch leaked %ld blocks", at, live);
    if (!failed) break;
  }
  assert_true(failures > 10);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(runtime_options),
      cmocka_unit_test_setup_teardown(launch_wait_poll, setup, teardown),
      cmocka_unit_test_setup_teardown(empty_graph_runs, setup, teardown),
      cmocka_unit_test_setup_teardown(reruns_keep_contents, setup, teardown),
      cmocka_unit_test_setup_teardown(busy_graph_refuses_launches_and_changes, setup, teardown),
      cmocka_unit_test_setup_teardown(callbacks_called_exactly_once, setup, teardown),
      cmocka_unit_test_setup_teardown(callback_sees_the_failure, setup, teardown),
      cmocka_unit_test_setup_teardown(run_error_and_failed_node, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_skips_what_has_not_started, setup, teardown),
      cmocka_unit_test_setup_teardown(failure_wins_over_cancel, setup, teardown),
      cmocka_unit_test_setup_teardown(independent_nodes_run_at_once, setup, teardown),
      cmocka_unit_test_setup_teardown(several_graphs_at_once, setup, teardown),
      cmocka_unit_test_setup_teardown(concurrent_launches_of_one_graph, setup, teardown),
      cmocka_unit_test_setup_teardown(many_waiters, setup, teardown),
      cmocka_unit_test_setup_teardown(destroy_waits_for_the_run, setup, teardown),
      cmocka_unit_test_setup_teardown(names_read_while_a_failure_is_described, setup, teardown),
      cmocka_unit_test(runs_rearm_every_counter),
      cmocka_unit_test(many_small_tensors_made_alike),
      cmocka_unit_test(large_first_launch_survives_every_failed_allocation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
