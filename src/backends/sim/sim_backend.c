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
 *   plan      each node gets its model (weft__sim_node): its cost from the profile (GEMM by
 *             its rate at that size, elementwise ops and reductions by bytes over bandwidth,
 *             copies by link latency plus bytes over link bandwidth), and for a GPU node its
 *             stream, by the CUDA backend's rules (cuda_plan.c, mirrored in assign_streams):
 *             a node continues the stream of the predecessor whose heir it is (the successor
 *             with the longest path below it), a chain that fills the device starts on stream
 *             0, a small one round-robin on the other streams; copies go to the device's H2D,
 *             D2H or peer stream. Temporaries (WEFT__T_TEMP) get their first writer and users.
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

#include "backends/plan_rules.h"
#include "backends/sim/sim_internal.h"
#include "sched/sched.h"
#include "weft/sim.h"

/* ---- the machine ------------------------------------------------------------------------- */

static int sim_init(weft__backend *b, const weft_runtime_options *o) {
  weft__sim *m = weft__calloc(1, sizeof *m);
  if (m == NULL) return weft__oom("the simulated machine");
  int rc = weft__sim_profile_load(o->simulate, &m->prof);
  if (rc != WEFT_OK) {
    weft__free(m);
    return rc;
  }
  if (o->max_gpus >= 0 && o->max_gpus < m->prof.ngpus) m->prof.ngpus = o->max_gpus;
  const char *env = getenv("WEFT_SIM_COMPUTE");
  m->compute = (o->flags & WEFT_RUNTIME_SIM_COMPUTE) != 0 || (env != NULL && strcmp(env, "1") == 0);
  int cores = m->prof.host.cores;
  m->host_lanes = o->cpu_workers > 0 ? o->cpu_workers : cores;
  if (o->blas_threads > 0)
    m->blas_threads = o->blas_threads;
  else
    m->blas_threads = m->host_lanes == 1 ? cores : WEFT__MAX(1, cores / m->host_lanes);
  /* Batches as the CUDA backend makes them (off under WEFT_LAUNCH_BLOCKING or
   * WEFT_CUDA_BATCH=0), where the profile prices them. */
  const char *batch = getenv("WEFT_CUDA_BATCH");
  atomic_init(&m->batch, !(o->flags & WEFT_RUNTIME_LAUNCH_BLOCKING) && !(batch != NULL && strcmp(batch, "0") == 0) &&
                             m->prof.gpu.batch_op_s > 0);
  b->state = m;
  return WEFT_OK;
}

static void sim_fini(weft__backend *b) {
  weft__free(b->state);
  b->state = NULL;
}

static const weft__sim *machine(const weft__backend *b) { return b->state; }

static int sim_device_count(const weft__backend *b) { return machine(b)->prof.ngpus; }

static int sim_device_info(const weft__backend *b, int index, weft_device_info *out) {
  const weft__sim_profile *p = &machine(b)->prof;
  out->simulated = 1;
  if (out->device.kind == WEFT_DEVICE_CPU) {
    snprintf(out->name, sizeof out->name, "%.100s (simulated)", p->host.name);
    out->memory_bytes = p->host.memory_bytes;
    out->multiprocessors = machine(b)->host_lanes;
    return WEFT_OK;
  }
  (void)index;
  snprintf(out->name, sizeof out->name, "%.100s (simulated)", p->gpu.name);
  out->memory_bytes = p->gpu.memory_bytes;
  out->copy_engines = p->gpu.copy_engines;
  out->compute_major = p->gpu.cc_major;
  out->compute_minor = p->gpu.cc_minor;
  out->multiprocessors = p->gpu.multiprocessors;
  return WEFT_OK;
}

static int sim_can_access_peer(const weft__backend *b, int a, int c) {
  return a != c && machine(b)->prof.peer_access;
}

/* ---- storage: host memory in compute mode, nothing otherwise ------------------------------ */

