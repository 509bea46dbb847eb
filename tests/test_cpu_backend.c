/* test_cpu_backend.c — src/backends/cpu: every built-in kernel against a naive double-precision
 * reference within tolerance (mm and linear through OpenBLAS, elementwise ops, reductions,
 * copies), in-place results and aliasing, zero-size tensors, the fills (same seed, same values;
 * other seeds differ; uniform within bounds; normal with the right mean and deviation; the
 * documented Philox formula; a fill node applies on every run), and what a user kernel sees
 * through its context. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "backends/backend.h"
#include "util/philox.h"

/* (cblas.h for a reference product computed in one BLAS call.) */
#include <cblas.h>

/* A fresh graph for each case keeps the cases independent. */
static weft_graph *fresh(tu_fixture *f) {
  weft_graph_destroy(f->g);
  CHECK(weft_graph_create(f->rt, &f->g));
  return f->g;
}

static double *alloc_doubles(int64_t n) {
  double *p = calloc((size_t)(n > 0 ? n : 1), sizeof *p);
  assert_non_null(p);
  return p;
}

/* The tensor's contents as doubles (a new array). */
static double *contents(weft_tensor *t) {
  double *p = alloc_doubles(weft_tensor_numel(t));
  tu_read_doubles(t, p);
  return p;
}

/* |got - want| <= tol * scale for every element; reports the first that is not. */
static void assert_close(const double *got, const double *want, const double *scale, int64_t n,
                         double tol, const char *what) {
  for (int64_t i = 0; i < n; i++) {
    double s = scale != NULL ? scale[i] : fabs(want[i]);
    if (!(fabs(got[i] - want[i]) <= tol * (s + 1e-30) || got[i] == want[i]))
      fail_msg("%s: element %lld is %.17g, expected %.17g (tolerance %g x %g)", what, (long long)i,
               got[i], want[i], tol, s);
  }
}

static double tol_of(weft_dtype dt) { return dt == WEFT_F32 ? 2e-6 : 1e-13; }

/* ---- mm and linear ------------------------------------------------------------------------ */

/* C = A . op(B), op(B) = B or B^T; scale[i] = sum |a||b| bounds the rounding error. */
static void ref_gemm(const double *a, const double *b, int64_t m, int64_t k, int64_t n, int transb,
                     double *c, double *scale) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0, s = 0;
      for (int64_t p = 0; p < k; p++) {
        double bv = transb ? b[j * k + p] : b[p * n + j];
        acc += a[i * k + p] * bv;
        s += fabs(a[i * k + p] * bv);
      }
      c[i * n + j] = acc;
      scale[i * n + j] = s;
    }
}

static void mm_against_reference(void **state) {
  tu_fixture *f = *state;
  static const int64_t dims[] = {0, 1, 3, 7, 17, 64};
  enum { ND = sizeof dims / sizeof dims[0] };
  uint64_t seed = 1;
  for (int dt = WEFT_F32; dt <= WEFT_F64; dt++)
    for (int im = 0; im < ND; im++)
      for (int ik = 0; ik < ND; ik++)
        for (int in = 0; in < ND; in++) {
          int64_t m = dims[im], k = dims[ik], n = dims[in];
          if ((im + ik + in) % 2 == 1 && m * k * n > 0) continue; /* half of the non-empty cases */
          weft_graph *g = fresh(f);
          weft_tensor *a = tu_tensor(g, "a", dt, 2, (int64_t[]){m, k}, weft_uniform(-1, 1, seed++));
          weft_tensor *b = tu_tensor(g, "b", dt, 2, (int64_t[]){k, n}, weft_uniform(-1, 1, seed++));
          /* The result starts as ones, so a k = 0 product must really write its zeros. */
          weft_tensor *c = tu_tensor(g, "c", dt, 2, (int64_t[]){m, n}, weft_ones());
          CHECK(weft_mm(g, a, b, &c));
          CHECK(weft_graph_run(g));
          double *av = contents(a), *bv = contents(b), *cv = contents(c);
          double *want = alloc_doubles(m * n), *scale = alloc_doubles(m * n);
          ref_gemm(av, bv, m, k, n, 0, want, scale);
          char what[64];
          snprintf(what, sizeof what, "mm %s [%lld,%lld]x[%lld,%lld]", weft_dtype_name(dt),
                   (long long)m, (long long)k, (long long)k, (long long)n);
          assert_close(cv, want, scale, m * n, tol_of(dt) * 4, what);
          free(av);
          free(bv);
          free(cv);
          free(want);
          free(scale);
        }
}

