/* test_mpi.c — one graph across processes (src/backends/mpi), run under mpirun with 2, 3 and 4
 * ranks (tests/mpi.cmake; oversubscribed on a small machine): every rank builds the same graph,
 * each node runs on the rank that owns what it writes, the tensors it reads from other ranks
 * come as messages, and the results are what one process computes (compared bit for bit on
 * every rank through weft_tensor_read_all). Bad input: a tensor of a rank that does not exist,
 * reading another rank's tensor with weft_tensor_read, ranks that build different graphs.
 * Faults: a node that fails on one rank, and a run cancelled on one rank, end every rank's run
 * with the same error, naming the node and the rank; the next run is whole again. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <jansson.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "testutil.h"
#include "weft/report.h"

/* Under the sanitizers a failed huge allocation must return NULL, as malloc does (a launch
 * that fails on one rank for want of memory is a test below). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }

static weft_runtime *rt;
static int me, nranks;

static int setup(void **state) {
  (void)state;
  rt = tu_runtime_cpu(2);
  me = weft_runtime_rank(rt);
  nranks = weft_runtime_ranks(rt);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  weft_runtime_destroy(rt);
  return 0;
}

static weft_device on(int rank) { return weft_on_rank(weft_cpu(), rank); }

/* Runs g once (every rank) and returns the run's statistics and summary; the caller destroys
 * the statistics and the run. */
static weft_run_stats *run_with_stats(weft_graph *g, weft_run **r, weft_stats_summary *sum) {
  weft_run_stats *st;
  CHECK(weft_graph_launch(g, r));
  CHECK(weft_run_wait(*r));
  CHECK(weft_run_stats_create(*r, &st));
  weft_run_stats_summary(st, sum);
  return st;
}

/* The run's trace, saved collectively: rank 0 writes one file with a process per rank
 * ("rank R: cpu", pids from 1000 R), each with its own nodes; the other ranks write nothing. */
static void check_trace_of_every_rank(const weft_run_stats *st) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/weft_test_mpi_%d_%d.json", (int)getpid(), me);
  CHECK(weft_run_stats_save_all(st, WEFT_REPORT_TRACE, path));
  if (me != 0) {
    assert_int_not_equal(access(path, F_OK), 0);
    return;
  }
  json_error_t err;
  json_t *j = json_load_file(path, 0, &err);
  if (j == NULL) fail_msg("%s: %s at line %d", path, err.text, err.line);
  json_t *events = json_object_get(j, "traceEvents");
  int named[8] = {0}, slices[8] = {0};
  for (size_t i = 0; i < json_array_size(events); i++) {
    json_t *e = json_array_get(events, i);
    int pid = (int)json_integer_value(json_object_get(e, "pid")), rank = pid / 1000;
    assert_true(rank >= 0 && rank < nranks);
    const char *name = json_string_value(json_object_get(e, "name")), *ph = json_string_value(json_object_get(e, "ph"));
    if (name != NULL && strcmp(name, "process_name") == 0) {
      char want[32];
      snprintf(want, sizeof want, "rank %d: cpu", rank);
      assert_string_equal(json_string_value(json_object_get(json_object_get(e, "args"), "name")), want);
      named[rank]++;
    }
    if (ph != NULL && strcmp(ph, "X") == 0) slices[rank]++;
  }
  for (int k = 0; k < nranks && k < 8; k++) {
    assert_int_equal(named[k], 1);
    assert_true(slices[k] >= 3); /* its scale and add, and a message at least */
  }
  json_decref(j);
  assert_int_equal(remove(path), 0);
}

/* A chain that visits every rank and comes back: x on rank 0; on rank r, v_r = v_{r-1} * 2 + x;
 * the last back on rank 0. Serial: v_k = (2^k + 2^k - 1) x, exactly in double. */
static void a_chain_through_every_rank(void **state) {
  (void)state;
  assert_true(nranks >= 2);
  enum { N = 300000 }; /* more than one CPU chunk: split on each rank too */
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  int64_t sh[1] = {N};
  weft_tensor *x, *v;
  CHECK(weft_tensor_create(g, "x", WEFT_F64, 1, sh, on(0), weft_uniform(-1, 1, 7), &x));
  v = x;
  for (int k = 1; k <= nranks; k++) {
    int r = k % nranks;
    weft_tensor *t2 = NULL, *next = NULL;
    char name[16];
    snprintf(name, sizeof name, "v%d", k);
    CHECK(weft_tensor_create(g, name, WEFT_F64, 1, sh, on(r), weft_zeros(), &next));
    CHECK(weft_tensor_create(g, NULL, WEFT_F64, 1, sh, on(r), weft_zeros(), &t2));
    CHECK(weft_scale(g, v, 2.0, &t2));
    CHECK(weft_add(g, t2, x, &next));
    v = next;
  }
  /* weft explain's words for the first message, x from rank 0 to rank 1 (node 0, inserted for
   * the scale on rank 1). */
  weft_placement pl;
  weft_node *copy = weft_graph_node(g, 0);
  CHECK(weft_node_placement(g, copy, &pl));
  assert_string_equal(pl.lane, "mpi transport");
  assert_true(tu_contains(pl.why, me <= 1 ? "a message from rank 0 to rank 1" : "runs on rank 1: nothing of it runs here"));
  for (int run = 0; run < 3; run++) { /* replays: the same messages again */
    /* The messages each rank sends or receives, counted by its statistics: rank 0 sends x to
     * every other rank and receives the last v; rank 1 receives x and sends v on; the others
     * receive v and x and send v on. */
    weft_run *r;
    weft_stats_summary sum;
    weft_run_stats *st = run_with_stats(g, &r, &sum);
    uint64_t messages = me == 0 ? (uint64_t)nranks : me == 1 ? 2 : 3;
    assert_int_equal(sum.bytes_ranks, messages * N * sizeof(double));
    /* Per rank pair: x goes from rank 0 to each other rank; v_k from rank k to k + 1 (the last
     * back to rank 0). */
    for (int peer = 0; peer < nranks; peer++) {
      uint64_t sent, received;
      CHECK(weft_run_stats_rank_bytes(st, peer, &sent, &received));
      int want_sent = peer != me && (me == 0 ? 1 : peer == (me + 1) % nranks);
      int want_received = peer != me && (me == 0 ? peer == nranks - 1 : (peer == 0) + (peer == me - 1 && peer >= 1));
      assert_int_equal(sent, (uint64_t)want_sent * N * sizeof(double));
      assert_int_equal(received, (uint64_t)want_received * N * sizeof(double));
    }
    uint64_t a, b;
    assert_int_equal(weft_run_stats_rank_bytes(st, nranks, &a, &b), WEFT_EINVAL);
    if (run == 2) check_trace_of_every_rank(st);
    weft_run_stats_destroy(st);
    weft_run_destroy(r);
    double *got = malloc(N * sizeof *got), *xs = malloc(N * sizeof *xs);
    CHECK(weft_tensor_read_all(v, got, N * sizeof *got));
    CHECK(weft_tensor_read_all(x, xs, N * sizeof *xs));
    for (int i = 0; i < N; i++) {
      double want = xs[i];
      for (int k = 1; k <= nranks; k++) want = want * 2.0 + xs[i];
      if (got[i] != want) fail_msg("rank %d: element %d is %.17g, want %.17g", me, i, got[i], want);
    }
    free(got);
    free(xs);
  }
  weft_graph_destroy(g);
}

