/* test_util.c — src/util: vectors, the bump arena, status codes and messages (the X-macro
 * list, weft_strerror, weft_status_name, per-thread weft_last_error), the allocator hook, the
 * Philox generator (known answers, determinism, range) and the clock. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "util/clock.h"
#include "util/philox.h"
#include "util/util.h"
#include "weft/report.h"

/* ---- vectors ------------------------------------------------------------------------------ */

static void vec_push_and_index(void **state) {
  (void)state;
  weft__vec v;
  weft__vec_init(&v, sizeof(uint64_t));
  assert_int_equal(v.len, 0);
  for (uint64_t i = 0; i < 10000; i++) {
    uint64_t x = i * 2654435761u;
    assert_int_equal(weft__vec_push(&v, &x), WEFT_OK);
  }
  assert_int_equal(v.len, 10000);
  assert_true(v.cap >= v.len);
  for (uint64_t i = 0; i < 10000; i++) assert_true(WEFT__VEC_AT(&v, uint64_t, i) == i * 2654435761u);
  weft__vec_fini(&v);
  assert_null(v.data);
  assert_int_equal(v.len, 0);
  weft__vec_fini(&v); /* twice is harmless */
}

static void vec_reserve_keeps_contents(void **state) {
  (void)state;
  weft__vec v;
  weft__vec_init(&v, 3); /* an odd element size */
  const char item[3] = {'a', 'b', 'c'};
  for (int i = 0; i < 5; i++) assert_int_equal(weft__vec_push(&v, item), WEFT_OK);
  assert_int_equal(weft__vec_reserve(&v, 1000), WEFT_OK);
  assert_true(v.cap >= 1005);
  size_t cap = v.cap;
  assert_int_equal(weft__vec_reserve(&v, 10), WEFT_OK);
  assert_int_equal(v.cap, cap); /* room already there: no growth */
  for (int i = 0; i < 5; i++) assert_memory_equal((char *)v.data + 3 * i, item, 3);
  weft__vec_fini(&v);
}

static void vec_growth_failure_is_clean(void **state) {
  (void)state;
  tu_alloc_install(-1);
  weft__vec v;
  weft__vec_init(&v, sizeof(int));
  for (int i = 0; i < 16; i++) assert_int_equal(weft__vec_push(&v, &i), WEFT_OK);
  tu_alloc_install(0); /* the next allocation, the growth, fails */
  /* Reinstalling reset the counters; the vector's block is still there. */
  int x = 99;
  assert_int_equal(weft__vec_push(&v, &x), WEFT_ENOMEM);
  assert_true(tu_alloc_failed());
  assert_non_null(strstr(weft_last_error(), "out of host memory"));
  assert_int_equal(v.len, 16);
  for (int i = 0; i < 16; i++) assert_int_equal(WEFT__VEC_AT(&v, int, i), i);
  assert_int_equal(weft__vec_push(&v, &x), WEFT_OK); /* a later try succeeds */
  assert_int_equal(WEFT__VEC_AT(&v, int, 16), 99);
  weft__vec_fini(&v);
  tu_alloc_uninstall();
}

/* ---- arena -------------------------------------------------------------------------------- */

static void arena_alignment_and_disjointness(void **state) {
  (void)state;
  tu_alloc_install(-1);
  weft__arena a;
  weft__arena_init(&a, 1024, NULL);
  enum { N = 2000 };
  static unsigned char *ptrs[N];
  static size_t sizes[N];
  for (int i = 0; i < N; i++) {
    size_t align = (size_t)1 << (i % 7); /* 1 .. 64 */
    size_t size = (size_t)(i * 37 % 300);
    if (i % 97 == 0) size = 5000; /* larger than a chunk */
    unsigned char *p = weft__arena_alloc(&a, size, align);
    assert_non_null(p);
    assert_true(((uintptr_t)p & (align - 1)) == 0);
    memset(p, i & 0xff, size);
    ptrs[i] = p;
    sizes[i] = size;
  }
  /* Every block still holds its own pattern: no two overlap. */
  for (int i = 0; i < N; i++)
    for (size_t k = 0; k < sizes[i]; k++) assert_int_equal(ptrs[i][k], i & 0xff);
  char *s = weft__arena_strdup(&a, "a name");
  assert_string_equal(s, "a name");
  assert_true(tu_alloc_live() > 0);
  weft__arena_fini(&a);
  assert_int_equal(tu_alloc_live(), 0);
  weft__arena_fini(&a); /* twice is harmless */
  tu_alloc_uninstall();
}

