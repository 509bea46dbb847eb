/* test_dsl_writer.c — the writer's round trip: for any graph g, parsing weft_graph_write(g)
 * gives a graph equal to g (tensors, nodes, accesses, scalars, parameters, names, inserted
 * copies, explicit edges, analysed edges), and writing that graph gives the same text. Checked
 * as a property over the oracle's random programs, over hand-built C API graphs with the
 * awkward cases (automatic names, names only backticks can spell, non-finite scalars, huge
 * seeds, raw parameters, unnamed nodes in edges, cycles, strict mode), over graphs with copies
 * weft inserted (where a second device exists), and over the examples and the fuzz corpus;
 * weft fmt is checked the same way (same graph, idempotent text). */
#define _POSIX_C_SOURCE 200809L /* open_memstream, mkdtemp, scandir */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl_internal.h"
#include "graph/graph.h"
#include "oracle_gen.h"
#include "testutil.h"
#include "weft/dsl.h"

static weft_runtime *rt;

static int setup(void **state) {
  (void)state;
  rt = tu_runtime_cpu(2);
  oracle_register_ops(rt);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  weft_runtime_destroy(rt);
  return 0;
}

/* ---- structural comparison --------------------------------------------------------------- */

static int same_double(double a, double b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return a == b && signbit(a) == signbit(b);
}

static int same_init(weft_init a, weft_init b) {
  if (a.kind != b.kind) return 0;
  switch (a.kind) {
    case WEFT_INIT_FULL:
    case WEFT_INIT_EYE:
      return same_double(a.a, b.a);
    case WEFT_INIT_UNIFORM:
    case WEFT_INIT_NORMAL:
      return same_double(a.a, b.a) && same_double(a.b, b.b) && a.seed == b.seed;
    default:
      return 1;
  }
}

