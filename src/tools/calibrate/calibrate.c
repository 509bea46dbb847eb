/* calibrate.c — `weft calibrate`: measures a machine profile by running graphs through weft.
 *
 * A tool, not part of libweft. It lives under src/ beside the command whose code it is
 * (src/cli/cmd_calibrate.c runs it and it is installed with the command), not in a top-level
 * tools/, which would read as a developer's script; and it is a static library of its own
 * (weft_calibrate_tool, src/tools/calibrate/CMakeLists.txt) because benchmarks/weft_calibrate,
 * bench_sim_accuracy --calibrate and test_sim link it without the command. Like the command it
 * uses libweft's public API only, jansson for the profile's JSON and, built with CUDA,
 * weft/cuda.h's replay switch; the few rules of the library its graphs are built around are
 * mirrored below, each naming the rule it mirrors.
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
 * which is how CI checks this file without a GPU.
 *
 * The profile is JSON throughout: the shipped h100 profile as a simulated runtime saves it
 * (weft_sim_profile_save), each figure set by its key once measured (the keys are those of
 * docs/simulator.md, "Profiles: Format", and of the writer in src/sched/cost/profile.c), written
 * in that writer's layout and checked with weft_sim_profile_check. A figure is rounded to the
 * digits the writer keeps, and an optional one that comes out 0 is left out as the writer
 * leaves it out, so that the file, and the models the fitted figures are simulated on, are
 * those of the writer; the figures later measurements build on are kept at full precision too
 * (`profile`). */
#include "tools/calibrate/calibrate.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sched/cost/profile.h"
#include "weft/report.h"
#include "weft/sim.h"
#if WEFT_HAVE_CUDA
#include "weft/cuda.h"
#endif

/* Rules of the library the measurements are built around:
 *   WAIT_SPIN_NS  how long weft_run_wait watches a run before it sleeps (WEFT__WAIT_SPIN_NS,
 *                 src/backends/backend.h);
 *   BATCH_MAX     the most ops one batch's kernel runs (WEFT__PLAN_BATCH_MAX,
 *                 src/sched/plan/plan.h; weft/weft.h's "up to 128 ops");
 *   TILE          a product fills the device when it has at least one TILE x TILE output tile
 *                 per SM (weft__plan_fills_device, src/sched/plan/lanes.c). */
enum { WAIT_SPIN_NS = 200000, BATCH_MAX = 128, TILE = 128 };

#if defined(__GNUC__) || defined(__clang__)
#define PRINTF_LIKE(a, b) __attribute__((format(printf, a, b)))
#else
#define PRINTF_LIKE(a, b)
#endif

/* ---- errors ---------------------------------------------------------------------------------- */

/* The tool's own failures (a temporary file, the profile's JSON) have their message here; a
 * failure of libweft keeps its message in weft_last_error(). */
static _Thread_local char message[512];
static _Thread_local int own_message;

static int fail(int status, const char *fmt, ...) PRINTF_LIKE(2, 3);
static int fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  own_message = 1;
  return status;
}

const char *weft_calibrate_last_error(void) { return own_message ? message : weft_last_error(); }

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

static void say(const cal *c, const char *fmt, ...) PRINTF_LIKE(2, 3);
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

static double dmin(double a, double b) { return a < b ? a : b; }
static double dmax(double a, double b) { return a > b ? a : b; }

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
  double t1, t2, probe, watch = 2e-9 * (double)WAIT_SPIN_NS;
  int rc = time_graph(c, build, arg, 4, first, &probe);
  if (rc != WEFT_OK) return rc;
  int k = (int)dmin(2000.0, dmax(4.0, target / dmax(probe / 4, 1e-9) / 2));
  if ((rc = time_graph(c, build, arg, k, first, &t1)) != WEFT_OK) return rc;
  if (t1 < watch && k < MAX_K) {
    k = (int)dmin((double)MAX_K, ceil(k * watch / dmax(t1, 1e-9)));
    if ((rc = time_graph(c, build, arg, k, first, &t1)) != WEFT_OK) return rc;
  }
  if ((rc = time_graph(c, build, arg, 2 * k, first, &t2)) != WEFT_OK) return rc;
  double d = (t2 - t1) / k;
  *out = d > 0 ? d : t2 / (2 * k); /* noise larger than the signal: the plain mean */
  return WEFT_OK;
}

/* The host costs of small nodes, and the links, are what the GPU machines' VMs disturb most,
 * and not only from one measurement to the next: a single measurement can be several times
 * another taken a call earlier, and bursts of the same eager run seconds apart differ widely
 * (docs/benchmarks.md, "How to read these figures"). So such a figure is the median of SPREAD
 * measurements SPREAD_GAP_MS apart, taken over a second or more (one on a simulated machine,
 * which is exact). */
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
 * thousands of nodes (bench_gpu_costs shows it against the chain's length), and 8 000 nodes
 * make 62 whole batches of 128 and a part. */
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

/* y = x w^T and x = y w^T, alternately: a chain of k products with a transposed operand (a tiled
 * Cholesky's updates) on random values, which keep their size (w's entries uniform in
 * +-sqrt(3 / n): each product keeps the variance of x's). Random values, as programs' data: on
 * an H200 a 4096^2 f64 product of constant values ran 5 % faster than of random ones. */
static int build_gemm_t(weft_graph *g, const void *p, int k) {
  const gemm_arg *a = p;
  int64_t shape[2] = {a->n, a->n};
  weft_tensor *x, *y, *w;
  int rc;
  double s = sqrt(3.0 / (double)a->n);
  if ((rc = weft_tensor_create(g, "x", a->dtype, 2, shape, a->dev, weft_uniform(-1, 1, 1), &x)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "y", a->dtype, 2, shape, a->dev, weft_uniform(-1, 1, 2), &y)) != WEFT_OK ||
      (rc = weft_tensor_create(g, "w", a->dtype, 2, shape, a->dev, weft_uniform(-s, s, 3), &w)) != WEFT_OK)
    return rc;
  for (int i = 0; i < k; i++)
    if ((rc = (i % 2 ? weft_gemm(g, x, 0, w, 1, 1.0, 0.0, y) : weft_gemm(g, y, 0, w, 1, 1.0, 0.0, x))) != WEFT_OK)
      return rc;
  return WEFT_OK;
}

