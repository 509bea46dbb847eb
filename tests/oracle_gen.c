/* oracle_gen.c — see oracle_gen.h. Seeded random weft programs, built through the public API.
 *
 * The generator keeps the tensors made so far and, for each node, picks an op, then inputs
 * that fit its shape rule (creating a fitting input tensor when none exists, so every op kind
 * stays reachable), then where the result goes: a new tensor, or an existing one of the
 * inferred shape and dtype — one of the inputs where the shapes allow (in-place updates).
 * With several devices, tensors live on the CPU or a GPU at random, so inputs of ops cross
 * devices and weft inserts copies (user ops too, on a simulated machine, where the GPU computes
 * with the CPU kernel).
 * Every random choice comes from one splitmix64 stream seeded by the program's seed, and the
 * graph is queried only through weft's introspection calls, so a seed is a complete,
 * replayable description of a program.
 *
 * User ops: a family of ops that differ only in their access lists (read, write and
 * read-write over one to six tensors, and one with no argument at all). One kernel serves
 * them all: it folds everything the node may read into a checksum, then rewrites each tensor
 * it may write element by element from the tensor's old value (read-write only), the first
 * readable argument, the checksum and the node's parameter, through x / (1 + |x|) so values
 * stay bounded over long programs. */
#include "oracle_gen.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "weft/sim.h"

/* ---- the user ops --------------------------------------------------------------------------- */

typedef struct orc_params {
  double p;
  int32_t salt;
  int32_t pad; /* always 0: parameter bytes are fully defined */
} orc_params;

typedef struct orc_opdef {
  const char *name;
  int nargs;
  weft_access access[6];
} orc_opdef;

static const orc_opdef orc_ops[] = {
    {"orc_map", 2, {WEFT_READ, WEFT_WRITE}},
    {"orc_acc", 1, {WEFT_READ_WRITE}},
    {"orc_mix3", 3, {WEFT_READ, WEFT_READ, WEFT_READ_WRITE}},
    {"orc_split", 3, {WEFT_READ, WEFT_WRITE, WEFT_WRITE}},
    {"orc_rw2", 3, {WEFT_READ_WRITE, WEFT_READ_WRITE, WEFT_READ}},
    {"orc_gen", 1, {WEFT_WRITE}},
    {"orc_peek", 2, {WEFT_READ, WEFT_READ}},
    {"orc_many", 6, {WEFT_READ, WEFT_READ, WEFT_READ_WRITE, WEFT_WRITE, WEFT_READ, WEFT_READ_WRITE}},
    {"orc_nop", 0, {0}},
};
enum { N_ORC_OPS = sizeof orc_ops / sizeof orc_ops[0] };

static double get_elem(const weft_tensor *t, const void *data, int64_t j) {
  return weft_tensor_dtype(t) == WEFT_F32 ? (double)((const float *)data)[j]
                                          : ((const double *)data)[j];
}

static void set_elem(const weft_tensor *t, void *data, int64_t j, double v) {
  if (weft_tensor_dtype(t) == WEFT_F32)
    ((float *)data)[j] = (float)v;
  else
    ((double *)data)[j] = v;
}

static int orc_kernel(weft_kernel_ctx *ctx) {
  size_t psize = 0;
  const orc_params *prm = weft_ctx_params(ctx, &psize);
  if (psize != sizeof *prm) return weft_ctx_fail(ctx, "oracle op: %zu parameter bytes", psize);
  const orc_opdef *desc = weft_ctx_user(ctx);
  int n = weft_ctx_nargs(ctx);
  double sum = prm->salt * 0.001;
  int first_read = -1;
  for (int i = 0; i < n; i++) {
    if (!(desc->access[i] & WEFT_READ)) continue;
    const weft_tensor *t = weft_ctx_tensor(ctx, i);
    const void *d = weft_ctx_data(ctx, i);
    int64_t m = weft_tensor_numel(t);
    if (first_read < 0 && m > 0) first_read = i;
    for (int64_t j = 0; j < m; j++) sum += get_elem(t, d, j) * (double)((j % 7) + 1) * 0.125;
  }
  double chk = sum / (1.0 + fabs(sum));
  /* Some nodes take a little longer, so that runs interleave differently from run to run. */
  if (prm->salt % 5 == 0)
    for (volatile int spin = 0; spin < prm->salt * 20; spin = spin + 1) {
    }
  for (int i = 0; i < n; i++) {
    if (!(desc->access[i] & WEFT_WRITE)) continue;
    const weft_tensor *t = weft_ctx_tensor(ctx, i);
    void *d = weft_ctx_data(ctx, i);
    int64_t m = weft_tensor_numel(t);
    const weft_tensor *src = first_read >= 0 ? weft_ctx_tensor(ctx, first_read) : NULL;
    const void *sd = first_read >= 0 ? weft_ctx_data(ctx, first_read) : NULL;
    int64_t sn = src != NULL ? weft_tensor_numel(src) : 0;
    for (int64_t j = 0; j < m; j++) {
      double old = (desc->access[i] & WEFT_READ) ? get_elem(t, d, j) : 0.0;
      double in = sn > 0 ? get_elem(src, sd, j % sn) : 0.0;
      double x = 0.5 * old + in * prm->p + chk + 0.01 * (double)(j + i);
      set_elem(t, d, j, x / (1.0 + fabs(x)));
    }
  }
  return WEFT_OK;
}

