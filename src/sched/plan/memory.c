/* memory.c — the memory plan of GPU temporaries.
 *
 * A *temporary* (the analysis's WEFT__T_TEMP: an op's result whose final value a later node
 * reads and that is not kept) whose every accessor is a GPU node on its device gets no storage
 * at materialisation: its first writer allocates it from the device pool, stream-ordered, just
 * before its kernel. When to give it back is the plan's choice, because the host enqueues far
 * ahead of the device: freeing each temporary after its last reader and letting the pool reuse
 * memory across streams bounds nothing (fifty products allocate fifty buffers before the first
 * copy is done) and stalls a stream behind the side branches that read with it.
 *
 * So, walking the nodes in the plan's order, a temporary is *dead* once the last reader of its
 * final value is passed, and a node that allocates *claims* the oldest dead temporaries of its
 * device beyond the *window* (max(WINDOW_COUNT x the new buffer, WINDOW_MIN) stays unclaimed):
 * it waits for their readers — an ordering edge from each reader, appended to the plan's edges
 * and pointing forward in the plan's order, so no cycle can arise, and an event wait — and
 * frees them on its own stream right before allocating, so the pool reuses their memory in
 * stream order. What nobody claims is freed by the run's drain (or at the end of a captured
 * graph). The reference graph 50 x (y = x.x; copy y to the host) runs in x plus three buffers
 * and no product waits (a copy takes half a product's time); 1000 small logged products free
 * nothing during the run. */
#include "sched/plan/planner.h"
#include "sched/sched.h"

int weft__memory_temporaries(weft__pbuild *bd) {
  weft_graph *g = bd->g;
  weft_tensor **ts = g->tensors.data;
  weft_node **nodes = g->nodes.data;
  uint8_t *temp = bd->p->gpu.temp;
  uint32_t nt = bd->nt;
  uint32_t *last_write = weft__malloc((nt ? nt : 1) * sizeof(uint32_t));
  uint32_t *stamp = weft__malloc((nt ? nt : 1) * sizeof(uint32_t));
  uint8_t *first_reads = weft__calloc(nt ? nt : 1, 1);
  if (!last_write || !stamp || !first_reads) {
    weft__free(last_write);
    weft__free(stamp);
    weft__free(first_reads);
    return weft__oom("the GPU memory plan");
  }
  for (uint32_t t = 0; t < nt; t++) {
    const weft_tensor *tt = ts[t];
    temp[t] = tt->device.kind == WEFT_DEVICE_CUDA && weft__gpu_slot(bd->p->graph->rt, tt->device) < bd->t->ngpus &&
              (tt->flags & WEFT__T_TEMP) && tt->storage_kind == WEFT__S_NONE && tt->bytes > 0;
    last_write[t] = bd->first[t] = bd->last_final[t] = stamp[t] = WEFT__NONE;
  }
  for (uint32_t i = 0; i < bd->n; i++) {
    const weft_node *nd = nodes[i];
    const weft__gnode *x = &bd->x[i];
    for (int a = 0; a < nd->nargs; a++) {
      uint32_t t = nd->args[a].t->id;
      if (!temp[t]) continue;
      /* Every accessor must run on the tensor's device, on one device. */
      if (x->dev < 0 || x->dev != weft__gpu_slot(bd->p->graph->rt, nd->args[a].t->device) || x->start_dev != x->dev ||
          x->why == WEFT__WHY_PEER) {
        temp[t] = 0;
        continue;
      }
      if (nd->args[a].mode & WEFT_WRITE) last_write[t] = i;
      if (bd->first[t] == WEFT__NONE || bd->pos[i] < bd->pos[bd->first[t]]) {
        bd->first[t] = i;
        first_reads[t] = 0;
      }
      if (bd->first[t] == i && (nd->args[a].mode & WEFT_READ)) first_reads[t] = 1;
    }
  }
  /* Readers of the final value: nodes after the last write that read the tensor. */
  for (uint32_t i = 0; i < bd->n; i++) {
    const weft_node *nd = nodes[i];
    for (int a = 0; a < nd->nargs; a++) {
      uint32_t t = nd->args[a].t->id;
      if (!temp[t] || !(nd->args[a].mode & WEFT_READ) || last_write[t] == WEFT__NONE || i <= last_write[t])
        continue;
      if (bd->last_final[t] == WEFT__NONE || bd->pos[i] > bd->pos[bd->last_final[t]]) bd->last_final[t] = i;
    }
  }
  int rc = WEFT_OK;
  for (uint32_t t = 0; t < nt; t++)
    if (temp[t] && (first_reads[t] || bd->last_final[t] == WEFT__NONE || bd->first[t] == WEFT__NONE)) temp[t] = 0;
  for (uint32_t i = 0; i < bd->n && rc == WEFT_OK; i++) {
    const weft_node *nd = nodes[i];
    for (int a = 0; a < nd->nargs && rc == WEFT_OK; a++) {
      uint32_t t = nd->args[a].t->id;
      if (!temp[t] || !(nd->args[a].mode & WEFT_READ) || i <= last_write[t] || stamp[t] == i) continue;
      stamp[t] = i;
      rc = weft__pair_push(&bd->readers, t, i);
    }
  }
  for (uint32_t t = 0; t < nt && rc == WEFT_OK; t++)
    if (temp[t]) rc = weft__pair_push(&bd->allocs, bd->first[t], t);
  weft__free(last_write);
  weft__free(stamp);
  weft__free(first_reads);
  return rc;
}

