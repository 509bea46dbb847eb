/* bench_cholesky.c — a tiled Cholesky factorisation in weft against the vendor's one call.
 *
 * weft: the right-looking tiled Cholesky (lower) of an n x n symmetric positive definite
 * matrix, tiles of b x b (each --tile given), with the built-in tile ops — per step k: potrf
 * of tile (k,k), trsm of the tiles below it, syrk of the diagonal tiles and gemm of the rest of
 * the trailing matrix — every dependency inferred from the tiles each node reads and writes.
 * All nodes on one device (--device cpu: the CPU pool, one worker a core; --device cuda: GPU
 * 0, whose streams run the independent nodes side by side).
 *
 * The baseline, on the same matrix: --device cpu, LAPACK's dpotrf / spotrf of OpenBLAS's
 * pthreads build with a thread a core, in a process of its own (this executable started
 * again with that library preloaded, as an application linked against it runs); --device
 * cuda, cuSOLVER's cusolverDnXpotrf, in this process (its workspace allocated beforehand).
 *
 * Timing: each rep writes the matrix in again (untimed), then times the factorisation alone:
 * weft's from the call of weft_graph_run to its return (a GPU run waits for the device), the
 * baseline's around the call (cuSOLVER: events on its stream). The median of --reps after a
 * warm-up. Rate: n^3 / 3 flops over the time. Both results are checked: L L^T against A at
 * 2000 random entries of the lower triangle (relative error below 1e-10 in f64, 1e-3 in f32).
 *
 * --device auto puts the matrix on weft_auto(): weft places the nodes itself, over the first
 * --gpus GPUs (default 1). --device cuda with --gpus G > 1 distributes the tiles over the G
 * GPUs instead (weft_tensor_distribute), 2-D block-cyclically over a P x Q grid (--grid PxQ;
 * default 1 x G, column-cyclic: the columns of a lower triangle share its work out more evenly
 * than the squarest grid's blocks, 1.02 x the mean on the busiest of 4 GPUs for 16 x 16 tiles
 * against 1.10 for 2 x 2, and on 4 H200s it ran 3-5 % faster): each node runs on the GPU of the tile it writes, and the
 * tiles it reads from other GPUs are copied there; writing the matrix in (untimed) scatters
 * it. With more than one GPU, the baseline is cuSOLVER's multi-GPU cusolverMgPotrf over as
 * many GPUs (1-D column block-cyclic, blocks of --mg-tile columns, default 256, the matrix
 * distributed untimed), loaded at run time and skipped where the library is missing.
 *
 * --panel inverse (both: each tile size both ways):
 * each step inverts its diagonal factor once (a trtri) and solves each panel tile with a
 * triangular product (trmm) by that inverse, instead of a trsm a tile: cuBLAS's trsm runs at a
 * fraction of its GEMM's rate (docs/benchmarks.md). Same factor to rounding (not bit for bit:
 * another sum).
 *
 * Usage: bench_cholesky [--device cpu|cuda|auto] [--n N] [--tile B[,B...]] [--dtype f64|f32]
 *                       [--reps R] [--workers W] [--openblas FILE] [--policy fixed|heft] [--gpus G]
 *                       [--grid PxQ] [--panel trsm|inverse|both] [--mg-tile T] [--profile P] [--simulate P]
 *                       [--device-memory-limit MIB] [--uplo lower|upper] [--trace DIR] [--json]
 * --uplo upper: the factorisation of the upper triangle, A = U^T U (the panel a row of tiles,
 * the updates A_ij -= U_ki^T U_kj): the same flops, with products that cuBLAS runs faster in
 * f32 (column-major N,T instead of T,N) and a potrf that is cuSOLVER's lower mode in place;
 * --profile: the machine profile that prices auto placement (default: by the GPUs' count);
 * --device-memory-limit MIB: what auto placement may fill of each GPU (out of core: a matrix
 * larger than that streams its tiles through the GPU);
 * Started by mpirun with several ranks, the tiles are distributed over every rank's CPU (--device
 * cpu) or every rank's --gpus GPUs (--device cuda; each rank's share of its host's by default),
 * a P x Q grid of them (--grid, else 1 x G for GPUs, the squarest for CPUs), each rank with weft's default workers (its
 * share of the host's cores less one) unless --workers; no baseline (run the same on one process
 * for one); rank 0 prints, the time is its own (every rank ends a run together);
 * --simulate P: the same graphs on the simulated machine of profile P (its first --gpus GPUs),
 * the simulated makespan as weft's time: no matrix, no check, no baseline; with --ranks R, a
 * simulated job of R ranks on one host of P, the tiles distributed as under mpirun -np R;
 * --trace: the last rep's statistics and Chrome trace of each tile size into DIR;
 * --large: a matrix too large to hold twice: made tile by tile into weft's tensor (the host
 * holds it once), its factor checked at 200 entries of two tile rows against the matrix
 * recomputed there; no baseline (for a matrix larger than the GPU: --device auto).
 * Defaults: cpu: n 4096, tiles 512; cuda: n 32768, tiles 1024,2048,4096; f64; 3 reps; the heft
 * policy (look-ahead: each step's panel before the rest of the step before's updates). */
#define _GNU_SOURCE
#include "bench_common.h"
#include "weft/report.h"

#include <dlfcn.h>
#include <math.h>
#if WEFT_BENCH_MPI
#include <mpi.h>
#endif
#include <string.h>
#include <unistd.h>

#if WEFT_BENCH_CUDA
#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cusolverDn.h>
#include <cusolverMg.h>
#pragma GCC diagnostic pop
#endif

void spotrf_(const char *uplo, const int *n, float *a, const int *lda, int *info);
void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info);

/* The matrix: symmetric, entries in [0, 1) off the diagonal, n + [0, 1) on it (diagonally
 * dominant, so positive definite). Deterministic: row i's lower entries come from its own
 * xorshift64 generator, one step an entry. */
static uint64_t xorshift(uint64_t s) {
  s ^= s << 13, s ^= s >> 7, s ^= s << 17;
  return s;
}

static uint64_t row_seed(int64_t i) { return 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1); }

static double spd_value(uint64_t s, int64_t n, int64_t i, int64_t j) {
  return (double)(s >> 11) / 9007199254740992.0 + (i == j ? (double)n : 0);
}

