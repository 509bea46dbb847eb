/* thread.c — pthreads behind weft's own names. The only file that calls pthread_*.
 * Lock and condition calls cannot fail on valid objects; they abort on a broken invariant
 * rather than return an error nobody could handle. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "sched/thread.h"

#if defined(__SANITIZE_THREAD__)
atomic_int weft__tsan_fence;
#endif

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/util.h"

int weft__mutex_init(weft__mutex *m) {
  return pthread_mutex_init(m, NULL) == 0 ? WEFT_OK : weft__err(WEFT_ENOMEM, "cannot create a mutex");
}
void weft__mutex_destroy(weft__mutex *m) { pthread_mutex_destroy(m); }
void weft__mutex_lock(weft__mutex *m) {
  if (pthread_mutex_lock(m) != 0) abort();
}
void weft__mutex_unlock(weft__mutex *m) {
  if (pthread_mutex_unlock(m) != 0) abort();
}
int weft__cond_init(weft__cond *c) {
  return pthread_cond_init(c, NULL) == 0 ? WEFT_OK : weft__err(WEFT_ENOMEM, "cannot create a condition");
}
void weft__cond_destroy(weft__cond *c) { pthread_cond_destroy(c); }
void weft__cond_wait(weft__cond *c, weft__mutex *m) {
  if (pthread_cond_wait(c, m) != 0) abort();
}
/* The condition's clock is CLOCK_REALTIME (the default attribute): a jump of the wall clock
 * makes one wait shorter or longer, which a caller that re-checks its predicate tolerates. */
void weft__cond_timedwait(weft__cond *c, weft__mutex *m, uint64_t timeout_ns) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t ns = (uint64_t)ts.tv_nsec + timeout_ns % 1000000000u;
  ts.tv_sec += (time_t)(timeout_ns / 1000000000u + ns / 1000000000u);
  ts.tv_nsec = (long)(ns % 1000000000u);
  int rc = pthread_cond_timedwait(c, m, &ts);
  if (rc != 0 && rc != ETIMEDOUT) abort();
}
void weft__cond_signal(weft__cond *c) { pthread_cond_signal(c); }
void weft__cond_broadcast(weft__cond *c) { pthread_cond_broadcast(c); }

int weft__thread_create(weft__thread *t, void *(*fn)(void *), void *arg) {
  int rc = pthread_create(t, NULL, fn, arg);
  if (rc != 0) return weft__err(WEFT_ENOMEM, "cannot start a thread: %s", strerror(rc));
  return WEFT_OK;
}

void weft__thread_join(weft__thread t) { pthread_join(t, NULL); }

int weft__cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

void weft__thread_yield(void) { sched_yield(); }

void weft__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
