/* test_dsl_parser.c — .weft programs to graphs: every statement and op, in-place results, loops
 * and indexed names, parameters and -D, devices and --device, initialisers and files, outputs
 * as text and JSON, origins, node names and explicit edges, user ops, layout, the format of
 * diagnostics, recovery, limits, and out-of-memory at every allocation. */
#define _POSIX_C_SOURCE 200809L /* open_memstream, mkdtemp, scandir */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/graph.h"
#include "testutil.h"
#include "weft/dsl.h"

static weft_runtime *rt;

static int setup(void **state) {
  (void)state;
  rt = tu_runtime_cpu(2);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  weft_runtime_destroy(rt);
  return 0;
}

static weft_program *parse_opts(const char *text, const weft_dsl_options *o) {
  weft_program *p = NULL;
  int rc = weft_program_parse(rt, "t.weft", text, strlen(text), o, &p);
  if (rc != WEFT_OK) fail_msg("parse failed (%s):\n%s", weft_status_name(rc), weft_last_error());
  return p;
}

static weft_program *parse(const char *text) { return parse_opts(text, NULL); }

/* Parses text that must fail with `status`; returns the message. */
static const char *parse_fail_opts(const char *text, const weft_dsl_options *o, int status) {
  weft_program *p = (weft_program *)1;
  int rc = weft_program_parse(rt, "t.weft", text, strlen(text), o, &p);
  if (rc == WEFT_OK) fail_msg("parse of\n%s\nsucceeded", text);
  assert_null(p);
  if (rc != status)
    fail_msg("status %s, expected %s:\n%s", weft_status_name(rc), weft_status_name(status), weft_last_error());
  return weft_last_error();
}

static const char *parse_fail(const char *text) { return parse_fail_opts(text, NULL, WEFT_EPARSE); }

static void expect_in(const char *msg, const char *want) {
  if (strstr(msg, want) == NULL) fail_msg("message\n%s\ndoes not contain\n%s", msg, want);
}

static weft_tensor *T(weft_program *p, const char *name) {
  weft_tensor *t = weft_graph_find_tensor(weft_program_graph(p), name);
  if (t == NULL) fail_msg("no tensor '%s'", name);
  return t;
}

static double get(weft_program *p, const char *name, int64_t i) {
  double v;
  CHECK(weft_tensor_get(T(p, name), i, &v));
  return v;
}

/* The program's outputs as a string. */
static char *outputs(weft_program *p, int json) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  CHECK(weft_program_outputs(p, f, json));
  fclose(f);
  return buf;
}

/* ---- declarations ----------------------------------------------------------------------- */

static void test_tensor_declarations(void **state) {
  (void)state;
  weft_program *p = parse(
      "param N = 3\n"
      "tensor a: f32[N, 2 * N] on cpu = uniform(-1, 1, seed=42)\n"
      "tensor b: f64[4] = normal(0.5, 2, seed=7)\n"
      "tensor c: f32[] = full(2.5)\n"
      "tensor d: f64 = ones()\n"
      "tensor e: f32[1, 2, 3, 0]\n"
      "tensor f: f32[2] = ones\n"
      "tensor g: f64[N - 1] = full(-N)\n");
  weft_graph *g = weft_program_graph(p);
  assert_int_equal(weft_graph_tensor_count(g), 7);
  assert_int_equal(weft_graph_node_count(g), 0);
  weft_tensor *a = T(p, "a");
  assert_int_equal(weft_tensor_dtype(a), WEFT_F32);
  assert_int_equal(weft_tensor_ndim(a), 2);
  assert_int_equal(weft_tensor_dim(a, 0), 3);
  assert_int_equal(weft_tensor_dim(a, 1), 6);
  assert_true(weft_device_equal(weft_tensor_device(a), weft_cpu()));
  weft_init in = weft_tensor_init(a);
  assert_int_equal(in.kind, WEFT_INIT_UNIFORM);
  assert_true(in.a == -1 && in.b == 1 && in.seed == 42);
  in = weft_tensor_init(T(p, "b"));
  assert_int_equal(in.kind, WEFT_INIT_NORMAL);
  assert_true(in.a == 0.5 && in.b == 2 && in.seed == 7);
  assert_int_equal(weft_tensor_dtype(T(p, "b")), WEFT_F64);
  assert_int_equal(weft_tensor_ndim(T(p, "c")), 0);
  assert_int_equal(weft_tensor_init(T(p, "c")).kind, WEFT_INIT_FULL);
  assert_true(weft_tensor_init(T(p, "c")).a == 2.5);
  assert_int_equal(weft_tensor_ndim(T(p, "d")), 0);
  assert_int_equal(weft_tensor_init(T(p, "d")).kind, WEFT_INIT_ONES);
  assert_int_equal(weft_tensor_ndim(T(p, "e")), 4);
  assert_int_equal(weft_tensor_numel(T(p, "e")), 0);
  assert_int_equal(weft_tensor_init(T(p, "e")).kind, WEFT_INIT_ZEROS);
  assert_int_equal(weft_tensor_init(T(p, "f")).kind, WEFT_INIT_ONES);
  assert_int_equal(weft_tensor_dim(T(p, "g"), 0), 2);
  assert_true(weft_tensor_init(T(p, "g")).a == -3);
  /* Contents come from the initialisers. */
  assert_true(get(p, "c", 0) == 2.5);
  assert_true(get(p, "g", 1) == -3);
  double v = get(p, "a", 5);
  assert_true(v >= -1 && v < 1);
  weft_program_destroy(p);
}

/* ---- ops ---------------------------------------------------------------------------------- */

