/* des.c — a planned run in virtual time: a discrete-event simulation of the simulated machine.
 *
 * What is modelled (docs/simulator.md has it for users):
 *   host submission  each GPU node is enqueued by the host, costing the node's `submit`
 *                    (launch_s plus event_s per cross-stream predecessor) plus temp_s per
 *                    temporary it allocates, divided by min(launch_lanes, nodes ready) (workers
 *                    enqueue independent nodes on different streams in parallel; a chain is
 *                    enqueued one node after the other), but with others ready no less than
 *                    the node's submit_min (a product's gemm_f32_wide_s, from
 *                    src/sched/cost/cost.c); or replay_node_s when an all-GPU graph runs again
 *                    (CUDA graph replay). A GPU node can be submitted once its GPU predecessors
 *                    are submitted (the device orders them through streams and events) and its
 *                    CPU predecessors ended.
 *   batches          a node of a batch (src/sched/plan/batches.c; sim_backend.c prices it) costs its submission
 *                    batch_node_s and the batch's last node a launch too; the batch's nodes
 *                    join their stream when the last is submitted (its kernel is launched
 *                    then), and in a replay only the last costs replay_node_s (the graph holds
 *                    one kernel node per batch).
 *   streams          FIFO queues: a node starts only after the node submitted before it on its
 *                    stream has ended.
 *   engines          per device a compute engine and 1..3 copy engines fed by the H2D, D2H and
 *                    peer streams. Each copy engine runs one copy at a time. The compute engine
 *                    admits every stream head whose predecessors have ended, in the order they
 *                    were submitted, and hands out its capacity, 1, in that order: kernel k
 *                    runs at min(1, capacity left / share_k), where its share is the part of the
 *                    device it needs for full speed (measured for small products, computed for
 *                    the rest, 1 for a kernel that fills the device). Large kernels then run
 *                    one after the other, first come first served; small ones side by side, as
 *                    fast as their shares allow. A kernel whose speed changes is re-timed (the
 *                    work left at the new speed); its older end event becomes stale.
 *   replay's fan-out in a replayed graph the device's executor launches the GPU successors of a
 *                    node that ended one after the other, replay_node_s apart (the first at
 *                    once: a chain's launch gap is in its kernels' measured times), so a node
 *                    whose result has several readers delays the later ones (sync_logging's
 *                    product i, read by product i + 1 and by its norm).
 *   replay's end     a replayed graph frees the temporaries nobody claimed in memory nodes at its
 *                    end, one after another: replay_temp_s each before the host sees the end.
 *   a run's fixed    a run with GPU nodes ends run_s (eager) or replay_run_s (replayed) after
 *   cost             its last GPU node: the wake-ups and the drain between the launch call and
 *                    the caller's return, measured on a graph of one tiny node.
 *   the caller       a run that outlasts weft_run_wait's watch (WEFT__WAIT_SPIN_NS) finds its
 *                    caller asleep: the host's wake_s more before the caller returns.
 *   CPU workers      host_lanes virtual workers run CPU nodes, first ready first; a CPU node
 *                    that waits for a GPU node sees its end notify_s later.
 *   memory           per GPU, its resident tensors plus the live temporaries: a temporary is
 *                    allocated when its first writer starts and freed, as the CUDA backend
 *                    does, when the later node that claims it starts (or when its last user
 *                    ends, if that is later); one nobody claims lives to the end of the run
 *                    (src/sched/plan/memory.c, "the window").
 * Nodes that did not run (skipped after a failure, or cancelled) take no time and no resource.
 *
 * The event loop pops the earliest event (ties in the order the events were made, so the
 * result is deterministic), applies it, then starts whatever became possible at that time:
 * CPU workers, each touched device's submission channel and engines. Costs O((n + m) log n),
 * plus O(compute streams) per kernel start and end to share the device.
 *
 * Statistics use the report's definitions (include/weft/report.h): a copy is a node that
 * moves data between two devices; its hidden part is the part of its interval during which a
 * compute node ran on its source or destination device; the critical path is the longest
 * chain by modelled cost. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/sim/sim_internal.h"
#include "backends/backend.h"
#include "sched/sched.h"

/* ---- a binary heap of (time, sequence) items --------------------------------------------- */

typedef struct item {
  double t;
  uint64_t seq;
  uint32_t node;
  uint32_t type : 3;
  uint32_t gen : 29; /* EV_END of a kernel: its timing's generation (an older one is stale) */
} item;

typedef struct heap {
  item *a;
  size_t len, cap;
} heap;

static int before(const item *x, const item *y) {
  return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static int heap_push(heap *h, item it) {
  if (h->len == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 64;
    item *a = weft__realloc(h->a, cap * sizeof *a);
    if (a == NULL) return WEFT_ENOMEM;
    h->a = a;
    h->cap = cap;
  }
  size_t i = h->len++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!before(&it, &h->a[parent])) break;
    h->a[i] = h->a[parent];
    i = parent;
  }
  h->a[i] = it;
  return WEFT_OK;
}

