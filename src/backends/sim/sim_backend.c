/* sim_backend.c — the simulated machine behind the backend table: virtual GPUs (and a virtual
 * host) described by a machine profile, on which the unchanged scheduler runs any graph in
 * virtual time.
 *
 * One instance serves both device kinds. In a simulating runtime this backend stands for the
 * CPU as well as for the GPUs (runtime.c registers it for both), so every node of a graph is
 * on the simulated machine and the virtual timeline covers all of it: a CPU node waiting for a
 * GPU result, and a GPU node waiting for a CPU one, are both priced by the profile.
 *
 * The protocol, per run:
 *   plan      the planner (src/sched/plan/) plans the graph for the machine this backend
 *             describes (gpu_target), exactly as it does for real GPUs: streams, events, the
 *             memory window and its claims, turns, batches. The simulator prices that plan:
 *             each node gets its model (weft__sim_node) from the cost model (src/sched/cost/):
 *             its duration and share of the device, its host submission, and the temporaries
 *             it allocates, uses and frees.
 *   launch    the dispatcher runs the graph for real: each node is launched in dependency
 *             order by the worker pool, exactly as on real devices. Launch marks the node as
 *             run and, in compute mode, computes it on the CPU (GPU tensors are host memory
 *             then), so the oracle can check results; otherwise it only returns.
 *   drain     once every node is launched or skipped, des.c replays the plan in virtual time
 *             (a discrete-event simulation of the host's submissions, the streams, engines,
 *             copy engines and CPU workers of the profile) and reports each node's virtual
 *             interval and the devices' memory to the run's timing records, so that the run's
 *             statistics, trace and timeline are those of the simulated machine.
 *
 * Why the virtual schedule is not taken from the order in which the workers happened to
 * launch nodes: that order belongs to the machine running the simulation (its cores, its
 * thread timing), not to the machine simulated. The discrete-event replay makes the virtual
 * timeline a function of the graph, the plan and the profile only — the same on every run
 * and every machine, which is what CI's scheduling-property tests need.
 *
 * Data: without compute mode no result is computed; a GPU tensor then holds no data (reading
 * it is an error that says so) and writes to it are accepted and dropped. Compute mode is the
 * runtime flag WEFT_RUNTIME_SIM_COMPUTE or the environment variable WEFT_SIM_COMPUTE=1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backends/sim/sim_internal.h"
#include "backends/backend.h"
#include "sched/sched.h"
#include "weft/sim.h"

/* ---- the machine ------------------------------------------------------------------------- */

static int sim_init(weft__backend *b, const weft_runtime_options *o) {
  weft__sim *m = weft__calloc(1, sizeof *m);
  if (m == NULL) return weft__oom("the simulated machine");
  int rc = weft__sim_profile_load(o->simulate, &m->cost.prof);
  if (rc != WEFT_OK) {
    weft__free(m);
    return rc;
  }
  /* max_gpus: of the machine, or of each rank in a job of several (below). */
  if (o->sim_ranks <= 1 && o->max_gpus >= 0 && o->max_gpus < m->cost.prof.ngpus) m->cost.prof.ngpus = o->max_gpus;
  const char *env = getenv("WEFT_SIM_COMPUTE");
  m->compute = (o->flags & WEFT_RUNTIME_SIM_COMPUTE) != 0 || (env != NULL && strcmp(env, "1") == 0);
  int cores = m->cost.prof.host.cores;
  m->cost.host_lanes = o->cpu_workers > 0 ? o->cpu_workers : cores;
  /* Several simulated ranks: each its own workers; ranks sharing a host share its cores, as
   * real ones do (src/sched/runtime.c): its share less one for its progress thread. */
  m->ranks = o->sim_ranks > 1 ? o->sim_ranks : 1;
  m->per_host = weft__sim_ranks_per_host(o);
  if (m->ranks > 1 && o->cpu_workers == 0 && m->per_host > 1)
    m->cost.host_lanes = cores / m->per_host - 1 > 1 ? cores / m->per_host - 1 : 1;
  /* ... and its share of the host's GPUs (none where more ranks than GPUs share a host): rank
   * r's GPU i is the plan's slot r * rank_gpus + i (weft__gpu_slot). */
  m->rank_gpus = m->ranks > 1 ? m->cost.prof.ngpus / m->per_host : m->cost.prof.ngpus;
  if (m->ranks > 1 && o->max_gpus >= 0 && o->max_gpus < m->rank_gpus) m->rank_gpus = o->max_gpus;
  m->slots = m->ranks * m->rank_gpus;
  /* The plan numbers GPUs and the report lanes in fields of fixed width (WEFT__LANE: 4096
   * devices, 65536 lanes of a kind). */
  if (m->slots > 4096 || (m->ranks > 1 && (int64_t)m->ranks * (m->cost.host_lanes + 1) > 65536)) {
    int ranks = m->ranks, gpus = m->rank_gpus, lanes = m->cost.host_lanes;
    weft__free(m);
    return weft__err(WEFT_EINVAL, "sim_ranks %d: with %d GPU(s) and %d CPU worker(s) a rank the job has %lld GPUs and "
                     "%lld CPU lanes (workers and a message lane a rank); the simulator holds up to 4096 GPUs and "
                     "65536 CPU lanes", ranks, gpus, lanes, (long long)ranks * gpus, (long long)ranks * (lanes + 1));
  }
  if (m->ranks > 1) {
    b->rt->rank_lanes = m->cost.host_lanes + 1; /* the report's lanes: workers, messages */
    b->rt->rank_gpus = m->rank_gpus;
  }
  /* A CPU product runs in tiles on the workers, as on a real runtime (src/sched/runtime.c). */
  m->cost.blas_threads = o->blas_threads > 0 && o->blas_threads < m->cost.host_lanes ? o->blas_threads
                                                                                   : m->cost.host_lanes;
  /* Batches as the CUDA backend makes them (off under WEFT_LAUNCH_BLOCKING or
   * WEFT_CUDA_BATCH=0), where the profile prices them. */
  const char *batch = getenv("WEFT_CUDA_BATCH");
  m->turns = !(o->flags & WEFT_RUNTIME_LAUNCH_BLOCKING);
  atomic_init(&m->batch, !(o->flags & WEFT_RUNTIME_LAUNCH_BLOCKING) && !(batch != NULL && strcmp(batch, "0") == 0) &&
                             m->cost.prof.gpu.batch_op_s > 0);
  b->state = m;
  return WEFT_OK;
}

