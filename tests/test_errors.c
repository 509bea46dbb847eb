/* test_errors.c — failures: a user kernel that fails cancels only the nodes that depend on it,
 * independent nodes finish, weft_run_wait returns the first error naming its node, and the
 * graph runs again cleanly; then the failing allocator of testutil fails every allocation
 * site of a representative program in turn (runtime creation, op registration, graph
 * building, analysis, launch, run, read, a change and a re-plan) and each failure must give a
 * clean error status with a message, correct results where weft absorbed it, and no leak. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Under the sanitizers a failed huge allocation must return NULL, as malloc does, rather than
 * stop the process: that is the behaviour weft's error path is tested against. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }

/* ---- failing kernels ---------------------------------------------------------------------- */

/* "step": out = in + 1 (f64 scalars), and marks its node as run in `ran` (by its parameter). */
static atomic_int ran[4096];

static int step_kernel(weft_kernel_ctx *ctx) {
  const int *id = weft_ctx_params(ctx, NULL);
  atomic_fetch_add(&ran[*id], 1);
  const double *in = weft_ctx_data(ctx, 0);
  double *out = weft_ctx_data(ctx, 1);
  *out = *in + 1;
  return WEFT_OK;
}

/* "fail": fails when its read-write f64 scalar is above zero; how is its parameter. */
enum { FAIL_EKERNEL = 1, FAIL_RAW_STATUS = 2, FAIL_POSITIVE = 3 };
static int fail_kernel(weft_kernel_ctx *ctx) {
  const int *how = weft_ctx_params(ctx, NULL);
  const double *x = weft_ctx_data(ctx, 0);
  if (*x <= 0) return WEFT_OK;
  if (*how == FAIL_RAW_STATUS) return WEFT_ENOMEM; /* a status, no message */
  if (*how == FAIL_POSITIVE) return 2;             /* not a status at all */
  return weft_ctx_fail(ctx, "x is %g, which this kernel refuses", *x);
}

static const weft_op *step_op, *fail_op;

static int setup(void **state) {
  tu_setup(state);
  tu_fixture *f = *state;
  step_op = tu_op(f->rt, "step", 2, (weft_access[]){WEFT_READ, WEFT_WRITE}, step_kernel, NULL);
  fail_op = tu_op(f->rt, "fail", 1, (weft_access[]){WEFT_READ_WRITE}, fail_kernel, NULL);
  for (size_t i = 0; i < sizeof ran / sizeof ran[0]; i++) atomic_store(&ran[i], 0);
  return 0;
}

static void step(tu_fixture *f, weft_tensor *in, weft_tensor *out, int id) {
  weft_tensor *args[2] = {in, out};
  CHECK(weft_call(f->g, step_op, args, 2, &id, sizeof id));
}

static void fail_on(tu_fixture *f, weft_tensor *x, int how) {
  CHECK(weft_call(f->g, fail_op, &x, 1, &how, sizeof how));
}

/*   a --fail(0)--> step(1) -> b --step(2)--> c --+
 *   d --step(3)--> e --step(4)--> h              +--> step(5) reads c and h: cancelled too */