static item heap_pop(heap *h) {
  item top = h->a[0], last = h->a[--h->len];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->len) break;
    if (c + 1 < h->len && before(&h->a[c + 1], &h->a[c])) c++;
    if (!before(&h->a[c], &last)) break;
    h->a[i] = h->a[c];
    i = c;
  }
  if (h->len > 0) h->a[i] = last;
  return top;
}

/* ---- the simulation state ----------------------------------------------------------------- */

enum { EV_HOST_READY, EV_SUBMIT_READY, EV_SUBMITTED, EV_WAKE, EV_END };
#define GEN_MASK ((1u << 29) - 1)

typedef struct devstate {
  heap submitq;     /* GPU nodes ready to be submitted, by (ready time, id) */
  int submit_busy;  /* a submission in flight */
  uint32_t *running;       /* engine 0: the kernels admitted, in start order */
  int nrunning;
  uint8_t engine_busy[4];  /* copy engines 1..3 */
  uint32_t *head, *tail; /* per stream: FIFO of submitted nodes, linked through next[] */
  uint64_t live;    /* bytes in use */
  int dirty;        /* in the dirty list */
} devstate;

typedef struct sim {
  const weft__sim *m;
  weft__sim_plan *sp;
  const weft__plan *p;
  int replay;
  int nstreams;     /* per device */
  double now;
  uint64_t seq;
  heap events;
  devstate *dev;
  int *dirty, ndirty;
  /* per rank (one without sim_ranks): the CPU nodes ready, its free workers (W a rank, from
   * r W), the messages ready to leave on its link and whether one is on it, and a list of the
   * ranks with something to start */
  int W;
  heap *hostq, *linkq;
  int *free_workers, *nfree;
  uint8_t *link_busy, *host_dirty;
  int *hdirty, nhdirty;
  /* per node */
  uint32_t *issue_left, *done_left, *next;
  double *issue_at, *ready_at, *submitted, *cp;
  double *not_before; /* replays: a GPU node starts no earlier (its launch by the executor) */
  /* per kernel: work left (seconds at full speed) as of t_last, its speed, its timing's
   * generation, and whether it was admitted to the compute engine */
  double *rem, *rate, *t_last;
  uint32_t *gen;
  uint8_t *admitted;
  uint32_t *temp_left;
  /* memory samples (t, device, bytes) for the report */
  weft__vec samples;
  int rc;
} sim;

typedef struct sample {
  double t;
  int dev;
  uint64_t bytes;
} sample;

static void push_gen(sim *s, double t, uint32_t type, uint32_t node, uint32_t gen) {
  if (s->rc == WEFT_OK && heap_push(&s->events, (item){t, s->seq++, node, type, gen & GEN_MASK}) != WEFT_OK)
    s->rc = WEFT_ENOMEM;
}

static void push(sim *s, double t, uint32_t type, uint32_t node) { push_gen(s, t, type, node, 0); }

static void mark_dirty(sim *s, int d) {
  if (!s->dev[d].dirty) {
    s->dev[d].dirty = 1;
    s->dirty[s->ndirty++] = d;
  }
}

static void mark_host(sim *s, int r) {
  if (!s->host_dirty[r]) {
    s->host_dirty[r] = 1;
    s->hdirty[s->nhdirty++] = r;
  }
}

/* The report's CPU lane of worker w of rank r (with several ranks, each has W + 1 lanes: its
 * workers, then its messages). */
static uint32_t cpu_lane(const sim *s, int r, int w) {
  return s->m->ranks > 1 ? (uint32_t)(r * (s->W + 1) + w) : (uint32_t)w;
}

static int ran(const sim *s, uint32_t i) { return s->sp->ran[i]; }
static int gpu_node(const sim *s, uint32_t i) { return s->sp->nodes[i].dev >= 0; }

/* Node `node` changes device d's memory in use by `delta` bytes; the first allocation that
 * does not fit is recorded (the run then fails with it, as it would on the device). */
static void mem_change(sim *s, int d, int64_t delta, uint32_t node) {
  devstate *ds = &s->dev[d];
  ds->live = (uint64_t)((int64_t)ds->live + delta);
  uint64_t total = s->sp->resident[d] + ds->live;
  if (total > s->sp->peak[d]) s->sp->peak[d] = total;
  weft__sim_result *res = &s->sp->res;
  if (delta > 0 && total > s->m->cost.prof.gpu.memory_bytes && res->oom_dev < 0) {
    res->oom_dev = d;
    res->oom_node = node;
    res->oom_asked = (uint64_t)delta;
    res->oom_total = total;
  }
  sample smp = {s->now, d, total};
  if (s->rc == WEFT_OK && weft__vec_push(&s->samples, &smp) != WEFT_OK) s->rc = WEFT_ENOMEM;
}

