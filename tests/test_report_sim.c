/* test_report_sim.c — the statistics of runs on the simulated machine (src/backends/sim), in
 * virtual time, so that CI without a GPU checks what only a GPU shows: the copy of y[i-1]
 * hides under the product y[i], the hidden-copy fraction is exactly what the intervals say,
 * copies that outrun the compute are reported as serialised on one copy engine, and two GPUs
 * compute at the same time. The virtual timeline depends only on the graph and the profile,
 * so the figures are checked exactly. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "report_util.h"
#include "testutil.h"
#include "weft/report.h"

static weft_runtime *sim_runtime(const char *profile) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 2;
  o.flags = WEFT_RUNTIME_QUIET;
  o.simulate = profile;
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
  return rt;
}

/* The overlap example: y[i] = x . x on cuda:0, h[i] = copy(y[i], cpu). */
static weft_graph *overlap(weft_runtime *rt, int n, int steps) {
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x;
  CHECK(weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){n, n}, weft_cuda(0),
                           weft_uniform(0, 1, 7), &x));
  for (int i = 0; i < steps; i++) {
    weft_tensor *y = NULL, *h = NULL;
    CHECK(weft_mm(g, x, x, &y));
    CHECK(weft_copy(g, y, weft_cpu(), &h));
  }
  return g;
}

static long find_lane(const weft_run_stats *st, const char *name, weft_lane_stats *out) {
  for (size_t l = 0; l < weft_run_stats_lane_count(st); l++) {
    CHECK(weft_run_stats_lane(st, l, out));
    if (strcmp(out->name, name) == 0) return (long)l;
  }
  fail_msg("no lane '%s'", name);
  return -1;
}