typedef struct dead_temp {
  uint32_t tensor;
  size_t bytes;
} dead_temp;

/* Counts pairs per owner into off[owner + 1] and turns the counts into offsets (off has n + 2
 * entries); v must be sorted by owner. */
static uint32_t *offsets(const weft__vec *v, uint32_t n) {
  uint32_t *off = weft__calloc((size_t)n + 2, sizeof(uint32_t));
  if (off == NULL) return NULL;
  const weft__pair *pr = v->data;
  for (size_t k = 0; k < v->len; k++) off[pr[k].owner + 1]++;
  for (uint32_t i = 0; i <= n; i++) off[i + 1] += off[i];
  return off;
}

int weft__memory_window(weft__pbuild *bd) {
  weft_tensor **ts = bd->g->tensors.data;
  const uint8_t *temp = bd->p->gpu.temp;
  weft__pairs_sort(&bd->allocs);
  weft__pairs_sort(&bd->readers);
  const weft__pair *al = bd->allocs.data, *rd = bd->readers.data;
  /* dying[node]: the temporaries whose last final reader it is. */
  weft__vec dying;
  weft__vec_init(&dying, sizeof(weft__pair));
  int rc = WEFT_OK;
  for (uint32_t t = 0; t < bd->nt && rc == WEFT_OK; t++)
    if (temp[t]) rc = weft__pair_push(&dying, bd->last_final[t], t);
  if (rc != WEFT_OK) {
    weft__vec_fini(&dying);
    return rc;
  }
  weft__pairs_sort(&dying);
  const weft__pair *dy = dying.data;
  uint32_t *aoff = offsets(&bd->allocs, bd->n), *doff = offsets(&dying, bd->n), *roff = offsets(&bd->readers, bd->nt);
  dead_temp *fifo = weft__malloc((dying.len ? dying.len : 1) * sizeof *fifo);
  if (!aoff || !doff || !roff || !fifo) rc = weft__oom("the GPU memory plan");
  for (int dev = 0; dev < bd->t->ngpus && rc == WEFT_OK; dev++) {
    size_t head = 0, tailq = 0, sum = 0;
    for (uint32_t k = 0; k < bd->n && rc == WEFT_OK; k++) {
      uint32_t i = bd->p->order[k];
      if (bd->x[i].dev != dev) continue;
      for (uint32_t a = aoff[i]; a < aoff[i + 1] && rc == WEFT_OK; a++) {
        size_t budget = (size_t)bd->t->window_count * ts[al[a].value]->bytes;
        if (budget < bd->t->window_min_bytes) budget = bd->t->window_min_bytes;
        /* Under a memory limit for placement, the window keeps to a sixteenth of it: out of
         * core, placement orders the copies in after the evictions that make their room, so
         * what is dead is done and frees at once; in core a limit is a budget all the same. */
        size_t limit = bd->g->rt->opts.device_memory_limit;
        if (limit > 0 && budget > limit / 16) budget = limit / 16;
        while (head < tailq && sum > budget && rc == WEFT_OK) {
          uint32_t u = fifo[head].tensor;
          sum -= fifo[head++].bytes;
          rc = weft__pair_push(&bd->pfrees, i, u);
          for (uint32_t r = roff[u]; r < roff[u + 1] && rc == WEFT_OK; r++) {
            weft__edge e = {rd[r].value, i, WEFT__NONE, WEFT__HAZARD_RESOURCE};
            if ((rc = weft__vec_push(bd->extra, &e)) == WEFT_OK) rc = weft__pair_push(&bd->waits, i, rd[r].value);
          }
        }
      }
      for (uint32_t f = doff[i]; f < doff[i + 1]; f++) {
        fifo[tailq++] = (dead_temp){dy[f].value, ts[dy[f].value]->bytes};
        sum += ts[dy[f].value]->bytes;
      }
    }
  }
  weft__free(aoff);
  weft__free(doff);
  weft__free(roff);
  weft__free(fifo);
  weft__vec_fini(&dying);
  return rc;
}
