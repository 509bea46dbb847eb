/* gpu_test.c — see gpu_test.h. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "gpu_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gpus = -1;

int gt_gpus(void) {
  if (gpus < 0) {
    weft_runtime_options o;
    weft_runtime_options_init(&o);
    o.cpu_workers = 1;
    o.flags |= WEFT_RUNTIME_QUIET;
    weft_runtime *rt = NULL;
    gpus = weft_runtime_create(&o, &rt) == WEFT_OK ? weft_device_count(rt, WEFT_DEVICE_CUDA) : 0;
    weft_runtime_destroy(rt);
  }
  return gpus;
}

weft_runtime *gt_runtime(int workers, unsigned flags) { return tu_runtime_with(workers, -1, flags); }

weft_runtime *gt_runtime_env(int workers, unsigned flags, const char *name, const char *value) {
  setenv(name, value, 1);
  weft_runtime *rt = gt_runtime(workers, flags);
  unsetenv(name);
  return rt;
}

int gt_main(const struct CMUnitTest *tests, size_t n, const char *name) {
  int failed = _cmocka_run_group_tests(name, tests, n, NULL, NULL);
  if (failed == 0 && gt_gpus() == 0) {
    printf("%s: no CUDA GPU on this machine: the tests that need one were skipped\n", name);
    return 77;
  }
  return failed;
}

int gt_setup(void **state) {
  *state = NULL;
  if (gt_gpus() == 0) return 0;
  tu_fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->rt = gt_runtime(2, 0);
  f->g = tu_graph(f->rt);
  *state = f;
  return 0;
}

int gt_teardown(void **state) { return tu_teardown(state); }

const weft_op *gt_op(weft_runtime *rt, const char *name, weft_access mode, weft_kernel_fn cpu,
                     weft_kernel_fn cuda) {
  return tu_op1(rt, name, mode, cpu, cuda);
}

int gt_under_sanitizer(void) {
  const char *v = getenv("WEFT_TEST_SANITIZER");
  return v != NULL && strcmp(v, "1") == 0;
}

#if WEFT_HAVE_CUDA
weft_cuda_run_stats gt_run_stats(weft_runtime *rt) {
  weft_cuda_run_stats s;
  weft_cuda_run_stats_get(rt, &s);
  return s;
}
#endif

double gt_rel_err(const void *a, const void *b, size_t n, int dtype) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < n; i++) {
    double x = dtype == WEFT_F32 ? ((const float *)a)[i] : ((const double *)a)[i];
    double y = dtype == WEFT_F32 ? ((const float *)b)[i] : ((const double *)b)[i];
    if (isnan(x) != isnan(y)) return INFINITY;
    if (fabs(x - y) > num) num = fabs(x - y);
    if (fabs(y) > den) den = fabs(y);
  }
  return num / den;
}

void *gt_read(weft_tensor *t) {
  size_t bytes = weft_tensor_bytes(t);
  void *buf = malloc(bytes ? bytes : 1);
  assert_non_null(buf);
  CHECK(weft_tensor_read(t, buf, bytes));
  return buf;
}
