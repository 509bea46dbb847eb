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
 * first accessor's), its tiles moving as contiguous replicas; on several GPUs, one that only
 * its tiles' nodes use is split instead: each tile has a home and storage of its own, laid out
 * over the GPUs when most of their writes go there (splits, decide_layout).
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
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "sched/cost/cost.h"
#include "sched/plan/planner.h"
#include "sched/sched.h"

/* The devices placement chooses among: every rank's CPU and GPUs (one rank without MPI), rank
 * r's CPU at index r x per and its GPU i at r x per + 1 + i; at most MAXD, a bit each in a
 * device mask. */
enum { MAXD = 64 };
typedef uint64_t dmask;
#define BIT(k) ((dmask)1 << (k))

typedef struct space {
  int per;      /* devices a rank: its CPU and its GPUs */
  int ndev;     /* the ranks' devices in all */
  int per_host; /* ranks a host: messages between hosts take the network */
  int peer;     /* a rank's GPUs copy to each other over the peer link */
  const weft_runtime *rt; /* which GPUs of two ranks copy to each other directly (weft__gpu_direct) */
  int lanes;    /* a rank's CPU workers */
  double gpu_bytes; /* a GPU's memory */
} space;

static int is_gpu(const space *sp, int k) { return k % sp->per != 0; }
static int host_of(const space *sp, int k) { return k - k % sp->per; }
static int rank_of(const space *sp, int k) { return k / sp->per; }
static int dev_index(const space *sp, weft_device d) {
  return d.rank * sp->per + (d.kind == WEFT_DEVICE_CUDA ? 1 + d.index : 0);
}
static weft_device dev_of(const space *sp, int k) {
  return weft_on_rank(is_gpu(sp, k) ? weft_cuda(k % sp->per - 1) : weft_cpu(), rank_of(sp, k));
}

/* A copy from GPU s to GPU k of another rank on the same host: one copy (weft__gpu_direct; its
 * first test here, as the pricing asks for every pair of devices). */
static int direct(const space *sp, int s, int k) {
  return sp->rt->place_facts.ipc && weft__gpu_direct(sp->rt, dev_of(sp, s), dev_of(sp, k));
}

/* Every rank's CPU. */
static dmask hosts(const space *sp) {
  dmask m = 0;
  for (int k = 0; k < sp->ndev; k += sp->per) m |= BIT(k);
  return m;
}

struct weft__placement {
  weft_graph *pg;       /* the placed graph */
  uint64_t version;     /* of the program it lowers */
  size_t nnodes;
  uint32_t *node;       /* per program node: its node in pg */
  weft__node_place *at; /* per program node: where and why (a copy's device: where it runs) */
  weft_device *decided; /* per program node: the device placement decided (a copy's too) */
  int *home;            /* per program tensor: its home, as a device index */
  uint64_t harvested;   /* the placed graph's last run whose times were learned */
  struct weft__placement *retired; /* placements this one replaced whose placed graphs a run
                                      handle still refers to (its statistics may be asked for) */
};

/* ---- measured times ----------------------------------------------------------------------
 * What a node of a given kind costs on a kind of device drifts from the profile's model (a
 * machine unlike the profile's, a kernel slower than its flops say). After each run of a placed
 * graph, the measured time of every auto node is compared with the model's price: the ratio
 * goes to the node's class (its op, dtype, device kind and size, to a factor of two), which
 * keeps its last LEARN_KEEP ratios. A class's factor is their median once it has LEARN_MIN:
 * one slow run (a spike) moves no median, which is what keeps one outlier from sending every
 * product to one device (starpu#50). Placement multiplies the model's price by the factor, and
 * re-places a program at its next launch when a node's factor moved more than twofold since
 * its placement. */
enum { LEARN_KEEP = 8, LEARN_MIN = 3 };

typedef struct learn_class {
  const void *op; /* the user op, or NULL for a built-in */
  int kind, dtype, dev, size;
  double ratio[LEARN_KEEP];
  int n, next;
} learn_class;

struct weft__learned {
  learn_class *c;
  size_t n, cap;
};

void weft__learned_free(weft_runtime *rt) {
  if (rt->learned == NULL) return;
  weft__free(rt->learned->c);
  weft__free(rt->learned);
  rt->learned = NULL;
}

/* Node n's class on device kind `dev` (0 CPU, 1 GPU), made if `make` (ops_lock held). */
static learn_class *class_of(weft_runtime *rt, const weft_node *n, int dev, int make) {
  struct weft__learned *l = rt->learned;
  double work = weft__plan_work(n);
  int size = work > 1 ? (int)log2(work) : 0;
  const void *op = n->kind == WEFT__OP_USER ? (const void *)n->user_op : NULL;
  int dtype = n->nargs > 0 ? n->args[0].t->dtype : 0;
  for (size_t i = 0; l != NULL && i < l->n; i++) {
    learn_class *c = &l->c[i];
    if (c->op == op && c->kind == n->kind && c->dtype == dtype && c->dev == dev && c->size == size) return c;
  }
  if (!make) return NULL;
  if (l == NULL && (l = rt->learned = weft__calloc(1, sizeof *l)) == NULL) return NULL;
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    learn_class *grown = weft__realloc(l->c, cap * sizeof *grown);
    if (grown == NULL) return NULL;
    l->c = grown;
    l->cap = cap;
  }
  learn_class *c = &l->c[l->n++];
  memset(c, 0, sizeof *c);
  c->op = op, c->kind = n->kind, c->dtype = dtype, c->dev = dev, c->size = size;
  return c;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The measured factor of node n on device kind `dev`: the median ratio, or 1 (ops_lock held). */
static double factor_of(weft_runtime *rt, const weft_node *n, int dev) {
  const learn_class *c = class_of(rt, n, dev, 0);
  if (c == NULL || c->n < LEARN_MIN) return 1;
  double v[LEARN_KEEP];
  memcpy(v, c->ratio, (size_t)c->n * sizeof *v);
  qsort(v, (size_t)c->n, sizeof *v, by_value);
  return c->n % 2 ? v[c->n / 2] : 0.5 * (v[c->n / 2 - 1] + v[c->n / 2]);
}

/* Learns from the placed graph's last run, once; returns 1 when a node's factor moved more
 * than twofold since the placement (the program is then placed again). */
static int learn(weft_graph *g, weft__placement *pl) {
  /* Across ranks every rank must place alike (the graphs are compared at each plan), and each
   * measures only its own nodes: the model's prices stand as they are. */
  if (g->rt->nranks > 1) return 0;
  const weft__plan *p = pl->pg->plan;
  if (p == NULL || p->exec == NULL || p->exec->times == NULL || p->exec->last_run == pl->harvested) return 0;
  pl->harvested = p->exec->last_run;
  weft_runtime *rt = g->rt;
  int moved = 0;
  weft__mutex_lock(&rt->ops_lock);
  for (size_t i = 0; i < pl->nnodes; i++) {
    weft__node_place *np = &pl->at[i];
    if (!np->auto_placed || np->model_s <= 0 || pl->node[i] >= p->n) continue;
    const weft__ntime *t = &p->exec->times[pl->node[i]];
    uint64_t s = atomic_load_explicit(&t->start, memory_order_relaxed), e = atomic_load_explicit(&t->end, memory_order_relaxed);
    if (e <= s) continue;
    weft_node *n = WEFT__VEC_AT(&g->nodes, weft_node *, i);
    learn_class *c = class_of(rt, n, np->device.kind == WEFT_DEVICE_CUDA, 1);
    if (c == NULL) continue;
    c->ratio[c->next] = (double)(e - s) * 1e-9 / np->model_s;
    c->next = (c->next + 1) % LEARN_KEEP;
    if (c->n < LEARN_KEEP) c->n++;
    double f = factor_of(rt, n, np->device.kind == WEFT_DEVICE_CUDA);
    moved |= f > 2 * np->factor || f < 0.5 * np->factor;
  }
  weft__mutex_unlock(&rt->ops_lock);
  return moved;
}

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
      m->blas_threads = 1; /* the CPU's lanes: the ranks' agreed place facts (runtime.c) */
      rt->place_model = m;
    }
  }
  weft__mutex_unlock(&rt->ops_lock);
  return rc;
}

/* The seconds to move `bytes` from device s to device d: a copy engine's link within a rank;
 * between ranks, a message between their hosts (over shared memory on one host, else the
 * network), with the legs to and from the GPUs at each end. */
static double transfer_s(const weft__cost_model *m, const space *sp, size_t bytes, int s, int d) {
  const weft__sim_profile *p = &m->prof;
  if (s == d) return 0;
  if (direct(sp, s, d)) /* the peer link, after the ranks' two messages (ready, done) */
    return 2 * p->ranks.latency_s + p->peer.latency_s + (double)bytes / p->peer.bandwidth;
  if (rank_of(sp, s) != rank_of(sp, d)) {
    const weft__sim_link *l = weft__sim_rank_link(p, sp->per_host, rank_of(sp, s), rank_of(sp, d));
    return transfer_s(m, sp, bytes, s, host_of(sp, s)) + l->latency_s + (double)bytes / l->bandwidth +
           transfer_s(m, sp, bytes, host_of(sp, d), d);
  }
  if (!is_gpu(sp, s)) return p->h2d.latency_s + (double)bytes / p->h2d.bandwidth;
  if (!is_gpu(sp, d)) return p->d2h.latency_s + (double)bytes / p->d2h.bandwidth;
  if (sp->peer) return p->peer.latency_s + (double)bytes / p->peer.bandwidth;
  return transfer_s(m, sp, bytes, s, host_of(sp, s)) + transfer_s(m, sp, bytes, host_of(sp, s), d);
}

/* A node's cost on device k: the model's, pricing it as if it ran there. */
static double cost_on(const weft__cost_model *m, const space *sp, weft_node *n, int k) {
  weft_device keep = n->device;
  n->device = dev_of(sp, k);
  double share, c = !is_gpu(sp, k) ? weft__cost_cpu(m, n) : weft__cost_gpu(m, n, &share);
  n->device = keep;
  return c;
}

/* The tensor whose device decides t's: a tile's parent, else t. */
static weft_tensor *group_of(weft_tensor *t) { return t->view != NULL ? t->view->parent : t; }