static void sim_fini(weft__backend *b) {
  weft__free(b->state);
  b->state = NULL;
}

static const weft__sim *machine(const weft__backend *b) { return b->state; }

static int sim_device_count(const weft__backend *b) { return machine(b)->rank_gpus; }

static int sim_device_info(const weft__backend *b, int index, weft_device_info *out) {
  const weft__sim_profile *p = &machine(b)->cost.prof;
  out->simulated = 1;
  if (out->device.kind == WEFT_DEVICE_CPU) {
    snprintf(out->name, sizeof out->name, "%.100s (simulated)", p->host.name);
    out->memory_bytes = p->host.memory_bytes;
    out->multiprocessors = machine(b)->cost.host_lanes;
    return WEFT_OK;
  }
  out->ordinal = index;
  snprintf(out->name, sizeof out->name, "%.100s (simulated)", p->gpu.name);
  out->memory_bytes = p->gpu.memory_bytes;
  out->copy_engines = p->gpu.copy_engines;
  out->compute_major = p->gpu.cc_major;
  out->compute_minor = p->gpu.cc_minor;
  out->multiprocessors = p->gpu.multiprocessors;
  return WEFT_OK;
}

static int sim_can_access_peer(const weft__backend *b, int a, int c) {
  /* a and c are the plan's slots: peers on one host (the GPUs of ranks on one host copy to
   * each other directly: weft__gpu_direct) */
  const weft__sim *m = machine(b);
  int host = m->rank_gpus * m->per_host;
  return a != c && m->cost.prof.peer_access && (host <= 0 || a / host == c / host);
}

/* The simulated host's GPUs are peers to every rank on it (sim_can_access_peer). */
static int sim_ipc_capable(const weft__backend *b) { return machine(b)->cost.prof.peer_access; }

/* ---- storage: host memory in compute mode, nothing otherwise ------------------------------ */

static int sim_alloc(weft__backend *b, weft_tensor *t) {
  if (!machine(b)->compute) return WEFT_OK; /* no storage: the tensor holds no data */
  t->data = weft__aligned_alloc(64, t->bytes);
  if (t->data == NULL)
    return weft__err(WEFT_ENOMEM, "out of host memory for simulated device tensor %s (%zu bytes)",
                     weft__tensor_name(t), t->bytes);
  t->storage_kind = WEFT__S_DEVICE;
  weft__storage_owned(t);
  return WEFT_OK;
}

static void sim_free(weft__backend *b, weft_tensor *t) {
  (void)b;
  weft__aligned_free(t->data);
}

