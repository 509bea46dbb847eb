/* containers.c — growable vectors and the bump arena.
 *
 * The arena serves the graph's many small objects (tensors, nodes, names, access lists): one
 * pointer bump per object instead of a malloc, and one walk over the chunks to free them. */
#include <string.h>

#include "util/util.h"

void *weft__mem_get(const weft__mem *m, size_t size) {
  return m != NULL ? m->get(m->ctx, size) : weft__malloc(size);
}

void weft__mem_ahead(const weft__mem *m, size_t size) {
  if (m != NULL && m->ahead != NULL) m->ahead(m->ctx, size);
}

void weft__mem_put(const weft__mem *m, void *p, size_t size) {
  if (p == NULL) return;
  if (m != NULL)
    m->put(m->ctx, p, size);
  else
    weft__free(p);
}

int weft__cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

int weft__cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

void weft__vec_init_mem(weft__vec *v, size_t elem, const weft__mem *mem) {
  v->data = NULL;
  v->len = v->cap = 0;
  v->elem = elem;
  v->mem = mem;
}

void weft__vec_init(weft__vec *v, size_t elem) { weft__vec_init_mem(v, elem, NULL); }

void weft__vec_fini(weft__vec *v) {
  weft__mem_put(v->mem, v->data, v->cap * v->elem);
  v->data = NULL;
  v->len = v->cap = 0;
}

int weft__vec_grow(weft__vec *v, size_t extra) {
  if (v->len + extra <= v->cap) return WEFT_OK;
  size_t cap = v->cap ? v->cap : 16;
  /* Fourfold: a graph's vectors grow with the graph, and each growth copies what they hold (at
   * twofold, building a graph copied its vectors' contents about once over, 5% of the wave
   * graph's build and first run; at fourfold a third as much). The room not yet used is never
   * written. */
  while (cap < v->len + extra) cap *= 4;
  void *d;
  if (v->mem == NULL) {
    d = weft__realloc(v->data, cap * v->elem);
  } else {
    d = weft__mem_get(v->mem, cap * v->elem);
    if (d != NULL && v->len) memcpy(d, v->data, v->len * v->elem);
    if (d != NULL) weft__mem_put(v->mem, v->data, v->cap * v->elem);
  }
  if (d == NULL) return weft__oom("a vector");
  v->data = d;
  v->cap = cap;
  /* The next growth's block, prepared while this one fills (the block pool warms large ones on
   * idle workers). */
  if (v->mem != NULL && cap <= SIZE_MAX / 4 / v->elem) weft__mem_ahead(v->mem, 4 * cap * v->elem);
  return WEFT_OK;
}

struct weft__arena_chunk {
  struct weft__arena_chunk *next;
  size_t used, size;
  size_t ahead; /* the lines before this offset have been asked for (weft__arena_alloc) */
  unsigned char mem[]; /* aligned by hand: the block is only as aligned as malloc makes it */
};

void weft__arena_init(weft__arena *a, size_t chunk_size, const weft__mem *mem) {
  a->head = NULL;
  a->chunk_size = chunk_size;
  a->mem = mem;
}

void weft__arena_fini(weft__arena *a) {
  struct weft__arena_chunk *c = a->head;
  while (c != NULL) {
    struct weft__arena_chunk *next = c->next;
    weft__mem_put(a->mem, c, sizeof *c + c->size);
    c = next;
  }
  a->head = NULL;
}

/* Chunks are blocks of a power-of-two size, header and alignment slack inside, so that each is
 * exactly one size class of the runtime's block pool (blockpool.c): a chunk of 64 KiB plus its
 * header took a block of 128 KiB, whose warm-up touched twice the pages the chunk uses. */
enum { ARENA_BLOCK_MAX = 2u << 20 };

/* A builder fills its arena front to back, each object's fields written once, and on the GPU
 * hosts a core's stream of stores to lines it does not hold is slow (docs/architecture.md,
 * "Building a graph"), the more so when another core wrote them last: a graph's blocks come
 * back from the block pool with lines the previous graph's run wrote on the workers. So the
 * arena asks for every line of a chunk, once, ARENA_AHEAD bytes before an allocation reaches
 * it, and asks to write it (PREFETCHW takes the line exclusive in one step). On the 16-core
 * host: bench_overhead's wave, 90 000 tensors and calls a graph, 137-224 ns a task in all
 * against 252 with two lines read-prefetched 1 KiB ahead of each allocation (three calls);
 * bench_build's warm graphs built in 136 ns a node against 263. */
enum { ARENA_AHEAD = 2048 };

/* Asks for the chunk's lines up to ARENA_AHEAD bytes past `end`, those not asked for yet. An
 * allocation that ends past them (a chunk's first, or one larger than the window: a large
 * parameter block, which its caller writes front to back, as the hardware's prefetchers follow)
 * is not asked for itself. */
static inline void arena_ahead(struct weft__arena_chunk *c, size_t end) {
  size_t to = end + ARENA_AHEAD < c->size ? end + ARENA_AHEAD : c->size;
  if (c->ahead < end) c->ahead = end & ~(size_t)63;
  for (; c->ahead < to; c->ahead += 64) WEFT__PREFETCHW(c->mem + c->ahead);
}

void *weft__arena_alloc(weft__arena *a, size_t size, size_t align) {
  /* No block that large can exist, and the offset and chunk arithmetic below would wrap. */
  if (size > SIZE_MAX / 2) {
    weft__err(WEFT_ENOMEM, "out of host memory: %zu bytes of graph storage asked for", size);
    return NULL;
  }
  struct weft__arena_chunk *c = a->head;
  if (c != NULL) {
    /* Align the address, not the offset: the chunk itself is only as aligned as the block the
     * allocator gave (16 bytes from malloc). */
    uintptr_t base = (uintptr_t)c->mem;
    size_t off = (size_t)(((base + c->used + align - 1) & ~(uintptr_t)(align - 1)) - base);
    if (off + size <= c->size) {
      c->used = off + size;
      arena_ahead(c, c->used);
      return c->mem + off;
    }
  }
  /* Room to align the first object by hand: the block need not be aligned as the object is. */
  size_t block = a->chunk_size;
  if (sizeof *c + size + align > block) block = sizeof *c + size + align;
  if (a->chunk_size < ARENA_BLOCK_MAX) a->chunk_size = a->chunk_size < ARENA_BLOCK_MAX / 2 ? a->chunk_size * 2 : ARENA_BLOCK_MAX;
  c = weft__mem_get(a->mem, block);
  if (c == NULL) {
    weft__oom("graph storage");
    return NULL;
  }
  c->size = block - sizeof *c;
  c->next = a->head;
  a->head = c;
  uintptr_t base = (uintptr_t)c->mem;
  size_t off = ((base + align - 1) & ~(uintptr_t)(align - 1)) - base;
  c->used = off + size;
  c->ahead = off & ~(size_t)63;
  arena_ahead(c, c->used);
  return c->mem + off;
}

char *weft__arena_strdup(weft__arena *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = weft__arena_alloc(a, n, 1);
  if (d != NULL) memcpy(d, s, n);
  return d;
}