static int sim_alloc(weft__backend *b, weft_tensor *t) {
  if (!machine(b)->compute) return WEFT_OK; /* no storage: the tensor holds no data */
  t->data = weft__aligned_alloc(64, t->bytes);
  if (t->data == NULL)
    return weft__err(WEFT_ENOMEM, "out of host memory for simulated device tensor %s (%zu bytes)",
                     weft__tensor_name(t), t->bytes);
  t->storage_kind = WEFT__S_DEVICE;
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
  if (t->data != NULL) weft__cpu_fill(t->data, t->dtype, t->numel, t->init);
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

/* ---- the model of a node ------------------------------------------------------------------- */

static int is_gpu(weft_device d) { return d.kind == WEFT_DEVICE_CUDA; }

static double gemm_s(const weft__sim_curve *c, double threads, int64_t m, int64_t n, int64_t k) {
  double flops = 2.0 * (double)m * (double)n * (double)k;
  if (flops <= 0) return 0;
  double rate = weft__sim_curve_at(c, cbrt((double)m * (double)n * (double)k)) * threads;
  return flops / rate;
}

/* The host side of a host<->device copy is pinned (storage.c pins it at the first launch)
 * unless its storage already existed then as ordinary memory. */
static int pinned(const weft_tensor *t) {
  return t->storage_kind == WEFT__S_NONE || t->storage_kind == WEFT__S_PINNED;
}

/* A copy between two devices (which runs on a copy engine), not within one device. */
static int crosses(const weft_node *n) {
  weft_device a = n->args[0].t->device, b = n->args[1].t->device;
  return !weft_device_equal(a, b);
}

static double link_s(const weft__sim_link *l, size_t bytes) {
  return l->latency_s + (double)bytes / l->bandwidth;
}

static size_t arg_bytes(const weft_node *n) {
  size_t s = 0;
  for (int i = 0; i < n->nargs; i++) s += n->args[i].t->bytes;
  return s;
}

/* A user op's cost hint in flops, or a negative value when it has none. */
static double user_flops(const weft_node *n) {
  const weft_op_desc *d = &n->user_op->desc;
  if (d->cost == NULL) return -1;
  const weft_tensor *args[WEFT_MAX_ARGS];
  for (int i = 0; i < n->nargs; i++) args[i] = n->args[i].t;
  double f = d->cost(args, n->nargs, n->params, d->user);
  return f >= 0 && isfinite(f) ? f : -1;
}

static int dtype_index(const weft_node *n) {
  return n->nargs > 0 && n->args[0].t->dtype == WEFT_F64 ? 1 : 0;
}

/* The largest rate of a curve: the device's peak for that kind of work. */
static double peak_of(const weft__sim_curve *c) {
  double best = 0;
  for (int i = 0; i < c->n; i++) best = WEFT__MAX(best, c->y[i]);
  return best;
}

/* A product's size: the cube root of its m n k. */
static double product_side(const weft_node *n) {
  int64_t cols = n->kind == WEFT__OP_MM ? n->args[1].t->shape[1] : n->args[1].t->shape[0];
  return cbrt((double)n->args[0].t->shape[0] * (double)cols * (double)n->args[0].t->shape[1]);
}

/* The cost of a node on a GPU (or on a copy engine), without the host's submission. *share
 * receives the part of the device a kernel needs to run at full speed (des.c shares the device
 * in start order): a product's from the profile's measured gemm_f32_share where it has one,
 * otherwise the time its work would take at the device's peak over its modelled time, so a
 * kernel held up by the launch floor leaves room for others on other streams, and a large one
 * fills the device. Copies between devices run on copy engines (share 0). */
static double gpu_cost(const weft__sim *m, const weft_node *n, double *share) {
  const weft__sim_profile *p = &m->prof;
  const weft__sim_gpu *g = &p->gpu;
  const weft_tensor *t0 = n->args[0].t;
  const weft__sim_curve *gc = &g->gemm[dtype_index(n)];
  double t, tpeak, measured = -1; /* a product's share from the profile (below) */
  *share = 0;
  switch (n->kind) {
    case WEFT__OP_MM:
    case WEFT__OP_LINEAR: {
      int64_t cols = n->kind == WEFT__OP_MM ? n->args[1].t->shape[1] : n->args[1].t->shape[0];
      double side = product_side(n);
      int fills = weft__plan_fills_device(n, g->multiprocessors);
      t = gemm_s(gc, 1, t0->shape[0], cols, t0->shape[1]);
      /* A product that fills the device runs in 128 x 128 output tiles: a partial tile at the
       * edge costs a whole one (4000^2 computes like 4096 x 4096 x 4000, 4.9% more than its
       * flops; the calibration's sizes are whole tiles). Smaller products use smaller tiles. */
      if (fills) {
        int64_t mq = (t0->shape[0] + 127) / 128 * 128, nq = (cols + 127) / 128 * 128;
        t = gemm_s(gc, 1, mq, nq, t0->shape[1]);
      }
      /* A product smaller than the smallest calibrated one takes as long as that one: small
       * GPU products are bound by the kernel's latency, not by their flops. */
      double x0 = gc->n > 0 ? gc->x[0] : 0;
      if (gc->n > 0 && side < x0)
        t = WEFT__MAX(t, 2.0 * x0 * x0 * x0 / gc->y[0]);
      tpeak = 2.0 * (double)t0->shape[0] * (double)cols * (double)t0->shape[1] / peak_of(gc);
      if (n->kind == WEFT__OP_LINEAR && n->nargs == 4) {
        double bias = (double)(2 * n->args[n->nargs - 1].t->bytes) / g->memory_bandwidth;
        t += bias;
        tpeak += bias;
      }
      /* A product's share is measured where the profile has it (gemm_f32_share): cuBLAS picks
       * kernels that occupy far more of the device than their throughput needs (on the H100,
       * 100 independent 400^2 products on four streams ran only 1.5 x faster than one after
       * the other, where the computed share, 0.25, gives 4 x). A product that fills the device
       * takes all of it. */
      if (dtype_index(n) == 0 && g->gemm_share.n > 0)
        measured = fills ? 1.0
                         : WEFT__MIN(1.0, WEFT__MAX(1.0 / g->compute_streams, weft__sim_curve_at(&g->gemm_share, side)));
      break;
    }
    case WEFT__OP_FILL:
      t = tpeak = (double)t0->bytes / (n->fill.kind == WEFT_INIT_UNIFORM || n->fill.kind == WEFT_INIT_NORMAL
                                           ? g->fill_bandwidth
                                           : g->memory_bandwidth);
      break;
    case WEFT__OP_COPY: {
      const weft_tensor *src = t0, *dst = n->args[1].t;
      size_t bytes = src->bytes;
      if (!crosses(n)) {
        t = tpeak = (double)(2 * bytes) / g->memory_bandwidth;
        break;
      }
      if (!is_gpu(src->device)) return link_s(pinned(src) ? &p->h2d : &p->h2d_pageable, bytes);
      if (!is_gpu(dst->device)) return link_s(pinned(dst) ? &p->d2h : &p->d2h_pageable, bytes);
      if (p->peer_access) return link_s(&p->peer, bytes);
      return link_s(&p->d2h, bytes) + link_s(&p->h2d, bytes); /* staged through the host */
    }
    case WEFT__OP_USER: {
      double f = user_flops(n);
      /* Without a cost hint nothing is known of the kernel: it takes the whole device. */
      t = f >= 0 ? f / peak_of(gc) : (double)arg_bytes(n) / g->memory_bandwidth;
      tpeak = f >= 0 ? t : INFINITY;
      break;
    }
    default: /* elementwise ops and reductions: streamed through memory */
      t = tpeak = (double)arg_bytes(n) / g->memory_bandwidth;
      break;
  }
  double cost = WEFT__MAX(g->kernel_s, t);
  *share = measured >= 0 ? measured : cost > 0 ? WEFT__MIN(1.0, tpeak / cost) : 1.0;
  return cost;
}

/* The cost of a node on a CPU worker. */
static double cpu_cost(const weft__sim *m, const weft_node *n) {
  const weft__sim_host *h = &m->prof.host;
  const weft_tensor *t0 = n->nargs > 0 ? n->args[0].t : NULL;
  double t;
  switch (n->kind) {
    case WEFT__OP_MM:
      t = gemm_s(&h->gemm[dtype_index(n)], m->blas_threads, t0->shape[0], n->args[1].t->shape[1],
                 t0->shape[1]);
      break;
    case WEFT__OP_LINEAR:
      t = gemm_s(&h->gemm[dtype_index(n)], m->blas_threads, t0->shape[0], n->args[1].t->shape[0],
                 t0->shape[1]) +
          (double)n->args[n->nargs - 1].t->bytes / h->memory_bandwidth;
      break;
    case WEFT__OP_FILL:
      t = n->fill.kind == WEFT_INIT_UNIFORM || n->fill.kind == WEFT_INIT_NORMAL
              ? (double)t0->numel / h->fill_rate
              : (double)t0->bytes / h->memory_bandwidth;
      break;
    case WEFT__OP_USER: {
      double f = user_flops(n);
      t = f >= 0 ? f / peak_of(&h->gemm[dtype_index(n)]) : (double)arg_bytes(n) / h->memory_bandwidth;
      break;
    }
    default:
      t = (double)arg_bytes(n) / h->memory_bandwidth;
      break;
  }
  return h->node_s + t;
}

/* ---- planning ------------------------------------------------------------------------------ */

enum { WHY_CPU = 0, WHY_CONTINUE, WHY_BIG, WHY_SPREAD, WHY_COPY };

typedef struct plan_box {
  weft__sim_plan sp;
  uint8_t *why;          /* per node: WHY_* */
  uint32_t *continued;   /* per node: the predecessor whose stream it continues */
} plan_box;

static int backend_index(const weft__backend *b) { return (int)(b - b->rt->backends); }

weft__sim_plan *weft__sim_plan_of(const weft__backend *b, const weft__plan *p) {
  plan_box *box = p->bstate[backend_index(b)];
  return box != NULL ? &box->sp : NULL;
}

static void box_free(plan_box *box) {
  if (box == NULL) return;
  weft__sim_plan *sp = &box->sp;
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
  weft__free(box->why);
  weft__free(box->continued);
  weft__free(box);
}

/* A topological order of the plan: program order where every edge points forward in it (the
 * usual case, and the order in which a GPU backend meets the nodes), else Kahn's order, since
 * explicit edges may point backward in insertion order. */
static int topo_order(const weft__plan *p, uint32_t *order) {
  uint32_t n = p->n;
  int forward = 1;
  for (uint32_t i = 0; i < n && forward; i++)
    for (uint32_t e = p->x[i].pred_begin; e < p->x[i].pred_end && forward; e++)
      forward = p->pred[e] < i;
  if (forward) {
    for (uint32_t i = 0; i < n; i++) order[i] = i;
    return WEFT_OK;
  }
  uint32_t *indeg = weft__malloc((n ? n : 1) * sizeof *indeg);
  if (indeg == NULL) return weft__oom("the simulator's plan");
  uint32_t tail = 0;
  for (uint32_t i = 0; i < n; i++) {
    indeg[i] = p->x[i].indeg;
    if (indeg[i] == 0) order[tail++] = i;
  }
  for (uint32_t head = 0; head < tail; head++) {
    const weft__xnode *x = &p->x[order[head]];
    for (uint32_t k = x->succ_begin; k < x->succ_end; k++)
      if (--indeg[p->succ[k]] == 0) order[tail++] = p->succ[k];
  }
  weft__free(indeg);
  WEFT_ASSERT(tail == n);
  return WEFT_OK;
}

static int on_compute_stream(const weft__sim_plan *sp, const weft__plan *p, uint32_t i) {
  return sp->nodes[i].dev >= 0 && !(sp->nodes[i].is_copy && crosses(p->x[i].node));
}

/* Each compute node's heir: the successor on its device, on a compute stream, with the
 * longest path of work below it (ties: the earlier one). */
static void choose_heirs(const weft__sim_plan *sp, const weft__plan *p, const uint32_t *order,
                         const uint32_t *pos, double *height, uint32_t *heir) {
  for (uint32_t k = p->n; k-- > 0;) {
    uint32_t i = order[k];
    double best = 0;
    heir[i] = UINT32_MAX;
    for (uint32_t e = p->x[i].succ_begin; e < p->x[i].succ_end; e++) {
      uint32_t s = p->succ[e];
      best = WEFT__MAX(best, height[s]);
      if (!on_compute_stream(sp, p, i) || !on_compute_stream(sp, p, s) ||
          sp->nodes[s].dev != sp->nodes[i].dev)
        continue;
      if (heir[i] == UINT32_MAX || height[s] > height[heir[i]] ||
          (height[s] == height[heir[i]] && pos[s] < pos[heir[i]]))
        heir[i] = s;
    }
    height[i] = weft__plan_work(p->x[i].node) + best;
  }
}

/* Streams and engines, by the CUDA backend's rules (cuda_plan.c), in topological order:
 *   - copies between devices go to a copy stream: host to device on the destination's H2D
 *     stream, device to host on the source's D2H stream, device to device on the source's
 *     peer stream (without peer access, staged through the host: the source's D2H stream);
 *   - a compute node continues the stream of a predecessor whose heir it is;
 *   - else a node that fills the device goes to stream 0 (large products then run in program
 *     order), and a small one round-robin to a stream not kept for a chain's next node.
 * `tail` (the last node placed on each stream) and `kept` (the heir a compute stream is kept
 * for) are scratch, per device. */
static void assign_streams(const weft__sim *m, weft__sim_plan *sp, plan_box *box,
                           const weft__plan *p, const uint32_t *order, const uint32_t *heir,
                           uint32_t *tail, uint32_t *kept, uint32_t *rr) {
  const weft__sim_gpu *g = &m->prof.gpu;
  int S = g->compute_streams, ce = g->copy_engines;
  for (uint32_t k = 0; k < p->n; k++) {
    uint32_t i = order[k];
    weft__sim_node *sn = &sp->nodes[i];
    if (sn->dev < 0) {
      box->why[i] = WHY_CPU;
      continue;
    }
    uint32_t *dtail = tail + (size_t)sn->dev * (size_t)(S + SIM_COPY_STREAMS);
    uint32_t *dkept = kept + (size_t)sn->dev * (size_t)S;
    const weft_node *nd = p->x[i].node;
    if (!on_compute_stream(sp, p, i)) {
      int c = !is_gpu(nd->args[0].t->device) ? SIM_STREAM_H2D
              : !is_gpu(nd->args[1].t->device) || !m->prof.peer_access ? SIM_STREAM_D2H
                                                                        : SIM_STREAM_PEER;
      sn->stream = (uint16_t)(S + c);
      sn->engine = (uint8_t)(1 + WEFT__MIN(c, ce - 1));
      int role = c == SIM_STREAM_H2D ? WEFT__LANE_H2D : c == SIM_STREAM_D2H ? WEFT__LANE_D2H : WEFT__LANE_PEER;
      sn->lane = WEFT__LANE(role, sn->dev, 0);
      box->why[i] = WHY_COPY;
      dtail[sn->stream] = i;
      continue;
    }
    int chosen = -1;
    for (uint32_t e = p->x[i].pred_begin; e < p->x[i].pred_end && chosen < 0; e++) {
      uint32_t q = p->pred[e];
      if (heir[q] == i && dtail[sp->nodes[q].stream] == q) {
        chosen = sp->nodes[q].stream;
        box->continued[i] = q;
        box->why[i] = WHY_CONTINUE;
      }
    }
    if (chosen < 0 && weft__plan_fills_device(nd, g->multiprocessors)) {
      chosen = 0;
      box->why[i] = WHY_BIG;
    } else if (chosen < 0) {
      int st = (int)(rr[sn->dev] % (uint32_t)S);
      for (int j = 0; j < S && dkept[st] != UINT32_MAX; j++) st = (st + 1) % S;
      if (dkept[st] != UINT32_MAX) st = (int)(rr[sn->dev] % (uint32_t)S); /* all kept: share */
      rr[sn->dev] = (uint32_t)st + 1;
      chosen = st;
      box->why[i] = WHY_SPREAD;
    }
    for (int j = 0; j < S; j++)
      if (dkept[j] == i) dkept[j] = UINT32_MAX; /* placed: no longer waited for */
    dkept[chosen] = heir[i];
    sn->stream = (uint16_t)chosen;
    sn->engine = 0;
    sn->lane = WEFT__LANE(WEFT__LANE_COMPUTE, sn->dev, chosen);
    dtail[chosen] = i;
  }
}

/* Host time to enqueue each GPU node: a launch (a product's costs gemm_launch_s: cuBLAS does
 * more on the host than one of weft's kernels), plus an event for each predecessor on another
 * GPU stream (record there, wait here). With others ready, workers launch on several streams at
 * once (des.c divides by launch_lanes), but an f32 product that does not fill the device, of a
 * size within gemm_f32_wide_s, adds no less than that curve to an eager run: the measured time
 * of each of many independent ones (smaller products are what launch_lanes is measured on).
 * Those calls contend in cuBLAS and the driver: on the H100 four threads launched 400^2
 * products at 0.16-0.28 a microsecond together (docs/benchmarks.md), where launch_lanes,
 * measured on 16^2 products, gave 0.33; 100 such products took 0.75 ms eager where the device
 * needs 0.61. */
static void submit_costs(const weft__sim *m, weft__sim_plan *sp, const weft__plan *p) {
  for (uint32_t i = 0; i < p->n; i++) {
    weft__sim_node *sn = &sp->nodes[i];
    if (sn->dev < 0) continue;
    int events = 0;
    for (uint32_t e = p->x[i].pred_begin; e < p->x[i].pred_end; e++) {
      const weft__sim_node *sq = &sp->nodes[p->pred[e]];
      if (sq->dev >= 0 && (sq->dev != sn->dev || sq->stream != sn->stream)) events++;
    }
    const weft_node *nd = p->x[i].node;
    int gemm = nd->kind == WEFT__OP_MM || nd->kind == WEFT__OP_LINEAR;
    double launch = gemm && m->prof.gpu.gemm_launch_s > 0 ? m->prof.gpu.gemm_launch_s : m->prof.gpu.launch_s;
    sn->submit = launch + events * m->prof.gpu.event_s;
    const weft__sim_curve *wide = &m->prof.gpu.gemm_wide_s;
    sn->submit_min = 0;
    if (!gemm || wide->n == 0 || dtype_index(nd) != 0 || weft__plan_fills_device(nd, m->prof.gpu.multiprocessors))
      continue;
    double side = product_side(nd);
    if (side >= wide->x[0] && side <= wide->x[wide->n - 1]) sn->submit_min = weft__sim_curve_at(wide, side);
  }
}

/* Batches, by the CUDA backend's rule (cuda_plan.c, "Batches"): consecutive links i -> j of a
 * chain of small elementwise nodes on one stream, j the only successor of i and i the only
 * predecessor of j (plan_rules.h), j continuing i's stream and freeing nothing, at most
 * WEFT__PLAN_BATCH_MAX nodes a batch, walked from each chain's head in topological order. A
 * node of a batch costs the host batch_node_s (its last node also a launch) and the device
 * batch_op_s (its first node also the kernel's kernel_s); des.c queues a batch's nodes on their
 * stream when its last node is enqueued. */
static void plan_batches(const weft__sim *m, weft__sim_plan *sp, const plan_box *box, const weft__plan *p,
                         const uint32_t *order) {
  for (uint32_t i = 0; i < p->n; i++) sp->nodes[i].batch_last = sp->nodes[i].batch_next = sp->nodes[i].batch_first = UINT32_MAX;
  if (!atomic_load(&m->batch)) return;
  const weft__sim_gpu *g = &m->prof.gpu;
  for (uint32_t k = 0; k < p->n; k++) {
    uint32_t i = order[k], cur = i, len = 1;
    weft__sim_node *sn = &sp->nodes[i];
    if (sn->dev < 0 || sn->batch_last != UINT32_MAX || !weft__plan_batchable(p->x[i].node)) continue;
    while (len < WEFT__PLAN_BATCH_MAX && p->x[cur].succ_begin < p->x[cur].succ_end) {
      uint32_t j = p->succ[p->x[cur].succ_begin];
      const weft__sim_node *a = &sp->nodes[cur], *c = &sp->nodes[j];
      if (!weft__plan_batch_link(p, cur, j) || c->dev != a->dev || c->stream != a->stream || box->why[j] != WHY_CONTINUE || box->continued[j] != cur ||
          sp->claim_off[j] != sp->claim_off[j + 1])
        break;
      sp->nodes[cur].batch_next = j;
      cur = j;
      len++;
    }
    if (len < 2) {
      sn->batch_next = UINT32_MAX;
      continue;
    }
    for (uint32_t q = i;; q = sp->nodes[q].batch_next) {
      weft__sim_node *x = &sp->nodes[q];
      x->batch_first = i;
      x->batch_last = cur;
      double bytes = (double)p->x[q].node->args[0].t->bytes * 3;
      x->cost = WEFT__MAX(g->batch_op_s, bytes / g->memory_bandwidth) + (q == i ? g->kernel_s : 0);
      /* The events of the first node stay; a node of a batch is dispatched, not launched. */
      x->submit += g->batch_node_s - (q == cur ? 0 : g->launch_s);
      if (q == cur) break;
    }
  }
}

/* Temporaries on GPUs: each one's bytes, device and users; per node, the temporaries it
 * allocates (its first access in a topological order is its creating write) and uses. Two
 * passes over the accesses in that order: count, then fill; stamp[] counts a node that
 * accesses a temporary twice once. */
static int plan_memory(weft__sim_plan *sp, const weft__plan *p, const uint32_t *order) {
  weft_graph *g = p->graph;
  size_t nt = g->tensors.len;
  weft_tensor **ts = g->tensors.data;
  uint32_t n = p->n;
  uint32_t *tid = weft__malloc((nt ? nt : 1) * sizeof *tid);
  if (tid == NULL) return weft__oom("the simulator's memory plan");
  uint32_t ntemps = 0;
  for (size_t t = 0; t < nt; t++) {
    tid[t] = UINT32_MAX;
    if (!is_gpu(ts[t]->device)) continue;
    if ((ts[t]->flags & WEFT__T_TEMP) && ts[t]->bytes > 0)
      tid[t] = ntemps++;
    else
      sp->resident[ts[t]->device.index] += ts[t]->bytes;
  }
  size_t ntt = ntemps ? ntemps : 1;
  sp->ntemps = ntemps;
  sp->temp_bytes = weft__calloc(ntt, sizeof *sp->temp_bytes);
  sp->temp_dev = weft__calloc(ntt, sizeof *sp->temp_dev);
  sp->temp_users = weft__calloc(ntt, sizeof *sp->temp_users);
  sp->alloc_off = weft__calloc((size_t)n + 1, sizeof *sp->alloc_off);
  sp->use_off = weft__calloc((size_t)n + 1, sizeof *sp->use_off);
  uint32_t *stamp = weft__malloc(ntt * sizeof *stamp);
  uint8_t *seen = weft__calloc(ntt, 1);
  int rc = WEFT_OK;
  if (!sp->temp_bytes || !sp->temp_dev || !sp->temp_users || !sp->alloc_off || !sp->use_off ||
      !stamp || !seen) {
    rc = weft__oom("the simulator's memory plan");
    goto done;
  }
  for (int pass = 0; pass < 2; pass++) {
    for (uint32_t t = 0; t < ntemps; t++) stamp[t] = UINT32_MAX;
    for (uint32_t k = 0; k < n; k++) {
      uint32_t i = order[k];
      const weft_node *nd = p->x[i].node;
      uint32_t a = sp->alloc_off[i], u = sp->use_off[i];
      for (int arg = 0; arg < nd->nargs; arg++) {
        const weft_tensor *t = nd->args[arg].t;
        uint32_t id = tid[t->id];
        if (id == UINT32_MAX || stamp[id] == i) continue;
        stamp[id] = i;
        if (pass == 0) {
          if (sp->temp_users[id]++ == 0) {
            sp->alloc_off[i + 1]++;
            sp->temp_bytes[id] = t->bytes;
            sp->temp_dev[id] = t->device.index;
          }
          sp->use_off[i + 1]++;
        } else {
          if (!seen[id]) {
            seen[id] = 1;
            sp->alloc_ids[a++] = id;
          }
          sp->use_ids[u++] = id;
        }
      }
    }
    if (pass == 0) {
      for (uint32_t i = 0; i < n; i++) {
        sp->alloc_off[i + 1] += sp->alloc_off[i];
        sp->use_off[i + 1] += sp->use_off[i];
      }
      sp->alloc_ids = weft__malloc((sp->alloc_off[n] ? sp->alloc_off[n] : 1) * sizeof *sp->alloc_ids);
      sp->use_ids = weft__malloc((sp->use_off[n] ? sp->use_off[n] : 1) * sizeof *sp->use_ids);
      if (sp->alloc_ids == NULL || sp->use_ids == NULL) {
        rc = weft__oom("the simulator's memory plan");
        goto done;
      }
    }
  }
done:
  weft__free(tid);
  weft__free(stamp);
  weft__free(seen);
  return rc;
}

/* When temporaries are freed: as the CUDA backend does (plan_rules.h, "the window"). Walking
 * the nodes in the plan's order, a temporary is dead once its last user is passed; a node that
 * allocates claims, on its device, the oldest dead ones beyond max(2 x its buffer, 64 MiB),
 * and frees them as it starts (once their users have ended); what nobody claims lives until
 * the run ends. So the peak of `50 x (y = x.x; copy y)` is x and three results, as measured,
 * not the two that freeing each temporary after its last user would give. */
static int plan_claims(weft__sim_plan *sp, const weft__plan *p, const uint32_t *order) {
  uint32_t n = p->n, nt = sp->ntemps, ng = (uint32_t)(sp->ngpus > 0 ? sp->ngpus : 1);
  size_t ntt = nt ? nt : 1;
  uint32_t *last = weft__malloc(ntt * sizeof *last);      /* position of the last user */
  uint32_t *dying_off = weft__calloc((size_t)n + 2, sizeof *dying_off);
  uint32_t *dying = weft__malloc(ntt * sizeof *dying);    /* temporaries by that position */
  uint32_t *claim_of = weft__malloc(ntt * sizeof *claim_of);
  uint32_t *qoff = weft__calloc((size_t)ng + 1, sizeof *qoff), *head = weft__calloc(ng, sizeof *head);
  uint32_t *tail = weft__calloc(ng, sizeof *tail), *fifo = weft__malloc(ntt * sizeof *fifo);
  uint64_t *sum = weft__calloc(ng, sizeof *sum);
  sp->claim_off = weft__calloc((size_t)n + 1, sizeof *sp->claim_off);
  sp->claim_ids = weft__malloc(ntt * sizeof *sp->claim_ids);
  int rc = WEFT_OK;
  if (!last || !dying_off || !dying || !claim_of || !qoff || !head || !tail || !fifo || !sum ||
      !sp->claim_off || !sp->claim_ids) {
    rc = weft__oom("the simulator's memory plan");
    goto done;
  }
  for (uint32_t t = 0; t < nt; t++) {
    last[t] = 0;
    claim_of[t] = UINT32_MAX;
    qoff[sp->temp_dev[t] + 1]++;
  }
  for (uint32_t d = 0; d < ng; d++) qoff[d + 1] += qoff[d];
  for (uint32_t d = 0; d < ng; d++) head[d] = tail[d] = qoff[d];
  for (uint32_t k = 0; k < n; k++) {
    uint32_t i = order[k];
    for (uint32_t u = sp->use_off[i]; u < sp->use_off[i + 1]; u++) last[sp->use_ids[u]] = k;
  }
  for (uint32_t t = 0; t < nt; t++) dying_off[last[t] + 2]++;
  for (uint32_t k = 0; k <= n; k++) dying_off[k + 1] += dying_off[k];
  for (uint32_t t = 0; t < nt; t++) dying[dying_off[last[t] + 1]++] = t;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t i = order[k];
    for (uint32_t a = sp->alloc_off[i]; a < sp->alloc_off[i + 1]; a++) {
      uint32_t t = sp->alloc_ids[a], d = (uint32_t)sp->temp_dev[t];
      uint64_t budget = WEFT__MAX((uint64_t)WEFT__PLAN_WINDOW_COUNT * sp->temp_bytes[t],
                                  (uint64_t)WEFT__PLAN_WINDOW_MIN_MIB << 20);
      while (head[d] < tail[d] && sum[d] > budget) {
        uint32_t u = fifo[head[d]++];
        sum[d] -= sp->temp_bytes[u];
        claim_of[u] = i;
      }
    }
    for (uint32_t f = dying_off[k]; f < dying_off[k + 1]; f++) {
      uint32_t t = dying[f], d = (uint32_t)sp->temp_dev[t];
      fifo[tail[d]++] = t;
      sum[d] += sp->temp_bytes[t];
    }
  }
  for (uint32_t t = 0; t < nt; t++)
    if (claim_of[t] != UINT32_MAX) sp->claim_off[claim_of[t] + 1]++;
  for (uint32_t i = 0; i < n; i++) sp->claim_off[i + 1] += sp->claim_off[i];
  /* Fill in the temporaries' order, through a per-node cursor (the FIFO is done with). */
  uint32_t *cur = weft__malloc(((size_t)n ? n : 1) * sizeof *cur);
  if (cur == NULL) {
    rc = weft__oom("the simulator's memory plan");
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) cur[i] = sp->claim_off[i];
  for (uint32_t t = 0; t < nt; t++)
    if (claim_of[t] != UINT32_MAX) sp->claim_ids[cur[claim_of[t]]++] = t;
  weft__free(cur);
done:
  weft__free(last);
  weft__free(dying_off);
  weft__free(dying);
  weft__free(claim_of);
  weft__free(qoff);
  weft__free(head);
  weft__free(tail);
  weft__free(fifo);
  weft__free(sum);
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
    if (nd->kind != WEFT__OP_COPY || !crosses(nd)) continue;
    for (int a = 0; a < 2; a++) {
      weft_tensor *t = nd->args[a].t;
      if (!is_gpu(t->device) && t->storage_kind == WEFT__S_NONE && t->bytes >= LAZY_MIN)
        t->initialised = 1;
    }
  }
}

