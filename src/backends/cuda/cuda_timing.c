/* cuda_timing.c — device-side node times (backends/backend.h, "Node timing"): where and when
 * each GPU node ran, from CUDA events, on the host's weft__clock_ns() base.
 *
 * Events. Each CUDA node of a timed plan has a *tick*: an event with timing, created with the
 * plan and reused by every run, recorded on the node's stream right after its work when the
 * node is to be timed on its own, so the tick's time is the node's end. A node's start is not
 * recorded: it is the latest of
 *   - the end of the node enqueued before it on its stream (the stream runs one at a time),
 *   - the ends of the nodes on other streams it waits for (its cross-stream waits),
 *   - in an eager run, the host time just before its work was enqueued (the device cannot
 *     start it earlier: this is what places a node that found its stream idle), and in a
 *     replay the moment the replayed graph started on the device.
 * A start event as well would double the cost; the derived start is early on an idle stream by
 * the host's launch call, exact behind other work (WEFT_CUDA_TIMING_CHECK=1 compares the two;
 * docs/benchmarks.md, "What node timing costs", has the cost and the precision).
 *
 * Time base. At run_begin one reference event per device is recorded on the device's `clk`
 * stream, which nothing else uses (so the event completes as soon as the device sees it),
 * and weft__clock_ns() is read right after cudaEventRecord returns; an event's host time is
 * then the reference's plus cudaEventElapsedTime(reference, event). Every device has its
 * own reference (events of two devices cannot be compared), and all land on one base.
 *
 * Groups. A tick costs the host a record and a read, a large part of what enqueueing a small
 * node costs, and in a replay the stream an event-record node (below; docs/benchmarks.md,
 * "What node timing costs"). So consecutive small nodes of a stream form a *group* closed by
 * one tick, and share its measured interval: in proportion to their estimated device times,
 * none starting before what bounds it (above), so gaps where the stream waited for the host
 * stay gaps. In an eager run a node ticks when it is a copy or estimated at 50 us or more
 * (then the group before it is closed first, so its own start is exact), when another stream
 * or the host waits for it, or when its group reaches 50 us of estimates; the last group of a
 * stream is closed by an event the drain records. The order of a stream is the order in which
 * nodes were enqueued on it, which for independent nodes sharing a stream is the workers'
 * order, not the plan's: each node notes, under its stream's lock, which node of its plan was
 * enqueued there before it (eprev); stamp[i] says in which run it ticked.
 *
 * Replays. A captured graph records its ticks as event-record nodes of the graph
 * (cudaEventRecordExternal), which sit in the stream's chain, and each costs the stream a few
 * microseconds, more than a replayed one-element add (docs/benchmarks.md, "What node timing
 * costs"). So a replay's groups are larger: a tick once their estimated device time reaches
 * WEFT_CUDA_TIMING_GROUP_US (1000 us by default; 0 ticks every node in eager runs and replays
 * alike). A node whose own estimate reaches the group size ticks alone, and the last node of
 * each stream ticks. The cost is then at most one tick per millisecond of a stream's work: a
 * 10 000-node chain of adds replays with ten ticks, a product of 4000^2 has its own. The
 * capture's order on each stream is the plan's topological order (rprev, rnext); the groups
 * are computed in that order, so the nodes a group's first node waits for (earlier in it) are
 * known when it is placed.
 *
 * Reading. The events are read once the run's work is known to be complete: for a node with a
 * CPU successor, by the completion thread that saw its event (before weft__sched_complete);
 * for the rest, when the run's drain has completed on every device (before
 * weft__sched_drained). Nothing here synchronises a device. The memory track gets one sample
 * per device at the run's start (the pool's bytes in use) and at the starts of the nodes that
 * free or allocate temporaries (the plan's bytes), coalesced to changes of 64 KiB or more.
 *
 * Threads: the eager fields of a node are written by the worker that enqueues it, under its
 * stream's lock (those of a node held in a batch by the worker that enqueues the batch's last
 * node, which launches its op), and read after its completion was observed; the drain's
 * computation runs on one completion thread once every node of the run has completed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"
#include "sched/plan/plan.h"

#define NONE UINT32_MAX
#define MEM_GRAIN ((uint64_t)64 << 10)

/* Rough device time of a node in ns (only its share within a group and the grouping depend on
 * it): products at 40 TFLOP/s, other kernels at 2 TB/s over their first argument read twice
 * and written once, plus a microsecond a kernel; copies at 20 GB/s. */
