/* cpu_kernels.c — the CPU implementation of every built-in op, and the initialisers.
 *
 * GEMM goes to the CBLAS of the BLAS weft links (the library made for it; which library is
 * really loaded, its threads, and the lock a library that is not thread-safe needs, are
 * cpu_blas.c's); elementwise ops, reductions and fills are plain loops. Every kernel is
 * deterministic for a given thread count: the differential oracle compares the scheduler with a
 * serial interpreter bit for bit, and both call these kernels. Reductions accumulate in double,
 * for f32 too.
 *
 * Aliasing: a result may be one of the inputs (in-place update). Elementwise kernels are safe
 * as written; mm and linear compute into a scratch buffer when the result aliases an input. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "backends/backend.h"
#include "util/philox.h"

#define ELEMENTWISE(T, n, expr)                  \
  do {                                           \
    for (int64_t i = 0; i < (n); i++) expr;      \
  } while (0)

void weft__cpu_fill(void *p, int dtype, int64_t n, weft_init init) {
  if (init.kind == WEFT_INIT_ZEROS) {
    memset(p, 0, (size_t)n * weft_dtype_size(dtype));
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    double v;
    switch (init.kind) {
      case WEFT_INIT_ONES:
        v = 1.0;
        break;
      case WEFT_INIT_FULL:
        v = init.a;
        break;
      case WEFT_INIT_UNIFORM: {
        double u1, u2;
        weft__philox_uniform2((uint64_t)i, init.seed, &u1, &u2);
        v = init.a + (init.b - init.a) * u1;
        break;
      }
      default: { /* normal */
        double u1, u2;
        weft__philox_uniform2((uint64_t)i, init.seed, &u1, &u2);
        v = init.a + init.b * sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
        break;
      }
    }
    if (dtype == WEFT_F32)
      ((float *)p)[i] = (float)v;
    else
      ((double *)p)[i] = v;
  }
}

/* A product of m x n x k, split into tiles of the result: square tiles of `side` rows and
 * columns (the last ones smaller), each computed by one BLAS call over the whole of k. The tiles
 * depend on the product's shape alone, never on the workers, so its bits are the same however
 * many workers run them (weft__ctx_parallel). A tile holds about TILE_FLOPS of work: enough
 * that packing its panels of A and B (side x k each) costs a few per mille of its arithmetic,
 * and that the scheduler's cost per tile is nothing beside it; products smaller than two tiles
 * are one call. */
#define TILE_FLOPS (1.0 * (1 << 30))

typedef struct gemm_job {
  int dtype, transb;
  int64_t m, n, k, side, cols; /* cols: tiles across n */
  const void *a, *b;
  void *c;
} gemm_job;

static void gemm_call(int dtype, int64_t m, int64_t n, int64_t k, const void *a, const void *b, int transb,
                      int64_t ldb, void *c, int64_t ldc) {
  enum CBLAS_TRANSPOSE tb = transb ? CblasTrans : CblasNoTrans;
  int locked = weft__cpu_blas_enter();
  if (dtype == WEFT_F32)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)ldb, 0.0f, c,
                (int)ldc);
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, tb, (int)m, (int)n, (int)k, 1.0, a, (int)k, b, (int)ldb, 0.0, c,
                (int)ldc);
  weft__cpu_blas_leave(locked);
}

static void gemm_tile(void *arg, uint32_t tile) {
  const gemm_job *j = arg;
  size_t es = weft_dtype_size(j->dtype);
  int64_t r0 = (int64_t)(tile / (uint32_t)j->cols) * j->side, c0 = (int64_t)(tile % (uint32_t)j->cols) * j->side;
  int64_t mr = j->m - r0 < j->side ? j->m - r0 : j->side, nc = j->n - c0 < j->side ? j->n - c0 : j->side;
  const char *a = (const char *)j->a + (size_t)(r0 * j->k) * es;
  /* op(B)'s columns c0..: B[k,n]'s columns, or B[n,k]'s rows when transposed. */
  const char *b = (const char *)j->b + (size_t)(j->transb ? c0 * j->k : c0) * es;
  char *c = (char *)j->c + (size_t)(r0 * j->n + c0) * es;
  gemm_call(j->dtype, mr, nc, j->k, a, b, j->transb, j->transb ? j->k : j->n, c, j->n);
}

/* C[m,n] = A[m,k] . op(B) with op(B) = B[k,n] (transb 0) or B[n,k]^T (transb 1). */
static int gemm(weft_kernel_ctx *ctx, int dtype, int64_t m, int64_t n, int64_t k, const void *a,
                const void *b, int transb, void *c) {
  size_t es = weft_dtype_size(dtype);
  size_t cbytes = (size_t)(m * n) * es;
  if (m == 0 || n == 0) return WEFT_OK;
  if (k == 0) {
    memset(c, 0, cbytes);
    return WEFT_OK;
  }
  int alias = c == a || c == b;
  void *out = c;
  if (alias && (out = weft__malloc(cbytes)) == NULL) {
    weft_ctx_fail(ctx, "out of host memory for a %zu-byte scratch buffer", cbytes);
    return WEFT_ENOMEM;
  }
  double flops = 2.0 * (double)m * (double)n * (double)k;
  if (flops < 2 * TILE_FLOPS) {
    gemm_call(dtype, m, n, k, a, b, transb, transb ? k : n, out, n);
  } else {
    /* The side of a tile of TILE_FLOPS, in multiples of 64 (the BLAS kernels' blocking). */
    int64_t side = (int64_t)sqrt(TILE_FLOPS / (2.0 * (double)k)) / 64 * 64;
    if (side < 256) side = 256;
    gemm_job j = {dtype, transb, m, n, k, side, (n + side - 1) / side, a, b, out};
    uint32_t tiles = (uint32_t)(((m + side - 1) / side) * j.cols);
    weft__ctx_parallel(ctx, tiles, gemm_tile, &j);
  }
  if (alias) {
    memcpy(c, out, cbytes);
    weft__free(out);
  }
  return WEFT_OK;
}

