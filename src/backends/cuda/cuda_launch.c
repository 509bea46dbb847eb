/* cuda_launch.c — enqueueing one node: the waits on its predecessors' events, the frees of the
 * dead temporaries the memory plan gave it, the allocation of the temporaries it creates, its
 * kernels or copies, and its own event. The host never waits for the device here (except under
 * WEFT_LAUNCH_BLOCKING, which synchronises after every node to pin a fault on it).
 *
 * A node's work goes to one stream (two for a copy staged through the host), whose lock is
 * held for the whole sequence: the stream's cuBLAS handle and reduction scratch are then the
 * node's alone, and two workers enqueueing independent nodes on one stream cannot interleave
 * their waits and records. A worker that finds the stream taken leaves its node to the holder
 * ("Combining", below). The same code runs inside a stream capture (cuda_replay.c), on the
 * capture's private streams, handles and scratch.
 *
 * What the scheduler learns: a node with a CPU successor returns WEFT__PENDING and its
 * completion comes from the device's completion thread; every other node returns WEFT_OK as
 * soon as it is enqueued, and the run's drain (cuda_complete.c) waits for all of them at once;
 * a node left to the holder of its stream returns WEFT__DEFERRED, and the holder reports one
 * of those for it once it has enqueued it.
 *
 * Products: row-major C = A B is column-major C^T = B^T A^T, so cuBLAS gets the operands
 * swapped and nothing is transposed; linear's x w^T likewise. Math mode is cuBLAS's default
 * (exact fp32), or TF32 tensor cores when the runtime allows them. A result that aliases an
 * operand is computed into a stream-ordered scratch buffer and copied back. */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

#define NONE UINT32_MAX

/* Formats a failure into ctx->err and returns its status. The scheduler prefixes the node's
 * description (node, op, device). */
#define FAIL_CUDA(ctx, e, what) fail_cuda(ctx, e, what, __FILE__, __LINE__)
#define FAIL_BLAS(ctx, s, what) fail_blas(ctx, s, what, __FILE__, __LINE__)

static const char *base(const char *path) {
  const char *s = strrchr(path, '/');
  return s != NULL ? s + 1 : path;
}

static int fail_cuda(weft_kernel_ctx *ctx, cudaError_t e, const char *what, const char *file, int line) {
  cudaGetLastError(); /* clears a non-sticky error for the next node */
  snprintf(ctx->err, ctx->err_size, "%s failed: %s (%s) [%s:%d]", what, cudaGetErrorName(e),
           cudaGetErrorString(e), base(file), line);
  return e == cudaErrorMemoryAllocation ? WEFT_EDEVMEM : WEFT_ECUDA;
}

static int fail_blas(weft_kernel_ctx *ctx, cublasStatus_t s, const char *what, const char *file, int line) {
  cudaGetLastError();
  snprintf(ctx->err, ctx->err_size, "%s failed: %s [%s:%d]", what, cublasGetStatusName(s), base(file), line);
  return s == CUBLAS_STATUS_ALLOC_FAILED ? WEFT_EDEVMEM : WEFT_ECUBLAS;
}

/* What one enqueue works with. */
typedef struct lane {
  cu_state *st;
  cu_device *d;
  cudaStream_t s;
  cu_stream *own;      /* the device's stream object (its lock, handle, scratch) */
  cublasHandle_t blas;
  double *scratch;
  int stream; /* index in the device */
  int capture;
  int held;   /* the caller held the stream's lock already, and keeps it */
} lane;

/* Inside a capture the lane is the capture's private stream with the plan's own handle,
 * workspace and scratch (a replay may run beside eager nodes of other graphs that use the
 * shared ones), and no lock is needed: one thread captures. */
static void lane_open(cu_state *st, cu_plan *cp, const cu_streams *cap, int dev, int stream, int held, lane *l) {
  l->st = st;
  l->d = &st->dev[dev];
  l->own = &l->d->streams[stream];
  l->capture = cap != NULL;
  l->held = held;
  l->stream = stream;
  /* Asking is cheaper than setting (a context switch even when it is already current), and a
   * worker usually stays on one device. But on a thread that has not yet bound a context,
   * cudaGetDevice answers 0 all the same, and cuBLAS (which asks the driver for the current
   * context) then fails inside (compute-sanitizer reported CUDA_ERROR_INVALID_CONTEXT from
   * cublasLt): each thread sets its device the first time. */
  static _Thread_local int bound;
  int cur = -1;
  if (!bound || cudaGetDevice(&cur) != cudaSuccess || cur != l->d->ordinal) {
    cudaSetDevice(l->d->ordinal);
    bound = 1;
  }
  if (cap != NULL) {
    int compute = stream < l->d->ncompute;
    l->s = cap->s[dev][stream];
    l->blas = compute ? cp->replay_blas[dev][stream] : NULL;
    l->scratch = compute ? cp->replay_scratch[dev][stream] : NULL;
    return;
  }
  l->s = l->own->s;
  l->blas = l->own->blas;
  l->scratch = l->own->scratch;
  if (!held) weft__cu_lock(l->own);
}

static void lane_close(lane *l) {
  if (!l->capture && !l->held) weft__cu_release(l->st, l->own);
}

static int check_dims(weft_kernel_ctx *ctx, int64_t a, int64_t b, int64_t c) {
  if (a > INT32_MAX || b > INT32_MAX || c > INT32_MAX) {
    snprintf(ctx->err, ctx->err_size, "matrix dimensions %lld x %lld x %lld exceed cuBLAS's int range",
             (long long)a, (long long)b, (long long)c);
    return WEFT_EINVAL;
  }
  return WEFT_OK;
}