static uint64_t estimate_ns(const weft_node *nd) {
  double w = weft__plan_work(nd);
  switch (nd->kind) {
    case WEFT__OP_MM:
    case WEFT__OP_LINEAR: return 2000 + (uint64_t)(w / 4e4);
    case WEFT__OP_COPY: return 2000 + (uint64_t)((double)nd->args[0].t->bytes / 20.0);
    case WEFT__OP_USER: return 2000 + (uint64_t)(w / 1e3);
    default: return 1000 + (uint64_t)((nd->nargs > 0 ? (double)nd->args[0].t->bytes : 0.0) * 3 / 2000.0);
  }
}

/* The lane a node is reported on: the stream it ends on, by role. */
static uint32_t lane_of(const weft__gnode *x) {
  switch (x->why) {
    case WEFT__WHY_H2D:
    case WEFT__WHY_STAGED: return WEFT__LANE(WEFT__LANE_H2D, x->dev, 0);
    case WEFT__WHY_D2H: return WEFT__LANE(WEFT__LANE_D2H, x->dev, 0);
    case WEFT__WHY_PEER: return WEFT__LANE(WEFT__LANE_PEER, x->dev, 0);
    default: return WEFT__LANE(WEFT__LANE_COMPUTE, x->dev, x->stream);
  }
}

/* The replay's grouping, in the capture's order (the plan's topological order). */
static void plan_groups(cu_state *st, cu_plan *cp) {
  cu_timing *tm = cp->tm;
  uint32_t last[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3];
  uint64_t acc[CU_MAX_DEVICES][CU_MAX_COMPUTE + 3];
  memset(last, 0xff, sizeof last);
  memset(acc, 0, sizeof acc);
  for (uint32_t k = 0; k < cp->n; k++) {
    uint32_t i = cp->order[k];
    const weft__gnode *x = &cp->x[i];
    if (x->dev < 0) continue;
    int d = x->dev, s = x->stream;
    uint32_t prev = last[d][s];
    tm->rprev[i] = prev;
    if (prev != NONE) tm->rnext[prev] = i;
    last[d][s] = i;
    /* A large node closes the group before it, so that it ticks alone. */
    if (prev != NONE && tm->est[i] >= st->group_ns && !tm->rtick[prev]) tm->rtick[prev] = 1;
    if (prev != NONE && tm->rtick[prev]) acc[d][s] = 0;
    acc[d][s] += tm->est[i];
    if (acc[d][s] >= st->group_ns) tm->rtick[i] = 1;
  }
  for (int d = 0; d < CU_MAX_DEVICES; d++)
    for (int s = 0; s < CU_MAX_COMPUTE + 3; s++)
      if (last[d][s] != NONE) tm->rtick[last[d][s]] = 1;
  /* A node held in a batch cannot tick (its op runs in the batch's kernel): its batch's last
   * node does. */
  for (uint32_t i = 0; i < cp->n; i++)
    if ((cp->x[i].flags & WEFT__G_DEFER) && tm->rtick[i]) {
      tm->rtick[i] = 0;
      tm->rtick[cp->batches[cp->x[i].batch].last] = 1;
    }
}

/* ---- plan ----------------------------------------------------------------------------------- */

/* Creates a timing event on device d (made current). */
static int timing_event(cu_state *st, int d, cudaEvent_t *ev) {
  int rc = weft__cu_set_device(&st->dev[d]);
  if (rc != WEFT_OK) return rc;
  cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventDefault);
  return e == cudaSuccess ? WEFT_OK : weft__cu_error(e, "cudaEventCreate (node timing)", st->dev[d].ordinal);
}