/* Whether t has storage of its own: not a tile in its parent's, not a tensor split into its
 * tiles' (splits). */
static int stored(const weft_tensor *t) {
  return weft__storage_owner(t) == t && !weft__tensor_tiles_own(t);
}

/* Whether node n may run on device k (a kernel there; built-ins have both). */
static int runs_on(const space *sp, const weft_node *n, int k) {
  if (n->kind != WEFT__OP_USER) return 1;
  return !is_gpu(sp, k) ? n->user_op->desc.cpu != NULL : n->user_op->desc.cuda != NULL;
}

typedef struct tstate {
  dmask valid;       /* devices with a valid copy; 0: nowhere yet (an auto tensor's first access) */
  int home;          /* -1 until known */
  int first_dev;     /* the device of its first access, -1 before */
  int last_writer;   /* device of its last writer, -1 if none */
  int spill;         /* an auto tensor too large to live on the GPU that first touched it: it
                        lives on the host, and GPUs hold replicas of it (or of its tiles) */
  int split;         /* a partitioned auto tensor whose tiles each get a home (splits), or
                        one of its tiles */
} tstate;

/* The tensor whose storage holds t in this placement: a split tensor's tile, else t's group. */
static weft_tensor *unit_of(const tstate *ts, weft_tensor *t) {
  return t->view != NULL && ts[t->id].split ? t : group_of(t);
}

/* The bytes auto placement may use on GPU k: the device's memory less what it needs beside the
 * planned tensors (its context, library handles and workspaces, the ops' scratch: a sixteenth,
 * at least 2 GiB), or the limit option where that is less. */
static double capacity_of(weft_runtime *rt, const space *sp, int k) {
  /* Every GPU as rank 0's first (the ranks agree on it: runtime.c's place facts). */
  if (!is_gpu(sp, k) || sp->gpu_bytes <= 0) return INFINITY;
  size_t cap = (size_t)sp->gpu_bytes, keep = WEFT__MAX(cap / 16, (size_t)2 << 30);
  cap = cap > 2 * keep ? cap - keep : cap / 2;
  if (rt->opts.device_memory_limit > 0 && rt->opts.device_memory_limit < cap) cap = rt->opts.device_memory_limit;
  return (double)cap;
}

/* The bytes of node n's operands on device k that are not there already (their storage, or
 * their replicas for the node). */
static double working_set(const weft_node *n, int k, const dmask *resident) {
  double b = 0;
  for (int a = 0; a < n->nargs; a++) {
    const weft_tensor *t = n->args[a].t;
    int dup = 0;
    for (int q = 0; q < a; q++) dup |= n->args[q].t == t;
    const weft_tensor *grp = t->view != NULL ? t->view->parent : t;
    if (!dup && !(resident[t->id] >> k & 1) && !(resident[grp->id] >> k & 1)) b += (double)t->bytes;
  }
  return b;
}

/* The free times of each rank's CPU workers (W a rank) and of each GPU's compute streams. */
enum { LANES = 8 };
typedef struct freetimes {
  int workers, lanes;
  double *cpu;            /* rank r's worker w: cpu[r * workers + w] */
  double gpu[MAXD][LANES];
} freetimes;

/* The lane a node takes on device k: the first free (a kernel that fills a GPU takes them all,
 * so it starts when the last is free). */
static double *lane_of(freetimes *f, const space *sp, int k, int fills) {
  if (!is_gpu(sp, k)) {
    double *w = f->cpu + (size_t)rank_of(sp, k) * (size_t)f->workers;
    int slot = 0;
    for (int q = 1; q < f->workers; q++)
      if (w[q] < w[slot]) slot = q;
    return &w[slot];
  }
  int slot = 0;
  for (int l = 1; l < f->lanes; l++)
    if (fills ? f->gpu[k][l] > f->gpu[k][slot] : f->gpu[k][l] < f->gpu[k][slot]) slot = l;
  return &f->gpu[k][slot];
}

/* Decides each auto node's device and each auto tensor's home (into at[] and the states; avail:
 * when each tensor's copy on each device is there, tensor t's on device k at t x ndev + k).
 * owner (NULL: none): per tensor, the device where the nodes that write it run (a split
 * tensor's tiles laid out over the GPUs: layouts, below), -1 where placement chooses; a node
 * whose owner cannot run it or has no room for it is placed as any other. */
static int decide(weft_graph *g, const weft__cost_model *m, const space *sp, tstate *ts, double *avail,
                  weft__node_place *at, const int *owner) {
  weft_node **nodes = g->nodes.data;
  weft_tensor **tens = g->tensors.data;
  int ndev = sp->ndev;
  /* GPU memory: the tensors living on each GPU (homes, fixed tensors) stay; a node's other
   * operands (replicas) come and go with it. */
  double cap[MAXD], used[MAXD] = {0};
  dmask *resident = weft__calloc(g->tensors.len ? g->tensors.len : 1, sizeof *resident); /* bit k: on GPU k */
  if (resident == NULL) return weft__oom("the placement");
  for (int k = 0; k < ndev; k++) cap[k] = capacity_of(g->rt, sp, k);
  for (size_t t = 0; t < g->tensors.len; t++) {
    const weft_tensor *x = tens[t];
    if (x->view != NULL || x->device.kind != WEFT_DEVICE_CUDA || (x->flags & WEFT__T_AUTODEV)) continue;
    int k = dev_index(sp, x->device);
    if (k < ndev) {
      resident[t] |= BIT(k);
      used[k] += (double)x->bytes;
    }
  }
  /* A GPU as its compute streams: a kernel that fills the device takes them all, a small one
   * the first free (small kernels run side by side, bound by their launches). */
  freetimes f;
  memset(&f, 0, sizeof f);
  f.workers = sp->lanes > 0 ? sp->lanes : 1;
  f.lanes = m->prof.gpu.compute_streams > 0 && m->prof.gpu.compute_streams < LANES ? m->prof.gpu.compute_streams : 4;
  f.cpu = weft__calloc((size_t)f.workers * (size_t)(ndev / sp->per), sizeof *f.cpu);
  if (f.cpu == NULL) {
    weft__free(resident);
    return weft__oom("the placement");
  }
  double need_min = 0; /* the smallest working set among the devices it did not fit */
  int need_k = 1;
  for (size_t i = 0; i < g->nodes.len; i++) {
    weft_node *n = nodes[i];
    weft__node_place *pl = &at[i];
    double best = INFINITY, second = INFINITY, best_start = 0;
    int bestk = -1, secondk = -1, forced = -1, only = -1;
    if (!(n->flags & WEFT__N_AUTO)) forced = dev_index(sp, n->device);
    for (int a = 0; owner != NULL && forced < 0 && only < 0 && a < n->nargs; a++) {
      int o = (n->args[a].mode & WEFT_WRITE) ? owner[n->args[a].t->id] : -1;
      if (o >= 0 && runs_on(sp, n, o) && used[o] + working_set(n, o, resident) <= cap[o]) only = o;
    }
    need_min = INFINITY;
    for (int k = 0; k < ndev; k++) {
      if ((forced >= 0 && k != forced) || (only >= 0 && k != only) || !runs_on(sp, n, k)) continue;
      if (is_gpu(sp, k) && n->flags & WEFT__N_AUTO) {
        double need = working_set(n, k, resident);
        if (used[k] + need > cap[k]) {
          if (need < need_min) need_min = need, need_k = k;
          pl->no_room = 1;
          continue;
        }
      }
      double ready = 0;
      for (int a = 0; a < n->nargs; a++) {
        const tstate *s = &ts[n->args[a].t->id];
        if (!(n->args[a].mode & WEFT_READ) || s->valid == 0) continue;
        double arrive = INFINITY;
        for (dmask v = s->valid; v != 0; v &= v - 1) {
          int src = __builtin_ctzll(v);
          arrive = fmin(arrive, avail[(size_t)n->args[a].t->id * (size_t)ndev + (size_t)src] +
                                    transfer_s(m, sp, n->args[a].t->bytes, src, k));
        }
        ready = fmax(ready, arrive);
      }
      double start = fmax(ready, *lane_of(&f, sp, k, is_gpu(sp, k) && weft__plan_fills_device(n, m->prof.gpu.multiprocessors)));
      weft__mutex_lock(&g->rt->ops_lock);
      double factor = factor_of(g->rt, n, is_gpu(sp, k));
      weft__mutex_unlock(&g->rt->ops_lock);
      double model = cost_on(m, sp, n, k), fin = start + model * factor;
      if (fin < best) {
        second = best, secondk = bestk;
        best = fin, bestk = k, best_start = start;
        pl->model_s = model;
        pl->factor = factor;
      } else if (fin < second) {
        second = fin, secondk = k;
      }
    }
    if (bestk < 0) {
      weft__free(f.cpu);
      weft__free(resident);
      char d[200], gd[32];
      if (need_min < INFINITY)
        return weft__err(WEFT_EDEVMEM,
                         "%s: its operands need %.0f bytes on %s beside the %.0f that live there, more than the "
                         "device allows (%.0f; device_memory_limit), and no other device can run it",
                         weft_node_describe(n, d, sizeof d), need_min, weft_device_str(dev_of(sp, need_k), gd, sizeof gd),
                         used[need_k], cap[need_k]);
      return weft__err(WEFT_EDEVICE, "%s: no device can run it", weft_node_describe(n, d, sizeof d));
    }
    pl->device = dev_of(sp, bestk);
    pl->start_s = best_start;
    pl->finish_s = best;
    pl->auto_placed = (n->flags & WEFT__N_AUTO) != 0;
    pl->forced = forced >= 0;
    pl->other = secondk >= 0 ? dev_of(sp, secondk) : pl->device;
    pl->other_finish_s = secondk >= 0 ? second : best;
    if (is_gpu(sp, bestk) && weft__plan_fills_device(n, m->prof.gpu.multiprocessors))
      for (int l = 0; l < f.lanes; l++) f.gpu[bestk][l] = best;
    else
      *lane_of(&f, sp, bestk, 0) = best;
    for (int a = 0; a < n->nargs; a++) {
      weft_tensor *t = n->args[a].t, *grp = unit_of(ts, t);
      tstate *s = &ts[t->id], *gs = &ts[grp->id];
      int first_touch = gs->first_dev < 0;
      if (s->first_dev < 0) s->first_dev = bestk;
      if (gs->first_dev < 0) gs->first_dev = bestk;
      /* An auto tensor first touched on a GPU lives there from now on (its home, near enough:
       * the last writer's device is not known yet). */
      if (is_gpu(sp, bestk) && (grp->flags & WEFT__T_AUTODEV) && first_touch && !(resident[grp->id] >> bestk & 1)) {
        if (used[bestk] + (double)grp->bytes <= cap[bestk]) {
          resident[grp->id] |= BIT(bestk);
          used[bestk] += (double)grp->bytes;
        } else {
          /* Too large to live there: it lives on the GPU's host, and its pieces visit the GPU. */
          int h = host_of(sp, bestk);
          gs->spill = 1;
          gs->first_dev = h;
          gs->valid = BIT(h);
          if (grp->grid != NULL)
            for (uint32_t q = grp->grid->first; q < grp->grid->first + (uint32_t)(grp->grid->rows * grp->grid->cols); q++)
              ts[q].valid = BIT(h);
        }
      }
      /* A partitioned tensor's tiles live in its storage: the first touch of any of them puts
       * them all (and it) there. */
      if (grp->grid != NULL && gs->valid == 0) {
        gs->valid = BIT(bestk);
        for (uint32_t q = grp->grid->first; q < grp->grid->first + (uint32_t)(grp->grid->rows * grp->grid->cols); q++)
          if (ts[q].valid == 0) ts[q].valid = BIT(bestk);
      }
      double *av = &avail[(size_t)t->id * (size_t)ndev];
      if (n->args[a].mode & WEFT_READ) {
        if (s->valid == 0) s->valid = BIT(bestk), av[bestk] = 0;
        s->valid |= BIT(bestk);
      }
      if (n->args[a].mode & WEFT_WRITE) {
        s->valid = BIT(bestk);
        av[bestk] = best;
        s->last_writer = bestk;
      }
    }
  }
  weft__free(f.cpu);
  weft__free(resident);
  /* Homes: the last writer's device, else the first accessor's, else rank 0's CPU; a tile's
   * its parent's, a split tensor's tile its own (the split tensor itself: rank 0's CPU, where
   * the calls that take the whole read and write it). Fixed tensors keep theirs. */
  for (size_t t = 0; t < g->tensors.len; t++) {
    weft_tensor *x = tens[t];
    tstate *s = &ts[t];
    if (!(group_of(x)->flags & WEFT__T_AUTODEV)) {
      s->home = dev_index(sp, x->device);
    } else if (s->split && x->grid != NULL) {
      s->home = 0;
    } else if (!s->split && (group_of(x) != x || x->grid != NULL)) {
      int f0 = ts[group_of(x)->id].first_dev;
      s->home = f0 >= 0 ? f0 : 0;
    } else {
      s->home = s->spill ? host_of(sp, s->first_dev) : s->last_writer >= 0 ? s->last_writer : s->first_dev >= 0 ? s->first_dev : 0;
    }
    /* Contents on one rank (a home from an earlier placement) stay on that rank: moving them
     * to another would take a message outside the run. Its nodes may still run elsewhere. */
    const weft_tensor *gx = group_of(x);
    if ((gx->flags & WEFT__T_PLACED) && !(gx->flags & WEFT__T_EVERY_RANK) && rank_of(sp, s->home) != gx->device.rank)
      s->home = dev_index(sp, gx->device);
  }
  return WEFT_OK;
}

