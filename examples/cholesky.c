/* cholesky.c — a tiled Cholesky factorisation A = L L^T with the built-in tile ops, on the GPU
 * when there is one, checked by solving A x = b for the b that makes x all ones.
 *
 * The matrix is written from the host (any symmetric positive definite matrix will do: here
 * one that is diagonally dominant). weft_tensor_tiles makes A's B x B tiles; per step k, potrf
 * factors the diagonal tile, trsm solves the tiles below it, syrk and gemm update the trailing
 * matrix. Every dependency is inferred from the tiles each call reads and writes, and the
 * independent updates run side by side (streams on a GPU, workers on the CPU). The two
 * triangular solves read the whole of A (its lower triangle is L), after every tile's last
 * write.
 *
 *   cholesky [N] [B]      (default 2048 and 256) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft/weft.h"

#define CHECK(x)                                            \
  do {                                                      \
    if ((x) != WEFT_OK) {                                   \
      fprintf(stderr, "cholesky: %s\n", weft_last_error()); \
      return 1;                                             \
    }                                                       \
  } while (0)

int main(int argc, char **argv) {
  int64_t n = argc > 1 ? atoll(argv[1]) : 2048, b = argc > 2 ? atoll(argv[2]) : 256;
  if (n < 1 || b < 1) {
    fprintf(stderr, "usage: cholesky [N] [B]\n");
    return 2;
  }
  weft_runtime *rt;
  CHECK(weft_runtime_create(NULL, &rt));
  weft_device dev = weft_try_gpu(rt, 0);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *a, *x, *one, *r = NULL, *res = NULL;
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){n, n}, dev, weft_zeros(), &a));
  CHECK(weft_tensor_create(g, "x", WEFT_F64, 2, (int64_t[]){n, 1}, dev, weft_zeros(), &x));
  CHECK(weft_tensor_create(g, "one", WEFT_F64, 2, (int64_t[]){n, 1}, dev, weft_ones(), &one));

  /* A: symmetric, 1/(1 + |i - j|) off the diagonal, n on it. b = A . 1, written into x. */
  double *host = malloc((size_t)(n * n) * sizeof *host), *rhs = calloc((size_t)n, sizeof *rhs);
  if (host == NULL || rhs == NULL) return 1;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) {
      host[i * n + j] = i == j ? (double)n : 1.0 / (double)(1 + llabs(i - j));
      rhs[i] += host[i * n + j];
    }
  CHECK(weft_tensor_write(a, host, (size_t)(n * n) * sizeof *host));
  CHECK(weft_tensor_write(x, rhs, (size_t)n * sizeof *rhs));

  CHECK(weft_tensor_tiles(g, a, b, b));
  int64_t t = weft_tensor_tile_count(a, 0);
  for (int64_t k = 0; k < t; k++) {
    weft_tensor *akk = weft_tensor_tile(a, k, k);
    CHECK(weft_potrf(g, WEFT_LOWER, akk));
    for (int64_t i = k + 1; i < t; i++) CHECK(weft_trsm(g, WEFT_RIGHT, WEFT_LOWER, 1, 1.0, akk, weft_tensor_tile(a, i, k)));
    for (int64_t i = k + 1; i < t; i++) {
      weft_tensor *aik = weft_tensor_tile(a, i, k);
      CHECK(weft_syrk(g, WEFT_LOWER, 0, -1.0, aik, 1.0, weft_tensor_tile(a, i, i)));
      for (int64_t j = k + 1; j < i; j++)
        CHECK(weft_gemm(g, aik, 0, weft_tensor_tile(a, j, k), 1, -1.0, 1.0, weft_tensor_tile(a, i, j)));
    }
  }
  CHECK(weft_trsm(g, WEFT_LEFT, WEFT_LOWER, 0, 1.0, a, x)); /* L y = b */
  CHECK(weft_trsm(g, WEFT_LEFT, WEFT_LOWER, 1, 1.0, a, x)); /* L^T x = y */
  CHECK(weft_sub(g, x, one, &r));
  CHECK(weft_norm(g, r, &res));
  CHECK(weft_graph_run(g));

  double residual;
  CHECK(weft_tensor_get(res, 0, &residual));
  char name[32];
  printf("tiled Cholesky of %lld x %lld in %lld x %lld tiles on %s: %zu nodes, |x - 1| = %.3g\n", (long long)n,
         (long long)n, (long long)b, (long long)b, weft_device_str(dev, name, sizeof name), weft_graph_node_count(g),
         residual);
  free(host);
  free(rhs);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return residual < 1e-8 ? 0 : 1;
}
