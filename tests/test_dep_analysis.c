/* test_dep_analysis.c — src/graph/dep_analysis.c: the exact RAW, WAR and WAW edges of small
 * programs, dedupe of (pred, succ) pairs, read-write accesses, explicit edges (listed once,
 * respected by the scheduler, backward ones too), cycles reported naming their nodes in
 * order, temporaries, re-analysis after a change, a long build's analysis on a worker behind
 * the builder (both against the whole analysis), and a property check on random programs
 * against a naive reference of the edge rule plus a check that every conflicting pair of nodes
 * is ordered. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/graph.h"
#include "oracle_gen.h"
#include "testutil.h"

/* Ops that only declare accesses: read, write, read-write, two reads, two writes, read+write. */
static struct {
  const weft_op *r1, *w1, *rw1, *r2, *w2, *r1w1;
} ops;

static int noop(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}

static int setup(void **state) {
  tu_setup(state);
  tu_fixture *f = *state;
  ops.r1 = tu_op(f->rt, "r1", 1, (weft_access[]){WEFT_READ}, noop, NULL);
  ops.w1 = tu_op(f->rt, "w1", 1, (weft_access[]){WEFT_WRITE}, noop, NULL);
  ops.rw1 = tu_op(f->rt, "rw1", 1, (weft_access[]){WEFT_READ_WRITE}, noop, NULL);
  ops.r2 = tu_op(f->rt, "r2", 2, (weft_access[]){WEFT_READ, WEFT_READ}, noop, NULL);
  ops.w2 = tu_op(f->rt, "w2", 2, (weft_access[]){WEFT_WRITE, WEFT_WRITE}, noop, NULL);
  ops.r1w1 = tu_op(f->rt, "r1w1", 2, (weft_access[]){WEFT_READ, WEFT_WRITE}, noop, NULL);
  return 0;
}

static weft_tensor *tens(tu_fixture *f, const char *name) {
  return tu_tensor(f->g, name, WEFT_F32, 1, (int64_t[]){4}, weft_zeros());
}

/* Adds a node of op with the given tensors. */
static void call(tu_fixture *f, const weft_op *op, weft_tensor *a, weft_tensor *b) {
  weft_tensor *args[2] = {a, b};
  CHECK(weft_call(f->g, op, args, b != NULL ? 2 : 1, NULL, 0));
}

typedef struct exp_edge {
  size_t from, to;
  int hazard;
  weft_tensor *tensor;
} exp_edge;

/* Analyses g and checks that its edges are exactly `want` (in any order). */
static void expect_edges(weft_graph *g, const exp_edge *want, size_t n) {
  CHECK(weft_graph_analyse(g));
  size_t m = weft_graph_edge_count(g);
  int *used = calloc(n ? n : 1, sizeof *used);
  for (size_t i = 0; i < m; i++) {
    weft_edge e;
    CHECK(weft_graph_edge(g, i, &e));
    size_t k = 0;
    while (k < n && (used[k] || want[k].from != weft_node_id(e.from) || want[k].to != weft_node_id(e.to)))
      k++;
    if (k == n)
      fail_msg("unexpected edge %zu -> %zu (hazard %d)", weft_node_id(e.from), weft_node_id(e.to), e.hazard);
    if (want[k].hazard != e.hazard || want[k].tensor != e.tensor)
      fail_msg("edge %zu -> %zu: hazard %d tensor %s, expected hazard %d tensor %s", want[k].from,
               want[k].to, e.hazard, e.tensor ? weft_tensor_name(e.tensor) : "-", want[k].hazard,
               want[k].tensor ? weft_tensor_name(want[k].tensor) : "-");
    used[k] = 1;
  }
  for (size_t k = 0; k < n; k++)
    if (!used[k]) fail_msg("missing edge %zu -> %zu", want[k].from, want[k].to);
  assert_int_equal(m, n);
  free(used);
}

/* ---- inferred edges ----------------------------------------------------------------------- */

static void raw_war_waw(void **state) {
  tu_fixture *f = *state;
  weft_tensor *t = tens(f, "t");
  call(f, ops.w1, t, NULL); /* 0 */
  call(f, ops.r1, t, NULL); /* 1 */
  call(f, ops.r1, t, NULL); /* 2 */
  call(f, ops.w1, t, NULL); /* 3: waits for the readers, not again for 0 */
  call(f, ops.w1, t, NULL); /* 4: no reader since 3 */
  call(f, ops.r1, t, NULL); /* 5 */
  const exp_edge want[] = {
      {0, 1, WEFT_HAZARD_RAW, t}, {0, 2, WEFT_HAZARD_RAW, t}, {1, 3, WEFT_HAZARD_WAR, t},
      {2, 3, WEFT_HAZARD_WAR, t}, {3, 4, WEFT_HAZARD_WAW, t}, {4, 5, WEFT_HAZARD_RAW, t},
  };
  expect_edges(f->g, want, 6);
}