static int sim_read(weft__backend *b, weft_tensor *t, void *dst) {
  char d[32];
  if (t->data == NULL)
    return weft__err(WEFT_ENOTSUP,
                     "tensor %s lives on %s of a simulated machine, which models time only and "
                     "computes no data; simulate with WEFT_SIM_COMPUTE=1 (or the runtime flag "
                     "WEFT_RUNTIME_SIM_COMPUTE) to read results",
                     weft__tensor_name(t), weft_device_str(t->device, d, sizeof d));
  (void)b;
  memcpy(dst, t->data, t->bytes);
  return WEFT_OK;
}

static int sim_write(weft__backend *b, weft_tensor *t, const void *src) {
  (void)b;
  if (t->data != NULL) memcpy(t->data, src, t->bytes);
  return WEFT_OK;
}

static int sim_init_tensor(weft__backend *b, weft_tensor *t) {
  (void)b;
  if (t->data != NULL) weft__cpu_fill(t->data, t->dtype, t->numel, weft__tensor_init(t));
  return WEFT_OK;
}

/* Host tensors that GPUs copy to or from are "pinned": the model prices their copies at the
 * pinned bandwidth, as the CUDA backend pins them. The memory itself is ordinary in compute
 * mode. Without compute nothing reads or writes their contents (the plan marks their
 * initialiser as applied, see claim_host_tensors), so large ones get address space only: an
 * anonymous mapping that commits no memory until written. A simulation of 64 GPUs with their
 * inputs and results on the host then costs this machine no host memory for them. A header
 * before each block says how it was made. */
enum { HOST_HDR = 64, LAZY_MIN = 1 << 16 };
#define HOST_MAGIC 0x5349484fu /* "SIHO" */

typedef struct host_hdr {
  uint32_t magic;
  uint32_t mapped;
  size_t size; /* of the whole block, header included */
} host_hdr;

static void *sim_host_alloc(weft__backend *b, size_t bytes) {
  size_t size = bytes + HOST_HDR;
  char *base;
  int mapped = !machine(b)->compute && bytes >= LAZY_MIN;
  if (mapped) {
    base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return NULL;
  } else if ((base = weft__aligned_alloc(64, size)) == NULL) {
    return NULL;
  }
  host_hdr *h = (host_hdr *)base;
  h->magic = HOST_MAGIC;
  h->mapped = (uint32_t)mapped;
  h->size = size;
  return base + HOST_HDR;
}

static void sim_host_free(weft__backend *b, void *p) {
  (void)b;
  if (p == NULL) return;
  host_hdr *h = (host_hdr *)((char *)p - HOST_HDR);
  WEFT_ASSERT(h->magic == HOST_MAGIC);
  if (h->mapped)
    munmap(h, h->size);
  else
    weft__aligned_free(h);
}

/* ---- the plan, priced ------------------------------------------------------------------------ */

static int is_gpu(weft_device d) { return d.kind == WEFT_DEVICE_CUDA; }

static int sim_gpu_target(const weft__backend *b, weft__gpu_target *out) {
  const weft__sim *m = machine(b);
  const weft__sim_profile *p = &m->cost.prof;
  out->batch = atomic_load(&m->batch);
  out->turns = m->turns;
  out->window_count = WEFT__PLAN_WINDOW_COUNT;
  out->window_min_bytes = (size_t)WEFT__PLAN_WINDOW_MIN_MIB << 20;
  for (int d = 0; d < out->ngpus; d++) {
    out->dev[d].compute = p->gpu.compute_streams;
    out->dev[d].sms = p->gpu.multiprocessors;
  }
  return WEFT_OK;
}

weft__sim_plan *weft__sim_plan_of(const weft__backend *b, const weft__plan *p) {
  return p->bstate[b->index];
}

static void sim_plan_free_state(weft__sim_plan *sp) {
  if (sp == NULL) return;
  weft__free(sp->nodes);
  weft__free(sp->ran);
  weft__free(sp->temp_bytes);
  weft__free(sp->temp_dev);
  weft__free(sp->temp_users);
  weft__free(sp->alloc_off);
  weft__free(sp->alloc_ids);
  weft__free(sp->use_off);
  weft__free(sp->use_ids);
  weft__free(sp->claim_off);
  weft__free(sp->claim_ids);
  weft__free(sp->resident);
  weft__free(sp->start);
  weft__free(sp->end);
  weft__free(sp->cpu_lane);
  weft__free(sp->peak);
  weft__free(sp);
}

