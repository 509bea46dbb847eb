/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <stdlib.h>

weft_runtime *tu_runtime(int workers) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = workers;
  o.flags |= WEFT_RUNTIME_QUIET;
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
  return rt;
}

weft_runtime *tu_runtime_cpu(int workers) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = workers;
  o.max_gpus = 0;
  o.flags |= WEFT_RUNTIME_QUIET;
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
  return rt;
}

weft_tensor *tu_matrix(weft_graph *g, const char *name, int64_t r, int64_t c, uint64_t seed) {
  weft_tensor *t = NULL;
  CHECK(weft_tensor_create(g, name, WEFT_F32, 2, (int64_t[]){r, c}, weft_cpu(),
                           weft_uniform(-1, 1, seed), &t));
  return t;
}

/* Each block carries a header so live blocks can be counted. */
static long live, calls, fail_at = -1;
static int failed;

typedef struct hdr {
  size_t size;
  size_t pad;
} hdr;

static void *c_malloc(size_t size, void *user) {
  (void)user;
  long n = __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
  if (n == fail_at) {
    __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  hdr *h = malloc(sizeof *h + size);
  if (h == NULL) return NULL;
  h->size = size;
  __atomic_fetch_add(&live, 1, __ATOMIC_RELAXED);
  return h + 1;
}

static void *c_realloc(void *p, size_t size, void *user) {
  (void)user;
  long n = __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
  if (n == fail_at) {
    __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  hdr *h = realloc((hdr *)p - 1, sizeof *h + size);
  if (h == NULL) return NULL;
  h->size = size;
  return h + 1;
}

static void c_free(void *p, void *user) {
  (void)user;
  __atomic_fetch_sub(&live, 1, __ATOMIC_RELAXED);
  free((hdr *)p - 1);
}

void tu_alloc_install(long at) {
  live = 0;
  calls = 0;
  failed = 0;
  fail_at = at;
  weft_allocator a = {c_malloc, c_realloc, c_free, NULL};
  weft_set_allocator(&a);
}

void tu_alloc_uninstall(void) { weft_set_allocator(NULL); }
long tu_alloc_live(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED); }
long tu_alloc_calls(void) { return __atomic_load_n(&calls, __ATOMIC_RELAXED); }
int tu_alloc_failed(void) { return __atomic_load_n(&failed, __ATOMIC_RELAXED); }
