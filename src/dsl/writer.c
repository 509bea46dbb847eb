/* writer.c — any graph to .weft text that parses back to the same graph.
 *
 * "The same graph": the same tensors in the same order (names, dtypes, shapes, devices,
 * creation initialisers, kept or not), the same nodes in the same order (ops, devices,
 * arguments and access modes, scalars, fill initialisers, user-op parameters, node names,
 * which nodes weft inserted), the same explicit edges in the same order, the same strict flag.
 * Contents written with weft_tensor_write (and so `from` files) are data, not graph, and are
 * not written; weft fmt (format.c) keeps a program's own text instead.
 *
 * How: the writer replays the graph's construction. Each non-inserted node becomes the one
 * statement whose C API call made it; tensor declarations are placed so that tensors are
 * created in their original order; copies weft inserted are NOT written — the statement that
 * caused them names the original tensor, and parsing inserts the same copies again (same
 * names, same order). To be sure of that, the writer simulates what the parser will do — the
 * names bound so far, and the cache of automatic copies (a copy of x on a device is reused
 * until x is written) — and where a name would resolve to another tensor, or a copy would
 * not be re-created, it refers to the tensor directly (`x@cuda:0` in backticks) or, when
 * the text cannot express the graph at all (two tensors declared with one name), fails with
 * WEFT_ENOTSUP and says which tensors. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl_internal.h"
#include "graph/graph.h"

typedef struct writer {
  const weft_graph *g;
  weft__strbuf out;
  weft__arena arena;       /* keys of the tables */
  weft__dsl_symtab names;  /* what the parser will have bound */
  weft__dsl_symtab node_names; /* node name -> the last node with it */
  const char **devnames;   /* per GPU index: the declared name, or NULL */
  int ndev;
  int32_t *cache_head;     /* per tensor: its newest automatic copy still valid, or -1 */
  int32_t *cache_next;     /* per automatic copy: the next copy of its source in the cache */
  int32_t *copy_src;       /* per tensor made by an inserted copy: its source, else -1 */
  uint8_t *created;        /* per tensor: exists in the replay */
  size_t next_decl;        /* tensors [0, next_decl) exist in the replay */
  weft_tensor **refs;      /* per argument of the node being written: the tensor to name */
  int rc;
} writer;

static int fail(writer *w, int status, const char *fmt, ...) WEFT__PRINTF(3, 4);
static int fail(writer *w, int status, const char *fmt, ...) {
  if (w->rc != WEFT_OK) return w->rc;
  va_list ap;
  va_start(ap, fmt);
  weft__verr(status, fmt, ap);
  va_end(ap);
  w->rc = status;
  return status;
}

static weft_tensor *tensor_at(const writer *w, size_t i) { return WEFT__VEC_AT(&w->g->tensors, weft_tensor *, i); }

static void put_device(writer *w, weft_device d) {
  if (d.rank != 0) { /* another rank's: rank(R, DEVICE) */
    weft__strbuf_printf(&w->out, "rank(%d, ", d.rank);
    put_device(w, weft_on_rank(d, 0));
    weft__strbuf_puts(&w->out, ")");
    return;
  }
  if (d.kind == WEFT_DEVICE_AUTO) {
    weft__strbuf_puts(&w->out, "auto");
    return;
  }
  if (d.kind == WEFT_DEVICE_CUDA && d.index >= 0 && d.index < w->ndev && w->devnames[d.index] != NULL)
    weft__strbuf_puts(&w->out, w->devnames[d.index]);
  else
    weft__strbuf_puts(&w->out, "cpu");
}