/* Each GPU node's stream, engine and lane, from the plan (src/sched/plan/lanes.c). A copy
 * between GPUs without peer access is staged through the host: it is modelled on the stream it
 * starts on, the source's D2H stream, at the price of both halves (cost.c). */
static void place_nodes(const weft__sim *m, weft__sim_plan *sp, const weft__plan *p) {
  int S = m->cost.prof.gpu.compute_streams, ce = m->cost.prof.gpu.copy_engines;
  for (uint32_t i = 0; i < p->n; i++) {
    weft__sim_node *sn = &sp->nodes[i];
    const weft__gnode *g = p->gpu.node != NULL ? &p->gpu.node[i] : NULL;
    if (g == NULL || g->dev < 0) {
      sn->dev = -1;
      continue;
    }
    sn->dev = g->start_dev;
    sn->stream = g->start_stream;
    if (sn->stream < S) {
      sn->engine = 0;
      sn->lane = WEFT__LANE(WEFT__LANE_COMPUTE, sn->dev, sn->stream);
      continue;
    }
    int c = sn->stream - S;
    int role = c == WEFT__COPY_H2D ? WEFT__LANE_H2D : c == WEFT__COPY_D2H ? WEFT__LANE_D2H : WEFT__LANE_PEER;
    sn->engine = (uint8_t)(1 + WEFT__MIN(c, ce - 1));
    sn->lane = WEFT__LANE(role, sn->dev, 0);
  }
}

/* Each node's price (cost.c): its duration, the share of the device it needs, and for a GPU node
 * the host's submission, counting an event for each predecessor on another GPU stream. */
static void price_nodes(const weft__sim *m, weft__sim_plan *sp, const weft__plan *p) {
  sp->all_gpu = p->n > 0;
  for (uint32_t i = 0; i < p->n; i++) {
    const weft_node *nd = p->x[i].node;
    weft__sim_node *sn = &sp->nodes[i];
    double share = 0;
    sn->cost = sn->dev >= 0 ? weft__cost_gpu(&m->cost, nd, &share) : weft__cost_cpu(&m->cost, nd);
    /* At least one SM's worth (copy engines ignore it). */
    sn->share = WEFT__MIN(1.0, WEFT__MAX(share, 1.0 / m->cost.prof.gpu.multiprocessors));
    sn->is_copy = nd->kind == WEFT__OP_COPY;
    if (sn->dev < 0) {
      sp->all_gpu = 0;
      sn->rank = nd->device.rank;
      sn->cost_wide = weft__cost_cpu_wide(&m->cost, nd);
      sn->splits = (uint8_t)weft__cost_cpu_splits(nd);
      if (sn->is_copy && nd->args[0].t->device.rank != nd->args[1].t->device.rank) {
        /* A message: the sender's link, its latency and bandwidth (ranks of one host share
         * memory; hosts are joined by the network). */
        int from = nd->args[0].t->device.rank, to = nd->args[1].t->device.rank;
        const weft__sim_link *l = weft__sim_rank_link(&m->cost.prof, m->per_host, from, to);
        sn->msg = 1;
        sn->rank = from;
        sn->cost = l->latency_s + (double)nd->args[0].t->bytes / l->bandwidth;
      }
      continue;
    }
    int events = 0;
    for (uint32_t e = p->x[i].pred_begin; e < p->x[i].pred_end; e++) {
      const weft__sim_node *sq = &sp->nodes[p->pred[e]];
      if (sq->dev >= 0 && (sq->dev != sn->dev || sq->stream != sn->stream)) events++;
    }
    weft__cost_submit(&m->cost, nd, events, &sn->submit, &sn->submit_min);
  }
}

/* The plan's batches (src/sched/plan/batches.c): a node of a batch costs the host batch_node_s
 * (its last node also a launch) and the device batch_op_s (its first node also the kernel's
 * kernel_s); des.c queues a batch's nodes on their stream when its last node is enqueued. The
 * plan batches only where the profile prices batches (sim_init). */
static void price_batches(const weft__sim *m, weft__sim_plan *sp, const weft__plan *p) {
  const weft__sim_gpu *g = &m->cost.prof.gpu;
  for (uint32_t i = 0; i < p->n; i++) sp->nodes[i].batch_last = sp->nodes[i].batch_next = sp->nodes[i].batch_first = UINT32_MAX;
  for (uint32_t k = 0; k < p->gpu.nbatches; k++) {
    const weft__gbatch *bt = &p->gpu.batches[k];
    for (uint32_t q = bt->first;; q = p->succ[p->x[q].succ_begin]) {
      weft__sim_node *x = &sp->nodes[q];
      x->batch_first = bt->first;
      x->batch_last = bt->last;
      x->batch_next = q == bt->last ? UINT32_MAX : p->succ[p->x[q].succ_begin];
      x->cost = weft__cost_batch_op(&m->cost, p->x[q].node, q == bt->first);
      /* The events of the first node stay; a node of a batch is dispatched, not launched. */
      x->submit += g->batch_node_s - (q == bt->last ? 0 : g->launch_s);
      if (q == bt->last) break;
    }
  }
}