/* Node i starts now: its critical path, its temporaries. */
static void node_start(sim *s, uint32_t i) {
  weft__sim_plan *sp = s->sp;
  const weft__xnode *x = &s->p->x[i];
  double cp = 0;
  for (uint32_t e = x->pred_begin; e < x->pred_end; e++) cp = WEFT__MAX(cp, s->cp[s->p->pred[e]]);
  s->cp[i] = cp + (ran(s, i) ? sp->nodes[i].cost : 0);
  sp->start[i] = s->now;
  /* Frees first (the claimed temporaries' memory goes to this node's allocations). */
  for (uint32_t k = sp->claim_off[i]; k < sp->claim_off[i + 1]; k++) {
    uint32_t t = sp->claim_ids[k];
    if (--s->temp_left[t] == 0) mem_change(s, sp->temp_dev[t], -(int64_t)sp->temp_bytes[t], i);
  }
  for (uint32_t k = sp->alloc_off[i]; k < sp->alloc_off[i + 1]; k++) {
    uint32_t t = sp->alloc_ids[k];
    mem_change(s, sp->temp_dev[t], (int64_t)sp->temp_bytes[t], i);
  }
}

static void release_temps(sim *s, uint32_t i) {
  weft__sim_plan *sp = s->sp;
  for (uint32_t k = sp->use_off[i]; k < sp->use_off[i + 1]; k++) {
    uint32_t t = sp->use_ids[k];
    if (--s->temp_left[t] == 0) mem_change(s, sp->temp_dev[t], -(int64_t)sp->temp_bytes[t], i);
  }
}

/* A predecessor of GPU node j no longer holds back its submission (as of time t). */
static void issue_dep_done(sim *s, uint32_t j, double t) {
  s->issue_at[j] = WEFT__MAX(s->issue_at[j], t);
  if (--s->issue_left[j] == 0) push(s, s->issue_at[j], EV_SUBMIT_READY, j);
}

static void on_end(sim *s, uint32_t i) {
  weft__sim_plan *sp = s->sp;
  const weft__sim_node *sn = &sp->nodes[i];
  int g = gpu_node(s, i), r = ran(s, i);
  if (!r) node_start(s, i); /* a node that did not run ends where it became ready */
  sp->end[i] = s->now;
  if (r && g) {
    devstate *ds = &s->dev[sn->dev];
    if (sn->engine == 0) {
      int k = 0;
      while (k < ds->nrunning && ds->running[k] != i) k++;
      WEFT_ASSERT(k < ds->nrunning);
      memmove(ds->running + k, ds->running + k + 1, (size_t)(ds->nrunning - k - 1) * sizeof *ds->running);
      ds->nrunning--;
    } else {
      ds->engine_busy[sn->engine] = 0;
    }
    ds->head[sn->stream] = s->next[i];
    if (s->next[i] == UINT32_MAX) ds->tail[sn->stream] = UINT32_MAX;
    mark_dirty(s, sn->dev);
  } else if (r && sn->msg) {
    s->link_busy[sn->rank] = 0;
    mark_host(s, sn->rank);
  } else if (r) {
    int rk = sn->rank, w = (int)sp->cpu_lane[i] - (int)cpu_lane(s, rk, 0);
    s->free_workers[(size_t)rk * (size_t)s->W + (size_t)s->nfree[rk]++] = w;
    mark_host(s, rk);
  }
  release_temps(s, i);
  const weft__xnode *x = &s->p->x[i];
  int slot = 0; /* replays: the executor launches i's GPU successors one after the other */
  for (uint32_t k = x->succ_begin; k < x->succ_end; k++) {
    uint32_t j = s->p->succ[k];
    int gj = gpu_node(s, j), rj = ran(s, j);
    if (s->replay && r && g && gj && rj && sp->nodes[j].dev == sn->dev && (k == x->succ_begin || s->p->succ[k - 1] != j)) {
      if (slot > 0) {
        double at = s->now + slot * s->m->cost.prof.gpu.replay_node_s;
        if (at > s->not_before[j]) {
          s->not_before[j] = at;
          push(s, at, EV_WAKE, j);
        }
      }
      slot++;
    }
    double seen = s->now + (r && g && !gj && rj ? s->m->cost.prof.gpu.notify_s : 0);
    s->ready_at[j] = WEFT__MAX(s->ready_at[j], seen);
    if (gj && rj && !(r && g)) issue_dep_done(s, j, s->now);
    if (--s->done_left[j] != 0) continue;
    if (!rj)
      push(s, s->ready_at[j], EV_END, j);
    else if (!gj)
      push(s, s->ready_at[j], EV_HOST_READY, j);
    else
      mark_dirty(s, sp->nodes[j].dev);
  }
}

