/* test_cuda_timing.c — device-side node times of the CUDA backend (cuda_timing.c): eager and
 * replayed runs report every GPU node on its stream with intervals that respect the stream's
 * order and the dependencies (a copy after its product, products one after the other on the
 * main stream, a chain in order), within the run's wall time; a node with a CPU successor is
 * timed before the CPU node starts; the memory track comes from the backend; timing off and
 * WEFT_CUDA_TIMING=0 behave as documented. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <stdlib.h>
#include <time.h>

#include "gpu_test.h"
#include "report_util.h"
#if WEFT_HAVE_CUDA
#include "weft/cuda.h"
#endif

#if WEFT_HAVE_CUDA
/* Slack for comparing device times with each other (event resolution: about 0.5 us) and with
 * host times (the device's submission latency, microseconds). */
#define DEV_SLACK_S 2e-6
#define HOST_SLACK_S 100e-6

/* n x (y = x.x; copy y to the host) in g, x of side `side` on cuda:0. */
static void build_overlap(tu_overlap *o, weft_graph *g, int n, int64_t side) {
  tu_overlap_build(o, g, weft_cuda(0), side, weft_uniform(0, 1, 7), n);
}

static weft_node_timing node_time(const weft_run_stats *st, size_t id) {
  weft_node_timing t;
  CHECK(weft_run_stats_node(st, id, &t));
  if (!t.ran) fail_msg("node %zu has no record of this run", id);
  assert_true(t.start_s <= t.end_s);
  assert_true(t.lane >= 0);
  return t;
}

static const char *lane_kind(const weft_run_stats *st, long lane) {
  weft_lane_stats l;
  CHECK(weft_run_stats_lane(st, (size_t)lane, &l));
  return l.kind;
}

/* Runs g once and returns the statistics of that run (the caller destroys them), after checking
 * that every GPU node that ran was timed on the device; *sum receives the summary. */
static weft_run_stats *timed_run(weft_graph *g, weft_stats_summary *sum) {
  weft_run_stats *st = tr_run_stats(g);
  *sum = tr_summary(st);
  assert_int_equal(sum->host_timed_nodes, 0);
  assert_true(sum->makespan_s <= sum->wall_s + HOST_SLACK_S);
  return st;
}

/* The checks every run of the overlap graph must pass; returns the run's stats. */
static weft_run_stats *check_overlap_run(const tu_overlap *o) {
  weft_stats_summary s;
  weft_run_stats *st = timed_run(o->g, &s);
  assert_int_equal(s.nodes_run, (size_t)(2 * o->n));
  weft_node_timing mm[TU_OVERLAP_MAX];
  for (int i = 0; i < o->n; i++) {
    weft_node_timing m = node_time(st, o->mm[i]), c = node_time(st, o->cp[i]);
    assert_string_equal(lane_kind(st, m.lane), "compute");
    assert_string_equal(lane_kind(st, c.lane), "copy");
    assert_true(m.end_s <= s.wall_s + HOST_SLACK_S);
    /* The copy needs the product (the last copy starts at its product's first half). */
    assert_true(c.start_s >= m.start_s - DEV_SLACK_S);
    assert_true(c.end_s >= m.end_s - DEV_SLACK_S);
    mm[i] = m;
  }
  /* Large products run one at a time on the main stream, and the copies on the copy stream,
   * each in program order, eager as replayed: each waits for its turn (src/sched/plan/sync.c, "Turns"),
   * whatever order the workers take them in. */
  for (int i = 1; i < o->n; i++) {
    weft_node_timing c0 = node_time(st, o->cp[i - 1]), c1 = node_time(st, o->cp[i]);
    assert_int_equal(mm[i].lane, mm[0].lane);
    assert_true(mm[i].start_s >= mm[i - 1].end_s - DEV_SLACK_S);
    assert_int_equal(c1.lane, c0.lane);
    assert_true(c1.start_s >= c0.end_s - DEV_SLACK_S);
  }
  return st;
}