/* Many independent pieces, each on a rank, reduced on rank 0: messages in flight together. */
/* A message whose successor is a message (a copy bounced between ranks 0 and 1, as the
 * ping-pong of bench_mpi): the progress thread posts the next one itself, so on ranks 0 and 1
 * the messages after the first run on the lane after the workers', "cpu progress thread"
 * (weft__sched_complete_here), and the value arrives unchanged. */
static void messages_follow_messages_on_the_progress_thread(void **state) {
  (void)state;
  enum { HOPS = 40 };
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *t;
  CHECK(weft_tensor_create(g, "t0", WEFT_F64, 1, (int64_t[]){1}, on(0), weft_full(42.0), &t));
  for (int i = 1; i <= HOPS; i++) {
    weft_tensor *next = NULL;
    CHECK(weft_copy(g, t, on(i % 2), &next));
    t = next;
  }
  weft_run *r;
  weft_stats_summary sum;
  weft_run_stats *st = run_with_stats(g, &r, &sum);
  size_t on_progress = 0;
  for (size_t l = 0; l < sum.lanes; l++) {
    weft_lane_stats ls;
    CHECK(weft_run_stats_lane(st, l, &ls));
    if (strcmp(ls.name, "cpu progress thread") == 0) on_progress += ls.nodes;
  }
  /* Ranks 0 and 1 each send 20 and receive 20 messages; all but the first few follow a
   * message that completed on the progress thread. */
  if (me <= 1) assert_true(on_progress >= HOPS / 2);
  weft_run_stats_destroy(st);
  weft_run_destroy(r);
  double v = 0;
  CHECK(weft_tensor_read_all(t, &v, sizeof v));
  assert_true(v == 42.0);
  weft_graph_destroy(g);
}

static void fan_in_to_rank_zero(void **state) {
  (void)state;
  enum { PIECES = 24, N = 5000 };
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  int64_t sh[1] = {N};
  weft_tensor *acc;
  CHECK(weft_tensor_create(g, "acc", WEFT_F64, 1, sh, on(0), weft_zeros(), &acc));
  for (int p = 0; p < PIECES; p++) {
    weft_tensor *a, *b = NULL;
    CHECK(weft_tensor_create(g, NULL, WEFT_F64, 1, sh, on(p % nranks), weft_uniform(0, 1, 100 + (uint64_t)p), &a));
    CHECK(weft_tensor_create(g, NULL, WEFT_F64, 1, sh, on(p % nranks), weft_zeros(), &b));
    CHECK(weft_relu(g, a, &b));
    CHECK(weft_add(g, acc, b, &acc)); /* on rank 0, in order */
  }
  CHECK(weft_graph_run(g));
  double *got = malloc(N * sizeof *got);
  CHECK(weft_tensor_read_all(acc, got, N * sizeof *got));
  /* The same sums in one process, in the same order (a runtime created under mpirun spans the
   * ranks too, so the reference is computed here: the generator's values and relu). */
  double *want = calloc(N, sizeof *want), *piece = malloc(N * sizeof *piece);
  for (int p = 0; p < PIECES; p++) {
    weft__cpu_fill_at(piece, WEFT_F64, 0, N, weft_uniform(0, 1, 100 + (uint64_t)p));
    for (int i = 0; i < N; i++) want[i] += piece[i] > 0 ? piece[i] : 0;
  }
  assert_memory_equal(got, want, N * sizeof *got);
  free(piece);
  free(want);
  free(got);
  weft_graph_destroy(g);
}

/* A runtime with the GPUs, or the test skipped on every rank alike (no GPU, or one rank). */
/* After a run failed on a 4 x 4 potrf of m (zeros), its owner makes m diag(4, 9, 16, 25): the
 * graph runs again, and `twice` (2 x its factor, on any rank) is diag(4, 6, 8, 10). */
static void runs_once_positive_definite(weft_graph *g, weft_tensor *m, int owner, weft_tensor *twice) {
  if (me == owner) {
    double spd[16] = {4, 0, 0, 0, 0, 9, 0, 0, 0, 0, 16, 0, 0, 0, 0, 25};
    CHECK(weft_tensor_write(m, spd, sizeof spd));
  }
  CHECK(weft_graph_run(g));
  double got[16];
  CHECK(weft_tensor_read_all(twice, got, sizeof got));
  for (int i = 0; i < 16; i++) assert_true(got[i] == (i % 5 == 0 ? 2.0 * (2 + i / 5) : 0.0));
}

