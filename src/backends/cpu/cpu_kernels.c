/* cpu_kernels.c — the CPU implementation of every built-in op (the initialisers are
 * cpu_fill.c's).
 *
 * GEMM goes to the CBLAS of the BLAS weft links (the library made for it; which library is
 * really loaded, its threads, and the lock a library that is not thread-safe needs, are
 * cpu_blas.c's); elementwise ops and reductions are plain loops. Every kernel is
 * deterministic for a given thread count: the differential oracle compares the scheduler with a
 * serial interpreter bit for bit, and both call these kernels. Reductions accumulate in double,
 * for f32 too.
 *
 * Aliasing: a result may be one of the inputs (in-place update). Elementwise kernels are safe
 * as written; mm and linear compute into a scratch buffer when the result aliases an input. */
#include <cblas.h>
#include <math.h>
#include <string.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <stdatomic.h>
#include <unistd.h>

#include "backends/backend.h"

/* A product of m x n x k, split into tiles of the result: a grid of tiles of `h` rows and `w`
 * columns (the last ones smaller), each computed by one BLAS call over the whole of k. The tiles
 * depend on the product's shape and the machine alone, never on the workers
 * (weft__ctx_parallel): one thread runs them one after another, several share them. One call
 * for a whole product would give other bits than its tiles: OpenBLAS's Haswell kernels (which
 * 0.3.21 also gives an AMD Zen 5) differ in 2-8% of the elements of every f32 product tried when
 * it is cut at multiples of 64, along m or n; its SkylakeX and Cooperlake kernels agree in f32
 * but not in f64 (1500 x 700 x 1100 cut at 640: 5510 elements). So a product that one thread
 * runs alone is cut the same way too, and a result never depends on the workers (test
 * large_products_are_tiled_the_same_on_any_workers compares 1, 2 and 3 workers bit for bit).
 *
 * Each tile's call packs its own panels of A and B, (h + w) x k elements, about 1/h + 1/w
 * packed elements a multiply-add: on the 16-core GPU host one thread ran 4000^2 f32 in square
 * tiles of 320 at 0.77 of one call's rate, 512 at 0.90, 768 at 0.89, 1024 at 0.92 (one call
 * 847 ms); the Zen 5 dev machine 0.94 at 320. So a product gets one tile for each configured
 * processor of the machine (the same for every runtime and process on it), laid out as the grid
 * that packs least, and fewer where a tile would hold less than TILE_FLOPS of work: the workers
 * of a machine share them evenly when nothing else runs, and one worker packs little. 4000^2:
 * 1024^2 tiles on 16 cores (16), 1024 x 512 on 32, 4000 x 2048 on 2. Products smaller than two
 * tiles' worth of work are one call. */
#define TILE_FLOPS (WEFT__CPU_SPLIT_FLOPS / 2) /* 2^30 */

/* h x w tiles for an m x n x k product of two tiles' worth or more. */
static void tile_grid(int64_t m, int64_t n, int64_t k, int64_t *h, int64_t *w) {
  static atomic_long cores_read; /* read once: a tile never changes within a process */
  long cores = atomic_load_explicit(&cores_read, memory_order_relaxed);
  if (cores == 0) {
    cores = sysconf(_SC_NPROCESSORS_CONF);
    if (cores < 1) cores = 1;
    atomic_store_explicit(&cores_read, cores, memory_order_relaxed);
  }
  double most = 2.0 * (double)m * (double)n * (double)k / TILE_FLOPS;
  int64_t want = most < (double)cores ? (int64_t)most : cores;
  if (want < 2) want = 2;
  /* Among the grids of `want` tiles (rows x columns of the grid), the one that packs least;
   * sides in multiples of 64 (the BLAS kernels' blocking), which may leave fewer tiles. */
  double best = 0;
  for (int64_t r = 1; r <= want; r++) {
    if (want % r != 0) continue;
    int64_t c = want / r;
    int64_t th = ((m + r - 1) / r + 63) / 64 * 64, tw = ((n + c - 1) / c + 63) / 64 * 64;
    double cost = 1.0 / (double)(th < m ? th : m) + 1.0 / (double)(tw < n ? tw : n);
    if (best == 0 || cost < best) {
      best = cost;
      *h = th;
      *w = tw;
    }
  }
}

