/* bench_mpi.c — weft across ranks (the MPI issue) against raw MPI measured in the same run,
 * under mpirun (benchmarks/run_mpi.sh runs every part with 1, 2 and 4 ranks):
 *
 *   pingpong   a chain of --steps copies of an 8-byte tensor between ranks 0 and 1, each copy a
 *              message (weft: a nonblocking send and receive matched by tag, completed by the
 *              ranks' progress threads); against MPI_Send / MPI_Recv of 8 bytes back and forth
 *              on a communicator of its own. Figure: weft's time a message over raw MPI's
 *              (target <= 2). A tensor of 0 bytes would measure nothing: weft sends no message
 *              for it (there is nothing to wait for).
 *   bandwidth  a 256 MiB f32 tensor copied from rank 0 to rank 1 (one message); against one
 *              MPI_Send of as many bytes. Figure: weft's rate over raw MPI's (target >= 0.9).
 *   gpu        (built with CUDA; two ranks on one host with a GPU each) a 256 MiB f32 tensor copied
 *              from rank 0's cuda:0 to rank 1's: weft's copy between GPUs (the transport's CUDA
 *              IPC), and again through host memory (WEFT_GPU_IPC=0); against the same copy made
 *              by hand as a CUDA-aware MPI makes it on one host (the receiver's cudaMalloc
 *              mapped by the sender with cudaIpcOpenMemHandle, one cudaMemcpy, a message).
 *              Figure: weft's rate over the hand-made copy's (target >= 0.9).
 *   stencil    a 1-D stencil --width tasks wide and --steps deep, each task busy --task-us
 *              microseconds and reading its neighbours of the step before, task i on rank
 *              i * R / width (so messages cross each boundary between ranks every step), every
 *              rank with --workers workers. Prints the run's time; the parallel efficiency
 *              against one rank with the same total workers is the ratio of two launches
 *              (run_mpi.sh; target >= 0.9).
 *
 * Every weft figure is a replay (the graph built and run once untimed), the median of --reps;
 * the raw MPI loops are timed the same way. Results on rank 0 as "RESULT part=..." lines.
 *
 * Usage: mpirun -np R bench_mpi [--part pingpong|bandwidth|stencil|gpu|all] [--workers N] [--reps N]
 *                               [--steps T] [--width W] [--task-us U] */
#include "bench_common.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if WEFT_BENCH_CUDA
#include <cuda_runtime.h>
#endif

#define CHECK BCHECK

static int me, nranks, reps = 5, workers = 2, steps = 0, width = 0;
static double task_us = 100;
static weft_runtime *rt;

static weft_device on(int rank) { return weft_on_rank(weft_cpu(), rank); }

/* The median of reps replays of g (every rank runs it), in ms. */
static double replay_ms(weft_graph *g) {
  double ms[64];
  CHECK(weft_graph_run(g)); /* plans, agrees, materialises: untimed */
  for (int r = 0; r < reps; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now_ms();
    CHECK(weft_graph_run(g));
    ms[r] = bench_now_ms() - t0;
  }
  double m = bench_median(ms, reps, NULL);
  MPI_Bcast(&m, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD); /* rank 0's figure for every rank */
  return m;
}