/* A chain of k potrf, trsm, syrk or trtri nodes on n x n tiles whose values stay put, so that
 * any chain length runs on a real GPU: the identity is its own Cholesky factor (potrf) and
 * inverse (trtri, each writing B), solving with it leaves B as it is (trsm), and adding A A^T
 * of a zero A leaves C (syrk). */
typedef struct la_arg {
  weft_device dev;
  int64_t n;
  int dtype, op; /* 0 potrf, 1 trsm, 2 syrk, 3 trtri (weft__sim_la_ops) */
  int wide;      /* k independent nodes, each on tiles of its own (the host's wide curves) */
} la_arg;

static int build_la(weft_graph *g, const void *p, int k) {
  const la_arg *a = p;
  int64_t shape[2] = {a->n, a->n};
  weft_tensor *l, *b;
  int rc;
  if ((rc = weft_tensor_create(g, "l", a->dtype, 2, shape, a->dev, a->op == 2 ? weft_zeros() : weft_eye(1.0), &l)) !=
          WEFT_OK ||
      (rc = weft_tensor_create(g, "b", a->dtype, 2, shape, a->dev, a->op == 2 ? weft_eye(1.0) : weft_full(1.0), &b)) !=
          WEFT_OK)
    return rc;
  for (int i = 0; i < k; i++) {
    if (a->wide && i > 0 && /* tiles of its own: the potrf's, or the trsm's and syrk's result */
        (rc = weft_tensor_create(g, NULL, a->dtype, 2, shape, a->dev, a->op == 1 ? weft_full(1.0) : weft_eye(1.0),
                                 a->op == 0 ? &l : &b)) != WEFT_OK)
      return rc;
    rc = a->op == 0   ? weft_potrf(g, WEFT_LOWER, l)
         : a->op == 1 ? weft_trsm(g, WEFT_RIGHT, WEFT_LOWER, 1, 1.0, l, b)
         : a->op == 2 ? weft_syrk(g, WEFT_LOWER, 0, -1.0, l, 1.0, b)
                      : weft_trtri(g, WEFT_LOWER, l, b);
    if (rc != WEFT_OK) return rc;
  }
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
    if (buf == NULL) return fail(WEFT_ENOMEM, "calibrate: out of memory for a buffer of %zu bytes", bytes);
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

/* ---- the profile --------------------------------------------------------------------------- */

/* A measured curve: sizes and values (the longest, the GPU's f32 products, has 14 points). */
enum { CURVE_MAX = 16 };
typedef struct curve {
  int n;
  double x[CURVE_MAX], y[CURVE_MAX];
} curve;

/* The profile being measured: its JSON (host, gpu and links are root's sections), and the
 * figures later measurements build on, at full precision. */
typedef struct profile {
  json_t *root, *host, *gpu, *links;
  int multiprocessors, compute_streams;
  curve gemm_f32;
  double launch_s, kernel_s, run_s, replay_run_s;
} profile;

/* The significant digits profile.c's writer keeps: rates, bandwidths and every curve's values
 * (%.6g), times and launch_lanes (%.4g). */
enum { RATE = 6, TIME = 4 };

static double rounded(double v, int digits) {
  char b[40];
  snprintf(b, sizeof b, "%.*g", digits, v);
  return strtod(b, NULL);
}

/* Sets obj[key] = v, taking v (json_object_set_new frees it when it fails, and fails for
 * NULL, which is what jansson's constructors return when out of memory). */
static int put(json_t *obj, const char *key, json_t *v) {
  if (json_object_set_new(obj, key, v) != 0)
    return fail(WEFT_ENOMEM, "calibrate: out of memory setting the profile's %s", key);
  return WEFT_OK;
}

static int put_num(json_t *obj, const char *key, double v, int digits) {
  if (!isfinite(v)) return fail(WEFT_ESTATE, "calibrate: %s came out as %g, not a figure", key, v);
  return put(obj, key, json_real(rounded(v, digits)));
}

static int put_int(json_t *obj, const char *key, long long v) { return put(obj, key, json_integer(v)); }

static int put_str(json_t *obj, const char *key, const char *s) {
  json_t *v = json_string(s);
  if (v == NULL) return fail(WEFT_EINVAL, "calibrate: %s \"%s\" is not UTF-8 text", key, s);
  return put(obj, key, v);
}

/* An optional figure (0: not priced) is left out when it is not positive, as the writer does. */
static int put_optional(json_t *obj, const char *key, double v, int digits) {
  if (v > 0) return put_num(obj, key, v, digits);
  json_object_del(obj, key);
  return WEFT_OK;
}

/* A curve, [[size, value], ...]; the sizes are whole numbers, which the writer's %.9g prints as
 * integers. Optional curves are left out when empty, as the writer does. */
static int put_curve(json_t *obj, const char *key, const curve *c) {
  if (c->n == 0) {
    json_object_del(obj, key);
    return WEFT_OK;
  }
  json_t *a = json_array();
  for (int i = 0; i < c->n && a != NULL; i++) {
    if (!isfinite(c->y[i])) {
      json_decref(a);
      return fail(WEFT_ESTATE, "calibrate: %s at %g came out as %g, not a figure", key, c->x[i], c->y[i]);
    }
    if (json_array_append_new(a, json_pack("[I, f]", (json_int_t)c->x[i], rounded(c->y[i], RATE))) != 0) {
      json_decref(a);
      a = NULL;
    }
  }
  return put(obj, key, a);
}

static int put_link(json_t *links, const char *key, double bandwidth, double latency_s) {
  if (!isfinite(bandwidth) || !isfinite(latency_s))
    return fail(WEFT_ESTATE, "calibrate: the link %s came out as %g B/s, %g s, not figures", key, bandwidth,
                latency_s);
  return put(links, key, json_pack("{s: f, s: f}", "bandwidth", rounded(bandwidth, RATE), "latency_s",
                                   rounded(latency_s, TIME)));
}

/* Writes v in the writer's layout: the profile and its sections one member a line, anything
 * deeper (a curve, a link) on one line as jansson writes it. Reals get 9 digits, more than any
 * figure was rounded to and than the shipped profiles give. */
static int write_value(FILE *f, json_t *v, int depth) {
  if (!json_is_object(v) || depth >= 2) {
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_REAL_PRECISION(9));
    if (s == NULL) return -1;
    fputs(s, f);
    free(s);
    return 0;
  }
  const char *key;
  json_t *m;
  size_t i = 0, n = json_object_size(v);
  fputs("{\n", f);
  json_object_foreach(v, key, m) {
    json_t *k = json_string(key);
    char *ks = k != NULL ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
    json_decref(k);
    if (ks == NULL) return -1;
    fprintf(f, "%*s%s: ", 2 * (depth + 1), "", ks);
    free(ks);
    if (write_value(f, m, depth + 1) != 0) return -1;
    fputs(++i < n ? ",\n" : "\n", f);
  }
  fprintf(f, "%*s}", 2 * depth, "");
  return 0;
}

