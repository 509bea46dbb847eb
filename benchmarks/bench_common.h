/* bench_common.h — what every benchmark shares: a checked call that exits with weft's message,
 * a monotonic clock, medians and a CPU-only runtime. The GPU benchmarks add their flags and
 * result line in bench_gpu_common.h. */
#ifndef WEFT_BENCH_COMMON_H
#define WEFT_BENCH_COMMON_H

#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft/weft.h"

#define BCHECK(x)                                                                    \
  do {                                                                               \
    int rc_ = (x);                                                                   \
    if (rc_ != WEFT_OK) {                                                            \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, weft_last_error()); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static inline double bench_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static inline int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorts v); *spread = max - min when spread is not NULL. */
static inline double bench_median(double *v, int n, double *spread) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp);
  if (spread != NULL) *spread = v[n - 1] - v[0];
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A quiet runtime of `workers` CPU workers (0: one per core) and no GPU; exits on a failure. */
static inline weft_runtime *bench_cpu_runtime(int workers) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = workers;
  o.max_gpus = 0;
  o.flags = WEFT_RUNTIME_QUIET;
  weft_runtime *rt;
  BCHECK(weft_runtime_create(&o, &rt));
  return rt;
}

/* A median and its spread (max - min), in milliseconds. */
typedef struct bench_figure {
  double ms, spread_ms;
} bench_figure;

/* Runs this executable again as `args` (its baseline's child mode) with the library `lib`
 * preloaded (OpenBLAS's pthreads build, serving the BLAS and LAPACK calls ahead of the serial
 * build weft links) and reads the line "BASELINE <median ms> <spread ms>" it prints; anything
 * else it prints goes to stderr. Exits on a failure, naming `who`. Needs _GNU_SOURCE and
 * <unistd.h> (readlink). */
static inline bench_figure bench_child(const char *who, const char *lib, const char *args) {
  char self[4096], cmd[8400];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0 || strchr(lib, '\'') != NULL) {
    fprintf(stderr, "%s: cannot start the baseline's process\n", who);
    exit(1);
  }
  self[len] = '\0';
  snprintf(cmd, sizeof cmd, "env -u OPENBLAS_NUM_THREADS -u OMP_NUM_THREADS LD_PRELOAD='%s' '%s' %s", lib, self, args);
  FILE *p = popen(cmd, "r");
  bench_figure f = {-1, -1};
  char line[256];
  while (p != NULL && fgets(line, sizeof line, p) != NULL)
    if (sscanf(line, "BASELINE %lf %lf", &f.ms, &f.spread_ms) != 2) fputs(line, stderr);
  if (p == NULL || pclose(p) != 0 || f.ms < 0) {
    fprintf(stderr, "%s: the baseline's process failed: %s\n", who, cmd);
    exit(1);
  }
  return f;
}

#endif