/* A runtime with this rank's share of its host's GPUs; its copies between the GPUs of ranks on
 * one host go through the hosts when !direct (WEFT_GPU_IPC=0, on every rank alike). Skips the
 * test without a GPU or a second rank (every rank alike). */
static weft_runtime *gpu_runtime_or_skip_as(int direct) {
  if (!direct) setenv("WEFT_GPU_IPC", "0", 1);
  weft_runtime *grt = tu_runtime_with(2, -1, 0);
  unsetenv("WEFT_GPU_IPC");
  if (weft_device_count(grt, WEFT_DEVICE_CUDA) == 0 || nranks < 2) {
    weft_runtime_destroy(grt);
    print_message("no GPU or one rank: skipped\n");
    skip();
  }
  return grt;
}

static weft_runtime *gpu_runtime_or_skip(void) { return gpu_runtime_or_skip_as(0); }

/* Whether ranks 0 and 1 share this host with a GPU each, so that weft copies between their
 * GPUs directly (CUDA IPC; the GPU hosts' GPUs are all peers): every rank alike. */
static int gpus_of_one_host(weft_runtime *grt) {
  const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int here = v != NULL && atoi(v) >= 2 && weft_device_count(grt, WEFT_DEVICE_CUDA) > 0, all = 0;
  MPI_Allreduce(&here, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

/* A GPU tensor crossing ranks goes through host memory (WEFT_GPU_IPC=0, or ranks on two
 * hosts), a copy node a leg: rank 0's GPU tensor read by a node on rank 1's GPU (GPU -> rank
 * 0's CPU -> rank 1's CPU -> GPU), and an explicit copy of the result to rank 0's CPU (GPU ->
 * rank 1's CPU -> rank 0's CPU). The values are one process's (a + a is exact on either
 * device). Skipped without a GPU (every rank alike). */
static void gpu_tensors_cross_ranks_through_host_memory(void **state) {
  (void)state;
  weft_runtime *grt = gpu_runtime_or_skip();
  enum { N = 100000 };
  int64_t sh[1] = {N};
  weft_graph *g;
  CHECK(weft_graph_create(grt, &g));
  weft_tensor *a, *b, *h = NULL;
  CHECK(weft_tensor_create(g, "a", WEFT_F64, 1, sh, weft_on_rank(weft_cuda(0), 0), weft_uniform(-1, 1, 7), &a));
  CHECK(weft_tensor_create(g, "b", WEFT_F64, 1, sh, weft_on_rank(weft_cuda(0), 1), weft_zeros(), &b));
  CHECK(weft_add(g, a, a, &b));
  CHECK(weft_copy(g, b, on(0), &h));
  assert_int_equal(weft_graph_node_count(g), 6); /* 3 legs, the add, 1 leg, the copy */
  for (size_t i = 0; i < 6; i++)
    assert_string_equal(weft_node_op_name(weft_graph_node(g, i)), i == 3 ? "add" : "copy");
  assert_true(weft_device_equal(weft_node_device(weft_graph_node(g, 3)), weft_on_rank(weft_cuda(0), 1)));
  CHECK(weft_graph_run(g));
  CHECK(weft_graph_run(g)); /* again: the legs' buffers are reused */
  double *got = malloc(N * sizeof *got), *want = malloc(N * sizeof *want);
  CHECK(weft_tensor_read_all(h, got, N * sizeof *got));
  weft__cpu_fill_at(want, WEFT_F64, 0, N, weft_uniform(-1, 1, 7));
  for (int i = 0; i < N; i++) want[i] += want[i];
  assert_memory_equal(got, want, N * sizeof *got);
  free(got);
  free(want);
  weft_graph_destroy(g);
  weft_runtime_destroy(grt);
}

/* Between the GPUs of ranks on one host a tensor moves as one copy (the sender's GPU into the
 * receiver's, CUDA IPC): rank 0's GPU tensor read by an add on rank 1's GPU is one copy node,
 * the result's copy to rank 0's CPU two (rank 1's GPU to its host, the message). A copy into a
 * tensor the program made on rank 1's GPU lands in a tensor of weft's first (whose memory the
 * sender can map). Values as one process's, run twice; a sender whose input failed tells the
 * receiver, and every rank's run fails naming the sender's node. Skipped unless ranks 0 and 1
 * share a host with a GPU each. */
static void gpu_tensors_cross_ranks_directly(void **state) {
  (void)state;
  weft_runtime *grt = gpu_runtime_or_skip_as(1);
  if (!gpus_of_one_host(grt)) {
    weft_runtime_destroy(grt);
    print_message("the ranks are not on one host with a GPU each: skipped\n");
    skip();
  }
  enum { N = 100000 };
  int64_t sh[1] = {N};
  weft_graph *g;
  CHECK(weft_graph_create(grt, &g));
  weft_tensor *a, *b, *h = NULL, *c;
  weft_device g0 = weft_on_rank(weft_cuda(0), 0), g1 = weft_on_rank(weft_cuda(0), 1);
  CHECK(weft_tensor_create(g, "a", WEFT_F64, 1, sh, g0, weft_uniform(-1, 1, 7), &a));
  CHECK(weft_tensor_create(g, "b", WEFT_F64, 1, sh, g1, weft_zeros(), &b));
  CHECK(weft_tensor_create(g, "c", WEFT_F64, 1, sh, g1, weft_zeros(), &c));
  CHECK(weft_add(g, a, a, &b));
  CHECK(weft_copy(g, b, on(0), &h));
  CHECK(weft_copy(g, a, g1, &c)); /* into the program's tensor: a copy of a there (the add's), then c */
  assert_int_equal(weft_graph_node_count(g), 5); /* the copy, the add, 1 leg, the message, c's copy */
  weft_node *first = weft_graph_node(g, 0);
  assert_string_equal(weft_node_op_name(first), "copy");
  assert_true(weft_device_equal(weft_node_device(first), g0));
  assert_true(weft_device_equal(weft_node_device(weft_graph_node(g, 1)), g1));
  assert_true(weft_device_equal(weft_node_device(weft_graph_node(g, 4)), g1)); /* reads the add's copy of a */
  for (int r = 0; r < 2; r++) CHECK(weft_graph_run(g));
  double *got = malloc(N * sizeof *got), *want = malloc(N * sizeof *want);
  weft__cpu_fill_at(want, WEFT_F64, 0, N, weft_uniform(-1, 1, 7));
  CHECK(weft_tensor_read_all(c, got, N * sizeof *got));
  assert_memory_equal(got, want, N * sizeof *got);
  for (int i = 0; i < N; i++) want[i] += want[i];
  CHECK(weft_tensor_read_all(h, got, N * sizeof *got));
  assert_memory_equal(got, want, N * sizeof *got);
  free(got);
  free(want);
  weft_graph_destroy(g);

  /* The sender's input fails (potrf of a matrix that is not positive definite, on rank 0's CPU:
   * its GPU copy and the copy to rank 1's GPU are skipped there). */
  CHECK(weft_graph_create(grt, &g));
  int64_t sq[2] = {4, 4};
  weft_tensor *m, *m0 = NULL, *out;
  CHECK(weft_tensor_create(g, "m", WEFT_F64, 2, sq, on(0), weft_zeros(), &m));
  CHECK(weft_tensor_create(g, "out", WEFT_F64, 2, sq, g1, weft_zeros(), &out));
  CHECK(weft_potrf(g, WEFT_LOWER, m));
  CHECK(weft_copy(g, m, g0, &m0));
  CHECK(weft_scale(g, m0, 2.0, &out));
  assert_int_equal(weft_graph_node_count(g), 4); /* potrf, to rank 0's GPU, to rank 1's, the scale */
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  assert_int_not_equal(weft_run_wait(run), WEFT_OK);
  assert_true(tu_contains(weft_run_error(run), "potrf"));
  assert_true(tu_contains(weft_run_error(run), "not positive definite"));
  assert_int_equal(weft_node_id(weft_run_failed_node(run)), 0);
  weft_run_destroy(run);
  runs_once_positive_definite(g, m, 0, out);
  weft_graph_destroy(g);
  weft_runtime_destroy(grt);
}

/* No copy of the run is reported as pageable on any rank: the host ends of the legs between
 * ranks are pinned (so the GPU copies them asynchronously). Every rank fails together (one
 * failing alone would leave the others waiting in the next test's messages). */
static void assert_no_pageable_copy(weft_run *run) {
  weft_run_stats *st;
  CHECK(weft_run_stats_create(run, &st));
  char why[320] = "";
  for (size_t i = 0; i < weft_run_stats_diagnostic_count(st); i++) {
    weft_copy_diagnostic d;
    CHECK(weft_run_stats_diagnostic(st, i, &d));
    if (d.why == WEFT_WHY_PAGEABLE) snprintf(why, sizeof why, "%s", d.message);
  }
  weft_run_stats_destroy(st);
  int mine = why[0] != '\0', any = 0;
  MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (mine) fail_msg("rank %d: %s", weft_runtime_rank(rt), why);
  if (any) fail_msg("another rank reported a pageable copy");
}

/* Tiles of a matrix distributed over the ranks' GPUs: a product on rank 1's tile reads rank 0's
 * (GPU -> rank 0's CPU -> rank 1's CPU -> GPU; or GPU to GPU between ranks of one host), as
 * the tiled Cholesky's panels do; the result is one process's, and the host legs are pinned.
 * Skipped without a GPU. */
static void gpu_tiles_cross_ranks_through_pinned_memory(void **state) {
  (void)state;
  for (int direct = 0; direct < 2; direct++) {
    weft_runtime *grt = gpu_runtime_or_skip_as(direct);
    enum { B = 512 };
    weft_graph *g;
    CHECK(weft_graph_create(grt, &g));
    weft_tensor *a;
    CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){2 * B, B}, weft_cuda(0), weft_uniform(-1, 1, 5), &a));
    CHECK(weft_tensor_tiles(g, a, B, B));
    CHECK(weft_tensor_distribute(g, a, 2, 1));
    CHECK(weft_gemm(g, weft_tensor_tile(a, 0, 0), 0, weft_tensor_tile(a, 0, 0), 1, 1.0, 1.0, weft_tensor_tile(a, 1, 0)));
    for (int r = 0; r < 2; r++) { /* the second run reuses the legs' buffers */
      weft_run *run;
      CHECK(weft_graph_launch(g, &run));
      CHECK(weft_run_wait(run));
      if (r == 1) assert_no_pageable_copy(run);
      weft_run_destroy(run);
    }
    double *got = malloc(2 * B * B * sizeof *got), *want = malloc(2 * B * B * sizeof *want);
    CHECK(weft_tensor_read_all(a, got, 2 * B * B * sizeof *got));
    weft__cpu_fill_at(want, WEFT_F64, 0, 2 * B * B, weft_uniform(-1, 1, 5));
    for (int k = 0; k < 2; k++) /* A10 += A00 A00^T, twice */
      for (int i = 0; i < B; i++)
        for (int j = 0; j < B; j++) {
          double acc = 0;
          for (int l = 0; l < B; l++) acc += want[i * B + l] * want[j * B + l];
          want[(B + i) * B + j] += acc;
        }
    for (int i = 0; i < 2 * B * B; i++)
      if (fabs(got[i] - want[i]) > 1e-9 * (1 + fabs(want[i]))) fail_msg("A[%d]: %.17g, want %.17g", i, got[i], want[i]);
    free(got);
    free(want);
    weft_graph_destroy(g);
    weft_runtime_destroy(grt);
  }
}