static void reads_of_initial_contents(void **state) {
  tu_fixture *f = *state;
  weft_tensor *t = tens(f, "t"), *u = tens(f, "u");
  call(f, ops.r1, t, NULL); /* 0: reads the creation value: no predecessor */
  call(f, ops.w1, u, NULL); /* 1: first write of u: no predecessor */
  call(f, ops.r1, t, NULL); /* 2 */
  call(f, ops.w1, t, NULL); /* 3: after both readers */
  const exp_edge want[] = {{0, 3, WEFT_HAZARD_WAR, t}, {2, 3, WEFT_HAZARD_WAR, t}};
  expect_edges(f->g, want, 2);
}

static void independent_tensors_give_no_edges(void **state) {
  tu_fixture *f = *state;
  weft_tensor *a = tens(f, "a"), *b = tens(f, "b");
  call(f, ops.w1, a, NULL); /* 0 */
  call(f, ops.w1, b, NULL); /* 1 */
  call(f, ops.r1, a, NULL); /* 2 */
  call(f, ops.r1, b, NULL); /* 3 */
  call(f, ops.r2, a, b);    /* 4 */
  const exp_edge want[] = {{0, 2, WEFT_HAZARD_RAW, a}, {1, 3, WEFT_HAZARD_RAW, b},
                           {0, 4, WEFT_HAZARD_RAW, a}, {1, 4, WEFT_HAZARD_RAW, b}};
  expect_edges(f->g, want, 4);
}

static void pairs_are_deduplicated(void **state) {
  tu_fixture *f = *state;
  weft_tensor *a = tens(f, "a"), *b = tens(f, "b"), *o = NULL;
  call(f, ops.w2, a, b);     /* 0 writes a and b */
  call(f, ops.r2, a, b);     /* 1 reads both: one edge, the first hazard found (a) */
  call(f, ops.r2, b, b);     /* 2 reads b twice: one edge */
  CHECK(weft_add(f->g, a, a, &o)); /* 3 reads a twice */
  call(f, ops.w2, b, a);     /* 4 writes b then a: WAR from 1 (b first), 2, 3 */
  const exp_edge want[] = {
      {0, 1, WEFT_HAZARD_RAW, a}, {0, 2, WEFT_HAZARD_RAW, b}, {0, 3, WEFT_HAZARD_RAW, a},
      {1, 4, WEFT_HAZARD_WAR, b}, {2, 4, WEFT_HAZARD_WAR, b}, {3, 4, WEFT_HAZARD_WAR, a},
  };
  expect_edges(f->g, want, 6);
}

static void read_write_accesses(void **state) {
  tu_fixture *f = *state;
  weft_tensor *t = tens(f, "t"), *u = tens(f, "u");
  call(f, ops.rw1, t, NULL); /* 0: reads the creation value, writes */
  call(f, ops.rw1, t, NULL); /* 1: one edge, RAW (found before the WAW) */
  call(f, ops.r1, t, NULL);  /* 2 */
  call(f, ops.rw1, t, NULL); /* 3: RAW from 1 and WAR from 2 */
  call(f, ops.r1w1, t, t);   /* 4: read and write through two arguments: like read-write */
  weft_tensor *o = u;
  CHECK(weft_relu(f->g, u, &o)); /* 5: in place on u: reads the creation value only */
  o = u;
  CHECK(weft_scale(f->g, u, 2, &o)); /* 6: RAW from 5 */
  const exp_edge want[] = {
      {0, 1, WEFT_HAZARD_RAW, t}, {1, 2, WEFT_HAZARD_RAW, t}, {1, 3, WEFT_HAZARD_RAW, t},
      {2, 3, WEFT_HAZARD_WAR, t}, {3, 4, WEFT_HAZARD_RAW, t}, {5, 6, WEFT_HAZARD_RAW, u},
  };
  expect_edges(f->g, want, 6);
}

/* ---- explicit edges ----------------------------------------------------------------------- */