int weft__cu_timing_plan(cu_state *st, cu_plan *cp) {
  if (!st->device_timing || !weft__timing_on(cp->p) || cp->ncuda == 0) return WEFT_OK;
  cu_timing *tm = weft__calloc(1, sizeof *tm);
  if (tm == NULL) return weft__oom("the node timing of a CUDA plan");
  cp->tm = tm; /* from here on weft__cu_timing_free cleans up */
  size_t n = cp->n ? cp->n : 1;
  tm->tick = weft__calloc(n, sizeof *tm->tick);
  tm->stamp = weft__calloc(n, sizeof *tm->stamp);
  tm->eprev = weft__malloc(n * sizeof *tm->eprev);
  tm->t_enq = weft__calloc(n, sizeof *tm->t_enq);
  tm->rprev = weft__malloc(n * sizeof *tm->rprev);
  tm->rnext = weft__malloc(n * sizeof *tm->rnext);
  tm->rtick = weft__calloc(n, 1);
  tm->est = weft__calloc(n, sizeof *tm->est);
  tm->start = weft__calloc(n, sizeof *tm->start);
  tm->end = weft__calloc(n, sizeof *tm->end);
  tm->have = weft__calloc(n, 1);
  tm->seq = weft__malloc(n * sizeof *tm->seq);
  tm->lb = weft__malloc(n * sizeof *tm->lb);
  if (!tm->tick || !tm->stamp || !tm->eprev || !tm->t_enq || !tm->rprev || !tm->rnext || !tm->rtick || !tm->est ||
      !tm->start || !tm->end || !tm->have || !tm->seq || !tm->lb)
    return weft__oom("the node timing of a CUDA plan");
  for (uint32_t i = 0; i < cp->n; i++) {
    tm->eprev[i] = tm->rprev[i] = tm->rnext[i] = NONE;
    if (cp->x[i].dev >= 0) tm->est[i] = estimate_ns(cp->p->x[i].node);
  }
  int rc;
  /* A node held in a batch never ticks: its batch's last node does (and plan_groups below). */
  for (uint32_t i = 0; i < cp->n; i++)
    if (cp->x[i].dev >= 0 && !(cp->x[i].flags & WEFT__G_DEFER) &&
        (rc = timing_event(st, cp->x[i].dev, &tm->tick[i])) != WEFT_OK)
      return rc;
  if (st->timing_check) {
    if ((tm->tick0 = weft__calloc(n, sizeof *tm->tick0)) == NULL) return weft__oom("the node timing of a CUDA plan");
    for (uint32_t i = 0; i < cp->n; i++)
      if (cp->x[i].dev >= 0 && !(cp->x[i].flags & (WEFT__G_STAGED | WEFT__G_DEFER)) &&
          (rc = timing_event(st, cp->x[i].dev, &tm->tick0[i])) != WEFT_OK)
        return rc;
  }
  for (int d = 0; d < st->ndev; d++) {
    if (cp->used[d] == 0) continue;
    if ((rc = timing_event(st, d, &tm->ref[d])) != WEFT_OK) return rc;
    for (int k = 0; k < st->dev[d].nstreams; k++)
      if ((cp->used[d] >> k & 1) && (rc = timing_event(st, d, &tm->etail[d][k])) != WEFT_OK) return rc;
  }
  plan_groups(st, cp);
  /* The nodes that free or allocate temporaries, for the memory track. */
  weft_tensor **ts = cp->p->graph->tensors.data;
  tm->mem = weft__malloc(n * sizeof *tm->mem);
  tm->mem_delta = weft__malloc(n * sizeof *tm->mem_delta);
  if (tm->mem == NULL || tm->mem_delta == NULL) return weft__oom("the node timing of a CUDA plan");
  for (uint32_t k = 0; k < cp->n; k++) {
    const weft__gnode *x = &cp->x[cp->order[k]];
    if (x->dev < 0 || (x->free_e == x->free_b && x->alloc_e == x->alloc_b)) continue;
    /* The bytes it frees and allocates, summed now: the drain then reads no tensor. */
    int64_t delta = 0;
    for (uint32_t f = x->free_b; f < x->free_e; f++) delta -= (int64_t)ts[cp->lists[f]]->bytes;
    for (uint32_t a = x->alloc_b; a < x->alloc_e; a++) {
      delta += (int64_t)ts[cp->lists[a]]->bytes;
      tm->temp_bytes[x->dev] += ts[cp->lists[a]]->bytes;
    }
    tm->mem_delta[tm->nmem] = delta;
    tm->mem[tm->nmem++] = cp->order[k];
  }
  return WEFT_OK;
}

static void destroy_on(cu_state *st, int d, cudaEvent_t *ev) {
  if (*ev == NULL) return;
  if (weft__cu_set_device(&st->dev[d]) == WEFT_OK) cudaEventDestroy(*ev);
  *ev = NULL;
}