/* Appends node i to its stream's FIFO. */
static void enqueue(sim *s, devstate *ds, uint32_t i) {
  const weft__sim_node *sn = &s->sp->nodes[i];
  s->next[i] = UINT32_MAX;
  if (ds->tail[sn->stream] == UINT32_MAX)
    ds->head[sn->stream] = i;
  else
    s->next[ds->tail[sn->stream]] = i;
  ds->tail[sn->stream] = i;
}

static void on_submitted(sim *s, uint32_t i) {
  const weft__sim_node *sn = &s->sp->nodes[i];
  devstate *ds = &s->dev[sn->dev];
  ds->submit_busy = 0;
  s->submitted[i] = s->now;
  /* A node of a batch reaches its stream with the batch's kernel, which its last node
   * launches (if that node does not run, the drain launches the batch: each node as it came). */
  if (sn->batch_last == UINT32_MAX || !ran(s, sn->batch_last)) {
    enqueue(s, ds, i);
  } else if (sn->batch_last == i) {
    for (uint32_t q = sn->batch_first; q != i; q = s->sp->nodes[q].batch_next) enqueue(s, ds, q);
    enqueue(s, ds, i);
  }
  mark_dirty(s, sn->dev);
  const weft__xnode *x = &s->p->x[i];
  for (uint32_t k = x->succ_begin; k < x->succ_end; k++) {
    uint32_t j = s->p->succ[k];
    if (gpu_node(s, j) && ran(s, j)) issue_dep_done(s, j, s->now);
  }
}

/* The device's capacity, 1, handed out to the admitted kernels in start order: kernel k runs
 * at min(1, capacity left / share_k). A kernel whose speed changes has the work it has done
 * at the old speed taken off and its end re-timed (older end events become stale); one whose
 * speed is unchanged keeps its end, so a kernel that runs alone ends exactly `cost` after
 * its start. A kernel starts (for the timeline and its memory) when it first progresses. */
static void share_device(sim *s, devstate *ds) {
  double left = 1;
  for (int k = 0; k < ds->nrunning; k++) {
    uint32_t i = ds->running[k];
    double share = s->sp->nodes[i].share;
    double give = WEFT__MIN(share, left);
    left -= give;
    if (left < 1e-12) left = 0;
    double rate = give >= share ? 1.0 : give / share;
    if (rate == s->rate[i]) continue;
    if (s->rate[i] > 0) s->rem[i] = WEFT__MAX(0.0, s->rem[i] - s->rate[i] * (s->now - s->t_last[i]));
    s->t_last[i] = s->now;
    s->rate[i] = rate;
    s->gen[i]++;
    if (rate <= 0) continue;
    if (s->sp->start[i] < 0) node_start(s, i);
    push_gen(s, s->now + s->rem[i] / rate, EV_END, i, s->gen[i]);
  }
}

/* Starts what can start now on device d: a submission, and each free engine's best head. */
static void run_device(sim *s, int d) {
  devstate *ds = &s->dev[d];
  weft__sim_plan *sp = s->sp;
  ds->dirty = 0;
  const weft__sim_gpu *g = &s->m->cost.prof.gpu;
  if (!ds->submit_busy && ds->submitq.len > 0) {
    uint32_t i = heap_pop(&ds->submitq).node;
    const weft__sim_node *sn = &sp->nodes[i];
    /* A replayed graph holds a batch as one kernel node. */
    double c = sn->batch_last == UINT32_MAX || sn->batch_last == i ? g->replay_node_s : 0;
    if (!s->replay) {
      /* The launch and events, and the allocation of the node's temporaries (and their frees
       * by the drain: one figure per temporary). */
      c = sn->submit + (double)(sp->alloc_off[i + 1] - sp->alloc_off[i]) * g->temp_s;
      /* Workers launch ready nodes on different streams at once: with others ready, the host
       * gets through min(launch_lanes, nodes ready) launches in the time of one (a fraction
       * of a lane counts: the launches overlap partly). A chain has one ready at a time. A
       * replay's executor launches one node at a time. */
      if (g->launch_lanes > 1) c /= WEFT__MIN(g->launch_lanes, 1.0 + (double)ds->submitq.len);
      if (ds->submitq.len > 0) c = WEFT__MAX(c, sn->submit_min);
    }
    ds->submit_busy = 1;
    push(s, s->now + c, EV_SUBMITTED, i);
  }
  int engines = 1 + s->m->cost.prof.gpu.copy_engines;
  for (int e = 0; e < engines; e++) {
    /* The compute engine admits every head that may start, in the order they were submitted;
     * a copy engine starts one copy at a time. */
    for (;;) {
      if (e > 0 && ds->engine_busy[e]) break;
      uint32_t best = UINT32_MAX;
      for (int st = 0; st < s->nstreams; st++) {
        uint32_t h = ds->head[st];
        if (h == UINT32_MAX || sp->nodes[h].engine != e || s->done_left[h] != 0 || s->admitted[h] ||
            s->not_before[h] > s->now)
          continue;
        if (best == UINT32_MAX || s->submitted[h] < s->submitted[best] ||
            (s->submitted[h] == s->submitted[best] && h < best))
          best = h;
      }
      if (best == UINT32_MAX) break;
      s->admitted[best] = 1;
      double cost = sp->nodes[best].cost;
      if (e == 0) {
        ds->running[ds->nrunning++] = best;
        s->rem[best] = cost;
        s->rate[best] = 0;
        continue;
      }
      ds->engine_busy[e] = 1;
      node_start(s, best);
      push(s, s->now + cost, EV_END, best);
    }
  }
  share_device(s, ds);
}