static void pingpong(void) {
  int n = steps > 0 ? steps : 2000;
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *t;
  CHECK(weft_tensor_create(g, "t0", WEFT_F64, 1, (int64_t[]){1}, on(0), weft_zeros(), &t));
  for (int i = 1; i <= n; i++) {
    weft_tensor *next = NULL;
    CHECK(weft_copy(g, t, on(i % 2), &next));
    t = next;
  }
  double weft_ms = replay_ms(g);
  weft_graph_destroy(g);
  /* Raw MPI: n messages back and forth, on a communicator of its own. */
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  double ms[64];
  for (int r = -1; r < reps; r++) {
    MPI_Barrier(comm);
    double t0 = bench_now_ms();
    for (int i = 1; i <= n; i++) {
      int from = (i - 1) % 2, to = i % 2;
      double x = i;
      if (me == from) MPI_Send(&x, 1, MPI_DOUBLE, to, 0, comm);
      if (me == to) MPI_Recv(&x, 1, MPI_DOUBLE, from, 0, comm, MPI_STATUS_IGNORE);
    }
    if (r >= 0) ms[r] = bench_now_ms() - t0;
  }
  double raw_ms = bench_median(ms, reps, NULL);
  MPI_Bcast(&raw_ms, 1, MPI_DOUBLE, 0, comm);
  MPI_Comm_free(&comm);
  if (me == 0)
    printf("RESULT part=pingpong ranks=%d messages=%d weft_us=%.3f mpi_us=%.3f ratio=%.3f\n", nranks, n,
           weft_ms * 1e3 / n, raw_ms * 1e3 / n, weft_ms / raw_ms);
}

static void bandwidth(void) {
  const int64_t elems = (int64_t)64 << 20; /* 256 MiB of f32 */
  size_t bytes = (size_t)elems * 4;
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor *a, *b = NULL;
  CHECK(weft_tensor_create(g, "a", WEFT_F32, 1, &elems, on(0), weft_ones(), &a));
  CHECK(weft_copy(g, a, on(1), &b));
  double weft_ms = replay_ms(g);
  weft_graph_destroy(g);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  char *buf = me < 2 ? malloc(bytes) : NULL;
  if (me < 2 && buf == NULL) {
    fprintf(stderr, "bench_mpi: no memory for %zu bytes\n", bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (buf != NULL) memset(buf, 1, bytes);
  double ms[64];
  for (int r = -1; r < reps; r++) {
    MPI_Barrier(comm);
    double t0 = bench_now_ms();
    if (me == 0) MPI_Send(buf, (int)(bytes / 4), MPI_FLOAT, 1, 0, comm);
    if (me == 1) MPI_Recv(buf, (int)(bytes / 4), MPI_FLOAT, 0, 0, comm, MPI_STATUS_IGNORE);
    MPI_Barrier(comm); /* the receiver's end, as weft's run ends on every rank */
    if (r >= 0) ms[r] = bench_now_ms() - t0;
  }
  double raw_ms = bench_median(ms, reps, NULL);
  MPI_Bcast(&raw_ms, 1, MPI_DOUBLE, 0, comm);
  MPI_Comm_free(&comm);
  free(buf);
  if (me == 0)
    printf("RESULT part=bandwidth ranks=%d bytes=%zu weft_gbs=%.2f mpi_gbs=%.2f ratio=%.3f\n", nranks, bytes,
           bytes / weft_ms * 1e-6, bytes / raw_ms * 1e-6, raw_ms / weft_ms);
}

#if WEFT_BENCH_CUDA
#define CUDA_OK(call)                                                                              \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "bench_mpi: rank %d: %s failed: %s\n", me, #call, cudaGetErrorString(e_));   \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                \
    }                                                                                              \
  } while (0)

/* weft's copy of a 256 MiB tensor from rank 0's cuda:0 to rank 1's, replayed (ipc: as weft
 * chooses; else WEFT_GPU_IPC=0, through the hosts), in a runtime of its own: the GPUs' ms. */