/* C[m,n] = A[m,k] . op(B), op(B) = B[k,n] (transb 0) or B[n,k]^T (transb 1), row-major. */
static int gemm(weft_kernel_ctx *ctx, lane *l, int dtype, int64_t m, int64_t n, int64_t k, const void *a,
                const void *b, int transb, void *c) {
  int rc = check_dims(ctx, m, n, k);
  if (rc != WEFT_OK || m == 0 || n == 0) return rc;
  size_t es = dtype == WEFT_F32 ? 4 : 8, cbytes = (size_t)(m * n) * es;
  if (k == 0) {
    cudaError_t e = cudaMemsetAsync(c, 0, cbytes, l->s);
    return e == cudaSuccess ? WEFT_OK : FAIL_CUDA(ctx, e, "cudaMemsetAsync");
  }
  void *out = c;
  if (c == a || c == b) {
    cudaError_t e = weft__cu_pool_alloc(l->d, &out, cbytes, l->s);
    if (e != cudaSuccess) return FAIL_CUDA(ctx, e, "allocating the scratch result of an in-place product");
  }
  cublasOperation_t tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  int ldb = transb ? (int)k : (int)n;
  cublasStatus_t s;
  if (dtype == WEFT_F32) {
    const float one = 1.0f, zero = 0.0f;
    s = cublasSgemm(l->blas, tb, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one, b, ldb, a, (int)k, &zero, out, (int)n);
  } else {
    const double one = 1.0, zero = 0.0;
    s = cublasDgemm(l->blas, tb, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one, b, ldb, a, (int)k, &zero, out, (int)n);
  }
  if (s != CUBLAS_STATUS_SUCCESS) rc = FAIL_BLAS(ctx, s, dtype == WEFT_F32 ? "cublasSgemm" : "cublasDgemm");
  if (out != c) {
    cudaError_t e = rc == WEFT_OK ? cudaMemcpyAsync(c, out, cbytes, cudaMemcpyDeviceToDevice, l->s) : cudaSuccess;
    cudaError_t f = cudaFreeAsync(out, l->s);
    if (rc == WEFT_OK && e != cudaSuccess) rc = FAIL_CUDA(ctx, e, "cudaMemcpyAsync (in-place product)");
    if (rc == WEFT_OK && f != cudaSuccess) rc = FAIL_CUDA(ctx, f, "cudaFreeAsync");
  }
  return rc;
}

static int kernel_status(weft_kernel_ctx *ctx, int e, const char *what) {
  return e == cudaSuccess ? WEFT_OK : FAIL_CUDA(ctx, (cudaError_t)e, what);
}

/* Batches (src/sched/plan/batches.c): the node's op goes into its batch, and the batch's last node launches
 * all of them as one kernel. A node's arguments are final when it is dispatched (temporaries
 * were allocated just before), so its descriptor can be written now and run later. `l` is
 * used by the last node only. */
static int batch_add(weft_kernel_ctx *ctx, cu_plan *cp, const weft__gnode *x, lane *l) {
  cu_batch *bt = &cp->batches[x->batch];
  const weft_node *nd = ctx->node;
  int kind;
  switch (nd->kind) { /* the batchable ops (src/sched/plan/batches.c) */
    case WEFT__OP_ADD: kind = WEFT__CU_ADD; break;
    case WEFT__OP_SUB: kind = WEFT__CU_SUB; break;
    case WEFT__OP_MUL: kind = WEFT__CU_MUL; break;
    case WEFT__OP_SCALE: kind = WEFT__CU_SCALE; break;
    default: kind = WEFT__CU_RELU; break;
  }
  WEFT_ASSERT(bt->count < bt->len);
  weft__cu_bop *o = &bt->ops[bt->count++];
  o->a = ctx->data[0];
  o->b = kind <= WEFT__CU_MUL ? ctx->data[1] : NULL;
  o->c = ctx->data[nd->nargs - 1];
  o->alpha = kind == WEFT__CU_SCALE ? weft__node_alpha(nd) : 0;
  o->n = (uint32_t)nd->args[0].t->numel;
  o->kind = (uint8_t)kind;
  o->dtype = (uint8_t)nd->args[0].t->dtype;
  if (x->flags & WEFT__G_DEFER) return WEFT_OK;
  uint32_t count = bt->count;
  bt->count = 0;
  return kernel_status(ctx, weft__cu_batch(bt->ops, count, l->s), "the batch kernel");
}

/* The node's arguments that are temporaries of the plan: their memory in this run. */
static void temp_args(const cu_plan *cp, weft_kernel_ctx *ctx) {
  const weft_node *nd = ctx->node;
  for (int a = 0; a < nd->nargs; a++) {
    uint32_t t = nd->args[a].t->id;
    if (cp->temp[t]) ctx->data[a] = cp->tptr[t];
  }
}

cudaError_t weft__cu_batch_flush(cu_state *st, cu_plan *cp, cu_batch *bt) {
  uint32_t count = bt->count;
  if (count == 0) return cudaSuccess;
  bt->count = 0;
  const weft__gnode *x = &cp->x[bt->last];
  cu_stream *own = &st->dev[x->dev].streams[x->stream];
  cudaError_t e = cudaSetDevice(st->dev[x->dev].ordinal);
  if (e != cudaSuccess) return e;
  weft__cu_lock(own);
  e = (cudaError_t)weft__cu_batch(bt->ops, count, own->s);
  weft__cu_release(st, own);
  return e;
}


/* ---- dense linear algebra ---------------------------------------------------------------- */

/* A row-major matrix is the column-major transpose of the same memory, so each row-major op
 * maps to the column-major one with the operands' roles swapped: C = op(A) op(B) is
 * C^T = op(B)^T op(A)^T (gemm with B first); a row-major lower triangle is the column-major
 * upper one (potrf 'U' gives L^T there, which is L here; syrk on the upper triangle with A
 * transposed); a solve from the right is one from the left (trsm with the side swapped and
 * the triangle upper). Nothing is transposed in memory. */

static int fail_solver(weft_kernel_ctx *ctx, cusolverStatus_t s, const char *what) {
  cudaGetLastError();
  snprintf(ctx->err, ctx->err_size, "%s failed: cuSOLVER status %d", what, (int)s);
  return s == CUSOLVER_STATUS_ALLOC_FAILED ? WEFT_EDEVMEM : WEFT_ECUBLAS;
}

/* The stream's info word (a potrf's or trtri's result code on the device), made at its first
 * potrf or trtri (under the stream's lock). */
static int info_of(weft_kernel_ctx *ctx, lane *l) {
  cu_stream *s = l->own;
  cudaError_t e;
  if (s->solver_info == NULL && (e = cudaMalloc((void **)&s->solver_info, sizeof(int))) != cudaSuccess) {
    s->solver_info = NULL;
    return FAIL_CUDA(ctx, e, "cudaMalloc (a potrf's or trtri's info word)");
  }
  return WEFT_OK;
}

/* The stream's cuSOLVER handle and info word, made at its first potrf (under the stream's
 * lock). */
static int solver_of(weft_kernel_ctx *ctx, lane *l) {
  cu_stream *s = l->own;
  int rc = info_of(ctx, l);
  if (rc != WEFT_OK || s->solver != NULL) return rc;
  cusolverStatus_t cs;
  if ((cs = cusolverDnCreate(&s->solver)) != CUSOLVER_STATUS_SUCCESS) {
    s->solver = NULL;
    return fail_solver(ctx, cs, "cusolverDnCreate");
  }
  if ((cs = cusolverDnSetStream(s->solver, s->s)) != CUSOLVER_STATUS_SUCCESS ||
      (cs = cusolverDnCreateParams(&s->solver_params)) != CUSOLVER_STATUS_SUCCESS)
    return fail_solver(ctx, cs, "configuring cuSOLVER");
  return WEFT_OK;
}

