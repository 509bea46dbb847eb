/* bench_gpu_memory.c — device memory of the overlap graph, 50 x (y[i] = x.x; h[i] = copy of
 * y[i] on the host), 4000² f32: the peak of the device pool (bytes held from the driver, and
 * bytes in use) during an eager run and a replayed run, in result buffers (64 MB each), x
 * included. Target: at most 5 (the reference notes' PyTorch code keeps all 50 results: 51).
 *
 * Usage: bench_gpu_memory [--size 4000] [--count 50] [--device 0] [--json] */
#include "bench_gpu_common.h"

int main(int argc, char **argv) {
  bench_opts o = {1, 4000, 50, 0, 0};
  bench_parse(argc, argv, &o);
  weft_runtime *rt = bench_runtime("memory", o.device + 1);
  weft_graph *g;
  BCHECK(weft_graph_create(rt, &g));
  weft_tensor *x;
  BCHECK(weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){o.size, o.size}, weft_cuda(o.device),
                            weft_uniform(0, 1, 42), &x));
  for (int i = 0; i < o.count; i++) {
    weft_tensor *y = NULL, *h = NULL;
    BCHECK(weft_mm(g, x, x, &y));
    BCHECK(weft_copy(g, y, weft_cpu(), &h));
  }
  double buf = (double)weft_tensor_bytes(x);
  weft_cuda_memory_stats e, r;
  weft_cuda_set_replay(rt, 0);
  BCHECK(weft_graph_run(g)); /* materialises x; the plan is built */
  BCHECK(weft_cuda_memory_trim(rt, o.device, 0));
  BCHECK(weft_cuda_memory_reset_peak(rt, o.device));
  BCHECK(weft_graph_run(g));
  BCHECK(weft_cuda_memory_stats_get(rt, o.device, &e));
  weft_cuda_set_replay(rt, 1);
  BCHECK(weft_graph_run(g)); /* captured */
  BCHECK(weft_cuda_memory_trim(rt, o.device, 0));
  BCHECK(weft_cuda_memory_reset_peak(rt, o.device));
  BCHECK(weft_graph_run(g)); /* replayed */
  BCHECK(weft_cuda_memory_stats_get(rt, o.device, &r));
  if (!o.json)
    printf("memory of the overlap graph (%lld x mm %lld^2 + copy), in %.1f MB result buffers, x included\n"
           "  eager:    peak in use %.2f, peak reserved %.2f\n  replayed: peak in use %.2f, peak reserved %.2f\n"
           "  (cuBLAS workspaces and reduction scratch outside the pool: %.1f MB)\n",
           o.count, o.size, buf / 1e6, e.peak / buf, e.reserved_peak / buf, r.peak / buf, r.reserved_peak / buf,
           e.workspace / 1e6);
  double worst = e.reserved_peak > r.reserved_peak ? e.reserved_peak : r.reserved_peak;
  bench_result(&o, "memory", "eager_peak_buffers", e.peak / buf, "eager_reserved_buffers", e.reserved_peak / buf,
               "replay_peak_buffers", r.peak / buf, "replay_reserved_buffers", r.reserved_peak / buf,
               "buffers", worst / buf, NULL);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return 0;
}
