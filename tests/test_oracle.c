/* test_oracle.c — the differential oracle: seeded random programs (oracle_gen.c) run by the
 * scheduler (runtimes of 2 to 4 workers) and by a plain serial interpreter (oracle_gen.c), which
 * walks the nodes of a second, identically built graph in insertion order and runs each with
 * the same CPU kernels (weft__cpu_exec) on its own buffers. After every run (one to three per
 * graph, with host writes into some inputs between runs and, for a third of the programs, new
 * nodes and tensors added between runs) every kept tensor must be bit for bit
 * the interpreter's, and every temporary must refuse to be read. Programs with a cycle-closing
 * backward edge must fail to analyse and to launch with WEFT_ECYCLE naming both ends.
 *
 * Environment: WEFT_ORACLE_PROGRAMS=N runs N programs (default 1000); WEFT_ORACLE_SEED=S runs
 * only the program of seed S (printed by any failure) and lists it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "oracle_gen.h"
#include "testutil.h"

enum { MAX_RUNS = 3 };

/* What the programs exercised, printed at the end so a weakened generator shows. */
static struct {
  long programs, cycles, runs, grown, nodes, inplace, user, edges, temps, kept, compared_bytes;
  long by_op[16];
} stats;

static const char *const stat_ops[] = {"mm", "add", "sub", "mul", "scale", "relu", "sum", "norm",
                                       "linear", "copy", "fill"};
enum { N_STAT_OPS = sizeof stat_ops / sizeof stat_ops[0] };

static void count_program(weft_graph *g) {
  stats.programs++;
  size_t nn = weft_graph_node_count(g);
  stats.nodes += (long)nn;
  for (size_t i = 0; i < nn; i++) {
    weft_node *n = weft_graph_node(g, i);
    if (weft_node_user_op(n) != NULL) stats.user++;
    for (int k = 0; k < N_STAT_OPS; k++)
      if (strcmp(weft_node_op_name(n), stat_ops[k]) == 0) stats.by_op[k]++;
    /* In place: the result is also an input. */
    int nargs = weft_node_nargs(n);
    if (weft_node_user_op(n) == NULL && nargs >= 2)
      for (int a = 0; a < nargs - 1; a++)
        if (weft_node_arg(n, a, NULL) == weft_node_arg(n, nargs - 1, NULL)) {
          stats.inplace++;
          break;
        }
  }
  if (weft_graph_analyse(g) == WEFT_OK) {
    stats.edges += (long)weft_graph_edge_count(g);
    for (size_t i = 0; i < weft_graph_tensor_count(g); i++)
      if (weft_tensor_is_kept(weft_graph_tensor(g, i)))
        stats.kept++;
      else
        stats.temps++;
  }
}

/* ---- checks ----------------------------------------------------------------------------- */

static void list_program(weft_graph *g) {
  char d[300];
  for (size_t i = 0; i < weft_graph_tensor_count(g); i++) {
    weft_tensor *t = weft_graph_tensor(g, i);
    printf("  tensor %zu %s %s ndim %d [", i, weft_tensor_name(t),
           weft_dtype_name(weft_tensor_dtype(t)), weft_tensor_ndim(t));
    for (int k = 0; k < weft_tensor_ndim(t); k++) printf("%s%lld", k ? "," : "", (long long)weft_tensor_dim(t, k));
    printf("] init %d kept %d\n", weft_tensor_init(t).kind, weft_tensor_is_kept(t));
  }
  for (size_t i = 0; i < weft_graph_node_count(g); i++) {
    weft_node *n = weft_graph_node(g, i);
    printf("  %s:", weft_node_describe(n, d, sizeof d));
    for (int a = 0; a < weft_node_nargs(n); a++) {
      weft_access m;
      weft_tensor *t = weft_node_arg(n, a, &m);
      printf(" %s%s", m == WEFT_READ ? "r:" : m == WEFT_WRITE ? "w:" : "rw:", weft_tensor_name(t));
    }
    printf("\n");
  }
}