static double gpu_copy_ms(int ipc) {
  if (!ipc) setenv("WEFT_GPU_IPC", "0", 1);
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = workers;
  o.flags = WEFT_RUNTIME_QUIET;
  weft_runtime *grt;
  CHECK(weft_runtime_create(&o, &grt));
  unsetenv("WEFT_GPU_IPC");
  const int64_t elems = (int64_t)64 << 20;
  weft_graph *g;
  CHECK(weft_graph_create(grt, &g));
  weft_tensor *a, *b = NULL;
  CHECK(weft_tensor_create(g, "a", WEFT_F32, 1, &elems, weft_cuda(0), weft_ones(), &a));
  CHECK(weft_copy(g, a, weft_on_rank(weft_cuda(0), 1), &b));
  size_t nodes = weft_graph_node_count(g);
  double ms = replay_ms(g);
  if (me == 1) { /* the contents arrived */
    float *h = malloc((size_t)elems * 4);
    CHECK(weft_tensor_read(b, h, (size_t)elems * 4));
    if (h[0] != 1.0f || h[elems - 1] != 1.0f) {
      fprintf(stderr, "bench_mpi: rank 1 received wrong contents\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(h);
  }
  if (me == 0) printf("gpu copy %s: %zu node(s), %.3f ms\n", ipc ? "as weft chooses" : "through the hosts", nodes, ms);
  weft_graph_destroy(g);
  weft_runtime_destroy(grt);
  return ms;
}

static void gpu_bandwidth(void) {
  int local = 0, gpus = 0;
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 2 || local < 2) {
    if (me == 0) printf("RESULT part=gpu skipped (needs 2 ranks on one host with a GPU each: %d GPU(s), %d rank(s) here)\n", gpus, local);
    return;
  }
  double weft_ms = gpu_copy_ms(1), host_ms = gpu_copy_ms(0);
  /* By hand: rank r on GPU r, the receiver's buffer mapped by the sender once. */
  size_t bytes = (size_t)256 << 20;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  void *buf = NULL, *peer = NULL;
  cudaIpcMemHandle_t h;
  if (me < 2) {
    CUDA_OK(cudaSetDevice(me));
    CUDA_OK(cudaMalloc(&buf, bytes));
    CUDA_OK(cudaMemset(buf, 1, bytes));
    CUDA_OK(cudaDeviceSynchronize());
  }
  if (me == 1) {
    CUDA_OK(cudaIpcGetMemHandle(&h, buf));
    MPI_Send(&h, (int)sizeof h, MPI_BYTE, 0, 1, comm);
  }
  if (me == 0) {
    MPI_Recv(&h, (int)sizeof h, MPI_BYTE, 1, 1, comm, MPI_STATUS_IGNORE);
    CUDA_OK(cudaIpcOpenMemHandle(&peer, h, cudaIpcMemLazyEnablePeerAccess));
  }
  double ms[64];
  char done = 1;
  for (int r = -1; r < reps; r++) {
    MPI_Barrier(comm);
    double t0 = bench_now_ms();
    if (me == 0) {
      CUDA_OK(cudaMemcpy(peer, buf, bytes, cudaMemcpyDeviceToDevice));
      CUDA_OK(cudaDeviceSynchronize()); /* a copy between devices returns before it is done */
      MPI_Send(&done, 1, MPI_BYTE, 1, 0, comm);
    }
    if (me == 1) MPI_Recv(&done, 1, MPI_BYTE, 0, 0, comm, MPI_STATUS_IGNORE);
    MPI_Barrier(comm);
    if (r >= 0) ms[r] = bench_now_ms() - t0;
  }
  double raw_ms = bench_median(ms, reps, NULL);
  MPI_Bcast(&raw_ms, 1, MPI_DOUBLE, 0, comm);
  if (me == 0) CUDA_OK(cudaIpcCloseMemHandle(peer));
  MPI_Barrier(comm);
  if (buf != NULL) CUDA_OK(cudaFree(buf));
  MPI_Comm_free(&comm);
  if (me == 0)
    printf("RESULT part=gpu ranks=%d bytes=%zu weft_gbs=%.2f hosts_gbs=%.2f ipc_gbs=%.2f ratio=%.3f\n", nranks, bytes,
           bytes / weft_ms * 1e-6, bytes / host_ms * 1e-6, bytes / raw_ms * 1e-6, raw_ms / weft_ms);
}
#endif

/* A stencil task: busy for task_us, then out = the mean of its inputs plus one. */
static int stencil_task(weft_kernel_ctx *ctx) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((double)(t.tv_sec - t0.tv_sec) * 1e6 + (double)(t.tv_nsec - t0.tv_nsec) * 1e-3 < task_us);
  double sum = 0;
  int n = weft_ctx_nargs(ctx) - 1;
  for (int i = 1; i <= n; i++) sum += *(const double *)weft_ctx_data(ctx, i);
  *(double *)weft_ctx_data(ctx, 0) = (n > 0 ? sum / n : 0) + 1;
  return WEFT_OK;
}

