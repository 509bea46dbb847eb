/* clock.c — the clock of clock.h: CLOCK_MONOTONIC, and the calibration of the timing clock
 * against it (see clock.h for the design).
 *
 * A calibration point pairs a TSC read with a CLOCK_MONOTONIC read: of five tries, the one
 * whose two bracketing TSC reads are closest, the monotonic time set against their midpoint,
 * so that a preemption between the reads does not skew the pair. Nothing waits for the
 * calibration: the anchor is one point, and the rate comes from the anchor and a point taken
 * at a launch once the first window has passed by itself; until then the clock reads
 * CLOCK_MONOTONIC, on the same time base. */
#include <time.h>

#include "util/clock.h"
#include "weft/report.h"

weft__clock_state weft__clk;

uint64_t weft__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A pause for the spin below (util knows nothing of threads: sched/thread.h has the same). */
static void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

enum { CAL_WINDOW_NS = 2000000, CAL_TRIES = 5 };

#if WEFT__HAVE_TSC
#include <cpuid.h>

/* CPUID 0x80000007 EDX bit 8: the TSC runs at a constant rate in every power state. */
static int tsc_invariant(void) {
  unsigned a, b, c, d;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) return 0;
  if (__get_cpuid(0x80000007u, &a, &b, &c, &d) == 0) return 0;
  return (d >> 8) & 1u;
}

static void cal_point(uint64_t *tsc, uint64_t *ns) {
  uint64_t best = UINT64_MAX;
  *tsc = 0;
  *ns = 0;
  for (int i = 0; i < CAL_TRIES; i++) {
    uint64_t t1 = __rdtsc();
    uint64_t n = weft__now_ns();
    uint64_t t2 = __rdtsc();
    if (i == 0 || (t2 >= t1 && t2 - t1 < best)) {
      best = t2 - t1;
      *tsc = t1 + (t2 - t1) / 2;
      *ns = n;
    }
  }
}

/* ns per tick in 32.32 fixed point, from two points; 0 if they make no sense. */
static uint64_t rate(uint64_t tsc_a, uint64_t ns_a, uint64_t tsc_b, uint64_t ns_b) {
  if (tsc_b <= tsc_a || ns_b <= ns_a) return 0;
  __extension__ unsigned __int128 q = ((unsigned __int128)(ns_b - ns_a) << 32) / (tsc_b - tsc_a);
  return (uint64_t)q;
}
#endif

void weft__clock_init(void) {
  int expected = 0;
  if (!atomic_compare_exchange_strong_explicit(&weft__clk.state, &expected, 1,
                                               memory_order_acq_rel, memory_order_acquire)) {
    while (atomic_load_explicit(&weft__clk.state, memory_order_acquire) != 2) relax();
    return;
  }
#if WEFT__HAVE_TSC
  if (tsc_invariant()) {
    cal_point(&weft__clk.tsc0, &weft__clk.ns0);
    weft__clk.can_tsc = 1;
  }
#endif
  atomic_store_explicit(&weft__clk.state, 2, memory_order_release);
}

void weft__clock_refine(void) {
#if WEFT__HAVE_TSC
  if (atomic_load_explicit(&weft__clk.state, memory_order_acquire) != 2 || !weft__clk.can_tsc) return;
  static atomic_flag busy = ATOMIC_FLAG_INIT;
  uint64_t refined = atomic_load_explicit(&weft__clk.refined_ticks, memory_order_relaxed);
  if (refined == 0) {
    if (weft__now_ns() - weft__clk.ns0 < CAL_WINDOW_NS) return; /* the first window is not over */
  } else if (__rdtsc() - weft__clk.tsc0 < 2 * refined) {
    return;
  }
  if (atomic_flag_test_and_set_explicit(&busy, memory_order_acquire)) return;
  uint64_t tb, nb;
  cal_point(&tb, &nb);
  uint64_t m = rate(weft__clk.tsc0, weft__clk.ns0, tb, nb);
  if (m != 0) {
    atomic_store_explicit(&weft__clk.mult, m, memory_order_relaxed);
    atomic_store_explicit(&weft__clk.refined_ticks, tb - weft__clk.tsc0, memory_order_relaxed);
    /* Readers switch to the TSC once its rate is known (release: they see it with the flag). */
    atomic_store_explicit(&weft__clk.tsc, 1, memory_order_release);
  }
  atomic_flag_clear_explicit(&busy, memory_order_release);
#endif
}

uint64_t weft_clock_ns(void) {
  if (WEFT__UNLIKELY(atomic_load_explicit(&weft__clk.state, memory_order_acquire) != 2))
    weft__clock_init();
  return weft__clock_now();
}