/* C[m,n] = alpha op(A) op(B) + beta C, row-major with row strides lda, ldb, ldc; op(A) is
 * m x k. */
typedef struct gemm_args {
  int dtype, ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  double alpha, beta;
  const void *a, *b;
  void *c;
} gemm_args;

typedef struct gemm_job {
  gemm_args g;
  int64_t h, w, cols; /* a tile's rows and columns; cols: tiles across n */
} gemm_job;

static void gemm_call(const gemm_args *g) {
  enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans, tb = g->tb ? CblasTrans : CblasNoTrans;
  int locked = weft__cpu_blas_enter();
  if (g->dtype == WEFT_F32)
    cblas_sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, (float)g->alpha, g->a, (int)g->lda, g->b,
                (int)g->ldb, (float)g->beta, g->c, (int)g->ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, g->alpha, g->a, (int)g->lda, g->b,
                (int)g->ldb, g->beta, g->c, (int)g->ldc);
  weft__cpu_blas_leave(locked);
}

static void gemm_tile(void *arg, uint32_t tile) {
  const gemm_job *j = arg;
  gemm_args t = j->g;
  size_t es = weft_dtype_size(t.dtype);
  int64_t r0 = (int64_t)(tile / (uint32_t)j->cols) * j->h, c0 = (int64_t)(tile % (uint32_t)j->cols) * j->w;
  t.m = t.m - r0 < j->h ? t.m - r0 : j->h;
  t.n = t.n - c0 < j->w ? t.n - c0 : j->w;
  /* op(A)'s rows r0..: A[m,k]'s rows, or A[k,m]'s columns; op(B)'s columns c0..: B[k,n]'s
   * columns, or B[n,k]'s rows. */
  t.a = (const char *)t.a + (size_t)(t.ta ? r0 : r0 * t.lda) * es;
  t.b = (const char *)t.b + (size_t)(t.tb ? c0 * t.ldb : c0) * es;
  t.c = (char *)t.c + (size_t)(r0 * t.ldc + c0) * es;
  gemm_call(&t);
}

/* A product as one call, or split into tiles of the result that the workers share. */
static void gemm_run(weft_kernel_ctx *ctx, const gemm_args *g) {
  double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k;
  if (flops < WEFT__CPU_SPLIT_FLOPS) {
    gemm_call(g);
    return;
  }
  int64_t h = 0, w = 0;
  tile_grid(g->m, g->n, g->k, &h, &w);
  gemm_job j = {*g, h, w, (g->n + w - 1) / w};
  uint32_t tiles = (uint32_t)(((g->m + h - 1) / h) * j.cols);
  weft__ctx_parallel(ctx, tiles, gemm_tile, &j);
}

/* C[m,n] = A[m,k] . op(B) with op(B) = B[k,n] (transb 0) or B[n,k]^T (transb 1), contiguous. */
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
  gemm_args g = {dtype, 0, transb, m, n, k, k, transb ? k : n, n, 1, 0, a, b, out};
  gemm_run(ctx, &g);
  if (alias) {
    memcpy(c, out, cbytes);
    weft__free(out);
  }
  return WEFT_OK;
}

/* LAPACK's Cholesky, through the Fortran interface of the BLAS weft links (OpenBLAS carries
 * LAPACK and its own parallel potrf; docs/architecture.md, "Dense linear algebra"). */
void spotrf_(const char *uplo, const int *n, float *a, const int *lda, int *info);
void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);
void strtri_(const char *uplo, const char *diag, const int *n, float *a, const int *lda, int *info);
void dtrtri_(const char *uplo, const char *diag, const int *n, double *a, const int *lda, int *info);

/* W = T^-1 (trtri): T's `uplo` triangle into W, the other strict triangle zero, then LAPACK's
 * trtri in place there (row-major lower is column-major upper, as for potrf). */
