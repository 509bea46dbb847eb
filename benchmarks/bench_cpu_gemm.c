/* bench_cpu_gemm.c — one large CPU matrix product as a weft node, against multi-threaded
 * OpenBLAS in a process of its own.
 *
 * weft: a graph of one mm node, --size² by --size² (f32, then f64), run by a runtime with one
 * worker and by one with all workers (one per core, or --workers). The baseline: the same
 * cblas_?gemm call (row-major, no transpose, the same shapes) in a child process that runs
 * OpenBLAS's pthreads build — this executable started again with that library preloaded, as an
 * application linked against it runs — with 1 thread and with as many threads as weft has
 * workers. weft's node runs in the serial OpenBLAS on the one worker that takes it, however
 * many workers there are, so its all-workers figure measures today's single node honestly;
 * splitting a product across the workers is what would raise it.
 *
 * Times: host wall clock; weft's from the call of weft_graph_run to its return (what a user
 * waits), OpenBLAS's around the call. Each is the median of --reps after one warm-up, with its
 * spread (max - min). The figure is weft / OpenBLAS as a rate (OpenBLAS's time over weft's),
 * for 1 worker against 1 thread and all workers against all threads; the target is >= 0.9.
 *
 * Usage: bench_cpu_gemm [--size 4000] [--reps 5] [--dtype f32|f64|both] [--workers N]
 *                       [--openblas FILE] [--json]
 * FILE: OpenBLAS's pthreads build (default: the one found at configure time). */
#include "bench_common.h"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

typedef struct figure {
  double ms, spread_ms;
} figure;

static figure median_of(double *t, int reps) {
  figure f;
  f.ms = bench_median(t, reps, &f.spread_ms);
  return f;
}

/* weft: one product of n² on a runtime with `workers` workers; the median of reps runs. */
static figure time_weft(int workers, weft_dtype dt, int64_t n, int reps) {
  weft_runtime *rt = bench_cpu_runtime(workers);
  weft_graph *g;
  weft_tensor *a, *b, *c = NULL;
  BCHECK(weft_graph_create(rt, &g));
  BCHECK(weft_tensor_create(g, "a", dt, 2, (int64_t[]){n, n}, weft_cpu(), weft_uniform(-1, 1, 1), &a));
  BCHECK(weft_tensor_create(g, "b", dt, 2, (int64_t[]){n, n}, weft_cpu(), weft_uniform(-1, 1, 2), &b));
  BCHECK(weft_mm(g, a, b, &c));
  BCHECK(weft_graph_run(g)); /* plans, allocates and fills the inputs */
  double t[64];
  for (int r = 0; r < reps; r++) {
    double t0 = bench_now_ms();
    BCHECK(weft_graph_run(g));
    t[r] = bench_now_ms() - t0;
  }
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return median_of(t, reps);
}

/* The child: OpenBLAS's cblas_?gemm with `threads` threads, as weft calls it; prints
 * "BASELINE <median ms> <spread ms>". Run with the pthreads build preloaded, which then serves
 * the calls below ahead of the serial BLAS this executable links. */
static int baseline_child(const char *dtype, int threads, int64_t n, int reps) {
  int (*parallel)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_parallel");
  void (*set_threads)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
  Dl_info gemm, ob;
  if (parallel == NULL || set_threads == NULL || parallel() != 1 ||
      dladdr((void *)cblas_sgemm, &gemm) == 0 || dladdr((void *)parallel, &ob) == 0 ||
      strcmp(gemm.dli_fname, ob.dli_fname) != 0) {
    fprintf(stderr, "bench_cpu_gemm: the baseline's cblas_sgemm is not OpenBLAS's pthreads "
                    "build: preload it (--openblas FILE)\n");
    return 1;
  }
  int f32 = strcmp(dtype, "f32") == 0;
  size_t es = f32 ? sizeof(float) : sizeof(double), count = (size_t)(n * n);
  char *a = malloc(count * es), *b = malloc(count * es), *c = malloc(count * es);
  if (a == NULL || b == NULL || c == NULL) {
    fprintf(stderr, "bench_cpu_gemm: out of memory for three %lld^2 matrices\n", (long long)n);
    return 1;
  }
  uint64_t s = 88172645463325252ull; /* xorshift64: values in [-1, 1), no zeros to shortcut */
  for (size_t i = 0; i < 2 * count; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    double v = (double)(s >> 11) / 4503599627370496.0 - 1.0;
    char *p = i < count ? a : b;
    size_t k = i < count ? i : i - count;
    if (f32)
      ((float *)p)[k] = (float)v;
    else
      ((double *)p)[k] = v;
  }
  set_threads(threads);
  double t[65];
  for (int r = -1; r < reps; r++) {
    double t0 = bench_now_ms();
    if (f32)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f,
                  (float *)a, (int)n, (float *)b, (int)n, 0.0f, (float *)c, (int)n);
    else
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0,
                  (double *)a, (int)n, (double *)b, (int)n, 0.0, (double *)c, (int)n);
    if (r >= 0) t[r] = bench_now_ms() - t0;
  }
  figure f = median_of(t, reps);
  printf("BASELINE %.3f %.3f\n", f.ms, f.spread_ms);
  free(a);
  free(b);
  free(c);
  return 0;
}