static void explicit_edges(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a = tens(f, "a"), *b = tens(f, "b");
  call(f, ops.w1, a, NULL); /* 0 */
  call(f, ops.w1, b, NULL); /* 1 */
  call(f, ops.r1, a, NULL); /* 2 */
  weft_node *n0 = weft_graph_node(g, 0), *n1 = weft_graph_node(g, 1), *n2 = weft_graph_node(g, 2);
  CHECK(weft_graph_add_edge(g, n0, n1)); /* independent nodes */
  CHECK(weft_graph_add_edge(g, n0, n2)); /* already a RAW edge: listed once, as RAW */
  CHECK(weft_graph_add_edge(g, n1, n2));
  CHECK(weft_graph_add_edge(g, n1, n2)); /* the same edge twice: listed once */
  const exp_edge want[] = {{0, 2, WEFT_HAZARD_RAW, a},
                           {0, 1, WEFT_HAZARD_EXPLICIT, NULL},
                           {1, 2, WEFT_HAZARD_EXPLICIT, NULL}};
  expect_edges(g, want, 3);
  assert_int_equal(weft_graph_add_edge(g, n0, n0), WEFT_ECYCLE);
  assert_true(tu_contains(weft_last_error(), "an edge from node 0 to itself is a cycle"));
  assert_int_equal(weft_graph_add_edge(g, NULL, n0), WEFT_EINVAL);
  assert_int_equal(weft_graph_add_edge(NULL, n0, n1), WEFT_EINVAL);
  weft_graph *g2;
  CHECK(weft_graph_create(f->rt, &g2));
  weft_tensor *c = tu_tensor(g2, "c", WEFT_F32, 0, NULL, weft_zeros());
  CHECK(weft_call(g2, ops.w1, &c, 1, NULL, 0));
  assert_int_equal(weft_graph_add_edge(g, n0, weft_graph_node(g2, 0)), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "belongs to another graph"));
  weft_graph_destroy(g2);
  expect_edges(g, want, 3); /* the failed calls added nothing */
}

/* The kernel of "stamp": records the order nodes ran in. */
typedef struct order_log {
  atomic_int next;
  int order[64];
} order_log;

static int stamp_kernel(weft_kernel_ctx *ctx) {
  order_log *log = weft_ctx_user(ctx);
  size_t psize;
  const int *id = weft_ctx_params(ctx, &psize);
  /* Give a node that should wait every chance to run first if it were not made to wait. */
  if (*id == 0)
    for (volatile int i = 0; i < 20000; i = i + 1) {
    }
  log->order[atomic_fetch_add(&log->next, 1)] = *id;
  return WEFT_OK;
}

static void explicit_edges_order_execution(void **state) {
  tu_fixture *f = *state;
  static order_log log;
  const weft_op *st = tu_op(f->rt, "stamp", 1, (weft_access[]){WEFT_WRITE}, stamp_kernel, &log);
  weft_graph *g = f->g;
  weft_tensor *t[4];
  for (int i = 0; i < 4; i++) {
    t[i] = tens(f, NULL);
    CHECK(weft_call(g, st, &t[i], 1, &i, sizeof i));
  }
  /* Independent nodes 0..3, ordered 3 -> 1 -> 0 -> 2 by edges, two of them backward. */
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 3), weft_graph_node(g, 1)));
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 1), weft_graph_node(g, 0)));
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 0), weft_graph_node(g, 2)));
  for (int run = 0; run < 50; run++) {
    atomic_store(&log.next, 0);
    CHECK(weft_graph_run(g));
    assert_int_equal(atomic_load(&log.next), 4);
    assert_int_equal(log.order[0], 3);
    assert_int_equal(log.order[1], 1);
    assert_int_equal(log.order[2], 0);
    assert_int_equal(log.order[3], 2);
  }
}

/* ---- cycles ------------------------------------------------------------------------------- */

/* Position of `needle` in the message, failing if absent. */
static long pos(const char *msg, const char *needle) {
  const char *p = strstr(msg, needle);
  if (p == NULL) fail_msg("expected \"%s\" in \"%s\"", needle, msg);
  return p - msg;
}

static void cycles_name_their_nodes(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a = tens(f, "a"), *b = tens(f, "b"), *c = tens(f, "c");
  call(f, ops.w1, a, NULL);  /* 0 */
  call(f, ops.r1w1, a, b);   /* 1 */
  call(f, ops.r1w1, b, c);   /* 2 */
  call(f, ops.r1, c, NULL);  /* 3: downstream of the cycle */
  CHECK(weft_node_set_name(weft_graph_node(g, 1), "middle"));
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 2), weft_graph_node(g, 0)));
  assert_int_equal(weft_graph_analyse(g), WEFT_ECYCLE);
  const char *msg = weft_last_error();
  long p0 = pos(msg, "node 0 'w1' (a) on cpu"), p1 = pos(msg, "node 1 'r1w1' \"middle\" on cpu");
  long p2 = pos(msg, "node 2 'r1w1' (c) on cpu"), pb = pos(msg, "back to node 0");
  assert_true(p0 < p1 && p1 < p2 && p2 < pb);
  assert_null(strstr(msg, "node 3"));
  assert_int_equal(weft_graph_edge_count(g), 0);
  weft_edge e;
  assert_int_equal(weft_graph_edge(g, 0, &e), WEFT_ESTATE);
  weft_run *run = NULL;
  assert_int_equal(weft_graph_launch(g, &run), WEFT_ECYCLE);
  assert_null(run);
  assert_true(tu_contains(weft_last_error(), "dependency cycle through nodes:"));
  assert_int_equal(weft_graph_run(g), WEFT_ECYCLE);
}

