/* test_tiles.c — tiles (views of a 2-D tensor tracked one by one) and the dense linear-algebra
 * ops (gemm, potrf, trsm, trmm, trtri, syrk) on the CPU: results against plain loops, a tiled Cholesky
 * against its residual and bit for bit across worker counts, dependencies between tiles and the
 * whole tensor, and every bad input with the error it must give. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "weft/dsl.h"
#include "weft/sim.h"

/* Runs the tiled Cholesky of `a` (n x n, tiles of b) with `workers` workers; returns the
 * factor (malloc'd). */
static double *factor(const double *a, int64_t n, int64_t b, int workers) {
  weft_runtime *rt = tu_runtime_cpu(workers);
  weft_graph *g = tu_graph(rt);
  int64_t shape[2] = {n, n};
  weft_tensor *x;
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, shape, weft_cpu(), weft_zeros(), &x));
  CHECK(weft_tensor_write(x, a, (size_t)(n * n) * sizeof(double)));
  CHECK(tu_cholesky(g, x, b));
  CHECK(weft_graph_run(g));
  double *l = malloc((size_t)(n * n) * sizeof *l);
  CHECK(weft_tensor_read(x, l, (size_t)(n * n) * sizeof(double)));
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return l;
}

static void test_cholesky_f64(void **state) {
  (void)state;
  const int64_t n = 300, b = 128; /* 3 x 3 tiles, the last row and column of 44 */
  double *a = tu_spd(n, 7);
  double *l1 = factor(a, n, b, 1), *l4 = factor(a, n, b, 4);
  assert_true(tu_residual(l4, a, n) < 1e-13);
  assert_memory_equal(l1, l4, (size_t)(n * n) * sizeof(double)); /* bit for bit */
  for (int64_t i = 0; i < n; i++) /* the strict upper triangle is left as it was */
    for (int64_t j = i + 1; j < n; j++) assert_true(l4[i * n + j] == a[i * n + j]);
  free(a);
  free(l1);
  free(l4);
}

/* A simulated 4-GPU machine that computes (its GPU tensors are host memory), 2 workers. */
static weft_runtime *sim_machine(void) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 2;
  o.flags = WEFT_RUNTIME_QUIET | WEFT_RUNTIME_SIM_COMPUTE;
  o.simulate = "h200x4";
  weft_runtime *rt;
  CHECK(weft_runtime_create(&o, &rt));
  return rt;
}

/* A tiled matrix on a simulated GPU takes its own bytes there, once: its tiles are views of
 * its storage (the simulator counted them again, twice the matrix). */
