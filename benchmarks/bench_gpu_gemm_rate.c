/* bench_gpu_gemm_rate.c — one product of 4000² f32 as a weft node, against cuBLAS called
 * directly on the same device (same call, default math mode: exact fp32), both timed the same
 * way: host wall clock from the call to the end of a synchronize, median of --reps. The figure
 * is raw / weft (>= 0.97 is the target); TFLOP/s of both, and cuBLAS timed by CUDA events.
 *
 * Usage: bench_gpu_gemm_rate [--size 4000] [--reps 21] [--device 0] [--json] */
#include "bench_gpu_common.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#define CU(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));        \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

int main(int argc, char **argv) {
  bench_opts o = {21, 4000, 1, 0, 0};
  bench_parse(argc, argv, &o);
  weft_runtime *rt = bench_runtime("gemm_rate", o.device + 1);
  int n = (int)o.size;
  double flop = 2.0 * n * (double)n * n;

  /* Raw cuBLAS. */
  CU(cudaSetDevice(o.device));
  float *a, *c;
  CU(cudaMalloc((void **)&a, (size_t)n * n * sizeof(float)));
  CU(cudaMalloc((void **)&c, (size_t)n * n * sizeof(float)));
  CU(cudaMemset(a, 0, (size_t)n * n * sizeof(float)));
  cudaStream_t s;
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS) return 1;
  /* Random inputs (zeros run faster): fill through a weft graph's tensor and copy. */
  weft_graph *g;
  BCHECK(weft_graph_create(rt, &g));
  weft_tensor *x, *y = NULL;
  BCHECK(weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){n, n}, weft_cuda(o.device), weft_uniform(-1, 1, 5), &x));
  BCHECK(weft_mm(g, x, x, &y));
  float *hx = malloc((size_t)n * n * sizeof(float));
  BCHECK(weft_tensor_read(x, hx, (size_t)n * n * sizeof(float)));
  CU(cudaMemcpy(a, hx, (size_t)n * n * sizeof(float), cudaMemcpyHostToDevice));
  free(hx);
  const float one = 1, zero = 0;
  cudaEvent_t e0, e1;
  CU(cudaEventCreate(&e0));
  CU(cudaEventCreate(&e1));
  double *tw = malloc((size_t)o.reps * sizeof *tw), *te = malloc((size_t)o.reps * sizeof *te);
  for (int r = -3; r < o.reps; r++) {
    double t0 = bench_now_ms();
    CU(cudaEventRecord(e0, s));
    if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, a, n, &zero, c, n) != CUBLAS_STATUS_SUCCESS)
      return 1;
    CU(cudaEventRecord(e1, s));
    CU(cudaStreamSynchronize(s));
    if (r < 0) continue;
    tw[r] = bench_now_ms() - t0;
    float ms;
    CU(cudaEventElapsedTime(&ms, e0, e1));
    te[r] = ms;
  }
  double sp_raw, sp_ev, sp_w;
  double raw = bench_median(tw, o.reps, &sp_raw), raw_ev = bench_median(te, o.reps, &sp_ev);
  double wt = bench_time_graph(g, 3, o.reps, &sp_w);
  char name[128];
  if (!o.json)
    printf("gemm_rate on cuda:%d (%s): mm %d^2 f32\n"
           "  cuBLAS direct  %8.3f ms wall (%.1f TFLOP/s), %8.3f ms by events (%.1f TFLOP/s)\n"
           "  weft node      %8.3f ms wall (%.1f TFLOP/s)  = %.2f%% of cuBLAS\n",
           o.device, bench_device_name(rt, o.device, name, sizeof name), n, raw, flop / raw / 1e9, raw_ev,
           flop / raw_ev / 1e9, wt, flop / wt / 1e9, 100 * raw / wt);
  bench_result(&o, "gemm_rate", "raw_ms", raw, "raw_event_ms", raw_ev, "weft_ms", wt, "weft_tflops", flop / wt / 1e9,
               "raw_tflops", flop / raw / 1e9, "fraction", raw / wt, NULL);
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(c);
  cudaStreamDestroy(s);
  free(tw);
  free(te);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return 0;
}