/* Ranks that share a host share its cores: by default each gets its share less one core for
 * its progress thread (at least one worker). */
static void ranks_of_one_host_share_its_cores(void **state) {
  (void)state;
  weft_runtime *own = tu_runtime_with(0, 0, 0);
  const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int local = v != NULL ? atoi(v) : 1;
  assert_true(local >= 1);
  weft_device_info info;
  CHECK(weft_device_info_get(own, weft_cpu(), &info));
  int cores = info.multiprocessors;
  int want = local > 1 ? (cores / local - 1 > 1 ? cores / local - 1 : 1) : cores;
  assert_int_equal(weft_runtime_cpu_workers(own), want);
  weft_runtime_destroy(own);
}

static void bad_ranks_are_refused(void **state) {
  (void)state;
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *t = NULL;
  assert_int_equal(weft_tensor_create(g, "far", WEFT_F32, 0, NULL, on(nranks), weft_zeros(), &t), WEFT_EDEVICE);
  char want[64];
  snprintf(want, sizeof want, "rank %d cpu", nranks);
  assert_true(tu_contains(weft_last_error(), want));
  assert_int_equal(weft_tensor_create(g, "neg", WEFT_F32, 0, NULL, on(-1), weft_zeros(), &t), WEFT_EDEVICE);
  /* Tensors of ranks 0 and 1 (every rank builds both): each rank reads its own, another
   * rank's only through weft_tensor_read_all. */
  weft_tensor *ts[2];
  CHECK(weft_tensor_create(g, "t0", WEFT_F64, 0, NULL, on(0), weft_full(10), &ts[0]));
  CHECK(weft_tensor_create(g, "t1", WEFT_F64, 0, NULL, on(1), weft_full(11), &ts[1]));
  for (int k = 0; k < 2; k++) {
    double v = 0;
    if (k == me) {
      CHECK(weft_tensor_read(ts[k], &v, sizeof v));
      assert_true(v == 10 + k);
    } else {
      assert_int_equal(weft_tensor_read(ts[k], &v, sizeof v), WEFT_EDEVICE);
      assert_true(tu_contains(weft_last_error(), "weft_tensor_read_all"));
      assert_int_equal(weft_tensor_write(ts[k], &v, sizeof v), WEFT_EDEVICE);
    }
    CHECK(weft_tensor_read_all(ts[k], &v, sizeof v));
    assert_true(v == 10 + k);
  }
  weft_graph_destroy(g);
}

