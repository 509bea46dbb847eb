/* gpu.c — the GPU part of a plan, step by step (planner.h lists the steps and their files):
 * each GPU node's lane (the policy places it), the temporaries and the window's claims, the
 * waits and records, the turns, the tail split, and the per-node lists. The steps read the
 * graph's data edges (a CSR built here) and the plan's order; the claims' edges go to `extra`,
 * which build.c merges into the plan's final edges. */
#include <stdlib.h>
#include <string.h>

#include "sched/plan/policy.h"
#include "sched/sched.h"

int weft__pair_push(weft__vec *v, uint32_t owner, uint32_t value) {
  weft__pair pr = {owner, value};
  return weft__vec_push(v, &pr);
}

static int by_owner(const void *a, const void *b) {
  const weft__pair *x = a, *y = b;
  return x->owner < y->owner ? -1 : x->owner > y->owner;
}

void weft__pairs_sort(weft__vec *v) {
  if (v->len > 1) qsort(v->data, v->len, sizeof(weft__pair), by_owner);
}

static int data_csr(weft__pbuild *bd) {
  const weft__edge *e = bd->g->edges.data;
  size_t m = bd->g->edges.len;
  uint32_t n = bd->n;
  bd->soff = weft__calloc((size_t)n + 1, sizeof(uint32_t));
  bd->poff = weft__calloc((size_t)n + 1, sizeof(uint32_t));
  bd->succ = weft__malloc((m ? m : 1) * sizeof(uint32_t));
  bd->pred = weft__malloc((m ? m : 1) * sizeof(uint32_t));
  uint32_t *cur = weft__malloc(((size_t)n + 1) * sizeof(uint32_t));
  if (!bd->soff || !bd->poff || !bd->succ || !bd->pred || !cur) {
    weft__free(cur);
    return weft__oom("the GPU plan");
  }
  for (size_t k = 0; k < m; k++) {
    bd->soff[e[k].from + 1]++;
    bd->poff[e[k].to + 1]++;
  }
  for (uint32_t i = 0; i < n; i++) {
    bd->soff[i + 1] += bd->soff[i];
    bd->poff[i + 1] += bd->poff[i];
  }
  memcpy(cur, bd->soff, ((size_t)n + 1) * sizeof(uint32_t));
  for (size_t k = 0; k < m; k++) bd->succ[cur[e[k].from]++] = e[k].to;
  memcpy(cur, bd->poff, ((size_t)n + 1) * sizeof(uint32_t));
  for (size_t k = 0; k < m; k++) bd->pred[cur[e[k].to]++] = e[k].from;
  weft__free(cur);
  return WEFT_OK;
}

static void scratch_free(weft__pbuild *bd) {
  weft__free(bd->soff);
  weft__free(bd->succ);
  weft__free(bd->poff);
  weft__free(bd->pred);
  weft__free(bd->pos);
  weft__free(bd->cost);
  weft__free(bd->height);
  weft__free(bd->heir);
  weft__free(bd->first);
  weft__free(bd->last_final);
  weft__free(bd->lane_tail);
  weft__free(bd->lane_kept);
  weft__free(bd->lane_rr);
  weft__vec_fini(&bd->waits);
  weft__vec_fini(&bd->allocs);
  weft__vec_fini(&bd->pfrees);
  weft__vec_fini(&bd->readers);
}

int weft__plan_gpu(weft__plan *p, const weft__gpu_target *t, weft__vec *extra) {
  weft_graph *g = p->graph;
  weft__gpu_plan *gp = &p->gpu;
  uint32_t n = p->n, nt = (uint32_t)g->tensors.len;
  size_t nn = n ? n : 1, ntt = nt ? nt : 1;
  weft__pbuild bd;
  memset(&bd, 0, sizeof bd);
  weft__vec_init(&bd.waits, sizeof(weft__pair));
  weft__vec_init(&bd.allocs, sizeof(weft__pair));
  weft__vec_init(&bd.pfrees, sizeof(weft__pair));
  weft__vec_init(&bd.readers, sizeof(weft__pair));
  bd.p = p;
  bd.g = g;
  bd.t = t;
  bd.n = n;
  bd.nt = nt;
  bd.extra = extra;
  size_t ng = (size_t)t->ngpus;
  gp->target = *t; /* the plan owns the dev array from here on */
  gp->node = weft__calloc(nn, sizeof *gp->node);
  gp->temp = weft__calloc(ntt, 1);
  gp->turns = weft__calloc(ng, sizeof *gp->turns);
  gp->turn_base = weft__calloc(ng, sizeof *gp->turn_base);
  gp->used = weft__calloc(ng, sizeof *gp->used);
  bd.lane_tail = weft__malloc(ng * sizeof *bd.lane_tail);
  bd.lane_kept = weft__malloc(ng * sizeof *bd.lane_kept);
  bd.lane_rr = weft__calloc(ng, sizeof *bd.lane_rr);
  bd.x = gp->node;
  bd.pos = weft__malloc(nn * sizeof(uint32_t));
  bd.cost = weft__malloc(nn * sizeof(double));
  bd.height = weft__malloc(nn * sizeof(double));
  bd.heir = weft__malloc(nn * sizeof(uint32_t));
  bd.first = weft__malloc(ntt * sizeof(uint32_t));
  bd.last_final = weft__malloc(ntt * sizeof(uint32_t));
  int rc = WEFT_OK;
  if (!gp->node || !gp->temp || !gp->turns || !gp->turn_base || !gp->used || !bd.lane_tail || !bd.lane_kept ||
      !bd.lane_rr || !bd.pos || !bd.cost || !bd.height || !bd.heir || !bd.first || !bd.last_final) {
    rc = weft__oom("the GPU plan");
    goto done;
  }
  memset(bd.lane_tail, 0xff, ng * sizeof *bd.lane_tail);
  memset(bd.lane_kept, 0xff, ng * sizeof *bd.lane_kept);
  for (uint32_t k = 0; k < n; k++) bd.pos[p->order[k]] = k;
  for (uint32_t i = 0; i < n; i++) {
    weft__gnode *x = &gp->node[i];
    x->dev = x->start_dev = -1;
    x->heir_of = x->split_of = x->batch = x->turn = WEFT__NONE;
    const weft_node *nd = p->x[i].node;
    bd.cost[i] = weft__plan_work(nd);
    /* This process's GPU nodes: another rank's (the transport's here) are not, or a turn of
     * this rank's main stream would wait for a node that never launches here (the inverse
     * panel's trmm across two GPU ranks hung so). */
    if (nd->device.kind != WEFT_DEVICE_CUDA || p->x[i].backend != t->backend) continue;
    gp->nnodes++;
    if (nd->kind == WEFT__OP_USER || nd->kind == WEFT__OP_POTRF || nd->kind == WEFT__OP_TRTRI) gp->eager_only = 1;
    weft__lanes_classify(&bd, i);
  }
  if ((rc = data_csr(&bd)) != WEFT_OK) goto done;
  weft__lanes_heirs(&bd);
  if ((rc = g->rt->policy->place(&bd)) != WEFT_OK) goto done;
  if ((rc = weft__memory_temporaries(&bd)) != WEFT_OK || (rc = weft__memory_window(&bd)) != WEFT_OK ||
      (rc = weft__sync_waits(&bd)) != WEFT_OK || (rc = weft__sync_turns(&bd)) != WEFT_OK)
    goto done;
  weft__sync_tail_split(&bd);
  rc = weft__sync_pack(&bd);
done:
  scratch_free(&bd);
  return rc;
}
