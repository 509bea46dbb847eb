/* heft.c — the `heft` policy's order: list scheduling of the plan (HEFT's priorities, Topcuoglu
 * et al. 2002) on the devices' engines, so that the work on the critical path goes first.
 *
 * The `fixed` policy keeps the program's order, and a GPU runs its large kernels one after the
 * other in that order (their turns, sync.c). For a tiled factorisation that order is step by
 * step: all of step k's trailing updates before step k+1's panel, which then waits for the
 * device to drain. `heft` reorders the plan instead: it simulates the nodes on the engines
 * they occupy — a device's main compute stream for a kernel that fills the device, each copy
 * engine for copies, no limit for the rest — and emits them in the order they would start,
 * choosing among the nodes that could start first the one with the longest path below it
 * (its height, by the planner's work estimate: flops for products and the linear-algebra ops).
 * So the next panel runs as soon as its tile is updated (look-ahead), and a copy of a product's
 * result follows that product as it would in the program's order. The order is topological (a
 * node is emitted after its predecessors), and everything after the policy — streams, turns,
 * the memory window — follows it. Nodes on the CPU are emitted like the small GPU kernels: the
 * CPU pool runs them when they are ready, whatever the order. */
#include <math.h>
#include <string.h>

#include "sched/plan/planner.h"

/* The engine a node occupies: a device's main compute stream (a kernel that fills the device)
 * or one of its copy engines, or -1 for none (small kernels, CPU nodes). */
static int engine_of(const weft__pbuild *bd, uint32_t i) {
  const weft__gnode *x = &bd->x[i];
  if (x->dev < 0) return -1;
  int base = x->dev * 4;
  switch (x->why) {
    case WEFT__WHY_H2D: return base + 1;
    case WEFT__WHY_D2H:
    case WEFT__WHY_STAGED: return base + 2;
    case WEFT__WHY_PEER: return base + 3;
    default: return (x->flags & WEFT__G_BIG) ? base : -1;
  }
}

typedef struct ready_item {
  double start, height;
  uint32_t pos, node;
} ready_item;

/* a before b: earlier start, then the longer path below, then the program's order. */
static int before(const ready_item *a, const ready_item *b) {
  if (a->start != b->start) return a->start < b->start;
  if (a->height != b->height) return a->height > b->height;
  return a->pos < b->pos;
}

/* A binary heap of ready items under `before` (start: the ready time, or any common value). */
typedef struct rheap {
  ready_item *h;
  uint32_t n, cap;
} rheap;

static int heap_push(rheap *q, ready_item it) {
  if (q->n == q->cap) {
    uint32_t cap = q->cap ? 2 * q->cap : 64;
    ready_item *h = weft__realloc(q->h, (size_t)cap * sizeof *h);
    if (h == NULL) return weft__oom("the heft order");
    q->h = h;
    q->cap = cap;
  }
  uint32_t k = q->n++;
  while (k > 0 && before(&it, &q->h[(k - 1) / 2])) {
    q->h[k] = q->h[(k - 1) / 2];
    k = (k - 1) / 2;
  }
  q->h[k] = it;
  return WEFT_OK;
}

static ready_item heap_pop(rheap *q) {
  ready_item top = q->h[0], last = q->h[--q->n];
  uint32_t k = 0;
  for (;;) {
    uint32_t c = 2 * k + 1;
    if (c >= q->n) break;
    if (c + 1 < q->n && before(&q->h[c + 1], &q->h[c])) c++;
    if (!before(&q->h[c], &last)) break;
    q->h[k] = q->h[c];
    k = c;
  }
  if (q->n > 0) q->h[k] = last;
  return top;
}

/* The nodes waiting for engine e: `later`, by ready time, those not ready when the engine is
 * free; `now`, by height and position (their start is the engine's free time), those that are.
 * The next on the engine is now's first, else later's. A node that waited for its engine was
 * once re-queued at every change of the engine's free time (quadratic in the nodes of a tiled
 * factorisation's updates); each now moves once. */
typedef struct engine_queue {
  rheap later, now;
} engine_queue;