static void arena_failure_returns_null_with_message(void **state) {
  (void)state;
  tu_alloc_install(0);
  weft__arena a;
  weft__arena_init(&a, 1024, NULL);
  assert_null(weft__arena_alloc(&a, 16, 8));
  assert_non_null(strstr(weft_last_error(), "out of host memory"));
  tu_alloc_install(0);
  assert_null(weft__arena_strdup(&a, "x"));
  assert_int_equal(tu_alloc_live(), 0);
  weft__arena_fini(&a);
  tu_alloc_uninstall();
  /* Sizes no block can have fail cleanly, whether a chunk exists or not (no wrap-around). */
  weft__arena_init(&a, 1024, NULL);
  assert_null(weft__arena_alloc(&a, SIZE_MAX - 8, 16));
  assert_non_null(strstr(weft_last_error(), "out of host memory"));
  assert_non_null(weft__arena_alloc(&a, 10, 8));
  assert_null(weft__arena_alloc(&a, SIZE_MAX - 8, 16));
  assert_null(weft__arena_alloc(&a, SIZE_MAX / 2 + 1, 1));
  weft__arena_fini(&a);
}

/* A block source that records the sizes asked for and the sizes given back. */
typedef struct size_log {
  size_t got[64], put[64];
  int ngot, nput;
} size_log;

static void *log_get(void *ctx, size_t size) {
  size_log *l = ctx;
  if (l->ngot < 64) l->got[l->ngot++] = size;
  return malloc(size);
}

static void log_put(void *ctx, void *p, size_t size) {
  size_log *l = ctx;
  if (l->nput < 64) l->put[l->nput++] = size;
  free(p);
}

/* An arena's chunks are blocks of a power-of-two size up to 2 MiB, header included, so that each
 * is exactly one size class of the runtime's block pool (a chunk one header larger took the
 * next class, whose warm-up touched twice the pages used); an object larger than a chunk gets a
 * block of its own size. Every block goes back with the size it was asked for. */
static void arena_chunks_fill_power_of_two_blocks(void **state) {
  (void)state;
  size_log log = {0};
  weft__mem mem = {log_get, log_put, &log};
  weft__arena a;
  weft__arena_init(&a, 64 * 1024, &mem);
  for (int i = 0; i < 100000; i++) assert_non_null(weft__arena_alloc(&a, 100, 8));
  assert_non_null(weft__arena_alloc(&a, 3u << 20, 64)); /* larger than any chunk */
  int big = 0;
  for (int i = 0; i < log.ngot; i++) {
    size_t z = log.got[i];
    if (z > (2u << 20)) {
      big++;
      assert_true(z >= (3u << 20) && z <= (3u << 20) + 128);
      continue;
    }
    assert_true(z >= 64 * 1024 && (z & (z - 1)) == 0);
    if (i > 0 && log.got[i - 1] <= (1u << 20)) assert_int_equal(z, 2 * log.got[i - 1]); /* doubling */
  }
  assert_int_equal(big, 1);
  assert_true(log.ngot >= 7); /* 64 KiB ... 2 MiB, then more of 2 MiB: 10 MB of objects */
  weft__arena_fini(&a);
  assert_int_equal(log.nput, log.ngot);
  size_t sum_got = 0, sum_put = 0;
  for (int i = 0; i < log.ngot; i++) sum_got += log.got[i], sum_put += log.put[i];
  assert_int_equal(sum_put, sum_got);
}

/* ---- status codes ------------------------------------------------------------------------- */

typedef struct status_row {
  const char *name;
  int value;
  const char *msg;
} status_row;

static const status_row status_rows[] = {
#define ROW(name, value, msg) {#name, value, msg},
    WEFT_STATUS_MAP(ROW)
#undef ROW
};

