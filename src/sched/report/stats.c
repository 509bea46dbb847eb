/* stats.c — weft_run_stats: the snapshot of a finished run (from the plan's timing records),
 * its accessors, the text summary and the JSON statistics.
 *
 * Building a snapshot reads the plan's records once, keeps the nodes whose record belongs to
 * this run (end at or after the launch, a lane), converts times to nanoseconds from the launch
 * and numbers the lanes: the runtime's CPU workers first (idle ones too, so utilisation shows
 * them), then the device lanes in code order, which groups them by device and role. Edges are
 * the plan's (the analysis's plus any a backend added), with the hazard of the analysis edge
 * where there is one. The memory of each device is the backends' samples where a backend
 * reported some, else the bytes of the tensors with storage on that device.
 *
 * The BLAS library the runtime found loaded (weft_runtime_blas_info) is part of the statistics
 * of a run on the real CPU: when its threads compete with weft's workers, or it cannot be called
 * from two threads at once, the text says so in a note and the JSON's "blas" object carries the
 * message; a simulated run's JSON has null there.
 *
 * Units: the model counts nanoseconds; everything public is in seconds. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/report/stats.h"
#include "sched/sched.h"
#include "util/json.h"

static const char *why_names[WEFT_WHY_COUNT] = {
    "none", "pageable", "dependency", "host_sync", "chain", "serialised", "nothing_left", "idle",
};

const char *weft_copy_why_name(int why) {
  return why >= 0 && why < WEFT_WHY_COUNT ? why_names[why] : "unknown";
}

static double sec(uint64_t ns) { return (double)ns * 1e-9; }

/* The BLAS of the runtime, or NULL for a simulated one (its time is virtual). */
static const weft_blas_info *run_blas(const weft_run_stats *st) {
  const weft_runtime *rt = st->graph->rt;
  return rt->by_kind[WEFT_DEVICE_CPU]->vt == &weft__cpu_backend ? &rt->blas : NULL;
}

/* ---- labels ------------------------------------------------------------------------------- */

static const char *result_name(const weft_node *n) {
  for (int i = n->nargs - 1; i >= 0; i--)
    if (n->args[i].mode & WEFT_WRITE) return weft__tensor_name(n->args[i].t);
  return NULL;
}

char *weft__stats_label(const weft_run_stats *st, uint32_t i, char *buf, size_t size) {
  const weft_node *n = weft_graph_node(st->graph, i);
  if (n->kind == WEFT__OP_COPY && n->nargs == 2) {
    char a[32], b[32];
    snprintf(buf, size, "copy %s %s->%s (node %u)", weft__tensor_name(n->args[0].t),
             weft_device_str(n->args[0].t->device, a, sizeof a),
             weft_device_str(n->args[1].t->device, b, sizeof b), i);
    return buf;
  }
  const char *res = weft__node_name(n) != NULL ? weft__node_name(n) : result_name(n);
  if (res != NULL)
    snprintf(buf, size, "%s %s (node %u)", weft_node_op_name(n), res, i);
  else
    snprintf(buf, size, "%s (node %u)", weft_node_op_name(n), i);
  return buf;
}

static void lane_name(uint32_t code, char *buf, size_t size) {
  unsigned dev = WEFT__LANE_DEVICE(code), num = WEFT__LANE_NUMBER(code);
  switch (WEFT__LANE_ROLE(code)) {
  case WEFT__LANE_CPU: snprintf(buf, size, "cpu worker %u", num); break;
  case WEFT__LANE_COMPUTE: snprintf(buf, size, "cuda:%u compute %u", dev, num); break;
  case WEFT__LANE_H2D: snprintf(buf, size, "cuda:%u copy h2d %u", dev, num); break;
  case WEFT__LANE_D2H: snprintf(buf, size, "cuda:%u copy d2h %u", dev, num); break;
  case WEFT__LANE_PEER: snprintf(buf, size, "cuda:%u copy peer %u", dev, num); break;
  case WEFT__LANE_HOSTSIDE: snprintf(buf, size, "cuda:%u host-side", dev); break;
  default: snprintf(buf, size, "cuda:%u lane %u.%u", dev, WEFT__LANE_ROLE(code), num); break;
  }
}

const char *weft__stats_lane_kind(const weft_run_stats *st, uint32_t lane) {
  const weft__rlane *l = &st->rep->lanes[lane];
  switch (WEFT__LANE_ROLE(l->code)) {
  case WEFT__LANE_CPU: return "cpu";
  case WEFT__LANE_COMPUTE: return l->copies_only ? "copy" : "compute";
  case WEFT__LANE_HOSTSIDE: return "host-side";
  default: return "copy";
  }
}

/* ---- building the snapshot ----------------------------------------------------------------- */

static int cmp_sample(const void *a, const void *b) {
  const weft__mem_sample *x = a, *y = b;
  return (x->t_ns > y->t_ns) - (x->t_ns < y->t_ns);
}

/* Whether the record of a node belongs to the run launched at t0. */
static int current(const weft__ntime *t, uint64_t t0) {
  return atomic_load_explicit(&t->lane, memory_order_relaxed) != WEFT__LANE_NONE &&
         atomic_load_explicit(&t->end, memory_order_relaxed) >= t0;
}

/* The lanes: CPU workers 0..nworkers-1 (more if a record names a higher worker), then the
 * distinct device lane codes in order. Fills lane codes and each node's lane index. */
static int number_lanes(weft_run_stats *st, const weft__plan *p, uint64_t t0, uint32_t nworkers,
                        uint32_t **codes_out, uint32_t *ncodes_out) {
  uint32_t n = p->n, k = 0;
  uint32_t *codes = weft__malloc((size_t)(n + nworkers + 1) * sizeof *codes);
  if (codes == NULL) return weft__oom("the statistics of a run");
  for (uint32_t w = 0; w < nworkers; w++) codes[k++] = WEFT__LANE(WEFT__LANE_CPU, 0, w);
  for (uint32_t i = 0; i < n; i++)
    if (current(&p->exec->times[i], t0)) codes[k++] = atomic_load_explicit(&p->exec->times[i].lane, memory_order_relaxed);
  qsort(codes, k, sizeof *codes, weft__cmp_u32);
  uint32_t u = 0;
  for (uint32_t j = 0; j < k; j++)
    if (u == 0 || codes[j] != codes[u - 1]) codes[u++] = codes[j];
  (void)st;
  *codes_out = codes;
  *ncodes_out = u;
  return WEFT_OK;
}

static uint32_t lane_index(const uint32_t *codes, uint32_t ncodes, uint32_t code) {
  uint32_t lo = 0, hi = ncodes;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (codes[mid] < code) lo = mid + 1; else hi = mid;
  }
  return lo;
}

static int device_key_cmp(weft_device a, weft_device b) {
  if (a.kind != b.kind) return a.kind < b.kind ? -1 : 1;
  return (a.index > b.index) - (a.index < b.index);
}

static size_t mem_slot(weft_run_stats *st, weft_device d) {
  for (size_t i = 0; i < st->nmem; i++)
    if (device_key_cmp(st->mem[i].device, d) == 0) return i;
  return SIZE_MAX;
}