static void test_tiles_take_their_parents_memory(void **state) {
  (void)state;
  weft_runtime *rt = sim_machine();
  weft_graph *g = tu_graph(rt);
  weft_tensor *x;
  CHECK(weft_tensor_create(g, "X", WEFT_F64, 2, (int64_t[]){512, 512}, weft_cuda(0), weft_eye(4), &x));
  CHECK(weft_tensor_tiles(g, x, 128, 128));
  for (int64_t k = 0; k < 4; k++) CHECK(weft_potrf(g, WEFT_LOWER, weft_tensor_tile(x, k, k)));
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  CHECK(weft_run_wait(r));
  uint64_t peak = 0;
  CHECK(weft_sim_peak_bytes(r, weft_cuda(0), &peak));
  assert_int_equal(peak, 512 * 512 * sizeof(double));
  weft_run_destroy(r);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* The tiles distributed 2-D block-cyclically over the GPUs of one process (a simulated 4-GPU
 * machine that computes): each tile in storage of its own on its GPU, each node on the GPU of
 * the tile it writes, the tiles it reads from other GPUs copied there; the factor is the one
 * of the whole matrix on the CPU, bit for bit. */
static void test_cholesky_over_gpus(void **state) {
  (void)state;
  const int64_t n = 300, b = 64; /* 5 x 5 tiles, the last row and column of 44 */
  double *a = tu_spd(n, 11), *cpu = factor(a, n, b, 1);
  weft_runtime *rt = sim_machine();
  weft_graph *g = tu_graph(rt);
  weft_tensor *x;
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){n, n}, weft_cuda(0), weft_zeros(), &x));
  CHECK(weft_tensor_tiles(g, x, b, b));
  /* More places than GPUs, and a grid that is not one, are refused. */
  assert_int_equal(weft_tensor_distribute(g, x, 4, 2), WEFT_EDEVICE);
  assert_true(tu_contains(weft_last_error(), "tensor A: a grid of 4 x 2 GPUs; this run has 4 (4 a rank)"));
  assert_int_equal(weft_tensor_distribute(g, x, 0, 2), WEFT_EDEVICE);
  CHECK(weft_tensor_distribute(g, x, 2, 2));
  for (int64_t i = 0; i < 5; i++)
    for (int64_t j = 0; j < 5; j++) {
      weft_device d = weft_tensor_device(weft_tensor_tile(x, i, j));
      assert_int_equal(d.kind, WEFT_DEVICE_CUDA);
      assert_int_equal(d.index, (int)(i % 2) * 2 + (int)(j % 2));
    }
  CHECK(weft_tensor_write(x, a, (size_t)(n * n) * sizeof(double)));
  CHECK(tu_cholesky_tiled(g, x));
  /* Owner computes: potrf of tile (1, 1) runs on cuda:3, which owns it; the trsm of tile
   * (1, 0) on cuda:2 reads tile (0, 0) through a copy from cuda:0. */
  size_t copies = 0, potrf_on_3 = 0;
  for (size_t i = 0; i < weft_graph_node_count(g); i++) {
    weft_node *nd = weft_graph_node(g, i);
    if (strcmp(weft_node_op_name(nd), "copy") == 0) copies++;
    if (strcmp(weft_node_op_name(nd), "potrf") == 0 && weft_node_device(nd).index == 3) potrf_on_3++;
  }
  assert_true(copies > 0);
  assert_int_equal(potrf_on_3, 2); /* tiles (1, 1) and (3, 3) */
  CHECK(weft_graph_run(g));
  double *l = malloc((size_t)(n * n) * sizeof *l);
  CHECK(weft_tensor_read(x, l, (size_t)(n * n) * sizeof(double)));
  assert_memory_equal(l, cpu, (size_t)(n * n) * sizeof(double));
  /* As .weft text: declared on a GPU, then distributed (parsed back, the same graph). */
  char *text = NULL;
  CHECK(weft_graph_write(g, &text));
  assert_non_null(strstr(text, "tensor A: f64[300, 300] on gpu0 = zeros\ntiles(A, 64, 64)\ndistribute(A, 2, 2)\n"));
  free(text);
  /* The whole of x has no one home: an op on it is refused, naming the grid. */
  weft_tensor *r = NULL;
  assert_int_equal(weft_relu(g, x, &r), WEFT_EDEVICE);
  assert_true(tu_contains(weft_last_error(), "is distributed over 2 x 2 GPUs and has no one home"));
  free(l);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  free(a);
  free(cpu);
}

/* Strided tiles are copied (a 2-D copy) between the host and the GPUs and between GPUs, and a
 * linear-algebra op reads a strided tile of another device through such a copy (a simulated
 * machine that computes). */