/* The first node left over by the topological sort lies downstream of the cycle, not on it:
 * the report must still find the cycle (it used to walk off the end of its arrays). */
static void cycle_behind_a_downstream_node(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a = tens(f, "a"), *b = tens(f, "b");
  call(f, ops.w1, a, NULL); /* 0 */
  call(f, ops.r1w1, a, b);  /* 1: reads 0's a, leads nowhere */
  call(f, ops.r1, a, NULL); /* 2 */
  call(f, ops.r1, b, NULL); /* 3 */
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 2), weft_graph_node(g, 0))); /* 0 -> 2 -> 0 */
  assert_int_equal(weft_graph_analyse(g), WEFT_ECYCLE);
  const char *msg = weft_last_error();
  long p0 = pos(msg, "node 0 'w1'"), p2 = pos(msg, "node 2 'r1'"), pb = pos(msg, "back to node 0");
  assert_true(p0 < p2 && p2 < pb);
  assert_null(strstr(msg, "node 1"));
  assert_null(strstr(msg, "node 3"));
}

static void long_cycle_of_explicit_edges(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  enum { N = 200 };
  for (int i = 0; i < N; i++) call(f, ops.w1, tens(f, NULL), NULL);
  for (int i = N - 1; i > 0; i--)
    CHECK(weft_graph_add_edge(g, weft_graph_node(g, (size_t)i), weft_graph_node(g, (size_t)i - 1)));
  CHECK(weft_graph_analyse(g)); /* a backward chain, not a cycle */
  assert_int_equal(weft_graph_edge_count(g), N - 1);
  CHECK(weft_graph_run(g));
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 0), weft_graph_node(g, N - 1)));
  assert_int_equal(weft_graph_analyse(g), WEFT_ECYCLE);
  /* The message names the start of the cycle and stays bounded. */
  assert_true(tu_contains(weft_last_error(), "dependency cycle through nodes: node"));
  assert_true(strlen(weft_last_error()) < 2000);
}

/* ---- temporaries and re-analysis ---------------------------------------------------------- */

static void reanalysis_after_changes(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a = tens(f, "a"), *t = NULL;
  call(f, ops.w1, a, NULL);
  CHECK(weft_relu(g, a, &t));
  const exp_edge want1[] = {{0, 1, WEFT_HAZARD_RAW, a}};
  expect_edges(g, want1, 1);
  assert_true(weft_tensor_is_kept(t));
  weft_tensor *t2 = NULL;
  CHECK(weft_scale(g, t, 3, &t2)); /* t is now read later: a temporary, and the graph changed */
  assert_int_equal(weft_graph_edge_count(g), 0); /* stale until analysed */
  weft_edge e;
  assert_int_equal(weft_graph_edge(g, 0, &e), WEFT_ESTATE);
  assert_true(tu_contains(weft_last_error(), "changed since it was analysed"));
  weft_tensor *first = t;
  assert_false(weft_tensor_is_kept(first));
  const exp_edge want2[] = {{0, 1, WEFT_HAZARD_RAW, a}, {1, 2, WEFT_HAZARD_RAW, first}};
  expect_edges(g, want2, 2);
  assert_int_equal(weft_graph_edge(g, 2, &e), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "index 2 out of range (2 edges)"));
  weft_tensor_keep(first);
  assert_true(weft_tensor_is_kept(first));
  assert_int_equal(weft_graph_analyse(NULL), WEFT_EINVAL);
}

/* ---- property check on random programs ---------------------------------------------------- */

typedef struct ref_edge {
  size_t from, to;
  int hazard;
  size_t tensor;
} ref_edge;