/* Moves auto tensor t to device `home`: sets its device, and moves existing contents (of
 * this rank: to another rank's home they do not go; placement keeps a tensor's contents on the
 * rank that has them, or every rank has them), unless `dead`: the program's first access to
 * t writes it whole without reading it (it starts from its initialiser's values there). */
static int move_home(weft_tensor *t, weft_device home, int dead) {
  t->flags = (uint8_t)((t->flags & ~WEFT__T_EVERY_RANK) | WEFT__T_PLACED);
  if (weft_device_equal(t->device, home)) return WEFT_OK;
  int own = t->view == NULL || weft__tile_owns_storage(t);
  int had = t->storage_kind != WEFT__S_NONE && t->storage_kind != WEFT__S_EMPTY && own;
  void *buf = NULL;
  int rc = WEFT_OK;
  if (had && (dead || !weft__rank_here(t->graph->rt, home.rank))) {
    weft__storage_release(t);
    if (dead) t->initialised = 0;
    had = 0;
  } else if (had) {
    if ((buf = weft__malloc(t->bytes)) == NULL) return weft__oom("moving a tensor to its new home");
    if ((rc = weft__storage_copy_out(t, buf)) != WEFT_OK) {
      weft__free(buf);
      return rc;
    }
    weft__storage_release(t);
  }
  if (!own) t->storage_kind = WEFT__S_NONE; /* re-derived from the parent's */
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
  while (pl != NULL) {
    weft__placement *older = pl->retired;
    if (pl->pg != NULL) weft_graph_destroy(pl->pg);
    weft__free(pl->node);
    weft__free(pl->at);
    weft__free(pl->decided);
    weft__free(pl->home);
    weft__free(pl);
    pl = older;
  }
}

void weft__placement_free(weft_graph *g) {
  placement_free(g->placement);
  g->placement = NULL;
}

/* The lowering's state: the placed graph, each program tensor's twin (at home) and replicas
 * (per device), and the devices where each is valid now. */
typedef struct lctx {
  weft_graph *pg;
  weft_tensor **twin, **rep;
  dmask *valid;
  const tstate *ts;
  const space *sp;
  int ndev;
  /* GPU memory: what placement may use on each GPU, what the tensors living there take, what
   * the replicas there take now; each tensor's accesses (program node ids, ascending) for the
   * eviction's choice; the node being lowered, whose operands stay. */
  double cap[MAXD], homes[MAXD], replicas[MAXD];
  uint32_t *acc_off, *acc; /* accesses as positions in the lowering's order (pos) */
  uint32_t *pos;           /* per program node: its position in the lowering's order */
  uint32_t *last_write;    /* per program tensor: the position of its last write (UINT32_MAX: none) */
  const weft_graph *prog;
  const weft_node *cur; /* NULL after the last node */
  /* Out of core (tight[k]: the lowering's order streams data through GPU k): the replicas
   * evicted for the next one made (placed-graph tensor ids), and for the edges after the
   * lowering, each eviction {victim, the replica made in its room} and the replicas made on a
   * tight GPU in order {device, replica}. */
  int tight[MAXD];
  double slack[MAXD];
  weft__vec victims, evicted, made;
  weft__vec rings; /* ring: the staging tensors of strided tiles' transfers */
} lctx;

/* A strided tile of a host tensor moves to or from a GPU through a contiguous host tensor: a
 * 2-D copy engine transfer (rows of the tile, a pitch apart) runs at 31 GB/s beside the
 * products on an H100, and slows them, where a contiguous one runs at the link's 47-55 GB/s
 * and hides behind them (measured side by side, docs/placement.md). So a worker packs the
 * tile (a host copy, split over the CPU's workers) and the copy engine moves it whole; the
 * other way, the reverse. The staging tensors are a ring per GPU, direction and tile shape,
 * reused in turn: the dependency analysis orders each reuse after the previous transfer, which
 * bounds the pinned memory and paces the packing. */
enum { STAGES_IN = 8, STAGES_OUT = 4 };
typedef struct ring {
  int k, out, dtype;
  int64_t shape[2];
  unsigned next;
  weft_tensor *t[STAGES_IN];
} ring;

/* Each tensor's accesses in g, ascending, as positions in `ord` (NULL: node ids): tensor t's
 * are (*acc)[(*off)[t] .. (*off)[t + 1]). The caller frees both. */
static int accesses_of(const weft_graph *g, const uint32_t *ord, uint32_t **off, uint32_t **acc) {
  size_t nt = g->tensors.len, nn = g->nodes.len, total = 0;
  weft_node **nd = g->nodes.data;
  *acc = NULL;
  if ((*off = weft__calloc(nt + 2, sizeof **off)) == NULL) return weft__oom("the placement's accesses");
  for (size_t i = 0; i < nn; i++)
    for (int a = 0; a < nd[i]->nargs; a++) (*off)[nd[i]->args[a].t->id + 2]++, total++;
  for (size_t t = 0; t < nt; t++) (*off)[t + 2] += (*off)[t + 1];
  if ((*acc = weft__malloc((total ? total : 1) * sizeof **acc)) == NULL) return weft__oom("the placement's accesses");
  /* (*off)[t + 1] is t's fill cursor: it ends at t's end, which is (t + 1)'s start. */
  for (size_t q = 0; q < nn; q++) {
    const weft_node *n = nd[ord != NULL ? ord[q] : q];
    for (int a = 0; a < n->nargs; a++) (*acc)[(*off)[n->args[a].t->id + 1]++] = (uint32_t)q;
  }
  return WEFT_OK;
}

/* The next access to tensor t after position i of the lowering's order (UINT32_MAX: none),
 * and the last one at or before i (0: none). */
static uint32_t next_use(const lctx *c, uint32_t t, uint32_t i, uint32_t *last) {
  *last = 0;
  for (uint32_t q = c->acc_off[t]; q < c->acc_off[t + 1]; q++) {
    if (c->acc[q] > i) return c->acc[q];
    *last = c->acc[q];
  }
  return UINT32_MAX;
}

static int transfer(struct lctx *c, weft_tensor *t, int s, int k);

/* Room for `bytes` more of replicas on GPU k: the replicas used furthest ahead (Belady) leave
 * first, of those the least recently used (the copy that takes its room waits for its last
 * access: the older, the sooner it may start); a replica that holds the only valid copy is
 * written back home before it goes. */
