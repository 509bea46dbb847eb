/* test_graph.c — src/graph: devices and dtypes, tensor creation and every validation error
 * (dtype, rank, negative dimensions, unknown devices, initialisers), names and introspection,
 * every built-in op's shape and dtype rules with errors that name the node, in-place results,
 * user-op registration and calls, node introspection, all-or-nothing op calls, temporaries,
 * and device placement: same-device ops insert no copy, unknown devices are refused, and on a
 * simulated GPU inputs of another device get copies inserted (cached until written; refused in
 * strict mode; taken back out by a call that fails). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static weft_tensor *mat(weft_graph *g, const char *name, weft_dtype dt, int64_t r, int64_t c) {
  return tu_tensor(g, name, dt, 2, (int64_t[]){r, c}, weft_ones());
}

static weft_tensor *vec(weft_graph *g, const char *name, weft_dtype dt, int64_t n) {
  return tu_tensor(g, name, dt, 1, (int64_t[]){n}, weft_ones());
}

/* The graph is exactly as big as before a failed call. */
#define ASSERT_UNCHANGED(g, nodes, tensors)                  \
  do {                                                       \
    assert_int_equal(weft_graph_node_count(g), (nodes));     \
    assert_int_equal(weft_graph_tensor_count(g), (tensors)); \
  } while (0)

/* ---- devices and dtypes ------------------------------------------------------------------- */

static void devices_are_values(void **state) {
  tu_fixture *f = *state;
  char buf[32];
  assert_string_equal(weft_device_str(weft_cpu(), buf, sizeof buf), "cpu");
  assert_string_equal(weft_device_str(weft_cuda(3), buf, sizeof buf), "cuda:3");
  assert_string_equal(weft_device_str(weft_cuda(12), buf, 4), "cud"); /* truncated, terminated */
  buf[0] = 'x';
  weft_device_str(weft_cpu(), buf, 0); /* size 0 writes nothing */
  assert_int_equal(buf[0], 'x');
  assert_true(weft_device_equal(weft_cuda(1), weft_cuda(1)));
  assert_false(weft_device_equal(weft_cuda(1), weft_cuda(0)));
  assert_false(weft_device_equal(weft_cpu(), weft_cuda(0)));

  weft_device d;
  CHECK(weft_device_parse("cpu", &d));
  assert_true(weft_device_equal(d, weft_cpu()));
  CHECK(weft_device_parse("cuda", &d));
  assert_true(weft_device_equal(d, weft_cuda(0)));
  CHECK(weft_device_parse("cuda:12", &d));
  assert_true(weft_device_equal(d, weft_cuda(12)));
  CHECK(weft_device_parse("gpu:2", &d));
  assert_true(weft_device_equal(d, weft_cuda(2)));
  const char *bad[] = {"", "tpu", "cuda:", "cuda:x", "cuda:1x", "cuda:-1", "cpu0", "CPU", "gpu1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(weft_device_parse(bad[i], &d), WEFT_EINVAL);
    assert_true(tu_contains(weft_last_error(), "is not a device"));
  }
  assert_int_equal(weft_device_parse(NULL, &d), WEFT_EINVAL);
  assert_int_equal(weft_device_parse("cpu", NULL), WEFT_EINVAL);

  /* A CPU-only runtime: one CPU, no GPU, and the fallbacks of the reference notes. */
  assert_int_equal(weft_device_count(f->rt, WEFT_DEVICE_CPU), 1);
  assert_int_equal(weft_device_count(f->rt, WEFT_DEVICE_CUDA), 0);
  assert_int_equal(weft_device_count(f->rt, 7), 0);
  assert_true(weft_device_exists(f->rt, weft_cpu()));
  assert_false(weft_device_exists(f->rt, (weft_device){WEFT_DEVICE_CPU, 1}));
  assert_false(weft_device_exists(f->rt, weft_cuda(0)));
  assert_false(weft_device_exists(f->rt, (weft_device){9, 0}));
  assert_true(weft_device_equal(weft_try_gpu(f->rt, 0), weft_cpu()));
  assert_true(weft_device_equal(weft_try_gpu(f->rt, 5), weft_cpu()));
  weft_device all[4] = {{9, 9}, {9, 9}, {9, 9}, {9, 9}};
  assert_int_equal(weft_all_gpus(f->rt, all, 4), 1);
  assert_true(weft_device_equal(all[0], weft_cpu()));
  assert_int_equal(all[1].kind, 9);
  assert_int_equal(weft_all_gpus(f->rt, NULL, 0), 1);
  weft_device_info info;
  CHECK(weft_device_info_get(f->rt, weft_cpu(), &info));
  assert_true(weft_device_equal(info.device, weft_cpu()));
  assert_true(info.multiprocessors >= 1);
  assert_true(info.memory_bytes > 0);
  assert_true(strlen(info.name) > 0);
  assert_int_equal(info.simulated, 0);
  assert_int_equal(weft_device_info_get(f->rt, weft_cuda(0), &info), WEFT_EDEVICE);
  assert_true(tu_contains(weft_last_error(), "cuda:0"));
  assert_int_equal(weft_device_info_get(f->rt, weft_cpu(), NULL), WEFT_EINVAL);
  assert_int_equal(weft_device_can_access_peer(f->rt, weft_cuda(0), weft_cuda(1)), 0);
  assert_int_equal(weft_device_can_access_peer(f->rt, weft_cpu(), weft_cpu()), 0);
  assert_true(weft_runtime_cpu_workers(f->rt) == 2);
  assert_ptr_equal(weft_graph_runtime(f->g), f->rt);
}

static void dtypes(void **state) {
  (void)state;
  assert_int_equal(weft_dtype_size(WEFT_F32), 4);
  assert_int_equal(weft_dtype_size(WEFT_F64), 8);
  assert_int_equal(weft_dtype_size((weft_dtype)9), 0);
  assert_string_equal(weft_dtype_name(WEFT_F32), "f32");
  assert_string_equal(weft_dtype_name(WEFT_F64), "f64");
  assert_string_equal(weft_dtype_name((weft_dtype)9), "?");
}

/* ---- tensors ------------------------------------------------------------------------------ */

static void tensor_create_validation(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *t = NULL;
  int64_t shape[5] = {2, 3, 4, 5, 6};
  assert_int_equal(weft_tensor_create(g, "bad", (weft_dtype)7, 1, shape, weft_cpu(), weft_zeros(), &t),
                   WEFT_EDTYPE);
  assert_true(tu_contains(weft_last_error(), "tensor 'bad': unknown dtype 7"));
  assert_int_equal(weft_tensor_create(g, "big", WEFT_F32, 5, shape, weft_cpu(), weft_zeros(), &t),
                   WEFT_ESHAPE);
  assert_true(tu_contains(weft_last_error(), "tensor 'big': 5 dimensions (at most 4)"));
  assert_int_equal(weft_tensor_create(g, "neg", WEFT_F32, -1, shape, weft_cpu(), weft_zeros(), &t),
                   WEFT_ESHAPE);
  assert_int_equal(weft_tensor_create(g, "nul", WEFT_F32, 2, NULL, weft_cpu(), weft_zeros(), &t),
                   WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "shape is NULL"));
  int64_t negdim[2] = {3, -4};
  assert_int_equal(weft_tensor_create(g, "nd", WEFT_F64, 2, negdim, weft_cpu(), weft_zeros(), &t),
                   WEFT_ESHAPE);
  assert_true(tu_contains(weft_last_error(), "tensor 'nd': dimension 1 is negative (-4)"));
  int64_t huge[3] = {INT64_C(1) << 30, INT64_C(1) << 30, INT64_C(1) << 30};
  assert_int_equal(weft_tensor_create(g, "huge", WEFT_F64, 3, huge, weft_cpu(), weft_zeros(), &t),
                   WEFT_ESHAPE);
  assert_true(tu_contains(weft_last_error(), "too many elements"));
  assert_int_equal(weft_tensor_create(g, "gpu", WEFT_F32, 1, shape, weft_cuda(0), weft_zeros(), &t),
                   WEFT_EDEVICE);
  assert_true(tu_contains(weft_last_error(), "tensor 'gpu': the runtime has no device cuda:0"));
  assert_int_equal(weft_tensor_create(g, "cpu1", WEFT_F32, 1, shape, (weft_device){WEFT_DEVICE_CPU, 1},
                                      weft_zeros(), &t),
                   WEFT_EDEVICE);
  assert_int_equal(weft_tensor_create(g, "odd", WEFT_F32, 1, shape, (weft_device){5, 0}, weft_zeros(), &t),
                   WEFT_EDEVICE);
  assert_int_equal(weft_tensor_create(g, "u", WEFT_F32, 1, shape, weft_cpu(), weft_uniform(1, 0, 3), &t),
                   WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "uniform(1, 0)"));
  assert_int_equal(weft_tensor_create(g, "n", WEFT_F32, 1, shape, weft_cpu(), weft_normal(0, -1, 3), &t),
                   WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "standard deviation is negative"));
  weft_init weird = {42, 0, 0, 0};
  assert_int_equal(weft_tensor_create(g, "k", WEFT_F32, 1, shape, weft_cpu(), weird, &t), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "unknown initialiser kind 42"));
  assert_int_equal(weft_tensor_create(NULL, "x", WEFT_F32, 1, shape, weft_cpu(), weft_zeros(), &t),
                   WEFT_EINVAL);
  assert_int_equal(weft_tensor_create(g, "x", WEFT_F32, 1, shape, weft_cpu(), weft_zeros(), NULL),
                   WEFT_EINVAL);
  assert_null(t); /* never written on failure */
  ASSERT_UNCHANGED(g, 0, 0);
  /* uniform(a, a) and normal(m, 0) are degenerate but valid. */
  CHECK(weft_tensor_create(g, "ua", WEFT_F32, 1, shape, weft_cpu(), weft_uniform(2, 2, 1), &t));
  CHECK(weft_tensor_create(g, "n0", WEFT_F32, 1, shape, weft_cpu(), weft_normal(2, 0, 1), &t));
  ASSERT_UNCHANGED(g, 0, 2);
}