/* A result that is also an input is computed from the inputs' old values. */
static void mm_in_place(void **state) {
  tu_fixture *f = *state;
  for (int dt = WEFT_F32; dt <= WEFT_F64; dt++)
    for (int which = 0; which < 3; which++) { /* out = a, out = b, a = b = out */
      weft_graph *g = fresh(f);
      int64_t n = 9;
      weft_tensor *a = tu_tensor(g, "a", dt, 2, (int64_t[]){n, n}, weft_uniform(-1, 1, 5));
      weft_tensor *b = which == 2 ? a : tu_tensor(g, "b", dt, 2, (int64_t[]){n, n}, weft_uniform(-1, 1, 6));
      double *av = contents(a), *bv = contents(b);
      double *want = alloc_doubles(n * n), *scale = alloc_doubles(n * n);
      ref_gemm(av, bv, n, n, n, 0, want, scale);
      weft_tensor *out = which == 1 ? b : a;
      CHECK(weft_mm(g, a, b, &out));
      CHECK(weft_graph_run(g));
      double *got = contents(out);
      assert_close(got, want, scale, n * n, tol_of(dt) * 4, "mm in place");
      /* Run again: the product of the new values. */
      double *a2 = contents(a), *b2 = contents(b);
      ref_gemm(a2, b2, n, n, n, 0, want, scale);
      CHECK(weft_graph_run(g));
      free(got);
      got = contents(out);
      assert_close(got, want, scale, n * n, tol_of(dt) * 4, "mm in place, second run");
      free(av);
      free(bv);
      free(a2);
      free(b2);
      free(got);
      free(want);
      free(scale);
    }
}

static void linear_against_reference(void **state) {
  tu_fixture *f = *state;
  static const int64_t shapes[][3] = {{4, 3, 5}, {1, 1, 1}, {0, 3, 2}, {3, 0, 2}, {5, 7, 0}, {33, 20, 9}};
  uint64_t seed = 100;
  for (int dt = WEFT_F32; dt <= WEFT_F64; dt++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int bias = 0; bias < 2; bias++) {
        int64_t rows = shapes[s][0], in = shapes[s][1], outs = shapes[s][2];
        weft_graph *g = fresh(f);
        weft_tensor *x = tu_tensor(g, "x", dt, 2, (int64_t[]){rows, in}, weft_uniform(-1, 1, seed++));
        weft_tensor *w = tu_tensor(g, "w", dt, 2, (int64_t[]){outs, in}, weft_normal(0, 1, seed++));
        weft_tensor *b = bias ? tu_tensor(g, "b", dt, 1, (int64_t[]){outs}, weft_uniform(-3, 3, seed++)) : NULL;
        weft_tensor *y = tu_tensor(g, "y", dt, 2, (int64_t[]){rows, outs}, weft_full(7));
        CHECK(weft_linear(g, x, w, b, &y));
        CHECK(weft_graph_run(g));
        double *xv = contents(x), *wv = contents(w), *bv = b ? contents(b) : NULL, *yv = contents(y);
        double *want = alloc_doubles(rows * outs), *scale = alloc_doubles(rows * outs);
        ref_gemm(xv, wv, rows, in, outs, 1, want, scale);
        for (int64_t r = 0; r < rows; r++)
          for (int64_t c = 0; c < outs; c++)
            if (bv != NULL) {
              want[r * outs + c] += bv[c];
              scale[r * outs + c] += fabs(bv[c]);
            }
        assert_close(yv, want, scale, rows * outs, tol_of(dt) * 4, "linear");
        free(xv);
        free(wv);
        free(bv);
        free(yv);
        free(want);
        free(scale);
      }
  /* In place: x [6,4] . w[4,4]^T + b into x. */
  weft_graph *g = fresh(f);
  weft_tensor *x = tu_tensor(g, "x", WEFT_F64, 2, (int64_t[]){6, 4}, weft_uniform(-1, 1, 1));
  weft_tensor *w = tu_tensor(g, "w", WEFT_F64, 2, (int64_t[]){4, 4}, weft_uniform(-1, 1, 2));
  weft_tensor *b = tu_tensor(g, "b", WEFT_F64, 1, (int64_t[]){4}, weft_uniform(-1, 1, 3));
  double *xv = contents(x), *wv = contents(w), *bv = contents(b);
  double want[24], scale[24];
  ref_gemm(xv, wv, 6, 4, 4, 1, want, scale);
  for (int i = 0; i < 24; i++) want[i] += bv[i % 4];
  weft_tensor *out = x;
  CHECK(weft_linear(g, x, w, b, &out));
  CHECK(weft_graph_run(g));
  double got[24];
  tu_read_doubles(x, got);
  assert_close(got, want, scale, 24, 1e-13, "linear in place");
  free(xv);
  free(wv);
  free(bv);
}