static int add_device(weft_run_stats *st, weft_device d, size_t *cap) {
  if (mem_slot(st, d) != SIZE_MAX) return WEFT_OK;
  if (st->nmem == *cap) {
    size_t nc = *cap ? *cap * 2 : 4;
    weft_device_memory *m = weft__realloc(st->mem, nc * sizeof *m);
    if (m == NULL) return weft__oom("the statistics of a run");
    st->mem = m;
    *cap = nc;
  }
  size_t i = st->nmem++;
  while (i > 0 && device_key_cmp(st->mem[i - 1].device, d) > 0) {
    st->mem[i] = st->mem[i - 1];
    i--;
  }
  st->mem[i] = (weft_device_memory){d, 0, 0, "tensors"};
  return WEFT_OK;
}

/* Memory per device: the backends' samples where there are some, else the tensors' bytes. */
static int build_memory(weft_run_stats *st, const weft__plan *p, uint64_t t0) {
  weft_graph *g = st->graph;
  size_t cap = 0;
  int rc;
  if ((rc = add_device(st, weft_cpu(), &cap)) != WEFT_OK) return rc;
  for (size_t i = 0; i < g->nodes.len; i++)
    if ((rc = add_device(st, WEFT__VEC_AT(&g->nodes, weft_node *, i)->device, &cap)) != WEFT_OK)
      return rc;
  weft__timing *tm = p->exec->timing;
  weft__mutex_lock(&tm->lock);
  st->dropped = tm->dropped;
  if (tm->nsamples > 0) {
    st->samples = weft__malloc(tm->nsamples * sizeof *st->samples);
    if (st->samples != NULL) {
      memcpy(st->samples, tm->samples, tm->nsamples * sizeof *st->samples);
      st->nsamples = tm->nsamples;
    }
  }
  weft__mutex_unlock(&tm->lock);
  if (tm->nsamples > 0 && st->samples == NULL) return weft__oom("the statistics of a run");
  for (size_t i = 0; i < st->nsamples; i++) {
    weft__mem_sample *s = &st->samples[i];
    s->t_ns = s->t_ns > t0 ? s->t_ns - t0 : 0;
    if ((rc = add_device(st, s->device, &cap)) != WEFT_OK) return rc;
  }
  if (st->nsamples > 1) qsort(st->samples, st->nsamples, sizeof *st->samples, cmp_sample);
  for (size_t i = 0; i < st->nsamples; i++) {
    weft_device_memory *m = &st->mem[mem_slot(st, st->samples[i].device)];
    m->source = "allocator";
    if (st->samples[i].bytes > m->peak_bytes) m->peak_bytes = st->samples[i].bytes;
    m->current_bytes = st->samples[i].bytes;
  }
  for (size_t i = 0; i < g->tensors.len; i++) {
    const weft_tensor *t = WEFT__VEC_AT(&g->tensors, weft_tensor *, i);
    /* A view (a tile) shares its parent's storage: counted once, there. A placed graph's twin
     * is a view of the program's tensor, which is not in this graph: counted here. */
    if (t->storage_kind == WEFT__S_NONE || t->storage_kind == WEFT__S_EMPTY ||
        (t->storage_kind == WEFT__S_VIEW && t->view->parent->graph == g))
      continue;
    size_t slot = mem_slot(st, t->device);
    if (slot == SIZE_MAX) {
      if ((rc = add_device(st, t->device, &cap)) != WEFT_OK) return rc;
      slot = mem_slot(st, t->device);
    }
    weft_device_memory *m = &st->mem[slot];
    if (strcmp(m->source, "tensors") == 0) {
      m->peak_bytes += t->bytes;
      m->current_bytes += t->bytes;
    }
  }
  return WEFT_OK;
}

/* snprintf for messages that may be cut at the buffer's end (labels are user names). */
static void msgf(char *buf, size_t size, const char *fmt, ...) WEFT__PRINTF(3, 4);
static void msgf(char *buf, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, size, fmt, ap);
  va_end(ap);
}

static void diag_message(const weft_run_stats *st, const weft__rcopy *cp, char *buf, size_t size) {
  char c[160], x[160], dev[32];
  const weft__rep *r = st->rep;
  weft__stats_label(st, cp->node, c, sizeof c);
  if (cp->culprit != WEFT__REP_NONE) weft__stats_label(st, cp->culprit, x, sizeof x);
  const weft_node *n = weft_graph_node(st->graph, cp->node);
  const char *src = n->nargs == 2 ? weft__tensor_name(n->args[0].t) : "its source";
  switch (cp->why) {
  case WEFT_WHY_PAGEABLE:
    msgf(buf, size, "%s: the host side is pageable memory, which a GPU cannot copy "
             "asynchronously (pinned memory was not available for it)", c);
    break;
  case WEFT_WHY_DEPENDENCY:
    if (cp->hazard == WEFT_HAZARD_WAR)
      msgf(buf, size, "%s: the next compute, %s, overwrites %s, which the copy reads, so "
               "it waited for the copy; give each iteration its own tensor", c, x, src);
    else if (cp->hazard == WEFT_HAZARD_RAW)
      msgf(buf, size, "%s: the next compute, %s, needs its result", c, x);
    else
      msgf(buf, size, "%s: the next compute, %s, depends on it", c, x);
    break;
  case WEFT_WHY_HOST_SYNC:
    msgf(buf, size, "%s: a host read at %s forced a synchronisation: the device waited for "
             "the host, which waited for data from the device", c, x);
    break;
  case WEFT_WHY_CHAIN:
    msgf(buf, size, "%s: a chain with nothing to overlap with: every compute node on %s "
             "feeds this copy or depends on it",
             c, weft_device_str(r->node[cp->node].src.kind != WEFT_DEVICE_CPU ? r->node[cp->node].src
                                                                              : r->node[cp->node].dst,
                                dev, sizeof dev));
    break;
  case WEFT_WHY_SERIALISED:
    msgf(buf, size, "%s: copies serialised on one copy engine: it queued behind %s on %s", c,
             x, st->lane_name[r->node[cp->node].lane]);
    break;
  case WEFT_WHY_NOTHING_LEFT:
    msgf(buf, size, "%s: no independent compute was left to run beside it (the start or "
             "the end of the program)", c);
    break;
  case WEFT_WHY_IDLE:
    if (cp->waited_for != WEFT__REP_NONE) {
      char w[160];
      weft__stats_label(st, cp->waited_for, w, sizeof w);
      msgf(buf, size, "%s: the compute that could have overlapped it, %s, was waiting for %s", c,
           x, w);
    } else if (cp->culprit != WEFT__REP_NONE) {
      msgf(buf, size, "%s: the compute that could have overlapped it, %s, was ready but started "
           "only later (its lanes were busy or between nodes)", c, x);
    } else {
      msgf(buf, size, "%s: the device was idle while it ran", c);
    }
    break;
  default: msgf(buf, size, "%s", c); break;
  }
}

static int cmp_diag(const void *a, const void *b) {
  const weft_copy_diagnostic *x = a, *y = b;
  return (x->exposed_s < y->exposed_s) - (x->exposed_s > y->exposed_s);
}