/* Runs the child with `lib` preloaded and reads its figure; exits on a failure. */
static figure time_openblas(const char *lib, const char *dtype, int threads, int64_t n, int reps) {
  char args[128];
  snprintf(args, sizeof args, "--baseline-child %s %d %lld %d", dtype, threads, (long long)n, reps);
  bench_figure f = bench_child("bench_cpu_gemm", lib, args);
  return (figure){f.ms, f.spread_ms};
}

int main(int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "--baseline-child") == 0)
    return baseline_child(argv[2], atoi(argv[3]), atoll(argv[4]), atoi(argv[5]));
  int64_t n = 4000;
  int reps = 5, json = 0, workers = (int)sysconf(_SC_NPROCESSORS_ONLN);
  const char *dtypes = "both", *lib = WEFT_PTHREAD_BLAS;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--json") == 0) json = 1;
    else if (v != NULL && strcmp(argv[i], "--size") == 0) n = atoll(v), i++;
    else if (v != NULL && strcmp(argv[i], "--reps") == 0) reps = atoi(v), i++;
    else if (v != NULL && strcmp(argv[i], "--dtype") == 0) dtypes = v, i++;
    else if (v != NULL && strcmp(argv[i], "--workers") == 0) workers = atoi(v), i++;
    else if (v != NULL && strcmp(argv[i], "--openblas") == 0) lib = v, i++;
    else {
      fprintf(stderr, "usage: %s [--size N] [--reps R] [--dtype f32|f64|both] [--workers N] "
                      "[--openblas FILE] [--json]\n", argv[0]);
      return 2;
    }
  }
  if (n < 1 || n > 46340 || reps < 1 || reps > 64 || workers < 1 ||
      (strcmp(dtypes, "f32") != 0 && strcmp(dtypes, "f64") != 0 && strcmp(dtypes, "both") != 0)) {
    fprintf(stderr, "bench_cpu_gemm: bad --size (1..46340), --reps (1..64), --workers or --dtype\n");
    return 2;
  }
  if (lib[0] == '\0' || access(lib, R_OK) != 0) {
    fprintf(stderr, "bench_cpu_gemm: OpenBLAS's pthreads build not found (%s): install it (Debian: "
                    "libopenblas0-pthread) or name it with --openblas FILE\n", lib[0] ? lib : "none at configure time");
    return 2;
  }
  double flop = 2.0 * (double)n * (double)n * (double)n;
  for (int d = 0; d < 2; d++) {
    const char *dtype = d ? "f64" : "f32";
    if (strcmp(dtypes, "both") != 0 && strcmp(dtypes, dtype) != 0) continue;
    weft_dtype dt = d ? WEFT_F64 : WEFT_F32;
    figure w1 = time_weft(1, dt, n, reps), wall = time_weft(workers, dt, n, reps);
    figure o1 = time_openblas(lib, dtype, 1, n, reps), oall = time_openblas(lib, dtype, workers, n, reps);
    double r1 = o1.ms / w1.ms, rall = oall.ms / wall.ms;
    if (json) {
      printf("{\"bench\":\"cpu_gemm\",\"dtype\":\"%s\",\"size\":%lld,\"workers\":%d,\"reps\":%d,"
             "\"weft_1_ms\":%.3f,\"weft_1_spread_ms\":%.3f,\"openblas_1_ms\":%.3f,"
             "\"openblas_1_spread_ms\":%.3f,\"ratio_1\":%.4f,\"weft_all_ms\":%.3f,"
             "\"weft_all_spread_ms\":%.3f,\"openblas_all_ms\":%.3f,\"openblas_all_spread_ms\":%.3f,"
             "\"ratio_all\":%.4f}\n",
             dtype, (long long)n, workers, reps, w1.ms, w1.spread_ms, o1.ms, o1.spread_ms, r1,
             wall.ms, wall.spread_ms, oall.ms, oall.spread_ms, rall);
    } else {
      printf("mm %lld^2 %s, median of %d (spread), weft / OpenBLAS as a rate (target >= 0.9):\n",
             (long long)n, dtype, reps);
      printf("  1 worker  vs 1 thread : weft %9.1f ms (%6.1f) %6.1f GFLOP/s, OpenBLAS %9.1f ms "
             "(%6.1f) %6.1f GFLOP/s, ratio %.3f\n",
             w1.ms, w1.spread_ms, flop / w1.ms * 1e-6, o1.ms, o1.spread_ms, flop / o1.ms * 1e-6, r1);
      printf("  %d workers vs %d threads: weft %9.1f ms (%6.1f) %6.1f GFLOP/s, OpenBLAS %9.1f ms "
             "(%6.1f) %6.1f GFLOP/s, ratio %.3f\n",
             workers, workers, wall.ms, wall.spread_ms, flop / wall.ms * 1e-6, oall.ms,
             oall.spread_ms, flop / oall.ms * 1e-6, rall);
      printf("RESULT bench=cpu_gemm dtype=%s size=%lld workers=%d weft_1_ms=%.3f openblas_1_ms=%.3f "
             "ratio_1=%.4f weft_all_ms=%.3f openblas_all_ms=%.3f ratio_all=%.4f\n",
             dtype, (long long)n, workers, w1.ms, o1.ms, r1, wall.ms, oall.ms, rall);
    }
    fflush(stdout);
  }
  return 0;
}