/* Returns NULL if g and h are the same graph, else what differs. */
static const char *graph_diff(weft_graph *g, weft_graph *h) {
  static char why[512];
  char d1[32], d2[32];
  if (weft_graph_tensor_count(g) != weft_graph_tensor_count(h)) {
    snprintf(why, sizeof why, "%zu tensors vs %zu", weft_graph_tensor_count(g), weft_graph_tensor_count(h));
    return why;
  }
  for (size_t i = 0; i < weft_graph_tensor_count(g); i++) {
    weft_tensor *a = weft_graph_tensor(g, i), *b = weft_graph_tensor(h, i);
    int same = strcmp(weft_tensor_name(a), weft_tensor_name(b)) == 0 &&
               weft_tensor_dtype(a) == weft_tensor_dtype(b) && weft_tensor_ndim(a) == weft_tensor_ndim(b) &&
               weft_device_equal(weft_tensor_device(a), weft_tensor_device(b)) &&
               same_init(weft_tensor_init(a), weft_tensor_init(b)) &&
               weft_tensor_is_kept(a) == weft_tensor_is_kept(b) &&
               (a->flags & (WEFT__T_AUTO | WEFT__T_INSERTED | WEFT__T_KEEP)) ==
                   (b->flags & (WEFT__T_AUTO | WEFT__T_INSERTED | WEFT__T_KEEP));
    for (int d = 0; same && d < weft_tensor_ndim(a); d++) same = weft_tensor_dim(a, d) == weft_tensor_dim(b, d);
    if (!same) {
      snprintf(why, sizeof why, "tensor %zu: '%s' %s on %s flags %x vs '%s' %s on %s flags %x", i,
               weft_tensor_name(a), weft_dtype_name(weft_tensor_dtype(a)),
               weft_device_str(weft_tensor_device(a), d1, sizeof d1), a->flags, weft_tensor_name(b),
               weft_dtype_name(weft_tensor_dtype(b)), weft_device_str(weft_tensor_device(b), d2, sizeof d2),
               b->flags);
      return why;
    }
  }
  if (weft_graph_node_count(g) != weft_graph_node_count(h)) {
    snprintf(why, sizeof why, "%zu nodes vs %zu", weft_graph_node_count(g), weft_graph_node_count(h));
    return why;
  }
  for (size_t i = 0; i < weft_graph_node_count(g); i++) {
    weft_node *a = weft_graph_node(g, i), *b = weft_graph_node(h, i);
    size_t pa, pb;
    const void *qa = weft_node_params(a, &pa), *qb = weft_node_params(b, &pb);
    int same = strcmp(weft_node_op_name(a), weft_node_op_name(b)) == 0 &&
               weft_node_user_op(a) == weft_node_user_op(b) &&
               weft_device_equal(weft_node_device(a), weft_node_device(b)) &&
               weft_node_nargs(a) == weft_node_nargs(b) && same_double(weft_node_alpha(a), weft_node_alpha(b)) &&
               (strcmp(weft_node_op_name(a), "fill") != 0 ||
                same_init(weft_node_fill_init(a), weft_node_fill_init(b))) &&
               pa == pb && (pa == 0 || memcmp(qa, qb, pa) == 0) &&
               weft_node_is_inserted(a) == weft_node_is_inserted(b) &&
               strcmp(weft_node_name(a), weft_node_name(b)) == 0;
    for (int k = 0; same && k < weft_node_nargs(a); k++) {
      weft_access ma, mb;
      weft_tensor *ta = weft_node_arg(a, k, &ma), *tb = weft_node_arg(b, k, &mb);
      same = weft_tensor_id(ta) == weft_tensor_id(tb) && ma == mb;
    }
    if (!same) {
      char s1[200], s2[200];
      snprintf(why, sizeof why, "node %zu: %s vs %s", i, weft_node_describe(a, s1, sizeof s1),
               weft_node_describe(b, s2, sizeof s2));
      return why;
    }
  }
  if (g->explicit_edges.len != h->explicit_edges.len) {
    snprintf(why, sizeof why, "%zu explicit edges vs %zu", g->explicit_edges.len, h->explicit_edges.len);
    return why;
  }
  for (size_t i = 0; i < g->explicit_edges.len; i++) {
    weft__edge *a = &WEFT__VEC_AT(&g->explicit_edges, weft__edge, i), *b = &WEFT__VEC_AT(&h->explicit_edges, weft__edge, i);
    if (a->from != b->from || a->to != b->to) {
      snprintf(why, sizeof why, "explicit edge %zu: %u->%u vs %u->%u", i, a->from, a->to, b->from, b->to);
      return why;
    }
  }
  if (g->strict != h->strict) return "strict mode differs";
  int ra = weft_graph_analyse(g), rb = weft_graph_analyse(h);
  if (ra != rb) return "analysis status differs";
  if (ra != WEFT_OK) return NULL;
  if (weft_graph_edge_count(g) != weft_graph_edge_count(h)) return "edge counts differ";
  for (size_t i = 0; i < weft_graph_edge_count(g); i++) {
    weft_edge a, b;
    CHECK(weft_graph_edge(g, i, &a));
    CHECK(weft_graph_edge(h, i, &b));
    if (weft_node_id(a.from) != weft_node_id(b.from) || weft_node_id(a.to) != weft_node_id(b.to) ||
        a.hazard != b.hazard || (a.tensor == NULL) != (b.tensor == NULL) ||
        (a.tensor && weft_tensor_id(a.tensor) != weft_tensor_id(b.tensor))) {
      snprintf(why, sizeof why, "edge %zu differs", i);
      return why;
    }
  }
  return NULL;
}

/* Writes g, parses the text, compares, and checks that writing again gives the same text. */
static void round_trip(weft_runtime *r, weft_graph *g, const char *what) {
  char *text = NULL;
  int rc = weft_graph_write(g, &text);
  if (rc != WEFT_OK) fail_msg("%s: write failed: %s", what, weft_last_error());
  weft_program *p = NULL;
  rc = weft_program_parse(r, "written.weft", text, strlen(text), NULL, &p);
  if (rc != WEFT_OK) fail_msg("%s: the written text does not parse:\n%s\n---\n%s", what, weft_last_error(), text);
  const char *why = graph_diff(g, weft_program_graph(p));
  if (why != NULL) fail_msg("%s: the round trip differs: %s\n---\n%s", what, why, text);
  char *again = NULL;
  CHECK(weft_graph_write(weft_program_graph(p), &again));
  if (strcmp(text, again) != 0) fail_msg("%s: writing the parsed graph gives other text:\n%s\n---\n%s", what, text, again);
  free(again);
  free(text);
  weft_program_destroy(p);
}

