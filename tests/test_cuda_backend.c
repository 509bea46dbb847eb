/* test_cuda_backend.c — the CUDA backend: device discovery and fallbacks, every built-in op on a
 * GPU against the CPU backend (f32 and f64, odd shapes), random fills identical on both,
 * copies in every direction, in-place products, stream assignment (chains, forks, large
 * products, copy engines) through the plan's explanation, user ops with a CUDA kernel on the
 * node's stream and cuBLAS handle, CPU nodes after GPU nodes and before them, graphs
 * running at once, batches of small elementwise nodes (which nodes join one, their results
 * eager and replayed, and that a cancelled run has run every node it reports as run), and
 * nodes left to the thread that holds their stream (results, CPU successors, failures). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "sched/sched.h"
#include "weft/report.h"
#if WEFT_HAVE_CUDA
#include "weft/cuda.h"
#endif

/* ---- devices ------------------------------------------------------------------------------ */

static void devices_are_discovered(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  int n = weft_device_count(f->rt, WEFT_DEVICE_CUDA);
  assert_int_equal(n, gt_gpus());
  for (int i = 0; i < n; i++) {
    weft_device_info info;
    CHECK(weft_device_info_get(f->rt, weft_cuda(i), &info));
    assert_true(info.name[0] != '\0');
    assert_true(info.memory_bytes > ((size_t)1 << 30));
    assert_true(info.copy_engines >= 1);
    assert_true(info.compute_major >= 3);
    assert_true(info.multiprocessors > 0);
    assert_int_equal(info.simulated, 0);
    assert_int_equal(weft_device_can_access_peer(f->rt, weft_cuda(i), weft_cuda(i)), 0);
  }
  assert_true(weft_device_equal(weft_try_gpu(f->rt, 0), weft_cuda(0)));
  assert_true(weft_device_equal(weft_try_gpu(f->rt, n), weft_cpu()));
  weft_device all[16];
  assert_int_equal(weft_all_gpus(f->rt, all, 16), n);
  assert_true(weft_device_equal(all[n - 1], weft_cuda(n - 1)));
  assert_int_equal(weft_device_exists(f->rt, weft_cuda(n)), 0);
  weft_device_info info;
  assert_int_equal(weft_device_info_get(f->rt, weft_cuda(n), &info), WEFT_EDEVICE);
  /* A tensor on a GPU that does not exist is a clear error. */
  weft_tensor *t = NULL;
  assert_int_equal(weft_tensor_create(f->g, "t", WEFT_F32, 1, (int64_t[]){4}, weft_cuda(n), weft_zeros(), &t),
                   WEFT_EDEVICE);
}

static void max_gpus_limits_the_devices(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  weft_runtime *rt = tu_runtime_with(1, 0, 0);
  assert_int_equal(weft_device_count(rt, WEFT_DEVICE_CUDA), 0);
  weft_device d;
  assert_int_equal(weft_all_gpus(rt, &d, 1), 1);
  assert_true(weft_device_equal(d, weft_cpu()));
  weft_runtime_destroy(rt);
  rt = tu_runtime_with(1, 1, 0);
  assert_int_equal(weft_device_count(rt, WEFT_DEVICE_CUDA), 1);
  weft_runtime_destroy(rt);
}

/* first_gpu: cuda:0 is the chosen GPU (the last one here: the runtime then has just it), and
 * one beyond the visible GPUs is refused, naming how many there are. */
static void first_gpu_picks_the_gpus(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  weft_runtime *all = gt_runtime(1, 0);
  int n = weft_device_count(all, WEFT_DEVICE_CUDA);
  weft_device_info last;
  CHECK(weft_device_info_get(all, weft_cuda(n - 1), &last));
  weft_runtime_destroy(all);
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 1;
  o.flags = WEFT_RUNTIME_QUIET;
  o.first_gpu = n - 1;
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
  assert_int_equal(weft_device_count(rt, WEFT_DEVICE_CUDA), 1);
  weft_device_info info;
  CHECK(weft_device_info_get(rt, weft_cuda(0), &info));
  assert_string_equal(info.name, last.name);
  assert_int_equal(info.ordinal, n - 1); /* the last GPU itself, not one like it */
  assert_int_equal(last.ordinal, n - 1);
  weft_runtime_destroy(rt);
  rt = NULL;
  o.first_gpu = n;
  assert_int_equal(weft_runtime_create(&o, &rt), WEFT_EDEVICE);
  assert_null(rt);
  char want[96];
  snprintf(want, sizeof want, "first_gpu is %d, and this process sees %d GPU", n, n);
  assert_true(tu_contains(weft_last_error(), want));
}

/* ---- ops against the CPU ----------------------------------------------------------------- */

typedef struct op_case {
  const char *name;
  int kind; /* 0 mm, 1 add, 2 sub, 3 mul, 4 scale, 5 relu, 6 sum, 7 norm, 8 linear, 9 linear+bias,
               10 fill uniform, 11 fill normal, 12 copy on the device */
  int64_t m, k, n;
} op_case;