static void put_init(writer *w, weft_init in) {
  char a[40], b[40];
  switch (in.kind) {
    case WEFT_INIT_ZEROS:
      weft__strbuf_puts(&w->out, "zeros");
      return;
    case WEFT_INIT_ONES:
      weft__strbuf_puts(&w->out, "ones");
      return;
    case WEFT_INIT_FULL:
      weft__strbuf_printf(&w->out, "full(%s)", weft__dsl_fmt_double(a, in.a));
      return;
    case WEFT_INIT_EYE:
      if (in.a == 1.0)
        weft__strbuf_puts(&w->out, "eye");
      else
        weft__strbuf_printf(&w->out, "eye(%s)", weft__dsl_fmt_double(a, in.a));
      return;
    default:
      weft__strbuf_printf(&w->out, "%s(%s, %s, seed=", in.kind == WEFT_INIT_UNIFORM ? "uniform" : "normal",
                          weft__dsl_fmt_double(a, in.a), weft__dsl_fmt_double(b, in.b));
      /* Seeds above INT64_MAX in hex: a hex literal is the 64-bit pattern. */
      if (in.seed > (uint64_t)INT64_MAX)
        weft__strbuf_printf(&w->out, "0x%016" PRIx64 ")", in.seed);
      else
        weft__strbuf_printf(&w->out, "%" PRIu64 ")", in.seed);
      return;
  }
}

/* Tensor t cannot be spelt by its name: the name is bound to something else (s). */
static void clash(writer *w, const weft__dsl_sym *s, const weft_tensor *t, const char *name) {
  if (s->kind == SYM_TENSOR)
    fail(w, WEFT_ENOTSUP,
         "weft_graph_write: tensors %u and %u are both named '%s'; .weft names must be unique: "
         "rename one (weft_tensor_set_name)",
         s->t->id, t->id, name);
  else
    fail(w, WEFT_ENOTSUP, "weft_graph_write: tensor %u is named '%s' like a device of the text", t->id, name);
}

/* Appends the name of t, which the replay must resolve to t at this point. */
static void put_ref(writer *w, weft_tensor *t) {
  const char *name = weft__tensor_name(t);
  weft__dsl_sym *s = weft__dsl_sym_find(&w->names, name);
  if (s == NULL || s->kind != SYM_TENSOR || s->t != t) {
    if (s != NULL)
      clash(w, s, t, name);
    else
      fail(w, WEFT_ENOTSUP, "weft_graph_write: tensor %u '%s' cannot be named where a node uses it", t->id, name);
    return;
  }
  weft__dsl_buf_name(&w->out, name);
}

/* Binds `name` to t as the parser will; `must_be_free` for declarations and op results. */
static void bind(writer *w, weft_tensor *t, int must_be_free) {
  const char *name = weft__tensor_name(t);
  weft__dsl_sym *s = weft__dsl_sym_slot(&w->names, &w->arena, name);
  if (s == NULL) {
    fail(w, WEFT_ENOMEM, "weft_graph_write: out of host memory");
    return;
  }
  if (s->kind == SYM_NONE) {
    s->kind = SYM_TENSOR;
    s->t = t;
  } else if (must_be_free) {
    clash(w, s, t, name);
  }
}

/* Declares the tensors [next_decl, limit) that the program created (they are not made by a
 * node). */
