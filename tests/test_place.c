/* test_place.c — auto placement (src/sched/plan/place.c): where auto nodes run and auto tensors
 * live, on the CPU alone and on a simulated H100 machine that computes on the CPU (so results
 * can be compared bit for bit with the same program on the CPU); the transfers the placed graph
 * adds; contents written before the first run follow the tensor to its home; a user op goes
 * where its kernel is; tiles stay together; and the errors. */
#define _GNU_SOURCE /* mkstemp */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "weft/report.h"
#include "weft/sim.h"

enum { LEARN_RUNS = 3 }; /* place.c's LEARN_MIN */

/* A CPU runtime (sim == NULL) or a simulated machine that computes. */
static weft_runtime *runtime(const char *sim) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 2;
  o.flags = WEFT_RUNTIME_QUIET | (sim != NULL ? WEFT_RUNTIME_SIM_COMPUTE : 0u);
  o.simulate = sim;
  o.max_gpus = sim != NULL ? -1 : 0;
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
  return rt;
}

typedef struct prog {
  weft_tensor *a, *b, *c, *s, *h, *small, *small3;
} prog;

/* c = a . b (large), s = sum(c), h = s on the CPU, small3 = 3 * small (tiny), on `d`. */
static void build(weft_graph *g, weft_device d, prog *p) {
  memset(p, 0, sizeof *p);
  CHECK(weft_tensor_create(g, "a", WEFT_F32, 2, (int64_t[]){512, 512}, d, weft_uniform(-1, 1, 1), &p->a));
  CHECK(weft_tensor_create(g, "b", WEFT_F32, 2, (int64_t[]){512, 512}, d, weft_uniform(-1, 1, 2), &p->b));
  CHECK(weft_tensor_create(g, "small", WEFT_F32, 1, (int64_t[]){4}, d, weft_ones(), &p->small));
  CHECK(weft_tensor_create(g, "h", WEFT_F32, 0, NULL, weft_cpu(), weft_zeros(), &p->h));
  CHECK(weft_mm(g, p->a, p->b, &p->c));
  CHECK(weft_sum(g, p->c, &p->s));
  CHECK(weft_copy(g, p->s, weft_cpu(), &p->h));
  CHECK(weft_scale(g, p->small, 3, &p->small3));
  weft_tensor_keep(p->c);
}

static void read_all(weft_tensor *t, void *buf) { CHECK(weft_tensor_read(t, buf, weft_tensor_bytes(t))); }

/* The same program on auto and on the CPU, on a CPU-only runtime and on a simulated H100:
 * the same bits; on the H100 the product goes to the GPU, the tiny scale stays on the CPU, and
 * the copy of the sum to the host is one transfer on the GPU's copy engine. */