static int make_room(lctx *c, int k, double bytes) {
  int rc = WEFT_OK;
  const weft_graph *g = c->prog;
  uint32_t now = c->cur != NULL ? c->pos[c->cur->id] : UINT32_MAX - 1;
  while (rc == WEFT_OK && c->homes[k] + c->replicas[k] + bytes > c->cap[k]) {
    uint32_t victim = UINT32_MAX, far = 0, old = 0;
    for (uint32_t t = 0; t < (uint32_t)g->tensors.len; t++) {
      if (c->rep[(size_t)t * (size_t)c->ndev + (size_t)k] == NULL) continue;
      int used_now = 0;
      for (int a = 0; c->cur != NULL && a < c->cur->nargs; a++) used_now |= c->cur->args[a].t->id == t;
      uint32_t last = 0, nu = used_now ? 0 : next_use(c, t, now, &last);
      if (!used_now && (victim == UINT32_MAX || nu > far || (nu == far && last < old))) victim = t, far = nu, old = last;
    }
    if (victim == UINT32_MAX) break; /* nothing left to evict: the node's own operands */
    weft_tensor *v = WEFT__VEC_AT(&g->tensors, weft_tensor *, victim);
    int h = c->ts[victim].home;
    if (c->valid[victim] == BIT(k) && h != k) rc = transfer(c, v, k, h);
    if (rc == WEFT_OK && c->tight[k]) rc = weft__vec_push(&c->victims, &c->rep[(size_t)victim * (size_t)c->ndev + (size_t)k]->id);
    c->valid[victim] &= ~BIT(k);
    c->rep[(size_t)victim * (size_t)c->ndev + (size_t)k] = NULL; /* a later visit gets a new one */
    c->replicas[k] -= (double)v->bytes;
  }
  return rc;
}

/* Replica `id` made on tight GPU k, in the room of the victims just evicted. */
static int made(lctx *c, int k, uint32_t id) {
  uint32_t at = (uint32_t)c->made.len;
  int rc = weft__pair_push(&c->made, (uint32_t)k, id);
  const uint32_t *v = c->victims.data;
  for (size_t q = 0; q < c->victims.len && rc == WEFT_OK; q++) rc = weft__pair_push(&c->evicted, v[q], at);
  c->victims.len = 0;
  return rc;
}

/* By first access, then by the order made. */
static int by_first(const void *a, const void *b) {
  const weft__pair *x = a, *y = b;
  return x->owner != y->owner ? (x->owner < y->owner ? -1 : 1) : (x->value < y->value ? -1 : x->value > y->value);
}

/* Out of core, the lowering's order keeps each tight GPU's replicas within its budget less the
 * slack; a policy that reorders the placed graph (`heft`) must keep them within the budget too.
 * So on each tight GPU the first accesses of its replicas keep their order, and each waits for
 * every access (the readers, the write-back) of the replicas evicted for the replicas made up
 * to the slack before it: in any order the plan takes, the replicas alive are at most those
 * the lowering had plus the slack, and the memory plan frees the dead ones in time. The edges
 * point forward in the placed graph's order (the lowering's), so they close no cycle. */
static int eviction_edges(lctx *c) {
  weft_graph *pg = c->pg;
  weft_node **nd = pg->nodes.data;
  uint32_t *off, *acc; /* the placed graph's accesses, by node id */
  int rc = accesses_of(pg, NULL, &off, &acc);
  const weft__pair *ev = c->evicted.data, *mk = c->made.data;
  weft_tensor **pt = pg->tensors.data;
  size_t nm = c->made.len;
  uint32_t *voff = rc == WEFT_OK ? weft__calloc(nm + 1, sizeof *voff) : NULL; /* victims of made[i]: ev[voff[i]..voff[i+1]) */
  weft__pair *on = rc == WEFT_OK ? weft__malloc((nm ? nm : 1) * sizeof *on) : NULL; /* {first access, made index} */
  double *cum = rc == WEFT_OK ? weft__malloc((nm + 1) * sizeof *cum) : NULL;
  if (rc == WEFT_OK && (voff == NULL || on == NULL || cum == NULL)) rc = weft__oom("the placed graph's eviction edges");
  if (rc == WEFT_OK) {
    for (size_t q = 0; q < c->evicted.len; q++) voff[ev[q].value + 1]++;
    for (size_t i = 0; i < nm; i++) voff[i + 1] += voff[i];
  }
  /* On each tight GPU, in the order of their first accesses (a replica written first is made
   * before the copies in of the node's other operands, and used after them): the replica j-th
   * waits for the replica before it and for the victims of every replica at or before the
   * earliest m with at most the GPU's slack of replicas in (m, j]. The lowering kept its
   * replicas within the budget less the slack, so those in flight stay within it. */
  for (int k = 0; k < c->ndev && rc == WEFT_OK; k++) {
    if (!is_gpu(c->sp, k)) continue;
    size_t n = 0;
    for (size_t i = 0; i < nm; i++)
      if (mk[i].owner == (uint32_t)k) {
        uint32_t t = mk[i].value; /* its first access, if any */
        on[n++] = (weft__pair){off[t] < off[t + 1] ? acc[off[t]] : UINT32_MAX, (uint32_t)i};
      }
    qsort(on, n, sizeof *on, by_first);
    cum[0] = 0;
    for (size_t q = 0; q < n; q++) cum[q + 1] = cum[q] + (double)pt[mk[on[q].value].value]->bytes;
    size_t lo = 0, done = 0; /* positions [0, done) have their victims' edges */
    for (size_t j = 0; j < n && rc == WEFT_OK && on[j].owner != UINT32_MAX; j++) {
      uint32_t to = on[j].owner;
      if (j > 0 && on[j - 1].owner < to) rc = weft_graph_add_edge(pg, nd[on[j - 1].owner], nd[to]);
      while (cum[j + 1] - cum[lo + 1] > c->slack[k]) lo++;
      for (; done <= lo && rc == WEFT_OK; done++)
        for (uint32_t q = voff[on[done].value]; q < voff[on[done].value + 1] && rc == WEFT_OK; q++) {
          uint32_t v = ev[q].owner;
          for (uint32_t a = off[v]; a < off[v + 1] && rc == WEFT_OK; a++)
            if (acc[a] < to) rc = weft_graph_add_edge(pg, nd[acc[a]], nd[to]);
        }
    }
  }
  weft__free(voff);
  weft__free(on);
  weft__free(cum);
  weft__free(off);
  weft__free(acc);
  return rc;
}

/* The placed graph's tensor for program tensor t on device k: its twin at home, else its
 * replica there (made on first use: contiguous, even for a strided tile). */
static weft_tensor *on_device(lctx *c, weft_tensor *t, int k, int *rc) {
  if (c->ts[t->id].home == k) return c->twin[t->id];
  weft_tensor **r = &c->rep[(size_t)t->id * (size_t)c->ndev + (size_t)k];
  if (*r == NULL && is_gpu(c->sp, k)) {
    if ((*rc = make_room(c, k, (double)t->bytes)) != WEFT_OK) return NULL;
    c->replicas[k] += (double)t->bytes;
  }
  if (*r == NULL) {
    char name[160], d[32];
    snprintf(name, sizeof name, "%s@%s", weft__tensor_name(t), weft_device_str(dev_of(c->sp, k), d, sizeof d));
    *rc = weft__tensor_new(c->pg, name, t->dtype, t->ndim, t->shape, dev_of(c->sp, k), weft_zeros(),
                           WEFT__T_AUTO | WEFT__T_INSERTED, r);
    if (*rc == WEFT_OK && is_gpu(c->sp, k) && c->tight[k]) *rc = made(c, k, (*r)->id);
  }
  return *r;
}

/* The device to copy t from onto k: on k's rank, another GPU over the peer link (t's home
 * first: its readers on several GPUs then take their copies from where it was written, not
 * all from the first GPU that got one, whose copy engine would queue them), else the host
 * (first, onto a GPU data streams through: transfer, below), else any of the rank's; then
 * another rank's host, else any device. */
static int source_of(const lctx *c, const weft_tensor *t, int k) {
  const space *sp = c->sp;
  dmask valid = c->valid[t->id];
  int h = host_of(sp, k), home = c->ts[t->id].home;
  if (is_gpu(sp, k) && c->tight[k] && (valid >> h & 1)) return h;
  if (is_gpu(sp, k) && sp->peer && home > h && home < h + sp->per && (valid >> home & 1)) return home;
  for (int s = h + 1; s < h + sp->per && is_gpu(sp, k) && sp->peer; s++)
    if (valid >> s & 1) return s;
  if (valid >> h & 1) return h;
  for (int s = h; s < h + sp->per; s++)
    if (valid >> s & 1) return s;
  for (int s = 0; s < c->ndev && is_gpu(sp, k) && !c->tight[k]; s++)
    if ((valid >> s & 1) && direct(sp, s, k)) return s;
  for (int s = 0; s < c->ndev; s += sp->per)
    if (valid >> s & 1) return s;
  for (int s = 0; s < c->ndev; s++)
    if (valid >> s & 1) return s;
  return -1;
}

/* Whether t goes from GPU s straight to GPU k of another rank: on one host (direct), into memory
 * kept for the graph's life, so not onto a GPU data streams through (tight); into its home (the
 * program's tensor, whose storage another process may not map) only through a staging tensor,
 * which 2-D tensors have (copy_legs), else through the hosts. */
static int direct_into(const lctx *c, const weft_tensor *t, int s, int k) {
  return direct(c->sp, s, k) && !c->tight[k] && (k != c->ts[t->id].home || t->ndim == 2);
}

/* The next staging tensor for a strided tile like t moving to GPU k (out = 0), from GPU k (1),
 * or into host k from another rank (2: the transport receives contiguous tensors only). */
static int stage_of(lctx *c, const weft_tensor *t, int k, int out, weft_tensor **st) {
  ring *r = NULL;
  for (size_t q = 0; q < c->rings.len && r == NULL; q++) {
    ring *x = &WEFT__VEC_AT(&c->rings, ring, q);
    if (x->k == k && x->out == out && x->dtype == t->dtype && x->shape[0] == t->shape[0] && x->shape[1] == t->shape[1])
      r = x;
  }
  if (r == NULL) {
    ring z = {k, out, t->dtype, {t->shape[0], t->shape[1]}, 0, {NULL}};
    int rc = weft__vec_push(&c->rings, &z);
    if (rc != WEFT_OK) return rc;
    r = &WEFT__VEC_AT(&c->rings, ring, c->rings.len - 1);
  }
  unsigned i = r->next++ % (out ? STAGES_OUT : STAGES_IN);
  if (r->t[i] == NULL) {
    char name[96], d[32];
    snprintf(name, sizeof name, "stage %s %s %u (%s %lldx%lld)", out == 2 ? "from another rank into" : out ? "from" : "to",
             weft_device_str(dev_of(c->sp, k), d, sizeof d), i, weft_dtype_name(t->dtype), (long long)t->shape[0],
             (long long)t->shape[1]);
    /* On k's host; from another rank's GPU straight onto GPU k (direct). */
    int on = out == 2 && is_gpu(c->sp, k) ? k : host_of(c->sp, k);
    int rc = weft__tensor_new(c->pg, name, t->dtype, 2, t->shape, dev_of(c->sp, on), weft_zeros(), WEFT__T_INSERTED,
                              &r->t[i]);
    if (rc != WEFT_OK) return rc;
  }
  *st = r->t[i];
  return WEFT_OK;
}