/* The Cholesky factor in A's row-major `uplo` triangle. The row-major upper triangle is
 * cuSOLVER's column-major lower one: factored in place. The row-major lower triangle is its
 * upper one, but that mode ran 2.4 x slower than the lower mode on an H100 (a 2048^2 f64 tile:
 * 2.00 ms against 0.84; the whole n = 32768 matrix 414 against 258 ms), so the tile is
 * transposed into scratch, factored in the lower mode there, and its lower triangle transposed
 * back (two 32 x 32-tiled passes, about 40 us each for that tile). */
static int potrf(weft_kernel_ctx *ctx, cu_plan *cp, lane *l, int dtype, int upper, int64_t n, void *a, int64_t lda) {
  int rc = solver_of(ctx, l);
  if (rc != WEFT_OK) return rc;
  cu_stream *s = l->own;
  cudaDataType t = dtype == WEFT_F32 ? CUDA_R_32F : CUDA_R_64F;
  size_t es = dtype == WEFT_F32 ? 4 : 8;
  size_t dev_bytes = 0, host_bytes = 0;
  void *at = NULL, *work = NULL, *m = a;
  int64_t ldm = lda;
  cudaError_t e = cudaSuccess;
  if (!upper) {
    if ((e = weft__cu_pool_alloc(l->d, &at, (size_t)(n * n) * es, l->s)) != cudaSuccess)
      return FAIL_CUDA(ctx, e, "allocating a potrf's scratch");
    m = at, ldm = n;
  }
  cusolverStatus_t cs = cusolverDnXpotrf_bufferSize(s->solver, s->solver_params, CUBLAS_FILL_MODE_LOWER, n, t, m, ldm,
                                                    t, &dev_bytes, &host_bytes);
  if (cs != CUSOLVER_STATUS_SUCCESS) rc = fail_solver(ctx, cs, "cusolverDnXpotrf_bufferSize");
  if (rc == WEFT_OK && host_bytes > s->solver_host_bytes) {
    void *h = weft__realloc(s->solver_host, host_bytes);
    if (h == NULL)
      rc = weft_ctx_fail(ctx, "no host memory for cuSOLVER's %zu-byte workspace", host_bytes);
    else {
      s->solver_host = h;
      s->solver_host_bytes = host_bytes;
    }
  }
  if (rc == WEFT_OK && dev_bytes > 0 && (e = weft__cu_pool_alloc(l->d, &work, dev_bytes, l->s)) != cudaSuccess)
    rc = FAIL_CUDA(ctx, e, "allocating cuSOLVER's workspace");
  if (rc == WEFT_OK && !upper && (e = (cudaError_t)weft__cu_transpose(dtype, n, a, lda, at, n, 0, l->s)) != cudaSuccess)
    rc = FAIL_CUDA(ctx, e, "the transpose kernel");
  if (rc == WEFT_OK &&
      (cs = cusolverDnXpotrf(s->solver, s->solver_params, CUBLAS_FILL_MODE_LOWER, n, t, m, ldm, t, work, dev_bytes,
                             s->solver_host, host_bytes, s->solver_info)) != CUSOLVER_STATUS_SUCCESS)
    rc = fail_solver(ctx, cs, "cusolverDnXpotrf");
  if (rc == WEFT_OK && !upper && (e = (cudaError_t)weft__cu_transpose(dtype, n, at, n, a, lda, 1, l->s)) != cudaSuccess)
    rc = FAIL_CUDA(ctx, e, "the transpose kernel");
  /* The host reads the info after the run (cuda_complete.c): a matrix that is not positive
   * definite fails the run there, naming this node. */
  if (rc == WEFT_OK &&
      (e = cudaMemcpyAsync(&cp->la_info[ctx->index], s->solver_info, sizeof(int), cudaMemcpyDeviceToHost, l->s)) !=
          cudaSuccess)
    rc = FAIL_CUDA(ctx, e, "cudaMemcpyAsync (potrf's info)");
  if (work != NULL && (e = cudaFreeAsync(work, l->s)) != cudaSuccess && rc == WEFT_OK)
    rc = FAIL_CUDA(ctx, e, "cudaFreeAsync");
  if (at != NULL && (e = cudaFreeAsync(at, l->s)) != cudaSuccess && rc == WEFT_OK) rc = FAIL_CUDA(ctx, e, "cudaFreeAsync");
  return rc;
}

/* C = alpha op(A) op(B) + beta C on row-major matrices: cuBLAS's column-major call on the
 * transposes (C^T = op(B)^T op(A)^T). */
static cublasStatus_t row_gemm(lane *l, int f32, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                               const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
  cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  float af = (float)alpha, bf = (float)beta;
  return f32 ? cublasSgemm(l->blas, ob, oa, (int)n, (int)m, (int)k, &af, b, (int)ldb, a, (int)lda, &bf, c, (int)ldc)
             : cublasDgemm(l->blas, ob, oa, (int)n, (int)m, (int)k, &alpha, b, (int)ldb, a, (int)lda, &beta, c, (int)ldc);
}

/* B = alpha op(T) B (left) or alpha B op(T) (right), T triangular: cuBLAS's trmm out of place
 * into scratch, copied back into B. In place it ran at a quarter of that rate on an H100 (a
 * 2048^2 f64 tile: 694 us in place, 186 us out of place and 45 us for the copy back, against
 * 297 us for a product of twice the flops; docs/benchmarks.md). side, fill and t are the
 * column-major call's, trsm's (linear_algebra below). */
static int trmm(weft_kernel_ctx *ctx, lane *l, const weft__la *la, const weft_tensor *lt, const weft_tensor *bt,
                cublasSideMode_t side, cublasFillMode_t fill, cublasOperation_t t) {
  void **d = ctx->data;
  int f32 = lt->dtype == WEFT_F32;
  int64_t m = bt->shape[0], n = bt->shape[1], lda = weft__tensor_ld(lt), ldb = weft__tensor_ld(bt);
  size_t es = f32 ? 4 : 8;
  void *out = NULL;
  cudaError_t e = weft__cu_pool_alloc(l->d, &out, (size_t)(m * n) * es, l->s);
  if (e != cudaSuccess) return FAIL_CUDA(ctx, e, "allocating a trmm's scratch");
  float af = (float)la->alpha;
  cublasStatus_t s = f32 ? cublasStrmm(l->blas, side, fill, t, CUBLAS_DIAG_NON_UNIT, (int)n, (int)m, &af, d[0],
                                       (int)lda, d[1], (int)ldb, out, (int)n)
                         : cublasDtrmm(l->blas, side, fill, t, CUBLAS_DIAG_NON_UNIT, (int)n, (int)m, &la->alpha, d[0],
                                       (int)lda, d[1], (int)ldb, out, (int)n);
  int rc = s == CUBLAS_STATUS_SUCCESS ? WEFT_OK : FAIL_BLAS(ctx, s, f32 ? "cublasStrmm" : "cublasDtrmm");
  if (rc == WEFT_OK &&
      (e = cudaMemcpy2DAsync(d[1], (size_t)ldb * es, out, (size_t)n * es, (size_t)n * es, (size_t)m,
                             cudaMemcpyDeviceToDevice, l->s)) != cudaSuccess)
    rc = FAIL_CUDA(ctx, e, "cudaMemcpy2DAsync");
  if ((e = cudaFreeAsync(out, l->s)) != cudaSuccess && rc == WEFT_OK) rc = FAIL_CUDA(ctx, e, "cudaFreeAsync");
  return rc;
}

