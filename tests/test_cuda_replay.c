/* test_cuda_replay.c — replay: an unchanged all-GPU graph is captured at its second run and
 * replayed from then on, with the same results as eager runs (state carried from run to run,
 * temporaries, several streams, copies to pinned host memory); graphs with CPU nodes or user
 * ops, or with replay switched off, stay eager; a changed graph is captured afresh. */
#include <math.h>
#include <stdlib.h>

#include "gpu_test.h"
#if WEFT_HAVE_CUDA
#include "weft/cuda.h"
#endif

#if WEFT_HAVE_CUDA
/* x <- relu(x . w) * 0.5 + x, on `dev`, in a few chains; the norm of x copied to the host. */
static void build_step(weft_graph *g, weft_device dev, weft_tensor **x_out, weft_tensor **host_norm) {
  weft_tensor *x, *w;
  CHECK(weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){96, 96}, dev, weft_uniform(-1, 1, 1), &x));
  CHECK(weft_tensor_create(g, "w", WEFT_F32, 2, (int64_t[]){96, 96}, dev, weft_uniform(-0.1, 0.1, 2), &w));
  weft_tensor *p = NULL, *r = NULL, *s = NULL, *n = NULL, *q = NULL;
  CHECK(weft_mm(g, x, w, &p));
  CHECK(weft_relu(g, p, &r));
  CHECK(weft_scale(g, r, 0.5, &s));
  CHECK(weft_mm(g, w, w, &q)); /* an independent branch */
  weft_tensor *x2 = x;
  CHECK(weft_add(g, s, x, &x2)); /* x updated in place: state carried to the next run */
  CHECK(weft_norm(g, q, &n));
  weft_tensor *nx = NULL;
  CHECK(weft_norm(g, x, &nx));
  *host_norm = NULL;
  CHECK(weft_copy(g, nx, weft_cpu(), host_norm));
  *x_out = x;
}
#endif

static void second_run_is_captured_and_replayed(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  weft_runtime *gpu = gt_runtime(2, 0), *cpu = tu_runtime_cpu(1);
  weft_graph *g = tu_graph(gpu), *gc = tu_graph(cpu);
  weft_tensor *x, *hn, *xc, *hnc;
  build_step(g, weft_cuda(0), &x, &hn);
  build_step(gc, weft_cpu(), &xc, &hnc);
  for (int r = 0; r < 5; r++) {
    CHECK(weft_graph_run(g));
    CHECK(weft_graph_run(gc));
    double a, b;
    CHECK(weft_tensor_get(hn, 0, &a));
    CHECK(weft_tensor_get(hnc, 0, &b));
    if (fabs(a - b) > 1e-4 * fabs(b)) fail_msg("run %d: norm %g on the GPU, %g on the CPU", r, a, b);
  }
  float *xa = gt_read(x), *xb = gt_read(xc);
  assert_true(gt_rel_err(xa, xb, 96 * 96, WEFT_F32) < 1e-4);
  free(xa);
  free(xb);
  weft_cuda_run_stats s = gt_run_stats(gpu);
  assert_int_equal(s.eager_runs, 1);
  assert_int_equal(s.captures, 1);
  assert_int_equal(s.replays, 4);
  assert_int_equal(s.capture_failures, 0);
  /* A changed graph is planned and captured afresh. */
  weft_tensor *extra = NULL;
  CHECK(weft_scale(g, x, 1.0, &extra));
  CHECK(weft_graph_run(g));
  CHECK(weft_graph_run(g));
  CHECK(weft_graph_run(g));
  s = gt_run_stats(gpu);
  assert_int_equal(s.eager_runs, 2);
  assert_int_equal(s.captures, 2);
  assert_int_equal(s.replays, 6);
  weft_graph_destroy(g);
  weft_graph_destroy(gc);
  weft_runtime_destroy(gpu);
  weft_runtime_destroy(cpu);
#endif
}

