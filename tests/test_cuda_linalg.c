/* test_cuda_linalg.c — the dense linear-algebra ops on a GPU (cuBLAS, cuSOLVER, weft's own
 * trtri) on whole matrices and strided tiles: each against the CPU's (OpenBLAS) result, a tiled
 * Cholesky against its residual, the same graph run again (eager each time: a potrf's result is
 * checked by the host after every run), and a potrf of a matrix that is not positive definite
 * and a trtri of a singular one, which must fail the run naming the node and the tile. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

/* The tiled Cholesky of a (n x n f64, tiles of b) on `dev`, run `runs` times from the same
 * input; returns the factor (malloc'd). */
static double *factor_on(weft_device dev, const double *a, int64_t n, int64_t b, int runs) {
  weft_runtime *rt = gt_runtime(2, 0);
  weft_graph *g = tu_graph(rt);
  int64_t shape[2] = {n, n};
  size_t bytes = (size_t)(n * n) * sizeof(double);
  weft_tensor *x;
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, shape, dev, weft_zeros(), &x));
  CHECK(tu_cholesky(g, x, b));
  double *l = malloc(bytes);
  for (int r = 0; r < runs; r++) {
    CHECK(weft_tensor_write(x, a, bytes));
    CHECK(weft_graph_run(g));
    CHECK(weft_tensor_read(x, l, bytes));
  }
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return l;
}

static void test_cholesky_f64(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  const int64_t n = 700, b = 256; /* 3 x 3 tiles, the last row and column of 188 */
  double *a = tu_spd(n, 11);
  double *lg = factor_on(weft_cuda(0), a, n, b, 2), *lc = factor_on(weft_cpu(), a, n, b, 1);
  assert_true(tu_residual(lg, a, n) < 1e-13);
  double worst = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) {
      if (j > i) assert_true(lg[i * n + j] == a[i * n + j]); /* upper triangle untouched */
      worst = fmax(worst, fabs(lg[i * n + j] - lc[i * n + j]));
    }
  assert_true(worst < 1e-10);
  free(a);
  free(lg);
  free(lc);
}

/* The tiled Cholesky of the upper triangle (A = U^T U, cuSOLVER's lower mode in place) on a
 * GPU: its residual, the strict lower triangle untouched, and the CPU's factor. */
static void test_cholesky_upper_f64(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  const int64_t n = 700, b = 256;
  size_t bytes = (size_t)(n * n) * sizeof(double);
  double *a = tu_spd(n, 13), *u[2];
  for (int d = 0; d < 2; d++) {
    weft_runtime *rt = gt_runtime(2, 0);
    weft_graph *g = tu_graph(rt);
    weft_tensor *x;
    CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){n, n}, d ? weft_cpu() : weft_cuda(0), weft_zeros(), &x));
    CHECK(tu_cholesky_upper(g, x, b));
    CHECK(weft_tensor_write(x, a, bytes));
    CHECK(weft_graph_run(g));
    u[d] = malloc(bytes);
    CHECK(weft_tensor_read(x, u[d], bytes));
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  double *l = tu_transpose(u[0], n), worst = 0;
  assert_true(tu_residual(l, a, n) < 1e-13);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) {
      if (j < i) assert_true(u[0][i * n + j] == a[i * n + j]); /* lower triangle untouched */
      worst = fmax(worst, fabs(u[0][i * n + j] - u[1][i * n + j]));
    }
  assert_true(worst < 1e-10);
  free(a);
  free(l);
  free(u[0]);
  free(u[1]);
}

/* The tiles distributed over every GPU (2-D block-cyclic): the factor is the one GPU's, bit
 * for bit (the same kernels on the same values), whatever GPU each node ran on; run twice. */
