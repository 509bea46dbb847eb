/* analysis.c — the analyses of a run's model (model.h): lanes' busy time, the critical path,
 * and the overlap of copies with compute with the reason each exposed copy was not hidden.
 *
 * Costs: lanes and overlap sort the nodes once (n log n); the critical path is one pass in
 * topological order (n + m); the reason of each copy with exposed time walks the graph from
 * that copy twice (ancestors, descendants), so classification is O(exposed copies x (n + m)),
 * paid only when the statistics are asked for, never by the run. Scratch comes from the
 * allocation hook and is freed before each function returns. */
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "sched/report/model.h"

/* ---- the model ---------------------------------------------------------------------------- */

weft__rep *weft__rep_new(uint32_t n, uint32_t nlanes, size_t m) {
  weft__rep *r = weft__calloc(1, sizeof *r);
  if (r == NULL) goto fail;
  r->n = n;
  r->nlanes = nlanes;
  r->m = m;
  r->node = weft__calloc(n ? n : 1, sizeof *r->node);
  r->lanes = weft__calloc(nlanes ? nlanes : 1, sizeof *r->lanes);
  r->pred_off = weft__calloc((size_t)n + 1, sizeof *r->pred_off);
  r->succ_off = weft__calloc((size_t)n + 1, sizeof *r->succ_off);
  r->pred = weft__calloc(m ? m : 1, sizeof *r->pred);
  r->succ = weft__calloc(m ? m : 1, sizeof *r->succ);
  r->succ_hazard = weft__calloc(m ? m : 1, 1);
  if (!r->node || !r->lanes || !r->pred_off || !r->succ_off || !r->pred || !r->succ ||
      !r->succ_hazard)
    goto fail;
  for (uint32_t i = 0; i < n; i++) r->node[i].lane = WEFT__REP_NONE;
  return r;
fail:
  weft__rep_free(r);
  weft__oom("the statistics of a run");
  return NULL;
}

void weft__rep_free(weft__rep *r) {
  if (r == NULL) return;
  weft__free(r->node);
  weft__free(r->lanes);
  weft__free(r->pred_off);
  weft__free(r->succ_off);
  weft__free(r->pred);
  weft__free(r->succ);
  weft__free(r->succ_hazard);
  weft__free(r->critical);
  weft__free(r->copies);
  weft__free(r);
}

int weft__rep_mirror_edges(weft__rep *r, int from_succ) {
  const uint32_t *soff = from_succ ? r->succ_off : r->pred_off;
  const uint32_t *s = from_succ ? r->succ : r->pred;
  uint32_t *doff = from_succ ? r->pred_off : r->succ_off;
  uint32_t *d = from_succ ? r->pred : r->succ;
  uint32_t *cur = weft__calloc((size_t)r->n + 1, sizeof *cur);
  if (cur == NULL) return weft__oom("the statistics of a run");
  memset(doff, 0, ((size_t)r->n + 1) * sizeof *doff);
  for (uint32_t i = 0; i < r->n; i++)
    for (uint32_t k = soff[i]; k < soff[i + 1]; k++) doff[s[k] + 1]++;
  for (uint32_t i = 0; i < r->n; i++) doff[i + 1] += doff[i];
  memcpy(cur, doff, (size_t)r->n * sizeof *cur);
  for (uint32_t i = 0; i < r->n; i++)
    for (uint32_t k = soff[i]; k < soff[i + 1]; k++) d[cur[s[k]]++] = i;
  weft__free(cur);
  return WEFT_OK;
}

static uint64_t dur(const weft__rnode *x) { return x->lane == WEFT__REP_NONE ? 0 : x->end - x->start; }
static int ran(const weft__rnode *x) { return x->lane != WEFT__REP_NONE; }

/* ---- lanes -------------------------------------------------------------------------------- */

typedef struct order_item {
  uint64_t key, start;
  uint32_t node;
} order_item;

static int cmp_order(const void *a, const void *b) {
  const order_item *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return x->node < y->node ? -1 : x->node > y->node;
}

