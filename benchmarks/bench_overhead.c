/* bench_overhead.c — scheduling overhead per task, dependencies inferred from accesses.
 *
 * Workloads (as Taskflow's benchmarks, but with no explicit edge: weft infers every one):
 *   indep  200 000 empty tasks, no shared data
 *   chain  100 000 tasks, each read-write on the same tensor
 *   wave   a 300 x 300 grid; task (i, j) reads cell (i-1, j) and (i, j-1) and writes (i, j)
 * For each: total ns per task (build + analysis + first run + teardown) and re-run ns per task
 * (running the built graph again), the median of --reps repetitions (default 5).
 *
 * Where oneTBB is installed, its flow graph runs the same workloads in the same process
 * (bench_overhead_tbb.cpp: continue_nodes with the edges written by hand, empty bodies, as many
 * threads as weft has workers), measured the same way; the ratios weft / TBB follow. Target
 * (issue 18): first-run totals <= 0.3 x TBB's on every workload; re-runs no slower than before.
 *
 * With --phases, each workload's total is also taken apart: the build (graph, tensors, calls:
 * what the builder's thread spends), the first run (plan, materialisation, nodes) and the
 * teardown, medians a task (each its own median, so they need not add up to the total's).
 *
 * Usage: bench_overhead [--reps N] [--workers N] [--workload indep|chain|wave] [--phases] [--json]
 * With --json, one object per line: {"workload":..,"tasks":..,"total_ns_per_task":..,
 * "rerun_ns_per_task":..,"build_ns_per_task":..,"first_run_ns_per_task":..,
 * "destroy_ns_per_task":.., and with TBB "tbb_total_ns_per_task":.., "tbb_rerun_ns_per_task":..}. */
#include "bench_common.h"

#include <string.h>

#define CHECK BCHECK

#if WEFT_BENCH_TBB
void bench_tbb_measure(const char *workload, int reps, int threads, double *total, double *rerun);
#endif

static double now_ns(void) { return bench_now_ms() * 1e6; }

static int empty_kernel(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}

static const weft_op *op_none, *op_rw, *op_w, *op_rw1, *op_rrw;

static void register_ops(weft_runtime *rt) {
  weft_op_desc d = {0};
  d.cpu = empty_kernel;
  d.name = "empty";
  d.nargs = 0;
  CHECK(weft_op_register(rt, &d, &op_none));
  d.name = "touch";
  d.nargs = 1;
  d.access[0] = WEFT_READ_WRITE;
  CHECK(weft_op_register(rt, &d, &op_rw));
  d.name = "cell0";
  d.access[0] = WEFT_WRITE;
  CHECK(weft_op_register(rt, &d, &op_w));
  d.name = "cell1";
  d.nargs = 2;
  d.access[0] = WEFT_READ;
  d.access[1] = WEFT_WRITE;
  CHECK(weft_op_register(rt, &d, &op_rw1));
  d.name = "cell2";
  d.nargs = 3;
  d.access[0] = WEFT_READ;
  d.access[1] = WEFT_READ;
  d.access[2] = WEFT_WRITE;
  CHECK(weft_op_register(rt, &d, &op_rrw));
}

typedef struct result {
  double total, rerun;
  double build, first, destroy; /* the total's parts (--phases) */
} result;

static size_t build(weft_graph *g, const char *w) {
  if (strcmp(w, "indep") == 0) {
    for (int i = 0; i < 200000; i++) CHECK(weft_call(g, op_none, NULL, 0, NULL, 0));
    return 200000;
  }
  if (strcmp(w, "chain") == 0) {
    weft_tensor *t;
    CHECK(weft_tensor_create(g, "t", WEFT_F32, 0, NULL, weft_cpu(), weft_zeros(), &t));
    for (int i = 0; i < 100000; i++) CHECK(weft_call(g, op_rw, &t, 1, NULL, 0));
    return 100000;
  }
  enum { N = 300 };
  static weft_tensor *cell[N][N];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      CHECK(weft_tensor_create(g, NULL, WEFT_F32, 0, NULL, weft_cpu(), weft_zeros(), &cell[i][j]));
      if (i > 0 && j > 0)
        CHECK(weft_call(g, op_rrw, (weft_tensor *[]){cell[i - 1][j], cell[i][j - 1], cell[i][j]}, 3, NULL, 0));
      else if (i > 0)
        CHECK(weft_call(g, op_rw1, (weft_tensor *[]){cell[i - 1][j], cell[i][j]}, 2, NULL, 0));
      else if (j > 0)
        CHECK(weft_call(g, op_rw1, (weft_tensor *[]){cell[i][j - 1], cell[i][j]}, 2, NULL, 0));
      else
        CHECK(weft_call(g, op_w, &cell[i][j], 1, NULL, 0));
    }
  return (size_t)N * N;
}