/* Scratch of one plan build. */
typedef struct plan_scratch {
  uint32_t *order, *pos, *heir, *tail, *kept, *rr;
  double *height;
} plan_scratch;

static void scratch_free(plan_scratch *sc) {
  weft__free(sc->order);
  weft__free(sc->pos);
  weft__free(sc->heir);
  weft__free(sc->tail);
  weft__free(sc->kept);
  weft__free(sc->rr);
  weft__free(sc->height);
}

static int scratch_init(plan_scratch *sc, uint32_t n, size_t ngpus, size_t S) {
  size_t nn = n ? n : 1, ng = ngpus ? ngpus : 1;
  sc->order = weft__malloc(nn * sizeof(uint32_t));
  sc->pos = weft__malloc(nn * sizeof(uint32_t));
  sc->heir = weft__malloc(nn * sizeof(uint32_t));
  sc->tail = weft__malloc(ng * (S + SIM_COPY_STREAMS) * sizeof(uint32_t));
  sc->kept = weft__malloc(ng * S * sizeof(uint32_t));
  sc->rr = weft__calloc(ng, sizeof(uint32_t));
  sc->height = weft__malloc(nn * sizeof(double));
  if (!sc->order || !sc->pos || !sc->heir || !sc->tail || !sc->kept || !sc->rr || !sc->height)
    return weft__oom("the simulator's plan");
  memset(sc->tail, 0xff, ng * (S + SIM_COPY_STREAMS) * sizeof(uint32_t));
  memset(sc->kept, 0xff, ng * S * sizeof(uint32_t));
  return WEFT_OK;
}

