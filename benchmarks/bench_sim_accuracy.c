/* bench_sim_accuracy.c — how close the simulator comes to the machine it simulates: every
 * workload of the CUDA backend's benchmarks (issue 3: overlap, memory, multi_gpu, small_ops,
 * dispatch, sync_logging, gemm_rate), built the same way as benchmarks/bench_gpu_*.c, measured
 * on this machine's GPUs and simulated on a machine profile, side by side. Target: every
 * simulated figure within 10% of the measured one (issue 6).
 *
 * Measured figures are timed like the GPU benchmarks: host wall clock from launch to the end
 * of weft_graph_run, median of --reps runs after warm-up runs, replayed (CUDA graph) unless
 * the row says "eager" (replay off); for the short workloads (small_ops, dispatch, costs), the
 * median of five such medians a quarter of a second apart (time_short); and each figure the
 * median of --passes whole passes over the workloads (measure_passes), of which the table
 * also gives the range. Simulated figures are the virtual makespan of the same graph on the
 * simulated runtime after the same warm-up runs (a re-run of an unchanged all-GPU
 * graph is modelled as a replay; "eager" rows use a graph's first, unreplayed run). The memory
 * row compares peak device memory in use, in result buffers.
 *
 * Usage: bench_sim_accuracy [--profile NAME|FILE] [--calibrate FILE] [--predict] [--quick]
 *                           [--only overlap,multi_gpu,...] [--reps N] [--passes N]
 *   --profile    the profile to simulate (default: h100 on one GPU, h200xN on N GPUs)
 *   --predict    simulate only, no measurement: what the profile predicts for each benchmark
 *                (any machine; --profile h200x8 plans for eight GPUs)
 *   --calibrate  first measure this machine's profile with the calibration tool
 *                (src/tools/calibrate), write it to FILE and simulate with it (the shipped
 *                profiles are made this way)
 *   --passes     measure every workload in N passes, one after the other, and take each
 *                figure's median (default 3; measure_passes says why)
 *   --quick      smaller sizes and fewer repetitions (a smoke test; also runs without a GPU,
 *                against a simulated machine standing in for the real one)
 *   --only costs the fixed costs of small runs, not among the benchmarks (asked for by name
 *                only): 1 and 4 independent tiny adds, 1, 4 and 100 independent 400^2
 *                products, eager and replayed — what a VM adds to every eager run
 * Prints a Markdown table for docs/benchmarks.md and one "ACC name=.. measured=.. simulated=..
 * error=.." line per row; exits 1 if a row is off by more than 10%. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/calibrate/calibrate.h"
#include "weft/sim.h"
#include "weft/weft.h"
#if WEFT_HAVE_CUDA
#include "weft/cuda.h"
#endif

#define ACHECK(x)                                                                    \
  do {                                                                               \
    int rc_ = (x);                                                                   \
    if (rc_ != WEFT_OK) {                                                            \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, weft_last_error()); \
      exit(2);                                                                       \
    }                                                                                \
  } while (0)

typedef struct opts {
  const char *profile, *calibrate, *only;
  int quick, reps, predict, passes;
} opts;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median_of(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One run: wall-clock ms, or the virtual makespan on a simulated runtime. */
static double run_ms(weft_graph *g) {
  weft_runtime *rt = weft_graph_runtime(g);
  weft_run *r;
  double t0 = now_ms();
  ACHECK(weft_graph_launch(g, &r));
  ACHECK(weft_run_wait(r));
  double t = now_ms() - t0;
  if (weft_sim_active(rt)) {
    weft_sim_summary s;
    ACHECK(weft_sim_run_summary(r, &s));
    t = s.makespan_s * 1e3;
  }
  weft_run_destroy(r);
  return t;
}

/* `warm` untimed runs, then the median of `reps` timed ones (one: a simulation is exact). */
static double time_graph(weft_graph *g, int warm, int reps) {
  if (weft_sim_active(weft_graph_runtime(g))) reps = 1;
  for (int i = 0; i < warm; i++) (void)run_ms(g);
  double *t = malloc((size_t)reps * sizeof *t);
  if (t == NULL) exit(2);
  for (int i = 0; i < reps; i++) t[i] = run_ms(g);
  double m = median_of(t, reps);
  free(t);
  return m;
}