static double median(double *v, int n) { return bench_median(v, n, NULL); }

static result measure(weft_runtime *rt, const char *w, int reps) {
  double total[64], rerun[64], built[64], first[64], destroy[64];
  size_t tasks = 0;
  for (int r = 0; r < reps; r++) {
    weft_graph *g;
    double t0 = now_ns();
    CHECK(weft_graph_create(rt, &g));
    tasks = build(g, w);
    double tb = now_ns();
    CHECK(weft_graph_run(g));
    double t1 = now_ns();
    CHECK(weft_graph_run(g));
    double t2 = now_ns();
    weft_graph_destroy(g);
    double t3 = now_ns();
    total[r] = ((t1 - t0) + (t3 - t2)) / (double)tasks;
    rerun[r] = (t2 - t1) / (double)tasks;
    built[r] = (tb - t0) / (double)tasks;
    first[r] = (t1 - tb) / (double)tasks;
    destroy[r] = (t3 - t2) / (double)tasks;
  }
  return (result){median(total, reps), median(rerun, reps), median(built, reps), median(first, reps),
                  median(destroy, reps)};
}

int main(int argc, char **argv) {
  int reps = 5, workers = 0, json = 0, phases = 0;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc)
      workers = atoi(argv[++i]);
    else if (strcmp(argv[i], "--workload") == 0 && i + 1 < argc)
      only = argv[++i];
    else if (strcmp(argv[i], "--json") == 0)
      json = 1;
    else if (strcmp(argv[i], "--phases") == 0)
      phases = 1;
    else {
      fprintf(stderr, "usage: %s [--reps N] [--workers N] [--workload indep|chain|wave] [--phases] [--json]\n",
              argv[0]);
      return 2;
    }
  }
  if (reps < 1 || reps > 64) reps = 5;
  weft_runtime *rt = bench_cpu_runtime(workers);
  register_ops(rt);
  static const char *const names[] = {"indep", "chain", "wave"};
  static const size_t counts[] = {200000, 100000, 90000};
  int threads = weft_runtime_cpu_workers(rt);
  if (!json) {
    printf("%-6s %8s %18s %18s", "work", "tasks", "total ns/task", "rerun ns/task");
#if WEFT_BENCH_TBB
    printf(" %14s %14s %12s %12s", "TBB total", "TBB rerun", "total/TBB", "rerun/TBB");
#endif
    printf("   (%d workers, median of %d)\n", threads, reps);
  }
  for (int k = 0; k < 3; k++) {
    if (only != NULL && strcmp(only, names[k]) != 0) continue;
    measure(rt, names[k], 1); /* warm-up: page in the arenas, wake the workers */
    result res = measure(rt, names[k], reps);
    result tbb = {0, 0};
#if WEFT_BENCH_TBB
    bench_tbb_measure(names[k], 1, threads, &tbb.total, &tbb.rerun); /* its warm-up */
    bench_tbb_measure(names[k], reps, threads, &tbb.total, &tbb.rerun);
#endif
    if (json) {
      printf("{\"workload\":\"%s\",\"tasks\":%zu,\"total_ns_per_task\":%.1f,\"rerun_ns_per_task\":%.1f", names[k],
             counts[k], res.total, res.rerun);
      printf(",\"build_ns_per_task\":%.1f,\"first_run_ns_per_task\":%.1f,\"destroy_ns_per_task\":%.1f", res.build,
             res.first, res.destroy);
      if (tbb.total > 0)
        printf(",\"tbb_total_ns_per_task\":%.1f,\"tbb_rerun_ns_per_task\":%.1f", tbb.total, tbb.rerun);
      printf("}\n");
    } else {
      printf("%-6s %8zu %18.1f %18.1f", names[k], counts[k], res.total, res.rerun);
      if (tbb.total > 0)
        printf(" %14.1f %14.1f %12.3f %12.3f", tbb.total, tbb.rerun, res.total / tbb.total, res.rerun / tbb.rerun);
      printf("\n");
      if (phases)
        printf("%-6s %8s   the total's parts, ns/task: build %.1f, first run %.1f, teardown %.1f\n", "", "", res.build,
               res.first, res.destroy);
    }
  }
  weft_runtime_destroy(rt);
  return 0;
}
