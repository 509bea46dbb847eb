/* test_cpu_blas.c — src/backends/cpu/cpu_blas.c and the BLAS weft links: no BLAS thread in
 * the process (exactly the main thread and a runtime's workers, at load, after
 * weft_runtime_create and after a GEMM, where the build links a serial BLAS; the threaded
 * library's pool and nothing more where it falls back); the library the build chose as the one
 * loaded and reported (weft_runtime_blas_info, the run statistics); the info's arguments and
 * names; and another BLAS brought by the process, preloaded into a child of this test where it
 * is installed: OpenBLAS's pthreads build, reported with its threads, and Debian's serial
 * OpenBLAS, reported as not thread-safe and called one product at a time, with concurrent
 * products still right. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "weft/report.h"

/* A thread sanitizer runs a background thread of its own, started with the first thread. */
#if defined(__SANITIZE_THREAD__)
#define SANITIZER_THREADS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SANITIZER_THREADS 1
#endif
#endif
#ifndef SANITIZER_THREADS
#define SANITIZER_THREADS 0
#endif

/* The threads of this process, and their names ("tid name, ...") for a failure message. */
static int thread_count(char *names, size_t size) {
  DIR *d = opendir("/proc/self/task");
  assert_non_null(d);
  int n = 0;
  size_t len = 0;
  if (names != NULL && size > 0) names[0] = '\0';
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    n++;
    if (names == NULL || len + 1 >= size) continue;
    char path[300], comm[32] = "?";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
      if (fgets(comm, sizeof comm, f) != NULL) comm[strcspn(comm, "\n")] = '\0';
      fclose(f);
    }
    int w = snprintf(names + len, size - len, "%s%s %s", len ? ", " : "", e->d_name, comm);
    if (w > 0) len += (size_t)w < size - len ? (size_t)w : size - len - 1;
  }
  closedir(d);
  return n;
}

/* The BLAS's own threads this build expects: none with the serial, thread-safe BLAS it links
 * where there is one (WEFT_TEST_BLAS_SERIAL); with the threaded build it falls back to, the pool
 * that library started when it was loaded (its threads but the caller). */
static int blas_pool(void) {
  if (WEFT_TEST_BLAS_SERIAL) return 0;
  weft_runtime *rt = tu_runtime_cpu(1);
  weft_blas_info bi;
  CHECK(weft_runtime_blas_info(rt, &bi));
  weft_runtime_destroy(rt);
  return bi.threading == WEFT_BLAS_PTHREADS && bi.threads > 1 ? bi.threads - 1 : 0;
}

/* The threads of the process are `expected` (plus the sanitizer's own, if any); `when` says
 * at which step, and the BLAS loaded is named on a failure. A joined thread can still be listed
 * for a moment (the join returns when the thread clears its id, before the kernel releases it),
 * so the count is read again for up to 2 s; a thread that stays is a failure. */
static void expect_threads(int expected, const char *when) {
  char names[1024];
  int n = thread_count(names, sizeof names);
  for (int tries = 0; tries < 2000 && !(n >= expected && n <= expected + SANITIZER_THREADS); tries++) {
    nanosleep(&(struct timespec){0, 1000000}, NULL);
    n = thread_count(names, sizeof names);
  }
  if (n >= expected && n <= expected + SANITIZER_THREADS) return;
  weft_runtime *rt = tu_runtime_cpu(1);
  weft_blas_info bi;
  CHECK(weft_runtime_blas_info(rt, &bi));
  weft_runtime_destroy(rt);
  fail_msg("%s: %d threads (%s), expected %d: the main thread and weft's workers%s. The BLAS "
           "loaded is %s, %s, %d threads (%s)",
           when, n, names, expected,
           WEFT_TEST_BLAS_SERIAL ? ", no other" : ", and the pool of the threaded BLAS this build links",
           bi.name, weft_blas_threading_name(bi.threading), bi.threads, bi.library);
}

