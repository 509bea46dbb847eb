/* place.c — `auto`: the planner decides where nodes run and where tensors live, and lowers the
 * program into a placed graph that the rest of the scheduler runs unchanged.
 *
 * Decide (in the program's order, which is topological): each node created on auto gets the
 * device where it would finish first (HEFT's earliest finish time, Topcuoglu et al. 2002),
 * among the devices that have a kernel for it, priced by the cost model (the machine profile:
 * the simulated machine's, else the shipped `h100` one) — its inputs' arrival there (from the
 * cheapest valid copy: a copy engine's latency and bandwidth), the device's earliest free
 * time (the CPU's workers, a GPU as one engine), its own cost there. Tensors created on auto
 * get a *home*: the device of their last writer, or of their first reader if nothing writes
 * them (so a run ends with every tensor valid at home and starts from there); a tensor whose
 * first access chose a device may be placed there for free (its initialiser, or its contents
 * moved there once). A partitioned auto tensor and its tiles stay together on one device (its
 * first accessor's): strided tiles do not move between devices.
 *
 * Lower: the placed graph has a *twin* of every tensor of the program on its home (a view of
 * the program's tensor: same storage, so the program reads its results where they are) and,
 * walking the program in order with each tensor's set of valid copies (MSI: a write leaves the
 * writer's copy the only valid one), a *replica* on each other device a node reads it on,
 * filled by a copy node from the cheapest valid copy (another GPU over the peer link, else the
 * host) only when it is stale. Each node of the program becomes one node of the placed graph on
 * its device, over the twins and replicas there. So transfers are nodes of the plan: they
 * overlap compute and show in explain, traces and statistics, and serial equivalence holds as
 * for any graph. Replicas are the placed graph's temporaries (a GPU's memory plan frees them
 * after their last reader).
 *
 * The placed graph is rebuilt when the program changes (its version), and a run of the program
 * is a run of it. Homes are written into the program's tensors (weft_tensor_device tells them);
 * a tensor whose contents already exist elsewhere is moved to its new home first. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sched/cost/cost.h"
#include "sched/sched.h"

enum { MAXD = 17 }; /* the CPU and up to 16 GPUs */

struct weft__placement {
  weft_graph *pg;       /* the placed graph */
  uint64_t version;     /* of the program it lowers */
  size_t nnodes;
  uint32_t *node;       /* per program node: its node in pg */
  weft__node_place *at; /* per program node: where and why */
};

static int dev_index(weft_device d) { return d.kind == WEFT_DEVICE_CUDA ? 1 + d.index : 0; }
static weft_device dev_of(int k) { return k == 0 ? weft_cpu() : weft_cuda(k - 1); }

/* The cost model for placement, from the runtime's profile (runtime.c chose it). */
int weft__place_model_load(weft_runtime *rt) {
  int rc = WEFT_OK;
  weft__mutex_lock(&rt->ops_lock);
  if (rt->place_model == NULL) {
    weft__cost_model *m = weft__calloc(1, sizeof *m);
    if (m == NULL) {
      rc = weft__oom("the placement's cost model");
    } else if ((rc = weft__sim_profile_load(rt->place_profile, &m->prof)) != WEFT_OK) {
      char why[300];
      snprintf(why, sizeof why, "%s", weft_last_error());
      rc = weft__err(rc, "the machine profile for placement, '%s', cannot be loaded: %s", rt->place_profile, why);
      weft__free(m);
    } else {
      m->host_lanes = rt->opts.cpu_workers > 0 ? rt->opts.cpu_workers : rt->cores;
      m->blas_threads = 1;
      rt->place_model = m;
    }
  }
  weft__mutex_unlock(&rt->ops_lock);
  return rc;
}