static void eager_run_is_timed_on_the_device(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  tu_overlap o;
  build_overlap(&o, f->g, 6, 4096);
  weft_run_stats *st = check_overlap_run(&o);
  weft_stats_summary s = tr_summary(st);
  /* Five of six copies run under the next product. */
  assert_true(s.hidden_copy_fraction > 0.5);
  /* The memory track comes from the backend: x plus at least one result at the peak. */
  int found = 0;
  for (size_t i = 0; i < weft_run_stats_device_count(st); i++) {
    weft_device_memory m;
    CHECK(weft_run_stats_device(st, i, &m));
    if (m.device.kind != WEFT_DEVICE_CUDA) continue;
    found = 1;
    assert_string_equal(m.source, "allocator");
    assert_true(m.peak_bytes >= 2ull * 4096 * 4096 * 4);
  }
  assert_true(found);
  weft_run_stats_destroy(st);
}

static void replayed_runs_are_timed_on_the_device(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  tu_overlap o;
  build_overlap(&o, f->g, 4, 2048);
  for (int r = 0; r < 3; r++) weft_run_stats_destroy(check_overlap_run(&o));
  assert_true(gt_run_stats(f->rt).replays >= 2);
}

/* A chain of tiny adds, batched 128 to a kernel: the held members of a batch are issued
 * without a CUDA call or a note of their own, and timed with their batch's last node; replays
 * tick groups of nodes. Every node is timed on the device's compute stream, and the intervals
 * follow the chain without overlapping, in two eager runs (the second on the plan's recorded
 * state of the first) and two replays. */
static void chain_in_order(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  enum { N = 3000 };
  weft_tensor *x, *one;
  CHECK(weft_tensor_create(f->g, "x", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(0), weft_zeros(), &x));
  CHECK(weft_tensor_create(f->g, "one", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(0), weft_ones(), &one));
  size_t *id = malloc(N * sizeof *id);
  for (int i = 0; i < N; i++) {
    CHECK(weft_add(f->g, x, one, &x));
    id[i] = weft_node_id(weft_graph_last_node(f->g));
  }
  for (int r = 0; r < 4; r++) {
    weft_cuda_set_replay(f->rt, r >= 2);
    weft_stats_summary s;
    weft_run_stats *st = timed_run(f->g, &s);
    /* Which nodes lost their record, if any: the first, the last and how many. */
    int lost = 0, first = -1, last = -1;
    for (int i = 0; i < N; i++) {
      weft_node_timing t;
      CHECK(weft_run_stats_node(st, id[i], &t));
      if (!t.ran) lost++, last = i, first = first < 0 ? i : first;
    }
    if (lost > 0) fail_msg("run %d (%s): %d of %d nodes have no record, from node %d to %d", r, r >= 2 ? "replay" : "eager", lost, N, first, last);
    weft_node_timing prev = node_time(st, id[0]);
    assert_string_equal(lane_kind(st, prev.lane), "compute");
    for (int i = 1; i < N; i++) {
      weft_node_timing t = node_time(st, id[i]);
      assert_int_equal(t.lane, prev.lane);
      assert_true(t.start_s >= prev.end_s - 1e-9);
      prev = t;
    }
    weft_run_stats_destroy(st);
  }
  assert_true(gt_run_stats(f->rt).replays >= 1);
  double v;
  CHECK(weft_tensor_get(x, 0, &v));
  assert_true(v == 4.0 * N);
  free(id);
}

