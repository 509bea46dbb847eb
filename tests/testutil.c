/* testutil.c — see testutil.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* popen */
#endif

#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

weft_runtime *tu_runtime_with(int workers, int max_gpus, unsigned flags) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = workers;
  o.max_gpus = max_gpus;
  o.flags |= WEFT_RUNTIME_QUIET | flags;
  weft_runtime *rt = NULL;
  CHECK(weft_runtime_create(&o, &rt));
  return rt;
}

weft_runtime *tu_runtime(int workers) { return tu_runtime_with(workers, -1, 0); }

weft_runtime *tu_runtime_cpu(int workers) { return tu_runtime_with(workers, 0, 0); }

weft_graph *tu_graph(weft_runtime *rt) {
  weft_graph *g = NULL;
  CHECK(weft_graph_create(rt, &g));
  return g;
}

weft_tensor *tu_matrix(weft_graph *g, const char *name, int64_t r, int64_t c, uint64_t seed) {
  weft_tensor *t = NULL;
  CHECK(weft_tensor_create(g, name, WEFT_F32, 2, (int64_t[]){r, c}, weft_cpu(),
                           weft_uniform(-1, 1, seed), &t));
  return t;
}

int tu_setup(void **state) {
  tu_fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->rt = tu_runtime_cpu(2);
  f->g = tu_graph(f->rt);
  *state = f;
  return 0;
}

int tu_teardown(void **state) {
  tu_fixture *f = *state;
  if (f == NULL) return 0;
  weft_graph_destroy(f->g);
  weft_runtime_destroy(f->rt);
  free(f);
  return 0;
}

void tu_overlap_build(tu_overlap *o, weft_graph *g, weft_device dev, int64_t side, weft_init init,
                      int n) {
  assert_true(n >= 0 && n <= TU_OVERLAP_MAX);
  memset(o, 0, sizeof *o);
  o->g = g;
  o->n = n;
  CHECK(weft_tensor_create(g, "x", WEFT_F32, 2, (int64_t[]){side, side}, dev, init, &o->x));
  for (int i = 0; i < n; i++) {
    CHECK(weft_mm(g, o->x, o->x, &o->y[i]));
    o->mm[i] = weft_node_id(weft_graph_last_node(g));
    char name[16];
    snprintf(name, sizeof name, "y%d", i);
    CHECK(weft_tensor_set_name(o->y[i], name));
    CHECK(weft_copy(g, o->y[i], weft_cpu(), &o->h[i]));
    o->cp[i] = weft_node_id(weft_graph_last_node(g));
  }
}

weft_tensor *tu_scalar(weft_graph *g, const char *name, double v) {
  return tu_tensor(g, name, WEFT_F64, 0, NULL, weft_full(v));
}

double tu_value(weft_tensor *t) {
  double v;
  CHECK(weft_tensor_get(t, 0, &v));
  return v;
}

weft_tensor *tu_tensor(weft_graph *g, const char *name, weft_dtype dt, int ndim,
                       const int64_t *shape, weft_init init) {
  weft_tensor *t = NULL;
  CHECK(weft_tensor_create(g, name, dt, ndim, shape, weft_cpu(), init, &t));
  return t;
}

weft_op_desc tu_op_desc(const char *name, int nargs, const weft_access *modes, weft_kernel_fn cpu,
                        weft_kernel_fn cuda, void *user) {
  weft_op_desc d;
  memset(&d, 0, sizeof d);
  d.name = name;
  d.nargs = nargs;
  for (int i = 0; i < nargs; i++) d.access[i] = modes[i];
  d.cpu = cpu;
  d.cuda = cuda;
  d.user = user;
  return d;
}

const weft_op *tu_op_gather(weft_runtime *rt, const char *name, weft_kernel_fn cpu) {
  static const weft_access write_first[1] = {WEFT_WRITE};
  weft_op_desc d = tu_op_desc(name, 1, write_first, cpu, NULL, NULL);
  d.rest = WEFT_READ;
  const weft_op *op = NULL;
  CHECK(weft_op_register(rt, &d, &op));
  return op;
}

const weft_op *tu_op(weft_runtime *rt, const char *name, int nargs, const weft_access *modes,
                     weft_kernel_fn cpu, void *user) {
  weft_op_desc d = tu_op_desc(name, nargs, modes, cpu, NULL, user);
  const weft_op *op = NULL;
  CHECK(weft_op_register(rt, &d, &op));
  return op;
}

void tu_read_doubles(weft_tensor *t, double *out) {
  size_t n = (size_t)weft_tensor_numel(t), bytes = weft_tensor_bytes(t);
  void *buf = malloc(bytes ? bytes : 1);
  assert_non_null(buf);
  CHECK(weft_tensor_read(t, buf, bytes));
  for (size_t i = 0; i < n; i++)
    out[i] = weft_tensor_dtype(t) == WEFT_F32 ? (double)((float *)buf)[i] : ((double *)buf)[i];
  free(buf);
}