/* Column-major C = alpha A B (no transposes) for `count` problems `stride` elements apart in
 * each operand (A's, B's and C's strides sa, sb, sc). */
static cublasStatus_t gemm_batched(lane *l, int f32, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                                   int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb, void *c,
                                   int64_t ldc, int64_t sc, int64_t count) {
  float af = (float)alpha, zf = 0;
  double zd = 0;
  return f32 ? cublasSgemmStridedBatched(l->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)m, (int)n, (int)k, &af, a, (int)lda, sa,
                                         b, (int)ldb, sb, &zf, c, (int)ldc, sc, (int)count)
             : cublasDgemmStridedBatched(l->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)m, (int)n, (int)k, &alpha, a, (int)lda,
                                         sa, b, (int)ldb, sb, &zd, c, (int)ldc, sc, (int)count);
}

/* W = T^-1 for a column-major triangular T (`upper`, or lower), W written whole. cuBLAS's trsm
 * of the identity took 1.18 ms for a 2048^2 f64 tile on an H200 alone and 4.3 ms beside a
 * stream of products (its long chain of small kernels waits for SMs the products hold), and
 * cusolverDnXtrtri 3.2 ms alone, on the tiled Cholesky's critical path. Here: the diagonal
 * blocks of WEFT__CU_TRTRI_NB inverted by one kernel (cuda_kernels.cu), then levels of
 * doubling size s, each joining every pair of inverted neighbours with two batched products:
 * lower, [A 0; B C]^-1 = [A^-1 0; -C^-1 B A^-1 C^-1]; upper, [A B; 0 C]^-1 = [A^-1
 * -A^-1 B C^-1; 0 C^-1] (the zero blocks make full products exact). 2 log2(n / 64) + 1
 * kernels: 0.20 ms alone, 0.61 beside the products, the same residual as the trsm's (measured
 * on an H200, 2026-11-27). A pair at the end may be shorter (s2 < s). */
static int trtri(weft_kernel_ctx *ctx, cu_plan *cp, lane *l, int dtype, int upper, int64_t n, const void *t,
                 int64_t ldt, void *w, int64_t ldw) {
  int rc = info_of(ctx, l); /* no cuSOLVER handle: the kernels are ours and cuBLAS's */
  if (rc != WEFT_OK) return rc;
  int f32 = dtype == WEFT_F32;
  size_t es = f32 ? 4 : 8;
  int64_t nb = WEFT__CU_TRTRI_NB, scratch = 0;
  for (int64_t s = nb; s < n; s *= 2) {
    int64_t full = n / (2 * s), s2 = n - full * 2 * s - s;
    scratch = WEFT__MAX(scratch, WEFT__MAX(full * s * s, s2 * s));
  }
  void *tmp = NULL;
  cudaError_t e = scratch > 0 ? weft__cu_pool_alloc(l->d, &tmp, (size_t)scratch * es, l->s) : cudaSuccess;
  if (e != cudaSuccess) return FAIL_CUDA(ctx, e, "allocating a trtri's scratch");
  int *info = l->own->solver_info;
  if ((e = (cudaError_t)weft__cu_trtri_diagonal(dtype, upper, n, t, ldt, w, ldw, info, l->s)) != cudaSuccess)
    rc = FAIL_CUDA(ctx, e, "the trtri kernel");
#define AT(p, ld, r, c) ((char *)(p) + ((size_t)(c) * (size_t)(ld) + (size_t)(r)) * es)
  cublasStatus_t bs = CUBLAS_STATUS_SUCCESS;
  for (int64_t s = nb; s < n && rc == WEFT_OK && bs == CUBLAS_STATUS_SUCCESS; s *= 2) {
    int64_t full = n / (2 * s), step = 2 * s * (ldt + 1), wstep = 2 * s * (ldw + 1);
    for (int part = 0; part < 2 && bs == CUBLAS_STATUS_SUCCESS; part++) {
      /* part 0: the full pairs, batched; part 1: the shorter pair at the end, if any */
      int64_t o = part ? full * 2 * s : 0, s2 = part ? n - o - s : s, count = part ? 1 : full;
      if (count == 0 || s2 <= 0) continue;
      if (upper) { /* tmp = B C^-1 (s x s2); W12 = -A^-1 tmp */
        bs = gemm_batched(l, f32, s, s2, s2, 1.0, AT(t, ldt, o, o + s), ldt, step, AT(w, ldw, o + s, o + s), ldw, wstep,
                          tmp, s, s * s2, count);
        if (bs == CUBLAS_STATUS_SUCCESS)
          bs = gemm_batched(l, f32, s, s2, s, -1.0, AT(w, ldw, o, o), ldw, wstep, tmp, s, s * s2,
                            AT(w, ldw, o, o + s), ldw, wstep, count);
      } else { /* tmp = B A^-1 (s2 x s); W21 = -C^-1 tmp */
        bs = gemm_batched(l, f32, s2, s, s, 1.0, AT(t, ldt, o + s, o), ldt, step, AT(w, ldw, o, o), ldw, wstep, tmp, s2,
                          s * s2, count);
        if (bs == CUBLAS_STATUS_SUCCESS)
          bs = gemm_batched(l, f32, s2, s, s2, -1.0, AT(w, ldw, o + s, o + s), ldw, wstep, tmp, s2, s * s2,
                            AT(w, ldw, o + s, o), ldw, wstep, count);
      }
    }
  }
#undef AT
  if (rc == WEFT_OK && bs != CUBLAS_STATUS_SUCCESS)
    rc = FAIL_BLAS(ctx, bs, f32 ? "cublasSgemmStridedBatched" : "cublasDgemmStridedBatched");
  /* As potrf's: the host reads the info after the run (cuda_complete.c). */
  if (rc == WEFT_OK &&
      (e = cudaMemcpyAsync(&cp->la_info[ctx->index], info, sizeof(int), cudaMemcpyDeviceToHost, l->s)) != cudaSuccess)
    rc = FAIL_CUDA(ctx, e, "cudaMemcpyAsync (trtri's info)");
  if (tmp != NULL && (e = cudaFreeAsync(tmp, l->s)) != cudaSuccess && rc == WEFT_OK) rc = FAIL_CUDA(ctx, e, "cudaFreeAsync");
  return rc;
}

