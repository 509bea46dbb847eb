/* test_report.c — run statistics, the overlap accounting and its reasons, the JSON statistics,
 * the Chrome trace and the SVG timeline (checked with real parsers: jansson and libxml2),
 * progress, the run's end on the timing clock, and the error paths of weft/report.h. The
 * overlap math and the critical path are also tested on hand-made intervals through the
 * internal model (sched/report/model.h). */
#define _XOPEN_SOURCE 600 /* posix_openpt */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "report_util.h"
#include "testutil.h"
#include "weft/report.h"

#include "backends/backend.h"
#include "sched/report/model.h"

#if WEFT_TEST_JANSSON
#include <jansson.h>
#endif
#if WEFT_TEST_LIBXML2
#include <libxml/parser.h>
#include <libxml/tree.h>
#endif

/* ---- helpers ------------------------------------------------------------------------------ */

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* A kernel that sleeps for the microseconds given as its parameter (a long). */
static int sleep_kernel(weft_kernel_ctx *ctx) {
  size_t size;
  const long *us = weft_ctx_params(ctx, &size);
  if (size == sizeof *us) sleep_us(*us);
  return WEFT_OK;
}

static int empty_kernel(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}

static int fail_kernel(weft_kernel_ctx *ctx) { return weft_ctx_fail(ctx, "planned failure"); }

/* A kernel that spins until the gate (its user pointer) opens. */
static int gate_kernel(weft_kernel_ctx *ctx) {
  atomic_int *gate = weft_ctx_user(ctx);
  while (!atomic_load(gate)) sleep_us(100);
  return WEFT_OK;
}

static const weft_op *op_rw(weft_runtime *rt, const char *name, weft_kernel_fn fn, void *user) {
  weft_access m[1] = {WEFT_READ_WRITE};
  return tu_op(rt, name, 1, m, fn, user);
}

/* Adds `len` nodes sleeping `us` each, read-writing t (a chain). */
static void chain(weft_graph *g, const weft_op *op, weft_tensor *t, int len, long us) {
  for (int i = 0; i < len; i++) CHECK(weft_call(g, op, &t, 1, &us, sizeof us));
}

static weft_tensor *scalar(weft_graph *g, const char *name) {
  return tu_tensor(g, name, WEFT_F32, 0, NULL, weft_zeros());
}

/* Writes the snapshot in `format` into a malloc'd string. */
static char *render(const weft_run_stats *st, int format, size_t *len) {
  FILE *f = tmpfile();
  assert_non_null(f);
  CHECK(weft_run_stats_write(st, format, f));
  assert_true(ftell(f) > 0);
  rewind(f);
  char *buf = tu_read_stream(f, len);
  fclose(f);
  return buf;
}

/* ---- statistics of CPU graphs --------------------------------------------------------------- */

/* Two independent chains of equal length on two workers: each worker runs one chain, the two
 * at the same time, and the critical path is one chain. */
static void two_equal_chains_keep_two_workers_busy(void **state) {
  tu_fixture *f = *state;
  const weft_op *op = op_rw(f->rt, "nap", sleep_kernel, NULL);
  chain(f->g, op, scalar(f->g, "a"), 6, 8000);
  chain(f->g, op, scalar(f->g, "b"), 6, 8000);
  weft_run_stats *st = tr_run_stats(f->g);
  weft_stats_summary s = tr_summary(st);
  assert_int_equal(s.nodes, 12);
  assert_int_equal(s.nodes_run, 12);
  assert_int_equal(s.edges, 10);
  assert_int_equal(s.copies, 0);
  assert_true(s.hidden_copy_fraction < 0);
  assert_true(s.makespan_s >= s.critical_path_s);
  assert_true(s.wall_s >= s.makespan_s);
  /* The critical path is one whole chain, in order, and its length is the chain's time. */
  weft_node *path[16];
  assert_int_equal(weft_run_stats_critical_path(st, path, 16), 6);
  size_t first = weft_node_id(path[0]);
  assert_true(first == 0 || first == 6);
  double sum = 0;
  for (size_t i = 0; i < 6; i++) {
    assert_int_equal(weft_node_id(path[i]), first + i);
    weft_node_timing t;
    CHECK(weft_run_stats_node(st, first + i, &t));
    assert_true(t.ran && t.critical);
    sum += t.end_s - t.start_s;
  }
  assert_true(fabs(sum - s.critical_path_s) < 1e-9);
  assert_true(s.critical_path_s >= 6 * 8000e-6);
  /* Every node but the two chains' first had a predecessor: its wait is counted. */
  assert_int_equal(s.ready_wait_nodes, 10);
  assert_true(s.ready_wait_p50_s <= s.ready_wait_p99_s && s.ready_wait_p99_s <= s.ready_wait_max_s);
  char *text = render(st, WEFT_REPORT_TEXT, &(size_t){0});
  assert_true(tu_contains(text, "waits for a worker, ready to start: median "));
  free(text);
  /* Both workers: one chain each, at the same time. A worker's utilisation is its chain's time
   * over the longer chain's, and an 8 ms sleep can overrun by milliseconds on a loaded machine
   * (CI's TSan build runs the tests two at a time on two cores), so the test asserts that the
   * chains overlapped, not that they took equally long: the makespan is well under the two busy
   * times added (one after the other, it would be at least that). */
  assert_int_equal(weft_run_stats_lane_count(st), 2);
  double busy = 0;
  for (size_t l = 0; l < 2; l++) {
    weft_lane_stats ls;
    CHECK(weft_run_stats_lane(st, l, &ls));
    assert_string_equal(ls.kind, "cpu");
    assert_int_equal(ls.nodes, 6);
    if (!(ls.utilisation > 0.5 && ls.utilisation <= 1.0 + 1e-9))
      fail_msg("%s: utilisation %.3f (busy %.3f ms of a %.3f ms makespan)", ls.name, ls.utilisation,
               ls.busy_s * 1e3, s.makespan_s * 1e3);
    assert_true(ls.busy_s <= s.makespan_s + 1e-9);
    busy += ls.busy_s;
  }
  if (!(s.makespan_s < 0.8 * busy))
    fail_msg("the chains did not overlap: makespan %.3f ms, busy %.3f ms in all", s.makespan_s * 1e3, busy * 1e3);
  /* Nodes of one chain share a lane. */
  weft_node_timing t0, t5;
  CHECK(weft_run_stats_node(st, 0, &t0));
  CHECK(weft_run_stats_node(st, 5, &t5));
  assert_int_equal(t0.lane, t5.lane);
  weft_run_stats_destroy(st);
}

/* A chain of compute and copies: nothing runs beside a copy, so none is hidden, and every copy
 * is reported as part of a chain. */
