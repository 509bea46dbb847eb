/* cuda_fault.cu — a user-op kernel that faults on purpose (an out-of-bounds write far outside
 * any allocation), for test_cuda_errors' checks of asynchronous fault reporting. */
#include <cuda_runtime.h>

#include "weft/cuda.h"

__global__ void fault_kernel(float *p) { p[(size_t)threadIdx.x + ((size_t)1 << 40)] = 1.0f; }

extern "C" int weft_test_fault_kernel(weft_kernel_ctx *ctx) {
  fault_kernel<<<1, 32, 0, weft_ctx_cuda_stream(ctx)>>>((float *)weft_ctx_data(ctx, 0));
  return cudaGetLastError() == cudaSuccess ? WEFT_OK : weft_ctx_fail(ctx, "the fault kernel did not launch");
}