static int trtri(weft_kernel_ctx *ctx, const weft_tensor *t, int upper, int n, const void *tp, int ldt, void *wp,
                 int ldw) {
  size_t es = t->dtype == WEFT_F32 ? 4 : 8;
  for (int r = 0; r < n; r++) {
    char *row = (char *)wp + (size_t)r * (size_t)ldw * es;
    const char *from = (const char *)tp + (size_t)r * (size_t)ldt * es;
    int b = upper ? r : 0, e = upper ? n : r + 1; /* the triangle's columns of row r */
    memset(row, 0, (size_t)n * es);
    memcpy(row + (size_t)b * es, from + (size_t)b * es, (size_t)(e - b) * es);
  }
  int info = 0, locked = weft__cpu_blas_enter();
  const char *cm = upper ? "L" : "U";
  if (t->dtype == WEFT_F32)
    strtri_(cm, "N", &n, wp, &ldw, &info);
  else
    dtrtri_(cm, "N", &n, wp, &ldw, &info);
  weft__cpu_blas_leave(locked);
  if (info > 0)
    return weft_ctx_fail(ctx, "%s is singular: its diagonal element %d is zero", weft__tensor_name(t), info);
  if (info < 0) return weft_ctx_fail(ctx, "LAPACK trtri refused argument %d", -info);
  return WEFT_OK;
}

/* The dense linear-algebra ops on row-major (possibly strided) matrices. */
static int linear_algebra(weft_kernel_ctx *ctx) {
  const weft_node *nd = ctx->node;
  const weft__la *la = nd->params;
  const weft_tensor *a = nd->args[0].t, *out = nd->args[nd->nargs - 1].t;
  void **d = ctx->data;
  int dt = a->dtype, f32 = dt == WEFT_F32;
  int m = (int)out->shape[0], n = (int)out->shape[1];
  int lda = (int)weft__tensor_ld(a), ldc = (int)weft__tensor_ld(out);
  if (m == 0 || n == 0) return WEFT_OK;
  switch (nd->kind) {
    case WEFT__OP_GEMM: {
      const weft_tensor *b = nd->args[1].t;
      int64_t k = a->shape[la->trans_a ? 0 : 1];
      gemm_args g = {dt, la->trans_a, la->trans_b, m, n, k, lda, weft__tensor_ld(b), ldc, la->alpha, la->beta,
                     d[0], d[1], d[2]};
      gemm_run(ctx, &g);
      return WEFT_OK;
    }
    case WEFT__OP_POTRF: {
      /* A row-major lower triangle is the column-major upper one of the same memory: LAPACK's
       * upper factor U (A = U^T U) there is L = U^T here, with no transposition (and the
       * row-major upper factor is LAPACK's lower one). */
      int info = 0, locked = weft__cpu_blas_enter();
      const char *cm = la->uplo == WEFT_UPPER ? "L" : "U";
      if (f32)
        spotrf_(cm, &n, d[0], &lda, &info);
      else
        dpotrf_(cm, &n, d[0], &lda, &info);
      weft__cpu_blas_leave(locked);
      if (info > 0)
        return weft_ctx_fail(ctx, "%s is not positive definite: its leading minor of order %d is not positive",
                             weft__tensor_name(a), info);
      if (info < 0) return weft_ctx_fail(ctx, "LAPACK potrf refused argument %d", -info);
      return WEFT_OK;
    }
    case WEFT__OP_TRSM:
    case WEFT__OP_TRMM: {
      enum CBLAS_SIDE side = la->side == WEFT_RIGHT ? CblasRight : CblasLeft;
      enum CBLAS_TRANSPOSE t = la->trans_a ? CblasTrans : CblasNoTrans;
      enum CBLAS_UPLO u = la->uplo == WEFT_UPPER ? CblasUpper : CblasLower;
      int locked = weft__cpu_blas_enter(), solve = nd->kind == WEFT__OP_TRSM;
      if (f32)
        (solve ? cblas_strsm : cblas_strmm)(CblasRowMajor, side, u, t, CblasNonUnit, m, n, (float)la->alpha, d[0], lda,
                                           d[1], ldc);
      else
        (solve ? cblas_dtrsm : cblas_dtrmm)(CblasRowMajor, side, u, t, CblasNonUnit, m, n, la->alpha, d[0], lda, d[1],
                                           ldc);
      weft__cpu_blas_leave(locked);
      return WEFT_OK;
    }
    case WEFT__OP_TRTRI:
      return trtri(ctx, a, la->uplo == WEFT_UPPER, n, d[0], lda, d[1], ldc);
    case WEFT__OP_SYRK: {
      int k = (int)a->shape[la->trans_a ? 0 : 1], locked = weft__cpu_blas_enter();
      enum CBLAS_UPLO u = la->uplo == WEFT_UPPER ? CblasUpper : CblasLower;
      enum CBLAS_TRANSPOSE t = la->trans_a ? CblasTrans : CblasNoTrans;
      if (f32)
        cblas_ssyrk(CblasRowMajor, u, t, n, k, (float)la->alpha, d[0], lda, (float)la->beta, d[1], ldc);
      else
        cblas_dsyrk(CblasRowMajor, u, t, n, k, la->alpha, d[0], lda, la->beta, d[1], ldc);
      weft__cpu_blas_leave(locked);
      return WEFT_OK;
    }
    default:
      return weft_ctx_fail(ctx, "unknown op kind %d", nd->kind);
  }
}