/* Builds one op on `dev` from seeded inputs and returns the result's contents. */
static void *run_case(weft_runtime *rt, weft_device dev, const op_case *c, int dtype, size_t *numel) {
  weft_graph *g = tu_graph(rt);
  weft_tensor *a, *b, *bias, *out = NULL;
  int64_t sa[2] = {c->m, c->k}, sb[2] = {c->k, c->n}, sw[2] = {c->n, c->k}, sbias[1] = {c->n};
  int mm_like = c->kind == 0 || c->kind == 8 || c->kind == 9;
  CHECK(weft_tensor_create(g, "a", dtype, 2, sa, dev, weft_uniform(-1, 1, 11), &a));
  CHECK(weft_tensor_create(g, "b", dtype, 2, c->kind == 0 ? sb : mm_like ? sw : sa, dev,
                           weft_uniform(-1, 1, 12), &b));
  CHECK(weft_tensor_create(g, "bias", dtype, 1, sbias, dev, weft_normal(0, 1, 13), &bias));
  switch (c->kind) {
    case 0: CHECK(weft_mm(g, a, b, &out)); break;
    case 1: CHECK(weft_add(g, a, b, &out)); break;
    case 2: CHECK(weft_sub(g, a, b, &out)); break;
    case 3: CHECK(weft_mul(g, a, b, &out)); break;
    case 4: CHECK(weft_scale(g, a, -2.5, &out)); break;
    case 5: CHECK(weft_relu(g, a, &out)); break;
    case 6: CHECK(weft_sum(g, a, &out)); break;
    case 7: CHECK(weft_norm(g, a, &out)); break;
    case 8: CHECK(weft_linear(g, a, b, NULL, &out)); break;
    case 9: CHECK(weft_linear(g, a, b, bias, &out)); break;
    case 10: CHECK(weft_fill(g, a, weft_uniform(-3, 5, 99))); out = a; break;
    case 11: CHECK(weft_fill(g, a, weft_normal(1, 2, 98))); out = a; break;
    default: CHECK(weft_copy(g, a, dev, &out)); break;
  }
  CHECK(weft_graph_run(g));
  *numel = (size_t)weft_tensor_numel(out);
  void *r = gt_read(out);
  weft_graph_destroy(g);
  return r;
}

static void ops_agree_with_the_cpu(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  static const op_case cases[] = {
      {"mm", 0, 37, 65, 23}, {"mm big", 0, 300, 257, 129}, {"mm k=0", 0, 5, 0, 7}, {"mm m=0", 0, 0, 4, 3},
      {"add", 1, 33, 17, 0}, {"sub", 2, 1000, 77, 0}, {"mul", 3, 3, 5, 0}, {"scale", 4, 129, 31, 0},
      {"relu", 5, 64, 64, 0}, {"sum small", 6, 7, 9, 0}, {"sum large", 6, 700, 333, 0},
      {"norm small", 7, 1, 1, 0}, {"norm large", 7, 1024, 1031, 0}, {"norm empty", 7, 0, 5, 0},
      {"linear", 8, 19, 33, 11}, {"linear+bias", 9, 64, 48, 40}, {"fill uniform", 10, 123, 45, 0},
      {"fill normal", 11, 77, 31, 0}, {"copy", 12, 10, 10, 0}};
  weft_runtime *gpu = gt_runtime(2, 0), *cpu = tu_runtime_cpu(2);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int dt = WEFT_F32; dt <= WEFT_F64; dt++) {
      const op_case *c = &cases[i];
      size_t n1, n2;
      void *got = run_case(gpu, weft_cuda(0), c, dt, &n1);
      void *want = run_case(cpu, weft_cpu(), c, dt, &n2);
      assert_int_equal(n1, n2);
      double err = gt_rel_err(got, want, n1, dt);
      /* Elementwise ops, copies and uniform fills are one rounding per element on both
       * devices: bit-identical. Products and reductions differ in summation order. */
      int exact = c->kind >= 1 && c->kind <= 5 ? 1 : c->kind == 10 || c->kind == 12;
      double tol = exact ? 0 : dt == WEFT_F32 ? 2e-5 : 1e-12;
      if (c->kind == 11) tol = dt == WEFT_F32 ? 1e-6 : 1e-14; /* log/cos of CUDA vs libm */
      if (err > tol) fail_msg("%s (%s): relative error %g exceeds %g", c->name, weft_dtype_name(dt), err, tol);
      free(got);
      free(want);
    }
  weft_runtime_destroy(gpu);
  weft_runtime_destroy(cpu);
}

/* The creation initialiser runs on the GPU for a GPU tensor; the values must be the CPU's
 * (random ones bit for bit, eye too). */
