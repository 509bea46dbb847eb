/* test_plan.c — src/sched/plan: the policy table (chosen by name, an unknown name refused with
 * the list), the order the analysis gives the planner (explicit edges that point backward),
 * weft_graph_depth, weft_node_placement for CPU nodes and for the GPU nodes of a simulated
 * machine (copy engines, the main stream, chains, the window's waits, batches), its bad
 * arguments, a plan build that runs out of memory at each allocation in turn, and the CSR of a
 * large graph, which the pool's workers build, listing every edge as the serial build does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched.h"
#include "testutil.h"
#include "weft/sim.h"

static weft_runtime *sim_runtime(const char *profile) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.simulate = profile;
  o.cpu_workers = 2;
  o.flags = WEFT_RUNTIME_QUIET;
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
  return rt;
}

static weft_tensor *square(weft_graph *g, const char *name, int64_t n, weft_device d) {
  weft_tensor *t;
  CHECK(weft_tensor_create(g, name, WEFT_F32, 2, (int64_t[]){n, n}, d, weft_uniform(-1, 1, 7), &t));
  return t;
}

/* ---- policies ------------------------------------------------------------------------------ */

static void policies_are_chosen_by_name(void **state) {
  (void)state;
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 1;
  o.max_gpus = 0;
  o.flags = WEFT_RUNTIME_QUIET;
  o.policy = "no-such-policy";
  weft_runtime *rt = NULL;
  assert_int_equal(weft_runtime_create(&o, &rt), WEFT_EINVAL);
  assert_null(rt);
  assert_true(tu_contains(weft_last_error(), "no-such-policy"));
  assert_true(tu_contains(weft_last_error(), "fixed"));
  o.policy = "fixed";
  CHECK(weft_runtime_create(&o, &rt));
  weft_runtime_destroy(rt);
}

/* With `heft`, a tiled Cholesky's next panel goes before the rest of the step before's updates
 * (look-ahead); with `fixed`, the program's order stands. The order is topological either way. */
static void heft_orders_the_critical_path_first(void **state) {
  (void)state;
  for (int heft = 0; heft < 2; heft++) {
    weft_runtime_options o;
    weft_runtime_options_init(&o);
    o.simulate = "h100";
    o.cpu_workers = 2;
    o.flags = WEFT_RUNTIME_QUIET;
    o.policy = heft ? "heft" : "fixed";
    weft_runtime *rt = NULL;
    CHECK(weft_runtime_create(&o, &rt));
    weft_graph *g = tu_graph(rt);
    weft_tensor *a;
    CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){16384, 16384}, weft_cuda(0), weft_zeros(), &a));
    CHECK(tu_cholesky(g, a, 4096));
    size_t n = weft_graph_node_count(g), potrf1 = 0, last_step0 = 0, *pos = calloc(n, sizeof *pos);
    for (size_t i = 0; i < n; i++) {
      weft_placement pl;
      weft_node *nd = weft_graph_node(g, i);
      CHECK(weft_node_placement(g, nd, &pl));
      pos[i] = pl.order;
      if (strcmp(weft_node_op_name(nd), "potrf") == 0 && weft_node_arg(nd, 0, NULL) == weft_tensor_tile(a, 1, 1)) potrf1 = i;
      if (potrf1 == 0) last_step0 = i; /* the program's nodes before it: step 0 */
    }
    for (size_t i = 0; i < n; i++) /* topological: every edge forward */
      for (size_t e = 0; e < weft_graph_edge_count(g); e++) {
        weft_edge ed;
        CHECK(weft_graph_edge(g, e, &ed));
        assert_true(pos[weft_node_id(ed.from)] < pos[weft_node_id(ed.to)]);
      }
    size_t step0_last = 0; /* the last of step 0's nodes in the plan's order */
    for (size_t i = 0; i <= last_step0; i++) step0_last = pos[i] > step0_last ? pos[i] : step0_last;
    if (heft)
      assert_true(pos[potrf1] < step0_last); /* the panel of step 1 before step 0's last update */
    else
      for (size_t i = 0; i < n; i++) assert_int_equal(pos[i], i);
    free(pos);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
}

/* ---- order and depth ----------------------------------------------------------------------- */