/* Row i's entries 0..i into row, in `es`-byte elements. */
static void spd_row(int64_t n, int64_t i, void *row, size_t es) {
  uint64_t s = row_seed(i);
  for (int64_t j = 0; j <= i; j++) {
    s = xorshift(s);
    double v = spd_value(s, n, i, j);
    if (es == 4)
      ((float *)row)[j] = (float)v;
    else
      ((double *)row)[j] = v;
  }
}

/* The whole matrix, row-major in `es`-byte elements. */
static void *make_spd(int64_t n, size_t es) {
  void *a = malloc((size_t)(n * n) * es);
  if (a == NULL) {
    fprintf(stderr, "bench_cholesky: no host memory for a %lld^2 matrix\n", (long long)n);
    exit(1);
  }
  for (int64_t i = 0; i < n; i++) {
    spd_row(n, i, (char *)a + (size_t)(i * n) * es, es);
    for (int64_t j = 0; j < i; j++) /* the upper triangle mirrors it */
      memcpy((char *)a + (size_t)(j * n + i) * es, (char *)a + (size_t)(i * n + j) * es, es);
  }
  return a;
}

static double at(const void *m, size_t es, int64_t k) {
  return es == 4 ? (double)((const float *)m)[k] : ((const double *)m)[k];
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Entry (i, j), j <= i, of make_spd's matrix, recomputed: row i's generator run to column j. */
static double spd_at(int64_t n, int64_t i, int64_t j) {
  uint64_t s = row_seed(i);
  for (int64_t k = 0; k <= j; k++) s = xorshift(s);
  return spd_value(s, n, i, j);
}

/* --large: make_spd's lower triangle written into x tile by tile (one band of tile rows made
 * at a time), so the host holds the matrix once, in weft's tensor. The tiles above the
 * diagonal are never read by the factorisation and are not written. */
static void write_large(weft_tensor *x, int64_t n, size_t es) {
  int64_t t = weft_tensor_tile_count(x, 0), b = weft_tensor_dim(weft_tensor_tile(x, 0, 0), 0);
  char *band = calloc((size_t)(b * n), es), *tile = malloc((size_t)(b * b) * es);
  if (band == NULL || tile == NULL) {
    fprintf(stderr, "bench_cholesky: no host memory for a band of %lld rows\n", (long long)b);
    exit(1);
  }
  for (int64_t bi = 0; bi < t; bi++) {
    int64_t r0 = bi * b, h = min64(b, n - r0);
    for (int64_t i = r0; i < r0 + h; i++) spd_row(n, i, band + (size_t)((i - r0) * n) * es, es);
    for (int64_t bj = 0; bj <= bi; bj++) {
      int64_t c0 = bj * b, w = min64(b, n - c0);
      for (int64_t r = 0; r < h; r++)
        memcpy(tile + (size_t)(r * w) * es, band + (size_t)(r * n + c0) * es, (size_t)w * es);
      BCHECK(weft_tensor_write(weft_tensor_tile(x, bi, bj), tile, (size_t)(h * w) * es));
    }
  }
  free(band);
  free(tile);
}

/* --large: the factor read back by tile rows (the last band and the middle one), and 200 of
 * its entries (i in the one, j in the other) against the matrix recomputed there. */
static double check_large(weft_tensor *x, int64_t n, size_t es) {
  int64_t t = weft_tensor_tile_count(x, 0), b = weft_tensor_dim(weft_tensor_tile(x, 0, 0), 0);
  int64_t bands[2] = {t - 1, t / 2};
  char *rows[2], *tile = malloc((size_t)(b * b) * es);
  for (int q = 0; q < 2; q++) {
    rows[q] = calloc((size_t)(b * n), es);
    if (rows[q] == NULL || tile == NULL) exit(1);
    int64_t h = min64(b, n - bands[q] * b);
    for (int64_t bj = 0; bj <= bands[q]; bj++) {
      int64_t c0 = bj * b, w = min64(b, n - c0);
      BCHECK(weft_tensor_read(weft_tensor_tile(x, bands[q], bj), tile, (size_t)(h * w) * es));
      for (int64_t r = 0; r < h; r++)
        memcpy(rows[q] + (size_t)(r * n + c0) * es, tile + (size_t)(r * w) * es, (size_t)w * es);
    }
  }
  uint64_t s = 12345;
  double worst = 0;
  for (int r = 0; r < 200; r++) {
    s = xorshift(s);
    int64_t i = bands[0] * b + (int64_t)(s % (uint64_t)(n - bands[0] * b));
    int64_t j = bands[1] * b + (int64_t)((s >> 32) % (uint64_t)min64(b, n - bands[1] * b));
    if (j > i) j = i;
    const char *li = rows[0] + (size_t)((i - bands[0] * b) * n) * es, *lj = rows[1] + (size_t)((j - bands[1] * b) * n) * es;
    if (bands[0] == bands[1]) lj = rows[0] + (size_t)((j - bands[0] * b) * n) * es;
    double sum = 0;
    for (int64_t k = 0; k <= j; k++) sum += at(li, es, k) * at(lj, es, k);
    double want = spd_at(n, i, j);
    worst = fmax(worst, fabs(sum - want) / fabs(want));
  }
  free(rows[0]);
  free(rows[1]);
  free(tile);
  return worst;
}


static int upper; /* --uplo upper: the factorisation of the upper triangle, A = U^T U */

/* max over 2000 random (i, j), j <= i, of |(L L^T)_ij - A_ij| / |A_ij| (upper: L = U^T). */
static double check(const void *l, const void *a, int64_t n, size_t es) {
  uint64_t s = 12345;
  double worst = 0;
  for (int r = 0; r < 2000; r++) {
    s = xorshift(s);
    int64_t i = (int64_t)(s % (uint64_t)n), j = (int64_t)((s >> 32) % (uint64_t)(i + 1));
    double sum = 0;
    for (int64_t k = 0; k <= j; k++)
      sum += upper ? at(l, es, k * n + i) * at(l, es, k * n + j) : at(l, es, i * n + k) * at(l, es, j * n + k);
    worst = fmax(worst, fabs(sum - at(a, es, i * n + j)) / fabs(at(a, es, i * n + j)));
  }
  return worst;
}

/* weft: the tiled factorisation of a (n x n) in tiles of b on `dev`; reps timed runs. */
/* --trace DIR: the last rep's statistics (text) and Chrome trace, DIR/cholesky_<n>_<tile>_<gpus>. */
static const char *trace_dir;
static int grid_p, grid_q; /* --device cuda over several GPUs: the tiles' P x Q grid of GPUs */
static int panel_inverse;  /* the panel of the run being timed: 0 trsm, 1 inverse */
static const char *simulate; /* --simulate: a machine profile whose simulated makespan is the time */
static size_t memory_limit;  /* --device-memory-limit: the bytes of each GPU auto placement may fill */
static int nranks = 1;       /* started by mpirun with several ranks (or --ranks simulated): the tiles over all of them */
static int sim_ranks;        /* --ranks with --simulate: a simulated job of that many ranks */
static int large;            /* --large: the matrix held once, in weft's tensor (write_large) */

static void save_stats(weft_run *run, int64_t n, int64_t b, int gpus) {
  weft_run_stats *st;
  char path[512];
  BCHECK(weft_run_stats_create(run, &st));
  const char *pn = panel_inverse ? "_inverse" : "";
  /* Under mpirun: one trace of every rank, written by rank 0 (collective), and each rank's
   * statistics. */
  snprintf(path, sizeof path, "%s/cholesky_%lld_%lld_%d%s.trace.json", trace_dir, (long long)n, (long long)b, gpus, pn);
  BCHECK(weft_run_stats_save_all(st, WEFT_REPORT_TRACE, path));
  int rank = weft_runtime_rank(weft_graph_runtime(weft_run_graph(run)));
  snprintf(path, sizeof path, "%s/cholesky_%lld_%lld_%d%s%s%.0d.stats.txt", trace_dir, (long long)n, (long long)b, gpus,
           pn, rank > 0 ? "_rank" : "", rank);
  BCHECK(weft_run_stats_save(st, WEFT_REPORT_TEXT, path));
  weft_run_stats_destroy(st);
}

static bench_figure time_weft(weft_runtime *rt, weft_device dev, int dtype, const void *a, int64_t n, int64_t b,
                              int reps, int gpus, double *err, size_t *nodes) {
  size_t es = dtype == WEFT_F32 ? 4 : 8, bytes = (size_t)(n * n) * es;
  weft_graph *g;
  weft_tensor *x;
  BCHECK(weft_graph_create(rt, &g));
  BCHECK(weft_tensor_create(g, "A", (weft_dtype)dtype, 2, (int64_t[]){n, n}, dev, weft_zeros(), &x));
  BCHECK(weft_tensor_tiles(g, x, b, b));
  if (grid_p > 0) BCHECK(weft_tensor_distribute(g, x, grid_p, grid_q));
  int64_t t = weft_tensor_tile_count(x, 0);
  /* --panel inverse: W[k] = L_kk^-1 (a trtri, where the diagonal tile is), then
   * each panel tile is one triangular product in place, A_ik = A_ik W[k]^T. --uplo upper: the
   * same on the transposes (the panel is row k, A_ki = W[k]^T A_ki, W[k] = U_kk^-1), so that
   * the updates are column-major N,T products (faster in f32 on an H100: docs/benchmarks.md). */
  weft_tensor **w = calloc((size_t)t, sizeof *w);
  if (w == NULL) exit(1);
  weft_uplo uplo = upper ? WEFT_UPPER : WEFT_LOWER;
  weft_side side = upper ? WEFT_LEFT : WEFT_RIGHT;
#define PANEL(k, i) weft_tensor_tile(x, upper ? (k) : (i), upper ? (i) : (k))
  for (int64_t k = 0; k < t; k++) {
    weft_tensor *akk = weft_tensor_tile(x, k, k);
    BCHECK(weft_potrf(g, uplo, akk));
    if (panel_inverse) {
      int64_t bk = weft_tensor_dim(akk, 0);
      weft_device wd = grid_p > 0 ? weft_tensor_device(akk) : dev;
      BCHECK(weft_tensor_create(g, NULL, (weft_dtype)dtype, 2, (int64_t[]){bk, bk}, wd, weft_zeros(), &w[k]));
      BCHECK(weft_trtri(g, uplo, akk, w[k]));
      for (int64_t i = k + 1; i < t; i++) BCHECK(weft_trmm(g, side, uplo, 1, 1.0, w[k], PANEL(k, i)));
    } else {
      for (int64_t i = k + 1; i < t; i++) BCHECK(weft_trsm(g, side, uplo, 1, 1.0, akk, PANEL(k, i)));
    }
    for (int64_t i = k + 1; i < t; i++) {
      weft_tensor *aik = PANEL(k, i);
      BCHECK(weft_syrk(g, uplo, upper, -1.0, aik, 1.0, weft_tensor_tile(x, i, i)));
      for (int64_t j = k + 1; j < i; j++)
        BCHECK(upper ? weft_gemm(g, PANEL(k, j), 1, aik, 0, -1.0, 1.0, weft_tensor_tile(x, j, i))
                     : weft_gemm(g, aik, 0, PANEL(k, j), 1, -1.0, 1.0, weft_tensor_tile(x, i, j)));
    }
  }
#undef PANEL
  free(w);
  *nodes = weft_graph_node_count(g);
  double ms[65];
  for (int r = -1; r < reps; r++) {
    if (a != NULL) BCHECK(weft_tensor_write(x, a, bytes));
    if (large && simulate == NULL) write_large(x, n, es);
#if WEFT_BENCH_MPI
    /* Ranks: each writes its own tiles first, some far slower than others (pageable memory to a
     * GPU); the run is timed from when all are ready, not from rank 0's start. */
    if (nranks > 1 && simulate == NULL) MPI_Barrier(MPI_COMM_WORLD);
#endif
    double t0 = bench_now_ms();
    weft_run *run;
    BCHECK(weft_graph_launch(g, &run));
    BCHECK(weft_run_wait(run));
    if (r >= 0) ms[r] = bench_now_ms() - t0;
    if (r >= 0 && simulate != NULL) { /* the simulated machine's time, not this one's */
      weft_run_stats *st;
      weft_stats_summary sum;
      BCHECK(weft_run_stats_create(run, &st));
      weft_run_stats_summary(st, &sum);
      ms[r] = sum.makespan_s * 1e3;
      weft_run_stats_destroy(st);
    }
    if (r == reps - 1 && trace_dir != NULL) save_stats(run, n, b, gpus);
    weft_run_destroy(run);
  }
  *err = large && simulate == NULL ? check_large(x, n, es) : 0;
  if (a != NULL) { /* a simulated run computes nothing to check */
    void *l = malloc(bytes);
    if (l == NULL) exit(1);
    BCHECK(nranks > 1 ? weft_tensor_read_all(x, l, bytes) : weft_tensor_read(x, l, bytes));
    *err = check(l, a, n, es);
    free(l);
  }
  weft_graph_destroy(g);
  bench_figure f;
  f.ms = bench_median(ms, reps, &f.spread_ms);
  return f;
}

/* The CPU baseline's child: LAPACK's potrf of OpenBLAS's pthreads build with `threads`
 * threads (the row-major lower factor is LAPACK's column-major upper one), or, with `lapacke`,
 * LAPACKE_?potrf(LAPACK_ROW_MAJOR, 'L') as a C program calls it (Debian's liblapacke, loaded
 * here; it transposes the matrix in and out around the same LAPACK call). */
static int baseline_child(int dtype, int threads, int64_t n, int reps, int lapacke) {
  typedef int (*lapacke_fn)(int layout, char uplo, int n, void *a, int lda);
  lapacke_fn row_major = NULL;
  if (lapacke) {
    void *lib = dlopen("liblapacke.so.3", RTLD_NOW | RTLD_GLOBAL);
    if (lib != NULL) row_major = (lapacke_fn)dlsym(lib, dtype == WEFT_F32 ? "LAPACKE_spotrf" : "LAPACKE_dpotrf");
    if (row_major == NULL) {
      fprintf(stderr, "bench_cholesky: no liblapacke.so.3 (Debian: liblapacke): the LAPACKE baseline is skipped\n");
      printf("BASELINE -1 -1\n");
      return 0;
    }
  }
  int (*parallel)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_parallel");
  void (*set_threads)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
  Dl_info potrf, ob;
  if (parallel == NULL || set_threads == NULL || parallel() != 1 || dladdr((void *)dpotrf_, &potrf) == 0 ||
      dladdr((void *)parallel, &ob) == 0 || strcmp(potrf.dli_fname, ob.dli_fname) != 0) {
    fprintf(stderr, "bench_cholesky: the baseline's dpotrf is not OpenBLAS's pthreads build: preload it (--openblas FILE)\n");
    return 1;
  }
  size_t es = dtype == WEFT_F32 ? 4 : 8, bytes = (size_t)(n * n) * es;
  void *a = make_spd(n, es), *l = malloc(bytes);
  if (l == NULL) return 1;
  set_threads(threads);
  int nn = (int)n, info = 0;
  double ms[65];
  for (int r = -1; r < reps; r++) {
    memcpy(l, a, bytes);
    double t0 = bench_now_ms();
    if (row_major != NULL)
      info = row_major(101 /* LAPACK_ROW_MAJOR */, 'L', nn, l, nn);
    else if (es == 4)
      spotrf_("U", &nn, l, &nn, &info);
    else
      dpotrf_("U", &nn, l, &nn, &info);
    if (r >= 0) ms[r] = bench_now_ms() - t0;
    if (info != 0) {
      fprintf(stderr, "bench_cholesky: the baseline's potrf failed (info %d)\n", info);
      return 1;
    }
  }
  double err = check(l, a, n, es);
  bench_figure f;
  f.ms = bench_median(ms, reps, &f.spread_ms);
  fprintf(stderr, "baseline check: max relative error %.2e\n", err);
  printf("BASELINE %.3f %.3f\n", f.ms, f.spread_ms);
  free(a);
  free(l);
  return 0;
}

#if WEFT_BENCH_CUDA
#define CU(x)                                                                                            \
  do {                                                                                                   \
    int e_ = (int)(x);                                                                                   \
    if (e_ != 0) {                                                                                       \
      fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, e_);                            \
      exit(1);                                                                                           \
    }                                                                                                    \
  } while (0)