static void random_initialisers_match_the_cpu(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  weft_tensor *u, *uc, *nrm, *nc;
  int64_t shape[2] = {301, 97};
  CHECK(weft_tensor_create(f->g, "u", WEFT_F32, 2, shape, weft_cuda(0), weft_uniform(-1, 3, 7), &u));
  CHECK(weft_tensor_create(f->g, "uc", WEFT_F32, 2, shape, weft_cpu(), weft_uniform(-1, 3, 7), &uc));
  CHECK(weft_tensor_create(f->g, "n", WEFT_F64, 2, shape, weft_cuda(0), weft_normal(0, 1, 8), &nrm));
  CHECK(weft_tensor_create(f->g, "nc", WEFT_F64, 2, shape, weft_cpu(), weft_normal(0, 1, 8), &nc));
  weft_tensor *e, *ec; /* eye: the diagonal placed by the row length, on both */
  CHECK(weft_tensor_create(f->g, "e", WEFT_F64, 2, shape, weft_cuda(0), weft_eye(3), &e));
  CHECK(weft_tensor_create(f->g, "ec", WEFT_F64, 2, shape, weft_cpu(), weft_eye(3), &ec));
  void *a = gt_read(u), *b = gt_read(uc), *c = gt_read(nrm), *d = gt_read(nc), *x = gt_read(e), *y = gt_read(ec);
  assert_memory_equal(a, b, weft_tensor_bytes(u));
  assert_true(gt_rel_err(c, d, (size_t)weft_tensor_numel(nrm), WEFT_F64) < 1e-14);
  assert_memory_equal(x, y, weft_tensor_bytes(e));
  free(a);
  free(b);
  free(c);
  free(d);
  free(x);
  free(y);
}

