/* ops.c — the built-in ops and user-op calls: argument checks, shape rules, automatic copies,
 * and the one function that appends a node.
 *
 * Every op call is all-or-nothing: it either appends its node (and any inserted copies and
 * result tensor) or returns an error and leaves the graph as it was. Errors name the node the
 * call would have added, the op, and what is wrong with which argument. */
#include <stdio.h>
#include <math.h>
#include <string.h>

#include "graph/graph.h"


static const char *const kind_names[WEFT__OP_COUNT] = {
    "mm",   "add",  "sub",   "mul",  "scale", "relu", "sum",  "norm",
    "linear", "copy", "fill", "gemm", "potrf", "trsm", "syrk", "trmm", "trtri", "user"};

const char *weft__op_kind_name(int kind) {
  return (kind >= 0 && kind < WEFT__OP_COUNT) ? kind_names[kind] : "?";
}

int weft__op_kind_find(const char *name) {
  for (int k = 0; k < WEFT__OP_USER; k++)
    if (strcmp(kind_names[k], name) == 0) return k;
  return -1;
}

static char *dims_str(int ndim, const int64_t *shape, char *buf, size_t size) {
  int len = snprintf(buf, size, "[");
  for (int i = 0; i < ndim && len > 0 && (size_t)len < size; i++)
    len += snprintf(buf + len, size - (size_t)len, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (len > 0 && (size_t)len < size) snprintf(buf + len, size - (size_t)len, "]");
  return buf;
}

static char *shape_str(const weft_tensor *t, char *buf, size_t size) {
  return dims_str(t->ndim, t->shape, buf, size);
}

/* Context of one op call: what to undo if it fails half-way. */
typedef struct call {
  weft_graph *g;
  int kind;
  const char *opname;
  size_t nodes0, tensors0;
  uint32_t id; /* the id of the node this call adds */
} call;

static void call_begin(call *c, weft_graph *g, int kind, const char *opname) {
  c->g = g;
  c->kind = kind;
  c->opname = opname;
  c->nodes0 = g->nodes.len;
  c->tensors0 = g->tensors.len;
  c->id = (uint32_t)g->nodes.len;
}

static int call_fail(call *c, int rc) {
  /* Drop what this call appended; the arena keeps the bytes until the graph dies. */
  weft__graph_follow_close(c->g, 0);
  weft_tensor **ts = c->g->tensors.data;
  for (size_t i = 0; i < c->tensors0; i++) /* the call's copies went to the front of the caches */
    while (weft__copy_cache(ts[i]) != NULL && weft__copy_cache(ts[i])->id >= c->tensors0)
      ts[i]->rare->copy_cache = weft__copy_next(ts[i]->rare->copy_cache);
  c->g->nodes.len = c->nodes0;
  c->g->tensors.len = c->tensors0;
  uint32_t *autos = c->g->autos.data;
  while (c->g->autos.len > 0 && autos[c->g->autos.len - 1] >= c->tensors0) c->g->autos.len--;
  weft__graph_changed(c->g);
  return rc;
}

/* The device by address: passed by value it went on the stack (eight arguments leave it no
 * register), where weft_call wrote its three ints one by one and read them back as an 8-byte
 * word to pass it on, a store-forwarding stall in every call. */
static int append_node(weft_graph *g, const weft_device *dev, int kind, const weft_op *uop, const weft__arg *args,
                       int nargs, unsigned flags, weft__node_rare *rare, weft_node **out) {
  int rc = weft__vec_reserve(&g->nodes, 1);
  if (rc != WEFT_OK) return rc;
  if (g->nodes.len >= UINT32_MAX - 1) return weft__err(WEFT_ELIMIT, "graph has too many nodes");
  weft_node *n = weft__arena_alloc(&g->arena, sizeof *n + (size_t)nargs * sizeof(weft__arg), 8);
  if (n == NULL) return WEFT_ENOMEM;
  if (dev->kind == WEFT_DEVICE_AUTO) {
    flags |= WEFT__N_AUTO;
    g->nauto++;
  }
  /* Each field written once, with no memset of the whole first (as a tensor's). */
  n->graph = g;
  n->id = (uint32_t)g->nodes.len;
  n->kind = (uint8_t)kind;
  n->flags = (uint8_t)flags;
  n->nargs = (uint16_t)nargs;
  n->device = *dev;
  n->user_op = uop;
  n->args = (weft__arg *)(n + 1);
  n->rare = rare;
  n->params = NULL;
  n->params_size = 0;
  n->follow_next = NULL;
  /* Field by field, not memcpy: the caller has just written `args` (8 + 1 bytes an argument),
   * and a 16-byte load of two stores cannot take them from the store buffer: it waits until
   * every older store has reached the cache, fresh lines of earlier nodes included (a third of
   * a chain's build on the Zen 5 dev machine). */
  for (int i = 0; i < nargs; i++) n->args[i] = (weft__arg){args[i].t, args[i].mode};
  WEFT__VEC_PUSH(&g->nodes, n); /* reserved */
  int in_step = g->inc_version == g->version;
  g->version++;
  if (in_step) weft__graph_analyse_append(g, n);
  *out = n;
  return WEFT_OK;
}

/* Commits a node's writes to the copy caches: a written tensor's cached copy is stale, and so
 * is a written copy as the cache of its source (the user may write an inserted copy). */
static void invalidate_copies(weft_node *n) {
  for (int i = 0; i < n->nargs; i++) {
    if (!(n->args[i].mode & WEFT_WRITE)) continue;
    weft__tensor_rare *r = n->args[i].t->rare;
    if (r == NULL) continue; /* no copies, and not a copy */
    r->copy_cache = NULL;
    if (r->copy_src != NULL)
      for (weft_tensor **at = &r->copy_src->rare->copy_cache; *at != NULL; at = &(*at)->rare->copy_next)
        if (*at == n->args[i].t) {
          *at = r->copy_next;
          break;
        }
  }
}

/* Makes `*t` available on `dev` for reading: the tensor itself, a cached copy, or a new copy
 * node. In strict mode a tensor on another device is an error. */
static int localise(call *c, weft_tensor **t, weft_device dev, const char *argname) {
  char d1[32], d2[32];
  weft_tensor *src = *t;
  /* A tensor or a node the planner places gets its copies from the planner. */
  if (weft__same_device(src->device, dev) || weft__tensor_dev(src).kind == WEFT_DEVICE_AUTO || dev.kind == WEFT_DEVICE_AUTO)
    return WEFT_OK;
  if (c->g->strict)
    return weft__err(WEFT_EDEVICE,
                     "node %u '%s': argument %s (%s) lives on %s but the node runs on %s; "
                     "copy it there first (strict device mode)",
                     c->id, c->opname, argname, weft__tensor_name(src),
                     weft_device_str(src->device, d1, sizeof d1),
                     weft_device_str(dev, d2, sizeof d2));
  /* A GPU tensor crossing ranks goes through host memory, a copy node for each leg: to its
   * rank's CPU, across to the other rank's CPU, then to the GPU there; between the GPUs of
   * ranks on one host, as one copy (weft__gpu_direct). Each leg is cached like any copy, so
   * readers on several devices share them (src/backends/mpi). */
  if (src->device.rank != dev.rank && (src->device.kind != WEFT_DEVICE_CPU || dev.kind != WEFT_DEVICE_CPU) &&
      !weft__gpu_direct(c->g->rt, src->device, dev)) {
    int rc;
    if (src->device.kind != WEFT_DEVICE_CPU &&
        (rc = localise(c, &src, weft_on_rank(weft_cpu(), src->device.rank), argname)) != WEFT_OK)
      return rc;
    if (dev.kind != WEFT_DEVICE_CPU && (rc = localise(c, &src, weft_on_rank(weft_cpu(), dev.rank), argname)) != WEFT_OK)
      return rc;
    *t = src;
    if (weft__same_device(src->device, dev)) return WEFT_OK;
  }
  for (weft_tensor *k = weft__copy_cache(src); k != NULL; k = weft__copy_next(k))
    if (weft__same_device(k->device, dev)) {
      *t = k;
      return WEFT_OK;
    }
  /* The source's cache will list the copy: its record first, so that nothing is appended
   * when there is no room for it. */
  weft__tensor_rare *sr = weft__tensor_rare_of(src);
  if (sr == NULL) return WEFT_ENOMEM;
  char name[160];
  snprintf(name, sizeof name, "%s@%s", weft__tensor_name(src), weft_device_str(dev, d1, sizeof d1));
  weft_tensor *dst;
  int rc = weft__tensor_new(c->g, name, src->dtype, src->ndim, src->shape, dev, weft_zeros(),
                            WEFT__T_AUTO | WEFT__T_INSERTED, &dst);
  if (rc != WEFT_OK) return rc;
  weft__arg args[2] = {{src, WEFT_READ}, {dst, WEFT_WRITE}};
  weft_device run_on = src->device.kind != WEFT_DEVICE_CPU ? src->device : dev;
  weft_node *n;
  if ((rc = append_node(c->g, &run_on, WEFT__OP_COPY, NULL, args, 2, WEFT__N_INSERTED, NULL, &n)) != WEFT_OK)
    return rc;
  /* dst has its record: it has a name. */
  dst->rare->copy_next = sr->copy_cache;
  sr->copy_cache = dst;
  dst->rare->copy_src = src;
  c->id = (uint32_t)c->g->nodes.len;
  *t = dst;
  return WEFT_OK;
}

static int check_tensor(call *c, const weft_tensor *t, const char *argname) {
  if (t == NULL)
    return weft__err(WEFT_EINVAL, "node %u '%s': argument %s is NULL", c->id, c->opname, argname);
  if (t->graph != c->g)
    return weft__err(WEFT_EINVAL, "node %u '%s': argument %s (%s) belongs to another graph", c->id,
                     c->opname, argname, weft__tensor_name(t));
  if (weft__tensor_distributed(t))
    return weft__err(WEFT_EDEVICE,
                     "node %u '%s': argument %s (%s) is distributed over %d x %d %s and has no one home: "
                     "ops take its tiles (docs/distributed.md)",
                     c->id, c->opname, argname, weft__tensor_name(t), t->grid->P, t->grid->Q, weft__grid_places(t->grid));
  return WEFT_OK;
}

/* A strided tile (narrower than the tensor it views) reaches only the dense linear-algebra
 * ops, which take a row stride; every other kernel reads contiguous elements. */
static int check_contiguous(call *c, const weft_tensor *t, const char *argname) {
  if (weft__tensor_contiguous(t)) return WEFT_OK;
  return weft__err(WEFT_ESHAPE,
                   "node %u '%s': argument %s (%s) is a strided tile (%lld columns of a tensor of %lld); "
                   "only gemm, potrf, trsm, syrk and copy take strided tiles",
                   c->id, c->opname, argname, weft__tensor_name(t), (long long)t->shape[1],
                   (long long)t->view->ld);
}

static int check_same_dtype(call *c, const weft_tensor *a, const weft_tensor *b, const char *an,
                            const char *bn) {
  if (a->dtype != b->dtype)
    return weft__err(WEFT_EDTYPE, "node %u '%s': %s (%s) is %s but %s (%s) is %s", c->id, c->opname,
                     an, weft__tensor_name(a), weft_dtype_name(a->dtype), bn, weft__tensor_name(b),
                     weft_dtype_name(b->dtype));
  return WEFT_OK;
}

/* Checks a given result tensor against the inferred shape and dtype. */
static int check_out(call *c, const weft_tensor *out, int dtype, int ndim, const int64_t *shape) {
  char s1[96], s2[96];
  int rc = check_tensor(c, out, "out");
  if (rc != WEFT_OK) return rc;
  if (out->dtype != dtype)
    return weft__err(WEFT_EDTYPE, "node %u '%s': result %s is %s but the op produces %s", c->id,
                     c->opname, weft__tensor_name(out), weft_dtype_name(out->dtype),
                     weft_dtype_name(dtype));
  int same = out->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = out->shape[i] == shape[i];
  if (!same)
    return weft__err(WEFT_ESHAPE, "node %u '%s': result %s has shape %s but the op produces %s",
                     c->id, c->opname, weft__tensor_name(out), shape_str(out, s1, sizeof s1),
                     dims_str(ndim, shape, s2, sizeof s2));
  return WEFT_OK;
}

/* A new result's element count must fit (as weft__tensor_new checks, but naming the node). */
static int check_result_size(call *c, int ndim, const int64_t *shape) {
  int64_t numel;
  if (weft__shape_numel(ndim, shape, &numel)) return WEFT_OK;
  char s1[96];
  return weft__err(WEFT_ESHAPE, "node %u '%s': the result %s has too many elements", c->id,
                   c->opname, dims_str(ndim, shape, s1, sizeof s1));
}

/* The common tail of every built-in op with a result: localise the inputs, create or check
 * the result, append the node. `ins` are modified in place to their localised tensors. */
static int finish_op(call *c, weft_tensor **ins, const char *const *names, int nin, int dtype,
                     int ndim, const int64_t *shape, weft_tensor **out, double alpha) {
  int rc;
  if (out == NULL)
    return weft__err(WEFT_EINVAL, "node %u '%s': the out pointer is NULL", c->id, c->opname);
  weft_device dev = weft__tensor_dev(*out != NULL ? *out : ins[0]);
  if (*out != NULL && (rc = check_out(c, *out, dtype, ndim, shape)) != WEFT_OK) return rc;
  if (*out != NULL && (rc = check_contiguous(c, *out, "out")) != WEFT_OK) return rc;
  for (int i = 0; i < nin; i++)
    if ((rc = check_contiguous(c, ins[i], names[i])) != WEFT_OK) return rc;
  if (*out == NULL && (rc = check_result_size(c, ndim, shape)) != WEFT_OK) return rc;
  if ((rc = weft__graph_check_idle(c->g, c->opname)) != WEFT_OK) return rc;
  for (int i = 0; i < nin; i++)
    if ((rc = localise(c, &ins[i], dev, names[i])) != WEFT_OK) return call_fail(c, rc);
  weft_tensor *res = *out;
  if (res == NULL &&
      (rc = weft__tensor_new(c->g, NULL, dtype, ndim, shape, dev, weft_zeros(), WEFT__T_AUTO, &res)) !=
          WEFT_OK)
    return call_fail(c, rc);
  weft__arg args[4];
  for (int i = 0; i < nin; i++) args[i] = (weft__arg){ins[i], WEFT_READ};
  args[nin] = (weft__arg){res, WEFT_WRITE};
  /* A factor of +0 is what a node without its rare fields reads (a -0 is kept: its sign is in
   * the results). */
  weft__node_rare *rare = NULL;
  if (signbit(alpha) || alpha != 0) {
    if ((rare = weft__node_rare_new(c->g)) == NULL) return call_fail(c, WEFT_ENOMEM);
    rare->alpha = alpha;
  }
  weft_node *n;
  if ((rc = append_node(c->g, &dev, c->kind, NULL, args, nin + 1, 0, rare, &n)) != WEFT_OK)
    return call_fail(c, rc);
  invalidate_copies(n);
  *out = res;
  return WEFT_OK;
}

int weft_mm(weft_graph *g, weft_tensor *a, weft_tensor *b, weft_tensor **out) {
  char s1[96], s2[96];
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_mm: graph is NULL");
  call c;
  call_begin(&c, g, WEFT__OP_MM, "mm");
  int rc;
  if ((rc = check_tensor(&c, a, "a")) || (rc = check_tensor(&c, b, "b"))) return rc;
  if (a->ndim != 2 || b->ndim != 2)
    return weft__err(WEFT_ESHAPE, "node %u 'mm': operands must be 2-D matrices, got a (%s) %s and b (%s) %s",
                     c.id, weft__tensor_name(a), shape_str(a, s1, sizeof s1), weft__tensor_name(b),
                     shape_str(b, s2, sizeof s2));
  if (a->shape[1] != b->shape[0])
    return weft__err(WEFT_ESHAPE,
                     "node %u 'mm': inner dimensions differ: a (%s) is %s, b (%s) is %s",
                     c.id, weft__tensor_name(a), shape_str(a, s1, sizeof s1), weft__tensor_name(b),
                     shape_str(b, s2, sizeof s2));
  if ((rc = check_same_dtype(&c, a, b, "a", "b"))) return rc;
  int64_t shape[2] = {a->shape[0], b->shape[1]};
  weft_tensor *ins[2] = {a, b};
  static const char *const names[2] = {"a", "b"};
  return finish_op(&c, ins, names, 2, a->dtype, 2, shape, out, 0);
}

static int binary(weft_graph *g, int kind, weft_tensor *a, weft_tensor *b, weft_tensor **out) {
  char s1[96], s2[96];
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_%s: graph is NULL", weft__op_kind_name(kind));
  call c;
  call_begin(&c, g, kind, weft__op_kind_name(kind));
  int rc;
  if ((rc = check_tensor(&c, a, "a")) || (rc = check_tensor(&c, b, "b"))) return rc;
  int same = a->ndim == b->ndim;
  for (int i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
  if (!same)
    return weft__err(WEFT_ESHAPE, "node %u '%s': shapes differ: a (%s) is %s, b (%s) is %s", c.id,
                     c.opname, weft__tensor_name(a), shape_str(a, s1, sizeof s1),
                     weft__tensor_name(b), shape_str(b, s2, sizeof s2));
  if ((rc = check_same_dtype(&c, a, b, "a", "b"))) return rc;
  weft_tensor *ins[2] = {a, b};
  static const char *const names[2] = {"a", "b"};
  return finish_op(&c, ins, names, 2, a->dtype, a->ndim, a->shape, out, 0);
}

int weft_add(weft_graph *g, weft_tensor *a, weft_tensor *b, weft_tensor **out) {
  return binary(g, WEFT__OP_ADD, a, b, out);
}
int weft_sub(weft_graph *g, weft_tensor *a, weft_tensor *b, weft_tensor **out) {
  return binary(g, WEFT__OP_SUB, a, b, out);
}
int weft_mul(weft_graph *g, weft_tensor *a, weft_tensor *b, weft_tensor **out) {
  return binary(g, WEFT__OP_MUL, a, b, out);
}

static int unary(weft_graph *g, int kind, weft_tensor *x, double alpha, int reduce,
                 weft_tensor **out) {
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_%s: graph is NULL", weft__op_kind_name(kind));
  call c;
  call_begin(&c, g, kind, weft__op_kind_name(kind));
  int rc;
  if ((rc = check_tensor(&c, x, "x"))) return rc;
  weft_tensor *ins[1] = {x};
  static const char *const names[1] = {"x"};
  if (reduce) return finish_op(&c, ins, names, 1, x->dtype, 0, NULL, out, alpha);
  return finish_op(&c, ins, names, 1, x->dtype, x->ndim, x->shape, out, alpha);
}

int weft_scale(weft_graph *g, weft_tensor *x, double alpha, weft_tensor **out) {
  return unary(g, WEFT__OP_SCALE, x, alpha, 0, out);
}
int weft_relu(weft_graph *g, weft_tensor *x, weft_tensor **out) {
  return unary(g, WEFT__OP_RELU, x, 0, 0, out);
}
int weft_sum(weft_graph *g, weft_tensor *x, weft_tensor **out) {
  return unary(g, WEFT__OP_SUM, x, 0, 1, out);
}
int weft_norm(weft_graph *g, weft_tensor *x, weft_tensor **out) {
  return unary(g, WEFT__OP_NORM, x, 0, 1, out);
}

int weft_linear(weft_graph *g, weft_tensor *x, weft_tensor *w, weft_tensor *b, weft_tensor **out) {
  char s1[96], s2[96];
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_linear: graph is NULL");
  call c;
  call_begin(&c, g, WEFT__OP_LINEAR, "linear");
  int rc;
  if ((rc = check_tensor(&c, x, "x")) || (rc = check_tensor(&c, w, "w"))) return rc;
  if (b != NULL && (rc = check_tensor(&c, b, "b"))) return rc;
  if (x->ndim != 2 || w->ndim != 2)
    return weft__err(WEFT_ESHAPE, "node %u 'linear': x (%s) %s and w (%s) %s must be 2-D", c.id,
                     weft__tensor_name(x), shape_str(x, s1, sizeof s1), weft__tensor_name(w),
                     shape_str(w, s2, sizeof s2));
  if (x->shape[1] != w->shape[1])
    return weft__err(WEFT_ESHAPE,
                     "node %u 'linear': x (%s) is %s but w (%s) is %s; w must be [out, %lld]", c.id,
                     weft__tensor_name(x), shape_str(x, s1, sizeof s1), weft__tensor_name(w),
                     shape_str(w, s2, sizeof s2), (long long)x->shape[1]);
  if ((rc = check_same_dtype(&c, x, w, "x", "w"))) return rc;
  if (b != NULL) {
    if (b->ndim != 1 || b->shape[0] != w->shape[0])
      return weft__err(WEFT_ESHAPE, "node %u 'linear': bias (%s) is %s but must be [%lld]", c.id,
                       weft__tensor_name(b), shape_str(b, s1, sizeof s1), (long long)w->shape[0]);
    if ((rc = check_same_dtype(&c, x, b, "x", "b"))) return rc;
  }
  int64_t shape[2] = {x->shape[0], w->shape[0]};
  weft_tensor *ins[3] = {x, w, b};
  static const char *const names[3] = {"x", "w", "b"};
  return finish_op(&c, ins, names, b != NULL ? 3 : 2, x->dtype, 2, shape, out, 0);
}

int weft_copy(weft_graph *g, weft_tensor *src, weft_device device, weft_tensor **out) {
  char d1[32];
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_copy: graph is NULL");
  call c;
  call_begin(&c, g, WEFT__OP_COPY, "copy");
  int rc;
  /* Strided tiles too, on either side: a copy is a 2-D copy (row by row, cudaMemcpy2DAsync). */
  if ((rc = check_tensor(&c, src, "src")) != WEFT_OK) return rc;
  if (out == NULL) return weft__err(WEFT_EINVAL, "node %u 'copy': the out pointer is NULL", c.id);
  if (*out != NULL) {
    if ((rc = check_out(&c, *out, src->dtype, src->ndim, src->shape)) != WEFT_OK) return rc;
    if (!weft__tensor_contiguous(*out) && (*out)->device.rank != src->device.rank)
      return weft__err(WEFT_ENOTSUP, "node %u 'copy': out (%s) is a strided tile on rank %d, and a copy from rank %d "
                       "into a strided tile is not built; copy into a contiguous tensor there", c.id,
                       weft__tensor_name(*out), (*out)->device.rank, src->device.rank);
    device = weft__tensor_dev(*out);
  } else if (!weft_device_exists(g->rt, device)) {
    return weft__err(WEFT_EDEVICE, "node %u 'copy': the runtime has no device %s", c.id,
                     weft_device_str(device, d1, sizeof d1));
  }
  if ((rc = weft__graph_check_idle(g, "copy")) != WEFT_OK) return rc;
  weft_tensor *dst = *out;
  if (dst == NULL && (rc = weft__tensor_new(g, NULL, src->dtype, src->ndim, src->shape, device,
                                            weft_zeros(), WEFT__T_AUTO, &dst)) != WEFT_OK)
    return rc;
  /* Between ranks with a GPU on either side: through host memory (localise's legs), the last
   * leg this node; between the GPUs of ranks on one host, one copy into a tensor of its own
   * there (localise's, whose storage the sender can map), then this node. */
  int direct = weft__tensor_dev(src).kind != WEFT_DEVICE_AUTO && weft__tensor_dev(dst).kind != WEFT_DEVICE_AUTO &&
               weft__gpu_direct(g->rt, src->device, dst->device);
  if (direct && *out != NULL && (rc = localise(&c, &src, dst->device, "src")) != WEFT_OK) return call_fail(&c, rc);
  if (!direct && src->device.rank != dst->device.rank && weft__tensor_dev(src).kind != WEFT_DEVICE_AUTO &&
      weft__tensor_dev(dst).kind != WEFT_DEVICE_AUTO &&
      (src->device.kind != WEFT_DEVICE_CPU || dst->device.kind != WEFT_DEVICE_CPU)) {
    if (src->device.kind != WEFT_DEVICE_CPU &&
        (rc = localise(&c, &src, weft_on_rank(weft_cpu(), src->device.rank), "src")) != WEFT_OK)
      return call_fail(&c, rc);
    if (dst->device.kind != WEFT_DEVICE_CPU &&
        (rc = localise(&c, &src, weft_on_rank(weft_cpu(), dst->device.rank), "src")) != WEFT_OK)
      return call_fail(&c, rc);
  }
  weft__arg args[2] = {{src, WEFT_READ}, {dst, WEFT_WRITE}};
  weft_device sd = weft__tensor_dev(src), dd = weft__tensor_dev(dst);
  /* On its GPU side; the planner's when either side is. */
  weft_device run_on = sd.kind == WEFT_DEVICE_AUTO || dd.kind == WEFT_DEVICE_AUTO ? weft_auto()
                       : sd.kind != WEFT_DEVICE_CPU                              ? sd
                                                                                 : dd;
  weft_node *n;
  if ((rc = append_node(g, &run_on, WEFT__OP_COPY, NULL, args, 2, 0, NULL, &n)) != WEFT_OK)
    return call_fail(&c, rc);
  invalidate_copies(n);
  *out = dst;
  return WEFT_OK;
}

int weft_fill(weft_graph *g, weft_tensor *t, weft_init init) {
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_fill: graph is NULL");
  call c;
  call_begin(&c, g, WEFT__OP_FILL, "fill");
  int rc;
  if ((rc = check_tensor(&c, t, "t")) || (rc = check_contiguous(&c, t, "t"))) return rc;
  if (init.kind < WEFT_INIT_ZEROS || init.kind > WEFT_INIT_EYE ||
      (init.kind == WEFT_INIT_UNIFORM && !(init.a <= init.b)) ||
      (init.kind == WEFT_INIT_NORMAL && !(init.b >= 0)))
    return weft__err(WEFT_EINVAL, "node %u 'fill': invalid initialiser (kind %d, %g, %g)", c.id,
                     init.kind, init.a, init.b);
  if (init.kind == WEFT_INIT_EYE) {
    if (t->ndim != 2)
      return weft__err(WEFT_ESHAPE, "node %u 'fill': eye is for 2-D tensors; %s has %d dimension%s", c.id,
                       weft__tensor_name(t), t->ndim, t->ndim == 1 ? "" : "s");
    init.seed = (uint64_t)t->shape[1]; /* the diagonal of t itself */
  }
  if ((rc = weft__graph_check_idle(g, "fill")) != WEFT_OK) return rc;
  weft__arg arg = {t, WEFT_WRITE};
  weft_device dev = weft__tensor_dev(t);
  weft__node_rare *rare = weft__node_rare_new(g);
  if (rare == NULL) return WEFT_ENOMEM;
  rare->fill = init;
  weft_node *n = NULL;
  if ((rc = append_node(g, &dev, WEFT__OP_FILL, NULL, &arg, 1, 0, rare, &n)) != WEFT_OK) return rc;
  invalidate_copies(n);
  return WEFT_OK;
}

/* The access mode of argument i of a call of op (a listed one, or the op's rest). */
static weft_access mode_of(const weft_op *op, int i) {
  return i < op->desc.nargs ? op->desc.access[i] : op->desc.rest;
}

int weft_call(weft_graph *g, const weft_op *op, weft_tensor *const *args, int nargs,
              const void *params, size_t params_size) {
  char d1[32], d2[32], argname[16];
  if (g == NULL || op == NULL) return weft__err(WEFT_EINVAL, "weft_call: graph or op is NULL");
  call c;
  call_begin(&c, g, WEFT__OP_USER, op->name);
  if (op->desc.rest == 0 && nargs != op->desc.nargs)
    return weft__err(WEFT_EINVAL, "node %u '%s': the op takes %d arguments, got %d", c.id, op->name,
                     op->desc.nargs, nargs);
  if (op->desc.rest != 0 && (nargs < op->desc.nargs || nargs > WEFT_MAX_CALL_ARGS))
    return weft__err(WEFT_EINVAL, "node %u '%s': the op takes %d to %d arguments, got %d", c.id, op->name,
                     op->desc.nargs, WEFT_MAX_CALL_ARGS, nargs);
  if (nargs > 0 && args == NULL)
    return weft__err(WEFT_EINVAL, "node %u '%s': args is NULL", c.id, op->name);
  if (params_size > 0 && params == NULL)
    return weft__err(WEFT_EINVAL, "node %u '%s': params is NULL with size %zu", c.id, op->name,
                     params_size);
  int rc;
  /* The devices by address (weft__tensor_devp) and dev copied once: a weft_device returned by
   * value per argument went through the stack, three 4-byte stores read back as an 8-byte word,
   * a store-forwarding stall on every argument of every call. */
  const weft_device *devp = NULL;
  for (int i = 0; i < nargs; i++) {
    if (args[i] == NULL || args[i]->graph != g || !weft__tensor_contiguous(args[i])) {
      snprintf(argname, sizeof argname, "%d", i);
      if ((rc = check_tensor(&c, args[i], argname)) != WEFT_OK) return rc;
      return check_contiguous(&c, args[i], argname);
    }
    /* Where its first written argument lives; an auto one gives way to a fixed one, whose
     * device the planner then runs the node on. */
    const weft_device *wd = weft__tensor_devp(args[i]);
    if ((mode_of(op, i) & WEFT_WRITE) &&
        (devp == NULL || (devp->kind == WEFT_DEVICE_AUTO && wd->kind != WEFT_DEVICE_AUTO)))
      devp = wd;
  }
  if (devp == NULL && nargs > 0) devp = weft__tensor_devp(args[0]);
  weft_device dev = devp != NULL ? *devp : (weft_device){WEFT_DEVICE_CPU, 0, 0};
  for (int i = 0; i < nargs; i++)
    if ((mode_of(op, i) & WEFT_WRITE) && weft__tensor_devp(args[i])->kind != WEFT_DEVICE_AUTO &&
        !weft__same_device(*weft__tensor_devp(args[i]), dev))
      return weft__err(WEFT_EDEVICE,
                       "node %u '%s': written argument %d (%s) lives on %s but the node runs on %s",
                       c.id, op->name, i, weft__tensor_name(args[i]),
                       weft_device_str(weft__tensor_dev(args[i]), d1, sizeof d1),
                       weft_device_str(dev, d2, sizeof d2));
  if ((dev.kind == WEFT_DEVICE_CPU && op->desc.cpu == NULL) ||
      (dev.kind == WEFT_DEVICE_CUDA && op->desc.cuda == NULL) ||
      (dev.kind == WEFT_DEVICE_AUTO && op->desc.cpu == NULL && op->desc.cuda == NULL))
    return weft__err(WEFT_EDEVICE, "node %u '%s': the op has no kernel for %s", c.id, op->name,
                     weft_device_str(dev, d1, sizeof d1));
  if ((rc = weft__graph_check_idle(g, op->name)) != WEFT_OK) return rc;
  /* The arguments as the node will hold them (a copy in place of a read input on another
   * device), until append_node copies them into the node: on the stack for the usual few, else
   * in the graph's buffer for them (in the arena, each call's copy stayed as long as the graph:
   * 528 bytes a node of Task Bench's all_to_all at width 32, a third of what it built). */
  weft__arg small[WEFT_MAX_ARGS], *local = small;
  if (nargs > WEFT_MAX_ARGS) {
    if (weft__vec_reserve(&g->call_args, (size_t)nargs) != WEFT_OK)
      return call_fail(&c, weft__oom("a call's arguments"));
    local = g->call_args.data;
  }
  for (int i = 0; i < nargs; i++) {
    weft_tensor *t = args[i];
    weft_access mode = mode_of(op, i);
    if (mode == WEFT_READ && !weft__same_device(t->device, dev) && weft__tensor_dev(t).kind != WEFT_DEVICE_AUTO &&
        dev.kind != WEFT_DEVICE_AUTO) {
      snprintf(argname, sizeof argname, "%d", i);
      if ((rc = localise(&c, &t, dev, argname)) != WEFT_OK) return call_fail(&c, rc);
    }
    local[i] = (weft__arg){t, (uint8_t)mode};
  }
  /* The tensors in order, for the op's cost hint (planners and the simulator call it). */
  weft__node_rare *rare = NULL;
  if (op->desc.cost != NULL) {
    const weft_tensor **targs = weft__arena_alloc(&g->arena, (size_t)(nargs ? nargs : 1) * sizeof *targs, 8);
    if (targs == NULL) return call_fail(&c, weft__oom("a call's arguments"));
    for (int i = 0; i < nargs; i++) targs[i] = local[i].t;
    if ((rare = weft__node_rare_new(g)) == NULL) return call_fail(&c, WEFT_ENOMEM);
    rare->targs = targs;
  }
  void *p = NULL;
  if (params_size > 0) {
    if ((p = weft__arena_alloc(&g->arena, params_size, 16)) == NULL) return call_fail(&c, WEFT_ENOMEM);
    memcpy(p, params, params_size);
  }
  weft_node *n;
  if ((rc = append_node(g, &dev, WEFT__OP_USER, op, local, nargs, 0, rare, &n)) != WEFT_OK)
    return call_fail(&c, rc);
  n->params = p;
  n->params_size = params_size;
  invalidate_copies(n);
  return WEFT_OK;
}

/* ---- dense linear algebra ------------------------------------------------------------------ */

/* Whether two tensors share elements: the same tensor, or a tile and the tensor it views. */
static int overlap(const weft_tensor *a, const weft_tensor *b) {
  const weft_tensor *pa = a->view != NULL ? a->view->parent : a, *pb = b->view != NULL ? b->view->parent : b;
  return a == b || (pa == pb && (a->view == NULL || b->view == NULL));
}

/* Checks the operands of a linear-algebra op and appends its node on their device. The last
 * operand is updated in place (read and written), or with `out_mode` WEFT_WRITE written whole
 * (trtri). */
static int la_op(call *c, weft_tensor **ts, const char *const *names, int nts, weft__la la, weft_access out_mode) {
  char d1[32], d2[32];
  int rc;
  for (int i = 0; i < nts; i++) {
    if ((rc = check_tensor(c, ts[i], names[i])) != WEFT_OK) return rc;
    if (ts[i]->ndim != 2)
      return weft__err(WEFT_ESHAPE, "node %u '%s': %s (%s) has %d dimensions; the op takes matrices",
                       c->id, c->opname, names[i], weft__tensor_name(ts[i]), ts[i]->ndim);
    if (i > 0 && (rc = check_same_dtype(c, ts[0], ts[i], names[0], names[i])) != WEFT_OK) return rc;
  }
  /* An input on another device comes as any op's does (localise: a copy node, a strided tile's
   * a 2-D copy into a contiguous replica; or a message from another rank), except an operand on
   * auto beside a fixed one (the planner places auto nodes; it does not mix them). */
  weft_tensor *out = ts[nts - 1];
  weft_device od = weft__tensor_dev(out);
  for (int i = 0; i < nts - 1; i++) {
    weft_device di = weft__tensor_dev(ts[i]);
    if (weft__same_device(od, di) || (di.rank != od.rank && di.kind != WEFT_DEVICE_AUTO && od.kind != WEFT_DEVICE_AUTO))
      continue;
    if (di.kind == WEFT_DEVICE_AUTO || od.kind == WEFT_DEVICE_AUTO)
      return weft__err(WEFT_EDEVICE, "node %u '%s': %s (%s) lives on %s but %s (%s) on %s; auto and fixed operands "
                       "do not mix", c->id, c->opname, names[i], weft__tensor_name(ts[i]), weft_device_str(di, d1, sizeof d1),
                       names[nts - 1], weft__tensor_name(out), weft_device_str(od, d2, sizeof d2));
  }
  for (int i = 0; i < nts - 1; i++)
    if (overlap(ts[i], out))
      return weft__err(WEFT_EINVAL, "node %u '%s': %s (%s) and %s (%s) share elements; the updated operand must be apart",
                       c->id, c->opname, names[i], weft__tensor_name(ts[i]), names[nts - 1], weft__tensor_name(out));
  if ((rc = weft__graph_check_idle(c->g, c->opname)) != WEFT_OK) return rc;
  /* From here on a failure takes back the copies localise inserted (call_fail). */
  for (int i = 0; i < nts - 1; i++)
    if ((rc = localise(c, &ts[i], weft__tensor_dev(out), names[i])) != WEFT_OK) return call_fail(c, rc);
  weft__la *p = weft__arena_alloc(&c->g->arena, sizeof *p, 8);
  if (p == NULL) return call_fail(c, weft__oom("a linear-algebra op's parameters"));
  memset(p, 0, sizeof *p); /* the padding too: params are compared byte for byte */
  p->alpha = la.alpha;
  p->beta = la.beta;
  p->trans_a = la.trans_a;
  p->trans_b = la.trans_b;
  p->side = la.side;
  p->uplo = la.uplo;
  weft__arg args[3];
  for (int i = 0; i < nts; i++) args[i] = (weft__arg){ts[i], i == nts - 1 ? out_mode : WEFT_READ};
  weft_device dev = weft__tensor_dev(out);
  weft__node_rare *rare = weft__node_rare_new(c->g);
  if (rare == NULL) return call_fail(c, WEFT_ENOMEM);
  rare->alpha = la.alpha;
  weft_node *n;
  if ((rc = append_node(c->g, &dev, c->kind, NULL, args, nts, 0, rare, &n)) != WEFT_OK) return call_fail(c, rc);
  n->params = p;
  n->params_size = sizeof *p;
  invalidate_copies(n);
  return WEFT_OK;
}

double weft__la_flops(const weft_node *n) {
  const weft_tensor *a = n->args[0].t, *out = n->args[n->nargs - 1].t;
  const weft__la *la = n->params;
  double r = (double)out->shape[0], c = (double)out->shape[1];
  switch (n->kind) {
    case WEFT__OP_GEMM:
      return 2.0 * r * c * (double)a->shape[la->trans_a ? 0 : 1];
    case WEFT__OP_POTRF:
    case WEFT__OP_TRTRI:
      return r * r * r / 3.0;
    case WEFT__OP_TRSM:
    case WEFT__OP_TRMM:
      return la->side == WEFT_RIGHT ? r * c * c : c * r * r;
    case WEFT__OP_SYRK:
      return r * r * (double)a->shape[la->trans_a ? 0 : 1];
    default:
      return -1;
  }
}

/* rows and columns of op(t). */
static int64_t op_rows(const weft_tensor *t, int trans) { return t->shape[trans ? 1 : 0]; }
static int64_t op_cols(const weft_tensor *t, int trans) { return t->shape[trans ? 0 : 1]; }

static int square(call *c, const weft_tensor *t, const char *name) {
  char s1[96];
  if (t->shape[0] == t->shape[1]) return WEFT_OK;
  return weft__err(WEFT_ESHAPE, "node %u '%s': %s (%s) is %s; it must be square", c->id, c->opname, name,
                   weft__tensor_name(t), shape_str(t, s1, sizeof s1));
}

int weft_gemm(weft_graph *g, weft_tensor *a, int trans_a, weft_tensor *b, int trans_b, double alpha, double beta,
              weft_tensor *cm) {
  char s1[96], s2[96], s3[96];
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_gemm: graph is NULL");
  call c;
  call_begin(&c, g, WEFT__OP_GEMM, "gemm");
  int rc;
  if ((rc = check_tensor(&c, a, "a")) || (rc = check_tensor(&c, b, "b")) || (rc = check_tensor(&c, cm, "c")))
    return rc;
  if (a->ndim == 2 && b->ndim == 2 && cm->ndim == 2 &&
      (op_cols(a, trans_a) != op_rows(b, trans_b) || op_rows(a, trans_a) != cm->shape[0] ||
       op_cols(b, trans_b) != cm->shape[1]))
    return weft__err(WEFT_ESHAPE, "node %u 'gemm': op(a) (%s%s) is %s%s, op(b) (%s%s) is %s%s: their product is not c (%s) %s",
                     c.id, weft__tensor_name(a), trans_a ? "^T" : "", shape_str(a, s1, sizeof s1),
                     trans_a ? " transposed" : "", weft__tensor_name(b), trans_b ? "^T" : "",
                     shape_str(b, s2, sizeof s2), trans_b ? " transposed" : "", weft__tensor_name(cm),
                     shape_str(cm, s3, sizeof s3));
  weft_tensor *ts[3] = {a, b, cm};
  static const char *const names[3] = {"a", "b", "c"};
  return la_op(&c, ts, names, 3, (weft__la){alpha, beta, (uint8_t)(trans_a != 0), (uint8_t)(trans_b != 0), 0, 0},
               WEFT_READ_WRITE);
}

static int check_uplo(const call *c, weft_uplo uplo) {
  if (uplo == WEFT_LOWER || uplo == WEFT_UPPER) return WEFT_OK;
  return weft__err(WEFT_EINVAL, "node %u '%s': uplo %d is neither WEFT_LOWER nor WEFT_UPPER", c->id, c->opname,
                   (int)uplo);
}

int weft_potrf(weft_graph *g, weft_uplo uplo, weft_tensor *a) {
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_potrf: graph is NULL");
  call c;
  call_begin(&c, g, WEFT__OP_POTRF, "potrf");
  int rc;
  if ((rc = check_tensor(&c, a, "a")) || (rc = check_uplo(&c, uplo))) return rc;
  if (a->ndim == 2 && (rc = square(&c, a, "a"))) return rc;
  weft_tensor *ts[1] = {a};
  static const char *const names[1] = {"a"};
  return la_op(&c, ts, names, 1, (weft__la){1, 0, 0, 0, 0, (uint8_t)uplo}, WEFT_READ_WRITE);
}

/* trsm and trmm: the same operands (a triangular t applied to b from one side). */
static int triangular_op(weft_graph *g, int kind, const char *name, weft_side side, weft_uplo uplo, int trans,
                         double alpha, weft_tensor *t, weft_tensor *b) {
  char s1[96], s2[96];
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_%s: graph is NULL", name);
  call c;
  call_begin(&c, g, kind, name);
  int rc;
  if ((rc = check_tensor(&c, t, "t")) || (rc = check_tensor(&c, b, "b")) || (rc = check_uplo(&c, uplo))) return rc;
  if (side != WEFT_LEFT && side != WEFT_RIGHT)
    return weft__err(WEFT_EINVAL, "node %u '%s': side %d is neither WEFT_LEFT nor WEFT_RIGHT", c.id, name, (int)side);
  if (t->ndim == 2 && (rc = square(&c, t, "t"))) return rc;
  if (t->ndim == 2 && b->ndim == 2 && b->shape[side == WEFT_RIGHT ? 1 : 0] != t->shape[0])
    return weft__err(WEFT_ESHAPE, "node %u '%s': t (%s) is %s but b (%s) is %s: b's %s must be %lld", c.id, name,
                     weft__tensor_name(t), shape_str(t, s1, sizeof s1), weft__tensor_name(b),
                     shape_str(b, s2, sizeof s2), side == WEFT_RIGHT ? "columns" : "rows",
                     (long long)t->shape[0]);
  weft_tensor *ts[2] = {t, b};
  static const char *const names[2] = {"t", "b"};
  return la_op(&c, ts, names, 2, (weft__la){alpha, 0, (uint8_t)(trans != 0), 0, (uint8_t)side, (uint8_t)uplo},
               WEFT_READ_WRITE);
}

int weft_trsm(weft_graph *g, weft_side side, weft_uplo uplo, int trans, double alpha, weft_tensor *t, weft_tensor *b) {
  return triangular_op(g, WEFT__OP_TRSM, "trsm", side, uplo, trans, alpha, t, b);
}

int weft_trmm(weft_graph *g, weft_side side, weft_uplo uplo, int trans, double alpha, weft_tensor *t, weft_tensor *b) {
  return triangular_op(g, WEFT__OP_TRMM, "trmm", side, uplo, trans, alpha, t, b);
}

int weft_trtri(weft_graph *g, weft_uplo uplo, weft_tensor *t, weft_tensor *w) {
  char s1[96], s2[96];
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_trtri: graph is NULL");
  call c;
  call_begin(&c, g, WEFT__OP_TRTRI, "trtri");
  int rc;
  if ((rc = check_tensor(&c, t, "t")) || (rc = check_tensor(&c, w, "w")) || (rc = check_uplo(&c, uplo))) return rc;
  if (t->ndim == 2 && (rc = square(&c, t, "t"))) return rc;
  if (t->ndim == 2 && w->ndim == 2 && (w->shape[0] != t->shape[0] || w->shape[1] != t->shape[1]))
    return weft__err(WEFT_ESHAPE, "node %u 'trtri': t (%s) is %s but w (%s) is %s: w must have t's shape", c.id,
                     weft__tensor_name(t), shape_str(t, s1, sizeof s1), weft__tensor_name(w),
                     shape_str(w, s2, sizeof s2));
  weft_tensor *ts[2] = {t, w};
  static const char *const names[2] = {"t", "w"};
  return la_op(&c, ts, names, 2, (weft__la){1, 0, 0, 0, 0, (uint8_t)uplo}, WEFT_WRITE);
}

int weft_syrk(weft_graph *g, weft_uplo uplo, int trans, double alpha, weft_tensor *a, double beta, weft_tensor *cm) {
  char s1[96], s2[96];
  if (g == NULL) return weft__err(WEFT_EINVAL, "weft_syrk: graph is NULL");
  call c;
  call_begin(&c, g, WEFT__OP_SYRK, "syrk");
  int rc;
  if ((rc = check_tensor(&c, a, "a")) || (rc = check_tensor(&c, cm, "c")) || (rc = check_uplo(&c, uplo))) return rc;
  if (cm->ndim == 2 && (rc = square(&c, cm, "c"))) return rc;
  if (a->ndim == 2 && cm->ndim == 2 && op_rows(a, trans) != cm->shape[0])
    return weft__err(WEFT_ESHAPE, "node %u 'syrk': a (%s) is %s but c (%s) is %s: a must have %lld %s", c.id,
                     weft__tensor_name(a), shape_str(a, s1, sizeof s1), weft__tensor_name(cm),
                     shape_str(cm, s2, sizeof s2), (long long)cm->shape[0], trans ? "columns (trans)" : "rows");
  weft_tensor *ts[2] = {a, cm};
  static const char *const names[2] = {"a", "c"};
  return la_op(&c, ts, names, 2, (weft__la){alpha, beta, (uint8_t)(trans != 0), 0, 0, (uint8_t)uplo}, WEFT_READ_WRITE);
}

/* ---- the planner's lowering (sched/plan/place.c) ------------------------------------------ */

int weft__node_clone(weft_graph *g, const weft_node *n, weft_tensor *const *args, weft_device device,
                     unsigned flags, weft_node **out) {
  weft__arg small[WEFT_MAX_ARGS];
  weft__arg *a = n->nargs <= WEFT_MAX_ARGS ? small : weft__arena_alloc(&g->arena, (size_t)n->nargs * sizeof *a, 8);
  if (a == NULL) return WEFT_ENOMEM;
  for (int i = 0; i < n->nargs; i++) a[i] = (weft__arg){args[i], n->args[i].mode};
  void *params = NULL;
  if (n->params_size > 0) {
    if ((params = weft__arena_alloc(&g->arena, n->params_size, 16)) == NULL) return WEFT_ENOMEM;
    memcpy(params, n->params, n->params_size);
  }
  weft__node_rare *rare = NULL;
  if (n->rare != NULL) {
    if ((rare = weft__node_rare_new(g)) == NULL) return WEFT_ENOMEM;
    rare->alpha = n->rare->alpha;
    rare->fill = n->rare->fill;
    if (n->rare->targs != NULL) {
      const weft_tensor **targs = weft__arena_alloc(&g->arena, (size_t)(n->nargs ? n->nargs : 1) * sizeof *targs, 8);
      if (targs == NULL) return WEFT_ENOMEM;
      for (int i = 0; i < n->nargs; i++) targs[i] = args[i];
      rare->targs = targs;
    }
    rare->name = n->rare->name != NULL ? weft__arena_strdup(&g->arena, n->rare->name) : NULL;
    rare->origin = n->rare->origin != NULL ? weft__arena_strdup(&g->arena, n->rare->origin) : NULL;
    if ((n->rare->name != NULL && rare->name == NULL) || (n->rare->origin != NULL && rare->origin == NULL))
      return WEFT_ENOMEM;
  }
  weft_node *c;
  int rc = append_node(g, &device, n->kind, n->user_op, a, n->nargs, flags, rare, &c);
  if (rc != WEFT_OK) return rc;
  c->params = params;
  c->params_size = n->params_size;
  if (out != NULL) *out = c;
  return WEFT_OK;
}

int weft__copy_node(weft_graph *g, weft_tensor *src, weft_tensor *dst, weft_device device, unsigned flags) {
  weft__arg args[2] = {{src, WEFT_READ}, {dst, WEFT_WRITE}};
  weft_node *n;
  return append_node(g, &device, WEFT__OP_COPY, NULL, args, 2, flags, NULL, &n);
}
