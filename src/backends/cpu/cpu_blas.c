/* cpu_blas.c — which BLAS library serves the CPU's matrix products, how it runs them, and
 * the lock that guards a library that cannot be called from two threads at once.
 *
 * weft keeps the cores for its own workers and links a serial, thread-safe BLAS where the build
 * finds one, else OpenBLAS's pthreads build held to one thread a call (CMakeLists.txt, "BLAS").
 * But the library a process calls is the one the loader bound, not the one weft was built with:
 * an application that linked or preloaded another CBLAS first (OpenBLAS's pthreads, OpenMP or
 * serial build, BLIS, MKL) is the one weft's calls reach. So the backend asks the loaded
 * library instead of trusting the build: dladdr on the address weft calls, cblas_sgemm, names
 * the file, and that file's own entry points (dlopen with RTLD_NOLOAD, then dlsym) say what it
 * is:
 *
 *   OpenBLAS  openblas_get_parallel (0 sequential, 1 pthreads, 2 OpenMP), openblas_get_config,
 *             openblas_get_num_threads, openblas_set_num_threads
 *   BLIS      bli_info_get_version_str, bli_info_get_enable_threading / _openmp,
 *             bli_thread_get_num_threads, bli_thread_set_num_threads, bli_arch_string
 *   MKL       mkl_get_max_threads, mkl_get_version_string
 *
 * Any other library is "unknown": never said to compete, and trusted to be thread-safe.
 *
 * A threaded OpenBLAS starts its pool when it is loaded, sized by its thread count at that
 * moment; weft stops that pool as soon as it is loaded itself, and each runtime lowers the count
 * to one (weft__cpu_set_blas_threads). So the count a report gives is the one read by the
 * process's first probe, before any runtime set it, kept in an atomic that the first probe
 * fills (every runtime probes before it sets the count, so the first value stored is the
 * library's own).
 *
 * Two libraries are known to fail weft's concurrent calls. A serial OpenBLAS built without
 * USE_LOCKING (Debian 12's libopenblas0-serial) takes its packing buffers from a pool with no
 * lock, so two workers multiplying at once can share a buffer and both get wrong products;
 * OpenBLAS says whether it has the lock only from 0.3.28 on (openblas_get_config), so an older
 * serial build is taken to lack it, and every BLAS call of the process's weft kernels then holds
 * one lock (weft__cpu_blas_enter / _leave): right products, one at a time. BLIS before 2.0
 * (Debian 12's 0.9.0) reads past the end of a matrix in its small-matrix kernels (flame/blis#635,
 * #821), which crashes a product whose operand ends at an unmapped page: that is only said. */
#include <cblas.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "sched/thread.h"

/* The calls of the loaded library that tell how it runs; NULL where it has none. */
typedef struct blas_calls {
  int (*ob_parallel)(void); /* OpenBLAS */
  char *(*ob_config)(void);
  int (*ob_threads)(void);
  void (*ob_set_threads)(int);
  int (*ob_shutdown)(void);   /* OpenBLAS's pthreads build: stops its pool of threads */
  char *(*bli_version)(void); /* BLIS (its integers are 64-bit on a 64-bit host) */
  int64_t (*bli_threading)(void);
  int64_t (*bli_openmp)(void);
  int64_t (*bli_threads)(void);
  void (*bli_set_threads)(int64_t);
  int64_t (*bli_arch)(void);
  char *(*bli_arch_name)(int64_t);
  int (*mkl_threads)(void); /* MKL */
  void (*mkl_version)(char *buf, int len);
} blas_calls;

/* The library's thread count read by the process's first probe; 0 until then. */
static atomic_int first_threads;
/* 1 while the loaded library must be called by one thread at a time. */
static atomic_int serialise;
static weft__mutex blas_lock = WEFT__MUTEX_INITIALIZER;

const char *weft_blas_threading_name(int threading) {
  static const char *const names[] = {"sequential", "pthreads", "openmp", "threaded", "unknown"};
  return threading >= 0 && threading <= WEFT_BLAS_UNKNOWN ? names[threading] : "unknown";
}

/* Fills `file` with the object that provides the cblas_sgemm weft calls, and `c` with that
 * object's calls. The pointers stay valid after dlclose: the object was loaded before the probe
 * (weft needs it), and the probe's own reference is only dropped. */
