/* gpu_test.h — helpers shared by the GPU tests (test_cuda_*.c): runtimes with and without GPUs,
 * the "skip without a GPU" rule, and float comparisons. */
#ifndef WEFT_GPU_TEST_H
#define WEFT_GPU_TEST_H

#include "testutil.h"

/* GPUs the default runtime sees (computed once). */
int gt_gpus(void);
/* Skips the calling test (cmocka's skip()) when there are fewer than `n` GPUs. */
#define GT_NEED_GPUS(n)          \
  do {                           \
    if (gt_gpus() < (n)) skip(); \
  } while (0)
/* A quiet runtime with all GPUs and `workers` CPU workers (0: one per core), extra flags. */
weft_runtime *gt_runtime(int workers, unsigned flags);
/* Runs the cmocka group and turns "every test skipped for want of a GPU" into exit code 77. */
int gt_main(const struct CMUnitTest *tests, size_t n, const char *name);
#define GT_RUN(tests) gt_main(tests, sizeof(tests) / sizeof((tests)[0]), __FILE__)

/* max |a - b| / max(max |b|, tiny) over n values of dtype; 0 for identical buffers. */
double gt_rel_err(const void *a, const void *b, size_t n, int dtype);
/* Reads a kept tensor into a new malloc'd buffer (fails the test on error). */
void *gt_read(weft_tensor *t);

#endif