/* Temporaries: the plan's (src/sched/plan/memory.c), numbered densely here, with their bytes,
 * device and users; per node, the temporaries it allocates, uses and, by the window's claims,
 * frees as it starts. GPU tensors that are not temporaries (with storage of their own) are
 * resident. */
static int price_memory(weft__sim_plan *sp, const weft__plan *p) {
  weft_graph *g = p->graph;
  size_t nt = g->tensors.len;
  weft_tensor **ts = g->tensors.data;
  uint32_t n = p->n;
  const weft__gpu_plan *gp = &p->gpu;
  uint32_t *tid = weft__malloc((nt ? nt : 1) * sizeof *tid);
  if (tid == NULL) return weft__oom("the simulator's memory plan");
  uint32_t ntemps = 0;
  for (size_t t = 0; t < nt; t++) {
    tid[t] = UINT32_MAX;
    int slot = is_gpu(ts[t]->device) ? weft__gpu_slot(g->rt, ts[t]->device) : -1;
    if (slot < 0 || slot >= sp->ngpus) continue;
    /* A tile in its parent's storage is counted there (a placed graph's twin views a tensor
     * of the program, not of this graph: it counts here). */
    const weft_tensor *x = ts[t];
    if (x->view != NULL && x->view->parent->graph == g && !weft__tile_owns_storage(x)) continue;
    if (gp->temp != NULL && gp->temp[t])
      tid[t] = ntemps++;
    else
      sp->resident[slot] += ts[t]->bytes;
  }
  size_t ntt = ntemps ? ntemps : 1;
  sp->ntemps = ntemps;
  sp->temp_bytes = weft__calloc(ntt, sizeof *sp->temp_bytes);
  sp->temp_dev = weft__calloc(ntt, sizeof *sp->temp_dev);
  sp->temp_users = weft__calloc(ntt, sizeof *sp->temp_users);
  sp->alloc_off = weft__calloc((size_t)n + 1, sizeof *sp->alloc_off);
  sp->use_off = weft__calloc((size_t)n + 1, sizeof *sp->use_off);
  sp->claim_off = weft__calloc((size_t)n + 1, sizeof *sp->claim_off);
  uint32_t *stamp = weft__malloc(ntt * sizeof *stamp);
  int rc = WEFT_OK;
  if (!sp->temp_bytes || !sp->temp_dev || !sp->temp_users || !sp->alloc_off || !sp->use_off || !sp->claim_off ||
      !stamp) {
    rc = weft__oom("the simulator's memory plan");
    goto done;
  }
  for (size_t t = 0; t < nt; t++)
    if (tid[t] != UINT32_MAX) {
      sp->temp_bytes[tid[t]] = ts[t]->bytes;
      sp->temp_dev[tid[t]] = weft__gpu_slot(g->rt, ts[t]->device);
    }
  /* Uses: every node that accesses a temporary, once per node; counted, then filled. */
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t t = 0; t < ntemps; t++) stamp[t] = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
      const weft_node *nd = p->x[i].node;
      uint32_t u = sp->use_off[i];
      for (int arg = 0; arg < nd->nargs; arg++) {
        uint32_t id = tid[nd->args[arg].t->id];
        if (id == UINT32_MAX || stamp[id] == i) continue;
        stamp[id] = i;
        if (pass == 0) {
          sp->temp_users[id]++;
          sp->use_off[i + 1]++;
        } else {
          sp->use_ids[u++] = id;
        }
      }
      if (pass == 0 && gp->node != NULL) {
        sp->alloc_off[i + 1] = gp->node[i].alloc_e - gp->node[i].alloc_b;
        sp->claim_off[i + 1] = gp->node[i].free_e - gp->node[i].free_b;
      }
    }
    if (pass == 0) {
      for (uint32_t i = 0; i < n; i++) {
        sp->use_off[i + 1] += sp->use_off[i];
        sp->alloc_off[i + 1] += sp->alloc_off[i];
        sp->claim_off[i + 1] += sp->claim_off[i];
      }
      sp->use_ids = weft__malloc((sp->use_off[n] ? sp->use_off[n] : 1) * sizeof *sp->use_ids);
      sp->alloc_ids = weft__malloc((sp->alloc_off[n] ? sp->alloc_off[n] : 1) * sizeof *sp->alloc_ids);
      sp->claim_ids = weft__malloc((sp->claim_off[n] ? sp->claim_off[n] : 1) * sizeof *sp->claim_ids);
      if (sp->use_ids == NULL || sp->alloc_ids == NULL || sp->claim_ids == NULL) {
        rc = weft__oom("the simulator's memory plan");
        goto done;
      }
    }
  }
  for (uint32_t i = 0; i < n && gp->node != NULL; i++) {
    const weft__gnode *x = &gp->node[i];
    for (uint32_t k = x->alloc_b; k < x->alloc_e; k++) sp->alloc_ids[sp->alloc_off[i] + k - x->alloc_b] = tid[gp->lists[k]];
    for (uint32_t k = x->free_b; k < x->free_e; k++) sp->claim_ids[sp->claim_off[i] + k - x->free_b] = tid[gp->lists[k]];
  }