static void tensor_introspection(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  int64_t shape[4] = {2, 3, 4, 5};
  weft_tensor *a = tu_tensor(g, "alpha", WEFT_F64, 4, shape, weft_uniform(-2, 3, 77));
  assert_int_equal(weft_tensor_dtype(a), WEFT_F64);
  assert_int_equal(weft_tensor_ndim(a), 4);
  for (int i = 0; i < 4; i++) assert_int_equal(weft_tensor_dim(a, i), shape[i]);
  assert_int_equal(weft_tensor_dim(a, 4), 0);
  assert_int_equal(weft_tensor_dim(a, -1), 0);
  assert_int_equal(weft_tensor_numel(a), 120);
  assert_int_equal(weft_tensor_bytes(a), 960);
  assert_true(weft_device_equal(weft_tensor_device(a), weft_cpu()));
  assert_string_equal(weft_tensor_name(a), "alpha");
  assert_int_equal(weft_tensor_id(a), 0);
  assert_ptr_equal(weft_tensor_graph(a), g);
  weft_init in = weft_tensor_init(a);
  assert_int_equal(in.kind, WEFT_INIT_UNIFORM);
  assert_true(in.a == -2 && in.b == 3 && in.seed == 77);
  assert_true(weft_tensor_is_kept(a)); /* created tensors are always kept */

  weft_tensor *s = tu_tensor(g, NULL, WEFT_F32, 0, NULL, weft_full(2.5)); /* 0-D */
  assert_int_equal(weft_tensor_ndim(s), 0);
  assert_int_equal(weft_tensor_numel(s), 1);
  assert_int_equal(weft_tensor_bytes(s), 4);
  assert_string_equal(weft_tensor_name(s), "t1"); /* default name: t<id> */
  double v;
  CHECK(weft_tensor_get(s, 0, &v));
  assert_true(v == 2.5);

  weft_tensor *z = tu_tensor(g, "empty", WEFT_F32, 2, (int64_t[]){3, 0}, weft_ones());
  assert_int_equal(weft_tensor_numel(z), 0);
  assert_int_equal(weft_tensor_bytes(z), 0);
  CHECK(weft_tensor_read(z, NULL, 0));
  CHECK(weft_tensor_write(z, NULL, 0));
  assert_int_equal(weft_tensor_get(z, 0, &v), WEFT_EINVAL);

  CHECK(weft_tensor_set_name(s, "scalar"));
  assert_string_equal(weft_tensor_name(s), "scalar");
  assert_int_equal(weft_tensor_set_name(s, NULL), WEFT_EINVAL);
  assert_int_equal(weft_tensor_set_name(NULL, "x"), WEFT_EINVAL);
  assert_int_equal(weft_graph_tensor_count(g), 3);
  assert_ptr_equal(weft_graph_tensor(g, 1), s);
  assert_null(weft_graph_tensor(g, 3));
  assert_ptr_equal(weft_graph_find_tensor(g, "scalar"), s);
  assert_ptr_equal(weft_graph_find_tensor(g, "alpha"), a);
  assert_null(weft_graph_find_tensor(g, "t1")); /* renamed */
  assert_null(weft_graph_find_tensor(g, "nope"));
  assert_null(weft_graph_find_tensor(g, NULL));
  weft_tensor *dup = tu_tensor(g, "alpha", WEFT_F32, 1, (int64_t[]){1}, weft_zeros());
  assert_ptr_equal(weft_graph_find_tensor(g, "alpha"), a); /* the first of that name */
  assert_ptr_not_equal(dup, a);
  weft_tensor *auto_named = tu_tensor(g, NULL, WEFT_F32, 1, (int64_t[]){1}, weft_zeros());
  assert_ptr_equal(weft_graph_find_tensor(g, "t4"), auto_named);

  /* Contents round-trip through write/read/get, in both dtypes. */
  double vals[120], back[120];
  for (int i = 0; i < 120; i++) vals[i] = i * 0.5 - 7;
  tu_write_doubles(a, vals);
  tu_read_doubles(a, back);
  assert_memory_equal(vals, back, sizeof vals);
  CHECK(weft_tensor_get(a, 119, &v));
  assert_true(v == vals[119]);
  assert_int_equal(weft_tensor_get(a, 120, &v), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "index 120 out of range for tensor alpha (120 elements)"));
  assert_int_equal(weft_tensor_get(a, -1, &v), WEFT_EINVAL);
  assert_int_equal(weft_tensor_get(a, 0, NULL), WEFT_EINVAL);
  char small[8];
  assert_int_equal(weft_tensor_read(a, small, sizeof small), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "tensor alpha holds 960 bytes but the buffer has 8"));
  assert_int_equal(weft_tensor_write(a, small, sizeof small), WEFT_EINVAL);
  assert_int_equal(weft_tensor_read(a, NULL, 960), WEFT_EINVAL);
  assert_int_equal(weft_tensor_write(a, NULL, 960), WEFT_EINVAL);
  assert_int_equal(weft_tensor_read(NULL, small, 8), WEFT_EINVAL);
}

/* A tensor's creation initialiser is applied once, when its storage appears: the same seed
 * gives the same values, f32 is the f64 value rounded once. */
static void creation_initialisers(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  int64_t n[1] = {1000};
  weft_tensor *u1 = tu_tensor(g, "u1", WEFT_F64, 1, n, weft_uniform(-3, 5, 11));
  weft_tensor *u2 = tu_tensor(g, "u2", WEFT_F64, 1, n, weft_uniform(-3, 5, 11));
  weft_tensor *u3 = tu_tensor(g, "u3", WEFT_F64, 1, n, weft_uniform(-3, 5, 12));
  weft_tensor *u4 = tu_tensor(g, "u4", WEFT_F32, 1, n, weft_uniform(-3, 5, 11));
  weft_tensor *fu = tu_tensor(g, "full", WEFT_F32, 1, n, weft_full(-1.25));
  weft_tensor *on = tu_tensor(g, "one", WEFT_F64, 1, n, weft_ones());
  weft_tensor *ze = tu_tensor(g, "zero", WEFT_F32, 1, n, weft_zeros());
  static double a[1000], b[1000], c[1000], d[1000], e[1000];
  tu_read_doubles(u1, a);
  tu_read_doubles(u2, b);
  tu_read_doubles(u3, c);
  tu_read_doubles(u4, d);
  assert_memory_equal(a, b, sizeof a);
  int same = 0;
  for (int i = 0; i < 1000; i++) {
    assert_true(a[i] >= -3 && a[i] < 5);
    same += a[i] == c[i];
    assert_true(d[i] == (double)(float)a[i]);
  }
  assert_true(same < 2);
  tu_read_doubles(fu, e);
  for (int i = 0; i < 1000; i++) assert_true(e[i] == -1.25);
  tu_read_doubles(on, e);
  for (int i = 0; i < 1000; i++) assert_true(e[i] == 1.0);
  tu_read_doubles(ze, e);
  for (int i = 0; i < 1000; i++) assert_true(e[i] == 0.0);
  /* Contents persist: a write is not undone by a run. */
  double w[1000];
  for (int i = 0; i < 1000; i++) w[i] = i;
  tu_write_doubles(u1, w);
  CHECK(weft_graph_run(g));
  tu_read_doubles(u1, a);
  assert_memory_equal(a, w, sizeof w);
}

/* ---- ops ---------------------------------------------------------------------------------- */

/* Asserts that `call` fails with `status`, leaves the graph as it was, and says `msg`. */
#define EXPECT_FAIL(g, status, msg, call)                                      \
  do {                                                                         \
    size_t n0_ = weft_graph_node_count(g), t0_ = weft_graph_tensor_count(g); \
    assert_int_equal((call), (status));                                        \
    assert_true(tu_contains(weft_last_error(), (msg)));                        \
    ASSERT_UNCHANGED(g, n0_, t0_);                                             \
  } while (0)