static void a_chain_has_no_overlap(void **state) {
  tu_fixture *f = *state;
  const weft_op *op = op_rw(f->rt, "nap", sleep_kernel, NULL);
  weft_tensor *t = tu_matrix(f->g, "t", 256, 256, 1);
  long us = 1000;
  for (int i = 0; i < 4; i++) {
    CHECK(weft_call(f->g, op, &t, 1, &us, sizeof us));
    weft_tensor *c = NULL;
    CHECK(weft_copy(f->g, t, weft_cpu(), &c));
    t = c;
  }
  CHECK(weft_call(f->g, op, &t, 1, &us, sizeof us));
  weft_run_stats *st = tr_run_stats(f->g);
  weft_stats_summary s = tr_summary(st);
  assert_int_equal(s.copies, 4);
  assert_int_equal(s.nodes_run, 9);
  assert_true(s.copy_s > 0);
  assert_true(s.hidden_copy_fraction == 0.0);
  assert_int_equal(weft_run_stats_diagnostic_count(st), 1);
  weft_copy_diagnostic d;
  CHECK(weft_run_stats_diagnostic(st, 0, &d));
  assert_int_equal(d.why, WEFT_WHY_CHAIN);
  assert_int_equal(d.copies, 4);
  assert_true(fabs(d.exposed_s - s.copy_s) < 1e-9);
  assert_true(tu_contains(d.message, "chain with nothing to overlap with"));
  /* The whole program is one chain: the critical path holds every node. */
  assert_int_equal(s.critical_path_nodes, 9);
  char *text = render(st, WEFT_REPORT_TEXT, NULL);
  assert_true(tu_contains(text, "0.0% hidden behind compute"));
  assert_true(tu_contains(text, "chain"));
  free(text);
  weft_run_stats_destroy(st);
}

/* Builds the overlap example's graph on the CPU: y[i] = x . x, h[i] = copy(y[i]). */
static void overlap_graph(weft_graph *g, int n, int count) {
  tu_overlap o;
  tu_overlap_build(&o, g, weft_cpu(), n, weft_uniform(-1, 1, 42), count);
}

typedef struct ivl {
  double s, e;
} ivl;

static int cmp_ivl(const void *a, const void *b) {
  const ivl *x = a, *y = b;
  return (x->s > y->s) - (x->s < y->s);
}

/* The hidden fraction computed here from the nodes' intervals, independently of the library's
 * accounting: the union of compute intervals, intersected with each copy. */
static double hidden_fraction_by_hand(const weft_run_stats *st, weft_graph *g) {
  size_t n = weft_graph_node_count(g), nc = 0;
  ivl *comp = calloc(n, sizeof *comp);
  for (size_t i = 0; i < n; i++) {
    weft_node_timing t;
    CHECK(weft_run_stats_node(st, i, &t));
    if (t.ran && strcmp(weft_node_op_name(weft_graph_node(g, i)), "copy") != 0)
      comp[nc++] = (ivl){t.start_s, t.end_s};
  }
  qsort(comp, nc, sizeof *comp, cmp_ivl);
  size_t m = 0;
  for (size_t i = 0; i < nc; i++) {
    if (m > 0 && comp[i].s <= comp[m - 1].e) {
      if (comp[i].e > comp[m - 1].e) comp[m - 1].e = comp[i].e;
    } else {
      comp[m++] = comp[i];
    }
  }
  double total = 0, hidden = 0;
  for (size_t i = 0; i < n; i++) {
    weft_node_timing t;
    CHECK(weft_run_stats_node(st, i, &t));
    if (!t.ran || strcmp(weft_node_op_name(weft_graph_node(g, i)), "copy") != 0) continue;
    total += t.end_s - t.start_s;
    for (size_t k = 0; k < m; k++) {
      double a = comp[k].s > t.start_s ? comp[k].s : t.start_s;
      double b = comp[k].e < t.end_s ? comp[k].e : t.end_s;
      if (b > a) hidden += b - a;
    }
  }
  free(comp);
  return total > 0 ? hidden / total : -1;
}

/* The overlap example on two CPU workers: the library's hidden fraction equals the one
 * computed from the node intervals by hand, and the exposed time is explained. */
static void hidden_fraction_matches_the_intervals(void **state) {
  tu_fixture *f = *state;
  overlap_graph(f->g, 160, 12);
  weft_run_stats *st = tr_run_stats(f->g);
  weft_stats_summary s = tr_summary(st);
  assert_int_equal(s.copies, 12);
  assert_true(s.hidden_copy_fraction >= 0 && s.hidden_copy_fraction <= 1);
  double by_hand = hidden_fraction_by_hand(st, f->g);
  assert_true(fabs(by_hand - s.hidden_copy_fraction) < 1e-6);
  /* Whatever was not hidden has reasons whose times add up to it. */
  double exposed = tr_exposed(st, WEFT_WHY_NONE, NULL);
  assert_true(fabs(exposed - (s.copy_s - s.hidden_copy_s)) < 1e-9);
  /* Memory without backend samples: the tensors' bytes on the CPU. */
  assert_int_equal(weft_run_stats_device_count(st), 1);
  weft_device_memory m;
  CHECK(weft_run_stats_device(st, 0, &m));
  assert_string_equal(m.source, "tensors");
  assert_true(m.peak_bytes >= (1 + 2 * 12) * 160 * 160 * sizeof(float) - 12 * 160 * 160 * sizeof(float));
  weft_run_stats_destroy(st);
}

/* A failing node: what depends on it does not run and is left out; the rest is reported. */
static void failed_runs_report_what_ran(void **state) {
  tu_fixture *f = *state;
  const weft_op *nap = op_rw(f->rt, "nap", sleep_kernel, NULL);
  const weft_op *bad = op_rw(f->rt, "bad", fail_kernel, NULL);
  weft_tensor *a = scalar(f->g, "a"), *b = scalar(f->g, "b");
  chain(f->g, nap, a, 2, 500);
  CHECK(weft_call(f->g, bad, &a, 1, NULL, 0));
  chain(f->g, nap, a, 3, 500); /* skipped */
  chain(f->g, nap, b, 3, 500); /* independent: runs */
  weft_run *run;
  CHECK(weft_graph_launch(f->g, &run));
  assert_int_equal(weft_run_wait(run), WEFT_EKERNEL);
  weft_run_stats *st;
  CHECK(weft_run_stats_create(run, &st));
  weft_run_destroy(run);
  weft_stats_summary s = tr_summary(st);
  assert_int_equal(s.nodes, 9);
  assert_int_equal(s.nodes_run, 6);
  for (size_t i = 3; i < 6; i++) {
    weft_node_timing t;
    CHECK(weft_run_stats_node(st, i, &t));
    assert_false(t.ran);
    assert_int_equal(t.lane, -1);
  }
  weft_run_stats_destroy(st);
}

/* ---- outputs, through real parsers -------------------------------------------------------- */

#if WEFT_TEST_JANSSON
static json_t *parse_json(const char *text, size_t len) {
  json_error_t err;
  json_t *j = json_loadb(text, len, 0, &err);
  if (j == NULL) fail_msg("JSON does not parse: %s at line %d column %d", err.text, err.line, err.column);
  return j;
}
#endif