static void depth_follows_every_edge(void **state) {
  tu_fixture *f = *state;
  size_t depth = 99;
  CHECK(weft_graph_depth(f->g, &depth));
  assert_int_equal(depth, 0);
  weft_tensor *a = tu_scalar(f->g, "a", 1), *b = tu_scalar(f->g, "b", 2);
  CHECK(weft_add(f->g, a, b, &a)); /* 0: a += b */
  weft_node *n0 = weft_graph_last_node(f->g);
  CHECK(weft_scale(f->g, a, 2, &a)); /* 1: reads 0 */
  CHECK(weft_scale(f->g, b, 3, &b)); /* 2: writes b, which 0 read: after 0 */
  weft_node *n2 = weft_graph_last_node(f->g);
  CHECK(weft_graph_depth(f->g, &depth));
  assert_int_equal(depth, 2);
  /* An independent node, then an explicit edge from a later node back to it: the chain is
   * now 0 -> 2 -> 3 (the explicit edge points backward in insertion order). */
  weft_tensor *c = tu_scalar(f->g, "c", 5);
  CHECK(weft_scale(f->g, c, 2, &c)); /* 3 */
  weft_node *n3 = weft_graph_last_node(f->g);
  CHECK(weft_graph_add_edge(f->g, n2, n3));
  CHECK(weft_graph_depth(f->g, &depth));
  assert_int_equal(depth, 3);
  /* n3 before n0: 3 -> 0 -> 1, and 0 -> 2 -> 3 would close a cycle. */
  CHECK(weft_graph_add_edge(f->g, n3, n0));
  assert_int_equal(weft_graph_depth(f->g, &depth), WEFT_ECYCLE);
  assert_int_equal(weft_graph_depth(NULL, &depth), WEFT_EINVAL);
  assert_int_equal(weft_graph_depth(f->g, NULL), WEFT_EINVAL);
}

/* Explicit edges that point backward: the run follows them (the planner's order is the
 * analysis's), so the later node in insertion order runs first. */
static void backward_edges_order_the_run(void **state) {
  tu_fixture *f = *state;
  weft_tensor *x = tu_scalar(f->g, "x", 1), *y = tu_scalar(f->g, "y", 0);
  CHECK(weft_copy(f->g, x, weft_cpu(), &y)); /* 0: y = x */
  weft_node *first = weft_graph_last_node(f->g);
  CHECK(weft_scale(f->g, x, 10, &x)); /* 1: x *= 10, which must wait for 0 (WAR) anyway */
  weft_tensor *z = tu_scalar(f->g, "z", 3);
  CHECK(weft_scale(f->g, z, 2, &z)); /* 2 */
  weft_node *last = weft_graph_last_node(f->g);
  CHECK(weft_graph_add_edge(f->g, last, first)); /* 2 before 0 */
  size_t depth = 0;
  CHECK(weft_graph_depth(f->g, &depth));
  assert_int_equal(depth, 3);
  CHECK(weft_graph_run(f->g));
  assert_true(tu_value(y) == 1 && tu_value(x) == 10 && tu_value(z) == 6);
  weft_placement pl;
  CHECK(weft_node_placement(f->g, first, &pl));
  assert_true(tu_contains(pl.why, "continues #2's chain"));
}

/* ---- placement of CPU nodes ---------------------------------------------------------------- */

static void cpu_placement_says_the_dispatcher_rule(void **state) {
  tu_fixture *f = *state;
  weft_tensor *a = tu_scalar(f->g, "a", 1), *b = tu_scalar(f->g, "b", 2), *c = NULL;
  CHECK(weft_scale(f->g, a, 2, &a));
  weft_node *root = weft_graph_last_node(f->g);
  CHECK(weft_scale(f->g, b, 2, &b));
  CHECK(weft_add(f->g, a, b, &c));
  weft_node *join = weft_graph_last_node(f->g);
  CHECK(weft_scale(f->g, c, 2, &c));
  weft_node *chain = weft_graph_last_node(f->g);
  weft_placement pl;
  CHECK(weft_node_placement(f->g, root, &pl));
  assert_string_equal(pl.lane, "cpu workers");
  assert_true(weft_device_equal(pl.device, weft_cpu()));
  assert_true(tu_contains(pl.why, "no dependencies"));
  CHECK(weft_node_placement(f->g, join, &pl));
  assert_true(tu_contains(pl.why, "joins 2 dependencies"));
  CHECK(weft_node_placement(f->g, chain, &pl));
  assert_true(tu_contains(pl.why, "continues #2's chain"));
}

static void placement_refuses_bad_arguments(void **state) {
  tu_fixture *f = *state;
  weft_tensor *a = tu_scalar(f->g, "a", 1);
  CHECK(weft_scale(f->g, a, 2, &a));
  weft_node *n = weft_graph_last_node(f->g);
  weft_placement pl;
  assert_int_equal(weft_node_placement(NULL, n, &pl), WEFT_EINVAL);
  assert_int_equal(weft_node_placement(f->g, NULL, &pl), WEFT_EINVAL);
  assert_int_equal(weft_node_placement(f->g, n, NULL), WEFT_EINVAL);
  weft_graph *other;
  CHECK(weft_graph_create(f->rt, &other));
  assert_int_equal(weft_node_placement(other, n, &pl), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "not a node of this graph"));
  weft_graph_destroy(other);
}

