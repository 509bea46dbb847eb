/* bench_cuda_calls.c — the host cost of the CUDA and cuBLAS calls weft makes for a node,
 * measured without weft: what a worker spends enqueueing work, one call at a time.
 *   gemm    a product of n^2 by n^2 f32 (n = 16 ... 1024), four ways: cublasSgemm with the
 *           handle's own workspace, with a 4 MiB one (weft's side streams), with none, and
 *           cublasLtMatmul with the algorithm its heuristic picks for the size and a 4 MiB
 *           workspace, chosen once. For each: the graph nodes one call makes (counted by
 *           capturing it; the kernels' names with --names), its host time with the device busy
 *           (an 8192^2 product enqueued first, so the calls queue up; the ways alternate call
 *           by call), the device time a product on one stream (100 in a row), and on four
 *           streams (100 independent products: small_ops' graph);
 *   calls   cudaEventRecord, cudaStreamWaitEvent, cudaMallocFromPoolAsync + cudaFreeAsync, a
 *           4-byte cudaMemsetAsync, on a busy stream;
 *   threads 1, 2 and 4 threads, each enqueueing 400^2 products on its own stream at once, by
 *           cublasSgemm (4 MiB workspace) and by cublasLtMatmul: per-call host time and the
 *           calls a microsecond all threads together.
 * Each figure is the median of the calls timed (after warm-up), in microseconds.
 *   --probe prints only how fast the host is now, in one line: a 16^2 cublasSgemm and a 4-byte
 *           cudaMemsetAsync on a busy stream, and a fixed loop of arithmetic (no CUDA call).
 *
 * Usage: bench_cuda_calls [--device 0] [--reps 100] [--names] [--probe] */
#define _POSIX_C_SOURCE 200809L
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)
#define BK(x)                                                                                 \
  do {                                                                                        \
    cublasStatus_t s_ = (x);                                                                  \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cublasGetStatusName(s_)); \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

static int reps = 100, device = 0;
static float *big_a, *big_c, *buf_a, *buf_c, *bufs[4]; /* 8192^2 operands; 1024^2 ones */

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void sgemm(cublasHandle_t h, int n, const float *a, float *c) {
  const float one = 1, zero = 0;
  BK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, a, n, &zero, c, n));
}

static void busy(cublasHandle_t h) { sgemm(h, 8192, big_a, big_c); }

/* The four ways to run a product, on one stream each. */
enum { M_SGEMM, M_SGEMM_WS, M_SGEMM_WS0, M_LT, NMODES };
static const char *mode_names[NMODES] = {"cublasSgemm, cuBLAS's workspace", "cublasSgemm, 4 MiB workspace",
                                         "cublasSgemm, no workspace", "cublasLtMatmul, algorithm chosen once (4 MiB)"};
#define WS ((size_t)4 << 20)

typedef struct engine {
  int mode;
  cudaStream_t s;
  cublasHandle_t h;
  cublasLtHandle_t lt;
  void *ws;
  int n; /* the size the Lt plan is for */
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t lay;
  cublasLtMatmulAlgo_t algo;
} engine;

static void engine_init(engine *e, int mode) {
  memset(e, 0, sizeof *e);
  e->mode = mode;
  CK(cudaStreamCreateWithFlags(&e->s, cudaStreamNonBlocking));
  BK(cublasCreate(&e->h));
  BK(cublasSetStream(e->h, e->s));
  CK(cudaMalloc(&e->ws, WS));
  if (mode == M_SGEMM_WS) BK(cublasSetWorkspace(e->h, e->ws, WS));
  if (mode == M_SGEMM_WS0) BK(cublasSetWorkspace(e->h, NULL, 0));
  if (mode == M_LT) BK(cublasLtCreate(&e->lt));
}

static void lt_drop(engine *e) {
  if (e->n == 0) return;
  cublasLtMatmulDescDestroy(e->op);
  cublasLtMatrixLayoutDestroy(e->lay);
  e->n = 0;
}