/* Eager: replay off on a real GPU; a graph's first run on a simulated machine. */
static double time_eager(weft_graph *g, int reps) {
  weft_runtime *rt = weft_graph_runtime(g);
  if (weft_sim_active(rt)) return run_ms(g);
#if WEFT_HAVE_CUDA
  weft_cuda_set_replay(rt, 0);
#endif
  double t = time_graph(g, 2, reps);
#if WEFT_HAVE_CUDA
  weft_cuda_set_replay(rt, 1);
#endif
  return t;
}

/* A short workload's eager runs, then its replays, each back to back (time_eager, time_graph),
 * as the benchmarks run them (not in bursts with pauses between: on the GPU machines' VMs a
 * pause lets the threads and cores go idle, and the runs after it pay the wake-ups), in ROUNDS
 * rounds ROUND_GAP_MS apart, of which the median. One round lasts tens of milliseconds, and the
 * host costs that bound these runs move from one second to the next on those VMs
 * (docs/benchmarks.md, "How to read these figures"): the rounds span the second or more over
 * which the calibration takes its host figures (src/tools/calibrate/calibrate.c). */
enum { ROUNDS = 5, ROUND_GAP_MS = 250 };

static void time_short(weft_graph *g, int reps, double *eager, double *replay) {
  if (weft_sim_active(weft_graph_runtime(g))) {
    *eager = time_eager(g, reps);
    *replay = time_graph(g, 3, reps);
    return;
  }
  double e[ROUNDS], r[ROUNDS];
  for (int i = 0; i < ROUNDS; i++) {
    if (i > 0) nanosleep(&(struct timespec){0, ROUND_GAP_MS * 1000000L}, NULL);
    e[i] = time_eager(g, reps);
    r[i] = time_graph(g, 3, reps);
  }
  *eager = median_of(e, ROUNDS);
  *replay = median_of(r, ROUNDS);
}

/* ---- the workloads (as in benchmarks/bench_gpu_*.c) ------------------------------------------ */

typedef struct sizes {
  int64_t big, small, tiny_count, log_size, log_count, count;
} sizes;

static weft_graph *overlap_graph(weft_runtime *rt, const sizes *z, int products, int copies) {
  weft_graph *g;
  ACHECK(weft_graph_create(rt, &g));
  const int64_t shape[2] = {z->big, z->big};
  weft_tensor *x;
  ACHECK(weft_tensor_create(g, "x", WEFT_F32, 2, shape, weft_cuda(0), weft_uniform(0, 1, 42), &x));
  for (int64_t i = 0; i < z->count; i++) {
    weft_tensor *y = NULL, *h = NULL;
    if (products) ACHECK(weft_mm(g, x, x, &y));
    if (copies) ACHECK(weft_copy(g, products ? y : x, weft_cpu(), &h));
  }
  return g;
}

static weft_graph *chains_graph(weft_runtime *rt, const sizes *z, int first, int n) {
  weft_graph *g;
  ACHECK(weft_graph_create(rt, &g));
  const int64_t shape[2] = {z->big, z->big};
  for (int d = first; d < first + n; d++) {
    weft_tensor *x;
    ACHECK(weft_tensor_create(g, "x", WEFT_F32, 2, shape, weft_cuda(d), weft_uniform(0, 1, (uint64_t)d), &x));
    for (int64_t i = 0; i < z->count; i++) {
      weft_tensor *y = NULL;
      ACHECK(weft_mm(g, x, x, &y));
    }
  }
  return g;
}

static weft_graph *small_ops_graph(weft_runtime *rt, const sizes *z) {
  weft_graph *g;
  ACHECK(weft_graph_create(rt, &g));
  const int64_t shape[2] = {z->small, z->small};
  weft_tensor *x[2];
  for (int c = 0; c < 2; c++)
    ACHECK(weft_tensor_create(g, c ? "x2" : "x1", WEFT_F32, 2, shape, weft_cuda(0), weft_normal(0, 1, (uint64_t)c + 1), &x[c]));
  for (int c = 0; c < 2; c++)
    for (int64_t i = 0; i < z->count; i++) {
      weft_tensor *y = NULL;
      ACHECK(weft_mm(g, x[c], x[c], &y));
    }
  return g;
}

static weft_graph *dispatch_graph(weft_runtime *rt, const sizes *z) {
  weft_graph *g;
  ACHECK(weft_graph_create(rt, &g));
  weft_tensor *x, *one;
  ACHECK(weft_tensor_create(g, "x", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(0), weft_zeros(), &x));
  ACHECK(weft_tensor_create(g, "one", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(0), weft_ones(), &one));
  for (int64_t i = 0; i < z->tiny_count; i++) ACHECK(weft_add(g, x, one, &x));
  return g;
}