static void stats_json_has_the_documented_keys(void **state) {
#if !WEFT_TEST_JANSSON
  (void)state;
  skip();
#else
  tu_fixture *f = *state;
  overlap_graph(f->g, 64, 4);
  weft_run_stats *st = tr_run_stats(f->g);
  weft_stats_summary s = tr_summary(st);
  size_t len;
  char *text = render(st, WEFT_REPORT_JSON, &len);
  json_t *j = parse_json(text, len);
  assert_true(json_is_object(j));
  assert_true(fabs(json_real_value(json_object_get(j, "makespan_s")) - s.makespan_s) < 1e-12 + 1e-8 * s.makespan_s);
  assert_true(json_is_number(json_object_get(j, "critical_path_s")));
  json_t *h = json_object_get(j, "hidden_copy_fraction");
  assert_true(json_is_number(h));
  assert_true(fabs(json_number_value(h) - s.hidden_copy_fraction) < 1e-8);
  assert_int_equal(json_integer_value(json_object_get(j, "nodes")), 8);
  assert_int_equal(json_integer_value(json_object_get(j, "copies")), 4);
  assert_true(json_is_integer(json_object_get(j, "edges")));
  assert_true(json_is_integer(json_object_get(j, "events")));
  assert_true(json_is_integer(json_object_get(j, "inserted_copies")));
  json_t *rw = json_object_get(j, "ready_wait");
  assert_true(json_is_object(rw));
  assert_int_equal(json_integer_value(json_object_get(rw, "nodes")), s.ready_wait_nodes);
  assert_true(json_number_value(json_object_get(rw, "p50_s")) <= json_number_value(json_object_get(rw, "p99_s")));
  assert_true(json_number_value(json_object_get(rw, "p99_s")) <= json_number_value(json_object_get(rw, "max_s")));
  json_t *moved = json_object_get(j, "bytes_moved");
  assert_true(json_is_object(moved));
  assert_int_equal(json_integer_value(json_object_get(moved, "h2d")) + json_integer_value(json_object_get(moved, "d2h")) +
                       json_integer_value(json_object_get(moved, "peer")) + json_integer_value(json_object_get(moved, "local")),
                   s.bytes_h2d + s.bytes_d2h + s.bytes_peer + s.bytes_local);
  assert_true(s.bytes_local > 0); /* the four copies ran within the host */
  json_t *lanes = json_object_get(j, "lanes");
  assert_true(json_is_array(lanes));
  assert_int_equal(json_array_size(lanes), weft_run_stats_lane_count(st));
  size_t i;
  json_t *lane;
  json_array_foreach(lanes, i, lane) {
    assert_true(json_is_string(json_object_get(lane, "name")));
    assert_string_equal(json_string_value(json_object_get(lane, "kind")), "cpu");
    assert_true(json_is_number(json_object_get(lane, "busy_s")));
  }
  json_t *peak = json_object_get(j, "peak_bytes");
  assert_true(json_is_object(peak));
  assert_true(json_integer_value(json_object_get(peak, "cpu")) > 0);
  assert_true(json_is_array(json_object_get(j, "critical_path")));
  assert_true(json_is_array(json_object_get(j, "not_hidden")));
  json_decref(j);
  free(text);
  weft_run_stats_destroy(st);
#endif
}

/* The trace: one named thread per lane, one complete event per node with its op and tensors,
 * flows only along edges between lanes, each flow's start and end with the same id. */
static void trace_is_chrome_trace_json(void **state) {
#if !WEFT_TEST_JANSSON
  (void)state;
  skip();
#else
  tu_fixture *f = *state;
  const weft_op *nap = op_rw(f->rt, "nap", sleep_kernel, NULL);
  weft_access jm[3] = {WEFT_READ, WEFT_READ, WEFT_WRITE};
  const weft_op *join = tu_op(f->rt, "join", 3, jm, empty_kernel, NULL);
  weft_tensor *a = scalar(f->g, "a"), *b = scalar(f->g, "b"), *c = scalar(f->g, "c");
  chain(f->g, nap, a, 3, 2000);
  chain(f->g, nap, b, 3, 2000);
  CHECK(weft_call(f->g, join, (weft_tensor *[]){a, b, c}, 3, NULL, 0));
  weft_run_stats *st = tr_run_stats(f->g);
  size_t len;
  char *text = render(st, WEFT_REPORT_TRACE, &len);
  json_t *j = parse_json(text, len);
  json_t *ev = json_object_get(j, "traceEvents");
  assert_true(json_is_array(ev));
  size_t slices = 0, threads = 0, starts = 0, finishes = 0, counters = 0, setup = 0, i;
  long long id_sum_s = 0, id_sum_f = 0;
  json_t *e;
  json_array_foreach(ev, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    assert_non_null(ph);
    assert_true(json_is_integer(json_object_get(e, "pid")));
    if (strcmp(ph, "X") == 0 && strcmp(json_string_value(json_object_get(e, "cat")), "setup") == 0) {
      setup++; /* the run's setup: before the nodes */
      assert_true(json_number_value(json_object_get(e, "ts")) >= 0);
      assert_int_equal(json_integer_value(json_object_get(e, "pid")), 1);
    } else if (strcmp(ph, "X") == 0) {
      slices++;
      assert_true(json_is_number(json_object_get(e, "ts")));
      assert_true(json_number_value(json_object_get(e, "dur")) >= 0);
      assert_true(json_is_integer(json_object_get(e, "tid")));
      json_t *args = json_object_get(e, "args");
      size_t node = (size_t)json_integer_value(json_object_get(args, "node"));
      assert_true(node < 7);
      assert_string_equal(json_string_value(json_object_get(e, "name")),
                          weft_node_op_name(weft_graph_node(f->g, node)));
      assert_true(json_is_array(json_object_get(args, "reads")));
      assert_true(json_array_size(json_object_get(args, "writes")) == 1);
      assert_true(json_is_integer(json_object_get(args, "bytes")));
    } else if (strcmp(ph, "M") == 0 &&
               strcmp(json_string_value(json_object_get(e, "name")), "thread_name") == 0) {
      const char *name = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
      if (strcmp(name, "setup (before the first node)") != 0) {
        threads++;
        assert_true(tu_contains(name, "cpu worker"));
      }
    } else if (strcmp(ph, "s") == 0) {
      starts++;
      id_sum_s += json_integer_value(json_object_get(e, "id"));
    } else if (strcmp(ph, "f") == 0) {
      finishes++;
      id_sum_f += json_integer_value(json_object_get(e, "id"));
      assert_string_equal(json_string_value(json_object_get(e, "bp")), "e");
    } else if (strcmp(ph, "C") == 0) {
      counters++;
    }
  }
  assert_int_equal(slices, 7);
  assert_int_equal(threads, 2);
  assert_int_equal(setup, weft_run_stats_setup(st, NULL));
  assert_true(setup >= 2); /* the plan and the backends' start at least */
  /* The join runs after one chain on that chain's worker: exactly one edge crosses lanes. */
  weft_stats_summary s = tr_summary(st);
  assert_int_equal(s.events, 1);
  assert_int_equal(starts, 1);
  assert_int_equal(finishes, 1);
  assert_int_equal(id_sum_s, id_sum_f);
  assert_true(counters >= 2); /* the CPU's memory track */
  json_decref(j);
  free(text);
  weft_run_stats_destroy(st);
#endif
}

#if WEFT_TEST_LIBXML2
typedef struct svg_count {
  size_t node_rects, merged_rects, merged_nodes, rects;
} svg_count;