/* The duration of CPU node i starting now on rank r, where the profile has the host's wide
 * curves (else `cost`: the product split over blas_threads workers at the rate a worker of the
 * calibration's chain of products had). A node the CPU backend does not split (a tile op, a
 * product under WEFT__CPU_SPLIT_FLOPS) runs on its worker at the wide rate (every worker its
 * own); one it splits, over the rank's idle workers (none while other nodes are ready there) at
 * the chain's rate a worker, or at the wide rate on its worker if that is faster. */
static double cpu_cost(const sim *s, uint32_t i, int r) {
  const weft__sim_node *sn = &s->sp->nodes[i];
  if (sn->cost_wide < 0) return sn->cost;
  if (!sn->splits) return sn->cost_wide;
  int blas = s->m->cost.blas_threads, k = s->hostq[r].len > 0 ? 1 : 1 + s->nfree[r];
  if (k > blas) k = blas;
  return WEFT__MIN(sn->cost_wide, sn->cost * blas / k);
}

/* Starts what can start now on each rank with news: CPU nodes on its free workers, first
 * ready first, and the next message on its link. */
static void run_host(sim *s) {
  while (s->nhdirty > 0) {
    int r = s->hdirty[--s->nhdirty];
    s->host_dirty[r] = 0;
    while (s->nfree[r] > 0 && s->hostq[r].len > 0) {
      uint32_t i = heap_pop(&s->hostq[r]).node;
      int w = s->free_workers[(size_t)r * (size_t)s->W + (size_t)--s->nfree[r]];
      s->sp->cpu_lane[i] = cpu_lane(s, r, w);
      node_start(s, i);
      push(s, s->now + cpu_cost(s, i, r), EV_END, i);
    }
    if (!s->link_busy[r] && s->linkq[r].len > 0) {
      uint32_t i = heap_pop(&s->linkq[r]).node;
      s->link_busy[r] = 1;
      s->sp->cpu_lane[i] = cpu_lane(s, r, s->W);
      node_start(s, i);
      push(s, s->now + s->sp->nodes[i].cost, EV_END, i);
    }
  }
}

/* ---- statistics ---------------------------------------------------------------------------- */

typedef struct span {
  double s, e;
} span;

static int cmp_span(const void *a, const void *b) {
  const span *x = a, *y = b;
  return x->s < y->s ? -1 : x->s > y->s;
}

/* Overlap of [a, b] with a sorted union of disjoint spans. */
static double overlap(const span *u, size_t n, double a, double b) {
  size_t lo = 0, hi = n;
  while (lo < hi) { /* the first span that ends after a */
    size_t mid = (lo + hi) / 2;
    if (u[mid].e <= a)
      lo = mid + 1;
    else
      hi = mid;
  }
  double sum = 0;
  for (size_t k = lo; k < n && u[k].s < b; k++) sum += WEFT__MIN(b, u[k].e) - WEFT__MAX(a, u[k].s);
  return sum;
}

/* The part of [a, b] covered by the union of two sorted unions. */
static double overlap2(const span *u, size_t nu, const span *v, size_t nv, double a, double b) {
  if (v == u || nv == 0) return overlap(u, nu, a, b);
  if (nu == 0) return overlap(v, nv, a, b);
  /* |A or B| = |A| + |B| - |A and B|; the intersection by a merge of the two. */
  double both = 0;
  size_t i = 0, j = 0;
  while (i < nu && j < nv) {
    double s0 = WEFT__MAX(WEFT__MAX(u[i].s, v[j].s), a);
    double e0 = WEFT__MIN(WEFT__MIN(u[i].e, v[j].e), b);
    if (e0 > s0) both += e0 - s0;
    if (u[i].e < v[j].e)
      i++;
    else
      j++;
  }
  return overlap(u, nu, a, b) + overlap(v, nv, a, b) - both;
}

