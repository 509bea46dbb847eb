/* gpu_test.h — helpers shared by the GPU tests (test_cuda_*.c): runtimes with and without GPUs,
 * the "skip without a GPU" rule, a fixture of a runtime and a graph, user ops with a CUDA
 * kernel, the replay counters, and float comparisons. */
#ifndef WEFT_GPU_TEST_H
#define WEFT_GPU_TEST_H

#include "testutil.h"
#if WEFT_HAVE_CUDA
#include "weft/cuda.h"
#endif

/* GPUs the default runtime sees (computed once). */
int gt_gpus(void);
/* Skips the calling test (cmocka's skip()) when there are fewer than `n` GPUs. It must be
 * called from the test itself: cmocka counts a skip in a setup function as a failed setup. */
#define GT_NEED_GPUS(n)          \
  do {                           \
    if (gt_gpus() < (n)) skip(); \
  } while (0)
/* A quiet runtime with all GPUs and `workers` CPU workers (0: one per core), extra flags. */
weft_runtime *gt_runtime(int workers, unsigned flags);
/* gt_runtime made while the environment variable `name` is `value` (the backend reads it once,
 * at creation); the variable is unset again before this returns. */
weft_runtime *gt_runtime_env(int workers, unsigned flags, const char *name, const char *value);
/* Runs the cmocka group and turns "every test skipped for want of a GPU" into exit code 77. */
int gt_main(const struct CMUnitTest *tests, size_t n, const char *name);
#define GT_RUN(tests) gt_main(tests, sizeof(tests) / sizeof((tests)[0]), __FILE__)

/* The GPU tests' common fixture, for cmocka_unit_test_setup_teardown: where there is a GPU, a
 * tu_fixture of gt_runtime(2, 0) and an empty graph of it in *state; elsewhere *state is NULL
 * and the test's GT_NEED_GPUS skips it. gt_teardown frees what gt_setup made. */
int gt_setup(void **state);
int gt_teardown(void **state);

/* Registers user op `name` (CHECKed) of one argument accessed as `mode`, with a CPU kernel and
 * a CUDA kernel (either may be NULL). */
const weft_op *gt_op(weft_runtime *rt, const char *name, weft_access mode, weft_kernel_fn cpu,
                     weft_kernel_fn cuda);

/* 1 under compute-sanitizer runs (WEFT_TEST_SANITIZER=1), which leave out the tests that run a
 * child process or fail allocations on purpose. */
int gt_under_sanitizer(void);

#if WEFT_HAVE_CUDA
/* The runtime's CUDA run counters (eager runs, captures, replays, combined nodes, ...). */
weft_cuda_run_stats gt_run_stats(weft_runtime *rt);
#endif

/* max |a - b| / max(max |b|, tiny) over n values of dtype; 0 for identical buffers. */
double gt_rel_err(const void *a, const void *b, size_t n, int dtype);
/* Reads a kept tensor into a new malloc'd buffer (fails the test on error). */
void *gt_read(weft_tensor *t);

#endif