static void status_map_generates_names_and_messages(void **state) {
  (void)state;
  size_t n = sizeof status_rows / sizeof status_rows[0];
  assert_true(n >= 20);
  assert_int_equal(WEFT_OK, 0);
  for (size_t i = 0; i < n; i++) {
    const status_row *r = &status_rows[i];
    assert_string_equal(weft_status_name(r->value), r->name);
    assert_string_equal(weft_strerror(r->value), r->msg);
    assert_true(strlen(r->msg) > 0);
    if (i > 0) {
      assert_true(r->value < 0); /* errors are negative */
      assert_int_equal(r->value, status_rows[i - 1].value - 1);
    }
    for (size_t k = 0; k < i; k++) {
      assert_string_not_equal(status_rows[k].name, r->name);
      assert_string_not_equal(status_rows[k].msg, r->msg);
    }
  }
  assert_int_equal(WEFT_ESHAPE, -3);
  assert_string_equal(weft_status_name(WEFT_ESHAPE), "ESHAPE");
  assert_string_equal(weft_strerror(WEFT_ESHAPE), "shape mismatch");
  assert_string_equal(weft_status_name(12345), "UNKNOWN");
  assert_string_equal(weft_status_name(-1000), "UNKNOWN");
  assert_string_equal(weft_strerror(12345), "unknown status");
  assert_string_equal(weft_strerror(WEFT__PENDING), "unknown status");
}

static void err_formats_and_truncates(void **state) {
  (void)state;
  assert_int_equal(weft__err(WEFT_ESHAPE, "node %d '%s': bad", 7, "mm"), WEFT_ESHAPE);
  assert_string_equal(weft_last_error(), "node 7 'mm': bad");
  assert_int_equal(weft__oom("a thing"), WEFT_ENOMEM);
  assert_string_equal(weft_last_error(), "out of host memory while allocating a thing");
  static char big[40000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  assert_int_equal(weft__err(WEFT_EINVAL, "%s", big), WEFT_EINVAL);
  size_t len = strlen(weft_last_error());
  assert_true(len >= 1000 && len < sizeof big - 1); /* truncated, still terminated */
  weft__set_last_error("copied message");
  assert_string_equal(weft_last_error(), "copied message");
  weft__set_last_error(weft_last_error()); /* self-copy is a no-op */
  assert_string_equal(weft_last_error(), "copied message");
}

static void *thread_last_error(void *arg) {
  char *seen = arg;
  snprintf(seen, 64, "%s", weft_last_error()); /* a new thread starts with "" */
  weft_device d;
  int rc = weft_device_parse("tpu:3", &d);
  if (rc != WEFT_EINVAL || strstr(weft_last_error(), "tpu:3") == NULL) seen[0] = '!';
  return NULL;
}

static void last_error_is_per_thread(void **state) {
  (void)state;
  weft__set_last_error("main thread's message");
  char seen[64] = "unset";
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, thread_last_error, seen), 0);
  pthread_join(t, NULL);
  assert_string_equal(seen, "");
  assert_string_equal(weft_last_error(), "main thread's message");
}

/* ---- the allocator hook ------------------------------------------------------------------- */

static void allocations_go_through_the_hook(void **state) {
  (void)state;
  tu_alloc_install(-1);
  void *a = weft__malloc(0), *b = weft__malloc(0);
  assert_non_null(a);
  assert_non_null(b);
  assert_ptr_not_equal(a, b); /* malloc(0) gives unique pointers */
  int *c = weft__calloc(100, sizeof(int));
  assert_non_null(c);
  for (int i = 0; i < 100; i++) assert_int_equal(c[i], 0);
  c = weft__realloc(c, 1000 * sizeof(int));
  assert_non_null(c);
  assert_int_equal(c[99], 0);
  void *d = weft__realloc(NULL, 8); /* realloc(NULL) allocates */
  assert_non_null(d);
  char *s = weft__strdup("weft");
  assert_string_equal(s, "weft");
  assert_null(weft__calloc(SIZE_MAX / 2, 4)); /* overflow is refused, not wrapped */
  assert_int_equal(tu_alloc_live(), 5);
  for (size_t al = 1; al <= 4096; al *= 2) {
    void *p = weft__aligned_alloc(al, 100);
    assert_non_null(p);
    assert_true(((uintptr_t)p & (al - 1)) == 0);
    memset(p, 0xab, 100);
    weft__aligned_free(p);
  }
  weft__aligned_free(NULL);
  assert_null(weft__aligned_alloc(64, SIZE_MAX - 8));
  weft__free(a);
  weft__free(b);
  weft__free(c);
  weft__free(d);
  weft__free(s);
  weft__free(NULL);
  assert_int_equal(tu_alloc_live(), 0);
  assert_int_equal(tu_alloc_calls(), 6 + 13);
  tu_alloc_uninstall();
  long calls = tu_alloc_calls();
  void *p = weft__malloc(10); /* back on the C library */
  assert_int_equal(tu_alloc_calls(), calls);
  weft__free(p);
}