/* ---- elementwise ops, reductions, copies -------------------------------------------------- */

enum { OP_ADD, OP_SUB, OP_MUL, OP_SCALE, OP_RELU, N_ELEM };

static double ref_elem(int op, double a, double b, double alpha, weft_dtype dt) {
  switch (op) {
    case OP_ADD:
      return a + b;
    case OP_SUB:
      return a - b;
    case OP_MUL:
      return a * b;
    case OP_SCALE:
      return (dt == WEFT_F32 ? (double)(float)alpha : alpha) * a;
    default:
      return a > 0 ? a : 0;
  }
}

static int add_elem(weft_graph *g, int op, weft_tensor *a, weft_tensor *b, double alpha, weft_tensor **out) {
  switch (op) {
    case OP_ADD:
      return weft_add(g, a, b, out);
    case OP_SUB:
      return weft_sub(g, a, b, out);
    case OP_MUL:
      return weft_mul(g, a, b, out);
    case OP_SCALE:
      return weft_scale(g, a, alpha, out);
    default:
      return weft_relu(g, a, out);
  }
}

static void elementwise_against_reference(void **state) {
  tu_fixture *f = *state;
  static const int64_t shapes[][5] = {
      {0}, {1, 9}, {2, 4, 5}, {3, 2, 3, 4}, {4, 2, 1, 3, 2}, {1, 0}, {2, 3, 0}, {1, 1000},
  };
  uint64_t seed = 1000;
  for (int dt = WEFT_F32; dt <= WEFT_F64; dt++)
    for (int op = 0; op < N_ELEM; op++)
      for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int mode = 0; mode < 4; mode++) { /* new, out = a, out = b, a = b = out */
          int nd = (int)shapes[s][0];
          const int64_t *sh = &shapes[s][1];
          weft_graph *g = fresh(f);
          weft_tensor *a = tu_tensor(g, "a", dt, nd, sh, weft_uniform(-2, 2, seed++));
          weft_tensor *b = mode == 3 ? a : tu_tensor(g, "b", dt, nd, sh, weft_uniform(-2, 2, seed++));
          double alpha = -1.37;
          double *av = contents(a), *bv = contents(b);
          int64_t n = weft_tensor_numel(a);
          double *want = alloc_doubles(n);
          for (int64_t i = 0; i < n; i++) want[i] = ref_elem(op, av[i], bv[i], alpha, dt);
          weft_tensor *out = mode == 0 ? NULL : mode == 2 ? b : a;
          if (mode == 2 && op >= OP_SCALE) out = a; /* unary ops have no b */
          CHECK(add_elem(g, op, a, b, alpha, &out));
          CHECK(weft_graph_run(g));
          double *got = contents(out);
          char what[64];
          snprintf(what, sizeof what, "elementwise op %d %s mode %d", op, weft_dtype_name(dt), mode);
          assert_close(got, want, NULL, n, dt == WEFT_F32 ? 1.2e-7 : 0, what);
          free(av);
          free(bv);
          free(want);
          free(got);
        }
}

static void reductions_against_reference(void **state) {
  tu_fixture *f = *state;
  static const int64_t shapes[][4] = {{0}, {1, 1}, {1, 1000}, {2, 30, 30}, {3, 4, 0, 2}, {1, 0}};
  uint64_t seed = 2000;
  for (int dt = WEFT_F32; dt <= WEFT_F64; dt++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int norm = 0; norm < 2; norm++) {
        weft_graph *g = fresh(f);
        weft_tensor *x = tu_tensor(g, "x", dt, (int)shapes[s][0], &shapes[s][1], weft_normal(0.5, 2, seed++));
        weft_tensor *r = tu_tensor(g, "r", dt, 0, NULL, weft_full(99)); /* overwritten */
        CHECK(norm ? weft_norm(g, x, &r) : weft_sum(g, x, &r));
        CHECK(weft_graph_run(g));
        double *xv = contents(x), got;
        int64_t n = weft_tensor_numel(x);
        double acc = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
          acc += norm ? xv[i] * xv[i] : xv[i];
          mag += fabs(xv[i]);
        }
        double want = norm ? sqrt(acc) : acc;
        tu_read_doubles(r, &got);
        assert_close(&got, &want, norm ? NULL : &mag, 1, dt == WEFT_F32 ? 1.2e-7 : 1e-15,
                     norm ? "norm" : "sum");
        free(xv);
      }
  /* Reductions accumulate in double, for f32 too: 1e8 + 1000 ones - 1e8 is 1000. */
  weft_graph *g = fresh(f);
  double v[1002];
  v[0] = 1e8;
  for (int i = 1; i <= 1000; i++) v[i] = 1;
  v[1001] = -1e8;
  weft_tensor *x = tu_tensor(g, "x", WEFT_F32, 1, (int64_t[]){1002}, weft_zeros());
  tu_write_doubles(x, v);
  weft_tensor *s = NULL, *s0 = tu_tensor(g, "s0", WEFT_F32, 0, NULL, weft_full(4));
  CHECK(weft_sum(g, x, &s));
  CHECK(weft_sum(g, s0, &s0)); /* a scalar into itself */
  weft_tensor *nrm = s0;
  CHECK(weft_norm(g, s0, &nrm));
  CHECK(weft_graph_run(g));
  double got;
  tu_read_doubles(s, &got);
  assert_true(got == 1000.0);
  tu_read_doubles(s0, &got);
  assert_true(got == 4.0);
}