static weft_graph *logging_graph(weft_runtime *rt, const sizes *z, int every) {
  weft_graph *g;
  ACHECK(weft_graph_create(rt, &g));
  weft_tensor *a;
  ACHECK(weft_tensor_create(g, "A", WEFT_F32, 2, (int64_t[]){z->log_size, z->log_size}, weft_cuda(0),
                            weft_uniform(0, 1, 3), &a));
  for (int64_t i = 0; i < z->log_count; i++) {
    weft_tensor *next = NULL;
    ACHECK(weft_mm(g, a, a, &next));
    a = next;
    if (every || i == z->log_count - 1) {
      weft_tensor *n = NULL, *h = NULL;
      ACHECK(weft_norm(g, a, &n));
      ACHECK(weft_copy(g, n, weft_cpu(), &h));
    }
  }
  return g;
}

static weft_graph *gemm_graph(weft_runtime *rt, const sizes *z) {
  weft_graph *g;
  ACHECK(weft_graph_create(rt, &g));
  weft_tensor *x, *y = NULL;
  ACHECK(weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){z->big, z->big}, weft_cuda(0), weft_uniform(0, 1, 1), &x));
  ACHECK(weft_mm(g, x, x, &y));
  return g;
}

/* Peak device memory of cuda:0 during one eager run of g, in bytes. */
static double peak_bytes(weft_graph *g) {
  weft_runtime *rt = weft_graph_runtime(g);
  if (weft_sim_active(rt)) {
    weft_run *r;
    uint64_t peak;
    ACHECK(weft_graph_launch(g, &r));
    ACHECK(weft_run_wait(r));
    ACHECK(weft_sim_peak_bytes(r, weft_cuda(0), &peak));
    weft_run_destroy(r);
    return (double)peak;
  }
#if WEFT_HAVE_CUDA
  weft_cuda_memory_stats ms;
  weft_cuda_set_replay(rt, 0);
  ACHECK(weft_graph_run(g));
  ACHECK(weft_cuda_memory_trim(rt, 0, 0));
  ACHECK(weft_cuda_memory_reset_peak(rt, 0));
  ACHECK(weft_graph_run(g));
  ACHECK(weft_cuda_memory_stats_get(rt, 0, &ms));
  weft_cuda_set_replay(rt, 1);
  return (double)ms.peak;
#else
  return NAN;
#endif
}

/* ---- rows ------------------------------------------------------------------------------------ */

enum { MAX_ROWS = 32, MAX_PASSES = 9 };

typedef struct row {
  char bench[24], figure[64], unit[8];
  double measured, simulated;
  double lo, hi; /* the measured figure's range over the passes */
} row;

typedef struct table {
  row r[MAX_ROWS];
  int n;
} table;

/* `costs` (the fixed costs of small eager runs, by streams and op) runs only when asked for:
 * it is not one of the CUDA backend's benchmarks. */
static int wanted(const opts *o, const char *name) {
  if (o->only == NULL) return strcmp(name, "costs") != 0;
  size_t len = strlen(name);
  for (const char *p = o->only; (p = strstr(p, name)) != NULL; p += len)
    if ((p == o->only || p[-1] == ',') && (p[len] == '\0' || p[len] == ',')) return 1;
  return 0;
}

/* Fills column `col` (0 measured, 1 simulated) of the rows, running every workload on rt with
 * `ngpus` of its GPUs. */