/* Ranks that build different graphs fail the launch on every rank, naming the first node that
 * differs: no rank waits for a message that will not come. */
static void different_graphs_fail_on_every_rank(void **state) {
  (void)state;
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *a, *b = NULL;
  CHECK(weft_tensor_create(g, "a", WEFT_F32, 1, (int64_t[]){8}, on(0), weft_ones(), &a));
  CHECK(weft_relu(g, a, &b));
  if (me == nranks - 1)
    CHECK(weft_scale(g, b, 3.0, &b)); /* this rank's graph has a node more */
  else
    CHECK(weft_scale(g, b, 2.0, &b)); /* the same node, another factor: the same hash */
  CHECK(weft_relu(g, b, &b));
  if (me == 0) CHECK(weft_relu(g, b, &b));
  int rc = weft_graph_run(g);
  assert_int_equal(rc, WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "the ranks built different graphs: node 3 differs"));
  weft_graph_destroy(g);
}

/* potrf of a matrix that is not positive definite fails on the last rank. Its result goes to
 * rank 0 (whose consumer is skipped: the send goes as a message of no bytes), rank 0 also runs
 * a node of its own, and the ranks between have nothing: every rank's run fails with the error
 * of the last rank, naming the potrf node and its rank. Once the matrix is fixed (by its
 * owner), the same graph runs again on every rank, right. */
static void a_failure_on_one_rank_fails_every_rank(void **state) {
  (void)state;
  int last = nranks - 1;
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  int64_t sh[2] = {4, 4};
  weft_tensor *a, *b = NULL, *c, *d = NULL;
  CHECK(weft_tensor_create(g, "a", WEFT_F64, 2, sh, on(last), weft_zeros(), &a));
  CHECK(weft_tensor_create(g, "b", WEFT_F64, 2, sh, on(0), weft_zeros(), &b));
  CHECK(weft_tensor_create(g, "c", WEFT_F64, 2, sh, on(0), weft_ones(), &c));
  CHECK(weft_potrf(g, WEFT_LOWER, a));
  CHECK(weft_scale(g, a, 2.0, &b)); /* on rank 0: reads a from the last rank */
  CHECK(weft_relu(g, c, &d));       /* on rank 0: independent */
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  int rc = weft_run_wait(r);
  assert_int_not_equal(rc, WEFT_OK);
  char want[64];
  snprintf(want, sizeof want, "rank %d cpu", last);
  assert_true(tu_contains(weft_run_error(r), "potrf"));
  assert_true(tu_contains(weft_run_error(r), want));
  assert_non_null(weft_run_failed_node(r));
  assert_int_equal(weft_node_id(weft_run_failed_node(r)), 0); /* the potrf, the same node everywhere */
  weft_run_destroy(r);

  runs_once_positive_definite(g, a, last, b);
  weft_graph_destroy(g);
}

/* Rank 1 cancels a run while its first node waits for rank 0's message; rank 0 launches only
 * after that (a message of the test's own orders the two; the graph was planned before, as
 * planning is collective). Rank 1 skips the rest and its send
 * back goes as a message of no bytes; every rank's run ends cancelled, saying which rank
 * cancelled it. */