static void copies(void **state) {
  tu_fixture *f = *state;
  for (int dt = WEFT_F32; dt <= WEFT_F64; dt++) {
    weft_graph *g = fresh(f);
    weft_tensor *a = tu_tensor(g, "a", dt, 3, (int64_t[]){2, 3, 4}, weft_uniform(-5, 5, 9));
    weft_tensor *z = tu_tensor(g, "z", dt, 2, (int64_t[]){0, 4}, weft_zeros());
    weft_tensor *c = NULL, *into = tu_tensor(g, "into", dt, 3, (int64_t[]){2, 3, 4}, weft_zeros());
    weft_tensor *self = a, *zc = NULL;
    CHECK(weft_copy(g, a, weft_cpu(), &c));
    CHECK(weft_copy(g, a, weft_cpu(), &into));
    CHECK(weft_copy(g, a, weft_cpu(), &self));
    CHECK(weft_copy(g, z, weft_cpu(), &zc));
    CHECK(weft_graph_run(g));
    size_t bytes = weft_tensor_bytes(a);
    unsigned char *x = malloc(bytes), *y = malloc(bytes);
    CHECK(weft_tensor_read(a, x, bytes));
    CHECK(weft_tensor_read(c, y, bytes));
    assert_memory_equal(x, y, bytes); /* bit for bit */
    CHECK(weft_tensor_read(into, y, bytes));
    assert_memory_equal(x, y, bytes);
    assert_int_equal(weft_tensor_bytes(zc), 0);
    free(x);
    free(y);
  }
}

/* ---- fills -------------------------------------------------------------------------------- */

