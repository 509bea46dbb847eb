/* bench_gpu_small_ops.c — the reference notes' small-product experiment: two chains x 50
 * products of 400² f32 on one GPU (y = x1.x1 fifty times and y = x2.x2 fifty times, every result
 * kept). Launch costs dominate: each product takes a few microseconds on the GPU.
 *   first run: eager runs (replay off): each node dispatched by the scheduler and enqueued on
 *              its stream as it becomes ready; target <= PyTorch eager;
 *   replay:    the graph captured into a CUDA graph at its second run and replayed; target <=
 *              PyTorch's CUDA-graph replay.
 * Also reports a cold first run (a fresh graph: build, plan, allocation, run) for reference.
 *
 * Usage: bench_gpu_small_ops [--size 400] [--count 50] [--reps 21] [--device 0] [--json] */
#include "bench_gpu_common.h"

static weft_graph *build(weft_runtime *rt, int dev, int64_t size, int count) {
  weft_graph *g;
  BCHECK(weft_graph_create(rt, &g));
  const int64_t shape[2] = {size, size};
  weft_tensor *x1, *x2;
  BCHECK(weft_tensor_create(g, "x1", WEFT_F32, 2, shape, weft_cuda(dev), weft_normal(0, 1, 1), &x1));
  BCHECK(weft_tensor_create(g, "x2", WEFT_F32, 2, shape, weft_cuda(dev), weft_normal(0, 1, 2), &x2));
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < count; i++) {
      weft_tensor *y = NULL;
      BCHECK(weft_mm(g, c ? x2 : x1, c ? x2 : x1, &y));
    }
  return g;
}

int main(int argc, char **argv) {
  bench_opts o = {21, 400, 50, 0, 0};
  bench_parse(argc, argv, &o);
  weft_runtime *rt = bench_runtime("small_ops", o.device + 1);
  /* A cold first run, after a warm-up graph so that CUDA and cuBLAS are initialised. */
  weft_graph *warm = build(rt, o.device, o.size, (int)o.count);
  BCHECK(weft_graph_run(warm));
  weft_graph_destroy(warm);
  double t0 = bench_now_ms();
  weft_graph *g = build(rt, o.device, o.size, (int)o.count);
  BCHECK(weft_graph_run(g));
  double cold = bench_now_ms() - t0;
  double sp_e, sp_r;
  weft_cuda_set_replay(rt, 0);
  double eager = bench_time_graph(g, 3, o.reps, &sp_e);
  weft_cuda_set_replay(rt, 1);
  weft_graph_destroy(g);
  g = build(rt, o.device, o.size, (int)o.count);
  double replay = bench_time_graph(g, 3, o.reps, &sp_r);
  weft_cuda_run_stats rs;
  weft_cuda_run_stats_get(rt, &rs);
  char name[128];
  if (!o.json)
    printf("small_ops on cuda:%d (%s): 2 chains x %lld x mm %lld^2 f32\n"
           "  cold first run  %8.3f ms (build, plan, allocate, run)\n"
           "  eager run       %8.3f ms (spread %.3f)\n  replayed run    %8.3f ms (spread %.3f)   [%llu replays]\n",
           o.device, bench_device_name(rt, o.device, name, sizeof name), o.count, o.size, cold, eager, sp_e, replay,
           sp_r, rs.replays);
  bench_result(&o, "small_ops", "cold_ms", cold, "eager_ms", eager, "replay_ms", replay, NULL);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return 0;
}