/* A GPU node with a CPU successor is reported from its event before the CPU node starts. */
static void cpu_successor_starts_after_the_device_end(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  weft_tensor *a, *p = NULL, *h = NULL, *r = NULL;
  CHECK(weft_tensor_create(f->g, "a", WEFT_F32, 2, (int64_t[]){2048, 2048}, weft_cuda(0), weft_uniform(-1, 1, 3), &a));
  CHECK(weft_mm(f->g, a, a, &p));
  size_t mm = weft_node_id(weft_graph_last_node(f->g));
  CHECK(weft_copy(f->g, p, weft_cpu(), &h));
  size_t cp = weft_node_id(weft_graph_last_node(f->g));
  CHECK(weft_relu(f->g, h, &r));
  size_t cpu = weft_node_id(weft_graph_last_node(f->g));
  for (int k = 0; k < 2; k++) {
    weft_stats_summary s;
    weft_run_stats *st = timed_run(f->g, &s);
    weft_node_timing tm = node_time(st, mm), tc = node_time(st, cp), tr = node_time(st, cpu);
    assert_string_equal(lane_kind(st, tc.lane), "copy");
    assert_string_equal(lane_kind(st, tr.lane), "cpu");
    assert_true(tc.start_s >= tm.end_s - DEV_SLACK_S);
    assert_true(tr.start_s >= tc.end_s - HOST_SLACK_S);
    weft_run_stats_destroy(st);
  }
}

static int sleep_150ms(weft_kernel_ctx *ctx) {
  (void)ctx;
  nanosleep(&(struct timespec){0, 150000000L}, NULL);
  return WEFT_OK;
}

/* Turns are for nodes that become ready through GPU nodes alone: a copy to the host that waits
 * for a slow CPU node (through its upload and a product) comes first on the copy stream in
 * program order, yet the copies after it, which need nothing from the host, run without
 * waiting for it, in their own order. */
static void a_copy_waiting_for_the_host_holds_back_no_other(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  const weft_op *slow = gt_op(f->rt, "sleep_150ms", WEFT_READ_WRITE, sleep_150ms, NULL);
  weft_tensor *hc, *up = NULL, *sq = NULL, *back = NULL;
  CHECK(weft_tensor_create(f->g, "hc", WEFT_F32, 2, (int64_t[]){64, 64}, weft_cpu(), weft_full(1), &hc));
  CHECK(weft_call(f->g, slow, &hc, 1, NULL, 0));
  size_t cpu = weft_node_id(weft_graph_last_node(f->g));
  CHECK(weft_copy(f->g, hc, weft_cuda(0), &up));
  CHECK(weft_mm(f->g, up, up, &sq));
  CHECK(weft_copy(f->g, sq, weft_cpu(), &back));
  size_t waiting = weft_node_id(weft_graph_last_node(f->g));
  enum { K = 3 };
  weft_tensor *b[K], *h[K];
  size_t cp[K];
  for (int k = 0; k < K; k++) {
    h[k] = NULL;
    CHECK(weft_tensor_create(f->g, "b", WEFT_F32, 1, (int64_t[]){64}, weft_cuda(0), weft_full(k + 1), &b[k]));
    CHECK(weft_copy(f->g, b[k], weft_cpu(), &h[k]));
    cp[k] = weft_node_id(weft_graph_last_node(f->g));
  }
  for (int r = 0; r < 2; r++) {
    weft_stats_summary s;
    weft_run_stats *st = timed_run(f->g, &s);
    weft_node_timing tc = node_time(st, cpu), tw = node_time(st, waiting);
    assert_true(tw.start_s >= tc.end_s - HOST_SLACK_S);
    for (int k = 0; k < K; k++) {
      weft_node_timing t = node_time(st, cp[k]);
      assert_int_equal(t.lane, tw.lane);
      assert_true(t.end_s < tc.end_s - 0.05); /* long before the CPU node is done */
      if (k > 0) assert_true(t.start_s >= node_time(st, cp[k - 1]).end_s - DEV_SLACK_S);
    }
    weft_run_stats_destroy(st);
  }
  double v;
  CHECK(weft_tensor_get(back, 0, &v));
  assert_true(v == 64.0);
  for (int k = 0; k < K; k++) {
    CHECK(weft_tensor_get(h[k], 63, &v));
    assert_true(v == k + 1.0);
  }
}

/* Timing off: runs are right and statistics are refused; WEFT_CUDA_TIMING=0: GPU nodes keep
 * their host-side intervals and are counted as such. */