static void fills(void **state) {
  tu_fixture *f = *state;
  enum { N = 200000 };
  weft_graph *g = fresh(f);
  int64_t sh[1] = {N};
  weft_tensor *u1 = tu_tensor(g, "u1", WEFT_F64, 1, sh, weft_zeros());
  weft_tensor *u2 = tu_tensor(g, "u2", WEFT_F64, 1, sh, weft_zeros());
  weft_tensor *u3 = tu_tensor(g, "u3", WEFT_F64, 1, sh, weft_zeros());
  weft_tensor *uf = tu_tensor(g, "uf", WEFT_F32, 1, sh, weft_zeros());
  weft_tensor *nr = tu_tensor(g, "nr", WEFT_F64, 1, sh, weft_zeros());
  weft_tensor *nf = tu_tensor(g, "nf", WEFT_F32, 1, sh, weft_zeros());
  weft_tensor *fl = tu_tensor(g, "fl", WEFT_F32, 2, (int64_t[]){3, 3}, weft_zeros());
  weft_tensor *on = tu_tensor(g, "on", WEFT_F64, 0, NULL, weft_zeros());
  weft_tensor *ze = tu_tensor(g, "ze", WEFT_F64, 1, (int64_t[]){5}, weft_ones());
  weft_tensor *em = tu_tensor(g, "em", WEFT_F64, 1, (int64_t[]){0}, weft_zeros());
  CHECK(weft_fill(g, u1, weft_uniform(-2, 3, 42)));
  CHECK(weft_fill(g, u2, weft_uniform(-2, 3, 42)));
  CHECK(weft_fill(g, u3, weft_uniform(-2, 3, 43)));
  CHECK(weft_fill(g, uf, weft_uniform(-2, 3, 42)));
  CHECK(weft_fill(g, nr, weft_normal(1.5, 0.5, 7)));
  CHECK(weft_fill(g, nf, weft_normal(1.5, 0.5, 7)));
  CHECK(weft_fill(g, fl, weft_full(-0.125)));
  CHECK(weft_fill(g, on, weft_ones()));
  CHECK(weft_fill(g, ze, weft_zeros()));
  CHECK(weft_fill(g, em, weft_normal(0, 1, 1)));
  CHECK(weft_graph_run(g));
  double *a = contents(u1), *b = contents(u2), *c = contents(u3), *d = contents(uf);
  double *n1 = contents(nr), *n2 = contents(nf);
  assert_memory_equal(a, b, N * sizeof(double)); /* same seed, same values */
  int same = 0;
  double sum = 0, lo = 1e9, hi = -1e9;
  for (int i = 0; i < N; i++) {
    assert_true(a[i] >= -2 && a[i] < 3);
    same += a[i] == c[i];
    assert_true(d[i] == (double)(float)a[i]); /* f32 is the f64 value rounded once */
    double u1v, u2v;
    weft__philox_uniform2((uint64_t)i, 42, &u1v, &u2v);
    assert_true(a[i] == -2 + 5 * u1v); /* the documented formula, exactly */
    sum += a[i];
    lo = a[i] < lo ? a[i] : lo;
    hi = a[i] > hi ? a[i] : hi;
  }
  assert_true(same < 3);
  assert_true(fabs(sum / N - 0.5) < 0.02);
  assert_true(lo < -1.99 && hi > 2.99); /* the whole range is covered */
  double m1 = 0, m2 = 0;
  for (int i = 0; i < N; i++) {
    m1 += n1[i];
    m2 += n1[i] * n1[i];
    assert_true(n2[i] == (double)(float)n1[i]);
  }
  m1 /= N;
  double sd = sqrt(m2 / N - m1 * m1);
  assert_true(fabs(m1 - 1.5) < 0.01);
  assert_true(fabs(sd - 0.5) < 0.01);
  double small[9];
  tu_read_doubles(fl, small);
  for (int i = 0; i < 9; i++) assert_true(small[i] == -0.125);
  tu_read_doubles(on, small);
  assert_true(small[0] == 1.0);
  tu_read_doubles(ze, small);
  for (int i = 0; i < 5; i++) assert_true(small[i] == 0.0);
  /* A fill node applies on every run: overwrite u1, run, the same values come back. */
  double *junk = alloc_doubles(N);
  tu_write_doubles(u1, junk);
  CHECK(weft_graph_run(g));
  free(b);
  b = contents(u1);
  assert_memory_equal(a, b, N * sizeof(double));
  free(junk);
  free(a);
  free(b);
  free(c);
  free(d);
  free(n1);
  free(n2);
}

/* ---- the kernel context ------------------------------------------------------------------- */

typedef struct seen {
  int nargs;
  const weft_tensor *t0, *t1;
  void *d0, *d1, *d_bad;
  double param;
  size_t psize;
  void *user;
  weft_device dev;
} seen;

static int ctx_kernel(weft_kernel_ctx *ctx) {
  seen *s = weft_ctx_user(ctx);
  s->user = s;
  s->nargs = weft_ctx_nargs(ctx);
  s->t0 = weft_ctx_tensor(ctx, 0);
  s->t1 = weft_ctx_tensor(ctx, 1);
  s->d0 = weft_ctx_data(ctx, 0);
  s->d1 = weft_ctx_data(ctx, 1);
  s->d_bad = weft_ctx_data(ctx, 2);
  if (weft_ctx_tensor(ctx, -1) != NULL || weft_ctx_tensor(ctx, 2) != NULL) s->nargs = -1;
  s->param = *(const double *)weft_ctx_params(ctx, &s->psize);
  s->dev = weft_ctx_device(ctx);
  /* Read arg 0, write arg 1 through the data pointers. */
  const float *in = s->d0;
  double *out = s->d1;
  for (int64_t i = 0; i < weft_tensor_numel(s->t1); i++) out[i] = in[i] * s->param;
  return WEFT_OK;
}