static void a_cancel_on_one_rank_cancels_every_rank(void **state) {
  (void)state;
  enum { N = 1000 };
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  int64_t sh[1] = {N};
  weft_tensor *x, *y = NULL, *z = NULL;
  CHECK(weft_tensor_create(g, "x", WEFT_F64, 1, sh, on(0), weft_ones(), &x));
  CHECK(weft_tensor_create(g, "y", WEFT_F64, 1, sh, on(1), weft_zeros(), &y));
  CHECK(weft_tensor_create(g, "z", WEFT_F64, 1, sh, on(0), weft_zeros(), &z));
  CHECK(weft_scale(g, x, 2.0, &y)); /* rank 1 receives x */
  CHECK(weft_add(g, y, x, &z));     /* rank 0 receives y */
  CHECK(weft_graph_run(g)); /* planned: a plan is agreed on by every rank at once */
  weft_run *r;
  int token = 1;
  if (me == 1) {
    CHECK(weft_graph_launch(g, &r));
    weft_run_cancel(r);
    assert_int_equal(MPI_Send(&token, 1, MPI_INT, 0, 99, MPI_COMM_WORLD), MPI_SUCCESS);
  } else {
    if (me == 0)
      assert_int_equal(MPI_Recv(&token, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_SUCCESS);
    CHECK(weft_graph_launch(g, &r));
  }
  assert_int_equal(weft_run_wait(r), WEFT_ECANCELED);
  if (me != 1) assert_true(tu_contains(weft_run_error(r), "rank 1 cancelled the run"));
  weft_run_destroy(r);
  /* The next run is whole: y = 2, z = 3. */
  CHECK(weft_graph_run(g));
  double got[N];
  CHECK(weft_tensor_read_all(z, got, sizeof got));
  for (int i = 0; i < N; i++) assert_true(got[i] == 3.0);
  weft_graph_destroy(g);
}

/* A launch that fails on one rank before its first node (rank 1 cannot allocate a tensor of a
 * petabyte) fails on every rank at once, the others naming rank 1 and its error; nobody waits
 * for rank 1's messages. The graph's next launch agrees again (and fails again). */
static void a_launch_that_fails_on_one_rank_fails_on_every_rank(void **state) {
  (void)state;
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x, *big, *y = NULL, *z = NULL;
  CHECK(weft_tensor_create(g, "x", WEFT_F64, 1, (int64_t[]){64}, on(0), weft_ones(), &x));
  CHECK(weft_tensor_create(g, "big", WEFT_F64, 1, (int64_t[]){(int64_t)1 << 47}, on(1), weft_zeros(), &big));
  CHECK(weft_tensor_create(g, "y", WEFT_F64, 1, (int64_t[]){64}, on(1), weft_zeros(), &y));
  CHECK(weft_scale(g, x, 2.0, &y)); /* rank 1 receives x */
  CHECK(weft_add(g, y, x, &z));     /* rank 1 again */
  for (int attempt = 0; attempt < 2; attempt++) {
    int rc = weft_graph_run(g);
    assert_int_equal(rc, WEFT_ENOMEM);
    assert_true(tu_contains(weft_last_error(), "big"));
    if (me != 1) assert_true(tu_contains(weft_last_error(), "rank 1: "));
  }
  weft_graph_destroy(g);
}

/* ---- a tiled Cholesky factorisation on tiles distributed over the ranks -------------------- */

enum { CH_N = 200, CH_B = 32 }; /* 7 x 7 tiles, the last ones ragged (8 wide) */

/* A = U + N^2 I on its lower triangle (U uniform in [-1, 1)), then the tiled factorisation in
 * place (tu_cholesky_tiled). The diagonal's lift is a syrk of N I written by the owner of each
 * diagonal tile. */
static void build_cholesky(weft_graph *g, weft_tensor *a, int distributed) {
  int64_t t = weft_tensor_tile_count(a, 0);
  for (int64_t k = 0; k < t; k++) {
    weft_tensor *akk = weft_tensor_tile(a, k, k), *e;
    int64_t b = weft_tensor_dim(akk, 0);
    int owner = distributed ? weft_tensor_device(akk).rank : 0;
    CHECK(weft_tensor_create(g, NULL, WEFT_F64, 2, (int64_t[]){b, b}, on(owner), weft_zeros(), &e));
    if (owner == me) {
      double *eye = calloc((size_t)(b * b), sizeof *eye);
      for (int64_t i = 0; i < b; i++) eye[i * b + i] = CH_N;
      CHECK(weft_tensor_write(e, eye, (size_t)(b * b) * sizeof *eye));
      free(eye);
    }
    CHECK(weft_syrk(g, WEFT_LOWER, 0, 1.0, e, 1.0, akk));
  }
  CHECK(tu_cholesky_tiled(g, a));
}

/* The factor of a matrix distributed 2-D block-cyclically (P x Q = the ranks: 2 x 1, 1 x 3,
 * 2 x 2) is the factor one process computes, bit for bit, on every rank; every rank ran only
 * the nodes of its tiles, and received the tiles it read. */
static void a_distributed_cholesky_is_the_one_process_factor(void **state) {
  (void)state;
  int P = nranks % 2 == 0 ? 2 : 1, Q = nranks / P;
  weft_graph *g, *h;
  weft_tensor *a, *ref;
  int64_t sh[2] = {CH_N, CH_N};
  CHECK(weft_graph_create(rt, &g));
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, sh, weft_cpu(), weft_uniform(-1, 1, 5), &a));
  CHECK(weft_tensor_tiles(g, a, CH_B, CH_B));
  CHECK(weft_tensor_distribute(g, a, P, Q));
  assert_int_equal(weft_tensor_device(weft_tensor_tile(a, 1, 0)).rank, (1 % P) * Q);
  assert_int_equal(weft_tensor_device(weft_tensor_tile(a, 0, 1)).rank, 1 % Q);
  build_cholesky(g, a, 1);
  /* The statistics: the tiles this rank read from others came as messages. */
  weft_run *r;
  weft_stats_summary sum;
  weft_run_stats *st = run_with_stats(g, &r, &sum);
  if (nranks > 1) assert_true(sum.bytes_ranks > 0);
  weft_run_stats_destroy(st);
  weft_run_destroy(r);
  /* One process: the same program on rank 0's CPU alone (a graph is every rank's, so the
   * others take part as in any graph: they run nothing of it). */
  CHECK(weft_graph_create(rt, &h));
  CHECK(weft_tensor_create(h, "A", WEFT_F64, 2, sh, on(0), weft_uniform(-1, 1, 5), &ref));
  CHECK(weft_tensor_tiles(h, ref, CH_B, CH_B));
  build_cholesky(h, ref, 0);
  CHECK(weft_graph_run(h));
  double *got = malloc(sizeof(double) * CH_N * CH_N), *want = malloc(sizeof(double) * CH_N * CH_N);
  CHECK(weft_tensor_read_all(a, got, sizeof(double) * CH_N * CH_N));
  CHECK(weft_tensor_read_all(ref, want, sizeof(double) * CH_N * CH_N));
  assert_memory_equal(got, want, sizeof(double) * CH_N * CH_N);
  assert_true(want[0] > 1.0); /* factored: L[0][0] = sqrt(A[0][0]) of about N */
  /* Bad input on a distributed tensor. */
  weft_tensor *x = NULL;
  assert_int_equal(weft_relu(g, a, &x), WEFT_EDEVICE);
  assert_true(tu_contains(weft_last_error(), "is distributed over"));
  assert_int_equal(weft_tensor_read(a, got, sizeof(double) * CH_N * CH_N), WEFT_EDEVICE);
  assert_true(tu_contains(weft_last_error(), "weft_tensor_read_all"));
  assert_int_equal(weft_tensor_distribute(g, a, P, Q), WEFT_ESTATE);
  free(got);
  free(want);
  weft_graph_destroy(h);
  weft_graph_destroy(g);
}