static void test_strided_tiles_are_copied(void **state) {
  (void)state;
  weft_runtime *rt = sim_machine();
  weft_graph *g = tu_graph(rt);
  double xv[36], eye[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, yv[36], cv[9];
  for (int i = 0; i < 36; i++) xv[i] = i;
  weft_tensor *x, *y, *id, *c, *h = NULL;
  CHECK(weft_tensor_create(g, "X", WEFT_F64, 2, (int64_t[]){6, 6}, weft_cpu(), weft_zeros(), &x));
  CHECK(weft_tensor_create(g, "Y", WEFT_F64, 2, (int64_t[]){6, 6}, weft_cuda(1), weft_zeros(), &y));
  CHECK(weft_tensor_create(g, "I", WEFT_F64, 2, (int64_t[]){3, 3}, weft_cpu(), weft_zeros(), &id));
  CHECK(weft_tensor_create(g, "C", WEFT_F64, 2, (int64_t[]){3, 3}, weft_cuda(2), weft_zeros(), &c));
  CHECK(weft_tensor_write(x, xv, sizeof xv));
  CHECK(weft_tensor_write(id, eye, sizeof eye));
  CHECK(weft_tensor_tiles(g, x, 3, 3));
  CHECK(weft_tensor_tiles(g, y, 3, 3));
  CHECK(weft_copy(g, weft_tensor_tile(x, 0, 1), weft_cuda(0), &h)); /* host tile (0, 1) to cuda:0 */
  weft_tensor *y10 = weft_tensor_tile(y, 1, 0);
  CHECK(weft_copy(g, h, weft_cpu(), &y10)); /* into tile (1, 0) of Y on cuda:1 */
  size_t nodes = weft_graph_node_count(g);
  CHECK(weft_gemm(g, weft_tensor_tile(x, 1, 1), 0, id, 0, 1.0, 0.0, c)); /* C = X[1,1] I on cuda:2 */
  assert_int_equal(weft_graph_node_count(g), nodes + 3); /* two copies to cuda:2, the gemm */
  CHECK(weft_graph_run(g));
  CHECK(weft_tensor_read(y, yv, sizeof yv));
  CHECK(weft_tensor_read(c, cv, sizeof cv));
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 6; j++)
      assert_true(yv[i * 6 + j] == (i >= 3 && j < 3 ? xv[(i - 3) * 6 + j + 3] : 0.0));
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) assert_true(cv[i * 3 + j] == xv[(i + 3) * 6 + j + 3]);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

static void test_cholesky_f32_and_whole_tensor_after_tiles(void **state) {
  tu_fixture *f = *state;
  const int64_t n = 96;
  double *a = tu_spd(n, 3);
  float *af = malloc((size_t)(n * n) * sizeof *af), *l = malloc((size_t)(n * n) * sizeof *l);
  for (int64_t i = 0; i < n * n; i++) af[i] = (float)a[i];
  int64_t shape[2] = {n, n};
  weft_tensor *x, *s = NULL;
  CHECK(weft_tensor_create(f->g, "A", WEFT_F32, 2, shape, weft_cpu(), weft_zeros(), &x));
  CHECK(weft_tensor_write(x, af, (size_t)(n * n) * sizeof(float)));
  CHECK(tu_cholesky(f->g, x, 32));
  CHECK(weft_scale(f->g, x, 2.0, &s)); /* the whole tensor, after every tile's last write */
  CHECK(weft_graph_run(f->g));
  CHECK(weft_tensor_read(x, l, (size_t)(n * n) * sizeof(float)));
  float *sd = malloc((size_t)(n * n) * sizeof *sd);
  CHECK(weft_tensor_read(s, sd, (size_t)(n * n) * sizeof(float)));
  double *ld = malloc((size_t)(n * n) * sizeof *ld);
  for (int64_t i = 0; i < n * n; i++) {
    ld[i] = l[i];
    assert_true(sd[i] == 2.0f * l[i]);
  }
  assert_true(tu_residual(ld, a, n) < 1e-5);
  free(a);
  free(af);
  free(l);
  free(sd);
  free(ld);
}

