/* thread.h — the one wrapper around pthreads (mutex, condition, thread, core count).
 * Everything else in weft takes locks and starts threads through these calls. */
#ifndef WEFT_THREAD_H
#define WEFT_THREAD_H

#include <pthread.h>
#include <stdint.h>

typedef pthread_mutex_t weft__mutex;
typedef pthread_cond_t weft__cond;
typedef pthread_t weft__thread;

/* A mutex of static storage, ready without weft__mutex_init. */
#define WEFT__MUTEX_INITIALIZER PTHREAD_MUTEX_INITIALIZER

int weft__mutex_init(weft__mutex *m);
void weft__mutex_destroy(weft__mutex *m);
void weft__mutex_lock(weft__mutex *m);
void weft__mutex_unlock(weft__mutex *m);
int weft__cond_init(weft__cond *c);
void weft__cond_destroy(weft__cond *c);
void weft__cond_wait(weft__cond *c, weft__mutex *m);
/* Waits at most timeout_ns (or until signalled, or spuriously): callers re-check. */
void weft__cond_timedwait(weft__cond *c, weft__mutex *m, uint64_t timeout_ns);
void weft__cond_signal(weft__cond *c);
void weft__cond_broadcast(weft__cond *c);
/* Starts fn(arg) on a new thread; WEFT_OK or an error with a message. */
int weft__thread_create(weft__thread *t, void *(*fn)(void *), void *arg);
void weft__thread_join(weft__thread t);
/* Cores this process may run on. */
int weft__cpu_count(void);
/* Gives the core to another thread. */
void weft__thread_yield(void);
/* A pause instruction for spin loops. */
void weft__cpu_relax(void);

/* A sequentially consistent fence. ThreadSanitizer does not model fences, so under it the
 * fence is a seq_cst read-modify-write of one shared variable, which orders the two sides of
 * a pairing (both sides use this call) as the fences do, in a way it sees. */
#if defined(__SANITIZE_THREAD__)
#include <stdatomic.h>
extern atomic_int weft__tsan_fence;
#define WEFT__FENCE() ((void)atomic_fetch_add_explicit(&weft__tsan_fence, 0, memory_order_seq_cst))
#else
#define WEFT__FENCE() atomic_thread_fence(memory_order_seq_cst)
#endif

#endif