static void find_calls(char *file, size_t size, blas_calls *c) {
  memset(c, 0, sizeof *c);
  if (size > 0) file[0] = '\0';
  Dl_info di;
  if (dladdr((void *)cblas_sgemm, &di) == 0 || di.dli_fname == NULL) return;
  snprintf(file, size, "%s", di.dli_fname);
  void *h = dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (h == NULL) return; /* linked into the executable: only its exported symbols would tell */
  c->ob_parallel = (int (*)(void))dlsym(h, "openblas_get_parallel");
  c->ob_config = (char *(*)(void))dlsym(h, "openblas_get_config");
  c->ob_threads = (int (*)(void))dlsym(h, "openblas_get_num_threads");
  c->ob_set_threads = (void (*)(int))dlsym(h, "openblas_set_num_threads");
  c->ob_shutdown = (int (*)(void))dlsym(h, "blas_thread_shutdown_");
  c->bli_version = (char *(*)(void))dlsym(h, "bli_info_get_version_str");
  c->bli_threading = (int64_t (*)(void))dlsym(h, "bli_info_get_enable_threading");
  c->bli_openmp = (int64_t (*)(void))dlsym(h, "bli_info_get_enable_openmp");
  c->bli_threads = (int64_t (*)(void))dlsym(h, "bli_thread_get_num_threads");
  c->bli_set_threads = (void (*)(int64_t))dlsym(h, "bli_thread_set_num_threads");
  c->bli_arch = (int64_t (*)(void))dlsym(h, "bli_arch_query_id");
  c->bli_arch_name = (char *(*)(int64_t))dlsym(h, "bli_arch_string");
  c->mkl_threads = (int (*)(void))dlsym(h, "mkl_get_max_threads");
  c->mkl_version = (void (*)(char *, int))dlsym(h, "mkl_get_version_string");
  dlclose(h);
}

/* The threads one call uses now, as the library says: 1 when sequential, 0 when it cannot
 * tell. BLIS reports -1 until a count is set (it then runs one thread). */
static int threads_now(const blas_calls *c) {
  if (c->ob_parallel != NULL) {
    if (c->ob_parallel() == 0) return 1;
    return c->ob_threads != NULL ? c->ob_threads() : 0;
  }
  if (c->bli_version != NULL) {
    if (c->bli_threading == NULL || c->bli_threading() == 0) return 1;
    int64_t n = c->bli_threads != NULL ? c->bli_threads() : 1;
    return n > 1 ? (int)n : 1;
  }
  return c->mkl_threads != NULL ? c->mkl_threads() : 0;
}

/* 1 once weft stopped the pool a threaded OpenBLAS started when it was loaded. */
static atomic_int pool_stopped;

/* OpenBLAS's pthreads build starts a thread a core when it is loaded, and they spin for about
 * 0.1 s after their start and after every call that uses them. Stopping them costs nothing: the
 * library starts them again for its next call of more than one thread, and a call of one runs on
 * its caller. */
static void stop_pool(const blas_calls *c) {
  if (c->ob_parallel != NULL && c->ob_parallel() == 1 && c->ob_shutdown != NULL) {
    c->ob_shutdown();
    atomic_store(&pool_stopped, 1);
  }
}

/* As soon as weft is loaded (after the libraries it needs, the BLAS among them), so that the
 * pool does not take the cores from whatever the program does before its first runtime — a CUDA
 * backend's start, the graph's build. An application that calls the BLAS with threads of its
 * own gets them back at its first such call. */
__attribute__((constructor)) static void stop_pool_at_load(void) {
  char file[8];
  blas_calls c;
  find_calls(file, sizeof file, &c);
  stop_pool(&c);
}

void weft__cpu_set_blas_threads(int n) {
  char file[8];
  blas_calls c;
  find_calls(file, sizeof file, &c);
  if (c.ob_set_threads != NULL)
    c.ob_set_threads(n);
  else if (c.bli_set_threads != NULL && c.bli_threading != NULL && c.bli_threading() != 0)
    c.bli_set_threads(n);
  /* Held to one thread a call, the library never needs its pool again: stop it, should a call
   * of the application's have started it since the load. */
  if (n == 1) stop_pool(&c);
}

/* Name, build description, threading and thread safety of an OpenBLAS. */
static void describe_openblas(const blas_calls *c, weft_blas_info *out) {
  int p = c->ob_parallel();
  out->threading = p == 0 ? WEFT_BLAS_SEQUENTIAL : p == 1 ? WEFT_BLAS_PTHREADS
                   : p == 2 ? WEFT_BLAS_OPENMP : WEFT_BLAS_THREADED;
  if (c->ob_config != NULL && c->ob_config() != NULL)
    snprintf(out->config, sizeof out->config, "%s", c->ob_config());
  /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the name is its first two words. */
  int n = strncmp(out->config, "OpenBLAS ", 9) == 0 ? 9 + (int)strcspn(out->config + 9, " ") : 8;
  snprintf(out->name, sizeof out->name, "%.*s", n, n > 8 ? out->config : "OpenBLAS");
  /* The threaded builds lock their buffer pool; a serial one only with USE_LOCKING. */
  out->thread_safe = p != 0 || strstr(out->config, "USE_LOCKING") != NULL;
}

