/* calibrate.c — `weft calibrate`: measures a machine profile by running graphs through weft.
 *
 * Every figure comes from timing weft itself, so a profile prices what weft achieves on the
 * machine (its dispatcher, its kernels, its copies), not what the hardware could do:
 *   per-node costs   a graph of K nodes and one of 2K nodes of the same kind, each run several
 *                    times; the median times' difference over K is the cost of one node, so
 *                    fixed costs (launch, wait, the last notification) cancel;
 *   steady state     rates and bandwidths are taken on re-runs (after a warm-up run), host
 *                    costs of a first run on fresh graphs (a re-run may be a replay);
 *   fitted figures   the event cost from a fork-join pattern against a plain chain; the
 *                    GPU-to-host notification from a GPU/CPU round trip, against the same graph
 *                    simulated with the figures measured so far and no notification cost;
 *   against a chain  the share of the device a small product occupies (K independent products
 *                    over a chain of K), a launch's extra cost while other launches wait
 *                    (independent tiny products over a chain of them, eager), the cost of a
 *                    temporary (a chain whose every node makes one over the plain chain, eager
 *                    and replayed);
 *   the wake-up      how much later weft_run_wait returns after a run long enough for its caller
 *                    to fall asleep than after a short one.
 * A simulated runtime's runs take virtual time, so calibrating one gives its profile back —
 * which is how CI checks this file without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sched/plan/plan.h"
#include "backends/sim/sim_internal.h"
#include "sched/sched.h"
#include "weft/sim.h"
#if WEFT_HAVE_CUDA
#include "weft/cuda.h"
#endif

void weft_calibrate_options_init(weft_calibrate_options *o) {
  memset(o, 0, sizeof *o);
}

typedef struct cal {
  weft_runtime *rt;
  int simulated;
  int quick;
  int reps;
  FILE *log;
} cal;

static void say(const cal *c, const char *fmt, ...) WEFT__PRINTF(2, 3);
static void say(const cal *c, const char *fmt, ...) {
  if (c->log == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(c->log, "calibrate: ");
  vfprintf(c->log, fmt, ap);
  fprintf(c->log, "\n");
  va_end(ap);
  fflush(c->log);
}

/* One run of g: wall-clock seconds, or virtual ones on a simulated runtime. */
static int timed_run(const cal *c, weft_graph *g, double *out) {
  struct timespec t0, t1;
  weft_run *r;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = weft_graph_launch(g, &r);
  if (rc != WEFT_OK) return rc;
  rc = weft_run_wait(r);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (rc == WEFT_OK && c->simulated) {
    weft_sim_summary s;
    rc = weft_sim_run_summary(r, &s);
    *out = s.makespan_s;
  } else {
    *out = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  }
  weft_run_destroy(r);
  return rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0..n) (v is reordered). */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Builds the graph of k nodes of a measurement into the empty graph g. */
typedef int (*build_fn)(weft_graph *g, const void *arg, int k);

enum { MAX_REPS = 31 };

/* Median time of one graph of k nodes: fresh graphs each time (first = 1), or re-runs of one
 * graph after a warm-up run (first = 0). */
static int time_graph(const cal *c, build_fn build, const void *arg, int k, int first, double *out) {
  double t[MAX_REPS];
  weft_graph *g = NULL;
  int rc = WEFT_OK;
  for (int r = 0; r < c->reps && rc == WEFT_OK; r++) {
    if (g == NULL || first) {
      weft_graph_destroy(g);
      if ((rc = weft_graph_create(c->rt, &g)) != WEFT_OK) return rc;
      if ((rc = build(g, arg, k)) != WEFT_OK) break;
      if (!first && (rc = timed_run(c, g, &t[r])) != WEFT_OK) break; /* the warm-up */
    }
    rc = timed_run(c, g, &t[r]);
  }
  weft_graph_destroy(g);
  if (rc == WEFT_OK) *out = median(t, c->reps);
  return rc;
}

/* The cost of one node: graphs of k and 2k nodes, their median times' difference over k. The
 * count k is chosen so that the longer graph takes about `target` seconds (4 to 2000 nodes),
 * and the shorter one outlasts weft_run_wait's watch twice (up to MAX_K nodes): a caller then
 * sleeps through both runs, and its wake-up cancels with the other fixed costs. */
enum { MAX_K = 20000 };
static int per_node(const cal *c, build_fn build, const void *arg, int first, double target,
                    double *out) {
  double t1, t2, probe, watch = 2e-9 * (double)WEFT__WAIT_SPIN_NS;
  int rc = time_graph(c, build, arg, 4, first, &probe);
  if (rc != WEFT_OK) return rc;
  int k = (int)WEFT__MIN(2000.0, WEFT__MAX(4.0, target / WEFT__MAX(probe / 4, 1e-9) / 2));
  if ((rc = time_graph(c, build, arg, k, first, &t1)) != WEFT_OK) return rc;
  if (t1 < watch && k < MAX_K) {
    k = (int)WEFT__MIN((double)MAX_K, ceil(k * watch / WEFT__MAX(t1, 1e-9)));
    if ((rc = time_graph(c, build, arg, k, first, &t1)) != WEFT_OK) return rc;
  }
  if ((rc = time_graph(c, build, arg, 2 * k, first, &t2)) != WEFT_OK) return rc;
  double d = (t2 - t1) / k;
  *out = d > 0 ? d : t2 / (2 * k); /* noise larger than the signal: the plain mean */
  return WEFT_OK;
}

