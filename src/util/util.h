/* util.h — internal helpers shared by every module: the allocation hook, error messages,
 * growable vectors and a bump arena. Nothing here knows about graphs, threads or devices.
 *
 * Errors: a failing internal call returns a negative weft status and has already written the
 * message with weft__err(); the public entry point returns that status unchanged, so the
 * message the user sees in weft_last_error() is the innermost, most precise one. */
#ifndef WEFT_UTIL_H
#define WEFT_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "weft/weft.h"

#if defined(__GNUC__) || defined(__clang__)
#define WEFT__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define WEFT__LIKELY(x) __builtin_expect(!!(x), 1)
#define WEFT__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define WEFT__PREFETCH(p) __builtin_prefetch(p)
#if defined(__x86_64__)
/* For a line about to be written: PREFETCHW takes it exclusive in one step (a read prefetch
 * takes it shared, and the store then asks again). CPUs older than it decode it as a NOP. */
#define WEFT__PREFETCHW(p) __asm__ volatile("prefetchw %0" : : "m"(*(const char *)(p)))
#else
#define WEFT__PREFETCHW(p) __builtin_prefetch(p, 1)
#endif
#else
#define WEFT__PREFETCHW(p) ((void)(p))
#define WEFT__PRINTF(a, b)
#define WEFT__LIKELY(x) (x)
#define WEFT__UNLIKELY(x) (x)
#define WEFT__PREFETCH(p) ((void)(p))
#endif

/* How many objects ahead a pass over a graph's tensors or nodes asks for them (WEFT__PREFETCH):
 * a large graph was built a while ago and has left the cache, and a pass whose every step
 * waits for one object's cache miss runs at the memory's latency, not its bandwidth. */
enum { WEFT__AHEAD = 16 };

#ifdef NDEBUG
#define WEFT_ASSERT(x) ((void)0)
#else
#include <assert.h>
#define WEFT_ASSERT(x) assert(x)
#endif

#define WEFT__CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#define WEFT__MIN(a, b) ((a) < (b) ? (a) : (b))
#define WEFT__MAX(a, b) ((a) > (b) ? (a) : (b))

/* Status returned by an async backend launch: the node's work is enqueued and its completion
 * will be reported later through weft__sched_complete. Never reaches the user. */
#define WEFT__PENDING 1
/* Status returned by an async backend launch: the backend took the node and will enqueue it
 * later (another thread holds the stream, backends/backend.h), then report through
 * weft__sched_issued. Never reaches the user. */
#define WEFT__DEFERRED 2
/* Status a transport reports through weft__sched_complete for a node whose input another
 * process did not compute (a failure or a cancel there): its successors are skipped, and the
 * run's error is the one that process reports, not this node's. Never reaches the user. */
#define WEFT__UPSTREAM 4

/* Allocation through the user's hook. weft__malloc(0) returns a unique non-NULL pointer. */
void *weft__malloc(size_t size);
void *weft__calloc(size_t n, size_t size);
void *weft__realloc(void *p, size_t size);
void weft__free(void *p);
char *weft__strdup(const char *s);
/* Aligned allocation (alignment a power of two, <= 4096) through the same hook. */
void *weft__aligned_alloc(size_t alignment, size_t size);
void weft__aligned_free(void *p);

/* Records the calling thread's error message and returns `status`. */
int weft__err(int status, const char *fmt, ...) WEFT__PRINTF(2, 3);
int weft__verr(int status, const char *fmt, va_list ap);
/* Records an out-of-memory error for `what` and returns WEFT_ENOMEM. */
int weft__oom(const char *what);
/* Copies `msg` as the calling thread's error message. */
void weft__set_last_error(const char *msg);

/* A source of large blocks that may recycle them (the runtime's block pool, so that building
 * and destroying graph after graph does not fault fresh pages in each time). NULL means the
 * allocation hook directly. `put` takes the size given to `get`. `ahead` (may be NULL) is a
 * hint that a block of `size` bytes will likely be asked for soon (a vector's next growth),
 * which the source may prepare meanwhile. */
typedef struct weft__mem {
  void *(*get)(void *ctx, size_t size);
  void (*put)(void *ctx, void *p, size_t size);
  void *ctx;
  void (*ahead)(void *ctx, size_t size);
} weft__mem;