/* gemm on strided tiles with both transposes and accumulation, against a plain loop. */
static void test_gemm_tiles(void **state) {
  tu_fixture *f = *state;
  const int64_t n = 12;
  int64_t shape[2] = {n, n};
  weft_tensor *x;
  CHECK(weft_tensor_create(f->g, "X", WEFT_F64, 2, shape, weft_cpu(), weft_uniform(-1, 1, 5), &x));
  double x0[144];
  CHECK(weft_tensor_read(x, x0, sizeof x0));
  CHECK(weft_tensor_tiles(f->g, x, 4, 4));
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      CHECK(weft_gemm(f->g, weft_tensor_tile(x, 0, 1), ta, weft_tensor_tile(x, 2, 0), tb, 0.5, -1.0,
                      weft_tensor_tile(x, 1, 2)));
  CHECK(weft_graph_run(f->g));
  double x1[144], c[16];
  CHECK(weft_tensor_read(x, x1, sizeof x1));
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) c[i * 4 + j] = x0[(4 + i) * n + 8 + j];
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      double r[16];
      for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
          double s = 0;
          for (int k = 0; k < 4; k++) {
            double av = ta ? x0[k * n + 4 + i] : x0[i * n + 4 + k];          /* A = X[0,1] */
            double bv = tb ? x0[(8 + j) * n + k] : x0[(8 + k) * n + j];      /* B = X[2,0] */
            s += av * bv;
          }
          r[i * 4 + j] = 0.5 * s - c[i * 4 + j];
        }
      memcpy(c, r, sizeof r);
    }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      int in_c = i >= 4 && i < 8 && j >= 8;
      double want = in_c ? c[(i - 4) * 4 + j - 8] : x0[i * n + j];
      assert_true(fabs(x1[i * n + j] - want) < 1e-12);
    }
  /* A tile reads back as its own elements, row-major and contiguous. */
  double t[16];
  CHECK(weft_tensor_read(weft_tensor_tile(x, 1, 2), t, sizeof t));
  for (int i = 0; i < 16; i++) assert_true(t[i] == x1[(4 + i / 4) * n + 8 + i % 4]);
  double v;
  CHECK(weft_tensor_get(weft_tensor_tile(x, 1, 2), 5, &v));
  assert_true(v == x1[5 * n + 9]);
  /* Writing a tile changes its elements of the whole and no other. */
  double w[16];
  for (int i = 0; i < 16; i++) w[i] = 100 + i;
  CHECK(weft_tensor_write(weft_tensor_tile(x, 1, 2), w, sizeof w));
  double x2[144];
  CHECK(weft_tensor_read(x, x2, sizeof x2));
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      assert_true(x2[i * n + j] == (i >= 4 && i < 8 && j >= 8 ? w[(i - 4) * 4 + j - 8] : x1[i * n + j]));
}

/* out = b op(T) (right) or op(T) b (left) for 3 x 3 matrices, T the lower (up: upper) triangle
 * of l. */
static void tri_product(const double *l, const double *b, int side, int tr, int up, double *out) {
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      double s = 0;
      for (int k = 0; k < 3; k++) {
        int r = side ? (tr ? j : k) : (tr ? k : i), c = side ? (tr ? k : j) : (tr ? i : k); /* op(L)'s element */
        double lv = (up ? c >= r : c <= r) ? l[r * 3 + c] : 0;
        s += side ? b[i * 3 + k] * lv : lv * b[k * 3 + j];
      }
      out[i * 3 + j] = s;
    }
}

/* x = what trsm (solve) or trmm does to b0 with l, on the CPU. */
static void triangular(tu_fixture *f, int solve, int side, int tr, int up, double alpha, const double *l,
                       const double *b0, double *x) {
  int64_t shape[2] = {3, 3};
  weft_tensor *lt, *bt;
  CHECK(weft_tensor_create(f->g, NULL, WEFT_F64, 2, shape, weft_cpu(), weft_zeros(), &lt));
  CHECK(weft_tensor_create(f->g, NULL, WEFT_F64, 2, shape, weft_cpu(), weft_zeros(), &bt));
  CHECK(weft_tensor_write(lt, l, 9 * sizeof *l));
  CHECK(weft_tensor_write(bt, b0, 9 * sizeof *b0));
  weft_side sd = side ? WEFT_RIGHT : WEFT_LEFT;
  weft_uplo u = up ? WEFT_UPPER : WEFT_LOWER;
  CHECK(solve ? weft_trsm(f->g, sd, u, tr, alpha, lt, bt) : weft_trmm(f->g, sd, u, tr, alpha, lt, bt));
  CHECK(weft_graph_run(f->g));
  CHECK(weft_tensor_read(bt, x, 9 * sizeof *x));
}