static char *slurp(const char *path, size_t *len);

/* ---- the oracle's random programs ------------------------------------------------------- */

static void test_oracle_programs(void **state) {
  (void)state;
  int programs = 250, cycles = 0, user = 0;
  const char *env = getenv("WEFT_DSL_ROUND_TRIPS");
  if (env != NULL) programs = atoi(env);
  for (int seed = 0; seed < programs; seed++) {
    oracle_cfg cfg;
    oracle_cfg_init(&cfg);
    if (seed % 5 == 4) cfg.max_nodes = 80;
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    oracle_info info;
    CHECK(oracle_build_info(g, (uint64_t)seed, &cfg, &info));
    cycles += info.cycle;
    for (size_t i = 0; i < weft_graph_node_count(g); i++) user += weft_node_user_op(weft_graph_node(g, i)) != NULL;
    char what[32];
    snprintf(what, sizeof what, "oracle seed %d", seed);
    round_trip(rt, g, what);
    weft_graph_destroy(g);
  }
  /* The property covered what it should: user ops, and some cyclic programs. */
  assert_true(user > programs);
  if (programs >= 200) assert_true(cycles > 0);
}

/* ---- hand-built graphs ------------------------------------------------------------------- */

static int nop_cpu(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}

static const weft_op *user_op(weft_runtime *r, const char *name) {
  const weft_op *op = weft_op_find(r, name);
  if (op != NULL) return op;
  weft_op_desc d;
  memset(&d, 0, sizeof d);
  d.name = name;
  d.nargs = 2;
  d.access[0] = WEFT_READ;
  d.access[1] = WEFT_READ_WRITE;
  d.cpu = nop_cpu;
  CHECK(weft_op_register(r, &d, &op));
  return op;
}

static weft_tensor *tensor(weft_graph *g, const char *name, int64_t n, weft_init in) {
  weft_tensor *t;
  CHECK(weft_tensor_create(g, name, WEFT_F64, 1, &n, weft_cpu(), in, &t));
  return t;
}

