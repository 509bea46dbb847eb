/* gpu_test.c — see gpu_test.h. */
#include "gpu_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

weft_runtime *gt_runtime(int workers, unsigned flags) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = workers;
  o.flags |= WEFT_RUNTIME_QUIET | flags;
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
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