static void measure(weft_runtime *rt, const opts *o, const sizes *z, int ngpus, table *t, int col) {
  /* Workloads of milliseconds or less take at least 21 runs: the VMs move their runs' times
   * by more than the target from one run to the next (docs/benchmarks.md, "Diagnostics": a
   * run's fixed cost through the command line). */
  int reps = o->reps, many = reps < 21 ? 21 : reps;
  int k = 0;
  if (weft_device_count(rt, WEFT_DEVICE_CUDA) < ngpus) {
    fprintf(stderr, "bench_sim_accuracy: the profile has %d GPUs, this machine %d: simulate one "
                    "with as many (a family name such as h200x%d scales a profile)\n",
            weft_device_count(rt, WEFT_DEVICE_CUDA), ngpus, ngpus);
    exit(2);
  }
#define ROW(b, f, u, value)                                                  \
  do {                                                                       \
    row *r_ = &t->r[k++];                                                    \
    snprintf(r_->bench, sizeof r_->bench, "%s", b);                          \
    snprintf(r_->figure, sizeof r_->figure, "%s", f);                        \
    snprintf(r_->unit, sizeof r_->unit, "%s", u);                            \
    if (col == 0) r_->measured = (value); else r_->simulated = (value);      \
  } while (0)
  if (wanted(o, "overlap") || wanted(o, "memory")) {
    weft_graph *both = overlap_graph(rt, z, 1, 1), *comp = overlap_graph(rt, z, 1, 0), *copy = overlap_graph(rt, z, 0, 1);
    double c = time_graph(comp, 2, reps), k2 = time_graph(copy, 2, reps);
    double b = time_graph(both, 2, reps);
    ROW("overlap", "compute alone", "ms", c);
    ROW("overlap", "copies alone", "ms", k2);
    ROW("overlap", "both", "ms", b);
    ROW("overlap", "both / max(compute, copies)", "x", b / (c > k2 ? c : k2));
    weft_graph_destroy(both);
    both = overlap_graph(rt, z, 1, 1);
    ROW("overlap", "both, eager", "ms", time_eager(both, reps));
    weft_graph_destroy(both);
    /* The other graphs' tensors (the 50 unread results of `comp`) would count in the device's
     * peak: only the overlap graph's memory is compared. */
    weft_graph_destroy(comp);
    weft_graph_destroy(copy);
    both = overlap_graph(rt, z, 1, 1);
    ROW("memory", "peak of overlap, in result buffers", "buf", peak_bytes(both) / (4.0 * (double)(z->big * z->big)));
    weft_graph_destroy(both);
  }
  if (wanted(o, "multi_gpu") && ngpus >= 2) {
    weft_graph *all = chains_graph(rt, z, 0, ngpus);
    double par = time_graph(all, 2, reps), seq = 0;
    for (int d = 0; d < ngpus; d++) {
      weft_graph *one = chains_graph(rt, z, d, 1);
      seq += time_graph(one, 2, reps);
      weft_graph_destroy(one);
    }
    char f[64];
    snprintf(f, sizeof f, "%d chains on %d GPUs", ngpus, ngpus);
    ROW("multi_gpu", f, "ms", par);
    ROW("multi_gpu", "speed-up over one after the other", "x", seq / par);
    weft_graph_destroy(all);
  }
  if (wanted(o, "small_ops")) {
    weft_graph *g = small_ops_graph(rt, z);
    double e, r;
    time_short(g, many, &e, &r);
    ROW("small_ops", "first run (eager)", "ms", e);
    ROW("small_ops", "replay", "ms", r);
    weft_graph_destroy(g);
  }
  if (wanted(o, "dispatch")) {
    weft_graph *g = dispatch_graph(rt, z);
    double n = (double)z->tiny_count, e, r;
    time_short(g, many, &e, &r);
    ROW("dispatch", "per node, eager", "us", e * 1e3 / n);
    ROW("dispatch", "per node, replay", "us", r * 1e3 / n);
    weft_graph_destroy(g);
  }
  if (wanted(o, "sync_logging")) {
    weft_graph *every = logging_graph(rt, z, 1), *once = logging_graph(rt, z, 0);
    double e = time_graph(every, 2, many), n1 = time_graph(once, 2, many);
    ROW("sync_logging", "norm logged every step", "ms", e);
    ROW("sync_logging", "logged once", "ms", n1);
    ROW("sync_logging", "every / once", "x", e / n1);
    weft_graph_destroy(every);
    weft_graph_destroy(once);
  }
  if (wanted(o, "costs")) {
    /* k independent nodes, one a stream up to four: tiny adds, then 400^2 products; last, one
     * tiny add in place (x = x + 1), the graph the calibration times a run's fixed cost on. */
    static const int counts[] = {1, 4, 1, 4, 100, 1};
    for (int i = 0; i < 6; i++) {
      int mm = i >= 2 && i <= 4, in_place = i == 5;
      weft_graph *g;
      ACHECK(weft_graph_create(rt, &g));
      weft_tensor *x, *one;
      const int64_t sq[2] = {400, 400}, el[1] = {1};
      ACHECK(weft_tensor_create(g, "x", WEFT_F32, mm ? 2 : 1, mm ? sq : el, weft_cuda(0), weft_ones(), &x));
      ACHECK(weft_tensor_create(g, "one", WEFT_F32, mm ? 2 : 1, mm ? sq : el, weft_cuda(0), weft_ones(), &one));
      for (int j = 0; j < counts[i]; j++) {
        weft_tensor *y = in_place ? x : NULL;
        ACHECK(mm ? weft_mm(g, x, one, &y) : weft_add(g, x, one, &y));
      }
      double e, r;
      time_short(g, many, &e, &r);
      char f[64];
      int one_node = counts[i] == 1;
      const char *what = mm ? (one_node ? "product of 400^2" : "products of 400^2")
                            : in_place ? "tiny add in place" : one_node ? "tiny add" : "tiny adds";
      snprintf(f, sizeof f, "%d %s, eager", counts[i], what);
      ROW("costs", f, "us", e * 1e3);
      snprintf(f, sizeof f, "%d %s, replay", counts[i], what);
      ROW("costs", f, "us", r * 1e3);
      weft_graph_destroy(g);
    }
  }
  if (wanted(o, "gemm_rate")) {
    weft_graph *g = gemm_graph(rt, z);
    double ms = time_graph(g, 3, many);
    double n = (double)z->big;
    ROW("gemm_rate", "one product", "ms", ms);
    ROW("gemm_rate", "TFLOP/s", "TF/s", 2 * n * n * n / (ms * 1e-3) * 1e-12);
    weft_graph_destroy(g);
  }
#undef ROW
  t->n = k;
}