done:
  weft__free(tid);
  weft__free(stamp);
  return rc;
}

/* Without compute mode, the host side of every large host<->GPU copy that has no storage yet
 * is the simulator's to give (sim_host_alloc: untouched, zero-reading pages) and nothing
 * computes its contents: its initialiser is marked as applied so that materialising it writes
 * nothing. Small ones are initialised as usual, so no host tensor ever reads as garbage. */
static void claim_host_tensors(const weft__sim *m, const weft__plan *p) {
  if (m->compute) return;
  for (uint32_t i = 0; i < p->n; i++) {
    const weft_node *nd = p->x[i].node;
    if (nd->kind != WEFT__OP_COPY || !weft__cost_crosses(nd)) continue;
    for (int a = 0; a < 2; a++) {
      weft_tensor *t = nd->args[a].t;
      if (!is_gpu(t->device) && t->storage_kind == WEFT__S_NONE && t->bytes >= LAZY_MIN)
        t->initialised = 1;
    }
  }
}

static int sim_plan(weft__backend *b, weft__plan *p) {
  const weft__sim *m = machine(b);
  uint32_t n = p->n;
  int ng = m->slots;
  weft__sim_plan *sp = weft__calloc(1, sizeof *sp);
  if (sp == NULL) return weft__oom("the simulator's plan");
  size_t nn = n ? n : 1, ngg = ng ? (size_t)ng : 1;
  sp->n = n;
  sp->ngpus = ng;
  sp->nodes = weft__calloc(nn, sizeof *sp->nodes);
  sp->ran = weft__calloc(nn, 1);
  sp->start = weft__calloc(nn, sizeof *sp->start);
  sp->end = weft__calloc(nn, sizeof *sp->end);
  sp->cpu_lane = weft__calloc(nn, sizeof *sp->cpu_lane);
  sp->resident = weft__calloc(ngg, sizeof *sp->resident);
  sp->peak = weft__calloc(ngg, sizeof *sp->peak);
  int rc = WEFT_OK;
  if (!sp->nodes || !sp->ran || !sp->start || !sp->end || !sp->cpu_lane || !sp->resident || !sp->peak) {
    rc = weft__oom("the simulator's plan");
    goto fail;
  }
  place_nodes(m, sp, p);
  price_nodes(m, sp, p);
  price_batches(m, sp, p);
  if ((rc = price_memory(sp, p)) != WEFT_OK) goto fail;
  claim_host_tensors(m, p);
  p->bstate[b->index] = sp;
  return WEFT_OK;
fail:
  sim_plan_free_state(sp);
  return rc;
}

static void sim_plan_free(weft__backend *b, weft__plan *p) {
  sim_plan_free_state(p->bstate[b->index]);
  p->bstate[b->index] = NULL;
}

/* ---- runs ------------------------------------------------------------------------------------ */

static int sim_run_begin(weft__backend *b, weft__plan *p, weft_run *run) {
  (void)run;
  weft__sim_plan *sp = weft__sim_plan_of(b, p);
  if (sp == NULL) return WEFT_OK;
  memset(sp->ran, 0, sp->n ? sp->n : 1);
  sp->runs++;
  return WEFT_OK;
}