/* The sum (of squares) of n elements from x, in double, in 16 running sums (element i into sum
 * i mod 16, the last n mod 16 elements into the first ones), added pairwise at the end: a fixed
 * order whatever the CPU, written with vector types so that it runs in the CPU's widest
 * vectors (one running sum would wait out an add's latency at every element). */
typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));

#define SUM16(T, square)                                                        \
  do {                                                                          \
    const T *p = x;                                                             \
    for (; i + 16 <= n; i += 16) {                                              \
      v8d lo, hi;                                                               \
      if (sizeof(T) == 4) {                                                     \
        v8f f0, f1;                                                             \
        memcpy(&f0, p + i, sizeof f0);                                          \
        memcpy(&f1, p + i + 8, sizeof f1);                                      \
        lo = __builtin_convertvector(f0, v8d);                                  \
        hi = __builtin_convertvector(f1, v8d);                                  \
      } else {                                                                  \
        memcpy(&lo, p + i, sizeof lo);                                          \
        memcpy(&hi, p + i + 8, sizeof hi);                                      \
      }                                                                         \
      a0 += square ? lo * lo : lo;                                              \
      a1 += square ? hi * hi : hi;                                              \
    }                                                                           \
    for (int l = 0; i < n; i++, l++) {                                          \
      double v = (double)p[i];                                                  \
      if (l < 8)                                                                \
        a0[l] += square ? v * v : v;                                            \
      else                                                                      \
        a1[l - 8] += square ? v * v : v;                                        \
    }                                                                           \
  } while (0)

#define SUM_OF(isa, attr)                                                         \
  attr static double sum_of_##isa(const void *x, int dtype, int64_t n, int squares) { \
    v8d a0 = {0}, a1 = {0};                                                        \
    int64_t i = 0;                                                                 \
    if (dtype == WEFT_F32 && squares)                                              \
      SUM16(float, 1);                                                             \
    else if (dtype == WEFT_F32)                                                    \
      SUM16(float, 0);                                                             \
    else if (squares)                                                              \
      SUM16(double, 1);                                                            \
    else                                                                           \
      SUM16(double, 0);                                                            \
    v8d s = a0 + a1;                                                               \
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));     \
  }
/* One copy per instruction set (as cpu_fill.c's loops), picked by weft__cpu_isa. */
SUM_OF(base, )
#if defined(__x86_64__) && defined(__GNUC__)
SUM_OF(avx2, __attribute__((target("avx2"))))
SUM_OF(avx512, __attribute__((target("avx512f"))))
#endif

static double sum_of(const void *x, int dtype, int64_t n, int squares) {
#if defined(__x86_64__) && defined(__GNUC__)
  int isa = weft__cpu_isa();
  if (isa == 2) return sum_of_avx512(x, dtype, n, squares);
  if (isa == 1) return sum_of_avx2(x, dtype, n, squares);
#endif
  return sum_of_base(x, dtype, n, squares);
}

/* A reduction in a fixed blocking: each chunk of RED_CHUNK elements summed alone (by whichever
 * worker takes it, weft__ctx_parallel), the chunks' sums then added in order, so the bits do
 * not depend on the number of workers. A tensor of one chunk sums as one loop. */
enum { RED_CHUNK = 1 << 18 };

typedef struct red_job {
  const void *x;
  int dtype, squares;
  int64_t n;
  double *part;
} red_job;

