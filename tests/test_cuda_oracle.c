/* test_cuda_oracle.c — the differential oracle across devices: seeded random programs whose
 * tensors and nodes are spread over the CPU and every GPU (automatic copies between them, in-
 * place updates, temporaries, kept results, fills, every built-in op), run several times by
 * the scheduler on the real devices (eager runs, and replays where the whole program is on
 * GPUs), must agree with the same program run serially on the CPU within float tolerance.
 * WEFT_ORACLE_PROGRAMS sets how many programs (default 160). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

typedef struct rng {
  uint64_t s;
} rng;

static uint32_t next(rng *r) {
  r->s ^= r->s << 13;
  r->s ^= r->s >> 7;
  r->s ^= r->s << 17;
  return (uint32_t)(r->s >> 16);
}
static int pick(rng *r, int n) { return (int)(next(r) % (uint32_t)n); }

enum { MAXT = 96 };

typedef struct prog {
  weft_graph *g;
  weft_tensor *t[MAXT];
  int nt;
  int dtype;
} prog;

/* Device choice d: 0 = cpu, k >= 1 = cuda:k-1; the reference maps all to the CPU. */
static weft_device dev_of(int d, int ref) { return ref || d == 0 ? weft_cpu() : weft_cuda(d - 1); }

static weft_tensor *new_tensor(prog *p, rng *r, int ndim, const int64_t *shape, int dev, int ref) {
  char name[16];
  snprintf(name, sizeof name, "in%d", p->nt);
  weft_tensor *t = NULL;
  CHECK(weft_tensor_create(p->g, name, p->dtype, ndim, shape, dev_of(dev, ref), weft_uniform(-1, 1, next(r)), &t));
  if (p->nt < MAXT) p->t[p->nt++] = t;
  return t;
}

static int same_shape(const weft_tensor *a, int ndim, const int64_t *shape) {
  if (weft_tensor_ndim(a) != ndim) return 0;
  for (int i = 0; i < ndim; i++)
    if (weft_tensor_dim(a, i) != shape[i]) return 0;
  return 1;
}

/* A tensor of the given shape: an existing one half of the time when there is one. */
static weft_tensor *find_or_make(prog *p, rng *r, int ndim, const int64_t *shape, int lo, int ndev, int ref) {
  int start = pick(r, p->nt), want = pick(r, 2);
  for (int k = 0; k < p->nt && want; k++) {
    weft_tensor *t = p->t[(start + k) % p->nt];
    if (same_shape(t, ndim, shape)) return t;
  }
  return new_tensor(p, r, ndim, shape, lo + pick(r, ndev - lo), ref);
}

/* The result pointer: NULL (a new tensor) or, one time in five, an existing tensor of the
 * result's shape on any device (the op then runs there and overwrites it). */
static weft_tensor *out_for(prog *p, rng *r, int ndim, const int64_t *shape) {
  if (pick(r, 5) != 0) return NULL;
  int start = pick(r, p->nt);
  for (int k = 0; k < p->nt; k++) {
    weft_tensor *t = p->t[(start + k) % p->nt];
    if (same_shape(t, ndim, shape)) return t;
  }
  return NULL;
}

static void add_result(prog *p, rng *r, weft_tensor *t) {
  int known = 0;
  for (int k = 0; k < p->nt && !known; k++) known = p->t[k] == t;
  if (!known && p->nt < MAXT) p->t[p->nt++] = t;
  if (!known && pick(r, 4) != 0) weft_tensor_keep(t);
}

