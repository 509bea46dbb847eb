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

static void heap_push(ready_item *h, uint32_t *n, ready_item it) {
  uint32_t k = (*n)++;
  while (k > 0 && before(&it, &h[(k - 1) / 2])) {
    h[k] = h[(k - 1) / 2];
    k = (k - 1) / 2;
  }
  h[k] = it;
}

static ready_item heap_pop(ready_item *h, uint32_t *n) {
  ready_item top = h[0], last = h[--(*n)];
  uint32_t k = 0;
  for (;;) {
    uint32_t c = 2 * k + 1;
    if (c >= *n) break;
    if (c + 1 < *n && before(&h[c + 1], &h[c])) c++;
    if (!before(&h[c], &last)) break;
    h[k] = h[c];
    k = c;
  }
  if (*n > 0) h[k] = last;
  return top;
}

int weft__heft_order(weft__pbuild *bd) {
  uint32_t n = bd->n;
  int engines = bd->t->ngpus * 4;
  uint32_t *left = weft__malloc((n ? n : 1) * sizeof *left), *order = weft__malloc((n ? n : 1) * sizeof *order);
  double *ready = weft__calloc(n ? n : 1, sizeof *ready), *finish = weft__malloc((n ? n : 1) * sizeof *finish);
  double *free_at = weft__calloc(engines > 0 ? (size_t)engines : 1, sizeof *free_at);
  ready_item *heap = weft__malloc((n ? n : 1) * sizeof *heap);
  int rc = WEFT_OK;
  if (!left || !order || !ready || !finish || !free_at || !heap) {
    rc = weft__oom("the heft order");
    goto done;
  }
  uint32_t nh = 0, emitted = 0;
  for (uint32_t i = 0; i < n; i++) {
    left[i] = bd->poff[i + 1] - bd->poff[i];
    if (left[i] == 0) heap_push(heap, &nh, (ready_item){0, bd->height[i], bd->pos[i], i});
  }
  while (nh > 0) {
    ready_item it = heap_pop(heap, &nh);
    uint32_t i = it.node;
    int e = engine_of(bd, i);
    double start = e >= 0 ? fmax(ready[i], free_at[e]) : ready[i];
    if (start > it.start) { /* its engine got busy since it was queued: queue it again */
      it.start = start;
      heap_push(heap, &nh, it);
      continue;
    }
    finish[i] = start + bd->cost[i];
    if (e >= 0) free_at[e] = finish[i];
    order[emitted++] = i;
    for (uint32_t q = bd->soff[i]; q < bd->soff[i + 1]; q++) {
      uint32_t s = bd->succ[q];
      ready[s] = fmax(ready[s], finish[i]);
      if (--left[s] == 0) {
        int es = engine_of(bd, s);
        heap_push(heap, &nh, (ready_item){es >= 0 ? fmax(ready[s], free_at[es]) : ready[s], bd->height[s], bd->pos[s], s});
      }
    }
  }
  WEFT_ASSERT(emitted == n); /* the analysis ordered the graph: it has no cycle */
  memcpy(bd->p->order, order, (size_t)n * sizeof *order);
  for (uint32_t k = 0; k < n; k++) bd->pos[order[k]] = k;
done:
  weft__free(left);
  weft__free(order);
  weft__free(ready);
  weft__free(finish);
  weft__free(free_at);
  weft__free(heap);
  return rc;
}
