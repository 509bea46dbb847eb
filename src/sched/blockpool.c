/* blockpool.c — the runtime's recycler of large blocks (graph arenas, vectors, plans).
 *
 * Building a graph of 100 000 nodes touches tens of megabytes; freeing them at destroy hands
 * the pages back to the kernel, and the next graph faults them in again, zeroed, at a cost
 * comparable to the whole scheduling work. Like Taskflow's object pools, the runtime keeps
 * the blocks instead: sizes from 64 KiB up are rounded to a power of two and kept on a free
 * list per size class, up to CACHE_CAP bytes in all; smaller requests go to the allocation
 * hook. One mutex guards the lists (a leaf lock); blocks are taken a few times per graph, not
 * per node. */
#include "sched/sched.h"

enum { MIN_CLASS = 16, MAX_CLASS = 40 };
#define CACHE_CAP ((size_t)256 << 20)

struct weft__blockpool {
  weft__mutex lock;
  void *free[MAX_CLASS + 1];
  size_t cached;
  weft__mem mem;
};

static int class_of(size_t size) {
  int c = MIN_CLASS;
  while (c < MAX_CLASS && ((size_t)1 << c) < size) c++;
  return c;
}

static void *pool_get(void *ctx, size_t size) {
  weft__blockpool *p = ctx;
  if (size < ((size_t)1 << MIN_CLASS) || size > ((size_t)1 << MAX_CLASS)) return weft__malloc(size);
  int c = class_of(size);
  weft__mutex_lock(&p->lock);
  void *b = p->free[c];
  if (b != NULL) {
    p->free[c] = *(void **)b;
    p->cached -= (size_t)1 << c;
  }
  weft__mutex_unlock(&p->lock);
  return b != NULL ? b : weft__malloc((size_t)1 << c);
}

static void pool_put(void *ctx, void *b, size_t size) {
  weft__blockpool *p = ctx;
  if (size < ((size_t)1 << MIN_CLASS) || size > ((size_t)1 << MAX_CLASS)) {
    weft__free(b);
    return;
  }
  int c = class_of(size);
  weft__mutex_lock(&p->lock);
  if (p->cached + ((size_t)1 << c) <= CACHE_CAP) {
    *(void **)b = p->free[c];
    p->free[c] = b;
    p->cached += (size_t)1 << c;
    b = NULL;
  }
  weft__mutex_unlock(&p->lock);
  weft__free(b);
}

int weft__blockpool_create(weft__blockpool **out) {
  weft__blockpool *p = weft__calloc(1, sizeof *p);
  if (p == NULL) return weft__oom("the block pool");
  int rc = weft__mutex_init(&p->lock);
  if (rc != WEFT_OK) {
    weft__free(p);
    return rc;
  }
  p->mem = (weft__mem){pool_get, pool_put, p};
  *out = p;
  return WEFT_OK;
}

const weft__mem *weft__blockpool_mem(weft__blockpool *p) { return &p->mem; }

void weft__blockpool_destroy(weft__blockpool *p) {
  if (p == NULL) return;
  for (int c = 0; c <= MAX_CLASS; c++) {
    void *b = p->free[c];
    while (b != NULL) {
      void *next = *(void **)b;
      weft__free(b);
      b = next;
    }
  }
  weft__mutex_destroy(&p->lock);
  weft__free(p);
}