static void auto_matches_the_cpu(void **state) {
  (void)state;
  static float want_c[512 * 512], got_c[512 * 512];
  float want_h, got_h, want3[4], got3[4];
  weft_runtime *ref = runtime(NULL);
  weft_graph *rg = tu_graph(ref);
  prog r;
  build(rg, weft_cpu(), &r);
  CHECK(weft_graph_run(rg));
  read_all(r.c, want_c);
  read_all(r.h, &want_h);
  read_all(r.small3, want3);
  for (int sim = 0; sim < 2; sim++) {
    weft_runtime *rt = runtime(sim ? "h100" : NULL);
    weft_graph *g = tu_graph(rt);
    prog p;
    build(g, weft_auto(), &p);
    assert_true(weft_tensor_is_auto(p.a) && weft_tensor_is_auto(p.c) && !weft_tensor_is_auto(p.h));
    for (int run = 0; run < 2; run++) {
      weft_run *w;
      CHECK(weft_graph_launch(g, &w));
      CHECK(weft_run_wait(w));
      assert_ptr_equal(weft_run_graph(w), g);
      weft_run_destroy(w);
      read_all(p.c, got_c);
      read_all(p.h, &got_h);
      read_all(p.small3, got3);
      assert_memory_equal(got_c, want_c, sizeof want_c);
      assert_true(got_h == want_h);
      assert_memory_equal(got3, want3, sizeof want3);
    }
    weft_placement pl;
    CHECK(weft_node_placement(g, weft_graph_node(g, 0), &pl));
    assert_int_equal(pl.device.kind, sim ? WEFT_DEVICE_CUDA : WEFT_DEVICE_CPU);
    assert_true(tu_contains(pl.why, "auto:"));
    assert_int_equal(weft_tensor_device(p.c).kind, sim ? WEFT_DEVICE_CUDA : WEFT_DEVICE_CPU); /* its home */
    CHECK(weft_node_placement(g, weft_graph_node(g, 2), &pl)); /* s to the host: one transfer */
    if (sim) assert_true(tu_contains(pl.lane, "copy d2h"));
    CHECK(weft_node_placement(g, weft_graph_node(g, 3), &pl)); /* the tiny scale */
    assert_int_equal(pl.device.kind, WEFT_DEVICE_CPU);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  weft_graph_destroy(rg);
  weft_runtime_destroy(ref);
}

/* Contents written before the first run move with the tensor to its home. */
static void written_contents_follow_the_tensor(void **state) {
  (void)state;
  weft_runtime *rt = runtime("h100");
  weft_graph *g = tu_graph(rt);
  weft_tensor *x, *y = NULL;
  CHECK(weft_tensor_create(g, "x", WEFT_F64, 2, (int64_t[]){256, 256}, weft_auto(), weft_zeros(), &x));
  double *v = malloc(256 * 256 * sizeof *v), *out = malloc(256 * 256 * sizeof *out);
  for (int i = 0; i < 256 * 256; i++) v[i] = (double)(i % 17) - 8;
  CHECK(weft_tensor_write(x, v, 256 * 256 * sizeof *v)); /* on the host: no home yet */
  CHECK(weft_mm(g, x, x, &y));
  CHECK(weft_graph_run(g));
  assert_int_equal(weft_tensor_device(x).kind, WEFT_DEVICE_CUDA); /* moved to the GPU */
  read_all(x, out);
  assert_memory_equal(out, v, 256 * 256 * sizeof *v);
  read_all(y, out);
  double want = 0;
  for (int k = 0; k < 256; k++) want += v[k] * v[k * 256];
  assert_true(fabs(out[0] - want) < 1e-9);
  free(v);
  free(out);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* A user op goes where it has a kernel; one that has a kernel nowhere the planner may put it
 * fails the launch, naming the node. */
static void user_ops_go_where_their_kernel_is(void **state) {
  (void)state;
  weft_runtime *rt = runtime("h100");
  const weft_op *op = tu_op1(rt, "add_one", WEFT_READ_WRITE, tu_add_one, NULL);
  weft_graph *g = tu_graph(rt);
  weft_tensor *x, *y = NULL;
  CHECK(weft_tensor_create(g, "x", WEFT_F64, 2, (int64_t[]){1024, 1024}, weft_auto(), weft_ones(), &x));
  CHECK(weft_mm(g, x, x, &y)); /* the GPU's */
  CHECK(weft_call(g, op, &y, 1, NULL, 0)); /* the CPU's: its only kernel */
  CHECK(weft_graph_run(g));
  weft_placement pl;
  CHECK(weft_node_placement(g, weft_graph_node(g, 1), &pl));
  assert_int_equal(pl.device.kind, WEFT_DEVICE_CPU);
  double v;
  CHECK(weft_tensor_get(y, 5, &v));
  assert_true(v == 1025.0);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  /* A CUDA-only op on a machine without a GPU. */
  rt = runtime(NULL);
  op = tu_op1(rt, "gpu_only", WEFT_READ_WRITE, NULL, tu_add_one);
  g = tu_graph(rt);
  CHECK(weft_tensor_create(g, "x", WEFT_F64, 1, (int64_t[]){4}, weft_auto(), weft_ones(), &x));
  CHECK(weft_call(g, op, &x, 1, NULL, 0));
  assert_int_equal(weft_graph_run(g), WEFT_EDEVICE);
  assert_true(tu_contains(weft_last_error(), "gpu_only"));
  assert_true(tu_contains(weft_last_error(), "no device can run it"));
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* A tiled Cholesky on an auto matrix: the planner places each tile's node (tiles move between
 * devices as contiguous replicas); the factor is right. Then a tile written on the GPU is read
 * by a CPU-only op: a strided transfer to a replica on the host. */
static void tiles_are_placed_one_by_one(void **state) {
  (void)state;
  weft_runtime *rt = runtime("h100");
  weft_graph *g = tu_graph(rt);
  const int64_t n = 96;
  double *a = tu_spd(n, 5), *l = malloc((size_t)(n * n) * sizeof *l);
  weft_tensor *x;
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){n, n}, weft_auto(), weft_zeros(), &x));
  CHECK(weft_tensor_write(x, a, (size_t)(n * n) * sizeof *a));
  CHECK(tu_cholesky(g, x, 32));
  CHECK(weft_graph_run(g));
  read_all(x, l);
  assert_true(tu_residual(l, a, n) < 1e-13);
  /* A tile read on the host by the CPU-only op, after a GPU gemm wrote it. */
  const weft_op *op = tu_op1(rt, "add_one", WEFT_READ_WRITE, tu_add_one, NULL);
  weft_tensor *big;
  CHECK(weft_tensor_create(g, "B", WEFT_F64, 2, (int64_t[]){1024, 1024}, weft_auto(), weft_ones(), &big));
  CHECK(weft_tensor_tiles(g, big, 512, 512));
  CHECK(weft_call(g, op, &big, 1, NULL, 0)); /* the whole on the host (its only kernel): B's home */
  CHECK(weft_gemm(g, weft_tensor_tile(big, 0, 1), 0, weft_tensor_tile(big, 1, 0), 0, 1.0, 0.0, weft_tensor_tile(big, 1, 1)));
  CHECK(weft_scale(g, big, 2.0, &big)); /* the whole, after the tile's write */
  CHECK(weft_graph_run(g));
  size_t last = weft_graph_node_count(g);
  weft_placement pl;
  CHECK(weft_node_placement(g, weft_graph_node(g, last - 3), &pl));
  assert_int_equal(pl.device.kind, WEFT_DEVICE_CPU); /* add_one */
  CHECK(weft_node_placement(g, weft_graph_node(g, last - 2), &pl));
  assert_int_equal(pl.device.kind, WEFT_DEVICE_CUDA); /* the 512^3 gemm: its tiles moved there */
  assert_int_equal(weft_tensor_device(big).kind, WEFT_DEVICE_CPU);
  double v;
  CHECK(weft_tensor_get(big, 512 * 1024 + 512, &v)); /* tile (1,1): 512 products of 2 x 2, doubled */
  assert_true(v == 4096.0);
  CHECK(weft_tensor_get(big, 1023 * 1024 + 1023, &v));
  assert_true(v == 4096.0);
  CHECK(weft_tensor_get(big, 0, &v));
  assert_true(v == 4.0);
  free(a);
  free(l);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* The tiled Cholesky with the panel solved by products with the inverted diagonal factor, all
 * on auto (its scratch tensors too): the tiles' products go to the GPUs, the strided tiles are
 * copied to and from contiguous scratch (2-D copies), and the factor is the same graph's on the
 * CPU bit for bit. */