void weft__cu_timing_free(cu_state *st, cu_plan *cp) {
  cu_timing *tm = cp->tm;
  if (tm == NULL) return;
  for (uint32_t i = 0; i < cp->n; i++) {
    if (cp->x[i].dev < 0) continue;
    if (tm->tick != NULL) destroy_on(st, cp->x[i].dev, &tm->tick[i]);
    if (tm->tick0 != NULL) destroy_on(st, cp->x[i].dev, &tm->tick0[i]);
  }
  for (int d = 0; d < st->ndev; d++) {
    destroy_on(st, d, &tm->ref[d]);
    for (int k = 0; k < CU_MAX_COMPUTE + 3; k++) destroy_on(st, d, &tm->etail[d][k]);
  }
  if (cp->origin_dev >= 0) destroy_on(st, cp->origin_dev, &tm->replay_start);
  cudaGetLastError();
  weft__free(tm->tick);
  weft__free(tm->tick0);
  weft__free(tm->stamp);
  weft__free(tm->eprev);
  weft__free(tm->t_enq);
  weft__free(tm->rprev);
  weft__free(tm->rnext);
  weft__free(tm->rtick);
  weft__free(tm->est);
  weft__free(tm->start);
  weft__free(tm->end);
  weft__free(tm->have);
  weft__free(tm->seq);
  weft__free(tm->mem);
  weft__free(tm->mem_delta);
  weft__free(tm->lb);
  weft__free(tm);
  cp->tm = NULL;
}

int weft__cu_timing_capture_ready(cu_state *st, cu_plan *cp) {
  if (cp->tm == NULL || cp->tm->replay_start != NULL) return WEFT_OK;
  return timing_event(st, cp->origin_dev, &cp->tm->replay_start);
}

/* ---- runs ------------------------------------------------------------------------------------ */