void tu_write_doubles(weft_tensor *t, const double *in) {
  size_t n = (size_t)weft_tensor_numel(t), bytes = weft_tensor_bytes(t);
  void *buf = malloc(bytes ? bytes : 1);
  assert_non_null(buf);
  for (size_t i = 0; i < n; i++) {
    if (weft_tensor_dtype(t) == WEFT_F32)
      ((float *)buf)[i] = (float)in[i];
    else
      ((double *)buf)[i] = in[i];
  }
  CHECK(weft_tensor_write(t, buf, bytes));
  free(buf);
}

int tu_contains(const char *haystack, const char *needle) {
  if (strstr(haystack, needle) != NULL) return 1;
  print_message("expected \"%s\" in \"%s\"\n", needle, haystack);
  return 0;
}

char *tu_read_stream(FILE *f, size_t *len) {
  size_t n = 0, cap = 4096;
  char *buf = malloc(cap);
  assert_non_null(buf);
  for (;;) {
    n += fread(buf + n, 1, cap - n - 1, f);
    if (n + 1 < cap) break;
    cap *= 2;
    buf = realloc(buf, cap);
    assert_non_null(buf);
  }
  assert_false(ferror(f));
  buf[n] = '\0';
  if (len != NULL) *len = n;
  return buf;
}

char *tu_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) fail_msg("cannot read %s", path);
  char *buf = tu_read_stream(f, len);
  fclose(f);
  return buf;
}

/* Each block carries a header so live blocks can be counted. */
static long live, calls, fail_at = -1;
static int failed;

typedef struct hdr {
  size_t size;
  size_t pad;
} hdr;

static void *c_malloc(size_t size, void *user) {
  (void)user;
  long n = __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
  if (n == fail_at) {
    __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  hdr *h = malloc(sizeof *h + size);
  if (h == NULL) return NULL;
  h->size = size;
  __atomic_fetch_add(&live, 1, __ATOMIC_RELAXED);
  return h + 1;
}

static void *c_realloc(void *p, size_t size, void *user) {
  (void)user;
  long n = __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED);
  if (n == fail_at) {
    __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  hdr *h = realloc((hdr *)p - 1, sizeof *h + size);
  if (h == NULL) return NULL;
  h->size = size;
  return h + 1;
}

static void c_free(void *p, void *user) {
  (void)user;
  __atomic_fetch_sub(&live, 1, __ATOMIC_RELAXED);
  free((hdr *)p - 1);
}

void tu_alloc_install(long at) {
  live = 0;
  calls = 0;
  failed = 0;
  fail_at = at;
  weft_allocator a = {c_malloc, c_realloc, c_free, NULL};
  weft_set_allocator(&a);
}

void tu_alloc_uninstall(void) { weft_set_allocator(NULL); }

void tu_alloc_fail_at(long at) {
  __atomic_store_n(&failed, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&calls, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&fail_at, at, __ATOMIC_SEQ_CST);
}
long tu_alloc_live(void) { return __atomic_load_n(&live, __ATOMIC_RELAXED); }
long tu_alloc_calls(void) { return __atomic_load_n(&calls, __ATOMIC_RELAXED); }
int tu_alloc_failed(void) { return __atomic_load_n(&failed, __ATOMIC_RELAXED); }

int tu_add_one(weft_kernel_ctx *ctx) {
  double *p = weft_ctx_data(ctx, 0);
  int64_t n = weft_tensor_numel(weft_ctx_tensor(ctx, 0));
  for (int64_t i = 0; i < n; i++) p[i] += 1;
  return WEFT_OK;
}

const weft_op *tu_op1(weft_runtime *rt, const char *name, weft_access mode, weft_kernel_fn cpu, weft_kernel_fn cuda) {
  weft_op_desc d = tu_op_desc(name, 1, &mode, cpu, cuda, NULL);
  const weft_op *op = NULL;
  CHECK(weft_op_register(rt, &d, &op));
  return op;
}

/* ---- tiled Cholesky ------------------------------------------------------------------ */

/* A symmetric positive definite n x n matrix: random entries in [0, 1), made symmetric, plus n
 * on the diagonal (diagonally dominant). */
double *tu_spd(int64_t n, uint64_t seed) {
  double *a = malloc((size_t)(n * n) * sizeof *a);
  srand((unsigned)seed);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j <= i; j++) {
      double v = (double)rand() / RAND_MAX;
      a[i * n + j] = a[j * n + i] = v + (i == j ? (double)n : 0);
    }
  return a;
}

