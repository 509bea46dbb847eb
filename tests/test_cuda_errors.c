/* test_cuda_errors.c — errors of the CUDA backend: devices that do not exist, a machine without
 * a visible GPU (the runtime starts on the CPU and says so once), a user kernel that fails
 * (the node is named, dependents are skipped, independent nodes finish), an asynchronous fault
 * inside a kernel reported at the run's wait (exactly at its node under WEFT_LAUNCH_BLOCKING=1;
 * run in a child process, since a fault ends the CUDA context), and launch-blocking runs.
 * WEFT_TEST_SANITIZER=1 (compute-sanitizer runs) leaves out the tests that run a child process
 * (the fault, and the machine without a visible GPU). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_test.h"
#if WEFT_HAVE_CUDA
#include "weft/cuda.h"
#endif

#if WEFT_TEST_FAULT_KERNEL
int weft_test_fault_kernel(weft_kernel_ctx *ctx);
#endif

static const char *self_path;

/* Runs this program again with `arg` and the environment variable `env` (NAME=VALUE or NULL);
 * returns its exit status and its output (stdout and stderr) in out. */
static int run_child(const char *arg, const char *env, char *out, size_t size) {
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    close(fd[0]);
    if (env != NULL) {
      char name[64];
      const char *eq = strchr(env, '=');
      snprintf(name, sizeof name, "%.*s", (int)(eq - env), env);
      setenv(name, eq + 1, 1);
    }
    execl(self_path, self_path, arg, (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  size_t len = 0;
  ssize_t k;
  while (len + 1 < size && (k = read(fd[0], out + len, size - 1 - len)) > 0) len += (size_t)k;
  out[len] = '\0';
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void devices_that_do_not_exist(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  weft_runtime *rt = gt_runtime(1, 0);
  int n = gt_gpus();
  weft_graph *g = tu_graph(rt);
  weft_tensor *h = tu_matrix(g, "h", 4, 4, 1), *o = NULL;
  assert_int_equal(weft_copy(g, h, weft_cuda(n), &o), WEFT_EDEVICE);
  assert_non_null(strstr(weft_last_error(), "cuda:"));
  weft_device d;
  CHECK(weft_device_parse("cuda:1", &d));
  assert_int_equal(d.index, 1);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* Without a visible GPU the runtime starts on the CPU alone and says so once. */
static void no_visible_gpu_means_the_cpu(void **state) {
  (void)state;
  if (gt_under_sanitizer()) skip(); /* a child inherits compute-sanitizer: its output changes */
  char out[4096];
  int rc = run_child("--no-gpu", "CUDA_VISIBLE_DEVICES=", out, sizeof out);
  if (rc != 0) fail_msg("child exited %d: %s", rc, out);
  assert_non_null(strstr(out, "no CUDA GPU found"));
  assert_non_null(strstr(out, "gpus=0 cpu_result=ok"));
  const char *first = strstr(out, "no CUDA GPU found");
  assert_null(strstr(first + 1, "no CUDA GPU found")); /* once */
}

static int child_no_gpu(void) {
  weft_runtime *a = NULL, *b = NULL;
  if (weft_runtime_create(NULL, &a) != WEFT_OK || weft_runtime_create(NULL, &b) != WEFT_OK) return 2;
  weft_graph *g;
  if (weft_graph_create(a, &g) != WEFT_OK) return 3;
  weft_device dev = weft_try_gpu(a, 0);
  weft_tensor *x, *y = NULL;
  if (weft_tensor_create(g, "x", WEFT_F32, 1, (int64_t[]){8}, dev, weft_full(3), &x) != WEFT_OK ||
      weft_scale(g, x, 2, &y) != WEFT_OK || weft_graph_run(g) != WEFT_OK)
    return 4;
  double v = 0;
  if (weft_tensor_get(y, 3, &v) != WEFT_OK) return 5;
  printf("gpus=%d cpu_result=%s\n", weft_device_count(a, WEFT_DEVICE_CUDA), v == 6.0 ? "ok" : "wrong");
  weft_graph_destroy(g);
  weft_runtime_destroy(a);
  weft_runtime_destroy(b);
  return 0;
}

#if WEFT_HAVE_CUDA
static int failing_kernel(weft_kernel_ctx *ctx) { return weft_ctx_fail(ctx, "boom at element %d", 42); }

/* The op "fails": one argument, read and written on a CUDA device, whose kernel fails. */
static const weft_op *register_failing(weft_runtime *rt) {
  return gt_op(rt, "fails", WEFT_READ_WRITE, NULL, failing_kernel);
}
#endif

static void a_failing_kernel_names_its_node(void **state) {
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  tu_fixture *f = *state;
  const weft_op *op = register_failing(f->rt);
  weft_tensor *a, *b, *after = NULL, *indep = NULL;
  CHECK(weft_tensor_create(f->g, "a", WEFT_F32, 1, (int64_t[]){64}, weft_cuda(0), weft_ones(), &a));
  CHECK(weft_tensor_create(f->g, "b", WEFT_F32, 1, (int64_t[]){64}, weft_cuda(0), weft_ones(), &b));
  CHECK(weft_call(f->g, op, &a, 1, NULL, 0));
  weft_node *bad = weft_graph_last_node(f->g);
  CHECK(weft_scale(f->g, a, 2, &after)); /* depends on the failure: skipped */
  CHECK(weft_scale(f->g, b, 5, &indep)); /* independent: runs */
  weft_run *r;
  CHECK(weft_graph_launch(f->g, &r));
  assert_int_equal(weft_run_wait(r), WEFT_EKERNEL);
  assert_ptr_equal(weft_run_failed_node(r), bad);
  assert_non_null(strstr(weft_run_error(r), "boom at element 42"));
  assert_non_null(strstr(weft_run_error(r), "cuda:0"));
  assert_non_null(strstr(weft_run_error(r), "fails"));
  weft_run_destroy(r);
  double v;
  CHECK(weft_tensor_get(indep, 0, &v));
  assert_true(v == 5.0);
#endif
}

/* A node with a turn on its stream (src/sched/plan/sync.c, "Turns") that a failure upstream skips gives
 * its turn up: the copies to the host after it in program order still run, and the run ends
 * (it would wait forever for the skipped copy otherwise). A cancelled run likewise. */
static void a_skipped_copy_gives_up_its_turn(void **state) {
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  tu_fixture *f = *state;
  const weft_op *op = register_failing(f->rt);
  weft_tensor *a, *ha = NULL;
  CHECK(weft_tensor_create(f->g, "a", WEFT_F32, 1, (int64_t[]){64}, weft_cuda(0), weft_ones(), &a));
  CHECK(weft_call(f->g, op, &a, 1, NULL, 0));
  CHECK(weft_copy(f->g, a, weft_cpu(), &ha)); /* the first turn of the copy stream: skipped */
  enum { K = 4 };
  weft_tensor *b[K], *h[K];
  for (int k = 0; k < K; k++) {
    h[k] = NULL;
    CHECK(weft_tensor_create(f->g, "b", WEFT_F32, 1, (int64_t[]){64}, weft_cuda(0), weft_full(k + 1), &b[k]));
    CHECK(weft_copy(f->g, b[k], weft_cpu(), &h[k]));
  }
  for (int r = 0; r < 2; r++) {
    weft_run *run;
    CHECK(weft_graph_launch(f->g, &run));
    assert_int_equal(weft_run_wait(run), WEFT_EKERNEL);
    weft_run_destroy(run);
    for (int k = 0; k < K; k++) {
      double v = 0;
      CHECK(weft_tensor_get(h[k], 5, &v));
      assert_true(v == k + 1.0);
    }
  }
  /* Cancelled before it starts: every node is skipped, and the run still ends. */
  weft_graph *g2 = tu_graph(f->rt);
  weft_tensor *c, *hc = NULL;
  CHECK(weft_tensor_create(g2, "c", WEFT_F32, 1, (int64_t[]){64}, weft_cuda(0), weft_ones(), &c));
  for (int k = 0; k < K; k++) {
    hc = NULL;
    CHECK(weft_copy(g2, c, weft_cpu(), &hc));
  }
  CHECK(weft_graph_run(g2)); /* materialised, planned */
  weft_run *run;
  CHECK(weft_graph_launch(g2, &run));
  weft_run_cancel(run);
  int st = weft_run_wait(run);
  assert_true(st == WEFT_OK || st == WEFT_ECANCELED);
  weft_run_destroy(run);
  weft_graph_destroy(g2);
#endif
}

/* In the child: a graph whose third node faults. Prints what the run reported. */
static int child_fault(void) {
#if WEFT_TEST_FAULT_KERNEL
  weft_runtime *rt;
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.flags |= WEFT_RUNTIME_QUIET;
  if (weft_runtime_create(&o, &rt) != WEFT_OK) return 2;
  weft_op_desc desc =
      tu_op_desc("fault", 1, (weft_access[]){WEFT_READ_WRITE}, NULL, weft_test_fault_kernel, NULL);
  const weft_op *op;
  weft_graph *g;
  if (weft_op_register(rt, &desc, &op) != WEFT_OK || weft_graph_create(rt, &g) != WEFT_OK) return 3;
  weft_tensor *a, *p = NULL, *q = NULL;
  if (weft_tensor_create(g, "a", WEFT_F32, 2, (int64_t[]){256, 256}, weft_cuda(0), weft_ones(), &a) != WEFT_OK ||
      weft_mm(g, a, a, &p) != WEFT_OK || weft_scale(g, p, 2, &p) != WEFT_OK || weft_call(g, op, &p, 1, NULL, 0) != WEFT_OK ||
      weft_scale(g, p, 3, &q) != WEFT_OK)
    return 4;
  weft_run *r;
  if (weft_graph_launch(g, &r) != WEFT_OK) return 5;
  int st = weft_run_wait(r);
  weft_node *n = weft_run_failed_node(r);
  printf("status=%s node=%d\nmessage=%s\n", weft_status_name(st), n != NULL ? (int)weft_node_id(n) : -1,
         weft_run_error(r));
  fflush(stdout);
  _exit(0); /* the CUDA context is broken: leave without tearing down */
#else
  return 9;
#endif
}

static void a_kernel_fault_is_reported_at_wait(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
#if WEFT_TEST_FAULT_KERNEL
  if (gt_under_sanitizer()) skip();
  char out[8192];
  /* Exactly at the node under WEFT_LAUNCH_BLOCKING=1. */
  int rc = run_child("--fault", "WEFT_LAUNCH_BLOCKING=1", out, sizeof out);
  if (rc != 0) fail_msg("child exited %d: %s", rc, out);
  if (strstr(out, "status=ECUDA node=2") == NULL) fail_msg("launch-blocking fault report: %s", out);
  assert_non_null(strstr(out, "cudaErrorIllegalAddress"));
  assert_non_null(strstr(out, "'fault'"));
  /* Without it, at the run's wait, with a node and the advice. */
  rc = run_child("--fault", "WEFT_LAUNCH_BLOCKING=0", out, sizeof out);
  if (rc != 0) fail_msg("child exited %d: %s", rc, out);
  if (strstr(out, "status=ECUDA") == NULL || strstr(out, "node=-1") != NULL) fail_msg("fault report: %s", out);
  assert_non_null(strstr(out, "WEFT_LAUNCH_BLOCKING=1"));
#endif
}

static void launch_blocking_runs_are_correct(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  weft_runtime *rt = gt_runtime(2, WEFT_RUNTIME_LAUNCH_BLOCKING);
  weft_graph *g = tu_graph(rt);
  weft_tensor *h = tu_matrix(g, "h", 32, 32, 9), *d = NULL, *back = NULL, *s = NULL;
  CHECK(weft_copy(g, h, weft_cuda(0), &d));
  CHECK(weft_mm(g, d, d, &d));
  CHECK(weft_sum(g, d, &s));
  CHECK(weft_copy(g, d, weft_cpu(), &back));
  CHECK(weft_graph_run(g));
  CHECK(weft_graph_run(g));
  float *hv = gt_read(h), *bv = gt_read(back);
  double want = 0;
  for (int k = 0; k < 32; k++) want += (double)hv[k] * hv[k * 32];
  assert_true(fabs(bv[0] - want) < 1e-4);
  free(hv);
  free(bv);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

int main(int argc, char **argv) {
  self_path = argv[0];
  if (argc > 1 && strcmp(argv[1], "--no-gpu") == 0) return child_no_gpu();
  if (argc > 1 && strcmp(argv[1], "--fault") == 0) return child_fault();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(devices_that_do_not_exist),
      cmocka_unit_test(no_visible_gpu_means_the_cpu),
      cmocka_unit_test_setup_teardown(a_failing_kernel_names_its_node, gt_setup, gt_teardown),
      cmocka_unit_test_setup_teardown(a_skipped_copy_gives_up_its_turn, gt_setup, gt_teardown),
      cmocka_unit_test(a_kernel_fault_is_reported_at_wait),
      cmocka_unit_test(launch_blocking_runs_are_correct),
  };
  return GT_RUN(tests);
}