/* The seconds to move `bytes` from device s to device d. */
static double transfer_s(const weft__cost_model *m, size_t bytes, int s, int d, int peer) {
  const weft__sim_profile *p = &m->prof;
  if (s == d) return 0;
  if (s == 0) return p->h2d.latency_s + (double)bytes / p->h2d.bandwidth;
  if (d == 0) return p->d2h.latency_s + (double)bytes / p->d2h.bandwidth;
  if (peer) return p->peer.latency_s + (double)bytes / p->peer.bandwidth;
  return transfer_s(m, bytes, s, 0, 0) + transfer_s(m, bytes, 0, d, 0);
}

/* A node's cost on device k: the model's, pricing it as if it ran there. */
static double cost_on(const weft__cost_model *m, weft_node *n, int k) {
  weft_device keep = n->device;
  n->device = dev_of(k);
  double share, c = k == 0 ? weft__cost_cpu(m, n) : weft__cost_gpu(m, n, &share);
  n->device = keep;
  return c;
}

/* The tensor whose device decides t's: a tile's parent, else t. */
static weft_tensor *group_of(weft_tensor *t) { return t->view != NULL ? t->view->parent : t; }

/* Whether node n may run on device k (a kernel there; built-ins have both). */
static int runs_on(const weft_node *n, int k) {
  if (n->kind != WEFT__OP_USER) return 1;
  return k == 0 ? n->user_op->desc.cpu != NULL : n->user_op->desc.cuda != NULL;
}

typedef struct tstate {
  uint32_t valid;    /* devices with a valid copy; 0: nowhere yet (an auto tensor's first access) */
  double avail[MAXD];
  int home;          /* -1 until known */
  int first_dev;     /* the device of its first access, -1 before */
  int last_writer;   /* device of its last writer, -1 if none */
} tstate;