/* The Lt plan for n^2: the heuristic's first algorithm for the workspace. */
static void lt_plan(engine *e, int n) {
  if (e->n == n) return;
  lt_drop(e);
  BK(cublasLtMatmulDescCreate(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  BK(cublasLtMatrixLayoutCreate(&e->lay, CUDA_R_32F, (uint64_t)n, (uint64_t)n, n));
  cublasLtMatmulPreference_t pref;
  BK(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = WS;
  BK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  BK(cublasLtMatmulAlgoGetHeuristic(e->lt, e->op, e->lay, e->lay, e->lay, e->lay, pref, 1, &r, &found));
  BK(cublasLtMatmulPreferenceDestroy(pref));
  if (found < 1) {
    fprintf(stderr, "no cublasLt algorithm for %d^2\n", n);
    exit(1);
  }
  e->algo = r.algo;
  e->n = n;
}

static void product(engine *e, int n, const float *a, float *c) {
  if (e->mode != M_LT) {
    sgemm(e->h, n, a, c);
    return;
  }
  lt_plan(e, n);
  const float one = 1, zero = 0;
  BK(cublasLtMatmul(e->lt, e->op, &one, a, e->lay, a, e->lay, &zero, c, e->lay, c, e->lay, &e->algo, e->ws, WS,
                    e->s));
}

static void engine_free(engine *e) {
  lt_drop(e);
  if (e->lt != NULL) cublasLtDestroy(e->lt);
  cublasDestroy(e->h);
  cudaStreamDestroy(e->s);
  cudaFree(e->ws);
}

static int names; /* --names: print the kernels a product launches */

/* Graph nodes one product of n^2 makes: capture it and count them. */
static size_t kernels(engine *e, int n) {
  cudaGraph_t g;
  size_t count = 0;
  product(e, n, buf_a, buf_c); /* plans (Lt) outside the capture */
  CK(cudaStreamSynchronize(e->s));
  CK(cudaStreamBeginCapture(e->s, cudaStreamCaptureModeThreadLocal));
  product(e, n, buf_a, buf_c);
  CK(cudaStreamEndCapture(e->s, &g));
  CK(cudaGraphGetNodes(g, NULL, &count));
  if (names && count > 0) {
    CUgraphNode nodes[16];
    size_t k = count < 16 ? count : 16;
    CK(cudaGraphGetNodes(g, (cudaGraphNode_t *)nodes, &k));
    for (size_t i = 0; i < k; i++) {
      CUgraphNodeType t;
      CUDA_KERNEL_NODE_PARAMS kp;
      const char *name = "?";
      if (cuGraphNodeGetType(nodes[i], &t) == CUDA_SUCCESS && t == CU_GRAPH_NODE_TYPE_KERNEL &&
          cuGraphKernelNodeGetParams(nodes[i], &kp) == CUDA_SUCCESS) {
        if (cuFuncGetName(&name, kp.func) != CUDA_SUCCESS) name = "?";
        printf("      %d^2 node %zu: kernel %.90s grid %ux%ux%u block %u\n", n, i, name, kp.gridDimX, kp.gridDimY,
               kp.gridDimZ, kp.blockDimX);
      } else {
        printf("      %d^2 node %zu: type %d\n", n, i, (int)t);
      }
    }
  }
  CK(cudaGraphDestroy(g));
  return count;
}

/* Host time of one product with the device busy, for every way at once: the calls alternate
 * between the ways, so that a slow phase of the machine falls on all of them alike. */
static void host_us(engine *e, int n, double *out) {
  double *t = malloc(sizeof(double) * (size_t)reps * NMODES);
  for (int m = 0; m < NMODES; m++) {
    for (int w = 0; w < 5; w++) product(&e[m], n, buf_a, buf_c);
    busy(e[m].h);
  }
  for (int i = 0; i < reps; i++)
    for (int m = 0; m < NMODES; m++) {
      double t0 = now_us();
      product(&e[m], n, buf_a, bufs[m]);
      t[m * reps + i] = now_us() - t0;
    }
  CK(cudaDeviceSynchronize());
  for (int m = 0; m < NMODES; m++) out[m] = median(t + m * reps, reps);
  free(t);
}

/* Device time a product, in a chain of 100 (one stream) or 100 independent ones over the four
 * engines' streams; the median of five. */
static double device_us(engine *e, int nengines, int n) {
  cudaEvent_t start, end[4];
  CK(cudaEventCreate(&start));
  for (int i = 0; i < nengines; i++) CK(cudaEventCreate(&end[i]));
  double t[5];
  for (int r = 0; r < 7; r++) {
    busy(e[0].h); /* the host runs ahead, so launches do not bound what is timed */
    CK(cudaEventRecord(start, e[0].s));
    for (int i = 1; i < nengines; i++) CK(cudaStreamWaitEvent(e[i].s, start, 0));
    for (int k = 0; k < 100; k++) product(&e[k % nengines], n, buf_a, bufs[k % 4]);
    for (int i = 0; i < nengines; i++) CK(cudaEventRecord(end[i], e[i].s));
    CK(cudaDeviceSynchronize());
    float most = 0;
    for (int i = 0; i < nengines; i++) {
      float ms;
      CK(cudaEventElapsedTime(&ms, start, end[i]));
      if (ms > most) most = ms;
    }
    if (r >= 2) t[r - 2] = most * 1e3 / 100;
  }
  CK(cudaEventDestroy(start));
  for (int i = 0; i < nengines; i++) CK(cudaEventDestroy(end[i]));
  return median(t, 5);
}

static void gemm_table(void) {
  static const int sizes[] = {16, 64, 128, 256, 400, 512, 1024};
  engine e[NMODES][4];
  for (int m = 0; m < NMODES; m++)
    for (int i = 0; i < 4; i++) engine_init(&e[m][i], m);
  engine one[NMODES];
  for (int m = 0; m < NMODES; m++) one[m] = e[m][0];
  printf("  ways: ");
  for (int m = 0; m < NMODES; m++) printf("%c %s%s", 'A' + m, mode_names[m], m + 1 < NMODES ? "; " : "\n");
  printf("      n     graph nodes          host us, device busy           device us, one stream         "
         "device us, four streams\n");
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    int n = sizes[i];
    double h[NMODES];
    host_us(one, n, h);
    printf("  %5d ", n);
    for (int m = 0; m < NMODES; m++) printf(" %c%-3zu", 'A' + m, kernels(&e[m][0], n));
    for (int m = 0; m < NMODES; m++) printf(" %7.2f", h[m]);
    for (int m = 0; m < NMODES; m++) printf(" %7.2f", device_us(e[m], 1, n));
    for (int m = 0; m < NMODES; m++) printf(" %7.2f", device_us(e[m], 4, n));
    printf("\n");
  }
  for (int m = 0; m < NMODES; m++)
    for (int i = 0; i < 4; i++) engine_free(&e[m][i]);
}

enum { EV_RECORD, EV_RECORD_TIMED, WAIT, POOL, MEMSET, NCALLS };
static const char *call_names[NCALLS] = {"cudaEventRecord (timing off)", "cudaEventRecord (timing on)",
                                         "cudaStreamWaitEvent", "cudaMallocFromPoolAsync + cudaFreeAsync",
                                         "cudaMemsetAsync 4 bytes"};

static double call_us(cublasHandle_t h, cudaStream_t s, cudaStream_t other, int which) {
  cudaEvent_t ev, evt, oev;
  cudaMemPool_t pool;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaEventCreate(&evt));
  CK(cudaEventCreateWithFlags(&oev, cudaEventDisableTiming));
  CK(cudaDeviceGetDefaultMemPool(&pool, device));
  CK(cudaEventRecord(oev, other));
  double *t = malloc(sizeof(double) * (size_t)reps);
  busy(h);
  for (int i = 0; i < reps + 5; i++) {
    double t0 = now_us();
    void *p;
    switch (which) {
      case EV_RECORD: CK(cudaEventRecord(ev, s)); break;
      case EV_RECORD_TIMED: CK(cudaEventRecord(evt, s)); break;
      case WAIT: CK(cudaStreamWaitEvent(s, oev, 0)); break;
      case POOL:
        CK(cudaMallocFromPoolAsync(&p, 400 * 400 * 4, pool, s));
        CK(cudaFreeAsync(p, s));
        break;
      default: CK(cudaMemsetAsync(buf_c, 0, 4, s)); break;
    }
    if (i >= 5) t[i - 5] = now_us() - t0;
  }
  CK(cudaStreamSynchronize(s));
  double m = median(t, reps);
  free(t);
  CK(cudaEventDestroy(ev));
  CK(cudaEventDestroy(evt));
  CK(cudaEventDestroy(oev));
  return m;
}

typedef struct worker {
  pthread_t th;
  pthread_barrier_t *bar;
  engine e;
  float *c;
  double per_call, start, end;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  CK(cudaSetDevice(device));
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int i = 0; i < 5; i++) product(&w->e, 400, buf_a, w->c);
  CK(cudaStreamSynchronize(w->e.s));
  busy(w->e.h);
  pthread_barrier_wait(w->bar);
  w->start = now_us();
  for (int i = 0; i < reps; i++) {
    double t0 = now_us();
    product(&w->e, 400, buf_a, w->c);
    t[i] = now_us() - t0;
  }
  w->end = now_us();
  CK(cudaStreamSynchronize(w->e.s));
  w->per_call = median(t, reps);
  free(t);
  return NULL;
}