static void timing_switches(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  for (int mode = 0; mode < 2; mode++) {
    weft_runtime *rt = mode == 0 ? gt_runtime(2, WEFT_RUNTIME_NO_TIMING)
                                 : gt_runtime_env(2, 0, "WEFT_CUDA_TIMING", "0");
    tu_overlap o;
    build_overlap(&o, tu_graph(rt), 3, 1024);
    for (int r = 0; r < 3; r++) {
      weft_run *run;
      CHECK(weft_graph_launch(o.g, &run));
      CHECK(weft_run_wait(run));
      weft_run_stats *st = NULL;
      int rc = weft_run_stats_create(run, &st);
      if (mode == 0) {
        assert_int_equal(rc, WEFT_ENOTSUP);
      } else {
        CHECK(rc);
        weft_stats_summary s = tr_summary(st);
        /* A replay dispatches no node: nothing is timed then, host-side or not. */
        assert_true(s.host_timed_nodes == (size_t)(2 * o.n) || s.host_timed_nodes == 0);
        if (r == 0) assert_int_equal(s.host_timed_nodes, (size_t)(2 * o.n));
        weft_run_stats_destroy(st);
      }
      weft_run_destroy(run);
    }
    weft_graph_destroy(o.g);
    weft_runtime_destroy(rt);
  }
}

/* Two chains on two GPUs: both devices report, and the chains overlap in time. */
static void two_devices(void **state) {
  GT_NEED_GPUS(2);
  tu_fixture *f = *state;
  size_t first[2], last[2];
  for (int d = 0; d < 2; d++) {
    weft_tensor *x;
    CHECK(weft_tensor_create(f->g, "x", WEFT_F32, 2, (int64_t[]){4096, 4096}, weft_cuda(d), weft_uniform(0, 1, 5), &x));
    for (int i = 0; i < 6; i++) {
      weft_tensor *y = NULL;
      CHECK(weft_mm(f->g, x, x, &y));
      if (i == 0) first[d] = weft_node_id(weft_graph_last_node(f->g));
      last[d] = weft_node_id(weft_graph_last_node(f->g));
    }
  }
  for (int r = 0; r < 3; r++) {
    weft_stats_summary s;
    weft_run_stats *st = timed_run(f->g, &s);
    weft_node_timing a0 = node_time(st, first[0]), a1 = node_time(st, last[0]);
    weft_node_timing b0 = node_time(st, first[1]), b1 = node_time(st, last[1]);
    assert_true(a0.lane != b0.lane);
    /* Each chain takes most of the makespan, so they ran at once. */
    assert_true(a1.end_s - a0.start_s > 0.7 * s.makespan_s);
    assert_true(b1.end_s - b0.start_s > 0.7 * s.makespan_s);
    weft_run_stats_destroy(st);
  }
}
#else
static void eager_run_is_timed_on_the_device(void **state) { (void)state; skip(); }
static void replayed_runs_are_timed_on_the_device(void **state) { (void)state; skip(); }
static void chain_in_order(void **state) { (void)state; skip(); }
static void cpu_successor_starts_after_the_device_end(void **state) { (void)state; skip(); }
static void a_copy_waiting_for_the_host_holds_back_no_other(void **state) { (void)state; skip(); }
static void timing_switches(void **state) { (void)state; skip(); }
static void two_devices(void **state) { (void)state; skip(); }
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(eager_run_is_timed_on_the_device, gt_setup, gt_teardown),
      cmocka_unit_test_setup_teardown(replayed_runs_are_timed_on_the_device, gt_setup, gt_teardown),
      cmocka_unit_test_setup_teardown(chain_in_order, gt_setup, gt_teardown),
      cmocka_unit_test_setup_teardown(cpu_successor_starts_after_the_device_end, gt_setup, gt_teardown),
      cmocka_unit_test_setup_teardown(a_copy_waiting_for_the_host_holds_back_no_other, gt_setup, gt_teardown),
      cmocka_unit_test(timing_switches),
      cmocka_unit_test_setup_teardown(two_devices, gt_setup, gt_teardown),
  };
  return GT_RUN(tests);
}