/* The tiled right-looking Cholesky of x (lower), tiles of b. */
int tu_cholesky(weft_graph *g, weft_tensor *x, int64_t b) {
  int rc = weft_tensor_tiles(g, x, b, b);
  return rc != WEFT_OK ? rc : tu_cholesky_tiled(g, x);
}

/* Panel tile i of step k: (i, k) below the diagonal, or (k, i) right of it in the upper form. */
static weft_tensor *panel_tile(weft_tensor *x, int64_t k, int64_t i, int upper) {
  return upper ? weft_tensor_tile(x, k, i) : weft_tensor_tile(x, i, k);
}

/* Step k's panel, the tiles below (upper: right of) the diagonal one, already factored: a trsm
 * each, or (inverse) a triangular product each with W = L_kk^-1 (a trtri). */
static int panel(weft_graph *g, weft_tensor *x, int64_t k, int64_t t, const weft_device *inverse_on, int upper) {
  weft_tensor *akk = weft_tensor_tile(x, k, k), *w = NULL;
  weft_uplo uplo = upper ? WEFT_UPPER : WEFT_LOWER;
  weft_side side = upper ? WEFT_LEFT : WEFT_RIGHT;
  int rc = WEFT_OK;
  if (inverse_on == NULL) {
    for (int64_t i = k + 1; i < t && rc == WEFT_OK; i++) rc = weft_trsm(g, side, uplo, 1, 1.0, akk, panel_tile(x, k, i, upper));
    return rc;
  }
  weft_dtype dt = weft_tensor_dtype(x);
  int64_t bk = weft_tensor_dim(akk, 0);
  if ((rc = weft_tensor_create(g, NULL, dt, 2, (int64_t[]){bk, bk}, *inverse_on, weft_zeros(), &w)) == WEFT_OK)
    rc = weft_trtri(g, uplo, akk, w);
  for (int64_t i = k + 1; i < t && rc == WEFT_OK; i++) rc = weft_trmm(g, side, uplo, 1, 1.0, w, panel_tile(x, k, i, upper));
  return rc;
}

/* The tiled right-looking Cholesky on x's tiles: A = L L^T, or (upper) A = U^T U with the
 * panel a row of tiles and the updates A_ji -= U_kj^T U_ki. */
static int cholesky(weft_graph *g, weft_tensor *x, const weft_device *inverse_on, int upper) {
  int rc = WEFT_OK;
  int64_t t = weft_tensor_tile_count(x, 0);
  weft_uplo uplo = upper ? WEFT_UPPER : WEFT_LOWER;
  for (int64_t k = 0; k < t && rc == WEFT_OK; k++) {
    rc = weft_potrf(g, uplo, weft_tensor_tile(x, k, k));
    if (rc == WEFT_OK) rc = panel(g, x, k, t, inverse_on, upper);
    for (int64_t i = k + 1; i < t && rc == WEFT_OK; i++) {
      weft_tensor *aik = panel_tile(x, k, i, upper);
      rc = weft_syrk(g, uplo, upper, -1.0, aik, 1.0, weft_tensor_tile(x, i, i));
      for (int64_t j = k + 1; j < i && rc == WEFT_OK; j++)
        rc = upper ? weft_gemm(g, panel_tile(x, k, j, 1), 1, aik, 0, -1.0, 1.0, weft_tensor_tile(x, j, i))
                   : weft_gemm(g, aik, 0, panel_tile(x, k, j, 0), 1, -1.0, 1.0, weft_tensor_tile(x, i, j));
    }
  }
  return rc;
}

int tu_cholesky_tiled(weft_graph *g, weft_tensor *x) { return cholesky(g, x, NULL, 0); }

int tu_cholesky_upper(weft_graph *g, weft_tensor *x, int64_t b) {
  int rc = weft_tensor_tiles(g, x, b, b);
  return rc != WEFT_OK ? rc : tu_cholesky_upper_tiled(g, x);
}

int tu_cholesky_upper_tiled(weft_graph *g, weft_tensor *x) { return cholesky(g, x, NULL, 1); }

double *tu_transpose(const double *a, int64_t n) {
  double *t = malloc((size_t)(n * n) * sizeof *t);
  assert_non_null(t);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) t[j * n + i] = a[i * n + j];
  return t;
}

int tu_cholesky_inverse(weft_graph *g, weft_tensor *x, weft_device dev) { return cholesky(g, x, &dev, 0); }

/* max |L L^T - A| / max |A| over the lower triangle, L the lower triangle of l. */
double tu_residual(const double *l, const double *a, int64_t n) {
  double worst = 0, amax = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j <= i; j++) {
      double s = 0;
      for (int64_t k = 0; k <= j; k++) s += l[i * n + k] * l[j * n + k];
      worst = fmax(worst, fabs(s - a[i * n + j]));
      amax = fmax(amax, fabs(a[i * n + j]));
    }
  return worst / amax;
}