static void failure_cancels_only_its_dependents(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a = tu_scalar(g, "a", 1), *b = tu_scalar(g, "b", 0), *c = tu_scalar(g, "c", 0);
  weft_tensor *d = tu_scalar(g, "d", 10), *e = tu_scalar(g, "e", 0), *h = tu_scalar(g, "h", 0);
  weft_tensor *z = tu_scalar(g, "z", 0);
  fail_on(f, a, FAIL_EKERNEL); /* node 0 */
  step(f, a, b, 1);
  step(f, b, c, 2);
  step(f, d, e, 3);
  step(f, e, h, 4);
  weft_tensor *args[2] = {c, z};
  int id = 5;
  CHECK(weft_call(g, step_op, args, 2, &id, sizeof id));
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 4), weft_graph_node(g, 5)));
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  assert_int_equal(weft_run_wait(run), WEFT_EKERNEL);
  assert_ptr_equal(weft_run_failed_node(run), weft_graph_node(g, 0));
  const char *err = weft_run_error(run);
  assert_true(tu_contains(err, "node 0 'fail' (a) on cpu: kernel failed: x is 1, which this kernel refuses"));
  assert_string_equal(weft_last_error(), err);
  weft_run_destroy(run);
  assert_int_equal(atomic_load(&ran[1]), 0);
  assert_int_equal(atomic_load(&ran[2]), 0);
  assert_int_equal(atomic_load(&ran[5]), 0);
  assert_int_equal(atomic_load(&ran[3]), 1);
  assert_int_equal(atomic_load(&ran[4]), 1);
  assert_true(tu_value(h) == 12.0);
  assert_true(tu_value(b) == 0.0 && tu_value(c) == 0.0 && tu_value(z) == 0.0);
  /* Fix the input: the same graph runs cleanly. */
  double zero = 0;
  CHECK(weft_tensor_write(a, &zero, sizeof zero));
  CHECK(weft_graph_run(g));
  assert_true(tu_value(b) == 1.0 && tu_value(c) == 2.0 && tu_value(z) == 3.0);
  assert_int_equal(atomic_load(&ran[5]), 1);
}

static void status_without_message(void **state) {
  tu_fixture *f = *state;
  weft_tensor *x = tu_scalar(f->g, "x", 5);
  fail_on(f, x, FAIL_RAW_STATUS);
  assert_int_equal(weft_graph_run(f->g), WEFT_ENOMEM);
  assert_true(tu_contains(weft_last_error(), "node 0 'fail' (x) on cpu: out of host memory"));
}

/* A kernel returning a positive value (no weft status is positive; the scheduler keeps them
 * for itself) fails its node, with a message that says so, and the run ends. */
static void kernel_returning_a_positive_value(void **state) {
  tu_fixture *f = *state;
  weft_tensor *x = tu_scalar(f->g, "x", 1);
  fail_on(f, x, FAIL_POSITIVE);
  assert_int_equal(weft_graph_run(f->g), WEFT_EKERNEL);
  assert_true(tu_contains(weft_last_error(), "node 0 'fail' (x) on cpu"));
  assert_true(tu_contains(weft_last_error(), "returned 2, which is not a weft status"));
}

/* Two independent failures: wait reports one of them, and names that one. */
static void first_of_two_failures(void **state) {
  tu_fixture *f = *state;
  weft_tensor *x = tu_scalar(f->g, "x", 1), *y = tu_scalar(f->g, "y", 2);
  fail_on(f, x, FAIL_EKERNEL);
  fail_on(f, y, FAIL_EKERNEL);
  for (int r = 0; r < 20; r++) {
    weft_run *run;
    CHECK(weft_graph_launch(f->g, &run));
    assert_int_equal(weft_run_wait(run), WEFT_EKERNEL);
    weft_node *n = weft_run_failed_node(run);
    assert_non_null(n);
    char want[128];
    snprintf(want, sizeof want, "node %zu 'fail' (%s) on cpu: kernel failed: x is %d,", weft_node_id(n),
             weft_node_id(n) == 0 ? "x" : "y", weft_node_id(n) == 0 ? 1 : 2);
    assert_true(tu_contains(weft_run_error(run), want));
    weft_run_destroy(run);
  }
}

/* A failing root with a thousand dependents and a thousand independent nodes. */
static void wide_failure(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  enum { N = 1000 };
  weft_tensor *root = tu_scalar(g, "root", 1), *ok = tu_scalar(g, "ok", 0);
  fail_on(f, root, FAIL_EKERNEL);
  for (int i = 0; i < N; i++) {
    step(f, root, tu_scalar(g, NULL, 0), 1 + i);
    step(f, ok, tu_scalar(g, NULL, 0), 1 + N + i);
  }
  assert_int_equal(weft_graph_run(g), WEFT_EKERNEL);
  for (int i = 0; i < N; i++) {
    assert_int_equal(atomic_load(&ran[1 + i]), 0);
    assert_int_equal(atomic_load(&ran[1 + N + i]), 1);
  }
}

/* A tensor too large for the host: its storage cannot be made, the launch says so (bytes and
 * name), nothing runs, and a smaller graph still runs on the same runtime afterwards. */