/* The measured column: `passes` whole passes over the workloads, one after the other, and each
 * figure the median of its passes. On the GPU machines' VMs a process's host costs move for
 * seconds at a time, and the first seconds of a fresh VM run slower still (docs/benchmarks.md,
 * "How to read these figures"): a figure taken within one second (time_short) can land inside
 * such a spell, three passes some 20 seconds apart rarely all do. On a simulated machine
 * standing in for the real one a pass is exact: one is enough. */
static void measure_passes(weft_runtime *rt, const opts *o, const sizes *z, int ngpus, table *t) {
  int passes = weft_sim_active(rt) ? 1 : o->passes;
  static table each[MAX_PASSES];
  for (int p = 0; p < passes; p++) {
    memset(&each[p], 0, sizeof each[p]);
    measure(rt, o, z, ngpus, &each[p], 0);
  }
  *t = each[0];
  for (int i = 0; i < t->n; i++) {
    double v[MAX_PASSES];
    for (int p = 0; p < passes; p++) v[p] = each[p].r[i].measured;
    t->r[i].measured = median_of(v, passes); /* sorts v */
    t->r[i].lo = v[0];
    t->r[i].hi = v[passes - 1];
  }
}

static weft_runtime *runtime(const char *simulate) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.flags = WEFT_RUNTIME_QUIET;
  o.simulate = simulate;
  weft_runtime *rt;
  ACHECK(weft_runtime_create(&o, &rt));
  return rt;
}

/* --predict: the simulated column alone. */
static int predict(const opts *o, const sizes *z) {
  weft_runtime *sim = runtime(o->profile != NULL ? o->profile : "h100");
  int ngpus = weft_device_count(sim, WEFT_DEVICE_CUDA);
  if (ngpus == 0) {
    fprintf(stderr, "bench_sim_accuracy: the profile has no GPU\n");
    return 2;
  }
  table t;
  memset(&t, 0, sizeof t);
  measure(sim, o, z, ngpus, &t, 1);
  weft_runtime_destroy(sim);
  printf("bench_sim_accuracy: predictions of the profile %s (%d GPU%s)%s\n\n| benchmark | figure | "
         "simulated |\n| --- | --- | ---: |\n",
         o->profile != NULL ? o->profile : "h100", ngpus, ngpus == 1 ? "" : "s", o->quick ? " (quick sizes)" : "");
  for (int i = 0; i < t.n; i++)
    printf("| %s | %s | %.4g %s |\n", t.r[i].bench, t.r[i].figure, t.r[i].simulated, t.r[i].unit);
  return 0;
}

