/* cost.c — the cost model's prices (cost.h says what each is). The figures behind them are the
 * machine profile's: measured by `weft calibrate`, or shipped in profiles/. */
#include <math.h>

#include "sched/cost/cost.h"
#include "backends/backend.h"
#include "sched/plan/plan.h"

static int is_gpu(weft_device d) { return d.kind == WEFT_DEVICE_CUDA; }

static double gemm_s(const weft__sim_curve *c, double threads, int64_t m, int64_t n, int64_t k) {
  double flops = 2.0 * (double)m * (double)n * (double)k;
  if (flops <= 0) return 0;
  double rate = weft__sim_curve_at(c, cbrt((double)m * (double)n * (double)k)) * threads;
  return flops / rate;
}

/* A dense linear-algebra node of f flops, at the rate of the product of the same flops. */
static double la_s(const weft__sim_curve *c, double threads, double f) {
  if (f <= 0) return 0;
  return f / (weft__sim_curve_at(c, cbrt(f / 2)) * threads);
}

/* The host side of a host<->device copy is pinned (storage.c pins it at the first launch)
 * unless its storage already existed then as ordinary memory. */
static int pinned(const weft_tensor *t) {
  t = weft__storage_owner(t);
  return t->storage_kind == WEFT__S_NONE || t->storage_kind == WEFT__S_PINNED;
}

