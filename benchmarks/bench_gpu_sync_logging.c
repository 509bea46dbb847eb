/* bench_gpu_sync_logging.c — the reference notes' exercise 5.6.3: 1000 products A = A.A of
 * 100² f32, with the Frobenius norm of each result logged, against logging once at the end.
 * "Logged" means the norm reaches a host tensor (a copy into pinned memory), so the host can
 * print it. In weft the norms stay on the GPU and come back asynchronously on the copy
 * engine, so logging every step should cost little: target every / once <= 1.1 (the reference
 * is PyTorch with .item() each step, from torch_reference.py in the same call). Reported for
 * steady-state runs (replayed) and eager runs.
 *
 * Usage: bench_gpu_sync_logging [--size 100] [--count 1000] [--reps 7] [--device 0] [--json] */
#include "bench_gpu_common.h"

static weft_graph *build(weft_runtime *rt, int dev, int64_t size, int count, int every) {
  weft_graph *g;
  BCHECK(weft_graph_create(rt, &g));
  weft_tensor *a;
  BCHECK(weft_tensor_create(g, "A", WEFT_F32, 2, (int64_t[]){size, size}, weft_cuda(dev), weft_uniform(0, 1, 3), &a));
  for (int i = 0; i < count; i++) {
    weft_tensor *next = NULL;
    BCHECK(weft_mm(g, a, a, &next));
    a = next;
    if (every || i == count - 1) {
      weft_tensor *n = NULL, *h = NULL;
      BCHECK(weft_norm(g, a, &n));
      BCHECK(weft_copy(g, n, weft_cpu(), &h));
    }
  }
  return g;
}

int main(int argc, char **argv) {
  bench_opts o = {7, 100, 1000, 0, 0};
  bench_parse(argc, argv, &o);
  weft_runtime *rt = bench_runtime("sync_logging", o.device + 1);
  weft_graph *every = build(rt, o.device, o.size, (int)o.count, 1);
  weft_graph *once = build(rt, o.device, o.size, (int)o.count, 0);
  double s[4];
  weft_cuda_set_replay(rt, 0);
  double e_every = bench_time_graph(every, 2, o.reps, &s[0]), e_once = bench_time_graph(once, 2, o.reps, &s[1]);
  weft_cuda_set_replay(rt, 1);
  double r_every = bench_time_graph(every, 2, o.reps, &s[2]), r_once = bench_time_graph(once, 2, o.reps, &s[3]);
  if (!o.json)
    printf("sync_logging: %lld x mm %lld^2 f32, norm logged every step vs once\n"
           "  eager:    every %8.3f ms, once %8.3f ms, ratio %.3f\n"
           "  replayed: every %8.3f ms, once %8.3f ms, ratio %.3f\n",
           o.count, o.size, e_every, e_once, e_every / e_once, r_every, r_once, r_every / r_once);
  bench_result(&o, "sync_logging", "every_ms", r_every, "once_ms", r_once, "ratio", r_every / r_once,
               "eager_every_ms", e_every, "eager_once_ms", e_once, "eager_ratio", e_every / e_once, NULL);
  weft_graph_destroy(every);
  weft_graph_destroy(once);
  weft_runtime_destroy(rt);
  return 0;
}