/* A graph of one 256 x 256 product, large enough for a threaded OpenBLAS to use its threads. */
static weft_graph *gemm_graph(weft_runtime *rt) {
  weft_graph *g = tu_graph(rt);
  weft_tensor *x = tu_matrix(g, "x", 256, 256, 1), *y = NULL;
  CHECK(weft_mm(g, x, x, &y));
  return g;
}

/* The statistics of one run of g, as text and as JSON (malloc'd). */
static void run_stats(weft_graph *g, char **text, char **json) {
  weft_run *run;
  weft_run_stats *st;
  size_t len;
  CHECK(weft_graph_launch(g, &run));
  CHECK(weft_run_wait(run));
  CHECK(weft_run_stats_create(run, &st));
  FILE *f = open_memstream(text, &len);
  assert_non_null(f);
  CHECK(weft_run_stats_write(st, WEFT_REPORT_TEXT, f));
  fclose(f);
  f = open_memstream(json, &len);
  assert_non_null(f);
  CHECK(weft_run_stats_write(st, WEFT_REPORT_JSON, f));
  fclose(f);
  weft_run_stats_destroy(st);
  weft_run_destroy(run);
}

/* ---- no BLAS thread ------------------------------------------------------------------------ */

/* From the start, the process has the main thread and the runtimes' workers, no other, and
 * weft's products add none: with a serial BLAS none was ever there; with the threaded build a
 * build falls back to, the pool that library started when it was loaded is stopped when weft
 * is loaded, before main, and stays stopped since weft holds the library to one thread a call.
 * (This test runs first: no runtime yet.) */
static void no_blas_thread_at_load_or_gemm(void **state) {
  (void)state;
  char names[1024];
  int at_start = thread_count(names, sizeof names);
  int pool = blas_pool(); /* makes a runtime */
  if (!WEFT_TEST_BLAS_SERIAL)
    print_message("this build links a threaded BLAS (CMake said why): its pool of %d threads, "
                  "started at load, is stopped when weft loads\n", pool);
  if (!(at_start >= 1 && at_start <= 1 + SANITIZER_THREADS))
    fail_msg("at the start, before any runtime: %d threads (%s), expected 1: the BLAS's pool of "
             "%d threads was not stopped when weft loaded", at_start, names, pool);
  expect_threads(1, "after weft's first runtime was destroyed");
  for (int workers = 1; workers <= 3; workers++) {
    char when[96];
    weft_runtime *rt = tu_runtime_cpu(workers);
    snprintf(when, sizeof when, "after weft_runtime_create with %d workers", workers);
    expect_threads(1 + workers, when);
    weft_graph *g = gemm_graph(rt);
    CHECK(weft_graph_run(g));
    CHECK(weft_graph_run(g));
    snprintf(when, sizeof when, "after two runs of a 256^2 GEMM on %d workers", workers);
    expect_threads(1 + workers, when);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
    expect_threads(1, "after weft_runtime_destroy");
  }
}

/* ---- the BLAS this build links -------------------------------------------------------------- */

/* The library loaded is the one the build chose: serial and thread-safe, with nothing to say;
 * or, where it fell back, OpenBLAS's pthreads build, whose pool is said to compete. */