static void red_tile(void *arg, uint32_t tile) {
  const red_job *j = arg;
  int64_t lo = (int64_t)tile * RED_CHUNK, hi = lo + RED_CHUNK < j->n ? lo + RED_CHUNK : j->n;
  j->part[tile] = sum_of((const char *)j->x + (size_t)lo * weft_dtype_size(j->dtype), j->dtype, hi - lo, j->squares);
}

static int reduce(weft_kernel_ctx *ctx, const void *x, int dtype, int64_t n, int squares, double *out) {
  uint32_t tiles = (uint32_t)((n + RED_CHUNK - 1) / RED_CHUNK);
  double acc = 0;
  if (tiles <= 1) {
    acc = sum_of(x, dtype, n, squares);
  } else {
    double *part = weft__malloc(tiles * sizeof *part);
    if (part == NULL) return weft_ctx_fail(ctx, "no host memory for a reduction's %u partial sums", tiles);
    red_job j = {x, dtype, squares, n, part};
    weft__ctx_parallel(ctx, tiles, red_tile, &j);
    for (uint32_t t = 0; t < tiles; t++) acc += part[t];
    weft__free(part);
  }
  *out = squares ? sqrt(acc) : acc;
  return WEFT_OK;
}

static void store_scalar(void *out, int dtype, double v) {
  if (dtype == WEFT_F32)
    *(float *)out = (float)v;
  else
    *(double *)out = v;
}

/* Elementwise ops, fills and host copies, split into chunks of EW_CHUNK elements that idle
 * workers share (intra-op parallelism, weft__ctx_parallel) when there are several: each
 * element is computed alone (a random fill's value depends on its index and seed only), so
 * the result is the same however many workers take part. */
enum { EW_CHUNK = 1 << 18 };

typedef struct ew_job {
  int kind, dt;
  int64_t n;
  const void *a, *b;
  void *c;
  double alpha;
  weft_init fill; /* WEFT__OP_FILL's */
} ew_job;

#define EW_LOOP(T)                                                                     \
  do {                                                                                 \
    const T *a = j->a, *b = j->b;                                                      \
    T *c = j->c, s = (T)j->alpha;                                                      \
    switch (j->kind) {                                                                 \
      case WEFT__OP_ADD: for (int64_t i = lo; i < hi; i++) c[i] = a[i] + b[i]; break;  \
      case WEFT__OP_SUB: for (int64_t i = lo; i < hi; i++) c[i] = a[i] - b[i]; break;  \
      case WEFT__OP_MUL: for (int64_t i = lo; i < hi; i++) c[i] = a[i] * b[i]; break;  \
      case WEFT__OP_SCALE: for (int64_t i = lo; i < hi; i++) c[i] = s * a[i]; break;   \
      default: for (int64_t i = lo; i < hi; i++) c[i] = a[i] > (T)0 ? a[i] : (T)0; break; \
    }                                                                                  \
  } while (0)

static void ew_range(const ew_job *j, int64_t lo, int64_t hi) {
  if (j->kind == WEFT__OP_FILL) {
    weft__cpu_fill_at((char *)j->c + (size_t)lo * weft_dtype_size(j->dt), j->dt, lo, hi - lo, j->fill);
    return;
  }
  if (j->kind == WEFT__OP_COPY) {
    size_t es = weft_dtype_size(j->dt);
    memcpy((char *)j->c + (size_t)lo * es, (const char *)j->a + (size_t)lo * es, (size_t)(hi - lo) * es);
    return;
  }
  if (j->dt == WEFT_F32)
    EW_LOOP(float);
  else
    EW_LOOP(double);
}

static void ew_tile(void *arg, uint32_t tile) {
  const ew_job *j = arg;
  int64_t lo = (int64_t)tile * EW_CHUNK, hi = lo + EW_CHUNK < j->n ? lo + EW_CHUNK : j->n;
  ew_range(j, lo, hi);
}

/* A strided copy: rows of `row` bytes, `ls` apart in the source and `ld` in the destination,
 * `per` rows a tile. */
typedef struct rows_job {
  const char *from;
  char *to;
  size_t row, ls, ld;
  int64_t rows, per;
} rows_job;

/* Copies n bytes with stores that bypass the caches where the CPU has them (x86-64's SSE2): a
 * tile packed for a DMA engine or unpacked from one is not read again by this core soon, and a
 * cached store first reads the line it writes (a third more memory traffic, on a host whose
 * memory the copy engines are using too). */