static void mm_rules(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a = mat(g, "a", WEFT_F32, 2, 3), *b = mat(g, "b", WEFT_F32, 3, 4);
  weft_tensor *bad = mat(g, "bad", WEFT_F32, 4, 4), *d = mat(g, "d", WEFT_F64, 3, 4);
  weft_tensor *v = vec(g, "v", WEFT_F32, 3), *out = NULL;
  EXPECT_FAIL(g, WEFT_ESHAPE, "node 0 'mm': inner dimensions differ: a (a) is [2,3], b (bad) is [4,4]",
              weft_mm(g, a, bad, &out));
  EXPECT_FAIL(g, WEFT_ESHAPE, "node 0 'mm': operands must be 2-D matrices, got a (a) [2,3] and b (v) [3]",
              weft_mm(g, a, v, &out));
  EXPECT_FAIL(g, WEFT_EDTYPE, "node 0 'mm': a (a) is f32 but b (d) is f64", weft_mm(g, a, d, &out));
  EXPECT_FAIL(g, WEFT_EINVAL, "node 0 'mm': argument b is NULL", weft_mm(g, a, NULL, &out));
  EXPECT_FAIL(g, WEFT_EINVAL, "node 0 'mm': the out pointer is NULL", weft_mm(g, a, b, NULL));
  EXPECT_FAIL(g, WEFT_EINVAL, "graph is NULL", weft_mm(NULL, a, b, &out));
  weft_tensor *wrong = mat(g, "wrong", WEFT_F32, 2, 3), *wrongdt = mat(g, "wdt", WEFT_F64, 2, 4);
  out = wrong;
  EXPECT_FAIL(g, WEFT_ESHAPE, "node 0 'mm': result wrong has shape [2,3] but the op produces [2,4]",
              weft_mm(g, a, b, &out));
  assert_ptr_equal(out, wrong); /* untouched on failure */
  out = wrongdt;
  EXPECT_FAIL(g, WEFT_EDTYPE, "node 0 'mm': result wdt is f64 but the op produces f32",
              weft_mm(g, a, b, &out));
  assert_null(weft_graph_last_node(g));
  out = NULL;
  CHECK(weft_mm(g, a, b, &out));
  assert_int_equal(weft_tensor_ndim(out), 2);
  assert_int_equal(weft_tensor_dim(out, 0), 2);
  assert_int_equal(weft_tensor_dim(out, 1), 4);
  assert_int_equal(weft_tensor_dtype(out), WEFT_F32);
  weft_node *n = weft_graph_last_node(g);
  assert_string_equal(weft_node_op_name(n), "mm");
  assert_int_equal(weft_node_nargs(n), 3);
  weft_access m;
  assert_ptr_equal(weft_node_arg(n, 0, &m), a);
  assert_int_equal(m, WEFT_READ);
  assert_ptr_equal(weft_node_arg(n, 1, &m), b);
  assert_int_equal(m, WEFT_READ);
  assert_ptr_equal(weft_node_arg(n, 2, &m), out);
  assert_int_equal(m, WEFT_WRITE);
  assert_null(weft_node_arg(n, 3, &m));
  assert_null(weft_node_arg(n, -1, NULL));
  /* Errors name the node the call would add: now node 1. */
  out = NULL;
  EXPECT_FAIL(g, WEFT_ESHAPE, "node 1 'mm'", weft_mm(g, b, a, &out));
  /* A tensor of another graph. */
  weft_graph *g2;
  CHECK(weft_graph_create(f->rt, &g2));
  weft_tensor *other = mat(g2, "other", WEFT_F32, 3, 4);
  EXPECT_FAIL(g, WEFT_EINVAL, "node 1 'mm': argument b (other) belongs to another graph",
              weft_mm(g, a, other, &out));
  weft_graph_destroy(g2);
  /* A result too large to exist is refused naming the node. */
  weft_tensor *tall = tu_tensor(g, "tall", WEFT_F32, 2, (int64_t[]){INT64_C(1) << 40, 1}, weft_zeros());
  weft_tensor *wide = tu_tensor(g, "wide", WEFT_F32, 2, (int64_t[]){1, INT64_C(1) << 40}, weft_zeros());
  out = NULL;
  EXPECT_FAIL(g, WEFT_ESHAPE, "node 1 'mm': the result [1099511627776,1099511627776] has too many elements",
              weft_mm(g, tall, wide, &out));
  /* In place: a [3,3] . s [3,3] into a. */
  weft_tensor *sq = mat(g, "sq", WEFT_F64, 3, 3), *sq2 = mat(g, "sq2", WEFT_F64, 3, 3);
  out = sq;
  CHECK(weft_mm(g, sq, sq2, &out));
  assert_ptr_equal(out, sq);
  n = weft_graph_last_node(g);
  assert_ptr_equal(weft_node_arg(n, 0, NULL), sq);
  assert_ptr_equal(weft_node_arg(n, 2, &m), sq);
  assert_int_equal(m, WEFT_WRITE);
}

static void elementwise_rules(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a = mat(g, "a", WEFT_F32, 2, 3), *b = mat(g, "b", WEFT_F32, 2, 3);
  weft_tensor *c = mat(g, "c", WEFT_F32, 3, 2), *d = mat(g, "d", WEFT_F64, 2, 3);
  weft_tensor *v = vec(g, "v", WEFT_F32, 6), *out = NULL;
  static const char *const names[3] = {"add", "sub", "mul"};
  int (*fns[3])(weft_graph *, weft_tensor *, weft_tensor *, weft_tensor **) = {weft_add, weft_sub,
                                                                               weft_mul};
  for (int k = 0; k < 3; k++) {
    char msg[128];
    size_t id = weft_graph_node_count(g);
    out = NULL;
    snprintf(msg, sizeof msg, "node %zu '%s': shapes differ: a (a) is [2,3], b (c) is [3,2]", id, names[k]);
    EXPECT_FAIL(g, WEFT_ESHAPE, msg, fns[k](g, a, c, &out));
    snprintf(msg, sizeof msg, "node %zu '%s': shapes differ: a (a) is [2,3], b (v) is [6]", id, names[k]);
    EXPECT_FAIL(g, WEFT_ESHAPE, msg, fns[k](g, a, v, &out));
    snprintf(msg, sizeof msg, "node %zu '%s': a (a) is f32 but b (d) is f64", id, names[k]);
    EXPECT_FAIL(g, WEFT_EDTYPE, msg, fns[k](g, a, d, &out));
    snprintf(msg, sizeof msg, "weft_%s: graph is NULL", names[k]);
    EXPECT_FAIL(g, WEFT_EINVAL, msg, fns[k](NULL, a, b, &out));
    out = c;
    snprintf(msg, sizeof msg, "node %zu '%s': result c has shape [3,2] but the op produces [2,3]", id, names[k]);
    EXPECT_FAIL(g, WEFT_ESHAPE, msg, fns[k](g, a, b, &out));
    out = NULL;
    CHECK(fns[k](g, a, b, &out));
    assert_string_equal(weft_node_op_name(weft_graph_last_node(g)), names[k]);
    assert_true(weft_tensor_ndim(out) == 2 && weft_tensor_dim(out, 1) == 3);
    /* In place into either input, and a op a. */
    weft_tensor *o2 = b;
    CHECK(fns[k](g, a, b, &o2));
    assert_ptr_equal(o2, b);
    o2 = a;
    CHECK(fns[k](g, a, a, &o2));
    weft_node *n = weft_graph_last_node(g);
    assert_int_equal(weft_node_nargs(n), 3);
    assert_ptr_equal(weft_node_arg(n, 0, NULL), a);
    assert_ptr_equal(weft_node_arg(n, 1, NULL), a);
    assert_ptr_equal(weft_node_arg(n, 2, NULL), a);
  }
  /* scale and relu keep shape and dtype; scale records alpha. */
  weft_tensor *x4 = tu_tensor(g, "x4", WEFT_F64, 4, (int64_t[]){1, 2, 1, 3}, weft_ones());
  out = NULL;
  CHECK(weft_scale(g, x4, -0.75, &out));
  assert_int_equal(weft_tensor_ndim(out), 4);
  assert_int_equal(weft_tensor_dtype(out), WEFT_F64);
  assert_true(weft_node_alpha(weft_graph_last_node(g)) == -0.75);
  assert_string_equal(weft_node_op_name(weft_graph_last_node(g)), "scale");
  out = a;
  EXPECT_FAIL(g, WEFT_EDTYPE, "'scale': result a is f32 but the op produces f64", weft_scale(g, x4, 2, &out));
  out = x4;
  CHECK(weft_relu(g, x4, &out));
  assert_string_equal(weft_node_op_name(weft_graph_last_node(g)), "relu");
  EXPECT_FAIL(g, WEFT_EINVAL, "'relu': argument x is NULL", weft_relu(g, NULL, &out));
  EXPECT_FAIL(g, WEFT_EINVAL, "'relu': the out pointer is NULL", weft_relu(g, x4, NULL));
}

