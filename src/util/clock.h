/* clock.h — weft's one clock: nanoseconds on the CLOCK_MONOTONIC epoch. weft__now_ns reads
 * CLOCK_MONOTONIC itself (spin limits, progress, anything that needs no calibration);
 * weft__clock_now is the time base of node timing, cheap enough to read once for every node
 * (sched/dispatch.c, run_node), and what weft_clock_ns (weft/report.h) gives users and the
 * command.
 *
 * Where the CPU has an invariant TSC (x86-64 with CPUID 0x80000007 EDX bit 8: constant rate,
 * running through sleep states, synchronised across cores), a read is one rdtsc and one
 * multiply: ns = ns0 + (tsc - tsc0) * mult / 2^32, which costs less than a call to
 * clock_gettime(CLOCK_MONOTONIC) and so less on every timed node (docs/benchmarks.md, "What
 * node timing costs", has both clocks and the bench_overhead figures). Elsewhere the clock is
 * clock_gettime(CLOCK_MONOTONIC).
 *
 * Calibration costs no run any waiting. The anchor (tsc0, ns0) is one calibration point, taken
 * when the first runtime is created (weft__clock_init). Until the TSC's rate is known the clock
 * reads CLOCK_MONOTONIC itself, on the same time base. The first launch at least 2 ms after the
 * anchor measures the rate over that window (about 1e-5 relative error) and switches readers
 * to the TSC (`tsc`); later launches refine `mult` over the whole time since the anchor
 * whenever that time has doubled since the last refinement, so after a second the error is
 * below 1e-7. A refinement moves converted times by at most the error it removes (about 10 us
 * at the first, after 1 s); the statistics clamp any interval whose end would precede its
 * start. `mult` and `tsc` are the fields that change after the anchor, atomically. */
#ifndef WEFT_UTIL_CLOCK_H
#define WEFT_UTIL_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>

#include "util/util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <x86intrin.h>
#define WEFT__HAVE_TSC 1
#else
#define WEFT__HAVE_TSC 0
#endif

typedef struct weft__clock_state {
  uint64_t tsc0, ns0;          /* the anchor, fixed once calibrated */
  _Atomic uint64_t mult;       /* ns per tick, 32.32 fixed point */
  _Atomic uint64_t refined_ticks; /* ticks since tsc0 at the last refinement */
  atomic_int state;            /* 0 no anchor, 1 anchoring, 2 anchored */
  int can_tsc;                 /* the TSC is invariant: it may be calibrated */
  atomic_int tsc;              /* 1: the rate is known, read the TSC; 0: clock_gettime */
} weft__clock_state;

extern weft__clock_state weft__clk;

/* CLOCK_MONOTONIC in nanoseconds. Thread-safe: yes. */
uint64_t weft__now_ns(void);

/* Takes the clock's anchor once (later calls return at once; none waits for a calibration
 * window). Thread-safe: yes. */
void weft__clock_init(void);
/* Measures the TSC's rate once the first window since the anchor has passed, then refines it
 * whenever the time since the anchor has doubled since the last refinement (cheap otherwise:
 * one clock read). Thread-safe: yes. */
void weft__clock_refine(void);

/* The time now, in nanoseconds (weft__clock_init must have run). */
static inline uint64_t weft__clock_now(void) {
#if WEFT__HAVE_TSC
  if (WEFT__LIKELY(atomic_load_explicit(&weft__clk.tsc, memory_order_acquire))) {
    int64_t d = (int64_t)(__rdtsc() - weft__clk.tsc0);
    uint64_t m = atomic_load_explicit(&weft__clk.mult, memory_order_relaxed);
    __extension__ __int128 p = (__int128)d * (__int128)m;
    return weft__clk.ns0 + (uint64_t)(int64_t)(p >> 32);
  }
#endif
  return weft__now_ns();
}

#endif