static void test_every_op(void **state) {
  (void)state;
  weft_program *p = parse(
      "tensor a: f32[2, 2] = full(2)\n"
      "tensor b: f32[2, 2] = ones\n"
      "c = mm(a, b)\n"         /* 4 */
      "d = add(c, b)\n"        /* 5 */
      "e = sub(d, b)\n"        /* 4 */
      "f = mul(e, a)\n"        /* 8 */
      "g = scale(f, 0.5)\n"    /* 4 */
      "n = scale(g, -1)\n"     /* -4 */
      "r = relu(n)\n"          /* 0 */
      "s = sum(g)\n"           /* 16 */
      "q = norm(g)\n"          /* 8 */
      "tensor w: f32[3, 2] = ones\n"
      "tensor bias: f32[3] = full(0.5)\n"
      "l = linear(a, w, bias)\n" /* 4.5, [2, 3] */
      "l2 = linear(a, w)\n"      /* 4 */
      "cp = copy(g, cpu)\n"
      "fill(cp, full(7))\n"
      "keep c, d, e, f, g, n, r, cp\n");
  weft_graph *g = weft_program_graph(p);
  static const char *const ops[] = {"mm",    "add",  "sub",  "mul",    "scale",  "scale", "relu",
                                    "sum",   "norm", "linear", "linear", "copy", "fill"};
  assert_int_equal(weft_graph_node_count(g), 13);
  for (size_t i = 0; i < 13; i++) assert_string_equal(weft_node_op_name(weft_graph_node(g, i)), ops[i]);
  /* Inputs are read, the result written last. */
  weft_access m;
  weft_node *mm = weft_graph_node(g, 0);
  assert_ptr_equal(weft_node_arg(mm, 0, &m), T(p, "a"));
  assert_int_equal(m, WEFT_READ);
  assert_ptr_equal(weft_node_arg(mm, 2, &m), T(p, "c"));
  assert_int_equal(m, WEFT_WRITE);
  assert_true(weft_node_alpha(weft_graph_node(g, 5)) == -1);
  assert_int_equal(weft_node_nargs(weft_graph_node(g, 9)), 4);
  assert_int_equal(weft_node_nargs(weft_graph_node(g, 10)), 3);
  assert_int_equal(weft_node_fill_init(weft_graph_node(g, 12)).kind, WEFT_INIT_FULL);
  CHECK(weft_graph_run(g));
  assert_true(get(p, "c", 3) == 4);
  assert_true(get(p, "d", 0) == 5);
  assert_true(get(p, "e", 1) == 4);
  assert_true(get(p, "f", 2) == 8);
  assert_true(get(p, "g", 0) == 4);
  assert_true(get(p, "n", 0) == -4);
  assert_true(get(p, "r", 0) == 0);
  assert_true(get(p, "s", 0) == 16);
  assert_true(get(p, "q", 0) == 8);
  assert_int_equal(weft_tensor_dim(T(p, "l"), 1), 3);
  assert_true(get(p, "l", 5) == 4.5);
  assert_true(get(p, "l2", 0) == 4);
  assert_true(get(p, "cp", 3) == 7);
  weft_program_destroy(p);
}

static void test_in_place_and_existing_results(void **state) {
  (void)state;
  weft_program *p = parse(
      "tensor x: f64[3] = ones\n"
      "tensor y: f64[3] = full(2)\n"
      "x = add(x, y)\n"       /* writes into x */
      "z = mul(x, y)\n"       /* a new tensor z */
      "z = add(z, z)\n"       /* into z */
      "tensor out: f64[3]\n"
      "out = scale(z, 0.25)\n" /* into the declared out */
      "x = copy(y)\n"         /* into x, no device needed */
      "keep z\n");
  weft_graph *g = weft_program_graph(p);
  assert_int_equal(weft_graph_tensor_count(g), 4);
  assert_int_equal(weft_graph_node_count(g), 5);
  weft_node *n0 = weft_graph_node(g, 0);
  assert_ptr_equal(weft_node_arg(n0, 2, NULL), T(p, "x"));
  assert_ptr_equal(weft_node_arg(weft_graph_node(g, 2), 2, NULL), T(p, "z"));
  assert_ptr_equal(weft_node_arg(weft_graph_node(g, 4), 1, NULL), T(p, "x"));
  CHECK(weft_graph_run(g));
  assert_true(get(p, "z", 0) == 12);
  assert_true(get(p, "out", 0) == 3);
  assert_true(get(p, "x", 0) == 2);
  /* A program's contents persist: a second run starts from the first's results. */
  CHECK(weft_graph_run(g));
  assert_true(get(p, "x", 0) == 2);
  assert_true(get(p, "z", 0) == 16);
  weft_program_destroy(p);
}

/* ---- loops, parameters and -D -------------------------------------------------------------- */

static void test_loops_and_indexed_names(void **state) {
  (void)state;
  weft_program *p = parse(
      "param STEPS = 5\n"
      "tensor x: f32[2, 2] = full(1)\n"
      "for i in 0..STEPS { y[i] = mm(x, x); h[i] = copy(y[i], cpu) }\n"
      "for i in 1..3 {\n"
      "  for j in 0..2 {\n"
      "    w[i, j] = scale(h[i - 1], i * 10 + j)\n"
      "  }\n"
      "}\n"
      "for k in 3..1 { never = relu(x) }\n"
      "for k in 0..1\n"
      "{\n"
      "  once = relu(x)\n"
      "}\n"
      "tensor `y[9]`: f32[1]\n");
  weft_graph *g = weft_program_graph(p);
  assert_int_equal(weft_graph_node_count(g), 10 + 4 + 1);
  assert_non_null(weft_graph_find_tensor(g, "once"));
  for (int i = 0; i < 5; i++) {
    char name[16];
    snprintf(name, sizeof name, "y[%d]", i);
    assert_non_null(weft_graph_find_tensor(g, name));
    snprintf(name, sizeof name, "h[%d]", i);
    assert_non_null(weft_graph_find_tensor(g, name));
  }
  assert_null(weft_graph_find_tensor(g, "never"));
  assert_non_null(weft_graph_find_tensor(g, "y[9]"));
  assert_non_null(weft_graph_find_tensor(g, "w[1,0]"));
  assert_non_null(weft_graph_find_tensor(g, "w[2,1]"));
  weft_tensor_keep(T(p, "w[2,1]"));
  CHECK(weft_graph_run(g));
  assert_true(get(p, "w[2,1]", 0) == 2 * 21);
  weft_program_destroy(p);
  /* The loop variable exists only inside its loop. */
  expect_in(parse_fail("for i in 0..2 { tensor a[i]: f32[1] }\ntensor b: f32[i]\n"),
            "t.weft:2:15: error: unknown name 'i'; expected a number, a parameter or a loop variable");
}

