/* test_sim.c — the simulated machine (src/backends/sim): profiles and their reader (JSON
 * itself is test_json's), virtual devices, and the scheduling properties CI checks in virtual
 * time on the shipped profiles — two chains on two GPUs against one after the other, copies
 * hidden behind compute, memory peaks under the planned bound, 8 and 64 GPUs as the profile
 * predicts, 100 000 nodes in seconds — then determinism, compute mode against the CPU (the
 * oracle's programs too), failures, replays, calibration giving a profile back, and
 * out-of-memory at every allocation. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sched/sched.h"
#include "sched/cost/profile.h"
#include "backends/sim/sim_internal.h"
#include "oracle_gen.h"
#include "testutil.h"
#include "tools/calibrate/calibrate.h"
#include "weft/report.h"
#include "weft/sim.h"

/* ---- helpers --------------------------------------------------------------------------- */

/* A runtime simulating `spec`, as a job of `ranks` ranks, `per_host` a host (0, 0: one process),
 * with at most `max_gpus` GPUs a rank (-1: its share). */
static weft_runtime *sim_job_gpus(const char *spec, int workers, unsigned flags, int ranks, int per_host, int max_gpus) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.simulate = spec;
  o.cpu_workers = workers;
  o.sim_ranks = ranks;
  o.sim_ranks_per_host = per_host;
  o.max_gpus = max_gpus;
  o.flags = WEFT_RUNTIME_QUIET | flags;
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
  return rt;
}

static weft_runtime *sim_job(const char *spec, int workers, unsigned flags, int ranks, int per_host) {
  return sim_job_gpus(spec, workers, flags, ranks, per_host, -1);
}

static weft_runtime *sim_runtime(const char *spec, int workers, unsigned flags) {
  return sim_job(spec, workers, flags, 0, 0);
}

static weft__sim_profile load(const char *spec) {
  weft__sim_profile p;
  CHECK(weft__sim_profile_load(spec, &p));
  return p;
}

static weft_tensor *square(weft_graph *g, const char *name, int64_t n, weft_device d) {
  weft_tensor *t = NULL;
  CHECK(weft_tensor_create(g, name, WEFT_F32, 2, (int64_t[]){n, n}, d, weft_full(1.0 / (double)n), &t));
  return t;
}

/* Runs g once and returns its virtual summary. */
static weft_sim_summary run_summary(weft_graph *g) {
  weft_run *r;
  weft_sim_summary s;
  CHECK(weft_graph_launch(g, &r));
  CHECK(weft_run_wait(r));
  CHECK(weft_sim_run_summary(r, &s));
  weft_run_destroy(r);
  return s;
}

/* The modelled time of an n x n x n f32 product on the profile's GPU: a product with at least
 * one 128 x 128 output tile per SM computes whole tiles (src/sched/cost/cost.c,
 * weft__cost_gpu). */
static double gemm_time(const weft__sim_profile *p, double n) {
  double m = n;
  double tiles = ceil(n / 128) * ceil(n / 128);
  if (tiles >= p->gpu.multiprocessors) m = ceil(n / 128) * 128;
  return WEFT__MAX(p->gpu.kernel_s, 2 * m * m * n / weft__sim_curve_at(&p->gpu.gemm[0], cbrt(m * m * n)));
}

/* The caller's wake-up in a simulated makespan: priced when the run outlasts weft_run_wait's
 * watch, which it then does with the wake-up too (des.c; test_caller_wake). */
static double caller_wake(const weft__sim_profile *p, double makespan) {
  return makespan > (double)WEFT__WAIT_SPIN_NS * 1e-9 ? p->host.wake_s : 0;
}

static int near(double got, double want, double rel) {
  if (fabs(got - want) <= rel * fabs(want)) return 1;
  print_message("got %.9g, expected %.9g within %.1f%%\n", got, want, rel * 100);
  return 0;
}

static char *temp_path(const char *suffix) {
  static char buf[4][128];
  static int k;
  char *b = buf[k++ % 4];
  snprintf(b, sizeof buf[0], "/tmp/weft-test-sim-%d-%d%s", (int)getpid(), k, suffix);
  return b;
}