/* The host costs of small nodes, and the links, are what these VMs disturb most, and not only
 * from one measurement to the next: one calibration on the H100 measured independent tiny
 * products at 15.4 us each where the call before measured 2.6, and on one VM bursts of the
 * same eager run seconds apart differed by 20-35% (docs/benchmarks.md). So such a figure is
 * the median of SPREAD measurements SPREAD_GAP_MS apart, taken over a second or more (one on
 * a simulated machine, which is exact). */
enum { SPREAD = 5, SPREAD_GAP_MS = 250 };

static void pause_between(void) {
  struct timespec gap = {0, SPREAD_GAP_MS * 1000000L};
  nanosleep(&gap, NULL);
}

static int per_node_med(const cal *c, build_fn build, const void *arg, int first, double target, double *out) {
  double v[SPREAD];
  int n = c->simulated ? 1 : SPREAD;
  for (int i = 0; i < n; i++) {
    if (i > 0) pause_between();
    int rc = per_node(c, build, arg, first, target, &v[i]);
    if (rc != WEFT_OK) return rc;
  }
  *out = median(v, n);
  return WEFT_OK;
}

/* time_graph likewise: the median of SPREAD medians SPREAD_GAP_MS apart. */
static int time_spread(const cal *c, build_fn build, const void *arg, int k, int first, double *out) {
  double v[SPREAD];
  int n = c->simulated ? 1 : SPREAD;
  for (int i = 0; i < n; i++) {
    if (i > 0) pause_between();
    int rc = time_graph(c, build, arg, k, first, &v[i]);
    if (rc != WEFT_OK) return rc;
  }
  *out = median(v, n);
  return WEFT_OK;
}

/* Batches are measured on chains of 2 BATCH_K nodes: a node's cost settles only in graphs of
 * thousands of nodes (bench_gpu_costs: 0.30-0.34 us a batched node from 2 000 nodes up on the
 * H100), and 8 000 nodes make 62 whole batches of 128 and a part. */
#define BATCH_K 4000

/* ---- the graphs ------------------------------------------------------------------------------ */

typedef struct gemm_arg {
  weft_device dev;
  int64_t n;
  int dtype;
} gemm_arg;

/* a = b.w and b = a.w, alternately: a chain of k products into existing tensors. */
static int build_gemm(weft_graph *g, const void *p, int k) {
  const gemm_arg *a = p;
  int64_t shape[2] = {a->n, a->n};
  weft_tensor *x, *y, *w;
  int rc;
  double v = 1.0 / (double)a->n; /* keeps the values bounded when it computes */
  if ((rc = weft_tensor_create(g, "a", a->dtype, 2, shape, a->dev, weft_full(v), &x)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "b", a->dtype, 2, shape, a->dev, weft_full(v), &y)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "w", a->dtype, 2, shape, a->dev, weft_full(1.0), &w)) != WEFT_OK)
    return rc;
  for (int i = 0; i < k; i++)
    if ((rc = (i % 2 ? weft_mm(g, x, w, &y) : weft_mm(g, y, w, &x))) != WEFT_OK) return rc;
  return WEFT_OK;
}

/* k independent products x.x of n x n, each into a new tensor (read by nobody, so allocated
 * once, before the runs): the backend spreads them over its compute streams. */
static int build_wide(weft_graph *g, const void *p, int k) {
  const gemm_arg *a = p;
  int64_t shape[2] = {a->n, a->n};
  weft_tensor *x;
  int rc;
  if ((rc = weft_tensor_create(g, "x", a->dtype, 2, shape, a->dev, weft_full(1.0 / (double)a->n), &x)) != WEFT_OK)
    return rc;
  for (int i = 0; i < k; i++) {
    weft_tensor *y = NULL;
    if ((rc = weft_mm(g, x, x, &y)) != WEFT_OK) return rc;
  }
  return WEFT_OK;
}

typedef struct vec_arg {
  weft_device dev;
  int64_t numel;
  int temps; /* build_add: each addition into a new tensor that the next one reads */
} vec_arg;

/* A chain of k additions x = x + y, in place; or, with temps, each into a new tensor that the
 * next one reads: k - 1 temporaries, which the backend allocates during the run and frees at
 * its end. */
static int build_add(weft_graph *g, const void *p, int k) {
  const vec_arg *a = p;
  weft_tensor *x, *y;
  int rc;
  if ((rc = weft_tensor_create(g, "x", WEFT_F32, 1, &a->numel, a->dev, weft_zeros(), &x)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "y", WEFT_F32, 1, &a->numel, a->dev, weft_ones(), &y)) != WEFT_OK)
    return rc;
  for (int i = 0; i < k; i++) {
    weft_tensor *next = a->temps ? NULL : x;
    if ((rc = weft_add(g, x, y, &next)) != WEFT_OK) return rc;
    x = next;
  }
  return WEFT_OK;
}

