/* cuda_plan.c — the CUDA objects a plan needs. The planner (src/sched/plan/) has decided each
 * node's stream, the events it records and waits for, the temporaries it allocates and frees,
 * its turn and its batch, for the machine this backend describes (weft__cu_gpu_target). Here
 * the backend makes what those decisions need: an event per node that records one, the staging
 * buffer and event of a copy between GPUs without peer access, the tail and drain events of the
 * streams the plan uses, the batches' op arrays, the node timing's events, and storage for
 * tensors an earlier plan managed per run. */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

_Static_assert(WEFT__PLAN_BATCH_MAX == WEFT__CU_BATCH_MAX, "the plan's batches must fit the batch kernel");
_Static_assert(CU_MAX_COMPUTE + 3 == WEFT__PLAN_MAX_STREAMS, "the plan's streams are the device's");

int weft__cu_gpu_target(const weft__backend *b, weft__gpu_target *out) {
  const cu_state *st = b->state;
  out->batch = atomic_load(&st->batch);
  out->turns = !st->launch_blocking;
  out->window_count = st->window_count;
  out->window_min_bytes = st->window_bytes_min;
  for (int d = 0; d < out->ngpus && d < st->ndev; d++) {
    out->dev[d].compute = st->dev[d].ncompute;
    out->dev[d].sms = st->dev[d].sms;
  }
  return WEFT_OK;
}

static int new_event(cu_device *d, cudaEvent_t *ev) {
  int rc = weft__cu_set_device(d);
  if (rc != WEFT_OK) return rc;
  cudaError_t e = cudaEventCreateWithFlags(ev, cudaEventDisableTiming | cudaEventBlockingSync);
  return e == cudaSuccess ? WEFT_OK : weft__cu_error(e, "cudaEventCreate", d->ordinal);
}

/* Tensors that an earlier plan managed per run and this one does not need storage now, since
 * materialisation has passed them. */
static int adopt_former_temporaries(weft__backend *b, cu_plan *cp) {
  /* Not b->vt->alloc: that consults the graph's current plan, which is still the old one. */
  weft_graph *g = cp->p->graph;
  weft_tensor **ts = g->tensors.data;
  for (size_t t = 0; t < g->materialised && t < cp->ntensors; t++) {
    weft_tensor *tt = ts[t];
    if (tt->device.kind != WEFT_DEVICE_CUDA || tt->device.rank != weft_runtime_rank(g->rt) || tt->storage_kind != WEFT__S_NONE ||
        tt->bytes == 0 || cp->temp[t])
      continue; /* another rank's tensor has its storage there */
    int rc = weft__cu_alloc_storage(b->state, tt);
    if (rc == WEFT_OK && !tt->initialised) {
      rc = b->vt->init_tensor(b, tt);
      tt->initialised = rc == WEFT_OK;
    }
    if (rc != WEFT_OK) return rc;
  }
  return WEFT_OK;
}

/* The batches' run-time records: the planner's batches, each with room for its ops. */
static int make_batches(cu_plan *cp) {
  const weft__gpu_plan *gp = &cp->p->gpu;
  if (gp->nbatches == 0) return WEFT_OK;
  size_t members = 0;
  for (uint32_t k = 0; k < gp->nbatches; k++) members += gp->batches[k].len;
  /* One block: the batches, then their ops. */
  cp->batches = weft__malloc(gp->nbatches * sizeof(cu_batch) + members * sizeof(weft__cu_bop));
  if (cp->batches == NULL) return weft__oom("the CUDA plan's batches");
  cp->nbatches = gp->nbatches;
  weft__cu_bop *ops = (weft__cu_bop *)(cp->batches + cp->nbatches);
  for (uint32_t k = 0; k < cp->nbatches; k++) {
    const weft__gbatch *pb = &gp->batches[k];
    cp->batches[k] = (cu_batch){pb->first, pb->last, 0, pb->len, ops};
    ops += pb->len;
  }
  return WEFT_OK;
}