/* A runtime simulating profile p (through a temporary file). */
static weft_runtime *sim_runtime_of(const weft__sim_profile *p, int workers) {
  char *path = temp_path(".json");
  CHECK(weft__sim_profile_write(p, path));
  weft_runtime *rt = sim_runtime(path, workers, 0);
  remove(path);
  return rt;
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* ---- profiles --------------------------------------------------------------------------- */

static void test_profiles_shipped(void **state) {
  (void)state;
  const char *names[8];
  size_t n = weft_sim_profile_names(names, 8);
  assert_int_equal(n, 3);
  for (size_t i = 0; i < n; i++) {
    weft__sim_profile p = load(names[i]);
    assert_string_equal(p.name, names[i]);
    assert_true(strlen(p.source) > 40); /* every shipped profile says where its figures come from */
    assert_true(p.gpu.gemm[0].n >= 2 && p.host.cores > 0);
  }
  weft__sim_profile h100 = load("h100"), x2 = load("h200x2"), x4 = load("h200x4");
  assert_int_equal(h100.ngpus, 1);
  assert_int_equal(x2.ngpus, 2);
  assert_int_equal(x4.ngpus, 4);
  assert_false(h100.peer_access);
  assert_true(x2.peer_access && x4.peer_access);
  /* Measured on the machines by weft calibrate; a few figures checked against the range of
   * PyTorch's on the same machines (shared/device/README.md): the f32 product rate at 4000 on
   * the H100, the pinned host-to-device bandwidth, the NVLink peer bandwidth. */
  assert_true(tu_contains(h100.source, "Measured by weft calibrate"));
  assert_true(tu_contains(x2.source, "Measured by weft calibrate"));
  assert_true(tu_contains(x4.source, "Measured by weft calibrate"));
  assert_true(near(weft__sim_curve_at(&h100.gpu.gemm[0], 4000), 49.0e12, 0.1));
  assert_true(near(h100.h2d.bandwidth, 55e9, 0.1));
  assert_true(near(x2.peer.bandwidth, 378e9, 0.1));
  assert_true(near(x4.peer.bandwidth, 378e9, 0.1));
  /* A family with a count: the profile with the most GPUs, scaled. */
  weft__sim_profile x8 = load("h200x8"), x64 = load("h200x64"), h3 = load("h100x3");
  assert_int_equal(x8.ngpus, 8);
  assert_int_equal(x64.ngpus, 64);
  assert_true(x64.peer_access);
  assert_string_equal(x64.name, "h200x64");
  assert_true(tu_contains(x64.source, "Scaled to 64 identical GPUs from the shipped profile h200x4"));
  assert_int_equal(h3.ngpus, 3);
  assert_false(h3.peer_access); /* a one-GPU profile knows no peer link: copies go through the host */
  /* Unknown names list the shipped ones. */
  assert_int_equal(weft_sim_profile_check("a100"), WEFT_ENOENT);
  assert_true(tu_contains(weft_last_error(), "h100, h200x2, h200x4"));
  assert_int_equal(weft_sim_profile_check("h200x0"), WEFT_EINVAL);
  assert_int_equal(weft_sim_profile_check("h200x99999"), WEFT_EINVAL);
  assert_int_equal(weft_sim_profile_check("b200x8"), WEFT_ENOENT);
  assert_int_equal(weft_sim_profile_check(""), WEFT_EINVAL);
  assert_int_equal(weft_sim_profile_check("/nonexistent/p.json"), WEFT_ENOENT);
  assert_true(tu_contains(weft_last_error(), "/nonexistent/p.json"));
  /* A runtime refuses a bad profile with the same message. */
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.simulate = "nosuchmachine";
  weft_runtime *rt = NULL;
  assert_int_equal(weft_runtime_create(&o, &rt), WEFT_ENOENT);
  assert_null(rt);
  assert_true(tu_contains(weft_last_error(), "no machine profile named 'nosuchmachine'"));
}

/* A profile written and read back is the same profile; every field error names its path. */
static void test_profile_files(void **state) {
  (void)state;
  weft__sim_profile p = load("h200x2"), q;
  char *path = temp_path(".json");
  CHECK(weft__sim_profile_write(&p, path));
  CHECK(weft__sim_profile_load(path, &q));
  assert_int_equal(q.ngpus, 2);
  assert_string_equal(q.gpu.name, p.gpu.name);
  assert_int_equal(q.gpu.gemm[0].n, p.gpu.gemm[0].n);
  for (int i = 0; i < p.gpu.gemm[0].n; i++) assert_true(near(q.gpu.gemm[0].y[i], p.gpu.gemm[0].y[i], 1e-6));
  assert_true(near(q.peer.bandwidth, p.peer.bandwidth, 1e-6));
  assert_true(near(q.gpu.notify_s, p.gpu.notify_s, 1e-3));
  /* The same through a runtime: weft_sim_profile_save writes what it simulates. */
  weft_runtime *rt = sim_runtime("h200x8", 1, 0);
  CHECK(weft_sim_profile_save(rt, path));
  CHECK(weft__sim_profile_load(path, &q));
  assert_int_equal(q.ngpus, 8);
  weft_runtime_destroy(rt);
  remove(path);

  /* Field errors: take the shipped text and break one thing at a time. */
  const char *h100 = NULL;
  for (int i = 0; i < weft__sim_shipped_count; i++)
    if (strcmp(weft__sim_shipped_profiles[i].name, "h100") == 0) h100 = weft__sim_shipped_profiles[i].json;
  assert_non_null(h100);
  static const struct {
    const char *from, *to, *msg;
  } breaks[] = {
      {"\"cores\": 16", "\"cores\": 0", "host.cores: 0 is out of range"},
      {"\"cores\": 16", "\"cores\": 1.5", "host.cores: expected an integer"},
      {"\"cores\": 16", "\"corez\": 16", "host.corez: unknown field"},
      {"\"copy_engines\": 3", "\"copy_engines\": 4", "gpu.copy_engines: 4 is out of range"},
      {"\"launch_s\"", "\"launch_s\": 1, \"launch_s\"", "gpu.launch_s: field given twice"},
      {"[128, ", "[32, ", "host.gemm_f32_flops[1]: sizes must be strictly ascending"},
      {"\"version\": 1", "\"version\": 2", "this weft reads version 1"},
      {"weft-machine-profile", "other-format", "not a weft machine profile"},
      {"\"kernel_s\"", "\"kernel_z\"", "gpu.kernel_z: unknown field"},
      {"\"name\": \"h100\",", "", "missing field name"},
      {"\"h2d\": {\"bandwidth\"", "\"h2d\": {\"bandwidthh\"", "links.h2d.bandwidthh: unknown field"},
      {"\"fill_bandwidth\": ", "\"fill_bandwidth\": \"fast\", \"x\": ", "gpu.fill_bandwidth: expected a number, found string"},
  };
  for (size_t i = 0; i < sizeof breaks / sizeof breaks[0]; i++) {
    const char *at = strstr(h100, breaks[i].from);
    if (at == NULL) fail_msg("break %zu: '%s' not in the h100 profile", i, breaks[i].from);
    size_t len = strlen(h100) + strlen(breaks[i].to) + 1;
    char *text = malloc(len);
    assert_non_null(text);
    size_t head = (size_t)(at - h100);
    memcpy(text, h100, head);
    strcpy(text + head, breaks[i].to);
    strcat(text, at + strlen(breaks[i].from));
    write_file(path, text);
    int rc = weft_sim_profile_check(path);
    if (rc == WEFT_OK) fail_msg("break %zu (%s) was accepted", i, breaks[i].msg);
    assert_true(tu_contains(weft_last_error(), breaks[i].msg));
    assert_true(tu_contains(weft_last_error(), path));
    free(text);
  }
  write_file(path, "{\"format\": \"weft-machine-profile\", \"version\": 1,");
  assert_int_equal(weft_sim_profile_check(path), WEFT_EPARSE);
  assert_true(tu_contains(weft_last_error(), "line 1"));
  remove(path);
}

/* ---- devices ---------------------------------------------------------------------------- */

static void test_devices(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h200x4", 2, 0);
  assert_true(weft_sim_active(rt));
  assert_false(weft_sim_computes(rt));
  assert_int_equal(weft_device_count(rt, WEFT_DEVICE_CUDA), 4);
  weft_device all[8];
  assert_int_equal(weft_all_gpus(rt, all, 8), 4);
  assert_true(weft_device_equal(weft_try_gpu(rt, 3), weft_cuda(3)));
  assert_true(weft_device_equal(weft_try_gpu(rt, 4), weft_cpu()));
  weft_device_info info;
  CHECK(weft_device_info_get(rt, weft_cuda(2), &info));
  assert_true(info.simulated);
  assert_true(tu_contains(info.name, "H200 (simulated)"));
  assert_int_equal(info.copy_engines, 3);
  assert_int_equal(info.compute_major, 9);
  CHECK(weft_device_info_get(rt, weft_cpu(), &info));
  assert_true(info.simulated);
  assert_int_equal(info.multiprocessors, 2); /* the virtual workers: cpu_workers when given */
  /* A CPU product's threads: its tiles run on the workers, 2 of them. */
  assert_int_equal(weft_runtime_blas_threads(rt), 2);
  assert_true(weft_device_can_access_peer(rt, weft_cuda(0), weft_cuda(3)));
  assert_false(weft_device_can_access_peer(rt, weft_cuda(1), weft_cuda(1)));
  assert_int_equal(weft_device_info_get(rt, weft_cuda(4), &info), WEFT_EDEVICE);
  /* A simulated GPU holds no memory to report (weft_sim_peak_bytes models it per run). */
  weft_memory_usage use;
  assert_int_equal(weft_device_memory_usage(rt, weft_cuda(1), &use), WEFT_ENOTSUP);
  assert_true(tu_contains(weft_last_error(), "cuda:1 is a simulated GPU"));
  CHECK(weft_device_memory_usage(rt, weft_cpu(), &use));
  weft_runtime_destroy(rt);
  /* max_gpus limits the simulated GPUs too. */
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.simulate = "h200x4";
  o.max_gpus = 1;
  o.flags = WEFT_RUNTIME_QUIET;
  CHECK(weft_runtime_create(&o, &rt));
  assert_int_equal(weft_device_count(rt, WEFT_DEVICE_CUDA), 1);
  weft_runtime_destroy(rt);
  /* One worker is one thread for its products, all 64 workers 64; the option, what it says. */
  o.cpu_workers = 1;
  CHECK(weft_runtime_create(&o, &rt));
  assert_int_equal(weft_runtime_blas_threads(rt), 1);
  weft_runtime_destroy(rt);
  o.cpu_workers = 0;
  CHECK(weft_runtime_create(&o, &rt));
  assert_int_equal(weft_runtime_blas_threads(rt), 64);
  weft_runtime_destroy(rt);
  o.blas_threads = 1; /* checked against this machine's cores too */
  CHECK(weft_runtime_create(&o, &rt));
  assert_int_equal(weft_runtime_blas_threads(rt), 1);
  weft_runtime_destroy(rt);
  /* A real runtime is not simulated, and the simulator's calls say so. */
  rt = tu_runtime_cpu(1);
  assert_false(weft_sim_active(rt));
  assert_int_equal(weft_sim_profile_save(rt, "/tmp/x.json"), WEFT_EINVAL);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = square(g, "x", 4, weft_cpu()), *y = NULL;
  CHECK(weft_relu(g, x, &y));
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  CHECK(weft_run_wait(r));
  weft_sim_summary s;
  assert_int_equal(weft_sim_run_summary(r, &s), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "does not simulate"));
  weft_run_destroy(r);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* Without compute, GPU tensors hold no data: reads say why, writes are dropped. */
static void test_no_data(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h100", 2, 0);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = square(g, "x", 64, weft_cuda(0)), *y = NULL, *h = NULL;
  CHECK(weft_mm(g, x, x, &y));
  CHECK(weft_copy(g, y, weft_cpu(), &h));
  CHECK(weft_graph_run(g));
  float buf[64 * 64];
  CHECK(weft_tensor_write(x, buf, sizeof buf));
  assert_int_equal(weft_tensor_read(x, buf, sizeof buf), WEFT_ENOTSUP);
  assert_true(tu_contains(weft_last_error(), "tensor x lives on cuda:0 of a simulated machine"));
  assert_true(tu_contains(weft_last_error(), "WEFT_SIM_COMPUTE=1"));
  /* Host memory is real, though not computed: it reads as zeros, never as garbage. */
  CHECK(weft_tensor_read(h, buf, sizeof buf));
  for (int i = 0; i < 64 * 64; i++) assert_true(buf[i] == 0.0f);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* ---- scheduling properties in virtual time ----------------------------------------------------- */

/* Two chains of `len` products of n x n: on cuda:0 and cuda:1 (or both on cuda:0), independent
 * or, with `serial`, the second after the first (an explicit edge); the makespan of a replay. */
static double two_chains(weft_runtime *rt, int64_t n, int len, int devices, int serial) {
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x[2], *w[2];
  weft_node *first[2] = {NULL, NULL}, *last[2] = {NULL, NULL};
  for (int c = 0; c < 2; c++) {
    weft_device d = weft_cuda(devices == 2 ? c : 0);
    x[c] = square(g, c ? "x1" : "x0", n, d);
    w[c] = square(g, c ? "w1" : "w0", n, d);
  }
  for (int i = 0; i < len; i++)
    for (int c = 0; c < 2; c++) {
      CHECK(weft_mm(g, x[c], w[c], &x[c]));
      if (first[c] == NULL) first[c] = weft_graph_last_node(g);
      last[c] = weft_graph_last_node(g);
    }
  if (serial) CHECK(weft_graph_add_edge(g, last[0], first[1]));
  /* The second run, a replay: the devices' time, not the host's launches (a first run of small
   * products is bound by their launches, one device's at a time). */
  (void)run_summary(g);
  double t = run_summary(g).makespan_s;
  weft_graph_destroy(g);
  return t;
}

static void test_two_chains_two_gpus(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h200x2", 2, 0);
  weft__sim_profile p = load("h200x2");
  double par = two_chains(rt, 4000, 50, 2, 0), ser = two_chains(rt, 4000, 50, 2, 1);
  double one_gpu = two_chains(rt, 4000, 50, 1, 0);
  print_message("two chains of 50 x mm 4000^2: %.2f ms on two GPUs at once, %.2f ms one after the "
                "other (%.3fx), %.2f ms both on one GPU\n", par * 1e3, ser * 1e3, ser / par, one_gpu * 1e3);
  assert_true(ser / par > 1.95 && ser / par < 2.02);
  /* One GPU computes one product at a time, whatever its streams. */
  assert_true(one_gpu / par > 1.95 && one_gpu / par < 2.02);
  /* And the time is what the profile predicts: 50 products, plus microseconds of host costs. */
  assert_true(near(par, 50 * gemm_time(&p, 4000), 0.005));
  /* Products of 512^2 occupy the part of the device the profile's share says (measured:
   * K independent products against a chain): two chains on one GPU (on two streams) take
   * 2 x share as long as on two GPUs, at least as long. */
  assert_true(p.gpu.gemm_share.n > 0);
  double share = weft__sim_curve_at(&p.gpu.gemm_share, 512);
  double small_par = two_chains(rt, 512, 50, 2, 0), small_one = two_chains(rt, 512, 50, 1, 0);
  print_message("two chains of 50 x mm 512^2: %.3f ms on two GPUs, %.3f ms on one (share %.2f)\n",
                small_par * 1e3, small_one * 1e3, share);
  assert_true(near(small_one / small_par, WEFT__MAX(1.0, 2 * share), 0.03));
  weft_runtime_destroy(rt);
  /* Without a measured share, a product's is computed (its work at the device's peak over its
   * time): 512^2 reaches less than half the peak rate, so two run side by side at full speed. */
  const weft__sim_curve *c = &p.gpu.gemm[0];
  double peak = 0;
  for (int i = 0; i < c->n; i++) peak = WEFT__MAX(peak, c->y[i]);
  assert_true(weft__sim_curve_at(c, 512) < 0.5 * peak);
  p.gpu.gemm_share.n = 0;
  rt = sim_runtime_of(&p, 2);
  small_par = two_chains(rt, 512, 50, 2, 0);
  small_one = two_chains(rt, 512, 50, 1, 0);
  assert_true(small_one / small_par < 1.05);
  weft_runtime_destroy(rt);
}

/* K independent products of n x n on one GPU (spread over its compute streams), replayed. */
static double independent_products(weft_runtime *rt, int64_t n, int k) {
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = square(g, "x", n, weft_cuda(0));
  for (int i = 0; i < k; i++) {
    weft_tensor *y = NULL;
    CHECK(weft_mm(g, x, x, &y));
  }
  (void)run_summary(g);
  double t = run_summary(g).makespan_s;
  weft_graph_destroy(g);
  return t;
}

/* The device is shared in start order: kernel k runs at min(1, capacity left / its share).
 * 100 independent 400^2 products on four streams take 100 x share x their time (cuBLAS's
 * products of that size occupy more of the device than their work needs: docs/simulator.md,
 * "The model"); with share 1 one after the other, as large kernels do; with a quarter, four at
 * once. */
static void test_shared_device(void **state) {
  (void)state;
  weft__sim_profile p = load("h100");
  double t = gemm_time(&p, 400), fixed = p.gpu.notify_s + p.gpu.replay_node_s + p.gpu.replay_run_s;
  static const double shares[] = {0.63, 1.0, 0.25, 0.4};
  for (int k = 0; k < 4; k++) {
    p.gpu.gemm_share.n = 1;
    p.gpu.gemm_share.x[0] = 400;
    p.gpu.gemm_share.y[0] = shares[k];
    weft_runtime *rt = sim_runtime_of(&p, 2);
    double got = independent_products(rt, 400, 100);
    print_message("100 x mm 400^2 at share %.2f: %.3f ms (one after the other: %.3f ms)\n", shares[k],
                  got * 1e3, 100 * t * 1e3);
    /* Streams end unevenly: up to one product's time beyond the steady state. */
    double end = fixed + caller_wake(&p, got);
    assert_true(got >= 100 * t * shares[k] + end - 1e-9);
    assert_true(got <= 100 * t * shares[k] + end + t);
    weft_runtime_destroy(rt);
  }
}

/* Temporaries cost time: an eager run's host allocates and frees each one (temp_s), a
 * replayed graph frees the unclaimed ones in memory nodes at its end (replay_temp_s). And
 * independent nodes are launched launch_lanes at a time, a chain one after the other. */
static double tiny_chain(weft_runtime *rt, int k, int temps, int replay) {
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = NULL, *one = NULL;
  CHECK(weft_tensor_create(g, "x", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(0), weft_zeros(), &x));
  CHECK(weft_tensor_create(g, "one", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(0), weft_ones(), &one));
  for (int i = 0; i < k; i++) {
    weft_tensor *next = temps ? NULL : x;
    CHECK(weft_add(g, x, one, &next));
    x = next;
  }
  weft_sim_summary s = run_summary(g);
  if (replay) s = run_summary(g);
  assert_int_equal(s.replayed, replay);
  weft_graph_destroy(g);
  return s.makespan_s;
}

/* A run with GPU nodes ends its fixed cost after its last GPU node, run_s eager and
 * replay_run_s replayed, once however many nodes it has; a CPU graph pays neither. */
static void test_run_fixed_cost(void **state) {
  (void)state;
  weft__sim_profile p = load("h100");
  p.gpu.run_s = p.gpu.replay_run_s = 0;
  weft_runtime *rt = sim_runtime_of(&p, 2);
  double base[2][2]; /* [nodes 1 or 50][eager, replay] */
  for (int r = 0; r < 2; r++) {
    base[0][r] = tiny_chain(rt, 1, 0, r);
    base[1][r] = tiny_chain(rt, 50, 0, r);
  }
  weft_graph *cg;
  CHECK(weft_graph_create(rt, &cg));
  weft_tensor *a = NULL, *b = NULL;
  CHECK(weft_tensor_create(cg, "a", WEFT_F32, 1, (int64_t[]){64}, weft_cpu(), weft_ones(), &a));
  CHECK(weft_add(cg, a, a, &b));
  double cpu_base = run_summary(cg).makespan_s;
  weft_graph_destroy(cg);
  weft_runtime_destroy(rt);
  p.gpu.run_s = 40e-6;
  p.gpu.replay_run_s = 15e-6;
  rt = sim_runtime_of(&p, 2);
  for (int r = 0; r < 2; r++) {
    double want = r ? p.gpu.replay_run_s : p.gpu.run_s;
    assert_true(near(tiny_chain(rt, 1, 0, r) - base[0][r], want, 1e-6));
    assert_true(near(tiny_chain(rt, 50, 0, r) - base[1][r], want, 1e-6));
  }
  CHECK(weft_graph_create(rt, &cg));
  CHECK(weft_tensor_create(cg, "a", WEFT_F32, 1, (int64_t[]){64}, weft_cpu(), weft_ones(), &a));
  b = NULL;
  CHECK(weft_add(cg, a, a, &b));
  assert_true(near(run_summary(cg).makespan_s, cpu_base, 1e-9));
  weft_graph_destroy(cg);
  weft_runtime_destroy(rt);
}

/* The makespan of a chain of k additions of n floats on the CPU, x = x + x. */
static double cpu_chain(weft_runtime *rt, int k, int64_t n) {
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = NULL;
  CHECK(weft_tensor_create(g, "x", WEFT_F32, 1, &n, weft_cpu(), weft_ones(), &x));
  for (int i = 0; i < k; i++) CHECK(weft_add(g, x, x, &x));
  double t = run_summary(g).makespan_s;
  weft_graph_destroy(g);
  return t;
}

/* One product of n^2 on cuda:0, eager. */
static double one_product(weft_runtime *rt, int64_t n) {
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = square(g, "x", n, weft_cuda(0)), *y = NULL;
  CHECK(weft_mm(g, x, x, &y));
  double t = run_summary(g).makespan_s;
  weft_graph_destroy(g);
  return t;
}

/* A run that outlasts weft_run_wait's watch (WEFT__WAIT_SPIN_NS) finds its caller asleep and
 * ends the host's wake_s later, CPU or GPU; a shorter one does not. */
static void test_caller_wake(void **state) {
  (void)state;
  weft__sim_profile p = load("h100");
  double t[2][4], watch = (double)WEFT__WAIT_SPIN_NS * 1e-9;
  for (int w = 0; w < 2; w++) {
    p.host.wake_s = w ? 25e-6 : 0;
    weft_runtime *rt = sim_runtime_of(&p, 2);
    t[w][0] = cpu_chain(rt, 2, 1 << 16);
    t[w][1] = cpu_chain(rt, 400, 1 << 16); /* a few hundred microseconds at 40 GB/s */
    t[w][2] = tiny_chain(rt, 1, 0, 0);
    t[w][3] = one_product(rt, 4000);
    weft_runtime_destroy(rt);
  }
  print_message("without and with a wake-up of 25 us: CPU %.1f / %.1f us and %.1f / %.1f us, GPU %.1f / %.1f us and %.1f / %.1f us\n",
                t[0][0] * 1e6, t[1][0] * 1e6, t[0][1] * 1e6, t[1][1] * 1e6, t[0][2] * 1e6, t[1][2] * 1e6,
                t[0][3] * 1e6, t[1][3] * 1e6);
  for (int k = 0; k < 4; k++) {
    int long_run = k % 2 == 1;
    assert_true(long_run ? t[0][k] > watch : t[0][k] < watch);
    assert_true(fabs(t[1][k] - t[0][k] - (long_run ? p.host.wake_s : 0)) < 1e-9);
  }
}

/* The eager makespans of 100 independent 16^2 products and of a chain of 100, on profile p. */
static void hundred_products(const weft__sim_profile *p, double *wide, double *chain) {
  weft_runtime *rt = sim_runtime_of(p, 2);
  for (int c = 0; c < 2; c++) {
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    weft_tensor *x = square(g, "x", 16, weft_cuda(0)), *w = square(g, "w", 16, weft_cuda(0));
    for (int i = 0; i < 100; i++) {
      weft_tensor *y = NULL;
      CHECK(weft_mm(g, x, w, c ? &x : &y));
    }
    *(c ? chain : wide) = run_summary(g).makespan_s;
    weft_graph_destroy(g);
  }
  weft_runtime_destroy(rt);
}

static void test_host_and_memory_costs(void **state) {
  (void)state;
  weft__sim_profile p = load("h100");
  p.gpu.temp_s = 1.5e-6;
  p.gpu.replay_temp_s = 1.1e-6;
  p.host.wake_s = 0; /* the caller's, test_caller_wake's subject: these runs straddle its watch */
  weft_runtime *rt = sim_runtime_of(&p, 2);
  /* 200 additions, 199 of them into a new temporary (the last result is read by nobody),
   * against 200 in place. Unbatched: a batch's kernel can wait for the one before it on the
   * device (test_replay), which would blur the host's difference. */
  weft_runtime_set_batching(rt, 0);
  double eager = tiny_chain(rt, 200, 1, 0) - tiny_chain(rt, 200, 0, 0);
  double replay = tiny_chain(rt, 200, 1, 1) - tiny_chain(rt, 200, 0, 1);
  print_message("199 temporaries: %.1f us more eager, %.1f us more replayed\n", eager * 1e6, replay * 1e6);
  assert_true(near(eager, 199 * p.gpu.temp_s, 0.01));
  assert_true(near(replay, 199 * p.gpu.replay_temp_s, 0.01));
  weft_runtime_destroy(rt);
  /* 100 independent tiny products launched at once, against a chain of them (eager runs: the
   * host's launches bound both), with three launches at once. */
  p.gpu.launch_lanes = 3;
  double wide, chain;
  hundred_products(&p, &wide, &chain);
  print_message("100 x mm 16^2: %.1f us independent, %.1f us in a chain\n", wide * 1e6, chain * 1e6);
  /* The host bounds the chain: 100 launches one after the other, then the fixed costs (the
   * last kernel, the notification of the end, the run's). The independent products take 34 launches
   * (100 over three lanes, rounded up: the busiest lane's), then the same fixed costs (the
   * device, running them side by side as their shares allow, keeps up). */
  double launch = p.gpu.gemm_launch_s, tail = p.gpu.notify_s + p.gpu.run_s + 10e-6;
  assert_true(chain >= 100 * launch && chain < 100 * launch + tail);
  assert_true(wide >= 34 * launch && wide < 34 * launch + tail);
  /* Where the profile says such products add more than that to an eager run when many are
   * ready (gemm_f32_wide_s), each launch with others ready takes that long; the last one, with
   * none left, a plain launch. A chain never has others ready. */
  double least = 0.8 * launch, wide_floor, chain_floor;
  p.gpu.gemm_wide_s = (weft__sim_curve){.n = 2, .x = {16, 64}, .y = {least, least}};
  hundred_products(&p, &wide_floor, &chain_floor);
  print_message("with %.1f us the least a launch among others: %.1f us independent, %.1f us in a chain\n",
                least * 1e6, wide_floor * 1e6, chain_floor * 1e6);
  assert_true(wide_floor >= 99 * least + launch && wide_floor < 99 * least + launch + tail);
  assert_true(near(chain_floor, chain, 1e-9));
}

/* The reference notes' overlap graph: 50 x (y[i] = x.x; h[i] = copy(y[i], cpu)). */
static void test_overlap(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h100", 4, 0);
  weft__sim_profile p = load("h100");
  const int64_t n = 4000;
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = square(g, "x", n, weft_cuda(0));
  for (int i = 0; i < 50; i++) {
    weft_tensor *y = NULL, *h = NULL;
    CHECK(weft_mm(g, x, x, &y));
    CHECK(weft_copy(g, y, weft_cpu(), &h));
  }
  weft_run *r;
  weft_sim_summary s;
  CHECK(weft_graph_launch(g, &r));
  CHECK(weft_run_wait(r));
  CHECK(weft_sim_run_summary(r, &s));
  uint64_t peak;
  CHECK(weft_sim_peak_bytes(r, weft_cuda(0), &peak));
  size_t buf = weft_tensor_bytes(x);
  double compute = 50 * gemm_time(&p, (double)n);
  double copies = 50 * (p.d2h.latency_s + (double)buf / p.d2h.bandwidth);
  print_message("overlap: makespan %.2f ms, compute alone %.2f ms, copies alone %.2f ms, hidden "
                "copy fraction %.4f, peak %.1f result buffers beside x\n", s.makespan_s * 1e3,
                compute * 1e3, copies * 1e3, s.hidden_copy_fraction, (double)(peak - buf) / (double)buf);
  assert_true(s.hidden_copy_fraction > 0.95);
  assert_true(s.makespan_s <= 1.02 * WEFT__MAX(compute, copies));
  assert_true(s.makespan_s >= WEFT__MAX(compute, copies));
  /* The memory plan: the results are temporaries, freed once copied: at most 5 at once. */
  assert_true(peak <= buf + 5 * buf);
  assert_true(peak >= buf + buf); /* x and the result being computed, at least */
  assert_int_equal(s.nodes_run, 100);
  /* Each copy starts when its product ends and overlaps the next product. */
  double ps, pe, cs, ce, ns, ne;
  CHECK(weft_sim_node_interval(r, 20, &ps, &pe)); /* product 10 */
  CHECK(weft_sim_node_interval(r, 21, &cs, &ce)); /* its copy */
  CHECK(weft_sim_node_interval(r, 22, &ns, &ne)); /* product 11 */
  assert_true(cs >= pe - 1e-12 && cs < ne && ce > ns);
  assert_int_equal(weft_sim_node_interval(r, 100, &ps, &pe), WEFT_EINVAL);
  assert_int_equal(weft_sim_peak_bytes(r, weft_cuda(1), &peak), WEFT_EDEVICE);
  weft_run_destroy(r);
  weft_graph_destroy(g);

  /* The same copies into pageable host memory (made before the first launch) are priced at the
   * pageable bandwidth, and cannot hide behind the much shorter products. */
  CHECK(weft_graph_create(rt, &g));
  x = square(g, "x", n, weft_cuda(0));
  float *zeros = calloc(1, buf);
  assert_non_null(zeros);
  for (int i = 0; i < 10; i++) {
    weft_tensor *y = NULL, *h = NULL;
    CHECK(weft_mm(g, x, x, &y));
    CHECK(weft_tensor_create(g, NULL, WEFT_F32, 2, (int64_t[]){n, n}, weft_cpu(), weft_zeros(), &h));
    CHECK(weft_tensor_write(h, zeros, buf));
    CHECK(weft_copy(g, y, weft_cpu(), &h));
  }
  free(zeros);
  s = run_summary(g);
  double pageable = 10 * (p.d2h_pageable.latency_s + (double)buf / p.d2h_pageable.bandwidth);
  assert_true(near(s.makespan_s, pageable + gemm_time(&p, (double)n), 0.01));
  /* They hide behind the products alone: at most the products' share of the copies' time,
   * far from the pinned copies' whole (above). */
  assert_true(s.hidden_copy_fraction <= 10 * gemm_time(&p, (double)n) / pageable + 0.01);
  assert_true(s.hidden_copy_fraction < 0.9);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* The run's statistics, trace and timeline (weft/report.h) are those of the simulated
 * machine: virtual intervals on the simulated lanes, the simulator's memory samples. */
static void test_report_of_simulated_run(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h100", 2, 0);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = square(g, "x", 4000, weft_cuda(0));
  for (int i = 0; i < 20; i++) {
    weft_tensor *y = NULL, *h = NULL;
    CHECK(weft_mm(g, x, x, &y));
    CHECK(weft_copy(g, y, weft_cpu(), &h));
  }
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  CHECK(weft_run_wait(r));
  weft_sim_summary s;
  CHECK(weft_sim_run_summary(r, &s));
  uint64_t peak;
  CHECK(weft_sim_peak_bytes(r, weft_cuda(0), &peak));
  weft_run_stats *st;
  CHECK(weft_run_stats_create(r, &st));
  weft_stats_summary rs;
  weft_run_stats_summary(st, &rs);
  /* The report's makespan runs from the first node's start to the last one's end; the
   * simulator's from the launch to the host seeing the end (the run's fixed cost included):
   * they differ by host latencies. */
  const weft__sim_gpu *gp = &((const weft__sim *)rt->by_kind[WEFT_DEVICE_CPU]->state)->cost.prof.gpu;
  assert_true(rs.makespan_s <= s.makespan_s && rs.makespan_s > 0.999 * (s.makespan_s - gp->run_s));
  assert_true(rs.wall_s < rs.makespan_s); /* the simulation itself took real microseconds */
  assert_true(near(rs.hidden_copy_fraction, s.hidden_copy_fraction, 1e-4));
  assert_true(near(rs.critical_path_s, s.critical_path_s, 1e-4));
  assert_int_equal(rs.nodes_run, 40);
  int copy_lane = 0, compute_lanes = 0;
  for (size_t i = 0; i < weft_run_stats_lane_count(st); i++) {
    weft_lane_stats l;
    CHECK(weft_run_stats_lane(st, i, &l));
    if (strcmp(l.name, "cuda:0 copy d2h 0") == 0) copy_lane = (int)l.nodes;
    if (strcmp(l.kind, "compute") == 0 && l.nodes > 0) compute_lanes++;
  }
  assert_int_equal(copy_lane, 20);
  assert_int_equal(compute_lanes, 1); /* large products: stream 0, in program order */
  int found = 0;
  for (size_t i = 0; i < weft_run_stats_device_count(st); i++) {
    weft_device_memory m;
    CHECK(weft_run_stats_device(st, i, &m));
    if (weft_device_equal(m.device, weft_cuda(0))) {
      found = 1;
      assert_int_equal(m.peak_bytes, peak);
      assert_string_equal(m.source, "allocator");
    }
  }
  assert_true(found);
  char *trace = temp_path(".trace.json"), *svg = temp_path(".svg");
  CHECK(weft_run_stats_save(st, WEFT_REPORT_TRACE, trace));
  CHECK(weft_run_stats_save(st, WEFT_REPORT_SVG, svg));
  FILE *f = fopen(svg, "r");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  assert_true(ftell(f) > 1000);
  fclose(f);
  remove(trace);
  remove(svg);
  weft_run_stats_destroy(st);
  weft_run_destroy(r);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* N chains on N GPUs, each: its input copied from the host, `len` products, its result copied
 * back; against the same N chains on one GPU. */
static double chains_on(const char *spec, int nchains, int ngpus, int len, int64_t n) {
  weft_runtime *rt = sim_runtime(spec, 2, 0);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  for (int c = 0; c < nchains; c++) {
    weft_device d = weft_cuda(c % ngpus);
    weft_tensor *in = square(g, NULL, n, weft_cpu()), *w = square(g, NULL, n, d), *x = NULL, *out = NULL;
    CHECK(weft_copy(g, in, d, &x));
    for (int i = 0; i < len; i++) CHECK(weft_mm(g, x, w, &x));
    CHECK(weft_copy(g, x, weft_cpu(), &out));
  }
  double t = run_summary(g).makespan_s;
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  return t;
}

static void test_scaling(void **state) {
  (void)state;
  const int len = 20;
  const int64_t n = 4000;
  weft__sim_profile p = load("h200x8");
  double bytes = 4.0 * (double)(n * n);
  double g = gemm_time(&p, (double)n);
  double h2d = p.h2d.latency_s + bytes / p.h2d.bandwidth, d2h = p.d2h.latency_s + bytes / p.d2h.bandwidth;
  double one_chain = h2d + len * g + d2h;
  static const int counts[] = {8, 64};
  for (int k = 0; k < 2; k++) {
    int N = counts[k];
    char spec[32], one[32];
    snprintf(spec, sizeof spec, "h200x%d", N);
    snprintf(one, sizeof one, "h200x1");
    double tn = chains_on(spec, N, N, len, n), t1 = chains_on(one, N, 1, len, n);
    /* One GPU: the products back to back, the first input's copy before them and the last
     * result's copy after them (the other copies hide behind products). */
    double t1_model = h2d + N * len * g + d2h;
    print_message("%d chains: %.2f ms on %d GPUs (model %.2f), %.2f ms on one (model %.2f): %.2fx\n",
                  N, tn * 1e3, N, one_chain * 1e3, t1 * 1e3, t1_model * 1e3, t1 / tn);
    assert_true(near(tn, one_chain, 0.005));
    assert_true(near(t1, t1_model, 0.005));
    assert_true(near(t1 / tn, t1_model / one_chain, 0.01));
  }
}

/* A graph of 100 000 nodes over 8 GPUs and the host simulates in seconds. */
static void test_hundred_thousand_nodes(void **state) {
  (void)state;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  weft_runtime *rt = sim_runtime("h200x8", 2, 0);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  enum { CHAINS = 64, PER = 1562 }; /* 64 chains of 1562 nodes, plus copies: > 100 000 */
  weft_tensor *x[CHAINS], *w[8];
  for (int d = 0; d < 8; d++) w[d] = square(g, NULL, 64, weft_cuda(d));
  for (int c = 0; c < CHAINS; c++) x[c] = square(g, NULL, 64, weft_cuda(c % 8));
  for (int i = 0; i < PER; i++)
    for (int c = 0; c < CHAINS; c++) {
      if (i % 500 == 499) {
        /* now and then, a chain moves to the next GPU */
        weft_tensor *moved = NULL;
        CHECK(weft_copy(g, x[c], weft_cuda((c + 1 + i) % 8), &moved));
        x[c] = moved;
      }
      weft_tensor *wd = NULL;
      for (int d = 0; d < 8 && wd == NULL; d++)
        if (weft_device_equal(weft_tensor_device(w[d]), weft_tensor_device(x[c]))) wd = w[d];
      CHECK(weft_mm(g, x[c], wd, &x[c]));
    }
  size_t nodes = weft_graph_node_count(g);
  weft_sim_summary s = run_summary(g);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double wall = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  print_message("%zu nodes built and simulated in %.2f s: %.3f ms of virtual time\n", nodes, wall,
                s.makespan_s * 1e3);
  assert_true(nodes >= 100000);
  assert_int_equal(s.nodes_run, nodes);
  assert_true(s.makespan_s >= s.critical_path_s);
  /* Generous enough for the sanitizer builds on CI's two cores; a plain build takes well
   * under a second (docs/simulator.md). */
  assert_true(wall < 60);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* The virtual schedule depends on the graph, the plan and the profile only: not on the order
 * in which this machine's workers happened to launch the nodes, nor on the run. */
static void test_deterministic(void **state) {
  (void)state;
  double t[3];
  for (int k = 0; k < 3; k++) {
    weft_runtime *rt = sim_runtime("h200x2", 3, k == 1 ? WEFT_RUNTIME_SIM_COMPUTE : 0);
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    weft_tensor *x0 = square(g, "x0", 256, weft_cuda(0)), *x1 = square(g, "x1", 256, weft_cuda(1));
    for (int i = 0; i < 40; i++) {
      weft_tensor *a = NULL, *b = NULL, *h = NULL;
      CHECK(weft_mm(g, x0, x0, &a));
      CHECK(weft_mm(g, x1, a, &b)); /* a crosses to cuda:1 through an inserted peer copy */
      CHECK(weft_copy(g, b, weft_cpu(), &h));
      CHECK(weft_relu(g, h, &h));
    }
    t[k] = run_summary(g).makespan_s;
    if (k == 2) assert_true(run_summary(g).makespan_s == t[k]);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  assert_true(t[0] == t[1] && t[1] == t[2]);
}

/* Re-running an unchanged all-GPU graph is a replay: host costs per node drop. A chain of tiny
 * nodes is batched as the CUDA backend batches it (128 nodes a kernel), unless batching is off:
 * each node then pays a launch, or a replayed kernel node. */
static void test_replay(void **state) {
  (void)state;
  weft__sim_profile p = load("h100");
  const weft__sim_gpu *gp = &p.gpu;
  for (int batched = 0; batched < 2; batched++) {
    weft_runtime *rt = sim_runtime("h100", 2, 0);
    weft_runtime_set_batching(rt, batched);
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    weft_tensor *a = NULL, *one = NULL;
    CHECK(weft_tensor_create(g, "a", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(0), weft_zeros(), &a));
    CHECK(weft_tensor_create(g, "one", WEFT_F32, 1, (int64_t[]){1}, weft_cuda(0), weft_ones(), &one));
    for (int i = 0; i < 1000; i++) CHECK(weft_add(g, a, one, &a));
    weft_sim_summary first = run_summary(g), again = run_summary(g);
    assert_false(first.replayed);
    assert_true(again.replayed);
    double per_first = first.makespan_s / 1000, per_again = again.makespan_s / 1000;
    print_message("1000 tiny nodes%s: %.3f us a node on the first run, %.3f us on a replay\n",
                  batched ? ", batched" : "", per_first * 1e6, per_again * 1e6);
    /* The makespan ends when the host sees the last node end (notify_s) and the run's fixed
     * cost is paid, shared by the nodes. */
    double seen = (gp->notify_s + gp->run_s + caller_wake(&p, first.makespan_s)) / 1000;
    double seen_again = (gp->notify_s + gp->replay_run_s + caller_wake(&p, again.makespan_s)) / 1000;
    if (!batched) {
      /* Per node: the launch (or replay) cost or the kernel, whichever bounds. */
      assert_true(near(per_first, WEFT__MAX(gp->launch_s, gp->kernel_s) + seen, 0.02));
      assert_true(near(per_again, WEFT__MAX(gp->replay_node_s, gp->kernel_s) + seen_again, 0.02));
    } else {
      /* 1000 nodes are 8 batches (7 of 128, one of 104). Eager, the host dispatches every node
       * and launches 8 kernels: its issue of batch b ends at h, and the batch's kernel starts
       * then, or when batch b - 1's ends on the device if that is later (a short last batch
       * catches up with the one before). Replayed, the device runs the 8 kernels back to
       * back. */
      double h = 0, dev = 0;
      for (int b = 0; b < 8; b++) {
        int len = b < 7 ? 128 : 104;
        h += len * gp->batch_node_s + gp->launch_s;
        dev = WEFT__MAX(h, dev) + gp->kernel_s + len * gp->batch_op_s;
      }
      assert_true(per_first >= h / 1000);
      assert_true(near(per_first, dev / 1000 + seen, 0.001));
      assert_true(near(per_again, (8 * gp->kernel_s + 1000 * gp->batch_op_s) / 1000 + seen_again, 0.02));
      assert_true(per_first < gp->launch_s / 4);
    }
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
}

/* Device memory is finite: a plan that does not fit fails the run, naming the node. */
static void test_device_memory_limit(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h100", 2, 0);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  /* 30 000^2 f32 = 3.6 GB each: the results of 30 products held at once need 108 GB. */
  weft_tensor *x = square(g, "x", 30000, weft_cuda(0)), *acc = NULL;
  weft_tensor *y[30];
  for (int i = 0; i < 30; i++) {
    y[i] = NULL;
    CHECK(weft_mm(g, x, x, &y[i]));
  }
  acc = y[0];
  for (int i = 1; i < 30; i++) CHECK(weft_add(g, acc, y[i], &acc));
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  int rc = weft_run_wait(r);
  assert_int_equal(rc, WEFT_EDEVMEM);
  assert_true(tu_contains(weft_run_error(r), "cuda:0"));
  assert_true(tu_contains(weft_run_error(r), "simulated"));
  weft_run_destroy(r);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* Streams follow the CUDA backend's rules: a chain stays on its stream, a fork's side branch
 * goes to another, a product that fills the device starts on stream 0, copies go to the copy
 * streams. Read through the plan's explanation (weft_node_placement). */
static void lane_of(weft_graph *g, size_t node, char *lane, size_t size) {
  weft_placement pl;
  CHECK(weft_node_placement(g, weft_graph_node(g, node), &pl));
  snprintf(lane, size, "%s", pl.lane);
}

static void test_streams(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h100", 2, 0);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = square(g, "x", 64, weft_cuda(0)), *big = square(g, "big", 4096, weft_cuda(0));
  weft_tensor *y = NULL, *z = NULL, *w = NULL, *b2 = NULL, *h = NULL;
  CHECK(weft_relu(g, x, &x));       /* 0: a small chain starts */
  CHECK(weft_relu(g, x, &y));       /* 1: continues it (the longer path below node 0) */
  CHECK(weft_scale(g, x, 2.0, &z)); /* 2: a side branch: another stream */
  CHECK(weft_add(g, y, z, &w));     /* 3: the join continues node 1's stream */
  CHECK(weft_relu(g, w, &w));       /* 4 */
  CHECK(weft_mm(g, big, big, &b2)); /* 5: fills the device: stream 0 */
  CHECK(weft_copy(g, b2, weft_cpu(), &h)); /* 6: device to host */
  CHECK(weft_graph_run(g));
  char l[8][64];
  for (size_t i = 0; i < 7; i++) lane_of(g, i, l[i], sizeof l[i]);
  assert_string_equal(l[0], l[1]);
  assert_string_not_equal(l[1], l[2]);
  assert_string_equal(l[3], l[1]);
  assert_string_equal(l[4], l[1]);
  assert_string_equal(l[5], "cuda:0 stream 0 (simulated)");
  assert_string_equal(l[6], "cuda:0 copy d2h (simulated)");
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* ---- compute mode: the oracle can check a simulated run ------------------------------------------ */

static void build_mixed(weft_graph *g, int gpus, weft_tensor **out) {
  weft_device d0 = gpus ? weft_cuda(0) : weft_cpu(), d1 = gpus ? weft_cuda(1) : weft_cpu();
  weft_tensor *a, *b, *c = NULL, *dd = NULL, *e = NULL, *f = NULL, *h = NULL, *nrm = NULL;
  CHECK(weft_tensor_create(g, "a", WEFT_F32, 2, (int64_t[]){48, 32}, d0, weft_uniform(-1, 1, 5), &a));
  CHECK(weft_tensor_create(g, "b", WEFT_F32, 2, (int64_t[]){32, 40}, d1, weft_normal(0, 1, 6), &b));
  CHECK(weft_mm(g, a, b, &c));                 /* b copied to cuda:0 */
  CHECK(weft_relu(g, c, &dd));
  CHECK(weft_copy(g, dd, d1, &e));             /* peer copy */
  CHECK(weft_scale(g, e, 0.5, &f));
  CHECK(weft_copy(g, f, weft_cpu(), &h));      /* to the host */
  CHECK(weft_add(g, h, h, &h));                /* a CPU node on it */
  CHECK(weft_norm(g, c, &nrm));
  out[0] = h;
  out[1] = nrm;
}

static void test_compute_mode(void **state) {
  (void)state;
  weft_runtime *sim = sim_runtime("h200x2", 2, WEFT_RUNTIME_SIM_COMPUTE), *cpu = tu_runtime_cpu(2);
  weft_graph *gs, *gc;
  CHECK(weft_graph_create(sim, &gs));
  CHECK(weft_graph_create(cpu, &gc));
  weft_tensor *rs[2], *rc[2];
  build_mixed(gs, 1, rs);
  build_mixed(gc, 0, rc);
  CHECK(weft_graph_run(gs));
  CHECK(weft_graph_run(gc));
  for (int k = 0; k < 2; k++) {
    size_t n = (size_t)weft_tensor_numel(rs[k]);
    double *vs = malloc(n * sizeof *vs), *vc = malloc(n * sizeof *vc);
    assert_true(vs != NULL && vc != NULL);
    tu_read_doubles(rs[k], vs);
    tu_read_doubles(rc[k], vc);
    for (size_t i = 0; i < n; i++)
      if (fabs(vs[i] - vc[i]) > 1e-5 * (1 + fabs(vc[i])))
        fail_msg("result %d[%zu]: simulated %.9g, CPU %.9g", k, i, vs[i], vc[i]);
    free(vs);
    free(vc);
  }
  assert_true(weft_sim_computes(sim));
  /* GPU tensors are readable in compute mode. */
  double v;
  CHECK(weft_tensor_get(weft_graph_find_tensor(gs, "a"), 3, &v));
  weft_graph_destroy(gs);
  weft_graph_destroy(gc);
  weft_runtime_destroy(sim);
  weft_runtime_destroy(cpu);
}

/* The differential oracle's programs, on a simulated machine that computes, agree bit for bit
 * with the same programs on the CPU runtime. */
static void test_oracle_programs(void **state) {
  (void)state;
  weft_runtime *sim = sim_runtime("h100", 3, WEFT_RUNTIME_SIM_COMPUTE), *cpu = tu_runtime_cpu(3);
  oracle_register_ops(sim);
  oracle_register_ops(cpu);
  int programs = 60;
  for (uint64_t seed = 1; seed <= (uint64_t)programs; seed++) {
    weft_graph *gs, *gc;
    CHECK(weft_graph_create(sim, &gs));
    CHECK(weft_graph_create(cpu, &gc));
    CHECK(oracle_build(gs, seed, NULL));
    CHECK(oracle_build(gc, seed, NULL));
    int st_s = weft_graph_run(gs), st_c = weft_graph_run(gc);
    if (st_s != st_c) fail_msg("seed %llu: simulated run %s, CPU run %s", (unsigned long long)seed,
                               weft_status_name(st_s), weft_status_name(st_c));
    if (st_s == WEFT_OK) {
      for (size_t i = 0; i < weft_graph_tensor_count(gs); i++) {
        weft_tensor *ts = weft_graph_tensor(gs, i), *tc = weft_graph_tensor(gc, i);
        if (!weft_tensor_is_kept(ts)) continue;
        size_t bytes = weft_tensor_bytes(ts);
        char *bs = malloc(bytes + 1), *bc = malloc(bytes + 1);
        assert_true(bs != NULL && bc != NULL);
        CHECK(weft_tensor_read(ts, bs, bytes));
        CHECK(weft_tensor_read(tc, bc, bytes));
        if (memcmp(bs, bc, bytes) != 0)
          fail_msg("seed %llu: tensor %s differs", (unsigned long long)seed, weft_tensor_name(ts));
        free(bs);
        free(bc);
      }
    }
    weft_graph_destroy(gs);
    weft_graph_destroy(gc);
  }
  weft_runtime_destroy(sim);
  weft_runtime_destroy(cpu);
}

/* ---- failures ------------------------------------------------------------------------------------ */

static int fail_kernel(weft_kernel_ctx *ctx) { return weft_ctx_fail(ctx, "planned failure"); }
static int ok_kernel(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}

static const weft_op *gpu_op(weft_runtime *rt, const char *name, weft_kernel_fn cpu, weft_kernel_fn cuda) {
  weft_op_desc d;
  memset(&d, 0, sizeof d);
  d.name = name;
  d.nargs = 1;
  d.access[0] = WEFT_READ_WRITE;
  d.cpu = cpu;
  d.cuda = cuda;
  const weft_op *op;
  CHECK(weft_op_register(rt, &d, &op));
  return op;
}

static void test_failures(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h200x2", 2, WEFT_RUNTIME_SIM_COMPUTE);
  const weft_op *bad = gpu_op(rt, "bad", fail_kernel, fail_kernel);
  const weft_op *gpu_only = gpu_op(rt, "gpu_only", NULL, ok_kernel);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  /* A failing node: its dependents are skipped, the independent chain on cuda:1 still runs. */
  weft_tensor *a = square(g, "a", 32, weft_cuda(0)), *b = square(g, "b", 32, weft_cuda(1)), *c = NULL;
  CHECK(weft_call(g, bad, &a, 1, NULL, 0));
  CHECK(weft_relu(g, a, &c));
  for (int i = 0; i < 5; i++) CHECK(weft_relu(g, b, &b));
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  assert_int_equal(weft_run_wait(r), WEFT_EKERNEL);
  assert_true(tu_contains(weft_run_error(r), "planned failure"));
  weft_sim_summary s;
  CHECK(weft_sim_run_summary(r, &s));
  assert_int_equal(s.nodes_run, 6); /* the failed node ran; relu(a) was skipped */
  double st, en;
  CHECK(weft_sim_node_interval(r, 1, &st, &en));
  assert_true(isnan(st) && isnan(en));
  weft_run_destroy(r);
  weft_graph_destroy(g);
  /* A user op with a CUDA kernel only: the simulator computes on the CPU, so it cannot. */
  CHECK(weft_graph_create(rt, &g));
  a = square(g, "a", 8, weft_cuda(0));
  CHECK(weft_call(g, gpu_only, &a, 1, NULL, 0));
  assert_int_equal(weft_graph_run(g), WEFT_EKERNEL);
  assert_true(tu_contains(weft_last_error(), "op 'gpu_only' has no CPU kernel"));
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  /* Without compute mode the same op only takes time. */
  rt = sim_runtime("h100", 1, 0);
  gpu_only = gpu_op(rt, "gpu_only", NULL, ok_kernel);
  CHECK(weft_graph_create(rt, &g));
  a = square(g, "a", 8, weft_cuda(0));
  CHECK(weft_call(g, gpu_only, &a, 1, NULL, 0));
  CHECK(weft_graph_run(g));
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* The summary is refused while a run is in flight and once the graph ran again. */
static void test_summary_states(void **state) {
  (void)state;
  weft_runtime *rt = sim_runtime("h100", 2, 0);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x = square(g, "x", 100, weft_cuda(0));
  for (int i = 0; i < 10; i++) CHECK(weft_mm(g, x, x, &x));
  weft_run *r1, *r2;
  weft_sim_summary s;
  CHECK(weft_graph_launch(g, &r1));
  CHECK(weft_run_wait(r1));
  CHECK(weft_sim_run_summary(r1, &s));
  CHECK(weft_graph_launch(g, &r2));
  CHECK(weft_run_wait(r2));
  assert_int_equal(weft_sim_run_summary(r1, &s), WEFT_ESTATE);
  CHECK(weft_sim_run_summary(r2, &s));
  assert_int_equal(weft_sim_run_summary(NULL, &s), WEFT_EINVAL);
  weft_run_destroy(r1);
  weft_run_destroy(r2);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* ---- calibration gives a simulated machine's profile back --------------------------------------- */

/* The rate a simulated GPU product of side x achieves: the curve's, except below its first
 * point, where a product takes as long as the first point's (src/sched/cost/cost.c,
 * weft__cost_gpu). */
static double gpu_rate(const weft__sim_curve *c, double x) {
  if (c->n > 0 && x < c->x[0]) return c->y[0] * (x / c->x[0]) * (x / c->x[0]) * (x / c->x[0]);
  return weft__sim_curve_at(c, x);
}

static void test_calibrate_roundtrip(void **state) {
  (void)state;
  weft__sim_profile want = load("h200x2"), got;
  /* Fixed costs of runs, whether the shipped profile has them or not. */
  want.gpu.run_s = 45e-6;
  want.gpu.replay_run_s = 17e-6;
  want.gpu.gemm_wide_s = (weft__sim_curve){.n = 2, .x = {256, 1024}, .y = {30e-6, 90e-6}};
  want.host.wake_s = 23e-6;
  /* potrf, trsm and syrk far below the GEMM rate, as on the GPUs (docs/benchmarks.md). */
  for (int op = 0; op < 3; op++)
    for (int d = 0; d < 2; d++)
      want.gpu.la[op][d] = (weft__sim_curve){.n = 2, .x = {256, 4096}, .y = {(1 + op) * 2e11 * (1 + d), (1 + op) * 6e12 * (1 + d)}};
  /* Products with a transposed operand 0.8 x the others' rate. */
  for (int d = 0; d < 2; d++) {
    weft__sim_curve *t = &want.gpu.gemm_t[d];
    const weft__sim_curve *n = &want.gpu.gemm[d];
    *t = (weft__sim_curve){.n = 2, .x = {256, 4096}};
    for (int i = 0; i < 2; i++) t->y[i] = 0.8 * weft__sim_curve_at(n, t->x[i]);
  }
  weft_runtime *rt = sim_runtime_of(&want, 1);
  weft_calibrate_options o;
  weft_calibrate_options_init(&o);
  o.quick = 1;
  o.name = "roundtrip";
  char *path = temp_path(".json");
  assert_int_equal(weft_calibrate(NULL, &o, path), WEFT_EINVAL);
  assert_true(tu_contains(weft_calibrate_last_error(), "NULL argument"));
  if (weft_calibrate(rt, &o, path) != WEFT_OK) fail_msg("weft_calibrate: %s", weft_calibrate_last_error());
  CHECK(weft__sim_profile_load(path, &got));
  remove(path);
  assert_string_equal(got.name, "roundtrip");
  assert_int_equal(got.ngpus, 2);
  assert_true(tu_contains(got.source, "a simulated machine"));
  for (int i = 0; i < got.gpu.gemm[0].n; i++)
    assert_true(near(got.gpu.gemm[0].y[i], gpu_rate(&want.gpu.gemm[0], got.gpu.gemm[0].x[i]), 0.01));
  for (int i = 0; i < got.gpu.gemm[1].n; i++)
    assert_true(near(got.gpu.gemm[1].y[i], gpu_rate(&want.gpu.gemm[1], got.gpu.gemm[1].x[i]), 0.01));
  /* The host's chain of products (none of them split: under 2 GFLOP) runs at the wide rate
   * where the profile has one (des.c, cpu_cost), as h200x2 does; the wide curves come back as
   * they were. */
  for (int i = 0; i < got.host.gemm[0].n; i++) {
    double x = got.host.gemm[0].x[i];
    double rate = weft__sim_curve_at(&want.host.gemm_wide[0], x);
    assert_true(near(got.host.gemm[0].y[i], rate, 0.01));
  }
  for (int d = 0; d < 2; d++) {
    assert_true(want.host.gemm_wide[d].n > 0 && got.host.gemm_wide[d].n > 0);
    for (int i = 0; i < got.host.gemm_wide[d].n; i++)
      assert_true(near(got.host.gemm_wide[d].y[i], weft__sim_curve_at(&want.host.gemm_wide[d], got.host.gemm_wide[d].x[i]), 0.02));
    for (int op = 0; op < 3; op++) {
      assert_true(got.host.la_wide[op][d].n >= 1);
      for (int i = 0; i < got.host.la_wide[op][d].n; i++)
        assert_true(near(got.host.la_wide[op][d].y[i],
                         weft__sim_curve_at(&want.host.la_wide[op][d], got.host.la_wide[op][d].x[i]), 0.02));
    }
  }
  for (int d = 0; d < 2; d++) { /* measured at their own rate (the model prices them so) */
    assert_true(got.gpu.gemm_t[d].n >= 1);
    for (int i = 0; i < got.gpu.gemm_t[d].n; i++)
      assert_true(near(got.gpu.gemm_t[d].y[i], weft__sim_curve_at(&want.gpu.gemm_t[d], got.gpu.gemm_t[d].x[i]), 0.02));
  }
  for (int op = 0; op < 3; op++)
    for (int d = 0; d < 2; d++) {
      assert_true(got.gpu.la[op][d].n >= 1); /* quick: tiles of 1024 */
      for (int i = 0; i < got.gpu.la[op][d].n; i++)
        assert_true(near(got.gpu.la[op][d].y[i], weft__sim_curve_at(&want.gpu.la[op][d], got.gpu.la[op][d].x[i]), 0.02));
    }
  assert_true(near(got.gpu.memory_bandwidth, want.gpu.memory_bandwidth, 0.01));
  assert_true(near(got.gpu.fill_bandwidth, want.gpu.fill_bandwidth, 0.01));
  assert_true(near(got.host.memory_bandwidth, want.host.memory_bandwidth, 0.01));
  assert_true(near(got.host.fill_rate, want.host.fill_rate, 0.01));
  assert_true(near(got.h2d.bandwidth, want.h2d.bandwidth, 0.01));
  assert_true(near(got.d2h.bandwidth, want.d2h.bandwidth, 0.01));
  assert_true(near(got.h2d_pageable.bandwidth, want.h2d_pageable.bandwidth, 0.01));
  assert_true(near(got.peer.bandwidth, want.peer.bandwidth, 0.01));
  assert_true(got.peer_access);
  assert_true(near(got.h2d.latency_s, want.h2d.latency_s, 0.02));
  /* Host costs come back as the per-node times they produce. */
  assert_true(near(got.gpu.launch_s, WEFT__MAX(want.gpu.launch_s, want.gpu.kernel_s), 0.02));
  /* A chain of tiny products: the launch, or the smallest product's time where that is longer. */
  const weft__sim_curve *c0 = &want.gpu.gemm[0];
  double floor_s = 2.0 * c0->x[0] * c0->x[0] * c0->x[0] / c0->y[0];
  double want_mm = want.gpu.gemm_launch_s > 0 ? want.gpu.gemm_launch_s : want.gpu.launch_s;
  assert_true(near(got.gpu.gemm_launch_s, WEFT__MAX(want_mm, floor_s), 0.02));
  assert_true(near(got.gpu.kernel_s, WEFT__MAX(want.gpu.kernel_s, want.gpu.replay_node_s), 0.02));
  assert_true(near(got.gpu.event_s, want.gpu.event_s, 0.05));
  assert_true(near(got.gpu.notify_s, want.gpu.notify_s, 0.05));
  assert_true(near(got.gpu.launch_lanes, want.gpu.launch_lanes, 0.05));
  assert_true(near(got.gpu.replay_temp_s, want.gpu.replay_temp_s, 0.02));
  assert_true(got.gpu.temp_s <= 0.02 * want.gpu.launch_s + want.gpu.temp_s);
  /* Batches: measured with batching on, through the model's terms (des.c). */
  assert_true(near(got.gpu.batch_node_s, want.gpu.batch_node_s, 0.05));
  assert_true(near(got.gpu.batch_op_s, want.gpu.batch_op_s, 0.05));
  /* A run's fixed cost, from a graph of one node against the model without it. */
  assert_true(near(got.gpu.run_s, want.gpu.run_s, 0.02));
  assert_true(near(got.gpu.replay_run_s, want.gpu.replay_run_s, 0.02));
  /* The caller's wake-up, from a long chain of CPU additions against the model without it. */
  assert_true(near(got.host.wake_s, want.host.wake_s, 0.02));
  /* Shares for the sizes that do not fill the device (quick: 256 and 1024), as modelled: at
   * least what the replay's per-node cost allows. */
  assert_int_equal(got.gpu.gemm_share.n, 2);
  /* What each of many independent such products adds to an eager run: the profile's least
   * launch among others, where that is longer than the device's time for them. */
  assert_int_equal(got.gpu.gemm_wide_s.n, 2);
  for (int i = 0; i < 2; i++) assert_true(near(got.gpu.gemm_wide_s.y[i], weft__sim_curve_at(&want.gpu.gemm_wide_s, got.gpu.gemm_wide_s.x[i]), 0.02));
  for (int i = 0; i < got.gpu.gemm_share.n; i++) {
    double x = got.gpu.gemm_share.x[i], t = 2 * x * x * x / gpu_rate(&want.gpu.gemm[0], x);
    double share = WEFT__MAX(weft__sim_curve_at(&want.gpu.gemm_share, x), want.gpu.replay_node_s / t);
    assert_true(near(got.gpu.gemm_share.y[i], share, 0.02));
  }
  weft_runtime_destroy(rt);
}

/* ---- out of memory at every allocation ----------------------------------------------------------- */

static int oom_once(long fail_at) {
  tu_alloc_install(fail_at);
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.simulate = "h200x2";
  o.cpu_workers = 2;
  o.flags = WEFT_RUNTIME_QUIET;
  weft_runtime *rt = NULL;
  weft_graph *g = NULL;
  int rc = weft_runtime_create(&o, &rt);
  if (rc == WEFT_OK) rc = weft_graph_create(rt, &g);
  weft_tensor *x = NULL, *y = NULL, *z = NULL, *h = NULL;
  if (rc == WEFT_OK)
    rc = weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){64, 64}, weft_cuda(0), weft_ones(), &x);
  if (rc == WEFT_OK) rc = weft_mm(g, x, x, &y);
  if (rc == WEFT_OK) rc = weft_copy(g, y, weft_cuda(1), &z);
  if (rc == WEFT_OK) rc = weft_copy(g, z, weft_cpu(), &h);
  if (rc == WEFT_OK) {
    weft_run *r;
    rc = weft_graph_launch(g, &r);
    if (rc == WEFT_OK) {
      rc = weft_run_wait(r);
      weft_sim_summary s;
      if (rc == WEFT_OK) rc = weft_sim_run_summary(r, &s);
      weft_run_destroy(r);
    }
  }
  /* Every failure says what ran out (pinned host memory may fail quietly: storage.c falls
   * back to ordinary memory). */
  if (rc != WEFT_OK && strlen(weft_last_error()) == 0) fail_msg("fail_at %ld: %s without a message", fail_at, weft_status_name(rc));
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  int failed = tu_alloc_failed();
  long live = tu_alloc_live();
  tu_alloc_uninstall();
  if (live != 0) fail_msg("fail_at %ld: %ld blocks leaked", fail_at, live);
  return failed;
}

/* ---- a simulated job of several ranks (sim_ranks) --------------------------------------------- */

static weft_runtime *ranks_runtime(int ranks, int per_host, int workers, unsigned flags) {
  return sim_job("h200x2", workers, flags, ranks, per_host);
}

/* A copy between ranks is a message on its link: the profile's `ranks` link between ranks of
 * one host, its `network` link between hosts, latency plus bytes over bandwidth. */
static void test_ranks_messages(void **state) {
  (void)state;
  weft__sim_profile p = load("h200x2");
  assert_true(p.ranks.bandwidth > 0 && p.network.bandwidth > 0);
  for (int per_host = 2; per_host >= 1; per_host--) {
    weft_runtime *rt = ranks_runtime(2, per_host, 1, 0);
    assert_int_equal(weft_runtime_ranks(rt), 2);
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    int64_t n = 1 << 20;
    weft_tensor *x = NULL, *y = NULL;
    CHECK(weft_tensor_create(g, "x", WEFT_F64, 1, &n, weft_cpu(), weft_zeros(), &x));
    CHECK(weft_copy(g, x, weft_on_rank(weft_cpu(), 1), &y));
    size_t copy = weft_node_id(weft_graph_last_node(g));
    weft_run *r;
    CHECK(weft_graph_launch(g, &r));
    CHECK(weft_run_wait(r));
    const weft__sim_link *l = per_host == 2 ? &p.ranks : &p.network;
    double s0, s1, want = l->latency_s + (double)(8 * n) / l->bandwidth;
    CHECK(weft_sim_node_interval(r, copy, &s0, &s1));
    assert_true(fabs((s1 - s0) - want) < 1e-9 + 1e-6 * want);
    weft_run_stats *st;
    CHECK(weft_run_stats_create(r, &st));
    uint64_t sent = 0, received = 0;
    CHECK(weft_run_stats_rank_bytes(st, 1, &sent, &received)); /* rank 1's own messages */
    assert_true(sent == 0 && received == (uint64_t)(8 * n));
    CHECK(weft_run_stats_rank_bytes(st, 0, &sent, &received));
    assert_true(sent == (uint64_t)(8 * n) && received == 0);
    weft_run_stats_destroy(st);
    weft_run_destroy(r);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
}

/* Two equal products on `dev`'s kind, both on rank 0 (t[0]) or one on each of two ranks (t[1]),
 * each rank with one worker: the makespans. On GPUs, each GPU's peak is its own. */
static void two_products(weft_device dev, int64_t side, double t[2]) {
  weft_runtime *rt = ranks_runtime(2, 0, 1, 0);
  for (int apart = 0; apart < 2; apart++) {
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    for (int k = 0; k < 2; k++) {
      weft_tensor *a = square(g, k ? "a1" : "a0", side, weft_on_rank(dev, apart ? k : 0)), *c = NULL;
      CHECK(weft_mm(g, a, a, &c));
    }
    weft_run *r;
    CHECK(weft_graph_launch(g, &r));
    CHECK(weft_run_wait(r));
    weft_sim_summary sum;
    CHECK(weft_sim_run_summary(r, &sum));
    t[apart] = sum.makespan_s;
    if (dev.kind == WEFT_DEVICE_CUDA) {
      uint64_t peak0 = 0, peak1 = 0, one = (uint64_t)side * (uint64_t)side * 4;
      CHECK(weft_sim_peak_bytes(r, dev, &peak0));
      CHECK(weft_sim_peak_bytes(r, weft_on_rank(dev, 1), &peak1));
      assert_true(apart ? peak0 >= 2 * one && peak1 >= 2 * one : peak0 >= 4 * one && peak1 == 0);
      assert_int_equal(weft_sim_peak_bytes(r, weft_on_rank(weft_cuda(1), 1), &peak1), WEFT_EDEVICE);
    }
    weft_run_destroy(r);
    weft_graph_destroy(g);
  }
  weft_runtime_destroy(rt);
}

/* Each rank has workers of its own: two equal products on two ranks of one worker each take
 * the time of one; on one rank, of two. */
static void test_ranks_own_workers(void **state) {
  (void)state;
  double t[2];
  two_products(weft_cpu(), 512, t);
  assert_true(t[1] < 0.6 * t[0]);
}

/* Each rank's GPUs are its own: the same product on rank 0's and rank 1's cuda:0 runs side by
 * side (on one GPU, one after the other), and each GPU's peak is its own. */
static void test_ranks_gpus(void **state) {
  (void)state;
  double t[2];
  two_products(weft_cuda(0), 8192, t);
  assert_true(t[1] < 0.6 * t[0]);
}

/* A GPU tensor copied to another rank's GPU on the same host goes as one copy over the peer
 * link (the transport's CUDA IPC in a real job), priced as the link; between hosts, or with
 * WEFT_GPU_IPC=0, through the hosts: the sender's GPU to its host, the message, the receiver's
 * host to its GPU. In compute mode the contents arrive either way. */
static void test_ranks_gpu_direct(void **state) {
  (void)state;
  weft__sim_profile p = load("h200x2");
  assert_true(p.peer_access && p.peer.bandwidth > 0);
  double took[3];
  for (int way = 0; way < 3; way++) { /* one host; two hosts; one host, WEFT_GPU_IPC=0 */
    if (way == 2) setenv("WEFT_GPU_IPC", "0", 1);
    weft_runtime *rt = sim_job("h200x2", 1, WEFT_RUNTIME_SIM_COMPUTE, 2, way == 1 ? 1 : 2);
    unsetenv("WEFT_GPU_IPC");
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    int64_t n = 1 << 22; /* 32 MiB */
    weft_tensor *x = NULL, *y = NULL;
    CHECK(weft_tensor_create(g, "x", WEFT_F64, 1, &n, weft_cuda(0), weft_uniform(0, 1, 7), &x));
    CHECK(weft_copy(g, x, weft_on_rank(weft_cuda(0), 1), &y));
    size_t copies = weft_graph_node_count(g);
    assert_int_equal(copies, way == 0 ? 1 : 3);
    weft_run *r;
    CHECK(weft_graph_launch(g, &r));
    CHECK(weft_run_wait(r));
    weft_sim_summary sum;
    CHECK(weft_sim_run_summary(r, &sum));
    took[way] = sum.makespan_s;
    if (way == 0) {
      double s0, s1, link = (double)(8 * n) / p.peer.bandwidth;
      CHECK(weft_sim_node_interval(r, 0, &s0, &s1));
      assert_true(s1 - s0 >= link && s1 - s0 < 1.5 * link);
    }
    double *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
    CHECK(weft_tensor_read(x, want, (size_t)n * sizeof *want));
    CHECK(weft_tensor_read(y, got, (size_t)n * sizeof *got));
    assert_memory_equal(got, want, (size_t)n * sizeof *got);
    assert_true(want[0] != want[1]);
    free(want);
    free(got);
    weft_run_destroy(r);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  assert_true(took[0] < 0.5 * took[2] && took[0] < 0.5 * took[1]);
}

/* In compute mode a tiled Cholesky distributed over 2 x 2 simulated CPU ranks, or over the GPUs
 * of 2 simulated ranks, gives the factor of the same program in one CPU process, bit for bit,
 * and every rank's tiles are readable. */
static void test_ranks_compute_cholesky(void **state) {
  (void)state;
  int64_t n = 96, b = 32;
  double *a = tu_spd(n, 11), *out[3];
  for (int dist = 0; dist < 3; dist++) { /* one process; 2 x 2 CPU ranks; 2 ranks' GPUs */
    weft_runtime *rt = dist == 1 ? ranks_runtime(4, 0, 1, WEFT_RUNTIME_SIM_COMPUTE)
                       : dist == 2 ? ranks_runtime(2, 0, 1, WEFT_RUNTIME_SIM_COMPUTE)
                                   : tu_runtime_cpu(2);
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    weft_tensor *x = NULL;
    CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){n, n}, dist == 2 ? weft_cuda(0) : weft_cpu(), weft_zeros(), &x));
    CHECK(weft_tensor_tiles(g, x, b, b));
    if (dist) CHECK(weft_tensor_distribute(g, x, 2, dist == 1 ? 2 : 1));
    CHECK(weft_tensor_write(x, a, (size_t)(n * n) * sizeof(double)));
    CHECK(tu_cholesky_tiled(g, x));
    weft_run *run;
    CHECK(weft_graph_launch(g, &run));
    CHECK(weft_run_wait(run));
    if (dist) { /* the tiles did move between the ranks */
      weft_run_stats *st;
      CHECK(weft_run_stats_create(run, &st));
      weft_stats_summary sum;
      weft_run_stats_summary(st, &sum);
      assert_true(sum.bytes_ranks > 0);
      /* The host ends of the legs between ranks' GPUs are pinned (a distributed tile has
       * storage of its own: its parent, on a CPU, has none). */
      for (size_t k = 0; k < weft_run_stats_diagnostic_count(st); k++) {
        weft_copy_diagnostic d;
        CHECK(weft_run_stats_diagnostic(st, k, &d));
        if (d.why == WEFT_WHY_PAGEABLE) fail_msg("%s", d.message);
      }
      weft_run_stats_destroy(st);
    }
    weft_run_destroy(run);
    out[dist] = malloc((size_t)(n * n) * sizeof(double));
    assert_non_null(out[dist]);
    CHECK(weft_tensor_read(x, out[dist], (size_t)(n * n) * sizeof(double)));
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  for (int k = 1; k < 3; k++)
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j <= i; j++)
        if (memcmp(&out[0][i * n + j], &out[k][i * n + j], sizeof(double)) != 0)
          fail_msg("L[%lld,%lld]: one process %.17g, %s %.17g", (long long)i, (long long)j, out[0][i * n + j],
                   k == 1 ? "4 simulated CPU ranks" : "2 simulated ranks' GPUs", out[k][i * n + j]);
  free(out[0]);
  free(out[1]);
  free(out[2]);
  free(a);
}

/* A job of `ranks` simulated ranks (one GPU each; max_gpus 0: none), one worker each. */
static weft_runtime *auto_job(int ranks, int max_gpus, unsigned flags) {
  return sim_job_gpus("h200x2", 1, flags, ranks, 0, max_gpus);
}

/* auto across ranks: eight independent products of auto matrices go to every rank's GPU (one
 * rank a GPU), so two ranks finish in little more than half the time of one, and each product's
 * result lives where it was computed. */
static void test_ranks_auto_spreads(void **state) {
  (void)state;
  double t[2];
  for (int ranks = 1; ranks <= 2; ranks++) {
    weft_runtime *rt = auto_job(ranks, 1, 0);
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    weft_node *prod[8];
    weft_tensor *c[8];
    for (int k = 0; k < 8; k++) {
      weft_tensor *a = square(g, "a", 8192, weft_auto()), *b = square(g, "b", 8192, weft_auto());
      c[k] = NULL;
      CHECK(weft_mm(g, a, b, &c[k]));
      prod[k] = weft_graph_last_node(g);
    }
    weft_run *r;
    CHECK(weft_graph_launch(g, &r));
    CHECK(weft_run_wait(r));
    weft_sim_summary sum;
    CHECK(weft_sim_run_summary(r, &sum));
    t[ranks - 1] = sum.makespan_s;
    int on[2] = {0, 0};
    for (int k = 0; k < 8; k++) {
      weft_placement pl;
      CHECK(weft_node_placement(g, prod[k], &pl));
      weft_device d = pl.device;
      assert_int_equal(d.kind, WEFT_DEVICE_CUDA);
      assert_true(d.rank >= 0 && d.rank < ranks);
      on[d.rank]++;
      assert_true(weft_device_equal(weft_tensor_device(c[k]), d));
    }
    if (ranks == 2) assert_true(on[0] >= 3 && on[1] >= 3);
    weft_run_destroy(r);
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
  assert_true(t[1] < 0.65 * t[0]);
}

/* In compute mode, a program on auto run by 2 or 3 simulated CPU ranks gives what one CPU
 * process gives, bit for bit: contents given before the run (on every rank alike), products
 * placed on any rank, their results brought together by messages; and run again after the
 * placement gave every tensor a home, with contents on the rank that holds them. */
static void test_ranks_auto_compute(void **state) {
  (void)state;
  enum { N = 96, K = 6 };
  double want[N * N], got[N * N], in[N * N];
  for (int i = 0; i < N * N; i++) in[i] = (double)(i % 17) / 16.0 - 0.5;
  for (int ranks = 1; ranks <= 3; ranks++) {
    weft_runtime *rt = ranks == 1 ? tu_runtime_cpu(1) : auto_job(ranks, 0, WEFT_RUNTIME_SIM_COMPUTE);
    weft_device dev = ranks == 1 ? weft_cpu() : weft_auto();
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    weft_tensor *x = NULL, *acc = NULL;
    CHECK(weft_tensor_create(g, "x", WEFT_F64, 2, (int64_t[]){N, N}, dev, weft_zeros(), &x));
    CHECK(weft_tensor_write(x, in, sizeof in));
    for (int k = 0; k < K; k++) {
      weft_tensor *m = NULL, *p = NULL;
      CHECK(weft_tensor_create(g, "m", WEFT_F64, 2, (int64_t[]){N, N}, dev, weft_uniform(-1, 1, 40 + (uint64_t)k), &m));
      CHECK(weft_mm(g, x, m, &p));
      if (acc == NULL) acc = p;
      else CHECK(weft_add(g, acc, p, &acc));
    }
    weft_tensor_keep(acc);
    for (int round = 0; round < 2; round++) {
      weft_run *r;
      CHECK(weft_graph_launch(g, &r));
      CHECK(weft_run_wait(r));
      if (ranks > 1 && round == 0) {
        weft_run_stats *st;
        CHECK(weft_run_stats_create(r, &st));
        weft_stats_summary sum;
        weft_run_stats_summary(st, &sum);
        assert_true(sum.bytes_ranks > 0); /* the products did not all run on one rank */
        weft_run_stats_destroy(st);
      }
      weft_run_destroy(r);
      CHECK(weft_tensor_read(acc, round == 0 && ranks == 1 ? want : got, sizeof got));
      if (ranks > 1 || round > 0)
        for (int i = 0; i < N * N; i++)
          if (memcmp(&want[i], &got[i], sizeof got[i]) != 0)
            fail_msg("%d rank(s), run %d: element %d is %.17g, one process gives %.17g", ranks, round + 1, i, got[i], want[i]);
    }
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
}

/* Bad input: ranks without a simulated machine, a tensor of a rank the job does not have, a GPU
 * beyond a rank's share of its host's. */
static void test_ranks_bad(void **state) {
  (void)state;
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.sim_ranks = 2;
  o.flags = WEFT_RUNTIME_QUIET;
  weft_runtime *rt = NULL;
  assert_int_equal(weft_runtime_create(&o, &rt), WEFT_EINVAL);
  assert_non_null(strstr(weft_last_error(), "need simulate"));
  o.simulate = "h200x2";
  o.sim_ranks = -1;
  assert_int_equal(weft_runtime_create(&o, &rt), WEFT_EINVAL);
  rt = ranks_runtime(2, 0, 1, 0);
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *t = NULL;
  int64_t n = 4;
  assert_int_equal(weft_tensor_create(g, "far", WEFT_F32, 1, &n, weft_on_rank(weft_cpu(), 2), weft_zeros(), &t),
                   WEFT_EDEVICE);
  /* Two ranks on one h200x2 host: a GPU each, so rank 1 has no cuda:1. */
  assert_int_equal(weft_device_count(rt, WEFT_DEVICE_CUDA), 1);
  assert_int_equal(weft_tensor_create(g, "g1", WEFT_F32, 1, &n, weft_on_rank(weft_cuda(1), 1), weft_zeros(), &t),
                   WEFT_EDEVICE);
  weft_graph_destroy(g);
  /* More than rank 1's GPU holds: the run fails naming that GPU. */
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *big = NULL, *twice = NULL;
  CHECK(weft_tensor_create(g, "big", WEFT_F32, 2, (int64_t[]){200000, 200000}, weft_on_rank(weft_cuda(0), 1),
                           weft_zeros(), &big));
  CHECK(weft_scale(g, big, 2.0, &twice));
  assert_int_equal(weft_graph_run(g), WEFT_EDEVMEM);
  assert_non_null(strstr(weft_last_error(), "rank 1 cuda:0 of the simulated machine"));
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}


static void test_out_of_memory(void **state) {
  (void)state;
  long n = 0;
  while (oom_once(n)) n++;
  print_message("%ld allocation sites failed in turn\n", n);
  assert_true(n > 20);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_profiles_shipped),
      cmocka_unit_test(test_profile_files),
      cmocka_unit_test(test_devices),
      cmocka_unit_test(test_no_data),
      cmocka_unit_test(test_two_chains_two_gpus),
      cmocka_unit_test(test_shared_device),
      cmocka_unit_test(test_host_and_memory_costs),
      cmocka_unit_test(test_run_fixed_cost),
      cmocka_unit_test(test_overlap),
      cmocka_unit_test(test_report_of_simulated_run),
      cmocka_unit_test(test_scaling),
      cmocka_unit_test(test_hundred_thousand_nodes),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_replay),
      cmocka_unit_test(test_device_memory_limit),
      cmocka_unit_test(test_streams),
      cmocka_unit_test(test_compute_mode),
      cmocka_unit_test(test_oracle_programs),
      cmocka_unit_test(test_failures),
      cmocka_unit_test(test_summary_states),
      cmocka_unit_test(test_calibrate_roundtrip),
      cmocka_unit_test(test_caller_wake),
      cmocka_unit_test(test_out_of_memory),
      cmocka_unit_test(test_ranks_messages),
      cmocka_unit_test(test_ranks_own_workers),
      cmocka_unit_test(test_ranks_compute_cholesky),
      cmocka_unit_test(test_ranks_bad),
      cmocka_unit_test(test_ranks_gpus),
      cmocka_unit_test(test_ranks_gpu_direct),
      cmocka_unit_test(test_ranks_auto_spreads),
      cmocka_unit_test(test_ranks_auto_compute),
  };
  const char *only = getenv("WEFT_TEST_FILTER"); /* e.g. WEFT_TEST_FILTER=test_overlap */
  if (only != NULL) cmocka_set_test_filter(only);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