static int write_profile(json_t *root, const char *path) {
  FILE *f = fopen(path, "w");
  if (f == NULL) return fail(WEFT_EIO, "calibrate: cannot write the profile %s: %s", path, strerror(errno));
  int bad = write_value(f, root, 0) != 0;
  fputc('\n', f);
  bad |= ferror(f) != 0;
  if (fclose(f) != 0 || bad) return fail(WEFT_EIO, "calibrate: cannot write the profile %s", path);
  return WEFT_OK;
}

/* Makes an empty file in /tmp and stores its name in `path` (32 bytes), for libweft's calls
 * that take a profile by name. */
static int temp_file(char *path) {
  strcpy(path, "/tmp/weft-calibrate-XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0) return fail(WEFT_EIO, "calibrate: cannot create a temporary file in /tmp: %s", strerror(errno));
  close(fd);
  return WEFT_OK;
}

/* The profile the simulated runtime `rt` simulates, as JSON. */
static int saved_profile(const weft_runtime *rt, json_t **out) {
  char path[32];
  int rc = temp_file(path);
  if (rc != WEFT_OK) return rc;
  json_error_t err;
  *out = NULL;
  if ((rc = weft_sim_profile_save(rt, path)) == WEFT_OK && (*out = json_load_file(path, 0, &err)) == NULL)
    rc = fail(WEFT_EPARSE, "calibrate: cannot read the profile weft saved: %s (line %d)", err.text, err.line);
  remove(path);
  return rc;
}

/* Figures that cannot be measured start from the shipped h100 profile. */
static int base_profile(const cal *c, profile *p) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.simulate = "h100";
  o.flags = WEFT_RUNTIME_QUIET;
  o.cpu_workers = 1;
  /* Creating a runtime sets OpenBLAS's thread count for the whole process (runtime.c's thread
   * policy): this one sets rt's, so that the CPU products measured next run as rt runs them.
   * A simulated rt's products take virtual time, whatever the count. */
  if (!c->simulated) o.blas_threads = weft_runtime_blas_threads(c->rt);
  weft_runtime *sim;
  int rc = weft_runtime_create(&o, &sim);
  if (rc != WEFT_OK) return rc;
  rc = saved_profile(sim, &p->root);
  weft_runtime_destroy(sim);
  if (rc != WEFT_OK) return rc;
  p->host = json_object_get(p->root, "host");
  p->gpu = json_object_get(p->root, "gpu");
  p->links = json_object_get(p->root, "links");
  if (!json_is_object(p->host) || !json_is_object(p->gpu) || !json_is_object(p->links))
    return fail(WEFT_EPARSE, "calibrate: the h100 profile weft saved has no host, gpu or links object");
  p->compute_streams = (int)json_integer_value(json_object_get(p->gpu, "compute_streams"));
  return WEFT_OK;
}

/* A simulated runtime of one GPU on the profile measured so far, with the figures `zero` (a
 * NULL-terminated list) of `section` at 0, and a calibration context measuring on it, for the
 * figures fitted against the model (the runtime is sc->rt, the caller's to destroy). */
static int model(const cal *c, const profile *p, const char *section, const char *const *zero, cal *sc) {
  json_t *q = json_deep_copy(p->root);
  if (q == NULL) return fail(WEFT_ENOMEM, "calibrate: out of memory copying the profile");
  char path[32] = "";
  int rc = put_int(json_object_get(q, "gpu"), "count", 1);
  for (int i = 0; rc == WEFT_OK && zero[i] != NULL; i++) rc = put_int(json_object_get(q, section), zero[i], 0);
  if (rc == WEFT_OK && (rc = temp_file(path)) == WEFT_OK) rc = write_profile(q, path);
  json_decref(q);
  weft_runtime *sim = NULL;
  if (rc == WEFT_OK) {
    weft_runtime_options o;
    weft_runtime_options_init(&o);
    o.simulate = path;
    o.flags = WEFT_RUNTIME_QUIET;
    o.cpu_workers = 1;
    rc = weft_runtime_create(&o, &sim);
  }
  if (path[0] != '\0') remove(path);
  if (rc != WEFT_OK) return rc;
  *sc = *c;
  sc->rt = sim;
  sc->simulated = 1;
  sc->reps = 1;
  return WEFT_OK;
}

/* A device's name without the " (simulated)" a simulated runtime adds. */
static void device_name(char *out, size_t size, const char *name) {
  snprintf(out, size, "%s", name);
  char *suffix = strstr(out, " (simulated)");
  if (suffix != NULL) *suffix = '\0';
}

/* ---- the measurements --------------------------------------------------------------------------- */

/* Eager runs are what the simulator prices with launch_s and event_s: a graph's first run
 * without the building of its plan (which the model leaves out: it grows with the graph, not
 * per node). On a real GPU they are re-runs with replay off (a fresh graph's first run also
 * builds the plan and its events, a large part of its time per node: the dispatch benchmark's
 * cold first run, docs/benchmarks.md, "GPU: the CUDA backend"); on a simulated one, first runs,
 * since its re-runs are replays. */
static void eager_runs(const cal *c, int on) {
#if WEFT_HAVE_CUDA
  if (!c->simulated) weft_cuda_set_replay(c->rt, !on);
#else
  (void)c;
  (void)on;
#endif
}

/* The model prices batches (a chain of small elementwise nodes launched as one kernel,
 * src/sched/plan/batches.c) with their own figures, batch_node_s and batch_op_s, and every other GPU node
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
 * long chain, less its fixed cost, varies less than the difference of two chains of different
 * lengths, which subtracts one noisy time from another. The model's terms are in des.c. */