static int build_fill(weft_graph *g, const void *p, int k) {
  const vec_arg *a = p;
  weft_tensor *x;
  int rc;
  if ((rc = weft_tensor_create(g, "x", WEFT_F32, 1, &a->numel, a->dev, weft_zeros(), &x)) != WEFT_OK)
    return rc;
  for (int i = 0; i < k; i++)
    if ((rc = weft_fill(g, x, weft_uniform(0, 1, (uint64_t)i))) != WEFT_OK) return rc;
  return WEFT_OK;
}

/* Per iteration: y = x + c and z = x + c on two streams (the second one needs an event from
 * x's stream), then x = y + z (an event from z's stream): three nodes, two events. */
static int build_diamond(weft_graph *g, const void *p, int k) {
  const vec_arg *a = p;
  weft_tensor *x, *y, *z, *one;
  int rc;
  if ((rc = weft_tensor_create(g, "x", WEFT_F32, 1, &a->numel, a->dev, weft_zeros(), &x)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "y", WEFT_F32, 1, &a->numel, a->dev, weft_zeros(), &y)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "z", WEFT_F32, 1, &a->numel, a->dev, weft_zeros(), &z)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "c", WEFT_F32, 1, &a->numel, a->dev, weft_ones(), &one)) != WEFT_OK)
    return rc;
  for (int i = 0; i < k; i++)
    if ((rc = weft_add(g, x, one, &y)) != WEFT_OK || (rc = weft_add(g, x, one, &z)) != WEFT_OK ||
        (rc = weft_add(g, y, z, &x)) != WEFT_OK)
      return rc;
  return WEFT_OK;
}

typedef struct copy_arg {
  weft_device src, dst;
  int64_t numel;
  int pageable; /* the host side in ordinary (pageable) memory */
} copy_arg;

/* k copies of src into the same dst (a chain through the write-after-write edges). */
static int build_copy(weft_graph *g, const void *p, int k) {
  const copy_arg *a = p;
  weft_tensor *s, *d;
  int rc;
  if ((rc = weft_tensor_create(g, "src", WEFT_F32, 1, &a->numel, a->src, weft_ones(), &s)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "dst", WEFT_F32, 1, &a->numel, a->dst, weft_zeros(), &d)) != WEFT_OK)
    return rc;
  if (a->pageable) {
    /* Host storage made before the first launch is ordinary memory (storage.c pins only the
     * host tensors it allocates for a launch that copies them to or from a GPU). */
    weft_tensor *host = a->src.kind == WEFT_DEVICE_CPU ? s : d;
    size_t bytes = weft_tensor_bytes(host);
    void *buf = calloc(1, bytes);
    if (buf == NULL) return weft__oom("a calibration buffer");
    rc = weft_tensor_write(host, buf, bytes);
    free(buf);
    if (rc != WEFT_OK) return rc;
  }
  for (int i = 0; i < k; i++)
    if ((rc = weft_copy(g, s, a->dst, &d)) != WEFT_OK) return rc;
  return WEFT_OK;
}

/* Per iteration: a GPU node, its result copied to the host, a CPU node on it, and the result
 * copied back for the next GPU node. */
static int build_roundtrip(weft_graph *g, const void *p, int k) {
  const vec_arg *a = p;
  weft_tensor *x, *h, *c1, *c2;
  int rc;
  if ((rc = weft_tensor_create(g, "x", WEFT_F32, 1, &a->numel, a->dev, weft_zeros(), &x)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "c", WEFT_F32, 1, &a->numel, a->dev, weft_ones(), &c1)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "h", WEFT_F32, 1, &a->numel, weft_cpu(), weft_zeros(), &h)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "hc", WEFT_F32, 1, &a->numel, weft_cpu(), weft_ones(), &c2)) != WEFT_OK)
    return rc;
  for (int i = 0; i < k; i++)
    if ((rc = weft_add(g, x, c1, &x)) != WEFT_OK || (rc = weft_copy(g, x, weft_cpu(), &h)) != WEFT_OK ||
        (rc = weft_add(g, h, c2, &h)) != WEFT_OK || (rc = weft_copy(g, h, a->dev, &x)) != WEFT_OK)
      return rc;
  return WEFT_OK;
}

/* ---- the measurements --------------------------------------------------------------------------- */

/* Eager runs are what the simulator prices with launch_s and event_s: a graph's first run
 * without the building of its plan (which the model leaves out: it grows with the graph, not
 * per node). On a real GPU they are re-runs with replay off (a fresh graph's first run also
 * builds the plan and its events: 10.4 us a node against 6.6 on the H100); on a simulated one,
 * first runs, since its re-runs are replays. */
static void eager_runs(const cal *c, int on) {
#if WEFT_HAVE_CUDA
  if (!c->simulated) weft_cuda_set_replay(c->rt, !on);
#else
  (void)c;
  (void)on;
#endif
}

/* The model prices batches (a chain of small elementwise nodes launched as one kernel,
 * cuda_plan.c) with their own figures, batch_node_s and batch_op_s, and every other GPU node
 * as one launch; so a calibration measures with batches off — its chains of one-element
 * additions would otherwise be batched — then measures the batches themselves with them on
 * (measure_batches), and leaves them on after, unless WEFT_CUDA_BATCH=0 had them off. The
 * setting applies to graphs planned afterwards, and every measurement plans new graphs. */