/* What few nodes and tensors have (a factor, an initialiser, a name, an origin) reads as its
 * default on one without it, and as set on one with it; a factor of -0 is a factor, whose sign
 * reaches the results. */
static void node_rare_fields(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = tu_tensor(g, "x", WEFT_F32, 1, (int64_t[]){4}, weft_ones());
  weft_tensor *s = NULL, *z = NULL, *p = NULL;
  CHECK(weft_add(g, x, x, &s));
  weft_node *add = weft_graph_last_node(g);
  assert_true(weft_node_alpha(add) == 0 && !signbit(weft_node_alpha(add)));
  assert_int_equal(weft_node_fill_init(add).kind, ((weft_init){0}).kind);
  /* (names and origins themselves: node_introspection) */
  CHECK(weft_node_set_name(add, "twice"));
  assert_true(weft_node_alpha(add) == 0); /* the record made for the name holds the defaults */
  assert_int_equal(weft_node_fill_init(add).kind, ((weft_init){0}).kind);
  CHECK(weft_scale(g, x, -0.0, &z));
  assert_true(signbit(weft_node_alpha(weft_graph_last_node(g))));
  CHECK(weft_scale(g, x, 0.0, &p));
  assert_true(weft_node_alpha(weft_graph_last_node(g)) == 0 && !signbit(weft_node_alpha(weft_graph_last_node(g))));
  weft_tensor *y = tu_tensor(g, "y", WEFT_F32, 1, (int64_t[]){4}, weft_zeros());
  CHECK(weft_fill(g, y, weft_full(2.5)));
  assert_int_equal(weft_node_fill_init(weft_graph_last_node(g)).kind, weft_full(2.5).kind);
  assert_true(weft_node_fill_init(weft_graph_last_node(g)).a == 2.5);
  /* A tensor of zeros with no name has no record (tensor_introspection covers the rest). */
  weft_tensor *u = tu_tensor(g, NULL, WEFT_F32, 1, (int64_t[]){2}, weft_zeros());
  weft_init ui = weft_tensor_init(u);
  assert_true(ui.kind == WEFT_INIT_ZEROS && ui.a == 0 && ui.b == 0 && ui.seed == 0);
  char expect[16];
  snprintf(expect, sizeof expect, "t%u", (unsigned)weft_tensor_id(u));
  assert_string_equal(weft_tensor_name(u), expect);
  CHECK(weft_tensor_set_name(u, "later"));
  assert_string_equal(weft_tensor_name(u), "later");
  assert_int_equal(weft_tensor_init(u).kind, WEFT_INIT_ZEROS);
  CHECK(weft_graph_run(g));
  float vz[4], vp[4], vy[4];
  CHECK(weft_tensor_read(z, vz, sizeof vz));
  CHECK(weft_tensor_read(p, vp, sizeof vp));
  CHECK(weft_tensor_read(y, vy, sizeof vy));
  for (int i = 0; i < 4; i++) {
    assert_true(vz[i] == 0 && signbit(vz[i]));
    assert_true(vp[i] == 0 && !signbit(vp[i]));
    assert_true(vy[i] == 2.5f);
  }
}

static void reduction_rules(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a = mat(g, "a", WEFT_F64, 2, 3), *out = NULL;
  CHECK(weft_sum(g, a, &out));
  assert_int_equal(weft_tensor_ndim(out), 0);
  assert_int_equal(weft_tensor_dtype(out), WEFT_F64);
  assert_string_equal(weft_node_op_name(weft_graph_last_node(g)), "sum");
  weft_tensor *s0 = out;
  out = NULL;
  CHECK(weft_norm(g, a, &out));
  assert_int_equal(weft_tensor_ndim(out), 0);
  assert_string_equal(weft_node_op_name(weft_graph_last_node(g)), "norm");
  /* Into an existing scalar, itself included (sum of a scalar into itself). */
  CHECK(weft_sum(g, a, &s0));
  CHECK(weft_norm(g, s0, &s0));
  weft_tensor *v = vec(g, "v", WEFT_F64, 1), *sf = tu_tensor(g, "sf", WEFT_F32, 0, NULL, weft_zeros());
  out = v;
  EXPECT_FAIL(g, WEFT_ESHAPE, "'sum': result v has shape [1] but the op produces []", weft_sum(g, a, &out));
  out = sf;
  EXPECT_FAIL(g, WEFT_EDTYPE, "'norm': result sf is f32 but the op produces f64", weft_norm(g, a, &out));
}

static void linear_rules(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *x = mat(g, "x", WEFT_F32, 5, 3), *w = mat(g, "w", WEFT_F32, 4, 3);
  weft_tensor *b = vec(g, "b", WEFT_F32, 4), *out = NULL;
  weft_tensor *wt = mat(g, "wt", WEFT_F32, 3, 4), *b3 = vec(g, "b3", WEFT_F32, 3);
  weft_tensor *bd = vec(g, "bd", WEFT_F64, 4), *wd = mat(g, "wd", WEFT_F64, 4, 3);
  weft_tensor *v = vec(g, "v", WEFT_F32, 3);
  EXPECT_FAIL(g, WEFT_ESHAPE, "node 0 'linear': x (x) is [5,3] but w (wt) is [3,4]; w must be [out, 3]",
              weft_linear(g, x, wt, b, &out));
  EXPECT_FAIL(g, WEFT_ESHAPE, "node 0 'linear': bias (b3) is [3] but must be [4]",
              weft_linear(g, x, w, b3, &out));
  EXPECT_FAIL(g, WEFT_ESHAPE, "node 0 'linear': x (v) [3] and w (w) [4,3] must be 2-D",
              weft_linear(g, v, w, b, &out));
  EXPECT_FAIL(g, WEFT_EDTYPE, "node 0 'linear': x (x) is f32 but w (wd) is f64",
              weft_linear(g, x, wd, NULL, &out));
  EXPECT_FAIL(g, WEFT_EDTYPE, "node 0 'linear': x (x) is f32 but b (bd) is f64",
              weft_linear(g, x, w, bd, &out));
  EXPECT_FAIL(g, WEFT_EINVAL, "node 0 'linear': argument w is NULL", weft_linear(g, x, NULL, b, &out));
  CHECK(weft_linear(g, x, w, b, &out));
  assert_int_equal(weft_tensor_dim(out, 0), 5);
  assert_int_equal(weft_tensor_dim(out, 1), 4);
  weft_node *n = weft_graph_last_node(g);
  assert_int_equal(weft_node_nargs(n), 4);
  assert_ptr_equal(weft_node_arg(n, 2, NULL), b);
  assert_ptr_equal(weft_node_arg(n, 3, NULL), out);
  out = NULL;
  CHECK(weft_linear(g, x, w, NULL, &out)); /* no bias: x, w, out */
  assert_int_equal(weft_node_nargs(weft_graph_last_node(g)), 3);
  /* In place: x [5,3] . w3[3,3]^T into x. */
  weft_tensor *w3 = mat(g, "w3", WEFT_F32, 3, 3);
  out = x;
  CHECK(weft_linear(g, x, w3, b3, &out));
  assert_ptr_equal(out, x);
}

static void copy_and_fill_rules(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a = mat(g, "a", WEFT_F32, 2, 3), *out = NULL;
  CHECK(weft_copy(g, a, weft_cpu(), &out));
  assert_ptr_not_equal(out, a);
  assert_int_equal(weft_tensor_dim(out, 1), 3);
  weft_node *n = weft_graph_last_node(g);
  assert_string_equal(weft_node_op_name(n), "copy");
  assert_true(weft_device_equal(weft_node_device(n), weft_cpu()));
  assert_int_equal(weft_node_is_inserted(n), 0);
  weft_tensor *into = mat(g, "into", WEFT_F32, 2, 3);
  out = into;
  CHECK(weft_copy(g, a, weft_cuda(5), &out)); /* into an existing tensor: the device is ignored */
  assert_ptr_equal(out, into);
  out = a;
  CHECK(weft_copy(g, a, weft_cpu(), &out)); /* onto itself */
  out = NULL;
  EXPECT_FAIL(g, WEFT_EDEVICE, "'copy': the runtime has no device cuda:0", weft_copy(g, a, weft_cuda(0), &out));
  weft_tensor *wrong = mat(g, "wrong", WEFT_F32, 3, 2);
  out = wrong;
  EXPECT_FAIL(g, WEFT_ESHAPE, "'copy': result wrong has shape [3,2] but the op produces [2,3]",
              weft_copy(g, a, weft_cpu(), &out));
  EXPECT_FAIL(g, WEFT_EINVAL, "'copy': the out pointer is NULL", weft_copy(g, a, weft_cpu(), NULL));
  EXPECT_FAIL(g, WEFT_EINVAL, "'copy': argument src is NULL", weft_copy(g, NULL, weft_cpu(), &out));

  CHECK(weft_fill(g, a, weft_normal(1, 2, 99)));
  n = weft_graph_last_node(g);
  assert_string_equal(weft_node_op_name(n), "fill");
  assert_int_equal(weft_node_nargs(n), 1);
  weft_access m;
  assert_ptr_equal(weft_node_arg(n, 0, &m), a);
  assert_int_equal(m, WEFT_WRITE);
  weft_init in = weft_node_fill_init(n);
  assert_true(in.kind == WEFT_INIT_NORMAL && in.a == 1 && in.b == 2 && in.seed == 99);
  size_t id = weft_graph_node_count(g);
  char msg[96];
  snprintf(msg, sizeof msg, "node %zu 'fill': invalid initialiser", id);
  EXPECT_FAIL(g, WEFT_EINVAL, msg, weft_fill(g, a, weft_uniform(2, 1, 0)));
  EXPECT_FAIL(g, WEFT_EINVAL, msg, weft_fill(g, a, weft_normal(0, -1, 0)));
  EXPECT_FAIL(g, WEFT_EINVAL, msg, weft_fill(g, a, (weft_init){-1, 0, 0, 0}));
  EXPECT_FAIL(g, WEFT_EINVAL, "argument t is NULL", weft_fill(g, NULL, weft_zeros()));
  EXPECT_FAIL(g, WEFT_EINVAL, "weft_fill: graph is NULL", weft_fill(NULL, a, weft_zeros()));
}