static void test_awkward_graphs(void **state) {
  (void)state;
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  /* Names the lexer can read as they are, and names only backticks can spell. */
  const char *names[] = {"plain", "y[3]", "w[1,-2]", "y[03]", "print", "cpu", "a b", "t@cuda:0",
                         "q`uote\\", "new\nline", "\xc3\xa9t\xc3\xa9", "f32", "on", "x[]", "z[1][2]"};
  weft_tensor *ts[15];
  for (int i = 0; i < 15; i++) ts[i] = tensor(g, names[i], 2, weft_uniform(-1, 1, (uint64_t)i));
  weft_tensor *unnamed = tensor(g, NULL, 2, weft_normal(0, 1, UINT64_MAX));
  weft_tensor *s = tensor(g, "s", 2, weft_full(NAN));
  weft_tensor *u = tensor(g, "u", 2, weft_full(-0.0));
  weft_tensor *r = NULL, *r2 = NULL, *r3 = NULL;
  CHECK(weft_add(g, ts[0], ts[6], &r)); /* auto name t<id> */
  CHECK(weft_scale(g, r, INFINITY, &r2));
  CHECK(weft_scale(g, r2, -0.0, &r3));
  weft_tensor_keep(r3);
  CHECK(weft_scale(g, unnamed, 1e-300, &unnamed));
  CHECK(weft_scale(g, ts[8], 0.1, &ts[9]));
  CHECK(weft_fill(g, s, weft_uniform(0.25, 0.5, (uint64_t)INT64_MAX + 7)));
  CHECK(weft_copy(g, u, weft_cpu(), &u));
  const weft_op *op = user_op(rt, "poke");
  weft_tensor *args[2] = {ts[10], ts[11]};
  double p64[2] = {1.5, -0.0};
  CHECK(weft_call(g, op, args, 2, p64, sizeof p64));
  unsigned char raw[5] = {0, 1, 127, 128, 255};
  CHECK(weft_call(g, op, args, 2, raw, sizeof raw));
  double pnan[1] = {NAN};
  CHECK(weft_call(g, op, args, 2, pnan, sizeof pnan));
  CHECK(weft_call(g, op, args, 2, NULL, 0));
  /* Node names, unnamed nodes in edges, a name used twice, edges both ways. */
  CHECK(weft_node_set_name(weft_graph_node(g, 0), "first"));
  CHECK(weft_node_set_name(weft_graph_node(g, 1), "dup"));
  CHECK(weft_node_set_name(weft_graph_node(g, 2), "dup"));
  CHECK(weft_node_set_name(weft_graph_node(g, 3), "odd name\t!"));
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 0), weft_graph_node(g, 5)));
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 1), weft_graph_node(g, 2)));
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 2), weft_graph_node(g, 6)));
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 3), weft_graph_node(g, 4)));
  CHECK(weft_graph_add_edge(g, weft_graph_node(g, 8), weft_graph_node(g, 7)));
  weft_tensor *late = tensor(g, "late", 0, weft_zeros()); /* declared after every node */
  (void)late;
  weft_graph_set_strict(g, 1);
  round_trip(rt, g, "awkward graph");
  /* A 0-d tensor, and a zero-size one. */
  weft_tensor *sc;
  CHECK(weft_tensor_create(g, "scalar", WEFT_F32, 0, NULL, weft_cpu(), weft_ones(), &sc));
  weft_tensor *n0 = NULL;
  CHECK(weft_norm(g, sc, &n0));
  round_trip(rt, g, "awkward graph with scalars");
  weft_graph_destroy(g);

  /* An empty graph. */
  CHECK(weft_graph_create(rt, &g));
  round_trip(rt, g, "empty graph");
  weft_graph_destroy(g);
}

static void test_graphs_text_cannot_spell(void **state) {
  (void)state;
  weft_graph *g;
  char *text = (char *)1;
  /* Two declared tensors with one name. */
  CHECK(weft_graph_create(rt, &g));
  tensor(g, "x", 2, weft_zeros());
  tensor(g, "x", 2, weft_zeros());
  assert_int_equal(weft_graph_write(g, &text), WEFT_ENOTSUP);
  assert_null(text);
  assert_string_equal(weft_last_error(),
                      "weft_graph_write: tensors 0 and 1 are both named 'x'; .weft names must be unique: "
                      "rename one (weft_tensor_set_name)");
  weft_graph_destroy(g);
  /* A result named like an existing tensor ("t1" is also tensor 1's automatic name). */
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *a = tensor(g, "t1", 2, weft_zeros()), *b = NULL;
  CHECK(weft_relu(g, a, &b));
  assert_int_equal(weft_graph_write(g, &text), WEFT_ENOTSUP);
  assert_string_equal(weft_last_error(),
                      "weft_graph_write: tensors 0 and 1 are both named 't1'; .weft names must be unique: "
                      "rename one (weft_tensor_set_name)");
  /* Renaming fixes it. */
  CHECK(weft_tensor_set_name(b, "r"));
  round_trip(rt, g, "renamed");
  weft_graph_destroy(g);
}

static void expect_in_msg(const char *msg, const char *want) {
  if (strstr(msg, want) == NULL) fail_msg("message\n%s\ndoes not contain\n%s", msg, want);
}

/* A runtime with GPUs: the machine's, or else a simulated two-GPU machine (building graphs
 * needs the devices, not their kernels). */
static weft_runtime *gpu_runtime(void) {
  weft_runtime *r = tu_runtime(2);
  if (weft_device_count(r, WEFT_DEVICE_CUDA) > 0) return r;
  weft_runtime_destroy(r);
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 2;
  o.flags |= WEFT_RUNTIME_QUIET;
  o.simulate = "h200x2";
  r = NULL;
  CHECK(weft_runtime_create(&o, &r));
  return r;
}