static int build_diagnostics(weft_run_stats *st) {
  const weft__rep *r = st->rep;
  uint64_t exposed[WEFT_WHY_COUNT] = {0}, worst[WEFT_WHY_COUNT] = {0};
  size_t count[WEFT_WHY_COUNT] = {0};
  uint32_t which[WEFT_WHY_COUNT];
  for (uint32_t i = 0; i < r->ncopies; i++) {
    const weft__rcopy *cp = &r->copies[i];
    if (cp->why == WEFT_WHY_NONE) continue;
    uint64_t e = cp->duration - cp->hidden;
    exposed[cp->why] += e;
    if (count[cp->why]++ == 0 || e > worst[cp->why]) {
      worst[cp->why] = e;
      which[cp->why] = i;
    }
  }
  size_t k = 0;
  for (int w = 1; w < WEFT_WHY_COUNT; w++) k += count[w] > 0;
  st->diag = weft__calloc(k ? k : 1, sizeof *st->diag);
  if (st->diag == NULL) return weft__oom("the statistics of a run");
  for (int w = 1; w < WEFT_WHY_COUNT; w++) {
    if (count[w] == 0) continue;
    weft_copy_diagnostic *d = &st->diag[st->ndiag++];
    d->why = w;
    d->exposed_s = sec(exposed[w]);
    d->copies = count[w];
    diag_message(st, &r->copies[which[w]], d->message, sizeof d->message);
  }
  qsort(st->diag, st->ndiag, sizeof *st->diag, cmp_diag);
  return WEFT_OK;
}

/* Fills the model's nodes and edges from the plan's records and CSR. */
static void fill_model(weft_run_stats *st, const weft__plan *p, uint64_t t0, const uint32_t *codes,
                       uint32_t ncodes) {
  weft__rep *r = st->rep;
  weft_graph *g = st->graph;
  for (uint32_t i = 0; i < p->n; i++) {
    const weft_node *n = p->x[i].node;
    weft__rnode *x = &r->node[i];
    x->device = x->src = x->dst = n->device;
    if (n->kind == WEFT__OP_COPY && n->nargs == 2) {
      const weft_tensor *a = n->args[0].t, *b = n->args[1].t;
      x->copy = 1;
      x->src = a->device;
      x->dst = b->device;
      x->bytes = a->bytes;
      const weft_tensor *host = weft__storage_owner(a->device.kind == WEFT_DEVICE_CPU ? a : b);
      int cross = (a->device.kind == WEFT_DEVICE_CPU) != (b->device.kind == WEFT_DEVICE_CPU);
      x->pageable = cross && host->storage_kind != WEFT__S_PINNED &&
                    host->storage_kind != WEFT__S_EMPTY;
      st->copies++;
    }
    if (n->flags & WEFT__N_INSERTED) st->inserted++;
    const weft__ntime *t = &p->exec->times[i];
    if (!current(t, t0)) continue;
    uint64_t s = atomic_load_explicit(&t->start, memory_order_relaxed);
    uint64_t e = atomic_load_explicit(&t->end, memory_order_relaxed);
    s = s > t0 ? s - t0 : 0;
    e = e - t0;
    x->start = s;
    x->end = e > s ? e : s; /* a clock refinement may move an end a little before its start */
    uint32_t code = atomic_load_explicit(&t->lane, memory_order_relaxed);
    x->lane = lane_index(codes, ncodes, code);
    x->hostside = WEFT__LANE_ROLE(code) == WEFT__LANE_HOSTSIDE;
    st->hostside += x->hostside;
  }
  /* Edges: the plan's successor lists; hazards from the analysis's edges. */
  uint32_t k = 0;
  for (uint32_t i = 0; i < p->n; i++) {
    r->succ_off[i] = k;
    for (uint32_t j = p->x[i].succ_begin; j < p->x[i].succ_end; j++) r->succ[k++] = p->succ[j];
  }
  r->succ_off[p->n] = k;
  /* The analysis's edges into the run's nodes (those of nodes appended since come after them, by
   * target), unless a worker still follows such appends and writes them (then hazards are left
   * unknown, and the count is the run's own). */
  const weft__edge *e = g->edges.data;
  if (g->follow != NULL)
    st->edges = k;
  else
    for (size_t j = 0; j < g->edges.len && e[j].to < p->n; j++, st->edges++)
      for (uint32_t q = r->succ_off[e[j].from]; q < r->succ_off[e[j].from + 1]; q++)
        if (r->succ[q] == e[j].to) {
          r->succ_hazard[q] = e[j].hazard;
          break;
        }
  for (uint32_t i = 0; i < p->n; i++)
    for (uint32_t q = r->succ_off[i]; q < r->succ_off[i + 1]; q++) {
      uint32_t a = r->node[i].lane, b = r->node[r->succ[q]].lane;
      if (a != WEFT__REP_NONE && b != WEFT__REP_NONE && a != b) st->events++;
    }
}

/* The run's setup steps (dispatch.c's records) as the public steps. */
static int build_setup(weft_run_stats *st, const weft_run *run) {
  static const char *const kinds[] = {"runtime", "place", "plan", "tensor", "backends"};
  size_t n = run->nsetup_runtime + run->setup.len;
  st->setup_ns = run->setup_ns;
  if (n == 0) return WEFT_OK;
  if ((st->setup = weft__calloc(n, sizeof *st->setup)) == NULL) return weft__oom("the statistics of a run");
  uint64_t at = 0;
  for (size_t i = 0; i < run->nsetup_runtime; i++) { /* end to end from 0 */
    const weft__setup_rec *x = &run->setup_runtime[i];
    uint64_t d = x->t1 - x->t0;
    st->setup[st->nsetup++] = (weft_setup_step){kinds[WEFT__SETUP_RUNTIME], x->what, 0, weft_cpu(), x->bytes, 0, sec(at), sec(at + d)};
    at += d;
  }
  const weft__setup_rec *recs = run->setup.data;
  weft_tensor **ts = st->graph->tensors.data;
  for (size_t i = 0; i < run->setup.len; i++) {
    const weft__setup_rec *x = &recs[i];
    weft_setup_step *o = &st->setup[st->nsetup++];
    *o = (weft_setup_step){kinds[x->kind], NULL, 0, weft_cpu(), 0, 0, sec(x->t0), sec(x->t1)};
    if (x->kind != WEFT__SETUP_TENSOR) continue;
    o->count = x->count;
    o->bytes = x->bytes;
    o->pinned = x->pinned;
    if (x->tensor < st->graph->tensors.len) {
      o->what = weft__tensor_name(ts[x->tensor]);
      o->device = ts[x->tensor]->device;
    }
  }
  return WEFT_OK;
}

size_t weft_run_stats_setup(const weft_run_stats *st, const weft_setup_step **steps) {
  if (steps != NULL) *steps = st->setup;
  return st->nsetup;
}