static void batching(const cal *c, int on) {
  const char *env = getenv("WEFT_CUDA_BATCH");
  on = on && !(env != NULL && strcmp(env, "0") == 0);
  weft_runtime_set_batching(c->rt, on);
}

/* Batches, with batching on: the chain of one-element additions again, replayed and eager.
 * Replayed, each batch is one kernel of kernel_s plus batch_op_s an op: the mean over a chain
 * of 2 BATCH_K nodes, less the replay's fixed cost (replay_run_s). Eager, a node of a batch
 * costs the host batch_node_s and each batch a launch: the mean over the same chain, less the
 * run's fixed cost (run_s) and the last batch's kernel, which runs once the host is done. One
 * long chain varies less than a difference of two: on the H100 the difference of 4 000 and
 * 8 000 nodes gave 0.36 us a node eager where 8 000 alone gave 0.34 (and the 10 000 of
 * bench_gpu_dispatch 0.29 in the same call), and replayed, in one call 0.11 and in another
 * 0.165 us where bench_gpu_dispatch measured 0.20-0.22. The model's terms are in des.c. */
static int measure_batches(const cal *c, weft__sim_gpu *g) {
  vec_arg tiny = {weft_cuda(0), 1};
  double eager = 0, replay = 0;
  cal many = *c; /* a run takes milliseconds: the median of many */
  many.reps = c->quick ? c->reps : MAX_REPS;
  int rc = time_spread(&many, build_add, &tiny, 2 * BATCH_K, 0, &replay);
  eager_runs(c, 1);
  if (rc == WEFT_OK) rc = time_spread(&many, build_add, &tiny, 2 * BATCH_K, c->simulated, &eager);
  eager_runs(c, 0);
  if (rc != WEFT_OK) return rc;
  replay = WEFT__MAX(0.0, replay - g->replay_run_s) / (2 * BATCH_K);
  g->batch_op_s = WEFT__MAX(1e-9, replay - g->kernel_s / WEFT__PLAN_BATCH_MAX);
  double last = g->kernel_s + WEFT__PLAN_BATCH_MAX * g->batch_op_s;
  eager = WEFT__MAX(0.0, eager - g->run_s - last) / (2 * BATCH_K);
  g->batch_node_s = WEFT__MAX(1e-9, eager - g->launch_s / WEFT__PLAN_BATCH_MAX);
  say(c, "cuda:0: batched, a node costs %.3g us in an eager run, %.3g us replayed: %.3g us of the host a node, "
      "%.3g us of the device an op", eager * 1e6, replay * 1e6, g->batch_node_s * 1e6, g->batch_op_s * 1e6);
  return WEFT_OK;
}

/* GEMM rates over sizes; `overhead` (the CPU dispatcher's cost per node) is not the GEMM's. */
static int gemm_curve(const cal *c, weft_device dev, int dtype, const int64_t *sizes, int nsizes,
                      double target, double threads, double overhead, weft__sim_curve *out) {
  out->n = 0;
  for (int i = 0; i < nsizes; i++) {
    gemm_arg a = {dev, sizes[i], dtype};
    double t;
    int rc = per_node(c, build_gemm, &a, 0, target, &t);
    if (rc != WEFT_OK) return rc;
    double n = (double)sizes[i];
    t = WEFT__MAX(t - overhead, t * 0.5);
    out->x[out->n] = n;
    out->y[out->n] = 2 * n * n * n / t / threads;
    char d[32];
    say(c, "%s gemm %s %lld: %.3g s a product, %.4g GFLOP/s%s", weft_device_str(dev, d, sizeof d),
        dtype == WEFT_F64 ? "f64" : "f32", (long long)sizes[i], t, out->y[out->n] * 1e-9,
        threads > 1 ? " a thread" : "");
    out->n++;
  }
  return WEFT_OK;
}

/* The part of the device a product occupies, for the f32 sizes of the GEMM curve that do not
 * fill the device (a 128 x 128 output tile per SM): K independent products (replayed; the
 * backend spreads them over its compute streams) against the curve's chain of K, clamped to
 * [1 / compute streams, 1]. Larger products take the whole device. And what each of the K adds
 * to an eager run (gemm_f32_wide_s): where the host's launches are slower than the device, the
 * least a launch takes among others (sim_backend.c, submit_costs). */