static int linear_algebra(weft_kernel_ctx *ctx, cu_plan *cp, lane *l) {
  const weft_node *nd = ctx->node;
  const weft__la *la = nd->params;
  const weft_tensor *a = nd->args[0].t, *out = nd->args[nd->nargs - 1].t;
  void **d = ctx->data;
  int f32 = a->dtype == WEFT_F32;
  int64_t m = out->shape[0], n = out->shape[1], lda = weft__tensor_ld(a), ldc = weft__tensor_ld(out);
  int64_t k = nd->kind == WEFT__OP_GEMM || nd->kind == WEFT__OP_SYRK ? a->shape[la->trans_a ? 0 : 1] : a->shape[1];
  /* The row-major lower (upper) triangle is the column-major upper (lower) one; a triangular
   * op from the right is one from the left of the transpose (trsm, trmm). */
  cublasFillMode_t fill = la->uplo == WEFT_UPPER ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
  cublasSideMode_t side = la->side == WEFT_RIGHT ? CUBLAS_SIDE_LEFT : CUBLAS_SIDE_RIGHT;
  cublasOperation_t ta = la->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  int rc = check_dims(ctx, m, n, k);
  if (rc != WEFT_OK || m == 0 || n == 0) return rc;
  if (lda > INT32_MAX || ldc > INT32_MAX) return check_dims(ctx, lda, ldc, 0);
  float af = (float)la->alpha, bf = (float)la->beta;
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  const char *what = "";
  switch (nd->kind) {
    case WEFT__OP_GEMM:
      what = f32 ? "cublasSgemm" : "cublasDgemm";
      s = row_gemm(l, f32, la->trans_a, la->trans_b, m, n, k, la->alpha, d[0], lda, d[1],
                   weft__tensor_ld(nd->args[1].t), la->beta, d[2], ldc);
      break;
    case WEFT__OP_POTRF:
      return potrf(ctx, cp, l, a->dtype, la->uplo == WEFT_UPPER, n, d[0], lda);
    case WEFT__OP_TRSM:
      what = f32 ? "cublasStrsm" : "cublasDtrsm";
      s = f32 ? cublasStrsm(l->blas, side, fill, ta, CUBLAS_DIAG_NON_UNIT, (int)n, (int)m, &af, d[0], (int)lda, d[1],
                            (int)ldc)
              : cublasDtrsm(l->blas, side, fill, ta, CUBLAS_DIAG_NON_UNIT, (int)n, (int)m, &la->alpha, d[0], (int)lda,
                            d[1], (int)ldc);
      break;
    case WEFT__OP_TRMM:
      return trmm(ctx, l, la, a, out, side, fill, ta);
    case WEFT__OP_TRTRI: /* the row-major lower triangle is the column-major upper one */
      return trtri(ctx, cp, l, a->dtype, la->uplo == WEFT_LOWER, n, d[0], lda, d[1], ldc);
    case WEFT__OP_SYRK: {
      /* Row-major C = A A^T is column-major C = A'^T A' (A' = A^T, the same memory); A^T A is A' A'^T. */
      cublasOperation_t t = la->trans_a ? CUBLAS_OP_N : CUBLAS_OP_T;
      what = f32 ? "cublasSsyrk" : "cublasDsyrk";
      s = f32 ? cublasSsyrk(l->blas, fill, t, (int)n, (int)k, &af, d[0], (int)lda, &bf, d[1], (int)ldc)
              : cublasDsyrk(l->blas, fill, t, (int)n, (int)k, &la->alpha, d[0], (int)lda, &la->beta, d[1], (int)ldc);
      break;
    }
    default:
      break;
  }
  return s == CUBLAS_STATUS_SUCCESS ? WEFT_OK : FAIL_BLAS(ctx, s, what);
}

static int copy(weft_kernel_ctx *ctx, cu_state *st, cu_plan *cp, const weft__gnode *x, lane *l, const cu_streams *cap) {
  const weft_node *nd = ctx->node;
  const weft_tensor *src = nd->args[0].t, *dst = nd->args[1].t;
  size_t bytes = src->bytes;
  void *to = ctx->data[1];
  const void *from = ctx->data[0];
  if (bytes == 0 || to == from) return WEFT_OK;
  cudaError_t e;
  if (!weft__tensor_contiguous(src) || !weft__tensor_contiguous(dst)) {
    /* A strided tile to or from its replica (auto placement's transfers): one 2-D copy. */
    if (x->flags & WEFT__G_STAGED) {
      snprintf(ctx->err, ctx->err_size, "a strided tile between two GPUs without peer access is not supported yet");
      return WEFT_ENOTSUP;
    }
    size_t es = src->dtype == WEFT_F32 ? 4 : 8, width = (size_t)src->shape[1] * es;
    e = cudaMemcpy2DAsync(to, (size_t)weft__tensor_ld(dst) * es, from, (size_t)weft__tensor_ld(src) * es, width,
                          (size_t)src->shape[0], cudaMemcpyDefault, l->s);
    return e == cudaSuccess ? WEFT_OK : FAIL_CUDA(ctx, e, "cudaMemcpy2DAsync");
  }
  if (src->device.kind == WEFT_DEVICE_CPU) {
    e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, l->s);
  } else if (dst->device.kind == WEFT_DEVICE_CPU && (x->flags & WEFT__G_SPLIT_COPY)) {
    /* The product's first row half is done at its stage event: copy it, then the rest. */
    const cu_node *m = &cp->ev[x->split_of];
    int64_t rows = src->shape[0], h = weft__cu_split_rows(rows);
    size_t first = bytes / (size_t)rows * (size_t)h;
    if ((e = cudaStreamWaitEvent(l->s, m->stage_event, 0)) == cudaSuccess &&
        (e = cudaMemcpyAsync(to, from, first, cudaMemcpyDeviceToHost, l->s)) == cudaSuccess &&
        (e = cudaStreamWaitEvent(l->s, m->event, 0)) == cudaSuccess)
      e = cudaMemcpyAsync((char *)to + first, (const char *)from + first, bytes - first, cudaMemcpyDeviceToHost, l->s);
  } else if (dst->device.kind == WEFT_DEVICE_CPU) {
    e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, l->s);
  } else if (src->device.index == dst->device.index) {
    e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, l->s);
  } else if (!(x->flags & WEFT__G_STAGED)) {
    /* Between GPUs with peer access: a plain copy under unified addressing goes over the link,
     * and unlike cudaMemcpyPeerAsync it can be captured into a CUDA graph. */
    e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, l->s);
  } else {
    /* No peer access: device to pinned host memory on the source's D2H stream, then host to
     * device on the destination's H2D stream, ordered by the staging event. The lane moves to
     * the destination; the caller frees and records there. */
    const cu_node *o = &cp->ev[ctx->index];
    if ((e = cudaMemcpyAsync(o->stage, from, bytes, cudaMemcpyDeviceToHost, l->s)) != cudaSuccess ||
        (e = cudaEventRecord(o->stage_event, l->s)) != cudaSuccess)
      return FAIL_CUDA(ctx, e, "staging a device-to-device copy through the host");
    lane_close(l);
    lane_open(st, cp, cap, x->dev, x->stream, 0, l);
    if ((e = cudaStreamWaitEvent(l->s, o->stage_event, 0)) != cudaSuccess ||
        (e = cudaMemcpyAsync(to, o->stage, bytes, cudaMemcpyHostToDevice, l->s)) != cudaSuccess)
      return FAIL_CUDA(ctx, e, "staging a device-to-device copy through the host");
    return WEFT_OK;
  }
  return e == cudaSuccess ? WEFT_OK : FAIL_CUDA(ctx, e, "cudaMemcpyAsync");
}