static void build(prog *p, uint64_t seed, int ndev, int gpu_only, int ref) {
  rng r = {seed * 0x9e3779b97f4a7c15ull + 1};
  p->nt = 0;
  p->dtype = pick(&r, 3) == 0 ? WEFT_F64 : WEFT_F32;
  int lo = gpu_only ? 1 : 0;
  int ninit = 2 + pick(&r, 4);
  for (int i = 0; i < ninit; i++) {
    int64_t shape[2] = {1 + pick(&r, 24), 1 + pick(&r, 24)};
    if (pick(&r, 12) == 0) shape[pick(&r, 2)] = 0;
    new_tensor(p, &r, 2, shape, lo + pick(&r, ndev - lo), ref);
  }
  int nodes = 8 + pick(&r, 24);
  for (int i = 0; i < nodes; i++) {
    weft_tensor *a = p->t[pick(&r, p->nt)], *out;
    int nd = weft_tensor_ndim(a);
    int64_t sa[2] = {nd > 0 ? weft_tensor_dim(a, 0) : 1, nd > 1 ? weft_tensor_dim(a, 1) : 1};
    int op = pick(&r, 11);
    if (nd != 2 && (op == 0 || op == 8)) op = 4;
    switch (op) {
      case 0: { /* mm */
        int64_t sb[2] = {sa[1], 1 + pick(&r, 24)}, so[2] = {sa[0], sb[1]};
        weft_tensor *b = find_or_make(p, &r, 2, sb, lo, ndev, ref);
        out = out_for(p, &r, 2, so);
        CHECK(weft_mm(p->g, a, b, &out));
        break;
      }
      case 1:
      case 2:
      case 3: { /* add, sub, mul */
        int64_t shape[2] = {sa[0], sa[1]};
        weft_tensor *b = find_or_make(p, &r, nd, shape, lo, ndev, ref);
        out = out_for(p, &r, nd, shape);
        int (*fn)(weft_graph *, weft_tensor *, weft_tensor *, weft_tensor **) =
            op == 1 ? weft_add : op == 2 ? weft_sub : weft_mul;
        CHECK(fn(p->g, a, b, &out));
        break;
      }
      case 4:
        out = out_for(p, &r, nd, sa);
        CHECK(weft_scale(p->g, a, 0.5 + pick(&r, 3) * 0.25, &out));
        break;
      case 5:
        out = out_for(p, &r, nd, sa);
        CHECK(weft_relu(p->g, a, &out));
        break;
      case 6:
      case 7:
        out = out_for(p, &r, 0, NULL);
        CHECK((op == 6 ? weft_sum : weft_norm)(p->g, a, &out));
        break;
      case 8: { /* linear */
        int64_t sw[2] = {1 + pick(&r, 24), sa[1]}, so[2] = {sa[0], sw[0]}, sb[1] = {sw[0]};
        weft_tensor *w = find_or_make(p, &r, 2, sw, lo, ndev, ref);
        weft_tensor *bias = pick(&r, 2) ? find_or_make(p, &r, 1, sb, lo, ndev, ref) : NULL;
        out = out_for(p, &r, 2, so);
        CHECK(weft_linear(p->g, a, w, bias, &out));
        break;
      }
      case 9: /* copy to another device */
        out = NULL;
        CHECK(weft_copy(p->g, a, dev_of(lo + pick(&r, ndev - lo), ref), &out));
        break;
      default:
        CHECK(weft_fill(p->g, a, weft_uniform(-2, 2, next(&r))));
        out = a;
        break;
    }
    add_result(p, &r, out);
  }
}

static void programs_over_cpu_and_gpus_agree_with_the_cpu(void **state) {
  (void)state;
  GT_NEED_GPUS(1);
  const char *env = getenv("WEFT_ORACLE_PROGRAMS");
  int programs = env != NULL ? atoi(env) : 160;
  int ndev = 1 + gt_gpus();
  weft_runtime *gpu = gt_runtime(4, 0), *cpu = tu_runtime_cpu(1);
  int compared = 0;
  for (int k = 0; k < programs; k++) {
    int gpu_only = k % 3 == 0;
    prog pg = {.g = tu_graph(gpu)}, pc = {.g = tu_graph(cpu)};
    build(&pg, (uint64_t)k, ndev, gpu_only, 0);
    build(&pc, (uint64_t)k, ndev, gpu_only, 1);
    assert_int_equal(pg.nt, pc.nt);
    int runs = 1 + k % 3;
    for (int run = 0; run < runs; run++) {
      int rc = weft_graph_run(pg.g);
      if (rc != WEFT_OK) fail_msg("program %d run %d: %s", k, run, weft_last_error());
      CHECK(weft_graph_run(pc.g));
    }
    for (int i = 0; i < pg.nt; i++) {
      weft_tensor *a = pg.t[i], *b = pc.t[i];
      if (!weft_tensor_is_kept(a) || weft_tensor_bytes(a) == 0) continue;
      void *va = gt_read(a), *vb = gt_read(b);
      double err = gt_rel_err(va, vb, (size_t)weft_tensor_numel(a), pg.dtype);
      double tol = pg.dtype == WEFT_F32 ? 1e-3 : 1e-9;
      if (!(err <= tol))
        fail_msg("program %d (%s, %d runs): tensor %s differs from the serial CPU result (relative %g)", k,
                 gpu_only ? "GPUs only" : "CPU and GPUs", runs, weft_tensor_name(a), err);
      compared++;
      free(va);
      free(vb);
    }
    weft_graph_destroy(pg.g);
    weft_graph_destroy(pc.g);
  }
  print_message("%d programs, %d tensors compared\n", programs, compared);
  assert_true(compared > programs);
  weft_runtime_destroy(gpu);
  weft_runtime_destroy(cpu);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(programs_over_cpu_and_gpus_agree_with_the_cpu),
  };
  return GT_RUN(tests);
}