void oracle_register_ops(weft_runtime *rt) {
  for (int k = 0; k < N_ORC_OPS; k++) {
    if (weft_op_find(rt, orc_ops[k].name) != NULL) continue;
    weft_op_desc d;
    memset(&d, 0, sizeof d);
    d.name = orc_ops[k].name;
    d.nargs = orc_ops[k].nargs;
    for (int i = 0; i < d.nargs; i++) d.access[i] = orc_ops[k].access[i];
    d.cpu = orc_kernel;
    /* A simulated GPU computes with the CPU kernel: the CUDA slot only lets nodes be placed
     * there (on a real GPU the ops have no kernel, and their nodes must run on the CPU). */
    if (weft_sim_active(rt)) d.cuda = orc_kernel;
    d.user = (void *)&orc_ops[k]; /* the kernel reads the access list from here */
    if (weft_op_register(rt, &d, NULL) != WEFT_OK) {
      fprintf(stderr, "oracle_register_ops: %s\n", weft_last_error());
      abort();
    }
  }
}

/* ---- the generator -------------------------------------------------------------------------- */

void oracle_cfg_init(oracle_cfg *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->min_nodes = 4;
  cfg->max_nodes = 32;
  cfg->max_inputs = 6;
  cfg->max_dim = 6;
  cfg->max_ndim = 4;
  cfg->f64_percent = 30;
  cfg->zero_dims = 1;
  cfg->user_ops = 1;
  cfg->keep_percent = 75;
  cfg->edge_percent = 15;
  cfg->cycle_per_mille = 15;
  cfg->devices = 1;
  cfg->ranks = 1;
}

/* The generator works on the program as the user writes it: its tensors (inputs and op
 * results) and its nodes, not the copies weft inserts between devices. So a program's random
 * choices do not depend on where its tensors live, and the same seed builds the same program
 * on a CPU-only runtime (a twin without copies) as on a machine with GPUs. */
typedef struct gen {
  weft_graph *g;
  const oracle_cfg *cfg;
  uint64_t rng;
  const weft_op *ops[N_ORC_OPS];
  weft_tensor **ts; /* the program's tensors, in creation order */
  size_t nts, cap_ts;
  weft_node **ns; /* the program's nodes, in insertion order */
  size_t nns, cap_ns;
} gen;

static int push_ptr(void ***arr, size_t *n, size_t *cap, void *p) {
  if (*n == *cap) {
    size_t c2 = *cap ? *cap * 2 : 64;
    void **a = realloc(*arr, c2 * sizeof *a);
    if (a == NULL) return WEFT_ENOMEM;
    *arr = a;
    *cap = c2;
  }
  (*arr)[(*n)++] = p;
  return WEFT_OK;
}

static int add_tensor(gen *s, weft_tensor *t) { return push_ptr((void ***)&s->ts, &s->nts, &s->cap_ts, t); }
static int add_node(gen *s, weft_node *n) { return push_ptr((void ***)&s->ns, &s->nns, &s->cap_ns, n); }

static void gen_end(gen *s) {
  free(s->ts);
  free(s->ns);
}