static void kernel_context(void **state) {
  tu_fixture *f = *state;
  static seen s;
  const weft_op *op = tu_op(f->rt, "ctx_probe", 2, (weft_access[]){WEFT_READ, WEFT_WRITE}, ctx_kernel, &s);
  weft_graph *g = fresh(f);
  weft_tensor *a = tu_tensor(g, "a", WEFT_F32, 1, (int64_t[]){4}, weft_full(2));
  weft_tensor *b = tu_tensor(g, "b", WEFT_F64, 1, (int64_t[]){4}, weft_zeros());
  weft_tensor *args[2] = {a, b};
  double p = 1.5;
  CHECK(weft_call(g, op, args, 2, &p, sizeof p));
  CHECK(weft_graph_run(g));
  assert_ptr_equal(s.user, &s);
  assert_int_equal(s.nargs, 2);
  assert_ptr_equal(s.t0, a);
  assert_ptr_equal(s.t1, b);
  assert_non_null(s.d0);
  assert_non_null(s.d1);
  assert_null(s.d_bad);
  assert_true(s.param == 1.5);
  assert_int_equal(s.psize, sizeof p);
  assert_true(weft_device_equal(s.dev, weft_cpu()));
  double out[4];
  tu_read_doubles(b, out);
  for (int i = 0; i < 4; i++) assert_true(out[i] == 3.0);
}

/* out[i] = sum over the inputs of in_k[i] (the op's rest: any number of read inputs). */
static int sum_kernel(weft_kernel_ctx *ctx) {
  int k = weft_ctx_nargs(ctx);
  double *out = weft_ctx_data(ctx, 0);
  int64_t n = weft_tensor_numel(weft_ctx_tensor(ctx, 0));
  for (int64_t i = 0; i < n; i++) out[i] = 0;
  for (int a = 1; a < k; a++) {
    const double *in = weft_ctx_data(ctx, a);
    if (in == NULL) return weft_ctx_fail(ctx, "argument %d has no data", a);
    for (int64_t i = 0; i < n; i++) out[i] += in[i];
  }
  return WEFT_OK;
}

/* A node of 65 arguments (past the kernel context's own room for 16): every input reaches the
 * kernel, in order, on every run, the graph's 64 producers running first. */
static void many_arguments(void **state) {
  tu_fixture *f = *state;
  const weft_op *op = tu_op_gather(f->rt, "sum_all", sum_kernel);
  weft_graph *g = fresh(f);
  enum { W = 64 };
  weft_tensor *args[W + 1];
  args[0] = tu_tensor(g, "out", WEFT_F64, 1, (int64_t[]){3}, weft_zeros());
  for (int k = 0; k < W; k++) {
    args[k + 1] = tu_tensor(g, "in", WEFT_F64, 1, (int64_t[]){3}, weft_zeros());
    CHECK(weft_fill(g, args[k + 1], weft_full(k + 1)));
  }
  CHECK(weft_call(g, op, args, W + 1, NULL, 0));
  for (int run = 0; run < 3; run++) {
    CHECK(weft_graph_run(g));
    double out[3];
    tu_read_doubles(args[0], out);
    for (int i = 0; i < 3; i++) assert_true(out[i] == W * (W + 1) / 2);
  }
}

/* Products large enough to be computed in tiles (several GFLOP), with edge tiles, the
 * transposed B of linear, and a result that aliases its input: the same bits with 1 worker (the
 * tiles one after another), 2 and 3 (tiles fixed by the shape alone), and within float rounding
 * of one BLAS call made here (whose bits may differ from the tiles': OpenBLAS's Haswell kernels
 * sum in an order that depends on where a call's part of the result ends). */