static void test_parameters_and_defines(void **state) {
  (void)state;
  const char *text =
      "param N = 4\n"
      "param M = (N + 2) * 3 / 4 - -1\n" /* 18 / 4 = 4 (integers), + 1 = 5 */
      "param R = N % 3\n"
      "param F = N / 8.0\n"
      "tensor a: f32[N, M, R]\n"
      "tensor b: f64[] = full(F)\n";
  weft_program *p = parse(text);
  assert_int_equal(weft_tensor_dim(T(p, "a"), 0), 4);
  assert_int_equal(weft_tensor_dim(T(p, "a"), 1), 5);
  assert_int_equal(weft_tensor_dim(T(p, "a"), 2), 1);
  assert_true(weft_tensor_init(T(p, "b")).a == 0.5);
  weft_program_destroy(p);

  const char *defs[] = {"N=10", "F=0.25"};
  weft_dsl_options o;
  weft_dsl_options_init(&o);
  o.defines = defs;
  o.ndefines = 2;
  p = parse_opts(text, &o);
  assert_int_equal(weft_tensor_dim(T(p, "a"), 0), 10);
  assert_int_equal(weft_tensor_dim(T(p, "a"), 1), 10); /* 36 / 4 + 1 */
  assert_true(weft_tensor_init(T(p, "b")).a == 0.25);
  weft_program_destroy(p);

  const char *bad[] = {"Q=3", "N=abc", "=3", "N"};
  for (int i = 0; i < 4; i++) {
    o.defines = &bad[i];
    o.ndefines = 1;
    const char *m = parse_fail_opts(text, &o, WEFT_EINVAL);
    static const char *const want[] = {
        "t.weft: error: -D Q=3: the program has no parameter 'Q'; expected one of its parameters (",
        "t.weft: error: -D N=abc: 'abc' is not a number; expected an integer or a decimal number",
        "t.weft: error: -D =3: expected NAME=VALUE with a parameter name (-D N=400)",
        "t.weft: error: -D N: expected NAME=VALUE with a parameter name (-D N=400)"};
    expect_in(m, want[i]);
  }
  expect_in(parse_fail("param A = 1 / 0\n"), "t.weft:1:13: error: division by zero; expected a divisor other than 0");
  expect_in(parse_fail("param A = 9223372036854775807 + 1\n"),
            "t.weft:1:31: error: integer overflow in '+'; expected a result within 64 bits");
  expect_in(parse_fail("param A = 2.5 % 2\n"), "t.weft:1:15: error: '%' takes integers; expected integer operands");
  expect_in(parse_fail("param A = 2.5\ntensor t: f32[A]\n"), "t.weft:2:15: error: a dimension must be an integer; got 2.5");
  expect_in(parse_fail("param A = 2\nparam A = 3\n"), "t.weft:2:7: error: 'A' is already a parameter (from 1:1); expected a new name");
}

/* ---- devices ------------------------------------------------------------------------------- */

static void test_devices(void **state) {
  (void)state;
  const char *text =
      "device gpu = cuda:1 | cuda:0 | cpu\n"
      "device host = cpu\n"
      "device alias = gpu\n"
      "tensor x: f32[2] on gpu = ones\n"
      "tensor y: f32[2] on alias\n"
      "tensor z: f32[2]\n"
      "h = copy(x, host)\n";
  weft_program *p = parse(text); /* a CPU-only runtime: every fallback ends on the CPU */
  assert_true(weft_device_equal(weft_tensor_device(T(p, "x")), weft_cpu()));
  assert_true(weft_device_equal(weft_tensor_device(T(p, "h")), weft_cpu()));
  weft_program_destroy(p);
  weft_dsl_options o;
  weft_dsl_options_init(&o);
  o.device = "cpu";
  p = parse_opts(text, &o);
  assert_true(weft_device_equal(weft_tensor_device(T(p, "y")), weft_cpu()));
  weft_program_destroy(p);
  o.device = "cuda:7";
  expect_in(parse_fail_opts(text, &o, WEFT_EDEVICE), "t.weft: error: --device cuda:7: this machine has no such device (it has cpu)");
  o.device = "tpu";
  expect_in(parse_fail_opts(text, &o, WEFT_EINVAL), "t.weft: error: --device tpu: 'tpu' is not a device");
  /* With no fallback, a missing GPU is an EDEVICE error at the declaration. */
  expect_in(parse_fail_opts("device gpu = cuda:0 | cuda:1\ntensor x: f32[2] on gpu\nprint x\n", NULL, WEFT_EDEVICE),
            "t.weft:1:1: error: no device of 'gpu' exists on this machine (it has cpu); expected a fallback "
            "that does, such as '| cpu'\ndevice gpu = cuda:0 | cuda:1\n^");
  expect_in(parse_fail_opts("tensor x: f32[2] on cuda:0\n", NULL, WEFT_EDEVICE),
            "t.weft:1:21: error: device cuda:0 does not exist on this machine (it has cpu); expected one that "
            "does, or a declared device with a fallback (device gpu = cuda:0 | cpu)");
  /* --device overrides the declarations, and even one with no existing device passes. */
  o.device = "cpu";
  p = parse_opts("device gpu = cuda:0\ntensor x: f32[2] on gpu\n", &o);
  weft_program_destroy(p);
  expect_in(parse_fail("tensor x: f32[2] on nowhere\n"),
            "t.weft:1:21: error: unknown device 'nowhere'; expected cpu, cuda:N, auto or a name declared with 'device'");
  expect_in(parse_fail("tensor x: f32[2]\ny = copy(x, x)\n"), "t.weft:2:13: error: 'x' is a tensor; expected a device");

  /* On a (simulated) machine with two GPUs the declarations pick them. */
  weft_runtime_options ro;
  weft_runtime_options_init(&ro);
  ro.cpu_workers = 1;
  ro.flags |= WEFT_RUNTIME_QUIET;
  ro.simulate = "h200x2";
  weft_runtime *two = NULL;
  CHECK(weft_runtime_create(&ro, &two));
  const char *prog =
      "device a = cuda:1 | cpu\n"
      "device b = cuda:7 | cuda:0 | cpu\n"
      "tensor x: f32[2] on a = ones\n"
      "tensor y: f32[2] on b\n"
      "tensor z: f32[2] on cuda:1\n"
      "w = add(y, x)\n"          /* runs on y's device: x is copied there */
      "h = copy(w, cpu)\n";
  weft_program *q = NULL;
  CHECK(weft_program_parse(two, "t.weft", prog, strlen(prog), NULL, &q));
  weft_graph *g2 = weft_program_graph(q);
  assert_true(weft_device_equal(weft_tensor_device(weft_graph_find_tensor(g2, "x")), weft_cuda(1)));
  assert_true(weft_device_equal(weft_tensor_device(weft_graph_find_tensor(g2, "y")), weft_cuda(0)));
  assert_true(weft_device_equal(weft_tensor_device(weft_graph_find_tensor(g2, "w")), weft_cuda(0)));
  /* The inserted copy is named after its source and device, and has the statement's origin. */
  weft_node *copy = weft_graph_node(g2, 0);
  assert_true(weft_node_is_inserted(copy));
  assert_string_equal(weft_tensor_name(weft_node_arg(copy, 1, NULL)), "x@cuda:0");
  assert_string_equal(weft_node_origin(copy), "t.weft:6:1");
  assert_string_equal(weft_node_origin(weft_graph_node(g2, 1)), "t.weft:6:1");
  weft_program_destroy(q);
  /* The copy is readable by its name, not writable. */
  const char *reads = "tensor x: f32[2] on cpu = ones\ntensor y: f32[2] on cuda:0\nw = add(y, x)\nr = relu(`x@cuda:0`)\n"
                      "`x@cuda:0` = relu(y)\nfill(`x@cuda:0`, zeros)\n";
  assert_int_equal(weft_program_parse(two, "t.weft", reads, strlen(reads), NULL, &q), WEFT_EPARSE);
  expect_in(weft_last_error(), "t.weft:5:1: error: 'x@cuda:0' is a copy weft inserted and may only be read; expected a tensor of the program");
  expect_in(weft_last_error(), "t.weft:6:6: error: 'x@cuda:0' is a copy weft inserted and may only be read");
  assert_null(strstr(weft_last_error(), "t.weft:4:"));
  /* --device moves every declaration, not the literal devices. */
  o.device = "cuda:1";
  CHECK(weft_program_parse(two, "t.weft", prog, strlen(prog), &o, &q));
  g2 = weft_program_graph(q);
  assert_true(weft_device_equal(weft_tensor_device(weft_graph_find_tensor(g2, "y")), weft_cuda(1)));
  assert_true(weft_device_equal(weft_tensor_device(weft_graph_find_tensor(g2, "h")), weft_cpu()));
  assert_int_equal(weft_node_is_inserted(weft_graph_node(g2, 0)), 0);
  weft_program_destroy(q);
  /* strict: no copy is inserted; the op fails at its line. */
  weft_program *r = (weft_program *)1;
  const char *strict = "strict\ntensor x: f32[2] on cuda:0\ntensor y: f32[2] on cuda:1\nz = add(x, y)\n";
  assert_int_equal(weft_program_parse(two, "t.weft", strict, strlen(strict), NULL, &r), WEFT_EDEVICE);
  expect_in(weft_last_error(), "t.weft:4:5: error: node 0 'add': argument b (y) lives on cuda:1 but the node runs on cuda:0; copy it there first (strict device mode)");
  /* A copy into an existing tensor must go to that tensor's device. */
  const char *into = "tensor x: f32[2] on cuda:0\ntensor h: f32[2]\nh = copy(x, cuda:1)\n";
  assert_int_equal(weft_program_parse(two, "t.weft", into, strlen(into), NULL, &r), WEFT_EPARSE);
  expect_in(weft_last_error(), "t.weft:3:13: error: 'h' lives on cpu, so the copy into it cannot go to cuda:1; expected cpu or no device");
  expect_in(parse_fail_opts("tensor x: f32[2] on cuda:2\n", NULL, WEFT_EDEVICE), "(it has cpu)");
  assert_int_equal(weft_program_parse(two, "t.weft", "tensor x: f32[2] on cuda:2\n", 27, NULL, &r), WEFT_EDEVICE);
  expect_in(weft_last_error(), "device cuda:2 does not exist on this machine (it has cpu, cuda:0, cuda:1)");
  weft_runtime_destroy(two);
}