/* Copies weft inserts are not written: the parser inserts them again. */
static void test_inserted_copies(void **state) {
  (void)state;
  weft_runtime *r = gpu_runtime();
  weft_graph *g;
  CHECK(weft_graph_create(r, &g));
  int64_t shape[2] = {3, 3};
  weft_tensor *h, *d, *y = NULL, *z = NULL, *w = NULL, *k = NULL;
  CHECK(weft_tensor_create(g, "h", WEFT_F32, 2, shape, weft_cpu(), weft_ones(), &h));
  CHECK(weft_tensor_create(g, "d", WEFT_F32, 2, shape, weft_cuda(0), weft_ones(), &d));
  CHECK(weft_mm(g, d, h, &y));  /* copies h to cuda:0 */
  CHECK(weft_add(g, y, h, &z)); /* reuses that copy */
  CHECK(weft_fill(g, h, weft_full(2)));
  CHECK(weft_mm(g, d, h, &w)); /* h was written: a new copy, same name */
  CHECK(weft_copy(g, w, weft_cpu(), &k));
  CHECK(weft_add(g, k, w, &k)); /* w copied to the CPU */
  int inserted = 0;
  for (size_t i = 0; i < weft_graph_node_count(g); i++) inserted += weft_node_is_inserted(weft_graph_node(g, i));
  assert_int_equal(inserted, 3);
  round_trip(r, g, "inserted copies");
  /* A node that uses an automatic copy directly (from introspection) is written by its name. */
  weft_tensor *copy = weft_node_arg(weft_graph_node(g, 0), 1, NULL);
  assert_string_equal(weft_tensor_name(copy), "h@cuda:0");
  weft_tensor *v = NULL;
  CHECK(weft_relu(g, copy, &v));
  round_trip(r, g, "a direct use of an automatic copy");
  /* Writing into an automatic copy is beyond the text. */
  CHECK(weft_fill(g, copy, weft_zeros()));
  char *text = (char *)1;
  assert_int_equal(weft_graph_write(g, &text), WEFT_ENOTSUP);
  assert_null(text);
  expect_in_msg(weft_last_error(), "a copy weft inserted; .weft text only reads automatic copies");
  weft_graph_destroy(g);

  /* Random programs spread over the CPU and the GPUs: every op's inputs copied where needed. */
  int ngpu = weft_device_count(r, WEFT_DEVICE_CUDA), copies = 0;
  for (int seed = 0; seed < 60; seed++) {
    CHECK(weft_graph_create(r, &g));
    uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 1;
    weft_tensor *pool[24];
    int n = 0;
    for (int step = 0; step < 40; step++) {
      rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
      weft_device dev = (rng >> 8) % 3 == 0 ? weft_cpu() : weft_cuda((int)((rng >> 12) % (uint64_t)ngpu));
      weft_tensor *t = NULL;
      if (n < 3 || (rng >> 20) % 4 == 0) {
        if (n == 24) continue;
        CHECK(weft_tensor_create(g, NULL, WEFT_F32, 2, shape, dev, weft_uniform(0, 1, rng), &t));
        pool[n++] = t;
        continue;
      }
      weft_tensor *a = pool[(rng >> 24) % (uint64_t)n], *b = pool[(rng >> 32) % (uint64_t)n];
      weft_tensor *out = (rng >> 40) % 3 == 0 ? pool[(rng >> 44) % (uint64_t)n] : NULL;
      switch ((rng >> 50) % 4) {
        case 0: CHECK(weft_mm(g, a, b, &out)); break;
        case 1: CHECK(weft_add(g, a, b, &out)); break;
        case 2: CHECK(weft_copy(g, a, dev, &out)); break;
        default: CHECK(weft_fill(g, a, weft_full(1))); break;
      }
      if (out != NULL && n < 24 && (rng >> 56) % 2) pool[n++] = out;
    }
    for (size_t i = 0; i < weft_graph_node_count(g); i++) copies += weft_node_is_inserted(weft_graph_node(g, i));
    round_trip(r, g, "random devices");
    weft_graph_destroy(g);
  }
  assert_true(copies > 50);
  weft_runtime_destroy(r);
}

