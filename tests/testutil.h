/* testutil.h — helpers shared by the cmocka tests: a runtime per test, checked calls, a
 * counting allocator that can fail the Nth allocation, and GPU detection for skips. */
#ifndef WEFT_TESTUTIL_H
#define WEFT_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "weft/weft.h"

/* Fails the test with weft_last_error() when `call` does not return WEFT_OK. */
#define CHECK(call)                                                                       \
  do {                                                                                    \
    int check_rc_ = (call);                                                               \
    if (check_rc_ != WEFT_OK)                                                             \
      fail_msg("%s failed: %s (%s)", #call, weft_status_name(check_rc_), weft_last_error()); \
  } while (0)

/* A runtime with `workers` CPU workers (0: one per core), quiet, GPUs as available. */
weft_runtime *tu_runtime(int workers);
/* Same, CPU only. */
weft_runtime *tu_runtime_cpu(int workers);

/* A 2-D f32 tensor on the CPU filled from a seed. */
weft_tensor *tu_matrix(weft_graph *g, const char *name, int64_t r, int64_t c, uint64_t seed);

/* The common fixture: a CPU runtime of two workers and an empty graph of it. tu_setup and
 * tu_teardown are cmocka setup/teardown functions that make and free one in *state. */
typedef struct tu_fixture {
  weft_runtime *rt;
  weft_graph *g;
} tu_fixture;
int tu_setup(void **state);
int tu_teardown(void **state);

/* A 0-d f64 tensor full of v, and a tensor's element 0 (both CHECKed). */
weft_tensor *tu_scalar(weft_graph *g, const char *name, double v);
double tu_value(weft_tensor *t);

/* A tensor on the CPU (CHECKed): dtype, shape and initialiser as given. */
weft_tensor *tu_tensor(weft_graph *g, const char *name, weft_dtype dt, int ndim,
                       const int64_t *shape, weft_init init);
/* Registers user op `name` (CHECKed) with `nargs` access modes and a CPU kernel. */
const weft_op *tu_op(weft_runtime *rt, const char *name, int nargs, const weft_access *modes,
                     weft_kernel_fn cpu, void *user);
/* Reads a CPU tensor's contents as doubles into out[0..numel) (CHECKed). */
void tu_read_doubles(weft_tensor *t, double *out);
/* Writes doubles into a CPU tensor of either dtype (CHECKed). */
void tu_write_doubles(weft_tensor *t, const double *in);
/* 1 if `haystack` contains `needle`; for checking error messages. */
int tu_contains(const char *haystack, const char *needle);

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

#endif
