/* bench_build — where a first run's build time goes on this machine (a diagnostic: no target).
 *
 * The graph is Task Bench's tree at width W for S steps, as its driver builds it: each node a
 * new one-element f64 tensor and a user-op call that writes it and reads its parent's (point
 * p / 2 of the step before). Printed, in ns a node:
 *   first  the first graph of this process (what Task Bench's first runs and bench_overhead's
 *          totals pay): its build (tensors and calls; the dependence analysis follows on an idle
 *          worker) and its first run (plan, storage, nodes);
 *   warm   the medians of --reps graphs more, built and run one after another;
 *   rerun  the median of those graphs' second runs.
 * Then this core's stream of fresh stores: 400-byte objects written field by field (7 words of
 * 50, as a builder writes a tensor and a node) through 8 MiB that another thread wrote last,
 * as the block pool's warm-up leaves a graph's memory, in ns an object. On the GPU hosts that
 * stream is several times slower than on the development machine, and a build waits on it as
 * much as on its instructions (docs/architecture.md, "Building a graph"). Run it a few times:
 * the first graph is one sample a process.
 *
 * Usage: bench_build [--width W] [--steps S] [--reps R] [--workers N] */
#include "bench_common.h"

#include <pthread.h>
#include <stdint.h>

static int noop(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}

typedef struct sample {
  double build, run, rerun; /* ns a node */
} sample;

static sample one_graph(weft_runtime *rt, const weft_op *op, int width, int steps, weft_tensor **out) {
  weft_graph *g;
  int64_t one = 1;
  BCHECK(weft_graph_create(rt, &g));
  double t0 = bench_now_ms();
  long n = 0;
  for (int t = 0; t < steps; t++) {
    int w = t < 30 && (1 << t) < width ? 1 << t : width; /* the tree's first steps widen */
    for (int p = 0; p < w; p++, n++) {
      weft_tensor **o = &out[(size_t)t * (size_t)width + (size_t)p];
      BCHECK(weft_tensor_create(g, NULL, WEFT_F64, 1, &one, weft_cpu(), weft_zeros(), o));
      weft_tensor *args[2] = {*o, t > 0 ? out[(size_t)(t - 1) * (size_t)width + (size_t)(p / 2)] : NULL};
      BCHECK(weft_call(g, op, args, t > 0 ? 2 : 1, NULL, 0));
    }
  }
  double t1 = bench_now_ms();
  BCHECK(weft_graph_run(g));
  double t2 = bench_now_ms();
  BCHECK(weft_graph_run(g));
  double t3 = bench_now_ms();
  weft_graph_destroy(g);
  return (sample){(t1 - t0) * 1e6 / (double)n, (t2 - t1) * 1e6 / (double)n, (t3 - t2) * 1e6 / (double)n};
}

enum { STREAM_BYTES = 8 << 20, OBJECT = 400 };

static void *write_all(void *buf) {
  for (size_t i = 0; i < STREAM_BYTES; i += 64) ((volatile char *)buf)[i] = 1;
  return NULL;
}

/* ns an object, writing 7 of each object's 50 words, after another thread wrote the buffer. */
static double store_stream(void) {
  double best = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    char *buf = aligned_alloc(4096, STREAM_BYTES);
    if (buf == NULL) return -1;
    pthread_t th;
    if (pthread_create(&th, NULL, write_all, buf) != 0 || pthread_join(th, NULL) != 0) {
      free(buf);
      return -1;
    }
    double t0 = bench_now_ms();
    for (size_t o = 0; o + OBJECT <= STREAM_BYTES; o += OBJECT) {
      volatile uint64_t *q = (volatile uint64_t *)(buf + o);
      for (int k = 0; k < 50; k += 7) q[k] = o + (size_t)k;
    }
    double ns = (bench_now_ms() - t0) * 1e6 / (double)(STREAM_BYTES / OBJECT);
    best = ns < best ? ns : best;
    free(buf);
  }
  return best;
}

int main(int argc, char **argv) {
  int width = 32, steps = 500, reps = 15, workers = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--width") == 0 && i + 1 < argc)
      width = atoi(argv[++i]);
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc)
      workers = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--width W] [--steps S] [--reps R] [--workers N]\n", argv[0]);
      return 2;
    }
  }
  if (width < 1 || steps < 1 || reps < 1 || reps > 1000 || workers < 0) {
    fprintf(stderr, "bench_build: --width, --steps and --reps must be positive (--reps at most 1000)\n");
    return 2;
  }
  weft_runtime *rt = bench_cpu_runtime(workers);
  weft_op_desc d = {.name = "tree_task", .nargs = 1, .access = {WEFT_WRITE}, .rest = WEFT_READ, .cpu = noop};
  const weft_op *op;
  BCHECK(weft_op_register(rt, &d, &op));
  weft_tensor **out = calloc((size_t)width * (size_t)steps, sizeof *out);
  double *b = malloc(sizeof *b * (size_t)reps), *r = malloc(sizeof *r * (size_t)reps),
         *rr = malloc(sizeof *rr * (size_t)reps);
  if (out == NULL || b == NULL || r == NULL || rr == NULL) {
    fprintf(stderr, "bench_build: out of memory\n");
    return 1;
  }
  sample first = one_graph(rt, op, width, steps, out);
  for (int i = 0; i < reps; i++) {
    sample s = one_graph(rt, op, width, steps, out);
    b[i] = s.build;
    r[i] = s.run;
    rr[i] = s.rerun;
  }
  printf("tree, width %d, %d steps, %d workers; ns a node\n", width, steps, weft_runtime_cpu_workers(rt));
  printf("first  build %7.1f  first run %7.1f\n", first.build, first.run);
  printf("warm   build %7.1f  first run %7.1f  (medians of %d)\n", bench_median(b, reps, NULL),
         bench_median(r, reps, NULL), reps);
  printf("rerun  %7.1f\n", bench_median(rr, reps, NULL));
  printf("fresh stores: %.1f ns a %d-byte object (best of 5)\n", store_stream(), OBJECT);
  free(out);
  free(b);
  free(r);
  free(rr);
  weft_runtime_destroy(rt);
  return 0;
}