/* The examples on a machine with GPUs (real or simulated) use them, with copies between. */
static void test_examples_on_gpus(void **state) {
  (void)state;
  weft_runtime *r = gpu_runtime();
  static const char *const names[] = {"device_fallback.weft", "two_gpus.weft", "copy_to_host.weft",
                                      "cpu_vs_gpu.weft", "linear_layer.weft"};
  int inserted = 0;
  for (int i = 0; i < 5; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", WEFT_EXAMPLES_DIR, names[i]);
    size_t len;
    char *text = slurp(path, &len);
    assert_non_null(text);
    weft_program *p = NULL;
    CHECK(weft_program_parse(r, path, text, len, NULL, &p));
    weft_graph *g = weft_program_graph(p);
    /* x is on the first GPU. */
    weft_tensor *x = weft_graph_find_tensor(g, i == 1 ? "x1" : "x");
    if (x == NULL) x = weft_graph_find_tensor(g, "ga");
    assert_non_null(x);
    assert_int_equal(weft_tensor_device(x).kind, WEFT_DEVICE_CUDA);
    for (size_t k = 0; k < weft_graph_node_count(g); k++) inserted += weft_node_is_inserted(weft_graph_node(g, k));
    round_trip(r, g, path);
    weft_program_destroy(p);
    free(text);
  }
  assert_true(inserted >= 1); /* device_fallback's y, copied to x's GPU */
  weft_runtime_destroy(r);
}

/* ---- programs: examples and corpus -------------------------------------------------------- */

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  *len = fread(buf, 1, (size_t)n, f);
  buf[*len] = '\0';
  fclose(f);
  return buf;
}

/* For each .weft file in dir that parses: the graph round trip, and weft fmt (same graph,
 * idempotent). Returns how many files were checked. */
static int check_dir(const char *dir, int must_parse) {
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  int checked = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (e->d_name[0] == '.' || (must_parse && (n < 5 || strcmp(e->d_name + n - 5, ".weft") != 0))) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t len;
    char *text = slurp(path, &len);
    if (text == NULL) continue;
    weft_dsl_options o;
    weft_dsl_options_init(&o);
    o.deny_files = !must_parse;
    o.max_nodes = 100000;
    weft_program *p = NULL;
    int rc = weft_program_parse(rt, path, text, len, &o, &p);
    if (rc != WEFT_OK) {
      if (must_parse) fail_msg("%s does not parse:\n%s", path, weft_last_error());
      free(text);
      continue;
    }
    round_trip(rt, weft_program_graph(p), path);
    char *fmt1, *fmt2;
    CHECK(weft_program_format(p, &fmt1));
    weft_program *q = NULL;
    if (weft_program_parse(rt, path, fmt1, strlen(fmt1), &o, &q) != WEFT_OK)
      fail_msg("%s: the formatted text does not parse:\n%s\n---\n%s", path, weft_last_error(), fmt1);
    const char *why = graph_diff(weft_program_graph(p), weft_program_graph(q));
    if (why != NULL) fail_msg("%s: fmt changed the graph: %s\n---\n%s", path, why, fmt1);
    CHECK(weft_program_format(q, &fmt2));
    if (strcmp(fmt1, fmt2) != 0) fail_msg("%s: fmt is not idempotent:\n%s\n---\n%s", path, fmt1, fmt2);
    free(fmt1);
    free(fmt2);
    weft_program_destroy(q);
    weft_program_destroy(p);
    free(text);
    checked++;
  }
  closedir(d);
  return checked;
}

/* Runs an example at a small size on the CPU and checks its "# expect: <output line>" (and
 * "# expect on the CPU: ...") comments against what it prints. Returns the number of
 * expectations checked. */