/* Name, build description and threading of a BLIS. */
static void describe_blis(const blas_calls *c, weft_blas_info *out) {
  const char *v = c->bli_version();
  snprintf(out->name, sizeof out->name, "BLIS %s", v != NULL ? v : "");
  const char *arch = c->bli_arch != NULL && c->bli_arch_name != NULL ? c->bli_arch_name(c->bli_arch()) : NULL;
  int threaded = c->bli_threading != NULL && c->bli_threading() != 0;
  snprintf(out->config, sizeof out->config, "%s, kernels for %s, threading %s", out->name,
           arch != NULL ? arch : "?", !threaded ? "none"
           : c->bli_openmp != NULL && c->bli_openmp() != 0 ? "OpenMP" : "pthreads");
  out->threading = !threaded ? WEFT_BLAS_SEQUENTIAL
                   : c->bli_openmp != NULL && c->bli_openmp() != 0 ? WEFT_BLAS_OPENMP : WEFT_BLAS_PTHREADS;
  out->thread_safe = 1;
}

void weft__cpu_blas_probe(weft_blas_info *out) {
  blas_calls c;
  memset(out, 0, sizeof *out);
  find_calls(out->library, sizeof out->library, &c);
  int now = threads_now(&c), expected = 0;
  if (now > 0) atomic_compare_exchange_strong(&first_threads, &expected, now);
  int first = atomic_load(&first_threads);
  const char *fix = "OPENBLAS_NUM_THREADS";
  out->thread_safe = 1;
  if (c.ob_parallel != NULL) {
    describe_openblas(&c, out);
  } else if (c.bli_version != NULL) {
    describe_blis(&c, out);
    fix = "BLIS_NUM_THREADS";
  } else if (c.mkl_threads != NULL) {
    /* MKL's sequential layer says 1 thread; a threaded layer held to one thread runs like it. */
    snprintf(out->name, sizeof out->name, "MKL");
    if (c.mkl_version != NULL) c.mkl_version(out->config, (int)sizeof out->config);
    out->config[sizeof out->config - 1] = '\0';
    out->threading = first > 1 ? WEFT_BLAS_THREADED : WEFT_BLAS_SEQUENTIAL;
    fix = "MKL_NUM_THREADS";
  } else {
    snprintf(out->name, sizeof out->name, "unknown");
    out->threading = WEFT_BLAS_UNKNOWN;
  }
  out->threads = out->threading == WEFT_BLAS_SEQUENTIAL ? 1 : out->threading == WEFT_BLAS_UNKNOWN ? 0 : first;
  out->stopped = atomic_load(&pool_stopped) && out->threading == WEFT_BLAS_PTHREADS && out->threads > 1;
  out->competes = out->threading != WEFT_BLAS_SEQUENTIAL && out->threading != WEFT_BLAS_UNKNOWN &&
                  out->threads > 1 && !out->stopped;
  const char *file = out->library[0] ? out->library : out->name;
  if (out->competes)
    snprintf(out->message, sizeof out->message,
             "the BLAS library loaded (%s) runs its own %d threads, which compete with weft's "
             "workers; link a serial, thread-safe BLAS or set %s=1",
             file, out->threads, fix);
  else if (!out->thread_safe)
    snprintf(out->message, sizeof out->message,
             "the BLAS library loaded (%s) is a serial %s built without USE_LOCKING, which is not "
             "safe to call from two threads at once: weft makes one BLAS call at a time; link a "
             "serial, thread-safe BLAS",
             file, out->name);
  else if (c.bli_version != NULL && atoi(c.bli_version()) < 2)
    snprintf(out->message, sizeof out->message,
             "the BLAS library loaded (%s) is %s, whose small-matrix kernels read past the end of "
             "a matrix (flame/blis#635, #821; fixed in 2.0): a product can crash; link a serial, "
             "thread-safe BLAS",
             file, out->name);
  atomic_store(&serialise, !out->thread_safe);
}

/* Relaxed: the flag is stored when a runtime is created, before that runtime's workers start
 * (thread creation orders it), and every probe of a process stores the same value. */
int weft__cpu_blas_enter(void) {
  if (!atomic_load_explicit(&serialise, memory_order_relaxed)) return 0;
  weft__mutex_lock(&blas_lock);
  return 1;
}

void weft__cpu_blas_leave(int locked) {
  if (locked) weft__mutex_unlock(&blas_lock);
}