/* Decides each auto node's device and each auto tensor's home (into at[] and the states). */
static int decide(weft_graph *g, const weft__cost_model *m, int ndev, int peer, tstate *ts, weft__node_place *at) {
  weft_node **nodes = g->nodes.data;
  weft_tensor **tens = g->tensors.data;
  int workers = m->host_lanes > 0 ? m->host_lanes : 1;
  double gpu_free[MAXD] = {0}, *cpu_free = weft__calloc((size_t)workers, sizeof *cpu_free);
  if (cpu_free == NULL) return weft__oom("the placement");
  for (size_t i = 0; i < g->nodes.len; i++) {
    weft_node *n = nodes[i];
    weft__node_place *pl = &at[i];
    double best = INFINITY, second = INFINITY, best_start = 0;
    int bestk = -1, secondk = -1, forced = -1;
    if (!(n->flags & WEFT__N_AUTO)) forced = dev_index(n->device);
    for (int a = 0; a < n->nargs && forced < 0; a++) { /* a partitioned tensor's group stays together */
      weft_tensor *grp = group_of(n->args[a].t);
      if ((grp->grid != NULL || grp != n->args[a].t) && (grp->flags & WEFT__T_AUTODEV) && ts[grp->id].first_dev >= 0)
        forced = ts[grp->id].first_dev;
    }
    for (int k = 0; k < ndev; k++) {
      if ((forced >= 0 && k != forced) || !runs_on(n, k)) continue;
      double ready = 0;
      for (int a = 0; a < n->nargs; a++) {
        const tstate *s = &ts[n->args[a].t->id];
        if (!(n->args[a].mode & WEFT_READ) || s->valid == 0) continue;
        double arrive = INFINITY;
        for (int src = 0; src < ndev; src++)
          if (s->valid >> src & 1)
            arrive = fmin(arrive, s->avail[src] + transfer_s(m, n->args[a].t->bytes, src, k, peer));
        ready = fmax(ready, arrive);
      }
      double start = ready;
      int slot = 0;
      if (k == 0) {
        for (int w = 1; w < workers; w++)
          if (cpu_free[w] < cpu_free[slot]) slot = w;
        start = fmax(start, cpu_free[slot]);
      } else {
        start = fmax(start, gpu_free[k]);
      }
      double fin = start + cost_on(m, n, k);
      if (fin < best) {
        second = best, secondk = bestk;
        best = fin, bestk = k, best_start = start;
      } else if (fin < second) {
        second = fin, secondk = k;
      }
    }
    if (bestk < 0) {
      weft__free(cpu_free);
      char d[200];
      return weft__err(WEFT_EDEVICE, "%s: no device can run it (its op has no kernel where its tiles live)",
                       weft_node_describe(n, d, sizeof d));
    }
    pl->device = dev_of(bestk);
    pl->start_s = best_start;
    pl->finish_s = best;
    pl->auto_placed = (n->flags & WEFT__N_AUTO) != 0;
    pl->forced = forced >= 0;
    pl->other = secondk >= 0 ? dev_of(secondk) : pl->device;
    pl->other_finish_s = secondk >= 0 ? second : best;
    if (bestk == 0) {
      int slot = 0;
      for (int w = 1; w < workers; w++)
        if (cpu_free[w] < cpu_free[slot]) slot = w;
      cpu_free[slot] = best;
    } else {
      gpu_free[bestk] = best;
    }
    for (int a = 0; a < n->nargs; a++) {
      weft_tensor *t = n->args[a].t;
      tstate *s = &ts[t->id], *gs = &ts[group_of(t)->id];
      if (s->first_dev < 0) s->first_dev = bestk;
      if (gs->first_dev < 0) gs->first_dev = bestk;
      if (n->args[a].mode & WEFT_READ) {
        if (s->valid == 0) s->valid = 1u << bestk, s->avail[bestk] = 0;
        s->valid |= 1u << bestk;
      }
      if (n->args[a].mode & WEFT_WRITE) {
        s->valid = 1u << bestk;
        s->avail[bestk] = best;
        s->last_writer = bestk;
      }
    }
  }
  weft__free(cpu_free);
  /* Homes: the last writer's device, else the first accessor's, else the CPU; a tile's its
   * parent's. Fixed tensors keep theirs. */
  for (size_t t = 0; t < g->tensors.len; t++) {
    weft_tensor *x = tens[t];
    tstate *s = &ts[t];
    if (!(group_of(x)->flags & WEFT__T_AUTODEV)) {
      s->home = dev_index(x->device);
    } else if (group_of(x) != x || x->grid != NULL) {
      int f = ts[group_of(x)->id].first_dev;
      s->home = f >= 0 ? f : 0;
    } else {
      s->home = s->last_writer >= 0 ? s->last_writer : s->first_dev >= 0 ? s->first_dev : 0;
    }
  }
  return WEFT_OK;
}

/* Moves auto tensor t to device `home`: sets its device, and moves existing contents. */
static int move_home(weft_tensor *t, weft_device home) {
  if (weft_device_equal(t->device, home)) return WEFT_OK;
  int had = t->storage_kind != WEFT__S_NONE && t->storage_kind != WEFT__S_EMPTY && t->view == NULL;
  void *buf = NULL;
  int rc = WEFT_OK;
  if (had) {
    if ((buf = weft__malloc(t->bytes)) == NULL) return weft__oom("moving a tensor to its new home");
    if ((rc = weft__storage_copy_out(t, buf)) != WEFT_OK) {
      weft__free(buf);
      return rc;
    }
    weft__storage_release(t);
  }
  if (t->view != NULL) t->storage_kind = WEFT__S_NONE; /* re-derived from the parent's */
  t->device = home;
  if (had) {
    t->initialised = 1; /* the contents are what it held, not its initialiser */
    rc = weft__storage_prepare(t);
    if (rc == WEFT_OK) rc = weft__storage_copy_in(t, buf);
  }
  weft__free(buf);
  return rc;
}

static void placement_free(weft__placement *pl) {
  if (pl == NULL) return;
  if (pl->pg != NULL) weft_graph_destroy(pl->pg);
  weft__free(pl->node);
  weft__free(pl->at);
  weft__free(pl);
}

void weft__placement_free(weft_graph *g) {
  placement_free(g->placement);
  g->placement = NULL;
}

/* The placed graph's tensor for program tensor t on device k: its twin at home, else its
 * replica there (made on first use). */
