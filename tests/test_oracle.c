/* test_oracle.c — the differential oracle: seeded random programs (oracle_gen.c) run by the
 * scheduler (runtimes of 1, 2 and 16 workers) and by a plain serial interpreter (oracle_gen.c), which
 * walks the nodes of a second, identically built graph in insertion order and runs each with
 * the same CPU kernels (weft__cpu_exec) on its own buffers. After every run (one to three per
 * graph, with host writes into some inputs between runs and, for a third of the programs, new
 * nodes and tensors added between runs) every kept tensor must be bit for bit
 * the interpreter's, and every temporary must refuse to be read. Programs with a cycle-closing
 * backward edge must fail to analyse and to launch with WEFT_ECYCLE naming both ends. Every
 * fourth program runs on a simulated CPU + GPU machine that computes on the CPU (where the
 * build has the simulator), its tensors on both devices and the copies weft inserts between
 * them checked bit for bit the same way.
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
  long programs, cycles, two_devices, runs, grown, nodes, inplace, inserted, user, edges, temps, kept,
      compared_bytes;
  long by_op[17];
} stats;

static const char *const stat_ops[] = {"mm", "add", "sub", "mul", "scale", "relu", "sum", "norm",
                                       "linear", "copy", "fill", "gemm", "potrf", "trsm", "syrk", "trmm"};
enum { N_STAT_OPS = sizeof stat_ops / sizeof stat_ops[0] };

static void count_program(weft_graph *g) {
  stats.programs++;
  size_t nn = weft_graph_node_count(g);
  stats.nodes += (long)nn;
  for (size_t i = 0; i < nn; i++) {
    weft_node *n = weft_graph_node(g, i);
    if (weft_node_user_op(n) != NULL) stats.user++;
    stats.inserted += weft_node_is_inserted(n);
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

/* Writes the same new contents into some input tensors of both graphs, between runs. */
static void rewrite_inputs(weft_graph *ga, weft_graph *gb, oracle_serial *in, uint64_t *rng) {
  size_t n = oracle_program_tensors(ga, NULL, 0);
  weft_tensor **ta = calloc(n ? n : 1, sizeof *ta), **tb = calloc(n ? n : 1, sizeof *tb);
  assert_true(ta != NULL && tb != NULL);
  oracle_program_tensors(ga, ta, n);
  assert_int_equal(oracle_program_tensors(gb, tb, n), n);
  for (size_t i = 0; i < n; i++) {
    weft_tensor *t = ta[i];
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    if ((*rng >> 60) != 0 || strncmp(weft_tensor_name(t), "in", 2) != 0) continue;
    size_t bytes = weft_tensor_bytes(t);
    void *buf = oracle_serial_data(in, weft_tensor_id(tb[i]));
    if (bytes == 0) continue;
    weft__cpu_fill(buf, weft_tensor_dtype(t), weft_tensor_numel(t), weft_uniform(-1, 1, *rng));
    /* Across ranks the owner writes it (every rank computed the same contents). */
    if (weft_tensor_device(t).rank == weft_runtime_rank(weft_graph_runtime(ga))) CHECK(weft_tensor_write(t, buf, bytes));
  }
  free(ta);
  free(tb);
}

/* Runs one program; returns 0 when the scheduler and the interpreter agree throughout. The
 * program runs on rt; its twin, for the interpreter, is built on twin_rt (the same runtime, or
 * a CPU-only one for a program on several devices: the twin is then the program as written,
 * without the copies weft inserts). */
static int run_program(weft_runtime *rt, weft_runtime *twin_rt, uint64_t seed, const oracle_cfg *cfg,
                       int verbose) {
  weft_graph *ga = NULL, *gb = NULL;
  oracle_info ia, ib;
  CHECK(weft_graph_create(rt, &ga));
  CHECK(weft_graph_create(twin_rt, &gb));
  CHECK(oracle_build_info(ga, seed, cfg, &ia));
  CHECK(oracle_build_info(gb, seed, cfg, &ib));
  if (rt == twin_rt) {
    assert_int_equal(ia.nodes, ib.nodes);
    assert_int_equal(ia.tensors, ib.tensors);
  }
  assert_int_equal(oracle_program_tensors(ga, NULL, 0), oracle_program_tensors(gb, NULL, 0));
  assert_int_equal(weft_graph_node_count(ga), ia.nodes);
  if (verbose) {
    printf("oracle: seed %llu: %zu tensors, %zu nodes%s\n", (unsigned long long)seed, ia.tensors,
           ia.nodes, ia.cycle ? ", cycle" : "");
    list_program(ga);
  }
  int bad = 0;
  count_program(ga);
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
    if (r > 0) rewrite_inputs(ga, gb, in, &rng);
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
  if (bad && !verbose) list_program(ga);
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

/* A simulated machine (a CPU and a GPU) that computes every node on the CPU: programs whose
 * tensors live on both devices, with the copies weft inserts, must still agree bit for bit.
 * NULL where the build has no simulator. */
static weft_runtime *simulated_runtime(void) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.simulate = "h100";
  o.cpu_workers = 2;
  o.flags = WEFT_RUNTIME_QUIET | WEFT_RUNTIME_SIM_COMPUTE;
  weft_runtime *rt = NULL;
  if (weft_runtime_create(&o, &rt) != WEFT_OK) return NULL;
  oracle_register_ops(rt);
  return rt;
}