static int sim_launch(weft__backend *b, weft_kernel_ctx *ctx) {
  const weft__sim *m = machine(b);
  weft_node *n = ctx->node;
  weft__sim_plan *sp = weft__sim_plan_of(b, ctx->plan);
  sp->ran[ctx->index] = 1;
  /* (A user op without a kernel for its node's device is refused when the node is added.) */
  if (n->kind == WEFT__OP_USER) {
    const weft_op_desc *op = &n->user_op->desc;
    if (m->compute && op->cpu == NULL)
      return weft_ctx_fail(ctx, "the simulator computes results on the CPU (WEFT_SIM_COMPUTE) "
                           "but op '%s' has no CPU kernel; simulate without computing to "
                           "model its time only", op->name);
  }
  if (!m->compute) return WEFT_OK;
  return weft__cpu_exec(ctx);
}

static double gb(uint64_t bytes) { return (double)bytes * 1e-9; }

/* Simulates the run that has just been dispatched. A plan that does not fit a simulated
 * device fails the run as the device would, naming the node whose allocation did not fit. */
static int sim_run_drain(weft__backend *b, weft__plan *p, weft_run *run) {
  const weft__sim *m = machine(b);
  weft__sim_plan *sp = weft__sim_plan_of(b, p);
  if (sp == NULL) return WEFT_OK;
  int rc = weft__sim_simulate(m, sp, p, run, weft__run_launch_ns(run));
  if (rc != WEFT_OK) {
    /* Only the simulation's scratch memory ran out: the run itself stands, without figures. */
    sp->res.makespan_s = NAN;
    return WEFT_OK;
  }
  const weft__sim_result *r = &sp->res;
  if (r->oom_dev < 0) return WEFT_OK;
  char msg[400], dev[48];
  weft_device_str(weft__gpu_of_slot(b->rt, r->oom_dev), dev, sizeof dev); /* a rank's GPU in a job of several */
  if (r->oom_node == UINT32_MAX)
    snprintf(msg, sizeof msg,
             "%s of the simulated machine has %.2f GB, but the tensors that live on it take "
             "%.2f GB",
             dev, gb(m->cost.prof.gpu.memory_bytes), gb(r->oom_total));
  else
    snprintf(msg, sizeof msg,
             "%s of the simulated machine (%.2f GB) runs out of memory: this node's %.3f GB "
             "would bring it to %.2f GB (%.2f GB of tensors that live on it, the rest "
             "temporaries still in use)",
             dev, gb(m->cost.prof.gpu.memory_bytes), gb(r->oom_asked), gb(r->oom_total),
             gb(sp->resident[r->oom_dev]));
  weft__sched_drained(run, r->oom_node, WEFT_EDEVMEM, msg);
  return WEFT__PENDING;
}

/* Batches as weft_runtime_set_batching makes them on GPUs, where the profile prices them. */
static void sim_set_batching(weft__backend *b, int on) {
  weft__sim *m = b->state;
  atomic_store(&m->batch, on != 0 && m->cost.prof.gpu.batch_op_s > 0);
}

static int sim_blas_threads(const weft__backend *b) { return machine(b)->cost.blas_threads; }

const weft__backend_vtable weft__sim_backend = {
    .version = WEFT__BACKEND_VERSION,
    .name = "sim",
    .device_kind = WEFT_DEVICE_CUDA,
    .flags = WEFT__BACKEND_SIMULATED,
    .init = sim_init,
    .fini = sim_fini,
    .device_count = sim_device_count,
    .device_info = sim_device_info,
    .can_access_peer = sim_can_access_peer,
    .ipc_capable = sim_ipc_capable,
    .alloc = sim_alloc,
    .free = sim_free,
    .read = sim_read,
    .write = sim_write,
    .init_tensor = sim_init_tensor,
    .plan = sim_plan,
    .plan_free = sim_plan_free,
    .run_begin = sim_run_begin,
    .launch = sim_launch,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .run_drain = sim_run_drain,
    .gpu_target = sim_gpu_target,
    .set_batching = sim_set_batching,
    .blas_threads = sim_blas_threads,
};

/* ---- public: weft/sim.h ---------------------------------------------------------------------- */

static weft__backend *sim_of(const weft_runtime *rt) {
  weft__backend *b = weft__runtime_backend(rt, WEFT_DEVICE_CPU);
  return b != NULL && b->vt == &weft__sim_backend ? b : NULL;
}

int weft_sim_active(const weft_runtime *rt) { return sim_of(rt) != NULL; }

int weft_sim_computes(const weft_runtime *rt) {
  const weft__backend *b = sim_of(rt);
  return b != NULL && machine(b)->compute;
}