static void large_products_are_tiled_the_same_on_any_workers(void **state) {
  (void)state;
  enum { M = 1500, N = 700, K = 1100 };
  float *first[3] = {NULL, NULL, NULL};
  for (int w = 1; w <= 3; w++) {
    weft_runtime *rt = tu_runtime_cpu(w);
    weft_graph *g = tu_graph(rt);
    weft_tensor *a, *b, *bt, *sq, *c = NULL, *l = NULL;
    CHECK(weft_tensor_create(g, "a", WEFT_F32, 2, (int64_t[]){M, K}, weft_cpu(), weft_uniform(-1, 1, 1), &a));
    CHECK(weft_tensor_create(g, "b", WEFT_F32, 2, (int64_t[]){K, N}, weft_cpu(), weft_uniform(-1, 1, 2), &b));
    CHECK(weft_tensor_create(g, "bt", WEFT_F32, 2, (int64_t[]){N, K}, weft_cpu(), weft_uniform(-1, 1, 3), &bt));
    CHECK(weft_tensor_create(g, "sq", WEFT_F32, 2, (int64_t[]){K, K}, weft_cpu(), weft_uniform(-1, 1, 4), &sq));
    CHECK(weft_mm(g, a, b, &c));
    CHECK(weft_linear(g, a, bt, NULL, &l));
    weft_tensor *keep = NULL;
    CHECK(weft_copy(g, a, weft_cpu(), &keep));
    CHECK(weft_mm(g, a, sq, &a)); /* in place */
    CHECK(weft_graph_run(g));
    weft_tensor *res[3] = {c, l, a};
    size_t sizes[3] = {(size_t)M * N, (size_t)M * N, (size_t)M * K};
    float *got[3];
    for (int r = 0; r < 3; r++) {
      got[r] = malloc(sizes[r] * sizeof(float));
      assert_non_null(got[r]);
      CHECK(weft_tensor_read(res[r], got[r], sizes[r] * sizeof(float)));
    }
    if (w == 1) {
      /* One BLAS call each, from the inputs as weft made them: within rounding. */
      float *av = malloc((size_t)M * K * 4), *bv = malloc((size_t)K * N * 4), *btv = malloc((size_t)N * K * 4);
      float *sqv = malloc((size_t)K * K * 4), *ref = malloc((size_t)M * K * 4);
      assert_true(av && bv && btv && sqv && ref);
      CHECK(weft_tensor_read(keep, av, (size_t)M * K * 4));
      CHECK(weft_tensor_read(b, bv, (size_t)K * N * 4));
      CHECK(weft_tensor_read(bt, btv, (size_t)N * K * 4));
      CHECK(weft_tensor_read(sq, sqv, (size_t)K * K * 4));
      for (int r = 0; r < 3; r++) {
        if (r == 0)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1, av, K, bv, N, 0, ref, N);
        else if (r == 1)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, av, K, btv, K, 0, ref, N);
        else
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, K, 1, av, K, sqv, K, 0, ref, K);
        for (size_t i = 0; i < sizes[r]; i++)
          if (!(fabsf(got[r][i] - ref[i]) <= 1e-4f * (1 + fabsf(ref[i]))))
            fail_msg("product %d element %zu: %g tiled, %g in one call", r, i, got[r][i], ref[i]);
      }
      free(av);
      free(bv);
      free(btv);
      free(sqv);
      free(ref);
      for (int r = 0; r < 3; r++) first[r] = got[r];
    } else {
      for (int r = 0; r < 3; r++) {
        if (memcmp(got[r], first[r], sizes[r] * sizeof(float)) != 0)
          fail_msg("product %d differs with %d workers from 1 worker", r, w);
        free(got[r]);
      }
    }
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  for (int r = 0; r < 3; r++) free(first[r]);
}

/* Elementwise ops over several chunks (intra-op parallelism): the same bits on 1 and 4
 * workers, and what the element-by-element loop gives. */
