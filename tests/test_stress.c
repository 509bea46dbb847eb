/* test_stress.c — the scheduler under load, with results asserted, not only survival:
 * threads that each build and run their own random programs on one shared runtime (checked
 * bit for bit against the serial interpreter), a 20 000-node graph run 50 times, 200 000
 * independent tiny tasks with every execution counted, a 100 000-reader fan-out, launches that
 * must wake sleeping workers (within 10 s each), launch/cancel races whose cancelled
 * runs must still have run a prefix of their chain, callback chains that relaunch their graph
 * from the completion callback, completions counted across threads, large graphs launched
 * and built from several threads at once (their analyses on workers), and ops registered and run
 * from several threads at once.
 *
 * WEFT_STRESS_SCALE (default 100) scales the iteration counts in percent, for slow builds. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "oracle_gen.h"
#include "testutil.h"

static int scale_pct = 100;

/* n scaled by WEFT_STRESS_SCALE, at least 1. */
static int scaled(int n) {
  long v = (long)n * scale_pct / 100;
  return v < 1 ? 1 : (int)v;
}

static void nap_ns(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

/* ---- threads with their own random programs ----------------------------------------------- */

typedef struct prog_thread {
  weft_runtime *rt;
  int index, iterations;
  int failures;
  long runs;
  atomic_int *callbacks;
  char msg[600];
} prog_thread;

static void count_cb(weft_run *run, int status, void *arg) {
  (void)run;
  if (status == WEFT_OK) atomic_fetch_add((atomic_int *)arg, 1);
}

static void *programs_thread(void *arg) {
  prog_thread *pt = arg;
  oracle_cfg cfg;
  oracle_cfg_init(&cfg);
  cfg.cycle_per_mille = 0;
  for (int i = 0; i < pt->iterations && pt->failures == 0; i++) {
    uint64_t seed = 100000u * (uint64_t)(pt->index + 1) + (uint64_t)i;
    weft_graph *ga = NULL, *gb = NULL;
    if (weft_graph_create(pt->rt, &ga) != WEFT_OK || weft_graph_create(pt->rt, &gb) != WEFT_OK ||
        oracle_build(ga, seed, &cfg) != WEFT_OK || oracle_build(gb, seed, &cfg) != WEFT_OK) {
      snprintf(pt->msg, sizeof pt->msg, "seed %llu: build failed: %s", (unsigned long long)seed,
               weft_last_error());
      pt->failures++;
    }
    oracle_serial *s = pt->failures ? NULL : oracle_serial_create(gb);
    int runs = 1 + i % 3;
    for (int r = 0; r < runs && s != NULL && pt->failures == 0; r++) {
      weft_run *run = NULL;
      int rc = weft_graph_launch_cb(ga, count_cb, pt->callbacks, &run);
      if (rc == WEFT_OK) {
        rc = weft_run_wait(run);
        weft_run_destroy(run);
      }
      char msg[512];
      if (rc != WEFT_OK) {
        snprintf(pt->msg, sizeof pt->msg, "seed %llu run %d: %s", (unsigned long long)seed, r, weft_last_error());
        pt->failures++;
      } else if (oracle_serial_run(s, msg, sizeof msg) != WEFT_OK || oracle_compare(ga, s, msg, sizeof msg, NULL)) {
        snprintf(pt->msg, sizeof pt->msg, "seed %llu run %d: %s", (unsigned long long)seed, r, msg);
        pt->failures++;
      }
      pt->runs++;
    }
    oracle_serial_destroy(s);
    weft_graph_destroy(ga);
    weft_graph_destroy(gb);
  }
  return NULL;
}

static void threads_run_their_own_programs(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(4);
  oracle_register_ops(rt);
  enum { NT = 4 };
  pthread_t th[NT];
  prog_thread pts[NT];
  atomic_int callbacks = 0;
  for (int i = 0; i < NT; i++) {
    pts[i] = (prog_thread){rt, i, scaled(100), 0, 0, &callbacks, ""};
    assert_int_equal(pthread_create(&th[i], NULL, programs_thread, &pts[i]), 0);
  }
  long runs = 0;
  int failures = 0;
  for (int i = 0; i < NT; i++) {
    pthread_join(th[i], NULL);
    if (pts[i].failures) print_message("thread %d: %s\n", i, pts[i].msg);
    failures += pts[i].failures;
    runs += pts[i].runs;
  }
  assert_int_equal(failures, 0);
  assert_int_equal(atomic_load(&callbacks), runs); /* one successful callback per run */
  weft_runtime_destroy(rt);
}

/* ---- a large graph, run many times -------------------------------------------------------- */

/* "mix": x = 0.5 x + y + 1 over f64 vectors (x read-write, y read). */
static int mix_kernel(weft_kernel_ctx *ctx) {
  double *x = weft_ctx_data(ctx, 0);
  const double *y = weft_ctx_data(ctx, 1);
  int64_t n = weft_tensor_numel(weft_ctx_tensor(ctx, 0));
  for (int64_t i = 0; i < n; i++) x[i] = 0.5 * x[i] + y[i] + 1;
  return WEFT_OK;
}

static void large_graph_many_runs(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  const weft_op *mix = tu_op(rt, "mix", 2, (weft_access[]){WEFT_READ_WRITE, WEFT_READ}, mix_kernel, NULL);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  enum { T = 100, N = 20000, LEN = 2 };
  weft_tensor *ts[T];
  double ref[T][LEN];
  for (int i = 0; i < T; i++) {
    ts[i] = tu_tensor(g, NULL, WEFT_F64, 1, (int64_t[]){LEN}, weft_full(i * 0.01));
    for (int k = 0; k < LEN; k++) ref[i][k] = i * 0.01;
  }
  /* Node k: x = ts[k % T] (read-write), y = ts[(k * 7 + 3) % T]: long chains that read one
   * another, so there are RAW, WAR and WAW edges everywhere and plenty of parallelism. */
  int xi[N], yi[N];
  for (int k = 0; k < N; k++) {
    xi[k] = k % T;
    yi[k] = (k * 7 + 3) % T;
    if (yi[k] == xi[k]) yi[k] = (yi[k] + 1) % T;
    weft_tensor *args[2] = {ts[xi[k]], ts[yi[k]]};
    CHECK(weft_call(g, mix, args, 2, NULL, 0));
  }
  assert_int_equal(weft_graph_node_count(g), N);
  int runs = scaled(50);
  for (int r = 0; r < runs; r++) {
    CHECK(weft_graph_run(g));
    for (int k = 0; k < N; k++)
      for (int e = 0; e < LEN; e++) ref[xi[k]][e] = 0.5 * ref[xi[k]][e] + ref[yi[k]][e] + 1;
  }
  for (int i = 0; i < T; i++) {
    double got[LEN];
    tu_read_doubles(ts[i], got);
    assert_memory_equal(got, ref[i], sizeof got); /* bit for bit the serial order */
  }
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

static int add1_kernel(weft_kernel_ctx *ctx) {
  double *x = weft_ctx_data(ctx, 0);
  *x += 1;
  return WEFT_OK;
}

/* ---- many tiny independent tasks ---------------------------------------------------------- */

static atomic_uchar *hits;
static int hit_kernel(weft_kernel_ctx *ctx) {
  const uint32_t *id = weft_ctx_params(ctx, NULL);
  atomic_fetch_add_explicit(&hits[*id], 1, memory_order_relaxed);
  return WEFT_OK;
}

static void many_tiny_tasks(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  const weft_op *hit = tu_op(rt, "hit", 0, NULL, hit_kernel, NULL);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  uint32_t n = (uint32_t)scaled(200000);
  hits = calloc(n, sizeof *hits);
  assert_non_null(hits);
  for (uint32_t i = 0; i < n; i++) CHECK(weft_call(g, hit, NULL, 0, &i, sizeof i));
  for (int r = 1; r <= 5; r++) {
    CHECK(weft_graph_run(g));
    for (uint32_t i = 0; i < n; i++)
      if (atomic_load_explicit(&hits[i], memory_order_relaxed) != r) fail_msg("run %d: task %u ran %d times", r, i, hits[i]);
  }
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  free(hits);
}

/* One writer, then 100 000 readers: they all become ready at once on one worker, whose deque
 * grows while the others steal from it; then one more writer after all of them. */
static int fan_kernel(weft_kernel_ctx *ctx) {
  const double *src = weft_ctx_data(ctx, 0);
  const uint32_t *id = weft_ctx_params(ctx, NULL);
  atomic_fetch_add_explicit(&hits[*id], (unsigned char)*src, memory_order_relaxed);
  return WEFT_OK;
}

static void wide_fan_out(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(3);
  const weft_op *fan = tu_op(rt, "fan", 1, (weft_access[]){WEFT_READ}, fan_kernel, NULL);
  const weft_op *add1 = tu_op(rt, "add1", 1, (weft_access[]){WEFT_READ_WRITE}, add1_kernel, NULL);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *src = tu_tensor(g, "src", WEFT_F64, 0, NULL, weft_zeros());
  uint32_t n = (uint32_t)scaled(100000);
  hits = calloc(n, sizeof *hits);
  assert_non_null(hits);
  CHECK(weft_call(g, add1, &src, 1, NULL, 0));
  for (uint32_t i = 0; i < n; i++) CHECK(weft_call(g, fan, &src, 1, &i, sizeof i));
  CHECK(weft_call(g, add1, &src, 1, NULL, 0)); /* after every reader (WAR) */
  for (int r = 0; r < 3; r++) {
    CHECK(weft_graph_run(g));
    /* Run r's readers saw src = 2r + 1: hits accumulate 1 + 3 + 5 ... */
    for (uint32_t i = 0; i < n; i++)
      if (hits[i] != (r + 1) * (r + 1)) fail_msg("run %d: reader %u saw %d in all", r, i, hits[i]);
  }
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  free(hits);
}

/* Launches that find every worker asleep (the launching thread pauses first, longer than the
 * workers spin): each must wake one. A lost wake-up would leave the run waiting forever; here
 * it fails after 10 s. */
static void launches_wake_sleeping_workers(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  const weft_op *add1 = tu_op(rt, "add1", 1, (weft_access[]){WEFT_READ_WRITE}, add1_kernel, NULL);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = tu_scalar(g, "x", 0), *y = tu_scalar(g, "y", 0);
  CHECK(weft_call(g, add1, &x, 1, NULL, 0));
  CHECK(weft_call(g, add1, &y, 1, NULL, 0));
  int runs = scaled(300);
  for (int r = 0; r < runs; r++) {
    nap_ns(200000 + 1000 * (r % 100));
    weft_run *run;
    CHECK(weft_graph_launch(g, &run));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc;
    while ((rc = weft_run_poll(run)) == WEFT_EAGAIN) {
      clock_gettime(CLOCK_MONOTONIC, &t1);
      if (t1.tv_sec - t0.tv_sec > 10) fail_msg("run %d did not finish in 10 s (a lost wake-up?)", r);
      nap_ns(10000);
    }
    CHECK(rc);
    weft_run_destroy(run);
  }
  assert_true(tu_value(x) == runs && tu_value(y) == runs);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* ---- launch / cancel races ---------------------------------------------------------------- */

/* "ordered": the chain's nodes check that they run in order: pos must equal the node's index
 * (pos is reset to 0 by a fill at the chain's head), then advance it and count in total. */
static int ordered_kernel(weft_kernel_ctx *ctx) {
  const int *k = weft_ctx_params(ctx, NULL);
  double *pos = weft_ctx_data(ctx, 0), *total = weft_ctx_data(ctx, 1);
  if (*pos != *k) return weft_ctx_fail(ctx, "node %d ran at position %g", *k, *pos);
  *pos += 1;
  *total += 1;
  return WEFT_OK;
}

typedef struct cancel_thread {
  weft_runtime *rt;
  const weft_op *op;
  int index, iterations;
  long ok, cancelled, executed;
  char msg[300];
} cancel_thread;


static void *cancel_races(void *arg) {
  cancel_thread *ct = arg;
  enum { LEN = 300 };
  weft_graph *g;
  if (weft_graph_create(ct->rt, &g) != WEFT_OK) return NULL;
  weft_tensor *pos = NULL, *total = NULL;
  if (weft_tensor_create(g, "pos", WEFT_F64, 0, NULL, weft_cpu(), weft_zeros(), &pos) != WEFT_OK ||
      weft_tensor_create(g, "total", WEFT_F64, 0, NULL, weft_cpu(), weft_zeros(), &total) != WEFT_OK ||
      weft_fill(g, pos, weft_zeros()) != WEFT_OK) {
    snprintf(ct->msg, sizeof ct->msg, "build: %s", weft_last_error());
    weft_graph_destroy(g);
    return NULL;
  }
  for (int k = 0; k < LEN; k++) {
    weft_tensor *args[2] = {pos, total};
    if (weft_call(g, ct->op, args, 2, &k, sizeof k) != WEFT_OK) {
      snprintf(ct->msg, sizeof ct->msg, "build: %s", weft_last_error());
      weft_graph_destroy(g);
      return NULL;
    }
  }
  double before = 0;
  for (int i = 0; i < ct->iterations && ct->msg[0] == '\0'; i++) {
    weft_run *run;
    int rc = weft_graph_launch(g, &run);
    if (rc != WEFT_OK) {
      snprintf(ct->msg, sizeof ct->msg, "launch: %s", weft_last_error());
      break;
    }
    if (i % 4 != 3) {
      if (i % 4 == 1) nap_ns(1000 * (i % 50));
      weft_run_cancel(run);
    }
    rc = weft_run_wait(run);
    weft_run_destroy(run);
    double p, t;
    if (weft_tensor_get(pos, 0, &p) != WEFT_OK || weft_tensor_get(total, 0, &t) != WEFT_OK) {
      snprintf(ct->msg, sizeof ct->msg, "read: %s", weft_last_error());
      break;
    }
    /* Whatever the cancel hit, the nodes that ran are a prefix of the chain: if any ran, the
     * fill at its head ran first and the position is their number. */
    double ran = t - before;
    if (rc == WEFT_OK) {
      ct->ok++;
      if (p != LEN || ran != LEN) snprintf(ct->msg, sizeof ct->msg, "a complete run stopped at %g", p);
    } else if (rc == WEFT_ECANCELED) {
      ct->cancelled++;
    } else {
      snprintf(ct->msg, sizeof ct->msg, "run %d: %s", i, weft_last_error());
    }
    if (ran > 0 && p != ran) snprintf(ct->msg, sizeof ct->msg, "run %d: %g nodes ran, position %g", i, ran, p);
    ct->executed += (long)ran;
    before = t;
  }
  weft_graph_destroy(g);
  return NULL;
}

static void launch_cancel_races(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  const weft_op *op = tu_op(rt, "ordered", 2, (weft_access[]){WEFT_READ_WRITE, WEFT_READ_WRITE}, ordered_kernel, NULL);
  enum { NT = 3 };
  pthread_t th[NT];
  cancel_thread cts[NT];
  for (int i = 0; i < NT; i++) {
    memset(&cts[i], 0, sizeof cts[i]);
    cts[i].rt = rt;
    cts[i].op = op;
    cts[i].index = i;
    cts[i].iterations = scaled(400);
    assert_int_equal(pthread_create(&th[i], NULL, cancel_races, &cts[i]), 0);
  }
  long ok = 0, cancelled = 0;
  for (int i = 0; i < NT; i++) {
    pthread_join(th[i], NULL);
    if (cts[i].msg[0]) fail_msg("thread %d: %s", i, cts[i].msg);
    ok += cts[i].ok;
    cancelled += cts[i].cancelled;
  }
  print_message("launch/cancel: %ld complete runs, %ld cancelled\n", ok, cancelled);
  assert_int_equal(ok + cancelled, NT * (long)scaled(400));
  assert_true(ok >= NT * (long)scaled(400) / 4); /* the uncancelled ones at least */
  weft_runtime_destroy(rt);
}

/* ---- callbacks that relaunch -------------------------------------------------------------- */

typedef struct chain_state {
  weft_graph *g;
  int target;
  atomic_int launched, completed;
  weft_run *runs[2048];
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done, error;
} chain_state;

/* On a weft worker: count, and relaunch the graph until the target is reached. The next run
 * may finish, and call back, before this callback returns. */
static void relaunch_cb(weft_run *run, int status, void *arg) {
  (void)run;
  chain_state *cs = arg;
  if (status != WEFT_OK) cs->error = status;
  int n = atomic_fetch_add(&cs->completed, 1) + 1;
  if (n < cs->target && status == WEFT_OK) {
    /* The graph is idle again by the time its callback runs: launching must succeed. */
    int slot = atomic_fetch_add(&cs->launched, 1);
    int rc = weft_graph_launch_cb(cs->g, relaunch_cb, cs, &cs->runs[slot]);
    if (rc == WEFT_OK) return;
    cs->error = rc;
    cs->runs[slot] = NULL;
  }
  pthread_mutex_lock(&cs->lock);
  cs->done = 1;
  pthread_cond_signal(&cs->cond);
  pthread_mutex_unlock(&cs->lock);
}


static void callbacks_relaunch(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  const weft_op *add1 = tu_op(rt, "add1", 1, (weft_access[]){WEFT_READ_WRITE}, add1_kernel, NULL);
  static chain_state cs;
  memset(&cs, 0, sizeof cs);
  pthread_mutex_init(&cs.lock, NULL);
  pthread_cond_init(&cs.cond, NULL);
  CHECK(weft_graph_create(rt, &cs.g));
  weft_tensor *x = tu_tensor(cs.g, "x", WEFT_F64, 0, NULL, weft_zeros());
  weft_tensor *y = tu_tensor(cs.g, "y", WEFT_F64, 0, NULL, weft_zeros());
  for (int i = 0; i < 10; i++) {
    CHECK(weft_call(cs.g, add1, &x, 1, NULL, 0));
    CHECK(weft_call(cs.g, add1, &y, 1, NULL, 0));
  }
  cs.target = scaled(2000) < 2000 ? scaled(2000) : 2000;
  atomic_store(&cs.launched, 1);
  CHECK(weft_graph_launch_cb(cs.g, relaunch_cb, &cs, &cs.runs[0]));
  pthread_mutex_lock(&cs.lock);
  while (!cs.done) pthread_cond_wait(&cs.cond, &cs.lock);
  pthread_mutex_unlock(&cs.lock);
  int launched = atomic_load(&cs.launched);
  for (int i = 0; i < launched; i++) {
    CHECK(weft_run_wait(cs.runs[i]));
    weft_run_destroy(cs.runs[i]);
  }
  assert_int_equal(cs.error, 0);
  assert_int_equal(launched, cs.target);
  assert_int_equal(atomic_load(&cs.completed), cs.target);
  double v;
  CHECK(weft_tensor_get(x, 0, &v));
  assert_true(v == 10.0 * cs.target);
  CHECK(weft_tensor_get(y, 0, &v));
  assert_true(v == 10.0 * cs.target);
  weft_graph_destroy(cs.g);
  weft_runtime_destroy(rt);
  pthread_mutex_destroy(&cs.lock);
  pthread_cond_destroy(&cs.cond);
}

/* ---- many graphs in flight at once -------------------------------------------------------- */

static void many_graphs_in_flight(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(3);
  const weft_op *add1 = tu_op(rt, "add1", 1, (weft_access[]){WEFT_READ_WRITE}, add1_kernel, NULL);
  enum { NG = 64 };
  weft_graph *gs[NG];
  weft_tensor *xs[NG];
  atomic_int cbs = 0;
  for (int i = 0; i < NG; i++) {
    CHECK(weft_graph_create(rt, &gs[i]));
    xs[i] = tu_tensor(gs[i], "x", WEFT_F64, 1, (int64_t[]){3}, weft_zeros());
    for (int k = 0; k < 1 + i % 7; k++) CHECK(weft_call(gs[i], add1, &xs[i], 1, NULL, 0));
  }
  int rounds = scaled(100);
  for (int r = 0; r < rounds; r++) {
    weft_run *runs[NG];
    for (int i = 0; i < NG; i++) CHECK(weft_graph_launch_cb(gs[i], count_cb, &cbs, &runs[i]));
    for (int i = 0; i < NG; i++) {
      int k = (i * 37 + r) % NG; /* wait in a scrambled order (37 is prime to 64) */
      CHECK(weft_run_wait(runs[k]));
      weft_run_destroy(runs[k]);
    }
  }
  assert_int_equal(atomic_load(&cbs), NG * rounds);
  for (int i = 0; i < NG; i++) {
    double v[3];
    tu_read_doubles(xs[i], v);
    assert_true(v[0] == (double)(1 + i % 7) * rounds);
    weft_graph_destroy(gs[i]);
  }
  weft_runtime_destroy(rt);
}

/* ---- large builds and launches at once: followers and parallel plans ---------------------- */

/* out = 1 + the largest input (a stencil's step): after k steps every cell holds k. */
static int step_kernel(weft_kernel_ctx *ctx) {
  int n = weft_ctx_nargs(ctx);
  double m = 0;
  for (int i = 1; i < n; i++) {
    double v = *(const double *)weft_ctx_data(ctx, i);
    m = v > m ? v : m;
  }
  *(double *)weft_ctx_data(ctx, 0) = m + 1;
  return WEFT_OK;
}

typedef struct stencil_thread {
  weft_runtime *rt;
  const weft_op *op;
  int rounds, bad;
  char msg[200];
} stencil_thread;

enum { ST_WIDTH = 16, ST_STEPS = 70 }; /* 1120 nodes: a worker follows their analysis (>= 1024) */

/* Builds a 16-wide stencil of 70 steps, runs it, checks every cell of its last step, then
 * appends another 70 steps (a new follower and a new plan) and so on. */
static void *stencil_launches(void *arg) {
  stencil_thread *st = arg;
  weft_graph *g;
  if (weft_graph_create(st->rt, &g) != WEFT_OK) {
    st->bad = 1;
    return NULL;
  }
  weft_tensor *prev[ST_WIDTH], *cur[ST_WIDTH];
  for (int x = 0; x < ST_WIDTH; x++) prev[x] = NULL;
  int steps = 0;
  for (int r = 0; r < st->rounds && !st->bad; r++) {
    for (int k = 0; k < ST_STEPS && !st->bad; k++, steps++) {
      for (int x = 0; x < ST_WIDTH && !st->bad; x++) {
        weft_tensor *a[4];
        int n = 0;
        if (weft_tensor_create(g, NULL, WEFT_F64, 0, NULL, weft_cpu(), weft_zeros(), &cur[x]) != WEFT_OK) {
          st->bad = 1;
          break;
        }
        a[n++] = cur[x];
        for (int y = x - 1; y <= x + 1; y++)
          if (y >= 0 && y < ST_WIDTH && prev[y] != NULL) a[n++] = prev[y];
        if (weft_call(g, st->op, a, n, NULL, 0) != WEFT_OK) st->bad = 1;
      }
      memcpy(prev, cur, sizeof prev);
    }
    weft_run *run;
    if (st->bad || weft_graph_launch(g, &run) != WEFT_OK) {
      st->bad = 1;
      break;
    }
    if (weft_run_wait(run) != WEFT_OK) {
      snprintf(st->msg, sizeof st->msg, "round %d: %s", r, weft_run_error(run));
      st->bad = 1;
    }
    weft_run_destroy(run);
    for (int x = 0; x < ST_WIDTH && !st->bad; x++) {
      double v;
      if (weft_tensor_get(cur[x], 0, &v) != WEFT_OK || v != (double)steps) {
        snprintf(st->msg, sizeof st->msg, "round %d: cell %d holds %g after %d steps", r, x, v, steps);
        st->bad = 1;
      }
    }
  }
  weft_graph_destroy(g);
  return NULL;
}

/* Four threads build and launch large graphs (each a new plan) at once on a pool of 8 workers,
 * so that the builds' analyses follow them on workers (queued behind, and beside, the others'
 * runs, plans and followers) while others' runs are in flight; every run
 * must end, complete and in order (each cell the number of steps before it). */
static void large_launches_at_once(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(8);
  const weft_op *op = tu_op_gather(rt, "step", step_kernel); /* its stencil's inputs, 0 to 3 */
  enum { NT = 4 };
  pthread_t th[NT];
  stencil_thread st[NT];
  for (int i = 0; i < NT; i++) {
    st[i] = (stencil_thread){.rt = rt, .op = op, .rounds = scaled(6)};
    assert_int_equal(pthread_create(&th[i], NULL, stencil_launches, &st[i]), 0);
  }
  for (int i = 0; i < NT; i++) {
    pthread_join(th[i], NULL);
    if (st[i].bad) fail_msg("thread %d: %s", i, st[i].msg[0] ? st[i].msg : "a call failed");
  }
  weft_runtime_destroy(rt);
}

/* ---- the runtime from many threads ------------------------------------------------------- */

typedef struct reg_thread {
  weft_runtime *rt;
  int index, bad;
} reg_thread;

/* Registers ops and runs a graph with each right away, while the other threads do the same. */
static void *register_and_run(void *arg) {
  reg_thread *rt = arg;
  weft_graph *g;
  if (weft_graph_create(rt->rt, &g) != WEFT_OK) {
    rt->bad = 1;
    return NULL;
  }
  weft_tensor *x;
  if (weft_tensor_create(g, "x", WEFT_F64, 0, NULL, weft_cpu(), weft_zeros(), &x) != WEFT_OK) rt->bad = 1;
  int n = scaled(100);
  for (int i = 0; i < n && !rt->bad; i++) {
    char name[32];
    snprintf(name, sizeof name, "op_%d_%d", rt->index, i);
    weft_op_desc d;
    memset(&d, 0, sizeof d);
    d.name = name;
    d.nargs = 1;
    d.access[0] = WEFT_READ_WRITE;
    d.cpu = add1_kernel;
    const weft_op *op = NULL;
    if (weft_op_register(rt->rt, &d, &op) != WEFT_OK || weft_op_find(rt->rt, name) != op ||
        weft_op_register(rt->rt, &d, NULL) != WEFT_EINVAL || weft_call(g, op, &x, 1, NULL, 0) != WEFT_OK ||
        weft_graph_run(g) != WEFT_OK) {
      rt->bad = 1;
      break;
    }
    double v;
    if (weft_tensor_get(x, 0, &v) != WEFT_OK || v != (double)(i + 1) * (i + 2) / 2) rt->bad = 2;
  }
  weft_graph_destroy(g);
  return NULL;
}

static void runtime_used_from_many_threads(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  enum { NT = 4 };
  pthread_t th[NT];
  reg_thread rs[NT];
  for (int i = 0; i < NT; i++) {
    rs[i] = (reg_thread){rt, i, 0};
    assert_int_equal(pthread_create(&th[i], NULL, register_and_run, &rs[i]), 0);
  }
  for (int i = 0; i < NT; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(rs[i].bad, 0);
  }
  for (int i = 0; i < NT; i++) /* every op any thread registered is there */
    for (int k = 0; k < scaled(100); k++) {
      char name[32];
      snprintf(name, sizeof name, "op_%d_%d", i, k);
      assert_non_null(weft_op_find(rt, name));
    }
  weft_runtime_destroy(rt);
}

int main(void) {
  const char *s = getenv("WEFT_STRESS_SCALE");
  if (s != NULL && atoi(s) > 0) scale_pct = atoi(s);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(threads_run_their_own_programs),
      cmocka_unit_test(large_graph_many_runs),
      cmocka_unit_test(many_tiny_tasks),
      cmocka_unit_test(launches_wake_sleeping_workers),
      cmocka_unit_test(wide_fan_out),
      cmocka_unit_test(launch_cancel_races),
      cmocka_unit_test(callbacks_relaunch),
      cmocka_unit_test(many_graphs_in_flight),
      cmocka_unit_test(large_launches_at_once),
      cmocka_unit_test(runtime_used_from_many_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