void weft__rep_lanes(weft__rep *r) {
  uint64_t b = UINT64_MAX, e = 0;
  for (uint32_t l = 0; l < r->nlanes; l++) {
    r->lanes[l].busy = 0;
    r->lanes[l].nodes = 0;
    r->lanes[l].copies_only = 1;
  }
  /* Each lane's intervals in start order without a sort: a lane's nodes rarely overlap, so
   * a running union per lane over the nodes by start is what we need; sorting by start once
   * serves every lane. */
  order_item *o = weft__malloc((r->n ? r->n : 1) * sizeof *o);
  uint64_t *cur_s = weft__malloc((r->nlanes ? r->nlanes : 1) * sizeof *cur_s);
  uint64_t *cur_e = weft__malloc((r->nlanes ? r->nlanes : 1) * sizeof *cur_e);
  uint32_t k = 0;
  for (uint32_t i = 0; i < r->n; i++) {
    const weft__rnode *x = &r->node[i];
    if (!ran(x)) continue;
    if (x->start < b) b = x->start;
    if (x->end > e) e = x->end;
    if (o != NULL) o[k++] = (order_item){0, x->start, i};
  }
  r->span_begin = b == UINT64_MAX ? 0 : b;
  r->span_end = b == UINT64_MAX ? 0 : e;
  if (o == NULL || cur_s == NULL || cur_e == NULL) {
    /* Without scratch, the sum of durations (exact when a lane's nodes do not overlap). */
    for (uint32_t i = 0; i < r->n; i++)
      if (ran(&r->node[i])) r->lanes[r->node[i].lane].busy += dur(&r->node[i]);
  } else {
    qsort(o, k, sizeof *o, cmp_order);
    for (uint32_t l = 0; l < r->nlanes; l++) cur_s[l] = cur_e[l] = UINT64_MAX;
    for (uint32_t j = 0; j < k; j++) {
      const weft__rnode *x = &r->node[o[j].node];
      uint32_t l = x->lane;
      if (cur_e[l] != UINT64_MAX && x->start <= cur_e[l]) {
        if (x->end > cur_e[l]) cur_e[l] = x->end;
      } else {
        if (cur_e[l] != UINT64_MAX) r->lanes[l].busy += cur_e[l] - cur_s[l];
        cur_s[l] = x->start;
        cur_e[l] = x->end;
      }
    }
    for (uint32_t l = 0; l < r->nlanes; l++)
      if (cur_e[l] != UINT64_MAX) r->lanes[l].busy += cur_e[l] - cur_s[l];
  }
  for (uint32_t i = 0; i < r->n; i++) {
    const weft__rnode *x = &r->node[i];
    if (!ran(x)) continue;
    r->lanes[x->lane].nodes++;
    if (!x->copy) r->lanes[x->lane].copies_only = 0;
  }
  for (uint32_t l = 0; l < r->nlanes; l++)
    if (r->lanes[l].nodes == 0) r->lanes[l].copies_only = 0;
  weft__free(o);
  weft__free(cur_s);
  weft__free(cur_e);
}

/* ---- critical path ----------------------------------------------------------------------- */

int weft__rep_critical_path(weft__rep *r) {
  uint32_t n = r->n;
  weft__free(r->critical);
  r->critical = NULL;
  r->ncritical = 0;
  r->critical_length = 0;
  for (uint32_t i = 0; i < n; i++) r->node[i].critical = 0;
  if (n == 0) return WEFT_OK;
  uint64_t *dist = weft__malloc(n * sizeof *dist);
  uint32_t *from = weft__malloc(n * sizeof *from);
  uint32_t *indeg = weft__malloc(n * sizeof *indeg);
  uint32_t *queue = weft__malloc(n * sizeof *queue);
  int rc = WEFT_OK;
  if (!dist || !from || !indeg || !queue) {
    rc = weft__oom("the critical path");
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) {
    dist[i] = dur(&r->node[i]);
    from[i] = WEFT__REP_NONE;
  }
  /* In a topological order dist[v] is final when v is reached. */
  uint32_t qt = weft__topo_order(n, r->succ_off, r->succ, indeg, queue);
  for (uint32_t q = 0; q < qt; q++) {
    uint32_t v = queue[q];
    for (uint32_t k = r->succ_off[v]; k < r->succ_off[v + 1]; k++) {
      uint32_t s = r->succ[k];
      uint64_t d = dist[v] + dur(&r->node[s]);
      if (d > dist[s] || (d == dist[s] && from[s] == WEFT__REP_NONE && dur(&r->node[v]) > 0)) {
        dist[s] = d;
        from[s] = v;
      }
    }
  }
  WEFT_ASSERT(qt == n); /* the analysed graph has no cycle */
  uint32_t best = 0;
  for (uint32_t i = 1; i < n; i++)
    if (dist[i] > dist[best] || (dist[i] == dist[best] && ran(&r->node[i]) &&
                                 r->node[i].end > r->node[best].end))
      best = i;
  r->critical_length = dist[best];
  uint32_t len = 0;
  for (uint32_t v = best; v != WEFT__REP_NONE; v = from[v]) len++;
  r->critical = weft__malloc(len * sizeof *r->critical);
  if (r->critical == NULL) {
    rc = weft__oom("the critical path");
    goto done;
  }
  r->ncritical = len;
  for (uint32_t v = best, j = len; v != WEFT__REP_NONE; v = from[v]) {
    r->critical[--j] = v;
    r->node[v].critical = 1;
  }
done:
  weft__free(dist);
  weft__free(from);
  weft__free(indeg);
  weft__free(queue);
  return rc;
}