int main(int argc, char **argv) {
  opts o = {NULL, NULL, NULL, 0, 5, 0, 3};
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--quick") == 0) {
      o.quick = 1;
    } else if (strcmp(argv[i], "--predict") == 0) {
      o.predict = 1;
    } else if (v != NULL && strcmp(argv[i], "--profile") == 0) {
      o.profile = v, i++;
    } else if (v != NULL && strcmp(argv[i], "--calibrate") == 0) {
      o.calibrate = v, i++;
    } else if (v != NULL && strcmp(argv[i], "--only") == 0) {
      o.only = v, i++;
    } else if (v != NULL && strcmp(argv[i], "--reps") == 0) {
      o.reps = atoi(v), i++;
    } else if (v != NULL && strcmp(argv[i], "--passes") == 0) {
      o.passes = atoi(v), i++;
    } else {
      fprintf(stderr, "usage: bench_sim_accuracy [--profile NAME|FILE] [--calibrate FILE] [--predict] "
                      "[--quick] [--only LIST] [--reps N] [--passes N]\n");
      return 2;
    }
  }
  if (o.reps < 1) o.reps = 1;
  if (o.passes < 1 || o.passes > MAX_PASSES) {
    fprintf(stderr, "bench_sim_accuracy: --passes is %d; give 1 to %d\n", o.passes, MAX_PASSES);
    return 2;
  }
  sizes z = {4000, 400, 10000, 100, 1000, 50};
  if (o.quick) z = (sizes){1000, 200, 1000, 100, 100, 10};

  if (o.predict) return predict(&o, &z);
  weft_runtime *real = runtime(NULL);
  int ngpus = weft_device_count(real, WEFT_DEVICE_CUDA);
  char spec[64];
  const char *machine = "this machine";
  if (ngpus == 0) {
    /* No GPU: a simulated machine stands in for the real one (a smoke test of this program). */
    weft_runtime_destroy(real);
    real = runtime("h200x2");
    ngpus = 2;
    machine = "a simulated h200x2 standing in for a GPU machine";
  }
  if (o.calibrate != NULL) {
    weft_calibrate_options co;
    weft_calibrate_options_init(&co);
    co.quick = o.quick;
    co.log = stderr;
    co.name = ngpus == 1 ? "h100" : ngpus == 2 ? "h200x2" : "h200x4";
    if (weft_calibrate(real, &co, o.calibrate) != WEFT_OK) {
      fprintf(stderr, "bench_sim_accuracy: calibrate: %s\n", weft_calibrate_last_error());
      exit(2);
    }
    o.profile = o.calibrate;
  }
  if (o.profile == NULL) {
    snprintf(spec, sizeof spec, ngpus == 1 ? "h100" : "h200x%d", ngpus);
    o.profile = spec;
  }
  weft_device_info info;
  ACHECK(weft_device_info_get(real, weft_cuda(0), &info));
  printf("bench_sim_accuracy: %s (%d x %s) against the profile %s%s\n", machine, ngpus, info.name,
         o.profile, o.quick ? " (quick sizes)" : "");

  table t;
  measure_passes(real, &o, &z, ngpus, &t);
  weft_runtime_destroy(real);
  weft_runtime *sim = runtime(o.profile);
  measure(sim, &o, &z, ngpus, &t, 1);
  weft_runtime_destroy(sim);

  int bad = 0;
  printf("\n| benchmark | figure | measured | range over %d passes | simulated | error |\n"
         "| --- | --- | ---: | ---: | ---: | ---: |\n",
         o.passes);
  for (int i = 0; i < t.n; i++) {
    row *r = &t.r[i];
    double err = (r->simulated - r->measured) / r->measured;
    int off = !(fabs(err) <= 0.10);
    bad += off;
    printf("| %s | %s | %.4g %s | %.4g-%.4g | %.4g %s | %+.1f%%%s |\n", r->bench, r->figure, r->measured, r->unit,
           r->lo, r->hi, r->simulated, r->unit, err * 100, off ? " **over 10%**" : "");
  }
  printf("\n");
  for (int i = 0; i < t.n; i++) {
    row *r = &t.r[i];
    char fig[64];
    snprintf(fig, sizeof fig, "%s", r->figure);
    for (char *c = fig; *c; c++)
      if (*c == ' ' || *c == ',' || *c == '/' || *c == '(' || *c == ')') *c = '_';
    printf("ACC name=%s.%s measured=%.6g simulated=%.6g error=%.4f\n", r->bench, fig, r->measured,
           r->simulated, (r->simulated - r->measured) / r->measured);
  }
  printf("%d of %d figures within 10%%\n", t.n - bad, t.n);
  return bad ? 1 : 0;
}