/* The simulator's results of `run`, if they are still the latest of its graph. */
static int results_of(const weft_run *run, const char *what, const weft__backend **bo,
                      const weft__sim_plan **out) {
  const weft__plan *p = NULL;
  int rc = weft__run_latest_plan(run, what, &p);
  if (rc != WEFT_OK) return rc;
  const weft__backend *b = sim_of(p->graph->rt);
  if (b == NULL)
    return weft__err(WEFT_EINVAL, "%s: the run's runtime does not simulate a machine", what);
  const weft__sim_plan *sp = weft__sim_plan_of(b, p);
  if (sp == NULL) return weft__err(WEFT_ESTATE, "%s: the run has no simulation results", what);
  if (isnan(sp->res.makespan_s))
    return weft__err(WEFT_ENOMEM, "%s: the simulation of this run ran out of memory", what);
  *bo = b;
  *out = sp;
  return WEFT_OK;
}

int weft_sim_run_summary(const weft_run *run, weft_sim_summary *out) {
  const weft__backend *b = NULL;
  const weft__sim_plan *sp = NULL;
  int rc = results_of(run, "weft_sim_run_summary", &b, &sp);
  if (rc != WEFT_OK) return rc;
  if (out == NULL) return weft__err(WEFT_EINVAL, "weft_sim_run_summary: out is NULL");
  const weft__sim_result *r = &sp->res;
  out->makespan_s = r->makespan_s;
  out->critical_path_s = r->critical_path_s;
  out->copy_s = r->copy_s;
  out->hidden_copy_s = r->hidden_copy_s;
  out->hidden_copy_fraction = r->copy_s > 0 ? r->hidden_copy_s / r->copy_s : -1;
  out->nodes_run = r->nodes_run;
  out->replayed = r->replayed;
  return WEFT_OK;
}

int weft_sim_peak_bytes(const weft_run *run, weft_device device, uint64_t *out) {
  const weft__backend *b = NULL;
  const weft__sim_plan *sp = NULL;
  char d[32];
  int rc = results_of(run, "weft_sim_peak_bytes", &b, &sp);
  if (rc != WEFT_OK) return rc;
  if (out == NULL) return weft__err(WEFT_EINVAL, "weft_sim_peak_bytes: out is NULL");
  int slot = device.kind == WEFT_DEVICE_CUDA && device.index >= 0 && device.rank >= 0 &&
                     device.index < machine(b)->rank_gpus && device.rank < weft_runtime_ranks(b->rt)
                 ? weft__gpu_slot(b->rt, device)
                 : -1;
  if (slot < 0 || slot >= sp->ngpus)
    return weft__err(WEFT_EDEVICE, "weft_sim_peak_bytes: %s is not a simulated GPU of this runtime",
                     weft_device_str(device, d, sizeof d));
  *out = sp->peak[slot];
  return WEFT_OK;
}

int weft_sim_node_interval(const weft_run *run, size_t node_id, double *start_s, double *end_s) {
  const weft__backend *b = NULL;
  const weft__sim_plan *sp = NULL;
  int rc = results_of(run, "weft_sim_node_interval", &b, &sp);
  if (rc != WEFT_OK) return rc;
  if (node_id >= sp->n || start_s == NULL || end_s == NULL)
    return weft__err(WEFT_EINVAL, "weft_sim_node_interval: node %zu out of range (%u nodes) or NULL output",
                     node_id, sp->n);
  *start_s = sp->start[node_id];
  *end_s = sp->end[node_id];
  return WEFT_OK;
}

int weft_sim_profile_save(const weft_runtime *rt, const char *path) {
  const weft__backend *b = sim_of(rt);
  if (b == NULL) return weft__err(WEFT_EINVAL, "weft_sim_profile_save: the runtime does not simulate a machine");
  if (path == NULL) return weft__err(WEFT_EINVAL, "weft_sim_profile_save: path is NULL");
  return weft__sim_profile_write(&machine(b)->cost.prof, path);
}

int weft_sim_profile_check(const char *spec) {
  weft__sim_profile *p = weft__malloc(sizeof *p);
  if (p == NULL) return weft__oom("a machine profile");
  int rc = weft__sim_profile_load(spec, p);
  weft__free(p);
  return rc;
}

size_t weft_sim_profile_names(const char **out, size_t cap) {
  for (int i = 0; i < weft__sim_shipped_count && (size_t)i < cap && out != NULL; i++)
    out[i] = weft__sim_shipped_profiles[i].name;
  return (size_t)weft__sim_shipped_count;
}