int weft__cu_plan(weft__backend *b, weft__plan *p) {
  cu_state *st = b->state;
  const weft__gpu_plan *gp = &p->gpu;
  if (gp->node == NULL) return WEFT_OK;
  cu_plan *cp = weft__calloc(1, sizeof *cp);
  if (cp == NULL) return weft__oom("the CUDA plan");
  p->bstate[b->index] = cp; /* from here on plan_free cleans up */
  cp->st = st;
  cp->p = p;
  cp->n = p->n;
  cp->ntensors = (uint32_t)p->graph->tensors.len;
  cp->x = gp->node;
  cp->lists = gp->lists;
  cp->order = p->order;
  cp->temp = gp->temp;
  cp->ncuda = gp->nnodes;
  cp->all_cuda = gp->nnodes == p->n;
  cp->eager_only = gp->eager_only;
  cp->turn_base = gp->turn_base;
  cp->turns = gp->turns;
  cp->nturns = gp->nturns;
  cp->used = gp->used;
  cp->origin_dev = -1;
  int rc = weft__mutex_init(&cp->msg_lock);
  if (rc != WEFT_OK) return rc;
  cp->have_msg_lock = 1;
  size_t nn = p->n ? p->n : 1, nt = cp->ntensors ? cp->ntensors : 1;
  cp->ev = weft__calloc(nn, sizeof *cp->ev);
  cp->defer = weft__calloc(nn, sizeof *cp->defer);
  cp->tptr = weft__calloc(nt, sizeof(void *));
  cp->parked = weft__malloc((cp->nturns ? cp->nturns : 1) * sizeof *cp->parked);
  if (!cp->ev || !cp->defer || !cp->tptr || !cp->parked) return weft__oom("the CUDA plan");
  if ((rc = make_batches(cp)) != WEFT_OK) return rc;
  for (uint32_t i = 0; i < cp->n && cp->la_info == NULL; i++)
    if (cp->x[i].dev >= 0 && (p->x[i].node->kind == WEFT__OP_POTRF || p->x[i].node->kind == WEFT__OP_TRTRI)) {
      if ((cp->la_info = weft__cu_pinned_alloc(st, nn * sizeof(int))) == NULL)
        return weft__err(WEFT_ENOMEM, "no pinned host memory for the results of the plan's potrf and trtri nodes");
      memset(cp->la_info, 0, nn * sizeof(int));
    }
  for (uint32_t i = 0; i < cp->n; i++) {
    const weft__gnode *x = &cp->x[i];
    cu_node *o = &cp->ev[i];
    if (x->dev < 0) continue;
    if ((x->flags & WEFT__G_RECORD) && (rc = new_event(&st->dev[x->dev], &o->event)) != WEFT_OK) return rc;
    if ((x->flags & WEFT__G_SPLIT) && (rc = new_event(&st->dev[x->dev], &o->stage_event)) != WEFT_OK) return rc;
    if (x->flags & WEFT__G_STAGED) {
      if ((rc = new_event(&st->dev[x->start_dev], &o->stage_event)) != WEFT_OK) return rc;
      size_t bytes = p->x[i].node->args[0].t->bytes;
      if (bytes > 0 && (o->stage = weft__cu_pinned_alloc(st, bytes)) == NULL)
        return weft__err(WEFT_ENOMEM, "no pinned host memory (%zu bytes) to stage the copy of node %u", bytes, i);
    }
  }
  for (int d = 0; d < st->ndev; d++) {
    if (cp->used[d] == 0) continue;
    for (int s = 0; s < st->dev[d].nstreams; s++)
      if ((cp->used[d] >> s & 1) && (rc = new_event(&st->dev[d], &cp->tail[d][s])) != WEFT_OK) return rc;
    if ((rc = new_event(&st->dev[d], &cp->drained[d])) != WEFT_OK) return rc;
  }
  if ((rc = weft__cu_timing_plan(st, cp)) != WEFT_OK) return rc;
  return adopt_former_temporaries(b, cp);
}

static void destroy_event(cu_device *d, cudaEvent_t *ev) {
  if (*ev == NULL) return;
  if (cudaSetDevice(d->ordinal) == cudaSuccess) cudaEventDestroy(*ev);
  *ev = NULL;
}

void weft__cu_plan_free(weft__backend *b, weft__plan *p) {
  cu_state *st = b->state;
  cu_plan *cp = weft__cu_plan_of(b, p);
  if (cp == NULL) return;
  weft__cu_replay_free(cp); /* the graph first: its event-record nodes use the ticks */
  weft__cu_timing_free(st, cp);
  if (cp->ev != NULL)
    for (uint32_t i = 0; i < cp->n; i++) {
      const weft__gnode *x = &cp->x[i];
      if (x->dev < 0) continue;
      destroy_event(&st->dev[x->dev], &cp->ev[i].event);
      destroy_event(&st->dev[x->start_dev], &cp->ev[i].stage_event);
      weft__cu_pinned_free(st, cp->ev[i].stage);
    }
  for (int d = 0; d < st->ndev; d++) {
    for (int s = 0; s < CU_MAX_COMPUTE + 3; s++) destroy_event(&st->dev[d], &cp->tail[d][s]);
    destroy_event(&st->dev[d], &cp->drained[d]);
  }
  weft__cu_pinned_free(st, cp->la_info);
  cudaGetLastError();
  if (cp->have_msg_lock) weft__mutex_destroy(&cp->msg_lock);
  weft__free(cp->ev);
  weft__free(cp->defer);
  weft__free(cp->parked);
  weft__free(cp->batches);
  weft__free(cp->tptr);
  weft__free(cp);
  p->bstate[b->index] = NULL;
}