static int work(weft_kernel_ctx *ctx, cu_state *st, cu_plan *cp, const weft__gnode *x, lane *l, const cu_streams *cap) {
  weft_node *nd = ctx->node;
  if (nd->kind == WEFT__OP_USER) {
    ctx->stream = l->s;
    ctx->blas = l->blas;
    int rc = nd->user_op->desc.cuda(ctx);
    if (rc > WEFT_OK) { /* the scheduler's own values (WEFT__PENDING, WEFT__DEFERRED) */
      snprintf(ctx->err, ctx->err_size, "the op's CUDA kernel returned %d, which is not a weft status", rc);
      return WEFT_EKERNEL;
    }
    if (rc != WEFT_OK && ctx->err[0] == '\0')
      snprintf(ctx->err, ctx->err_size, "the op's CUDA kernel returned %s", weft_status_name(rc));
    return rc;
  }
  if (x->flags & (WEFT__G_DEFER | WEFT__G_FLUSH)) return batch_add(ctx, cp, x, l);
  const weft_tensor *t0 = nd->args[0].t;
  int dt = t0->dtype;
  void **d = ctx->data;
  switch (nd->kind) {
    case WEFT__OP_MM: {
      int64_t m = t0->shape[0], n = nd->args[1].t->shape[1], k = t0->shape[1];
      if (!(x->flags & WEFT__G_SPLIT)) return gemm(ctx, l, dt, m, n, k, d[0], d[1], 0, d[2]);
      /* Two row halves (a multiple of 128 rows first), the first marked by its event. */
      int64_t h = weft__cu_split_rows(m);
      size_t es = dt == WEFT_F32 ? 4 : 8;
      int rc = gemm(ctx, l, dt, h, n, k, d[0], d[1], 0, d[2]);
      cudaError_t e = rc == WEFT_OK ? cudaEventRecord(cp->ev[ctx->index].stage_event, l->s) : cudaSuccess;
      if (e != cudaSuccess) return FAIL_CUDA(ctx, e, "cudaEventRecord");
      if (rc != WEFT_OK) return rc;
      return gemm(ctx, l, dt, m - h, n, k, (const char *)d[0] + (size_t)(h * k) * es, d[1], 0,
                  (char *)d[2] + (size_t)(h * n) * es);
    }
    case WEFT__OP_LINEAR: {
      const weft_tensor *w = nd->args[1].t;
      int rc = gemm(ctx, l, dt, t0->shape[0], w->shape[0], t0->shape[1], d[0], d[1], 1, d[nd->nargs - 1]);
      if (rc != WEFT_OK || nd->nargs != 4) return rc;
      return kernel_status(ctx, weft__cu_add_bias(dt, t0->shape[0], w->shape[0], d[3], d[2], l->s), "the bias kernel");
    }
    case WEFT__OP_ADD:
    case WEFT__OP_SUB:
    case WEFT__OP_MUL: {
      int k = nd->kind == WEFT__OP_ADD ? WEFT__CU_ADD : nd->kind == WEFT__OP_SUB ? WEFT__CU_SUB : WEFT__CU_MUL;
      return kernel_status(ctx, weft__cu_elementwise(k, dt, t0->numel, d[0], d[1], d[2], 0, l->s),
                           "the elementwise kernel");
    }
    case WEFT__OP_SCALE:
      return kernel_status(ctx, weft__cu_elementwise(WEFT__CU_SCALE, dt, t0->numel, d[0], NULL, d[1], weft__node_alpha(nd), l->s),
                           "the scale kernel");
    case WEFT__OP_RELU:
      return kernel_status(ctx, weft__cu_elementwise(WEFT__CU_RELU, dt, t0->numel, d[0], NULL, d[1], 0, l->s),
                           "the relu kernel");
    case WEFT__OP_SUM:
    case WEFT__OP_NORM:
      return kernel_status(ctx, weft__cu_reduce(dt, t0->numel, d[0], d[1], nd->kind == WEFT__OP_NORM, l->scratch, l->s),
                           "the reduction kernel");
    case WEFT__OP_COPY:
      return copy(ctx, st, cp, x, l, cap);
    case WEFT__OP_FILL:
      return kernel_status(ctx, weft__cu_fill(dt, t0->numel, d[0], weft__node_fill(nd), l->s), "the fill kernel");
    case WEFT__OP_GEMM:
    case WEFT__OP_POTRF:
    case WEFT__OP_TRSM:
    case WEFT__OP_TRMM:
    case WEFT__OP_TRTRI:
    case WEFT__OP_SYRK:
      return linear_algebra(ctx, cp, l);
    default:
      snprintf(ctx->err, ctx->err_size, "unknown op kind %d", nd->kind);
      return WEFT_EINVAL;
  }
}