void weft__cu_timing_run_begin(cu_state *st, cu_plan *cp) {
  cu_timing *tm = cp->tm;
  memset(tm->elast, 0xff, sizeof tm->elast);
  memset(tm->eacc, 0, sizeof tm->eacc);
  memset(tm->etail_rec, 0, sizeof tm->etail_rec);
  for (int d = 0; d < st->ndev; d++) {
    tm->ref_ok[d] = 0;
    if (cp->used[d] == 0) continue;
    cu_device *dv = &st->dev[d];
    if (weft__cu_set_device(dv) != WEFT_OK) continue;
    uint64_t used = 0;
    if (cudaMemPoolGetAttribute(dv->pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess) used = 0;
    tm->mem_base[d] = used;
    /* The clk stream is idle: the event completes as soon as the device sees it. */
    if (cudaEventRecord(tm->ref[d], dv->clk.s) == cudaSuccess) {
      tm->ref_ns[d] = weft__clock_now();
      tm->ref_ok[d] = 1;
    }
    cudaGetLastError();
  }
}

void weft__cu_timing_before(cu_plan *cp, uint32_t i, cudaStream_t s) {
  cu_timing *tm = cp->tm;
  tm->t_enq[i] = weft__clock_now();
  if (tm->tick0 != NULL && tm->tick0[i] != NULL) cudaEventRecord(tm->tick0[i], s);
}

/* Eager: a node that ticks alone (its group holds it only), so that its start is exact: a copy
 * (what the overlap is about) or a node estimated at a group's size or more. */
static int eager_alone(const cu_plan *cp, uint32_t i) {
  return cp->p->x[i].node->kind == WEFT__OP_COPY || cp->tm->est[i] >= cp->st->eager_group_ns;
}

cudaError_t weft__cu_timing_open(cu_plan *cp, uint32_t i, cudaStream_t s) {
  cu_timing *tm = cp->tm;
  const weft__gnode *x = &cp->x[i];
  if (x->start_dev != x->dev || x->start_stream != x->stream || !eager_alone(cp, i)) return cudaSuccess;
  uint32_t prev = tm->elast[x->dev][x->stream];
  if (prev == NONE || tm->stamp[prev] == cp->runs) return cudaSuccess;
  /* The stream's last work is prev's (this node's waits come after): its end, now. */
  cudaError_t e = cudaEventRecord(tm->tick[prev], s);
  if (e == cudaSuccess) {
    tm->stamp[prev] = cp->runs;
    tm->eacc[x->dev][x->stream] = 0;
  }
  return e;
}

cudaError_t weft__cu_timing_tick(cu_plan *cp, uint32_t i, cudaStream_t s, int capture) {
  cu_timing *tm = cp->tm;
  const weft__gnode *x = &cp->x[i];
  if (capture) return tm->rtick[i] ? cudaEventRecordWithFlags(tm->tick[i], s, cudaEventRecordExternal) : cudaSuccess;
  /* Under the lock of the stream the node ends on. A node ticks when it ticks alone, when a
   * node on another stream or the host waits for it, or when its group's estimate reaches
   * eager_group_ns; the others share their group's interval (cuda_timing.c, top). */
  int d = x->dev, k = x->stream;
  /* The members held in its batch were issued without a note (cuda_launch.c): their ops run in
   * this node's kernel, so they join the stream's order here, in their chain's order, and none
   * could start before the kernel was launched. */
  if (x->flags & WEFT__G_FLUSH) {
    const weft__plan *p = cp->p;
    for (uint32_t m = cp->batches[x->batch].first; m != i; m = p->succ[p->x[m].succ_begin]) {
      tm->t_enq[m] = tm->t_enq[i];
      tm->eprev[m] = tm->elast[d][k];
      tm->elast[d][k] = m;
      tm->eacc[d][k] += tm->est[m];
    }
  }
  tm->eprev[i] = tm->elast[d][k];
  tm->elast[d][k] = i;
  uint64_t acc = tm->eacc[d][k] + tm->est[i];
  if (!(x->flags & (WEFT__G_RECORD | WEFT__G_NOTIFY)) && !eager_alone(cp, i) && acc < cp->st->eager_group_ns) {
    tm->eacc[d][k] = acc;
    return cudaSuccess;
  }
  cudaError_t e = cudaEventRecord(tm->tick[i], s);
  if (e != cudaSuccess) return e;
  tm->stamp[i] = cp->runs;
  tm->eacc[d][k] = 0;
  return cudaSuccess;
}

/* Records the event that closes the stream's last group, when it has one open; returns it (NULL
 * when none was recorded), for the drain to wait on as well. */
cudaEvent_t weft__cu_timing_drain_stream(cu_plan *cp, int dev, int stream, cudaStream_t s) {
  cu_timing *tm = cp->tm;
  uint32_t last = tm->elast[dev][stream];
  if (cp->replaying || last == NONE || tm->stamp[last] == cp->runs || tm->etail[dev][stream] == NULL) return NULL;
  tm->etail_rec[dev][stream] = cudaEventRecord(tm->etail[dev][stream], s) == cudaSuccess;
  cudaGetLastError();
  return tm->etail_rec[dev][stream] ? tm->etail[dev][stream] : NULL;
}

/* The host time of event ev of device d, recorded in this run, or 0 when it cannot be read. */
static uint64_t event_ns(cu_plan *cp, int d, cudaEvent_t ev) {
  cu_timing *tm = cp->tm;
  if (!tm->ref_ok[d] || weft__cu_set_device(&cp->st->dev[d]) != WEFT_OK) return 0;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, tm->ref[d], ev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return ms > 0 ? tm->ref_ns[d] + (uint64_t)((double)ms * 1e6) : tm->ref_ns[d];
}

static uint64_t tick_ns(cu_plan *cp, uint32_t i) { return event_ns(cp, cp->x[i].dev, cp->tm->tick[i]); }

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* A split copy starts once the first row half of its product is done: the rows' share of the
 * product's interval (the halves are the same kernel at half the size). */
static uint64_t split_start(cu_plan *cp, uint32_t i) {
  cu_timing *tm = cp->tm;
  uint32_t p = cp->x[i].split_of;
  if (p == NONE || (tm->have[p] & 3) != 3) return 0;
  const weft_tensor *out = cp->p->x[p].node->args[2].t;
  int64_t rows = out->shape[0], h = weft__cu_split_rows(rows);
  return tm->start[p] + (uint64_t)((double)(tm->end[p] - tm->start[p]) * (double)h / (double)rows);
}

/* The latest end among the node's cross-stream waits (those whose ends are known) and s. */
static uint64_t waits_end(cu_plan *cp, uint32_t i, uint64_t s) {
  cu_timing *tm = cp->tm;
  const weft__gnode *x = &cp->x[i];
  for (uint32_t k = x->wait_b; k < x->wait_e; k++) {
    uint32_t w = cp->lists[k];
    if ((x->flags & WEFT__G_SPLIT_COPY) && w == x->split_of) continue;
    if (tm->have[w] & 1) s = max_u64(s, tm->end[w]);
  }
  if (x->flags & WEFT__G_SPLIT_COPY) s = max_u64(s, split_start(cp, i));
  return s;
}

/* Eager: the end of a ticked node from its event, remembered for this run's computation. */
/* Eager: the host time of a node's tick in this run, or 0 when it has none. */
static uint64_t eager_tick(cu_plan *cp, uint32_t i) {
  return i < cp->n && cp->x[i].dev >= 0 && cp->tm->stamp[i] == cp->runs ? tick_ns(cp, i) : 0;
}

static int eager_end(cu_plan *cp, uint32_t i) {
  cu_timing *tm = cp->tm;
  uint64_t t = eager_tick(cp, i);
  if (t == 0) return 0;
  tm->end[i] = t;
  tm->have[i] |= 1;
  return 1;
}

/* Eager: places nodes seq[0..m) of one stream, which ran one after the other, the last of
 * them ending at e (its tick, or the drain's event on the stream), none starting before s0
 * (the previous group's end) or before lb[] (its enqueue on the host, its cross-stream waits).
 * Durations are the estimates times one factor c, the largest that has the last node end by e:
 * where the host fell behind the device (a stream that emptied between two enqueues), the gaps
 * stay gaps instead of being spread over the nodes.
 *
 * The factor in one pass. Node a starts at max(end of a - 1, lb[a]) and lasts c est[a], so the
 * last end is the largest over k of lb[k] + c S[k] (S[k]: the estimates from k on; lb[0] taken
 * no earlier than s0): a maximum of lines, non-decreasing in c. It reaches e first on the
 * steepest-bound line, at c = min over k of (e - lb[k]) / S[k]; 0 when a bound is past e. (A
 * bisection would place the group some 40 times, at the end of every run, on the path of the
 * caller's return.) */
static void eager_group(cu_plan *cp, const uint32_t *seq, uint32_t m, uint64_t s0, uint64_t e) {
  cu_timing *tm = cp->tm;
  for (uint32_t a = 0; a < m; a++) tm->lb[a] = waits_end(cp, seq[a], tm->t_enq[seq[a]]);
  double c = -1, tail = 0;
  for (uint32_t a = m; a-- > 0;) {
    tail += (double)tm->est[seq[a]];
    uint64_t lb = a == 0 ? max_u64(s0, tm->lb[0]) : tm->lb[a];
    if (lb >= e) {
      c = 0;
      break;
    }
    double k = tail > 0 ? (double)(e - lb) / tail : -1;
    if (k >= 0 && (c < 0 || k < c)) c = k;
  }
  if (c < 0) c = 0; /* no estimates */
  uint64_t t = s0;
  for (uint32_t a = 0; a < m; a++) {
    uint32_t j = seq[a];
    uint64_t b = max_u64(t, tm->lb[a]);
    t = b + (uint64_t)(c * (double)tm->est[j]);
    tm->start[j] = b < e ? b : e;
    tm->end[j] = a + 1 == m || t > e ? e : t;
    tm->have[j] |= 3;
  }
}

/* Eager: one stream's nodes of this run, in the order they were enqueued, in groups each
 * closed by a tick (or, for the last, by the drain's event). */
static void eager_stream(cu_plan *cp, int d, int k) {
  cu_timing *tm = cp->tm;
  uint32_t m = 0;
  for (uint32_t j = tm->elast[d][k]; j != NONE && m < cp->n; j = tm->eprev[j]) tm->seq[m++] = j;
  for (uint32_t a = 0; a < m / 2; a++) {
    uint32_t t = tm->seq[a];
    tm->seq[a] = tm->seq[m - 1 - a];
    tm->seq[m - 1 - a] = t;
  }
  uint64_t s0 = 0;
  uint32_t g0 = 0;
  for (uint32_t a = 0; a < m; a++) {
    uint32_t j = tm->seq[a];
    uint64_t e = 0;
    if (tm->have[j] & 1)
      e = tm->end[j];
    else if (a + 1 < m)
      continue;
    else if (!tm->etail_rec[d][k] || (e = event_ns(cp, d, tm->etail[d][k])) == 0)
      break;
    /* lb[] is indexed by the position in the group: the group starts the scratch. */
    eager_group(cp, tm->seq + g0, a + 1 - g0, s0, e);
    s0 = e;
    g0 = a + 1;
  }
}

void weft__cu_timing_node(cu_plan *cp, uint32_t i, weft_run *run) {
  cu_timing *tm = cp->tm;
  const weft__gnode *x = &cp->x[i];
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess) cur = -1;
  /* Its stream predecessor and its waits completed before it, so their ticks are readable.
   * Computed apart from the drain's caches: completion threads of several devices may report
   * nodes at once. */
  uint64_t e = eager_tick(cp, i);
  if (e != 0) {
    uint64_t s = tm->t_enq[i];
    if (tm->eprev[i] != NONE) s = max_u64(s, eager_tick(cp, tm->eprev[i]));
    for (uint32_t k = x->wait_b; k < x->wait_e; k++) s = max_u64(s, eager_tick(cp, cp->lists[k]));
    weft__sched_node_time(run, i, s < e ? s : e, e, lane_of(x));
  }
  if (cur >= 0) cudaSetDevice(cur);
  cudaGetLastError();
}