/* ---- user ops ----------------------------------------------------------------------------- */

static int noop_kernel(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}

static void op_registration(void **state) {
  tu_fixture *f = *state;
  weft_op_desc d;
  memset(&d, 0, sizeof d);
  d.name = "scale_rows";
  d.nargs = 2;
  d.access[0] = WEFT_READ;
  d.access[1] = WEFT_READ_WRITE;
  d.cpu = noop_kernel;
  const weft_op *op = NULL;
  CHECK(weft_op_register(f->rt, &d, &op));
  assert_non_null(op);
  assert_string_equal(weft_op_name(op), "scale_rows");
  assert_ptr_equal(weft_op_find(f->rt, "scale_rows"), op);
  assert_null(weft_op_find(f->rt, "scale_cols"));
  assert_null(weft_op_find(f->rt, NULL));
  assert_null(weft_op_find(NULL, "scale_rows"));
  assert_int_equal(weft_op_register(f->rt, &d, &op), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "an op named 'scale_rows' is already registered"));
  d.name = "mm";
  assert_int_equal(weft_op_register(f->rt, &d, NULL), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "'mm' is the name of a built-in op"));
  const char *bad_names[] = {"", "9lives", "has space", "dash-name", "dot.name"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    d.name = bad_names[i];
    assert_int_equal(weft_op_register(f->rt, &d, NULL), WEFT_EINVAL);
    assert_true(tu_contains(weft_last_error(), "is not a valid op name"));
  }
  d.name = NULL;
  assert_int_equal(weft_op_register(f->rt, &d, NULL), WEFT_EINVAL);
  d.name = "_ok_9";
  d.nargs = WEFT_MAX_ARGS + 1;
  assert_int_equal(weft_op_register(f->rt, &d, NULL), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "has 17 arguments (0..16)"));
  d.nargs = -1;
  assert_int_equal(weft_op_register(f->rt, &d, NULL), WEFT_EINVAL);
  d.nargs = 2;
  d.access[1] = (weft_access)4;
  assert_int_equal(weft_op_register(f->rt, &d, NULL), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "argument 1 has access mode 4"));
  d.access[1] = (weft_access)0;
  assert_int_equal(weft_op_register(f->rt, &d, NULL), WEFT_EINVAL);
  d.access[1] = WEFT_WRITE;
  d.cpu = NULL;
  assert_int_equal(weft_op_register(f->rt, &d, NULL), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "op '_ok_9' has no kernel"));
  assert_int_equal(weft_op_register(NULL, &d, NULL), WEFT_EINVAL);
  assert_int_equal(weft_op_register(f->rt, NULL, NULL), WEFT_EINVAL);
  assert_null(weft_op_find(f->rt, "_ok_9")); /* nothing registered by the failures */
  d.cpu = noop_kernel;
  CHECK(weft_op_register(f->rt, &d, NULL)); /* out may be NULL */
  assert_non_null(weft_op_find(f->rt, "_ok_9"));
}

/* An op with `rest` takes any number of arguments past its listed ones, each with that mode:
 * one written output and 64 inputs (Task Bench's all_to_all at width 64) gives 64 RAW edges. */
static void variadic_user_calls(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  const weft_op *op = tu_op_gather(f->rt, "gather", noop_kernel);
  weft_op_desc d = tu_op_desc("bad_rest", 1, (weft_access[]){WEFT_WRITE}, noop_kernel, NULL, NULL);
  d.rest = (weft_access)5;
  assert_int_equal(weft_op_register(f->rt, &d, NULL), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "op 'bad_rest' has rest access mode 5"));
  enum { W = 64 };
  weft_tensor *in[W], *args[W + 1];
  for (int i = 0; i < W; i++) {
    char name[16];
    snprintf(name, sizeof name, "in%d", i);
    in[i] = vec(g, name, WEFT_F32, 4);
    CHECK(weft_fill(g, in[i], weft_full(i)));
  }
  weft_tensor *out = vec(g, "out", WEFT_F32, 4);
  args[0] = out;
  for (int i = 0; i < W; i++) args[i + 1] = in[i];
  size_t id = weft_graph_node_count(g);
  char msg[96];
  snprintf(msg, sizeof msg, "node %zu 'gather': the op takes 1 to %d arguments, got 0", id, WEFT_MAX_CALL_ARGS);
  EXPECT_FAIL(g, WEFT_EINVAL, msg, weft_call(g, op, args, 0, NULL, 0));
  CHECK(weft_call(g, op, args, 1, NULL, 0)); /* the listed argument alone */
  CHECK(weft_call(g, op, args, W + 1, NULL, 0));
  weft_node *n = weft_graph_last_node(g);
  assert_int_equal(weft_node_nargs(n), W + 1);
  weft_access m;
  assert_ptr_equal(weft_node_arg(n, 0, &m), out);
  assert_int_equal(m, WEFT_WRITE);
  assert_ptr_equal(weft_node_arg(n, W, &m), in[W - 1]);
  assert_int_equal(m, WEFT_READ);
  /* A second such call (its arguments pass through the buffer the first used) leaves the
   * first node's as they were. */
  weft_tensor *out2 = vec(g, "out2", WEFT_F32, 4), *rev[W + 1];
  rev[0] = out2;
  for (int i = 0; i < W; i++) rev[i + 1] = in[W - 1 - i];
  CHECK(weft_call(g, op, rev, W + 1, NULL, 0));
  weft_node *n2 = weft_graph_last_node(g);
  for (int i = 0; i < W; i++) {
    assert_ptr_equal(weft_node_arg(n, i + 1, NULL), in[i]);
    assert_ptr_equal(weft_node_arg(n2, i + 1, NULL), in[W - 1 - i]);
  }
  CHECK(weft_graph_analyse(g));
  int raw = 0;
  for (size_t k = 0; k < weft_graph_edge_count(g); k++) {
    weft_edge e;
    CHECK(weft_graph_edge(g, k, &e));
    raw += (e.to == n || e.to == n2) && e.hazard == WEFT_HAZARD_RAW;
  }
  assert_int_equal(raw, 2 * W);
}