/* The copy of `from` (t's on device s) into `to` (on device k): on the GPU's side (the sender's
 * between GPUs), between hosts (ranks) on the receiver's, as any copy between ranks; a strided
 * tile on a host that a GPU reads or writes, or that receives from another rank, goes through a
 * staging tensor (above), the second copy flagged `flags`. */
static int copy_legs(lctx *c, const weft_tensor *t, weft_tensor *from, weft_tensor *to, int s, int k, unsigned flags) {
  const space *sp = c->sp;
  const weft_tensor *host = !is_gpu(sp, s) ? from : !is_gpu(sp, k) ? to : NULL;
  /* From another rank: a strided tile through a staging tensor; from another rank's GPU, a twin
   * too (the program's tensor, whose storage may already be the pool's, which another process
   * cannot map), as every 2-D shape (the ring's). */
  int into_rank = rank_of(sp, s) != rank_of(sp, k) && to->ndim == 2 &&
                  (!weft__tensor_contiguous(to) || (direct(sp, s, k) && weft__storage_owner(to) != to));
  int gpu_leg = is_gpu(sp, s) != is_gpu(sp, k) && host->ndim == 2 && !weft__tensor_contiguous(host);
  weft_tensor *st;
  int rc;
  if (!into_rank && !gpu_leg) return weft__copy_node(c->pg, from, to, dev_of(sp, is_gpu(sp, s) ? s : k), flags);
  if ((rc = stage_of(c, t, into_rank ? k : is_gpu(sp, s) ? s : k, into_rank ? 2 : is_gpu(sp, s), &st)) != WEFT_OK) return rc;
  if ((rc = weft__copy_node(c->pg, from, st, dev_of(sp, into_rank && !is_gpu(sp, s) ? k : s), WEFT__N_INSERTED)) != WEFT_OK)
    return rc;
  return weft__copy_node(c->pg, st, to, dev_of(sp, k), flags);
}

/* A transfer of t from device s to device k (twin or replica on each side). */
static int transfer(struct lctx *c, weft_tensor *t, int s, int k) {
  const space *sp = c->sp;
  int rc = WEFT_OK;
  /* Between ranks: through their hosts, a copy a leg (the transport carries host memory):
   * the sender's GPU to its host, the message, the receiver's host to its GPU; between GPUs of
   * one host, one copy, unless the receiver's memory is tight: what another rank's GPU copies
   * in is kept to the end of the run (the transport's landing memory, docs/distributed.md). */
  if (rank_of(sp, s) != rank_of(sp, k) && (is_gpu(sp, s) || is_gpu(sp, k)) && !direct_into(c, t, s, k)) {
    int hs = host_of(sp, s), hk = host_of(sp, k);
    if (is_gpu(sp, s) && !(c->valid[t->id] >> hs & 1)) rc = transfer(c, t, s, hs);
    if (rc == WEFT_OK && !(c->valid[t->id] >> hk & 1)) rc = transfer(c, t, hs, hk);
    return rc == WEFT_OK && is_gpu(sp, k) ? transfer(c, t, hk, k) : rc;
  }
  /* Between GPUs, one of which data streams through: through the host. A GPU frees during the
   * run only the buffers whose every access runs on it (docs/cuda.md), and a copy over the peer
   * link runs on one side: the replica on the other would hold its memory to the end of the run
   * (two H200s under a 2 GiB limit each peaked at 6.2 GiB). */
  if (is_gpu(sp, s) && is_gpu(sp, k) && (c->tight[s] || c->tight[k])) {
    int h = host_of(sp, s);
    if (!(c->valid[t->id] >> h & 1)) rc = transfer(c, t, s, h);
    return rc == WEFT_OK ? transfer(c, t, h, k) : rc;
  }
  weft_tensor *from = on_device(c, t, s, &rc), *to = rc == WEFT_OK ? on_device(c, t, k, &rc) : NULL;
  if (rc == WEFT_OK) rc = copy_legs(c, t, from, to, s, k, WEFT__N_INSERTED);
  c->valid[t->id] |= BIT(k);
  return rc;
}

/* A partitioned tensor made valid at home from its tiles: each tile last written elsewhere is
 * copied back into its place. */
static int gather(lctx *c, weft_tensor *x) {
  int h = c->ts[x->id].home, rc = WEFT_OK;
  for (uint32_t q = x->grid->first; q < x->grid->first + (uint32_t)(x->grid->rows * x->grid->cols) && rc == WEFT_OK; q++)
    if (!(c->valid[q] >> h & 1)) {
      weft_tensor *tile = WEFT__VEC_AT(&x->graph->tensors, weft_tensor *, q);
      rc = transfer(c, tile, source_of(c, tile, h), h);
    }
  c->valid[x->id] |= BIT(h);
  return rc;
}

/* Makes t valid on device k for reading. */
static int bring(lctx *c, weft_tensor *t, int k) {
  int rc = WEFT_OK;
  if (t->grid != NULL && c->valid[t->id] == 0) rc = gather(c, t);
  if (rc != WEFT_OK || (c->valid[t->id] >> k & 1)) return rc;
  if (t->grid != NULL && !(c->valid[t->id] >> c->ts[t->id].home & 1) && (rc = gather(c, t)) != WEFT_OK) return rc;
  return (c->valid[t->id] >> k & 1) ? WEFT_OK : transfer(c, t, source_of(c, t, k), k);
}

/* Records a write of t on device k. A tile's write leaves its parent valid only where the tile
 * is (at home, in place) or nowhere until gathered; a whole partitioned tensor written away
 * from home is copied home at once, so that its tiles (views there) stay coherent. */
static int wrote(lctx *c, weft_tensor *t, int k) {
  c->valid[t->id] = BIT(k);
  if (t->view != NULL) {
    uint32_t p = t->view->parent->id;
    c->valid[p] = k == c->ts[p].home ? c->valid[p] & BIT(k) : 0;
  }
  if (t->grid == NULL) return WEFT_OK;
  int h = c->ts[t->id].home, rc = k == h ? WEFT_OK : transfer(c, t, k, h);
  for (uint32_t q = t->grid->first; q < t->grid->first + (uint32_t)(t->grid->rows * t->grid->cols); q++) c->valid[q] = BIT(h);
  return rc;
}

/* ---- out of core: the lowering's order ---------------------------------------------------
 * The ready nodes of lowering_order (below) are a binary min-heap by program id; a pick looks
 * at the heap's first ORDER_WINDOW entries (its top levels: the earliest ready nodes), so a
 * graph of a million independent nodes costs no more a pick than a small one. */
enum { ORDER_WINDOW = 255 };