static void tensor_too_large_for_memory(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *small = tu_scalar(g, "small", 1), *huge = NULL, *o = NULL;
  CHECK(weft_tensor_create(g, "huge", WEFT_F64, 2, (int64_t[]){INT64_C(1) << 24, INT64_C(1) << 24},
                           weft_cpu(), weft_zeros(), &huge));
  assert_true(weft_tensor_bytes(huge) == (size_t)1 << 51);
  step(f, small, tu_scalar(g, "out", 0), 0);
  CHECK(weft_relu(g, huge, &o));
  weft_run *run = NULL;
  assert_int_equal(weft_graph_launch(g, &run), WEFT_ENOMEM);
  assert_null(run);
  assert_true(tu_contains(weft_last_error(), "huge"));
  assert_true(tu_contains(weft_last_error(), "2251799813685248 bytes"));
  assert_int_equal(atomic_load(&ran[0]), 0);
  double v;
  assert_int_equal(weft_tensor_get(huge, 0, &v), WEFT_ENOMEM);
  /* The graph is not stuck busy, and the runtime still runs other graphs. */
  assert_int_equal(weft_graph_launch(g, &run), WEFT_ENOMEM);
  weft_graph *g2;
  CHECK(weft_graph_create(f->rt, &g2));
  weft_tensor *x = tu_scalar(g2, "x", 2), *y = NULL;
  CHECK(weft_scale(g2, x, 3, &y));
  CHECK(weft_graph_run(g2));
  assert_true(tu_value(y) == 6.0);
  weft_graph_destroy(g2);
}

/* An allocation that fails inside a node (the scratch buffer of an in-place product) fails
 * that node only: its dependents are cancelled, independent nodes finish. */
static void allocation_failing_in_a_node(void **state) {
  (void)state;
  tu_alloc_install(-1); /* every weft object below comes from the counting allocator */
  weft_runtime *rt = tu_runtime_cpu(2);
  const weft_op *stp = tu_op(rt, "step", 2, (weft_access[]){WEFT_READ, WEFT_WRITE}, step_kernel, NULL);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *a = tu_tensor(g, "a", WEFT_F64, 2, (int64_t[]){40, 40}, weft_uniform(-1, 1, 1));
  weft_tensor *b = tu_tensor(g, "b", WEFT_F64, 2, (int64_t[]){40, 40}, weft_uniform(-1, 1, 2));
  weft_tensor *x = tu_scalar(g, "x", 0), *y = tu_scalar(g, "y", 0), *z = tu_scalar(g, "z", 0);
  weft_tensor *s = NULL;
  CHECK(weft_mm(g, a, b, &a)); /* node 0: in place, needs a scratch buffer */
  CHECK(weft_sum(g, a, &s));   /* node 1: depends on it */
  int ids[2] = {0, 1};
  weft_tensor *args[2] = {x, y};
  CHECK(weft_call(g, stp, args, 2, &ids[0], sizeof ids[0])); /* node 2: independent */
  args[0] = y;
  args[1] = z;
  CHECK(weft_call(g, stp, args, 2, &ids[1], sizeof ids[1])); /* node 3 */
  CHECK(weft_graph_run(g)); /* plans and materialises: later runs allocate little */
  int found = 0;
  for (long at = 0; at < 50 && !found; at++) {
    for (size_t i = 0; i < 2; i++) atomic_store(&ran[i], 0);
    double before;
    CHECK(weft_tensor_get(s, 0, &before));
    tu_alloc_fail_at(at);
    weft_run *run = NULL;
    int rc = weft_graph_launch(g, &run);
    if (rc == WEFT_OK) rc = weft_run_wait(run);
    tu_alloc_fail_at(-1);
    if (rc == WEFT_ENOMEM && run != NULL && weft_run_failed_node(run) == weft_graph_node(g, 0)) {
      found = 1;
      assert_true(tu_contains(weft_run_error(run), "node 0 'mm' (a) on cpu: out of host memory"));
      assert_true(tu_contains(weft_run_error(run), "scratch buffer"));
      assert_int_equal(atomic_load(&ran[0]), 1); /* the independent nodes ran */
      assert_int_equal(atomic_load(&ran[1]), 1);
      double after;
      CHECK(weft_tensor_get(s, 0, &after));
      assert_true(after == before); /* the sum after the failed product did not run */
    } else if (rc != WEFT_OK && rc != WEFT_ENOMEM) {
      fail_msg("allocation %ld: %s", at, weft_last_error());
    }
    weft_run_destroy(run);
  }
  assert_true(found);
  CHECK(weft_graph_run(g)); /* and the next run is whole again */
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  assert_int_equal(tu_alloc_live(), 0);
  tu_alloc_uninstall();
}