static int sim_plan(weft__backend *b, weft__plan *p) {
  const weft__sim *m = machine(b);
  uint32_t n = p->n;
  int ng = m->prof.ngpus;
  plan_scratch sc = {0};
  plan_box *box = weft__calloc(1, sizeof *box);
  int rc = scratch_init(&sc, n, (size_t)ng, (size_t)m->prof.gpu.compute_streams);
  if (rc != WEFT_OK) goto fail;
  if (box == NULL) {
    rc = weft__oom("the simulator's plan");
    goto fail;
  }
  weft__sim_plan *sp = &box->sp;
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
  box->why = weft__calloc(nn, 1);
  box->continued = weft__calloc(nn, sizeof *box->continued);
  if (!sp->nodes || !sp->ran || !sp->start || !sp->end || !sp->cpu_lane || !sp->resident ||
      !sp->peak || !box->why || !box->continued) {
    rc = weft__oom("the simulator's plan");
    goto fail;
  }
  sp->all_gpu = n > 0;
  for (uint32_t i = 0; i < n; i++) {
    const weft_node *nd = p->x[i].node;
    weft__sim_node *sn = &sp->nodes[i];
    sn->dev = is_gpu(nd->device) ? nd->device.index : -1;
    double share = 0;
    sn->cost = sn->dev >= 0 ? gpu_cost(m, nd, &share) : cpu_cost(m, nd);
    /* At least one SM's worth (copy engines ignore it). */
    sn->share = WEFT__MIN(1.0, WEFT__MAX(share, 1.0 / m->prof.gpu.multiprocessors));
    sn->is_copy = nd->kind == WEFT__OP_COPY;
    if (sn->dev < 0) sp->all_gpu = 0;
  }
  if ((rc = topo_order(p, sc.order)) != WEFT_OK) goto fail;
  for (uint32_t k = 0; k < n; k++) sc.pos[sc.order[k]] = k;
  choose_heirs(sp, p, sc.order, sc.pos, sc.height, sc.heir);
  assign_streams(m, sp, box, p, sc.order, sc.heir, sc.tail, sc.kept, sc.rr);
  submit_costs(m, sp, p);
  if ((rc = plan_memory(sp, p, sc.order)) != WEFT_OK || (rc = plan_claims(sp, p, sc.order)) != WEFT_OK) goto fail;
  plan_batches(m, sp, box, p, sc.order);
  claim_host_tensors(m, p);
  p->bstate[backend_index(b)] = box;
  scratch_free(&sc);
  return WEFT_OK;
fail:
  box_free(box);
  scratch_free(&sc);
  return rc;
}