/* Replayed and eager runs give the same bits (the same kernels on the same streams). */
static void replay_matches_eager_bit_for_bit(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  float *res[2];
  for (int mode = 0; mode < 2; mode++) {
    weft_runtime *rt = gt_runtime(2, 0);
    weft_cuda_set_replay(rt, mode);
    weft_graph *g = tu_graph(rt);
    weft_tensor *x, *hn;
    build_step(g, weft_cuda(0), &x, &hn);
    for (int r = 0; r < 4; r++) CHECK(weft_graph_run(g));
    res[mode] = gt_read(x);
    assert_int_equal(gt_run_stats(rt).replays, mode ? 3 : 0);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  assert_memory_equal(res[0], res[1], 96 * 96 * sizeof(float));
  free(res[0]);
  free(res[1]);
#endif
}

#if WEFT_HAVE_CUDA
static int noop_cuda(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}
#endif

static void graphs_that_stay_eager(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  weft_runtime *rt = gt_runtime(2, 0);
  /* A CPU node in the graph. */
  weft_graph *g = tu_graph(rt);
  weft_tensor *h = tu_matrix(g, "h", 16, 16, 3), *d = NULL, *back = NULL, *cpu2 = NULL;
  CHECK(weft_copy(g, h, weft_cuda(0), &d));
  CHECK(weft_scale(g, d, 2, &d));
  CHECK(weft_copy(g, d, weft_cpu(), &back));
  CHECK(weft_scale(g, back, 2, &cpu2));
  for (int r = 0; r < 3; r++) CHECK(weft_graph_run(g));
  double v, hv;
  CHECK(weft_tensor_get(cpu2, 17, &v));
  CHECK(weft_tensor_get(h, 17, &hv));
  assert_true(v == 4 * hv);
  weft_graph_destroy(g);
  /* A user op. */
  const weft_op *op = gt_op(rt, "noop", WEFT_READ_WRITE, NULL, noop_cuda);
  g = tu_graph(rt);
  weft_tensor *t;
  CHECK(weft_tensor_create(g, "t", WEFT_F32, 1, (int64_t[]){8}, weft_cuda(0), weft_ones(), &t));
  CHECK(weft_call(g, op, &t, 1, NULL, 0));
  for (int r = 0; r < 3; r++) CHECK(weft_graph_run(g));
  weft_graph_destroy(g);
  weft_cuda_run_stats s = gt_run_stats(rt);
  assert_int_equal(s.captures, 0);
  assert_int_equal(s.replays, 0);
  assert_int_equal(s.eager_runs, 6);
  weft_runtime_destroy(rt);
#endif
}

/* Many small nodes over several streams and two devices where there are two. */
static void replay_of_many_small_nodes(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  weft_runtime *rt = gt_runtime(4, 0);
  int ngpu = gt_gpus() > 1 ? 2 : 1;
  weft_graph *g = tu_graph(rt);
  weft_tensor *acc[2], *one[2];
  for (int d = 0; d < ngpu; d++) {
    CHECK(weft_tensor_create(g, d ? "acc1" : "acc0", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(d), weft_zeros(), &acc[d]));
    CHECK(weft_tensor_create(g, d ? "one1" : "one0", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(d), weft_ones(), &one[d]));
  }
  for (int i = 0; i < 500; i++)
    for (int d = 0; d < ngpu; d++) CHECK(weft_add(g, acc[d], one[d], &acc[d]));
  weft_tensor *moved = NULL;
  if (ngpu == 2) CHECK(weft_copy(g, acc[0], weft_cuda(1), &moved));
  for (int r = 1; r <= 4; r++) {
    CHECK(weft_graph_run(g));
    for (int d = 0; d < ngpu; d++) {
      double v;
      CHECK(weft_tensor_get(acc[d], 0, &v));
      assert_true(v == 500.0 * r);
    }
    if (moved != NULL) {
      double v;
      CHECK(weft_tensor_get(moved, 0, &v));
      assert_true(v == 500.0 * r);
    }
  }
  weft_cuda_run_stats s = gt_run_stats(rt);
  if (s.replays != 3) fail_msg("%llu replays, %llu capture failures (WEFT_CUDA_DEBUG=1 says why)", s.replays, s.capture_failures);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(second_run_is_captured_and_replayed),
      cmocka_unit_test(replay_matches_eager_bit_for_bit),
      cmocka_unit_test(graphs_that_stay_eager),
      cmocka_unit_test(replay_of_many_small_nodes),
  };
  return GT_RUN(tests);
}