/* ---- files and outputs ---------------------------------------------------------------------- */

static void test_outputs_text_and_json(void **state) {
  (void)state;
  weft_program *p = parse(
      "tensor s: f64[] = full(2.5)\n"
      "tensor v: f32[2, 3] = full(0.1)\n"
      "tensor big: f32[5, 5] = ones\n"
      "tensor e: f64[2, 0]\n"
      "n = norm(big)\n"
      "print n, s\n"
      "print v, big, e\n");
  CHECK(weft_graph_run(weft_program_graph(p)));
  char *text = outputs(p, 0);
  assert_string_equal(text,
                      "n = 5\n"
                      "s = 2.5\n"
                      "v: f32[2, 3] on cpu = [[0.1, 0.1, 0.1], [0.1, 0.1, 0.1]]\n"
                      "big: f32[5, 5] on cpu: sum 25, min 1, max 1, values [1, 1, 1, 1, ..., 1]\n"
                      "e: f64[2, 0] on cpu = [[], []]\n");
  free(text);
  char *json = outputs(p, 1);
  assert_string_equal(json,
                      "{\"n\": 5, \"s\": 2.5, \"v\": [[0.1, 0.1, 0.1], [0.1, 0.1, 0.1]], \"big\": "
                      "[[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]], "
                      "\"e\": [[], []]}\n");
  free(json);
  weft_program_destroy(p);
  /* Printed results are kept, even when a later node reads them (not temporaries). */
  p = parse("tensor x: f32[2] = ones\ny = scale(x, 3)\nz = relu(y)\nprint y\n");
  assert_true(weft_tensor_is_kept(T(p, "y")));
  CHECK(weft_graph_run(weft_program_graph(p)));
  text = outputs(p, 0);
  assert_string_equal(text, "y: f32[2] on cpu = [3, 3]\n");
  free(text);
  weft_program_destroy(p);
  /* Non-finite values: text names them, JSON has null. */
  p = parse("tensor x: f64[3] = full(inf)\ny = sub(x, x)\nz = scale(x, -1)\nprint y, z\n");
  CHECK(weft_graph_run(weft_program_graph(p)));
  text = outputs(p, 0);
  assert_string_equal(text, "y: f64[3] on cpu = [nan, nan, nan]\nz: f64[3] on cpu = [-inf, -inf, -inf]\n");
  free(text);
  json = outputs(p, 1);
  assert_string_equal(json, "{\"y\": [null, null, null], \"z\": [null, null, null]}\n");
  free(json);
  weft_program_destroy(p);
}

