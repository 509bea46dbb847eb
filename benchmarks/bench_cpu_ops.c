/* bench_cpu_ops.c — one op on every core (issue 18): weft's CPU built-ins against the plain
 * OpenMP loop doing the same work on the same number of threads, measured in the same run.
 *
 *   sub      c = a - b over --n x --n f32 (bytes: 3 x 4 n^2)
 *   sum      s = sum(a), accumulated in double (bytes: 4 n^2)
 *   norm     s = sqrt(sum(a^2)), likewise
 *   uniform  a fill node writing uniform(-1, 1) into --gib GiB of f32, against memset of the
 *            same bytes (both on memory already touched)
 *   first    the first run of a graph whose --gib GiB f32 tensor is created uniform: its
 *            materialisation (allocation, first touch, the initialiser) against malloc + memset
 *            of the same bytes on the same threads, fresh memory each time
 *
 * The reference loops are what a user would write with OpenMP (`parallel for`, `simd` on the
 * reductions so that the compiler may reorder their adds), built with the same flags as weft.
 * Each figure is the median of --reps runs after one warm-up; weft's node runs are graph
 * replays (the run's overhead is included, a few microseconds). Targets: sub, sum and norm at
 * >= 0.7 x the OpenMP loop's bandwidth; uniform and first <= 2 x memset's time.
 *
 * Usage: bench_cpu_ops [--n N] [--gib G] [--reps R] [--workers W] [--json] */
#include "bench_common.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#define CHECK BCHECK

typedef struct figure {
  const char *name;
  double weft_ms, ref_ms, bytes;
  int lower_is_better_ratio; /* 1: ratio = weft/ref time (target <= 2); 0: bandwidth ratio */
} figure;

static double median_of(double *v, int n) { return bench_median(v, n, NULL); }

static double run_ms(weft_graph *g) {
  double t0 = bench_now_ms();
  CHECK(weft_graph_run(g));
  return bench_now_ms() - t0;
}

/* Waits until the other side's threads have stopped spinning: an OpenMP team spins after each
 * loop (libgomp, OMP_WAIT_POLICY unset: GOMP_SPINCOUNT 300 000 pauses, about 10 ms on the GPU
 * hosts) and weft's lookout watches 1 ms. Measured back to back on 16 cores, every core a
 * thread of each, the spinning team took weft's sub, sum and norm to 0.26-0.44, 0.37-2.0 and
 * 0.40-1.19 x the loops' bandwidth; with OMP_WAIT_POLICY=passive 1.09-1.49, 1.84-2.33, 1.59-1.91. */
static void settle(void) {
  struct timespec d = {0, 50000000};
  nanosleep(&d, NULL);
}

static double omp_sub(float *c, const float *a, const float *b, int64_t n) {
  double t0 = bench_now_ms();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) c[i] = a[i] - b[i];
  return bench_now_ms() - t0;
}

static double omp_reduce(const float *a, int64_t n, int square, double *out) {
  double t0 = bench_now_ms(), s = 0;
  if (square) {
#pragma omp parallel for simd schedule(static) reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * (double)a[i];
    s = sqrt(s);
  } else {
#pragma omp parallel for simd schedule(static) reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += (double)a[i];
  }
  *out = s;
  return bench_now_ms() - t0;
}

static double omp_memset(char *p, size_t bytes) {
  double t0 = bench_now_ms();
  int64_t pages = (int64_t)((bytes + 4095) / 4096);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < pages; i++) {
    size_t lo = (size_t)i * 4096, len = bytes - lo < 4096 ? bytes - lo : 4096;
    memset(p + lo, 0x3f, len);
  }
  return bench_now_ms() - t0;
}