int weft_run_stats_create(weft_run *run, weft_run_stats **out) {
  if (run == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_run_stats_create: NULL argument");
  *out = NULL;
  if (!atomic_load_explicit(&run->done, memory_order_acquire))
    return weft__err(WEFT_EAGAIN, "weft_run_stats_create: the run is still in flight; wait for it first");
  weft_graph *g = run->graph;
  const weft__plan *p = g->plan;
  if (p == NULL || p->exec->last_run != run->id)
    return weft__err(WEFT_ESTATE, "weft_run_stats_create: the graph was launched again (or "
                                  "changed) after this run; take the statistics before the next launch");
  if (p->exec->times == NULL)
    return weft__err(WEFT_ENOTSUP, "weft_run_stats_create: timing is off for this runtime "
                                   "(WEFT_RUNTIME_NO_TIMING or WEFT_TIMING=0)");
  uint64_t t0 = run->t_launch;
  weft_run_stats *st = weft__calloc(1, sizeof *st);
  if (st == NULL) return weft__oom("the statistics of a run");
  st->graph = g;
  st->t_launch = t0;
  uint32_t *codes = NULL, ncodes = 0;
  int rc;
  /* The CPU lanes: the pool's workers, or a simulated job's ranks' workers and messages. */
  st->nworkers = g->rt->all_ranks && g->rt->rank_lanes > 0 ? (uint32_t)(g->rt->nranks * g->rt->rank_lanes)
                                                            : (uint32_t)weft__pool_size(g->rt->pool);
  if ((rc = number_lanes(st, p, t0, st->nworkers, &codes, &ncodes)) != WEFT_OK) goto fail;
  /* A record may name a worker beyond the pool's count only if the pool changed; count every
   * CPU lane as a worker so the CPU lanes stay first. */
  uint32_t pool_workers = st->nworkers;
  while (st->nworkers < ncodes && WEFT__LANE_ROLE(codes[st->nworkers]) == WEFT__LANE_CPU) st->nworkers++;
  st->rep = weft__rep_new(p->n, ncodes, p->m);
  st->lane_name = weft__calloc(ncodes ? ncodes : 1, sizeof *st->lane_name);
  if (st->rep == NULL || st->lane_name == NULL) {
    rc = weft__oom("the statistics of a run");
    goto fail;
  }
  for (uint32_t l = 0; l < ncodes; l++) {
    st->rep->lanes[l].code = codes[l];
    st->rep->lanes[l].device = WEFT__LANE_ROLE(codes[l]) == WEFT__LANE_CPU
                                   ? weft_cpu()
                                   : weft__gpu_of_slot(g->rt, (int)WEFT__LANE_DEVICE(codes[l]));
    lane_name(codes[l], st->lane_name[l], sizeof st->lane_name[l]);
    if (WEFT__LANE_ROLE(codes[l]) != WEFT__LANE_CPU && g->rt->all_ranks) { /* a simulated rank's GPU */
      weft_device d = st->rep->lanes[l].device;
      char name[48];
      lane_name(WEFT__LANE(WEFT__LANE_ROLE(codes[l]), (uint32_t)d.index, WEFT__LANE_NUMBER(codes[l])), name, sizeof name);
      snprintf(st->lane_name[l], sizeof st->lane_name[l], "rank %d %.36s", d.rank, name);
    }
    /* The CPU lane after the workers': nodes a backend's own thread launched
     * (weft__sched_complete_here: the MPI transport's progress thread). */
    if (WEFT__LANE_ROLE(codes[l]) == WEFT__LANE_CPU && g->rt->all_ranks && g->rt->rank_lanes > 1) {
      /* A simulated job of several ranks: each rank's workers, then its messages (des.c). */
      uint32_t num = WEFT__LANE_NUMBER(codes[l]), per = (uint32_t)g->rt->rank_lanes;
      if (num % per == per - 1)
        snprintf(st->lane_name[l], sizeof st->lane_name[l], "rank %u messages", num / per);
      else
        snprintf(st->lane_name[l], sizeof st->lane_name[l], "rank %u cpu worker %u", num / per, num % per);
    } else if (WEFT__LANE_ROLE(codes[l]) == WEFT__LANE_CPU && WEFT__LANE_NUMBER(codes[l]) >= pool_workers) {
      snprintf(st->lane_name[l], sizeof st->lane_name[l], "cpu progress thread");
    }
  }
  fill_model(st, p, t0, codes, ncodes);
  st->pool.steals = run->pool_end.steals - run->pool_launch.steals;
  st->pool.injected = run->pool_end.injected - run->pool_launch.injected;
  st->pool.sleeps = run->pool_end.sleeps - run->pool_launch.sleeps;
  st->pool.wakeups = run->pool_end.wakeups - run->pool_launch.wakeups;
  st->pool.handoffs = run->pool_end.handoffs - run->pool_launch.handoffs;
  st->rep->wall = run->t_end > t0 ? run->t_end - t0 : 0;
  if ((rc = weft__rep_mirror_edges(st->rep, 1)) != WEFT_OK) goto fail;
  if ((rc = weft__rep_analyse(st->rep)) != WEFT_OK) goto fail;
  if ((rc = build_memory(st, p, t0)) != WEFT_OK) goto fail;
  if ((rc = build_diagnostics(st)) != WEFT_OK) goto fail;
  if ((rc = build_setup(st, run)) != WEFT_OK) goto fail;
  weft__free(codes);
  *out = st;
  return WEFT_OK;
fail:
  weft__free(codes);
  weft_run_stats_destroy(st);
  return rc;
}

void weft_run_stats_destroy(weft_run_stats *st) {
  if (st == NULL) return;
  weft__rep_free(st->rep);
  weft__free(st->lane_name);
  weft__free(st->mem);
  weft__free(st->samples);
  weft__free(st->diag);
  weft__free(st->setup);
  weft__free(st);
}

/* ---- accessors ------------------------------------------------------------------------------ */

void weft_run_stats_pool(const weft_run_stats *st, weft_pool_counts *out) { *out = st->pool; }

void weft_run_stats_summary(const weft_run_stats *st, weft_stats_summary *out) {
  const weft__rep *r = st->rep;
  memset(out, 0, sizeof *out);
  out->wall_s = sec(r->wall);
  out->makespan_s = sec(r->span_end - r->span_begin);
  out->critical_path_s = sec(r->critical_length);
  out->copy_s = sec(r->copy_total);
  out->hidden_copy_s = sec(r->copy_hidden);
  out->hidden_copy_fraction = r->copy_total > 0 ? (double)r->copy_hidden / (double)r->copy_total : -1;
  out->nodes = r->n;
  for (uint32_t i = 0; i < r->n; i++) out->nodes_run += r->node[i].lane != WEFT__REP_NONE;
  out->edges = st->edges;
  out->events = st->events;
  out->copies = st->copies;
  out->inserted_copies = st->inserted;
  out->critical_path_nodes = r->ncritical;
  out->lanes = r->nlanes;
  out->mem_samples_dropped = st->dropped;
  out->host_timed_nodes = st->hostside;
  out->ready_wait_p50_s = sec(r->wait_p50);
  out->ready_wait_p99_s = sec(r->wait_p99);
  out->ready_wait_max_s = sec(r->wait_max);
  out->ready_wait_nodes = r->nwaits;
  out->setup_s = sec(st->setup_ns);
  for (size_t i = 0; i < st->nsetup; i++) {
    const weft_setup_step *x = &st->setup[i];
    if (x->kind[0] == 'r') out->setup_runtime_s += x->end_s - x->start_s;
    if (x->kind[0] != 't') continue;
    out->setup_tensors_s += x->end_s - x->start_s;
    out->setup_tensors += x->count;
    out->setup_bytes += x->bytes;
  }
  for (uint32_t i = 0; i < r->n; i++) {
    const weft__rnode *x = &r->node[i];
    if (!x->copy || x->lane == WEFT__REP_NONE) continue;
    int hs = x->src.kind == WEFT_DEVICE_CPU, hd = x->dst.kind == WEFT_DEVICE_CPU;
    if (x->src.rank != x->dst.rank) { /* a message: counted where it is sent or received */
      const weft_runtime *rt = st->graph->rt;
      if (weft__rank_here(rt, x->src.rank) || weft__rank_here(rt, x->dst.rank)) out->bytes_ranks += x->bytes;
      continue;
    }
    uint64_t *to = hs && !hd ? &out->bytes_h2d : !hs && hd ? &out->bytes_d2h
                 : !hs && !hd && !weft_device_equal(x->src, x->dst) ? &out->bytes_peer
                                                                    : &out->bytes_local;
    *to += x->bytes;
  }
}

int weft_run_stats_rank_bytes(const weft_run_stats *st, int peer, uint64_t *sent, uint64_t *received) {
  if (st == NULL || sent == NULL || received == NULL)
    return weft__err(WEFT_EINVAL, "weft_run_stats_rank_bytes: NULL argument");
  const weft_runtime *rt = st->graph->rt;
  if (peer < 0 || peer >= rt->nranks)
    return weft__err(WEFT_EINVAL, "weft_run_stats_rank_bytes: rank %d; the run has ranks 0..%d", peer, rt->nranks - 1);
  *sent = *received = 0;
  const weft__rep *r = st->rep;
  for (uint32_t i = 0; i < r->n; i++) {
    const weft__rnode *x = &r->node[i];
    if (!x->copy || x->lane == WEFT__REP_NONE || x->src.rank == x->dst.rank) continue;
    if (rt->all_ranks) { /* a simulated job: peer's own messages */
      if (x->src.rank == peer) *sent += x->bytes;
      if (x->dst.rank == peer) *received += x->bytes;
      continue;
    }
    if (x->src.rank == rt->rank && x->dst.rank == peer) *sent += x->bytes;
    if (x->dst.rank == rt->rank && x->src.rank == peer) *received += x->bytes;
  }
  return WEFT_OK;
}

size_t weft_run_stats_lane_count(const weft_run_stats *st) { return st->rep->nlanes; }

int weft_run_stats_lane(const weft_run_stats *st, size_t i, weft_lane_stats *out) {
  if (st == NULL || out == NULL || i >= st->rep->nlanes)
    return weft__err(WEFT_EINVAL, "weft_run_stats_lane: lane %zu out of range (%u lanes)", i,
                     st != NULL ? st->rep->nlanes : 0);
  const weft__rep *r = st->rep;
  const weft__rlane *l = &r->lanes[i];
  memcpy(out->name, st->lane_name[i], sizeof out->name);
  out->kind = weft__stats_lane_kind(st, (uint32_t)i);
  out->device = l->device;
  out->busy_s = sec(l->busy);
  uint64_t span = r->span_end - r->span_begin;
  out->utilisation = span > 0 ? (double)l->busy / (double)span : 0;
  out->nodes = l->nodes;
  return WEFT_OK;
}

size_t weft_run_stats_critical_path(const weft_run_stats *st, weft_node **out, size_t cap) {
  for (size_t i = 0; i < cap && i < st->rep->ncritical; i++)
    out[i] = weft_graph_node(st->graph, st->rep->critical[i]);
  return st->rep->ncritical;
}

int weft_run_stats_node(const weft_run_stats *st, size_t node_id, weft_node_timing *out) {
  if (st == NULL || out == NULL || node_id >= st->rep->n)
    return weft__err(WEFT_EINVAL, "weft_run_stats_node: node %zu out of range", node_id);
  const weft__rnode *x = &st->rep->node[node_id];
  out->ran = x->lane != WEFT__REP_NONE;
  out->start_s = sec(x->start);
  out->end_s = sec(x->end);
  out->lane = out->ran ? (long)x->lane : -1;
  out->critical = x->critical;
  return WEFT_OK;
}

size_t weft_run_stats_device_count(const weft_run_stats *st) { return st->nmem; }

int weft_run_stats_device(const weft_run_stats *st, size_t i, weft_device_memory *out) {
  if (st == NULL || out == NULL || i >= st->nmem)
    return weft__err(WEFT_EINVAL, "weft_run_stats_device: device %zu out of range", i);
  *out = st->mem[i];
  return WEFT_OK;
}

size_t weft_run_stats_diagnostic_count(const weft_run_stats *st) { return st->ndiag; }

int weft_run_stats_diagnostic(const weft_run_stats *st, size_t i, weft_copy_diagnostic *out) {
  if (st == NULL || out == NULL || i >= st->ndiag)
    return weft__err(WEFT_EINVAL, "weft_run_stats_diagnostic: diagnostic %zu out of range", i);
  *out = st->diag[i];
  return WEFT_OK;
}

/* ---- text ----------------------------------------------------------------------------------- */

void weft__fmt_time(char *buf, size_t size, double s) {
  if (s >= 1)
    snprintf(buf, size, "%.3f s", s);
  else if (s >= 1e-3)
    snprintf(buf, size, "%.3f ms", s * 1e3);
  else
    snprintf(buf, size, "%.1f us", s * 1e6);
}

static void fmt_bytes(char *buf, size_t size, uint64_t b) {
  if (b >= (1ull << 30))
    snprintf(buf, size, "%.2f GiB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20))
    snprintf(buf, size, "%.1f MiB", (double)b / (double)(1ull << 20));
  else if (b >= 1024)
    snprintf(buf, size, "%.1f KiB", (double)b / 1024.0);
  else
    snprintf(buf, size, "%llu B", (unsigned long long)b);
}

int weft__stats_stream_status(FILE *f, const char *what) {
  if (fflush(f) != 0 || ferror(f))
    return weft__err(WEFT_EIO, "writing the %s failed: %s", what, strerror(errno ? errno : EIO));
  return WEFT_OK;
}

/* "setup: 1.21 s before the first node (runtime creation 80.2 ms; plan 0.3 ms; 3 tensors,
 * 1.00 GiB, in 1.12 s: x 1.00 GiB cpu 1.10 s, ...)": the largest tensors by time, at most 3. */
static void write_setup_text(const weft_run_stats *st, const weft_stats_summary *s, FILE *f) {
  char a[32], b[32], c[32];
  weft__fmt_time(a, sizeof a, s->setup_s);
  fprintf(f, "setup: %s before the first node", a);
  const char *sep = " (";
  if (s->setup_runtime_s > 0) {
    weft__fmt_time(b, sizeof b, s->setup_runtime_s);
    fprintf(f, "%sruntime creation %s", sep, b);
    sep = "; ";
  }
  double place = 0, plan = 0;
  for (size_t i = 0; i < st->nsetup; i++) {
    if (strcmp(st->setup[i].kind, "place") == 0) place += st->setup[i].end_s - st->setup[i].start_s;
    if (strcmp(st->setup[i].kind, "plan") == 0) plan += st->setup[i].end_s - st->setup[i].start_s;
  }
  if (place > 0) {
    weft__fmt_time(b, sizeof b, place);
    fprintf(f, "%splacement %s", sep, b);
    sep = "; ";
  }
  weft__fmt_time(b, sizeof b, plan);
  fprintf(f, "%splan %s", sep, b);
  sep = "; ";
  if (s->setup_tensors > 0) {
    fmt_bytes(b, sizeof b, s->setup_bytes);
    weft__fmt_time(c, sizeof c, s->setup_tensors_s);
    fprintf(f, "; %zu tensors materialised, %s, in %s", s->setup_tensors, b, c);
    /* The three slowest. */
    size_t top[3] = {SIZE_MAX, SIZE_MAX, SIZE_MAX};
    for (size_t i = 0; i < st->nsetup; i++) {
      if (st->setup[i].kind[0] != 't' || st->setup[i].what == NULL) continue;
      double d = st->setup[i].end_s - st->setup[i].start_s;
      for (int k = 0; k < 3; k++) {
        if (top[k] != SIZE_MAX && st->setup[top[k]].end_s - st->setup[top[k]].start_s >= d) continue;
        for (int m = 2; m > k; m--) top[m] = top[m - 1];
        top[k] = i;
        break;
      }
    }
    for (int k = 0; k < 3 && top[k] != SIZE_MAX; k++) {
      const weft_setup_step *x = &st->setup[top[k]];
      char dev[32];
      fmt_bytes(b, sizeof b, x->bytes);
      weft__fmt_time(c, sizeof c, x->end_s - x->start_s);
      fprintf(f, "%s%s %s %s%s %s", k ? ", " : ": ", x->what, b, weft_device_str(x->device, dev, sizeof dev),
              x->pinned ? " pinned" : "", c);
    }
  }
  fputs(")\n", f);
}


/* The text summary's `moved:` line, and under MPI a line per rank this one exchanged
 * messages with. */
static void print_moved(FILE *f, const weft_run_stats *st, const weft_stats_summary *s) {
  fprintf(f, "  moved: %.1f MB host to device, %.1f MB device to host, %.1f MB between GPUs", (double)s->bytes_h2d * 1e-6,
          (double)s->bytes_d2h * 1e-6, (double)s->bytes_peer * 1e-6);
  if (s->bytes_ranks > 0) fprintf(f, ", %.1f MB to and from other ranks", (double)s->bytes_ranks * 1e-6);
  fputc('\n', f);
  for (int k = 0; s->bytes_ranks > 0 && k < st->graph->rt->nranks; k++) {
    uint64_t out, in;
    if (weft_run_stats_rank_bytes(st, k, &out, &in) == WEFT_OK && out + in > 0)
      fprintf(f, "    rank %d: %.1f MB sent, %.1f MB received\n", k, (double)out * 1e-6, (double)in * 1e-6);
  }
}

int weft__stats_write_text(const weft_run_stats *st, FILE *f) {
  weft_stats_summary s;
  weft_run_stats_summary(st, &s);
  char a[32], b[32], c[32];
  weft__fmt_time(a, sizeof a, s.wall_s);
  weft__fmt_time(b, sizeof b, s.makespan_s);
  weft__fmt_time(c, sizeof c, s.critical_path_s);
  fprintf(f, "run: %s wall, makespan %s, critical path %s (%zu nodes)\n", a, b, c,
          s.critical_path_nodes);
  fprintf(f, "graph: %zu nodes (%zu ran), %zu edges, %zu cross-lane events, %zu copies (%zu inserted)\n",
          s.nodes, s.nodes_run, s.edges, s.events, s.copies, s.inserted_copies);
  write_setup_text(st, &s, f);
  const weft_blas_info *blas = run_blas(st);
  if (blas != NULL && blas->message[0]) fprintf(f, "note: %s\n", blas->message);
  fprintf(f, "workers: %llu steals, %llu hand-offs, %llu sleeps, %llu wake-ups, %llu nodes queued from outside\n",
          (unsigned long long)st->pool.steals, (unsigned long long)st->pool.handoffs,
          (unsigned long long)st->pool.sleeps, (unsigned long long)st->pool.wakeups,
          (unsigned long long)st->pool.injected);
  if (s.ready_wait_nodes > 0) {
    weft__fmt_time(a, sizeof a, s.ready_wait_p50_s);
    weft__fmt_time(b, sizeof b, s.ready_wait_p99_s);
    weft__fmt_time(c, sizeof c, s.ready_wait_max_s);
    fprintf(f, "waits for a worker, ready to start: median %s, p99 %s, max %s (%zu CPU nodes)\n", a, b, c,
            s.ready_wait_nodes);
  }
  if (s.host_timed_nodes > 0)
    fprintf(f, "note: %zu device nodes have host-side times only (their backend reports no device "
               "times); they are left out of the copy overlap\n",
            s.host_timed_nodes);
  /* Lanes: every lane when there are few; many CPU workers are summarised in one line. */
  const weft__rep *r = st->rep;
  size_t first = 0;
  if (st->nworkers > 8) {
    double lo = 1e300, hi = 0, sum = 0;
    size_t busy_nodes = 0;
    for (uint32_t l = 0; l < st->nworkers; l++) {
      weft_lane_stats ls;
      if (weft_run_stats_lane(st, l, &ls) != WEFT_OK) continue;
      lo = ls.utilisation < lo ? ls.utilisation : lo;
      hi = ls.utilisation > hi ? ls.utilisation : hi;
      sum += ls.utilisation;
      busy_nodes += ls.nodes;
    }
    fprintf(f, "lanes:\n  %u cpu workers        utilisation mean %5.1f%% (min %.1f%%, max %.1f%%), %zu nodes\n",
            st->nworkers, 100 * sum / st->nworkers, 100 * lo, 100 * hi, busy_nodes);
    first = st->nworkers;
  } else {
    fprintf(f, "lanes:\n");
  }
  for (size_t l = first; l < r->nlanes; l++) {
    weft_lane_stats ls;
    if (weft_run_stats_lane(st, l, &ls) != WEFT_OK) continue;
    weft__fmt_time(a, sizeof a, ls.busy_s);
    fprintf(f, "  %-22s busy %-11s %5.1f%%  %zu nodes\n", ls.name, a, 100 * ls.utilisation, ls.nodes);
  }
  if (s.hidden_copy_fraction < 0) {
    fprintf(f, "copies: %s\n", s.copies == 0 ? "none ran" : "none with device times");
    if (s.bytes_ranks > 0) print_moved(f, st, &s);
  } else {
    weft__fmt_time(a, sizeof a, s.copy_s);
    weft__fmt_time(b, sizeof b, s.hidden_copy_s);
    fprintf(f, "copies: %s, %.1f%% hidden behind compute (%s)\n", a, 100 * s.hidden_copy_fraction, b);
    print_moved(f, st, &s);
    if (st->ndiag > 0) {
      weft__fmt_time(a, sizeof a, s.copy_s - s.hidden_copy_s);
      fprintf(f, "  not hidden: %s\n", a);
    }
    for (size_t i = 0; i < st->ndiag; i++) {
      const weft_copy_diagnostic *d = &st->diag[i];
      weft__fmt_time(a, sizeof a, d->exposed_s);
      fprintf(f, "    %-10s %zu cop%s, %s: %s\n", a, d->copies, d->copies == 1 ? "y" : "ies",
              weft_copy_why_name(d->why), d->message);
    }
  }
  fprintf(f, "memory:");
  for (size_t i = 0; i < st->nmem; i++) {
    char dev[32];
    fmt_bytes(a, sizeof a, st->mem[i].peak_bytes);
    fprintf(f, "%s %s peak %s (%s)", i ? "," : "", weft_device_str(st->mem[i].device, dev, sizeof dev),
            a, st->mem[i].source);
  }
  fprintf(f, "\n");
  return weft__stats_stream_status(f, "run summary");
}

/* ---- JSON ----------------------------------------------------------------------------------- */

/* Writes `key` (with its separator and colon) and the number v. */
static void key_num(FILE *f, const char *key, double v) {
  fputs(key, f);
  weft__json_fput_num(f, v);
}

int weft__stats_write_json(const weft_run_stats *st, FILE *f) {
  int rc = WEFT_OK;
  weft_stats_summary s;
  weft_run_stats_summary(st, &s);
  char dev[32];
  key_num(f, "{\"wall_s\": ", s.wall_s);
  key_num(f, ", \"makespan_s\": ", s.makespan_s);
  key_num(f, ", \"critical_path_s\": ", s.critical_path_s);
  fputs(", \"critical_path\": [", f);
  for (uint32_t i = 0; i < st->rep->ncritical; i++) fprintf(f, "%s%u", i ? ", " : "", st->rep->critical[i]);
  key_num(f, "], \"copy_s\": ", s.copy_s);
  key_num(f, ", \"hidden_copy_s\": ", s.hidden_copy_s);
  fputs(", \"hidden_copy_fraction\": ", f);
  if (s.hidden_copy_fraction < 0)
    fputs("null", f);
  else
    weft__json_fput_num(f, s.hidden_copy_fraction);
  fprintf(f, ", \"nodes\": %zu, \"nodes_run\": %zu, \"edges\": %zu, \"events\": %zu, "
             "\"copies\": %zu, \"inserted_copies\": %zu",
          s.nodes, s.nodes_run, s.edges, s.events, s.copies, s.inserted_copies);
  key_num(f, ", \"ready_wait\": {\"p50_s\": ", s.ready_wait_p50_s);
  key_num(f, ", \"p99_s\": ", s.ready_wait_p99_s);
  key_num(f, ", \"max_s\": ", s.ready_wait_max_s);
  fprintf(f, ", \"nodes\": %zu}", s.ready_wait_nodes);
  fprintf(f, ", \"bytes_moved\": {\"h2d\": %llu, \"d2h\": %llu, \"peer\": %llu, \"local\": %llu, \"ranks\": %llu",
          (unsigned long long)s.bytes_h2d, (unsigned long long)s.bytes_d2h, (unsigned long long)s.bytes_peer,
          (unsigned long long)s.bytes_local, (unsigned long long)s.bytes_ranks);
  /* Per other rank this one exchanged messages with: the bytes sent there and received. */
  fputs(", \"by_rank\": [", f);
  for (int k = 0, n = 0; k < st->graph->rt->nranks; k++) {
    uint64_t out, in;
    if (weft_run_stats_rank_bytes(st, k, &out, &in) != WEFT_OK || out + in == 0) continue;
    fprintf(f, "%s{\"rank\": %d, \"sent\": %llu, \"received\": %llu}", n++ ? ", " : "", k, (unsigned long long)out,
            (unsigned long long)in);
  }
  fputs("]}", f);
  key_num(f, ", \"setup\": {\"total_s\": ", s.setup_s);
  key_num(f, ", \"runtime_s\": ", s.setup_runtime_s);
  key_num(f, ", \"tensors_s\": ", s.setup_tensors_s);
  fprintf(f, ", \"tensors\": %zu, \"bytes\": %llu, \"steps\": [", s.setup_tensors,
          (unsigned long long)s.setup_bytes);
  for (size_t i = 0; i < st->nsetup; i++) {
    const weft_setup_step *x = &st->setup[i];
    fprintf(f, "%s{\"kind\": \"%s\", \"start_s\": ", i ? ", " : "", x->kind);
    weft__json_fput_num(f, x->start_s);
    key_num(f, ", \"end_s\": ", x->end_s);
    if (x->what != NULL) {
      fputs(", \"what\": ", f);
      weft__json_fput_str(f, x->what, &rc);
    }
    if (x->kind[0] == 't')
      fprintf(f, ", \"count\": %zu, \"device\": \"%s\", \"bytes\": %llu, \"pinned\": %s", x->count,
              weft_device_str(x->device, dev, sizeof dev), (unsigned long long)x->bytes, x->pinned ? "true" : "false");
    else if (x->bytes > 0)
      fprintf(f, ", \"bytes\": %llu", (unsigned long long)x->bytes);
    fputc('}', f);
  }
  fputs("]}", f);
  fputs(", \"lanes\": [", f);
  for (size_t l = 0; l < st->rep->nlanes; l++) {
    weft_lane_stats ls;
    if (weft_run_stats_lane(st, l, &ls) != WEFT_OK) continue;
    fputs(l ? ", {\"name\": " : "{\"name\": ", f);
    weft__json_fput_str(f, ls.name, &rc);
    fprintf(f, ", \"kind\": \"%s\", \"device\": \"%s\", \"busy_s\": ", ls.kind,
            weft_device_str(ls.device, dev, sizeof dev));
    weft__json_fput_num(f, ls.busy_s);
    key_num(f, ", \"utilisation\": ", ls.utilisation);
    fprintf(f, ", \"nodes\": %zu}", ls.nodes);
  }
  fputs("], \"peak_bytes\": {", f);
  for (size_t i = 0; i < st->nmem; i++)
    fprintf(f, "%s\"%s\": %llu", i ? ", " : "", weft_device_str(st->mem[i].device, dev, sizeof dev),
            (unsigned long long)st->mem[i].peak_bytes);
  fputs("}, \"memory\": [", f);
  for (size_t i = 0; i < st->nmem; i++)
    fprintf(f, "%s{\"device\": \"%s\", \"peak_bytes\": %llu, \"current_bytes\": %llu, \"source\": \"%s\"}",
            i ? ", " : "", weft_device_str(st->mem[i].device, dev, sizeof dev),
            (unsigned long long)st->mem[i].peak_bytes, (unsigned long long)st->mem[i].current_bytes,
            st->mem[i].source);
  fputs("], \"not_hidden\": [", f);
  for (size_t i = 0; i < st->ndiag; i++) {
    const weft_copy_diagnostic *d = &st->diag[i];
    fprintf(f, "%s{\"reason\": \"%s\", \"exposed_s\": ", i ? ", " : "", weft_copy_why_name(d->why));
    weft__json_fput_num(f, d->exposed_s);
    fprintf(f, ", \"copies\": %zu, \"message\": ", d->copies);
    weft__json_fput_str(f, d->message, &rc);
    fputc('}', f);
  }
  const weft_blas_info *blas = run_blas(st);
  weft__strbuf bj;
  weft__strbuf_init(&bj);
  if (blas != NULL) weft__json_put_blas(&bj, blas);
  if (bj.failed && rc == WEFT_OK) rc = weft__oom("the run statistics (JSON)");
  fprintf(f, "], \"pool\": {\"steals\": %llu, \"handoffs\": %llu, \"sleeps\": %llu, \"wakeups\": %llu, \"injected\": %llu}",
          (unsigned long long)st->pool.steals, (unsigned long long)st->pool.handoffs,
          (unsigned long long)st->pool.sleeps, (unsigned long long)st->pool.wakeups,
          (unsigned long long)st->pool.injected);
  fprintf(f, ", \"blas\": %s, \"host_timed_nodes\": %zu, \"mem_samples_dropped\": %zu}\n",
          blas != NULL && !bj.failed ? bj.data : "null", s.host_timed_nodes, s.mem_samples_dropped);
  weft__strbuf_fini(&bj);
  return rc != WEFT_OK ? rc : weft__stats_stream_status(f, "run statistics (JSON)");
}

/* ---- writing ---------------------------------------------------------------------------------- */

int weft_run_stats_write(const weft_run_stats *st, int format, FILE *f) {
  if (st == NULL || f == NULL) return weft__err(WEFT_EINVAL, "weft_run_stats_write: NULL argument");
  switch (format) {
  case WEFT_REPORT_TEXT: return weft__stats_write_text(st, f);
  case WEFT_REPORT_JSON: return weft__stats_write_json(st, f);
  case WEFT_REPORT_TRACE: return weft__stats_write_trace(st, f);
  case WEFT_REPORT_SVG: return weft__stats_write_svg(st, f, 1600);
  default:
    return weft__err(WEFT_EINVAL, "weft_run_stats_write: unknown format %d (WEFT_REPORT_TEXT, "
                                  "_JSON, _TRACE or _SVG)", format);
  }
}

int weft_run_stats_save(const weft_run_stats *st, int format, const char *path) {
  if (st == NULL || path == NULL) return weft__err(WEFT_EINVAL, "weft_run_stats_save: NULL argument");
  if (format < WEFT_REPORT_TEXT || format > WEFT_REPORT_SVG)
    return weft__err(WEFT_EINVAL, "weft_run_stats_save: unknown format %d", format);
  FILE *f = fopen(path, "w");
  if (f == NULL) return weft__err(WEFT_EIO, "cannot write %s: %s", path, strerror(errno));
  int rc = weft_run_stats_write(st, format, f);
  if (fclose(f) != 0 && rc == WEFT_OK) rc = weft__err(WEFT_EIO, "cannot write %s: %s", path, strerror(errno));
  if (rc != WEFT_OK && rc != WEFT_EINVAL) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s: %s", path, weft_last_error());
    weft__set_last_error(msg);
  }
  return rc;
}

/* One trace of every rank's run, written by rank 0 (collective). Each rank's times are put on
 * rank 0's clock where the two share a host (one CLOCK_MONOTONIC); across hosts each rank's
 * trace starts at its own setup's start. */
static int save_trace_ranks(const weft_run_stats *st, const char *path) {
  weft_runtime *rt = st->graph->rt;
  weft__backend *t = rt->remote;
  struct {
    uint64_t zero_ns;
    char host[64];
  } r0 = {0}, me = {st->t_launch - st->setup_ns, ""};
  if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "?");
  if (rt->rank == 0) r0 = me;
  int rc = t->vt->bcast(t, &r0, sizeof r0, 0);
  double shift = rc == WEFT_OK && strcmp(r0.host, me.host) == 0 ? ((double)me.zero_ns - (double)r0.zero_ns) * 1e-3 : 0;
  char *mine = NULL, *all = NULL;
  size_t len = 0, total = 0;
  FILE *m = open_memstream(&mine, &len);
  int lrc = m == NULL ? weft__oom("a trace") : weft__stats_write_trace_events(st, m, rt->rank, shift, rt->rank == 0);
  if (m != NULL && fclose(m) != 0 && lrc == WEFT_OK) lrc = weft__oom("a trace");
  if (lrc != WEFT_OK) len = 0;
  /* Each rank's events to rank 0, in rank order (a rank that failed sends none). */
  for (int k = 0; k < rt->nranks && rc == WEFT_OK; k++) {
    uint64_t n = k == rt->rank ? len : 0;
    if ((rc = t->vt->bcast(t, &n, sizeof n, k)) != WEFT_OK) break;
    char *buf = k == rt->rank ? mine : weft__malloc(n ? n : 1);
    if (buf == NULL) {
      rc = weft__oom("a trace");
      break;
    }
    rc = t->vt->bcast(t, buf, n, k);
    if (rc == WEFT_OK && rt->rank == 0) {
      char *grown = weft__realloc(all, total + n + 1);
      if (grown == NULL) {
        rc = weft__oom("a trace");
      } else {
        all = grown;
        memcpy(all + total, buf, n);
        total += n;
      }
    }
    if (buf != mine) weft__free(buf);
  }
  free(mine); /* open_memstream's */
  if (rc == WEFT_OK && rt->rank == 0) {
    FILE *f = fopen(path, "w");
    if (f == NULL) {
      rc = weft__err(WEFT_EIO, "cannot write %s: %s", path, strerror(errno));
    } else {
      rc = weft__stats_write_trace_ranks(st, f, all != NULL ? all : "", total);
      if (fclose(f) != 0 && rc == WEFT_OK) rc = weft__err(WEFT_EIO, "cannot write %s: %s", path, strerror(errno));
    }
  }
  weft__free(all);
  return rc != WEFT_OK ? rc : lrc;
}

int weft_run_stats_save_all(const weft_run_stats *st, int format, const char *path) {
  if (st == NULL || path == NULL) return weft__err(WEFT_EINVAL, "weft_run_stats_save_all: NULL argument");
  weft_runtime *rt = st->graph->rt;
  if (rt->remote == NULL || rt->nranks <= 1) return weft_run_stats_save(st, format, path);
  if (format == WEFT_REPORT_TRACE) return save_trace_ranks(st, path);
  return rt->rank == 0 ? weft_run_stats_save(st, format, path) : WEFT_OK;
}

int weft_run_stats_print(const weft_run_stats *st, FILE *f) {
  return weft_run_stats_write(st, WEFT_REPORT_TEXT, f);
}