/* ---- overlap ------------------------------------------------------------------------------- */

uint64_t weft__rep_covered(const uint64_t *a, size_t na, const uint64_t *b, size_t nb,
                           uint64_t s, uint64_t e) {
  if (e <= s) return 0;
  /* Skip the intervals that end at or before s (binary search on the ends). */
  size_t i = 0, j = 0, lo, hi;
  for (lo = 0, hi = na; lo < hi;) {
    size_t mid = (lo + hi) / 2;
    if (a[2 * mid + 1] <= s) lo = mid + 1; else hi = mid;
  }
  i = lo;
  for (lo = 0, hi = nb; lo < hi;) {
    size_t mid = (lo + hi) / 2;
    if (b[2 * mid + 1] <= s) lo = mid + 1; else hi = mid;
  }
  j = lo;
  /* Merge the two lists by start, keeping a running union clipped to [s, e). */
  uint64_t total = 0, cs = 0, ce = 0;
  int open = 0;
  while (i < na || j < nb) {
    const uint64_t *iv;
    if (j >= nb || (i < na && a[2 * i] <= b[2 * j]))
      iv = &a[2 * i++];
    else
      iv = &b[2 * j++];
    uint64_t is = iv[0] < s ? s : iv[0], ie = iv[1] > e ? e : iv[1];
    if (iv[0] >= e) break;
    if (ie <= is) continue;
    if (open && is <= ce) {
      if (ie > ce) ce = ie;
    } else {
      if (open) total += ce - cs;
      cs = is;
      ce = ie;
      open = 1;
    }
  }
  if (open) total += ce - cs;
  return total;
}

/* The first instant of [s, e) not covered by the union of a and b (e if none). */
static uint64_t first_exposed(const uint64_t *a, size_t na, const uint64_t *b, size_t nb,
                              uint64_t s, uint64_t e) {
  uint64_t t = s;
  for (int moved = 1; moved && t < e;) {
    moved = 0;
    for (int side = 0; side < 2; side++) {
      const uint64_t *v = side ? b : a;
      size_t nv = side ? nb : na, lo = 0, hi = nv;
      while (lo < hi) { /* the first interval ending after t */
        size_t mid = (lo + hi) / 2;
        if (v[2 * mid + 1] <= t) lo = mid + 1; else hi = mid;
      }
      if (lo < nv && v[2 * lo] <= t) {
        t = v[2 * lo + 1];
        moved = 1;
      }
    }
  }
  return t < e ? t : e;
}

/* Per device: the merged union of its compute intervals and its compute nodes by start. */
typedef struct dev_lists {
  weft_device device;
  uint64_t *ivl;   /* merged pairs */
  size_t nivl;
  uint32_t *by_start;
  size_t nnodes;
} dev_lists;

typedef struct ctx {
  weft__rep *r;
  dev_lists *dev;
  size_t ndev;
  uint32_t *stamp_d, *stamp_a, *parent, *queue;
  uint32_t *heap; /* the copy's descendants found but not yet expanded, a min-heap by start */
  size_t nheap;
  uint32_t round, anc_round; /* anc_round == round: stamp_a holds this copy's ancestors */
  uint32_t *lane_order;   /* ran nodes by (lane, start) */
  uint32_t *lane_begin;   /* nlanes + 1 offsets into lane_order */
  uint32_t nran;
} ctx;

