/* testutil.h — helpers shared by the cmocka tests: a runtime and a graph per test, checked
 * calls, the overlap example's graph, whole files read into memory, and a counting allocator
 * that can fail the Nth allocation. */
#ifndef WEFT_TESTUTIL_H
#define WEFT_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "weft/weft.h"

/* Fails the test with weft_last_error() when `call` does not return WEFT_OK. */
#define CHECK(call)                                                                       \
  do {                                                                                    \
    int check_rc_ = (call);                                                               \
    if (check_rc_ != WEFT_OK)                                                             \
      fail_msg("%s failed: %s (%s)", #call, weft_status_name(check_rc_), weft_last_error()); \
  } while (0)

/* A quiet runtime (CHECKed) with `workers` CPU workers (0: one per core), at most `max_gpus`
 * GPUs (-1: every visible one; 0: the CPU alone) and the extra WEFT_RUNTIME_* `flags`. */
/* The first of the usual names of Chromium found on PATH (chromium, chromium-browser,
 * google-chrome), or NULL. */
const char *tu_find_chromium(void);
weft_runtime *tu_runtime_with(int workers, int max_gpus, unsigned flags);
/* A runtime with `workers` CPU workers (0: one per core), quiet, GPUs as available. */
weft_runtime *tu_runtime(int workers);
/* Same, CPU only. */
weft_runtime *tu_runtime_cpu(int workers);
/* A new, empty graph of rt (CHECKed). */
weft_graph *tu_graph(weft_runtime *rt);

/* A 2-D f32 tensor on the CPU filled from a seed. */
weft_tensor *tu_matrix(weft_graph *g, const char *name, int64_t r, int64_t c, uint64_t seed);

/* The common fixture: a CPU runtime of two workers and an empty graph of it. tu_setup and
 * tu_teardown are cmocka setup/teardown functions that make and free one in *state. */
typedef struct tu_fixture {
  weft_runtime *rt;
  weft_graph *g;
} tu_fixture;
int tu_setup(void **state);
/* Frees the fixture in *state (graph, then runtime); a NULL *state is left alone. */
int tu_teardown(void **state);

/* The overlap example's graph (examples/overlap.c), in g: x, side x side f32 on `dev` filled
 * by `init`, then for each i < n, y[i] = x.x (named "y<i>") and h[i] = a copy of y[i] on the
 * CPU. Records the tensors and the ids of the products' and the copies' nodes. */
#define TU_OVERLAP_MAX 64
typedef struct tu_overlap {
  weft_graph *g;
  int n;
  weft_tensor *x, *y[TU_OVERLAP_MAX], *h[TU_OVERLAP_MAX];
  size_t mm[TU_OVERLAP_MAX], cp[TU_OVERLAP_MAX];
} tu_overlap;
void tu_overlap_build(tu_overlap *o, weft_graph *g, weft_device dev, int64_t side, weft_init init,
                      int n);

/* A 0-d f64 tensor full of v, and a tensor's element 0 (both CHECKed). */
weft_tensor *tu_scalar(weft_graph *g, const char *name, double v);
double tu_value(weft_tensor *t);

/* A tensor on the CPU (CHECKed): dtype, shape and initialiser as given. */
weft_tensor *tu_tensor(weft_graph *g, const char *name, weft_dtype dt, int ndim,
                       const int64_t *shape, weft_init init);
/* The description of user op `name`: `nargs` arguments accessed as modes[i], a CPU and a CUDA
 * kernel (either may be NULL) and the kernels' user pointer. */
weft_op_desc tu_op_desc(const char *name, int nargs, const weft_access *modes, weft_kernel_fn cpu,
                        weft_kernel_fn cuda, void *user);
/* Registers user op `name` (CHECKed) with `nargs` access modes and a CPU kernel. */
/* Registers (CHECKed) an op that writes its first argument and reads any number after it
 * (weft_op_desc.rest = WEFT_READ), with a CPU kernel. */
const weft_op *tu_op_gather(weft_runtime *rt, const char *name, weft_kernel_fn cpu);
const weft_op *tu_op(weft_runtime *rt, const char *name, int nargs, const weft_access *modes,
                     weft_kernel_fn cpu, void *user);
/* Reads a CPU tensor's contents as doubles into out[0..numel) (CHECKed). */
void tu_read_doubles(weft_tensor *t, double *out);
/* Writes doubles into a CPU tensor of either dtype (CHECKed). */
void tu_write_doubles(weft_tensor *t, const double *in);
/* 1 if `haystack` contains `needle`; for checking error messages. */
int tu_contains(const char *haystack, const char *needle);

/* What is left of stream f, or the whole file at `path`, NUL-terminated in a malloc'd buffer;
 * *len (may be NULL) receives its length. Fails the test if the file cannot be read. */
char *tu_read_stream(FILE *f, size_t *len);
char *tu_read_file(const char *path, size_t *len);

/* The counting allocator: counts live blocks and fails allocation number `fail_at`
 * (0-based; -1 never). tu_alloc_install() resets the counters. */
void tu_alloc_install(long fail_at);
void tu_alloc_uninstall(void);
/* With the counting allocator installed: fail allocation number `at` from now on (counting
 * from 0 again; -1 never), keeping the live count. */
void tu_alloc_fail_at(long at);
long tu_alloc_live(void);   /* blocks allocated and not yet freed */
long tu_alloc_calls(void);  /* allocations attempted since install */
int tu_alloc_failed(void);  /* 1 if the planned failure happened */

/* A user-op kernel: adds 1 to every element of its f64 argument 0. */
int tu_add_one(weft_kernel_ctx *ctx);
/* Registers user op `name` (CHECKed) of one argument accessed as `mode`, with the given CPU and
 * CUDA kernels (either may be NULL). */
const weft_op *tu_op1(weft_runtime *rt, const char *name, weft_access mode, weft_kernel_fn cpu, weft_kernel_fn cuda);

/* A symmetric positive definite n x n f64 matrix (malloc'd): random entries in [0, 1) made
 * symmetric, plus n on the diagonal. */
double *tu_spd(int64_t n, uint64_t seed);
/* Adds the tiled right-looking Cholesky (lower) of x, tiles of b x b, to g: WEFT_OK or the
 * first call's error. */
int tu_cholesky(weft_graph *g, weft_tensor *x, int64_t b);
/* The same on x's tiles as they are (partitioned, perhaps distributed, already). */
int tu_cholesky_tiled(weft_graph *g, weft_tensor *x);
/* The same with each panel solved by products with the inverse of its diagonal factor: W =
 * L_kk^-1 (a trtri) on `dev`, then A_ik = A_ik W^T (a trmm). */
int tu_cholesky_inverse(weft_graph *g, weft_tensor *x, weft_device dev);
/* Adds the tiled right-looking Cholesky of x's upper triangle (A = U^T U), tiles of b x b. */
int tu_cholesky_upper(weft_graph *g, weft_tensor *x, int64_t b);
/* The same on x's tiles as they are. */
int tu_cholesky_upper_tiled(weft_graph *g, weft_tensor *x);
/* An n x n triangular f64 matrix (malloc'd), well conditioned: upper (else lower); the other
 * strict triangle holds 1e30, which no op may read. */
double *tu_triangle(int64_t n, int upper);
/* W = T^-1 by weft_trtri on `dev` of rt, T = tu_triangle(n, upper) in `dtype` (with zeros on
 * the diagonal at row zero_at and at row n - 50 after it, if zero_at >= 0), as strided tiles: T
 * tile (1, 0) of a 2n x 2n matrix, W tile (0, 1) of another, full of 7 before; the graph run
 * `runs` times (a failing run must fail the same way again). Returns W (n x n, in double,
 * malloc'd; unset if the run failed); *status gets the last run's status. */
double *tu_trtri(weft_runtime *rt, weft_device dev, int dtype, int64_t n, int upper, int64_t zero_at, int runs,
                 int *status);
/* max |T W - I| for w from tu_trtri (T = tu_triangle(n, upper)); infinite if W's other strict
 * triangle is not all zero. */
double tu_trtri_error(const double *w, int64_t n, int upper);
/* a^T (n x n, malloc'd). */
double *tu_transpose(const double *a, int64_t n);
/* max |L L^T - A| / max |A| over the lower triangle, L the lower triangle of l (n x n). */
double tu_residual(const double *l, const double *a, int64_t n);

#endif