/* Device index for the statistics: GPUs 0..ngpus-1 (the plan's slots), the host ngpus. */
static int stat_dev(const sim *s, weft_device d) {
  return d.kind == WEFT_DEVICE_CUDA ? weft__gpu_slot(s->p->graph->rt, d) : s->sp->ngpus;
}

static int statistics(sim *s) {
  weft__sim_plan *sp = s->sp;
  const weft__plan *p = s->p;
  int nd = sp->ngpus + 1;
  size_t *count = weft__calloc((size_t)nd + 1, sizeof *count);
  span *spans = weft__malloc((p->n ? p->n : 1) * sizeof *spans);
  if (count == NULL || spans == NULL) {
    weft__free(count);
    weft__free(spans);
    return weft__oom("the simulator's statistics");
  }
  weft__sim_result *res = &sp->res;
  /* Compute intervals grouped by device (counting sort), then each group sorted and merged
   * into a union of disjoint spans. */
  for (uint32_t i = 0; i < p->n; i++)
    if (ran(s, i) && !sp->nodes[i].is_copy) count[stat_dev(s, p->x[i].node->device) + 1]++;
  for (int d = 0; d < nd; d++) count[d + 1] += count[d];
  size_t *fill = weft__malloc((size_t)nd * sizeof *fill);
  if (fill == NULL) {
    weft__free(count);
    weft__free(spans);
    return weft__oom("the simulator's statistics");
  }
  memcpy(fill, count, (size_t)nd * sizeof *fill);
  for (uint32_t i = 0; i < p->n; i++)
    if (ran(s, i) && !sp->nodes[i].is_copy)
      spans[fill[stat_dev(s, p->x[i].node->device)]++] = (span){sp->start[i], sp->end[i]};
  size_t *len = fill; /* reused: the length of each device's union */
  for (int d = 0; d < nd; d++) {
    span *u = spans + count[d];
    size_t n = count[d + 1] - count[d], k = 0;
    qsort(u, n, sizeof *u, cmp_span);
    for (size_t j = 0; j < n; j++) {
      if (k > 0 && u[j].s <= u[k - 1].e)
        u[k - 1].e = WEFT__MAX(u[k - 1].e, u[j].e);
      else
        u[k++] = u[j];
    }
    len[d] = k;
  }
  res->copy_s = res->hidden_copy_s = res->critical_path_s = res->makespan_s = 0;
  res->nodes_run = 0;
  /* A replayed graph ends with the frees of the temporaries nobody claimed, memory nodes one
   * after the other (cuda_replay.c), before the host can see its end. */
  double tail = s->replay ? (double)(sp->ntemps - sp->claim_off[sp->n]) * s->m->cost.prof.gpu.replay_temp_s : 0;
  /* And a run with GPU nodes costs its fixed part (wake-ups, the drain) once. */
  tail += s->replay ? s->m->cost.prof.gpu.replay_run_s : s->m->cost.prof.gpu.run_s;
  for (uint32_t i = 0; i < p->n; i++) {
    if (!ran(s, i)) continue;
    res->nodes_run++;
    res->critical_path_s = WEFT__MAX(res->critical_path_s, s->cp[i]);
    double seen = sp->end[i] + (gpu_node(s, i) ? tail + s->m->cost.prof.gpu.notify_s : 0);
    res->makespan_s = WEFT__MAX(res->makespan_s, seen);
    if (!sp->nodes[i].is_copy) continue;
    const weft_node *nd_ = p->x[i].node;
    int a = stat_dev(s, nd_->args[0].t->device), b = stat_dev(s, nd_->args[1].t->device);
    res->copy_s += sp->end[i] - sp->start[i];
    res->hidden_copy_s += overlap2(spans + count[a], len[a], spans + count[b], len[b], sp->start[i],
                                   sp->end[i]);
  }
  if (res->makespan_s > (double)WEFT__WAIT_SPIN_NS * 1e-9) res->makespan_s += s->m->cost.prof.host.wake_s;
  weft__free(count);
  weft__free(spans);
  weft__free(fill);
  return WEFT_OK;
}

/* ---- reporting to the run's timing records -------------------------------------------------- */

static uint64_t ns_at(uint64_t t0, double t) { return t0 + (uint64_t)llround(t * 1e9); }

