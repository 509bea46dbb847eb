/* test_oracle.c — the differential oracle: seeded random programs (oracle_gen.c) run by the
 * scheduler (runtimes of 2 to 4 workers) and by a plain serial interpreter written here, which
 * walks the nodes of a second, identically built graph in insertion order and runs each with
 * the same CPU kernels (weft__cpu_exec) on its own buffers. After every run (one to three per
 * graph, with host writes into some inputs between runs) every kept tensor must be bit for bit
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
  long programs, cycles, runs, nodes, inplace, user, edges, temps, kept, compared_bytes;
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

/* ---- the serial interpreter ------------------------------------------------------------- */

typedef struct interp {
  weft_graph *g;
  size_t n;
  void **buf; /* per tensor id: contents, NULL for zero bytes */
} interp;

/* Gives every tensor of g its own buffer with its creation initialiser applied, as weft does
 * once before the first run. */
static void interp_init(interp *in, weft_graph *g) {
  in->g = g;
  in->n = weft_graph_tensor_count(g);
  in->buf = calloc(in->n ? in->n : 1, sizeof *in->buf);
  assert_non_null(in->buf);
  for (size_t i = 0; i < in->n; i++) {
    weft_tensor *t = weft_graph_tensor(g, i);
    size_t bytes = weft_tensor_bytes(t);
    if (bytes == 0) continue;
    in->buf[i] = malloc(bytes);
    assert_non_null(in->buf[i]);
    weft__cpu_fill(in->buf[i], weft_tensor_dtype(t), weft_tensor_numel(t), weft_tensor_init(t));
  }
}

static void interp_fini(interp *in) {
  for (size_t i = 0; i < in->n; i++) free(in->buf[i]);
  free(in->buf);
}

/* One run: every node in insertion order, with the tensors' buffers as its data. */
static void interp_run(interp *in, uint64_t seed) {
  size_t nn = weft_graph_node_count(in->g);
  for (size_t i = 0; i < nn; i++) {
    weft_node *node = weft_graph_node(in->g, i);
    weft_kernel_ctx ctx;
    char err[256] = "";
    memset(&ctx, 0, sizeof ctx);
    ctx.node = node;
    ctx.graph = in->g;
    ctx.index = (uint32_t)i;
    ctx.device = weft_node_device(node);
    ctx.err = err;
    ctx.err_size = sizeof err;
    for (int a = 0; a < weft_node_nargs(node); a++)
      ctx.data[a] = in->buf[weft_tensor_id(weft_node_arg(node, a, NULL))];
    int rc = weft__cpu_exec(&ctx);
    if (rc != WEFT_OK) fail_msg("seed %llu: interpreter: node %zu failed: %s", (unsigned long long)seed, i, err);
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

/* Every kept tensor of ga equals the interpreter's buffer; every temporary refuses reads. */
static int compare(weft_graph *ga, interp *in, uint64_t seed, int run) {
  size_t nt = weft_graph_tensor_count(ga);
  for (size_t i = 0; i < nt; i++) {
    weft_tensor *t = weft_graph_tensor(ga, i);
    weft_tensor *tb = weft_graph_tensor(in->g, i);
    size_t bytes = weft_tensor_bytes(t);
    if (weft_tensor_is_kept(t) != weft_tensor_is_kept(tb)) {
      printf("oracle: seed %llu: tensor %zu kept differs between identical graphs\n",
             (unsigned long long)seed, i);
      return 1;
    }
    unsigned char *got = malloc(bytes ? bytes : 1);
    assert_non_null(got);
    int rc = weft_tensor_read(t, got, bytes);
    if (!weft_tensor_is_kept(t)) {
      free(got);
      if (rc != WEFT_ESTATE) {
        printf("oracle: seed %llu run %d: reading temporary %s gave %s, not ESTATE\n",
               (unsigned long long)seed, run, weft_tensor_name(t), weft_status_name(rc));
        return 1;
      }
      continue;
    }
    if (rc != WEFT_OK) {
      printf("oracle: seed %llu run %d: reading %s failed: %s\n", (unsigned long long)seed, run,
             weft_tensor_name(t), weft_last_error());
      free(got);
      return 1;
    }
    if (bytes != 0 && memcmp(got, in->buf[i], bytes) != 0) {
      size_t es = weft_dtype_size(weft_tensor_dtype(t)), k = 0;
      while (memcmp(got + k * es, (unsigned char *)in->buf[i] + k * es, es) == 0) k++;
      double gv = es == 4 ? ((float *)(void *)got)[k] : ((double *)(void *)got)[k];
      double wv = es == 4 ? ((float *)in->buf[i])[k] : ((double *)in->buf[i])[k];
      printf("oracle: seed %llu run %d: tensor %zu (%s) differs at element %zu: scheduler %.17g, "
             "serial %.17g (replay with WEFT_ORACLE_SEED=%llu)\n",
             (unsigned long long)seed, run, i, weft_tensor_name(t), k, gv, wv,
             (unsigned long long)seed);
      free(got);
      return 1;
    }
    stats.compared_bytes += (long)bytes;
    free(got);
  }
  return 0;
}

/* Writes the same new contents into some kept input tensors of both graphs, between runs. */
static void rewrite_inputs(weft_graph *ga, interp *in, uint64_t *rng) {
  size_t nt = weft_graph_tensor_count(ga);
  for (size_t i = 0; i < nt; i++) {
    weft_tensor *t = weft_graph_tensor(ga, i);
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    if ((*rng >> 60) != 0 || strncmp(weft_tensor_name(t), "in", 2) != 0) continue;
    size_t bytes = weft_tensor_bytes(t);
    int64_t n = weft_tensor_numel(t);
    if (bytes == 0) continue;
    weft__cpu_fill(in->buf[i], weft_tensor_dtype(t), n, weft_uniform(-1, 1, *rng));
    CHECK(weft_tensor_write(t, in->buf[i], bytes));
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
  interp in;
  interp_init(&in, gb);
  uint64_t rng = seed ^ 0xA5A5A5A5u;
  int runs = 1 + (int)(seed % MAX_RUNS);
  for (int r = 0; r < runs && !bad; r++) {
    if (r > 0) rewrite_inputs(ga, &in, &rng);
    int rc;
    if (r % 2 == 0) {
      rc = weft_graph_run(ga);
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
    interp_run(&in, seed);
    stats.runs++;
    bad = compare(ga, &in, seed, r);
  }
  if (bad && !verbose) list_program(gb);
  interp_fini(&in);
  weft_graph_destroy(ga);
  weft_graph_destroy(gb);
  return bad;
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
    failures = run_program(rts[seed % 3], seed, &cfg, 1);
  } else {
    long programs = env_long("WEFT_ORACLE_PROGRAMS", 1000);
    for (long k = 0; k < programs && failures < 5; k++)
      failures += run_program(rts[k % 3], (uint64_t)k, &cfg, 0);
  }
  printf("oracle: %ld programs (%ld with a cycle), %ld runs, %ld nodes (%ld user ops, %ld in place), "
         "%ld edges, %ld kept tensors, %ld temporaries, %ld bytes compared\n  by op:",
         stats.programs, stats.cycles, stats.runs, stats.nodes, stats.user, stats.inplace,
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
