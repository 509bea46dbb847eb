/* bench_cpu_parallel.c — do two independent chains of CPU-heavy nodes run in parallel?
 *
 * Two chains of --len products (x_{k+1} = x_k . w, --size square f32 matrices), each GEMM on
 * one OpenBLAS thread (weft's policy with 2 workers on 2 cores). Measured in the same run:
 *   serial:   the same two chains, the second made to wait for the first by an explicit edge
 *   parallel: the two chains independent, as weft infers them
 * Target (issue 2): parallel <= 0.6 x serial on 2 workers. Median of --reps.
 *
 * Usage: bench_cpu_parallel [--size N] [--len L] [--reps R] [--workers W] [--json] */
#include "bench_common.h"

#include <string.h>

#define CHECK BCHECK

static double now_s(void) { return bench_now_ms() * 1e-3; }

/* Builds the two chains; with `serial`, an explicit edge orders chain B after chain A. */
static weft_graph *build(weft_runtime *rt, int64_t n, int len, int serial) {
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *w, *x[2];
  CHECK(weft_tensor_create(g, "w", WEFT_F32, 2, (int64_t[]){n, n}, weft_cpu(),
                           weft_uniform(-0.01, 0.01, 1), &w));
  weft_node *last_a = NULL, *first_b = NULL;
  for (int c = 0; c < 2; c++) {
    CHECK(weft_tensor_create(g, c ? "xb" : "xa", WEFT_F32, 2, (int64_t[]){n, n}, weft_cpu(),
                             weft_uniform(-1, 1, 2 + (uint64_t)c), &x[c]));
    for (int k = 0; k < len; k++) {
      weft_tensor *y = NULL;
      CHECK(weft_mm(g, x[c], w, &y));
      if (c == 1 && k == 0) first_b = weft_graph_last_node(g);
      x[c] = y;
    }
    if (c == 0) last_a = weft_graph_last_node(g);
  }
  if (serial) CHECK(weft_graph_add_edge(g, last_a, first_b));
  return g;
}

static double time_graph(weft_graph *g) {
  double t0 = now_s();
  CHECK(weft_graph_run(g));
  return now_s() - t0;
}

int main(int argc, char **argv) {
  int64_t n = 1000;
  int len = 8, reps = 5, workers = 2, json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) n = atoll(argv[++i]);
    else if (strcmp(argv[i], "--len") == 0 && i + 1 < argc) len = atoi(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc) workers = atoi(argv[++i]);
    else if (strcmp(argv[i], "--json") == 0) json = 1;
    else {
      fprintf(stderr, "usage: %s [--size N] [--len L] [--reps R] [--workers W] [--json]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || reps > 64 || len < 1 || n < 1) {
    fprintf(stderr, "bench_cpu_parallel: bad --reps, --len or --size\n");
    return 2;
  }
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = workers;
  o.blas_threads = 1;
  o.max_gpus = 0;
  o.flags = WEFT_RUNTIME_QUIET;
  weft_runtime *rt;
  CHECK(weft_runtime_create(&o, &rt));
  weft_graph *par = build(rt, n, len, 0), *ser = build(rt, n, len, 1);
  time_graph(par);
  time_graph(ser);
  double tp[64], ts[64];
  for (int r = 0; r < reps; r++) { /* interleaved, so drift hits both alike */
    tp[r] = time_graph(par);
    ts[r] = time_graph(ser);
  }
  double p = bench_median(tp, reps, NULL), s = bench_median(ts, reps, NULL);
  if (json)
    printf("{\"workload\":\"two_chains\",\"size\":%lld,\"len\":%d,\"workers\":%d,\"serial_s\":%.4f,"
           "\"parallel_s\":%.4f,\"ratio\":%.3f}\n", (long long)n, len, workers, s, p, p / s);
  else
    printf("two chains of %d x mm %lld^2, %d workers: serial %.3f s, parallel %.3f s, ratio %.3f "
           "(target <= 0.6)\n", len, (long long)n, workers, s, p, p / s);
  weft_graph_destroy(par);
  weft_graph_destroy(ser);
  weft_runtime_destroy(rt);
  return 0;
}