static void count_rects(xmlNode *n, svg_count *c) {
  for (; n != NULL; n = n->next) {
    if (n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, (const xmlChar *)"rect") == 0) {
      c->rects++;
      xmlChar *cls = xmlGetProp(n, (const xmlChar *)"class");
      if (cls != NULL && xmlStrcmp(cls, (const xmlChar *)"node") == 0) c->node_rects++;
      if (cls != NULL && xmlStrcmp(cls, (const xmlChar *)"merged") == 0) {
        c->merged_rects++;
        xmlChar *k = xmlGetProp(n, (const xmlChar *)"data-nodes");
        assert_non_null(k);
        c->merged_nodes += (size_t)atol((const char *)k);
        xmlFree(k);
      }
      xmlFree(cls);
    }
    count_rects(n->children, c);
  }
}

static svg_count parse_svg(const char *text, size_t len) {
  xmlDoc *doc = xmlReadMemory(text, (int)len, "timeline.svg", NULL, XML_PARSE_NONET);
  if (doc == NULL) fail_msg("the SVG is not well-formed XML");
  xmlNode *root = xmlDocGetRootElement(doc);
  assert_string_equal((const char *)root->name, "svg");
  assert_non_null(root->ns);
  assert_string_equal((const char *)root->ns->href, "http://www.w3.org/2000/svg");
  svg_count c = {0};
  count_rects(root, &c);
  xmlFreeDoc(doc);
  return c;
}
#endif

/* Every node wide enough to see gets its own bar. */
static void svg_has_one_bar_per_node(void **state) {
#if !WEFT_TEST_LIBXML2
  (void)state;
  skip();
#else
  tu_fixture *f = *state;
  const weft_op *nap = op_rw(f->rt, "nap", sleep_kernel, NULL);
  chain(f->g, nap, scalar(f->g, "a<&>"), 5, 2000); /* a name that needs escaping */
  chain(f->g, nap, scalar(f->g, "b"), 4, 2000);
  weft_run_stats *st = tr_run_stats(f->g);
  size_t len;
  char *text = render(st, WEFT_REPORT_SVG, &len);
  svg_count c = parse_svg(text, len);
  assert_int_equal(c.node_rects, 9);
  assert_int_equal(c.merged_rects, 0);
  assert_true(tu_contains(text, "a&lt;&amp;&gt;"));
  assert_true(tu_contains(text, "critical path"));
  free(text);
  weft_run_stats_destroy(st);
#endif
}

/* 10 000 tiny nodes: bars under a pixel are merged, every node is counted exactly once, and the
 * picture stays small. */
static void svg_merges_bars_thinner_than_a_pixel(void **state) {
#if !WEFT_TEST_LIBXML2
  (void)state;
  skip();
#else
  tu_fixture *f = *state;
  const weft_op *touch = op_rw(f->rt, "touch", empty_kernel, NULL);
  const weft_op *nap = op_rw(f->rt, "nap", sleep_kernel, NULL);
  for (int i = 0; i < 10000; i++) {
    weft_tensor *t = scalar(f->g, NULL);
    CHECK(weft_call(f->g, touch, &t, 1, NULL, 0));
  }
  chain(f->g, nap, scalar(f->g, "slow"), 1, 20000); /* one wide bar, so the tiny ones are thin */
  weft_run_stats *st = tr_run_stats(f->g);
  size_t len;
  char *text = render(st, WEFT_REPORT_SVG, &len);
  svg_count c = parse_svg(text, len);
  assert_true(c.merged_rects > 0);
  assert_int_equal(c.node_rects + c.merged_nodes, 10001);
  assert_true(c.rects < 4000);
  free(text);
  weft_run_stats_destroy(st);
#endif
}

static void save_writes_files_and_names_bad_paths(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(1);
  const weft_op *nap = op_rw(rt, "nap", sleep_kernel, NULL);
  weft_graph *g = tu_graph(rt);
  chain(g, nap, scalar(g, "a"), 2, 100);
  weft_run_stats *st = tr_run_stats(g);
  char path[] = "/tmp/weft_report_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  for (int fmt = WEFT_REPORT_TEXT; fmt <= WEFT_REPORT_SVG; fmt++) {
    CHECK(weft_run_stats_save(st, fmt, path));
    size_t len;
    free(tu_read_file(path, &len));
    assert_true(len > 20);
  }
  remove(path);
  assert_int_equal(weft_run_stats_save(st, WEFT_REPORT_TRACE, "/nonexistent-dir/t.json"), WEFT_EIO);
  assert_true(tu_contains(weft_last_error(), "/nonexistent-dir/t.json"));
  assert_int_equal(weft_run_stats_save(st, 17, "/tmp/x"), WEFT_EINVAL);
  assert_int_equal(weft_run_stats_write(st, -1, stdout), WEFT_EINVAL);
  assert_int_equal(weft_run_stats_write(NULL, WEFT_REPORT_TEXT, stdout), WEFT_EINVAL);
  weft_lane_stats ls;
  assert_int_equal(weft_run_stats_lane(st, 99, &ls), WEFT_EINVAL);
  weft_node_timing nt;
  assert_int_equal(weft_run_stats_node(st, 2, &nt), WEFT_EINVAL);
  weft_device_memory dm;
  assert_int_equal(weft_run_stats_device(st, 5, &dm), WEFT_EINVAL);
  weft_copy_diagnostic cd;
  assert_int_equal(weft_run_stats_diagnostic(st, 0, &cd), WEFT_EINVAL);
  assert_string_equal(weft_copy_why_name(WEFT_WHY_SERIALISED), "serialised");
  assert_string_equal(weft_copy_why_name(99), "unknown");
  weft_run_stats_destroy(st);
  weft_run_stats_destroy(NULL);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* ---- when statistics are refused ------------------------------------------------------------ */