/* cuSOLVER's column-major lower factor is our upper triangle: mirror it into the lower one to
 * check. */
static void mirror_lower(void *l, int64_t n, size_t es) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < i; j++) {
      if (es == 4)
        ((float *)l)[i * n + j] = ((float *)l)[j * n + i];
      else
        ((double *)l)[i * n + j] = ((double *)l)[j * n + i];
    }
}

/* cuSOLVER's potrf of the same matrix on GPU 0, timed with events on its stream. The matrix is
 * symmetric, so both of cuSOLVER's fill modes factor it: `lower` (column-major lower: L^T in
 * our row-major reading, checked as such) or upper (our L). */
static bench_figure time_cusolver(int dtype, const void *a, int64_t n, int reps, int lower, double *err) {
  cublasFillMode_t fill = lower ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
  size_t es = dtype == WEFT_F32 ? 4 : 8, bytes = (size_t)(n * n) * es;
  cudaDataType t = es == 4 ? CUDA_R_32F : CUDA_R_64F;
  cusolverDnHandle_t h;
  cusolverDnParams_t prm;
  cudaStream_t s;
  void *d, *work;
  int *info;
  size_t dev_bytes, host_bytes;
  CU(cudaSetDevice(0));
  CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CU(cusolverDnCreate(&h));
  CU(cusolverDnSetStream(h, s));
  CU(cusolverDnCreateParams(&prm));
  CU(cudaMalloc(&d, bytes));
  CU(cudaMalloc((void **)&info, sizeof(int)));
  CU(cusolverDnXpotrf_bufferSize(h, prm, fill, n, t, d, n, t, &dev_bytes, &host_bytes));
  CU(cudaMalloc(&work, dev_bytes ? dev_bytes : 1));
  void *hwork = malloc(host_bytes ? host_bytes : 1);
  cudaEvent_t e0, e1;
  CU(cudaEventCreate(&e0));
  CU(cudaEventCreate(&e1));
  double ms[65];
  int hinfo = 0;
  for (int r = -1; r < reps; r++) {
    CU(cudaMemcpy(d, a, bytes, cudaMemcpyHostToDevice));
    CU(cudaEventRecord(e0, s));
    CU(cusolverDnXpotrf(h, prm, fill, n, t, d, n, t, work, dev_bytes, hwork, host_bytes, info));
    CU(cudaEventRecord(e1, s));
    CU(cudaEventSynchronize(e1));
    float f;
    CU(cudaEventElapsedTime(&f, e0, e1));
    if (r >= 0) ms[r] = f;
    CU(cudaMemcpy(&hinfo, info, sizeof hinfo, cudaMemcpyDeviceToHost));
    if (hinfo != 0) {
      fprintf(stderr, "bench_cholesky: cuSOLVER's potrf failed (info %d)\n", hinfo);
      exit(1);
    }
  }
  void *l = malloc(bytes);
  if (l == NULL) exit(1);
  CU(cudaMemcpy(l, d, bytes, cudaMemcpyDeviceToHost));
  if (lower) mirror_lower(l, n, es);
  *err = check(l, a, n, es);
  free(l);
  free(hwork);
  cudaFree(work);
  cudaFree(info);
  cudaFree(d);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cusolverDnDestroyParams(prm);
  cusolverDnDestroy(h);
  cudaStreamDestroy(s);
  bench_figure fig;
  fig.ms = bench_median(ms, reps, &fig.spread_ms);
  return fig;
}