static void user_calls(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  static const weft_access modes[3] = {WEFT_READ, WEFT_WRITE, WEFT_READ_WRITE};
  int user_tag = 7;
  const weft_op *op = tu_op(f->rt, "three", 3, modes, noop_kernel, &user_tag);
  weft_tensor *a = vec(g, "a", WEFT_F32, 4), *b = mat(g, "b", WEFT_F64, 2, 2);
  weft_tensor *c = tu_tensor(g, "c", WEFT_F32, 0, NULL, weft_zeros());
  weft_tensor *args[3] = {a, b, c};
  struct {
    double k;
    int tag;
  } params = {2.5, 9};
  EXPECT_FAIL(g, WEFT_EINVAL, "node 0 'three': the op takes 3 arguments, got 2", weft_call(g, op, args, 2, NULL, 0));
  EXPECT_FAIL(g, WEFT_EINVAL, "node 0 'three': args is NULL", weft_call(g, op, NULL, 3, NULL, 0));
  EXPECT_FAIL(g, WEFT_EINVAL, "node 0 'three': params is NULL with size 16", weft_call(g, op, args, 3, NULL, 16));
  EXPECT_FAIL(g, WEFT_EINVAL, "weft_call: graph or op is NULL", weft_call(g, NULL, args, 3, NULL, 0));
  weft_tensor *withnull[3] = {a, NULL, c};
  EXPECT_FAIL(g, WEFT_EINVAL, "node 0 'three': argument 1 is NULL", weft_call(g, op, withnull, 3, NULL, 0));
  /* Parameter sizes no memory holds fail cleanly. */
  EXPECT_FAIL(g, WEFT_ENOMEM, "out of host memory", weft_call(g, op, args, 3, &params, SIZE_MAX - 8));
  CHECK(weft_call(g, op, args, 3, &params, sizeof params));
  params.k = -1; /* the node keeps its own copy */
  weft_node *n = weft_graph_last_node(g);
  assert_string_equal(weft_node_op_name(n), "three");
  assert_ptr_equal(weft_node_user_op(n), op);
  assert_int_equal(weft_node_nargs(n), 3);
  for (int i = 0; i < 3; i++) {
    weft_access m;
    assert_ptr_equal(weft_node_arg(n, i, &m), args[i]);
    assert_int_equal(m, modes[i]);
  }
  size_t ps = 0;
  const double *p = weft_node_params(n, &ps);
  assert_int_equal(ps, sizeof params);
  assert_true(p[0] == 2.5);
  /* Without parameters; the same tensor twice. */
  weft_tensor *same[3] = {a, a, a};
  CHECK(weft_call(g, op, same, 3, NULL, 0));
  assert_null(weft_node_params(weft_graph_last_node(g), &ps));
  assert_int_equal(ps, 0);
  /* A built-in node has no user op. */
  weft_tensor *o = NULL;
  CHECK(weft_relu(g, a, &o));
  assert_null(weft_node_user_op(weft_graph_last_node(g)));
  /* An op with only a CUDA kernel cannot run on the CPU. */
  weft_op_desc d;
  memset(&d, 0, sizeof d);
  d.name = "gpu_only";
  d.nargs = 1;
  d.access[0] = WEFT_WRITE;
  d.cuda = noop_kernel;
  const weft_op *gop;
  CHECK(weft_op_register(f->rt, &d, &gop));
  size_t id = weft_graph_node_count(g);
  char msg[96];
  snprintf(msg, sizeof msg, "node %zu 'gpu_only': the op has no kernel for cpu", id);
  EXPECT_FAIL(g, WEFT_EDEVICE, msg, weft_call(g, gop, &a, 1, NULL, 0));
  /* Zero arguments: a node with no accesses. */
  memset(&d, 0, sizeof d);
  d.name = "nothing";
  d.cpu = noop_kernel;
  const weft_op *nop;
  CHECK(weft_op_register(f->rt, &d, &nop));
  CHECK(weft_call(g, nop, NULL, 0, NULL, 0));
  assert_int_equal(weft_node_nargs(weft_graph_last_node(g)), 0);
  CHECK(weft_graph_run(g));
}

/* ---- nodes -------------------------------------------------------------------------------- */

static void node_introspection(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  assert_null(weft_graph_last_node(g));
  assert_null(weft_graph_node(g, 0));
  weft_tensor *a = mat(g, "a", WEFT_F32, 2, 2), *y = NULL;
  CHECK(weft_add(g, a, a, &y));
  CHECK(weft_tensor_set_name(y, "y"));
  weft_node *n0 = weft_graph_last_node(g);
  assert_ptr_equal(weft_graph_node(g, 0), n0);
  assert_int_equal(weft_node_id(n0), 0);
  assert_int_equal(weft_graph_node_count(g), 1);
  char buf[200];
  assert_string_equal(weft_node_describe(n0, buf, sizeof buf), "node 0 'add' (y) on cpu");
  assert_string_equal(weft_node_name(n0), "");
  assert_string_equal(weft_node_origin(n0), "");
  CHECK(weft_node_set_name(n0, "sum_step"));
  CHECK(weft_node_set_origin(n0, "prog.weft:3:5"));
  assert_string_equal(weft_node_name(n0), "sum_step");
  assert_string_equal(weft_node_origin(n0), "prog.weft:3:5");
  assert_string_equal(weft_node_describe(n0, buf, sizeof buf),
                      "node 0 'add' \"sum_step\" on cpu at prog.weft:3:5");
  assert_string_equal(weft_node_describe(n0, buf, 8), "node 0 "); /* truncated, terminated */
  assert_int_equal(weft_node_set_name(n0, NULL), WEFT_EINVAL);
  assert_int_equal(weft_node_set_origin(NULL, "x"), WEFT_EINVAL);
  assert_true(weft_device_equal(weft_node_device(n0), weft_cpu()));
  assert_int_equal(weft_node_is_inserted(n0), 0);
  assert_null(weft_node_user_op(n0));
  /* A node's error message after a run uses the same description. */
  CHECK(weft_graph_run(g));
}

/* ---- devices: placement, copies, strict mode ---------------------------------------------- */

/* On one device, no op inserts a copy, strict or not: each call adds exactly one node. */
static void same_device_inserts_nothing(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  for (int strict = 0; strict < 2; strict++) {
    weft_graph_set_strict(g, strict);
    weft_tensor *a = mat(g, NULL, WEFT_F32, 3, 3), *b = mat(g, NULL, WEFT_F32, 3, 3);
    weft_tensor *v = vec(g, NULL, WEFT_F32, 3), *o;
    size_t before = weft_graph_node_count(g);
    o = NULL;
    CHECK(weft_mm(g, a, b, &o));
    o = NULL;
    CHECK(weft_add(g, a, b, &o));
    o = NULL;
    CHECK(weft_sub(g, a, b, &o));
    o = NULL;
    CHECK(weft_mul(g, a, b, &o));
    o = NULL;
    CHECK(weft_scale(g, a, 2, &o));
    o = NULL;
    CHECK(weft_relu(g, a, &o));
    o = NULL;
    CHECK(weft_sum(g, a, &o));
    o = NULL;
    CHECK(weft_norm(g, a, &o));
    o = NULL;
    CHECK(weft_linear(g, a, b, v, &o));
    o = NULL;
    CHECK(weft_copy(g, a, weft_cpu(), &o));
    CHECK(weft_fill(g, a, weft_zeros()));
    assert_int_equal(weft_graph_node_count(g), before + 11);
    for (size_t i = before; i < before + 11; i++) {
      weft_node *n = weft_graph_node(g, i);
      assert_int_equal(weft_node_is_inserted(n), 0);
      assert_true(weft_device_equal(weft_node_device(n), weft_cpu()));
      for (int k = 0; k < weft_node_nargs(n); k++)
        assert_true(weft_device_equal(weft_tensor_device(weft_node_arg(n, k, NULL)), weft_cpu()));
    }
  }
  CHECK(weft_graph_run(g));
}

/* With a second device — a simulated GPU that also computes, as no GPU is needed for the graph's
 * rules — an input on the other device gets a copy node inserted before the op, reused while
 * the tensor is not written, made again after a write; strict mode refuses instead; results
 * are those of the serial program. Skipped where the runtime has no simulator. */
static int sim_setup(void **state) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.simulate = "h100";
  o.cpu_workers = 2;
  o.flags = WEFT_RUNTIME_QUIET | WEFT_RUNTIME_SIM_COMPUTE;
  tu_fixture *f = calloc(1, sizeof *f);
  *state = f;
  if (weft_runtime_create(&o, &f->rt) != WEFT_OK) return 0; /* the test skips */
  CHECK(weft_graph_create(f->rt, &f->g));
  return 0;
}

static int sim_teardown(void **state) {
  tu_fixture *f = *state;
  if (f->rt == NULL) {
    free(f);
    return 0;
  }
  return tu_teardown(state);
}

static weft_tensor *on(weft_graph *g, const char *name, weft_device d, int64_t n, double v) {
  weft_tensor *t = NULL;
  CHECK(weft_tensor_create(g, name, WEFT_F64, 2, (int64_t[]){n, n}, d, weft_full(v), &t));
  return t;
}