/* The edge rule, computed naively from the access lists by scanning back over the program. */
static size_t reference_edges(weft_graph *g, ref_edge *out, size_t cap) {
  size_t nn = weft_graph_node_count(g), m = 0;
  for (size_t j = 0; j < nn; j++) {
    weft_node *nj = weft_graph_node(g, j);
    for (int pass = 0; pass < 2; pass++) { /* reads, then writes */
      for (int a = 0; a < weft_node_nargs(nj); a++) {
        weft_access mode;
        weft_tensor *t = weft_node_arg(nj, a, &mode);
        if (!(mode & (pass == 0 ? WEFT_READ : WEFT_WRITE))) continue;
        /* The last writer of t before j, and whether anyone else read it since. */
        size_t lw = SIZE_MAX;
        for (size_t i = j; i-- > 0;) {
          weft_node *ni = weft_graph_node(g, i);
          for (int k = 0; k < weft_node_nargs(ni) && lw == SIZE_MAX; k++) {
            weft_access mk;
            if (weft_node_arg(ni, k, &mk) == t && (mk & WEFT_WRITE)) lw = i;
          }
          if (lw != SIZE_MAX) break;
        }
        /* Within node j, a write in an earlier argument already counts as the last write. */
        int self_wrote = 0;
        for (int k = 0; k < a && pass == 1; k++) {
          weft_access mk;
          if (weft_node_arg(nj, k, &mk) == t && (mk & WEFT_WRITE)) self_wrote = 1;
        }
        size_t cand[256];
        int hz[256];
        size_t nc = 0;
        if (pass == 0) {
          if (lw != SIZE_MAX) {
            cand[nc] = lw;
            hz[nc++] = WEFT_HAZARD_RAW;
          }
        } else if (!self_wrote) {
          int any = 0;
          for (size_t i = lw == SIZE_MAX ? 0 : lw + 1; i < j; i++) {
            weft_node *ni = weft_graph_node(g, i);
            for (int k = 0; k < weft_node_nargs(ni); k++) {
              weft_access mk;
              if (weft_node_arg(ni, k, &mk) == t && (mk & WEFT_READ)) {
                cand[nc] = i;
                hz[nc++] = WEFT_HAZARD_WAR;
                any = 1;
                break;
              }
            }
          }
          if (!any && lw != SIZE_MAX) {
            cand[nc] = lw;
            hz[nc++] = WEFT_HAZARD_WAW;
          }
        }
        for (size_t c = 0; c < nc; c++) {
          int dup = 0;
          for (size_t e = 0; e < m; e++) dup |= out[e].from == cand[c] && out[e].to == j;
          if (dup) continue; /* the pair is kept once, with the hazard found first */
          assert_true(m < cap);
          out[m++] = (ref_edge){cand[c], j, hz[c], weft_tensor_id(t)};
        }
      }
    }
  }
  return m;
}

static void random_programs_match_the_reference(void **state) {
  tu_fixture *f = *state;
  oracle_register_ops(f->rt);
  oracle_cfg cfg;
  oracle_cfg_init(&cfg);
  cfg.edge_percent = 0; /* explicit edges are not visible before analysis */
  cfg.cycle_per_mille = 0;
  enum { CAP = 4096 };
  static ref_edge ref[CAP];
  static unsigned char reach[64][64];
  for (uint64_t seed = 0; seed < 300; seed++) {
    weft_graph *g;
    CHECK(weft_graph_create(f->rt, &g));
    CHECK(oracle_build(g, seed, &cfg));
    CHECK(weft_graph_analyse(g));
    size_t m = reference_edges(g, ref, CAP), nn = weft_graph_node_count(g);
    if (weft_graph_edge_count(g) != m)
      fail_msg("seed %llu: %zu edges, the reference has %zu", (unsigned long long)seed,
               weft_graph_edge_count(g), m);
    memset(reach, 0, sizeof reach);
    for (size_t i = 0; i < m; i++) {
      weft_edge e;
      CHECK(weft_graph_edge(g, i, &e));
      size_t from = weft_node_id(e.from), to = weft_node_id(e.to), k = 0;
      while (k < m && !(ref[k].from == from && ref[k].to == to)) k++;
      if (k == m) fail_msg("seed %llu: edge %zu -> %zu not in the reference", (unsigned long long)seed, from, to);
      assert_int_equal(e.hazard, ref[k].hazard);
      assert_non_null(e.tensor);
      assert_int_equal(weft_tensor_id(e.tensor), ref[k].tensor);
      assert_true(from < to);
      if (nn <= 64) reach[from][to] = 1;
    }
    /* Every pair of conflicting nodes is ordered through the edges. */
    if (nn <= 64) {
      for (size_t k = 0; k < nn; k++)
        for (size_t i = 0; i < nn; i++)
          if (reach[i][k])
            for (size_t j = 0; j < nn; j++) reach[i][j] |= reach[k][j];
      for (size_t j = 0; j < nn; j++)
        for (size_t i = 0; i < j; i++) {
          weft_node *ni = weft_graph_node(g, i), *nj = weft_graph_node(g, j);
          int conflict = 0;
          for (int a = 0; a < weft_node_nargs(ni); a++)
            for (int b = 0; b < weft_node_nargs(nj); b++) {
              weft_access ma, mb;
              if (weft_node_arg(ni, a, &ma) == weft_node_arg(nj, b, &mb) && ((ma | mb) & WEFT_WRITE))
                conflict = 1;
            }
          if (conflict && !reach[i][j])
            fail_msg("seed %llu: nodes %zu and %zu conflict but are not ordered", (unsigned long long)seed, i, j);
        }
    }
    weft_graph_destroy(g);
  }
}

/* A long chain of read-write accesses and a wide fan analyse to the expected edge counts. */
/* Twins analysed two ways have the same edges, in the same order (by target: the plan lays out
 * its successor lists from that), and the same temporaries. */