static void write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, size, f), size);
  fclose(f);
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void test_files(void **state) {
  (void)state;
  char dir[] = "/tmp/weft_dsl_XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256];
  float w[6] = {1, 2, 3, 4, 5, 6.5f};
  snprintf(path, sizeof path, "%s/w.bin", dir);
  write_file(path, w, sizeof w);
  snprintf(path, sizeof path, "%s/b.txt", dir);
  write_file(path, "# bias\n0.5, -1\n2e1\n", 19);
  weft_dsl_options o;
  weft_dsl_options_init(&o);
  o.base_dir = dir;
  weft_program *p = parse_opts(
      "tensor w: f32[2, 3] = from \"w.bin\"\n"
      "tensor b: f64[3] = from text \"b.txt\"\n"
      "y = scale(w, 2)\n"
      "save y to \"y.bin\"\n"
      "save y to text \"y.txt\"\n"
      "save b to text \"b2.txt\"\n",
      &o);
  assert_true(get(p, "w", 5) == 6.5);
  assert_true(get(p, "b", 1) == -1);
  assert_true(get(p, "b", 2) == 20);
  CHECK(weft_graph_run(weft_program_graph(p)));
  char *none = outputs(p, 0); /* saves print nothing */
  assert_string_equal(none, "");
  free(none);
  snprintf(path, sizeof path, "%s/y.txt", dir);
  assert_string_equal(read_text(path), "2 4 6\n8 10 13\n");
  snprintf(path, sizeof path, "%s/b2.txt", dir);
  assert_string_equal(read_text(path), "0.5\n-1\n20\n");
  snprintf(path, sizeof path, "%s/y.bin", dir);
  float y[6];
  FILE *f = fopen(path, "rb");
  assert_int_equal(fread(y, 1, sizeof y, f), sizeof y);
  fclose(f);
  assert_true(y[5] == 13);
  weft_program_destroy(p);
  /* What was saved loads back. */
  p = parse_opts("tensor y: f32[2, 3] = from \"y.bin\"\ntensor z: f32[6] = from text \"y.txt\"\n", &o);
  assert_true(get(p, "y", 4) == 10);
  assert_true(get(p, "z", 4) == 10);
  weft_program_destroy(p);

  char want[512];
  snprintf(want, sizeof want,
           "t.weft:1:25: error: '%s/w.bin' holds 24 bytes but tensor 'w' (f32[5]) needs 20; expected raw little-endian f32 values",
           dir);
  expect_in(parse_fail_opts("tensor w: f32[5] = from \"w.bin\"\n", &o, WEFT_EINVAL), want);
  snprintf(want, sizeof want, "t.weft:1:30: error: '%s/b.txt' holds 3 numbers but tensor 'b' (f64[2]) needs 2", dir);
  expect_in(parse_fail_opts("tensor b: f64[2] = from text \"b.txt\"\n", &o, WEFT_EINVAL), want);
  snprintf(want, sizeof want, "t.weft:1:25: error: cannot open '%s/nope.bin': No such file or directory", dir);
  expect_in(parse_fail_opts("tensor b: f64[2] = from \"nope.bin\"\n", &o, WEFT_ENOENT), want);
  snprintf(path, sizeof path, "%s/bad.txt", dir);
  write_file(path, "1 2\n3 x4\n", 9);
  snprintf(want, sizeof want, "t.weft:1:30: error: %s/bad.txt:2: 'x4' is not a number", dir);
  expect_in(parse_fail_opts("tensor b: f64[4] = from text \"bad.txt\"\n", &o, WEFT_EINVAL), want);
  snprintf(want, sizeof want, "t.weft:1:25: error: '%s' is not a regular file", dir);
  o.base_dir = NULL;
  char text[512];
  snprintf(text, sizeof text, "tensor b: f64[4] = from \"%s\"\n", dir);
  expect_in(parse_fail_opts(text, &o, WEFT_EIO), want);
  /* A save that cannot write reports at output time. */
  snprintf(text, sizeof text, "tensor b: f64[4]\nsave b to \"%s/no/such/dir.bin\"\n", dir);
  p = parse_opts(text, &o);
  FILE *sink = fopen("/dev/null", "w");
  assert_int_equal(weft_program_outputs(p, sink, 0), WEFT_EIO);
  fclose(sink);
  expect_in(weft_last_error(), "save b: cannot write '");
  weft_program_destroy(p);
  /* deny_files turns both into errors at parse time. */
  o.deny_files = 1;
  const char *m = parse_fail_opts("tensor w: f32[6] = from \"w.bin\"\ntensor b: f32[6]\nsave b to \"x.bin\"\n", &o, WEFT_EPARSE);
  expect_in(m, "t.weft:1:25: error: reading files is not allowed here; expected an initialiser such as zeros or uniform(0, 1)");
  expect_in(m, "t.weft:3:11: error: writing files is not allowed here; expected print instead of save");
  /* weft_program_load reads a file and names it in messages. */
  snprintf(path, sizeof path, "%s/p.weft", dir);
  write_file(path, "tensor x: f32[2]\ny = frob(x)\n", 28);
  weft_program *q = (weft_program *)1;
  assert_int_equal(weft_program_load(rt, path, NULL, &q), WEFT_EPARSE);
  assert_null(q);
  snprintf(want, sizeof want, "%s:2:5: error: unknown op 'frob'", path);
  expect_in(weft_last_error(), want);
  snprintf(path, sizeof path, "%s/missing.weft", dir);
  assert_int_equal(weft_program_load(rt, path, NULL, &q), WEFT_ENOENT);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* ---- origins, node names, edges, strict --------------------------------------------------- */

static void test_origins_names_edges(void **state) {
  (void)state;
  weft_program *p = parse(
      "tensor x: f32[2, 2] = ones\n"
      "  a = mm(x, x) as first\n"
      "b = relu(x) as second; c = relu(b) as `third step`\n"
      "for i in 0..2 { d[i] = scale(x, i) as s[i] }\n"
      "edge first -> second -> `third step`\n"
      "edge s[1] -> @0\n"
      "strict\n");
  weft_graph *g = weft_program_graph(p);
  assert_string_equal(weft_node_origin(weft_graph_node(g, 0)), "t.weft:2:3");
  assert_string_equal(weft_node_origin(weft_graph_node(g, 2)), "t.weft:3:24");
  assert_string_equal(weft_node_origin(weft_graph_node(g, 4)), "t.weft:4:17");
  assert_string_equal(weft_node_name(weft_graph_node(g, 0)), "first");
  assert_string_equal(weft_node_name(weft_graph_node(g, 2)), "third step");
  assert_string_equal(weft_node_name(weft_graph_node(g, 4)), "s[1]");
  assert_int_equal(g->explicit_edges.len, 3);
  weft__edge *e = g->explicit_edges.data;
  assert_true(e[0].from == 0 && e[0].to == 1);
  assert_true(e[1].from == 1 && e[1].to == 2);
  assert_true(e[2].from == 4 && e[2].to == 0); /* backward: closes a cycle with the reads of x? no: x is only read */
  CHECK(weft_graph_analyse(g));
  assert_int_equal(g->strict, 1);
  weft_program_destroy(p);
  expect_in(parse_fail("tensor x: f32[2] = ones\na = relu(x)\nedge a -> b\n"),
            "t.weft:3:6: error: unknown node 'a'; expected a name given to a node earlier with 'as', or @N (a node's number)");
  expect_in(parse_fail("tensor x: f32[2] = ones\na = relu(x) as n\nedge n -> @5\n"),
            "t.weft:3:11: error: there is no node @5; expected @0 to @0 (the nodes so far)");
  expect_in(parse_fail("tensor x: f32[2] = ones\na = relu(x) as n\nedge n -> n\n"),
            "t.weft:3:11: error: an edge from a node to itself would be a cycle; expected two different nodes");
}

/* ---- user ops ------------------------------------------------------------------------------- */

typedef struct axpy_params {
  double alpha;
  int32_t n;
} axpy_params;

/* y += alpha * x; z = n (as a value). Arguments: x (read), y (read-write), z (write). */
static int axpy_cpu(weft_kernel_ctx *ctx) {
  size_t size;
  const double *p = weft_ctx_params(ctx, &size);
  const float *x = weft_ctx_data(ctx, 0);
  float *y = weft_ctx_data(ctx, 1), *z = weft_ctx_data(ctx, 2);
  int64_t n = weft_tensor_numel(weft_ctx_tensor(ctx, 0));
  for (int64_t i = 0; i < n; i++) y[i] += (float)p[0] * x[i];
  z[0] = (float)size;
  return WEFT_OK;
}

static void test_user_ops(void **state) {
  (void)state;
  if (weft_op_find(rt, "axpy") == NULL) {
    weft_op_desc d;
    memset(&d, 0, sizeof d);
    d.name = "axpy";
    d.nargs = 3;
    d.access[0] = WEFT_READ;
    d.access[1] = WEFT_READ_WRITE;
    d.access[2] = WEFT_WRITE;
    d.cpu = axpy_cpu;
    CHECK(weft_op_register(rt, &d, NULL));
  }
  weft_program *p = parse(
      "tensor x: f32[3] = full(2)\n"
      "tensor y: f32[3] = ones\n"
      "tensor z: f32[1]\n"
      "axpy(x, y, z, params=f64[0.5, 3]) as step\n"
      "axpy(x, y, z, params=u8[1, 2, 255])\n"
      "axpy(x, y, z, params=i32[-1] + f64[2] + u8[9])\n"
      "axpy(x, y, z)\n");
  weft_graph *g = weft_program_graph(p);
  weft_node *n = weft_graph_node(g, 0);
  assert_string_equal(weft_node_op_name(n), "axpy");
  assert_ptr_equal(weft_node_user_op(n), weft_op_find(rt, "axpy"));
  weft_access m;
  weft_node_arg(n, 1, &m);
  assert_int_equal(m, WEFT_READ_WRITE);
  weft_node_arg(n, 2, &m);
  assert_int_equal(m, WEFT_WRITE);
  size_t size;
  const double *pd = weft_node_params(n, &size);
  assert_int_equal(size, 16);
  assert_true(pd[0] == 0.5 && pd[1] == 3);
  const unsigned char *pu = weft_node_params(weft_graph_node(g, 1), &size);
  assert_int_equal(size, 3);
  assert_true(pu[2] == 255);
  const unsigned char *pm = weft_node_params(weft_graph_node(g, 2), &size);
  assert_int_equal(size, 13);
  int32_t i32;
  double f64;
  memcpy(&i32, pm, 4);
  memcpy(&f64, pm + 4, 8);
  assert_int_equal(i32, -1);
  assert_true(f64 == 2);
  assert_int_equal(pm[12], 9);
  weft_node_params(weft_graph_node(g, 3), &size);
  assert_int_equal(size, 0);
  /* Only the first call's parameters are read as doubles by this kernel: run just it. */
  weft_program_destroy(p);
  p = parse("tensor x: f32[3] = full(2)\ntensor y: f32[3] = ones\ntensor z: f32[1]\naxpy(x, y, z, params=f64[0.5])\n");
  CHECK(weft_graph_run(weft_program_graph(p)));
  assert_true(get(p, "y", 2) == 2);
  assert_true(get(p, "z", 0) == 8);
  weft_program_destroy(p);
  const char *decl = "tensor x: f32[3]\ntensor y: f32[3]\n";
  char text[256];
  snprintf(text, sizeof text, "%saxpy(x, y)\n", decl);
  expect_in(parse_fail(text), "t.weft:3:1: error: axpy takes 3 tensor arguments, got 2");
  snprintf(text, sizeof text, "%sq = axpy(x, y, y)\n", decl);
  expect_in(parse_fail(text), "t.weft:3:5: error: 'axpy' is a user op: it writes its own arguments and has no "
                              "result; expected a call statement: axpy(...)");
  snprintf(text, sizeof text, "%saxpy(x, y, y, params=0.5)\n", decl);
  expect_in(parse_fail(text), "t.weft:3:22: error: params must be a typed list; expected f64[...], f32[...], "
                              "i64[...], i32[...] or u8[...]");
  snprintf(text, sizeof text, "%saxpy(x, y, y, params=u8[256])\n", decl);
  expect_in(parse_fail(text), "t.weft:3:25: error: 256 does not fit in u8");
  snprintf(text, sizeof text, "%saxpy(x, y, y, alpha=2)\n", decl);
  expect_in(parse_fail(text), "t.weft:3:21: error: unknown argument 'alpha' of axpy; expected params=");
  /* An op with `rest` takes any number of tensors past its listed ones. */
  if (weft_op_find(rt, "gather") == NULL) tu_op_gather(rt, "gather", axpy_cpu);
  p = parse("tensor o: f32[3]\nfor i in 0..20 {\n  tensor a[i]: f32[3] = ones\n}\n"
            "gather(o, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], "
            "a[14], a[15], a[16], a[17], a[18], a[19])\n");
  weft_node *gn = weft_graph_node(weft_program_graph(p), 0);
  assert_int_equal(weft_node_nargs(gn), 21);
  weft_node_arg(gn, 20, &m);
  assert_int_equal(m, WEFT_READ);
  weft_program_destroy(p);
  expect_in(parse_fail("gather()\n"), "t.weft:1:1: error: gather takes at least 1 tensor argument, got 0");
}

/* ---- layout ------------------------------------------------------------------------------- */

static void test_layout(void **state) {
  (void)state;
  weft_program *p = parse(
      "# a comment\n"
      "\n"
      "tensor x: f32[2,\n"
      "              2] = uniform(0,\n"
      "                           1, seed=3)   # after\n"
      "y = mm(x,\n"
      "       x\n"
      ")\n"
      "z = relu(y); w = relu(z) ;\n"
      "\r\n"
      "for i in 0..2 {   # loop\n"
      "  # inside\n"
      "  v[i] = relu(w)\n"
      "}  # after loop\n"
      "# the end\n");
  assert_int_equal(weft_graph_node_count(weft_program_graph(p)), 5);
  char *s;
  CHECK(weft_program_format(p, &s));
  assert_string_equal(s,
                      "# a comment\n"
                      "\n"
                      "tensor x: f32[2, 2] = uniform(0, 1, seed=3)  # after\n"
                      "y = mm(x, x)\n"
                      "z = relu(y)\n"
                      "w = relu(z)\n"
                      "\n"
                      "for i in 0..2 {  # loop\n"
                      "  # inside\n"
                      "  v[i] = relu(w)\n"
                      "}  # after loop\n"
                      "# the end\n");
  free(s);
  weft_program_destroy(p);
  /* An empty program (or only comments) is a valid program with an empty graph. */
  p = parse("");
  assert_int_equal(weft_graph_node_count(weft_program_graph(p)), 0);
  weft_program_destroy(p);
  p = parse("# nothing\n\n# at all");
  CHECK(weft_program_format(p, &s));
  assert_string_equal(s, "# nothing\n\n# at all\n");
  free(s);
  weft_program_destroy(p);
}

/* ---- diagnostics ----------------------------------------------------------------------------- */

static void test_diagnostic_format(void **state) {
  (void)state;
  /* The excerpt keeps tabs so that the caret lines up; UTF-8 characters count once. */
  const char *m = parse_fail("tensor x: f32[2]\n\ty = mm(x,\tz)  # \xc3\xa9\n");
  assert_string_equal(m,
                      "t.weft:2:12: error: unknown tensor 'z'; expected a tensor declared with 'tensor' or "
                      "assigned by an op before this line\n"
                      "\ty = mm(x,\tz)  # \xc3\xa9\n"
                      "\t         \t^");
  m = parse_fail("`\xc3\xa9t\xc3\xa9` = relu(q)\n");
  assert_string_equal(m,
                      "t.weft:1:16: error: unknown tensor 'q'; expected a tensor declared with 'tensor' or "
                      "assigned by an op before this line\n"
                      "`\xc3\xa9t\xc3\xa9` = relu(q)\n"
                      "             ^");
  /* Errors come sorted by position, separated by blank lines, each with its line. */
  m = parse_fail("y = relu(a)\nparam = 3\nz = relu(b)\n");
  assert_string_equal(m,
                      "t.weft:1:10: error: unknown tensor 'a'; expected a tensor declared with 'tensor' or "
                      "assigned by an op before this line\n"
                      "y = relu(a)\n"
                      "         ^\n\n"
                      "t.weft:2:7: error: unexpected '='; expected a parameter name (param N = 400)\n"
                      "param = 3\n"
                      "      ^\n\n"
                      "t.weft:3:10: error: unknown tensor 'b'; expected a tensor declared with 'tensor' or "
                      "assigned by an op before this line\n"
                      "z = relu(b)\n"
                      "         ^");
  /* A long line is shown as a window around the column. */
  char text[1200];
  int n = snprintf(text, sizeof text, "y = relu(");
  for (int i = 0; i < 100; i++) n += snprintf(text + n, sizeof text - (size_t)n, "aaaaaaaa");
  snprintf(text + n, sizeof text - (size_t)n, " q)\n");
  m = parse_fail(text);
  const char *excerpt = strchr(m, '\n') + 1;
  assert_true(strncmp(excerpt, "...", 3) == 0);
  assert_true(strlen(m) < 600);
  /* Past 40 errors the list is cut, and says so. */
  char many[4000];
  n = 0;
  for (int i = 0; i < 60; i++) n += snprintf(many + n, sizeof many - (size_t)n, "y%d = relu(nope)\n", i);
  m = parse_fail(many);
  expect_in(m, "t.weft:40:");
  expect_in(m, "t.weft: too many errors; the first 40 are shown");
  assert_null(strstr(m, "t.weft:41:"));
}

static void test_recovery_without_cascades(void **state) {
  (void)state;
  /* Each mistake gives exactly one message: names a broken statement defines are poisoned. */
  const char *m = parse_fail(
      "tensor x: f32[2, 2] = ones\n"
      "y = mm(x, x\n"               /* 1: syntax, poisons y */
      "z = relu(y)\n"               /* silent */
      "tensr w: f32[2]\n"           /* 2: misspelt keyword, poisons w */
      "v = add(w, z)\n"             /* silent */
      "tensor u: f32[2, 2] = twos\n" /* 3: poisons u */
      "print u, z, w\n"             /* silent */
      "for i in 0..oops {\n"        /* 4: the body is still checked once */
      "  k[i] = relu(x)\n"
      "  m = relu(nothing)\n"       /* 5 */
      "}\n"
      "param P = 1 +\n"             /* 6 */
      "tensor t: f32[P]\n");        /* silent */
  int count = 0;
  for (const char *p = m; (p = strstr(p, ": error: ")) != NULL; p++) count++;
  if (count != 6) fail_msg("expected 6 errors, got %d:\n%s", count, m);
  expect_in(m, "t.weft:2:12: error: unexpected end of line; expected ',' or ')'");
  expect_in(m, "t.weft:4:1: error: unknown statement 'tensr'");
  expect_in(m, "t.weft:6:23: error: expected an initialiser: zeros, ones, eye, full(v), eye(v), uniform(lo, hi, seed=S) or normal(mean, std, seed=S)");
  expect_in(m, "t.weft:8:13: error: unknown name 'oops'; expected a number, a parameter or a loop variable");
  expect_in(m, "t.weft:10:12: error: unknown tensor 'nothing'");
  expect_in(m, "t.weft:12:14: error: unexpected end of line; expected a number, a name or '('");
  /* An error inside a loop is reported once, not once per iteration. */
  m = parse_fail("for i in 0..100 { y[i] = relu(q) }\n");
  assert_null(strstr(strstr(m, "error:") + 1, "error:"));
}

/* ---- limits -------------------------------------------------------------------------------- */

static void test_limits(void **state) {
  (void)state;
  weft_dsl_options o;
  weft_dsl_options_init(&o);
  o.max_nodes = 100;
  expect_in(parse_fail_opts("tensor x: f32[1]\nfor i in 0..1000 { y[i] = relu(x) }\n", &o, WEFT_ELIMIT),
            "t.weft:2:20: error: the program makes more than 100 nodes; expected at most max_nodes (100)");
  /* Loops that make no nodes are bounded too: no input runs unbounded. */
  expect_in(parse_fail_opts("for i in 0..9223372036854775807 { for j in 0..9223372036854775807 { } }\n", &o,
                            WEFT_ELIMIT),
            "error: the program runs more than 400 statements (loop iterations included); expected at most 4 x max_nodes");
  weft_program *p = parse_opts("tensor x: f32[1]\nfor i in 0..100 { y[i] = relu(x) }\n", &o);
  weft_program_destroy(p);
  /* Deep nesting is an error, not a stack overflow. */
  char deep[3000];
  int n = snprintf(deep, sizeof deep, "param A = ");
  for (int i = 0; i < 1000; i++) deep[n++] = '(';
  deep[n++] = '1';
  for (int i = 0; i < 1000; i++) deep[n++] = ')';
  deep[n++] = '\n';
  deep[n] = '\0';
  expect_in(parse_fail(deep), "error: expression nested too deeply; expected at most 200 levels");
  n = 0;
  for (int i = 0; i < 100; i++) n += snprintf(deep + n, sizeof deep - (size_t)n, "for i%d in 0..1 {", i);
  for (int i = 0; i < 100; i++) deep[n++] = '}';
  deep[n] = '\0';
  expect_in(parse_fail(deep), "error: loops nested too deeply; expected at most 64 levels");
  n = snprintf(deep, sizeof deep, "param A = ");
  for (int i = 0; i < 1000; i++) n += snprintf(deep + n, sizeof deep - (size_t)n, "-");
  snprintf(deep + n, sizeof deep - (size_t)n, "1\n");
  expect_in(parse_fail(deep), "error: expression nested too deeply");
  /* A long chain of operators is as deep as it is long. */
  n = snprintf(deep, sizeof deep, "param A = 1");
  for (int i = 0; i < 300; i++) n += snprintf(deep + n, sizeof deep - (size_t)n, " + 1");
  snprintf(deep + n, sizeof deep - (size_t)n, "\n");
  expect_in(parse_fail(deep), "t.weft:1:811: error: expression nested too deeply; expected at most 200 levels");
  p = parse("param A = 1 + 2 * 3 - 4 / 2 + 10 % 4\ntensor t: f32[A]\n");
  assert_int_equal(weft_tensor_dim(T(p, "t"), 0), 7);
  weft_program_destroy(p);
}

/* ---- out of memory ----------------------------------------------------------------------------- */

/* Fails each allocation of a parse (and of writing the graph back) in turn: every failure is
 * reported as ENOMEM (or, when it hits the error message, the program's own error), and
 * nothing leaks. */
static void out_of_memory_sweep(const char *text, int final_rc) {
  long at;
  for (at = 0;; at++) {
    tu_alloc_install(at);
    weft_runtime_options o;
    weft_runtime_options_init(&o);
    o.cpu_workers = 1;
    o.max_gpus = 0;
    o.flags |= WEFT_RUNTIME_QUIET;
    weft_runtime *r = NULL;
    if (weft_runtime_create(&o, &r) != WEFT_OK) {
      assert_true(tu_alloc_failed());
      assert_int_equal(tu_alloc_live(), 0);
      tu_alloc_uninstall();
      continue;
    }
    weft_program *p = NULL;
    int rc = weft_program_parse(r, "t.weft", text, strlen(text), NULL, &p);
    char *s = NULL;
    if (rc == WEFT_OK) rc = weft_graph_write(weft_program_graph(p), &s);
    free(s);
    s = NULL;
    if (rc == WEFT_OK) rc = weft_program_format(p, &s);
    free(s);
    weft_program_destroy(p);
    weft_runtime_destroy(r);
    int failed = tu_alloc_failed();
    long live = tu_alloc_live();
    tu_alloc_uninstall();
    if (live != 0) fail_msg("allocation %ld failed: %ld blocks leaked", at, live);
    if (!failed) {
      assert_int_equal(rc, final_rc);
      break;
    }
    if (rc != WEFT_ENOMEM && rc != final_rc) fail_msg("allocation %ld failed: status %s", at, weft_status_name(rc));
  }
  assert_true(at > 20);
}

static void test_out_of_memory(void **state) {
  (void)state;
  const char *good =
      "param N = 3\n"
      "device gpu = cuda:0 | cpu\n"
      "tensor x: f32[N, N] on gpu = uniform(0, 1, seed=1)  # c\n"
      "for i in 0..4 { y[i] = mm(x, x) as s[i]; h[i] = copy(y[i], cpu) }\n"
      "z = add(h[0], h[3])\n"
      "edge s[0] -> s[3]\n"
      "print z\n";
  const char *bad =
      "tensor x: f32[3] = ones\n"
      "y = relu(x\n"
      "bad = relu(nope)\n"
      "tensr q: f32[1]\n";
  weft_runtime_destroy(rt);
  rt = NULL;
  out_of_memory_sweep(good, WEFT_OK);
  out_of_memory_sweep(bad, WEFT_EPARSE);
  rt = tu_runtime_cpu(2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tensor_declarations),
      cmocka_unit_test(test_every_op),
      cmocka_unit_test(test_in_place_and_existing_results),
      cmocka_unit_test(test_loops_and_indexed_names),
      cmocka_unit_test(test_parameters_and_defines),
      cmocka_unit_test(test_devices),
      cmocka_unit_test(test_outputs_text_and_json),
      cmocka_unit_test(test_files),
      cmocka_unit_test(test_origins_names_edges),
      cmocka_unit_test(test_user_ops),
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_diagnostic_format),
      cmocka_unit_test(test_recovery_without_cascades),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