static void test_cholesky_over_gpus(void **state) {
  (void)state;
  GT_NEED_GPUS(2);
  const int64_t n = 1000, b = 128; /* 8 x 8 tiles, the last row and column of 104 */
  size_t bytes = (size_t)(n * n) * sizeof(double);
  double *a = tu_spd(n, 5), *one = factor_on(weft_cuda(0), a, n, b, 1), *l = malloc(bytes);
  weft_runtime *rt = gt_runtime(2, 0);
  int gpus = weft_device_count(rt, WEFT_DEVICE_CUDA), P = gpus >= 4 ? 2 : 1;
  weft_graph *g = tu_graph(rt);
  weft_tensor *x;
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){n, n}, weft_cuda(0), weft_zeros(), &x));
  CHECK(weft_tensor_tiles(g, x, b, b));
  CHECK(weft_tensor_distribute(g, x, P, gpus / P));
  CHECK(tu_cholesky_tiled(g, x));
  for (int r = 0; r < 2; r++) {
    CHECK(weft_tensor_write(x, a, bytes));
    CHECK(weft_graph_run(g));
    memset(l, 0, bytes);
    CHECK(weft_tensor_read(x, l, bytes));
    assert_memory_equal(l, one, bytes);
  }
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  free(a);
  free(one);
  free(l);
}

/* The matrix on auto over every GPU: only its tiles' nodes use it, so its tiles each live
 * where their last writer ran (split over the GPUs, the whole on the host); the factor is the
 * one GPU's to rounding, run after run (contents written in between go to the tiles' homes); a
 * node that reads the whole joins it on the host at the next launch, the factor kept. */
static void test_cholesky_auto_over_gpus(void **state) {
  (void)state;
  GT_NEED_GPUS(2);
  const int64_t n = 2048, b = 512;
  size_t bytes = (size_t)(n * n) * sizeof(double);
  double *a = tu_spd(n, 17), *one = factor_on(weft_cuda(0), a, n, b, 1), *l = malloc(bytes);
  weft_runtime *rt = gt_runtime(2, 0);
  weft_graph *g = tu_graph(rt);
  weft_tensor *x, *sum = NULL;
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){n, n}, weft_auto(), weft_zeros(), &x));
  CHECK(tu_cholesky(g, x, b));
  for (int r = 0; r < 3; r++) {
    if (r == 2) CHECK(weft_sum(g, x, &sum)); /* the whole read: joined */
    CHECK(weft_tensor_write(x, a, bytes));
    CHECK(weft_graph_run(g));
    memset(l, 0, bytes);
    CHECK(weft_tensor_read(x, l, bytes));
    assert_true(tu_residual(l, a, n) < 1e-13);
    double worst = 0, want = 0, got;
    for (int64_t k = 0; k < n * n; k++) worst = fmax(worst, fabs(l[k] - one[k])), want += l[k];
    assert_true(worst < 1e-10);
    weft_device d = weft_tensor_device(x), t = weft_tensor_device(weft_tensor_tile(x, 3, 3));
    if (r < 2) {
      assert_int_equal(d.kind, WEFT_DEVICE_CPU);
    } else {
      assert_true(weft_device_equal(t, d));
      CHECK(weft_tensor_get(sum, 0, &got));
      assert_true(fabs(got - want) <= 1e-9 * fabs(want));
    }
  }
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  free(a);
  free(one);
  free(l);
}

/* Each op on strided tiles of f32 and f64 matrices on the GPU, against the same graph on the
 * CPU: gemm with every pair of transposes, trsm and trmm on both sides with and without the transpose,
 * syrk. */
