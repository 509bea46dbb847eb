/* wsq.h — a work-stealing deque of pointers (Chase & Lev, SPAA'05; the C11 formulation of
 * Lê et al., PPoPP'13), in the manner of Taskflow's wsq.hpp.
 *
 * The owner pushes and takes at the bottom; thieves steal at the top. Orders are stronger than
 * the paper's fence-based version in two places, so that ThreadSanitizer (which does not model
 * standalone fences) can check it: `bottom` is stored with release in push and with seq_cst
 * in take, and `top` and `bottom` are loaded seq_cst in steal.
 *   push:  the release store of bottom publishes the slot written before it to a thief that
 *          loads bottom with acquire (seq_cst includes it).
 *   take:  bottom := b-1 (seq_cst) then load top (seq_cst): total order with a thief's load of
 *          top then bottom, so at most one of them sees the last item as available; the CAS
 *          on top settles the tie.
 *   steal: CAS on top (seq_cst) claims the slot read just before it.
 * Arrays grow by doubling; a thief may still read an old one, so old arrays are kept until the
 * deque is destroyed. Owner-only calls: push, take. Any thread: steal, empty. */
#ifndef WEFT_WSQ_H
#define WEFT_WSQ_H

#include <stdatomic.h>
#include <stdint.h>

#include "util/util.h"

typedef struct weft__wsq_array {
  int64_t size; /* a power of two */
  struct weft__wsq_array *prev;
  _Atomic(void *) slot[];
} weft__wsq_array;

typedef struct weft__wsq {
  _Alignas(64) atomic_int_fast64_t top;
  _Alignas(64) atomic_int_fast64_t bottom;
  _Atomic(weft__wsq_array *) array;
} weft__wsq;

#define WEFT__WSQ_EMPTY ((void *)0)
#define WEFT__WSQ_ABORT ((void *)1)

static inline weft__wsq_array *weft__wsq_array_new(int64_t size) {
  weft__wsq_array *a = weft__malloc(sizeof *a + (size_t)size * sizeof(void *));
  if (a == NULL) return NULL;
  a->size = size;
  a->prev = NULL;
  for (int64_t i = 0; i < size; i++) atomic_init(&a->slot[i], NULL);
  return a;
}

static inline int weft__wsq_init(weft__wsq *q, int64_t size) {
  atomic_init(&q->top, 0);
  atomic_init(&q->bottom, 0);
  weft__wsq_array *a = weft__wsq_array_new(size);
  if (a == NULL) return weft__oom("a work queue");
  atomic_init(&q->array, a);
  return WEFT_OK;
}

static inline void weft__wsq_fini(weft__wsq *q) {
  weft__wsq_array *a = atomic_load_explicit(&q->array, memory_order_relaxed);
  while (a != NULL) {
    weft__wsq_array *p = a->prev;
    weft__free(a);
    a = p;
  }
}

/* Returns WEFT_OK, or WEFT_ENOMEM if the deque had to grow and could not (item not pushed). */
static inline int weft__wsq_push(weft__wsq *q, void *item) {
  int64_t b = atomic_load_explicit(&q->bottom, memory_order_relaxed);
  int64_t t = atomic_load_explicit(&q->top, memory_order_acquire);
  weft__wsq_array *a = atomic_load_explicit(&q->array, memory_order_relaxed);
  if (WEFT__UNLIKELY(b - t > a->size - 1)) {
    weft__wsq_array *n = weft__wsq_array_new(a->size * 2);
    if (n == NULL) return WEFT_ENOMEM;
    for (int64_t i = t; i < b; i++)
      atomic_store_explicit(&n->slot[i & (n->size - 1)],
                            atomic_load_explicit(&a->slot[i & (a->size - 1)], memory_order_relaxed),
                            memory_order_relaxed);
    n->prev = a;
    /* Release: a thief that loads the new array sees its slots. */
    atomic_store_explicit(&q->array, n, memory_order_release);
    a = n;
  }
  atomic_store_explicit(&a->slot[b & (a->size - 1)], item, memory_order_relaxed);
  atomic_store_explicit(&q->bottom, b + 1, memory_order_release);
  return WEFT_OK;
}

static inline void *weft__wsq_take(weft__wsq *q) {
  int64_t b = atomic_load_explicit(&q->bottom, memory_order_relaxed) - 1;
  weft__wsq_array *a = atomic_load_explicit(&q->array, memory_order_relaxed);
  atomic_store_explicit(&q->bottom, b, memory_order_seq_cst);
  int64_t t = atomic_load_explicit(&q->top, memory_order_seq_cst);
  void *item = WEFT__WSQ_EMPTY;
  if (t <= b) {
    item = atomic_load_explicit(&a->slot[b & (a->size - 1)], memory_order_relaxed);
    if (t == b) {
      /* The last item: race the thieves for it. */
      if (!atomic_compare_exchange_strong_explicit(&q->top, &t, t + 1, memory_order_seq_cst,
                                                   memory_order_relaxed))
        item = WEFT__WSQ_EMPTY;
      atomic_store_explicit(&q->bottom, b + 1, memory_order_relaxed);
    }
  } else {
    atomic_store_explicit(&q->bottom, b + 1, memory_order_relaxed);
  }
  return item;
}

static inline void *weft__wsq_steal(weft__wsq *q) {
  int64_t t = atomic_load_explicit(&q->top, memory_order_seq_cst);
  int64_t b = atomic_load_explicit(&q->bottom, memory_order_seq_cst);
  if (t >= b) return WEFT__WSQ_EMPTY;
  weft__wsq_array *a = atomic_load_explicit(&q->array, memory_order_acquire);
  void *item = atomic_load_explicit(&a->slot[t & (a->size - 1)], memory_order_relaxed);
  if (!atomic_compare_exchange_strong_explicit(&q->top, &t, t + 1, memory_order_seq_cst,
                                               memory_order_relaxed))
    return WEFT__WSQ_ABORT;
  return item;
}

static inline int weft__wsq_empty(weft__wsq *q) {
  int64_t t = atomic_load_explicit(&q->top, memory_order_relaxed);
  int64_t b = atomic_load_explicit(&q->bottom, memory_order_relaxed);
  return b <= t;
}

#endif