/* A copy between two devices (which runs on a copy engine), not within one device. */
int weft__cost_crosses(const weft_node *n) {
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
  double f = d->cost(weft__node_targs(n), n->nargs, n->params, d->user);
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

/* The curve of a potrf, trsm, syrk or trtri node's op and dtype in table la (a GPU's, or the
 * host's wide ones), or NULL. */
static const weft__sim_curve *la_curve(const weft__sim_curve la[WEFT__SIM_LA_OPS][2], const weft_node *n) {
  int op = n->kind == WEFT__OP_POTRF ? 0
           : n->kind == WEFT__OP_TRSM ? 1
           : n->kind == WEFT__OP_SYRK ? 2
           : n->kind == WEFT__OP_TRTRI ? 3
                                       : -1;
  if (op < 0) return NULL;
  const weft__sim_curve *c = &la[op][dtype_index(n)];
  return c->n > 0 ? c : NULL;
}

/* The tile side a linear-algebra curve is read at: the triangular tile's (potrf, trsm, trtri),
 * the updated tile's (syrk). */
static int64_t la_side(const weft_node *n) {
  return n->kind == WEFT__OP_SYRK ? n->args[n->nargs - 1].t->shape[0] : n->args[0].t->shape[0];
}

/* The GPU rate a linear-algebra node priced as a product runs at: a gemm with a transposed
 * operand at its own where the profile has it (on an H200, 4096^2 f64 on random values ran at
 * 53 TFLOP/s transposed, T,N in cuBLAS's terms, against 60 not and 63 for the calibration's
 * chain of constant values), else the GEMM curve. */
static const weft__sim_curve *product_curve(const weft__sim_gpu *g, const weft_node *n) {
  const weft__la *la = n->params;
  const weft__sim_curve *t = &g->gemm_t[dtype_index(n)];
  return n->kind == WEFT__OP_GEMM && (la->trans_a || la->trans_b) && t->n > 0 ? t : &g->gemm[dtype_index(n)];
}

/* The cost of a node on a GPU (or on a copy engine), without the host's submission. *share
 * receives the part of the device a kernel needs to run at full speed (des.c shares the device
 * in start order): a product's from the profile's measured gemm_f32_share where it has one,
 * otherwise the time its work would take at the device's peak over its modelled time, so a
 * kernel held up by the launch floor leaves room for others on other streams, and a large one
 * fills the device. Copies between devices run on copy engines (share 0). */
double weft__cost_gpu(const weft__cost_model *m, const weft_node *n, double *share) {
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
       * kernels that occupy far more of the device than their throughput needs, so independent
       * small products on several streams overlap far less than the computed share predicts
       * (docs/simulator.md, "The model": the compute engine; bench_cuda_calls's products in a
       * chain and on four streams, docs/benchmarks.md, "Diagnostics"). A product that fills
       * the device takes all of it. */
      if (dtype_index(n) == 0 && g->gemm_share.n > 0)
        measured = fills ? 1.0
                         : WEFT__MIN(1.0, WEFT__MAX(1.0 / g->compute_streams, weft__sim_curve_at(&g->gemm_share, side)));
      break;
    }
    case WEFT__OP_GEMM:
    case WEFT__OP_POTRF:
    case WEFT__OP_TRSM:
    case WEFT__OP_TRMM:
    case WEFT__OP_TRTRI:
    case WEFT__OP_SYRK: {
      /* potrf, trsm, syrk and trtri at their own measured rates by tile side where the profile
       * has them (they run far below a product's rate on the GPU: potrf, trsm and trtri are
       * chains of panel kernels); else (and gemm, trmm) as the product of the same flops, which measured
       * times refine. potrf's share of the device is what its rate leaves of its peak (its panel kernels
       * are small). A trsm whose result has a 128 x 128 tile for every SM takes the whole
       * device however slowly it goes: cuBLAS's trsm launches a full grid, and beside other
       * kernels it stretches accordingly (a tiled Cholesky on 2 H200s, tiles of 2048: trsm
       * 0.85 ms alone, 1.9 ms median beside the updates). */
      double f = weft__la_flops(n);
      /* A GPU's trmm runs out of place at about 0.8 x a product's rate, then a copy (cuda_launch.c). */
      if (n->kind == WEFT__OP_TRMM) f *= 1.25;
      const weft__sim_curve *lc = la_curve(g->la, n);
      t = lc != NULL ? f / weft__sim_curve_at(lc, (double)la_side(n)) : la_s(product_curve(g, n), 1, f);
      tpeak = f / peak_of(gc);
      if (n->kind == WEFT__OP_TRMM) t += (double)(2 * n->args[1].t->bytes) / g->memory_bandwidth;
      if (n->kind == WEFT__OP_TRSM) {
        const weft_tensor *out = n->args[n->nargs - 1].t;
        if (((out->shape[0] + 127) / 128) * ((out->shape[1] + 127) / 128) >= g->multiprocessors) measured = 1.0;
      }
      break;
    }
    case WEFT__OP_FILL:
      t = tpeak = (double)t0->bytes / (weft__node_fill(n).kind == WEFT_INIT_UNIFORM || weft__node_fill(n).kind == WEFT_INIT_NORMAL
                                           ? g->fill_bandwidth
                                           : g->memory_bandwidth);
      break;
    case WEFT__OP_COPY: {
      const weft_tensor *src = t0, *dst = n->args[1].t;
      size_t bytes = src->bytes;
      if (!weft__cost_crosses(n)) {
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
double weft__cost_cpu(const weft__cost_model *m, const weft_node *n) {
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
    case WEFT__OP_GEMM:
    case WEFT__OP_POTRF:
    case WEFT__OP_TRSM:
    case WEFT__OP_TRMM:
    case WEFT__OP_TRTRI:
    case WEFT__OP_SYRK: {
      t = la_s(&h->gemm[dtype_index(n)], m->blas_threads, weft__la_flops(n));
      break;
    }
    case WEFT__OP_FILL:
      t = weft__node_fill(n).kind == WEFT_INIT_UNIFORM || weft__node_fill(n).kind == WEFT_INIT_NORMAL
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

int weft__cost_cpu_splits(const weft_node *n) {
  if (n->kind == WEFT__OP_GEMM) return weft__la_flops(n) >= WEFT__CPU_SPLIT_FLOPS;
  if (n->kind != WEFT__OP_MM) return 0;
  const weft_tensor *a = n->args[0].t;
  return 2.0 * (double)a->shape[0] * (double)a->shape[1] * (double)n->args[1].t->shape[1] >= WEFT__CPU_SPLIT_FLOPS;
}

double weft__cost_cpu_wide(const weft__cost_model *m, const weft_node *n) {
  const weft__sim_host *h = &m->prof.host;
  if (n->nargs == 0) return -1;
  const weft__sim_curve *c = &h->gemm_wide[dtype_index(n)];
  if (c->n == 0) return -1;
  const weft_tensor *t0 = n->args[0].t;
  switch (n->kind) {
    case WEFT__OP_MM:
      return h->node_s + gemm_s(c, 1, t0->shape[0], n->args[1].t->shape[1], t0->shape[1]);
    case WEFT__OP_GEMM:
    case WEFT__OP_POTRF:
    case WEFT__OP_TRSM:
    case WEFT__OP_TRMM:
    case WEFT__OP_TRTRI:
    case WEFT__OP_SYRK: {
      const weft__sim_curve *lc = la_curve(h->la_wide, n);
      double f = weft__la_flops(n);
      return h->node_s + (lc != NULL ? f / weft__sim_curve_at(lc, (double)la_side(n)) : la_s(c, 1, f));
    }
    default:
      return -1;
  }
}

/* Host time to enqueue a GPU node: a launch (a product's costs gemm_launch_s: cuBLAS does more
 * on the host than one of weft's kernels), plus an event for each predecessor on another GPU
 * stream (record there, wait here). With others ready, workers launch on several streams at
 * once (des.c divides by launch_lanes), but an f32 product that does not fill the device, of a
 * size within gemm_f32_wide_s, adds no less than that curve to an eager run: the measured time
 * of each of many independent ones (smaller products are what launch_lanes is measured on).
 * Those calls contend in cuBLAS and the driver (docs/simulator.md, "The model": host
 * submission). */
void weft__cost_submit(const weft__cost_model *m, const weft_node *nd, int events, double *submit,
                       double *submit_min) {
  const weft__sim_gpu *g = &m->prof.gpu;
  int product = nd->kind == WEFT__OP_MM || nd->kind == WEFT__OP_LINEAR;
  int blas = product || weft__la_flops(nd) >= 0; /* a cuBLAS or cuSOLVER call */
  double launch = blas && g->gemm_launch_s > 0 ? g->gemm_launch_s : g->launch_s;
  *submit = launch + events * g->event_s;
  *submit_min = 0;
  const weft__sim_curve *wide = &g->gemm_wide_s;
  if (!product || wide->n == 0 || dtype_index(nd) != 0 || weft__plan_fills_device(nd, g->multiprocessors)) return;
  double side = product_side(nd);
  if (side >= wide->x[0] && side <= wide->x[wide->n - 1]) *submit_min = weft__sim_curve_at(wide, side);
}

double weft__cost_batch_op(const weft__cost_model *m, const weft_node *n, int first) {
  const weft__sim_gpu *g = &m->prof.gpu;
  double bytes = (double)n->args[0].t->bytes * 3;
  return WEFT__MAX(g->batch_op_s, bytes / g->memory_bandwidth) + (first ? g->kernel_s : 0);
}