/* trsm on each side, with and without the transpose, with a lower and an upper triangle (the
 * other strict triangle holds values that must not be read): B op(T) (right) or op(T) B (left)
 * gives back the B it started from. syrk, both triangles and both orientations, against a
 * plain loop. */
static void test_trsm_syrk(void **state) {
  tu_fixture *f = *state;
  double l[9] = {2, 99, 99, 1, 3, 99, -1, 0.5, 4}, u[9], b0[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9.5};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) u[j * 3 + i] = l[i * 3 + j];
  int64_t shape[2] = {3, 3};
  for (int up = 0; up < 2; up++)
    for (int side = 0; side < 2; side++)
      for (int tr = 0; tr < 2; tr++) {
        double x[9], back[9];
        triangular(f, 1, side, tr, up, 2.0, up ? u : l, b0, x);
        tri_product(up ? u : l, x, side, tr, up, back);
        for (int i = 0; i < 9; i++) assert_true(fabs(back[i] - 2.0 * b0[i]) < 1e-12);
      }
  double a[6] = {1, 2, -1, 0.5, 3, 1}, c0[9] = {1, 9, 9, 2, 1, 9, 3, 4, 1};
  for (int up = 0; up < 2; up++)
    for (int tr = 0; tr < 2; tr++) {
      /* a is 3 x 2 (c = a a^T) or 2 x 3 (c = a^T a): a[r][k] of op's 3 rows at ak[r * 2 + k] */
      int64_t as[2] = {tr ? 2 : 3, tr ? 3 : 2};
      double ak[6];
      for (int r = 0; r < 3; r++)
        for (int k = 0; k < 2; k++) ak[r * 2 + k] = tr ? a[k * 3 + r] : a[r * 2 + k];
      weft_tensor *at, *ct;
      CHECK(weft_tensor_create(f->g, NULL, WEFT_F64, 2, as, weft_cpu(), weft_zeros(), &at));
      CHECK(weft_tensor_create(f->g, NULL, WEFT_F64, 2, shape, weft_cpu(), weft_zeros(), &ct));
      CHECK(weft_tensor_write(at, a, sizeof a));
      CHECK(weft_tensor_write(ct, c0, sizeof c0));
      CHECK(weft_syrk(f->g, up ? WEFT_UPPER : WEFT_LOWER, tr, 2.0, at, -1.0, ct));
      CHECK(weft_graph_run(f->g));
      double c[9];
      CHECK(weft_tensor_read(ct, c, sizeof c));
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
          int in = up ? j >= i : j <= i;
          double want = in ? 2.0 * (ak[i * 2] * ak[j * 2] + ak[i * 2 + 1] * ak[j * 2 + 1]) - c0[i * 3 + j] : c0[i * 3 + j];
          assert_true(fabs(c[i * 3 + j] - want) < 1e-12);
        }
    }
}

/* The tiled Cholesky of the upper triangle (A = U^T U, tiles of 128 over 300: a ragged edge):
 * its residual, and the strict lower triangle left as it was. */
static void test_cholesky_upper(void **state) {
  (void)state;
  const int64_t n = 300;
  double *a = tu_spd(n, 3);
  weft_runtime *rt = tu_runtime(2);
  weft_graph *g = tu_graph(rt);
  weft_tensor *x;
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){n, n}, weft_cpu(), weft_zeros(), &x));
  CHECK(weft_tensor_write(x, a, (size_t)(n * n) * sizeof(double)));
  CHECK(tu_cholesky_upper(g, x, 128));
  CHECK(weft_graph_run(g));
  double *u = malloc((size_t)(n * n) * sizeof *u);
  CHECK(weft_tensor_read(x, u, (size_t)(n * n) * sizeof(double)));
  double *l = tu_transpose(u, n);
  assert_true(tu_residual(l, a, n) < 1e-13);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < i; j++) assert_true(u[i * n + j] == a[i * n + j]);
  free(a);
  free(u);
  free(l);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* trmm on each side, with and without the transpose, against a plain loop over the lower
 * (upper) triangle: the other strict triangle holds values that must not be read. */