static double reduce(const void *x, int dtype, int64_t n, int squares) {
  double acc = 0;
  if (dtype == WEFT_F32) {
    const float *p = x;
    if (squares)
      ELEMENTWISE(float, n, acc += (double)p[i] * p[i]);
    else
      ELEMENTWISE(float, n, acc += p[i]);
  } else {
    const double *p = x;
    if (squares)
      ELEMENTWISE(double, n, acc += p[i] * p[i]);
    else
      ELEMENTWISE(double, n, acc += p[i]);
  }
  return squares ? sqrt(acc) : acc;
}

static void store_scalar(void *out, int dtype, double v) {
  if (dtype == WEFT_F32)
    *(float *)out = (float)v;
  else
    *(double *)out = v;
}

int weft__cpu_exec(weft_kernel_ctx *ctx) {
  weft_node *nd = ctx->node;
  if (nd->kind == WEFT__OP_USER) {
    int rc = nd->user_op->desc.cpu(ctx);
    if (rc <= WEFT_OK) return rc;
    /* Positive values are the scheduler's own (WEFT__PENDING, WEFT__DEFERRED): a kernel's is
     * a failure, not an instruction. */
    if (ctx->err != NULL && ctx->err_size > 0)
      snprintf(ctx->err, ctx->err_size, "the op's CPU kernel returned %d, which is not a weft status", rc);
    return WEFT_EKERNEL;
  }
  const weft_tensor *t0 = nd->args[0].t; /* every built-in has at least one argument */
  int dt = t0->dtype;
  int64_t n = t0->numel;
  void **d = ctx->data;
  switch (nd->kind) {
    case WEFT__OP_MM: {
      const weft_tensor *b = nd->args[1].t;
      return gemm(ctx, dt, t0->shape[0], b->shape[1], t0->shape[1], d[0], d[1], 0, d[2]);
    }
    case WEFT__OP_LINEAR: {
      const weft_tensor *w = nd->args[1].t;
      int has_bias = nd->nargs == 4;
      void *out = d[nd->nargs - 1];
      int64_t rows = t0->shape[0], cols = w->shape[0];
      int rc = gemm(ctx, dt, rows, cols, t0->shape[1], d[0], d[1], 1, out);
      if (rc != WEFT_OK || !has_bias) return rc;
      for (int64_t r = 0; r < rows; r++) {
        if (dt == WEFT_F32) {
          float *o = (float *)out + r * cols;
          const float *bias = d[2];
          for (int64_t c = 0; c < cols; c++) o[c] += bias[c];
        } else {
          double *o = (double *)out + r * cols;
          const double *bias = d[2];
          for (int64_t c = 0; c < cols; c++) o[c] += bias[c];
        }
      }
      return WEFT_OK;
    }
    case WEFT__OP_ADD:
    case WEFT__OP_SUB:
    case WEFT__OP_MUL: {
      int k = nd->kind;
      if (dt == WEFT_F32) {
        const float *a = d[0], *b = d[1];
        float *c = d[2];
        if (k == WEFT__OP_ADD)
          ELEMENTWISE(float, n, c[i] = a[i] + b[i]);
        else if (k == WEFT__OP_SUB)
          ELEMENTWISE(float, n, c[i] = a[i] - b[i]);
        else
          ELEMENTWISE(float, n, c[i] = a[i] * b[i]);
      } else {
        const double *a = d[0], *b = d[1];
        double *c = d[2];
        if (k == WEFT__OP_ADD)
          ELEMENTWISE(double, n, c[i] = a[i] + b[i]);
        else if (k == WEFT__OP_SUB)
          ELEMENTWISE(double, n, c[i] = a[i] - b[i]);
        else
          ELEMENTWISE(double, n, c[i] = a[i] * b[i]);
      }
      return WEFT_OK;
    }
    case WEFT__OP_SCALE:
      if (dt == WEFT_F32) {
        const float *a = d[0];
        float *c = d[1], s = (float)nd->alpha;
        ELEMENTWISE(float, n, c[i] = s * a[i]);
      } else {
        const double *a = d[0];
        double *c = d[1], s = nd->alpha;
        ELEMENTWISE(double, n, c[i] = s * a[i]);
      }
      return WEFT_OK;
    case WEFT__OP_RELU:
      if (dt == WEFT_F32) {
        const float *a = d[0];
        float *c = d[1];
        ELEMENTWISE(float, n, c[i] = a[i] > 0.0f ? a[i] : 0.0f);
      } else {
        const double *a = d[0];
        double *c = d[1];
        ELEMENTWISE(double, n, c[i] = a[i] > 0.0 ? a[i] : 0.0);
      }
      return WEFT_OK;
    case WEFT__OP_SUM:
    case WEFT__OP_NORM:
      store_scalar(d[1], dt, reduce(d[0], dt, n, nd->kind == WEFT__OP_NORM));
      return WEFT_OK;
    case WEFT__OP_COPY:
      if (d[0] != d[1] && t0->bytes) memcpy(d[1], d[0], t0->bytes);
      return WEFT_OK;
    case WEFT__OP_FILL:
      if (t0->bytes) weft__cpu_fill(d[0], dt, n, nd->fill);
      return WEFT_OK;
    default:
      return weft_ctx_fail(ctx, "unknown op kind %d", nd->kind);
  }
}