static void expect_same_analysis(weft_graph *g0, weft_graph *g1, uint64_t seed, int round) {
  size_t m = weft_graph_edge_count(g0);
  assert_int_equal(weft_graph_edge_count(g1), m);
  size_t last_to = 0;
  for (size_t i = 0; i < m; i++) {
    weft_edge a, b;
    CHECK(weft_graph_edge(g0, i, &a));
    CHECK(weft_graph_edge(g1, i, &b));
    if (weft_node_id(a.from) != weft_node_id(b.from) || weft_node_id(a.to) != weft_node_id(b.to) ||
        a.hazard != b.hazard || (a.tensor == NULL) != (b.tensor == NULL) ||
        (a.tensor != NULL && weft_tensor_id(a.tensor) != weft_tensor_id(b.tensor)))
      fail_msg("seed %llu round %d: edge %zu differs", (unsigned long long)seed, round, i);
    assert_true(weft_node_id(a.to) >= last_to);
    last_to = weft_node_id(a.to);
  }
  assert_int_equal(g0->tensors.len, g1->tensors.len);
  for (size_t t = 0; t < g0->tensors.len; t++)
    assert_int_equal(WEFT__VEC_AT(&g0->tensors, weft_tensor *, t)->flags,
                     WEFT__VEC_AT(&g1->tensors, weft_tensor *, t)->flags);
}

/* Random programs of min..max nodes with no explicit edge (one leaves the analysis behind, and
 * then no worker follows), on the oracle's ops of rt. */
static oracle_cfg followed_cfg(weft_runtime *rt, int min, int max) {
  oracle_register_ops(rt);
  oracle_cfg cfg;
  oracle_cfg_init(&cfg);
  cfg.cycle_per_mille = 0;
  cfg.edge_percent = 0;
  cfg.min_nodes = min;
  cfg.max_nodes = max;
  return cfg;
}

/* Two graphs of the same random program. */
static void build_twins(weft_runtime *rt, uint64_t seed, const oracle_cfg *cfg, weft_graph *g[2]) {
  for (int k = 0; k < 2; k++) {
    CHECK(weft_graph_create(rt, &g[k]));
    CHECK(oracle_build(g[k], seed, cfg));
  }
}

/* The analysis follows appends node by node; after any other change it goes over the whole
 * graph again, then follows the appends after it. Both give the same edges, in the same
 * order, and the same temporaries: twins of random programs (explicit edges included),
 * analysed as they grow, one of them made to start over at each round. */
static void appends_and_whole_analysis_agree(void **state) {
  tu_fixture *f = *state;
  oracle_register_ops(f->rt);
  oracle_cfg cfg;
  oracle_cfg_init(&cfg);
  cfg.cycle_per_mille = 0;
  for (uint64_t seed = 0; seed < 150; seed++) {
    weft_graph *g[2];
    build_twins(f->rt, seed, &cfg, g);
    for (int round = 0; round < 3; round++) {
      g[1]->inc_version = 0; /* as after a change other than an append */
      for (int k = 0; k < 2; k++) CHECK(weft_graph_analyse(g[k]));
      expect_same_analysis(g[0], g[1], seed, round);
      for (int k = 0; k < 2; k++) CHECK(oracle_grow(g[k], seed, round, 12, &cfg));
    }
    for (int k = 0; k < 2; k++) weft_graph_destroy(g[k]);
  }
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(long ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* A long build's analysis runs on an idle worker behind the builder (a follower, from the
 * 1024th node appended since the last analysis), and the builder takes over the rest at the
 * analysis or at any other change: the twin built with a follower gives what the whole
 * analysis does, round after round of 1500 more appends (a new follower each), with an
 * explicit edge in the last round (it closes the follower in the middle of a build). The
 * builder pauses now and then, so that the worker catches up and goes idle, and is posted
 * again. The followers did analyse nodes on a worker. */
static void followed_builds_agree(void **state) {
  tu_fixture *f = *state;
  if (f->g->spare.post == NULL) skip(); /* one core: no worker follows */
  oracle_cfg cfg = followed_cfg(f->rt, 2000, 3000);
  uint64_t followed = 0;
  for (uint64_t seed = 0; seed < 4; seed++) {
    weft_graph *g[2];
    build_twins(f->rt, seed, &cfg, g);
    for (int round = 0; round < 3; round++) {
      sleep_ms(5);
      g[1]->inc_version = 0;
      for (int k = 0; k < 2; k++) CHECK(weft_graph_analyse(g[k]));
      assert_null(g[0]->follow);
      expect_same_analysis(g[0], g[1], seed, round);
      for (int part = 0; part < 3; part++) {
        for (int k = 0; k < 2; k++) CHECK(oracle_grow(g[k], seed, 3 * round + part, 500, &cfg));
        sleep_ms(1);
      }
      if (round == 1)
        for (int k = 0; k < 2; k++)
          CHECK(weft_graph_add_edge(g[k], weft_graph_node(g[k], 5), weft_graph_node(g[k], g[k]->nodes.len - 1)));
    }
    followed += g[0]->followed;
    for (int k = 0; k < 2; k++) weft_graph_destroy(g[k]);
  }
  assert_true(followed > 0);
}

/* Tiles made before the follower opens, then thousands of nodes on the whole tensor, on its
 * tiles and on another tensor: a node on the whole is an access to every tile (FOR_TILES), on a
 * worker as inline. Twins against the whole analysis, round after round. */
static void followed_builds_with_tiles(void **state) {
  tu_fixture *f = *state;
  if (f->g->spare.post == NULL) skip();
  const weft_op *o[3] = {ops.r1, ops.w1, ops.rw1};
  uint64_t followed = 0;
  for (unsigned seed = 0; seed < 3; seed++) {
    weft_graph *g[2];
    for (int k = 0; k < 2; k++) {
      CHECK(weft_graph_create(f->rt, &g[k]));
      weft_tensor *x, *y;
      CHECK(weft_tensor_create(g[k], "x", WEFT_F32, 2, (int64_t[]){64, 64}, weft_cpu(), weft_zeros(), &x));
      CHECK(weft_tensor_create(g[k], "y", WEFT_F32, 2, (int64_t[]){64, 64}, weft_cpu(), weft_zeros(), &y));
      CHECK(weft_tensor_tiles(g[k], x, 4, 64)); /* 16 tiles */
    }
    unsigned rng = seed * 7919u + 1;
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < 2500; i++) {
        rng = rng * 1103515245u + 12345u;
        unsigned r = rng >> 8, which = r % 18; /* the whole x, y, or one of x's 16 tiles */
        for (int k = 0; k < 2; k++) {
          weft_tensor *x = weft_graph_tensor(g[k], 0);
          weft_tensor *t = which == 0 ? x : which == 1 ? weft_graph_tensor(g[k], 1) : weft_tensor_tile(x, which - 2, 0);
          CHECK(weft_call(g[k], o[(r / 18) % 3], &t, 1, NULL, 0));
        }
        if (i % 500 == 499) sleep_ms(1);
      }
      g[1]->inc_version = 0;
      for (int k = 0; k < 2; k++) CHECK(weft_graph_analyse(g[k]));
      expect_same_analysis(g[0], g[1], seed, round);
    }
    followed += g[0]->followed;
    for (int k = 0; k < 2; k++) weft_graph_destroy(g[k]);
  }
  assert_true(followed > 0);
}