static int gemm_shares(const cal *c, weft_device dev, weft__sim_gpu *g) {
  const weft__sim_curve *rate = &g->gemm[0];
  int S = g->compute_streams > 0 ? g->compute_streams : 1;
  g->gemm_share.n = g->gemm_wide_s.n = 0;
  for (int i = 0; i < rate->n; i++) {
    int64_t n = (int64_t)rate->x[i], tiles = (n + 127) / 128;
    if (tiles * tiles >= g->multiprocessors) break;
    gemm_arg a = {dev, n, WEFT_F32};
    double wide, chain = 2.0 * rate->x[i] * rate->x[i] * rate->x[i] / rate->y[i];
    double eager;
    int rc = per_node(c, build_wide, &a, 0, 0.03, &wide);
    if (rc != WEFT_OK) return rc;
    /* In runs of a few milliseconds, the length of the benchmarks' eager runs (runs of 30 ms
     * gave the same within 3% on the H100: 6.3-6.5 us a 400^2 product). */
    eager_runs(c, 1);
    rc = per_node_med(c, build_wide, &a, c->simulated, 0.004, &eager);
    eager_runs(c, 0);
    if (rc != WEFT_OK) return rc;
    double share = WEFT__MIN(1.0, WEFT__MAX(1.0 / S, wide / chain));
    g->gemm_share.x[g->gemm_share.n] = g->gemm_wide_s.x[g->gemm_wide_s.n] = rate->x[i];
    g->gemm_share.y[g->gemm_share.n++] = share;
    g->gemm_wide_s.y[g->gemm_wide_s.n++] = eager;
    say(c, "cuda:0: independent products of %lld^2 take %.3g us each (%.3g us eager), %.3g us in a chain: share %.3g",
        (long long)n, wide * 1e6, eager * 1e6, chain * 1e6, share);
  }
  return WEFT_OK;
}

/* A link: bandwidth from `big` elements and latency from one element. */
static int measure_link(const cal *c, copy_arg a, int64_t big, const char *what, weft__sim_link *out) {
  double t_small, t_big;
  a.numel = 1;
  int rc = per_node_med(c, build_copy, &a, 0, 0.02, &t_small);
  if (rc != WEFT_OK) return rc;
  a.numel = big;
  if ((rc = per_node_med(c, build_copy, &a, 0, 0.3, &t_big)) != WEFT_OK) return rc;
  double bytes = 4.0 * (double)big;
  out->latency_s = t_small;
  out->bandwidth = bytes / WEFT__MAX(t_big - t_small, t_big * 0.5);
  say(c, "%s: %.4g GB/s, latency %.3g us", what, out->bandwidth * 1e-9, out->latency_s * 1e6);
  return WEFT_OK;
}

static int measure_host(const cal *c, weft__sim_host *h) {
  static const int64_t full[] = {64, 128, 256, 512, 1024}, quick[] = {128, 512};
  const int64_t *sizes = c->quick ? quick : full;
  int ns = c->quick ? 2 : 5;
  weft_device cpu = weft_cpu();
  weft_device_info info;
  int rc = weft_device_info_get(c->rt, cpu, &info);
  if (rc != WEFT_OK) return rc;
  snprintf(h->name, sizeof h->name, "%s", info.name);
  const char *suffix = strstr(h->name, " (simulated)");
  if (suffix != NULL) h->name[suffix - h->name] = '\0';
  h->cores = info.multiprocessors;
  h->memory_bytes = info.memory_bytes;
  /* One chain runs on one worker, whose GEMMs use the runtime's BLAS threads. */
  double threads = c->simulated ? ((const weft__sim *)c->rt->by_kind[WEFT_DEVICE_CPU]->state)->cost.blas_threads
                                 : c->rt->blas_threads;
  vec_arg big = {cpu, 4 << 20}, tiny = {cpu, 1};
  double t, t_tiny;
  if ((rc = per_node(c, build_add, &tiny, 0, 0.01, &t_tiny)) != WEFT_OK) return rc;
  h->node_s = t_tiny;
  if ((rc = gemm_curve(c, cpu, WEFT_F32, sizes, ns, 0.1, threads, t_tiny, &h->gemm[0])) != WEFT_OK ||
      (rc = gemm_curve(c, cpu, WEFT_F64, sizes, ns, 0.1, threads, t_tiny, &h->gemm[1])) != WEFT_OK)
    return rc;
  if ((rc = per_node(c, build_add, &big, 0, 0.1, &t)) != WEFT_OK) return rc;
  h->memory_bandwidth = 12.0 * (double)big.numel / WEFT__MAX(t - t_tiny, t * 0.5);
  if ((rc = per_node(c, build_fill, &big, 0, 0.1, &t)) != WEFT_OK) return rc;
  h->fill_rate = (double)big.numel / WEFT__MAX(t - t_tiny, t * 0.5);
  say(c, "cpu: %.3g us a node, %.4g GB/s a thread, %.4g M random values/s a thread",
      h->node_s * 1e6, h->memory_bandwidth * 1e-9, h->fill_rate * 1e-6);
  return WEFT_OK;
}