/* Writes the same new contents into some kept input tensors of both graphs, between runs. */
static void rewrite_inputs(weft_graph *ga, oracle_serial *in, uint64_t *rng) {
  size_t nt = weft_graph_tensor_count(ga);
  for (size_t i = 0; i < nt; i++) {
    weft_tensor *t = weft_graph_tensor(ga, i);
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    if ((*rng >> 60) != 0 || strncmp(weft_tensor_name(t), "in", 2) != 0) continue;
    size_t bytes = weft_tensor_bytes(t);
    int64_t n = weft_tensor_numel(t);
    if (bytes == 0) continue;
    weft__cpu_fill(oracle_serial_data(in, i), weft_tensor_dtype(t), n, weft_uniform(-1, 1, *rng));
    CHECK(weft_tensor_write(t, oracle_serial_data(in, i), bytes));
  }
}

/* Runs one program; returns 0 when the scheduler and the interpreter agree throughout. */
static int run_program(weft_runtime *rt, uint64_t seed, const oracle_cfg *cfg, int verbose) {
  weft_graph *ga = NULL, *gb = NULL;
  oracle_info ia, ib;
  CHECK(weft_graph_create(rt, &ga));
  CHECK(weft_graph_create(rt, &gb));
  CHECK(oracle_build_info(ga, seed, cfg, &ia));
  CHECK(oracle_build_info(gb, seed, cfg, &ib));
  assert_int_equal(ia.nodes, ib.nodes);
  assert_int_equal(ia.tensors, ib.tensors);
  assert_int_equal(weft_graph_node_count(ga), ia.nodes);
  if (verbose) {
    printf("oracle: seed %llu: %zu tensors, %zu nodes%s\n", (unsigned long long)seed, ia.tensors,
           ia.nodes, ia.cycle ? ", cycle" : "");
    list_program(gb);
  }
  int bad = 0;
  count_program(gb);
  if (ia.cycle) {
    stats.cycles++;
    char from[64], to[64];
    snprintf(from, sizeof from, "node %zu '", ia.cycle_from);
    snprintf(to, sizeof to, "node %zu '", ia.cycle_to);
    int rc = weft_graph_analyse(ga);
    if (rc != WEFT_ECYCLE || strstr(weft_last_error(), from) == NULL ||
        strstr(weft_last_error(), to) == NULL) {
      printf("oracle: seed %llu: analyse gave %s (%s), expected ECYCLE naming nodes %zu and %zu\n",
             (unsigned long long)seed, weft_status_name(rc), weft_last_error(), ia.cycle_from,
             ia.cycle_to);
      bad = 1;
    }
    weft_run *run = NULL;
    rc = weft_graph_launch(ga, &run);
    if (rc != WEFT_ECYCLE || run != NULL || strstr(weft_last_error(), from) == NULL) {
      printf("oracle: seed %llu: launch gave %s, expected ECYCLE\n", (unsigned long long)seed,
             weft_status_name(rc));
      bad = 1;
      if (rc == WEFT_OK) weft_run_destroy(run);
    }
    weft_graph_destroy(ga);
    weft_graph_destroy(gb);
    return bad;
  }
  oracle_serial *in = oracle_serial_create(gb);
  assert_non_null(in);
  char msg[512];
  uint64_t rng = seed ^ 0xA5A5A5A5u;
  int runs = 1 + (int)(seed % MAX_RUNS);
  for (int r = 0; r < runs && !bad; r++) {
    if (r > 0) rewrite_inputs(ga, in, &rng);
    if (r > 0 && seed / 3 % 3 == 0) {
      /* The program grows between runs: new nodes (and tensors) on the same graphs. */
      int more = 1 + (int)(seed / 9 % 8);
      CHECK(oracle_grow(ga, seed, r, more, cfg));
      CHECK(oracle_grow(gb, seed, r, more, cfg));
      assert_int_equal(oracle_serial_sync(in), WEFT_OK);
      stats.grown++;
    }
    int rc;
    if (r == 0) {
      rc = weft_graph_run(ga);
    } else if (r == 2) {
      weft_run *run = NULL;
      CHECK(weft_graph_launch(ga, &run));
      while ((rc = weft_run_poll(run)) == WEFT_EAGAIN) {
      }
      weft_run_destroy(run);
    } else {
      weft_run *run = NULL;
      CHECK(weft_graph_launch(ga, &run));
      rc = weft_run_wait(run);
      weft_run_destroy(run);
    }
    if (rc != WEFT_OK) {
      printf("oracle: seed %llu run %d: %s: %s (replay with WEFT_ORACLE_SEED=%llu)\n",
             (unsigned long long)seed, r, weft_status_name(rc), weft_last_error(),
             (unsigned long long)seed);
      bad = 1;
      break;
    }
    if (oracle_serial_run(in, msg, sizeof msg) != WEFT_OK)
      fail_msg("oracle: seed %llu: %s", (unsigned long long)seed, msg);
    stats.runs++;
    bad = oracle_compare(ga, in, msg, sizeof msg, &stats.compared_bytes);
    if (bad)
      printf("oracle: seed %llu run %d: %s (replay with WEFT_ORACLE_SEED=%llu)\n",
             (unsigned long long)seed, r, msg, (unsigned long long)seed);
  }
  if (bad && !verbose) list_program(gb);
  oracle_serial_destroy(in);
  weft_graph_destroy(ga);
  weft_graph_destroy(gb);
  return bad;
}