/* cuSOLVER's multi-GPU potrf (cusolverMgPotrf) of the same matrix over GPUs 0..gpus-1: the
 * matrix in cuSOLVER's 1-D column block-cyclic layout (blocks of `tile` columns, block j on GPU
 * j mod gpus), lower. Loaded at run time (libcusolverMg.so.12, CUDA's toolkit): a machine
 * without it skips this baseline (returns ms < 0). Timed on the host around the call, which
 * returns when the factorisation is done (every GPU synchronised after it). cuSOLVER 13 marks
 * its multi-GPU API deprecated; it is still the vendor's multi-GPU potrf the issue names. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static bench_figure time_cusolver_mg(int dtype, const void *a, int64_t n, int reps, int gpus, int64_t tile,
                                     double *err) {
  bench_figure fig = {-1, -1};
  void *lib = dlopen("libcusolverMg.so.12", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) lib = dlopen("libcusolverMg.so", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "bench_cholesky: no libcusolverMg (%s): the multi-GPU cuSOLVER baseline is skipped\n", dlerror());
    return fig;
  }
#define MG(name) __typeof__(&name) p_##name = (__typeof__(&name))dlsym(lib, #name)
  MG(cusolverMgCreate);
  MG(cusolverMgDestroy);
  MG(cusolverMgDeviceSelect);
  MG(cusolverMgCreateDeviceGrid);
  MG(cusolverMgDestroyGrid);
  MG(cusolverMgCreateMatrixDesc);
  MG(cusolverMgDestroyMatrixDesc);
  MG(cusolverMgPotrf_bufferSize);
  MG(cusolverMgPotrf);
#undef MG
  if (!p_cusolverMgCreate || !p_cusolverMgDestroy || !p_cusolverMgDeviceSelect || !p_cusolverMgCreateDeviceGrid ||
      !p_cusolverMgDestroyGrid || !p_cusolverMgCreateMatrixDesc || !p_cusolverMgDestroyMatrixDesc ||
      !p_cusolverMgPotrf_bufferSize || !p_cusolverMgPotrf) {
    fprintf(stderr, "bench_cholesky: libcusolverMg lacks a function this baseline calls: skipped\n");
    return fig;
  }
  size_t es = dtype == WEFT_F32 ? 4 : 8, bytes = (size_t)(n * n) * es;
  cudaDataType t = es == 4 ? CUDA_R_32F : CUDA_R_64F;
  int32_t ids[16];
  for (int g = 0; g < gpus; g++) ids[g] = g;
  /* cuSOLVER's multi-GPU routines read and write the other GPUs' memory directly. */
  for (int g = 0; g < gpus; g++) {
    CU(cudaSetDevice(g));
    for (int h = 0; h < gpus; h++) {
      int can = 0;
      CU(cudaDeviceCanAccessPeer(&can, g, h));
      if (h != g && can) {
        cudaError_t e = cudaDeviceEnablePeerAccess(h, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CU(e);
        (void)cudaGetLastError();
      }
    }
  }
  cusolverMgHandle_t h;
  cudaLibMgGrid_t grid;
  cudaLibMgMatrixDesc_t desc;
  CU(p_cusolverMgCreate(&h));
  CU(p_cusolverMgDeviceSelect(h, gpus, ids));
  CU(p_cusolverMgCreateDeviceGrid(&grid, 1, gpus, ids, CUDALIBMG_GRID_MAPPING_COL_MAJOR));
  CU(p_cusolverMgCreateMatrixDesc(&desc, n, n, n, tile, t, grid));
  int64_t blocks = (n + tile - 1) / tile, per = (blocks + gpus - 1) / gpus;
  void *d[16], *work[16];
  for (int g = 0; g < gpus; g++) {
    CU(cudaSetDevice(g));
    CU(cudaMalloc(&d[g], (size_t)(n * per * tile) * es));
  }
  int64_t lwork = 0;
  CU(p_cusolverMgPotrf_bufferSize(h, CUBLAS_FILL_MODE_LOWER, (int)n, d, 1, 1, desc, t, &lwork));
  for (int g = 0; g < gpus; g++) {
    CU(cudaSetDevice(g));
    CU(cudaMalloc(&work[g], (size_t)(lwork ? lwork : 1) * es));
  }
  /* Column-major, the symmetric matrix is its own row-major array: block j of columns is the
   * n x tile (or fewer) elements from a + j tile n. */
  double ms[65];
  for (int r = -1; r < reps; r++) {
    for (int64_t j = 0; j < blocks; j++) {
      int64_t cols = j == blocks - 1 ? n - j * tile : tile;
      CU(cudaSetDevice((int)(j % gpus)));
      CU(cudaMemcpy((char *)d[j % gpus] + (size_t)(n * (j / gpus) * tile) * es, (const char *)a + (size_t)(j * tile * n) * es,
                    (size_t)(n * cols) * es, cudaMemcpyHostToDevice));
    }
    for (int g = 0; g < gpus; g++) {
      CU(cudaSetDevice(g));
      CU(cudaDeviceSynchronize());
    }
    int info = 0;
    double t0 = bench_now_ms();
    CU(p_cusolverMgPotrf(h, CUBLAS_FILL_MODE_LOWER, (int)n, d, 1, 1, desc, t, work, lwork, &info));
    for (int g = 0; g < gpus; g++) {
      CU(cudaSetDevice(g));
      CU(cudaDeviceSynchronize());
    }
    if (r >= 0) ms[r] = bench_now_ms() - t0;
    if (info != 0) {
      fprintf(stderr, "bench_cholesky: cusolverMgPotrf failed (info %d)\n", info);
      exit(1);
    }
  }
  void *l = malloc(bytes);
  if (l == NULL) exit(1);
  for (int64_t j = 0; j < blocks; j++) {
    int64_t cols = j == blocks - 1 ? n - j * tile : tile;
    CU(cudaSetDevice((int)(j % gpus)));
    CU(cudaMemcpy((char *)l + (size_t)(j * tile * n) * es, (char *)d[j % gpus] + (size_t)(n * (j / gpus) * tile) * es,
                  (size_t)(n * cols) * es, cudaMemcpyDeviceToHost));
  }
  mirror_lower(l, n, es);
  *err = check(l, a, n, es);
  free(l);
  for (int g = 0; g < gpus; g++) {
    CU(cudaSetDevice(g));
    cudaFree(work[g]);
    cudaFree(d[g]);
  }
  p_cusolverMgDestroyMatrixDesc(desc);
  p_cusolverMgDestroyGrid(grid);
  p_cusolverMgDestroy(h);
  CU(cudaSetDevice(0));
  fig.ms = bench_median(ms, reps, &fig.spread_ms);
  return fig;
}
#pragma GCC diagnostic pop
#endif