static int measure_gpu(const cal *c, weft__sim_profile *p, int ngpus) {
  /* Powers of two and round decimal sizes, the two families programs use: cuBLAS's time is
   * not smooth in n (on the H100 a 100^2 product took longer than a 128^2 one), so the curve
   * holds both rather than interpolating one from the other. */
  static const int64_t full[] = {64, 100, 128, 200, 256, 400, 512, 1000, 1024, 2000, 2048, 4000, 4096, 8192},
                       quick[] = {256, 1024, 4096};
  static const int64_t full64[] = {256, 1024, 4096}, quick64[] = {1024};
  weft__sim_gpu *g = &p->gpu;
  weft_device dev = weft_cuda(0);
  weft_device_info info;
  int rc = weft_device_info_get(c->rt, dev, &info);
  if (rc != WEFT_OK) return rc;
  snprintf(g->name, sizeof g->name, "%s", info.name);
  const char *suffix = strstr(g->name, " (simulated)");
  if (suffix != NULL) g->name[suffix - g->name] = '\0';
  g->memory_bytes = info.memory_bytes;
  g->cc_major = info.compute_major;
  g->cc_minor = info.compute_minor;
  g->multiprocessors = info.multiprocessors;
  g->copy_engines = WEFT__MIN(3, WEFT__MAX(1, info.copy_engines));
  if (c->simulated) g->compute_streams = ((const weft__sim *)c->rt->by_kind[WEFT_DEVICE_CPU]->state)->cost.prof.gpu.compute_streams;
  if ((rc = gemm_curve(c, dev, WEFT_F32, c->quick ? quick : full, c->quick ? 3 : 14, 0.2, 1, 0, &g->gemm[0])) != WEFT_OK ||
      (rc = gemm_curve(c, dev, WEFT_F64, c->quick ? quick64 : full64, c->quick ? 1 : 3, 0.2, 1, 0, &g->gemm[1])) != WEFT_OK ||
      (rc = gemm_shares(c, dev, g)) != WEFT_OK)
    return rc;
  /* Small nodes: a chain of one-element additions, eager runs and re-runs (replays). */
  vec_arg tiny = {dev, 1, 0}, tiny_temps = {dev, 1, 1}, big = {dev, 16 << 20, 0};
  gemm_arg tiny_mm = {dev, 16, WEFT_F32};
  double first, again, diamond, first_mm, wide_mm, first_temps, again_temps, t;
  eager_runs(c, 1);
  if ((rc = per_node_med(c, build_add, &tiny, c->simulated, 0.01, &first)) == WEFT_OK &&
      (rc = per_node_med(c, build_diamond, &tiny, c->simulated, 0.01, &diamond)) == WEFT_OK &&
      (rc = per_node_med(c, build_gemm, &tiny_mm, c->simulated, 0.01, &first_mm)) == WEFT_OK &&
      (rc = per_node_med(c, build_wide, &tiny_mm, c->simulated, 0.01, &wide_mm)) == WEFT_OK)
    rc = per_node_med(c, build_add, &tiny_temps, c->simulated, 0.01, &first_temps);
  eager_runs(c, 0);
  if (rc != WEFT_OK || (rc = per_node_med(c, build_add, &tiny, 0, 0.01, &again)) != WEFT_OK ||
      (rc = per_node_med(c, build_add, &tiny_temps, 0, 0.01, &again_temps)) != WEFT_OK)
    return rc;
  g->launch_s = first;
  g->gemm_launch_s = first_mm; /* a chain of 16^2 products: the host's cost bounds it */
  g->kernel_s = WEFT__MIN(first, again);
  g->replay_node_s = WEFT__MIN(again, first);
  /* Independent tiny products: workers launch them at once, on different streams (the
   * device's time is far shorter than the host's), against a chain, where one launch follows
   * another: how many launches overlap, at most one a compute stream (each has a lock). */
  g->launch_lanes = WEFT__MIN((double)g->compute_streams, WEFT__MAX(1.0, first_mm / wide_mm));
  /* A diamond's three launches and two events: its first branch is launched while the second
   * is ready too, in 1 / min(lanes, 2) of a launch (des.c), the rest one after the other. */
  g->event_s = WEFT__MAX(0.0, (diamond - (2 + 1 / WEFT__MIN(2.0, g->launch_lanes)) * first) / 2);
  /* A chain whose every node makes a temporary, against the plain chain. */
  g->temp_s = WEFT__MAX(0.0, first_temps - first);
  g->replay_temp_s = WEFT__MAX(0.0, again_temps - again);
  say(c, "cuda:0: a node costs %.3g us in an eager run (a product %.3g us, %.3g us launched with "
      "others ready: %.3g launches at once), %.3g us replayed; %.3g us an event; a temporary %.3g us eager, "
      "%.3g us replayed",
      first * 1e6, first_mm * 1e6, wide_mm * 1e6, g->launch_lanes, again * 1e6, g->event_s * 1e6, g->temp_s * 1e6,
      g->replay_temp_s * 1e6);
  if ((rc = per_node(c, build_add, &big, 0, 0.1, &t)) != WEFT_OK) return rc;
  /* A kernel's fixed cost is a floor in the model (kernel_s), not an addition: a large
   * kernel's whole time prices its bytes. */
  g->memory_bandwidth = 12.0 * (double)big.numel / t;
  if ((rc = per_node(c, build_fill, &big, 0, 0.1, &t)) != WEFT_OK) return rc;
  g->fill_bandwidth = 4.0 * (double)big.numel / t;
  say(c, "cuda:0: memory %.4g GB/s, random fill %.4g GB/s", g->memory_bandwidth * 1e-9,
      g->fill_bandwidth * 1e-9);
  int64_t bigcopy = (c->quick ? 16 : 64) << 20; /* elements: 64 or 256 MiB */
  weft_device cpu = weft_cpu();
  if ((rc = measure_link(c, (copy_arg){cpu, dev, 0, 0}, bigcopy, "host->cuda:0 pinned", &p->h2d)) != WEFT_OK ||
      (rc = measure_link(c, (copy_arg){dev, cpu, 0, 0}, bigcopy, "cuda:0->host pinned", &p->d2h)) != WEFT_OK ||
      (rc = measure_link(c, (copy_arg){cpu, dev, 0, 1}, bigcopy / 4, "host->cuda:0 pageable", &p->h2d_pageable)) != WEFT_OK ||
      (rc = measure_link(c, (copy_arg){dev, cpu, 0, 1}, bigcopy / 4, "cuda:0->host pageable", &p->d2h_pageable)) != WEFT_OK)
    return rc;
  p->peer_access = ngpus > 1 && weft_device_can_access_peer(c->rt, dev, weft_cuda(1));
  if (p->peer_access &&
      (rc = measure_link(c, (copy_arg){dev, weft_cuda(1), 0, 0}, bigcopy, "cuda:0->cuda:1", &p->peer)) != WEFT_OK)
    return rc;
  return WEFT_OK;
}