/* ---- placement of GPU nodes, on a simulated machine --------------------------------------- */

/* The reference graph 50 x (y = x.x; copy y to the host) on a simulated H100: each product
 * fills the device (the main stream, in turn), each copy goes to the D2H copy engine, and
 * products later in the graph wait for the copies of the buffers they claim (the window). */
static void gpu_placement_names_lanes_and_waits(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h100");
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = square(g, "x", 4000, weft_cuda(0));
  weft_node *mm[50], *cp[50];
  for (int i = 0; i < 50; i++) {
    weft_tensor *y = NULL, *h = NULL;
    CHECK(weft_mm(g, x, x, &y));
    mm[i] = weft_graph_last_node(g);
    CHECK(weft_copy(g, y, weft_cpu(), &h));
    cp[i] = weft_graph_last_node(g);
  }
  weft_placement pl;
  CHECK(weft_node_placement(g, mm[0], &pl));
  assert_string_equal(pl.lane, "cuda:0 stream 0 (simulated)");
  assert_true(weft_device_equal(pl.device, weft_cuda(0)));
  assert_true(tu_contains(pl.why, "fills the GPU on its own"));
  CHECK(weft_node_placement(g, cp[0], &pl));
  assert_string_equal(pl.lane, "cuda:0 copy d2h (simulated)");
  assert_true(tu_contains(pl.why, "device-to-host copy"));
  /* A 64 MB result: the window keeps max(2 x 64 MB, 64 MB) unclaimed, so product i claims the
   * result of product i - 3 and waits for its copy. */
  CHECK(weft_node_placement(g, mm[10], &pl));
  assert_true(tu_contains(pl.why, "waits for 1 event"));
  /* The last product of the stream, whose result goes to the host: the tail split. */
  CHECK(weft_node_placement(g, mm[49], &pl));
  assert_true(tu_contains(pl.why, "two row halves"));
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* A chain of small elementwise GPU nodes is batched, and the explanation names the batch. */
static void gpu_placement_names_batches(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h100");
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = square(g, "x", 8, weft_cuda(0));
  weft_node *n[10];
  for (int i = 0; i < 10; i++) {
    CHECK(weft_relu(g, x, &x));
    n[i] = weft_graph_last_node(g);
  }
  weft_placement pl;
  CHECK(weft_node_placement(g, n[4], &pl));
  assert_true(tu_contains(pl.why, "batched: nodes 0..9 (10 small elementwise ops)"));
  CHECK(weft_node_placement(g, n[1], &pl));
  assert_true(tu_contains(pl.why, "continues the stream of node 0"));
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* ---- out of memory ------------------------------------------------------------------------- */

/* Building the plan of a GPU graph fails cleanly at each allocation in turn: WEFT_ENOMEM, the
 * graph plans once memory is back, and nothing leaks. Everything is made under the counting
 * allocator, so that the live count covers the runtime's cached blocks too. */
static void plan_build_survives_every_failed_allocation(void **state) {
  (void)state;
  int failures = 0;
  for (long at = 0;; at++) {
    tu_alloc_install(-1);
    weft_runtime *rt = sim_runtime("h100");
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    weft_tensor *a = square(g, "a", 512, weft_cuda(0));
    weft_node *end = NULL;
    for (int i = 0; i < 6; i++) {
      weft_tensor *y = NULL, *h = NULL;
      CHECK(weft_mm(g, a, a, &y));
      CHECK(weft_relu(g, y, &y));
      CHECK(weft_copy(g, y, weft_cpu(), &h));
      end = weft_graph_last_node(g);
    }
    weft_placement pl;
    tu_alloc_fail_at(at);
    int rc = weft_node_placement(g, end, &pl);
    int failed = tu_alloc_failed();
    tu_alloc_fail_at(-1);
    if (failed) {
      assert_int_equal(rc, WEFT_ENOMEM);
      failures++;
      CHECK(weft_node_placement(g, end, &pl)); /* memory is back: it plans */
    } else {
      CHECK(rc);
    }
    assert_string_equal(pl.lane, "cuda:0 copy d2h (simulated)");
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
    long live = tu_alloc_live();
    tu_alloc_uninstall();
    if (live != 0) fail_msg("failing allocation %ld of the plan build leaked %ld blocks", at, live);
    if (!failed) break;
  }
  assert_true(failures > 10);
}

static int noop(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}

/* A graph of 6000 nodes and about 20 000 edges (each node reads three of 500 tensors and
 * writes one; one tensor written first and read by every third node; some explicit edges), planned with 1 worker (the serial CSR) and with 4 (the
 * workers'): each node's successors are the edges from it in their order (by target), its
 * predecessors the edges into it in order, its in-degree their number, and the roots the nodes
 * with none, ascending; the run then completes. */
static void large_plans_list_every_edge(void **state) {
  (void)state;
  for (int workers = 1; workers <= 4; workers += 3) {
    weft_runtime *rt = tu_runtime_cpu(workers);
    const weft_op *op = tu_op(rt, "r3w1", 4, (weft_access[]){WEFT_READ, WEFT_READ, WEFT_READ, WEFT_WRITE}, noop, NULL);
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    enum { T = 500, N = 6000 };
    weft_tensor *t[T];
    for (int i = 0; i < T; i++) t[i] = tu_tensor(g, NULL, WEFT_F32, 1, (int64_t[]){1}, weft_zeros());
    weft_tensor *c = tu_tensor(g, "c", WEFT_F32, 1, (int64_t[]){1}, weft_zeros());
    uint32_t seed = 12345;
    for (int i = 0; i < N; i++) {
      weft_tensor *a[4];
      for (int k = 0; k < 4; k++) {
        seed = seed * 1664525u + 1013904223u;
        a[k] = t[(seed >> 8) % T];
      }
      if (i == 0) a[3] = c;           /* c: written first, then read by every third node */
      else if (i % 3 == 0) a[0] = c; /* (node 0's 2000 successors: the long lists' sort) */
      CHECK(weft_call(g, op, a, 4, NULL, 0));
      if (i % 97 == 5) CHECK(weft_graph_add_edge(g, weft_graph_node(g, (size_t)i / 3), weft_graph_node(g, (size_t)i)));
    }
    CHECK(weft_graph_run(g));
    const weft__plan *p = g->plan;
    const weft__edge *e = g->edges.data;
    size_t m = g->edges.len;
    assert_int_equal(p->n, N);
    assert_int_equal(p->m, m);
    assert_true(m >= 8192); /* the workers' CSR (build.c, PAR_EDGES_MIN) */
    uint32_t *want_succ = calloc(m, sizeof *want_succ), *at = calloc(N + 1, sizeof *at), roots = 0;
    for (size_t k = 0; k < m; k++) at[e[k].from + 1]++;
    for (int i = 0; i < N; i++) at[i + 1] += at[i];
    for (size_t k = 0; k < m; k++) want_succ[at[e[k].from]++] = e[k].to;
    for (int i = N; i > 0; i--) at[i] = at[i - 1];
    at[0] = 0;
    size_t k_pred = 0;
    for (uint32_t i = 0; i < N; i++) {
      const weft__xnode *x = &p->x[i];
      assert_int_equal(x->succ_begin, at[i]);
      assert_int_equal(x->succ_end, at[i + 1]);
      for (uint32_t k = x->succ_begin; k < x->succ_end; k++) {
        assert_int_equal(p->succ[k], want_succ[k]);
        assert_int_equal(p->succ_early[k], 0); /* CPU nodes: released at completion */
      }
      assert_int_equal(x->pred_begin, k_pred);
      for (; k_pred < m && e[k_pred].to == i; k_pred++) assert_int_equal(p->pred[k_pred], e[k_pred].from);
      assert_int_equal(x->pred_end, k_pred);
      /* Armed for the first run: its predecessors. */
      assert_int_equal(atomic_load(&x->pending), x->pred_end - x->pred_begin);
      if (x->pred_end == x->pred_begin) {
        assert_true(roots < p->nroots);
        assert_int_equal(p->roots[roots++], i);
      }
    }
    assert_int_equal(roots, p->nroots);
    assert_int_equal(k_pred, m);
    free(want_succ);
    free(at);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(policies_are_chosen_by_name),
      cmocka_unit_test(heft_orders_the_critical_path_first),
      cmocka_unit_test_setup_teardown(depth_follows_every_edge, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(backward_edges_order_the_run, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(cpu_placement_says_the_dispatcher_rule, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(placement_refuses_bad_arguments, tu_setup, tu_teardown),
      cmocka_unit_test(gpu_placement_names_lanes_and_waits),
      cmocka_unit_test(gpu_placement_names_batches),
      cmocka_unit_test(plan_build_survives_every_failed_allocation),
      cmocka_unit_test(large_plans_list_every_edge),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