static void copy_through(char *d, const char *s, size_t n) {
#if defined(__SSE2__)
  size_t head = (64 - ((uintptr_t)d & 63)) & 63; /* whole lines from here: write-combined */
  if (n >= 4096) {
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
      __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
      __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
      _mm_stream_si128((__m128i *)d, a);
      _mm_stream_si128((__m128i *)(d + 16), b);
      _mm_stream_si128((__m128i *)(d + 32), c);
      _mm_stream_si128((__m128i *)(d + 48), e);
    }
  }
#endif
  memcpy(d, s, n);
}

static void rows_tile(void *arg, uint32_t tile) {
  const rows_job *j = arg;
  int64_t lo = (int64_t)tile * j->per, hi = lo + j->per < j->rows ? lo + j->per : j->rows;
  for (int64_t r = lo; r < hi; r++) copy_through(j->to + (size_t)r * j->ld, j->from + (size_t)r * j->ls, j->row);
#if defined(__SSE2__)
  _mm_sfence(); /* the streamed stores are visible before the node completes */
#endif
}

static void elementwise(weft_kernel_ctx *ctx, ew_job *j) {
  uint32_t tiles = (uint32_t)((j->n + EW_CHUNK - 1) / EW_CHUNK);
  if (tiles > 1)
    weft__ctx_parallel(ctx, tiles, ew_tile, j);
  else
    ew_range(j, 0, j->n);
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
    case WEFT__OP_MUL:
    case WEFT__OP_SCALE:
    case WEFT__OP_RELU: {
      int binary = nd->kind == WEFT__OP_ADD || nd->kind == WEFT__OP_SUB || nd->kind == WEFT__OP_MUL;
      ew_job j = {nd->kind, dt, n, d[0], binary ? d[1] : NULL, d[binary ? 2 : 1], weft__node_alpha(nd), weft__node_fill(nd)};
      elementwise(ctx, &j);
      return WEFT_OK;
    }
    case WEFT__OP_SUM:
    case WEFT__OP_NORM: {
      double v = 0;
      int rc = reduce(ctx, d[0], dt, n, nd->kind == WEFT__OP_NORM, &v);
      if (rc == WEFT_OK) store_scalar(d[1], dt, v);
      return rc;
    }
    case WEFT__OP_COPY: {
      const weft_tensor *t1 = nd->args[1].t;
      if (d[0] == d[1] || t0->bytes == 0) return WEFT_OK;
      if (weft__tensor_contiguous(t0) && weft__tensor_contiguous(t1)) {
        ew_job j = {WEFT__OP_COPY, dt, n, d[0], NULL, d[1], 0, weft__node_fill(nd)};
        elementwise(ctx, &j);
        return WEFT_OK;
      }
      /* A strided tile to or from its staging tensor (auto placement's transfers): row by row,
       * blocks of rows split over the workers. */
      size_t es = weft_dtype_size(dt);
      int64_t per = EW_CHUNK / (t0->shape[1] > 0 ? t0->shape[1] : 1);
      rows_job j = {d[0], d[1], (size_t)t0->shape[1] * es, (size_t)weft__tensor_ld(t0) * es,
                    (size_t)weft__tensor_ld(t1) * es, t0->shape[0], per > 0 ? per : 1};
      uint32_t tiles = (uint32_t)((j.rows + j.per - 1) / j.per);
      if (tiles > 1)
        weft__ctx_parallel(ctx, tiles, rows_tile, &j);
      else
        rows_tile(&j, 0);
      return WEFT_OK;
    }
    case WEFT__OP_FILL: {
      ew_job j = {WEFT__OP_FILL, dt, n, NULL, NULL, d[0], 0, weft__node_fill(nd)};
      if (t0->bytes) elementwise(ctx, &j);
      return WEFT_OK;
    }
    case WEFT__OP_GEMM:
    case WEFT__OP_POTRF:
    case WEFT__OP_TRSM:
    case WEFT__OP_TRMM:
    case WEFT__OP_TRTRI:
    case WEFT__OP_SYRK:
      return linear_algebra(ctx);
    default:
      return weft_ctx_fail(ctx, "unknown op kind %d", nd->kind);
  }
}
