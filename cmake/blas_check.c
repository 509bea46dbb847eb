/* blas_check.c — built and run at configure time against a candidate BLAS (CMakeLists.txt,
 * "BLAS"): prints "<threading> <fitness>, <description>". threading is "sequential",
 * "pthreads", "openmp" or "unknown"; fitness says whether weft's workers may call the library
 * at once: "thread-safe"; "not-thread-safe" (a serial OpenBLAS that does not report
 * USE_LOCKING: its buffer pool has no lock); "out-of-bounds" (BLIS before 2.0, whose
 * small-matrix kernels read past a matrix: flame/blis#635 and #821, fixed by #824); or
 * "unknown". The OpenBLAS and BLIS calls are weak references, so that any CBLAS links. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int openblas_get_parallel(void) __attribute__((weak));
char *openblas_get_config(void) __attribute__((weak));
char *bli_info_get_version_str(void) __attribute__((weak));
int64_t bli_info_get_enable_threading(void) __attribute__((weak));
int64_t bli_info_get_enable_openmp(void) __attribute__((weak));
void cblas_sgemm(void); /* a strong reference, so that the library is linked whatever it is */

int main(void) {
  static const char *const kinds[] = {"sequential", "pthreads", "openmp"};
  void (*volatile keep)(void) = cblas_sgemm;
  (void)keep;
  if (openblas_get_parallel != NULL) {
    int p = openblas_get_parallel();
    const char *config = openblas_get_config != NULL ? openblas_get_config() : "OpenBLAS";
    int safe = p != 0 || strstr(config, "USE_LOCKING") != NULL;
    printf("%s %s, %s\n", p >= 0 && p <= 2 ? kinds[p] : "unknown",
           safe ? "thread-safe" : "not-thread-safe", config);
  } else if (bli_info_get_version_str != NULL) {
    const char *v = bli_info_get_version_str();
    int threaded = bli_info_get_enable_threading != NULL && bli_info_get_enable_threading() != 0;
    int openmp = bli_info_get_enable_openmp != NULL && bli_info_get_enable_openmp() != 0;
    printf("%s %s, BLIS %s\n", !threaded ? "sequential" : openmp ? "openmp" : "pthreads",
           atoi(v) >= 2 ? "thread-safe" : "out-of-bounds", v);
  } else {
    puts("unknown unknown, a CBLAS weft cannot ask");
  }
  return 0;
}