static void copies_between_devices(void **state) {
  tu_fixture *f = *state;
  if (f->rt == NULL) skip();
  weft_graph *g = f->g;
  weft_device gpu = weft_cuda(0), cpu = weft_cpu();
  assert_true(weft_device_exists(f->rt, gpu));
  weft_tensor *a = on(g, "a", cpu, 3, 2), *w = on(g, "w", gpu, 3, 1), *o1 = NULL, *o2 = NULL, *o3 = NULL;
  CHECK(weft_mm(g, w, a, &o1)); /* runs on cuda:0 (its first input's device): a is copied */
  assert_int_equal(weft_graph_node_count(g), 2);
  weft_node *cp = weft_graph_node(g, 0), *mm = weft_graph_node(g, 1);
  assert_string_equal(weft_node_op_name(cp), "copy");
  assert_int_equal(weft_node_is_inserted(cp), 1);
  assert_int_equal(weft_node_is_inserted(mm), 0);
  weft_access m;
  assert_ptr_equal(weft_node_arg(cp, 0, &m), a);
  assert_int_equal(m, WEFT_READ);
  weft_tensor *a_gpu = weft_node_arg(cp, 1, &m);
  assert_int_equal(m, WEFT_WRITE);
  assert_string_equal(weft_tensor_name(a_gpu), "a@cuda:0");
  assert_true(weft_device_equal(weft_tensor_device(a_gpu), gpu));
  assert_true(weft_device_equal(weft_node_device(mm), gpu));
  assert_true(weft_device_equal(weft_tensor_device(o1), gpu));
  assert_ptr_equal(weft_node_arg(mm, 1, NULL), a_gpu);
  /* Used again while a is unchanged: the same copy, no new node. */
  CHECK(weft_add(g, w, a, &o2));
  assert_int_equal(weft_graph_node_count(g), 3);
  assert_ptr_equal(weft_node_arg(weft_graph_node(g, 2), 1, NULL), a_gpu);
  /* Strict mode refuses, naming the argument and both devices, and adds nothing. */
  weft_graph_set_strict(g, 1);
  weft_tensor *o4 = NULL;
  assert_int_equal(weft_mm(g, w, a, &o4), WEFT_EDEVICE);
  assert_true(tu_contains(weft_last_error(),
                          "node 3 'mm': argument b (a) lives on cpu but the node runs on cuda:0; copy it there first"));
  assert_int_equal(weft_graph_node_count(g), 3);
  weft_graph_set_strict(g, 0);
  /* A write of a makes the cached copy stale: the next use copies again. */
  CHECK(weft_fill(g, a, weft_full(5)));
  CHECK(weft_mm(g, w, a, &o3));
  weft_tensor_keep(o3); /* read below, and by a later node */
  assert_int_equal(weft_graph_node_count(g), 6);
  assert_int_equal(weft_node_is_inserted(weft_graph_node(g, 4)), 1);
  assert_ptr_not_equal(weft_node_arg(weft_graph_node(g, 5), 1, NULL), a_gpu);
  /* A result on the CPU makes the op run there: its GPU input comes over. */
  weft_tensor *hc = on(g, "hc", cpu, 3, 0);
  CHECK(weft_add(g, o3, a, &hc));
  weft_node *back = weft_graph_node(g, 6);
  assert_int_equal(weft_node_is_inserted(back), 1);
  assert_ptr_equal(weft_node_arg(back, 0, NULL), o3);
  assert_true(weft_device_equal(weft_node_device(weft_graph_node(g, 7)), cpu));
  /* An explicit round trip. */
  weft_tensor *d = NULL, *h = NULL;
  CHECK(weft_copy(g, a, gpu, &d));
  CHECK(weft_copy(g, d, cpu, &h));
  assert_int_equal(weft_node_is_inserted(weft_graph_last_node(g)), 0);
  CHECK(weft_graph_run(g));
  double v[9];
  tu_read_doubles(o1, v);
  for (int i = 0; i < 9; i++) assert_true(v[i] == 6.0); /* ones . twos */
  tu_read_doubles(o2, v);
  for (int i = 0; i < 9; i++) assert_true(v[i] == 3.0);
  tu_read_doubles(o3, v);
  for (int i = 0; i < 9; i++) assert_true(v[i] == 15.0); /* ones . fives */
  tu_read_doubles(hc, v);
  for (int i = 0; i < 9; i++) assert_true(v[i] == 20.0);
  tu_read_doubles(h, v);
  for (int i = 0; i < 9; i++) assert_true(v[i] == 5.0);
}

/* Writing into the copy weft inserted (it is a tensor like any other) makes it stale as a copy
 * of its source: a later use of the source must not read the written values. */
static void writing_an_inserted_copy(void **state) {
  tu_fixture *f = *state;
  if (f->rt == NULL) skip();
  weft_graph *g = f->g;
  weft_tensor *a = on(f->g, "a", weft_cpu(), 2, 1), *w = on(g, "w", weft_cuda(0), 2, 0);
  weft_tensor *o1 = NULL, *o2 = NULL;
  CHECK(weft_add(g, w, a, &o1)); /* inserts a@cuda:0 */
  weft_tensor *a_gpu = weft_node_arg(weft_graph_node(g, 0), 1, NULL);
  assert_string_equal(weft_tensor_name(a_gpu), "a@cuda:0");
  CHECK(weft_fill(g, a_gpu, weft_full(100)));
  CHECK(weft_add(g, w, a, &o2)); /* a is still 1 everywhere */
  CHECK(weft_graph_run(g));
  double v[4];
  tu_read_doubles(o1, v);
  for (int i = 0; i < 4; i++) assert_true(v[i] == 1.0);
  tu_read_doubles(o2, v);
  for (int i = 0; i < 4; i++) assert_true(v[i] == 1.0);
}

/* A call that fails after it inserted a copy takes the copy back out, cache included: an
 * elementwise op's result made for it, and a linear-algebra op's (gemm: its inputs go to the
 * updated operand's device). */
static void failed_call_drops_its_copy(void **state) {
  (void)state;
  tu_alloc_install(-1);
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.simulate = "h100";
  o.flags = WEFT_RUNTIME_QUIET | WEFT_RUNTIME_SIM_COMPUTE;
  weft_runtime *rt = NULL;
  if (weft_runtime_create(&o, &rt) != WEFT_OK) {
    tu_alloc_uninstall();
    skip();
  }
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *a = on(g, "a", weft_cpu(), 2, 3), *w = on(g, "w", weft_cuda(0), 2, 1), *o1 = NULL;
  int failures = 0;
  for (long at = 0;; at++) {
    tu_alloc_fail_at(at);
    int rc = weft_mm(g, w, a, &o1);
    tu_alloc_fail_at(-1);
    if (rc == WEFT_OK) break;
    assert_int_equal(rc, WEFT_ENOMEM);
    assert_null(o1);
    assert_int_equal(weft_graph_node_count(g), 0);
    assert_int_equal(weft_graph_tensor_count(g), 2);
    failures++;
  }
  assert_true(failures > 0);
  assert_int_equal(weft_graph_node_count(g), 2); /* the copy and the product */
  weft_tensor *o2 = NULL;
  CHECK(weft_add(g, w, a, &o2)); /* reuses the copy the successful call made */
  assert_int_equal(weft_graph_node_count(g), 3);
  CHECK(weft_graph_run(g));
  double v[4];
  tu_read_doubles(o1, v);
  for (int i = 0; i < 4; i++) assert_true(v[i] == 6.0);
  weft_graph *g2; /* a fresh graph: its first node's call allocates */
  CHECK(weft_graph_create(rt, &g2));
  weft_tensor *b = on(g2, "b", weft_cpu(), 2, 1), *c = on(g2, "c", weft_cuda(0), 2, 0);
  failures = 0;
  for (long at = 0;; at++) {
    tu_alloc_fail_at(at);
    int rc = weft_gemm(g2, b, 0, b, 0, 1.0, 0.0, c); /* b goes to cuda:0, once */
    tu_alloc_fail_at(-1);
    if (rc == WEFT_OK) break;
    assert_int_equal(rc, WEFT_ENOMEM);
    assert_int_equal(weft_graph_node_count(g2), 0);
    assert_int_equal(weft_graph_tensor_count(g2), 2);
    failures++;
  }
  assert_true(failures > 0);
  assert_int_equal(weft_graph_node_count(g2), 2); /* b's copy and the product */
  CHECK(weft_graph_run(g2));
  tu_read_doubles(c, v);
  for (int i = 0; i < 4; i++) assert_true(v[i] == 2.0); /* [[1,1],[1,1]] squared */
  weft_graph_destroy(g2);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  assert_int_equal(tu_alloc_live(), 0);
  tu_alloc_uninstall();
}

/* ---- temporaries and all-or-nothing calls ------------------------------------------------- */

static void temporaries_and_keep(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a = mat(g, "a", WEFT_F64, 2, 2), *t = NULL, *r = NULL, *k = NULL, *s = NULL;
  CHECK(weft_relu(g, a, &t));  /* t is read below: a temporary */
  CHECK(weft_scale(g, t, 2, &r)); /* r is never read: a result */
  CHECK(weft_relu(g, a, &k));  /* k is read below but kept */
  weft_tensor_keep(k);
  weft_tensor_keep(k); /* twice is harmless */
  weft_tensor_keep(NULL);
  CHECK(weft_add(g, k, k, &s));
  CHECK(weft_relu(g, s, &s)); /* in place: s's final value is not read by a later node */
  assert_false(weft_tensor_is_kept(t));
  assert_true(weft_tensor_is_kept(r));
  assert_true(weft_tensor_is_kept(k));
  assert_true(weft_tensor_is_kept(s));
  assert_true(weft_tensor_is_kept(a));
  double buf[4];
  /* Before any run a temporary's (initial) contents may be read. */
  CHECK(weft_tensor_read(t, buf, sizeof buf));
  CHECK(weft_graph_run(g));
  assert_int_equal(weft_tensor_read(t, buf, sizeof buf), WEFT_ESTATE);
  assert_true(tu_contains(weft_last_error(), "is a temporary"));
  double v;
  assert_int_equal(weft_tensor_get(t, 0, &v), WEFT_ESTATE);
  CHECK(weft_tensor_read(r, buf, sizeof buf));
  for (int i = 0; i < 4; i++) assert_true(buf[i] == 2.0); /* 2 * relu(1) */
  CHECK(weft_tensor_read(s, buf, sizeof buf));
  for (int i = 0; i < 4; i++) assert_true(buf[i] == 2.0);
  /* A later write of t makes its final value unread: a result again. */
  CHECK(weft_fill(g, t, weft_full(3)));
  assert_true(weft_tensor_is_kept(t));
  CHECK(weft_graph_run(g));
  CHECK(weft_tensor_read(t, buf, sizeof buf));
  for (int i = 0; i < 4; i++) assert_true(buf[i] == 3.0);
}