int main(int argc, char **argv) {
  if (argc >= 6 && strcmp(argv[1], "--baseline-child") == 0)
    return baseline_child(strcmp(argv[2], "f32") == 0 ? WEFT_F32 : WEFT_F64, atoi(argv[3]), atoll(argv[4]), atoi(argv[5]),
                          argc == 7 && strcmp(argv[6], "lapacke") == 0);
  const char *device = "cpu", *tiles = NULL, *dtypes = "f64", *lib = WEFT_PTHREAD_BLAS, *policy = "heft",
             *profile = NULL;
  int64_t n = 0;
  int64_t mg_tile = 256;
  int reps = 3, json = 0, workers = (int)sysconf(_SC_NPROCESSORS_ONLN), workers_given = 0, gpus = 1,
      panels = 1; /* 1 trsm, 2 inverse */
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--json") == 0) json = 1;
    else if (v != NULL && strcmp(argv[i], "--device") == 0) device = v, i++;
    else if (v != NULL && strcmp(argv[i], "--n") == 0) n = atoll(v), i++;
    else if (v != NULL && strcmp(argv[i], "--tile") == 0) tiles = v, i++;
    else if (v != NULL && strcmp(argv[i], "--dtype") == 0) dtypes = v, i++;
    else if (v != NULL && strcmp(argv[i], "--reps") == 0) reps = atoi(v), i++;
    else if (v != NULL && strcmp(argv[i], "--workers") == 0) workers = atoi(v), i++, workers_given = 1;
    else if (v != NULL && strcmp(argv[i], "--openblas") == 0) lib = v, i++;
    else if (v != NULL && strcmp(argv[i], "--policy") == 0) policy = v, i++;
    else if (v != NULL && strcmp(argv[i], "--gpus") == 0) gpus = atoi(v), i++;
    else if (v != NULL && strcmp(argv[i], "--mg-tile") == 0) mg_tile = atoll(v), i++;
    else if (v != NULL && strcmp(argv[i], "--grid") == 0 && sscanf(v, "%dx%d", &grid_p, &grid_q) == 2) i++;
    else if (v != NULL && strcmp(argv[i], "--uplo") == 0 && (strcmp(v, "lower") == 0 || strcmp(v, "upper") == 0))
      upper = strcmp(v, "upper") == 0, i++;
    else if (v != NULL && strcmp(argv[i], "--panel") == 0 &&
             (panels = strcmp(v, "trsm") == 0 ? 1 : strcmp(v, "inverse") == 0 ? 2 : strcmp(v, "both") == 0 ? 3 : 0) != 0)
      i++;
    else if (v != NULL && strcmp(argv[i], "--profile") == 0) profile = v, i++;
    else if (v != NULL && strcmp(argv[i], "--simulate") == 0) simulate = v, i++;
    else if (v != NULL && strcmp(argv[i], "--ranks") == 0 && (sim_ranks = atoi(v)) >= 1) i++;
    else if (v != NULL && strcmp(argv[i], "--device-memory-limit") == 0) memory_limit = (size_t)atof(v) * 1024 * 1024, i++;
    else if (v != NULL && strcmp(argv[i], "--trace") == 0) trace_dir = v, i++;
    else if (strcmp(argv[i], "--large") == 0) large = 1;
    else {
      fprintf(stderr, "usage: %s [--device cpu|cuda|auto] [--n N] [--tile B[,B...]] [--dtype f64|f32] [--reps R] "
                      "[--workers W] [--openblas FILE] [--policy fixed|heft] [--gpus G] [--grid PxQ] "
                      "[--panel trsm|inverse|both] [--mg-tile T] [--profile P] [--simulate P [--ranks R]] [--device-memory-limit MIB] "
                      "[--uplo lower|upper] [--trace DIR] [--large] [--json]\n",
                      argv[0]);
      return 2;
    }
  }
  /* auto: the matrix on weft_auto(), placed by weft over --gpus GPUs, against cuSOLVER (on
   * several GPUs: cusolverMgPotrf over as many). */
  int on_auto = strcmp(device, "auto") == 0, cuda = strcmp(device, "cuda") == 0 || on_auto;
  if (n == 0) n = cuda ? 32768 : 4096;
  int grid_given = grid_p > 0;
  if (cuda && !on_auto && gpus > 1 && !grid_given) grid_p = 1, grid_q = gpus;
  if (grid_p > 0 && grid_q == 0) {
    while (gpus % grid_p != 0) grid_p--;
    grid_q = gpus / grid_p;
  }
  if (tiles == NULL) tiles = cuda ? "1024,2048,4096" : "512";
  int dtype = strcmp(dtypes, "f32") == 0 ? WEFT_F32 : WEFT_F64;
  /* A grid spans the GPUs (or CPUs) of every rank of the job: mpirun's, or --ranks simulated. */
  const char *world = getenv("OMPI_COMM_WORLD_SIZE");
  int job = world != NULL && atoi(world) > 1 ? atoi(world) : sim_ranks > 1 ? sim_ranks : 1;
  if ((!cuda && strcmp(device, "cpu") != 0) || n < 1 || n > (large ? 262144 : cuda ? 65536 : 46340) || reps < 1 || reps > 64 ||
      (workers_given && workers < 1) || gpus < 1 || gpus > 16 || (gpus > 1 && !cuda) || mg_tile < 1 ||
      (grid_p > 0 && (on_auto || grid_p < 1 || grid_q < 1 || grid_p * grid_q > (cuda ? gpus : 1) * job)) ||
      (strcmp(dtypes, "f32") != 0 && strcmp(dtypes, "f64") != 0) || (upper && large)) {
    fprintf(stderr, "bench_cholesky: bad --device (cpu|cuda|auto), --n (1..46340; 65536 on a GPU; 262144 --large), --reps (1..64), "
                    "--workers, --gpus (1..16, more than 1 on a GPU), --grid (P x Q <= the places of every rank), --panel "
                    "(trsm|inverse|both), --mg-tile, --dtype or --uplo (upper does not take --large)\n");
    return 2;
  }