static int measure_batches(const cal *c, profile *p) {
  vec_arg tiny = {weft_cuda(0), 1, 0};
  double eager = 0, replay = 0;
  cal many = *c; /* a run takes milliseconds: the median of many */
  many.reps = c->quick ? c->reps : MAX_REPS;
  int rc = time_spread(&many, build_add, &tiny, 2 * BATCH_K, 0, &replay);
  eager_runs(c, 1);
  if (rc == WEFT_OK) rc = time_spread(&many, build_add, &tiny, 2 * BATCH_K, c->simulated, &eager);
  eager_runs(c, 0);
  if (rc != WEFT_OK) return rc;
  replay = dmax(0.0, replay - p->replay_run_s) / (2 * BATCH_K);
  double op = dmax(1e-9, replay - p->kernel_s / BATCH_MAX);
  double last = p->kernel_s + BATCH_MAX * op;
  eager = dmax(0.0, eager - p->run_s - last) / (2 * BATCH_K);
  double node = dmax(1e-9, eager - p->launch_s / BATCH_MAX);
  say(c, "cuda:0: batched, a node costs %.3g us in an eager run, %.3g us replayed: %.3g us of the host a node, "
      "%.3g us of the device an op", eager * 1e6, replay * 1e6, node * 1e6, op * 1e6);
  if ((rc = put_num(p->gpu, "batch_node_s", node, TIME)) != WEFT_OK) return rc;
  return put_num(p->gpu, "batch_op_s", op, TIME);
}