int main(int argc, char **argv) {
  int64_t n = 4000;
  double gib = 1.0;
  int reps = 7, workers = 0, json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) n = atoll(argv[++i]);
    else if (strcmp(argv[i], "--gib") == 0 && i + 1 < argc) gib = atof(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc) workers = atoi(argv[++i]);
    else if (strcmp(argv[i], "--json") == 0) json = 1;
    else {
      fprintf(stderr, "usage: %s [--n N] [--gib G] [--reps R] [--workers W] [--json]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || reps > 64 || n < 1 || gib <= 0 || gib > 64 || workers < 0) {
    fprintf(stderr, "bench_cpu_ops: bad --reps (1..64), --n, --gib (0..64] or --workers\n");
    return 2;
  }
  weft_runtime *rt = bench_cpu_runtime(workers);
  int threads = weft_runtime_cpu_workers(rt);
  omp_set_num_threads(threads);
  int64_t shape[2] = {n, n}, elems = n * n;
  int64_t big = (int64_t)(gib * (double)(1 << 30) / 4);

  /* sub, sum, norm: one graph each over the same inputs. */
  weft_graph *gs, *gr, *gn, *gf;
  weft_tensor *a, *b, *c = NULL, *s = NULL, *nr = NULL, *u;
  CHECK(weft_graph_create(rt, &gs));
  CHECK(weft_tensor_create(gs, "a", WEFT_F32, 2, shape, weft_cpu(), weft_uniform(-1, 1, 1), &a));
  CHECK(weft_tensor_create(gs, "b", WEFT_F32, 2, shape, weft_cpu(), weft_uniform(-1, 1, 2), &b));
  CHECK(weft_sub(gs, a, b, &c));
  CHECK(weft_graph_create(rt, &gr));
  weft_tensor *ra, *na;
  CHECK(weft_tensor_create(gr, "a", WEFT_F32, 2, shape, weft_cpu(), weft_uniform(-1, 1, 1), &ra));
  CHECK(weft_sum(gr, ra, &s));
  CHECK(weft_graph_create(rt, &gn));
  CHECK(weft_tensor_create(gn, "a", WEFT_F32, 2, shape, weft_cpu(), weft_uniform(-1, 1, 1), &na));
  CHECK(weft_norm(gn, na, &nr));
  CHECK(weft_graph_create(rt, &gf));
  CHECK(weft_tensor_create(gf, "u", WEFT_F32, 1, &big, weft_cpu(), weft_zeros(), &u));
  CHECK(weft_fill(gf, u, weft_uniform(-1, 1, 3)));

  float *ha = malloc((size_t)elems * 4), *hb = malloc((size_t)elems * 4), *hc = malloc((size_t)elems * 4);
  char *hm = malloc((size_t)big * 4);
  if (!ha || !hb || !hc || !hm) {
    fprintf(stderr, "bench_cpu_ops: out of memory\n");
    return 1;
  }
  CHECK(weft_graph_run(gs)); /* materialises a and b */
  CHECK(weft_tensor_read(a, ha, (size_t)elems * 4));
  CHECK(weft_tensor_read(b, hb, (size_t)elems * 4));
  omp_sub(hc, ha, hb, elems);
  omp_memset(hm, (size_t)big * 4);

  enum { NF = 5 };
  double t[NF][2][64];
  double ref_sum = 0, ref_norm = 0;
  run_ms(gr);
  run_ms(gn);
  run_ms(gf);
  /* Interleaved, so drift hits both sides alike; each side measured with the other's threads
   * idle (settle). */
  for (int r = 0; r < reps; r++) {
    t[0][0][r] = (settle(), run_ms(gs));
    t[0][1][r] = (settle(), omp_sub(hc, ha, hb, elems));
    t[1][0][r] = (settle(), run_ms(gr));
    t[1][1][r] = (settle(), omp_reduce(ha, elems, 0, &ref_sum));
    t[2][0][r] = (settle(), run_ms(gn));
    t[2][1][r] = (settle(), omp_reduce(ha, elems, 1, &ref_norm));
    t[3][0][r] = (settle(), run_ms(gf));
    t[3][1][r] = (settle(), omp_memset(hm, (size_t)big * 4));
  }
  free(hm);
  /* First runs: a fresh graph whose tensor is created uniform and summed: the first run's time
   * less a replay's (the sum alone) is the materialisation; against malloc + memset of fresh
   * memory. */
  for (int r = 0; r < reps; r++) {
    weft_graph *g1;
    weft_tensor *x, *y = NULL;
    CHECK(weft_graph_create(rt, &g1));
    CHECK(weft_tensor_create(g1, "x", WEFT_F32, 1, &big, weft_cpu(), weft_uniform(-1, 1, 4), &x));
    CHECK(weft_sum(g1, x, &y));
    double t0 = bench_now_ms();
    CHECK(weft_graph_run(g1));
    double first = bench_now_ms() - t0;
    double replay = run_ms(g1); /* the sum alone, to subtract */
    t[4][0][r] = first - replay;
    weft_graph_destroy(g1);
    t0 = bench_now_ms();
    char *m = malloc((size_t)big * 4);
    if (m == NULL) return 1;
    omp_memset(m, (size_t)big * 4);
    t[4][1][r] = bench_now_ms() - t0;
    free(m);
  }

  /* Results must agree with the loops (the sum to rounding: the blocking differs). */
  double got_sum = 0, got_norm = 0;
  float fs, fn;
  CHECK(weft_tensor_read(s, &fs, sizeof fs));
  CHECK(weft_tensor_read(nr, &fn, sizeof fn));
  got_sum = fs;
  got_norm = fn;
  if (fabs(got_sum - ref_sum) > 1e-3 * (1 + fabs(ref_sum)) || fabs(got_norm - ref_norm) > 1e-5 * ref_norm) {
    fprintf(stderr, "bench_cpu_ops: results differ: sum %g vs %g, norm %g vs %g\n", got_sum, ref_sum, got_norm,
            ref_norm);
    return 1;
  }

  figure f[NF] = {
      {"sub", 0, 0, 3.0 * 4 * (double)elems, 0},
      {"sum", 0, 0, 4.0 * (double)elems, 0},
      {"norm", 0, 0, 4.0 * (double)elems, 0},
      {"uniform fill", 0, 0, 4.0 * (double)big, 1},
      {"uniform first", 0, 0, 4.0 * (double)big, 1},
  };
  for (int k = 0; k < NF; k++) {
    f[k].weft_ms = median_of(t[k][0], reps);
    f[k].ref_ms = median_of(t[k][1], reps);
  }
  int ok = 1;
  if (!json)
    printf("%d threads, %lld^2 f32, %.2f GiB fill, median of %d\n%-15s%12s%12s%12s%12s%9s  target\n", threads,
           (long long)n, gib, reps, "op", "weft ms", "ref ms", "weft GB/s", "ref GB/s", "ratio");
  for (int k = 0; k < NF; k++) {
    double ratio = f[k].lower_is_better_ratio ? f[k].weft_ms / f[k].ref_ms : f[k].ref_ms / f[k].weft_ms;
    int met = f[k].lower_is_better_ratio ? ratio <= 2.0 : ratio >= 0.7;
    ok &= met;
    double gw = f[k].bytes / f[k].weft_ms * 1e-6, gref = f[k].bytes / f[k].ref_ms * 1e-6;
    if (json)
      printf("{\"op\":\"%s\",\"threads\":%d,\"weft_ms\":%.3f,\"ref_ms\":%.3f,\"weft_gbs\":%.2f,\"ref_gbs\":%.2f,"
             "\"ratio\":%.3f,\"met\":%s}\n",
             f[k].name, threads, f[k].weft_ms, f[k].ref_ms, gw, gref, ratio, met ? "true" : "false");
    else
      printf("%-15s%12.2f%12.2f%12.1f%12.1f%9.3f  %s %s\n", f[k].name, f[k].weft_ms, f[k].ref_ms, gw, gref, ratio,
             f[k].lower_is_better_ratio ? "<= 2 x memset" : ">= 0.7 x OpenMP", met ? "met" : "MISSED");
  }
  free(ha);
  free(hb);
  free(hc);
  weft_graph_destroy(gs);
  weft_graph_destroy(gr);
  weft_graph_destroy(gn);
  weft_graph_destroy(gf);
  weft_runtime_destroy(rt);
  return ok ? 0 : 1;
}