static void copies_in_every_direction(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  int ngpu = gt_gpus();
  weft_runtime *rt = gt_runtime(4, 0);
  weft_graph *g = tu_graph(rt);
  int64_t shape[2] = {513, 257};
  weft_tensor *h = tu_matrix(g, "h", 513, 257, 5), *d0 = NULL, *dd = NULL, *peer = NULL, *back = NULL,
              *back2 = NULL, *empty, *empty_d = NULL;
  CHECK(weft_copy(g, h, weft_cuda(0), &d0));            /* host to device */
  CHECK(weft_copy(g, d0, weft_cuda(0), &dd));           /* device to device */
  weft_tensor *last = dd;
  if (ngpu > 1) {
    CHECK(weft_copy(g, dd, weft_cuda(1), &peer));       /* device to peer */
    last = peer;
  }
  CHECK(weft_copy(g, last, weft_cpu(), &back));         /* device to host */
  weft_tensor *into;
  CHECK(weft_tensor_create(g, "into", WEFT_F32, 2, shape, weft_cpu(), weft_zeros(), &into));
  back2 = into;
  CHECK(weft_copy(g, d0, weft_cpu(), &back2));          /* into an existing host tensor */
  CHECK(weft_tensor_create(g, "empty", WEFT_F32, 1, (int64_t[]){0}, weft_cpu(), weft_zeros(), &empty));
  CHECK(weft_copy(g, empty, weft_cuda(0), &empty_d));
  for (int r = 0; r < 3; r++) {
    CHECK(weft_graph_run(g));
    void *a = gt_read(h), *b = gt_read(back), *c = gt_read(into);
    assert_memory_equal(a, b, weft_tensor_bytes(h));
    assert_memory_equal(a, c, weft_tensor_bytes(h));
    free(a);
    free(b);
    free(c);
  }
  /* A GPU tensor is readable and writable directly (synchronous calls). */
  float v[4] = {1, 2, 3, 4}, w[4];
  weft_tensor *small;
  CHECK(weft_tensor_create(g, "small", WEFT_F32, 1, (int64_t[]){4}, weft_cuda(0), weft_zeros(), &small));
  CHECK(weft_tensor_write(small, v, sizeof v));
  CHECK(weft_tensor_read(small, w, sizeof w));
  assert_memory_equal(v, w, sizeof v);
  double x;
  CHECK(weft_tensor_get(small, 2, &x));
  assert_true(x == 3.0);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

static void in_place_products(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  weft_runtime *gpu = gt_runtime(2, 0), *cpu = tu_runtime_cpu(1);
  float *res[2];
  for (int k = 0; k < 2; k++) {
    weft_runtime *rt = k ? cpu : gpu;
    weft_device dev = k ? weft_cpu() : weft_cuda(0);
    weft_graph *g = tu_graph(rt);
    weft_tensor *a, *b;
    CHECK(weft_tensor_create(g, "a", WEFT_F32, 2, (int64_t[]){48, 48}, dev, weft_uniform(-1, 1, 3), &a));
    CHECK(weft_tensor_create(g, "b", WEFT_F32, 2, (int64_t[]){48, 48}, dev, weft_uniform(-1, 1, 4), &b));
    weft_tensor *o = a;
    CHECK(weft_mm(g, a, b, &o)); /* a = a . b */
    o = b;
    CHECK(weft_mm(g, a, b, &o)); /* b = a . b */
    o = a;
    CHECK(weft_linear(g, a, a, NULL, &o)); /* a = a . a^T */
    CHECK(weft_graph_run(g));
    CHECK(weft_graph_run(g));
    res[k] = gt_read(a);
    weft_graph_destroy(g);
  }
  assert_true(gt_rel_err(res[0], res[1], 48 * 48, WEFT_F32) < 1e-4);
  free(res[0]);
  free(res[1]);
  weft_runtime_destroy(gpu);
  weft_runtime_destroy(cpu);
}

/* ---- streams, through the plan's explanation --------------------------------------------- */

/* Where the plan put node n, and why (CHECKed). */
static weft_placement placement(weft_graph *g, weft_node *n) {
  weft_placement pl;
  CHECK(weft_node_placement(g, n, &pl));
  return pl;
}

static void lane_of(weft_graph *g, weft_node *n, char *lane, size_t size) {
  snprintf(lane, size, "%s", placement(g, n).lane);
}

#if WEFT_HAVE_CUDA
/* The batch node n belongs to, from the plan's explanation: 1 and its bounds, or 0. */
static int batch_of(weft_graph *g, weft_node *n, unsigned *first, unsigned *last) {
  weft_placement pl = placement(g, n);
  const char *s = strstr(pl.why, "batched: nodes ");
  return s != NULL && sscanf(s, "batched: nodes %u..%u", first, last) == 2;
}

/* The host's result of step k of small_chains_are_batched's program on x (y read). */
static void chain_step(int k, float *x, const float *y, int n) {
  for (int i = 0; i < n; i++) switch (k % 5) {
      case 0: x[i] = x[i] + y[i]; break;
      case 1: x[i] = 0.5f * x[i]; break;
      case 2: x[i] = x[i] - y[i]; break;
      case 3: x[i] = x[i] > 0 ? x[i] : 0.0f; break;
      default: x[i] = x[i] * y[i]; break;
    }
}

#endif

/* A chain of 300 small elementwise nodes, in place on x, with one out-of-place step through a
 * temporary: batched in pieces of at most 128 nodes, and bit-identical to the host's result in
 * eager runs and replays. */
static void small_chains_are_batched(void **state) {
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  tu_fixture *f = *state;
  enum { N = 1000, STEPS = 300 };
  /* On the GPU from the start, so that nothing keeps the graph from being captured. */
  weft_tensor *x0, *y, *x = NULL;
  CHECK(weft_tensor_create(f->g, "x0", WEFT_F32, 1, (int64_t[]){N}, weft_cuda(0), weft_uniform(-1, 1, 1), &x0));
  CHECK(weft_tensor_create(f->g, "y", WEFT_F32, 1, (int64_t[]){N}, weft_cuda(0), weft_uniform(-1, 1, 2), &y));
  weft_node *chain[STEPS];
  for (int k = 0; k < STEPS; k++) {
    switch (k % 5) {
      case 0: CHECK(weft_add(f->g, k == 0 ? x0 : x, y, &x)); break;
      case 1:
        if (k == 151) { /* through a temporary: t = 0.5 x; x = t - y is step 152's */
          weft_tensor *t = NULL;
          CHECK(weft_scale(f->g, x, 0.5, &t));
          chain[k] = weft_graph_last_node(f->g);
          k++;
          CHECK(weft_sub(f->g, t, y, &x));
          break;
        }
        CHECK(weft_scale(f->g, x, 0.5, &x));
        break;
      case 2: CHECK(weft_sub(f->g, x, y, &x)); break;
      case 3: CHECK(weft_relu(f->g, x, &x)); break;
      default: CHECK(weft_mul(f->g, x, y, &x)); break;
    }
    chain[k] = weft_graph_last_node(f->g);
  }
  float *want = NULL, *y0 = NULL;
  for (int r = 0; r < 5; r++) {
    weft_cuda_set_replay(f->rt, r >= 2); /* two eager runs, then a capture and two replays */
    CHECK(weft_graph_run(f->g));
    if (r == 0) {
      want = gt_read(x0);
      y0 = gt_read(y);
      for (int k = 0; k < STEPS; k++) chain_step(k, want, y0, N);
    }
    float *got = gt_read(x);
    assert_memory_equal(got, want, N * sizeof *want);
    free(got);
  }
  assert_true(gt_run_stats(f->rt).replays >= 2);
  /* Every node of the chain is in a batch of at most 128; consecutive batches cover it. */
  unsigned first, last, prev_last = 0, batches = 0;
  for (int k = 0; k < STEPS; k++) {
    assert_true(batch_of(f->g, chain[k], &first, &last));
    assert_true(last - first + 1 <= 128);
    assert_true(first <= weft_node_id(chain[k]) && weft_node_id(chain[k]) <= last);
    if (first != (unsigned)weft_node_id(chain[k])) continue; /* not the first of its batch */
    if (batches++ > 0) assert_int_equal(first, prev_last + 1);
    prev_last = last;
  }
  assert_true(batches >= 3);
  free(y0);
  free(want);
#endif
}

/* A node read by another stream (a copy to the host) ends its batch, and the node after it
 * (which must wait for that copy to have read x) starts the next. */
static void a_reader_ends_a_batch(void **state) {
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  tu_fixture *f = *state;
  weft_tensor *hx = tu_matrix(f->g, "hx", 4, 8, 3), *x = NULL, *one, *mid = NULL, *out = NULL;
  CHECK(weft_copy(f->g, hx, weft_cuda(0), &x));
  CHECK(weft_tensor_create(f->g, "one", WEFT_F32, 2, (int64_t[]){4, 8}, weft_cuda(0), weft_ones(), &one));
  weft_node *adds[10];
  for (int k = 0; k < 10; k++) {
    CHECK(weft_add(f->g, x, one, &x));
    adds[k] = weft_graph_last_node(f->g);
    if (k == 5) CHECK(weft_copy(f->g, x, weft_cpu(), &mid));
  }
  CHECK(weft_copy(f->g, x, weft_cpu(), &out));
  for (int r = 0; r < 3; r++) {
    weft_cuda_set_replay(f->rt, r == 2);
    CHECK(weft_graph_run(f->g));
    float *x0 = gt_read(hx), *m = gt_read(mid), *o = gt_read(out);
    for (int i = 0; i < 32; i++) {
      assert_true(m[i] == x0[i] + 1 + 1 + 1 + 1 + 1 + 1);
      assert_true(o[i] == m[i] + 1 + 1 + 1 + 1);
    }
    free(x0);
    free(m);
    free(o);
  }
  unsigned first, last;
  assert_true(batch_of(f->g, adds[0], &first, &last));
  assert_int_equal(first, weft_node_id(adds[0]));
  assert_int_equal(last, weft_node_id(adds[5]));
  assert_true(batch_of(f->g, adds[6], &first, &last));
  assert_int_equal(first, weft_node_id(adds[6]));
  assert_int_equal(last, weft_node_id(adds[9]));
#endif
}

/* A cancelled run stops a chain of one-element adds part way, possibly inside a batch: every
 * node the run reports as run has run (the drain launches what a batch holds), and no other. */
static void a_cancelled_batch_still_runs_what_ran(void **state) {
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  tu_fixture *f = *state;
  weft_cuda_set_replay(f->rt, 0);
  enum { N = 20000 };
  weft_tensor *x, *one;
  CHECK(weft_tensor_create(f->g, "x", WEFT_F64, 1, (int64_t[]){1}, weft_cuda(0), weft_zeros(), &x));
  CHECK(weft_tensor_create(f->g, "one", WEFT_F64, 1, (int64_t[]){1}, weft_cuda(0), weft_ones(), &one));
  for (int k = 0; k < N; k++) CHECK(weft_add(f->g, x, one, &x)); /* in place: x stays x */
  CHECK(weft_graph_run(f->g));
  int partial = 0;
  double before = N;
  for (int r = 0; r < 12; r++) {
    weft_run *run;
    CHECK(weft_graph_launch(f->g, &run));
    for (volatile long spin = 0; spin < (long)r * r * 20000; spin++) {
    }
    weft_run_cancel(run);
    int rc = weft_run_wait(run);
    assert_true(rc == WEFT_OK || rc == WEFT_ECANCELED);
    weft_run_stats *st;
    CHECK(weft_run_stats_create(run, &st));
    weft_stats_summary sum;
    weft_run_stats_summary(st, &sum);
    weft_run_stats_destroy(st);
    weft_run_destroy(run);
    double v;
    CHECK(weft_tensor_get(x, 0, &v));
    assert_true(v == before + (double)sum.nodes_run);
    before = v;
    partial += sum.nodes_run > 0 && sum.nodes_run < N;
  }
  print_message("cancelled runs that stopped inside the chain: %d of 12\n", partial);
#endif
}

static void streams_follow_the_graph(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  weft_tensor *h = tu_matrix(f->g, "h", 64, 64, 1), *x = NULL;
  CHECK(weft_copy(f->g, h, weft_cuda(0), &x));
  weft_node *up = weft_graph_last_node(f->g);
  /* Two independent small chains, then a join. */
  weft_tensor *a = NULL, *b = NULL, *c = NULL;
  CHECK(weft_relu(f->g, x, &a));
  weft_node *a1 = weft_graph_last_node(f->g);
  CHECK(weft_scale(f->g, a, 2, &a));
  weft_node *a2 = weft_graph_last_node(f->g);
  CHECK(weft_scale(f->g, x, 3, &b));
  weft_node *b1 = weft_graph_last_node(f->g);
  CHECK(weft_scale(f->g, b, 0.5, &b));
  weft_node *b2 = weft_graph_last_node(f->g);
  CHECK(weft_add(f->g, a, b, &c));
  weft_node *join = weft_graph_last_node(f->g);
  weft_tensor *hc = NULL;
  CHECK(weft_copy(f->g, c, weft_cpu(), &hc));
  weft_node *down = weft_graph_last_node(f->g);
  /* Two large independent products: the main stream, in order. */
  weft_tensor *big, *p1 = NULL, *p2 = NULL;
  CHECK(weft_tensor_create(f->g, "big", WEFT_F32, 2, (int64_t[]){2048, 2048}, weft_cuda(0), weft_uniform(0, 1, 2), &big));
  CHECK(weft_mm(f->g, big, big, &p1));
  weft_node *m1 = weft_graph_last_node(f->g);
  CHECK(weft_mm(f->g, big, big, &p2));
  weft_node *m2 = weft_graph_last_node(f->g);
  CHECK(weft_graph_run(f->g));
  char l[10][64];
  lane_of(f->g, up, l[0], 64);
  lane_of(f->g, a1, l[1], 64);
  lane_of(f->g, a2, l[2], 64);
  lane_of(f->g, b1, l[3], 64);
  lane_of(f->g, b2, l[4], 64);
  lane_of(f->g, join, l[5], 64);
  lane_of(f->g, down, l[6], 64);
  lane_of(f->g, m1, l[7], 64);
  lane_of(f->g, m2, l[8], 64);
  assert_string_equal(l[0], "cuda:0 copy h2d");
  assert_string_equal(l[6], "cuda:0 copy d2h");
  assert_string_equal(l[1], l[2]);     /* a chain stays on its stream */
  assert_string_equal(l[3], l[4]);
  assert_string_not_equal(l[1], l[3]); /* independent chains get different streams */
  assert_true(strcmp(l[5], l[2]) == 0 || strcmp(l[5], l[4]) == 0); /* the join continues one */
  assert_string_equal(l[7], "cuda:0 stream 0");
  assert_string_equal(l[8], "cuda:0 stream 0");
  /* The result is right: c = 2 relu(h) + 1.5 h. */
  float *hv = gt_read(h), *cv = gt_read(hc);
  for (int i = 0; i < 64 * 64; i++) {
    float want = 2.0f * (hv[i] > 0 ? hv[i] : 0.0f) + (3.0f * hv[i]) * 0.5f;
    assert_true(fabsf(cv[i] - want) <= 1e-6f * (1 + fabsf(want)));
  }
  free(hv);
  free(cv);
}

/* The last large product of a stream whose result goes to the host is split in two row halves
 * so the copy of the first overlaps the second; the copy must still be the whole product. */
static void the_tail_product_is_split(void **state) {
  GT_NEED_GPUS(1);
  tu_fixture *f = *state;
  weft_tensor *x, *y = NULL, *h = NULL, *ref = NULL;
  CHECK(weft_tensor_create(f->g, "x", WEFT_F32, 2, (int64_t[]){2000, 2048}, weft_cuda(0), weft_uniform(-1, 1, 4), &x));
  weft_tensor *w;
  CHECK(weft_tensor_create(f->g, "w", WEFT_F32, 2, (int64_t[]){2048, 2048}, weft_cuda(0), weft_uniform(-1, 1, 5), &w));
  CHECK(weft_mm(f->g, x, w, &ref)); /* the same product, kept on the GPU */
  CHECK(weft_mm(f->g, x, w, &y));
  weft_node *last = weft_graph_last_node(f->g);
  CHECK(weft_copy(f->g, y, weft_cpu(), &h));
  for (int r = 0; r < 3; r++) { /* eager, captured, replayed */
    CHECK(weft_graph_run(f->g));
    float *a = gt_read(h), *b = gt_read(ref);
    double err = gt_rel_err(a, b, 2000 * 2048, WEFT_F32);
    if (err > 1e-5) fail_msg("run %d: the split product's copy differs from the product (relative %g)", r, err);
    free(a);
    free(b);
  }
  assert_non_null(strstr(placement(f->g, last).why, "two row halves"));
}

/* ---- user ops ------------------------------------------------------------------------------- */

#if WEFT_HAVE_CUDA
/* y = alpha * y through cuBLAS on the node's stream, then a memset of the first element. */
static int scal_kernel(weft_kernel_ctx *ctx) {
  const weft_tensor *t = weft_ctx_tensor(ctx, 0);
  float alpha = *(const float *)weft_ctx_params(ctx, NULL);
  cublasHandle_t h = weft_ctx_cublas(ctx);
  if (h == NULL || weft_ctx_cuda_stream(ctx) == NULL) return weft_ctx_fail(ctx, "no stream or handle");
  if (cublasSscal(h, (int)weft_tensor_numel(t), &alpha, weft_ctx_data(ctx, 0), 1) != CUBLAS_STATUS_SUCCESS)
    return weft_ctx_fail(ctx, "cublasSscal failed");
  if (cudaMemsetAsync(weft_ctx_data(ctx, 0), 0, sizeof(float), weft_ctx_cuda_stream(ctx)) != cudaSuccess)
    return weft_ctx_fail(ctx, "cudaMemsetAsync failed");
  return WEFT_OK;
}

static int scal_cpu(weft_kernel_ctx *ctx) {
  const weft_tensor *t = weft_ctx_tensor(ctx, 0);
  float alpha = *(const float *)weft_ctx_params(ctx, NULL), *y = weft_ctx_data(ctx, 0);
  for (int64_t i = 0; i < weft_tensor_numel(t); i++) y[i] *= alpha;
  y[0] = 0;
  return WEFT_OK;
}

/* A CPU op that sums its input into its output: it must see the GPU's results. */
static int host_sum(weft_kernel_ctx *ctx) {
  const weft_tensor *t = weft_ctx_tensor(ctx, 0);
  const float *x = weft_ctx_data(ctx, 0);
  double s = 0;
  for (int64_t i = 0; i < weft_tensor_numel(t); i++) s += x[i];
  *(double *)weft_ctx_data(ctx, 1) = s;
  return WEFT_OK;
}

/* A CPU op that writes its output from its parameter. */
static int host_set(weft_kernel_ctx *ctx) {
  const weft_tensor *t = weft_ctx_tensor(ctx, 0);
  float v = *(const float *)weft_ctx_params(ctx, NULL), *y = weft_ctx_data(ctx, 0);
  for (int64_t i = 0; i < weft_tensor_numel(t); i++) y[i] = v + (float)i;
  return WEFT_OK;
}
#endif

static void user_ops_and_cpu_neighbours(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  weft_runtime *rt = gt_runtime(4, 0);
  const weft_op *scal = gt_op(rt, "scal", WEFT_READ_WRITE, scal_cpu, scal_kernel);
  const weft_op *hsum = tu_op(rt, "host_sum", 2, (weft_access[]){WEFT_READ, WEFT_WRITE}, host_sum, NULL);
  const weft_op *hset = gt_op(rt, "host_set", WEFT_WRITE, host_set, NULL);
  weft_graph *g = tu_graph(rt);
  weft_tensor *h, *s;
  CHECK(weft_tensor_create(g, "h", WEFT_F32, 1, (int64_t[]){1000}, weft_cpu(), weft_zeros(), &h));
  CHECK(weft_tensor_create(g, "s", WEFT_F64, 0, NULL, weft_cpu(), weft_zeros(), &s));
  float base = 1.0f, alpha = 3.0f;
  CHECK(weft_call(g, hset, &h, 1, &base, sizeof base));          /* CPU writes h */
  weft_tensor *dv = NULL;
  CHECK(weft_copy(g, h, weft_cuda(0), &dv));                      /* GPU after CPU */
  CHECK(weft_call(g, scal, &dv, 1, &alpha, sizeof alpha));       /* user CUDA kernel */
  weft_tensor *back = NULL;
  CHECK(weft_copy(g, dv, weft_cpu(), &back));                    /* D2H */
  weft_tensor *args[2] = {back, s};
  CHECK(weft_call(g, hsum, args, 2, NULL, 0));                   /* CPU after GPU */
  base = 2.0f;
  CHECK(weft_call(g, hset, &h, 1, &base, sizeof base));          /* CPU overwrites h after the copy read it */
  for (int r = 0; r < 4; r++) {
    CHECK(weft_graph_run(g));
    double got;
    CHECK(weft_tensor_get(s, 0, &got));
    /* 3 * sum_{i>=1} (1 + i) over i < 1000, element 0 zeroed. */
    double want = 0;
    for (int i = 1; i < 1000; i++) want += 3.0 * (1.0 + i);
    assert_true(fabs(got - want) < 1e-3);
    double hv;
    CHECK(weft_tensor_get(h, 5, &hv)); /* the last writer of h ran after the copy read it */
    assert_true(hv == 7.0);
  }
  assert_int_equal(gt_run_stats(rt).captures, 0); /* CPU nodes and a user op: never replayed */
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
#endif
}

/* ---- several graphs at once ---------------------------------------------------------------- */

static void graphs_run_at_once(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  weft_runtime *rt = gt_runtime(4, 0);
  enum { G = 6 };
  weft_graph *g[G];
  weft_tensor *out[G];
  for (int k = 0; k < G; k++) {
    g[k] = tu_graph(rt);
    weft_device dev = weft_cuda(k % gt_gpus());
    weft_tensor *x;
    CHECK(weft_tensor_create(g[k], "x", WEFT_F32, 2, (int64_t[]){128, 128}, dev, weft_uniform(-0.1, 0.1, (uint64_t)k), &x));
    weft_tensor *y = x;
    for (int i = 0; i < 40; i++) {
      weft_tensor *z = NULL;
      CHECK(weft_mm(g[k], y, x, &z));
      y = z;
    }
    out[k] = NULL;
    CHECK(weft_norm(g[k], y, &out[k]));
  }
  double first[G];
  for (int round = 0; round < 3; round++) {
    weft_run *runs[G];
    for (int k = 0; k < G; k++) CHECK(weft_graph_launch(g[k], &runs[k]));
    for (int k = 0; k < G; k++) {
      CHECK(weft_run_wait(runs[k]));
      weft_run_destroy(runs[k]);
      double v;
      CHECK(weft_tensor_get(out[k], 0, &v));
      if (round == 0)
        first[k] = v;
      else
        assert_true(v == first[k]); /* deterministic from run to run, replayed or not */
    }
  }
  for (int k = 0; k < G; k++) weft_graph_destroy(g[k]);
  weft_runtime_destroy(rt);
}

/* ---- busy streams ------------------------------------------------------------------------ */

#if WEFT_HAVE_CUDA
/* A user CUDA op that adds its parameter k to x[0] (one thread's worth of work on the node's
 * stream), and fails when k is 37. */
static int add_k_kernel(weft_kernel_ctx *ctx) {
  int k = *(const int *)weft_ctx_params(ctx, NULL);
  if (k == 37) return weft_ctx_fail(ctx, "failing on purpose at %d", k);
  float v = (float)k;
  cudaStream_t s = weft_ctx_cuda_stream(ctx);
  if (cudaMemcpyAsync(weft_ctx_data(ctx, 0), &v, sizeof v, cudaMemcpyHostToDevice, s) != cudaSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess) /* v is on this stack frame */
    return weft_ctx_fail(ctx, "cudaMemcpyAsync failed");
  return WEFT_OK;
}
#endif

/* Workers that find a node's stream busy leave the node to the thread enqueueing there
 * (cuda_launch.c, "Combining"). With one compute stream and 8 workers, 200 independent
 * products, 50 copies of them to the host each summed by a CPU node (a combined node with a
 * CPU successor), and 100 user kernels one of which fails: every result is right, nodes were
 * combined, and the failure is the failing node's, with its message. */
static void busy_streams_are_combined(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
#if WEFT_HAVE_CUDA
  weft_runtime *rt = gt_runtime_env(8, 0, "WEFT_CUDA_STREAMS", "1");
  weft_cuda_set_replay(rt, 0);
  enum { P = 200, C = 50, U = 100, N = 32 };
  weft_graph *g = tu_graph(rt);
  weft_tensor *x, *y[P], *sums[C];
  CHECK(weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){N, N}, weft_cuda(0), weft_uniform(-1, 1, 5), &x));
  for (int i = 0; i < P; i++) {
    y[i] = NULL;
    CHECK(weft_mm(g, x, x, &y[i]));
    weft_tensor_keep(y[i]); /* read after the runs; the copies read it too */
  }
  for (int i = 0; i < C; i++) {
    weft_tensor *h = NULL;
    sums[i] = NULL;
    CHECK(weft_copy(g, y[i], weft_cpu(), &h));
    CHECK(weft_sum(g, h, &sums[i]));
  }
  float hx[N * N], want[N * N], got[N * N];
  double want_sum = 0;
  for (int run = 0; run < 3; run++) {
    CHECK(weft_graph_run(g));
    if (run == 0) {
      CHECK(weft_tensor_read(x, hx, sizeof hx));
      for (int r = 0; r < N; r++)
        for (int c = 0; c < N; c++) {
          double a = 0;
          for (int k = 0; k < N; k++) a += (double)hx[r * N + k] * hx[k * N + c];
          want[r * N + c] = (float)a;
          want_sum += a;
        }
    }
    for (int i = 0; i < P; i++) {
      CHECK(weft_tensor_read(y[i], got, sizeof got));
      for (int e = 0; e < N * N; e++) assert_true(fabsf(got[e] - want[e]) <= 1e-4f * (1 + fabsf(want[e])));
    }
    for (int i = 0; i < C; i++) {
      double v;
      CHECK(weft_tensor_get(sums[i], 0, &v));
      assert_true(fabs(v - want_sum) <= 1e-3 * (1 + fabs(want_sum)));
    }
  }
  weft_cuda_run_stats rs = gt_run_stats(rt);
  print_message("%llu of %d nodes combined in 3 runs\n", rs.combined, 3 * (P + C));
  assert_true(rs.combined > 0);
  weft_graph_destroy(g);
  /* A failure on the combined path is its node's. */
  const weft_op *add_k = gt_op(rt, "add_k", WEFT_WRITE, NULL, add_k_kernel);
  g = tu_graph(rt);
  weft_tensor *t[U];
  for (int k = 0; k < U; k++) {
    char name[16];
    snprintf(name, sizeof name, "t%d", k);
    CHECK(weft_tensor_create(g, name, WEFT_F32, 1, (int64_t[]){1}, weft_cuda(0), weft_zeros(), &t[k]));
    CHECK(weft_call(g, add_k, &t[k], 1, &k, sizeof k));
  }
  for (int run = 0; run < 3; run++) {
    weft_run *r;
    CHECK(weft_graph_launch(g, &r));
    assert_int_equal(weft_run_wait(r), WEFT_EKERNEL);
    assert_non_null(strstr(weft_run_error(r), "failing on purpose at 37"));
    assert_non_null(strstr(weft_run_error(r), "add_k"));
    assert_non_null(weft_run_failed_node(r));
    weft_run_destroy(r);
    for (int k = 0; k < U; k++) { /* every other node ran */
      double v;
      CHECK(weft_tensor_get(t[k], 0, &v));
      assert_true(v == (k == 37 ? 0.0 : (double)k));
    }
  }
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(devices_are_discovered, gt_setup, gt_teardown),
      cmocka_unit_test(max_gpus_limits_the_devices),
      cmocka_unit_test(first_gpu_picks_the_gpus),
      cmocka_unit_test(ops_agree_with_the_cpu),
      cmocka_unit_test_setup_teardown(random_initialisers_match_the_cpu, gt_setup, gt_teardown),
      cmocka_unit_test(copies_in_every_direction),
      cmocka_unit_test(in_place_products),
      cmocka_unit_test_setup_teardown(streams_follow_the_graph, gt_setup, gt_teardown),
      cmocka_unit_test_setup_teardown(the_tail_product_is_split, gt_setup, gt_teardown),
      cmocka_unit_test(user_ops_and_cpu_neighbours),
      cmocka_unit_test(graphs_run_at_once),
      cmocka_unit_test_setup_teardown(small_chains_are_batched, gt_setup, gt_teardown),
      cmocka_unit_test_setup_teardown(a_reader_ends_a_batch, gt_setup, gt_teardown),
      cmocka_unit_test_setup_teardown(a_cancelled_batch_still_runs_what_ran, gt_setup, gt_teardown),
      cmocka_unit_test(busy_streams_are_combined),
  };
  return GT_RUN(tests);
}