static int engine_settle(engine_queue *q, double free_at) {
  int rc = WEFT_OK;
  while (rc == WEFT_OK && q->later.n > 0 && q->later.h[0].start <= free_at) {
    ready_item it = heap_pop(&q->later);
    it.start = 0; /* in `now` all start together, at free_at */
    rc = heap_push(&q->now, it);
  }
  return rc;
}

/* The engine's next node as the global choice sees it (start filled in); 0 if none. */
static int engine_head(engine_queue *q, double free_at, ready_item *out) {
  if (q->now.n > 0) {
    *out = q->now.h[0];
    out->start = free_at;
    return 1;
  }
  if (q->later.n > 0) {
    *out = q->later.h[0];
    return 1;
  }
  return 0;
}

int weft__heft_order(weft__pbuild *bd) {
  uint32_t n = bd->n;
  int engines = bd->t->ngpus * 4;
  size_t ne = engines > 0 ? (size_t)engines : 1;
  uint32_t *left = weft__malloc((n ? n : 1) * sizeof *left), *order = weft__malloc((n ? n : 1) * sizeof *order);
  double *ready = weft__calloc(n ? n : 1, sizeof *ready), *finish = weft__malloc((n ? n : 1) * sizeof *finish);
  double *free_at = weft__calloc(ne, sizeof *free_at);
  engine_queue *eq = weft__calloc(ne, sizeof *eq);
  rheap free_nodes = {NULL, 0, 0}; /* the nodes that take no engine */
  int rc = WEFT_OK;
  if (!left || !order || !ready || !finish || !free_at || !eq) {
    rc = weft__oom("the heft order");
    goto done;
  }
  uint32_t emitted = 0;
  for (uint32_t i = 0; i < n && rc == WEFT_OK; i++) {
    left[i] = bd->poff[i + 1] - bd->poff[i];
    if (left[i] != 0) continue;
    int e = engine_of(bd, i);
    rc = heap_push(e >= 0 ? &eq[e].later : &free_nodes, (ready_item){0, bd->height[i], bd->pos[i], i});
  }
  while (rc == WEFT_OK) {
    /* The first of all: the free nodes' head against each engine's. */
    ready_item best = {0}, cand;
    int from = -2; /* -1: the free nodes; e >= 0: engine e */
    if (free_nodes.n > 0) best = free_nodes.h[0], from = -1;
    for (int e = 0; e < engines && rc == WEFT_OK; e++)
      if ((rc = engine_settle(&eq[e], free_at[e])) == WEFT_OK && engine_head(&eq[e], free_at[e], &cand) &&
          (from == -2 || before(&cand, &best)))
        best = cand, from = e;
    if (rc != WEFT_OK || from == -2) break;
    if (from == -1)
      heap_pop(&free_nodes);
    else
      heap_pop(eq[from].now.n > 0 ? &eq[from].now : &eq[from].later);
    uint32_t i = best.node;
    finish[i] = best.start + bd->cost[i];
    if (from >= 0) free_at[from] = finish[i];
    order[emitted++] = i;
    for (uint32_t q = bd->soff[i]; q < bd->soff[i + 1]; q++) {
      uint32_t s = bd->succ[q];
      ready[s] = fmax(ready[s], finish[i]);
      if (--left[s] == 0 && rc == WEFT_OK) {
        int es = engine_of(bd, s);
        rc = heap_push(es >= 0 ? &eq[es].later : &free_nodes, (ready_item){ready[s], bd->height[s], bd->pos[s], s});
      }
    }
  }
  if (rc != WEFT_OK) goto done;
  WEFT_ASSERT(emitted == n); /* the analysis ordered the graph: it has no cycle */
  memcpy(bd->p->order, order, (size_t)n * sizeof *order);
  for (uint32_t k = 0; k < n; k++) bd->pos[order[k]] = k;
done:
  weft__free(left);
  weft__free(order);
  weft__free(ready);
  weft__free(finish);
  weft__free(free_at);
  for (size_t e = 0; eq != NULL && e < ne; e++) {
    weft__free(eq[e].later.h);
    weft__free(eq[e].now.h);
  }
  weft__free(eq);
  weft__free(free_nodes.h);
  return rc;
}