/* The runtime and configuration of program k: CPU runtimes of 1, 2 and 16 workers in turn, and
 * every fourth program on the simulated two-device machine where there is one. */
static weft_runtime *program_runtime(weft_runtime *const *rts, weft_runtime *sim, uint64_t k,
                                     oracle_cfg *c, weft_runtime **twin) {
  program_cfg(k, c);
  if (sim != NULL && k % 4 == 3) {
    c->devices = 2;
    /* No cycle: where a node reads a copy of a tensor that a later node writes, the two are
     * not ordered in the graph (the copy was taken first), so a backward edge between them
     * need not close a cycle, and the twin (without copies) would disagree. */
    c->cycle_per_mille = 0;
    stats.two_devices++;
    *twin = rts[0];
    return sim;
  }
  *twin = rts[k % 3];
  return rts[k % 3];
}

static void random_programs_agree_with_serial(void **state) {
  (void)state;
  oracle_cfg cfg;
  oracle_cfg_init(&cfg);
  cfg.tiles_percent = 4; /* tiled Cholesky blocks: tiles, the linear-algebra ops */
  cfg.auto_percent = 25; /* inputs on auto: placement, replicas and their transfers */
  cfg.large_percent = 3;  /* inputs split across the workers: their bits must not depend on them */
  weft_runtime *rts[3];
  static const int workers[3] = {1, 2, 16}; /* 16 on any machine: more workers than cores */
  for (int i = 0; i < 3; i++) {
    rts[i] = tu_runtime_cpu(workers[i]);
    oracle_register_ops(rts[i]);
  }
  weft_runtime *sim = simulated_runtime();
#ifdef WEFT_ORACLE_MPI
  /* test_mpi_oracle, under mpirun: every input on a random rank or on auto (placed among every
   * rank's devices); the same programs on every rank, each rank running its nodes, all compared
   * with the serial interpreter. The simulated machine stays in one process. */
  cfg.ranks = cfg.devices = weft_runtime_ranks(rts[0]);
  cfg.cycle_per_mille = 0; /* as on two devices: a copy orders nothing */
  weft_runtime_destroy(sim);
  sim = NULL;
#endif
  const char *one = getenv("WEFT_ORACLE_SEED");
  int failures = 0;
  if (one != NULL && *one != '\0') {
    uint64_t seed = strtoull(one, NULL, 10);
    weft_runtime *twin, *rt = program_runtime(rts, sim, seed, &cfg, &twin);
    failures = run_program(rt, twin, seed, &cfg, 1);
  } else {
    long programs = env_long("WEFT_ORACLE_PROGRAMS", 1000);
    for (long k = 0; k < programs && failures < 5; k++) {
      oracle_cfg c = cfg;
      weft_runtime *twin, *rt = program_runtime(rts, sim, (uint64_t)k, &c, &twin);
      failures += run_program(rt, twin, (uint64_t)k, &c, 0);
    }
  }
  printf("oracle: %ld programs (%ld with a cycle, %ld on two devices), %ld runs, %ld grown between "
         "runs, %ld nodes (%ld user ops, %ld in place, %ld copies inserted), %ld edges, %ld kept "
         "tensors, %ld temporaries, %ld bytes compared\n  by op:",
         stats.programs, stats.cycles, stats.two_devices, stats.runs, stats.grown, stats.nodes,
         stats.user, stats.inplace, stats.inserted, stats.edges, stats.kept, stats.temps,
         stats.compared_bytes);
  for (int k = 0; k < N_STAT_OPS; k++) printf(" %s %ld", stat_ops[k], stats.by_op[k]);
  printf("\n");
  if (sim == NULL) printf("oracle: no simulator in this build: the two-device programs did not run\n");
  for (int i = 0; i < 3; i++) weft_runtime_destroy(rts[i]);
  weft_runtime_destroy(sim);
  assert_int_equal(failures, 0);
}

int main(void) {
#ifdef WEFT_ORACLE_MPI
  if (getenv("OMPI_COMM_WORLD_SIZE") == NULL && getenv("PMIX_RANK") == NULL) {
    puts("test_mpi_oracle: not started by mpirun: nothing to test (ctest runs it with 2, 3 and 4 ranks)");
    return 0;
  }
#endif
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(random_programs_agree_with_serial),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
