/* progress.c — how far a run in flight has got, and a progress bar on a terminal.
 *
 * weft_run_progress counts the nodes whose timing record belongs to this run (timing.h): a
 * scan of the records, 24 bytes a node, which the caller pays on each poll (docs/
 * observability.md, "Progress", says how much) and the run never does. With timing off it
 * falls back to the run's completion counter, which workers publish in batches (dispatch.c),
 * so it moves in steps.
 *
 * weft_run_wait_progress waits on the run's condition with a 100 ms timeout and redraws the
 * bar at each wake-up. The bar appears only after 200 ms (counted from the first run of a
 * sequence of repeats, index 0, on this thread), so quick runs never draw one, and it is
 * erased after the last run of the sequence, or after a run that failed (whose error message
 * comes next). */
#include <stdio.h>
#include <unistd.h>

#include "sched/sched.h"
#include "weft/report.h"

int weft_run_progress(const weft_run *run, size_t *done, size_t *total) {
  if (run == NULL || done == NULL || total == NULL)
    return weft__err(WEFT_EINVAL, "weft_run_progress: NULL argument");
  const weft__plan *p = run->plan;
  *total = p->n;
  if (atomic_load_explicit(&run->done, memory_order_acquire)) {
    *done = p->n;
    return WEFT_OK;
  }
  if (p->exec->times == NULL) {
    unsigned left = atomic_load_explicit(&run->remaining, memory_order_relaxed);
    *done = left <= p->n ? p->n - left : 0;
    return WEFT_OK;
  }
  size_t k = 0;
  uint64_t t0 = run->t_launch;
  for (uint32_t i = 0; i < p->n; i++)
    k += atomic_load_explicit(&p->exec->times[i].end, memory_order_relaxed) >= t0;
  *done = k;
  return WEFT_OK;
}

static _Thread_local uint64_t sequence_start;
static _Thread_local int bar_shown; /* a bar is on the terminal and must be erased */

enum { BAR = 30 };

static void draw(FILE *tty, const weft_run *run, int index, int count, uint64_t now) {
  size_t done = 0, total = 0;
  if (weft_run_progress(run, &done, &total) != WEFT_OK) return;
  double frac = ((double)index + (total ? (double)done / (double)total : 1.0)) / count;
  int fill = (int)(frac * BAR + 0.5);
  char bar[BAR + 1];
  for (int i = 0; i < BAR; i++) bar[i] = i < fill ? '=' : ' ';
  bar[BAR] = '\0';
  if (count > 1)
    fprintf(tty, "\r\033[Krun %d/%d [%s] %3d%% %zu/%zu nodes %.1f s", index + 1, count, bar,
            (int)(frac * 100), done, total, (double)(now - sequence_start) * 1e-9);
  else
    fprintf(tty, "\r\033[K[%s] %3d%% %zu/%zu nodes %.1f s", bar, (int)(frac * 100), done, total,
            (double)(now - sequence_start) * 1e-9);
  fflush(tty);
}

int weft_run_wait_progress(weft_run *run, FILE *tty, int index, int count) {
  if (run == NULL) return weft__err(WEFT_EINVAL, "weft_run_wait_progress: run is NULL");
  if (count < 1 || index < 0 || index >= count)
    return weft__err(WEFT_EINVAL, "weft_run_wait_progress: run %d of %d (need 0 <= index < count)",
                     index, count);
  if (tty == NULL || !isatty(fileno(tty))) return weft_run_wait(run);
  uint64_t now = weft__now_ns();
  if (index == 0) {
    sequence_start = now;
    bar_shown = 0;
  }
  int drawn = 0;
  weft__mutex_lock(&run->lock);
  while (!atomic_load_explicit(&run->done, memory_order_acquire)) {
    weft__cond_timedwait(&run->cond, &run->lock, 100000000u);
    if (atomic_load_explicit(&run->done, memory_order_acquire)) break;
    now = weft__now_ns();
    if (now - sequence_start < 200000000u) continue;
    weft__mutex_unlock(&run->lock);
    draw(tty, run, index, count, now);
    drawn = 1;
    weft__mutex_lock(&run->lock);
  }
  weft__mutex_unlock(&run->lock);
  int st = weft_run_wait(run);
  now = weft__now_ns();
  if (st == WEFT_OK && index + 1 < count && (drawn || now - sequence_start >= 200000000u)) {
    draw(tty, run, index, count, now); /* the finished run, until the next one draws */
    bar_shown = 1;
  } else if (bar_shown || drawn) {
    /* The last run of the sequence, or a failed one: leave the line to what comes next. */
    fputs("\r\033[K", tty);
    fflush(tty);
    bar_shown = 0;
  }
  return st;
}
