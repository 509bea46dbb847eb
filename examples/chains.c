/* chains.c — the reference notes' automatic parallelism (12.3.1): two chains of products that
 * do not depend on each other. On a machine with two GPUs each chain runs on its own GPU; with
 * one device the chains still run at once (two CPU workers, or two streams). The program
 * prints the edges weft inferred: each product depends on the previous one of its chain only.
 *
 * Usage: chains [N] [LEN]   (defaults: 400, 10) */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "weft/weft.h"

#define CHECK(x)                                          \
  do {                                                    \
    if ((x) != WEFT_OK) {                                 \
      fprintf(stderr, "chains: %s\n", weft_last_error()); \
      return 1;                                           \
    }                                                     \
  } while (0)

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? atoll(argv[1]) : 400;
  int len = argc > 2 ? atoi(argv[2]) : 10;
  if (n < 1 || len < 1) return 2;
  weft_runtime *rt;
  CHECK(weft_runtime_create(NULL, &rt));
  weft_device devs[2];
  int ndev = weft_all_gpus(rt, devs, 2);
  weft_device d0 = devs[0], d1 = ndev > 1 ? devs[1] : devs[0];
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x1, *x2, *w1, *w2;
  const int64_t shape[2] = {n, n};
  CHECK(weft_tensor_create(g, "x1", WEFT_F32, 2, shape, d0, weft_uniform(-1, 1, 1), &x1));
  CHECK(weft_tensor_create(g, "w1", WEFT_F32, 2, shape, d0, weft_uniform(-0.05, 0.05, 2), &w1));
  CHECK(weft_tensor_create(g, "x2", WEFT_F32, 2, shape, d1, weft_uniform(-1, 1, 3), &x2));
  CHECK(weft_tensor_create(g, "w2", WEFT_F32, 2, shape, d1, weft_uniform(-0.05, 0.05, 4), &w2));
  for (int i = 0; i < len; i++) {
    CHECK(weft_mm(g, x1, w1, &x1)); /* x1 = x1 . w1, in place: a chain */
    CHECK(weft_mm(g, x2, w2, &x2));
  }
  weft_tensor *n1 = NULL, *n2 = NULL;
  CHECK(weft_norm(g, x1, &n1));
  CHECK(weft_norm(g, x2, &n2));
  CHECK(weft_graph_analyse(g));
  printf("%zu nodes, %zu inferred edges:\n", weft_graph_node_count(g), weft_graph_edge_count(g));
  static const char *const hz[] = {"", "RAW", "WAR", "WAW", "explicit"};
  for (size_t i = 0; i < weft_graph_edge_count(g) && i < 6; i++) {
    weft_edge e;
    CHECK(weft_graph_edge(g, i, &e));
    printf("  node %zu -> node %zu  %s on %s\n", weft_node_id(e.from), weft_node_id(e.to),
           hz[e.hazard], e.tensor ? weft_tensor_name(e.tensor) : "-");
  }
  printf("  ...\n");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK(weft_graph_run(g));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double a, b;
  CHECK(weft_tensor_get(n1, 0, &a));
  CHECK(weft_tensor_get(n2, 0, &b));
  printf("two chains of %d products of %lldx%lld: %.2f ms; |x1| = %g, |x2| = %g\n", len,
         (long long)n, (long long)n, (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6, a, b);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return 0;
}
