/* bench_gpu_dispatch.c — per-node cost of tiny GPU nodes: a chain of 10 000 in-place adds on a
 * one-element tensor (x = x + 1), as PyTorch's `x.add_(1)` loop. Eager runs dispatch and
 * enqueue every node (target <= 3 us per node); replayed runs launch one CUDA graph (target
 * <= 1 us per node). The result is checked (x grows by the node count each run). The floor of
 * an eager run is printed beside it: the same kernel launched 10 000 times in a plain loop on
 * one stream, no scheduler.
 *
 * Usage: bench_gpu_dispatch [--count 10000] [--reps 7] [--device 0] [--json] */
#include "bench_gpu_common.h"

#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.h"

/* The same add kernel launched `count` times in a loop, then a synchronize: ms, median. */
static double raw_launches(int dev, long long count, int reps, int set_device) {
  cudaSetDevice(dev);
  float *x;
  cudaStream_t s;
  if (cudaMalloc((void **)&x, 2 * sizeof(float)) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
    return -1;
  cudaMemset(x, 0, 2 * sizeof(float));
  double *t = malloc((size_t)reps * sizeof *t);
  for (int r = -2; r < reps; r++) {
    double t0 = bench_now_ms();
    for (long long i = 0; i < count; i++) {
      if (set_device) cudaSetDevice(dev);
      weft__cu_elementwise(WEFT__CU_ADD, WEFT_F32, 1, x, x + 1, x, 0, s);
    }
    cudaStreamSynchronize(s);
    if (r >= 0) t[r] = bench_now_ms() - t0;
  }
  double m = bench_median(t, reps, NULL);
  free(t);
  cudaStreamDestroy(s);
  cudaFree(x);
  return m;
}

int main(int argc, char **argv) {
  bench_opts o = {7, 1, 10000, 0, 0};
  bench_parse(argc, argv, &o);
  weft_runtime *rt = bench_runtime("dispatch", o.device + 1);
  weft_graph *g;
  BCHECK(weft_graph_create(rt, &g));
  weft_tensor *x, *one;
  BCHECK(weft_tensor_create(g, "x", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(o.device), weft_zeros(), &x));
  BCHECK(weft_tensor_create(g, "one", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(o.device), weft_ones(), &one));
  for (long long i = 0; i < o.count; i++) BCHECK(weft_add(g, x, one, &x));
  double sp_e, sp_r;
  weft_cuda_set_replay(rt, 0);
  double eager = bench_time_graph(g, 2, o.reps, &sp_e);
  weft_cuda_set_replay(rt, 1);
  double replay = bench_time_graph(g, 3, o.reps, &sp_r);
  double runs = 2 + o.reps + 3 + o.reps, v;
  BCHECK(weft_tensor_get(x, 0, &v));
  if (v != runs * (double)o.count && o.count < (1 << 23)) {
    fprintf(stderr, "dispatch: x = %g after %g runs of %lld adds\n", v, runs, o.count);
    return 1;
  }
  double n = (double)o.count;
  double raw = raw_launches(o.device, o.count, o.reps, 0), raw_sd = raw_launches(o.device, o.count, o.reps, 1);
  if (!o.json)
    printf("dispatch: chain of %lld tiny GPU nodes\n  eager    %9.3f ms = %6.3f us/node (spread %.3f ms)\n"
           "  replayed %9.3f ms = %6.3f us/node (spread %.3f ms)\n"
           "  floor: the kernel launched in a plain loop, %6.3f us/launch (%.3f with cudaSetDevice each)\n",
           o.count, eager, eager * 1e3 / n, sp_e, replay, replay * 1e3 / n, sp_r, raw * 1e3 / n, raw_sd * 1e3 / n);
  bench_result(&o, "dispatch", "nodes", n, "eager_us_per_node", eager * 1e3 / n, "replay_us_per_node",
               replay * 1e3 / n, "raw_launch_us", raw * 1e3 / n, NULL);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return 0;
}