static int dev_index(const ctx *c, weft_device d) {
  for (size_t i = 0; i < c->ndev; i++)
    if (c->dev[i].device.kind == d.kind && c->dev[i].device.index == d.index) return (int)i;
  return -1;
}

static int build_devices(ctx *c) {
  weft__rep *r = c->r;
  size_t cap = 8;
  c->dev = weft__calloc(cap, sizeof *c->dev);
  if (c->dev == NULL) return weft__oom("the overlap analysis");
  for (uint32_t i = 0; i < r->n; i++) {
    const weft__rnode *x = &r->node[i];
    weft_device ds[3] = {x->device, x->src, x->dst};
    for (int k = 0; k < 3; k++) {
      if (dev_index(c, ds[k]) >= 0) continue;
      if (c->ndev == cap) {
        dev_lists *nd = weft__realloc(c->dev, 2 * cap * sizeof *nd);
        if (nd == NULL) return weft__oom("the overlap analysis");
        memset(nd + cap, 0, cap * sizeof *nd);
        c->dev = nd;
        cap *= 2;
      }
      c->dev[c->ndev++].device = ds[k];
    }
  }
  /* Compute nodes by (device, start). */
  order_item *o = weft__malloc((r->n ? r->n : 1) * sizeof *o);
  if (o == NULL) return weft__oom("the overlap analysis");
  uint32_t k = 0;
  for (uint32_t i = 0; i < r->n; i++) {
    const weft__rnode *x = &r->node[i];
    if (ran(x) && !x->copy && !x->hostside)
      o[k++] = (order_item){(uint64_t)dev_index(c, x->device), x->start, i};
  }
  qsort(o, k, sizeof *o, cmp_order);
  for (uint32_t j = 0; j < k;) {
    uint32_t j2 = j;
    while (j2 < k && o[j2].key == o[j].key) j2++;
    dev_lists *d = &c->dev[o[j].key];
    d->by_start = weft__malloc((j2 - j) * sizeof *d->by_start);
    d->ivl = weft__malloc(2 * (j2 - j) * sizeof *d->ivl);
    if (d->by_start == NULL || d->ivl == NULL) {
      weft__free(o);
      return weft__oom("the overlap analysis");
    }
    for (uint32_t t = j; t < j2; t++) {
      const weft__rnode *x = &r->node[o[t].node];
      d->by_start[d->nnodes++] = o[t].node;
      if (d->nivl > 0 && x->start <= d->ivl[2 * d->nivl - 1]) {
        if (x->end > d->ivl[2 * d->nivl - 1]) d->ivl[2 * d->nivl - 1] = x->end;
      } else {
        d->ivl[2 * d->nivl] = x->start;
        d->ivl[2 * d->nivl + 1] = x->end;
        d->nivl++;
      }
    }
    j = j2;
  }
  weft__free(o);
  return WEFT_OK;
}

int weft__rep_lane_order(const weft__rep *r, uint32_t **order_out, uint32_t **begin_out) {
  order_item *o = weft__malloc((r->n ? r->n : 1) * sizeof *o);
  uint32_t *order = weft__malloc((r->n ? r->n : 1) * sizeof *order);
  uint32_t *begin = weft__calloc((size_t)r->nlanes + 1, sizeof *begin);
  if (o == NULL || order == NULL || begin == NULL) {
    weft__free(o);
    weft__free(order);
    weft__free(begin);
    return weft__oom("the lanes of a run");
  }
  uint32_t k = 0;
  for (uint32_t i = 0; i < r->n; i++)
    if (ran(&r->node[i])) o[k++] = (order_item){r->node[i].lane, r->node[i].start, i};
  qsort(o, k, sizeof *o, cmp_order);
  for (uint32_t j = 0; j < k; j++) {
    order[j] = o[j].node;
    begin[o[j].key + 1]++;
  }
  for (uint32_t l = 0; l < r->nlanes; l++) begin[l + 1] += begin[l];
  weft__free(o);
  *order_out = order;
  *begin_out = begin;
  return WEFT_OK;
}