#if !WEFT_BENCH_CUDA
  if (cuda && simulate == NULL) {
    fprintf(stderr, "bench_cholesky: built without CUDA: --device cuda is not available (but --simulate is)\n");
    return 2;
  }
#endif
  if (!cuda && simulate == NULL && (lib[0] == '\0' || access(lib, R_OK) != 0)) {
    fprintf(stderr, "bench_cholesky: OpenBLAS's pthreads build not found (%s): install it (Debian: libopenblas0-pthread) "
                    "or name it with --openblas FILE\n", lib[0] ? lib : "none at configure time");
    return 2;
  }
  size_t es = dtype == WEFT_F32 ? 4 : 8;
  double flop = (double)n * (double)n * (double)n / 3.0, tol = es == 4 ? 1e-3 : 1e-10;
  /* Started by mpirun with several ranks (the launcher says so; the runtime, made below, finds
   * the same): no baseline, the tiles distributed over every rank's CPU or GPUs. */
  if (world != NULL && atoi(world) > 1) nranks = atoi(world);
  if (sim_ranks > 0 && (simulate == NULL || nranks > 1 || sim_ranks > 4096)) {
    fprintf(stderr, "bench_cholesky: --ranks (1..4096) simulates a job of several ranks: it needs --simulate, and "
                    "is not for a run under mpirun\n");
    return 2;
  }
  if (sim_ranks > 1) nranks = sim_ranks;
  if (nranks > 1 && (on_auto || (simulate != NULL && sim_ranks == 0) || large)) {
    fprintf(stderr, "bench_cholesky: across ranks the matrix is distributed: --device cpu or cuda, not auto, --simulate "
                    "or --large\n");
    return 2;
  }
  /* Simulated: no matrix (the simulated devices hold no data) and no baseline. */
  void *a = simulate != NULL || large ? NULL : make_spd(n, es);
  /* The baseline first. */
  bench_figure base = {-1, -1}, lapacke_base = {-1, -1};
  double base_err = 0;
  char who[32] = "no baseline (simulated)";
  if (nranks > 1) snprintf(who, sizeof who, "no baseline (%d ranks)", nranks);
  if (large) snprintf(who, sizeof who, "no baseline (--large)");
  if (cuda && simulate == NULL && nranks == 1) {
#if WEFT_BENCH_CUDA
    int have = 0;
    if (cudaGetDeviceCount(&have) != cudaSuccess || have < gpus) {
      fprintf(stderr, "bench_cholesky: --gpus %d but this machine has %d GPU(s)\n", gpus, have);
      return 2;
    }
#endif
  }
  int baselines = simulate == NULL && nranks == 1 && !large;
  if (baselines && cuda && gpus > 1) {
#if WEFT_BENCH_CUDA
    base = time_cusolver_mg(dtype, a, n, reps, gpus, mg_tile, &base_err);
    if (!json && base.ms > 0)
      printf("cusolverMgPotrf on %d GPUs (column blocks of %lld): %.1f ms (%.2f TFLOP/s)\n", gpus, (long long)mg_tile,
             base.ms, flop / base.ms * 1e-9);
    snprintf(who, sizeof who, "cusolverMg (%d GPUs)", gpus);
#endif
  } else if (baselines && cuda) {
#if WEFT_BENCH_CUDA
    /* The faster of cuSOLVER's two fill modes is the baseline (beyond n = 32768 the lower one
     * alone, the faster at every size measured: each mode costs a minute there). */
    double err_u = 1, err_l;
    bench_figure lo = time_cusolver(dtype, a, n, reps, 1, &err_l), up = {1e30, 0};
    if (n <= 32768) up = time_cusolver(dtype, a, n, reps, 0, &err_u);
    if (!json)
      printf("cuSOLVER Xpotrf: upper %.1f ms (%.2f TFLOP/s), lower %.1f ms (%.2f TFLOP/s)\n", up.ms < 1e30 ? up.ms : 0,
             up.ms < 1e30 ? flop / up.ms * 1e-9 : 0, lo.ms, flop / lo.ms * 1e-9);
    base = lo.ms < up.ms ? lo : up;
    base_err = lo.ms < up.ms ? err_l : err_u;
    snprintf(who, sizeof who, "cuSOLVER (%s)", lo.ms < up.ms ? "lower" : "upper");
#endif
  } else if (baselines) {
    char args[128];
    snprintf(args, sizeof args, "--baseline-child %s %d %lld %d", es == 4 ? "f32" : "f64", workers, (long long)n, reps);
    base = bench_child("bench_cholesky", lib, args);
    snprintf(who, sizeof who, "OpenBLAS (%d threads)", workers);
    /* The call the placement issue names: LAPACKE_dpotrf on the row-major matrix. */
    strncat(args, " lapacke", sizeof args - strlen(args) - 1);
    lapacke_base = bench_child("bench_cholesky", lib, args);
    if (!json && lapacke_base.ms > 0)
      printf("LAPACKE_%spotrf (row-major, the same %d threads): %.1f ms (%.1f), %.2f TFLOP/s\n", es == 4 ? "s" : "d",
             workers, lapacke_base.ms, lapacke_base.spread_ms, flop / lapacke_base.ms * 1e-9);
  }
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = nranks > 1 && !workers_given ? 0 : workers; /* ranks sharing a host: weft's share each */
  o.max_gpus = cuda ? gpus : 0;
  o.flags = WEFT_RUNTIME_QUIET;
  o.policy = policy;
  o.profile = profile;
  o.simulate = simulate;
  o.sim_ranks = sim_ranks;
  o.device_memory_limit = memory_limit;
  weft_runtime *rt;
  BCHECK(weft_runtime_create(&o, &rt));
  if (cuda && weft_device_count(rt, WEFT_DEVICE_CUDA) < gpus) {
    fprintf(stderr, "bench_cholesky: weft sees %d GPU(s); --gpus %d\n", weft_device_count(rt, WEFT_DEVICE_CUDA), gpus);
    return 2;
  }
  if (nranks > 1) {
    /* Every rank's CPU, or every rank's GPUs (--gpus each: a rank's share of its host's by
     * default), a P x Q grid of them (--grid, else 1 x G for GPUs as above, the squarest for
     * CPUs); rank 0 prints. */
    int places = nranks * (cuda ? gpus : 1);
    if (!grid_given && cuda) grid_p = 1, grid_q = places;
    if (!grid_given && !cuda) {
      grid_p = 1;
      while ((grid_p + 1) * (grid_p + 1) <= places) grid_p++;
      while (places % grid_p != 0) grid_p--;
      grid_q = places / grid_p;
    }
    if (weft_runtime_rank(rt) != 0 && freopen("/dev/null", "w", stdout) == NULL) return 1;
  }
  const char *sdt = es == 4 ? "f32" : "f64";
  char baseline[160];
  if (simulate != NULL)
    snprintf(baseline, sizeof baseline, "simulated on %s, no baseline", simulate);
  else if (nranks > 1)
    snprintf(baseline, sizeof baseline, "%d ranks, no baseline", nranks);
  else if (large)
    snprintf(baseline, sizeof baseline, "--large: no baseline");
  else
    snprintf(baseline, sizeof baseline, "%s %.1f ms (%.1f), %.2f TFLOP/s%s", who, base.ms, base.spread_ms,
             flop / base.ms * 1e-9, base_err < tol || cuda ? "" : " CHECK FAILED");
  if (!json)
    printf("tiled Cholesky %s n=%lld on %s (%d GPU%s), policy %s, median of %d (spread); %s\n", sdt, (long long)n,
           on_auto                  ? "auto (placed by weft)"
           : grid_p > 0 && cuda     ? "the GPUs (tiles block-cyclic)"
           : grid_p > 0             ? "the CPU (tiles apart)"
           : cuda ? "cuda:0" : "the CPU", cuda ? gpus : 0,
           gpus == 1 ? "" : "s", policy, reps, baseline);
  int failed = base_err >= tol;
  for (const char *p = tiles; *p;) {
    int64_t b = atoll(p);
    if (b < 1) {
      fprintf(stderr, "bench_cholesky: bad tile size in --tile %s\n", tiles);
      return 2;
    }
    for (panel_inverse = 0; panel_inverse < 2; panel_inverse++) {
      if (!(panels >> panel_inverse & 1)) continue;
      double err;
      size_t nodes;
      bench_figure w = time_weft(rt, on_auto ? weft_auto() : cuda ? weft_cuda(0) : weft_cpu(), dtype, a, n, b, reps,
                                 cuda ? gpus : 0, &err, &nodes);
      failed |= err >= tol;
      double ratio = base.ms > 0 ? base.ms / w.ms : 0; /* 0: no baseline (cusolverMg missing) */
      if (json)
        printf("{\"bench\":\"cholesky\",\"device\":\"%s\",\"panel\":\"%s\",\"dtype\":\"%s\",\"n\":%lld,"
               "\"tile\":%lld,\"nodes\":%zu,"
               "\"reps\":%d,\"weft_ms\":%.3f,\"weft_spread_ms\":%.3f,\"weft_tflops\":%.4f,\"baseline\":\"%s\","
               "\"baseline_ms\":%.3f,\"baseline_spread_ms\":%.3f,\"baseline_tflops\":%.4f,\"ratio\":%.4f,"
               "\"weft_error\":%.3e,\"baseline_error\":%.3e}\n",
               device, panel_inverse ? "inverse" : "trsm", sdt, (long long)n, (long long)b, nodes, reps, w.ms,
               w.spread_ms, flop / w.ms * 1e-9, who,
               base.ms, base.spread_ms, flop / base.ms * 1e-9, ratio, err, base_err);
      else
        printf("  tiles of %5lld, panel by %-7s (%5zu nodes): weft %9.1f ms (%6.1f) %7.2f TFLOP/s, ratio %.3f, error %.1e%s\n",
               (long long)b, panel_inverse ? "inverse" : "trsm", nodes, w.ms, w.spread_ms, flop / w.ms * 1e-9, ratio, err,
               err < tol ? "" : " CHECK FAILED");
      if (!json && lapacke_base.ms > 0) printf("    against LAPACKE: ratio %.3f\n", lapacke_base.ms / w.ms);
      printf("RESULT bench=%scholesky_%s%s%s%s device=%s ranks=%d gpus=%d grid=%dx%d panel=%s uplo=%s n=%lld tile=%lld "
             "weft_ms=%.3f weft_tflops=%.3f baseline_ms=%.3f baseline_tflops=%.3f ratio=%.4f\n",
             on_auto ? "auto_" : cuda ? "" : "cpu_", sdt, gpus > 1 ? "_multi" : "", memory_limit > 0 ? "_ooc" : "",
             nranks > 1 ? "_ranks" : "", device, nranks, cuda ? gpus : 0, grid_p, grid_q, panel_inverse ? "inverse" : "trsm",
             upper ? "upper" : "lower", (long long)n, (long long)b, w.ms, flop / w.ms * 1e-9, base.ms, flop / base.ms * 1e-9, ratio);
      fflush(stdout);
    }
    p = strchr(p, ',');
    if (p == NULL) break;
    p++;
  }
  weft_runtime_destroy(rt);
  free(a);
  return failed;
}