static void test_trmm(void **state) {
  tu_fixture *f = *state;
  double l[9] = {2, 99, 99, 1, 3, 99, -1, 0.5, 4}, u[9], b0[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9.5};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) u[j * 3 + i] = l[i * 3 + j];
  for (int up = 0; up < 2; up++)
    for (int side = 0; side < 2; side++)
      for (int tr = 0; tr < 2; tr++) {
        double x[9], want[9];
        triangular(f, 0, side, tr, up, -0.5, up ? u : l, b0, x);
        tri_product(up ? u : l, b0, side, tr, up, want);
        for (int i = 0; i < 9; i++) assert_true(fabs(x[i] - -0.5 * want[i]) < 1e-12);
      }
}

/* trtri, lower and upper, f64 and f32, from a strided tile into another (its other strict
 * triangle holding values that must not be read; W's tile full of 7 before): T W = I, W's other
 * strict triangle zero. Zeros on the diagonal fail the run, naming the node, the tile and the
 * first zero's row, in each of two runs. */
static void test_trtri(void **state) {
  tu_fixture *f = *state;
  const int64_t n = 150;
  for (int upper = 0; upper < 2; upper++)
    for (int dt = 0; dt < 2; dt++) {
      int status;
      double *w = tu_trtri(f->rt, weft_cpu(), dt ? WEFT_F64 : WEFT_F32, n, upper, -1, 1, &status);
      assert_int_equal(status, WEFT_OK);
      assert_true(tu_trtri_error(w, n, upper) < (dt ? 1e-13 : 1e-5));
      free(w);
    }
  for (int upper = 0; upper < 2; upper++) {
    int status;
    free(tu_trtri(f->rt, weft_cpu(), WEFT_F64, n, upper, 70, 2, &status)); /* zeros at rows 70 and 100 */
    assert_int_equal(status, WEFT_EKERNEL);
    const char *e = weft_last_error();
    assert_non_null(strstr(e, "trtri"));
    assert_non_null(strstr(e, "T[1,0]"));
    assert_non_null(strstr(e, "singular: its diagonal element 71 is zero"));
  }
}

/* Tiles of one tensor are independent; the whole tensor orders after (and before) each. */
static void test_tile_dependencies(void **state) {
  tu_fixture *f = *state;
  int64_t shape[2] = {4, 4};
  weft_tensor *x, *s = NULL;
  CHECK(weft_tensor_create(f->g, "X", WEFT_F64, 2, shape, weft_cpu(), weft_ones(), &x));
  CHECK(weft_tensor_tiles(f->g, x, 2, 2));
  CHECK(weft_fill(f->g, x, weft_full(3)));                      /* node 0: the whole */
  CHECK(weft_potrf(f->g, WEFT_LOWER, weft_tensor_tile(x, 0, 0)));           /* 1 */
  CHECK(weft_potrf(f->g, WEFT_LOWER, weft_tensor_tile(x, 1, 1)));           /* 2: apart from 1 */
  CHECK(weft_sum(f->g, x, &s));                                 /* 3: after 1 and 2 */
  CHECK(weft_graph_analyse(f->g));
  int e[4][4] = {{0}};
  for (size_t i = 0; i < weft_graph_edge_count(f->g); i++) {
    weft_edge ed;
    CHECK(weft_graph_edge(f->g, i, &ed));
    e[weft_node_id(ed.from)][weft_node_id(ed.to)] = 1;
  }
  assert_true(e[0][1] && e[0][2] && e[1][3] && e[2][3]);
  assert_false(e[1][2]);
}