/* A simulated runtime of one GPU on profile q, and a calibration context measuring on it, for
 * the figures fitted against the model (the runtime is sc->rt, the caller's to destroy). */
static int model(const cal *c, const weft__sim_profile *q, cal *sc) {
  char path[] = "/tmp/weft-calibrate-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return weft__err(WEFT_EIO, "calibrate: cannot create a temporary file in /tmp");
  close(fd);
  weft__sim_profile one = *q;
  one.ngpus = 1;
  weft_runtime *sim = NULL;
  int rc = weft__sim_profile_write(&one, path);
  if (rc == WEFT_OK) {
    weft_runtime_options o;
    weft_runtime_options_init(&o);
    o.simulate = path;
    o.flags = WEFT_RUNTIME_QUIET;
    o.cpu_workers = 1;
    rc = weft_runtime_create(&o, &sim);
  }
  remove(path);
  if (rc != WEFT_OK) return rc;
  *sc = *c;
  sc->rt = sim;
  sc->simulated = 1;
  sc->reps = 1;
  return WEFT_OK;
}

/* A run's fixed cost (run_s eager, replay_run_s replayed): a graph of one tiny GPU node, the
 * median of MAX_REPS runs (the VMs move it from run to run: 38-122 us on one H200 in one
 * minute), less the same graph simulated with every other figure as measured and no fixed
 * cost. */
static int fit_run(const cal *c, weft__sim_profile *p) {
  vec_arg a = {weft_cuda(0), 1, 0};
  cal many = *c;
  many.reps = c->quick ? 5 : MAX_REPS;
  double eager, replay, m_eager, m_replay;
  eager_runs(c, 1);
  int rc = time_spread(&many, build_add, &a, 1, c->simulated, &eager);
  eager_runs(c, 0);
  if (rc != WEFT_OK || (rc = time_spread(&many, build_add, &a, 1, 0, &replay)) != WEFT_OK) return rc;
  weft__sim_profile q = *p;
  q.gpu.run_s = q.gpu.replay_run_s = 0;
  cal sc;
  if ((rc = model(c, &q, &sc)) != WEFT_OK) return rc;
  if ((rc = time_graph(&sc, build_add, &a, 1, 1, &m_eager)) == WEFT_OK)
    rc = time_graph(&sc, build_add, &a, 1, 0, &m_replay);
  weft_runtime_destroy(sc.rt);
  if (rc != WEFT_OK) return rc;
  p->gpu.run_s = WEFT__MAX(0.0, eager - m_eager);
  p->gpu.replay_run_s = WEFT__MAX(0.0, replay - m_replay);
  say(c, "cuda:0: a run of one tiny node takes %.3g us eager, %.3g us replayed: %.3g and %.3g us of "
      "it are the run's fixed cost", eager * 1e6, replay * 1e6, p->gpu.run_s * 1e6, p->gpu.replay_run_s * 1e6);
  return WEFT_OK;
}

/* How long weft_run_wait takes to return once a run has ended (the run's end is stamped on the
 * clock of node timing): the median over SPREAD rounds SPREAD_GAP_MS apart of the median of
 * MAX_REPS re-runs of one graph of k nodes. */
static int return_med(const cal *c, const void *arg, int k, double *out) {
  double v[SPREAD];
  for (int i = 0; i < SPREAD; i++) {
    if (i > 0) pause_between();
    weft_graph *g;
    int rc = weft_graph_create(c->rt, &g);
    if (rc != WEFT_OK) return rc;
    double t[MAX_REPS];
    if ((rc = build_add(g, arg, k)) == WEFT_OK) rc = weft_graph_run(g); /* the warm-up */
    for (int r = 0; r < MAX_REPS && rc == WEFT_OK; r++) {
      weft_run *run;
      if ((rc = weft_graph_launch(g, &run)) != WEFT_OK) break;
      rc = weft_run_wait(run);
      uint64_t back = weft__clock_now();
      t[r] = back > run->t_end ? (double)(back - run->t_end) * 1e-9 : 0;
      weft_run_destroy(run);
    }
    weft_graph_destroy(g);
    if (rc != WEFT_OK) return rc;
    v[i] = median(t, MAX_REPS);
  }
  *out = median(v, SPREAD);
  return WEFT_OK;
}

/* A sleeping caller's wake-up (host.wake_s): weft_run_wait's return after a chain of CPU
 * additions long enough for the caller to fall asleep (milliseconds), less the same after one
 * tiny addition, which it watches awake. On a simulated machine (no real caller): the long
 * chain's makespan less the same simulated without the figure. */