/* GEMM rates over sizes; `overhead` (the CPU dispatcher's cost per node) is not the GEMM's. */
static int gemm_curve(const cal *c, weft_device dev, int dtype, const int64_t *sizes, int nsizes,
                      double target, double threads, double overhead, curve *out) {
  out->n = 0;
  for (int i = 0; i < nsizes; i++) {
    gemm_arg a = {dev, sizes[i], dtype};
    double t;
    int rc = per_node(c, build_gemm, &a, 0, target, &t);
    if (rc != WEFT_OK) return rc;
    double n = (double)sizes[i];
    t = dmax(t - overhead, t * 0.5);
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

/* The GPU rates of products with a transposed operand on random values by side, into the
 * profile's gemm_t_* curves (build_gemm_t). */
static int gemm_t_curves(const cal *c, weft_device dev, json_t *gpu) {
  static const int64_t full[] = {256, 1024, 2048, 4096}, quick[] = {1024};
  const int64_t *sizes = c->quick ? quick : full;
  int nsizes = c->quick ? 1 : 4;
  for (int d = 0; d < 2; d++) {
    curve out = {0};
    for (int i = 0; i < nsizes; i++) {
      gemm_arg a = {dev, sizes[i], d ? WEFT_F64 : WEFT_F32};
      double t, n = (double)sizes[i];
      int rc = per_node(c, build_gemm_t, &a, 0, 0.2, &t);
      if (rc != WEFT_OK) return rc;
      out.x[out.n] = n;
      out.y[out.n++] = 2 * n * n * n / t;
      say(c, "cuda:0 gemm, B transposed, %s %lld: %.3g s a product, %.4g GFLOP/s", d ? "f64" : "f32", (long long)sizes[i],
          t, out.y[out.n - 1] * 1e-9);
    }
    int rc = put_curve(gpu, d ? "gemm_t_f64_flops" : "gemm_t_f32_flops", &out);
    if (rc != WEFT_OK) return rc;
  }
  return WEFT_OK;
}

/* Flops of a linear-algebra op of the profile's tables on n x n tiles, as weft counts them:
 * n^3 / 3 for potrf and trtri, n^3 for trsm and syrk. */
static double la_op_flops(int op, double n) { return op == 0 || op == 3 ? n * n * n / 3 : n * n * n; }

/* The GPU rates of potrf, trsm, syrk and trtri by tile side, into the profile's potrf_*,
 * trsm_*, syrk_*, trtri_* curves. */
static int la_curves(const cal *c, weft_device dev, json_t *gpu) {
  static const int64_t full[] = {256, 1024, 4096}, quick[] = {1024};
  const char *const *names = weft__sim_la_ops;
  const int64_t *sizes = c->quick ? quick : full;
  int nsizes = c->quick ? 1 : 3;
  for (int op = 0; op < WEFT__SIM_LA_OPS; op++)
    for (int d = 0; d < 2; d++) {
      curve out = {0};
      for (int i = 0; i < nsizes; i++) {
        la_arg a = {dev, sizes[i], d ? WEFT_F64 : WEFT_F32, op};
        double t, n = (double)sizes[i];
        int rc = per_node(c, build_la, &a, 0, 0.2, &t);
        if (rc != WEFT_OK) return rc;
        out.x[out.n] = n;
        out.y[out.n++] = la_op_flops(op, n) / t;
        say(c, "cuda:0 %s %s %lld: %.3g s a node, %.4g GFLOP/s", names[op], d ? "f64" : "f32", (long long)sizes[i], t,
            out.y[out.n - 1] * 1e-9);
      }
      char key[32];
      snprintf(key, sizeof key, "%s_%s_flops", names[op], d ? "f64" : "f32");
      int rc = put_curve(gpu, key, &out);
      if (rc != WEFT_OK) return rc;
    }
  return WEFT_OK;
}

/* The part of the device a product occupies, for the f32 sizes of the GEMM curve that do not
 * fill the device (TILE, above): K independent products (replayed; the backend spreads them
 * over its compute streams) against the curve's chain of K, clamped to [1 / compute streams,
 * 1]. Larger products take the whole device. And what each of the K adds to an eager run
 * (gemm_f32_wide_s): where the host's launches are slower than the device, the least a launch
 * takes among others (src/sched/cost/cost.c, weft__cost_submit). */
static int gemm_shares(const cal *c, weft_device dev, profile *p) {
  const curve *rate = &p->gemm_f32;
  int S = p->compute_streams > 0 ? p->compute_streams : 1;
  curve share = {0}, wide_s = {0};
  for (int i = 0; i < rate->n; i++) {
    int64_t n = (int64_t)rate->x[i], tiles = (n + TILE - 1) / TILE;
    if (tiles * tiles >= p->multiprocessors) break;
    gemm_arg a = {dev, n, WEFT_F32};
    double wide, chain = 2.0 * rate->x[i] * rate->x[i] * rate->x[i] / rate->y[i];
    double eager;
    int rc = per_node(c, build_wide, &a, 0, 0.03, &wide);
    if (rc != WEFT_OK) return rc;
    /* In runs of a few milliseconds, the length of the benchmarks' eager runs (longer runs
     * give about the same figure, at more of the calibration's time). */
    eager_runs(c, 1);
    rc = per_node_med(c, build_wide, &a, c->simulated, 0.004, &eager);
    eager_runs(c, 0);
    if (rc != WEFT_OK) return rc;
    double s = dmin(1.0, dmax(1.0 / S, wide / chain));
    share.x[share.n] = wide_s.x[wide_s.n] = rate->x[i];
    share.y[share.n++] = s;
    wide_s.y[wide_s.n++] = eager;
    say(c, "cuda:0: independent products of %lld^2 take %.3g us each (%.3g us eager), %.3g us in a chain: share %.3g",
        (long long)n, wide * 1e6, eager * 1e6, chain * 1e6, s);
  }
  int rc = put_curve(p->gpu, "gemm_f32_share", &share);
  return rc == WEFT_OK ? put_curve(p->gpu, "gemm_f32_wide_s", &wide_s) : rc;
}

/* A link: bandwidth from `big` elements and latency from one element, into links[key]. */
static int measure_link(const cal *c, copy_arg a, int64_t big, const char *what, profile *p, const char *key) {
  double t_small, t_big;
  a.numel = 1;
  int rc = per_node_med(c, build_copy, &a, 0, 0.02, &t_small);
  if (rc != WEFT_OK) return rc;
  a.numel = big;
  if ((rc = per_node_med(c, build_copy, &a, 0, 0.3, &t_big)) != WEFT_OK) return rc;
  double bytes = 4.0 * (double)big;
  double bandwidth = bytes / dmax(t_big - t_small, t_big * 0.5);
  say(c, "%s: %.4g GB/s, latency %.3g us", what, bandwidth * 1e-9, t_small * 1e6);
  return put_link(p->links, key, bandwidth, t_small);
}

/* One node's time on its worker while every worker runs nodes like it: graphs of 2 W and 4 W
 * independent nodes (W workers, so every worker has work in both), their difference over 2 W,
 * times W. */
static int wide_node(const cal *c, build_fn build, const void *arg, double workers, double *out) {
  int k = 2 * (int)workers;
  double t1, t2, watch = 2e-9 * (double)WAIT_SPIN_NS;
  int rc = time_graph(c, build, arg, k, 0, &t1);
  if (rc == WEFT_OK && t1 < watch && k < MAX_K) { /* as per_node: both runs outlast the caller's watch */
    k = (int)dmin((double)MAX_K, ceil(k * watch / dmax(t1, 1e-9)));
    rc = time_graph(c, build, arg, k, 0, &t1);
  }
  if (rc == WEFT_OK) rc = time_graph(c, build, arg, 2 * k, 0, &t2);
  if (rc != WEFT_OK) return rc;
  double d = (t2 - t1) / k;
  *out = (d > 0 ? d : t2 / (2 * k)) * workers;
  return WEFT_OK;
}

/* A point of a host wide curve: one node's time on its worker while every worker runs its own
 * (wide_node, less the node's overhead), as flops of a node of side n over that time. */
static int wide_point(const cal *c, build_fn build, const void *arg, double overhead, double n, double flops,
                      curve *out, double *t_out) {
  weft_cpu_topology topo;
  int rc = weft_runtime_cpu_topology(c->rt, &topo);
  double t;
  if (rc != WEFT_OK || (rc = wide_node(c, build, arg, topo.workers > 0 ? topo.workers : 1, &t)) != WEFT_OK) return rc;
  t = dmax(t - overhead, t * 0.5);
  out->x[out->n] = n;
  out->y[out->n++] = flops / t;
  *t_out = t;
  return WEFT_OK;
}

/* The host's wide GEMM curve: many independent products, every worker running its own, each
 * product's share of the time over the workers: the rate one worker gets while all are busy,
 * which a tiled program's products run at (sim: des.c, cpu_cost). */
static int wide_curve(const cal *c, int dtype, const int64_t *sizes, int nsizes, double overhead, curve *out) {
  out->n = 0;
  for (int i = 0; i < nsizes; i++) {
    gemm_arg a = {weft_cpu(), sizes[i], dtype};
    double t, n = (double)sizes[i];
    int rc = wide_point(c, build_wide, &a, overhead, n, 2 * n * n * n, out, &t);
    if (rc != WEFT_OK) return rc;
    say(c, "cpu gemm %s %lld, every worker its own: %.3g s a product, %.4g GFLOP/s a worker",
        dtype == WEFT_F64 ? "f64" : "f32", (long long)sizes[i], t, out->y[out->n - 1] * 1e-9);
  }
  return WEFT_OK;
}

/* The host's wide curves of the linear-algebra ops by tile side, as wide_curve's products:
 * many independent nodes, each on tiles of its own, every worker running one. */
static int la_wide_curves(const cal *c, double overhead, json_t *host) {
  static const int64_t full[] = {128, 256, 512, 1024}, quick[] = {256};
  const int64_t *sizes = c->quick ? quick : full;
  int nsizes = c->quick ? 1 : 4, rc;
  for (int op = 0; op < WEFT__SIM_LA_OPS; op++)
    for (int d = 0; d < 2; d++) {
      char key[48];
      snprintf(key, sizeof key, "%s_%s_wide_flops", weft__sim_la_ops[op], d ? "f64" : "f32");
      curve out = {0};
      for (int i = 0; i < nsizes; i++) {
        la_arg a = {weft_cpu(), sizes[i], d ? WEFT_F64 : WEFT_F32, op, 1};
        double t, n = (double)sizes[i];
        if ((rc = wide_point(c, build_la, &a, overhead, n, la_op_flops(op, n), &out, &t)) != WEFT_OK) return rc;
        say(c, "cpu %s, every worker its own: %.3g s a node, %.4g GFLOP/s a worker", key, t, out.y[out.n - 1] * 1e-9);
      }
      if ((rc = put_curve(host, key, &out)) != WEFT_OK) return rc;
    }
  return WEFT_OK;
}

static int measure_host(const cal *c, profile *p) {
  static const int64_t full[] = {64, 128, 256, 512, 1024}, quick[] = {128, 512};
  const int64_t *sizes = c->quick ? quick : full;
  int ns = c->quick ? 2 : 5;
  weft_device cpu = weft_cpu();
  weft_device_info info;
  int rc = weft_device_info_get(c->rt, cpu, &info);
  if (rc != WEFT_OK) return rc;
  /* One chain runs on one worker, whose GEMMs use the runtime's BLAS threads. */
  double threads = weft_runtime_blas_threads(c->rt);
  vec_arg big = {cpu, 4 << 20, 0}, tiny = {cpu, 1, 0};
  curve f32, f64, w32, w64;
  double t, t_tiny;
  if ((rc = per_node(c, build_add, &tiny, 0, 0.01, &t_tiny)) != WEFT_OK) return rc;
  /* The wide curve's largest size under 2 GFLOP, which the CPU backend would split over idle
   * workers (a product of 1024^3 is 2^31 flops: split). */
  static const int64_t wide_full[] = {64, 128, 256, 512, 1000}, wide_quick[] = {128, 512};
  const int64_t *wsizes = c->quick ? wide_quick : wide_full;
  if ((rc = gemm_curve(c, cpu, WEFT_F32, sizes, ns, 0.1, threads, t_tiny, &f32)) != WEFT_OK ||
      (rc = gemm_curve(c, cpu, WEFT_F64, sizes, ns, 0.1, threads, t_tiny, &f64)) != WEFT_OK ||
      (rc = wide_curve(c, WEFT_F32, wsizes, ns, t_tiny, &w32)) != WEFT_OK ||
      (rc = wide_curve(c, WEFT_F64, wsizes, ns, t_tiny, &w64)) != WEFT_OK)
    return rc;
  if ((rc = per_node(c, build_add, &big, 0, 0.1, &t)) != WEFT_OK) return rc;
  double bandwidth = 12.0 * (double)big.numel / dmax(t - t_tiny, t * 0.5);
  if ((rc = per_node(c, build_fill, &big, 0, 0.1, &t)) != WEFT_OK) return rc;
  double fill = (double)big.numel / dmax(t - t_tiny, t * 0.5);
  say(c, "cpu: %.3g us a node, %.4g GB/s a thread, %.4g M random values/s a thread",
      t_tiny * 1e6, bandwidth * 1e-9, fill * 1e-6);
  char name[sizeof info.name];
  device_name(name, sizeof name, info.name);
  json_t *h = p->host;
  if ((rc = put_str(h, "name", name)) != WEFT_OK ||
      (rc = put_int(h, "cores", info.multiprocessors)) != WEFT_OK ||
      (rc = put_int(h, "memory_bytes", (long long)info.memory_bytes)) != WEFT_OK ||
      (rc = put_curve(h, "gemm_f32_flops", &f32)) != WEFT_OK ||
      (rc = put_curve(h, "gemm_f64_flops", &f64)) != WEFT_OK ||
      (rc = put_curve(h, "gemm_f32_wide_flops", &w32)) != WEFT_OK ||
      (rc = put_curve(h, "gemm_f64_wide_flops", &w64)) != WEFT_OK || (rc = la_wide_curves(c, t_tiny, h)) != WEFT_OK ||
      (rc = put_num(h, "memory_bandwidth", bandwidth, RATE)) != WEFT_OK ||
      (rc = put_num(h, "fill_rate", fill, RATE)) != WEFT_OK)
    return rc;
  return put_num(h, "node_s", t_tiny, TIME);
}

/* The device's description, as weft_device_info gives it; compute_streams, the CUDA backend's
 * setting, only on a simulated machine, whose own profile has it (else the base's stays). */
static int describe_gpu(const cal *c, weft_device dev, profile *p) {
  weft_device_info info;
  int rc = weft_device_info_get(c->rt, dev, &info);
  if (rc != WEFT_OK) return rc;
  char name[sizeof info.name];
  device_name(name, sizeof name, info.name);
  json_t *g = p->gpu;
  /* The format's range: up to three engines, for H2D, D2H and peer copies. */
  int engines = info.copy_engines < 1 ? 1 : info.copy_engines > 3 ? 3 : info.copy_engines;
  p->multiprocessors = info.multiprocessors;
  if ((rc = put_str(g, "name", name)) != WEFT_OK ||
      (rc = put_int(g, "memory_bytes", (long long)info.memory_bytes)) != WEFT_OK ||
      (rc = put(g, "compute_capability", json_pack("[i, i]", info.compute_major, info.compute_minor))) != WEFT_OK ||
      (rc = put_int(g, "multiprocessors", info.multiprocessors)) != WEFT_OK ||
      (rc = put_int(g, "copy_engines", engines)) != WEFT_OK)
    return rc;
  if (!c->simulated) return WEFT_OK;
  json_t *own;
  if ((rc = saved_profile(c->rt, &own)) != WEFT_OK) return rc;
  p->compute_streams = (int)json_integer_value(json_object_get(json_object_get(own, "gpu"), "compute_streams"));
  json_decref(own);
  return put_int(g, "compute_streams", p->compute_streams);
}

static int measure_gpu(const cal *c, profile *p, int ngpus) {
  /* Powers of two and round decimal sizes, the two families programs use: cuBLAS's time is
   * not smooth in n (a round size can take longer than the power of two above it), so the
   * curve holds both rather than interpolating one from the other. */
  static const int64_t full[] = {64, 100, 128, 200, 256, 400, 512, 1000, 1024, 2000, 2048, 4000, 4096, 8192},
                       quick[] = {256, 1024, 4096};
  static const int64_t full64[] = {256, 1024, 4096}, quick64[] = {1024};
  weft_device dev = weft_cuda(0);
  json_t *g = p->gpu;
  curve f64;
  int rc;
  if ((rc = describe_gpu(c, dev, p)) != WEFT_OK ||
      (rc = gemm_curve(c, dev, WEFT_F32, c->quick ? quick : full, c->quick ? 3 : 14, 0.2, 1, 0, &p->gemm_f32)) !=
          WEFT_OK ||
      (rc = gemm_curve(c, dev, WEFT_F64, c->quick ? quick64 : full64, c->quick ? 1 : 3, 0.2, 1, 0, &f64)) != WEFT_OK ||
      (rc = put_curve(g, "gemm_f32_flops", &p->gemm_f32)) != WEFT_OK ||
      (rc = put_curve(g, "gemm_f64_flops", &f64)) != WEFT_OK || (rc = gemm_shares(c, dev, p)) != WEFT_OK ||
      (rc = la_curves(c, dev, g)) != WEFT_OK || (rc = gemm_t_curves(c, dev, g)) != WEFT_OK)
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
  p->launch_s = first;
  p->kernel_s = dmin(first, again);
  /* Independent tiny products: workers launch them at once, on different streams (the
   * device's time is far shorter than the host's), against a chain, where one launch follows
   * another: how many launches overlap, at most one a compute stream (each has a lock). */
  double lanes = dmin((double)p->compute_streams, dmax(1.0, first_mm / wide_mm));
  /* A diamond's three launches and two events: its first branch is launched while the second
   * is ready too, in 1 / min(lanes, 2) of a launch (des.c), the rest one after the other. */
  double event = dmax(0.0, (diamond - (2 + 1 / dmin(2.0, lanes)) * first) / 2);
  /* A chain whose every node makes a temporary, against the plain chain. */
  double temp = dmax(0.0, first_temps - first), replay_temp = dmax(0.0, again_temps - again);
  say(c, "cuda:0: a node costs %.3g us in an eager run (a product %.3g us, %.3g us launched with "
      "others ready: %.3g launches at once), %.3g us replayed; %.3g us an event; a temporary %.3g us eager, "
      "%.3g us replayed",
      first * 1e6, first_mm * 1e6, wide_mm * 1e6, lanes, again * 1e6, event * 1e6, temp * 1e6, replay_temp * 1e6);
  /* gemm_launch_s: a chain of 16^2 products, whose time the host's cost bounds. */
  if ((rc = put_num(g, "launch_s", first, TIME)) != WEFT_OK ||
      (rc = put_num(g, "gemm_launch_s", first_mm, TIME)) != WEFT_OK ||
      (rc = put_num(g, "kernel_s", p->kernel_s, TIME)) != WEFT_OK ||
      (rc = put_num(g, "replay_node_s", dmin(again, first), TIME)) != WEFT_OK ||
      (rc = put_num(g, "launch_lanes", lanes, TIME)) != WEFT_OK ||
      (rc = put_num(g, "event_s", event, TIME)) != WEFT_OK ||
      (rc = put_num(g, "temp_s", temp, TIME)) != WEFT_OK ||
      (rc = put_num(g, "replay_temp_s", replay_temp, TIME)) != WEFT_OK)
    return rc;
  if ((rc = per_node(c, build_add, &big, 0, 0.1, &t)) != WEFT_OK) return rc;
  /* A kernel's fixed cost is a floor in the model (kernel_s), not an addition: a large
   * kernel's whole time prices its bytes. */
  double bandwidth = 12.0 * (double)big.numel / t;
  if ((rc = per_node(c, build_fill, &big, 0, 0.1, &t)) != WEFT_OK) return rc;
  double fill = 4.0 * (double)big.numel / t;
  say(c, "cuda:0: memory %.4g GB/s, random fill %.4g GB/s", bandwidth * 1e-9, fill * 1e-9);
  if ((rc = put_num(g, "memory_bandwidth", bandwidth, RATE)) != WEFT_OK ||
      (rc = put_num(g, "fill_bandwidth", fill, RATE)) != WEFT_OK)
    return rc;
  int64_t bigcopy = (c->quick ? 16 : 64) << 20; /* elements: 64 or 256 MiB */
  weft_device cpu = weft_cpu();
  if ((rc = measure_link(c, (copy_arg){cpu, dev, 0, 0}, bigcopy, "host->cuda:0 pinned", p, "h2d")) != WEFT_OK ||
      (rc = measure_link(c, (copy_arg){dev, cpu, 0, 0}, bigcopy, "cuda:0->host pinned", p, "d2h")) != WEFT_OK ||
      (rc = measure_link(c, (copy_arg){cpu, dev, 0, 1}, bigcopy / 4, "host->cuda:0 pageable", p, "h2d_pageable")) != WEFT_OK ||
      (rc = measure_link(c, (copy_arg){dev, cpu, 0, 1}, bigcopy / 4, "cuda:0->host pageable", p, "d2h_pageable")) != WEFT_OK)
    return rc;
  /* No "peer" link: copies between GPUs go through the host. */
  if (!(ngpus > 1 && weft_device_can_access_peer(c->rt, dev, weft_cuda(1)))) {
    json_object_del(p->links, "peer");
    return WEFT_OK;
  }
  return measure_link(c, (copy_arg){dev, weft_cuda(1), 0, 0}, bigcopy, "cuda:0->cuda:1", p, "peer");
}

/* A run's fixed cost (run_s eager, replay_run_s replayed): a graph of one tiny GPU node, the
 * median of MAX_REPS runs (the VMs move it widely from run to run: docs/benchmarks.md,
 * "Diagnostics", a run's fixed cost through the command line), less the same graph simulated
 * with every other figure as measured and no fixed cost. */
static int fit_run(const cal *c, profile *p) {
  static const char *const fixed[] = {"run_s", "replay_run_s", NULL};
  vec_arg a = {weft_cuda(0), 1, 0};
  cal many = *c;
  many.reps = c->quick ? 5 : MAX_REPS;
  double eager, replay, m_eager, m_replay;
  eager_runs(c, 1);
  int rc = time_spread(&many, build_add, &a, 1, c->simulated, &eager);
  eager_runs(c, 0);
  if (rc != WEFT_OK || (rc = time_spread(&many, build_add, &a, 1, 0, &replay)) != WEFT_OK) return rc;
  cal sc;
  if ((rc = model(c, p, "gpu", fixed, &sc)) != WEFT_OK) return rc;
  if ((rc = time_graph(&sc, build_add, &a, 1, 1, &m_eager)) == WEFT_OK)
    rc = time_graph(&sc, build_add, &a, 1, 0, &m_replay);
  weft_runtime_destroy(sc.rt);
  if (rc != WEFT_OK) return rc;
  p->run_s = dmax(0.0, eager - m_eager);
  p->replay_run_s = dmax(0.0, replay - m_replay);
  say(c, "cuda:0: a run of one tiny node takes %.3g us eager, %.3g us replayed: %.3g and %.3g us of "
      "it are the run's fixed cost", eager * 1e6, replay * 1e6, p->run_s * 1e6, p->replay_run_s * 1e6);
  /* Optional as a pair: the writer gives both when either is positive. */
  if (!(p->run_s > 0 || p->replay_run_s > 0)) {
    json_object_del(p->gpu, "run_s");
    json_object_del(p->gpu, "replay_run_s");
    return WEFT_OK;
  }
  if ((rc = put_num(p->gpu, "run_s", p->run_s, TIME)) != WEFT_OK) return rc;
  return put_num(p->gpu, "replay_run_s", p->replay_run_s, TIME);
}

/* How long weft_run_wait takes to return once a run has ended (the run's end is stamped on the
 * clock of node timing, weft_clock_ns): the median over SPREAD rounds SPREAD_GAP_MS apart of
 * the median of MAX_REPS re-runs of one graph of k nodes. */
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
      uint64_t back = weft_clock_ns(), end = back;
      if (rc == WEFT_OK) rc = weft_run_end_ns(run, &end);
      t[r] = back > end ? (double)(back - end) * 1e-9 : 0;
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
static int fit_wake(const cal *c, profile *p) {
  enum { LONG_K = 64 };
  static const char *const wake[] = {"wake_s", NULL};
  /* The long chain must outlast the caller's spin before it sleeps (WEFT__WAIT_SPIN_NS, 0.2 ms)
   * on a machine of fast memory too: 64 additions of 4 MiB, 2.5 ms at 300 GB/s. */
  vec_arg big = {weft_cpu(), 1 << 20, 0}, tiny = {weft_cpu(), 1, 0};
  double slept, awake;
  int rc;
  if (c->simulated) {
    cal sc;
    if ((rc = time_graph(c, build_add, &big, LONG_K, 0, &slept)) != WEFT_OK ||
        (rc = model(c, p, "host", wake, &sc)) != WEFT_OK)
      return rc;
    rc = time_graph(&sc, build_add, &big, LONG_K, 0, &awake);
    weft_runtime_destroy(sc.rt);
  } else if ((rc = return_med(c, &big, LONG_K, &slept)) == WEFT_OK) {
    rc = return_med(c, &tiny, 1, &awake);
  }
  if (rc != WEFT_OK) return rc;
  double wake_s = dmax(0.0, slept - awake);
  say(c, "cpu: a caller asleep in weft_run_wait takes %.3g us more to return (%.3g us after a long run, %.3g after a short one)",
      wake_s * 1e6, slept * 1e6, awake * 1e6);
  return put_optional(p->host, "wake_s", wake_s, TIME);
}

/* The GPU-to-host notification: a round trip measured, minus the same graph simulated with
 * every other figure as measured and no notification cost; one notification an iteration. */
static int fit_notify(const cal *c, profile *p) {
  static const char *const notify[] = {"notify_s", NULL};
  vec_arg a = {weft_cuda(0), 1, 0};
  double measured, modelled;
  int rc = per_node_med(c, build_roundtrip, &a, 0, 0.02, &measured);
  if (rc != WEFT_OK) return rc;
  cal sc;
  if ((rc = model(c, p, "gpu", notify, &sc)) != WEFT_OK) return rc;
  rc = per_node(&sc, build_roundtrip, &a, 0, 0.02, &modelled);
  weft_runtime_destroy(sc.rt);
  if (rc != WEFT_OK) return rc;
  double notify_s = dmax(0.0, measured - modelled);
  say(c, "cuda:0: a GPU->CPU->GPU round trip takes %.3g us; %.3g us of it is the notification",
      measured * 1e6, notify_s * 1e6);
  return put_num(p->gpu, "notify_s", notify_s, TIME);
}

int weft_calibrate(weft_runtime *rt, const weft_calibrate_options *o, const char *out_path) {
  own_message = 0;
  if (rt == NULL || out_path == NULL) return fail(WEFT_EINVAL, "weft_calibrate: NULL argument");
  weft_calibrate_options def;
  if (o == NULL) {
    weft_calibrate_options_init(&def);
    o = &def;
  }
  cal c = {rt, weft_sim_active(rt), o->quick, o->quick ? 3 : 5, o->log};
  profile p;
  memset(&p, 0, sizeof p);
  int rc = base_profile(&c, &p);
  if (rc != WEFT_OK) goto done;
  /* The format holds names of up to 63 bytes; a longer one is cut there. */
  char name[64];
  snprintf(name, sizeof name, "%s", o->name != NULL ? o->name : "calibrated");
  if ((rc = put_str(p.root, "name", name)) != WEFT_OK) goto done;
  int ngpus = weft_device_count(rt, WEFT_DEVICE_CUDA);
  say(&c, "measuring %s with %d GPU%s (%s)", c.simulated ? "a simulated machine" : "this machine",
      ngpus, ngpus == 1 ? "" : "s", c.quick ? "quick" : "full");
  if ((rc = measure_host(&c, &p)) != WEFT_OK || (rc = fit_wake(&c, &p)) != WEFT_OK ||
      (rc = put_int(p.gpu, "count", ngpus)) != WEFT_OK)
    goto done;
  if (ngpus > 0) {
    batching(&c, 0);
    if ((rc = measure_gpu(&c, &p, ngpus)) == WEFT_OK && (rc = fit_notify(&c, &p)) == WEFT_OK) rc = fit_run(&c, &p);
    batching(&c, 1);
    const char *env = getenv("WEFT_CUDA_BATCH");
    if (rc == WEFT_OK && !(env != NULL && strcmp(env, "0") == 0)) rc = measure_batches(&c, &p);
    if (rc != WEFT_OK) goto done;
  }
  time_t now = time(NULL);
  struct tm tmv;
  char date[32], source[1024];
  strftime(date, sizeof date, "%Y-%m-%d", gmtime_r(&now, &tmv));
  snprintf(source, sizeof source,
           "Measured by weft calibrate%s on %s (%s, %d GPU%s). compute_streams is the CUDA "
           "backend's setting, not a measurement.%s",
           c.quick ? " --quick" : "", date, c.simulated ? "a simulated machine" : "this machine",
           ngpus, ngpus == 1 ? "" : "s",
           ngpus == 0 ? " No GPU: the gpu section is the shipped h100 profile's, unmeasured, and "
                        "its count is 0." : "");
  if ((rc = put_str(p.root, "source", source)) != WEFT_OK || (rc = write_profile(p.root, out_path)) != WEFT_OK)
    goto done;
  if ((rc = weft_sim_profile_check(out_path)) != WEFT_OK) {
    rc = fail(rc, "calibrate: the profile written to %s does not load: %s", out_path, weft_last_error());
    goto done;
  }
  say(&c, "wrote %s", out_path);
done:
  json_decref(p.root);
  return rc;
}