static void declare_upto(writer *w, size_t limit) {
  for (; w->next_decl < limit && w->rc == WEFT_OK; w->next_decl++) {
    weft_tensor *t = tensor_at(w, w->next_decl);
    if (t->view != NULL) {
      /* The first tile of a grid: the statement that made them all. */
      const weft_tensor *x = t->view->parent;
      const weft__grid *grid = x->grid;
      if (t->id != grid->first) {
        fail(w, WEFT_ENOTSUP, "weft_graph_write: tile %u '%s' is out of its grid's creation order", t->id,
             weft__tensor_name(t));
        return;
      }
      weft__strbuf_puts(&w->out, "tiles(");
      put_ref(w, (weft_tensor *)x);
      weft__strbuf_printf(&w->out, ", %lld, %lld)\n", (long long)grid->tile[0], (long long)grid->tile[1]);
      if (grid->P > 0) {
        weft__strbuf_puts(&w->out, "distribute(");
        put_ref(w, (weft_tensor *)x);
        weft__strbuf_printf(&w->out, ", %d, %d)\n", grid->P, grid->Q);
      }
      size_t count = (size_t)(grid->rows * grid->cols);
      for (size_t k = 0; k < count; k++) {
        weft_tensor *tile = tensor_at(w, grid->first + k);
        w->created[tile->id] = 1;
        bind(w, tile, 1);
      }
      w->next_decl += count - 1;
      continue;
    }
    if (t->flags & WEFT__T_AUTO) {
      if (!w->created[t->id])
        fail(w, WEFT_ENOTSUP, "weft_graph_write: tensor %u '%s' was made by an op but no node uses it",
             t->id, weft__tensor_name(t));
      continue;
    }
    weft__strbuf_puts(&w->out, "tensor ");
    weft__dsl_buf_name(&w->out, weft__tensor_name(t));
    weft__strbuf_printf(&w->out, ": %s[", weft_dtype_name((weft_dtype)t->dtype));
    for (int i = 0; i < t->ndim; i++) weft__strbuf_printf(&w->out, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    weft__strbuf_puts(&w->out, "] on ");
    /* A distributed tensor's device is each rank's own CPU: it was declared on the CPU, or on a
     * GPU when its places are GPUs (any GPU: its tiles go to all). */
    put_device(w, !weft__tensor_distributed(t) ? weft__tensor_dev(t) : t->grid->gpus > 0 ? weft_cuda(0) : weft_cpu());
    weft__strbuf_puts(&w->out, " = ");
    put_init(w, weft__tensor_init(t));
    weft__strbuf_puts(&w->out, "\n");
    w->created[t->id] = 1;
    bind(w, t, 1);
  }
}

/* The arguments a node's call localises (reads that get automatic copies). */
static int localised(const weft_node *n, int i) {
  if (n->kind == WEFT__OP_USER) return n->args[i].mode == WEFT_READ;
  if (n->kind == WEFT__OP_COPY || n->kind == WEFT__OP_FILL) return 0;
  return i < n->nargs - 1; /* a linear-algebra op's too: operands of other ranks come as copies */
}

/* Decides how each argument of node n is written, simulating the copies its call inserts. The
 * inserted copies of the call are nodes [first, n->id). refs[i] receives the tensor to name. */
static void resolve_args(writer *w, const weft_node *n, uint32_t first, weft_tensor **refs) {
  uint32_t r = first;
  for (int i = 0; i < n->nargs; i++) {
    weft_tensor *t = n->args[i].t;
    refs[i] = t;
    if (!localised(n, i)) continue;
    int32_t src = w->copy_src[t->id];
    if (src >= 0) {
      weft_tensor *s = tensor_at(w, (size_t)src);
      int32_t hit = -1; /* the call's cache: a copy of s on the node's device */
      for (int32_t k = w->cache_head[s->id]; k >= 0 && hit < 0; k = w->cache_next[k])
        if (weft_device_equal(tensor_at(w, (size_t)k)->device, n->device)) hit = k;
      weft_node *c = r < n->id ? WEFT__VEC_AT(&w->g->nodes, weft_node *, r) : NULL;
      if (c != NULL && c->args[1].t == t && c->args[0].t == s && hit < 0) {
        refs[i] = s; /* the call inserts this copy again */
        w->cache_next[t->id] = w->cache_head[s->id];
        w->cache_head[s->id] = (int32_t)t->id;
        r++;
      } else if (hit == (int32_t)t->id) {
        refs[i] = s; /* the call reuses the cached copy */
      }
    }
    if (!weft_device_equal(refs[i]->device, n->device) && refs[i] == t) {
      fail(w, WEFT_ENOTSUP, "weft_graph_write: node %u reads tensor %u on another device without a copy",
           n->id, t->id);
      return;
    }
  }
  if (r != n->id)
    fail(w, WEFT_ENOTSUP, "weft_graph_write: node %u has automatic copies that its call would not make again",
         n->id);
}

/* 1 if the 8 bytes at p read as a double the text shows plainly and exactly. */
static int plain_double(const unsigned char *p) {
  char num[40];
  double d, back;
  memcpy(&d, p, 8);
  if (!(d == d) || isinf(d) || (d != 0 && (fabs(d) < 1e-300 || fabs(d) > 1e300))) return 0;
  weft__dsl_fmt_double(num, d);
  back = strtod(num, NULL);
  return memcmp(&back, &d, 8) == 0;
}

/* User-op parameters as typed lists joined with '+': 8-byte chunks that are plain doubles as
 * f64, other chunks as i32 pairs, a tail as i32 and u8 (f64[0.5] + i32[7, 0]). */
static void put_params(writer *w, const weft_node *n, int after_args) {
  char num[40];
  size_t size = n->params_size, i = 0;
  const unsigned char *p = n->params;
  if (size == 0) return;
  weft__strbuf_puts(&w->out, after_args ? ", params=" : "params=");
  int group = -1; /* 0: f64, 1: i32, 2: u8 */
  while (i < size) {
    int type = size - i >= 8 && plain_double(p + i) ? 0 : size - i >= 4 ? 1 : 2;
    if (type != group) {
      if (group >= 0) weft__strbuf_puts(&w->out, "] + ");
      weft__strbuf_puts(&w->out, type == 0 ? "f64[" : type == 1 ? "i32[" : "u8[");
      group = type;
    } else {
      weft__strbuf_puts(&w->out, ", ");
    }
    if (type == 0) {
      double d;
      memcpy(&d, p + i, 8);
      weft__strbuf_puts(&w->out, weft__dsl_fmt_double(num, d));
      i += 8;
    } else if (type == 1) {
      int32_t v;
      memcpy(&v, p + i, 4);
      weft__strbuf_printf(&w->out, "%d", (int)v);
      i += 4;
    } else {
      weft__strbuf_printf(&w->out, "%u", p[i]);
      i += 1;
    }
  }
  weft__strbuf_puts(&w->out, "]");
}

/* Writes the statement of node n, whose call also made the inserted copies [first, n->id). */
static void put_node(writer *w, const weft_node *n, uint32_t first) {
  char num[40];
  weft_tensor **refs = w->refs;
  /* The tensors the call creates, in order: the inserted copies' destinations, then a new
   * result. They must come next in the replay's creation order. */
  weft_tensor *result = NULL;
  int has_result = n->kind != WEFT__OP_USER && n->kind != WEFT__OP_FILL && weft__la_flops(n) < 0;
  if (has_result) result = n->args[n->nargs - 1].t;
  int new_result = has_result && (result->flags & WEFT__T_AUTO) && !(result->flags & WEFT__T_INSERTED) &&
                   !w->created[result->id];
  size_t limit = SIZE_MAX;
  for (uint32_t k = first; k < n->id; k++) {
    weft_tensor *d = WEFT__VEC_AT(&w->g->nodes, weft_node *, k)->args[1].t;
    if (d->id < limit) limit = d->id;
  }
  if (new_result && result->id < limit) limit = result->id;
  if (limit == SIZE_MAX) {
    limit = 0;
    for (int i = 0; i < n->nargs; i++)
      if ((size_t)n->args[i].t->id + 1 > limit) limit = n->args[i].t->id + 1;
  }
  declare_upto(w, limit);
  if (w->rc != WEFT_OK) return;
  size_t created_from = w->next_decl, expect = created_from;
  for (uint32_t k = first; k < n->id; k++) {
    weft_tensor *d = WEFT__VEC_AT(&w->g->nodes, weft_node *, k)->args[1].t;
    if (d->id != expect++ || w->created[d->id]) {
      fail(w, WEFT_ENOTSUP, "weft_graph_write: node %u's copy into tensor %u is out of creation order", n->id, d->id);
      return;
    }
    w->created[d->id] = 1;
  }
  if (new_result) {
    if (result->id != expect++) {
      fail(w, WEFT_ENOTSUP, "weft_graph_write: node %u's result (tensor %u) is out of creation order", n->id,
           result->id);
      return;
    }
    w->created[result->id] = 1;
  }
  w->next_decl = expect;
  for (int i = 0; i < n->nargs; i++)
    if ((n->args[i].mode & WEFT_WRITE) && (n->args[i].t->flags & WEFT__T_INSERTED)) {
      fail(w, WEFT_ENOTSUP,
           "weft_graph_write: node %u writes tensor %u '%s', a copy weft inserted; .weft text only "
           "reads automatic copies",
           n->id, n->args[i].t->id, weft__tensor_name(n->args[i].t));
      return;
    }
  resolve_args(w, n, first, refs);
  if (w->rc != WEFT_OK) return;

  weft__strbuf *b = &w->out;
  int nin = has_result ? n->nargs - 1 : n->nargs;
  if (has_result) {
    if (new_result) {
      bind(w, result, 1);
      weft__dsl_buf_name(b, weft__tensor_name(result));
    } else {
      put_ref(w, result);
    }
    weft__strbuf_puts(b, " = ");
  }
  if (n->kind == WEFT__OP_USER)
    weft__dsl_buf_ident(b, n->user_op->name);
  else
    weft__strbuf_puts(b, weft__op_kind_name(n->kind));
  weft__strbuf_puts(b, "(");
  for (int i = 0; i < nin; i++) {
    if (i) weft__strbuf_puts(b, ", ");
    put_ref(w, refs[i]);
  }
  switch (n->kind) {
    case WEFT__OP_SCALE:
      weft__strbuf_printf(b, ", %s", weft__dsl_fmt_double(num, weft__node_alpha(n)));
      break;
    case WEFT__OP_COPY:
      weft__strbuf_puts(b, ", ");
      put_device(w, weft__tensor_dev(result));
      break;
    case WEFT__OP_FILL:
      weft__strbuf_puts(b, ", ");
      put_init(w, weft__node_fill(n));
      break;
    case WEFT__OP_USER:
      put_params(w, n, nin > 0);
      break;
    case WEFT__OP_GEMM:
    case WEFT__OP_POTRF:
    case WEFT__OP_TRSM:
    case WEFT__OP_TRMM:
    case WEFT__OP_TRTRI:
    case WEFT__OP_SYRK: {
      char num2[40];
      const weft__la *la = n->params;
      if (n->kind == WEFT__OP_TRSM || n->kind == WEFT__OP_TRMM)
        weft__strbuf_printf(b, ", side=%s, trans=%d, alpha=%s", la->side == WEFT_RIGHT ? "right" : "left", la->trans_a,
                            weft__dsl_fmt_double(num, la->alpha));
      else if (n->kind != WEFT__OP_POTRF && n->kind != WEFT__OP_TRTRI)
        weft__strbuf_printf(b, ", alpha=%s, beta=%s", weft__dsl_fmt_double(num, la->alpha),
                            weft__dsl_fmt_double(num2, la->beta));
      if (n->kind == WEFT__OP_GEMM) weft__strbuf_printf(b, ", trans_a=%d, trans_b=%d", la->trans_a, la->trans_b);
      if (n->kind == WEFT__OP_SYRK && la->trans_a) weft__strbuf_puts(b, ", trans=1");
      if (n->kind != WEFT__OP_GEMM && la->uplo == WEFT_UPPER) weft__strbuf_puts(b, ", upper=1");
      break;
    }
    default:
      break;
  }
  weft__strbuf_puts(b, ")");
  if (weft__node_name(n) != NULL) {
    weft__strbuf_puts(b, " as ");
    weft__dsl_buf_name(b, weft__node_name(n));
  }
  weft__strbuf_puts(b, "\n");

  /* What the parser does after the call: enter the copies' names, drop stale copies. */
  for (uint32_t k = first; k < n->id; k++) bind(w, WEFT__VEC_AT(&w->g->nodes, weft_node *, k)->args[1].t, 0);
  for (int i = 0; i < n->nargs; i++) {
    if (!(n->args[i].mode & WEFT_WRITE)) continue;
    int32_t t = (int32_t)n->args[i].t->id, src = w->copy_src[t];
    w->cache_head[t] = -1;
    if (src >= 0) /* a written copy leaves its source's cache */
      for (int32_t *at = &w->cache_head[src]; *at >= 0; at = &w->cache_next[*at])
        if (*at == t) {
          *at = w->cache_next[t];
          break;
        }
  }
  /* Tensors this call made that the program keeps. */
  for (size_t id = created_from; id < expect; id++) {
    weft_tensor *t = tensor_at(w, id);
    if (t->flags & WEFT__T_KEEP) {
      weft__strbuf_puts(b, "keep ");
      put_ref(w, t);
      weft__strbuf_puts(b, "\n");
    }
  }
}

/* A node reference for an edge: its name when that names it at the end (it is the last node
 * with that name), else @id. */
static void put_node_ref(writer *w, const weft_node *n) {
  if (weft__node_name(n) != NULL) {
    weft__dsl_sym *s = weft__dsl_sym_find(&w->node_names, weft__node_name(n));
    if (s != NULL && s->node == n) {
      weft__dsl_buf_name(&w->out, weft__node_name(n));
      return;
    }
  }
  weft__strbuf_printf(&w->out, "@%u", n->id);
}

/* Chooses names for the GPUs the graph uses ("gpu0"), avoiding every tensor name. */
static void declare_devices(writer *w) {
  const weft_graph *g = w->g;
  int maxdev = -1;
  for (size_t i = 0; i < g->tensors.len; i++) {
    weft_tensor *t = tensor_at(w, i);
    if (t->device.kind == WEFT_DEVICE_CUDA && t->device.index > maxdev) maxdev = t->device.index;
  }
  if (maxdev < 0) return;
  w->ndev = maxdev + 1;
  w->devnames = weft__calloc((size_t)w->ndev, sizeof *w->devnames);
  if (w->devnames == NULL) {
    fail(w, WEFT_ENOMEM, "weft_graph_write: out of host memory");
    return;
  }
  for (size_t i = 0; i < g->tensors.len; i++) {
    weft_tensor *t = tensor_at(w, i);
    if (weft__tensor_dev(t).kind != WEFT_DEVICE_CUDA || w->devnames[t->device.index] != NULL) continue;
    char name[64];
    size_t len = (size_t)snprintf(name, sizeof name, "gpu%d", t->device.index);
    for (;;) {
      int taken = 0;
      for (size_t k = 0; k < g->tensors.len && !taken; k++)
        taken = strcmp(weft__tensor_name(tensor_at(w, k)), name) == 0;
      if (!taken || len + 2 >= sizeof name) break;
      name[len++] = '_';
      name[len] = '\0';
    }
    weft__dsl_sym *s = weft__dsl_sym_slot(&w->names, &w->arena, name);
    if (s == NULL) {
      fail(w, WEFT_ENOMEM, "weft_graph_write: out of host memory");
      return;
    }
    s->kind = SYM_DEVICE;
    w->devnames[t->device.index] = s->key;
    weft__strbuf_printf(&w->out, "device %s = cuda:%d\n", s->key, t->device.index);
  }
}

int weft_graph_write(const weft_graph *g, char **out) {
  if (out != NULL) *out = NULL;
  if (g == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_graph_write: NULL argument");
  writer w;
  memset(&w, 0, sizeof w);
  w.g = g;
  weft__strbuf_init(&w.out);
  weft__arena_init(&w.arena, 4096, NULL);
  size_t nt = g->tensors.len, nn = g->nodes.len;
  w.cache_head = weft__malloc((nt + 1) * sizeof *w.cache_head);
  w.cache_next = weft__malloc((nt + 1) * sizeof *w.cache_next);
  w.copy_src = weft__malloc((nt + 1) * sizeof *w.copy_src);
  w.created = weft__calloc(nt + 1, 1);
  size_t most = 1; /* the most arguments of a node */
  for (size_t i = 0; i < nn; i++)
    if (WEFT__VEC_AT(&g->nodes, weft_node *, i)->nargs > most) most = WEFT__VEC_AT(&g->nodes, weft_node *, i)->nargs;
  w.refs = weft__malloc(most * sizeof *w.refs);
  if (!w.cache_head || !w.cache_next || !w.copy_src || !w.created || !w.refs) {
    fail(&w, WEFT_ENOMEM, "weft_graph_write: out of host memory");
    goto done;
  }
  for (size_t i = 0; i < nt; i++) w.cache_head[i] = w.cache_next[i] = w.copy_src[i] = -1;
  for (size_t i = 0; i < nn; i++) {
    const weft_node *n = WEFT__VEC_AT(&g->nodes, weft_node *, i);
    if (n->flags & WEFT__N_INSERTED) w.copy_src[n->args[1].t->id] = (int32_t)n->args[0].t->id;
  }
  weft__strbuf_printf(&w.out, "# weft graph: %zu tensors, %zu nodes\n", nt, nn);
  declare_devices(&w);
  uint32_t first = 0; /* the first inserted copy since the last statement */
  for (uint32_t i = 0; i < nn && w.rc == WEFT_OK; i++) {
    const weft_node *n = WEFT__VEC_AT(&g->nodes, weft_node *, i);
    if (n->flags & WEFT__N_INSERTED) {
      if (weft__node_name(n) != NULL)
        fail(&w, WEFT_ENOTSUP, "weft_graph_write: node %u is a copy weft inserted but has a name ('%s')", n->id,
             weft__node_name(n));
      continue;
    }
    put_node(&w, n, first);
    first = i + 1;
  }
  if (w.rc == WEFT_OK && first != nn)
    fail(&w, WEFT_ENOTSUP, "weft_graph_write: the graph ends with copies weft inserted for no node");
  declare_upto(&w, nt);
  for (size_t i = 0; i < nn && w.rc == WEFT_OK && g->explicit_edges.len; i++) {
    weft_node *n = WEFT__VEC_AT(&g->nodes, weft_node *, i);
    if (weft__node_name(n) == NULL) continue;
    weft__dsl_sym *s = weft__dsl_sym_slot(&w.node_names, &w.arena, weft__node_name(n));
    if (s == NULL)
      fail(&w, WEFT_ENOMEM, "weft_graph_write: out of host memory");
    else
      s->node = n;
  }
  for (size_t i = 0; i < g->explicit_edges.len && w.rc == WEFT_OK; i++) {
    const weft__edge *e = &WEFT__VEC_AT(&g->explicit_edges, weft__edge, i);
    if (e->from >= nn || e->to >= nn) continue;
    weft__strbuf_puts(&w.out, "edge ");
    put_node_ref(&w, WEFT__VEC_AT(&g->nodes, weft_node *, e->from));
    weft__strbuf_puts(&w.out, " -> ");
    put_node_ref(&w, WEFT__VEC_AT(&g->nodes, weft_node *, e->to));
    weft__strbuf_puts(&w.out, "\n");
  }
  if (g->strict) weft__strbuf_puts(&w.out, "strict\n");
done:;
  int rc = w.rc;
  if (rc == WEFT_OK)
    rc = weft__strbuf_take(&w.out, "the .weft text", out);
  else
    weft__strbuf_fini(&w.out);
  weft__free(w.cache_head);
  weft__free(w.cache_next);
  weft__free(w.copy_src);
  weft__free(w.created);
  weft__free(w.refs);
  weft__free(w.devnames);
  weft__dsl_symtab_fini(&w.names);
  weft__dsl_symtab_fini(&w.node_names);
  weft__arena_fini(&w.arena);
  return rc;
}