static void linked_blas_is_loaded_and_reported(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(1);
  weft_blas_info bi;
  CHECK(weft_runtime_blas_info(rt, &bi));
  int want = WEFT_TEST_BLAS_SERIAL ? WEFT_BLAS_SEQUENTIAL : WEFT_BLAS_PTHREADS;
  if (bi.threading != want || !bi.thread_safe || strcmp(bi.name, "unknown") == 0)
    fail_msg("weft's cblas_sgemm is bound to %s: %s, %s, %s (%s); expected the %s BLAS this "
             "build links", bi.library, bi.name, weft_blas_threading_name(bi.threading),
             bi.thread_safe ? "thread-safe" : "not thread-safe", bi.config,
             weft_blas_threading_name(want));
  assert_true(bi.library[0] == '/');
  weft_graph *g = gemm_graph(rt);
  char *text, *json;
  run_stats(g, &text, &json);
  if (!bi.competes) {
    assert_true(WEFT_TEST_BLAS_SERIAL || bi.threads <= 1 || bi.stopped);
    assert_string_equal(bi.message, "");
    assert_null(strstr(text, "BLAS"));
    assert_true(tu_contains(json, "\"competes\": false, \"thread_safe\": true, \"message\": null}"));
  } else {
    assert_false(WEFT_TEST_BLAS_SERIAL);
    assert_true(tu_contains(bi.message, "which compete with weft's workers"));
    assert_true(tu_contains(text, "note: the BLAS library loaded ("));
    assert_true(tu_contains(json, "\"competes\": true, \"thread_safe\": true, \"message\": \"the BLAS"));
  }
  assert_true(tu_contains(json, "\"blas\": {\"library\": \"/"));
  free(text);
  free(json);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

static void info_arguments_and_names(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(1);
  weft_blas_info bi;
  assert_int_equal(weft_runtime_blas_info(NULL, &bi), WEFT_EINVAL);
  assert_int_equal(weft_runtime_blas_info(rt, NULL), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "weft_runtime_blas_info"));
  weft_runtime_destroy(rt);
  static const char *const names[] = {"sequential", "pthreads", "openmp", "threaded", "unknown"};
  for (int i = 0; i <= WEFT_BLAS_UNKNOWN; i++) assert_string_equal(weft_blas_threading_name(i), names[i]);
  assert_string_equal(weft_blas_threading_name(-1), "unknown");
  assert_string_equal(weft_blas_threading_name(WEFT_BLAS_UNKNOWN + 1), "unknown");
  /* A simulated run's statistics leave the host's BLAS out: its time is virtual. */
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.simulate = "h100";
  o.flags = WEFT_RUNTIME_QUIET;
  CHECK(weft_runtime_create(&o, &rt));
  CHECK(weft_runtime_blas_info(rt, &bi)); /* the process's library all the same */
  assert_true(bi.name[0] != '\0');
  weft_graph *g = gemm_graph(rt);
  char *text, *json;
  run_stats(g, &text, &json);
  assert_true(tu_contains(json, "\"blas\": null"));
  free(text);
  free(json);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* ---- another BLAS brought by the process ------------------------------------------------------ */

/* The products of 8 independent 112^2 f64 mm nodes on 4 workers, run `runs` times: 1 if every
 * run gives the first run's products bit for bit (the kernels are deterministic). */
static int products_agree(weft_runtime *rt, int runs) {
  enum { K = 8, N = 112 };
  weft_graph *g;
  weft_tensor *y[K];
  static double first[K][N * N], now[N * N];
  if (weft_graph_create(rt, &g) != WEFT_OK) return 0;
  for (int k = 0; k < K; k++) {
    weft_tensor *a, *b;
    y[k] = NULL;
    if (weft_tensor_create(g, NULL, WEFT_F64, 2, (int64_t[]){N, N}, weft_cpu(),
                           weft_uniform(-1, 1, 2 * (uint64_t)k + 1), &a) != WEFT_OK ||
        weft_tensor_create(g, NULL, WEFT_F64, 2, (int64_t[]){N, N}, weft_cpu(),
                           weft_uniform(-1, 1, 2 * (uint64_t)k + 2), &b) != WEFT_OK ||
        weft_mm(g, a, b, &y[k]) != WEFT_OK)
      return 0;
  }
  int agree = 1;
  for (int r = 0; r < runs && agree; r++) {
    if (weft_graph_run(g) != WEFT_OK) agree = 0;
    for (int k = 0; k < K && agree; k++) {
      if (weft_tensor_read(y[k], r == 0 ? first[k] : now, sizeof now) != WEFT_OK) agree = 0;
      if (r > 0 && memcmp(first[k], now, sizeof now) != 0) agree = 0;
    }
  }
  weft_graph_destroy(g);
  return agree;
}

/* The child: run with another BLAS preloaded; prints what it finds, a line each. */
static int blas_child(void) {
  char names[1024];
  printf("threads_at_start=%d\n", thread_count(names, sizeof names));
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 4;
  o.max_gpus = 0;
  o.flags = WEFT_RUNTIME_QUIET;
  weft_runtime *rt;
  weft_blas_info bi;
  if (weft_runtime_create(&o, &rt) != WEFT_OK || weft_runtime_blas_info(rt, &bi) != WEFT_OK) {
    printf("error=%s\n", weft_last_error());
    return 1;
  }
  printf("threading=%s\nthreads=%d\ncompetes=%d\nstopped=%d\nthread_safe=%d\nlibrary=%s\nmessage=%s\n",
         weft_blas_threading_name(bi.threading), bi.threads, bi.competes, bi.stopped, bi.thread_safe,
         bi.library, bi.message);
  printf("threads_after_create=%d\n", thread_count(names, sizeof names));
  weft_graph *g;
  weft_tensor *x, *y = NULL;
  weft_run *run;
  weft_run_stats *st;
  char *text = NULL, *json = NULL;
  size_t len;
  if (weft_graph_create(rt, &g) != WEFT_OK ||
      weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){256, 256}, weft_cpu(),
                         weft_uniform(-1, 1, 1), &x) != WEFT_OK ||
      weft_mm(g, x, x, &y) != WEFT_OK || weft_graph_launch(g, &run) != WEFT_OK ||
      weft_run_wait(run) != WEFT_OK || weft_run_stats_create(run, &st) != WEFT_OK) {
    printf("error=%s\n", weft_last_error());
    return 1;
  }
  FILE *f = open_memstream(&text, &len);
  if (f == NULL || weft_run_stats_write(st, WEFT_REPORT_TEXT, f) != WEFT_OK) return 1;
  fclose(f);
  f = open_memstream(&json, &len);
  if (f == NULL || weft_run_stats_write(st, WEFT_REPORT_JSON, f) != WEFT_OK) return 1;
  fclose(f);
  char note[600];
  snprintf(note, sizeof note, "note: %s\n", bi.message);
  printf("stats_text_note=%d\nstats_json_message=%d\n", bi.message[0] && strstr(text, note) != NULL,
         strstr(json, "\"message\": \"the BLAS library loaded (") != NULL);
  free(text);
  free(json);
  weft_run_stats_destroy(st);
  weft_run_destroy(run);
  weft_graph_destroy(g);
  printf("products_agree=%d\n", products_agree(rt, 1500));
  weft_runtime_destroy(rt);
  return 0;
}

