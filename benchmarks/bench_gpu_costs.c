/* bench_gpu_costs.c — the costs behind the simulator's figures (docs/simulator.md), measured
 * one variable at a time, for when a simulated benchmark and a measured one disagree:
 *   size     a chain of one-element adds, batched and not, eager, at 1 000 to 16 000 nodes:
 *            does the host's cost per node grow with the graph?
 *   logging  1000 products of 100^2, replayed: into existing tensors, into new temporaries,
 *            with a norm of each result, with the norm copied to the host (sync_logging's
 *            "every"), and the norm and copy without the temporaries;
 *   small    400^2 products: 100 independent ones (small_ops) and a chain of 100, eager and
 *            replayed.
 * Each figure is the median of --reps runs after two warm-up runs, in us per node (or per
 * step). Builds graphs as benchmarks/bench_gpu_*.c do.
 *
 * Usage: bench_gpu_costs [--reps 5] [--device 0] [--only size,logging,small] */
#include "bench_gpu_common.h"

#include <stdlib.h>
#include <string.h>

static double run_us(weft_graph *g, int reps) {
  double sp;
  return bench_time_graph(g, 2, reps, &sp) * 1e3;
}

static weft_graph *adds(weft_runtime *rt, int dev, int n) {
  weft_graph *g;
  BCHECK(weft_graph_create(rt, &g));
  weft_tensor *x, *one;
  BCHECK(weft_tensor_create(g, "x", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(dev), weft_zeros(), &x));
  BCHECK(weft_tensor_create(g, "one", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(dev), weft_ones(), &one));
  for (int i = 0; i < n; i++) BCHECK(weft_add(g, x, one, &x));
  return g;
}

/* 1000 products of 100^2: temps (each a new tensor) or into two tensors alternately; with the
 * norm of each result (norm) and its copy to the host (copy). */
static weft_graph *logging(weft_runtime *rt, int dev, int temps, int norm, int copy) {
  weft_graph *g;
  BCHECK(weft_graph_create(rt, &g));
  weft_tensor *a, *b;
  /* sync_logging's values, uniform in [0, 1), overflow to inf and NaN within a few products;
   * WEFT_COSTS_HI=0.01 keeps them finite (they shrink to zero instead). */
  const char *hi_env = getenv("WEFT_COSTS_HI");
  double hi = hi_env != NULL ? atof(hi_env) : 1.0;
  BCHECK(weft_tensor_create(g, "A", WEFT_F32, 2, (int64_t[]){100, 100}, weft_cuda(dev), weft_uniform(0, hi, 3), &a));
  BCHECK(weft_tensor_create(g, "B", WEFT_F32, 2, (int64_t[]){100, 100}, weft_cuda(dev), weft_uniform(0, hi, 4), &b));
  for (int i = 0; i < 1000; i++) {
    weft_tensor *next = temps ? NULL : (i % 2 ? a : b), *src = temps ? a : (i % 2 ? b : a);
    BCHECK(weft_mm(g, src, src, &next));
    if (temps) a = next;
    if (norm) {
      weft_tensor *n = NULL, *h = NULL;
      BCHECK(weft_norm(g, next, &n));
      if (copy) BCHECK(weft_copy(g, n, weft_cpu(), &h));
    }
  }
  return g;
}

static weft_graph *products(weft_runtime *rt, int dev, int chain) {
  weft_graph *g;
  BCHECK(weft_graph_create(rt, &g));
  weft_tensor *x, *w;
  BCHECK(weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){400, 400}, weft_cuda(dev), weft_normal(0, 0.05, 1), &x));
  BCHECK(weft_tensor_create(g, "w", WEFT_F32, 2, (int64_t[]){400, 400}, weft_cuda(dev), weft_normal(0, 0.05, 2), &w));
  weft_tensor *y = x;
  for (int i = 0; i < 100; i++) {
    weft_tensor *out = NULL;
    BCHECK(weft_mm(g, chain ? y : x, w, &out));
    y = out;
  }
  return g;
}

static int wanted(const char *only, const char *what) {
  if (only == NULL) return 1;
  const char *p = strstr(only, what);
  return p != NULL;
}

int main(int argc, char **argv) {
  bench_opts o = {5, 0, 0, 0, 0};
  const char *only = NULL;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[i + 1];
      for (int j = i; j + 2 <= argc; j++) argv[j] = argv[j + 2];
      argc -= 2;
      break;
    }
  bench_parse(argc, argv, &o);
  weft_runtime *rt = bench_runtime("costs", o.device + 1);
  if (wanted(only, "size")) {
    static const int sizes[] = {1000, 2000, 4000, 8000, 16000};
    for (int batch = 1; batch >= 0; batch--) {
      weft_cuda_set_replay(rt, 0);
      weft_runtime_set_batching(rt, batch);
      for (int k = 0; k < 5; k++) {
        weft_graph *g = adds(rt, o.device, sizes[k]);
        double t = run_us(g, o.reps);
        printf("COST size batched=%d nodes=%d eager_us_per_node=%.4f\n", batch, sizes[k], t / sizes[k]);
        weft_graph_destroy(g);
      }
    }
    weft_runtime_set_batching(rt, 1);
  }
  if (wanted(only, "logging")) {
    static const int v[][3] = {{0, 0, 0}, {1, 0, 0}, {1, 1, 0}, {1, 1, 1}, {0, 1, 1}};
    static const char *names[] = {"into_existing", "temps", "temps_norm", "temps_norm_copy", "existing_norm_copy"};
    for (int replay = 1; replay >= 0; replay--) {
      weft_cuda_set_replay(rt, replay);
      for (int k = 0; k < 5; k++) {
        weft_graph *g = logging(rt, o.device, v[k][0], v[k][1], v[k][2]);
        printf("COST logging %s replay=%d us_per_step=%.4f\n", names[k], replay, run_us(g, o.reps) / 1000);
        weft_graph_destroy(g);
      }
    }
  }
  if (wanted(only, "small")) {
    for (int replay = 1; replay >= 0; replay--) {
      weft_cuda_set_replay(rt, replay);
      for (int chain = 0; chain < 2; chain++) {
        weft_graph *g = products(rt, o.device, chain);
        printf("COST small %s replay=%d us_per_product=%.4f\n", chain ? "chain" : "independent", replay,
               run_us(g, o.reps) / 100);
        weft_graph_destroy(g);
      }
    }
  }
  weft_runtime_destroy(rt);
  return 0;
}