static void stencil(void) {
  int W = width > 0 ? width : 32, T = steps > 0 ? steps : 100;
  weft_op_desc d = {0};
  d.name = "stencil_task";
  d.nargs = 1;
  d.access[0] = WEFT_WRITE;
  d.rest = WEFT_READ;
  d.cpu = stencil_task;
  const weft_op *op;
  CHECK(weft_op_register(rt, &d, &op));
  weft_graph *g;
  CHECK(weft_graph_create(rt, &g));
  weft_tensor **prev = calloc((size_t)W, sizeof *prev), **cur = calloc((size_t)W, sizeof *cur);
  if (prev == NULL || cur == NULL) exit(1);
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < W; i++) {
      CHECK(weft_tensor_create(g, NULL, WEFT_F64, 1, (int64_t[]){1}, on(i * nranks / W), weft_zeros(), &cur[i]));
      weft_tensor *args[4] = {cur[i]};
      int n = 1;
      for (int k = i - 1; t > 0 && k <= i + 1; k++)
        if (k >= 0 && k < W) args[n++] = prev[k];
      CHECK(weft_call(g, op, args, n, NULL, 0));
    }
    weft_tensor **x = prev;
    prev = cur;
    cur = x;
  }
  double ms = replay_ms(g);
  if (me == 0)
    printf("RESULT part=stencil ranks=%d workers=%d width=%d steps=%d task_us=%.0f ms=%.3f ideal_ms=%.3f\n", nranks,
           workers, W, T, task_us, ms, (double)W * T * task_us * 1e-3 / (nranks * workers));
  weft_graph_destroy(g);
  free(prev);
  free(cur);
}

int main(int argc, char **argv) {
  const char *part = "all";
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v != NULL && strcmp(argv[i], "--part") == 0) part = v, i++;
    else if (v != NULL && strcmp(argv[i], "--workers") == 0) workers = atoi(v), i++;
    else if (v != NULL && strcmp(argv[i], "--reps") == 0) reps = atoi(v), i++;
    else if (v != NULL && strcmp(argv[i], "--steps") == 0) steps = atoi(v), i++;
    else if (v != NULL && strcmp(argv[i], "--width") == 0) width = atoi(v), i++;
    else if (v != NULL && strcmp(argv[i], "--task-us") == 0) task_us = atof(v), i++;
    else {
      fprintf(stderr, "usage: mpirun -np R %s [--part pingpong|bandwidth|stencil|gpu|all] [--workers N] [--reps N] "
                      "[--steps T] [--width W] [--task-us U]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || reps > 64 || workers < 1 || task_us < 0) {
    fprintf(stderr, "bench_mpi: --reps 1..64, --workers >= 1, --task-us >= 0\n");
    return 2;
  }
  rt = bench_cpu_runtime(workers); /* under mpirun: the MPI transport joins the ranks */
  me = weft_runtime_rank(rt);
  nranks = weft_runtime_ranks(rt);
  int all = strcmp(part, "all") == 0;
  if ((all || strcmp(part, "pingpong") == 0) && nranks >= 2) pingpong();
  if ((all || strcmp(part, "bandwidth") == 0) && nranks >= 2) bandwidth();
  if (all || strcmp(part, "stencil") == 0) stencil();
#if WEFT_BENCH_CUDA
  if (strcmp(part, "gpu") == 0 && nranks >= 2) gpu_bandwidth();
#endif
  weft_runtime_destroy(rt);
  return 0;
}