int weft__cu_enqueue(cu_state *st, cu_plan *cp, weft_kernel_ctx *ctx, const cu_streams *cap, int locked) {
  uint32_t i = ctx->index;
  const weft__gnode *x = &cp->x[i];
  const uint32_t *L = cp->lists;
  weft_node *nd = ctx->node;
  lane l;
  lane_open(st, cp, cap, x->start_dev, x->start_stream, locked, &l);
  int rc = WEFT_OK;
  cudaError_t e = cudaSuccess;
  /* A held member of a batch is timed with its batch's last node (cuda_timing.c). */
  int timed = cp->tm != NULL && !(x->flags & WEFT__G_DEFER);
  if (timed && cap == NULL && (e = weft__cu_timing_open(cp, i, l.s)) != cudaSuccess)
    rc = FAIL_CUDA(ctx, e, "cudaEventRecord (node timing)");
  for (uint32_t k = x->wait_b; k < x->wait_e && e == cudaSuccess && rc == WEFT_OK; k++)
    if (!((x->flags & WEFT__G_SPLIT_COPY) && L[k] == x->split_of)) /* the copy waits in two steps */
      e = cudaStreamWaitEvent(l.s, cp->ev[L[k]].event, 0);
  if (e != cudaSuccess && rc == WEFT_OK) rc = FAIL_CUDA(ctx, e, "cudaStreamWaitEvent");
  /* Dead temporaries this node claimed: their readers are done (waited for above), so their
   * memory goes back to the pool in this stream's order, for the allocations below. */
  for (uint32_t k = x->free_b; k < x->free_e && rc == WEFT_OK; k++) {
    void *p = cp->tptr[L[k]];
    cp->tptr[L[k]] = NULL;
    if (p != NULL && (e = cudaFreeAsync(p, l.s)) != cudaSuccess) rc = FAIL_CUDA(ctx, e, "cudaFreeAsync");
  }
  for (uint32_t k = x->alloc_b; k < x->alloc_e && rc == WEFT_OK; k++) {
    const weft_tensor *t = WEFT__VEC_AT(&nd->graph->tensors, weft_tensor *, L[k]);
    void *p = NULL;
    if ((e = weft__cu_pool_alloc(l.d, &p, t->bytes, l.s)) != cudaSuccess) {
      char what[160];
      snprintf(what, sizeof what, "temporary %s", weft__tensor_name(t));
      if (e == cudaErrorMemoryAllocation) {
        weft__cu_oom_message(l.d, t->bytes, what, ctx->err, ctx->err_size);
        rc = WEFT_EDEVMEM;
      } else {
        rc = FAIL_CUDA(ctx, e, "allocating a temporary");
      }
    }
    cp->tptr[L[k]] = p;
  }
  if (rc == WEFT_OK) {
    temp_args(cp, ctx);
    if (timed && cap == NULL) weft__cu_timing_before(cp, i, l.s);
    rc = work(ctx, st, cp, x, &l, cap);
  }
  /* Node timing: the tick that marks the end of the node's work (cuda_timing.c). Before the
   * node's event, in stream order: whoever sees that event complete (the completion thread, a
   * node waiting on another stream, the drain) may read the tick, and finds it complete too
   * (recorded after, a tick could still be pending then: cudaEventElapsedTime answered
   * cudaErrorNotReady and the node's time was lost, seen under compute-sanitizer on 4 GPUs). */
  if (rc == WEFT_OK && timed && (e = weft__cu_timing_tick(cp, i, l.s, cap != NULL)) != cudaSuccess)
    rc = FAIL_CUDA(ctx, e, "cudaEventRecord (node timing)");
  /* The event goes on the lane the work ended on. Temporaries left allocated by a failure are
   * freed by the run's drain. */
  if (rc == WEFT_OK && (x->flags & WEFT__G_RECORD) && (e = cudaEventRecord(cp->ev[i].event, l.s)) != cudaSuccess)
    rc = FAIL_CUDA(ctx, e, "cudaEventRecord");
  lane_close(&l);
  if (cap == NULL) atomic_store_explicit(&cp->last_issued[x->dev], i, memory_order_relaxed);
  return rc;
}

/* ---- Combining ------------------------------------------------------------------------------
 *
 * Workers that find a node's stream held by another worker do not wait for it: they leave the
 * node on the stream's `pending` list and go on (the launch returns WEFT__DEFERRED), and the
 * holder enqueues every node left there before it lets the stream go, then reports their issue
 * to the scheduler (weft__sched_issued) once it has. So each stream is fed by one thread at a
 * time and no thread spins for a stream: with more workers than streams, the workers spinning
 * and yielding for a stream slow the ones enqueueing (docs/cuda.md, "Enqueueing"; the
 * small_ops benchmark, docs/benchmarks.md, "GPU: the CUDA backend").
 *
 * No node is left behind: a worker pushes its node, then tries the lock; the holder empties
 * the list, unlocks, then looks at the list again and takes the lock back if it finds a node.
 * With the push and the try (the unlock and the look) sequentially consistent operations,
 * either the holder's look sees the node or the pusher's try finds the lock free
 * (or held by a third thread, which will look in its turn). So every thread that holds a
 * compute or copy stream lets it go through weft__cu_release, which enqueues what it finds.
 * Issues are reported after the unlock: reporting may end a run, and a run's drain takes
 * stream locks. A node whose lanes change (a copy staged through the host) is not left to
 * another thread (it takes its streams in turn, waiting for each). */

/* Enqueues a node and, unless it is done as far as the scheduler is concerned (WEFT_OK),
 * arranges its completion: WEFT__PENDING or an error. */
static int issue(cu_state *st, cu_plan *cp, weft_kernel_ctx *ctx, int locked) {
  const weft__gnode *x = &cp->x[ctx->index];
  cudaEvent_t event = cp->ev[ctx->index].event;
  int rc = weft__cu_enqueue(st, cp, ctx, NULL, locked);
  if (rc != WEFT_OK) return rc;
  if (st->launch_blocking) {
    /* Debug mode: wait for this node alone, so an asynchronous fault is pinned on it. */
    cudaError_t e = cudaStreamSynchronize(st->dev[x->dev].streams[x->stream].s);
    if (e == cudaSuccess) e = cudaGetLastError();
    return e == cudaSuccess ? WEFT_OK : FAIL_CUDA(ctx, e, "the node's work (WEFT_LAUNCH_BLOCKING)");
  }
  if (!(x->flags & WEFT__G_NOTIFY)) return WEFT_OK;
  cu_item it = {event, ctx->run, cp, ctx->index, CU_ITEM_NODE};
  if (weft__cu_push(&st->dev[x->dev], &it, 1) != WEFT_OK) {
    /* No memory to queue the request: wait here instead (rare; blocks this worker only). */
    cudaError_t e = cudaEventSynchronize(event);
    return e == cudaSuccess ? WEFT_OK : FAIL_CUDA(ctx, e, "cudaEventSynchronize");
  }
  return WEFT__PENDING;
}

/* The context the dispatcher gives a node (dispatch.c, run_node), for a node left pending. */
static void deferred_ctx(const cu_defer *d, weft_kernel_ctx *ctx, char *err, size_t err_size) {
  const weft__xnode *px = &d->cp->p->x[d->index];
  weft_node *n = px->node;
  memset(ctx, 0, sizeof *ctx);
  ctx->node = n;
  ctx->graph = n->graph;
  ctx->run = d->run;
  ctx->plan = d->cp->p;
  ctx->index = d->index;
  ctx->device = n->device;
  ctx->backend = px->backend;
  weft__ctx_bind(ctx);
  err[0] = '\0';
  ctx->err = err;
  ctx->err_size = err_size;
}

/* Puts d on s's pending list (newest first), for the holder of s to enqueue. */
static void push_pending(cu_stream *s, cu_defer *d) {
  d->next = atomic_load_explicit(&s->pending, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(&s->pending, &d->next, d, memory_order_seq_cst,
                                                memory_order_relaxed))
    ;
}