static void every_site_of_the_hook_can_fail(void **state) {
  (void)state;
  tu_alloc_install(0);
  assert_null(weft__malloc(1));
  assert_true(tu_alloc_failed());
  tu_alloc_install(0);
  assert_null(weft__calloc(2, 2));
  tu_alloc_install(0);
  assert_null(weft__strdup("x"));
  tu_alloc_install(0);
  assert_null(weft__aligned_alloc(64, 10));
  tu_alloc_install(1);
  void *p = weft__malloc(4);
  assert_non_null(p);
  assert_null(weft__realloc(p, 4000)); /* the old block survives a failed realloc */
  weft__free(p);
  assert_int_equal(tu_alloc_live(), 0);
  tu_alloc_uninstall();
}

/* ---- Philox ------------------------------------------------------------------------------- */

/* An independent Philox-4x32-10 over the full 4-word counter (Random123's definition), to
 * check weft's (counter words 2 and 3 are zero there). */
static void ref_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
    uint32_t n[4] = {(uint32_t)(p1 >> 32) ^ c[1] ^ k0, (uint32_t)p1, (uint32_t)(p0 >> 32) ^ c[3] ^ k1,
                     (uint32_t)p0};
    memcpy(c, n, sizeof c);
  }
  memcpy(out, c, sizeof c);
}

static void philox_known_answers(void **state) {
  (void)state;
  /* Random123's kat_vectors for philox4x32_10. */
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int i = 0; i < 3; i++) {
    uint32_t out[4];
    ref_philox(kat[i], kat[i] + 4, out);
    assert_memory_equal(out, kat[i] + 6, sizeof out);
  }
  weft__philox_block b = weft__philox4x32_10(0, 0);
  assert_memory_equal(b.v, kat[0] + 6, sizeof b.v);
  /* weft's generator is the reference one with counter words 2 and 3 at zero. */
  for (uint64_t i = 0; i < 2000; i++) {
    uint64_t counter = i * 0x9E3779B97F4A7C15ull, seed = i * 7919 + (i << 40);
    uint32_t ctr[4] = {(uint32_t)counter, (uint32_t)(counter >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, out[4];
    ref_philox(ctr, key, out);
    b = weft__philox4x32_10(counter, seed);
    assert_memory_equal(b.v, out, sizeof out);
  }
}

static void philox_uniforms(void **state) {
  (void)state;
  double s1 = 0, s2 = 0, same = 0;
  enum { N = 100000 };
  for (uint64_t i = 0; i < N; i++) {
    double u1, u2, v1, v2, w1, w2;
    weft__philox_uniform2(i, 42, &u1, &u2);
    weft__philox_uniform2(i, 42, &v1, &v2);
    weft__philox_uniform2(i, 43, &w1, &w2);
    assert_true(u1 == v1 && u2 == v2); /* a function of (i, seed) only */
    assert_true(u1 >= 0 && u1 < 1 && u2 >= 0 && u2 < 1);
    same += (u1 == w1);
    s1 += u1;
    s2 += u2;
  }
  assert_true(same < 3); /* another seed, another stream */
  assert_true(fabs(s1 / N - 0.5) < 0.01);
  assert_true(fabs(s2 / N - 0.5) < 0.01);
}

static void clock_is_monotonic(void **state) {
  (void)state;
  uint64_t a = weft__now_ns(), b = weft__now_ns();
  assert_true(b >= a);
  assert_true(a > 0);
  /* The public clock is the timing clock, on the CLOCK_MONOTONIC epoch: within a millisecond
   * of it (its calibration error is far below that), and monotonic. */
  uint64_t c = weft_clock_ns(), d = weft__now_ns(), e = weft_clock_ns();
  assert_true(e >= c);
  assert_true(c < d + 1000000 && d < e + 1000000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(vec_push_and_index),
      cmocka_unit_test(vec_reserve_keeps_contents),
      cmocka_unit_test(vec_growth_failure_is_clean),
      cmocka_unit_test(arena_alignment_and_disjointness),
      cmocka_unit_test(arena_failure_returns_null_with_message),
      cmocka_unit_test(arena_chunks_fill_power_of_two_blocks),
      cmocka_unit_test(status_map_generates_names_and_messages),
      cmocka_unit_test(err_formats_and_truncates),
      cmocka_unit_test(last_error_is_per_thread),
      cmocka_unit_test(allocations_go_through_the_hook),
      cmocka_unit_test(every_site_of_the_hook_can_fail),
      cmocka_unit_test(philox_known_answers),
      cmocka_unit_test(philox_uniforms),
      cmocka_unit_test(clock_is_monotonic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
