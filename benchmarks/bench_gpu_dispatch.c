/* bench_gpu_dispatch.c — per-node cost of tiny GPU nodes: a chain of 10 000 in-place adds on a
 * one-element tensor (x = x + 1), as PyTorch's `x.add_(1)` loop. Eager runs dispatch and
 * enqueue every node (target <= 3 us per node); replayed runs launch one CUDA graph (target
 * <= 1 us per node). The result is checked (x grows by the node count each run).
 *
 * Usage: bench_gpu_dispatch [--count 10000] [--reps 7] [--device 0] [--json] */
#include "bench_gpu_common.h"

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
  if (!o.json)
    printf("dispatch: chain of %lld tiny GPU nodes\n  eager    %9.3f ms = %6.3f us/node (spread %.3f ms)\n"
           "  replayed %9.3f ms = %6.3f us/node (spread %.3f ms)\n",
           o.count, eager, eager * 1e3 / n, sp_e, replay, replay * 1e3 / n, sp_r);
  bench_result(&o, "dispatch", "nodes", n, "eager_us_per_node", eager * 1e3 / n, "replay_us_per_node",
               replay * 1e3 / n, NULL);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return 0;
}
