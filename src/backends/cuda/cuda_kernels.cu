/* cuda_kernels.cu — the CUDA backend's own kernels: elementwise ops, reductions (sum, norm),
 * the linear layer's bias, and fills.
 *
 * Agreement with the CPU backend (the differential oracle compares the two):
 *   - elementwise ops and the bias are one IEEE operation per element, as on the CPU, so the
 *     results are bit-identical;
 *   - fills evaluate the formulas of util/philox.h in the CPU's order with explicitly rounded
 *     operations (__dmul_rn, __dadd_rn: no fused multiply-add), so uniform fills are
 *     bit-identical and normal fills differ at most where CUDA's log or cos differ from the C
 *     library's by an ulp of double, which rounding to f32 almost always hides;
 *   - reductions accumulate in double like the CPU, in a fixed tree order (block partials, then
 *     one block over the partials), so they are deterministic from run to run and agree with the
 *     CPU's left-to-right sum within double rounding.
 * Launch shapes: grid-stride loops of 256-thread blocks, at most 2048 blocks; reductions of up
 * to SMALL_REDUCE elements take one kernel of one block, larger ones two kernels. */
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#include "backends/cuda/cuda_kernels.h"
#include "util/philox.h"

namespace {

/* Programmatic dependent launch (Hopper and later): each kernel is launched with
 * programmatic stream serialisation allowed, lets its successor start launching as soon as it
 * starts (launch_dependents), and waits for its predecessor's completion and memory
 * (griddepcontrol.wait) before touching global memory. A chain of tiny kernels then overlaps
 * each launch with the previous kernel's run instead of paying launch latency in between. A
 * successor that is not launched this way (a cuBLAS kernel, a copy) waits as usual. */
int use_pdl = 1;

__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <typename... Params, typename... Args>
cudaError_t launch(void (*kernel)(Params...), unsigned grid, unsigned block, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = use_pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
}

constexpr int THREADS = 256;
constexpr int MAX_BLOCKS = 2048;
constexpr int64_t SMALL_REDUCE = 16384;

unsigned blocks_for(int64_t n) {
  int64_t b = (n + THREADS - 1) / THREADS;
  if (b < 1) b = 1;
  if (b > MAX_BLOCKS) b = MAX_BLOCKS;
  return (unsigned)b;
}

/* Element i of an elementwise op: one IEEE operation, as on the CPU. */
template <typename T>
__device__ __forceinline__ T elementwise_value(int kind, T x, T y, T alpha) {
  switch (kind) {
    case WEFT__CU_ADD: return x + y;
    case WEFT__CU_SUB: return x - y;
    case WEFT__CU_MUL: return x * y;
    case WEFT__CU_SCALE: return alpha * x;
    default: return x > T(0) ? x : T(0);
  }
}

template <typename T, int KIND>
__global__ void elementwise(int64_t n, const T *a, const T *b, T *c,
                            T alpha) {
  pdl_enter();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    c[i] = elementwise_value<T>(KIND, a[i], KIND <= WEFT__CU_MUL ? b[i] : T(0), alpha);
}

/* A batch of elementwise ops (cuda_kernels.h, weft__cu_batch) in one kernel. Every op of the
 * batch maps element i to the same thread (one grid-stride mapping for the whole launch), and
 * an op only reads elements with the index it writes, so each dependency between the ops of a
 * batch is between accesses of one thread, which program order keeps: no barrier is needed.
 * The descriptors are the kernel's parameters (__grid_constant__: read from the constant
 * bank, not copied), so a launch carries the whole batch. */
template <int CAP>
struct batch_params {
  weft__cu_bop op[CAP];
  uint32_t count;
};

template <typename T>
__device__ __forceinline__ void batch_op(const weft__cu_bop &o, int64_t start, int64_t step) {
  const T *a = (const T *)o.a, *b = (const T *)o.b;
  T *c = (T *)o.c;
  T alpha = (T)o.alpha;
  int binary = o.kind <= WEFT__CU_MUL;
  for (int64_t i = start; i < (int64_t)o.n; i += step) c[i] = elementwise_value<T>(o.kind, a[i], binary ? b[i] : T(0), alpha);
}

template <int CAP>
__global__ void batch(const __grid_constant__ batch_params<CAP> p) {
  pdl_enter();
  int64_t start = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
  for (uint32_t k = 0; k < p.count; k++) {
    if (p.op[k].dtype == WEFT_F32)
      batch_op<float>(p.op[k], start, step);
    else
      batch_op<double>(p.op[k], start, step);
  }
}

template <int CAP>
int launch_batch(const weft__cu_bop *ops, uint32_t count, unsigned grid, cudaStream_t s) {
  batch_params<CAP> p;
  memcpy(p.op, ops, count * sizeof *ops);
  p.count = count;
  return (int)launch(batch<CAP>, grid, THREADS, s, p);
}

/* a and c may alias (in-place updates), so no __restrict__ on c; a and b only read. */
template <typename T>
int launch_elementwise(int kind, int64_t n, const void *a, const void *b, void *c, double alpha,
                       cudaStream_t s) {
  const T *pa = (const T *)a, *pb = (const T *)b;
  T *pc = (T *)c;
  T al = (T)alpha;
  unsigned g = blocks_for(n);
  switch (kind) {
    case WEFT__CU_ADD: return (int)launch(elementwise<T, WEFT__CU_ADD>, g, THREADS, s, n, pa, pb, pc, al);
    case WEFT__CU_SUB: return (int)launch(elementwise<T, WEFT__CU_SUB>, g, THREADS, s, n, pa, pb, pc, al);
    case WEFT__CU_MUL: return (int)launch(elementwise<T, WEFT__CU_MUL>, g, THREADS, s, n, pa, pb, pc, al);
    case WEFT__CU_SCALE: return (int)launch(elementwise<T, WEFT__CU_SCALE>, g, THREADS, s, n, pa, pb, pc, al);
    case WEFT__CU_RELU: return (int)launch(elementwise<T, WEFT__CU_RELU>, g, THREADS, s, n, pa, pb, pc, al);
    default: return (int)cudaErrorInvalidValue;
  }
}

/* Sums the block's values of `v` in shared memory; thread 0 gets the total. */
__device__ double block_sum(double v) {
  __shared__ double part[THREADS / 32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = threadIdx.x < THREADS / 32 ? part[threadIdx.x] : 0.0;
  if (warp == 0)
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

template <typename T>
__device__ double partial(int64_t n, const T *__restrict__ x, int squares, int64_t start,
                          int64_t step) {
  double acc = 0.0;
  for (int64_t i = start; i < n; i += step) {
    double v = (double)x[i];
    acc += squares ? v * v : v;
  }
  return acc;
}

template <typename T>
__device__ void store_result(T *out, double total, int squares) {
  *out = (T)(squares ? sqrt(total) : total);
}

template <typename T>
__global__ void reduce_one_block(int64_t n, const T *__restrict__ x, T *out, int squares) {
  pdl_enter();
  double v = block_sum(partial(n, x, squares, threadIdx.x, blockDim.x));
  if (threadIdx.x == 0) store_result(out, v, squares);
}

template <typename T>
__global__ void reduce_partials(int64_t n, const T *__restrict__ x, double *scratch, int squares) {
  pdl_enter();
  double v = block_sum(partial(n, x, squares, blockIdx.x * (int64_t)blockDim.x + threadIdx.x,
                               (int64_t)gridDim.x * blockDim.x));
  if (threadIdx.x == 0) scratch[blockIdx.x] = v;
}

template <typename T>
__global__ void reduce_final(int nparts, const double *__restrict__ scratch, T *out, int squares) {
  pdl_enter();
  double v = 0.0;
  for (int i = threadIdx.x; i < nparts; i += blockDim.x) v += scratch[i];
  v = block_sum(v);
  if (threadIdx.x == 0) store_result(out, v, squares);
}

template <typename T>
int launch_reduce(int64_t n, const void *x, void *out, int squares, double *scratch,
                  cudaStream_t s) {
  const T *px = (const T *)x;
  T *po = (T *)out;
  if (n <= SMALL_REDUCE) return (int)launch(reduce_one_block<T>, 1, THREADS, s, n, px, po, squares);
  int64_t b = (n + THREADS - 1) / THREADS;
  unsigned g = (unsigned)(b < WEFT__CU_REDUCE_BLOCKS ? b : WEFT__CU_REDUCE_BLOCKS);
  cudaError_t e = launch(reduce_partials<T>, g, THREADS, s, n, px, scratch, squares);
  if (e == cudaSuccess) e = launch(reduce_final<T>, 1, THREADS, s, (int)g, (const double *)scratch, po, squares);
  return (int)e;
}

/* The value of element i under `init`, in the CPU's operation order (weft__cpu_fill). */
__device__ double init_value(int kind, double a, double b, uint64_t seed, int64_t i) {
  switch (kind) {
    case WEFT_INIT_ZEROS: return 0.0;
    case WEFT_INIT_ONES: return 1.0;
    case WEFT_INIT_FULL: return a;
    case WEFT_INIT_EYE: return seed > 0 && i / (int64_t)seed == i % (int64_t)seed ? a : 0.0;
    case WEFT_INIT_UNIFORM: {
      double u1, u2;
      weft__philox_uniform2((uint64_t)i, seed, &u1, &u2);
      return __dadd_rn(a, __dmul_rn(__dsub_rn(b, a), u1));
    }
    default: {
      double u1, u2;
      weft__philox_uniform2((uint64_t)i, seed, &u1, &u2);
      double r = sqrt(__dmul_rn(-2.0, log(__dsub_rn(1.0, u1))));
      double c = cos(__dmul_rn(6.283185307179586, u2));
      return __dadd_rn(a, __dmul_rn(__dmul_rn(b, r), c));
    }
  }
}

template <typename T>
__global__ void fill(int64_t n, T *p, int kind, double a, double b, uint64_t seed) {
  pdl_enter();
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    p[i] = (T)init_value(kind, a, b, seed, i);
}

template <typename T>
__global__ void add_bias(int64_t rows, int64_t cols, T *out, const T *__restrict__ bias) {
  pdl_enter();
  int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = out[i] + bias[i % cols];
}

/* dst = src^T for n x n row-major matrices (row strides lds, ldd), through 32 x 32 tiles in
 * shared memory so that both sides are read and written a row at a time; with `lower`, only
 * dst's lower triangle (diagonal included) is written. Blocks of 32 x 8 threads. */
template <typename T>
__global__ void transpose_of(int64_t n, const T *__restrict__ src, int64_t lds, T *__restrict__ dst, int64_t ldd,
                             int lower) {
  pdl_enter();
  __shared__ T tile[32][33];
  int64_t tiles = (n + 31) / 32;
  int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (int64_t b = blockIdx.x; b < tiles * tiles; b += gridDim.x) {
    int64_t br = b / tiles, bc = b % tiles; /* the source tile; it lands at (bc, br) */
    if (lower && br > bc) continue;          /* all of it above dst's diagonal (uniform per block) */
    for (int k = ty; k < 32; k += 8) {
      int64_t r = br * 32 + k, c = bc * 32 + tx;
      if (r < n && c < n) tile[k][tx] = src[r * lds + c];
    }
    __syncthreads();
    for (int k = ty; k < 32; k += 8) {
      int64_t r = bc * 32 + k, c = br * 32 + tx;
      if (r < n && c < n && (!lower || c <= r)) dst[r * ldd + c] = tile[tx][k];
    }
    __syncthreads();
  }
}

/* The inverses of the TRTRI_NB x TRTRI_NB diagonal blocks of a column-major triangular matrix
 * (ld ldt) into W's (ld ldw), one block of TRTRI_NB threads a block. The block is read into
 * shared memory as a lower triangle (an upper one transposed: inv(U) = inv(U^T)^T); thread j
 * then computes column j of its inverse by forward substitution, in registers (the loops are
 * unrolled), and the block is written back through shared memory, a column at a time. A zero
 * on the diagonal at row r sets *info to at least n - r (so the first zero wins; 0: none). */
constexpr int TRTRI_NB = WEFT__CU_TRTRI_NB;

template <typename T>
__global__ void __launch_bounds__(TRTRI_NB) trtri_diagonal(int64_t n, int upper, const T *__restrict__ t,
                                                             int64_t ldt, T *__restrict__ w, int64_t ldw, int *info) {
  pdl_enter();
  __shared__ T sl[TRTRI_NB][TRTRI_NB + 1]; /* sl[row][col], lower */
  int64_t o = (int64_t)blockIdx.x * TRTRI_NB;
  int j = threadIdx.x, m = (int)(n - o < TRTRI_NB ? n - o : TRTRI_NB);
  for (int c = 0; c < TRTRI_NB; c++) { /* element (o + j, o + c): thread j reads row j, a column at a time */
    int in = upper ? j <= c : j >= c;    /* the other strict triangle is not read */
    T v = j < m && c < m && in ? t[(o + c) * ldt + o + j] : T(0);
    if (upper)
      sl[c][j] = v;
    else
      sl[j][c] = v;
  }
  __syncthreads();
  if (j < m && sl[j][j] == T(0)) atomicMax(info, (int)(n - o - j));
  T x[TRTRI_NB];
#pragma unroll
  for (int i = 0; i < TRTRI_NB; i++) {
    T s = i == j ? T(1) : T(0);
#pragma unroll
    for (int k = 0; k < i; k++) s -= sl[i][k] * x[k];
    x[i] = i < j || i >= m ? T(0) : s / sl[i][i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < TRTRI_NB; i++) sl[i][j] = x[i]; /* column j of the lower inverse */
  __syncthreads();
  if (j >= m) return;
  for (int c = 0; c < m; c++) /* W's element (o + j, o + c) */
    w[(o + c) * ldw + o + j] = upper ? sl[c][j] : sl[j][c];
}

}  // namespace

extern "C" int weft__cu_trtri_diagonal(int dtype, int upper, int64_t n, const void *t, int64_t ldt, void *w,
                                       int64_t ldw, int *info, cudaStream_t stream) {
  if (n <= 0) return (int)cudaSuccess;
  size_t es = dtype == WEFT_F32 ? 4 : 8;
  cudaError_t e = cudaMemset2DAsync(w, (size_t)ldw * es, 0, (size_t)n * es, (size_t)n, stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(info, 0, sizeof(int), stream);
  if (e != cudaSuccess) return (int)e;
  unsigned g = (unsigned)((n + TRTRI_NB - 1) / TRTRI_NB);
  if (dtype == WEFT_F32)
    return (int)launch(trtri_diagonal<float>, g, TRTRI_NB, stream, n, upper, (const float *)t, ldt, (float *)w, ldw,
                       info);
  return (int)launch(trtri_diagonal<double>, g, TRTRI_NB, stream, n, upper, (const double *)t, ldt, (double *)w, ldw,
                     info);
}

extern "C" int weft__cu_elementwise(int kind, int dtype, int64_t n, const void *a, const void *b,
                                    void *c, double alpha, cudaStream_t stream) {
  if (n <= 0) return (int)cudaSuccess;
  return dtype == WEFT_F32 ? launch_elementwise<float>(kind, n, a, b, c, alpha, stream)
                           : launch_elementwise<double>(kind, n, a, b, c, alpha, stream);
}

extern "C" int weft__cu_batch(const weft__cu_bop *ops, uint32_t count, cudaStream_t stream) {
  uint32_t n = 0;
  for (uint32_t k = 0; k < count; k++) n = ops[k].n > n ? ops[k].n : n;
  if (count == 0 || n == 0) return (int)cudaSuccess;
  unsigned g = blocks_for(n);
  if (count <= 8) return launch_batch<8>(ops, count, g, stream);
  if (count <= 32) return launch_batch<32>(ops, count, g, stream);
  if (count <= WEFT__CU_BATCH_MAX) return launch_batch<WEFT__CU_BATCH_MAX>(ops, count, g, stream);
  return (int)cudaErrorInvalidValue;
}

extern "C" int weft__cu_reduce(int dtype, int64_t n, const void *x, void *out, int squares,
                               double *scratch, cudaStream_t stream) {
  return dtype == WEFT_F32 ? launch_reduce<float>(n, x, out, squares, scratch, stream)
                           : launch_reduce<double>(n, x, out, squares, scratch, stream);
}

extern "C" int weft__cu_fill(int dtype, int64_t n, void *p, weft_init init, cudaStream_t stream) {
  if (n <= 0) return (int)cudaSuccess;
  if (init.kind == WEFT_INIT_ZEROS)
    return (int)cudaMemsetAsync(p, 0, (size_t)n * (dtype == WEFT_F32 ? 4 : 8), stream);
  unsigned g = blocks_for(n);
  if (dtype == WEFT_F32)
    return (int)launch(fill<float>, g, THREADS, stream, n, (float *)p, init.kind, init.a, init.b, init.seed);
  return (int)launch(fill<double>, g, THREADS, stream, n, (double *)p, init.kind, init.a, init.b, init.seed);
}

extern "C" int weft__cu_add_bias(int dtype, int64_t rows, int64_t cols, void *out,
                                 const void *bias, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return (int)cudaSuccess;
  unsigned g = blocks_for(rows * cols);
  if (dtype == WEFT_F32)
    return (int)launch(add_bias<float>, g, THREADS, stream, rows, cols, (float *)out, (const float *)bias);
  return (int)launch(add_bias<double>, g, THREADS, stream, rows, cols, (double *)out, (const double *)bias);
}

extern "C" int weft__cu_transpose(int dtype, int64_t n, const void *src, int64_t lds, void *dst, int64_t ldd,
                                  int lower, cudaStream_t stream) {
  if (n <= 0) return (int)cudaSuccess;
  int64_t tiles = (n + 31) / 32;
  unsigned g = (unsigned)(tiles * tiles < 8192 ? tiles * tiles : 8192);
  if (dtype == WEFT_F32)
    return (int)launch(transpose_of<float>, g, THREADS, stream, n, (const float *)src, lds, (float *)dst, ldd, lower);
  return (int)launch(transpose_of<double>, g, THREADS, stream, n, (const double *)src, lds, (double *)dst, ldd,
                     lower);
}

extern "C" void weft__cu_set_pdl(int on) { use_pdl = on != 0; }