/* Replays: every tick's end, then the groups in the capture's order. */
static void replay_times(cu_plan *cp) {
  cu_timing *tm = cp->tm;
  for (uint32_t i = 0; i < cp->n; i++) {
    if (cp->x[i].dev < 0 || !tm->rtick[i]) continue;
    uint64_t t = tick_ns(cp, i);
    if (t == 0) continue;
    tm->end[i] = t;
    tm->have[i] |= 1;
  }
  int od = cp->origin_dev;
  uint64_t g = tm->ref_ok[od] ? tm->ref_ns[od] : 0;
  float ms = 0;
  if (tm->ref_ok[od] && weft__cu_set_device(&cp->st->dev[od]) == WEFT_OK &&
      cudaEventElapsedTime(&ms, tm->ref[od], tm->replay_start) == cudaSuccess && ms > 0)
    g += (uint64_t)((double)ms * 1e6);
  cudaGetLastError();
  for (uint32_t k = 0; k < cp->n; k++) {
    uint32_t i = cp->order[k];
    if (cp->x[i].dev < 0) continue;
    uint32_t prev = tm->rprev[i];
    if (prev != NONE && !tm->rtick[prev]) continue; /* inside a group: done with its first node */
    uint64_t s = g;
    if (prev != NONE && (tm->have[prev] & 1)) s = max_u64(s, tm->end[prev]);
    s = waits_end(cp, i, s);
    /* The group: from i to the first tick on. */
    uint64_t total = 0;
    uint32_t j = i, last = NONE;
    for (uint32_t c = 0; j != NONE && c < cp->n; c++) {
      total += tm->est[j];
      if (tm->rtick[j]) {
        last = j;
        break;
      }
      j = tm->rnext[j];
    }
    if (last == NONE || !(tm->have[last] & 1)) continue;
    /* Shares of [s, e] in proportion to the estimates, one after the other, each node starting
     * no earlier than what it waits for (where that is placed already); what a wait delays
     * is taken from the nodes after it. */
    uint64_t e = tm->end[last];
    if (s > e) s = e;
    double scale = (double)(e - s) / (double)(total ? total : 1);
    uint64_t t = s;
    for (j = i;; j = tm->rnext[j]) {
      uint64_t b = j == i ? s : waits_end(cp, j, t);
      if (b > e) b = e;
      tm->start[j] = b;
      uint64_t f = b + (uint64_t)(scale * (double)tm->est[j]);
      tm->end[j] = j == last || f > e ? e : f;
      tm->have[j] |= 3;
      t = tm->end[j];
      if (j == last) break;
    }
  }
}