static void test_bad_input(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  int64_t s2[2] = {6, 6}, s3[3] = {2, 2, 2}, s23[2] = {2, 3};
  weft_tensor *x, *y, *cube, *r = NULL;
  CHECK(weft_tensor_create(g, "X", WEFT_F64, 2, s2, weft_cpu(), weft_zeros(), &x));
  CHECK(weft_tensor_create(g, "C", WEFT_F64, 3, s3, weft_cpu(), weft_zeros(), &cube));
  CHECK(weft_tensor_create(g, "Y", WEFT_F32, 2, s23, weft_cpu(), weft_zeros(), &y));
  assert_int_equal(weft_tensor_tiles(g, cube, 1, 1), WEFT_ESHAPE);
  assert_non_null(strstr(weft_last_error(), "C"));
  assert_int_equal(weft_tensor_tiles(g, x, 0, 2), WEFT_ESHAPE);
  assert_null(weft_tensor_tile(x, 0, 0)); /* not partitioned */
  CHECK(weft_tensor_tiles(g, x, 4, 4));   /* 2 x 2 tiles, ragged */
  assert_int_equal(weft_tensor_tile_count(x, 0), 2);
  assert_int_equal(weft_tensor_dim(weft_tensor_tile(x, 1, 1), 0), 2);
  assert_null(weft_tensor_tile(x, 2, 0));
  assert_ptr_equal(weft_tensor_parent(weft_tensor_tile(x, 1, 0)), x);
  assert_int_equal(weft_tensor_tiles(g, x, 2, 2), WEFT_ESTATE);
  assert_non_null(strstr(weft_last_error(), "already partitioned"));
  assert_int_equal(weft_tensor_tiles(g, weft_tensor_tile(x, 0, 0), 2, 2), WEFT_ESTATE);
  assert_non_null(strstr(weft_last_error(), "is a tile"));
  size_t nodes = weft_graph_node_count(g);
  /* A strided tile reaches only the linear-algebra ops. */
  assert_int_equal(weft_relu(g, weft_tensor_tile(x, 0, 0), &r), WEFT_ESHAPE);
  assert_non_null(strstr(weft_last_error(), "X[0,0]"));
  assert_non_null(strstr(weft_last_error(), "strided tile"));
  /* Shapes, dtypes, overlap. */
  assert_int_equal(weft_potrf(g, WEFT_LOWER, y), WEFT_ESHAPE);
  assert_non_null(strstr(weft_last_error(), "square"));
  assert_int_equal(weft_gemm(g, weft_tensor_tile(x, 0, 0), 0, y, 0, 1, 0, weft_tensor_tile(x, 1, 1)), WEFT_ESHAPE);
  assert_int_equal(weft_gemm(g, weft_tensor_tile(x, 0, 1), 0, weft_tensor_tile(x, 0, 0), 0, 1, 0, weft_tensor_tile(x, 0, 1)),
                   WEFT_ESHAPE); /* 4x2 . 4x4: inner dimensions differ */
  assert_int_equal(weft_gemm(g, weft_tensor_tile(x, 0, 0), 0, weft_tensor_tile(x, 0, 0), 0, 1, 0, weft_tensor_tile(x, 0, 0)),
                   WEFT_EINVAL);
  assert_non_null(strstr(weft_last_error(), "share elements"));
  assert_int_equal(weft_syrk(g, WEFT_LOWER, 0, 1, x, 1, weft_tensor_tile(x, 0, 0)), WEFT_ESHAPE);
  assert_int_equal(weft_trsm(g, (weft_side)7, WEFT_LOWER, 0, 1, weft_tensor_tile(x, 0, 0), weft_tensor_tile(x, 1, 0)), WEFT_EINVAL);
  assert_int_equal(weft_trsm(g, WEFT_RIGHT, WEFT_LOWER, 0, 1, weft_tensor_tile(x, 0, 0), weft_tensor_tile(x, 1, 1)), WEFT_ESHAPE);
  assert_int_equal(weft_potrf(g, WEFT_LOWER, cube), WEFT_ESHAPE);
  /* trtri: W must have T's shape, T be square, the two apart, one dtype. */
  assert_int_equal(weft_trtri(g, WEFT_LOWER, weft_tensor_tile(x, 0, 0), weft_tensor_tile(x, 1, 1)), WEFT_ESHAPE);
  assert_non_null(strstr(weft_last_error(), "w must have t's shape"));
  assert_int_equal(weft_trtri(g, WEFT_LOWER, weft_tensor_tile(x, 1, 0), weft_tensor_tile(x, 0, 1)), WEFT_ESHAPE);
  assert_non_null(strstr(weft_last_error(), "square"));
  assert_int_equal(weft_trtri(g, WEFT_UPPER, weft_tensor_tile(x, 0, 0), weft_tensor_tile(x, 0, 0)), WEFT_EINVAL);
  assert_non_null(strstr(weft_last_error(), "share elements"));
  assert_int_equal(weft_trtri(g, (weft_uplo)5, weft_tensor_tile(x, 0, 0), weft_tensor_tile(x, 1, 1)), WEFT_EINVAL);
  assert_non_null(strstr(weft_last_error(), "uplo 5"));
  weft_tensor *y22;
  CHECK(weft_tensor_create(g, "Y22", WEFT_F32, 2, (int64_t[]){2, 2}, weft_cpu(), weft_zeros(), &y22));
  assert_int_equal(weft_trtri(g, WEFT_LOWER, weft_tensor_tile(x, 1, 1), y22), WEFT_EDTYPE);
  assert_int_equal(weft_trtri(NULL, WEFT_LOWER, x, x), WEFT_EINVAL);
  assert_int_equal(weft_potrf(g, (weft_uplo)2, weft_tensor_tile(x, 0, 0)), WEFT_EINVAL);
  assert_non_null(strstr(weft_last_error(), "uplo 2 is neither WEFT_LOWER nor WEFT_UPPER"));
  assert_int_equal(weft_syrk(g, (weft_uplo)-1, 0, 1, weft_tensor_tile(x, 0, 1), 1, weft_tensor_tile(x, 0, 0)), WEFT_EINVAL);
  /* syrk with trans: c = a^T a needs a's columns to be c's side (a 4 x 2 tile gives 2 x 2, not 4 x 4) */
  assert_int_equal(weft_syrk(g, WEFT_UPPER, 1, 1, weft_tensor_tile(x, 0, 1), 1, weft_tensor_tile(x, 0, 0)), WEFT_ESHAPE);
  assert_non_null(strstr(weft_last_error(), "columns (trans)"));
  int64_t s44[2] = {4, 4};
  weft_tensor *f32;
  CHECK(weft_tensor_create(g, "F", WEFT_F32, 2, s44, weft_cpu(), weft_zeros(), &f32));
  assert_int_equal(weft_gemm(g, weft_tensor_tile(x, 0, 0), 0, weft_tensor_tile(x, 0, 0), 0, 1, 0, f32), WEFT_EDTYPE);
  assert_int_equal(weft_graph_node_count(g), nodes); /* nothing added */
}