static void report(sim *s, weft_run *run, uint64_t t0) {
  weft__sim_plan *sp = s->sp;
  const weft_runtime *rt = s->p->graph->rt;
  for (uint32_t i = 0; i < sp->n; i++) {
    if (!ran(s, i)) continue;
    uint32_t lane = gpu_node(s, i) ? sp->nodes[i].lane : WEFT__LANE(WEFT__LANE_CPU, 0, sp->cpu_lane[i]);
    weft__sched_node_time(run, i, ns_at(t0, sp->start[i]), ns_at(t0, sp->end[i]), lane);
  }
  /* Every change of a device's memory, unless there are more than the report keeps: then the
   * peak of each device, at the first time it was reached. */
  const sample *smp = s->samples.data;
  size_t ns = s->samples.len;
  if (ns <= WEFT__MEM_SAMPLES_MAX - (size_t)sp->ngpus) {
    for (int d = 0; d < sp->ngpus; d++)
      if (sp->resident[d] > 0 || ns > 0) weft__sched_mem_sample(run, weft__gpu_of_slot(rt, d), t0, sp->resident[d]);
    for (size_t k = 0; k < ns; k++)
      weft__sched_mem_sample(run, weft__gpu_of_slot(rt, smp[k].dev), ns_at(t0, smp[k].t), smp[k].bytes);
    return;
  }
  for (int d = 0; d < sp->ngpus; d++) {
    size_t k = 0;
    while (k < ns && !(smp[k].dev == d && smp[k].bytes == sp->peak[d])) k++;
    weft__sched_mem_sample(run, weft__gpu_of_slot(rt, d), ns_at(t0, k < ns ? smp[k].t : 0), sp->peak[d]);
  }
}

/* ---- the simulation ------------------------------------------------------------------------- */

int weft__sim_simulate(const weft__sim *m, weft__sim_plan *sp, const weft__plan *p,
                       weft_run *run, uint64_t t0_ns) {
  uint32_t n = p->n;
  size_t nn = n ? n : 1;
  int ng = sp->ngpus, S = m->cost.prof.gpu.compute_streams;
  sim s;
  memset(&s, 0, sizeof s);
  s.m = m;
  s.sp = sp;
  s.p = p;
  s.nstreams = S + WEFT__COPY_STREAMS;
  s.replay = sp->all_gpu && sp->runs > 1 && m->cost.prof.gpu.replay_node_s > 0;
  weft__vec_init(&s.samples, sizeof(sample));
  s.dev = weft__calloc(ng ? (size_t)ng : 1, sizeof *s.dev);
  s.dirty = weft__malloc((ng ? (size_t)ng : 1) * sizeof *s.dirty);
  int R = m->ranks;
  s.W = m->cost.host_lanes;
  s.hostq = weft__calloc((size_t)R, sizeof *s.hostq);
  s.linkq = weft__calloc((size_t)R, sizeof *s.linkq);
  s.free_workers = weft__malloc((size_t)R * (size_t)s.W * sizeof *s.free_workers);
  s.nfree = weft__calloc((size_t)R, sizeof *s.nfree);
  s.link_busy = weft__calloc((size_t)R, 1);
  s.host_dirty = weft__calloc((size_t)R, 1);
  s.hdirty = weft__malloc((size_t)R * sizeof *s.hdirty);
  s.issue_left = weft__malloc(nn * sizeof *s.issue_left);
  s.done_left = weft__malloc(nn * sizeof *s.done_left);
  s.next = weft__malloc(nn * sizeof *s.next);
  s.issue_at = weft__calloc(nn, sizeof *s.issue_at);
  s.not_before = weft__calloc(nn, sizeof *s.not_before);
  s.ready_at = weft__calloc(nn, sizeof *s.ready_at);
  s.submitted = weft__calloc(nn, sizeof *s.submitted);
  s.cp = weft__calloc(nn, sizeof *s.cp);
  s.temp_left = weft__malloc((sp->ntemps ? sp->ntemps : 1) * sizeof *s.temp_left);
  s.rem = weft__calloc(nn, sizeof *s.rem);
  s.rate = weft__calloc(nn, sizeof *s.rate);
  s.t_last = weft__calloc(nn, sizeof *s.t_last);
  s.gen = weft__calloc(nn, sizeof *s.gen);
  s.admitted = weft__calloc(nn, 1);
  int rc = WEFT_OK;
  if (!s.dev || !s.dirty || !s.hostq || !s.linkq || !s.free_workers || !s.nfree || !s.link_busy || !s.host_dirty ||
      !s.hdirty || !s.issue_left || !s.done_left || !s.next ||
      !s.issue_at || !s.not_before || !s.ready_at || !s.submitted || !s.cp || !s.temp_left ||
      !s.rem || !s.rate || !s.t_last || !s.gen || !s.admitted) {
    rc = weft__oom("the simulation");
    goto done;
  }
  for (int d = 0; d < ng; d++) {
    s.dev[d].head = weft__malloc((size_t)s.nstreams * sizeof(uint32_t));
    s.dev[d].tail = weft__malloc((size_t)s.nstreams * sizeof(uint32_t));
    s.dev[d].running = weft__malloc((size_t)s.nstreams * sizeof(uint32_t));
    if (s.dev[d].head == NULL || s.dev[d].tail == NULL || s.dev[d].running == NULL) {
      rc = weft__oom("the simulation");
      goto done;
    }
    for (int st = 0; st < s.nstreams; st++) s.dev[d].head[st] = s.dev[d].tail[st] = UINT32_MAX;
    sp->peak[d] = sp->resident[d];
  }
  sp->res.oom_dev = -1;
  for (int d = 0; d < ng && sp->res.oom_dev < 0; d++)
    if (sp->resident[d] > m->cost.prof.gpu.memory_bytes) {
      sp->res.oom_dev = d;
      sp->res.oom_node = UINT32_MAX;
      sp->res.oom_asked = sp->res.oom_total = sp->resident[d];
    }
  for (int r = 0; r < R; r++)
    for (int w = s.W - 1; w >= 0; w--) s.free_workers[(size_t)r * (size_t)s.W + (size_t)s.nfree[r]++] = w;
  /* Each temporary is freed once its users have ended and its claimer has started. */
  for (uint32_t t = 0; t < sp->ntemps; t++) s.temp_left[t] = sp->temp_users[t] + 1;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t preds = p->x[i].pred_end - p->x[i].pred_begin;
    s.issue_left[i] = s.done_left[i] = preds;
    s.next[i] = UINT32_MAX;
    sp->start[i] = -1;
    sp->end[i] = -1;
    if (!sp->ran[i] || sp->nodes[i].dev < 0) {
      if (preds == 0) push(&s, 0, sp->ran[i] ? EV_HOST_READY : EV_END, i);
    } else if (s.issue_left[i] == 0) {
      push(&s, 0, EV_SUBMIT_READY, i);
    }
  }
  while (s.events.len > 0 && s.rc == WEFT_OK) {
    item ev = heap_pop(&s.events);
    s.now = ev.t;
    uint32_t i = ev.node;
    switch (ev.type) {
      case EV_HOST_READY: {
        const weft__sim_node *sn = &sp->nodes[i];
        if (heap_push(sn->msg ? &s.linkq[sn->rank] : &s.hostq[sn->rank], (item){ev.t, i, i, 0}) != WEFT_OK)
          s.rc = WEFT_ENOMEM;
        mark_host(&s, sn->rank);
        break;
      }
      case EV_SUBMIT_READY:
        if (heap_push(&s.dev[sp->nodes[i].dev].submitq, (item){ev.t, i, i, 0}) != WEFT_OK)
          s.rc = WEFT_ENOMEM;
        mark_dirty(&s, sp->nodes[i].dev);
        break;
      case EV_SUBMITTED:
        on_submitted(&s, i);
        break;
      case EV_WAKE:
        mark_dirty(&s, sp->nodes[i].dev);
        break;
      default:
        if (ev.gen != (s.gen[i] & GEN_MASK)) break; /* a kernel's end re-timed since */
        on_end(&s, i);
        break;
    }
    /* Decisions at time t see every event of time t (two nodes made ready by one submission
     * are both in the queue when the first is launched). */
    if (s.events.len > 0 && s.events.a[0].t == s.now) continue;
    run_host(&s);
    while (s.ndirty > 0) run_device(&s, s.dirty[--s.ndirty]);
  }
  if (s.rc != WEFT_OK) {
    rc = weft__oom("the simulation's event queue");
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) {
    WEFT_ASSERT(sp->end[i] >= 0); /* every node ended: the plan is acyclic */
    if (!sp->ran[i]) sp->start[i] = sp->end[i] = NAN;
  }
  sp->res.replayed = s.replay;
  if ((rc = statistics(&s)) != WEFT_OK) goto done;
  if (run != NULL) report(&s, run, t0_ns);