static int fit_wake(const cal *c, weft__sim_profile *p) {
  enum { LONG_K = 64 };
  vec_arg big = {weft_cpu(), 1 << 16, 0}, tiny = {weft_cpu(), 1, 0};
  double slept, awake;
  int rc;
  if (c->simulated) {
    weft__sim_profile q = *p;
    q.host.wake_s = 0;
    cal sc;
    if ((rc = time_graph(c, build_add, &big, LONG_K, 0, &slept)) != WEFT_OK || (rc = model(c, &q, &sc)) != WEFT_OK)
      return rc;
    rc = time_graph(&sc, build_add, &big, LONG_K, 0, &awake);
    weft_runtime_destroy(sc.rt);
  } else if ((rc = return_med(c, &big, LONG_K, &slept)) == WEFT_OK) {
    rc = return_med(c, &tiny, 1, &awake);
  }
  if (rc != WEFT_OK) return rc;
  p->host.wake_s = WEFT__MAX(0.0, slept - awake);
  say(c, "cpu: a caller asleep in weft_run_wait takes %.3g us more to return (%.3g us after a long run, %.3g after a short one)",
      p->host.wake_s * 1e6, slept * 1e6, awake * 1e6);
  return WEFT_OK;
}

/* The GPU-to-host notification: a round trip measured, minus the same graph simulated with
 * every other figure as measured and no notification cost; one notification an iteration. */
static int fit_notify(const cal *c, weft__sim_profile *p) {
  vec_arg a = {weft_cuda(0), 1};
  double measured, modelled;
  int rc = per_node_med(c, build_roundtrip, &a, 0, 0.02, &measured);
  if (rc != WEFT_OK) return rc;
  weft__sim_profile q = *p;
  q.gpu.notify_s = 0;
  cal sc;
  if ((rc = model(c, &q, &sc)) != WEFT_OK) return rc;
  rc = per_node(&sc, build_roundtrip, &a, 0, 0.02, &modelled);
  weft_runtime_destroy(sc.rt);
  if (rc != WEFT_OK) return rc;
  p->gpu.notify_s = WEFT__MAX(0.0, measured - modelled);
  say(c, "cuda:0: a GPU->CPU->GPU round trip takes %.3g us; %.3g us of it is the notification",
      measured * 1e6, p->gpu.notify_s * 1e6);
  return WEFT_OK;
}

int weft_calibrate(weft_runtime *rt, const weft_calibrate_options *o, const char *out_path) {
  if (rt == NULL || out_path == NULL) return weft__err(WEFT_EINVAL, "weft_calibrate: NULL argument");
  weft_calibrate_options def;
  if (o == NULL) {
    weft_calibrate_options_init(&def);
    o = &def;
  }
  cal c = {rt, weft_sim_active(rt), o->quick, o->quick ? 3 : 5, o->log};
  weft__sim_profile *p = weft__calloc(1, sizeof *p);
  if (p == NULL) return weft__oom("a machine profile");
  /* Figures that cannot be measured start from the shipped h100 profile. */
  int rc = weft__sim_profile_load("h100", p);
  if (rc != WEFT_OK) goto done;
  snprintf(p->name, sizeof p->name, "%s", o->name != NULL ? o->name : "calibrated");
  int ngpus = weft_device_count(rt, WEFT_DEVICE_CUDA);
  say(&c, "measuring %s with %d GPU%s (%s)", c.simulated ? "a simulated machine" : "this machine",
      ngpus, ngpus == 1 ? "" : "s", c.quick ? "quick" : "full");
  if ((rc = measure_host(&c, &p->host)) != WEFT_OK || (rc = fit_wake(&c, p)) != WEFT_OK) goto done;
  p->ngpus = ngpus;
  if (ngpus > 0) {
    batching(&c, 0);
    if ((rc = measure_gpu(&c, p, ngpus)) == WEFT_OK && (rc = fit_notify(&c, p)) == WEFT_OK) rc = fit_run(&c, p);
    batching(&c, 1);
    const char *env = getenv("WEFT_CUDA_BATCH");
    if (rc == WEFT_OK && !(env != NULL && strcmp(env, "0") == 0)) rc = measure_batches(&c, &p->gpu);
    if (rc != WEFT_OK) goto done;
  }
  time_t now = time(NULL);
  struct tm tmv;
  char date[32];
  strftime(date, sizeof date, "%Y-%m-%d", gmtime_r(&now, &tmv));
  snprintf(p->source, sizeof p->source,
           "Measured by weft calibrate%s on %s (%s, %d GPU%s). compute_streams is the CUDA "
           "backend's setting, not a measurement.%s",
           c.quick ? " --quick" : "", date, c.simulated ? "a simulated machine" : "this machine",
           ngpus, ngpus == 1 ? "" : "s",
           ngpus == 0 ? " No GPU: the gpu section is the shipped h100 profile's, unmeasured, and "
                        "its count is 0." : "");
  rc = weft__sim_profile_write(p, out_path);
  if (rc == WEFT_OK) say(&c, "wrote %s", out_path);
done:
  weft__free(p);
  return rc;
}
