/* bench_gpu_common.h — what the GPU benchmarks (bench_gpu_*.c) share: flags, timing, medians,
 * and the result line benchmarks/run_gpu.sh reads.
 *
 * Flags: --reps N (timed repetitions, default per benchmark), --size N (matrix side),
 * --count N (nodes or products), --device N (first GPU), --workers N (the runtime's CPU
 * workers; default one per core), --json (the result as one JSON object instead of the RESULT
 * line). Times are host wall-clock milliseconds from launch to the end of weft_graph_run, which
 * returns only once the GPU has finished: what a user waits, scheduling and notification
 * included. Each figure is the median of the timed repetitions after warm-up runs (the first
 * run plans and materialises; the second captures a CUDA graph), with the spread (max - min)
 * beside it.
 */
#ifndef WEFT_BENCH_GPU_COMMON_H
#define WEFT_BENCH_GPU_COMMON_H

#include "bench_common.h"

#include <stdarg.h>
#include <string.h>

#include "weft/cuda.h"

typedef struct bench_opts {
  int reps;
  long long size;
  long long count;
  int device;
  int json;
} bench_opts;

/* --workers N: the runtime's CPU workers (0, the default: one per core). */
static int bench_workers;

static inline void bench_parse(int argc, char **argv, bench_opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--json") == 0) {
      o->json = 1;
    } else if (v != NULL && strcmp(a, "--reps") == 0) {
      o->reps = atoi(v), i++;
    } else if (v != NULL && strcmp(a, "--size") == 0) {
      o->size = atoll(v), i++;
    } else if (v != NULL && strcmp(a, "--count") == 0) {
      o->count = atoll(v), i++;
    } else if (v != NULL && strcmp(a, "--device") == 0) {
      o->device = atoi(v), i++;
    } else if (v != NULL && strcmp(a, "--workers") == 0) {
      bench_workers = atoi(v), i++;
    } else {
      fprintf(stderr, "usage: %s [--reps N] [--size N] [--count N] [--device N] [--workers N] [--json]\n", argv[0]);
      exit(2);
    }
  }
  if (o->reps < 1) o->reps = 1;
}

/* Runs g `warm` times untimed, then `reps` times timed; returns the median in ms. */
static inline double bench_time_graph(weft_graph *g, int warm, int reps, double *spread) {
  for (int i = 0; i < warm; i++) BCHECK(weft_graph_run(g));
  double *t = malloc((size_t)reps * sizeof *t);
  for (int i = 0; i < reps; i++) {
    double t0 = bench_now_ms();
    BCHECK(weft_graph_run(g));
    t[i] = bench_now_ms() - t0;
  }
  double m = bench_median(t, reps, spread);
  free(t);
  return m;
}

/* A runtime with the GPUs, or exit 0 with "SKIP" where there is none (or too few). */
static inline weft_runtime *bench_runtime(const char *name, int need_gpus) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.flags |= WEFT_RUNTIME_QUIET;
  o.cpu_workers = bench_workers;
  weft_runtime *rt;
  BCHECK(weft_runtime_create(&o, &rt));
  int n = weft_device_count(rt, WEFT_DEVICE_CUDA);
  if (n < need_gpus) {
    printf("SKIP %s: needs %d GPU%s, found %d\n", name, need_gpus, need_gpus == 1 ? "" : "s", n);
    weft_runtime_destroy(rt);
    exit(0);
  }
  return rt;
}

/* Prints the result as "RESULT bench=NAME key=value ..." (or a JSON object with --json).
 * Arguments: pairs of (const char *key, double value), ending with NULL. */
static inline void bench_result(const bench_opts *o, const char *bench, ...) {
  va_list ap;
  va_start(ap, bench);
  printf(o->json ? "{\"bench\":\"%s\"" : "RESULT bench=%s", bench);
  for (const char *k = va_arg(ap, const char *); k != NULL; k = va_arg(ap, const char *)) {
    double v = va_arg(ap, double);
    printf(o->json ? ",\"%s\":%.6g" : " %s=%.6g", k, v);
  }
  printf(o->json ? "}\n" : "\n");
  va_end(ap);
  fflush(stdout);
}

static inline const char *bench_device_name(weft_runtime *rt, int dev, char *buf, size_t size) {
  weft_device_info info;
  if (weft_device_info_get(rt, weft_cuda(dev), &info) != WEFT_OK) return "?";
  snprintf(buf, size, "%s", info.name);
  return buf;
}

#endif