static void the_inverse_panel_on_auto(void **state) {
  (void)state;
  const int64_t n = 200, b = 64; /* 4 x 4 tiles, the last of 8 */
  size_t bytes = (size_t)(n * n) * sizeof(double);
  double *a = tu_spd(n, 3), *lc = malloc(bytes), *la = malloc(bytes);
  for (int pass = 0; pass < 2; pass++) {
    weft_runtime *rt = runtime(pass == 0 ? NULL : "h200x2");
    weft_device dev = pass == 0 ? weft_cpu() : weft_auto();
    weft_graph *g = tu_graph(rt);
    weft_tensor *x;
    CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){n, n}, dev, weft_zeros(), &x));
    CHECK(weft_tensor_write(x, a, bytes));
    CHECK(weft_tensor_tiles(g, x, b, b));
    CHECK(tu_cholesky_inverse(g, x, dev));
    CHECK(weft_graph_run(g));
    read_all(x, pass == 0 ? lc : la);
    if (pass == 1) { /* the first panel product went to a GPU */
      weft_placement pl;
      size_t i = 0;
      while (strcmp(weft_node_op_name(weft_graph_node(g, i)), "gemm") != 0) i++;
      CHECK(weft_node_placement(g, weft_graph_node(g, i), &pl));
      assert_int_equal(pl.device.kind, WEFT_DEVICE_CUDA);
    }
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  assert_true(tu_residual(la, a, n) < 1e-13);
  assert_memory_equal(la, lc, bytes);
  free(a);
  free(lc);
  free(la);
}

/* A fixed GPU tensor read by an auto node that runs on the CPU, and an auto tensor read by a
 * fixed node on the GPU: each gets its transfer, and the results are the CPU's. */