/* A program on auto: contents written on every rank alike, products of random matrices summed.
 * Placement chooses among every rank's devices (the products spread over the ranks' CPUs), the
 * results gathered are one process's, bit for bit, on every rank, run after run (the second
 * run places nothing anew: every tensor has its home), and a home on another rank refuses a
 * plain read. */
enum { AU_N = 96, AU_K = 8 };
static weft_tensor *auto_products(weft_graph *g, weft_device dev, const double *in, weft_node **prod) {
  weft_tensor *x = NULL, *acc = NULL;
  CHECK(weft_tensor_create(g, "x", WEFT_F64, 2, (int64_t[]){AU_N, AU_N}, dev, weft_zeros(), &x));
  if (dev.kind == WEFT_DEVICE_AUTO || dev.rank == me) CHECK(weft_tensor_write(x, in, sizeof(double) * AU_N * AU_N));
  for (int k = 0; k < AU_K; k++) {
    weft_tensor *m = NULL, *p = NULL;
    CHECK(weft_tensor_create(g, "m", WEFT_F64, 2, (int64_t[]){AU_N, AU_N}, dev, weft_uniform(-1, 1, 60 + (uint64_t)k), &m));
    /* Rank 0 alone reads an auto input before the first run: nothing the ranks place by. */
    if (k == 0 && dev.kind == WEFT_DEVICE_AUTO && me == 0) {
      double *peek = malloc(sizeof(double) * AU_N * AU_N);
      CHECK(weft_tensor_read(m, peek, sizeof(double) * AU_N * AU_N));
      free(peek);
    }
    CHECK(weft_mm(g, x, m, &p));
    if (prod != NULL) prod[k] = weft_graph_last_node(g);
    if (acc == NULL) acc = p;
    else CHECK(weft_add(g, acc, p, &acc));
  }
  weft_tensor_keep(acc);
  return acc;
}

static void auto_places_across_ranks(void **state) {
  (void)state;
  double *in = malloc(sizeof(double) * AU_N * AU_N), *got = malloc(sizeof(double) * AU_N * AU_N),
         *want = malloc(sizeof(double) * AU_N * AU_N);
  for (int i = 0; i < AU_N * AU_N; i++) in[i] = (double)(i % 13) / 8.0 - 0.75;
  weft_graph *h, *g;
  CHECK(weft_graph_create(rt, &h));
  weft_tensor *ref = auto_products(h, on(0), in, NULL);
  CHECK(weft_graph_run(h));
  CHECK(weft_tensor_read_all(ref, want, sizeof(double) * AU_N * AU_N));
  CHECK(weft_graph_create(rt, &g));
  weft_node *prod[AU_K];
  weft_tensor *acc = auto_products(g, weft_auto(), in, prod);
  for (int round = 0; round < 2; round++) {
    weft_run *r;
    weft_stats_summary sum;
    weft_run_stats *st = run_with_stats(g, &r, &sum);
    weft_run_stats_destroy(st);
    weft_run_destroy(r);
    memset(got, 0, sizeof(double) * AU_N * AU_N);
    CHECK(weft_tensor_read_all(acc, got, sizeof(double) * AU_N * AU_N));
    assert_memory_equal(got, want, sizeof(double) * AU_N * AU_N);
  }
  int used = 0; /* the ranks some product ran on */
  for (int k = 0; k < AU_K; k++) {
    weft_placement pl;
    CHECK(weft_node_placement(g, prod[k], &pl));
    assert_true(pl.device.kind == WEFT_DEVICE_CPU && pl.device.rank >= 0 && pl.device.rank < nranks);
    used |= 1 << pl.device.rank;
  }
  if (nranks > 1) assert_true(used != 1);
  if (weft_tensor_device(acc).rank != me) {
    assert_int_equal(weft_tensor_read(acc, got, sizeof(double) * AU_N * AU_N), WEFT_EDEVICE);
    assert_true(tu_contains(weft_last_error(), "weft_tensor_read_all"));
  }
  /* A node more: the program is placed anew, every tensor's contents where they are (x's, given
   * before the first run, on the rank of its home). */
  weft_tensor *twice = NULL;
  CHECK(weft_scale(g, acc, 2.0, &twice));
  weft_tensor_keep(twice);
  CHECK(weft_graph_run(g));
  CHECK(weft_tensor_read_all(twice, got, sizeof(double) * AU_N * AU_N));
  for (int i = 0; i < AU_N * AU_N; i++) want[i] *= 2;
  assert_memory_equal(got, want, sizeof(double) * AU_N * AU_N);
  weft_graph_destroy(g);
  weft_graph_destroy(h);
  free(in);
  free(got);
  free(want);
}