done:
  for (int d = 0; s.dev != NULL && d < ng; d++) {
    weft__free(s.dev[d].head);
    weft__free(s.dev[d].tail);
    weft__free(s.dev[d].running);
    weft__free(s.dev[d].submitq.a);
  }
  weft__free(s.dev);
  weft__free(s.dirty);
  for (int r = 0; r < R && s.hostq != NULL && s.linkq != NULL; r++) {
    weft__free(s.hostq[r].a);
    weft__free(s.linkq[r].a);
  }
  weft__free(s.hostq);
  weft__free(s.linkq);
  weft__free(s.free_workers);
  weft__free(s.nfree);
  weft__free(s.link_busy);
  weft__free(s.host_dirty);
  weft__free(s.hdirty);
  weft__free(s.issue_left);
  weft__free(s.done_left);
  weft__free(s.next);
  weft__free(s.issue_at);
  weft__free(s.not_before);
  weft__free(s.ready_at);
  weft__free(s.submitted);
  weft__free(s.cp);
  weft__free(s.temp_left);
  weft__free(s.rem);
  weft__free(s.rate);
  weft__free(s.t_last);
  weft__free(s.gen);
  weft__free(s.admitted);
  weft__free(s.events.a);
  weft__vec_fini(&s.samples);
  return rc;
}