static void fixed_and_auto_mix(void **state) {
  (void)state;
  double want[8], got[8];
  for (int sim = 0; sim < 2; sim++) {
    weft_runtime *rt = runtime(sim ? "h100" : NULL);
    weft_graph *g = tu_graph(rt);
    weft_device gpu = sim ? weft_cuda(0) : weft_cpu();
    weft_tensor *f, *a, *s = NULL, *t = NULL;
    CHECK(weft_tensor_create(g, "f", WEFT_F64, 1, (int64_t[]){8}, gpu, weft_uniform(0, 1, 3), &f));
    CHECK(weft_tensor_create(g, "a", WEFT_F64, 1, (int64_t[]){8}, weft_auto(), weft_full(2), &a));
    CHECK(weft_mul(g, a, f, &a)); /* auto: a *= f */
    CHECK(weft_tensor_create(g, "t", WEFT_F64, 1, (int64_t[]){8}, gpu, weft_zeros(), &t));
    CHECK(weft_add(g, a, f, &t)); /* fixed: t = a + f */
    CHECK(weft_sum(g, t, &s));
    weft_tensor_keep(s);
    CHECK(weft_graph_run(g));
    read_all(t, sim ? got : want);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  assert_memory_equal(got, want, sizeof got);
}

/* The profile that prices placement: a shipped name or a file; one that does not load fails
 * the runtime's creation, naming it. */
static void the_profile_is_chosen(void **state) {
  (void)state;
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 1;
  o.max_gpus = 0;
  o.flags = WEFT_RUNTIME_QUIET;
  o.profile = "h200x2";
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
  weft_runtime_destroy(rt);
  rt = NULL;
  o.profile = "/nonexistent/machine.json";
  assert_int_not_equal(weft_runtime_create(&o, &rt), WEFT_OK);
  assert_null(rt);
  assert_true(tu_contains(weft_last_error(), "/nonexistent/machine.json"));
}

/* With a GPU memory limit, a node whose operands do not fit goes elsewhere, and one that fits
 * nowhere it has a kernel fails the launch naming it and the bytes. */
static void the_memory_limit_is_kept(void **state) {
  (void)state;
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 2;
  o.flags = WEFT_RUNTIME_QUIET | WEFT_RUNTIME_SIM_COMPUTE;
  o.simulate = "h100";
  o.device_memory_limit = 6u << 20; /* 6 MiB */
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
  weft_graph *g = tu_graph(rt);
  weft_tensor *a, *c = NULL, *small, *s2 = NULL;
  CHECK(weft_tensor_create(g, "a", WEFT_F32, 2, (int64_t[]){1024, 1024}, weft_auto(), weft_ones(), &a)); /* 4 MiB */
  CHECK(weft_mm(g, a, a, &c)); /* 8 MiB of operands: not on the GPU (6 MiB) */
  CHECK(weft_tensor_create(g, "small", WEFT_F32, 2, (int64_t[]){512, 512}, weft_auto(), weft_ones(), &small));
  CHECK(weft_mm(g, small, small, &s2)); /* 2 MiB: fits */
  CHECK(weft_graph_run(g));
  weft_placement pl;
  CHECK(weft_node_placement(g, weft_graph_node(g, 0), &pl));
  assert_int_equal(pl.device.kind, WEFT_DEVICE_CPU);
  CHECK(weft_node_placement(g, weft_graph_node(g, 1), &pl));
  assert_int_equal(pl.device.kind, WEFT_DEVICE_CUDA);
  double v;
  CHECK(weft_tensor_get(c, 0, &v));
  assert_true(v == 1024.0);
  weft_graph_destroy(g);
  /* A CUDA-only op on 16 MiB. */
  const weft_op *op = tu_op1(rt, "gpu_only", WEFT_READ_WRITE, NULL, tu_add_one);
  g = tu_graph(rt);
  weft_tensor *x;
  CHECK(weft_tensor_create(g, "x", WEFT_F64, 2, (int64_t[]){1024, 2048}, weft_auto(), weft_ones(), &x));
  CHECK(weft_call(g, op, &x, 1, NULL, 0));
  assert_int_equal(weft_graph_run(g), WEFT_EDEVMEM);
  assert_true(tu_contains(weft_last_error(), "gpu_only"));
  assert_true(tu_contains(weft_last_error(), "16777216 bytes"));
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* The overlap graph (50 x (y = x.x; copy y to the host)) on auto on a simulated H100: the same
 * makespan and GPU memory as placed by hand (the program's temporaries are the placed graph's,
 * freed by its memory plan), and its copies go to pinned memory (the views' owners). */
static void overlap_on_auto_matches_hand_placement(void **state) {
  (void)state;
  double makespan[2];
  uint64_t peak[2];
  for (int a = 0; a < 2; a++) {
    weft_runtime_options o;
    weft_runtime_options_init(&o);
    o.cpu_workers = 2;
    o.flags = WEFT_RUNTIME_QUIET;
    o.simulate = "h100";
    weft_runtime *rt = NULL;
    CHECK(weft_runtime_create(&o, &rt));
    weft_graph *g = tu_graph(rt);
    tu_overlap o2;
    tu_overlap_build(&o2, g, a ? weft_auto() : weft_cuda(0), 4000, weft_uniform(-1, 1, 1), 50);
    weft_run *r;
    CHECK(weft_graph_run(g));
    CHECK(weft_graph_launch(g, &r));
    CHECK(weft_run_wait(r));
    weft_sim_summary s;
    CHECK(weft_sim_run_summary(r, &s));
    makespan[a] = s.makespan_s;
    CHECK(weft_sim_peak_bytes(r, weft_cuda(0), &peak[a]));
    weft_run_destroy(r);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  assert_true(fabs(makespan[1] - makespan[0]) <= 0.02 * makespan[0]);
  assert_true(peak[1] <= peak[0] + (peak[0] >> 3));
}

/* Out of core: a tiled Cholesky of a matrix four times the GPU memory placement may use. The
 * matrix lives on the host; its tiles visit the GPU (the replicas used furthest ahead leave
 * first, written back when they hold the only valid copy; a tile's last write goes back at
 * once); the factor is right, the GPU's simulated peak stays within the limit in any order of
 * the plan, the factor's tiles are written back about once each, and each crosses the link
 * whole (packed on the host). */
static void out_of_core(const char *profile, const char *policy, int64_t b) {
  const int64_t n = 2048;
  const size_t limit = (size_t)(n * n) * sizeof(double) / 4;
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 2;
  o.flags = WEFT_RUNTIME_QUIET | WEFT_RUNTIME_SIM_COMPUTE;
  o.simulate = profile;
  o.policy = policy;
  o.device_memory_limit = limit;
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
  weft_graph *g = tu_graph(rt);
  double *a = tu_spd(n, 9), *l = malloc((size_t)(n * n) * sizeof *l);
  weft_tensor *x;
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){n, n}, weft_auto(), weft_zeros(), &x));
  CHECK(weft_tensor_write(x, a, (size_t)(n * n) * sizeof *a));
  CHECK(tu_cholesky(g, x, b));
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  CHECK(weft_run_wait(r));
  int gpus = weft_device_count(rt, WEFT_DEVICE_CUDA);
  uint64_t peak = 0;
  for (int k = 0; k < gpus; k++) {
    uint64_t p;
    CHECK(weft_sim_peak_bytes(r, weft_cuda(k), &p));
    if (p > peak) peak = p;
  }
  weft_run_stats *st;
  CHECK(weft_run_stats_create(r, &st));
  weft_stats_summary s;
  weft_run_stats_summary(st, &s);
  weft_run_stats_destroy(st);
  weft_run_destroy(r);
  size_t on_gpu = 0;
  for (size_t i = 0; i < weft_graph_node_count(g); i++) {
    weft_placement pl;
    CHECK(weft_node_placement(g, weft_graph_node(g, i), &pl));
    on_gpu += pl.device.kind == WEFT_DEVICE_CUDA;
  }
  print_message("out of core on %s, policy %s, tiles of %lld: %zu of %zu nodes on a GPU, peak %.1f MiB (limit %.1f MiB), "
                "moved %.1f MB in, %.1f MB out\n",
                profile, policy ? policy : "fixed", (long long)b, on_gpu, weft_graph_node_count(g), (double)peak / 1048576.0,
                (double)limit / 1048576.0,
                (double)s.bytes_h2d * 1e-6, (double)s.bytes_d2h * 1e-6);
  assert_true(on_gpu > weft_graph_node_count(g) / 2);
  assert_int_equal(weft_tensor_device(x).kind, WEFT_DEVICE_CPU); /* it lives on the host */
  assert_true(peak <= limit + limit / 4);
  /* The lowering's out-of-core order finishes the work on what is resident before it leaves:
   * the factor's tiles go back to the host about once each (the program's order wrote 1.5
   * times the lower triangle back). */
  double tri = (double)(n / b) * (double)(n / b + 1) / 2 * (double)(b * b) * sizeof(double);
  if (gpus == 1) assert_true((double)s.bytes_d2h <= 1.4 * tri); /* between GPUs tiles also go through the host */
  assert_int_equal(s.bytes_peer, 0);
  /* Strided tiles cross the link whole: every byte in or out was packed or unpacked on the host
   * (a copy within host memory) beside its contiguous transfer. */
  print_message("  host-side packing: %.1f MB\n", (double)s.bytes_local * 1e-6);
  assert_true(s.bytes_local == s.bytes_h2d + s.bytes_d2h);
  read_all(x, l);
  assert_true(tu_residual(l, a, n) < 1e-13);
  free(a);
  free(l);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* A matrix four times the GPU's budget, factorised out of core: in the program's order
 * (`fixed`) and in list scheduling's (`heft`, which reorders the placed graph: its copies in
 * must still wait for the evictions that make their room), tiles of 512 and 256, on one GPU
 * and on two. */
static void larger_than_the_gpu(void **state) {
  (void)state;
  out_of_core("h100", NULL, 512);
  out_of_core("h100", "heft", 512);
  out_of_core("h100", "heft", 256);
  /* Two GPUs, each limited: what moves between them goes through the host, so that each frees
   * its replicas during the run (over the peer link, each peaked at three times the limit). */
  out_of_core("h200x2", "heft", 256);
}

/* Measured times correct a wrong profile: placement is told the CPU multiplies 10^4 times
 * faster than it does, so the product goes to the CPU; the simulated runs measure what it
 * really costs there, and once three runs agree (a median, not one sample) the next launch
 * places it on the GPU. */
/* Writes a copy of the shipped h100 profile whose rates (numbers with a positive exponent)
 * between the keys `from` and `to` are 10^4 times larger into a temporary file named in tmp. */
static void profile_faster(const char *from, const char *to, char *tmp) {
  char path[256];
  snprintf(path, sizeof path, "%s/h100.json", WEFT_PROFILES_DIR);
  size_t len;
  char *text = tu_read_file(path, &len);
  assert_non_null(text);
  /* Each exponent between the sections (1.22423e+11, 1.22423e11 or 9.7e9) becomes e+(NN+4). */
  char *lo = strstr(text, from), *hi = strstr(text, to);
  assert_non_null(lo);
  assert_non_null(hi);
  char *out = malloc(len * 2 + 64);
  size_t o = 0;
  int changed = 0;
  for (char *q = text; *q; q++) {
    int plus = q[0] == 'e' && q[1] == '+';
    const char *d = q + 1 + plus;
    if (q > lo && q < hi && q[0] == 'e' && d[0] >= '0' && d[0] <= '9') {
      int two = d[1] >= '0' && d[1] <= '9', e = two ? (d[0] - '0') * 10 + (d[1] - '0') : d[0] - '0';
      o += (size_t)sprintf(out + o, "e+%02d", e + 4);
      q += plus + (two ? 2 : 1);
      changed++;
      continue;
    }
    out[o++] = *q;
  }
  assert_true(changed >= 10);
  int fd = mkstemp(tmp);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, out, o), (ssize_t)o);
  close(fd);
  free(out);
  free(text);
}