/* The descendants of a copy, found lazily in order of start: a node's predecessors end before
 * it starts, so every node on a path to a descendant u starts no later than u. After
 * advance(c, t), every descendant that started at or before t is stamped in stamp_d (with its
 * BFS parent), and no other node is: a copy's classification asks about the nodes near it in
 * time, which a walk of the whole graph per copy made quadratic (23 s of statistics for an
 * out-of-core Cholesky of 45 760 nodes). */
static uint64_t start_of(const ctx *c, uint32_t u) { return c->r->node[u].start; }

static void heap_push(ctx *c, uint32_t u) {
  size_t i = c->nheap++;
  c->heap[i] = u;
  while (i > 0 && start_of(c, c->heap[(i - 1) / 2]) > start_of(c, c->heap[i])) {
    uint32_t t = c->heap[i];
    c->heap[i] = c->heap[(i - 1) / 2];
    c->heap[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static uint32_t heap_pop(ctx *c) {
  uint32_t top = c->heap[0];
  c->heap[0] = c->heap[--c->nheap];
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, m = i;
    if (l < c->nheap && start_of(c, c->heap[l]) < start_of(c, c->heap[m])) m = l;
    if (l + 1 < c->nheap && start_of(c, c->heap[l + 1]) < start_of(c, c->heap[m])) m = l + 1;
    if (m == i) break;
    uint32_t t = c->heap[i];
    c->heap[i] = c->heap[m];
    c->heap[m] = t;
    i = m;
  }
  return top;
}

static void discover_successors(ctx *c, uint32_t u) {
  const weft__rep *r = c->r;
  for (uint32_t k = r->succ_off[u]; k < r->succ_off[u + 1]; k++) {
    uint32_t w = r->succ[k];
    if (c->stamp_d[w] == c->round) continue;
    c->stamp_d[w] = c->round;
    c->parent[w] = u;
    heap_push(c, w);
  }
}

static void descendants_begin(ctx *c, uint32_t v) {
  c->nheap = 0;
  c->stamp_d[v] = c->round;
  discover_successors(c, v);
}

static void advance(ctx *c, uint64_t t) {
  while (c->nheap > 0 && start_of(c, c->heap[0]) <= t) discover_successors(c, heap_pop(c));
}

/* Breadth-first from v, marking with the current round: forward over successors into stamp_d
 * with BFS parents, only the nodes that start by `limit`; backward over predecessors into
 * stamp_a. Forward, the nodes on a path to one that starts by `limit` all do, and the others
 * lead to none of them, so the parents are those of a walk of the whole graph. */
static void walk(ctx *c, uint32_t v, int forward, uint64_t limit) {
  const weft__rep *r = c->r;
  uint32_t *stamp = forward ? c->stamp_d : c->stamp_a;
  const uint32_t *off = forward ? r->succ_off : r->pred_off, *adj = forward ? r->succ : r->pred;
  uint32_t qh = 0, qt = 0;
  c->queue[qt++] = v;
  stamp[v] = c->round;
  while (qh < qt) {
    uint32_t u = c->queue[qh++];
    for (uint32_t k = off[u]; k < off[u + 1]; k++) {
      uint32_t w = adj[k];
      if (stamp[w] == c->round || (forward && start_of(c, w) > limit)) continue;
      stamp[w] = c->round;
      if (forward) c->parent[w] = u;
      c->queue[qt++] = w;
    }
  }
}

/* The copy's ancestors in stamp_a, once a copy (a node that ends by the copy's start may be
 * one: a node of no duration at that instant is). */
static void ancestors_once(ctx *c, uint32_t v) {
  if (c->anc_round == c->round) return;
  walk(c, v, 0, UINT64_MAX);
  c->anc_round = c->round;
}

/* BFS parents from v to the nodes that start by `limit`, under a fresh round. */
static void bfs_parents(ctx *c, uint32_t v, uint64_t limit) {
  c->round++;
  walk(c, v, 1, limit);
}

static int is_host_compute(const weft__rnode *x) {
  return !x->copy && x->device.kind == WEFT_DEVICE_CPU;
}

/* The devices whose compute a copy's exposure is judged against: its non-CPU ends (the
 * device that could have been computing), or the CPU for a copy between host buffers. */
static int home_devices(const ctx *c, const weft__rnode *x, int out[2]) {
  int k = 0;
  if (x->src.kind != WEFT_DEVICE_CPU) out[k++] = dev_index(c, x->src);
  if (x->dst.kind != WEFT_DEVICE_CPU && !(x->dst.kind == x->src.kind && x->dst.index == x->src.index))
    out[k++] = dev_index(c, x->dst);
  if (k == 0) out[k++] = dev_index(c, x->src);
  return k;
}

/* The compute node on the devices `dv` with the smallest start >= t that satisfies `want`
 * (0: any; 1: independent of the copy of the current round), or WEFT__REP_NONE. */
static uint32_t next_compute(ctx *c, uint32_t v, const int *dv, int ndv, uint64_t t, int want) {
  uint32_t best = WEFT__REP_NONE;
  for (int k = 0; k < ndv; k++) {
    const dev_lists *d = &c->dev[dv[k]];
    size_t lo = 0, hi = d->nnodes;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (c->r->node[d->by_start[mid]].start < t) lo = mid + 1; else hi = mid;
    }
    for (size_t j = lo; j < d->nnodes; j++) {
      uint32_t u = d->by_start[j];
      advance(c, start_of(c, u));
      if (want && c->r->node[u].end <= c->r->node[v].start) ancestors_once(c, v);
      if (want && (c->stamp_d[u] == c->round || (c->anc_round == c->round && c->stamp_a[u] == c->round))) continue;
      if (best == WEFT__REP_NONE || c->r->node[u].start < c->r->node[best].start) best = u;
      break;
    }
  }
  return best;
}

/* Whether some compute node on the devices is independent of copy v and ends after t (t within
 * the copy: no ancestor of it ends that late); `any` is set when there is an independent one at
 * all, which only needs the whole graph's walks when none ends after t. */
static int independent_after(ctx *c, uint32_t v, const int *dv, int ndv, uint64_t t, int *any) {
  for (int k = 0; k < ndv; k++) {
    const dev_lists *d = &c->dev[dv[k]];
    for (size_t j = 0; j < d->nnodes; j++) {
      uint32_t u = d->by_start[j];
      if (c->r->node[u].end <= t) continue;
      advance(c, start_of(c, u));
      if (c->stamp_d[u] != c->round) return *any = 1;
    }
  }
  advance(c, UINT64_MAX);
  ancestors_once(c, v);
  *any = 0;
  for (int k = 0; k < ndv && !*any; k++) {
    const dev_lists *d = &c->dev[dv[k]];
    for (size_t j = 0; j < d->nnodes && !*any; j++)
      *any = c->stamp_d[d->by_start[j]] != c->round && c->stamp_a[d->by_start[j]] != c->round;
  }
  return 0;
}

/* The predecessor of v that ended last, or WEFT__REP_NONE. */
static uint32_t last_pred(const weft__rep *r, uint32_t v) {
  uint32_t best = WEFT__REP_NONE;
  for (uint32_t k = r->pred_off[v]; k < r->pred_off[v + 1]; k++) {
    uint32_t p = r->pred[k];
    if (ran(&r->node[p]) && (best == WEFT__REP_NONE || r->node[p].end > r->node[best].end)) best = p;
  }
  return best;
}

/* If copy v waited on its lane behind another copy for more than `exposed / 2`, the copy it
 * waited behind last; else WEFT__REP_NONE. */
static uint32_t queued_behind(const ctx *c, uint32_t v, uint64_t exposed) {
  const weft__rep *r = c->r;
  const weft__rnode *x = &r->node[v];
  uint32_t p = last_pred(r, v);
  uint64_t ready = p == WEFT__REP_NONE ? 0 : r->node[p].end;
  if (x->start <= ready || x->start - ready <= exposed / 2) return WEFT__REP_NONE;
  uint32_t best = WEFT__REP_NONE;
  for (uint32_t j = c->lane_begin[x->lane]; j < c->lane_begin[x->lane + 1]; j++) {
    uint32_t u = c->lane_order[j];
    const weft__rnode *y = &r->node[u];
    if (u == v || !y->copy || y->start >= x->start) continue;
    if (y->end > ready && (best == WEFT__REP_NONE || y->end > r->node[best].end)) best = u;
  }
  return best;
}

static void classify(ctx *c, weft__rcopy *cp, uint64_t x0) {
  weft__rep *r = c->r;
  uint32_t v = cp->node;
  const weft__rnode *x = &r->node[v];
  uint64_t exposed = cp->duration - cp->hidden;
  cp->culprit = WEFT__REP_NONE;
  cp->hazard = 0;
  cp->waited_for = WEFT__REP_NONE;
  if (x->pageable) {
    cp->why = WEFT_WHY_PAGEABLE;
    return;
  }
  c->round++;
  descendants_begin(c, v);
  int dv[2];
  int ndv = home_devices(c, x, dv);
  int any;
  int after = independent_after(c, v, dv, ndv, x0, &any);
  if (!any) {
    cp->why = WEFT_WHY_CHAIN;
    return;
  }
  uint32_t nxt = next_compute(c, v, dv, ndv, x0, 0);
  if (nxt != WEFT__REP_NONE && nxt != v && c->stamp_d[nxt] == c->round) {
    /* The device's next compute depends on this copy. Direct edge? */
    for (uint32_t k = r->succ_off[v]; k < r->succ_off[v + 1]; k++)
      if (r->succ[k] == nxt) {
        cp->why = WEFT_WHY_DEPENDENCY;
        cp->culprit = nxt;
        cp->hazard = r->succ_hazard[k];
        return;
      }
    /* Through a host compute node? Walk the BFS parents back from nxt to the copy. */
    bfs_parents(c, v, start_of(c, nxt));
    uint32_t host = WEFT__REP_NONE;
    for (uint32_t u = c->parent[nxt]; u != v; u = c->parent[u])
      if (is_host_compute(&r->node[u])) host = u; /* the one nearest the copy wins */
    cp->why = host != WEFT__REP_NONE && r->node[nxt].device.kind != WEFT_DEVICE_CPU
                  ? WEFT_WHY_HOST_SYNC
                  : WEFT_WHY_DEPENDENCY;
    cp->culprit = host != WEFT__REP_NONE && cp->why == WEFT_WHY_HOST_SYNC ? host : nxt;
    return;
  }
  uint32_t q = queued_behind(c, v, exposed);
  if (!after) {
    cp->why = q != WEFT__REP_NONE ? WEFT_WHY_SERIALISED : WEFT_WHY_NOTHING_LEFT;
    cp->culprit = q;
    return;
  }
  uint32_t u = next_compute(c, v, dv, ndv, x0, 1);
  uint32_t p = u != WEFT__REP_NONE ? last_pred(r, u) : WEFT__REP_NONE;
  if (p != WEFT__REP_NONE && is_host_compute(&r->node[p]) &&
      r->node[u].device.kind != WEFT_DEVICE_CPU) {
    cp->why = WEFT_WHY_HOST_SYNC;
    cp->culprit = p;
  } else if (q != WEFT__REP_NONE) {
    cp->why = WEFT_WHY_SERIALISED;
    cp->culprit = q;
  } else {
    cp->why = WEFT_WHY_IDLE;
    cp->culprit = u;
    if (p != WEFT__REP_NONE && r->node[p].end > x0) cp->waited_for = p;
  }
}

/* The copies the overlap analysis explains: those that ran with device times, within one
 * process. A message between ranks (MPI) is timed from its posting to its arrival, waiting
 * for the other rank included: it is no copy engine's work. */
static int analysed_copy(const weft__rnode *x) {
  return x->copy && ran(x) && !x->hostside && x->src.rank == x->dst.rank;
}

int weft__rep_overlap(weft__rep *r) {
  ctx c = {.r = r};
  int rc;
  weft__free(r->copies);
  r->copies = NULL;
  r->ncopies = 0;
  r->copy_total = r->copy_hidden = 0;
  uint32_t ncopies = 0;
  for (uint32_t i = 0; i < r->n; i++)
    if (analysed_copy(&r->node[i])) ncopies++;
  if (ncopies == 0) return WEFT_OK;
  r->copies = weft__calloc(ncopies, sizeof *r->copies);
  c.stamp_d = weft__calloc(r->n, sizeof *c.stamp_d);
  c.stamp_a = weft__calloc(r->n, sizeof *c.stamp_a);
  c.parent = weft__malloc(r->n * sizeof *c.parent);
  c.queue = weft__malloc(r->n * sizeof *c.queue);
  c.heap = weft__malloc(r->n * sizeof *c.heap);
  if (!r->copies || !c.stamp_d || !c.stamp_a || !c.parent || !c.queue || !c.heap) {
    rc = weft__oom("the overlap analysis");
    goto done;
  }
  if ((rc = build_devices(&c)) != WEFT_OK || (rc = weft__rep_lane_order(r, &c.lane_order, &c.lane_begin)) != WEFT_OK)
    goto done;
  for (uint32_t i = 0; i < r->n; i++) {
    const weft__rnode *x = &r->node[i];
    if (!analysed_copy(x)) continue;
    weft__rcopy *cp = &r->copies[r->ncopies++];
    cp->node = i;
    cp->duration = x->end - x->start;
    int a = dev_index(&c, x->src), b = dev_index(&c, x->dst);
    const dev_lists *da = &c.dev[a], *db = &c.dev[b];
    size_t nb = b == a ? 0 : db->nivl;
    cp->hidden = weft__rep_covered(da->ivl, da->nivl, db->ivl, nb, x->start, x->end);
    r->copy_total += cp->duration;
    r->copy_hidden += cp->hidden;
    cp->why = WEFT_WHY_NONE;
    cp->culprit = cp->waited_for = WEFT__REP_NONE;
    if (cp->hidden < cp->duration)
      classify(&c, cp, first_exposed(da->ivl, da->nivl, db->ivl, nb, x->start, x->end));
  }
  rc = WEFT_OK;
done:
  if (c.dev != NULL)
    for (size_t i = 0; i < c.ndev; i++) {
      weft__free(c.dev[i].ivl);
      weft__free(c.dev[i].by_start);
    }
  weft__free(c.dev);
  weft__free(c.stamp_d);
  weft__free(c.stamp_a);
  weft__free(c.parent);
  weft__free(c.queue);
  weft__free(c.heap);
  weft__free(c.lane_order);
  weft__free(c.lane_begin);
  return rc;
}

/* ---- waits for a worker ------------------------------------------------------------------ */

/* A node's start is its worker's previous end when it follows a node there directly (one clock
 * reading a node, dispatch.c), so a successor its predecessor's worker runs next waits 0, and
 * what the dispatcher does between two nodes counts in the second's duration: a wait is time in
 * which the node was ready and no worker had taken it (a queue, a steal, a wake-up). */
int weft__rep_ready_waits(weft__rep *r) {
  r->nwaits = 0;
  r->wait_p50 = r->wait_p99 = r->wait_max = 0;
  uint64_t *w = weft__malloc((r->n ? r->n : 1) * sizeof *w);
  if (w == NULL) return weft__oom("run statistics");
  uint32_t k = 0;
  for (uint32_t i = 0; i < r->n; i++) {
    const weft__rnode *x = &r->node[i];
    if (!ran(x) || WEFT__LANE_ROLE(r->lanes[x->lane].code) != WEFT__LANE_CPU) continue;
    uint64_t ready = 0;
    int any = 0;
    for (uint32_t e = r->pred_off[i]; e < r->pred_off[i + 1]; e++) {
      const weft__rnode *p = &r->node[r->pred[e]];
      if (!ran(p)) continue;
      any = 1;
      if (p->end > ready) ready = p->end;
    }
    if (any) w[k++] = x->start > ready ? x->start - ready : 0;
  }
  if (k > 0) {
    qsort(w, k, sizeof *w, weft__cmp_u64);
    r->nwaits = k;
    r->wait_p50 = w[(k + 1) / 2 - 1];                        /* nearest rank: ceil(k / 2) */
    r->wait_p99 = w[(uint32_t)(((uint64_t)k * 99 + 99) / 100) - 1]; /* ceil(0.99 k) */
    r->wait_max = w[k - 1];
  }
  weft__free(w);
  return WEFT_OK;
}

int weft__rep_analyse(weft__rep *r) {
  weft__rep_lanes(r);
  int rc = weft__rep_critical_path(r);
  if (rc == WEFT_OK) rc = weft__rep_overlap(r);
  if (rc == WEFT_OK) rc = weft__rep_ready_waits(r);
  return rc;
}
