/* plan.c — turns an analysed graph into what the dispatcher runs: per node its backend, its
 * successor and predecessor lists (CSR), its number of predecessors, the roots, and for each
 * edge whether it is released at issue ("early": both ends on the same asynchronous backend)
 * or at completion. Backends may add ordering edges among their own nodes first (resources the
 * analysis does not see, such as a reused device buffer), then attach their own per-node state
 * (streams, events, memory).
 *
 * A plan is rebuilt only when the graph's version moved; re-running an unchanged graph reuses
 * it, including the per-run counters, which launch resets in one pass. */
#include <stdio.h>
#include <string.h>

#include "sched/sched.h"

/* Array sizes, in one place for allocation and release. */
#define X_BYTES(n) ((size_t)((n) ? (n) : 1) * sizeof(weft__xnode))
#define U32_BYTES(k) ((size_t)((k) ? (k) : 1) * sizeof(uint32_t))
#define U8_BYTES(k) ((size_t)((k) ? (k) : 1))

static void plan_free_arrays(weft__plan *p) {
  const weft__mem *mem = p->mem;
  weft__mem_put(mem, p->x, X_BYTES(p->n));
  weft__mem_put(mem, p->succ, U32_BYTES(p->m));
  weft__mem_put(mem, p->succ_early, U8_BYTES(p->m));
  weft__mem_put(mem, p->pred, U32_BYTES(p->m));
  weft__mem_put(mem, p->roots, U32_BYTES(p->n));
  weft__mem_put(mem, p->pending, U32_BYTES(p->n));
  weft__mem_put(mem, p->poison, U8_BYTES(p->n));
  weft__timing_plan_free(p);
}

void weft__plan_free(weft_runtime *rt, weft__plan *p) {
  if (p == NULL) return;
  for (int b = 0; b < rt->nbackends; b++)
    if (rt->backends[b].vt->plan_free != NULL) rt->backends[b].vt->plan_free(&rt->backends[b], p);
  plan_free_arrays(p);
  weft__free(p);
}

/* Adds each edge of `e` to the CSR arrays; x[].succ_end and pred_end are the fill cursors. */
static void fill_edges(weft__plan *p, const weft__edge *e, size_t len) {
  for (size_t k = 0; k < len; k++) {
    weft__xnode *from = &p->x[e[k].from], *to = &p->x[e[k].to];
    uint32_t s = from->succ_end++;
    p->succ[s] = e[k].to;
    p->succ_early[s] = from->backend == to->backend &&
                       (from->backend->vt->flags & WEFT__BACKEND_ASYNC) != 0;
    p->pred[to->pred_end++] = e[k].from;
  }
}

static void count_edges(weft__plan *p, const weft__edge *e, size_t len) {
  for (size_t k = 0; k < len; k++) {
    p->x[e[k].from].succ_end++;
    p->x[e[k].to].pred_end++;
  }
}

int weft__plan_build(weft_graph *g) {
  if (g->plan != NULL && g->plan->version == g->version) return WEFT_OK;
  int rc = weft__graph_analyse(g);
  if (rc != WEFT_OK) return rc;
  weft_runtime *rt = g->rt;
  uint32_t n = (uint32_t)g->nodes.len;
  weft__vec extra; /* weft__edge: the backends' resource edges */
  weft__vec_init(&extra, sizeof(weft__edge));
  int hooked = 0;  /* backends whose plan_edges or plan hook ran, for the cleanup */
  weft__plan *p = weft__calloc(1, sizeof *p);
  if (p == NULL) return weft__oom("a plan");
  p->graph = g;
  p->n = n;
  p->mem = g->mem;
  p->x = weft__mem_get(p->mem, X_BYTES(n));
  p->roots = weft__mem_get(p->mem, U32_BYTES(n));
  p->pending = weft__mem_get(p->mem, U32_BYTES(n));
  p->poison = weft__mem_get(p->mem, U8_BYTES(n));
  if (!p->x || !p->roots || !p->pending || !p->poison) {
    rc = weft__oom("a plan");
    goto fail;
  }
  memset(p->x, 0, X_BYTES(n));
  if ((rc = weft__timing_plan_init(p)) != WEFT_OK) {
    plan_free_arrays(p);
    weft__free(p);
    return rc;
  }
  weft_node **nodes = g->nodes.data;
  for (uint32_t i = 0; i < n; i++) {
    weft__xnode *x = &p->x[i];
    x->node = nodes[i];
    x->plan = p;
    x->id = i;
    x->backend = weft__backend_for(rt, nodes[i]->device);
  }
  /* Backends may order their own nodes further, for resources the analysis does not see. */
  for (int b = 0; b < rt->nbackends; b++) {
    hooked = b + 1;
    if (rt->backends[b].vt->plan_edges != NULL &&
        (rc = rt->backends[b].vt->plan_edges(&rt->backends[b], p, &extra)) != WEFT_OK)
      goto fail;
  }
  size_t m = g->edges.len + extra.len;
  p->m = m;
  p->succ = weft__mem_get(p->mem, U32_BYTES(m));
  p->succ_early = weft__mem_get(p->mem, U8_BYTES(m));
  p->pred = weft__mem_get(p->mem, U32_BYTES(m));
  if (!p->succ || !p->succ_early || !p->pred) {
    rc = weft__oom("a plan");
    goto fail;
  }
  /* Counts, then prefix sums; x[i].succ_end and pred_end serve as fill cursors. */
  count_edges(p, g->edges.data, g->edges.len);
  count_edges(p, extra.data, extra.len);
  uint32_t so = 0, po = 0;
  for (uint32_t i = 0; i < n; i++) {
    weft__xnode *x = &p->x[i];
    x->indeg = x->pred_end;
    uint32_t sc = x->succ_end, pc = x->pred_end;
    x->succ_begin = x->succ_end = so;
    x->pred_begin = x->pred_end = po;
    so += sc;
    po += pc;
  }
  fill_edges(p, g->edges.data, g->edges.len);
  fill_edges(p, extra.data, extra.len);
  weft__vec_fini(&extra);
  for (uint32_t i = 0; i < n; i++)
    if (p->x[i].indeg == 0) p->roots[p->nroots++] = i;
  for (int b = 0; b < rt->nbackends; b++)
    if (rt->backends[b].vt->plan != NULL &&
        (rc = rt->backends[b].vt->plan(&rt->backends[b], p)) != WEFT_OK)
      goto fail;
  weft__plan_free(rt, g->plan);
  p->version = g->version;
  g->plan = p;
  return WEFT_OK;
fail:
  /* plan_free undoes whatever part of plan_edges and plan a backend got through (it must
   * accept a plan it attached nothing to). */
  for (int k = 0; k < hooked; k++)
    if (rt->backends[k].vt->plan_free != NULL) rt->backends[k].vt->plan_free(&rt->backends[k], p);
  weft__vec_fini(&extra);
  plan_free_arrays(p);
  weft__free(p);
  return rc;
}
