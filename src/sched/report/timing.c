/* timing.c — the plan's timing records: allocation with the plan, the per-run reset, and the
 * calls through which backends report device-side times and memory (backends/backend.h).
 *
 * Nothing here runs per node on the CPU path: the dispatcher writes the records inline
 * (dispatch.c, run_node). The calls below are for the rare paths (skipped nodes, completions
 * of asynchronous nodes) and for backends. */
#include <stdlib.h>
#include <string.h>

#include "sched/sched.h"

static atomic_uint_fast64_t next_run_id = 1;

static int timing_enabled(const weft_runtime *rt) {
  if (rt->opts.flags & WEFT_RUNTIME_NO_TIMING) return 0;
  const char *e = getenv("WEFT_TIMING");
  return !(e != NULL && strcmp(e, "0") == 0);
}

#define TIMES_BYTES(n) ((size_t)((n) ? (n) : 1) * sizeof(weft__ntime))

int weft__timing_plan_init(weft__plan *p) {
  weft__clock_init();
  p->exec->times = NULL;
  p->exec->timing = NULL;
  if (!timing_enabled(p->graph->rt)) return WEFT_OK;
  weft__timing *t = weft__calloc(1, sizeof *t);
  if (t == NULL) return weft__oom("the timing records of a plan");
  int rc = weft__mutex_init(&t->lock);
  if (rc != WEFT_OK) {
    weft__free(t);
    return rc;
  }
  p->exec->times = weft__mem_get(p->mem, TIMES_BYTES(p->n));
  if (p->exec->times == NULL) {
    weft__mutex_destroy(&t->lock);
    weft__free(t);
    return weft__oom("the timing records of a plan");
  }
  p->exec->timing = t; /* the records are cleared by the plan's build (weft__timing_plan_clear) */
  return WEFT_OK;
}

void weft__timing_plan_clear(weft__plan *p, uint32_t lo, uint32_t hi) {
  /* Zero ends mark every record as "not from this run" (see timing.h). */
  if (p->exec->times != NULL) memset(p->exec->times + lo, 0, (size_t)(hi - lo) * sizeof *p->exec->times);
}

void weft__timing_plan_free(weft__plan *p) {
  if (p->exec->timing == NULL) return;
  weft__mem_put(p->mem, p->exec->times, TIMES_BYTES(p->n));
  weft__mutex_destroy(&p->exec->timing->lock);
  weft__free(p->exec->timing->samples);
  weft__free(p->exec->timing);
  p->exec->times = NULL;
  p->exec->timing = NULL;
}

int weft__timing_on(const weft__plan *p) { return p->exec->times != NULL; }

uint64_t weft__timing_run_begin(weft__plan *p) {
  if (p->exec->timing != NULL) {
    weft__mutex_lock(&p->exec->timing->lock);
    p->exec->timing->nsamples = 0;
    p->exec->timing->dropped = 0;
    weft__mutex_unlock(&p->exec->timing->lock);
    weft__clock_refine();
  }
  uint64_t id = atomic_fetch_add_explicit(&next_run_id, 1, memory_order_relaxed);
  p->exec->last_run = id;
  return id;
}

void weft__timing_skip(weft__plan *p, uint32_t index) {
  if (p->exec->times == NULL) return;
  weft__ntime *t = &p->exec->times[index];
  uint64_t now = weft__clock_now();
  atomic_store_explicit(&t->lane, WEFT__LANE_NONE, memory_order_relaxed);
  atomic_store_explicit(&t->start, now, memory_order_relaxed);
  atomic_store_explicit(&t->end, now, memory_order_relaxed);
}

void weft__timing_complete(weft__plan *p, uint32_t index) {
  if (p->exec->times == NULL) return;
  weft__ntime *t = &p->exec->times[index];
  if (atomic_load_explicit(&t->end, memory_order_relaxed) <
      atomic_load_explicit(&t->start, memory_order_relaxed))
    atomic_store_explicit(&t->end, weft__clock_now(), memory_order_relaxed);
}

/* ---- the backends' calls (backends/backend.h) ---------------------------------------------- */

uint64_t weft__clock_ns(void) { return weft__clock_now(); }

void weft__sched_node_time(weft_run *run, uint32_t index, uint64_t start_ns, uint64_t end_ns,
                           uint32_t lane) {
  weft__plan *p = run->plan;
  if (p->exec->times == NULL || index >= p->n) return;
  weft__ntime *t = &p->exec->times[index];
  atomic_store_explicit(&t->lane, lane, memory_order_relaxed);
  atomic_store_explicit(&t->start, start_ns, memory_order_relaxed);
  atomic_store_explicit(&t->end, end_ns, memory_order_relaxed);
}

void weft__sched_mem_sample(weft_run *run, weft_device device, uint64_t t_ns, uint64_t bytes) {
  weft__timing *tm = run->plan->exec->timing;
  if (tm == NULL) return;
  weft__mutex_lock(&tm->lock);
  if (tm->nsamples == tm->cap && tm->cap < WEFT__MEM_SAMPLES_MAX) {
    size_t cap = tm->cap ? tm->cap * 2 : 64;
    weft__mem_sample *s = weft__realloc(tm->samples, cap * sizeof *s);
    if (s != NULL) {
      tm->samples = s;
      tm->cap = cap;
    }
  }
  if (tm->nsamples < tm->cap)
    tm->samples[tm->nsamples++] = (weft__mem_sample){t_ns, bytes, device};
  else
    tm->dropped++;
  weft__mutex_unlock(&tm->lock);
}