/* The first of the usual names of Chromium found on PATH, or NULL. */
const char *tu_find_chromium(void) {
  static char path[512];
  const char *names[] = {"chromium", "chromium-browser", "google-chrome"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "command -v %s 2>/dev/null", names[i]);
    FILE *p = popen(cmd, "r");
    if (p == NULL) continue;
    int found = fgets(path, sizeof path, p) != NULL;
    pclose(p);
    if (found) {
      path[strcspn(path, "\n")] = '\0';
      return path;
    }
  }
  return NULL;
}

double *tu_triangle(int64_t n, int upper) {
  double *t = malloc((size_t)(n * n) * sizeof *t);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) {
      int in = upper ? j >= i : j <= i;
      double u = (double)((i * 7919 + j * 104729) % 2001) / 1000.0 - 1.0; /* in [-1, 1] */
      t[i * n + j] = !in ? 1e30 : i == j ? 1.0 + 0.25 * (double)(i % 5) : 0.5 * u / sqrt((double)n);
    }
  return t;
}

double *tu_trtri(weft_runtime *rt, weft_device dev, int dtype, int64_t n, int upper, int64_t zero_at, int runs,
                 int *status) {
  weft_graph *g = tu_graph(rt);
  size_t es = dtype == WEFT_F32 ? 4 : 8;
  double *t = tu_triangle(n, upper), *w = malloc((size_t)(n * n) * sizeof *w);
  if (zero_at >= 0) t[zero_at * n + zero_at] = 0;
  if (zero_at >= 0 && n - 50 > zero_at) t[(n - 50) * n + n - 50] = 0; /* a later zero: the first must win */
  void *buf = malloc((size_t)(4 * n * n) * es);
  weft_tensor *tm, *wm;
  CHECK(weft_tensor_create(g, "T", (weft_dtype)dtype, 2, (int64_t[]){2 * n, 2 * n}, dev, weft_zeros(), &tm));
  CHECK(weft_tensor_create(g, "W", (weft_dtype)dtype, 2, (int64_t[]){2 * n, 2 * n}, dev, weft_full(7), &wm));
  CHECK(weft_tensor_tiles(g, tm, n, n));
  CHECK(weft_tensor_tiles(g, wm, n, n));
  for (int64_t i = 0; i < 2 * n; i++) /* T's tile (1, 0): rows n.., columns 0..n */
    for (int64_t j = 0; j < 2 * n; j++) {
      double v = i >= n && j < n ? t[(i - n) * n + j] : 3;
      if (dtype == WEFT_F32)
        ((float *)buf)[i * 2 * n + j] = (float)v;
      else
        ((double *)buf)[i * 2 * n + j] = v;
    }
  CHECK(weft_tensor_write(tm, buf, (size_t)(4 * n * n) * es));
  CHECK(weft_trtri(g, upper ? WEFT_UPPER : WEFT_LOWER, weft_tensor_tile(tm, 1, 0), weft_tensor_tile(wm, 0, 1)));
  char first[512] = "";
  for (int r = 0; r < runs; r++) { /* each run must end as the first did */
    int st = weft_graph_run(g);
    const char *e = st != WEFT_OK ? weft_last_error() : "";
    if (r == 0) {
      *status = st;
      snprintf(first, sizeof first, "%s", e);
    } else if (st != *status || strcmp(first, e) != 0) {
      fail_msg("run 1: %s (%s); run %d: %s (%s)", weft_status_name(*status), first, r + 1, weft_status_name(st), e);
    }
  }
  if (*status == WEFT_OK) {
    CHECK(weft_tensor_read(wm, buf, (size_t)(4 * n * n) * es));
    for (int64_t i = 0; i < n; i++) /* W's tile (0, 1) */
      for (int64_t j = 0; j < n; j++)
        w[i * n + j] = dtype == WEFT_F32 ? ((float *)buf)[i * 2 * n + n + j] : ((double *)buf)[i * 2 * n + n + j];
  }
  free(buf);
  free(t);
  weft_graph_destroy(g);
  return w;
}

double tu_trtri_error(const double *w, int64_t n, int upper) {
  double *t = tu_triangle(n, upper), worst = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) {
      int in = upper ? j >= i : j <= i;
      if (!in && w[i * n + j] != 0) worst = INFINITY; /* the other strict triangle: exactly zero */
      double s = 0;
      for (int64_t k = 0; k < n; k++) {
        int tin = upper ? k >= i : k <= i;
        if (tin) s += t[i * n + k] * w[k * n + j];
      }
      worst = fmax(worst, fabs(s - (i == j ? 1.0 : 0.0)));
    }
  free(t);
  return worst;
}