static weft_tensor *on_device(weft_graph *pg, weft_tensor **twin, weft_tensor **rep, int ndev, const tstate *ts,
                              weft_tensor *t, int k, int *rc) {
  if (ts[t->id].home == k) return twin[t->id];
  weft_tensor **r = &rep[(size_t)t->id * (size_t)ndev + (size_t)k];
  if (*r == NULL) {
    char name[160], d[32];
    snprintf(name, sizeof name, "%s@%s", weft__tensor_name(t), weft_device_str(dev_of(k), d, sizeof d));
    *rc = weft__tensor_new(pg, name, t->dtype, t->ndim, t->shape, dev_of(k), weft_zeros(), WEFT__T_AUTO | WEFT__T_INSERTED, r);
  }
  return *r;
}

static int lower(weft_graph *g, weft__placement *pl, tstate *ts, int ndev, int peer) {
  weft_runtime *rt = g->rt;
  weft_graph *pg;
  int rc = weft_graph_create(rt, &pg);
  if (rc != WEFT_OK) return rc;
  pl->pg = pg;
  size_t nt = g->tensors.len, nn = g->nodes.len;
  weft_tensor **tens = g->tensors.data, **twin = weft__calloc(nt ? nt : 1, sizeof *twin);
  weft_tensor **rep = weft__calloc((nt ? nt : 1) * (size_t)ndev, sizeof *rep);
  weft_tensor **args = NULL;
  size_t cap = 0;
  uint32_t *valid = weft__malloc((nt ? nt : 1) * sizeof *valid);
  if (twin == NULL || rep == NULL || valid == NULL) {
    rc = weft__oom("the placed graph");
    goto done;
  }
  /* Twins, in the program's order: a view of each tensor on its home; a partitioned tensor's
   * tiles are its twin's tiles, so the placed graph tracks them like the program. */
  for (size_t t = 0; t < nt && rc == WEFT_OK; t++) {
    weft_tensor *x = tens[t];
    valid[t] = 1u << ts[t].home;
    if (x->view != NULL) continue; /* made with its parent's grid */
    rc = weft__tensor_new(pg, weft__tensor_name(x), x->dtype, x->ndim, x->shape, x->device, x->init, 0, &twin[t]);
    weft__view *v = rc == WEFT_OK ? weft__arena_alloc(&pg->arena, sizeof *v, 8) : NULL;
    if (rc == WEFT_OK && v == NULL) rc = WEFT_ENOMEM;
    if (rc != WEFT_OK) break;
    if (x->grid != NULL) { /* partitioned before it becomes a view (tiles of tiles are refused) */
      if ((rc = weft_tensor_tiles(pg, twin[t], x->grid->tile[0], x->grid->tile[1])) != WEFT_OK) break;
      for (int64_t k = 0; k < x->grid->rows * x->grid->cols; k++)
        twin[x->grid->first + (size_t)k] = weft_tensor_tile(twin[t], k / x->grid->cols, k % x->grid->cols);
    }
    *v = (weft__view){x, 0, weft__tensor_ld(x), 0, 0};
    twin[t]->view = v;
  }
  weft_node **nodes = g->nodes.data;
  for (size_t i = 0; i < nn && rc == WEFT_OK; i++) {
    weft_node *n = nodes[i];
    int k = dev_index(pl->at[i].device);
    if (n->kind == WEFT__OP_COPY) {
      /* One transfer: from a valid copy of the source (the destination's device first, then
       * the node's, the host, any) into the destination where it lives. */
      weft_tensor *x = n->args[0].t, *y = n->args[1].t;
      int to = ts[y->id].home, src = -1;
      if (y->flags & WEFT__T_AUTODEV) to = k;
      if (valid[x->id] >> to & 1) src = to;
      else if (valid[x->id] >> k & 1) src = k;
      else if (valid[x->id] & 1) src = 0;
      for (int s = 0; s < ndev && src < 0; s++)
        if (valid[x->id] >> s & 1) src = s;
      weft_tensor *from = on_device(pg, twin, rep, ndev, ts, x, src, &rc);
      weft_tensor *dst = rc == WEFT_OK ? on_device(pg, twin, rep, ndev, ts, y, to, &rc) : NULL;
      int runs = src > 0 ? src : to;
      if (rc == WEFT_OK) rc = weft__copy_node(pg, from, dst, dev_of(runs), n->flags & WEFT__N_INSERTED);
      if (rc != WEFT_OK) break;
      pl->node[i] = (uint32_t)(pg->nodes.len - 1);
      pl->at[i].device = dev_of(runs);
      valid[y->id] = 1u << to;
      continue;
    }
    if ((size_t)n->nargs > cap) {
      weft__free(args);
      cap = (size_t)n->nargs * 2;
      if ((args = weft__malloc(cap * sizeof *args)) == NULL) {
        rc = weft__oom("the placed graph");
        break;
      }
    }
    for (int a = 0; a < n->nargs && rc == WEFT_OK; a++) {
      weft_tensor *t = n->args[a].t;
      args[a] = on_device(pg, twin, rep, ndev, ts, t, k, &rc);
      if (rc != WEFT_OK || !(n->args[a].mode & WEFT_READ) || (valid[t->id] >> k & 1)) continue;
      /* A stale copy: fill it from the cheapest valid one (another GPU over the peer link,
       * else the host, else any). */
      int src = -1;
      for (int s = 0; s < ndev && src < 0; s++)
        if ((valid[t->id] >> s & 1) && s > 0 && k > 0 && peer) src = s;
      if (src < 0 && (valid[t->id] & 1)) src = 0;
      for (int s = 0; s < ndev && src < 0; s++)
        if (valid[t->id] >> s & 1) src = s;
      if (!weft__tensor_contiguous(t)) {
        char d1[32], d2[32];
        rc = weft__err(WEFT_ENOTSUP, "node %u '%s' on %s reads strided tile %s, which lives on %s: tiles do not move between devices yet",
                       n->id, weft_node_op_name(n), weft_device_str(dev_of(k), d1, sizeof d1), weft__tensor_name(t),
                       weft_device_str(dev_of(src), d2, sizeof d2));
        break;
      }
      weft_tensor *from = on_device(pg, twin, rep, ndev, ts, t, src, &rc);
      if (rc == WEFT_OK) rc = weft__copy_node(pg, from, args[a], dev_of(src > 0 ? src : k), WEFT__N_INSERTED);
      valid[t->id] |= 1u << k;
    }
    if (rc != WEFT_OK) break;
    weft_node *c;
    if ((rc = weft__node_clone(pg, n, args, dev_of(k), n->flags & WEFT__N_INSERTED, &c)) != WEFT_OK) break;
    pl->node[i] = c->id;
    for (int a = 0; a < n->nargs; a++) {
      weft_tensor *t = n->args[a].t;
      if (!(n->args[a].mode & WEFT_WRITE)) continue;
      valid[t->id] = 1u << k;
      /* A tile's write makes its parent's other copies stale, and the parent's its tiles'. */
      if (t->view != NULL) valid[t->view->parent->id] &= 1u << k;
      if (t->grid != NULL)
        for (int64_t q = 0; q < t->grid->rows * t->grid->cols; q++) valid[t->grid->first + (size_t)q] = 1u << k;
    }
  }
  /* Every tensor valid at home when the run ends. */
  for (size_t t = 0; t < nt && rc == WEFT_OK; t++) {
    int h = ts[t].home;
    if (valid[t] >> h & 1 || tens[t]->view != NULL) continue;
    int src = 0;
    while (!(valid[t] >> src & 1)) src++;
    weft_tensor *from = on_device(pg, twin, rep, ndev, ts, tens[t], src, &rc);
    if (rc == WEFT_OK) rc = weft__copy_node(pg, from, twin[t], dev_of(src > 0 ? src : h), WEFT__N_INSERTED);
  }
  /* The program's explicit edges, between the nodes that stand for its nodes. */
  const weft__edge *e = g->explicit_edges.data;
  for (size_t k = 0; k < g->explicit_edges.len && rc == WEFT_OK; k++)
    rc = weft_graph_add_edge(pg, weft_graph_node(pg, pl->node[e[k].from]), weft_graph_node(pg, pl->node[e[k].to]));
done:
  weft__free(twin);
  weft__free(rep);
  weft__free(valid);
  weft__free(args);
  return rc;
}