void *weft__mem_get(const weft__mem *m, size_t size);
void weft__mem_put(const weft__mem *m, void *p, size_t size);
void weft__mem_ahead(const weft__mem *m, size_t size);

/* A task for a worker with nothing else to do (the pool's background tasks, sched/pool.c): fn(t)
 * runs once, on a worker, or at the pool's end on the thread that destroys it. The task is the
 * caller's memory until fn runs. */
typedef struct weft__bgtask {
  void (*fn)(struct weft__bgtask *t);
  struct weft__bgtask *next;
} weft__bgtask;

/* Idle workers for a layer below the scheduler (the graph's analysis follows a large build on
 * one): post(ctx, t) queues t as a background task; busy(ctx) says whether a run is in flight
 * (a background task gives way to it); relax and yield are for spinning. */
typedef struct weft__spare {
  void (*post)(void *ctx, weft__bgtask *t);
  int (*busy)(void *ctx);
  void *ctx;
  void (*relax)(void);
  void (*yield)(void);
} weft__spare;

/* Growable vector of fixed-size elements. */
typedef struct weft__vec {
  void *data;
  size_t len, cap, elem;
  const weft__mem *mem;
} weft__vec;

void weft__vec_init(weft__vec *v, size_t elem);
/* A vector whose storage comes from `mem`. */
void weft__vec_init_mem(weft__vec *v, size_t elem, const weft__mem *mem);
void weft__vec_fini(weft__vec *v);
/* Grows v to room for `extra` more elements: weft__vec_reserve's slow path. */
int weft__vec_grow(weft__vec *v, size_t extra);
/* Makes room for `extra` more elements; WEFT_OK or WEFT_ENOMEM (message set). Inline, as
 * weft__vec_push: building a graph reserves and pushes a few times a node and a tensor, and
 * the calls were a tenth of the build's time. */
static inline int weft__vec_reserve(weft__vec *v, size_t extra) {
  return v->len + extra <= v->cap ? WEFT_OK : weft__vec_grow(v, extra);
}
/* Appends one element of `size` bytes (the vector's), copied from `item`. */
static inline int weft__vec_push_n(weft__vec *v, const void *item, size_t size) {
  WEFT_ASSERT(size == v->elem);
  if (v->len == v->cap) {
    int rc = weft__vec_grow(v, 1);
    if (rc != WEFT_OK) return rc;
  }
  memcpy((char *)v->data + v->len * size, item, size);
  v->len++;
  return WEFT_OK;
}
/* Appends one element (copied from `item`). */
static inline int weft__vec_push(weft__vec *v, const void *item) { return weft__vec_push_n(v, item, v->elem); }
/* Appends the object `x` (an lvalue of the vector's element type): its size known where it is
 * pushed, the copy is a store, not the library call a memcpy of v->elem bytes was (the pushes
 * of a graph's build: a tenth of a small node's). */
#define WEFT__VEC_PUSH(v, x) weft__vec_push_n((v), &(x), sizeof(x))
#define WEFT__VEC_AT(v, type, i) (((type *)(v)->data)[i])

/* qsort comparators of unsigned integers, ascending. */
int weft__cmp_u32(const void *a, const void *b);
int weft__cmp_u64(const void *a, const void *b);

/* Bump arena: many small allocations freed together. Chunks come from weft__malloc. */
typedef struct weft__arena {
  struct weft__arena_chunk *head;
  size_t chunk_size; /* the next chunk's block size (header included); doubles up to 2 MiB */
  const weft__mem *mem;
} weft__arena;

/* `mem` may be NULL (the allocation hook). */
void weft__arena_init(weft__arena *a, size_t chunk_size, const weft__mem *mem);
void weft__arena_fini(weft__arena *a);
/* Returns `size` bytes aligned to `align` (a power of two <= 64), or NULL (message set). */
void *weft__arena_alloc(weft__arena *a, size_t size, size_t align);
char *weft__arena_strdup(weft__arena *a, const char *s);

/* Kahn's topological order of a graph of n nodes given as successor lists (CSR: node v's
 * successors are succ[off[v] .. off[v + 1])): roots in ascending order, then first in first
 * out. Writes the nodes into order and returns how many it could order (n unless there is a
 * cycle). indeg is scratch of n entries. */
uint32_t weft__topo_order(uint32_t n, const uint32_t *off, const uint32_t *succ, uint32_t *indeg, uint32_t *order);

#endif