/* ---- every allocation site fails in turn -------------------------------------------------- */

static int fx_kernel(weft_kernel_ctx *ctx) {
  double *x = weft_ctx_data(ctx, 0);
  const double *p = weft_ctx_params(ctx, NULL);
  for (int64_t i = 0; i < weft_tensor_numel(weft_ctx_tensor(ctx, 0)); i++) x[i] = x[i] * 0.5 + *p;
  return WEFT_OK;
}

typedef struct outcome {
  int status;       /* the first failing call's status, or WEFT_OK */
  const char *step; /* where it failed */
  char message[512];
  double results[4][64];
} outcome;

#define TRY(what, call)                                                            \
  do {                                                                             \
    int rc_ = (call);                                                              \
    if (rc_ != WEFT_OK) {                                                          \
      o->status = rc_;                                                             \
      o->step = (what);                                                            \
      snprintf(o->message, sizeof o->message, "%s", weft_last_error());            \
      goto out;                                                                    \
    }                                                                              \
  } while (0)

static int read_into(weft_tensor *t, double *out) {
  size_t bytes = weft_tensor_bytes(t);
  return weft_tensor_read(t, out, bytes);
}

static void cb_count(weft_run *run, int status, void *arg) {
  (void)run;
  (void)status;
  atomic_fetch_add((atomic_int *)arg, 1);
}