static void heap_up(uint32_t *h, size_t i) {
  while (i > 0 && h[(i - 1) / 2] > h[i]) {
    uint32_t t = h[i];
    h[i] = h[(i - 1) / 2];
    h[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static void heap_down(uint32_t *h, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    if (l < n && h[l] < h[m]) m = l;
    if (l + 1 < n && h[l + 1] < h[m]) m = l + 1;
    if (m == i) return;
    uint32_t t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

/* Which GPUs data streams through (tight[k]): those whose nodes touch more bytes away from home
 * than the GPU may hold beside what lives there. */
static int tight_gpus(const weft_graph *g, const weft__node_place *at, const tstate *ts, const space *sp, const double *cap,
                      const double *homes, int *tight) {
  size_t nt = g->tensors.len, nn = g->nodes.len;
  weft_node **nd = g->nodes.data;
  uint32_t *seen = weft__calloc(nt ? nt : 1, sizeof *seen);
  if (seen == NULL) return weft__oom("the placement's order");
  for (int k = 0; k < sp->ndev; k++) {
    if (!is_gpu(sp, k)) continue;
    double need = 0;
    for (size_t i = 0; i < nn; i++) {
      if (dev_index(sp, at[i].device) != k) continue;
      for (int a = 0; a < nd[i]->nargs; a++) {
        const weft_tensor *t = nd[i]->args[a].t;
        if (ts[t->id].home == k || seen[t->id] == (uint32_t)k) continue;
        seen[t->id] = (uint32_t)k; /* k > 0: a GPU */
        need += (double)t->bytes;
      }
    }
    tight[k] = need > cap[k] - homes[k];
  }
  weft__free(seen);
  return WEFT_OK;
}

/* When what the nodes placed on a GPU touch there (away from home) is more than the GPU may
 * hold, the program's order can stream the same data through it again and again (a
 * right-looking tiled Cholesky reads the whole trailing matrix at every step: 15 GB each way
 * for an 8 GiB matrix on an H100 limited to 2 GiB). The lowering then takes another
 * topological order, list scheduling that runs next, of the nodes ready, the one with the
 * fewest bytes to bring to its device (residency kept within each GPU's budget, least recently
 * used out first); among those, the one whose incoming tensors the most other ready nodes read
 * (what comes in serves them too), then the program's order: the work on what is resident is done
 * before it leaves (the factorisation turns left-looking by itself). Only independent nodes
 * trade places, so results are the program order's. ord receives the order. */
static int lowering_order(const weft_graph *g, const weft__node_place *at, const tstate *ts, const space *sp,
                          const double *cap, const double *homes, const int *tight, uint32_t *ord) {
  size_t nt = g->tensors.len, nn = g->nodes.len, ne = g->edges.len;
  weft_node **nd = g->nodes.data;
  weft_tensor **tens = g->tensors.data;
  for (size_t i = 0; i < nn; i++) ord[i] = (uint32_t)i;
  int over = 0;
  int ndev = sp->ndev;
  for (int k = 0; k < ndev; k++) over |= tight[k];
  if (!over) return WEFT_OK;
  uint32_t *indeg = weft__calloc(nn + 1, sizeof *indeg), *soff = weft__calloc(nn + 1, sizeof *soff);
  uint32_t *succ = weft__malloc((ne ? ne : 1) * sizeof *succ), *ready = weft__malloc((nn ? nn : 1) * sizeof *ready);
  uint32_t *stamp = weft__calloc((nt ? nt : 1) * (size_t)ndev, sizeof *stamp);
  uint32_t *demand = weft__calloc(nt ? nt : 1, sizeof *demand); /* ready nodes reading each tensor */
  int rc = WEFT_OK;
  if (indeg == NULL || soff == NULL || succ == NULL || ready == NULL || stamp == NULL || demand == NULL) {
    rc = weft__oom("the placement's order");
    goto out;
  }
  const weft__edge *e = g->edges.data;
  for (size_t q = 0; q < ne; q++) soff[e[q].from + 1]++, indeg[e[q].to]++;
  for (size_t i = 0; i < nn; i++) soff[i + 1] += soff[i];
  uint32_t *put = weft__malloc((nn ? nn : 1) * sizeof *put);
  if (put == NULL) {
    rc = weft__oom("the placement's order");
    goto out;
  }
  memcpy(put, soff, nn * sizeof *put);
  for (size_t q = 0; q < ne; q++) succ[put[e[q].from]++] = e[q].to;
  weft__free(put);
  size_t nready = 0;
  for (size_t i = 0; i < nn; i++)
    if (indeg[i] == 0) {
      ready[nready++] = (uint32_t)i; /* ascending: a heap already */
      for (int a = 0; a < nd[i]->nargs; a++)
        if (nd[i]->args[a].mode & WEFT_READ) demand[nd[i]->args[a].t->id]++;
    }
  double used[MAXD] = {0};
  uint32_t clock = 1;
  for (size_t q = 0; q < nn; q++) {
    if (nready == 0) { /* a cycle: the analysis refuses those first */
      rc = weft__err(WEFT_EINVAL, "placement: the graph's dependencies leave no node to run");
      goto out;
    }
    size_t pick = 0;
    double best = INFINITY;
    uint32_t best_share = 0;
    for (size_t r = 0; r < nready && r < ORDER_WINDOW; r++) {
      const weft_node *n = nd[ready[r]];
      int k = dev_index(sp, at[ready[r]].device), gpu = is_gpu(sp, k);
      double miss = 0;
      uint32_t share = 0; /* the other ready nodes that read what it brings in */
      for (int a = 0; gpu && a < n->nargs; a++) {
        const weft_tensor *t = n->args[a].t;
        if ((n->args[a].mode & WEFT_READ) && ts[t->id].home != k && stamp[(size_t)t->id * (size_t)ndev + (size_t)k] == 0)
          miss += (double)t->bytes, share += demand[t->id] - 1;
      }
      if (miss < best || (miss == best && (share > best_share || (share == best_share && ready[r] < ready[pick]))))
        best = miss, best_share = share, pick = r;
    }
    uint32_t i = ready[pick];
    ready[pick] = ready[--nready];
    if (pick < nready) {
      heap_down(ready, nready, pick);
      heap_up(ready, pick);
    }
    ord[q] = i;
    const weft_node *n = nd[i];
    for (int a = 0; a < n->nargs; a++)
      if (n->args[a].mode & WEFT_READ) demand[n->args[a].t->id]--;
    int k = dev_index(sp, at[i].device), gpu = is_gpu(sp, k);
    for (int a = 0; gpu && a < n->nargs; a++) {
      const weft_tensor *t = n->args[a].t;
      uint32_t *s = &stamp[(size_t)t->id * (size_t)ndev + (size_t)k];
      if (ts[t->id].home == k) continue;
      if (*s == 0) {
        /* Room first: the least recently used that this node does not touch leaves. */
        while (used[k] + (double)t->bytes > cap[k] - homes[k]) {
          uint32_t victim = UINT32_MAX, oldest = UINT32_MAX;
          for (size_t v = 0; v < nt; v++) {
            uint32_t sv = stamp[v * (size_t)ndev + (size_t)k];
            if (sv == 0 || sv >= oldest) continue;
            int mine = 0;
            for (int b = 0; b < n->nargs; b++) mine |= n->args[b].t->id == v;
            if (!mine) victim = (uint32_t)v, oldest = sv;
          }
          if (victim == UINT32_MAX) break;
          stamp[(size_t)victim * (size_t)ndev + (size_t)k] = 0;
          used[k] -= (double)tens[victim]->bytes;
        }
        used[k] += (double)t->bytes;
      }
      *s = clock++;
    }
    for (uint32_t q2 = soff[i]; q2 < soff[i + 1]; q2++)
      if (--indeg[succ[q2]] == 0) {
        const weft_node *m = nd[succ[q2]];
        for (int a = 0; a < m->nargs; a++)
          if (m->args[a].mode & WEFT_READ) demand[m->args[a].t->id]++;
        ready[nready] = succ[q2];
        heap_up(ready, nready++);
      }
  }
out:
  weft__free(demand);
  weft__free(indeg);
  weft__free(soff);
  weft__free(succ);
  weft__free(ready);
  weft__free(stamp);
  return rc;
}

static int lower(weft_graph *g, weft__placement *pl, tstate *ts, const space *sp) {
  weft_runtime *rt = g->rt;
  weft_graph *pg;
  int rc = weft_graph_create(rt, &pg);
  if (rc != WEFT_OK) return rc;
  pl->pg = pg;
  size_t nt = g->tensors.len, nn = g->nodes.len;
  weft_tensor **tens = g->tensors.data;
  lctx c;
  memset(&c, 0, sizeof c);
  c.pg = pg;
  c.twin = weft__calloc(nt ? nt : 1, sizeof(weft_tensor *));
  int ndev = sp->ndev;
  c.rep = weft__calloc((nt ? nt : 1) * (size_t)ndev, sizeof(weft_tensor *));
  c.valid = weft__malloc((nt ? nt : 1) * sizeof *c.valid);
  c.ts = ts;
  c.prog = g;
  c.sp = sp;
  c.ndev = ndev;
  weft__vec_init(&c.victims, sizeof(uint32_t));
  weft__vec_init(&c.evicted, sizeof(weft__pair));
  weft__vec_init(&c.made, sizeof(weft__pair));
  weft__vec_init(&c.rings, sizeof(ring));
  c.pos = weft__malloc((nn ? nn : 1) * sizeof *c.pos);
  c.last_write = weft__malloc((nt ? nt : 1) * sizeof *c.last_write);
  uint32_t *ord = weft__malloc((nn ? nn : 1) * sizeof *ord);
  weft_tensor **args = NULL;
  size_t cap = 0;
  if (c.twin == NULL || c.rep == NULL || c.valid == NULL || c.pos == NULL || c.last_write == NULL || ord == NULL) {
    rc = weft__oom("the placed graph");
    goto done;
  }
  /* The GPUs' budgets and the tensors living there; the lowering's order; each tensor's
   * accesses in that order, for eviction. */
  {
    weft_node **nd = g->nodes.data;
    for (int k = 0; k < ndev; k++) c.cap[k] = capacity_of(rt, sp, k);
    for (size_t t = 0; t < nt; t++)
      if (stored(tens[t]) && !(tens[t]->flags & WEFT__T_TEMP)) c.homes[ts[t].home] += (double)tens[t]->bytes;
    if ((rc = tight_gpus(g, pl->at, ts, sp, c.cap, c.homes, c.tight)) != WEFT_OK) goto done;
    /* On a GPU data streams through, an eighth of its budget is slack for the copies in ahead
     * of need (the eviction edges below): measured best of 1/16, 1/8 and 1/6.7 on an H100. */
    for (int k = 0; k < ndev; k++)
      if (c.tight[k]) c.cap[k] -= c.slack[k] = c.cap[k] / 8;
    if ((rc = lowering_order(g, pl->at, ts, sp, c.cap, c.homes, c.tight, ord)) != WEFT_OK) goto done;
    for (size_t q = 0; q < nn; q++) c.pos[ord[q]] = (uint32_t)q;
    if ((rc = accesses_of(g, ord, &c.acc_off, &c.acc)) != WEFT_OK) goto done;
    memset(c.last_write, 0xff, nt * sizeof *c.last_write);
    for (size_t q = 0; q < nn; q++)
      for (int a = 0; a < nd[ord[q]]->nargs; a++)
        if (nd[ord[q]]->args[a].mode & WEFT_WRITE) c.last_write[nd[ord[q]]->args[a].t->id] = (uint32_t)q;
  }
  /* Twins, in the program's order: a view of each tensor on its home; a partitioned tensor's
   * tiles are its twin's tiles, so the placed graph tracks them like the program. */
  for (size_t t = 0; t < nt && rc == WEFT_OK; t++) {
    weft_tensor *x = tens[t];
    c.valid[t] = BIT(ts[t].home);
    if (!stored(x)) continue; /* a tile in its parent's storage: made with its parent's grid */
    if (x->flags & WEFT__T_TEMP) {
      /* A temporary of the program (nobody may read it after the run): the placed graph's
       * own, so that its memory plan frees it after its last reader. */
      rc = weft__tensor_new(pg, weft__tensor_name(x), x->dtype, x->ndim, x->shape, x->device, weft__tensor_init(x), WEFT__T_AUTO,
                            &c.twin[t]);
      continue;
    }
    rc = weft__tensor_new(pg, weft__tensor_name(x), x->dtype, x->ndim, x->shape, x->device, weft__tensor_init(x), 0, &c.twin[t]);
    weft__view *v = rc == WEFT_OK ? weft__arena_alloc(&pg->arena, sizeof *v, 8) : NULL;
    if (rc == WEFT_OK && v == NULL) rc = WEFT_ENOMEM;
    if (rc != WEFT_OK) break;
    if (x->grid != NULL) { /* partitioned before it becomes a view (tiles of tiles are refused) */
      /* (A split tensor has no storage and no twin: its tiles have theirs.) */
      if ((rc = weft_tensor_tiles(pg, c.twin[t], x->grid->tile[0], x->grid->tile[1])) != WEFT_OK) break;
      for (int64_t k = 0; k < x->grid->rows * x->grid->cols; k++)
        c.twin[x->grid->first + (size_t)k] = weft_tensor_tile(c.twin[t], k / x->grid->cols, k % x->grid->cols);
    }
    *v = (weft__view){x, 0, weft__tensor_ld(x), 0, 0};
    c.twin[t]->view = v;
  }
  weft_node **nodes = g->nodes.data;
  for (size_t q = 0; q < nn && rc == WEFT_OK; q++) {
    size_t i = ord[q];
    weft_node *n = nodes[i];
    int k = dev_index(sp, pl->at[i].device);
    c.cur = n;
    if (n->kind == WEFT__OP_COPY) {
      /* One transfer: from a valid copy of the source (the destination's device first, then
       * the node's, the host, any) into the destination where it lives. */
      weft_tensor *x = n->args[0].t, *y = n->args[1].t;
      int to = (y->flags & WEFT__T_AUTODEV) ? k : ts[y->id].home, src;
      if (x->grid != NULL && !(c.valid[x->id] >> ts[x->id].home & 1) && (rc = gather(&c, x)) != WEFT_OK) break;
      src = (c.valid[x->id] >> to & 1) ? to : (c.valid[x->id] >> k & 1) ? k : source_of(&c, x, to);
      /* Between ranks the transport carries host memory (but between the GPUs of one host): a
       * GPU end's leg to or from its host first; the node's own copy is then the last leg (into
       * a GPU) or the message. */
      if (rank_of(sp, src) != rank_of(sp, to) && (is_gpu(sp, src) || is_gpu(sp, to)) && !direct_into(&c, y, src, to)) {
        int via = is_gpu(sp, to) ? host_of(sp, to) : host_of(sp, src);
        if (!(c.valid[x->id] >> via & 1) && (rc = transfer(&c, x, src, via)) != WEFT_OK) break;
        src = via;
      }
      weft_tensor *from = on_device(&c, x, src, &rc);
      weft_tensor *dst = rc == WEFT_OK ? on_device(&c, y, to, &rc) : NULL;
      int runs = is_gpu(sp, src) ? src : to;
      /* Into a strided tile from another rank: through a staging tensor (copy_legs); else as
       * the program wrote it (a GPU's copy engine takes a strided tile). */
      if (rc == WEFT_OK && rank_of(sp, src) != rank_of(sp, to))
        rc = copy_legs(&c, x, from, dst, src, to, n->flags & WEFT__N_INSERTED);
      else if (rc == WEFT_OK)
        rc = weft__copy_node(pg, from, dst, dev_of(sp, runs), n->flags & WEFT__N_INSERTED);
      uint32_t own = (uint32_t)pg->nodes.len - 1; /* the copy's own (last) node: wrote may add write-backs */
      if (rc == WEFT_OK) rc = wrote(&c, y, to);
      if (rc != WEFT_OK) break;
      pl->node[i] = own;
      pl->at[i].device = dev_of(sp, runs);
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
      args[a] = on_device(&c, t, k, &rc);
      if (rc == WEFT_OK && (n->args[a].mode & WEFT_READ)) rc = bring(&c, t, k);
    }
    if (rc != WEFT_OK) break;
    weft_node *cl;
    if ((rc = weft__node_clone(pg, n, args, dev_of(sp, k), n->flags & WEFT__N_INSERTED, &cl)) != WEFT_OK) break;
    pl->node[i] = cl->id;
    for (int a = 0; a < n->nargs && rc == WEFT_OK; a++) {
      weft_tensor *t = n->args[a].t;
      if (!(n->args[a].mode & WEFT_WRITE)) continue;
      rc = wrote(&c, t, k);
      /* Out of core, a replica's last write goes home at once (the copy engine out is idle
       * beside the copies in): its eviction is then free, and the copy that takes its room
       * waits for no write-back. The same bytes as a write-back at eviction or at the end. */
      if (rc == WEFT_OK && is_gpu(sp, k) && c.tight[k] && t->grid == NULL && ts[t->id].home != k && c.last_write[t->id] == q &&
          !(c.valid[t->id] >> ts[t->id].home & 1))
        rc = transfer(&c, t, k, ts[t->id].home);
    }
  }
  c.cur = NULL;
  /* Every tensor valid at home when the run ends: tiles first (into their parents), then the
   * rest. */
  for (size_t t = 0; t < nt && rc == WEFT_OK; t++)
    if (tens[t]->grid != NULL && stored(tens[t]) && !(c.valid[t] >> ts[t].home & 1)) rc = gather(&c, tens[t]);
  for (size_t t = 0; t < nt && rc == WEFT_OK; t++) {
    int h = ts[t].home;
    if (!stored(tens[t]) || (c.valid[t] >> h & 1)) continue;
    rc = transfer(&c, tens[t], source_of(&c, tens[t], h), h);
  }
  if (rc == WEFT_OK && c.made.len > 0) rc = eviction_edges(&c);
  /* The program's explicit edges, between the nodes that stand for its nodes. */
  const weft__edge *e = g->explicit_edges.data;
  for (size_t k = 0; k < g->explicit_edges.len && rc == WEFT_OK; k++)
    rc = weft_graph_add_edge(pg, weft_graph_node(pg, pl->node[e[k].from]), weft_graph_node(pg, pl->node[e[k].to]));
done:
  weft__free(c.twin);
  weft__free(c.rep);
  weft__free(c.valid);
  weft__free(c.acc_off);
  weft__free(c.acc);
  weft__free(c.pos);
  weft__free(c.last_write);
  weft__vec_fini(&c.victims);
  weft__vec_fini(&c.evicted);
  weft__vec_fini(&c.made);
  weft__vec_fini(&c.rings);
  weft__free(ord);
  weft__free(args);
  return rc;
}

/* The GPU (a device index) that owns tile (i, j) when tiles are laid out 2-D block-cyclically
 * over P x (G / P) GPUs. */
static int layout_owner(int64_t i, int64_t j, int P, int gpus) {
  return 1 + (int)(i % P) * (gpus / P) + (int)(j % (gpus / P));
}

/* The first argument node n writes that is a split tensor's tile, or NULL. */
static const weft_tensor *writes_tile(const weft_node *n, const tstate *ts) {
  for (int a = 0; a < n->nargs; a++)
    if ((n->args[a].mode & WEFT_WRITE) && n->args[a].t->view != NULL && ts[n->args[a].t->id].split) return n->args[a].t;
  return NULL;
}

/* Where a split tensor's tiles live and their writers run, on several GPUs. Node by node
 * (earliest finish) first; if that puts most of the writes to the tiles on GPUs, the tiles are
 * laid out over the GPUs 2-D block-cyclically instead, tile (i, j) on GPU (i mod P) Q + (j mod
 * Q), P x Q = G, and each node that writes a tile runs on its GPU (owner computes: a tile moves
 * only to be read), with the P x Q whose busiest GPU has the least work by the model (for a
 * lower triangle, 1 x G: its columns share the work out evenly). Node by node, a tiled
 * Cholesky on 4 H200s moved its tiles from GPU to GPU step after step (31 GB, against 8 GB laid
 * out: the model prices a copy by its link, not by the queue on the copy engine) and took 1.2 x
 * as long as the same program laid out 1 x 4. */
static int decide_layout(weft_graph *g, const weft__cost_model *m, const space *sp, tstate *ts, double *avail,
                         weft__node_place *at) {
  size_t nt = g->tensors.len, nn = g->nodes.len;
  weft_tensor **tens = g->tensors.data;
  weft_node **nodes = g->nodes.data;
  int gpus = sp->per - 1, any = 0;
  for (size_t t = 0; t < nt; t++) any |= ts[t].split && tens[t]->grid != NULL;
  if (!any || gpus < 2) return decide(g, m, sp, ts, avail, at, NULL);
  int *owner = weft__malloc(nt * sizeof *owner);
  tstate *ts0 = weft__malloc(nt * sizeof *ts0);
  double *work = weft__malloc(nn ? nn * sizeof *work : sizeof *work);
  int rc = owner == NULL || ts0 == NULL || work == NULL ? weft__oom("the placement") : WEFT_OK;
  if (rc == WEFT_OK) {
    memcpy(ts0, ts, nt * sizeof *ts0);
    rc = decide(g, m, sp, ts, avail, at, NULL);
  }
  size_t writes = 0, on_gpus = 0;
  for (size_t i = 0; i < nn && rc == WEFT_OK; i++) {
    work[i] = -1;
    if (!(nodes[i]->flags & WEFT__N_AUTO) || writes_tile(nodes[i], ts0) == NULL) continue;
    writes++;
    on_gpus += at[i].device.kind == WEFT_DEVICE_CUDA;
    work[i] = cost_on(m, sp, nodes[i], 1);
  }
  if (rc == WEFT_OK && writes > 0 && 2 * on_gpus > writes) {
    int best_p = 1;
    double best = INFINITY;
    for (int P = 1; P <= gpus; P++) {
      if (gpus % P != 0) continue;
      double load[MAXD] = {0}, busiest = 0;
      for (size_t i = 0; i < nn; i++) {
        if (work[i] < 0) continue;
        const weft_tensor *t = writes_tile(nodes[i], ts0);
        int o = layout_owner(t->view->i, t->view->j, P, gpus);
        busiest = fmax(busiest, load[o] += work[i]);
      }
      if (busiest < best) best = busiest, best_p = P;
    }
    for (size_t t = 0; t < nt; t++)
      owner[t] = tens[t]->view != NULL && ts0[t].split ? layout_owner(tens[t]->view->i, tens[t]->view->j, best_p, gpus) : -1;
    memcpy(ts, ts0, nt * sizeof *ts);
    memset(avail, 0, nt * (size_t)sp->ndev * sizeof *avail);
    memset(at, 0, nn * sizeof *at);
    rc = decide(g, m, sp, ts, avail, at, owner);
  }
  weft__free(owner);
  weft__free(ts0);
  weft__free(work);
  return rc;
}

/* Which partitioned auto tensors split (into ts[].split, the tensor's and its tiles'): each
 * tile gets a home of its own, the device of its last writer as any tensor's, so that a matrix
 * whose tiles several GPUs work on lives spread over them and no one GPU gathers it at every
 * run (a tiled Cholesky on 4 H200s moved 34 GB through one GPU's links that way, against 8 GB
 * with the tiles distributed). On one rank with several GPUs, where no node uses the tensor
 * whole (such a node reads or writes one storage) and it fits in half of what placement may
 * fill of the GPUs (a larger one lives on the host and streams through them: out of core). A
 * split tensor that no longer qualifies (the program changed) is joined again here. */
static int splits(weft_graph *g, const space *sp, tstate *ts) {
  size_t nt = g->tensors.len;
  weft_tensor **tens = g->tensors.data;
  weft_node **nodes = g->nodes.data;
  double room = 0;
  for (int k = 1; k < sp->per; k++) room += capacity_of(g->rt, sp, k);
  for (size_t i = 0; i < g->nodes.len; i++)
    for (int a = 0; a < nodes[i]->nargs; a++) ts[nodes[i]->args[a].t->id].split = -1; /* used whole */
  int rc = WEFT_OK;
  for (size_t t = 0; t < nt && rc == WEFT_OK; t++) {
    weft_tensor *x = tens[t];
    if (x->grid == NULL || weft__tensor_distributed(x)) continue;
    int ok = (x->flags & WEFT__T_AUTODEV) && sp->ndev == sp->per && sp->per >= 3 && ts[t].split == 0 &&
             (double)x->bytes <= room / 2;
    ts[t].split = ok;
    for (int64_t q = 0; q < x->grid->rows * x->grid->cols; q++) ts[x->grid->first + (size_t)q].split = ok;
    if (!ok && x->grid->split) rc = weft__storage_join(x);
  }
  for (size_t t = 0; t < nt; t++) ts[t].split = ts[t].split > 0;
  return rc;
}

/* 1 when placement pl (just decided, homes in ts) puts every node and tensor where the
 * current placement old decided to. */
static int same_decisions(const weft_graph *g, const weft__placement *old, const weft__placement *pl, const tstate *ts) {
  for (size_t i = 0; i < g->nodes.len; i++)
    if (!weft_device_equal(pl->at[i].device, old->decided[i])) return 0;
  for (size_t t = 0; t < g->tensors.len; t++)
    if (ts[t].home != old->home[t]) return 0;
  return 1;
}

int weft__place(weft_graph *g, weft_graph **out) {
  *out = g;
  if (g->nauto == 0) return WEFT_OK;
  int relearnt = g->placement != NULL && g->placement->version == g->version;
  if (relearnt && !learn(g, g->placement)) {
    *out = g->placement->pg;
    return WEFT_OK;
  }
  int rc = weft__graph_analyse(g); /* a cycle is the program's error, found first */
  if (rc != WEFT_OK) return rc;
  /* A distributed tensor's tiles have their places (owner-computes, docs/distributed.md); the
   * placed graph would hold them elsewhere. */
  weft_tensor **all = g->tensors.data;
  for (size_t t = 0; t < g->tensors.len; t++)
    if (weft__tensor_distributed(all[t]))
      return weft__err(WEFT_EINVAL, "tensor %s is distributed (over %d x %d places) and the graph has auto devices: "
                       "auto placement does not place distributed tiles; put the graph's other tensors on devices "
                       "(the distributed tiles' nodes run where the tiles they write live)",
                       weft__tensor_name(all[t]), all[t]->grid->P, all[t]->grid->Q);
  weft_runtime *rt = g->rt;
  if ((rc = weft__place_model_load(rt)) != WEFT_OK) return rc;
  const weft__cost_model *m = rt->place_model;
  /* Every rank's devices: its CPU and its GPUs, as the ranks agreed (runtime.c). */
  const weft__place_facts *pf = &rt->place_facts;
  space sp;
  sp.per = 1 + pf->gpus;
  if ((int64_t)sp.per * rt->nranks > MAXD)
    return weft__err(WEFT_ELIMIT, "auto placement chooses among at most %d devices, and %d rank(s) of a CPU and %d GPU(s) "
                     "have %lld: put the graph's tensors on devices (docs/distributed.md)",
                     MAXD, rt->nranks, sp.per - 1, (long long)sp.per * rt->nranks);
  sp.ndev = sp.per * rt->nranks;
  sp.per_host = pf->per_host > 0 ? pf->per_host : 1;
  sp.peer = pf->peer;
  sp.rt = rt;
  sp.lanes = pf->lanes;
  sp.gpu_bytes = pf->gpu_bytes;
  size_t nt = g->tensors.len, nn = g->nodes.len;
  weft__placement *pl = weft__calloc(1, sizeof *pl);
  tstate *ts = weft__malloc((nt ? nt : 1) * sizeof *ts);
  double *avail = weft__calloc((nt ? nt : 1) * (size_t)sp.ndev, sizeof *avail);
  if (pl != NULL) {
    pl->node = weft__malloc((nn ? nn : 1) * sizeof *pl->node);
    pl->at = weft__calloc(nn ? nn : 1, sizeof *pl->at);
  }
  if (pl == NULL || ts == NULL || avail == NULL || pl->node == NULL || pl->at == NULL) {
    placement_free(pl);
    weft__free(ts);
    weft__free(avail);
    return weft__oom("the placement");
  }
  weft_tensor **tens = g->tensors.data;
  for (size_t t = 0; t < nt; t++) memset(&ts[t], 0, sizeof ts[t]);
  if ((rc = splits(g, &sp, ts)) != WEFT_OK) {
    placement_free(pl);
    weft__free(ts);
    weft__free(avail);
    return rc;
  }
  for (size_t t = 0; t < nt; t++) {
    ts[t].first_dev = ts[t].last_writer = ts[t].home = -1;
    weft_tensor *x = tens[t];
    /* Where the data is: a fixed tensor on its device; an auto one nowhere yet (its first
     * accessor gets it for free), unless it has a place: its home from an earlier placement,
     * or every rank's host where the program gave it contents before its first placement.
     * What every rank knows alike (not whether this rank holds its storage): they must place
     * alike. */
    const weft_tensor *gx = group_of(x), *at = weft__tile_owns_storage(x) ? x : gx;
    if (gx->flags & WEFT__T_EVERY_RANK)
      ts[t].valid = hosts(&sp);
    else if (!(gx->flags & WEFT__T_AUTODEV) || (gx->flags & WEFT__T_PLACED))
      ts[t].valid = BIT(dev_index(&sp, at->device));
  }
  rc = decide_layout(g, m, &sp, ts, avail, pl->at);
  weft__free(avail);
  if (rc == WEFT_OK) {
    pl->decided = weft__malloc((nn ? nn : 1) * sizeof *pl->decided);
    pl->home = weft__malloc((nt ? nt : 1) * sizeof *pl->home);
    if (pl->decided == NULL || pl->home == NULL) rc = weft__oom("the placement");
    for (size_t i = 0; i < nn && rc == WEFT_OK; i++) pl->decided[i] = pl->at[i].device;
    for (size_t t = 0; t < nt && rc == WEFT_OK; t++) pl->home[t] = ts[t].home;
  }
  /* Measured times moved a price but no decision: the placed graph stays, with its plan and its
   * storage (a tiled Cholesky on auto was placed, planned and had its buffers pinned anew at
   * every run on an H100: 15.6 ms of 283; its panel kernels take 1 to 5 times their price by
   * what runs beside them). The new prices are the ones the next runs are compared with. */
  if (rc == WEFT_OK && relearnt && same_decisions(g, g->placement, pl, ts)) {
    weft__placement *old = g->placement;
    for (size_t i = 0; i < nn; i++) {
      weft_device d = old->at[i].device; /* a copy's: where the lowering runs it */
      old->at[i] = pl->at[i];
      old->at[i].device = d;
    }
    placement_free(pl);
    weft__free(ts);
    *out = old->pg;
    return WEFT_OK;
  }
  /* Homes into the program's tensors (contents moved where they exist; a tensor split now
   * into its tiles' homes), then the lowering. */
  for (size_t t = 0; t < nt && rc == WEFT_OK; t++) {
    weft_tensor *x = tens[t];
    if (!ts[t].split || x->grid == NULL || x->grid->split) continue;
    weft_device *at = weft__malloc((size_t)(x->grid->rows * x->grid->cols) * sizeof *at);
    if (at == NULL) {
      rc = weft__oom("the placement");
      break;
    }
    for (int64_t q = 0; q < x->grid->rows * x->grid->cols; q++) at[q] = dev_of(&sp, ts[x->grid->first + (size_t)q].home);
    rc = weft__storage_split(x, at);
    weft__free(at);
  }
  uint8_t *first = rc == WEFT_OK ? weft__calloc(nt ? nt : 1, 1) : NULL; /* 1: read first, 2: written whole first */
  if (rc == WEFT_OK && first == NULL) rc = weft__oom("the placement");
  for (size_t i = 0; i < nn && rc == WEFT_OK; i++) {
    const weft_node *n = ((weft_node **)g->nodes.data)[i];
    for (int a = 0; a < n->nargs; a++) {
      uint32_t t = n->args[a].t->id;
      /* A tile's access touches part of its parent: the parent's contents live from then on. */
      if (n->args[a].t->view != NULL && first[n->args[a].t->view->parent->id] == 0) first[n->args[a].t->view->parent->id] = 1;
      int reads = 0;
      for (int q = 0; q < n->nargs; q++) reads |= n->args[q].t->id == t && (n->args[q].mode & WEFT_READ);
      if (first[t] == 0) first[t] = reads ? 1 : 2;
    }
  }
  for (size_t t = 0; t < nt && rc == WEFT_OK; t++)
    if (group_of(tens[t])->flags & WEFT__T_AUTODEV) rc = move_home(tens[t], dev_of(&sp, ts[t].home), first[t] == 2);
  weft__free(first);
  if (rc == WEFT_OK) rc = lower(g, pl, ts, &sp);
  weft__free(ts);
  if (rc != WEFT_OK) {
    placement_free(pl);
    return rc;
  }
  /* The placement replaced is kept while a run handle of its placed graph lives (its
   * statistics may still be asked for); older ones whose handles are all gone go now. */
  pl->retired = g->placement;
  for (weft__placement **q = &pl->retired; *q != NULL;) {
    weft__placement *old = *q;
    if (atomic_load_explicit(&old->pg->handles, memory_order_acquire) != 0) {
      q = &old->retired;
      continue;
    }
    *q = old->retired;
    old->retired = NULL;
    placement_free(old);
  }
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
