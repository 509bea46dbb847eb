/* overlap.c — the reference notes' experiment 12.3.3: compute 50 products while copying the
 * earlier ones to the host.
 *
 *   for i in 0..50:  y[i] = x . x ;  h[i] = copy(y[i], cpu)
 *
 * Nothing here names a stream, an event or a synchronize: weft sees that copy i depends only on
 * product i, so the copy of y[i-1] runs on a copy engine while y[i] is computed, and y[i] is a
 * temporary whose device buffer is reused once its copy is done. The program times three
 * graphs on the same device — compute alone, copies alone, and both — and prints how close
 * "both" comes to max(compute, copies), the best any schedule can do.
 *
 * Usage: overlap [N] [COUNT]   (defaults: N = 4000 on a GPU, 500 on the CPU; COUNT = 50) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft/report.h"
#include "weft/weft.h"

#define CHECK(x)                                                                     \
  do {                                                                               \
    int rc_ = (x);                                                                   \
    if (rc_ != WEFT_OK) {                                                            \
      fprintf(stderr, "overlap: %s\n", weft_last_error());                           \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Median of three timed runs after one warm-up run. */
/* The median of three runs after a first one, whose setup (what weft did before its first node:
 * the runtime's creation in the runtime's first run, the tensors' storage and initial values,
 * the plan) goes to *setup. */
static double time_runs(weft_graph *g, weft_stats_summary *setup) {
  double t[3];
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  CHECK(weft_run_wait(run));
  weft_run_stats *st;
  CHECK(weft_run_stats_create(run, &st));
  weft_run_stats_summary(st, setup);
  weft_run_stats_destroy(st);
  weft_run_destroy(run);
  for (int r = 0; r < 3; r++) {
    double t0 = now_ms();
    CHECK(weft_graph_run(g));
    t[r] = now_ms() - t0;
  }
  double lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
  return t[2] < lo ? lo : t[2] > hi ? hi : t[2];
}

int main(int argc, char **argv) {
  weft_runtime *rt;
  CHECK(weft_runtime_create(NULL, &rt));
  weft_device dev = weft_try_gpu(rt, 0);
  int64_t n = argc > 1 ? atoll(argv[1]) : (dev.kind == WEFT_DEVICE_CUDA ? 4000 : 500);
  int count = argc > 2 ? atoi(argv[2]) : 50;
  if (n < 1 || count < 1 || count > 100000) {
    fprintf(stderr, "usage: overlap [N] [COUNT]\n");
    return 2;
  }
  char devname[32];
  weft_device_str(dev, devname, sizeof devname);
  const int64_t shape[2] = {n, n};

  /* Compute and copy: the graph of the reference notes. */
  weft_graph *both;
  CHECK(weft_graph_create(rt, &both));
  weft_tensor *x, **h = calloc((size_t)count, sizeof *h);
  CHECK(weft_tensor_create(both, "x", WEFT_F32, 2, shape, dev, weft_uniform(0, 1, 42), &x));
  for (int i = 0; i < count; i++) {
    weft_tensor *y = NULL;
    CHECK(weft_mm(both, x, x, &y));
    CHECK(weft_copy(both, y, weft_cpu(), &h[i]));
  }

  /* Compute alone: the same products, no copies. */
  weft_graph *compute;
  CHECK(weft_graph_create(rt, &compute));
  weft_tensor *xc, *yc = NULL;
  CHECK(weft_tensor_create(compute, "x", WEFT_F32, 2, shape, dev, weft_uniform(0, 1, 42), &xc));
  for (int i = 0; i < count; i++) {
    yc = NULL;
    CHECK(weft_mm(compute, xc, xc, &yc));
  }

  /* Copies alone: the same number of result-sized copies to the host. */
  weft_graph *copies;
  CHECK(weft_graph_create(rt, &copies));
  weft_tensor *src;
  CHECK(weft_tensor_create(copies, "y", WEFT_F32, 2, shape, dev, weft_uniform(0, 1, 7), &src));
  for (int i = 0; i < count; i++) {
    weft_tensor *hc = NULL;
    CHECK(weft_copy(copies, src, weft_cpu(), &hc));
  }

  weft_stats_summary s_compute, s_copies, s_both;
  double t_compute = time_runs(compute, &s_compute), t_copies = time_runs(copies, &s_copies),
         t_both = time_runs(both, &s_both);
  double bound = t_compute > t_copies ? t_compute : t_copies;

  /* Every h[i] holds the same product x.x: check they agree bit for bit. */
  size_t bytes = weft_tensor_bytes(h[0]);
  float *first = malloc(bytes), *other = malloc(bytes);
  CHECK(weft_tensor_read(h[0], first, bytes));
  int same = 1;
  for (int i = 1; i < count && same; i++) {
    CHECK(weft_tensor_read(h[i], other, bytes));
    same = memcmp(first, other, bytes) == 0;
  }
  printf("overlap demo on %s: %d x (y = x.x, %lldx%lld f32; copy y to the host)\n", devname, count,
         (long long)n, (long long)n);
  printf("  compute alone   %9.2f ms\n", t_compute);
  printf("  copies alone    %9.2f ms\n", t_copies);
  printf("  both, by weft   %9.2f ms   = %.3f x max(compute, copies)\n", t_both, t_both / bound);
  printf("  results: h[0][0] = %g; all %d copies identical: %s\n", first[0], count, same ? "yes" : "NO");
  printf("  setup before the first node of each graph's first run: compute %.2f ms (of which the runtime's\n"
         "  creation %.2f ms), copies %.2f ms, both %.2f ms (%zu tensors materialised, %.1f MB, in %.2f ms)\n",
         s_compute.setup_s * 1e3, s_compute.setup_runtime_s * 1e3, s_copies.setup_s * 1e3, s_both.setup_s * 1e3,
         s_both.setup_tensors, (double)s_both.setup_bytes * 1e-6, s_both.setup_tensors_s * 1e3);
  free(first);
  free(other);
  free(h);
  weft_graph_destroy(both);
  weft_graph_destroy(compute);
  weft_graph_destroy(copies);
  weft_runtime_destroy(rt);
  return same ? 0 : 1;
}
