/* alloc.c — every host allocation of weft, through one replaceable hook.
 *
 * The hook exists for the tests: they install an allocator that fails the Nth call, for every
 * N, and check that each failure gives a clean error and leaks nothing. The hook is global
 * and read without a lock, so it may only be changed while no weft object exists. */
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

static void *libc_malloc(size_t size, void *user) {
  (void)user;
  return malloc(size);
}
static void *libc_realloc(void *p, size_t size, void *user) {
  (void)user;
  return realloc(p, size);
}
static void libc_free(void *p, void *user) {
  (void)user;
  free(p);
}

static weft_allocator hook = {libc_malloc, libc_realloc, libc_free, NULL};

void weft_set_allocator(const weft_allocator *a) {
  if (a == NULL) {
    hook = (weft_allocator){libc_malloc, libc_realloc, libc_free, NULL};
  } else {
    hook = *a;
  }
}

void *weft__malloc(size_t size) { return hook.malloc_fn(size ? size : 1, hook.user); }

void *weft__calloc(size_t n, size_t size) {
  if (size != 0 && n > SIZE_MAX / size) return NULL;
  void *p = weft__malloc(n * size);
  if (p != NULL) memset(p, 0, n * size);
  return p;
}

void *weft__realloc(void *p, size_t size) {
  if (p == NULL) return weft__malloc(size);
  return hook.realloc_fn(p, size ? size : 1, hook.user);
}

void weft__free(void *p) {
  if (p != NULL) hook.free_fn(p, hook.user);
}

char *weft__strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = weft__malloc(n);
  if (d != NULL) memcpy(d, s, n);
  return d;
}

/* The aligned block keeps the pointer the hook returned just before the aligned address. */
void *weft__aligned_alloc(size_t alignment, size_t size) {
  if (size > SIZE_MAX - alignment - sizeof(void *)) return NULL;
  char *raw = weft__malloc(size + alignment + sizeof(void *));
  if (raw == NULL) return NULL;
  uintptr_t start = (uintptr_t)(raw + sizeof(void *));
  uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t)(alignment - 1);
  ((void **)aligned)[-1] = raw;
  return (void *)aligned;
}

void weft__aligned_free(void *p) {
  if (p != NULL) weft__free(((void **)p)[-1]);
}