static int run_example(const char *path) {
  size_t len;
  char *text = slurp(path, &len);
  assert_non_null(text);
  weft_program *p = NULL;
  CHECK(weft_program_parse(rt, path, text, len, NULL, &p));
  /* Shrink the sizes the example declares (N stays a power of two). */
  static const char *const small[][2] = {{"N", "N=32"}, {"BIG", "BIG=48"}, {"STEPS", "STEPS=4"}};
  const char *defs[3];
  int ndefs = 0;
  for (int i = 0; i < p->ast->n; i++)
    for (int k = 0; k < 3; k++)
      if (p->ast->stmts[i]->kind == ST_PARAM && strcmp(p->ast->stmts[i]->name, small[k][0]) == 0)
        defs[ndefs++] = small[k][1];
  weft_program_destroy(p);
  weft_dsl_options o;
  weft_dsl_options_init(&o);
  o.defines = defs;
  o.ndefines = ndefs;
  CHECK(weft_program_parse(rt, path, text, len, &o, &p));
  CHECK(weft_graph_run(weft_program_graph(p)));
  char *out = NULL;
  size_t outlen = 0;
  FILE *f = open_memstream(&out, &outlen);
  CHECK(weft_program_outputs(p, f, 0));
  fclose(f);
  int checked = 0;
  for (const char *e = text; (e = strstr(e, "# expect")) != NULL; e++) {
    const char *start;
    if (strncmp(e, "# expect: ", 10) == 0)
      start = e + 10;
    else if (strncmp(e, "# expect on the CPU: ", 21) == 0)
      start = e + 21;
    else
      continue;
    const char *end = strchr(start, '\n');
    size_t n = end ? (size_t)(end - start) : strlen(start);
    int found = 0;
    for (const char *line = out; line && *line && !found; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
      found = strncmp(line, start, n) == 0 && (line[n] == '\n' || line[n] == '\0');
    if (!found) fail_msg("%s: expected the line '%.*s' in its output:\n%s", path, (int)n, start, out);
    checked++;
  }
  /* Every printed scalar is a finite number. */
  assert_null(strstr(out, "nan"));
  assert_null(strstr(out, "inf"));
  free(out);
  weft_program_destroy(p);
  free(text);
  return checked;
}

static void test_examples(void **state) {
  (void)state;
  assert_true(check_dir(WEFT_EXAMPLES_DIR, 1) >= 8);
  DIR *d = opendir(WEFT_EXAMPLES_DIR);
  assert_non_null(d);
  struct dirent *e;
  int ran = 0, expectations = 0;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 5, ".weft") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", WEFT_EXAMPLES_DIR, e->d_name);
    expectations += run_example(path);
    ran++;
  }
  closedir(d);
  assert_true(ran >= 8);
  assert_true(expectations >= 5);
}

/* examples/mpi/cholesky.weft on one rank (its grid 1 x 1): the writer prints the distribute
 * statements back, and the tensors they distribute on the CPU they were declared on. */
static void test_distributed_example(void **state) {
  (void)state;
  char path[1024];
  snprintf(path, sizeof path, "%s/mpi/cholesky.weft", WEFT_EXAMPLES_DIR);
  size_t len;
  char *text = slurp(path, &len);
  assert_non_null(text);
  char *at = strstr(text, "param P = 2");
  assert_non_null(at);
  at[10] = '1';
  weft_program *p = NULL;
  if (weft_program_parse(rt, path, text, len, NULL, &p) != WEFT_OK) fail_msg("%s", weft_last_error());
  round_trip(rt, weft_program_graph(p), path);
  char *out = NULL;
  CHECK(weft_graph_write(weft_program_graph(p), &out));
  assert_non_null(strstr(out, "tensor A: f64[512, 512] on cpu = zeros\n"));
  assert_non_null(strstr(out, "tiles(A, 128, 128)\ndistribute(A, 1, 1)\n"));
  free(out);
  weft_program_destroy(p);
  free(text);
}

static void test_corpus(void **state) {
  (void)state;
  check_dir(WEFT_FUZZ_CORPUS_DIR, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_oracle_programs),
      cmocka_unit_test(test_awkward_graphs),
      cmocka_unit_test(test_graphs_text_cannot_spell),
      cmocka_unit_test(test_inserted_copies),
      cmocka_unit_test(test_examples),
      cmocka_unit_test(test_examples_on_gpus),
      cmocka_unit_test(test_distributed_example),
      cmocka_unit_test(test_corpus),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