/* A runtime on the simulated H100 whose placement prices with profile_faster(from, to). */
static weft_runtime *priced_wrong(const char *from, const char *to, char *tmp) {
  profile_faster(from, to, tmp);
  weft_runtime_options ro;
  weft_runtime_options_init(&ro);
  ro.cpu_workers = 2;
  ro.flags = WEFT_RUNTIME_QUIET;
  ro.simulate = "h100";
  ro.profile = tmp;
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&ro, &rt));
  return rt;
}

static void measured_times_correct_the_prices(void **state) {
  (void)state;
  char tmp[] = "/tmp/weft_test_profileXXXXXX";
  weft_runtime *rt = priced_wrong("\"host\"", "\"gpu\"", tmp); /* the host's rates x 10^4 */
  weft_graph *g = tu_graph(rt);
  weft_tensor *a, *c = NULL;
  CHECK(weft_tensor_create(g, "a", WEFT_F32, 2, (int64_t[]){2048, 2048}, weft_auto(), weft_ones(), &a));
  CHECK(weft_mm(g, a, a, &c));
  int first_gpu = -1;
  for (int run = 0; run < 8 && first_gpu < 0; run++) {
    weft_placement pl;
    CHECK(weft_node_placement(g, weft_graph_node(g, 0), &pl));
    if (run == 0) assert_int_equal(pl.device.kind, WEFT_DEVICE_CPU); /* the profile's lie */
    if (pl.device.kind == WEFT_DEVICE_CUDA) first_gpu = run;
    CHECK(weft_graph_run(g));
  }
  print_message("the product moved to the GPU before run %d\n", first_gpu);
  assert_true(first_gpu >= LEARN_RUNS && first_gpu <= LEARN_RUNS + 1);
  unlink(tmp);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* Measured times that move a price without moving a decision keep the placed graph (its plan,
 * its storage): the GPU priced 10^4 times too fast still wins the product, so after the runs
 * that correct its price the placement is the same and nothing is made again (the replica of
 * `a` the CPU's sum reads is pinned once, in the first run). */
static void prices_that_move_no_decision_keep_the_placed_graph(void **state) {
  (void)state;
  char tmp[] = "/tmp/weft_test_profileXXXXXX";
  weft_runtime *rt = priced_wrong("\"gpu\"", "\"links\"", tmp); /* the GPU's rates x 10^4 */
  weft_graph *g = tu_graph(rt);
  weft_tensor *a, *c = NULL, *s;
  CHECK(weft_tensor_create(g, "a", WEFT_F32, 2, (int64_t[]){2048, 2048}, weft_auto(), weft_ones(), &a));
  CHECK(weft_tensor_create(g, "s", WEFT_F32, 0, NULL, weft_cpu(), weft_zeros(), &s));
  CHECK(weft_mm(g, a, a, &c));
  CHECK(weft_sum(g, a, &s));
  double est[8];
  int made[8], moved = -1;
  for (int run = 0; run < 8; run++) {
    weft_placement pl;
    CHECK(weft_node_placement(g, weft_graph_node(g, 0), &pl));
    assert_int_equal(pl.device.kind, WEFT_DEVICE_CUDA);
    const char *e = strstr(pl.why, "est. ");
    assert_non_null(e);
    est[run] = atof(e + 5);
    if (run > 0 && moved < 0 && est[run] > 2 * est[run - 1]) moved = run;
    weft_run *r;
    CHECK(weft_graph_launch(g, &r));
    CHECK(weft_run_wait(r));
    weft_run_stats *st;
    CHECK(weft_run_stats_create(r, &st));
    const weft_setup_step *steps;
    size_t n = weft_run_stats_setup(st, &steps);
    made[run] = 0;
    for (size_t k = 0; k < n; k++) made[run] += strcmp(steps[k].kind, "tensor") == 0 && steps[k].bytes >= (1u << 20);
    weft_run_stats_destroy(st);
    weft_run_destroy(r);
  }
  print_message("the product's price moved before run %d (est. %.3g -> %.3g ms); tensors made in run 0: %d\n", moved,
                moved > 0 ? est[moved - 1] : 0.0, moved > 0 ? est[moved] : 0.0, made[0]);
  assert_true(moved >= LEARN_RUNS && moved <= LEARN_RUNS + 1); /* the price did move */
  assert_true(made[0] >= 1);                                   /* a@cpu, pinned */
  for (int run = 1; run < 8; run++) assert_int_equal(made[run], 0);
  unlink(tmp);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* A finished run's handle outlives a re-placement of its program: its statistics still read. */
static void a_run_outlives_its_placement(void **state) {
  (void)state;
  weft_runtime *rt = runtime("h100");
  weft_graph *g = tu_graph(rt);
  weft_tensor *a, *c = NULL, *d = NULL;
  CHECK(weft_tensor_create(g, "a", WEFT_F32, 2, (int64_t[]){256, 256}, weft_auto(), weft_ones(), &a));
  CHECK(weft_mm(g, a, a, &c));
  weft_run *old;
  CHECK(weft_graph_launch(g, &old));
  CHECK(weft_run_wait(old));
  CHECK(weft_scale(g, c, 2.0, &d)); /* the program changes: placed again at the next launch */
  CHECK(weft_graph_run(g));
  weft_run_stats *st;
  CHECK(weft_run_stats_create(old, &st));
  weft_stats_summary s;
  weft_run_stats_summary(st, &s);
  assert_int_equal(s.nodes_run, 1);
  weft_run_stats_destroy(st);
  weft_run_destroy(old);
  double v;
  CHECK(weft_tensor_get(d, 0, &v));
  assert_true(v == 512.0);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* The GPUs that partitioned tensor x's tiles (t x t) live on, as a mask; each tile must live
 * where the last node that wrote it ran. */
static unsigned tiles_at_last_writers(weft_graph *g, weft_tensor *x, int t) {
  unsigned gpus = 0;
  for (int q = 0; q < t * t; q++) {
    weft_tensor *tile = weft_tensor_tile(x, q / t, q % t);
    weft_device last = weft_auto(), d = weft_tensor_device(tile);
    for (size_t i = 0; i < weft_graph_node_count(g); i++) {
      weft_node *nd = weft_graph_node(g, i);
      for (int k = 0; k < weft_node_nargs(nd); k++) {
        weft_access mode;
        weft_placement pl;
        if (weft_node_arg(nd, k, &mode) != tile || !(mode & WEFT_WRITE)) continue;
        CHECK(weft_node_placement(g, nd, &pl));
        last = pl.device;
      }
    }
    if (last.kind != WEFT_DEVICE_AUTO) assert_true(weft_device_equal(d, last));
    if (d.kind == WEFT_DEVICE_CUDA) gpus |= 1u << d.index;
  }
  return gpus;
}

/* A matrix that only its tiles' nodes use, on several GPUs: its tiles each live where their
 * last writer ran (the matrix is split over the GPUs, not gathered on one at every run), the
 * whole on the host for the calls that take it; the factor is the CPU's bit for bit, run after
 * run. A node that uses the whole joins it again at the next launch, its contents kept. At the
 * size of the benchmark (simulated, nothing computed) the tiles live on all four GPUs. */
static void tiles_live_where_they_are_written(void **state) {
  (void)state;
  const int64_t n = 1024, b = 256; /* 4 x 4 tiles */
  size_t bytes = (size_t)(n * n) * sizeof(double);
  double *a = tu_spd(n, 7), *lc = malloc(bytes), *la = malloc(bytes);
  weft_runtime *ref = runtime(NULL), *rt = runtime("h200x4");
  weft_graph *rg = tu_graph(ref), *g = tu_graph(rt);
  weft_tensor *xc, *x;
  CHECK(weft_tensor_create(rg, "A", WEFT_F64, 2, (int64_t[]){n, n}, weft_cpu(), weft_zeros(), &xc));
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){n, n}, weft_auto(), weft_zeros(), &x));
  CHECK(weft_tensor_tiles(rg, xc, b, b));
  CHECK(weft_tensor_tiles(g, x, b, b));
  CHECK(tu_cholesky_inverse(rg, xc, weft_cpu()));
  CHECK(tu_cholesky_inverse(g, x, weft_auto()));
  CHECK(weft_tensor_write(xc, a, bytes));
  CHECK(weft_graph_run(rg));
  read_all(xc, lc);
  assert_true(tu_residual(lc, a, n) < 1e-13);
  for (int run = 0; run < 3; run++) {
    memset(la, 0, bytes);
    CHECK(weft_tensor_write(x, a, bytes));
    CHECK(weft_graph_run(g));
    read_all(x, la);
    assert_memory_equal(la, lc, bytes);
  }
  assert_int_equal(weft_tensor_device(x).kind, WEFT_DEVICE_CPU);
  assert_true(tiles_at_last_writers(g, x, 4) != 0);
  /* The whole read by a node: joined on the host at the next launch, its contents the factor. */
  weft_tensor *sum = NULL;
  CHECK(weft_sum(g, x, &sum));
  CHECK(weft_tensor_write(x, a, bytes));
  CHECK(weft_graph_run(g));
  read_all(x, la);
  assert_memory_equal(la, lc, bytes);
  weft_device home = weft_tensor_device(x);
  for (int q = 0; q < 16; q++) assert_true(weft_device_equal(weft_tensor_device(weft_tensor_tile(x, q / 4, q % 4)), home));
  double want = 0, got;
  for (int64_t k = 0; k < n * n; k++) want += lc[k];
  CHECK(weft_tensor_get(sum, 0, &got));
  assert_true(fabs(got - want) <= 1e-9 * fabs(want));
  free(a);
  free(lc);
  free(la);
  weft_graph_destroy(rg);
  weft_graph_destroy(g);
  weft_runtime_destroy(ref);
  /* The benchmark's size, simulated: 8 x 8 tiles of 2048^2 over the four GPUs. */
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.flags = WEFT_RUNTIME_QUIET;
  o.simulate = "h200x4";
  o.max_gpus = -1;
  weft_runtime *big = NULL;
  CHECK(weft_runtime_create(&o, &big));
  g = tu_graph(big);
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){16384, 16384}, weft_auto(), weft_zeros(), &x));
  CHECK(weft_tensor_tiles(g, x, 2048, 2048));
  CHECK(tu_cholesky_inverse(g, x, weft_auto()));
  CHECK(weft_graph_run(g));
  unsigned gpus = tiles_at_last_writers(g, x, 8);
  print_message("the tiles of 2048^2 live on GPUs 0x%x\n", gpus);
  assert_int_equal(gpus, 0xf);
  weft_graph_destroy(g);
  weft_runtime_destroy(big);
  weft_runtime_destroy(rt);
}

