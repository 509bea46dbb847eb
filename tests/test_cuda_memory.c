/* test_cuda_memory.c — device memory: the memory plan keeps the reference graph
 * 50 x (y = x.x; copy y to the host) in a handful of buffers, temporaries are not readable
 * after a run, statistics and trim, out-of-memory errors that name the node, the device, the
 * bytes and the peak and leave the runtime usable, and graphs that change between runs.
 * WEFT_TEST_SANITIZER=1 (compute-sanitizer runs) leaves the out-of-memory test out. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#if WEFT_HAVE_CUDA
#include "weft/cuda.h"
#endif

#if WEFT_HAVE_CUDA
static weft_cuda_memory_stats stats(weft_runtime *rt) {
  weft_cuda_memory_stats s;
  CHECK(weft_cuda_memory_stats_get(rt, 0, &s));
  return s;
}
#endif

/* The overlap graph. The window's floor (64 MiB by default) is set to 0 so that two result
 * buffers are the budget whatever their size, and the test stays small. */
static void overlap_graph_runs_in_few_buffers(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  enum { N = 1024, COUNT = 50 };
  weft_runtime *rt = gt_runtime_env(0, 0, "WEFT_CUDA_WINDOW_MIB", "0");
  weft_graph *g = tu_graph(rt);
  tu_overlap o;
  tu_overlap_build(&o, g, weft_cuda(0), N, weft_uniform(-1, 1, 42), COUNT);
  size_t buf = weft_tensor_bytes(o.x);
  CHECK(weft_graph_run(g)); /* first run: the pool grows to what the plan needs */
  CHECK(weft_cuda_memory_trim(rt, 0, 0));
  CHECK(weft_cuda_memory_reset_peak(rt, 0));
  weft_cuda_set_replay(rt, 0); /* measure an eager run: the scheduler's own ordering */
  CHECK(weft_graph_run(g));
  weft_cuda_memory_stats s = stats(rt);
  print_message("overlap graph, eager: peak %.2f buffers in use, %.2f reserved (x included)\n",
                (double)s.peak / buf, (double)s.reserved_peak / buf);
  assert_true(s.peak <= 5 * buf);
  assert_true(s.reserved_peak <= 5 * buf + (32u << 20)); /* the pool grows in chunks of up to 32 MiB */
  weft_cuda_set_replay(rt, 1);
  CHECK(weft_graph_run(g)); /* captured */
  CHECK(weft_cuda_memory_reset_peak(rt, 0));
  CHECK(weft_graph_run(g)); /* replayed */
  s = stats(rt);
  print_message("overlap graph, replayed: peak %.2f buffers in use, %.2f reserved\n", (double)s.peak / buf,
                (double)s.reserved_peak / buf);
  assert_int_equal(gt_run_stats(rt).captures, 1);
  /* Every copy holds x.x: equal to each other, and one element checked in double. */
  float *first = gt_read(o.h[0]), *xv = gt_read(o.x);
  for (int i = 1; i < COUNT; i++) {
    float *other = gt_read(o.h[i]);
    assert_memory_equal(first, other, buf);
    free(other);
  }
  for (int probe = 0; probe < 4; probe++) {
    int r = (probe * 977) % N, c = (probe * 1231 + 5) % N;
    double want = 0;
    for (int k = 0; k < N; k++) want += (double)xv[(size_t)r * N + k] * xv[(size_t)k * N + c];
    assert_true(fabs(first[(size_t)r * N + c] - want) < 1e-3 * (1 + fabs(want)));
  }
  free(first);
  free(xv);
  /* A temporary's storage lives only during a run. */
  void *big = malloc(buf);
  assert_int_equal(weft_tensor_read(o.y[3], big, buf), WEFT_ESTATE);
  free(big);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
#endif
}

static void statistics_and_trim(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  weft_runtime *rt = gt_runtime(2, 0);
  weft_cuda_memory_stats s0 = stats(rt), s1, s2;
  assert_true(s0.workspace > 0);
  weft_graph *g = tu_graph(rt);
  weft_tensor *t;
  CHECK(weft_tensor_create(g, "t", WEFT_F32, 1, (int64_t[]){1 << 24}, weft_cuda(0), weft_ones(), &t));
  double v;
  CHECK(weft_tensor_get(t, 123, &v)); /* materialises t */
  assert_true(v == 1.0);
  s1 = stats(rt);
  assert_true(s1.allocated >= s0.allocated + (64u << 20));
  assert_true(s1.peak >= s1.allocated);
  assert_true(s1.reserved >= s1.allocated);
  /* The device-neutral view (weft_device_memory_usage) tells the same allocator's figures. */
  weft_memory_usage use;
  CHECK(weft_device_memory_usage(rt, weft_cuda(0), &use));
  assert_int_equal(use.in_use, s1.allocated);
  assert_int_equal(use.peak, s1.peak);
  assert_int_equal(use.reserved, s1.reserved + s1.workspace);
  weft_graph_destroy(g);
  CHECK(weft_cuda_memory_trim(rt, -1, 0));
  s2 = stats(rt);
  assert_true(s2.allocated <= s0.allocated);
  assert_true(s2.reserved < s1.reserved);
  CHECK(weft_cuda_memory_reset_peak(rt, 0));
  s2 = stats(rt);
  assert_true(s2.peak < s1.peak);
  weft_cuda_memory_stats bad;
  assert_int_equal(weft_cuda_memory_stats_get(rt, gt_gpus(), &bad), WEFT_EDEVICE);
  weft_runtime_destroy(rt);
#endif
}