static void stats_need_the_latest_finished_run_with_timing(void **state) {
  tu_fixture *f = *state;
  atomic_int gate = 0;
  const weft_op *hold = op_rw(f->rt, "hold", gate_kernel, &gate);
  weft_tensor *a = scalar(f->g, "a");
  CHECK(weft_call(f->g, hold, &a, 1, NULL, 0));
  weft_run *run, *again;
  weft_run_stats *st = (weft_run_stats *)&gate; /* must be cleared on failure */
  CHECK(weft_graph_launch(f->g, &run));
  assert_int_equal(weft_run_stats_create(run, &st), WEFT_EAGAIN);
  assert_null(st);
  assert_true(tu_contains(weft_last_error(), "in flight"));
  atomic_store(&gate, 1);
  CHECK(weft_run_wait(run));
  CHECK(weft_graph_launch(f->g, &again));
  CHECK(weft_run_wait(again));
  assert_int_equal(weft_run_stats_create(run, &st), WEFT_ESTATE);
  assert_true(tu_contains(weft_last_error(), "launched again"));
  CHECK(weft_run_stats_create(again, &st));
  weft_run_stats_destroy(st);
  assert_int_equal(weft_run_stats_create(NULL, &st), WEFT_EINVAL);
  assert_int_equal(weft_run_stats_create(again, NULL), WEFT_EINVAL);
  weft_run_destroy(run);
  weft_run_destroy(again);

  weft_runtime *rt = tu_runtime_with(1, 0, WEFT_RUNTIME_NO_TIMING);
  weft_graph *g = tu_graph(rt);
  a = scalar(g, "a");
  const weft_op *touch = op_rw(rt, "touch", empty_kernel, NULL);
  CHECK(weft_call(g, touch, &a, 1, NULL, 0));
  CHECK(weft_graph_launch(g, &run));
  CHECK(weft_run_wait(run));
  assert_int_equal(weft_run_stats_create(run, &st), WEFT_ENOTSUP);
  assert_true(tu_contains(weft_last_error(), "timing is off"));
  size_t done, total;
  CHECK(weft_run_progress(run, &done, &total));
  assert_int_equal(done, 1);
  assert_int_equal(total, 1);
  weft_run_destroy(run);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* ---- the run's end on the clock ------------------------------------------------------------ */

static void store_end(weft_run *run, int status, void *arg) {
  (void)status;
  if (weft_run_end_ns(run, arg) != WEFT_OK) *(uint64_t *)arg = 0;
}

/* weft_run_end_ns: WEFT_EAGAIN while the run is in flight; then a time on weft_clock_ns's clock
 * between the launch and the caller's return, the same inside the run's callback. */
static void run_end_on_the_clock(void **state) {
  tu_fixture *f = *state;
  atomic_int gate = 0;
  const weft_op *hold = op_rw(f->rt, "hold", gate_kernel, &gate);
  weft_tensor *a = scalar(f->g, "a");
  CHECK(weft_call(f->g, hold, &a, 1, NULL, 0));
  uint64_t before = weft_clock_ns(), end = 0, in_callback = 0;
  weft_run *run;
  CHECK(weft_graph_launch_cb(f->g, store_end, &in_callback, &run));
  assert_int_equal(weft_run_end_ns(run, &end), WEFT_EAGAIN);
  atomic_store(&gate, 1);
  CHECK(weft_run_wait(run));
  uint64_t after = weft_clock_ns();
  CHECK(weft_run_end_ns(run, &end));
  assert_true(before <= end && end <= after);
  assert_true(in_callback == end);
  assert_int_equal(weft_run_end_ns(NULL, &end), WEFT_EINVAL);
  assert_int_equal(weft_run_end_ns(run, NULL), WEFT_EINVAL);
  weft_run_destroy(run);
}

/* ---- progress ---------------------------------------------------------------------------- */

static void progress_counts_finished_nodes(void **state) {
  tu_fixture *f = *state;
  atomic_int gate = 0;
  const weft_op *touch = op_rw(f->rt, "touch", empty_kernel, NULL);
  const weft_op *hold = op_rw(f->rt, "hold", gate_kernel, &gate);
  weft_tensor *a = scalar(f->g, "a");
  for (int i = 0; i < 4; i++) CHECK(weft_call(f->g, touch, &a, 1, NULL, 0));
  CHECK(weft_call(f->g, hold, &a, 1, NULL, 0));
  for (int i = 0; i < 3; i++) CHECK(weft_call(f->g, touch, &a, 1, NULL, 0));
  for (int round = 0; round < 2; round++) { /* the second run must not count the first's nodes */
    atomic_store(&gate, 0);
    weft_run *run;
    CHECK(weft_graph_launch(f->g, &run));
    size_t done = 0, total = 0;
    for (int i = 0; i < 20000 && done < 4; i++) {
      CHECK(weft_run_progress(run, &done, &total));
      if (done < 4) sleep_us(100);
    }
    assert_int_equal(total, 8);
    assert_int_equal(done, 4); /* the gate holds the fifth */
    sleep_us(2000);
    CHECK(weft_run_progress(run, &done, &total));
    assert_int_equal(done, 4);
    atomic_store(&gate, 1);
    /* Not a terminal: waits like weft_run_wait and draws nothing. */
    FILE *out = tmpfile();
    assert_non_null(out);
    CHECK(weft_run_wait_progress(run, out, 0, 1));
    assert_int_equal(ftell(out), 0);
    fclose(out);
    CHECK(weft_run_progress(run, &done, &total));
    assert_int_equal(done, 8);
    assert_int_equal(weft_run_wait_progress(run, NULL, 1, 1), WEFT_EINVAL);
    weft_run_destroy(run);
  }
  assert_int_equal(weft_run_progress(NULL, NULL, NULL), WEFT_EINVAL);
}

/* On a terminal (a pseudo-terminal here) a run longer than 200 ms draws a bar, and erases it
 * at the end. */
static void progress_bar_on_a_terminal(void **state) {
  (void)state;
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
    print_message("no pseudo-terminal: skipped\n");
    if (master >= 0) close(master);
    skip();
  }
  FILE *tty = fopen(ptsname(master), "w");
  assert_non_null(tty);
  assert_true(isatty(fileno(tty)));
  weft_runtime *rt = tu_runtime_cpu(1);
  const weft_op *nap = op_rw(rt, "nap", sleep_kernel, NULL);
  weft_graph *g = tu_graph(rt);
  weft_tensor *a = scalar(g, "a");
  chain(g, nap, a, 2, 250000); /* 0.5 s in two nodes: the bar shows 1/2 at some point */
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  CHECK(weft_run_wait_progress(run, tty, 0, 1));
  weft_run_destroy(run);
  fflush(tty);
  char out[4096];
  int flags = fcntl(master, F_GETFL);
  assert_int_equal(fcntl(master, F_SETFL, flags | O_NONBLOCK), 0);
  ssize_t len = read(master, out, sizeof out - 1);
  assert_true(len > 0);
  out[len] = '\0';
  assert_true(tu_contains(out, "/2 nodes"));
  assert_true(tu_contains(out, "%"));
  assert_true(tu_contains(out, "\033[K")); /* lines are cleared, and the last erase leaves none */
  fclose(tty);
  close(master);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* ---- out of memory ------------------------------------------------------------------------ */

/* A failing allocator of this file's own, so that the failure can be armed after the run:
 * every allocation of weft_run_stats_create fails in turn, and none may leak or crash. */
static atomic_long live, calls, fail_at = -1;

static void *f_malloc(size_t size, void *user) {
  (void)user;
  if (atomic_fetch_add(&calls, 1) == atomic_load(&fail_at)) return NULL;
  size_t *h = malloc(sizeof(max_align_t) + size);
  if (h == NULL) return NULL;
  atomic_fetch_add(&live, 1);
  return (char *)h + sizeof(max_align_t);
}
static void *f_realloc(void *p, size_t size, void *user) {
  if (p == NULL) return f_malloc(size, user);
  if (atomic_fetch_add(&calls, 1) == atomic_load(&fail_at)) return NULL;
  char *h = realloc((char *)p - sizeof(max_align_t), sizeof(max_align_t) + size);
  return h ? h + sizeof(max_align_t) : NULL;
}
static void f_free(void *p, void *user) {
  (void)user;
  if (p == NULL) return;
  atomic_fetch_sub(&live, 1);
  free((char *)p - sizeof(max_align_t));
}

static void stats_survive_out_of_memory(void **state) {
  (void)state;
  weft_allocator a = {f_malloc, f_realloc, f_free, NULL};
  weft_set_allocator(&a);
  weft_runtime *rt = tu_runtime_cpu(2);
  weft_graph *g = tu_graph(rt);
  overlap_graph(g, 32, 3);
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  CHECK(weft_run_wait(run));
  int ok = 0;
  for (long k = 0; k < 200 && !ok; k++) {
    long before = atomic_load(&live);
    atomic_store(&fail_at, atomic_load(&calls) + k);
    weft_run_stats *st = NULL;
    int rc = weft_run_stats_create(run, &st);
    atomic_store(&fail_at, -1);
    if (rc == WEFT_OK) {
      ok = 1;
      char *text = render(st, WEFT_REPORT_TEXT, NULL);
      free(text);
      weft_run_stats_destroy(st);
    } else {
      assert_int_equal(rc, WEFT_ENOMEM);
      assert_null(st);
    }
    assert_int_equal(atomic_load(&live), before);
  }
  assert_true(ok);
  weft_run_destroy(run);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  weft_set_allocator(NULL);
  assert_int_equal(atomic_load(&live), 0);
}

/* ---- the accounting, on hand-made intervals ------------------------------------------------- */

static void covered_counts_the_union_once(void **state) {
  (void)state;
  const uint64_t a[] = {0, 10, 20, 30, 40, 50};
  const uint64_t b[] = {5, 25, 45, 60};
  assert_int_equal(weft__rep_covered(a, 3, NULL, 0, 0, 100), 30);
  assert_int_equal(weft__rep_covered(a, 3, b, 2, 0, 100), 50); /* [0,30) + [40,60) */
  assert_int_equal(weft__rep_covered(a, 3, b, 2, 8, 22), 14);
  assert_int_equal(weft__rep_covered(a, 3, b, 2, 30, 40), 0);
  assert_int_equal(weft__rep_covered(a, 3, b, 2, 55, 55), 0);
  assert_int_equal(weft__rep_covered(a, 3, b, 2, 58, 70), 2);
  assert_int_equal(weft__rep_covered(NULL, 0, b, 2, 0, 100), 35);
}

/* A model builder for the tests: nodes are added with their interval, lane and kind. */
typedef struct mb {
  weft__rep *r;
  uint32_t n, m;
  uint32_t from[32], to[32];
  uint8_t hazard[32];
} mb;

#define CPU_INIT {WEFT_DEVICE_CPU, 0}
#define GPU_INIT {WEFT_DEVICE_CUDA, 0}
static const weft_device CPU = CPU_INIT, GPU = GPU_INIT;

static mb *mb_new(uint32_t n, uint32_t nlanes) {
  mb *b = calloc(1, sizeof *b);
  b->r = weft__rep_new(n, nlanes, 32);
  assert_non_null(b->r);
  for (uint32_t l = 0; l < nlanes; l++) b->r->lanes[l].code = l;
  return b;
}

static uint32_t mb_node(mb *b, uint64_t s, uint64_t e, uint32_t lane, weft_device dev) {
  weft__rnode *x = &b->r->node[b->n];
  x->start = s;
  x->end = e;
  x->lane = lane;
  x->device = x->src = x->dst = dev;
  return b->n++;
}

static uint32_t mb_copy(mb *b, uint64_t s, uint64_t e, uint32_t lane, weft_device src, weft_device dst) {
  uint32_t i = mb_node(b, s, e, lane, dst);
  b->r->node[i].copy = 1;
  b->r->node[i].src = src;
  return i;
}

static void mb_edge(mb *b, uint32_t from, uint32_t to, int hazard) {
  b->from[b->m] = from;
  b->to[b->m] = to;
  b->hazard[b->m++] = (uint8_t)hazard;
}

/* Sorts the edges into the model's successor CSR and analyses it. */
static weft__rep *mb_done(mb *b) {
  weft__rep *r = b->r;
  r->n = b->n;
  r->m = b->m;
  uint32_t k = 0;
  for (uint32_t i = 0; i < r->n; i++) {
    r->succ_off[i] = k;
    for (uint32_t j = 0; j < b->m; j++)
      if (b->from[j] == i) {
        r->succ[k] = b->to[j];
        r->succ_hazard[k++] = b->hazard[j];
      }
  }
  r->succ_off[r->n] = k;
  CHECK(weft__rep_mirror_edges(r, 1));
  CHECK(weft__rep_analyse(r));
  free(b);
  return r;
}

static const weft__rcopy *copy_of(const weft__rep *r, uint32_t node) {
  for (uint32_t i = 0; i < r->ncopies; i++)
    if (r->copies[i].node == node) return &r->copies[i];
  fail_msg("node %u is not a copy", node);
  return NULL;
}

/* Compute [0,10) on the GPU; copies [5,15) and [0,4): 5 of 10 and 4 of 4 hidden. */
static void hidden_time_is_the_part_under_compute(void **state) {
  (void)state;
  mb *b = mb_new(4, 3);
  uint32_t k = mb_node(b, 0, 10, 0, GPU);
  uint32_t c1 = mb_copy(b, 5, 15, 1, GPU, CPU);
  uint32_t c2 = mb_copy(b, 0, 4, 2, CPU, GPU);
  uint32_t k2 = mb_node(b, 12, 20, 0, GPU);
  mb_edge(b, k, k2, WEFT_HAZARD_WAW);
  weft__rep *r = mb_done(b);
  /* c1: [5,10) under k, [12,15) under k2. */
  assert_int_equal(copy_of(r, c1)->hidden, 8);
  assert_int_equal(copy_of(r, c1)->duration, 10);
  assert_int_equal(copy_of(r, c2)->hidden, 4);
  assert_int_equal(copy_of(r, c2)->why, WEFT_WHY_NONE);
  assert_int_equal(r->copy_total, 14);
  assert_int_equal(r->copy_hidden, 12);
  assert_int_equal(r->span_begin, 0);
  assert_int_equal(r->span_end, 20);
  assert_int_equal(r->lanes[0].busy, 18);
  weft__rep_free(r);
}

static void busy_time_is_a_union(void **state) {
  (void)state;
  mb *b = mb_new(3, 1);
  mb_node(b, 0, 10, 0, GPU);
  mb_node(b, 5, 12, 0, GPU); /* overlaps the first on the same lane (a backend's own timing) */
  mb_node(b, 20, 25, 0, GPU);
  weft__rep *r = mb_done(b);
  assert_int_equal(r->lanes[0].busy, 17);
  assert_int_equal(r->lanes[0].nodes, 3);
  weft__rep_free(r);
}

/* The critical path follows durations, not node count. */
static void critical_path_is_the_longest_by_duration(void **state) {
  (void)state;
  mb *b = mb_new(6, 2);
  uint32_t a = mb_node(b, 0, 1, 0, CPU);
  uint32_t x1 = mb_node(b, 1, 2, 0, CPU), x2 = mb_node(b, 2, 3, 0, CPU), x3 = mb_node(b, 3, 4, 0, CPU);
  uint32_t y = mb_node(b, 1, 9, 1, CPU);
  uint32_t z = mb_node(b, 9, 10, 1, CPU);
  mb_edge(b, a, x1, WEFT_HAZARD_RAW);
  mb_edge(b, x1, x2, WEFT_HAZARD_RAW);
  mb_edge(b, x2, x3, WEFT_HAZARD_RAW);
  mb_edge(b, a, y, WEFT_HAZARD_RAW);
  mb_edge(b, y, z, WEFT_HAZARD_RAW);
  mb_edge(b, x3, z, WEFT_HAZARD_RAW);
  weft__rep *r = mb_done(b);
  assert_int_equal(r->critical_length, 10);
  assert_int_equal(r->ncritical, 3);
  assert_int_equal(r->critical[0], a);
  assert_int_equal(r->critical[1], y);
  assert_int_equal(r->critical[2], z);
  assert_true(r->node[y].critical && !r->node[x2].critical);
  weft__rep_free(r);
}

/* A CPU node's wait runs from the end of the last of its predecessors that ran to its start;
 * roots, nodes on device lanes and nodes whose predecessors did not run are left out. */
static void ready_waits_from_the_last_predecessor(void **state) {
  (void)state;
  mb *b = mb_new(8, 3);
  b->r->lanes[2].code = WEFT__LANE(WEFT__LANE_COMPUTE, 0, 0);
  uint32_t a = mb_node(b, 0, 10, 0, CPU);
  uint32_t x = mb_node(b, 10, 20, 0, CPU); /* right after a on a's worker: 0 */
  uint32_t y = mb_node(b, 25, 30, 1, CPU); /* a ended at 10: 15 */
  uint32_t z = mb_node(b, 40, 50, 1, CPU); /* x ended at 20, y at 30: 10 */
  uint32_t g = mb_node(b, 12, 14, 2, GPU); /* a device's node: left out */
  uint32_t w = mb_node(b, 60, 70, 0, CPU); /* after g, 14: 46 */
  uint32_t f = mb_node(b, 0, 0, WEFT__REP_NONE, CPU); /* did not run */
  uint32_t h = mb_node(b, 80, 90, 1, CPU); /* its only predecessor did not run: left out */
  mb_edge(b, a, x, WEFT_HAZARD_RAW);
  mb_edge(b, a, y, WEFT_HAZARD_RAW);
  mb_edge(b, x, z, WEFT_HAZARD_RAW);
  mb_edge(b, y, z, WEFT_HAZARD_RAW);
  mb_edge(b, a, g, WEFT_HAZARD_RAW);
  mb_edge(b, g, w, WEFT_HAZARD_RAW);
  mb_edge(b, a, f, WEFT_HAZARD_RAW);
  mb_edge(b, f, h, WEFT_HAZARD_RAW);
  weft__rep *r = mb_done(b);
  assert_int_equal(r->nwaits, 4); /* x, y, z, w: 0, 15, 10, 46 */
  assert_int_equal(r->wait_p50, 10);
  assert_int_equal(r->wait_p99, 46);
  assert_int_equal(r->wait_max, 46);
  weft__rep_free(r);
}

/* The reasons, one hand-made timeline each: nodes (interval, lane, compute 'k' or copy 'c'
 * with its ends, pageable or not), edges with their hazards, the copy to judge, and what it
 * must be told. Lanes: 0 the GPU's compute stream, 1 and 2 copy streams or the host. */
typedef struct why_node {
  uint64_t s, e;
  uint32_t lane;
  char kind;             /* 'k' compute on dev, 'c' copy src -> dev */
  weft_device dev, src;
  uint8_t pageable;
} why_node;

typedef struct why_case {
  const char *name;
  why_node nodes[6];
  uint32_t nnodes;
  uint32_t edges[6][3]; /* from, to, hazard */
  uint32_t nedges;
  uint32_t copy;
  int why;
  uint32_t culprit;     /* WEFT__REP_NONE: not checked */
  int hazard;           /* 0: not checked */
} why_case;

#define K(s, e, lane, dev) {s, e, lane, 'k', dev, dev, 0}
#define C(s, e, lane, src, dst) {s, e, lane, 'c', dst, src, 0}
#define NONE WEFT__REP_NONE

static const why_case why_cases[] = {
    {"pageable host side", {{0, 10, 1, 'c', GPU_INIT, CPU_INIT, 1}, K(20, 30, 0, GPU_INIT)}, 2,
     {{0}}, 0, 0, WEFT_WHY_PAGEABLE, NONE, 0},
    /* h2d input, then the product that needs it; independent work exists (node 0). */
    {"dependency RAW", {K(40, 50, 0, GPU_INIT), C(0, 10, 1, CPU_INIT, GPU_INIT), K(10, 20, 0, GPU_INIT)}, 3,
     {{1, 2, WEFT_HAZARD_RAW}}, 1, 1, WEFT_WHY_DEPENDENCY, 2, WEFT_HAZARD_RAW},
    /* d2h copy, then a product that overwrites its source. */
    {"dependency WAR", {K(40, 50, 0, GPU_INIT), C(20, 30, 1, GPU_INIT, CPU_INIT), K(30, 40, 0, GPU_INIT)}, 3,
     {{1, 2, WEFT_HAZARD_WAR}}, 1, 1, WEFT_WHY_DEPENDENCY, 2, WEFT_HAZARD_WAR},
    /* d2h copy -> a host node reads it -> the device's next product needs the host node. */
    {"host read", {K(0, 10, 0, GPU_INIT), K(0, 5, 0, GPU_INIT), C(10, 20, 1, GPU_INIT, CPU_INIT),
                   K(20, 25, 2, CPU_INIT), K(25, 35, 0, GPU_INIT)}, 5,
     {{0, 2, WEFT_HAZARD_RAW}, {2, 3, WEFT_HAZARD_RAW}, {3, 4, WEFT_HAZARD_RAW}}, 3, 2,
     WEFT_WHY_HOST_SYNC, 3, 0},
    {"chain", {K(0, 10, 0, GPU_INIT), C(10, 20, 1, GPU_INIT, CPU_INIT), K(20, 30, 0, CPU_INIT)}, 3,
     {{0, 1, WEFT_HAZARD_RAW}, {1, 2, WEFT_HAZARD_RAW}}, 2, 1, WEFT_WHY_CHAIN, NONE, 0},
    /* Two copies ready at 0 on one copy lane; the second queues until compute is over. */
    {"serialised", {K(0, 10, 0, GPU_INIT), C(0, 8, 1, GPU_INIT, CPU_INIT), C(8, 16, 1, GPU_INIT, CPU_INIT)}, 3,
     {{0}}, 0, 2, WEFT_WHY_SERIALISED, 1, 0},
    /* The copy of the last result: independent compute exists but is over. */
    {"nothing left", {K(0, 10, 0, GPU_INIT), K(0, 10, 1, GPU_INIT), C(10, 15, 2, GPU_INIT, CPU_INIT)}, 3,
     {{0, 2, WEFT_HAZARD_RAW}}, 1, 2, WEFT_WHY_NOTHING_LEFT, NONE, 0},
    /* Independent compute comes later, held back by its own input copy. */
    {"idle", {C(0, 10, 1, GPU_INIT, CPU_INIT), C(0, 20, 2, CPU_INIT, GPU_INIT), K(20, 30, 0, GPU_INIT)}, 3,
     {{1, 2, WEFT_HAZARD_RAW}}, 1, 0, WEFT_WHY_IDLE, 2, 0},
};

static void each_reason_on_its_timeline(void **state) {
  (void)state;
  for (size_t t = 0; t < sizeof why_cases / sizeof why_cases[0]; t++) {
    const why_case *w = &why_cases[t];
    mb *b = mb_new(w->nnodes, 3);
    for (uint32_t i = 0; i < w->nnodes; i++) {
      const why_node *x = &w->nodes[i];
      uint32_t id = x->kind == 'c' ? mb_copy(b, x->s, x->e, x->lane, x->src, x->dev)
                                   : mb_node(b, x->s, x->e, x->lane, x->dev);
      b->r->node[id].pageable = x->pageable;
    }
    for (uint32_t k = 0; k < w->nedges; k++) mb_edge(b, w->edges[k][0], w->edges[k][1], (int)w->edges[k][2]);
    weft__rep *r = mb_done(b);
    const weft__rcopy *cp = copy_of(r, w->copy);
    if (cp->why != w->why || (w->culprit != NONE && cp->culprit != w->culprit) ||
        (w->hazard != 0 && cp->hazard != w->hazard))
      fail_msg("%s: reason %s culprit %u hazard %d, expected %s culprit %u hazard %d", w->name,
               weft_copy_why_name(cp->why), cp->culprit, cp->hazard, weft_copy_why_name(w->why),
               w->culprit, w->hazard);
    weft__rep_free(r);
  }
}

/* Host-side records (a device node whose backend reported no device times) say when the host
 * enqueued the node, not when it ran: they take no part in the overlap accounting. */
static void host_side_nodes_are_left_out_of_the_overlap(void **state) {
  (void)state;
  mb *b = mb_new(3, 2);
  mb_node(b, 0, 10, 0, GPU);
  uint32_t c = mb_copy(b, 0, 10, 1, GPU, CPU);
  uint32_t h = mb_copy(b, 10, 20, 1, GPU, CPU);
  b->r->node[h].hostside = 1;
  weft__rep *r = mb_done(b);
  assert_int_equal(r->ncopies, 1);
  assert_int_equal(r->copies[0].node, c);
  assert_int_equal(r->copy_total, 10);
  assert_int_equal(r->copy_hidden, 10);
  weft__rep_free(r);
  /* A host-side compute node hides nothing. */
  b = mb_new(2, 2);
  uint32_t k = mb_node(b, 0, 10, 0, GPU);
  b->r->node[k].hostside = 1;
  mb_copy(b, 0, 10, 1, GPU, CPU);
  r = mb_done(b);
  assert_int_equal(r->copy_hidden, 0);
  weft__rep_free(r);
}

/* The serialised case's numbers: the first copy is hidden, the second only for 2 of its 8. */
static void serialised_copy_accounting(void **state) {
  (void)state;
  mb *b = mb_new(3, 2);
  mb_node(b, 0, 10, 0, GPU);
  uint32_t c1 = mb_copy(b, 0, 8, 1, GPU, CPU);
  uint32_t c2 = mb_copy(b, 8, 16, 1, GPU, CPU);
  weft__rep *r = mb_done(b);
  assert_int_equal(copy_of(r, c1)->why, WEFT_WHY_NONE);
  assert_int_equal(copy_of(r, c1)->hidden, 8);
  assert_int_equal(copy_of(r, c2)->hidden, 2);
  weft__rep_free(r);
}

/* The setup before a run's first node: the runtime's creation in its first run only, the plan,
 * each tensor materialised with its bytes (the first run), none on a replay; the nodes start
 * after it in the trace, and the summary's totals add up the steps. */
static void setup_is_reported(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x, *y = NULL;
  CHECK(weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){512, 512}, weft_cpu(), weft_uniform(-1, 1, 5), &x));
  CHECK(weft_scale(g, x, 2.0, &y));
  weft_tensor *s1 = tu_scalar(g, "s", 0), *s2 = NULL;
  CHECK(weft_scale(g, s1, 2.0, &s2)); /* a small tensor, in the step of the small ones */
  (void)s2;
  for (int run = 0; run < 2; run++) {
    weft_run_stats *st = tr_run_stats(g);
    weft_stats_summary s = tr_summary(st);
    const weft_setup_step *steps;
    size_t n = weft_run_stats_setup(st, &steps), runtime = 0, plans = 0, tensors = 0, named_x = 0;
    double last_end = 0;
    for (size_t i = 0; i < n; i++) {
      assert_true(steps[i].start_s >= last_end - 1e-12 && steps[i].end_s >= steps[i].start_s); /* in order */
      last_end = steps[i].end_s;
      runtime += strcmp(steps[i].kind, "runtime") == 0;
      plans += strcmp(steps[i].kind, "plan") == 0;
      if (strcmp(steps[i].kind, "tensor") == 0) {
        tensors += steps[i].count;
        if (steps[i].what != NULL) { /* a step of its own: 64 KiB or more */
          assert_int_equal(steps[i].count, 1);
          assert_true(steps[i].bytes == 512 * 512 * 4);
          named_x += strcmp(steps[i].what, "x") == 0;
        } else { /* the small ones together: the scalar and its result */
          assert_int_equal(steps[i].count, 2);
          assert_int_equal(steps[i].bytes, 16);
        }
        assert_int_equal(steps[i].device.kind, WEFT_DEVICE_CPU);
      }
    }
    assert_true(last_end <= s.setup_s + 1e-9);
    assert_int_equal(plans, 1);
    assert_int_equal(s.setup_tensors, tensors);
    if (run == 0) {
      assert_true(runtime >= 2 && s.setup_runtime_s > 0); /* backends, BLAS, pool */
      assert_int_equal(tensors, 4);                          /* x and y, s and its result */
      assert_int_equal(named_x, 1);
      assert_int_equal(s.setup_bytes, 2 * 512 * 512 * 4 + 16);
    } else {
      assert_int_equal(runtime, 0);
      assert_int_equal(tensors, 0);
      assert_true(s.setup_runtime_s == 0 && s.setup_bytes == 0);
    }
    /* The text summary says it. */
    char *text = render(st, WEFT_REPORT_TEXT, &(size_t){0});
    assert_true(tu_contains(text, "setup: "));
    assert_true(tu_contains(text, run == 0 ? "4 tensors materialised" : "before the first node"));
    free(text);
    weft_run_stats_destroy(st);
  }
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(covered_counts_the_union_once),
      cmocka_unit_test(hidden_time_is_the_part_under_compute),
      cmocka_unit_test(busy_time_is_a_union),
      cmocka_unit_test(critical_path_is_the_longest_by_duration),
      cmocka_unit_test(ready_waits_from_the_last_predecessor),
      cmocka_unit_test(each_reason_on_its_timeline),
      cmocka_unit_test(serialised_copy_accounting),
      cmocka_unit_test(host_side_nodes_are_left_out_of_the_overlap),
      cmocka_unit_test_setup_teardown(two_equal_chains_keep_two_workers_busy, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(a_chain_has_no_overlap, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(hidden_fraction_matches_the_intervals, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(failed_runs_report_what_ran, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(stats_json_has_the_documented_keys, tu_setup, tu_teardown),
      cmocka_unit_test(setup_is_reported),
      cmocka_unit_test_setup_teardown(trace_is_chrome_trace_json, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(svg_has_one_bar_per_node, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(svg_merges_bars_thinner_than_a_pixel, tu_setup, tu_teardown),
      cmocka_unit_test(save_writes_files_and_names_bad_paths),
      cmocka_unit_test_setup_teardown(stats_need_the_latest_finished_run_with_timing, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(run_end_on_the_clock, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(progress_counts_finished_nodes, tu_setup, tu_teardown),
      cmocka_unit_test(progress_bar_on_a_terminal),
      cmocka_unit_test(stats_survive_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