static void threads(int n, int mode) {
  worker w[4];
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)n);
  for (int i = 0; i < n; i++) {
    w[i].bar = &bar;
    engine_init(&w[i].e, mode);
    if (mode == M_LT) lt_plan(&w[i].e, 400);
    CK(cudaMalloc((void **)&w[i].c, 400 * 400 * 4));
  }
  for (int i = 0; i < n; i++) pthread_create(&w[i].th, NULL, work, &w[i]);
  for (int i = 0; i < n; i++) pthread_join(w[i].th, NULL);
  double start = w[0].start, end = w[0].end, pc[4];
  for (int i = 0; i < n; i++) {
    if (w[i].start < start) start = w[i].start;
    if (w[i].end > end) end = w[i].end;
    pc[i] = w[i].per_call;
  }
  printf("  %c %d thread%s: %6.2f us a call (median of the threads' medians), %5.3f calls a us together\n",
         'A' + mode, n, n > 1 ? "s" : " ", median(pc, n), n * reps / (end - start));
  for (int i = 0; i < n; i++) {
    engine_free(&w[i].e);
    cudaFree(w[i].c);
  }
  pthread_barrier_destroy(&bar);
}

/* A fixed loop of integer arithmetic: the host's speed apart from CUDA. */
static double cpu_us(void) {
  double t[21];
  volatile uint64_t sink = 0;
  for (int r = 0; r < 21; r++) {
    uint64_t x = 88172645463325252ull + (uint64_t)r;
    double t0 = now_us();
    for (int i = 0; i < 200000; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
    t[r] = now_us() - t0;
    sink += x;
  }
  (void)sink;
  return median(t, 21);
}

static void probe(cublasHandle_t h, cudaStream_t s, cudaStream_t other) {
  engine e;
  engine_init(&e, M_SGEMM_WS);
  double g[NMODES] = {0};
  engine one[NMODES];
  for (int m = 0; m < NMODES; m++) one[m] = e; /* host_us times every way: all this one */
  host_us(one, 16, g);
  printf("PROBE sgemm16_us=%.3f memset_us=%.3f cpu_us=%.1f\n", g[0], call_us(h, s, other, MEMSET), cpu_us());
  engine_free(&e);
}

int main(int argc, char **argv) {
  int probe_only = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--names") == 0) names = 1;
    else if (strcmp(argv[i], "--probe") == 0) probe_only = 1;
    else if (i + 1 < argc && strcmp(argv[i], "--device") == 0) device = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--device N] [--reps N] [--names] [--probe]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  CK(cudaSetDevice(device));
  CK(cudaMalloc((void **)&big_a, (size_t)8192 * 8192 * 4));
  CK(cudaMalloc((void **)&big_c, (size_t)8192 * 8192 * 4));
  CK(cudaMalloc((void **)&buf_a, 1024 * 1024 * 4));
  CK(cudaMalloc((void **)&buf_c, 1024 * 1024 * 4));
  CK(cudaMemset(big_a, 0, (size_t)8192 * 8192 * 4));
  CK(cudaMemset(buf_a, 0, 1024 * 1024 * 4));
  for (int i = 0; i < 4; i++) CK(cudaMalloc((void **)&bufs[i], 1024 * 1024 * 4));
  cudaStream_t s, other;
  cublasHandle_t h;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  BK(cublasCreate(&h));
  BK(cublasSetStream(h, s));
  if (probe_only) {
    probe(h, s, other);
    return 0;
  }
  struct cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, device));
  printf("bench_cuda_calls on cuda:%d (%s), medians of %d calls, us\n", device, p.name, reps);
  gemm_table();
  for (int c = 0; c < NCALLS; c++) printf("  %-42s %6.2f\n", call_names[c], call_us(h, s, other, c));
  printf("  400^2 products from several threads, each on its own stream, device busy:\n");
  for (int n = 1; n <= 4; n *= 2)
    for (int r = 0; r < 2; r++) {
      threads(n, M_SGEMM_WS);
      threads(n, M_LT);
    }
  return 0;
}
