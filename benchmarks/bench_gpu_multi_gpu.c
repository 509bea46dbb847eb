/* bench_gpu_multi_gpu.c — the reference notes' experiment 12.3.1: 50 products of 4000² f32 on
 * each of N GPUs. One graph holds every chain (weft runs them at once, one chain per GPU, from
 * different CPU workers); the baseline runs the same chains one after the other, each its own
 * graph, in the same process. The figure is the speed-up sequential / parallel; targets: at
 * least 1.97 on 2 GPUs, 3.9 on 4 (PyTorch's, from torch_reference.py in the same call, is the
 * reference).
 *
 * Usage: bench_gpu_multi_gpu [--size 4000] [--count 50] [--reps 5] [--json]   (all GPUs) */
#include "bench_gpu_common.h"

static weft_graph *chains(weft_runtime *rt, int first, int n, int64_t size, int count) {
  weft_graph *g;
  BCHECK(weft_graph_create(rt, &g));
  const int64_t shape[2] = {size, size};
  for (int d = first; d < first + n; d++) {
    weft_tensor *x;
    BCHECK(weft_tensor_create(g, "x", WEFT_F32, 2, shape, weft_cuda(d), weft_uniform(0, 1, (uint64_t)d), &x));
    for (int i = 0; i < count; i++) {
      weft_tensor *y = NULL;
      BCHECK(weft_mm(g, x, x, &y));
    }
  }
  return g;
}

int main(int argc, char **argv) {
  bench_opts o = {5, 4000, 50, 0, 0};
  bench_parse(argc, argv, &o);
  weft_runtime *rt = bench_runtime("multi_gpu", 2);
  int n = weft_device_count(rt, WEFT_DEVICE_CUDA);
  weft_graph *all = chains(rt, 0, n, o.size, (int)o.count);
  weft_graph *one[16];
  for (int d = 0; d < n; d++) one[d] = chains(rt, d, 1, o.size, (int)o.count);
  /* Warm every graph (plans, storage, captures), then alternate the timed runs. */
  for (int w = 0; w < 2; w++) {
    BCHECK(weft_graph_run(all));
    for (int d = 0; d < n; d++) BCHECK(weft_graph_run(one[d]));
  }
  double *tp = malloc((size_t)o.reps * sizeof *tp), *ts = malloc((size_t)o.reps * sizeof *ts);
  double *t1 = malloc((size_t)o.reps * sizeof *t1);
  for (int r = 0; r < o.reps; r++) {
    double t0 = bench_now_ms();
    BCHECK(weft_graph_run(all));
    tp[r] = bench_now_ms() - t0;
    t0 = bench_now_ms();
    for (int d = 0; d < n; d++) {
      double tt = bench_now_ms();
      BCHECK(weft_graph_run(one[d]));
      if (d == 0) t1[r] = bench_now_ms() - tt;
    }
    ts[r] = bench_now_ms() - t0;
  }
  double sp_p, sp_s, sp_1;
  double par = bench_median(tp, o.reps, &sp_p), seq = bench_median(ts, o.reps, &sp_s);
  double single = bench_median(t1, o.reps, &sp_1);
  char name[128];
  if (!o.json)
    printf("multi_gpu: %d GPUs (%s), %lld x mm %lld^2 f32 on each\n"
           "  one chain        %9.2f ms (spread %.2f)\n  one after other %9.2f ms (spread %.2f)\n"
           "  all at once      %9.2f ms (spread %.2f)\n  speed-up %.3f x (ideal %d)\n",
           n, bench_device_name(rt, 0, name, sizeof name), o.count, o.size, single, sp_1, seq, sp_s, par, sp_p,
           seq / par, n);
  bench_result(&o, "multi_gpu", "gpus", (double)n, "single_ms", single, "sequential_ms", seq, "parallel_ms", par,
               "speedup", seq / par, NULL);
  free(tp);
  free(ts);
  free(t1);
  weft_graph_destroy(all);
  for (int d = 0; d < n; d++) weft_graph_destroy(one[d]);
  weft_runtime_destroy(rt);
  return 0;
}