/* A graph with a distributed tensor and auto devices: placement would move the distributed
 * tiles off their places, so the launch is refused, naming the tensor, and nothing runs. */
static void auto_beside_a_distributed_tensor_is_refused(void **state) {
  (void)state;
  weft_runtime *rt = runtime("h100");
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *a = NULL, *x = NULL, *y = NULL;
  CHECK(weft_tensor_create(g, "D", WEFT_F64, 2, (int64_t[]){64, 64}, weft_cpu(), weft_ones(), &a));
  CHECK(weft_tensor_tiles(g, a, 32, 32));
  CHECK(weft_tensor_distribute(g, a, 1, 1));
  CHECK(weft_tensor_create(g, "x", WEFT_F64, 1, (int64_t[]){16}, weft_auto(), weft_ones(), &x));
  CHECK(weft_scale(g, x, 2.0, &y));
  assert_int_equal(weft_graph_run(g), WEFT_EINVAL);
  assert_non_null(strstr(weft_last_error(), "tensor D is distributed"));
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(auto_matches_the_cpu),
      cmocka_unit_test(written_contents_follow_the_tensor),
      cmocka_unit_test(user_ops_go_where_their_kernel_is),
      cmocka_unit_test(tiles_are_placed_one_by_one),
      cmocka_unit_test(the_inverse_panel_on_auto),
      cmocka_unit_test(tiles_live_where_they_are_written),
      cmocka_unit_test(auto_beside_a_distributed_tensor_is_refused),
      cmocka_unit_test(fixed_and_auto_mix),
      cmocka_unit_test(the_profile_is_chosen),
      cmocka_unit_test(the_memory_limit_is_kept),
      cmocka_unit_test(overlap_on_auto_matches_hand_placement),
      cmocka_unit_test(larger_than_the_gpu),
      cmocka_unit_test(measured_times_correct_the_prices),
      cmocka_unit_test(prices_that_move_no_decision_keep_the_placed_graph),
      cmocka_unit_test(a_run_outlives_its_placement),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