/* A potrf of a matrix that is not positive definite fails the run, naming the node and the
 * tile; the nodes after it do not run. */
static void test_potrf_not_spd(void **state) {
  tu_fixture *f = *state;
  int64_t shape[2] = {4, 4};
  weft_tensor *x;
  CHECK(weft_tensor_create(f->g, "M", WEFT_F64, 2, shape, weft_cpu(), weft_full(1), &x));
  CHECK(tu_cholesky(f->g, x, 2)); /* all ones: the minor of order 2 is 0 */
  assert_int_equal(weft_graph_run(f->g), WEFT_EKERNEL);
  const char *e = weft_last_error();
  assert_non_null(strstr(e, "potrf"));
  assert_non_null(strstr(e, "M[0,0]"));
  assert_non_null(strstr(e, "not positive definite"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cholesky_f64),
      cmocka_unit_test(test_cholesky_upper),
      cmocka_unit_test(test_cholesky_over_gpus),
      cmocka_unit_test(test_strided_tiles_are_copied),
      cmocka_unit_test_setup_teardown(test_cholesky_f32_and_whole_tensor_after_tiles, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gemm_tiles, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_trsm_syrk, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_trmm, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_trtri, tu_setup, tu_teardown),
      cmocka_unit_test(test_tiles_take_their_parents_memory),
      cmocka_unit_test_setup_teardown(test_tile_dependencies, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_bad_input, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_potrf_not_spd, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