/* A follower gives way to runs: on a pool of one worker, while a long build is followed, a
 * run of another graph launched meanwhile ends after at most a few of the follower's chunks of
 * nodes (FOLLOW_CHUNK, 256), however far the build goes meanwhile: the follower's progress is
 * read at the launch and, by the run's callback, on the worker at the run's end. No timing: a
 * worker the system keeps off its core delays the run and the follower alike. (A follower that
 * kept the worker as long as batches came held such a run until the build stopped: hundreds of
 * thousands of nodes later.) */
static atomic_uint_fast64_t progress_at_end;
static atomic_int run_ended;
static void note_progress(weft_run *run, int status, void *arg) {
  (void)run;
  (void)status;
  atomic_store(&progress_at_end, weft__graph_follow_progress(arg));
  atomic_store(&run_ended, 1);
}

static void runs_are_not_held_up_by_a_follower(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(1);
  const weft_op *rw = tu_op(rt, "rw", 1, (weft_access[]){WEFT_READ_WRITE}, noop, NULL);
  weft_graph *other, *g;
  weft_tensor *u, *t;
  CHECK(weft_graph_create(rt, &other));
  CHECK(weft_tensor_create(other, "u", WEFT_F32, 1, (int64_t[]){4}, weft_cpu(), weft_zeros(), &u));
  CHECK(weft_call(other, rw, &u, 1, NULL, 0));
  CHECK(weft_graph_create(rt, &g));
  if (g->spare.post == NULL) {
    weft_graph_destroy(g);
    weft_graph_destroy(other);
    weft_runtime_destroy(rt);
    skip();
  }
  CHECK(weft_tensor_create(g, "t", WEFT_F32, 1, (int64_t[]){4}, weft_cpu(), weft_zeros(), &t));
  for (int i = 0; i < 2048; i++) CHECK(weft_call(g, rw, &t, 1, NULL, 0));
  assert_non_null(g->follow);
  /* Appends go on until the follower has the worker (10 s at most), and from then on without
   * a pause, so that it never runs out of nodes. */
  int appended = 0;
  uint64_t t0 = now_ns();
  while (weft__graph_follow_progress(g) == 0 && now_ns() - t0 < 10000000000ull) {
    CHECK(weft_call(g, rw, &t, 1, NULL, 0));
    appended++;
  }
  assert_true(weft__graph_follow_progress(g) > 0);
  atomic_store(&run_ended, 0);
  uint64_t at_launch = weft__graph_follow_progress(g);
  weft_run *r;
  CHECK(weft_graph_launch_cb(other, note_progress, g, &r));
  int more = 0;
  while (!atomic_load(&run_ended) && more < 200000) {
    CHECK(weft_call(g, rw, &t, 1, NULL, 0));
    more++;
  }
  appended += more;
  CHECK(weft_run_wait(r));
  weft_run_destroy(r);
  uint64_t at_end = atomic_load(&progress_at_end);
  if (at_end > at_launch + 2048)
    fail_msg("the follower analysed %llu nodes between the run's launch and its end (%d appended)",
             (unsigned long long)(at_end - at_launch), more);
  CHECK(weft_graph_run(g)); /* the followed build runs */
  assert_int_equal(weft_graph_edge_count(g), 2048 + (size_t)appended - 1);
  weft_graph_destroy(g);
  weft_graph_destroy(other);
  weft_runtime_destroy(rt);
}