static void run_ops(weft_device dev, int dtype, double *out, int64_t n) {
  weft_runtime *rt = gt_runtime(2, 0);
  weft_graph *g = tu_graph(rt);
  int64_t shape[2] = {n, n};
  weft_tensor *x;
  CHECK(weft_tensor_create(g, "X", (weft_dtype)dtype, 2, shape, dev, weft_uniform(0.5, 1.5, 9), &x));
  int64_t b = n / 4;
  CHECK(weft_tensor_tiles(g, x, b, b));
  /* A well-conditioned lower triangle (the upper one is never read: garbage there). */
  int64_t ls[2] = {b, b};
  weft_tensor *l;
  CHECK(weft_tensor_create(g, "L", (weft_dtype)dtype, 2, ls, dev, weft_zeros(), &l));
  double *lh = malloc((size_t)(b * b) * sizeof *lh);
  float *lf = malloc((size_t)(b * b) * sizeof *lf);
  for (int64_t i = 0; i < b; i++)
    for (int64_t j = 0; j < b; j++) {
      lh[i * b + j] = i == j ? 2.0 + (double)(i % 3) : j < i ? 0.01 * (double)((i * 7 + j * 3) % 10) : 1e30;
      lf[i * b + j] = (float)lh[i * b + j];
    }
  CHECK(weft_tensor_write(l, dtype == WEFT_F32 ? (void *)lf : (void *)lh, (size_t)(b * b) * (dtype == WEFT_F32 ? 4 : 8)));
  /* Its transpose: a well-conditioned upper triangle, garbage below. */
  weft_tensor *u;
  CHECK(weft_tensor_create(g, "U", (weft_dtype)dtype, 2, ls, dev, weft_zeros(), &u));
  for (int64_t i = 0; i < b; i++)
    for (int64_t j = i + 1; j < b; j++) {
      double t = lh[i * b + j];
      lh[i * b + j] = lh[j * b + i], lh[j * b + i] = t;
      lf[i * b + j] = (float)lh[i * b + j], lf[j * b + i] = (float)lh[j * b + i];
    }
  CHECK(weft_tensor_write(u, dtype == WEFT_F32 ? (void *)lf : (void *)lh, (size_t)(b * b) * (dtype == WEFT_F32 ? 4 : 8)));
  free(lh);
  free(lf);
  /* The upper-triangle forms on tiles the lower ones leave alone. */
  CHECK(weft_syrk(g, WEFT_UPPER, 1, -0.5, weft_tensor_tile(x, 0, 0), 2.0, weft_tensor_tile(x, 1, 1)));
  for (int side = 0; side < 2; side++)
    for (int tr = 0; tr < 2; tr++) {
      CHECK(weft_trsm(g, side ? WEFT_RIGHT : WEFT_LEFT, WEFT_UPPER, tr, 1.25, u, weft_tensor_tile(x, 3, 2 * side)));
      CHECK(weft_trmm(g, side ? WEFT_RIGHT : WEFT_LEFT, WEFT_UPPER, tr, 0.5, u, weft_tensor_tile(x, 1 + side, 3 - 2 * side)));
    }
  CHECK(weft_syrk(g, WEFT_LOWER, 0, 1.0, weft_tensor_tile(x, 0, 1), 0.5, weft_tensor_tile(x, 3, 3)));
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      CHECK(weft_gemm(g, weft_tensor_tile(x, 1, 2), ta, weft_tensor_tile(x, 3, 1), tb, 0.25, -0.5,
                      weft_tensor_tile(x, 2, 3)));
  for (int side = 0; side < 2; side++)
    for (int tr = 0; tr < 2; tr++)
      CHECK(weft_trsm(g, side ? WEFT_RIGHT : WEFT_LEFT, WEFT_LOWER, tr, 1.5, l, weft_tensor_tile(x, 1 + side, 0)));
  for (int side = 0; side < 2; side++)
    for (int tr = 0; tr < 2; tr++)
      CHECK(weft_trmm(g, side ? WEFT_RIGHT : WEFT_LEFT, WEFT_LOWER, tr, 0.75, l, weft_tensor_tile(x, 0, 2 + side)));
  CHECK(weft_graph_run(g));
  size_t es = dtype == WEFT_F32 ? 4 : 8;
  void *buf = malloc((size_t)(n * n) * es);
  CHECK(weft_tensor_read(x, buf, (size_t)(n * n) * es));
  for (int64_t i = 0; i < n * n; i++) out[i] = dtype == WEFT_F32 ? ((float *)buf)[i] : ((double *)buf)[i];
  free(buf);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

static void test_ops_against_cpu(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  const int64_t n = 192;
  double *gpu = malloc((size_t)(n * n) * sizeof *gpu), *cpu = malloc((size_t)(n * n) * sizeof *cpu);
  for (int dt = 0; dt < 2; dt++) {
    int dtype = dt ? WEFT_F64 : WEFT_F32;
    run_ops(weft_cuda(0), dtype, gpu, n);
    run_ops(weft_cpu(), dtype, cpu, n);
    double worst = 0, big = 0;
    for (int64_t i = 0; i < n * n; i++) {
      worst = fmax(worst, fabs(gpu[i] - cpu[i]));
      big = fmax(big, fabs(cpu[i]));
    }
    assert_true(big > 1);
    assert_true(worst / big < (dt ? 1e-12 : 1e-4));
  }
  free(gpu);
  free(cpu);
}

static void test_potrf_not_spd(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  int64_t shape[2] = {64, 64};
  weft_tensor *x, *s = NULL;
  CHECK(weft_tensor_create(f->g, "M", WEFT_F64, 2, shape, weft_cuda(0), weft_full(1), &x));
  CHECK(tu_cholesky(f->g, x, 32));
  CHECK(weft_sum(f->g, x, &s));
  for (int run = 0; run < 2; run++) { /* never replayed: checked again */
    assert_int_equal(weft_graph_run(f->g), WEFT_EKERNEL);
    const char *e = weft_last_error();
    assert_non_null(strstr(e, "potrf"));
    assert_non_null(strstr(e, "M[0,0]"));
    assert_non_null(strstr(e, "not positive definite"));
  }
}

/* trtri on the GPU (the diagonal blocks' kernel, then the batched products of each level,
 * with a shorter pair at the end for n = 300 and n = 200), lower and upper, f64 and f32, from a
 * strided tile into another: T W = I, W's other strict triangle zero, and W against the CPU's
 * (LAPACK's). Zeros on the diagonal (rows 131 and 251, 1-based) fail each of two runs, naming
 * the node, the tile and the first zero's row. */
static void test_trtri_against_cpu(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  static const int64_t sizes[] = {300, 256, 200, 40};
  for (int s = 0; s < 4; s++)
    for (int upper = 0; upper < 2; upper++)
      for (int dt = 0; dt < 2; dt++) {
        int64_t n = sizes[s];
        int st_gpu, st_cpu;
        int dtype = dt ? WEFT_F64 : WEFT_F32;
        double *wg = tu_trtri(f->rt, weft_cuda(0), dtype, n, upper, -1, 1, &st_gpu);
        double *wc = tu_trtri(f->rt, weft_cpu(), dtype, n, upper, -1, 1, &st_cpu);
        assert_int_equal(st_gpu, WEFT_OK);
        assert_int_equal(st_cpu, WEFT_OK);
        double eg = tu_trtri_error(wg, n, upper), ec = tu_trtri_error(wc, n, upper), diff = 0, big = 0;
        for (int64_t i = 0; i < n * n; i++) {
          diff = fmax(diff, fabs(wg[i] - wc[i]));
          big = fmax(big, fabs(wc[i]));
        }
        if (eg >= (dt ? 1e-13 : 1e-5) || diff / big >= (dt ? 1e-13 : 1e-5))
          fail_msg("n %lld, %s, %s: |T W - I| %.3g on the GPU, %.3g on the CPU; W differs by %.3g of %.3g", (long long)n,
                   upper ? "upper" : "lower", dt ? "f64" : "f32", eg, ec, diff, big);
        free(wg);
        free(wc);
      }
  for (int upper = 0; upper < 2; upper++) {
    int st; /* zeros at rows 130 and 250, in the third and fourth diagonal blocks; two runs */
    free(tu_trtri(f->rt, weft_cuda(0), WEFT_F64, 300, upper, 130, 2, &st));
    assert_int_equal(st, WEFT_EKERNEL);
    const char *e = weft_last_error();
    assert_non_null(strstr(e, "trtri"));
    assert_non_null(strstr(e, "T[1,0]"));
    assert_non_null(strstr(e, "singular: its diagonal element 131 is zero"));
  }
}

/* An operand on another device is copied to the result's, as for every op (a copy node, then
 * the op); in strict device mode it is an error naming the device. */
static void test_operands_are_copied(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  const int64_t n = 8;
  double l[64], b[64], want[64], got[64];
  for (int i = 0; i < 64; i++) {
    l[i] = (i / 8 == i % 8) ? 2.0 : (i / 8 > i % 8 ? 0.25 : 0.0);
    b[i] = (double)(i % 7) - 3.0;
  }
  weft_tensor *h, *d;
  CHECK(weft_tensor_create(f->g, "H", WEFT_F64, 2, (int64_t[]){n, n}, weft_cpu(), weft_zeros(), &h));
  CHECK(weft_tensor_create(f->g, "D", WEFT_F64, 2, (int64_t[]){n, n}, weft_cuda(0), weft_zeros(), &d));
  CHECK(weft_tensor_write(h, l, sizeof l));
  CHECK(weft_tensor_write(d, b, sizeof b));
  CHECK(weft_trsm(f->g, WEFT_LEFT, WEFT_LOWER, 0, 1, h, d));
  assert_int_equal(weft_graph_node_count(f->g), 2); /* the copy of H to cuda:0, the trsm */
  assert_int_equal(weft_node_device(weft_graph_node(f->g, 1)).kind, WEFT_DEVICE_CUDA);
  CHECK(weft_graph_run(f->g));
  CHECK(weft_tensor_read(d, got, sizeof got));
  /* L x = b by forward substitution, column by column. */
  for (int c = 0; c < 8; c++)
    for (int r = 0; r < 8; r++) {
      double s = b[r * 8 + c];
      for (int k = 0; k < r; k++) s -= l[r * 8 + k] * want[k * 8 + c];
      want[r * 8 + c] = s / l[r * 8 + r];
    }
  for (int i = 0; i < 64; i++) assert_true(fabs(got[i] - want[i]) < 1e-12);
  weft_graph_set_strict(f->g, 1);
  assert_int_equal(weft_trsm(f->g, WEFT_LEFT, WEFT_LOWER, 0, 1, h, d), WEFT_EDEVICE);
  assert_non_null(strstr(weft_last_error(), "cuda:0"));
  assert_int_equal(weft_graph_node_count(f->g), 2);
}

/* auto on a real GPU: a matrix whose home is the host (a CPU-only op touched it first), a gemm
 * of three of its tiles placed on the GPU (strided tiles to and from contiguous replicas: 2-D
 * copies), then the whole scaled. */
static void auto_tiles_move_to_the_gpu(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  const weft_op *op = gt_op(f->rt, "add_one", WEFT_READ_WRITE, tu_add_one, NULL);
  weft_tensor *b;
  CHECK(weft_tensor_create(f->g, "B", WEFT_F64, 2, (int64_t[]){2048, 2048}, weft_auto(), weft_ones(), &b));
  CHECK(weft_tensor_tiles(f->g, b, 1024, 1024));
  CHECK(weft_call(f->g, op, &b, 1, NULL, 0));
  CHECK(weft_gemm(f->g, weft_tensor_tile(b, 0, 1), 0, weft_tensor_tile(b, 1, 0), 0, 1.0, 0.0, weft_tensor_tile(b, 1, 1)));
  CHECK(weft_scale(f->g, b, 2.0, &b));
  for (int run = 0; run < 2; run++) {
    double one = 1.0;
    if (run) { /* the same program again, from ones */
      double *ones = malloc(2048 * 2048 * sizeof *ones);
      for (int i = 0; i < 2048 * 2048; i++) ones[i] = one;
      CHECK(weft_tensor_write(b, ones, 2048 * 2048 * sizeof *ones));
      free(ones);
    }
    CHECK(weft_graph_run(f->g));
    weft_placement pl;
    CHECK(weft_node_placement(f->g, weft_graph_node(f->g, 1), &pl));
    assert_int_equal(pl.device.kind, WEFT_DEVICE_CUDA);
    double v;
    CHECK(weft_tensor_get(b, 1024 * 2048 + 1024, &v));
    assert_true(v == 2.0 * 1024 * 4);
    CHECK(weft_tensor_get(b, 2047 * 2048 + 2047, &v));
    assert_true(v == 2.0 * 1024 * 4);
    CHECK(weft_tensor_get(b, 5, &v));
    assert_true(v == 4.0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cholesky_f64),
      cmocka_unit_test(test_cholesky_upper_f64),
      cmocka_unit_test(test_cholesky_over_gpus),
      cmocka_unit_test(test_cholesky_auto_over_gpus),
      cmocka_unit_test(test_ops_against_cpu),
      cmocka_unit_test_setup_teardown(test_potrf_not_spd, gt_setup, gt_teardown),
      cmocka_unit_test_setup_teardown(test_trtri_against_cpu, gt_setup, gt_teardown),
      cmocka_unit_test_setup_teardown(test_operands_are_copied, gt_setup, gt_teardown),
      cmocka_unit_test_setup_teardown(auto_tiles_move_to_the_gpu, gt_setup, gt_teardown),
  };
  return GT_RUN(tests);
}
