/* bench_gpu_dispatch.c — per-node cost of tiny GPU nodes: a chain of 10 000 in-place adds on a
 * one-element tensor (x = x + 1), as PyTorch's `x.add_(1)` loop. Eager runs dispatch every node
 * (target <= 3 us per node): the CUDA backend batches such chains, 128 nodes to a kernel
 * (src/sched/plan/batches.c); replayed runs launch one CUDA graph (target <= 1 us per node).
 * Also measured: the cold first run of a fresh graph (analysis, plan, materialisation and the
 * eager run), and eager runs with batching off (weft_runtime_set_batching: a launch per node). The
 * result is checked (x grows by the node count each run). The floor of an unbatched eager run
 * is printed beside it: the same kernel launched 10 000 times in a plain loop on one stream,
 * no scheduler.
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

static weft_graph *build(weft_runtime *rt, int dev, long long count, weft_tensor **x) {
  weft_graph *g;
  BCHECK(weft_graph_create(rt, &g));
  weft_tensor *one;
  BCHECK(weft_tensor_create(g, "x", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(dev), weft_zeros(), x));
  BCHECK(weft_tensor_create(g, "one", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(dev), weft_ones(), &one));
  weft_tensor *y = *x;
  for (long long i = 0; i < count; i++) BCHECK(weft_add(g, y, one, &y));
  return g;
}

/* x must have grown by count per run. */
static void check(weft_tensor *x, double runs, long long count, const char *what) {
  double v;
  BCHECK(weft_tensor_get(x, 0, &v));
  if (v != runs * (double)count && count < (1 << 23)) {
    fprintf(stderr, "dispatch (%s): x = %g after %g runs of %lld adds\n", what, v, runs, count);
    exit(1);
  }
}

/* Eager runs, median ms, with batching on or off. */
static double eager_runs(int dev, long long count, int reps, int batch, double *spread) {
  weft_runtime *rt = bench_runtime("dispatch", dev + 1);
  weft_cuda_set_replay(rt, 0);
  weft_runtime_set_batching(rt, batch);
  weft_tensor *x;
  weft_graph *g = build(rt, dev, count, &x);
  double m = bench_time_graph(g, 2, reps, spread);
  check(x, 2 + reps, count, batch ? "eager" : "eager, unbatched");
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return m;
}

int main(int argc, char **argv) {
  bench_opts o = {7, 1, 10000, 0, 0};
  bench_parse(argc, argv, &o);
  double sp_e, sp_u, sp_r, sp_c;
  double eager = eager_runs(o.device, o.count, o.reps, 1, &sp_e);
  double unbatched = eager_runs(o.device, o.count, o.reps, 0, &sp_u);
  weft_runtime *rt = bench_runtime("dispatch", o.device + 1);
  /* Cold first runs: a fresh graph each time, replay on (a first run is eager either way). */
  double *cold = malloc((size_t)o.reps * sizeof *cold);
  for (int r = -1; r < o.reps; r++) {
    weft_tensor *x;
    weft_graph *g = build(rt, o.device, o.count, &x);
    double t0 = bench_now_ms();
    BCHECK(weft_graph_run(g));
    if (r >= 0) cold[r] = bench_now_ms() - t0;
    check(x, 1, o.count, "cold first run");
    weft_graph_destroy(g);
  }
  double first = bench_median(cold, o.reps, &sp_c);
  free(cold);
  weft_tensor *x;
  weft_graph *g = build(rt, o.device, o.count, &x);
  double replay = bench_time_graph(g, 3, o.reps, &sp_r);
  check(x, 3 + o.reps, o.count, "replay");
  weft_cuda_run_stats rs;
  weft_cuda_run_stats_get(rt, &rs);
  double n = (double)o.count;
  double raw = raw_launches(o.device, o.count, o.reps, 0), raw_sd = raw_launches(o.device, o.count, o.reps, 1);
  if (!o.json)
    printf("dispatch: chain of %lld tiny GPU nodes\n"
           "  eager (batched)   %9.3f ms = %6.3f us/node (spread %.3f ms)\n"
           "  cold first run    %9.3f ms = %6.3f us/node (spread %.3f ms; a fresh graph: analysis, plan, run)\n"
           "  eager, unbatched  %9.3f ms = %6.3f us/node (spread %.3f ms; batching off)\n"
           "  replayed          %9.3f ms = %6.3f us/node (spread %.3f ms) [%llu replays]\n"
           "  floor of an unbatched run: the kernel launched in a plain loop, %6.3f us/launch (%.3f with cudaSetDevice each)\n",
           o.count, eager, eager * 1e3 / n, sp_e, first, first * 1e3 / n, sp_c, unbatched, unbatched * 1e3 / n, sp_u,
           replay, replay * 1e3 / n, sp_r, rs.replays, raw * 1e3 / n, raw_sd * 1e3 / n);
  bench_result(&o, "dispatch", "nodes", n, "eager_us_per_node", eager * 1e3 / n, "first_us_per_node", first * 1e3 / n,
               "unbatched_us_per_node", unbatched * 1e3 / n, "replay_us_per_node", replay * 1e3 / n, "raw_launch_us",
               raw * 1e3 / n, NULL);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return 0;
}