static void large_elementwise_ops_are_split_the_same_on_any_workers(void **state) {
  (void)state;
  const int64_t n = 700000; /* three chunks and a part */
  float *got[2] = {NULL, NULL};
  double sums[2][2];
  for (int r = 0; r < 2; r++) {
    weft_runtime *rt = tu_runtime_cpu(r ? 4 : 1);
    weft_graph *g = tu_graph(rt);
    weft_tensor *a, *b, *s = NULL, *m = NULL, *k = NULL, *z = NULL;
    CHECK(weft_tensor_create(g, "a", WEFT_F32, 1, &n, weft_cpu(), weft_uniform(-1, 1, 3), &a));
    CHECK(weft_tensor_create(g, "b", WEFT_F32, 1, &n, weft_cpu(), weft_uniform(-1, 1, 4), &b));
    CHECK(weft_sub(g, a, b, &s));
    CHECK(weft_mul(g, s, a, &m));
    CHECK(weft_scale(g, m, 0.75, &k));
    CHECK(weft_relu(g, k, &z));
    CHECK(weft_add(g, z, b, &z)); /* in place */
    weft_tensor *u, *un = NULL;
    CHECK(weft_tensor_create(g, "u", WEFT_F32, 1, &n, weft_cpu(), weft_zeros(), &u));
    CHECK(weft_fill(g, u, weft_normal(0.5, 2.0, 77)));   /* a fill node, split */
    CHECK(weft_copy(g, u, weft_cpu(), &un));             /* a host copy, split */
    weft_tensor_keep(un);
    weft_tensor *su = NULL, *no = NULL;
    CHECK(weft_sum(g, un, &su)); /* reductions in a fixed blocking */
    CHECK(weft_norm(g, un, &no));
    CHECK(weft_graph_run(g));
    float *uv = malloc((size_t)n * sizeof(float)), *want = malloc((size_t)n * sizeof(float));
    CHECK(weft_tensor_read(un, uv, (size_t)n * sizeof(float)));
    CHECK(weft_tensor_get(su, 0, &sums[r][0]));
    CHECK(weft_tensor_get(no, 0, &sums[r][1]));
    double ws = 0, wn = 0;
    for (int64_t i = 0; i < n; i++) ws += uv[i], wn += (double)uv[i] * uv[i];
    assert_true(fabs(sums[r][0] - ws) <= 1e-6 * fabs(ws) + 1e-3 && fabs(sums[r][1] - sqrt(wn)) <= 1e-6 * sqrt(wn));
    weft_tensor *ref; /* the same initialiser applied at creation: one thread, element by element */
    CHECK(weft_tensor_create(g, "ref", WEFT_F32, 1, &n, weft_cpu(), weft_normal(0.5, 2.0, 77), &ref));
    CHECK(weft_tensor_read(ref, want, (size_t)n * sizeof(float)));
    assert_memory_equal(uv, want, (size_t)n * sizeof(float));
    free(uv);
    free(want);
    got[r] = malloc((size_t)n * sizeof(float));
    CHECK(weft_tensor_read(z, got[r], (size_t)n * sizeof(float)));
    float *av = malloc((size_t)n * sizeof(float)), *bv = malloc((size_t)n * sizeof(float));
    CHECK(weft_tensor_read(a, av, (size_t)n * sizeof(float)));
    CHECK(weft_tensor_read(b, bv, (size_t)n * sizeof(float)));
    for (int64_t i = 0; i < n; i++) {
      float sv = av[i] - bv[i], mv = sv * av[i], kv = 0.75f * mv, zv = kv > 0.0f ? kv : 0.0f;
      assert_true(got[r][i] == zv + bv[i]);
    }
    free(av);
    free(bv);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  assert_memory_equal(got[0], got[1], (size_t)n * sizeof(float));
  assert_memory_equal(sums[0], sums[1], sizeof sums[0]); /* the same bits on 1 and 4 workers */
  free(got[0]);
  free(got[1]);
}

/* The vectorised generator (cpu_fill.c: AVX-512, AVX2 or scalar, by the CPU) writes the
 * documented formula's bits for any span of a tensor: starts not on a batch, short and long
 * spans, indices past 2^32 (the counter's upper word), both dtypes, uniform and normal; every
 * variant this CPU can run. uniform(0, 1) writes u1 itself, so its f64 checks every bit of
 * the uniform loops' u1; its seed's words wrap the key schedule. */
static void random_fills_match_the_formula_anywhere(void **state) {
  (void)state;
  enum { M = 300 };
  static const int64_t firsts[] = {0, 1, 63, 64, 1000003, ((int64_t)1 << 32) - 70, ((int64_t)1 << 33) + 5};
  static const int64_t counts[] = {1, 7, 64, 65, M};
  static const char *variants[] = {"scalar", "avx2", "avx512"};
  const char *best = weft__cpu_fill_variant();
  double d[M];
  float f[M];
  for (int v = 0; v < 3; v++) {
    if (!weft__cpu_fill_select(variants[v])) continue; /* not on this CPU */
    for (int kind = 0; kind < 3; kind++) {
      weft_init in = kind == 0   ? weft_uniform(-2.5, 7, 0x1234567890abcdefull)
                     : kind == 1 ? weft_uniform(0, 1, 0xfffffffffffffffeull)
                                 : weft_normal(0.25, 3, 99);
      for (size_t a = 0; a < sizeof firsts / sizeof firsts[0]; a++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
          int64_t first = firsts[a], n = counts[c];
          weft__cpu_fill_at(d, WEFT_F64, first, n, in);
          weft__cpu_fill_at(f, WEFT_F32, first, n, in);
          for (int64_t k = 0; k < n; k++) {
            double u1, u2;
            weft__philox_uniform2((uint64_t)(first + k), in.seed, &u1, &u2);
            double want = in.kind == WEFT_INIT_UNIFORM
                              ? in.a + (in.b - in.a) * u1
                              : in.a + in.b * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
            if (d[k] != want || f[k] != (float)want)
              fail_msg("%s fill (%s generator), element %lld: %.17g / %.9g, want %.17g",
                       in.kind == WEFT_INIT_UNIFORM ? "uniform" : "normal", variants[v], (long long)(first + k),
                       d[k], (double)f[k], want);
          }
        }
    }
  }
  assert_true(weft__cpu_fill_select(best));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(large_products_are_tiled_the_same_on_any_workers),
      cmocka_unit_test(large_elementwise_ops_are_split_the_same_on_any_workers),
      cmocka_unit_test_setup_teardown(many_arguments, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(mm_against_reference, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(mm_in_place, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(linear_against_reference, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(elementwise_against_reference, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(reductions_against_reference, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(copies, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(fills, tu_setup, tu_teardown),
      cmocka_unit_test(random_fills_match_the_formula_anywhere),
      cmocka_unit_test_setup_teardown(kernel_context, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