static uint64_t next_u64(gen *s) {
  uint64_t z = (s->rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static int below(gen *s, int n) { return n <= 1 ? 0 : (int)(next_u64(s) % (uint64_t)n); }
static int chance(gen *s, int percent) { return below(s, 100) < percent; }
static double unit(gen *s) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

static size_t ntensors(gen *s) { return s->nts; }

/* Tensors no generated op may pick: a Cholesky block's M and A (add_cholesky), tiles. */
static int private_tensor(weft_tensor *t) {
  return weft_tensor_parent(t) != NULL || strncmp(weft_tensor_name(t), "chol", 4) == 0;
}
static weft_tensor *tensor_at(gen *s, size_t i) { return s->ts[i]; }

static int64_t rand_dim(gen *s) {
  if (s->cfg->zero_dims && below(s, 40) == 0) return 0;
  int hi = s->cfg->max_dim > 0 ? s->cfg->max_dim : 1;
  return 1 + below(s, hi);
}

static weft_init rand_init(gen *s) {
  uint64_t seed = next_u64(s);
  switch (below(s, 6)) {
    case 0:
      return weft_zeros();
    case 1:
      return weft_ones();
    case 2:
      return weft_full(unit(s) * 4 - 2);
    case 3:
      return weft_normal(unit(s) - 0.5, unit(s), seed);
    default: {
      double lo = unit(s) * 2 - 1.5;
      return weft_uniform(lo, lo + unit(s) * 2, seed);
    }
  }
}

static int rand_dtype(gen *s) { return chance(s, s->cfg->f64_percent) ? WEFT_F64 : WEFT_F32; }

static int rand_ndim(gen *s) {
  static const int weights[5] = {8, 36, 40, 10, 6}; /* mostly 1-D and 2-D */
  int r = below(s, 100), acc = 0;
  for (int d = 0; d <= 4; d++) {
    acc += weights[d];
    if (r < acc) return d <= s->cfg->max_ndim ? d : s->cfg->max_ndim;
  }
  return 1;
}

/* Devices. A program tensor has an intended device, written in its name ("in3" on the CPU,
 * "in4_g0" on cuda:0), which does not depend on the runtime: where that GPU does not exist (a
 * CPU-only twin of the program) the tensor lives on the CPU instead, and every choice the
 * generator makes from intended devices is the same in both. Device 0 is the CPU, device d > 0
 * is cuda:(d-1). With one device no random number is drawn, so such programs do not change. */
static int rand_dev(gen *s) {
  if (s->cfg->devices <= 1 || !chance(s, 40)) return 0;
  return 1 + below(s, s->cfg->devices - 1);
}

static weft_device device_at(gen *s, int dev) {
  if (s->cfg->ranks > 1) return weft_on_rank(weft_cpu(), dev % s->cfg->ranks); /* intended device d: rank d */
  weft_device d = dev == 0 ? weft_cpu() : weft_cuda(dev - 1);
  return weft_device_exists(weft_graph_runtime(s->g), d) ? d : weft_cpu();
}

static int dev_of(const weft_tensor *t) {
  const char *g = strstr(weft_tensor_name(t), "_g");
  return g != NULL ? 1 + atoi(g + 2) : 0;
}

/* Names a program tensor: prefix, its index, and its intended device. */
static void program_name(gen *s, char *buf, size_t size, const char *prefix, int dev) {
  if (dev == 0)
    snprintf(buf, size, "%s%zu", prefix, s->nts);
  else
    snprintf(buf, size, "%s%zu_g%d", prefix, s->nts, dev - 1);
}

/* Creates an input tensor of the given dtype and shape on intended device dev. */
static int new_input_dev(gen *s, int dev, int dtype, int ndim, const int64_t *shape, weft_tensor **out) {
  char name[32];
  program_name(s, name, sizeof name, "in", dev);
  weft_device d = device_at(s, dev);
  if (s->cfg->auto_percent > 0 && chance(s, s->cfg->auto_percent)) d = weft_auto(); /* the planner's */
  int rc = weft_tensor_create(s->g, name, (weft_dtype)dtype, ndim, shape, d, rand_init(s), out);
  return rc != WEFT_OK ? rc : add_tensor(s, *out);
}

static int new_input(gen *s, int dtype, int ndim, const int64_t *shape, weft_tensor **out) {
  return new_input_dev(s, rand_dev(s), dtype, ndim, shape, out);
}

/* A random shape; a 1-D one is large (several CPU chunks of 2^18 elements) large_percent of
 * the time. */
static int rand_shape(gen *s, int64_t *shape) {
  int nd = rand_ndim(s);
  for (int i = 0; i < nd; i++) shape[i] = rand_dim(s);
  if (nd == 1 && s->cfg->large_percent > 0 && below(s, 100) < s->cfg->large_percent)
    shape[0] = ((int64_t)1 << 18) + below(s, 1 << 19);
  return nd;
}

static int new_random_input_dev(gen *s, int dev, weft_tensor **out) {
  int64_t shape[4];
  int nd = rand_shape(s, shape);
  return new_input_dev(s, dev, rand_dtype(s), nd, shape, out);
}

static int new_random_input(gen *s, weft_tensor **out) {
  int64_t shape[4];
  int nd = rand_shape(s, shape);
  return new_input(s, rand_dtype(s), nd, shape, out);
}

/* A random program tensor on intended device dev, or NULL. */
static weft_tensor *pick_on(gen *s, int dev) {
  size_t found = 0;
  weft_tensor *pick = NULL;
  for (size_t k = 0; k < s->nts; k++)
    if (dev_of(s->ts[k]) == dev && below(s, (int)++found) == 0) pick = s->ts[k];
  return pick;
}

static int same_shape(const weft_tensor *t, int dtype, int ndim, const int64_t *shape) {
  if ((int)weft_tensor_dtype(t) != dtype || weft_tensor_ndim(t) != ndim) return 0;
  for (int i = 0; i < ndim; i++)
    if (weft_tensor_dim(t, i) != shape[i]) return 0;
  return 1;
}

/* A random existing tensor of exactly this dtype and shape, or NULL. */
static weft_tensor *find_fit(gen *s, int dtype, int ndim, const int64_t *shape) {
  size_t n = ntensors(s), start = (size_t)below(s, (int)n), found = 0;
  weft_tensor *pick = NULL;
  for (size_t k = 0; k < n; k++) {
    weft_tensor *t = tensor_at(s, (start + k) % n);
    if (same_shape(t, dtype, ndim, shape) && below(s, (int)++found) == 0) pick = t;
  }
  return pick;
}

/* An existing tensor of this dtype and shape (sometimes a fresh input instead). */
static int fit_or_new(gen *s, int dtype, int ndim, const int64_t *shape, weft_tensor **out) {
  weft_tensor *t = chance(s, 80) ? find_fit(s, dtype, ndim, shape) : NULL;
  if (t != NULL) {
    *out = t;
    return WEFT_OK;
  }
  return new_input(s, dtype, ndim, shape, out);
}

/* A random existing tensor matching `pred` (any when pred is NULL), or NULL. */
static weft_tensor *pick_tensor(gen *s, int (*pred)(const weft_tensor *)) {
  size_t n = ntensors(s), found = 0;
  weft_tensor *pick = NULL;
  for (size_t k = 0; k < n; k++) {
    weft_tensor *t = tensor_at(s, k);
    if ((pred == NULL || pred(t)) && below(s, (int)++found) == 0) pick = t;
  }
  return pick;
}

static int is_matrix(const weft_tensor *t) { return weft_tensor_ndim(t) == 2; }

/* Where an op's result goes: NULL (a new tensor), or an existing tensor of the inferred shape,
 * preferring the inputs (in place) now and then. */
static weft_tensor *pick_out(gen *s, weft_tensor *const *ins, int nin, int dtype, int ndim,
                             const int64_t *shape) {
  int r = below(s, 100);
  if (r < 55) return NULL;
  if (r < 80) {
    for (int k = 0, i = below(s, nin); k < nin; k++, i = (i + 1) % nin)
      if (ins[i] != NULL && same_shape(ins[i], dtype, ndim, shape)) return ins[i];
  }
  return find_fit(s, dtype, ndim, shape);
}

/* A tensor's dtype and shape, to make another like it. */
typedef struct like {
  int dt, nd;
  int64_t sh[4];
} like;

static like like_of(const weft_tensor *t) {
  like l = {(int)weft_tensor_dtype(t), weft_tensor_ndim(t), {0, 0, 0, 0}};
  for (int i = 0; i < l.nd; i++) l.sh[i] = weft_tensor_dim(t, i);
  return l;
}

/* Any existing tensor, or a new input when there is none. */
static int any_tensor(gen *s, weft_tensor **out) {
  if ((*out = pick_tensor(s, NULL)) != NULL) return WEFT_OK;
  return new_random_input(s, out);
}

/* A random matrix, sometimes a new one. */
static int any_matrix(gen *s, weft_tensor **out) {
  if ((*out = pick_tensor(s, is_matrix)) != NULL && !chance(s, 15)) return WEFT_OK;
  int64_t sh[2] = {rand_dim(s), rand_dim(s)};
  return new_input(s, rand_dtype(s), 2, sh, out);
}

static int add_builtin(gen *s) {
  weft_graph *g = s->g;
  int rc;
  weft_tensor *a = NULL, *b = NULL, *c = NULL, *out = NULL;
  int kind = below(s, 11), copy_dev = 0;
  like l;
  if (kind == 10) { /* fill */
    if ((rc = any_tensor(s, &a)) != WEFT_OK) return rc;
    return weft_fill(g, a, rand_init(s));
  }
  if (kind == 0 || kind == 8) { /* mm: a [m,k] . b [k,n];  linear: a [n,in] . b [o,in]^T + c [o] */
    if ((rc = any_matrix(s, &a)) != WEFT_OK) return rc;
    l = like_of(a);
    int64_t k = l.sh[1], other = chance(s, 30) ? k : rand_dim(s);
    int64_t bs[2] = {kind == 0 ? k : other, kind == 0 ? other : k};
    if (kind == 0 && chance(s, 10) && l.sh[0] == k)
      b = a; /* a . a */
    else if ((rc = fit_or_new(s, l.dt, 2, bs, &b)) != WEFT_OK)
      return rc;
    int64_t cs[1] = {weft_tensor_dim(b, 0)};
    if (kind == 8 && chance(s, 60) && (rc = fit_or_new(s, l.dt, 1, cs, &c)) != WEFT_OK) return rc;
    l.sh[1] = weft_tensor_dim(b, kind == 0 ? 1 : 0); /* the result's shape */
  } else {
    if ((rc = any_tensor(s, &a)) != WEFT_OK) return rc;
    l = like_of(a);
    if (kind >= 1 && kind <= 3) { /* add, sub, mul: b of a's shape, or a itself */
      if (chance(s, 10))
        b = a;
      else if ((rc = fit_or_new(s, l.dt, l.nd, l.sh, &b)) != WEFT_OK)
        return rc;
    }
    if (kind == 6 || kind == 7) l.nd = 0; /* sum, norm: a scalar */
  }
  weft_tensor *ins[3] = {a, b, c};
  int nin = c != NULL ? 3 : b != NULL ? 2 : 1;
  weft_tensor *before = out = pick_out(s, ins, nin, l.dt, l.nd, l.sh);
  switch (kind) {
    case 0:
      rc = weft_mm(g, a, b, &out);
      break;
    case 1:
      rc = weft_add(g, a, b, &out);
      break;
    case 2:
      rc = weft_sub(g, a, b, &out);
      break;
    case 3:
      rc = weft_mul(g, a, b, &out);
      break;
    case 4:
      rc = weft_scale(g, a, unit(s) * 2.5 - 1.25, &out);
      break;
    case 5:
      rc = weft_relu(g, a, &out);
      break;
    case 6:
      rc = weft_sum(g, a, &out);
      break;
    case 7:
      rc = weft_norm(g, a, &out);
      break;
    case 8:
      rc = weft_linear(g, a, b, c, &out);
      break;
    default: /* copy cpu -> cpu, into a new tensor or an existing one (itself included) */
      copy_dev = rand_dev(s);
      rc = weft_copy(g, a, device_at(s, copy_dev), &out);
      break;
  }
  if (rc != WEFT_OK || before != NULL) return rc;
  /* A new result joins the program's tensors, named for the device it is made on (the op's:
   * its first input's), kept as often as the configuration asks. */
  char name[32];
  program_name(s, name, sizeof name, "r", kind == 9 ? copy_dev : dev_of(a));
  if ((rc = weft_tensor_set_name(out, name)) != WEFT_OK) return rc;
  if (chance(s, s->cfg->keep_percent)) weft_tensor_keep(out);
  return add_tensor(s, out);
}

static int add_user(gen *s) {
  int k = below(s, N_ORC_OPS);
  const weft_op *op = s->ops[k];
  weft_tensor *args[6];
  int rc, writes = 0;
  for (int i = 0; i < orc_ops[k].nargs; i++) writes |= orc_ops[k].access[i] & WEFT_WRITE;
  /* The node runs where its first written argument (else its first argument) lives, and every
   * written argument must live there: those are picked on one device; what it only reads may
   * live anywhere (weft copies it over). */
  int dev = rand_dev(s);
  for (int i = 0; i < orc_ops[k].nargs; i++) {
    int placed = (orc_ops[k].access[i] & WEFT_WRITE) || (i == 0 && !writes);
    /* Reuse existing tensors mostly, so accesses collide; repeat an argument now and then. */
    if (i > 0 && chance(s, 8)) {
      weft_tensor *again = args[below(s, i)];
      if (!placed || dev_of(again) == dev) {
        args[i] = again;
        continue;
      }
    }
    if (chance(s, 85) && (args[i] = placed ? pick_on(s, dev) : pick_tensor(s, NULL)) != NULL) continue;
    if ((rc = placed ? new_random_input_dev(s, dev, &args[i]) : new_random_input(s, &args[i])) != WEFT_OK)
      return rc;
  }
  orc_params p = {unit(s) * 2 - 1, (int32_t)below(s, 1000), 0};
  return weft_call(s->g, op, args, orc_ops[k].nargs, &p, sizeof p);
}

/* Two nodes conflict when they share a tensor and one of them writes it. */
static int conflict(const weft_node *a, const weft_node *b) {
  for (int i = 0; i < weft_node_nargs(a); i++) {
    weft_access ma;
    weft_tensor *ta = weft_node_arg(a, i, &ma);
    for (int k = 0; k < weft_node_nargs(b); k++) {
      weft_access mb;
      if (weft_node_arg(b, k, &mb) == ta && ((ma | mb) & WEFT_WRITE)) return 1;
    }
  }
  return 0;
}

/* Starts a generator for (seed, round) on g; finds the user ops if the configuration asks. */
/* inserted[i] = 1 when tensor i of g is the destination of a copy weft inserted. */
static unsigned char *inserted_tensors(weft_graph *g) {
  size_t nt = weft_graph_tensor_count(g);
  unsigned char *m = calloc(nt ? nt : 1, 1);
  if (m == NULL) return NULL;
  for (size_t i = 0; i < weft_graph_node_count(g); i++) {
    weft_node *n = weft_graph_node(g, i);
    if (weft_node_is_inserted(n)) m[weft_tensor_id(weft_node_arg(n, 1, NULL))] = 1;
  }
  return m;
}

size_t oracle_program_tensors(weft_graph *g, weft_tensor **out, size_t cap) {
  unsigned char *ins = inserted_tensors(g);
  size_t k = 0;
  for (size_t i = 0; ins != NULL && i < weft_graph_tensor_count(g); i++) {
    if (ins[i] || weft_tensor_parent(weft_graph_tensor(g, i)) != NULL) continue; /* tiles are their parents' */
    if (k < cap) out[k] = weft_graph_tensor(g, i);
    k++;
  }
  free(ins);
  return k;
}

/* Starts a generator for (seed, round) on g, whose program so far is every tensor and node but
 * the copies weft inserted; finds the user ops if the configuration asks. */
static int gen_start(gen *s, weft_graph *g, uint64_t seed, uint64_t round, const oracle_cfg *cfg) {
  memset(s, 0, sizeof *s);
  s->g = g;
  s->cfg = cfg;
  s->rng = seed * 0x2545F4914F6CDD1Dull + 0x1234567u + round * 0x9E3779B97F4A7C15ull;
  if (cfg->user_ops)
    for (int k = 0; k < N_ORC_OPS; k++)
      if ((s->ops[k] = weft_op_find(weft_graph_runtime(g), orc_ops[k].name)) == NULL) {
        fprintf(stderr, "oracle_build: op %s is not registered (call oracle_register_ops)\n",
                orc_ops[k].name);
        return WEFT_ENOENT;
      }
  unsigned char *ins = inserted_tensors(g);
  if (ins == NULL) return WEFT_ENOMEM;
  for (size_t i = 0; i < weft_graph_tensor_count(g); i++)
    if (!ins[i] && !private_tensor(weft_graph_tensor(g, i)) && add_tensor(s, weft_graph_tensor(g, i)) != WEFT_OK) {
      free(ins);
      return WEFT_ENOMEM;
    }
  free(ins);
  for (size_t i = 0; i < weft_graph_node_count(g); i++)
    if (!weft_node_is_inserted(weft_graph_node(g, i)) && add_node(s, weft_graph_node(g, i)) != WEFT_OK)
      return WEFT_ENOMEM;
  return WEFT_OK;
}

/* A tiled Cholesky block on one device: M [n, 2n] random, A = M M^T (gemm), A's tiles factored
 * (tu_cholesky; or every other time tu_cholesky_inverse, its panels by trmm; or a quarter of
 * the time tu_cholesky_upper, A = U^T U in the upper triangle), then s = sum(A)
 * over the whole. Its nodes and s join the program; M and A do
 * not (no later op may write them: a zero M would leave A singular at the next run), nor do
 * A's tiles (they are A's views). */

static int add_cholesky(gen *s) {
  int dev = rand_dev(s), dtype = rand_dtype(s), rc;
  int on_auto = s->cfg->auto_percent > 0 && chance(s, s->cfg->auto_percent); /* tiles placed one by one */
  int inverse = chance(s, 50), upper = !inverse && chance(s, 50);
  int64_t n = 2 + below(s, 3 * s->cfg->max_dim), b = 1 + below(s, (int)n);
  int64_t ms[2] = {n, 2 * n}, as[2] = {n, n};
  weft_tensor *m, *a, *sum = NULL;
  size_t n0 = weft_graph_node_count(s->g);
  char name[32];
  snprintf(name, sizeof name, "cholM%zu", weft_graph_tensor_count(s->g));
  if ((rc = weft_tensor_create(s->g, name, (weft_dtype)dtype, 2, ms, on_auto ? weft_auto() : device_at(s, dev),
                               weft_uniform(-1, 1, next_u64(s)), &m)) != WEFT_OK)
    return rc;
  snprintf(name, sizeof name, "cholA%zu", weft_graph_tensor_count(s->g));
  if ((rc = weft_tensor_create(s->g, name, (weft_dtype)dtype, 2, as, on_auto ? weft_auto() : device_at(s, dev), weft_zeros(),
                               &a)) != WEFT_OK ||
      (rc = weft_gemm(s->g, m, 0, m, 1, 1.0, 0.0, a)) != WEFT_OK || (rc = weft_tensor_tiles(s->g, a, b, b)) != WEFT_OK)
    return rc;
  size_t t0 = weft_graph_tensor_count(s->g);
  if ((rc = inverse ? tu_cholesky_inverse(s->g, a, on_auto ? weft_auto() : device_at(s, dev))
            : upper ? tu_cholesky_upper_tiled(s->g, a)
                    : tu_cholesky_tiled(s->g, a)) != WEFT_OK)
    return rc;
  /* The inverse panels' W tensors are the block's own too. */
  for (size_t i = t0; i < weft_graph_tensor_count(s->g); i++) {
    weft_tensor *w = weft_graph_tensor(s->g, i);
    snprintf(name, sizeof name, "cholW%zu", i);
    if (weft_tensor_parent(w) == NULL && (rc = weft_tensor_set_name(w, name)) != WEFT_OK) return rc;
  }
  if ((rc = weft_sum(s->g, a, &sum)) != WEFT_OK) return rc;
  program_name(s, name, sizeof name, "r", dev);
  if ((rc = weft_tensor_set_name(sum, name)) != WEFT_OK || (rc = add_tensor(s, sum)) != WEFT_OK) return rc;
  /* The block's nodes but the last (gen_nodes adds that one). */
  for (size_t i = n0; i + 1 < weft_graph_node_count(s->g); i++)
    if (!weft_node_is_inserted(weft_graph_node(s->g, i)) && (rc = add_node(s, weft_graph_node(s->g, i))) != WEFT_OK)
      return rc;
  return WEFT_OK;
}

/* Adds `count` nodes, with a new input now and then, a name now and then, and forward
 * explicit edges as the configuration asks. */
static int gen_nodes(gen *s, int count) {
  int rc;
  for (int k = 0; k < count; k++) {
    weft_tensor *t;
    if ((chance(s, 10) || ntensors(s) == 0) && (rc = new_random_input(s, &t)) != WEFT_OK) return rc;
    if (s->cfg->tiles_percent > 0 && chance(s, s->cfg->tiles_percent))
      rc = add_cholesky(s);
    else
      rc = s->cfg->user_ops && chance(s, 35) ? add_user(s) : add_builtin(s);
    if (rc != WEFT_OK) return rc;
    weft_node *last = weft_graph_last_node(s->g); /* the call's own node comes after its copies */
    if ((rc = add_node(s, last)) != WEFT_OK) return rc;
    size_t n = s->nns;
    if (chance(s, 10)) {
      char name[24];
      snprintf(name, sizeof name, "step%zu", n - 1);
      if ((rc = weft_node_set_name(last, name)) != WEFT_OK) return rc;
    }
    if (n >= 2 && chance(s, s->cfg->edge_percent)) {
      /* A forward edge into the new node, or between two earlier nodes. */
      size_t to = chance(s, 60) ? n - 1 : 1 + (size_t)below(s, (int)n - 1);
      size_t from = (size_t)below(s, (int)to);
      if ((rc = weft_graph_add_edge(s->g, s->ns[from], s->ns[to])) != WEFT_OK) return rc;
    }
  }
  return WEFT_OK;
}

/* The body of oracle_build_info, on a started generator. */
static int gen_program(gen *s, oracle_info *info) {
  const oracle_cfg *cfg = s->cfg;
  int rc;
  int ninputs = 1 + below(s, cfg->max_inputs > 0 ? cfg->max_inputs : 1);
  for (int i = 0; i < ninputs; i++) {
    weft_tensor *t;
    if ((rc = new_random_input(s, &t)) != WEFT_OK) return rc;
  }
  int span = cfg->max_nodes - cfg->min_nodes + 1;
  if ((rc = gen_nodes(s, cfg->min_nodes + below(s, span > 0 ? span : 1))) != WEFT_OK) return rc;
  size_t n = s->nns;
  if (below(s, 1000) < cfg->cycle_per_mille && n >= 2) {
    /* A backward edge j -> i between two conflicting nodes: serial order puts i before j,
     * so the analysis has a path i ~> j, and the edge closes a cycle. */
    for (int tries = 0; tries < 64; tries++) {
      size_t j = 1 + (size_t)below(s, (int)n - 1), i = (size_t)below(s, (int)j);
      if (!conflict(s->ns[i], s->ns[j])) continue;
      if ((rc = weft_graph_add_edge(s->g, s->ns[j], s->ns[i])) != WEFT_OK) return rc;
      if (info != NULL) {
        info->cycle = 1;
        info->cycle_from = weft_node_id(s->ns[j]);
        info->cycle_to = weft_node_id(s->ns[i]);
      }
      break;
    }
  }
  return WEFT_OK;
}

int oracle_build_info(weft_graph *g, uint64_t seed, const oracle_cfg *cfg, oracle_info *info) {
  oracle_cfg defaults;
  if (cfg == NULL) {
    oracle_cfg_init(&defaults);
    cfg = &defaults;
  }
  if (info != NULL) memset(info, 0, sizeof *info);
  gen s;
  int rc = gen_start(&s, g, seed, 0, cfg);
  if (rc == WEFT_OK) rc = gen_program(&s, info);
  gen_end(&s);
  if (info != NULL) {
    info->nodes = weft_graph_node_count(g);
    info->tensors = weft_graph_tensor_count(g);
  }
  return rc;
}

int oracle_grow(weft_graph *g, uint64_t seed, int round, int nodes, const oracle_cfg *cfg) {
  oracle_cfg defaults;
  if (cfg == NULL) {
    oracle_cfg_init(&defaults);
    cfg = &defaults;
  }
  gen s;
  int rc = gen_start(&s, g, seed, (uint64_t)round + 1, cfg);
  if (rc == WEFT_OK) rc = gen_nodes(&s, nodes);
  gen_end(&s);
  return rc;
}

int oracle_build(weft_graph *g, uint64_t seed, const oracle_cfg *cfg) {
  return oracle_build_info(g, seed, cfg, NULL);
}

/* ---- the serial interpreter ----------------------------------------------------------------- */

struct oracle_serial {
  weft_graph *g;
  size_t n;
  void **buf;          /* per tensor id; NULL for zero bytes */
  unsigned char *view; /* per tensor id: 1 for a tile, whose buf points into its parent's */
};

/* Tensor i's buffer: its own, filled by its initialiser, or a tile's place in its parent's. */
static int serial_buffer(oracle_serial *s, size_t i) {
  weft_tensor *t = weft_graph_tensor(s->g, i), *p = weft_tensor_parent(t);
  s->buf[i] = NULL;
  s->view[i] = p != NULL;
  if (p != NULL) {
    int64_t rows = weft_tensor_tile_count(p, 0), cols = weft_tensor_tile_count(p, 1);
    const weft_tensor *first = weft_tensor_tile(p, 0, 0);
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++)
        if (weft_tensor_tile(p, r, c) == t)
          s->buf[i] = (char *)s->buf[weft_tensor_id(p)] + (size_t)(r * weft_tensor_dim(first, 0) * weft_tensor_dim(p, 1) +
                                                                   c * weft_tensor_dim(first, 1)) *
                                                              weft_dtype_size(weft_tensor_dtype(t));
    return WEFT_OK;
  }
  size_t bytes = weft_tensor_bytes(t);
  if (bytes == 0) return WEFT_OK;
  if ((s->buf[i] = malloc(bytes)) == NULL) return WEFT_ENOMEM;
  weft__cpu_fill(s->buf[i], weft_tensor_dtype(t), weft_tensor_numel(t), weft_tensor_init(t));
  return WEFT_OK;
}

oracle_serial *oracle_serial_create(weft_graph *g) {
  oracle_serial *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->g = g;
  if (oracle_serial_sync(s) != WEFT_OK) {
    oracle_serial_destroy(s);
    return NULL;
  }
  return s;
}

void oracle_serial_destroy(oracle_serial *s) {
  if (s == NULL) return;
  for (size_t i = 0; i < s->n; i++)
    if (!s->view[i]) free(s->buf[i]);
  free(s->buf);
  free(s->view);
  free(s);
}

int oracle_serial_sync(oracle_serial *s) {
  size_t n = weft_graph_tensor_count(s->g);
  if (n <= s->n && s->buf != NULL) return WEFT_OK;
  void **buf = realloc(s->buf, (n ? n : 1) * sizeof *buf);
  if (buf == NULL) return WEFT_ENOMEM;
  s->buf = buf;
  unsigned char *view = realloc(s->view, n ? n : 1);
  if (view == NULL) return WEFT_ENOMEM;
  s->view = view;
  for (size_t i = s->n; i < n; i++) {
    if (serial_buffer(s, i) != WEFT_OK) {
      s->n = i;
      return WEFT_ENOMEM;
    }
    s->n = i + 1;
  }
  s->n = n;
  return WEFT_OK;
}

void *oracle_serial_data(oracle_serial *s, size_t id) { return id < s->n ? s->buf[id] : NULL; }

int oracle_serial_run(oracle_serial *s, char *msg, size_t msg_size) {
  size_t nn = weft_graph_node_count(s->g);
  for (size_t i = 0; i < nn; i++) {
    weft_node *node = weft_graph_node(s->g, i);
    weft_kernel_ctx ctx;
    char err[256] = "";
    memset(&ctx, 0, sizeof ctx);
    ctx.node = node;
    ctx.graph = s->g;
    ctx.index = (uint32_t)i;
    ctx.device = weft_node_device(node);
    ctx.err = err;
    ctx.err_size = sizeof err;
    int nargs = weft_node_nargs(node);
    void **data = nargs <= WEFT__CTX_INLINE ? ctx.inline_data : malloc((size_t)nargs * sizeof *data);
    if (data == NULL) return WEFT_ENOMEM;
    ctx.data = data;
    for (int a = 0; a < nargs; a++) ctx.data[a] = s->buf[weft_tensor_id(weft_node_arg(node, a, NULL))];
    int rc = weft__cpu_exec(&ctx);
    if (data != ctx.inline_data) free(data);
    if (rc != WEFT_OK) {
      snprintf(msg, msg_size, "serial interpreter: node %zu failed: %s", i, err);
      return rc;
    }
  }
  return WEFT_OK;
}

int oracle_compare(weft_graph *ga, oracle_serial *s, char *msg, size_t msg_size, long *bytes_compared) {
  /* The program's own tensors correspond one to one between the two graphs, in creation
   * order, whatever copies weft inserted in either. */
  size_t na = oracle_program_tensors(ga, NULL, 0), nb = oracle_program_tensors(s->g, NULL, 0);
  weft_tensor **ta = malloc((na ? na : 1) * sizeof *ta), **tb = malloc((nb ? nb : 1) * sizeof *tb);
  int bad = 0;
  if (ta == NULL || tb == NULL) {
    snprintf(msg, msg_size, "out of memory");
    bad = 1;
  } else if (na != nb) {
    snprintf(msg, msg_size, "the program has %zu tensors, its twin %zu", na, nb);
    bad = 1;
  } else {
    oracle_program_tensors(ga, ta, na);
    oracle_program_tensors(s->g, tb, nb);
  }
  for (size_t i = 0; i < na && !bad; i++) {
    weft_tensor *t = ta[i];
    size_t bytes = weft_tensor_bytes(t), id = weft_tensor_id(tb[i]);
    if (weft_tensor_is_kept(t) != weft_tensor_is_kept(tb[i])) {
      snprintf(msg, msg_size, "tensor %s is kept in one graph and not in its twin", weft_tensor_name(t));
      bad = 1;
      break;
    }
    unsigned char *got = malloc(bytes ? bytes : 1);
    if (got == NULL) {
      snprintf(msg, msg_size, "out of memory");
      bad = 1;
      break;
    }
    /* Across ranks every rank reads every tensor (the owner sends it): the same comparisons,
     * in the same order, everywhere. */
    int spread = weft_runtime_ranks(weft_graph_runtime(ga)) > 1;
    int rc = spread ? weft_tensor_read_all(t, got, bytes) : weft_tensor_read(t, got, bytes);
    if (!weft_tensor_is_kept(t)) {
      if (rc != WEFT_ESTATE) {
        snprintf(msg, msg_size, "reading temporary %s gave %s, not ESTATE", weft_tensor_name(t),
                 weft_status_name(rc));
        bad = 1;
      }
    } else if (rc != WEFT_OK) {
      snprintf(msg, msg_size, "reading %s failed: %s", weft_tensor_name(t), weft_last_error());
      bad = 1;
    } else if (bytes != 0 && memcmp(got, s->buf[id], bytes) != 0) {
      size_t es = weft_dtype_size(weft_tensor_dtype(t)), k = 0;
      const unsigned char *want = s->buf[id];
      while (memcmp(got + k * es, want + k * es, es) == 0) k++;
      double gv = es == 4 ? (double)((const float *)(const void *)got)[k] : ((const double *)(const void *)got)[k];
      double wv = es == 4 ? (double)((const float *)(const void *)want)[k] : ((const double *)(const void *)want)[k];
      snprintf(msg, msg_size, "tensor %s differs at element %zu: scheduler %.17g, serial %.17g",
               weft_tensor_name(t), k, gv, wv);
      bad = 1;
    } else if (bytes_compared != NULL) {
      *bytes_compared += (long)bytes;
    }
    free(got);
  }
  free(ta);
  free(tb);
  return bad;
}
