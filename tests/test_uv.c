/* test_uv.c — the libuv adapter (weft/uv.h): completion on the loop's thread, a loop that is
 * never blocked by a run, libuv's rule that a failed launch never calls back, cancellation,
 * relaunch and graph destruction from the callback, many runs at once, and clean closing. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "weft/uv.h"

typedef struct cb_state {
  int calls;
  int status;
  pthread_t thread;
  char error[256];
  const weft_node *failed;
  int relaunch; /* launches left to make from the callback */
  weft_graph *destroy; /* destroyed in the callback when not NULL */
  uv_loop_t *loop;
} cb_state;

static void on_done(weft_run *run, int status, void *arg) {
  cb_state *s = arg;
  s->calls++;
  s->status = status;
  s->thread = pthread_self();
  snprintf(s->error, sizeof s->error, "%s", weft_run_error(run));
  s->failed = weft_run_failed_node(run);
  if (s->relaunch > 0) {
    s->relaunch--;
    CHECK(weft_uv_launch(s->loop, weft_run_graph(run), on_done, s, NULL));
  }
  if (s->destroy != NULL) {
    weft_graph_destroy(s->destroy);
    s->destroy = NULL;
  }
}

static void close_loop(uv_loop_t *loop) {
  /* Every handle the adapter made is closed: the loop has nothing left and closes. */
  assert_int_equal(uv_run(loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(uv_loop_close(loop), 0);
}

/* x = ones(n); y = 3 x; s = sum(y): s == 3n. */
static weft_graph *small_graph(weft_runtime *rt, int64_t n, weft_tensor **sum) {
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = tu_tensor(g, "x", WEFT_F64, 1, (int64_t[]){n}, weft_ones()), *y = NULL;
  CHECK(weft_scale(g, x, 3.0, &y));
  *sum = NULL;
  CHECK(weft_sum(g, y, sum));
  return g;
}

static void test_completion_on_loop_thread(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  weft_tensor *sum;
  weft_graph *g = small_graph(rt, 1000, &sum);
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  cb_state s = {0};
  weft_run *run = NULL;
  CHECK(weft_uv_launch(&loop, g, on_done, &s, &run));
  assert_non_null(run);
  assert_int_equal(s.calls, 0); /* never called from inside the launch */
  close_loop(&loop);
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.status, WEFT_OK);
  assert_true(pthread_equal(s.thread, pthread_self()));
  double v;
  CHECK(weft_tensor_get(sum, 0, &v));
  assert_true(v == 3000.0);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* A user op that holds its worker until the gate opens: the run cannot end before the loop
 * has run a timer, so a completed run proves the loop was free while the graph ran. */
static atomic_int gate;
static int gate_kernel(weft_kernel_ctx *ctx) {
  (void)ctx;
  struct timespec ts = {0, 1000000};
  for (int i = 0; i < 10000 && !atomic_load(&gate); i++) nanosleep(&ts, NULL);
  return atomic_load(&gate) ? WEFT_OK : weft_ctx_fail(ctx, "the gate never opened");
}

/* A graph of one gate node (op registered on rt once), the gate closed. */
static weft_graph *gate_graph(weft_runtime *rt) {
  const weft_op *op = weft_op_find(rt, "gate");
  if (op == NULL) op = tu_op(rt, "gate", 0, NULL, gate_kernel, NULL);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  CHECK(weft_call(g, op, NULL, 0, NULL, 0));
  atomic_store(&gate, 0);
  return g;
}

typedef struct ticker {
  int ticks;
  cb_state *done;
  int ticks_at_done;
} ticker;

static void on_tick(uv_timer_t *t) {
  ticker *k = t->data;
  k->ticks++;
  if (k->ticks == 3) atomic_store(&gate, 1);
  if (k->done->calls > 0) {
    k->ticks_at_done = k->ticks;
    uv_close((uv_handle_t *)t, NULL);
  }
}

static void test_loop_not_blocked(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  weft_graph *g = gate_graph(rt);
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  cb_state s = {0};
  ticker k = {.done = &s};
  uv_timer_t timer;
  uv_timer_init(&loop, &timer);
  timer.data = &k;
  uv_timer_start(&timer, on_tick, 2, 2);
  CHECK(weft_uv_launch(&loop, g, on_done, &s, NULL));
  close_loop(&loop);
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.status, WEFT_OK);
  assert_true(k.ticks >= 3); /* the timer ran while the node waited for it */
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

static void test_failed_launch_never_calls_back(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  weft_graph *g = gate_graph(rt);
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  cb_state first = {0}, second = {0}, bad = {0};
  CHECK(weft_uv_launch(&loop, g, on_done, &first, NULL));
  /* The graph is in flight: a second launch fails with EBUSY and must never call back. */
  weft_run *run = (weft_run *)&second; /* must be reset to NULL on failure */
  assert_int_equal(weft_uv_launch(&loop, g, on_done, &second, &run), WEFT_EBUSY);
  assert_null(run);
  assert_int_equal(weft_uv_launch(NULL, g, on_done, &bad, NULL), WEFT_EINVAL);
  assert_int_equal(weft_uv_launch(&loop, NULL, on_done, &bad, NULL), WEFT_EINVAL);
  atomic_store(&gate, 1);
  close_loop(&loop);
  assert_int_equal(first.calls, 1);
  assert_int_equal(second.calls, 0);
  assert_int_equal(bad.calls, 0);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

static int fail_kernel(weft_kernel_ctx *ctx) { return weft_ctx_fail(ctx, "broken on purpose"); }

static void test_node_failure_reported(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  weft_access rw[1] = {WEFT_READ_WRITE};
  const weft_op *op = tu_op(rt, "broken", 1, rw, fail_kernel, NULL);
  weft_tensor *sum;
  weft_graph *g = small_graph(rt, 10, &sum);
  weft_tensor *t = tu_tensor(g, "t", WEFT_F32, 1, (int64_t[]){4}, weft_zeros());
  CHECK(weft_call(g, op, &t, 1, NULL, 0));
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  cb_state s = {0};
  CHECK(weft_uv_launch(&loop, g, on_done, &s, NULL));
  close_loop(&loop);
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.status, WEFT_EKERNEL);
  assert_true(tu_contains(s.error, "broken on purpose"));
  assert_non_null(s.failed);
  assert_string_equal(weft_node_op_name(s.failed), "broken");
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

static void on_cancel_timer(uv_timer_t *t) {
  weft_run_cancel(t->data);
  atomic_store(&gate, 1);
  uv_close((uv_handle_t *)t, NULL);
}

static void test_cancel(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  /* A chain: the gate, then a node that waits for it; cancelling while the gate holds skips
   * the rest. */
  weft_graph *g = gate_graph(rt);
  weft_tensor *x = tu_tensor(g, "x", WEFT_F32, 1, (int64_t[]){8}, weft_ones());
  weft_node *first = weft_graph_last_node(g);
  CHECK(weft_scale(g, x, 2.0, &x));
  CHECK(weft_graph_add_edge(g, first, weft_graph_last_node(g)));
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  cb_state s = {0};
  weft_run *run = NULL;
  CHECK(weft_uv_launch(&loop, g, on_done, &s, &run));
  uv_timer_t timer;
  uv_timer_init(&loop, &timer);
  timer.data = run;
  uv_timer_start(&timer, on_cancel_timer, 5, 0);
  close_loop(&loop);
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.status, WEFT_ECANCELED);
  double v;
  CHECK(weft_tensor_get(x, 0, &v));
  assert_true(v == 1.0); /* the scale never ran */
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

static void test_relaunch_and_destroy_in_callback(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = tu_tensor(g, "x", WEFT_F64, 1, (int64_t[]){16}, weft_ones());
  CHECK(weft_scale(g, x, 2.0, &x)); /* in place: doubles every run */
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  cb_state s = {.relaunch = 9, .loop = &loop};
  CHECK(weft_uv_launch(&loop, g, on_done, &s, NULL));
  close_loop(&loop);
  assert_int_equal(s.calls, 10);
  assert_int_equal(s.status, WEFT_OK);
  double v;
  CHECK(weft_tensor_get(x, 15, &v));
  assert_true(v == 1024.0);
  /* The callback may destroy the graph it ran. */
  assert_int_equal(uv_loop_init(&loop), 0);
  cb_state d = {.destroy = g};
  CHECK(weft_uv_launch(&loop, g, on_done, &d, NULL));
  close_loop(&loop);
  assert_int_equal(d.calls, 1);
  assert_null(d.destroy);
  weft_runtime_destroy(rt);
}

static void test_many_at_once(void **state) {
  (void)state;
  enum { N = 24 };
  weft_runtime *rt = tu_runtime_cpu(0);
  weft_graph *g[N];
  weft_tensor *sum[N];
  cb_state s[N];
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  memset(s, 0, sizeof s);
  for (int i = 0; i < N; i++) {
    g[i] = small_graph(rt, 1000 + i, &sum[i]);
    CHECK(weft_uv_launch(&loop, g[i], on_done, &s[i], NULL));
  }
  close_loop(&loop);
  for (int i = 0; i < N; i++) {
    assert_int_equal(s[i].calls, 1);
    assert_int_equal(s[i].status, WEFT_OK);
    double v;
    CHECK(weft_tensor_get(sum[i], 0, &v));
    assert_true(v == 3.0 * (1000 + i));
    weft_graph_destroy(g[i]);
  }
  weft_runtime_destroy(rt);
}

static void test_empty_graph(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(1);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  cb_state s = {0};
  /* An empty graph finishes inside the launch, on this thread: the callback still comes
   * from the loop, later. */
  CHECK(weft_uv_launch(&loop, g, on_done, &s, NULL));
  assert_int_equal(s.calls, 0);
  close_loop(&loop);
  assert_int_equal(s.calls, 1);
  assert_int_equal(s.status, WEFT_OK);
  assert_int_equal(uv_loop_init(&loop), 0);
  CHECK(weft_uv_launch(&loop, g, NULL, NULL, NULL)); /* no callback at all */
  close_loop(&loop);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* Every allocation weft makes during a launch fails in turn: the launch reports it, the
 * callback is never called, nothing leaks and the loop still closes. */
static void test_launch_out_of_memory(void **state) {
  (void)state;
  int launch_failures = 0;
  for (long fail_at = 0;; fail_at++) {
    tu_alloc_install(fail_at);
    weft_runtime_options o;
    weft_runtime_options_init(&o);
    o.cpu_workers = 1;
    o.max_gpus = 0;
    o.flags |= WEFT_RUNTIME_QUIET;
    weft_runtime *rt = NULL;
    weft_graph *g = NULL;
    int rc = weft_runtime_create(&o, &rt);
    weft_tensor *x = NULL, *y = NULL;
    if (rc == WEFT_OK) rc = weft_graph_create(rt, &g);
    if (rc == WEFT_OK)
      rc = weft_tensor_create(g, "x", WEFT_F32, 1, (int64_t[]){64}, weft_cpu(), weft_ones(), &x);
    if (rc == WEFT_OK) rc = weft_scale(g, x, 2.0, &y);
    cb_state s = {0};
    int launched = 0;
    if (rc == WEFT_OK) {
      uv_loop_t loop;
      assert_int_equal(uv_loop_init(&loop), 0);
      rc = weft_uv_launch(&loop, g, on_done, &s, NULL);
      launched = rc == WEFT_OK;
      close_loop(&loop);
      assert_int_equal(s.calls, launched);
      if (!launched) {
        assert_int_equal(rc, WEFT_ENOMEM);
        launch_failures++;
      }
    }
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
    int failed = tu_alloc_failed();
    assert_int_equal(tu_alloc_live(), 0);
    tu_alloc_uninstall();
    if (!failed) {
      assert_true(launched);
      assert_int_equal(s.status, WEFT_OK);
      break;
    }
  }
  assert_true(launch_failures > 0); /* the sweep reached the launch itself */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_completion_on_loop_thread),
      cmocka_unit_test(test_loop_not_blocked),
      cmocka_unit_test(test_failed_launch_never_calls_back),
      cmocka_unit_test(test_node_failure_reported),
      cmocka_unit_test(test_cancel),
      cmocka_unit_test(test_relaunch_and_destroy_in_callback),
      cmocka_unit_test(test_many_at_once),
      cmocka_unit_test(test_empty_graph),
      cmocka_unit_test(test_launch_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