/* Out of memory on the worker that follows a build (every allocation off the building thread
 * fails meanwhile): the analysis falls behind, and the next one starts over on the builder and
 * agrees with the whole analysis of a twin built without failures. */
static pthread_t builder_thread;
static atomic_int fail_off_builder, failed_off_builder;
static void *off_builder_malloc(size_t size, void *user) {
  (void)user;
  if (atomic_load(&fail_off_builder) && !pthread_equal(pthread_self(), builder_thread)) {
    atomic_fetch_add(&failed_off_builder, 1);
    return NULL;
  }
  return malloc(size);
}
static void *off_builder_realloc(void *p, size_t size, void *user) {
  (void)user;
  if (atomic_load(&fail_off_builder) && !pthread_equal(pthread_self(), builder_thread)) {
    atomic_fetch_add(&failed_off_builder, 1);
    return NULL;
  }
  return realloc(p, size);
}
static void off_builder_free(void *p, void *user) {
  (void)user;
  free(p);
}

static void followers_out_of_memory(void **state) {
  (void)state;
  builder_thread = pthread_self();
  weft_allocator al = {off_builder_malloc, off_builder_realloc, off_builder_free, NULL};
  weft_set_allocator(&al);
  weft_runtime *rt = tu_runtime_cpu(2);
  oracle_cfg cfg = followed_cfg(rt, 1100, 1200);
  int skipped = 0;
  for (uint64_t seed = 0; seed < 3; seed++) {
    weft_graph *g[2];
    build_twins(rt, seed, &cfg, g);
    if (g[0]->spare.post == NULL) skipped = 1;
    atomic_store(&fail_off_builder, 1);
    for (int part = 0; part < 20; part++) {
      CHECK(oracle_grow(g[0], seed, part, 500, &cfg));
      sleep_ms(1);
    }
    atomic_store(&fail_off_builder, 0);
    for (int part = 0; part < 20; part++) CHECK(oracle_grow(g[1], seed, part, 500, &cfg));
    g[1]->inc_version = 0;
    for (int k = 0; k < 2; k++) CHECK(weft_graph_analyse(g[k]));
    expect_same_analysis(g[0], g[1], seed, 0);
    for (int k = 0; k < 2; k++) weft_graph_destroy(g[k]);
  }
  weft_runtime_destroy(rt);
  weft_set_allocator(NULL);
  if (skipped) skip();
  assert_true(atomic_load(&failed_off_builder) > 0); /* a worker did run into it */
}

static void large_graphs(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *t = tens(f, "t");
  enum { N = 20000 };
  for (int i = 0; i < N; i++) call(f, ops.rw1, t, NULL);
  CHECK(weft_graph_analyse(g));
  assert_int_equal(weft_graph_edge_count(g), N - 1);
  weft_tensor *u = tens(f, "u");
  call(f, ops.w1, u, NULL);
  for (int i = 0; i < N; i++) call(f, ops.r1, u, NULL);
  call(f, ops.w1, u, NULL);
  CHECK(weft_graph_analyse(g));
  assert_int_equal(weft_graph_edge_count(g), (N - 1) + 2 * (size_t)N);
  CHECK(weft_graph_run(g));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(raw_war_waw, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(appends_and_whole_analysis_agree, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(followed_builds_agree, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(followed_builds_with_tiles, setup, tu_teardown),
      cmocka_unit_test(runs_are_not_held_up_by_a_follower),
      cmocka_unit_test(followers_out_of_memory),
      cmocka_unit_test_setup_teardown(reads_of_initial_contents, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(independent_tensors_give_no_edges, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(pairs_are_deduplicated, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(read_write_accesses, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(explicit_edges, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(explicit_edges_order_execution, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(cycles_name_their_nodes, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(cycle_behind_a_downstream_node, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(long_cycle_of_explicit_edges, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(reanalysis_after_changes, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(random_programs_match_the_reference, setup, tu_teardown),
      cmocka_unit_test_setup_teardown(large_graphs, setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