/* ---- Turns ----------------------------------------------------------------------------------
 *
 * A node with a turn on its stream (src/sched/plan/sync.c, "Turns") is enqueued in its turn only. All of
 * it happens under the stream's lock: a node that comes before its turn is parked in its place
 * and its launch returns WEFT__DEFERRED, as for a node left to the holder; the thread that
 * enqueues the turn before it puts it on the stream's pending list, which that thread empties
 * before it lets the stream go (weft__cu_release), and reports its issue. A node that will not
 * be launched gives up its turn (weft__cu_skip), so no turn waits for one that never comes. */

static uint32_t *turn_slot(cu_plan *cp, const weft__gnode *x, uint32_t turn) {
  return &cp->parked[cp->turn_base[x->dev][x->stream] + turn];
}

/* The turn of x's stream that was due is taken: the next one is due, past the ones given up;
 * a node parked in it goes to the pending list. Under s's lock. */
static void turn_taken(cu_plan *cp, const weft__gnode *x, cu_stream *s) {
  uint32_t *next = &cp->turn_next[x->dev][x->stream], turns = cp->turns[x->dev][x->stream];
  while (++*next < turns && *turn_slot(cp, x, *next) == CU_TURN_SKIPPED)
    ;
  if (*next >= turns) return;
  uint32_t *slot = turn_slot(cp, x, *next);
  if (*slot == CU_TURN_OPEN) return;
  push_pending(s, &cp->defer[*slot]);
  *slot = CU_TURN_OPEN;
}

/* Under s's lock: issues the node if it has no turn or its turn is due (and passes the turn
 * on), or parks it in its turn (WEFT__DEFERRED). */
static int issue_in_turn(cu_state *st, cu_plan *cp, weft_kernel_ctx *ctx, cu_stream *s) {
  uint32_t i = ctx->index, turn = cp->x[i].turn;
  const weft__gnode *x = &cp->x[i];
  if (turn != NONE && turn != cp->turn_next[x->dev][x->stream]) {
    cu_defer *d = &cp->defer[i];
    d->cp = cp;
    d->run = ctx->run;
    d->index = i;
    *turn_slot(cp, x, turn) = i;
    return WEFT__DEFERRED;
  }
  int rc = issue(st, cp, ctx, 1);
  if (turn != NONE) turn_taken(cp, x, s);
  return rc;
}

void weft__cu_skip(weft__backend *b, weft_run *run, uint32_t index) {
  cu_state *st = b->state;
  cu_plan *cp = weft__cu_plan_of(b, weft__run_plan(run));
  if (cp == NULL || cp->x[index].turn == NONE) return;
  const weft__gnode *x = &cp->x[index];
  cu_stream *s = &st->dev[x->dev].streams[x->stream];
  weft__cu_lock(s);
  if (x->turn == cp->turn_next[x->dev][x->stream])
    turn_taken(cp, x, s);
  else
    *turn_slot(cp, x, x->turn) = CU_TURN_SKIPPED;
  weft__cu_release(st, s);
}

/* Called with s held: enqueues what was left on s, lets s go, reports; again while nodes come.
 * The unlock is an exchange, not a store, and the look after it sequentially consistent: the
 * look cannot then be ordered before the unlock (and costs no fence on x86). */
void weft__cu_release(cu_state *st, cu_stream *s) {
  for (;;) {
    cu_defer *l = NULL, *fifo = NULL;
    if (atomic_load_explicit(&s->pending, memory_order_relaxed) != NULL)
      l = atomic_exchange_explicit(&s->pending, NULL, memory_order_acquire);
    while (l != NULL) { /* pushed newest first: reversed, they go in the order they came */
      cu_defer *next = l->next;
      l->next = fifo;
      fifo = l;
      l = next;
    }
    for (cu_defer **link = &fifo; *link != NULL;) {
      cu_defer *d = *link;
      weft_kernel_ctx ctx;
      char err[512];
      deferred_ctx(d, &ctx, err, sizeof err);
      d->status = issue_in_turn(st, d->cp, &ctx, s);
      if (d->status == WEFT__DEFERRED) { /* parked: reported in its turn */
        *link = d->next;
        continue;
      }
      d->msg = d->status != WEFT_OK && d->status != WEFT__PENDING ? weft__strdup(err) : NULL;
      link = &d->next;
    }
    atomic_exchange_explicit(&s->lock, 0, memory_order_seq_cst);
    /* Nothing of a record is read after its report: the report may end its run. */
    while (fifo != NULL) {
      cu_defer d = *fifo;
      fifo = d.next;
      weft__sched_issued(d.run, d.index, d.status, d.msg); /* no message: out of host memory */
      weft__free(d.msg);
    }
    if (atomic_load_explicit(&s->pending, memory_order_seq_cst) == NULL || !weft__cu_trylock(s)) return;
  }
}

int weft__cu_launch(weft__backend *b, weft_kernel_ctx *ctx) {
  cu_state *st = b->state;
  cu_plan *cp = weft__cu_plan_of(b, ctx->plan);
  const weft__gnode *x = &cp->x[ctx->index];
  /* A held member of a batch that waits for, frees and allocates nothing makes no CUDA call:
   * it writes its op into its batch and is done, without its stream's lock. The batch is its
   * chain's alone, and the chain is issued one node at a time, each after its predecessor has
   * returned (it is that node's only successor). This takes the CUDA calls and the lock out of
   * 127 of every 128 nodes of a chain of one-element adds (docs/cuda.md, "Batches"; the
   * dispatch benchmark, docs/benchmarks.md, "GPU: the CUDA backend"). */
  if ((x->flags & WEFT__G_DEFER) && x->wait_b == x->wait_e && x->free_b == x->free_e && x->alloc_b == x->alloc_e) {
    temp_args(cp, ctx);
    return batch_add(ctx, cp, x, NULL);
  }
  if (st->launch_blocking || x->start_dev != x->dev || x->start_stream != x->stream) return issue(st, cp, ctx, 0);
  cu_stream *own = &st->dev[x->dev].streams[x->stream];
  if (weft__cu_trylock(own)) {
    int rc = issue_in_turn(st, cp, ctx, own);
    weft__cu_release(st, own);
    return rc;
  }
  atomic_fetch_add_explicit(&st->combined, 1, memory_order_relaxed);
  cu_defer *d = &cp->defer[ctx->index];
  d->cp = cp;
  d->run = ctx->run;
  d->index = ctx->index;
  push_pending(own, d);
  /* The try after the push: an exchange, sequentially consistent like the push. */
  if (!atomic_exchange_explicit(&own->lock, 1, memory_order_seq_cst)) weft__cu_release(st, own);
  return WEFT__DEFERRED;
}