static void copies_hide_under_the_next_product(void **state) {
  (void)state;
  enum { STEPS = 8 };
  weft_runtime *rt = sim_runtime("h100");
  weft_graph *g = overlap(rt, 2000, STEPS);
  weft_run_stats *st = tr_run_stats(g);
  weft_stats_summary s;
  weft_run_stats_summary(st, &s);
  assert_int_equal(s.copies, STEPS);
  weft_lane_stats compute, copy;
  long lc = find_lane(st, "cuda:0 compute 0", &compute);
  long ld = find_lane(st, "cuda:0 copy d2h 0", &copy);
  assert_string_equal(compute.kind, "compute");
  assert_string_equal(copy.kind, "copy");
  assert_int_equal(compute.nodes, STEPS);
  assert_int_equal(copy.nodes, STEPS);
  /* Node 2i is product i, node 2i + 1 its copy: copy i runs inside product i + 1. */
  double last = 0, total = 0;
  for (int i = 0; i < STEPS; i++) {
    weft_node_timing p, c;
    CHECK(weft_run_stats_node(st, (size_t)(2 * i), &p));
    CHECK(weft_run_stats_node(st, (size_t)(2 * i + 1), &c));
    assert_int_equal(p.lane, lc);
    assert_int_equal(c.lane, ld);
    assert_true(c.start_s >= p.end_s); /* a copy waits for its product */
    total += c.end_s - c.start_s;
    last = c.end_s - c.start_s;
    if (i + 1 < STEPS) {
      weft_node_timing next;
      CHECK(weft_run_stats_node(st, (size_t)(2 * i + 2), &next));
      assert_true(c.start_s >= next.start_s - 1e-12 && c.end_s <= next.end_s + 1e-12);
    }
  }
  /* Every copy but the last is hidden; the last has nothing left to overlap with. */
  assert_true(fabs(s.copy_s - total) < 1e-9);
  assert_true(fabs(s.hidden_copy_fraction - (total - last) / total) < 1e-9);
  assert_int_equal(weft_run_stats_diagnostic_count(st), 1);
  weft_copy_diagnostic d;
  CHECK(weft_run_stats_diagnostic(st, 0, &d));
  assert_int_equal(d.why, WEFT_WHY_NOTHING_LEFT);
  assert_int_equal(d.copies, 1);
  assert_true(fabs(d.exposed_s - last) < 1e-9);
  /* The device's memory comes from the backend's samples. */
  int found = 0;
  for (size_t i = 0; i < weft_run_stats_device_count(st); i++) {
    weft_device_memory m;
    CHECK(weft_run_stats_device(st, i, &m));
    if (m.device.kind == WEFT_DEVICE_CUDA) {
      found = 1;
      assert_string_equal(m.source, "allocator");
      assert_true(m.peak_bytes >= 2 * 2000 * 2000 * sizeof(float)); /* x and one y at least */
    }
  }
  assert_true(found);
  /* Virtual time: a second run gives the same timeline. */
  weft_run_stats *again = tr_run_stats(g);
  weft_stats_summary s2;
  weft_run_stats_summary(again, &s2);
  /* (It is a replay: its submissions are priced apart, so the same times come out of
   * different sums, equal to rounding: a nanosecond each end.) */
  assert_true(fabs(s2.makespan_s - s.makespan_s) <= 2e-9 && /* node times are whole nanoseconds */
              fabs(s2.hidden_copy_fraction - s.hidden_copy_fraction) <= 1e-6);
  weft_run_stats_destroy(again);
  weft_run_stats_destroy(st);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* Small products and the same copies: the copy engine is the bottleneck, and the exposed copy
 * time is put down to copies queued behind each other on it. */
static void copies_that_outrun_compute_are_serialised(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h100");
  weft_graph *g = overlap(rt, 500, 8);
  weft_run_stats *st = tr_run_stats(g);
  weft_stats_summary s;
  weft_run_stats_summary(st, &s);
  assert_true(s.hidden_copy_fraction > 0 && s.hidden_copy_fraction < 1);
  double serialised, exposed = tr_exposed(st, WEFT_WHY_SERIALISED, &serialised);
  for (size_t i = 0; i < weft_run_stats_diagnostic_count(st); i++) {
    weft_copy_diagnostic d;
    CHECK(weft_run_stats_diagnostic(st, i, &d));
    if (d.why == WEFT_WHY_SERIALISED) {
      assert_true(strstr(d.message, "serialised on one copy engine") != NULL);
      assert_true(strstr(d.message, "cuda:0 copy d2h 0") != NULL);
    }
  }
  assert_true(fabs(exposed - (s.copy_s - s.hidden_copy_s)) < 1e-9);
  assert_true(serialised > 0.5 * exposed);
  weft_run_stats_destroy(st);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* Two chains of products, one per GPU: both GPUs are busy at the same time. */
static void two_gpus_compute_at_once(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h200x2");
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  for (int d = 0; d < 2; d++) {
    weft_tensor *x;
    CHECK(weft_tensor_create(g, d ? "x1" : "x0", WEFT_F32, 2, (int64_t[]){2000, 2000},
                             weft_cuda(d), weft_uniform(0, 1, 1 + (uint64_t)d), &x));
    weft_tensor *y = x;
    for (int i = 0; i < 10; i++) { /* a chain: y = y . x */
      weft_tensor *next = NULL;
      CHECK(weft_mm(g, y, x, &next));
      y = next;
    }
  }
  weft_run_stats *st = tr_run_stats(g);
  weft_stats_summary s;
  weft_run_stats_summary(st, &s);
  weft_lane_stats a, b;
  find_lane(st, "cuda:0 compute 0", &a);
  find_lane(st, "cuda:1 compute 0", &b);
  assert_int_equal(a.nodes, 10);
  assert_int_equal(b.nodes, 10);
  assert_true(a.utilisation > 0.95 && b.utilisation > 0.95);
  assert_true(s.makespan_s < 0.6 * (a.busy_s + b.busy_s));
  weft_run_stats_destroy(st);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(copies_hide_under_the_next_product),
      cmocka_unit_test(copies_that_outrun_compute_are_serialised),
      cmocka_unit_test(two_gpus_compute_at_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
