/* cuda_kernels.h — the C entry points of the backend's own kernels (cuda_kernels.cu). Each
 * enqueues on `stream` and returns the cudaError_t of the launch (0: cudaSuccess). Sizes are
 * element counts; `dtype` is WEFT_F32 or WEFT_F64. Kernels compute exactly what the CPU kernels
 * compute (same operation order per element), except that reductions add in a tree instead of
 * left to right, in double either way. */
#ifndef WEFT_CUDA_KERNELS_H
#define WEFT_CUDA_KERNELS_H

#include <stdint.h>

#include "weft/weft.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/* Elementwise op codes (the kernels file does not see graph.h). */
enum { WEFT__CU_ADD = 0, WEFT__CU_SUB, WEFT__CU_MUL, WEFT__CU_SCALE, WEFT__CU_RELU };

/* Binary and unary elementwise ops: kind is WEFT__CU_ADD, _SUB, _MUL (a, b), _SCALE (alpha * a)
 * or _RELU (a). c may alias a or b. */
int weft__cu_elementwise(int kind, int dtype, int64_t n, const void *a, const void *b, void *c,
                         double alpha, struct CUstream_st *stream);
/* Batches: consecutive small elementwise ops of one stream launched as one kernel
 * (cuda_launch.c, "Batches"). An op reads and writes elements of one index only; the ops of a
 * batch run in order, element i of each on the same thread. The plan's rule
 * (src/sched/plan/batches.c) says which ops form a batch; cuda_plan.c checks that its size fits. */
#define WEFT__CU_BATCH_MAX 128
typedef struct weft__cu_bop {
  const void *a, *b; /* b: binary ops only */
  void *c;
  double alpha;      /* WEFT__CU_SCALE */
  uint32_t n;
  uint8_t kind;      /* WEFT__CU_ADD .. WEFT__CU_RELU */
  uint8_t dtype;     /* WEFT_F32 or WEFT_F64 */
} weft__cu_bop;
/* Runs ops[0..count) in order, in one launch; count <= WEFT__CU_BATCH_MAX. */
int weft__cu_batch(const weft__cu_bop *ops, uint32_t count, struct CUstream_st *stream);
/* out[0] = sum(x) or sqrt(sum(x^2)) (squares = 1), accumulated in double. `scratch` holds
 * WEFT__CU_REDUCE_BLOCKS doubles of device memory private to the stream. */
#define WEFT__CU_REDUCE_BLOCKS 1024
int weft__cu_reduce(int dtype, int64_t n, const void *x, void *out, int squares, double *scratch,
                    struct CUstream_st *stream);
/* Sets the n elements at p from `init` (Philox for random kinds: util/philox.h). */
int weft__cu_fill(int dtype, int64_t n, void *p, weft_init init, struct CUstream_st *stream);
/* out[r, c] += bias[c] for a row-major [rows, cols] matrix. */
int weft__cu_add_bias(int dtype, int64_t rows, int64_t cols, void *out, const void *bias,
                      struct CUstream_st *stream);
/* dst = src^T, n x n row-major (row strides lds, ldd); with `lower`, only dst's lower triangle
 * (diagonal included) is written. */
int weft__cu_transpose(int dtype, int64_t n, const void *src, int64_t lds, void *dst, int64_t ldd, int lower,
                       struct CUstream_st *stream);
/* The first step of a triangular inverse (cuda_launch.c, trtri): W (n x n, column-major, ld
 * ldw) set to zero but for the inverses of the triangular matrix T's diagonal blocks of
 * WEFT__CU_TRTRI_NB (the last may be smaller); T is column-major upper (`upper`) or lower, its
 * other strict triangle not read. *info (device memory) becomes 0, or n - r for the first zero
 * on T's diagonal, at row r. */
#define WEFT__CU_TRTRI_NB 64
int weft__cu_trtri_diagonal(int dtype, int upper, int64_t n, const void *t, int64_t ldt, void *w, int64_t ldw,
                            int *info, struct CUstream_st *stream);
/* Turns programmatic dependent launch of these kernels on or off (process-wide; on by
 * default, WEFT_CUDA_PDL=0 turns it off at runtime creation). */
void weft__cu_set_pdl(int on);

#ifdef __cplusplus
}
#endif

#endif