/* Runs a small graph to show the runtime still works. */
static void small_graph_works(weft_runtime *rt) {
  weft_graph *g = tu_graph(rt);
  weft_tensor *a, *n = NULL;
  CHECK(weft_tensor_create(g, "a", WEFT_F32, 2, (int64_t[]){64, 64}, weft_cuda(0), weft_ones(), &a));
  weft_tensor *p = NULL;
  CHECK(weft_mm(g, a, a, &p));
  CHECK(weft_norm(g, p, &n));
  CHECK(weft_graph_run(g));
  double v;
  CHECK(weft_tensor_get(n, 0, &v));
  assert_true(fabs(v - 64.0 * 64.0) < 1e-2); /* every element is 64 */
  weft_graph_destroy(g);
}

static void out_of_memory_is_an_error_and_recoverable(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  /* compute-sanitizer reports the failing allocations this test makes on purpose. */
  if (gt_under_sanitizer()) skip();
  weft_runtime *rt = gt_runtime(2, 0);
  weft_device_info info;
  CHECK(weft_device_info_get(rt, weft_cuda(0), &info));
  /* A kept tensor larger than the device: the launch fails at materialisation. */
  weft_graph *g = tu_graph(rt);
  int64_t huge = (int64_t)(info.memory_bytes / 4) * 2;
  weft_tensor *t, *o = NULL;
  CHECK(weft_tensor_create(g, "huge", WEFT_F32, 1, &huge, weft_cuda(0), weft_zeros(), &t));
  CHECK(weft_relu(g, t, &o));
  int rc = weft_graph_run(g);
  assert_int_equal(rc, WEFT_EDEVMEM);
  const char *msg = weft_last_error();
  assert_non_null(strstr(msg, "cuda:0"));
  assert_non_null(strstr(msg, "asking for"));
  assert_non_null(strstr(msg, "peak"));
  weft_graph_destroy(g);
  small_graph_works(rt);
  /* A temporary larger than the device: the node that allocates it fails, named. */
  g = tu_graph(rt);
  int64_t side = (int64_t)sqrt((double)info.memory_bytes / 4.0 * 1.5);
  weft_tensor *col, *row, *prod = NULL, *nrm = NULL, *other, *ok = NULL;
  CHECK(weft_tensor_create(g, "col", WEFT_F32, 2, (int64_t[]){side, 1}, weft_cuda(0), weft_ones(), &col));
  CHECK(weft_tensor_create(g, "row", WEFT_F32, 2, (int64_t[]){1, side}, weft_cuda(0), weft_ones(), &row));
  CHECK(weft_tensor_create(g, "other", WEFT_F32, 1, (int64_t[]){100}, weft_cuda(0), weft_ones(), &other));
  CHECK(weft_mm(g, col, row, &prod)); /* side x side: more than the device holds */
  weft_node *mm = weft_graph_last_node(g);
  CHECK(weft_norm(g, prod, &nrm));
  CHECK(weft_scale(g, other, 2.0, &ok)); /* independent: still runs */
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  assert_int_equal(weft_run_wait(r), WEFT_EDEVMEM);
  assert_ptr_equal(weft_run_failed_node(r), mm);
  msg = weft_run_error(r);
  assert_non_null(strstr(msg, "'mm'"));
  assert_non_null(strstr(msg, "cuda:0"));
  assert_non_null(strstr(msg, "asking for"));
  assert_non_null(strstr(msg, "peak"));
  weft_run_destroy(r);
  double v;
  CHECK(weft_tensor_get(ok, 7, &v));
  assert_true(v == 2.0);
  weft_graph_destroy(g);
  small_graph_works(rt);
  weft_runtime_destroy(rt);
}

/* A result that becomes a temporary when a later node reads it, and back. */
static void graphs_that_change_between_runs(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  weft_tensor *a, *b = NULL, *c = NULL, *d = NULL;
  CHECK(weft_tensor_create(f->g, "a", WEFT_F32, 1, (int64_t[]){1000}, weft_cuda(0), weft_full(2), &a));
  CHECK(weft_scale(f->g, a, 3, &b)); /* b: a result */
  CHECK(weft_graph_run(f->g));
  double v;
  CHECK(weft_tensor_get(b, 0, &v));
  assert_true(v == 6.0);
  CHECK(weft_scale(f->g, b, 2, &c)); /* b is now read later: a temporary (but it has storage) */
  CHECK(weft_scale(f->g, c, 0.5, &d)); /* c: a temporary managed per run */
  CHECK(weft_graph_run(f->g));
  CHECK(weft_graph_run(f->g));
  CHECK(weft_tensor_get(d, 999, &v));
  assert_true(v == 6.0);
  CHECK(weft_scale(f->g, c, 1.0, &c)); /* c's final value is now unread: c is a result again */
  CHECK(weft_graph_run(f->g));
  CHECK(weft_tensor_get(c, 5, &v));
  assert_true(v == 12.0);
  CHECK(weft_graph_run(f->g));
  CHECK(weft_tensor_get(c, 5, &v));
  assert_true(v == 12.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(overlap_graph_runs_in_few_buffers),
      cmocka_unit_test(statistics_and_trim),
      cmocka_unit_test(out_of_memory_is_an_error_and_recoverable),
      cmocka_unit_test_setup_teardown(graphs_that_change_between_runs, gt_setup, gt_teardown),
  };
  return GT_RUN(tests);
}