/* x on rank 0 read on ranks 1, 2, 1, 2, ... in turn: each reading rank gets x once (the copy
 * cache keeps a copy per rank until x is written), and again after x is written. */
static void readers_on_ranks_in_turn_share_one_copy_each(void **state) {
  (void)state;
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *x;
  int64_t sh[1] = {16};
  CHECK(weft_tensor_create(g, "x", WEFT_F64, 1, sh, on(0), weft_ones(), &x));
  int readers = nranks - 1;
  for (int round = 0; round < 2; round++) {
    for (int k = 0; k < 3 * readers; k++) {
      weft_tensor *y = NULL;
      CHECK(weft_tensor_create(g, NULL, WEFT_F64, 1, sh, on(1 + k % readers), weft_zeros(), &y));
      CHECK(weft_scale(g, x, 2.0, &y));
    }
    weft_tensor *x2 = x;
    CHECK(weft_relu(g, x, &x2)); /* x written: its copies are stale */
  }
  size_t copies = 0;
  for (size_t i = 0; i < weft_graph_node_count(g); i++) copies += weft_node_is_inserted(weft_graph_node(g, i));
  assert_int_equal(copies, 2 * (size_t)readers);
  CHECK(weft_graph_run(g));
  weft_graph_destroy(g);
}

/* weft_tensor_distribute refuses what it cannot do, with the reason. */
static void bad_distributions_are_refused(void **state) {
  (void)state;
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *a;
  CHECK(weft_tensor_create(g, "A", WEFT_F64, 2, (int64_t[]){8, 8}, weft_cpu(), weft_ones(), &a));
  assert_int_equal(weft_tensor_distribute(g, a, 1, 1), WEFT_ESTATE);
  assert_true(tu_contains(weft_last_error(), "is not partitioned"));
  CHECK(weft_tensor_tiles(g, a, 4, 4));
  assert_int_equal(weft_tensor_distribute(g, a, nranks, 2), WEFT_EDEVICE);
  assert_true(tu_contains(weft_last_error(), "this run has"));
  assert_int_equal(weft_tensor_distribute(g, a, 0, 1), WEFT_EDEVICE);
  CHECK(weft_potrf(g, WEFT_LOWER, weft_tensor_tile(a, 0, 0)));
  assert_int_equal(weft_tensor_distribute(g, a, 1, 1), WEFT_ESTATE);
  assert_true(tu_contains(weft_last_error(), "distribute it before its first use"));
  /* A copy from another rank into a strided tile (of a tensor that is not distributed) is
   * refused when it is built, and adds nothing. */
  weft_tensor *src;
  CHECK(weft_tensor_create(g, "far", WEFT_F64, 2, (int64_t[]){4, 4}, on(1), weft_ones(), &src));
  weft_tensor *tile = weft_tensor_tile(a, 0, 1);
  size_t nodes = weft_graph_node_count(g);
  assert_int_equal(weft_copy(g, src, weft_cpu(), &tile), WEFT_ENOTSUP);
  assert_true(tu_contains(weft_last_error(), "out (A[0,1]) is a strided tile on rank 0, and a copy from rank 1"));
  assert_int_equal(weft_graph_node_count(g), nodes);
  weft_graph_destroy(g);
}

int main(void) {
  if (getenv("OMPI_COMM_WORLD_SIZE") == NULL && getenv("PMIX_RANK") == NULL) {
    puts("test_mpi: not started by mpirun: nothing to test (ctest runs it with 2, 3 and 4 ranks)");
    return 0;
  }
  /* A rank that waits for a message that never comes is a failure of its own, in bounded
   * time: the alarm ends this rank, and mpirun the others. */
  alarm(300);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_chain_through_every_rank),
      cmocka_unit_test(fan_in_to_rank_zero),
      cmocka_unit_test(messages_follow_messages_on_the_progress_thread),
      cmocka_unit_test(ranks_of_one_host_share_its_cores),
      cmocka_unit_test(gpu_tensors_cross_ranks_through_host_memory),
      cmocka_unit_test(gpu_tiles_cross_ranks_through_pinned_memory),
      cmocka_unit_test(gpu_tensors_cross_ranks_directly),
      cmocka_unit_test(bad_ranks_are_refused),
      cmocka_unit_test(different_graphs_fail_on_every_rank),
      cmocka_unit_test(a_failure_on_one_rank_fails_every_rank),
      cmocka_unit_test(a_cancel_on_one_rank_cancels_every_rank),
      cmocka_unit_test(a_launch_that_fails_on_one_rank_fails_on_every_rank),
      cmocka_unit_test(a_distributed_cholesky_is_the_one_process_factor),
      cmocka_unit_test(bad_distributions_are_refused),
      cmocka_unit_test(readers_on_ranks_in_turn_share_one_copy_each),
      cmocka_unit_test(auto_places_across_ranks),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
