/* bench_gpu_overlap.c — the reference notes' experiment 12.3.2: 50 x (y[i] = x.x, 4000² f32;
 * h[i] = copy of y[i] on the host), on one GPU, with no stream named by the user. Three graphs
 * on the same device: compute alone (the products, results kept on the GPU), copies alone (50
 * result-sized copies into pinned host tensors), and both. The figure is
 * both / max(compute, copies): 1.0 means every copy hid behind a product (the last copy,
 * which has nothing left to hide behind, costs about 1/110 of it). Target <= 1.01.
 * Also reports the eager runs (replay off) and peak device memory of "both" in result
 * buffers (the memory benchmark reads it from here too).
 *
 * Usage: bench_gpu_overlap [--size 4000] [--count 50] [--reps 5] [--device 0] [--json] [--keep] */
#include "bench_gpu_common.h"

int main(int argc, char **argv) {
  bench_opts o = {5, 4000, 50, 0, 0};
  /* --keep: every y kept (no temporaries, no memory plan): a diagnostic of what the plan costs. */
  int keep = argc > 1 && strcmp(argv[argc - 1], "--keep") == 0;
  bench_parse(argc - keep, argv, &o);
  weft_runtime *rt = bench_runtime("overlap", o.device + 1);
  weft_device dev = weft_cuda(o.device);
  const int64_t shape[2] = {o.size, o.size};
  int count = (int)o.count;

  weft_graph *both, *compute, *copies;
  BCHECK(weft_graph_create(rt, &both));
  weft_tensor *x;
  BCHECK(weft_tensor_create(both, "x", WEFT_F32, 2, shape, dev, weft_uniform(0, 1, 42), &x));
  for (int i = 0; i < count; i++) {
    weft_tensor *y = NULL, *h = NULL;
    BCHECK(weft_mm(both, x, x, &y));
    if (keep) weft_tensor_keep(y);
    BCHECK(weft_copy(both, y, weft_cpu(), &h));
  }
  BCHECK(weft_graph_create(rt, &compute));
  weft_tensor *xc;
  BCHECK(weft_tensor_create(compute, "x", WEFT_F32, 2, shape, dev, weft_uniform(0, 1, 42), &xc));
  for (int i = 0; i < count; i++) {
    weft_tensor *y = NULL;
    BCHECK(weft_mm(compute, xc, xc, &y));
  }
  BCHECK(weft_graph_create(rt, &copies));
  weft_tensor *src;
  BCHECK(weft_tensor_create(copies, "y", WEFT_F32, 2, shape, dev, weft_uniform(0, 1, 7), &src));
  for (int i = 0; i < count; i++) {
    weft_tensor *h = NULL;
    BCHECK(weft_copy(copies, src, weft_cpu(), &h));
  }

  double sp_c, sp_k, sp_b, sp_e;
  double t_compute = bench_time_graph(compute, 2, o.reps, &sp_c);
  double t_copies = bench_time_graph(copies, 2, o.reps, &sp_k);
  /* Eager runs of "both" first (replay off): the scheduler's own dispatch, and its memory. */
  weft_cuda_set_replay(rt, 0);
  BCHECK(weft_graph_run(both));
  BCHECK(weft_cuda_memory_trim(rt, o.device, 0));
  BCHECK(weft_cuda_memory_reset_peak(rt, o.device));
  double t_eager = bench_time_graph(both, 0, o.reps, &sp_e);
  weft_cuda_memory_stats ms;
  BCHECK(weft_cuda_memory_stats_get(rt, o.device, &ms));
  weft_cuda_set_replay(rt, 1);
  double t_both = bench_time_graph(both, 2, o.reps, &sp_b);
  double bound = t_compute > t_copies ? t_compute : t_copies;
  double buf = (double)weft_tensor_bytes(x);
  char name[128];
  if (!o.json)
    printf("overlap on cuda:%d (%s): %d x (mm %lld^2 f32, copy to host)\n"
           "  compute alone %9.2f ms (spread %.2f)\n  copies alone  %9.2f ms (spread %.2f)\n"
           "  both, eager   %9.2f ms (spread %.2f) = %.4f x bound\n"
           "  both          %9.2f ms (spread %.2f) = %.4f x bound\n"
           "  device memory of both (eager): peak %.2f buffers in use, %.2f reserved (x included)\n",
           o.device, bench_device_name(rt, o.device, name, sizeof name), count, o.size, t_compute, sp_c, t_copies,
           sp_k, t_eager, sp_e, t_eager / bound, t_both, sp_b, t_both / bound, ms.peak / buf, ms.reserved_peak / buf);
  bench_result(&o, "overlap", "compute_ms", t_compute, "copies_ms", t_copies, "both_ms", t_both, "ratio",
               t_both / bound, "eager_ms", t_eager, "eager_ratio", t_eager / bound, "peak_buffers",
               ms.peak / buf, "reserved_buffers", ms.reserved_peak / buf, NULL);
  weft_graph_destroy(both);
  weft_graph_destroy(compute);
  weft_graph_destroy(copies);
  weft_runtime_destroy(rt);
  return 0;
}