static void failed_calls_change_nothing(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a = mat(g, "a", WEFT_F32, 2, 2), *b = mat(g, "b", WEFT_F32, 3, 3), *o = NULL;
  CHECK(weft_add(g, a, a, &o));
  CHECK(weft_graph_analyse(g));
  size_t edges = weft_graph_edge_count(g);
  weft_tensor *o2 = NULL;
  assert_int_equal(weft_add(g, a, b, &o2), WEFT_ESHAPE);
  assert_null(o2);
  ASSERT_UNCHANGED(g, 1, 3);
  CHECK(weft_graph_analyse(g));
  assert_int_equal(weft_graph_edge_count(g), edges);
  /* The graph still runs and gives the right answer. */
  CHECK(weft_graph_run(g));
  double buf[4];
  tu_read_doubles(o, buf);
  for (int i = 0; i < 4; i++) assert_true(buf[i] == 2.0);
}

/* weft_device_memory_usage on the host: the storage of host tensors now and at most; a graph's
 * tensors are counted while it lives and given back when it is destroyed; bad arguments. */
static void host_memory_usage(void **state) {
  tu_fixture *f = *state;
  weft_memory_usage before, during, after;
  CHECK(weft_device_memory_usage(f->rt, weft_cpu(), &before));
  weft_graph *g;
  CHECK(weft_graph_create(f->rt, &g));
  weft_tensor *x, *y, *z = NULL; /* z: a new result */
  CHECK(weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){512, 512}, weft_cpu(), weft_ones(), &x));
  CHECK(weft_tensor_create(g, "y", WEFT_F64, 2, (int64_t[]){512, 512}, weft_cpu(), weft_zeros(), &y));
  CHECK(weft_add(g, x, x, &z));
  weft_tensor_keep(z);
  CHECK(weft_graph_run(g));
  CHECK(weft_device_memory_usage(f->rt, weft_cpu(), &during));
  size_t bytes = weft_tensor_bytes(x) + weft_tensor_bytes(y) + weft_tensor_bytes(z);
  assert_true(during.in_use >= before.in_use + bytes);
  assert_int_equal(during.reserved, during.in_use);
  assert_true(during.peak >= during.in_use);
  weft_graph_destroy(g);
  CHECK(weft_device_memory_usage(f->rt, weft_cpu(), &after));
  assert_int_equal(after.in_use, before.in_use);
  assert_int_equal(after.peak, during.peak);
  assert_int_equal(weft_device_memory_usage(f->rt, weft_cuda(7), &after), WEFT_EDEVICE);
  assert_true(tu_contains(weft_last_error(), "no device cuda:7"));
  assert_int_equal(weft_device_memory_usage(f->rt, weft_cpu(), NULL), WEFT_EINVAL);
  assert_int_equal(weft_device_memory_usage(NULL, weft_cpu(), &after), WEFT_EINVAL);
}

/* eye: the value on the diagonal, 0 elsewhere, as a creation initialiser and as a fill; 2-D
 * tensors only; a tile of an eye tensor keeps the tensor's diagonal. */
static void eye_initialiser(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  weft_tensor *a, *b, *v;
  CHECK(weft_tensor_create(g, "a", WEFT_F64, 2, (int64_t[]){3, 4}, weft_cpu(), weft_eye(2.0), &a));
  CHECK(weft_tensor_create(g, "b", WEFT_F32, 2, (int64_t[]){3, 3}, weft_cpu(), weft_uniform(0, 1, 5), &b));
  CHECK(weft_fill(g, b, weft_eye(1.0)));
  assert_int_equal(weft_node_fill_init(weft_graph_last_node(g)).seed, 3); /* its row length */
  EXPECT_FAIL(g, WEFT_ESHAPE, "eye is for 2-D tensors; this one has 1 dimension",
              weft_tensor_create(g, "v", WEFT_F32, 1, (int64_t[]){4}, weft_cpu(), weft_eye(1.0), &v));
  CHECK(weft_tensor_create(g, "v", WEFT_F32, 1, (int64_t[]){4}, weft_cpu(), weft_zeros(), &v));
  EXPECT_FAIL(g, WEFT_ESHAPE, "'fill': eye is for 2-D tensors; v has 1 dimension", weft_fill(g, v, weft_eye(1.0)));
  CHECK(weft_graph_run(g));
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 4; j++) {
      double x, y;
      CHECK(weft_tensor_get(a, i * 4 + j, &x));
      assert_true(x == (i == j ? 2.0 : 0.0));
      if (j < 3) {
        CHECK(weft_tensor_get(b, i * 3 + j, &y));
        assert_true(y == (i == j ? 1.0 : 0.0));
      }
    }
  /* Tiles of a 4 x 4 identity: the diagonal tiles are identities, the others zero. */
  weft_graph *h = tu_graph(f->rt);
  weft_tensor *m;
  CHECK(weft_tensor_create(h, "m", WEFT_F64, 2, (int64_t[]){4, 4}, weft_cpu(), weft_eye(1.0), &m));
  CHECK(weft_tensor_tiles(h, m, 2, 2));
  CHECK(weft_potrf(h, WEFT_LOWER, weft_tensor_tile(m, 1, 1))); /* the identity is its own factor */
  CHECK(weft_graph_run(h));
  for (int64_t k = 0; k < 16; k++) {
    double x;
    CHECK(weft_tensor_get(m, k, &x));
    assert_true(x == (k / 4 == k % 4 ? 1.0 : 0.0));
  }
  weft_graph_destroy(h);
}

/* weft_graph_memory_estimate: what lives through the run, plus the temporaries' peak in the
 * program's order; views own nothing; another device's tensors count there, not here. */
static void memory_estimate(void **state) {
  tu_fixture *f = *state;
  weft_graph *g = f->g;
  int64_t n = 100; /* 400 bytes a tensor */
  weft_tensor *x = tu_tensor(g, "x", WEFT_F32, 1, &n, weft_ones());
  weft_tensor *t1 = NULL, *t2 = NULL, *t3 = NULL, *out = NULL;
  CHECK(weft_add(g, x, x, &t1));
  CHECK(weft_add(g, t1, t1, &t2)); /* t1 dies after this node: t1 and t2 live at once */
  CHECK(weft_add(g, t2, t2, &t3));
  CHECK(weft_add(g, t3, t3, &out)); /* a result: nobody reads it, it lives to the end */
  size_t bytes = 0;
  CHECK(weft_graph_memory_estimate(g, weft_cpu(), &bytes));
  assert_int_equal(bytes, 400 + 400 + 800); /* x, out, and two temporaries at once */
  /* A kept temporary lives to the end. */
  weft_tensor_keep(t1); /* resident now; t2 and t3 still overlap at the third node */
  CHECK(weft_graph_memory_estimate(g, weft_cpu(), &bytes));
  assert_int_equal(bytes, 400 + 400 + 400 + 800);
  /* Tiles are views of their tensor: no bytes of their own. */
  int64_t sq[2] = {64, 64};
  weft_tensor *m = tu_tensor(g, "m", WEFT_F64, 2, sq, weft_zeros());
  CHECK(weft_tensor_tiles(g, m, 32, 32));
  CHECK(weft_potrf(g, WEFT_LOWER, weft_tensor_tile(m, 0, 0)));
  CHECK(weft_graph_memory_estimate(g, weft_cpu(), &bytes));
  assert_int_equal(bytes, 400 + 400 + 400 + 800 + 64 * 64 * 8);
  /* Nothing on a GPU; bad arguments. */
  CHECK(weft_graph_memory_estimate(g, weft_cuda(0), &bytes));
  assert_int_equal(bytes, 0);
  assert_int_equal(weft_graph_memory_estimate(NULL, weft_cpu(), &bytes), WEFT_EINVAL);
  assert_int_equal(weft_graph_memory_estimate(g, weft_cpu(), NULL), WEFT_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(devices_are_values, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(dtypes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(host_memory_usage, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(tensor_create_validation, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(memory_estimate, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(eye_initialiser, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(tensor_introspection, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(creation_initialisers, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(mm_rules, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(elementwise_rules, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(reduction_rules, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(linear_rules, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(copy_and_fill_rules, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(op_registration, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(user_calls, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(node_introspection, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(same_device_inserts_nothing, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(copies_between_devices, sim_setup, sim_teardown),
      cmocka_unit_test_setup_teardown(writing_an_inserted_copy, sim_setup, sim_teardown),
      cmocka_unit_test(failed_call_drops_its_copy),
      cmocka_unit_test_setup_teardown(temporaries_and_keep, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(failed_calls_change_nothing, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(variadic_user_calls, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(node_rare_fields, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