static void sim_plan_free(weft__backend *b, weft__plan *p) {
  int bi = backend_index(b);
  box_free(p->bstate[bi]);
  p->bstate[bi] = NULL;
}

/* ---- runs ------------------------------------------------------------------------------------ */

static int sim_run_begin(weft__backend *b, weft__plan *p) {
  weft__sim_plan *sp = weft__sim_plan_of(b, p);
  if (sp == NULL) return WEFT_OK;
  memset(sp->ran, 0, sp->n ? sp->n : 1);
  sp->runs++;
  return WEFT_OK;
}

static int sim_launch(weft__backend *b, weft_kernel_ctx *ctx) {
  const weft__sim *m = machine(b);
  weft_node *n = ctx->node;
  weft__sim_plan *sp = weft__sim_plan_of(b, ctx->run->plan);
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
static int sim_run_drain(weft__backend *b, weft__plan *p) {
  const weft__sim *m = machine(b);
  weft__sim_plan *sp = weft__sim_plan_of(b, p);
  if (sp == NULL) return WEFT_OK;
  int rc = weft__sim_simulate(m, sp, p, p->run, p->run->t_launch);
  if (rc != WEFT_OK) {
    /* Only the simulation's scratch memory ran out: the run itself stands, without figures. */
    sp->res.makespan_s = NAN;
    return WEFT_OK;
  }
  const weft__sim_result *r = &sp->res;
  if (r->oom_dev < 0) return WEFT_OK;
  char msg[400];
  if (r->oom_node == UINT32_MAX)
    snprintf(msg, sizeof msg,
             "cuda:%d of the simulated machine has %.2f GB, but the tensors that live on it take "
             "%.2f GB",
             r->oom_dev, gb(m->prof.gpu.memory_bytes), gb(r->oom_total));
  else
    snprintf(msg, sizeof msg,
             "cuda:%d of the simulated machine (%.2f GB) runs out of memory: this node's %.3f GB "
             "would bring it to %.2f GB (%.2f GB of tensors that live on it, the rest "
             "temporaries still in use)",
             r->oom_dev, gb(m->prof.gpu.memory_bytes), gb(r->oom_asked), gb(r->oom_total),
             gb(sp->resident[r->oom_dev]));
  weft__sched_drained(p->run, r->oom_node, WEFT_EDEVMEM, msg);
  return WEFT__PENDING;
}

static int sim_explain(const weft__backend *b, const weft__plan *p, uint32_t index,
                       weft__placement *out) {
  const plan_box *box = p->bstate[backend_index(b)];
  const weft__sim *m = machine(b);
  if (box == NULL || index >= box->sp.n) return weft__err(WEFT_EINVAL, "explain: no such node");
  const weft__sim_node *sn = &box->sp.nodes[index];
  const int S = m->prof.gpu.compute_streams;
  switch (box->why[index]) {
    case WHY_CPU:
      snprintf(out->lane, sizeof out->lane, "cpu workers (simulated)");
      snprintf(out->why, sizeof out->why, "a CPU node: the first free virtual worker of %d runs it",
               m->host_lanes);
      break;
    case WHY_COPY: {
      static const char *const role[] = {"h2d", "d2h", "peer"};
      int c = sn->stream - S;
      snprintf(out->lane, sizeof out->lane, "cuda:%d copy %s (simulated)", sn->dev, role[c]);
      snprintf(out->why, sizeof out->why,
               "a %s copy: it goes to the device's %s copy stream, fed by copy engine %d of %d",
               c == 0 ? "host-to-device" : c == 1 ? "device-to-host" : "device-to-device", role[c],
               sn->engine - 1, m->prof.gpu.copy_engines);
      break;
    }
    case WHY_CONTINUE:
      snprintf(out->lane, sizeof out->lane, "cuda:%d stream %d (simulated)", sn->dev, sn->stream);
      snprintf(out->why, sizeof out->why,
               "continues the stream of node %u, whose longest path goes through it",
               box->continued[index]);
      break;
    case WHY_BIG:
      snprintf(out->lane, sizeof out->lane, "cuda:%d stream 0 (simulated)", sn->dev);
      snprintf(out->why, sizeof out->why,
               "starts a chain and fills the device on its own: large nodes run on stream 0, "
               "in program order");
      break;
    default:
      snprintf(out->lane, sizeof out->lane, "cuda:%d stream %d (simulated)", sn->dev, sn->stream);
      snprintf(out->why, sizeof out->why,
               "starts a chain; small nodes are spread over the device's %d compute streams",
               S);
      break;
  }
  if (sn->batch_last != UINT32_MAX) {
    size_t used = strlen(out->why);
    snprintf(out->why + used, sizeof out->why - used, "; batched: nodes %u..%u run as one kernel", sn->batch_first,
             sn->batch_last);
  }
  return WEFT_OK;
}

const weft__backend_vtable weft__sim_backend = {
    .version = WEFT__BACKEND_VERSION,
    .name = "sim",
    .device_kind = WEFT_DEVICE_CUDA,
    .flags = 0,
    .init = sim_init,
    .fini = sim_fini,
    .device_count = sim_device_count,
    .device_info = sim_device_info,
    .can_access_peer = sim_can_access_peer,
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
    .explain = sim_explain,
    .run_drain = sim_run_drain,
};

/* ---- public: weft/sim.h ---------------------------------------------------------------------- */

static weft__backend *sim_of(const weft_runtime *rt) {
  weft__backend *b = rt != NULL ? rt->by_kind[WEFT_DEVICE_CPU] : NULL;
  return b != NULL && b->vt == &weft__sim_backend ? b : NULL;
}

void weft__sim_set_batching(weft_runtime *rt, int on) {
  weft__backend *b = sim_of(rt);
  if (b != NULL) atomic_store(&((weft__sim *)b->state)->batch, on != 0 && machine(b)->prof.gpu.batch_op_s > 0);
}

int weft_sim_active(const weft_runtime *rt) { return sim_of(rt) != NULL; }

int weft_sim_computes(const weft_runtime *rt) {
  const weft__backend *b = sim_of(rt);
  return b != NULL && machine(b)->compute;
}

/* The simulator's results of `run`, if they are still the latest of its graph. */
static int results_of(const weft_run *run, const char *what, const weft__backend **bo,
                      const weft__sim_plan **out) {
  if (run == NULL) return weft__err(WEFT_EINVAL, "%s: run is NULL", what);
  const weft__backend *b = sim_of(run->graph->rt);
  if (b == NULL)
    return weft__err(WEFT_EINVAL, "%s: the run's runtime does not simulate a machine", what);
  if (!atomic_load_explicit(&run->done, memory_order_acquire))
    return weft__err(WEFT_EAGAIN, "%s: the run is still in flight; wait for it first", what);
  const weft__plan *p = run->graph->plan;
  if (p != run->plan || p->last_run != run->id)
    return weft__err(WEFT_ESTATE, "%s: the graph was launched again since this run", what);
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
  if (device.kind != WEFT_DEVICE_CUDA || device.index < 0 || device.index >= sp->ngpus)
    return weft__err(WEFT_EDEVICE, "weft_sim_peak_bytes: %s is not a simulated GPU of this runtime",
                     weft_device_str(device, d, sizeof d));
  *out = sp->peak[device.index];
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
  return weft__sim_profile_write(&machine(b)->prof, path);
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