/* The representative program. Every object it made is destroyed before it returns. */
static void program(outcome *o) {
  weft_runtime *rt = NULL;
  weft_graph *g = NULL;
  weft_run *run = NULL;
  atomic_int cbs = 0;
  int launched = 0;
  memset(o, 0, sizeof *o);
  weft_runtime_options opts;
  weft_runtime_options_init(&opts);
  opts.cpu_workers = 2;
  opts.max_gpus = 0;
  opts.flags = WEFT_RUNTIME_QUIET;
  TRY("runtime create", weft_runtime_create(&opts, &rt));
  weft_op_desc d;
  memset(&d, 0, sizeof d);
  d.name = "fx";
  d.nargs = 1;
  d.access[0] = WEFT_READ_WRITE;
  d.cpu = fx_kernel;
  const weft_op *fx = NULL;
  TRY("op register", weft_op_register(rt, &d, &fx));
  TRY("graph create", weft_graph_create(rt, &g));
  weft_tensor *a, *b, *v, *s, *c = NULL, *e = NULL, *n = NULL, *cp = NULL, *big;
  TRY("tensor a", weft_tensor_create(g, "a", WEFT_F64, 2, (int64_t[]){8, 8}, weft_cpu(), weft_uniform(-1, 1, 1), &a));
  TRY("tensor b", weft_tensor_create(g, "b", WEFT_F64, 2, (int64_t[]){8, 8}, weft_cpu(), weft_normal(0, 1, 2), &b));
  TRY("tensor v", weft_tensor_create(g, "v", WEFT_F64, 1, (int64_t[]){8}, weft_cpu(), weft_full(0.5), &v));
  TRY("tensor s", weft_tensor_create(g, NULL, WEFT_F64, 0, NULL, weft_cpu(), weft_zeros(), &s));
  TRY("tensor big", weft_tensor_create(g, "big", WEFT_F32, 2, (int64_t[]){64, 64}, weft_cpu(), weft_ones(), &big));
  TRY("rename", weft_tensor_set_name(s, "total"));
  TRY("mm", weft_mm(g, a, b, &c));
  weft_tensor_keep(c);
  TRY("mm in place", weft_mm(g, c, b, &c));
  TRY("linear", weft_linear(g, c, b, v, &e));
  TRY("relu", weft_relu(g, e, &e));
  TRY("add", weft_add(g, e, a, &e));
  TRY("sum", weft_sum(g, e, &s));
  TRY("norm", weft_norm(g, e, &n));
  TRY("copy", weft_copy(g, e, weft_cpu(), &cp));
  TRY("scale", weft_scale(g, big, 0.5, &big));
  TRY("fill", weft_fill(g, v, weft_uniform(0, 1, 3)));
  double p = 0.25;
  TRY("call", weft_call(g, fx, &cp, 1, &p, sizeof p));
  TRY("node name", weft_node_set_name(weft_graph_last_node(g), "fx_step"));
  TRY("edge", weft_graph_add_edge(g, weft_graph_node(g, 0), weft_graph_node(g, 8)));
  TRY("analyse", weft_graph_analyse(g));
  TRY("launch", weft_graph_launch_cb(g, cb_count, &cbs, &run));
  launched = 1;
  TRY("wait", weft_run_wait(run));
  weft_run_destroy(run);
  run = NULL;
  TRY("run again", weft_graph_run(g));
  TRY("change", weft_scale(g, cp, 2, &cp));
  TRY("replan and run", weft_graph_run(g));
  TRY("read c", read_into(c, o->results[0]));
  TRY("read cp", read_into(cp, o->results[1]));
  TRY("read total", read_into(s, o->results[2]));
  TRY("read norm", read_into(n, o->results[3]));
  double x;
  TRY("get", weft_tensor_get(big, 4095, &x));
  if (x != 0.125) o->status = 999; /* three runs of scale(0.5) on ones */
out:
  if (run != NULL) weft_run_destroy(run); /* waits */
  if (launched && atomic_load(&cbs) != 1) o->status = 998; /* the callback ran exactly once */
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

static void every_allocation_can_fail(void **state) {
  (void)state;
  outcome ref, got;
  /* The reference, through the counting allocator that never fails. */
  tu_alloc_install(-1);
  program(&ref);
  long total = tu_alloc_calls();
  assert_int_equal(tu_alloc_live(), 0);
  tu_alloc_uninstall();
  if (ref.status != WEFT_OK) fail_msg("the program fails without injected failures: %s: %s", ref.step, ref.message);
  assert_true(total > 20);
  int failures = 0, absorbed = 0;
  for (long at = 0;; at++) {
    tu_alloc_install(at);
    program(&got);
    int triggered = tu_alloc_failed();
    long live = tu_alloc_live();
    tu_alloc_uninstall();
    if (live != 0) fail_msg("allocation %ld failing (in %s) leaked %ld blocks", at, got.step ? got.step : "-", live);
    if (!triggered) break; /* every site has been failed */
    if (got.status == WEFT_OK) {
      /* weft absorbed the failure (a fallback): the results must still be right. */
      absorbed++;
      if (memcmp(got.results, ref.results, sizeof ref.results) != 0)
        fail_msg("allocation %ld failed silently and the results differ", at);
      continue;
    }
    failures++;
    if (got.status > 0 || weft_status_name(got.status)[0] != 'E')
      fail_msg("allocation %ld failing gave status %d in %s", at, got.status, got.step);
    if (got.message[0] == '\0')
      fail_msg("allocation %ld failing gave %s in %s with no message", at, weft_status_name(got.status), got.step);
    if (got.status != WEFT_ENOMEM)
      print_message("allocation %ld: %s in %s: %s\n", at, weft_status_name(got.status), got.step, got.message);
    if (at > total * 4) fail_msg("the sweep does not end");
  }
  print_message("%d allocation sites failed cleanly, %d failures absorbed (of %ld allocations)\n",
                failures, absorbed, total);
  assert_true(failures > 20);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(failure_cancels_only_its_dependents, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(status_without_message, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(kernel_returning_a_positive_value, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(first_of_two_failures, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(wide_failure, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(tensor_too_large_for_memory, setup, tu_teardown),
      cmocka_unit_test(allocation_failing_in_a_node),
      cmocka_unit_test(every_allocation_can_fail),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