/* Runs this test's executable as the child with `preload` preloaded; returns its output. */
static char *run_child(const char *preload) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(n > 0);
  self[n] = '\0';
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  fflush(stdout);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* The library's own thread count, not one this environment chose. */
    unsetenv("OPENBLAS_NUM_THREADS");
    unsetenv("GOTO_NUM_THREADS");
    unsetenv("OMP_NUM_THREADS");
    setenv("LD_PRELOAD", preload, 1);
    /* Under ASan, a preloaded library comes before the sanitizer's runtime. */
    char asan[512];
    const char *prev = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0:detect_leaks=0", prev ? prev : "",
             prev && *prev ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    execl(self, self, "--blas-child", (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  size_t cap = 4096, len = 0;
  char *out = malloc(cap);
  assert_non_null(out);
  for (ssize_t r; (r = read(fd[0], out + len, cap - len - 1)) > 0;) {
    len += (size_t)r;
    if (cap - len < 2) {
      out = realloc(out, cap *= 2);
      assert_non_null(out);
    }
  }
  out[len] = '\0';
  close(fd[0]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("the child with %s preloaded failed (status %d):\n%s", preload, status, out);
  return out;
}

/* The integer after "key=" at the start of a line of the child's output; fails when there is
 * none. */
static int child_int(const char *out, const char *key) {
  size_t n = strlen(key);
  for (const char *p = out; p != NULL; p = strchr(p, '\n') != NULL ? strchr(p, '\n') + 1 : NULL)
    if (strncmp(p, key, n) == 0 && p[n] == '=') return atoi(p + n + 1);
  fail_msg("no %s= in the child's output:\n%s", key, out);
  return 0;
}

/* The library at `path`, preloaded into a child, or NULL (and the test skipped) when it is not
 * installed here. */
static char *child_with(const char *path, const char *package) {
  if (path[0] == '\0' || access(path, R_OK) != 0) {
    print_message("%s is not installed (%s): this case is not tested here\n", package,
                  path[0] ? path : "not found at configure time");
    skip();
  }
  return run_child(path);
}

static void threaded_blas_is_reported(void **state) {
  (void)state;
  char *out = child_with(WEFT_TEST_PTHREAD_BLAS, "OpenBLAS's pthreads build (libopenblas0-pthread)");
  assert_true(tu_contains(out, "\nthreading=pthreads\n"));
  assert_true(tu_contains(out, "\nlibrary=") && tu_contains(out, "openblas-pthread"));
  assert_int_equal(child_int(out, "thread_safe"), 1);
  assert_int_equal(child_int(out, "products_agree"), 1);
  int threads = child_int(out, "threads");
  if (threads <= 1) {
    print_message("OpenBLAS's pthreads build runs 1 thread here (one core): it starts no "
                  "thread of its own, so there is nothing to report\n");
    assert_int_equal(child_int(out, "competes"), 0);
    free(out);
    skip();
  }
  /* The pool the library started when it loaded is gone before main, stopped when weft loaded,
   * and stays gone once weft's first runtime held the library to one thread a call: the 4
   * workers and the main thread are left, and nothing competes. */
  assert_true(child_int(out, "threads_at_start") <= 1 + SANITIZER_THREADS);
  assert_int_equal(child_int(out, "stopped"), 1);
  assert_int_equal(child_int(out, "competes"), 0);
  assert_true(child_int(out, "threads_after_create") <= 1 + 4 + SANITIZER_THREADS);
  assert_true(tu_contains(out, "\nmessage=\n"));
  free(out);
}

/* Debian 12's serial OpenBLAS is built without USE_LOCKING: reported, and called by one worker
 * at a time, so that concurrent products stay right. */
static void unsafe_serial_openblas_is_reported_and_serialised(void **state) {
  (void)state;
  char *out = child_with(WEFT_TEST_SERIAL_OPENBLAS, "OpenBLAS's serial build (libopenblas0-serial)");
  assert_true(tu_contains(out, "\nthreading=sequential\n"));
  assert_true(tu_contains(out, "openblas-serial"));
  assert_int_equal(child_int(out, "threads_at_start"), 1);
  assert_int_equal(child_int(out, "competes"), 0);
  if (child_int(out, "thread_safe") == 1) {
    print_message("this serial OpenBLAS reports USE_LOCKING: it is thread-safe, nothing to "
                  "report\n");
    free(out);
    skip();
  }
  assert_true(tu_contains(out, "\nmessage=the BLAS library loaded (/"));
  assert_true(tu_contains(out, "built without USE_LOCKING, which is not safe to call from two "
                               "threads at once: weft makes one BLAS call at a time"));
  assert_int_equal(child_int(out, "stats_text_note"), 1);
  assert_int_equal(child_int(out, "stats_json_message"), 1);
  assert_int_equal(child_int(out, "products_agree"), 1);
  free(out);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--blas-child") == 0) return blas_child();
  const struct CMUnitTest tests[] = {
      /* First: it counts the process's threads from the start. */
      cmocka_unit_test(no_blas_thread_at_load_or_gemm),
      cmocka_unit_test(linked_blas_is_loaded_and_reported),
      cmocka_unit_test(info_arguments_and_names),
      cmocka_unit_test(threaded_blas_is_reported),
      cmocka_unit_test(unsafe_serial_openblas_is_reported_and_serialised),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