/* Most programs use the default configuration; some are larger, and some keep nothing, so
 * that temporaries are common. */
static void program_cfg(uint64_t seed, oracle_cfg *c) {
  if (seed % 10 == 9) {
    c->max_nodes = 160;
    c->max_inputs = 12;
  }
  if (seed % 4 == 1) c->keep_percent = 0;
}

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0') return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  return *end == '\0' ? x : dflt;
}

static void random_programs_agree_with_serial(void **state) {
  (void)state;
  oracle_cfg cfg;
  oracle_cfg_init(&cfg);
  weft_runtime *rts[3];
  for (int i = 0; i < 3; i++) {
    rts[i] = tu_runtime_cpu(2 + i);
    oracle_register_ops(rts[i]);
  }
  const char *one = getenv("WEFT_ORACLE_SEED");
  int failures = 0;
  if (one != NULL && *one != '\0') {
    uint64_t seed = strtoull(one, NULL, 10);
    program_cfg(seed, &cfg);
    failures = run_program(rts[seed % 3], seed, &cfg, 1);
  } else {
    long programs = env_long("WEFT_ORACLE_PROGRAMS", 1000);
    for (long k = 0; k < programs && failures < 5; k++) {
      oracle_cfg c = cfg;
      program_cfg((uint64_t)k, &c);
      failures += run_program(rts[k % 3], (uint64_t)k, &c, 0);
    }
  }
  printf("oracle: %ld programs (%ld with a cycle), %ld runs, %ld grown between runs, %ld nodes "
         "(%ld user ops, %ld in place), %ld edges, %ld kept tensors, %ld temporaries, %ld bytes "
         "compared\n  by op:",
         stats.programs, stats.cycles, stats.runs, stats.grown, stats.nodes, stats.user, stats.inplace,
         stats.edges, stats.kept, stats.temps, stats.compared_bytes);
  for (int k = 0; k < N_STAT_OPS; k++) printf(" %s %ld", stat_ops[k], stats.by_op[k]);
  printf("\n");
  for (int i = 0; i < 3; i++) weft_runtime_destroy(rts[i]);
  assert_int_equal(failures, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(random_programs_agree_with_serial),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