int weft__place(weft_graph *g, weft_graph **out) {
  *out = g;
  if (g->nauto == 0) return WEFT_OK;
  if (g->placement != NULL && g->placement->version == g->version) {
    *out = g->placement->pg;
    return WEFT_OK;
  }
  int rc = weft__graph_analyse(g); /* a cycle is the program's error, found first */
  if (rc != WEFT_OK) return rc;
  weft_runtime *rt = g->rt;
  if ((rc = weft__place_model_load(rt)) != WEFT_OK) return rc;
  const weft__cost_model *m = rt->place_model;
  int ndev = 1 + weft_device_count(rt, WEFT_DEVICE_CUDA);
  if (ndev > MAXD) ndev = MAXD;
  const weft__backend *gb = rt->by_kind[WEFT_DEVICE_CUDA];
  int peer = ndev > 2 && gb != NULL && gb->vt->can_access_peer(gb, 0, 1);
  size_t nt = g->tensors.len, nn = g->nodes.len;
  weft__placement *pl = weft__calloc(1, sizeof *pl);
  tstate *ts = weft__malloc((nt ? nt : 1) * sizeof *ts);
  if (pl != NULL) {
    pl->node = weft__malloc((nn ? nn : 1) * sizeof *pl->node);
    pl->at = weft__calloc(nn ? nn : 1, sizeof *pl->at);
  }
  if (pl == NULL || ts == NULL || pl->node == NULL || pl->at == NULL) {
    placement_free(pl);
    weft__free(ts);
    return weft__oom("the placement");
  }
  weft_tensor **tens = g->tensors.data;
  for (size_t t = 0; t < nt; t++) {
    memset(&ts[t], 0, sizeof ts[t]);
    ts[t].first_dev = ts[t].last_writer = ts[t].home = -1;
    weft_tensor *x = tens[t];
    /* Where the data is: a fixed tensor on its device; an auto one nowhere yet (its first
     * accessor gets it for free), unless its contents exist (it is then where they are). */
    if (!(group_of(x)->flags & WEFT__T_AUTODEV) ||
        (x->storage_kind != WEFT__S_NONE && x->device.kind != WEFT_DEVICE_AUTO))
      ts[t].valid = x->device.kind == WEFT_DEVICE_AUTO ? 1u : 1u << dev_index(x->device);
  }
  rc = decide(g, m, ndev, peer, ts, pl->at);
  /* Homes into the program's tensors (contents moved where they exist), then the lowering. */
  for (size_t t = 0; t < nt && rc == WEFT_OK; t++)
    if (group_of(tens[t])->flags & WEFT__T_AUTODEV) rc = move_home(tens[t], dev_of(ts[t].home));
  if (rc == WEFT_OK) rc = lower(g, pl, ts, ndev, peer);
  weft__free(ts);
  if (rc != WEFT_OK) {
    placement_free(pl);
    return rc;
  }
  weft__placement_free(g);
  pl->version = g->version;
  pl->nnodes = nn;
  g->placement = pl;
  *out = pl->pg;
  return WEFT_OK;
}

const weft__node_place *weft__placement_of(const weft_graph *g, uint32_t node, const weft_graph **pg, uint32_t *pnode) {
  const weft__placement *pl = g->placement;
  if (pl == NULL || pl->version != g->version || node >= pl->nnodes) return NULL;
  *pg = pl->pg;
  *pnode = pl->node[node];
  return &pl->at[node];
}