/* The memory track: per device, the pool's bytes at the run's start plus the plan's
 * temporaries as the nodes that free and allocate them start (tm->mem: those nodes, in the
 * plan's order). A device whose temporaries add up to less than the grain gets its base alone:
 * a 10 000-node chain of one-element adds then costs the drain no walk at all. */
static void mem_samples(cu_plan *cp, weft_run *run) {
  cu_timing *tm = cp->tm;
  cu_state *st = cp->st;
  uint64_t now = weft__clock_now();
  for (int d = 0; d < st->ndev; d++) {
    if (cp->used[d] == 0 || !tm->ref_ok[d]) continue;
    uint64_t base = tm->mem_base[d], cur = base, said = base, peak = base, t_peak = 0;
    weft_device dev = weft_cuda(d);
    weft__sched_mem_sample(run, dev, tm->ref_ns[d], base);
    if (tm->temp_bytes[d] < MEM_GRAIN) continue;
    for (uint32_t k = 0; k < tm->nmem; k++) {
      uint32_t i = tm->mem[k];
      const weft__gnode *x = &cp->x[i];
      if (x->dev != d || (tm->have[i] & 3) != 3) continue;
      int64_t delta = tm->mem_delta[k];
      cur = delta >= 0 || cur >= (uint64_t)-delta ? cur + (uint64_t)delta : 0;
      if (cur > peak) {
        peak = cur;
        t_peak = tm->start[i];
      }
      if (cur >= said + MEM_GRAIN || cur + MEM_GRAIN <= said) {
        weft__sched_mem_sample(run, dev, tm->start[i], cur);
        said = cur;
      }
    }
    if (peak > said && t_peak != 0) weft__sched_mem_sample(run, dev, t_peak, peak);
    /* The drain (or the graph's end) frees what nobody claimed: by now. */
    if (cur != base) weft__sched_mem_sample(run, dev, now, base);
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* WEFT_CUDA_TIMING_CHECK=1 (eager runs): each derived start against an event recorded right
 * before the node's work, on standard error; what docs/benchmarks.md, "What node timing costs",
 * quotes. */
static void check_starts(cu_plan *cp) {
  cu_timing *tm = cp->tm;
  int64_t *d = weft__malloc((cp->n ? cp->n : 1) * sizeof *d);
  if (d == NULL) return;
  size_t m = 0;
  double sum = 0, busy = 0;
  for (uint32_t i = 0; i < cp->n; i++) {
    if ((tm->have[i] & 3) != 3 || tm->tick0[i] == NULL) continue;
    uint64_t t = event_ns(cp, cp->x[i].dev, tm->tick0[i]);
    if (t == 0) continue;
    d[m] = (int64_t)tm->start[i] - (int64_t)t;
    sum += (double)(d[m] < 0 ? -d[m] : d[m]);
    busy += (double)(tm->end[i] - tm->start[i]);
    m++;
  }
  if (m > 0) {
    qsort(d, m, sizeof *d, cmp_i64);
    fprintf(stderr,
            "weft: timing check: %zu nodes; derived start - start event: min %.2f, median %.2f, p90 %.2f, "
            "max %.2f us; mean |difference| %.2f us = %.3f%% of the mean node time\n",
            m, (double)d[0] * 1e-3, (double)d[m / 2] * 1e-3, (double)d[m * 9 / 10] * 1e-3,
            (double)d[m - 1] * 1e-3, sum / (double)m * 1e-3, busy > 0 ? 100.0 * sum / busy : 0.0);
  }
  weft__free(d);
}

void weft__cu_timing_run(cu_plan *cp, weft_run *run) {
  cu_timing *tm = cp->tm;
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess) cur = -1;
  memset(tm->have, 0, cp->n);
  if (cp->replaying) {
    replay_times(cp);
  } else {
    for (uint32_t i = 0; i < cp->n; i++) eager_end(cp, i);
    for (int d = 0; d < cp->st->ndev; d++)
      for (int k = 0; k < CU_MAX_COMPUTE + 3; k++)
        if (cp->used[d] >> k & 1) eager_stream(cp, d, k);
    /* A split copy starts once its product's first half is done (known now). */
    for (uint32_t i = 0; i < cp->n; i++)
      if ((cp->x[i].flags & WEFT__G_SPLIT_COPY) && (tm->have[i] & 3) == 3) {
        uint64_t b = max_u64(tm->start[i], split_start(cp, i));
        tm->start[i] = b < tm->end[i] ? b : tm->end[i];
      }
    if (tm->tick0 != NULL) check_starts(cp);
  }
  for (uint32_t i = 0; i < cp->n; i++)
    if ((tm->have[i] & 3) == 3) weft__sched_node_time(run, i, tm->start[i], tm->end[i], lane_of(&cp->x[i]));
  mem_samples(cp, run);
  if (cur >= 0) cudaSetDevice(cur);
  cudaGetLastError();
}
