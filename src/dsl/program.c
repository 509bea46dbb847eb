/* program.c — builds a program's graph from its syntax tree: parameters and -D, devices and
 * their fallbacks, tensors, ops, loops, node names and explicit edges, outputs.
 *
 * Names: one table for what the program names (parameters, loop variables, devices, tensors),
 * so a name means one thing; a second table for node names given with `as`. Indexed names are
 * evaluated to strings ("y[3]") and are ordinary names from then on. Tensors made by weft
 * itself (the automatic copies "x@cuda:0") are entered under their names when those are free,
 * which lets the writer refer to them.
 *
 * Execution is the program's meaning, statement by statement: each op statement makes exactly
 * the C API call that a C program would (so the graph is the same as one built in C), and
 * every node it adds gets the statement's "file:line:col" as its origin.
 *
 * Errors: a failing statement records a diagnostic, poisons the names it would have defined,
 * and execution goes on; a statement that uses a poisoned name fails silently, so one mistake
 * gives one message. Only the first error at a position is kept (a loop does not repeat it).
 * Out of memory, the node limit and the statement limit (4 × max_nodes statements, loop
 * iterations included) stop the build at once: no input runs unbounded. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl_internal.h"
#include "graph/graph.h"

/* ---- symbols ------------------------------------------------------------------------------- */

typedef weft__dsl_value value;
typedef weft__dsl_sym sym;
typedef weft__dsl_symtab symtab;
#define symtab_find weft__dsl_sym_find
#define symtab_slot weft__dsl_sym_slot
#define symtab_fini weft__dsl_symtab_fini

/* ---- the build context --------------------------------------------------------------------- */

typedef struct define {
  const char *text; /* the option as given ("N=400") */
  const char *name; /* malloc'd copy of the part before '=' */
  value v;
  int used;
} define;

typedef struct ctx {
  weft_runtime *rt;
  weft_graph *g;
  weft_program *prog;
  weft__dsl_diags *d;
  weft__arena *a;
  symtab syms, nodes;
  define *defs;
  int ndefs;
  weft_device default_dev;
  int have_override;
  weft_device override;
  const char *base_dir;
  int deny_files;
  size_t max_nodes;
  uint64_t steps, max_steps;
  int stop; /* out of memory or a limit: stop building */
  int loop_depth;
  weft__strbuf name; /* scratch for evaluated names */
} ctx;

/* Statement outcome: FAIL means "reported (or silent because of a poisoned name)". */
enum { OK = 0, FAIL = 1 };

static int oom(ctx *c) {
  c->stop = 1;
  weft__dsl_error(c->d, WEFT_ENOMEM, 0, 0, "out of host memory while building the program");
  return FAIL;
}

static int err(ctx *c, int status, uint32_t line, uint32_t col, const char *fmt, ...) WEFT__PRINTF(5, 6);
static int err(ctx *c, int status, uint32_t line, uint32_t col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weft__dsl_verror(c->d, status, line, col, fmt, ap);
  va_end(ap);
  if (c->d->dropped) c->stop = 1; /* past the cap: the rest would not be shown anyway */
  return FAIL;
}

/* A weft call failed: report its message at the statement. Errors in what the program asks
 * for (shapes, dtypes, arguments, edges) are parse errors; the rest keep their status. */
static int api_err(ctx *c, int rc, uint32_t line, uint32_t col) {
  if (rc == WEFT_ENOMEM) return oom(c);
  int status = rc == WEFT_ESHAPE || rc == WEFT_EDTYPE || rc == WEFT_EINVAL || rc == WEFT_ECYCLE
                   ? WEFT_EPARSE
                   : rc;
  return err(c, status, line, col, "%s", weft_last_error());
}

static const char *kind_word(int kind) {
  switch (kind) {
    case SYM_PARAM: return "a parameter";
    case SYM_LOOP: return "a loop variable";
    case SYM_DEVICE: return "a device";
    case SYM_TENSOR: return "a tensor";
    default: return "a name";
  }
}

/* The machine's devices, for messages: "cpu, cuda:0, cuda:1". */
static const char *device_list(ctx *c, char *buf, size_t size) {
  int n = weft_device_count(c->rt, WEFT_DEVICE_CUDA);
  int len = snprintf(buf, size, "cpu");
  for (int i = 0; i < n && len > 0 && (size_t)len < size; i++)
    len += snprintf(buf + len, size - (size_t)len, ", cuda:%d", i);
  return buf;
}

/* ---- expressions ---------------------------------------------------------------------------- */

static int eval_num(ctx *c, const weft__dsl_expr *e, value *out);

static int eval_int(ctx *c, const weft__dsl_expr *e, const char *what, int64_t *out) {
  value v;
  if (eval_num(c, e, &v) != OK) return FAIL;
  if (v.is_float) {
    char num[40];
    return err(c, WEFT_EPARSE, e->line, e->col, "%s must be an integer; got %s", what,
               weft__dsl_fmt_number(num, v.f, 0));
  }
  *out = v.i;
  return OK;
}

static double as_double(value v) { return v.is_float ? v.f : (double)v.i; }

/* Builds the string of a name expression into c->name ("y[3]", "w[1,2]"). */
static int eval_name(ctx *c, const weft__dsl_expr *e) {
  c->name.len = 0;
  weft__strbuf_puts(&c->name, e->text);
  if (e->has_index) {
    weft__strbuf_puts(&c->name, "[");
    for (int i = 0; i < e->nitems; i++) {
      int64_t v = 0;
      if (eval_int(c, e->items[i], "an index", &v) != OK) return FAIL;
      weft__strbuf_printf(&c->name, "%s%lld", i ? "," : "", (long long)v);
    }
    weft__strbuf_puts(&c->name, "]");
  }
  if (c->name.failed) return oom(c);
  return OK;
}

static int eval_bin(ctx *c, const weft__dsl_expr *e, value a, value b, value *out) {
  out->is_float = a.is_float || b.is_float;
  if (!out->is_float) {
    int64_t r = 0;
    int overflow = 0;
    switch (e->op) {
      case '+': overflow = __builtin_add_overflow(a.i, b.i, &r); break;
      case '-': overflow = __builtin_sub_overflow(a.i, b.i, &r); break;
      case '*': overflow = __builtin_mul_overflow(a.i, b.i, &r); break;
      case '/':
      case '%':
        if (b.i == 0) return err(c, WEFT_EPARSE, e->line, e->col, "division by zero; expected a divisor other than 0");
        if (a.i == INT64_MIN && b.i == -1)
          overflow = 1;
        else
          r = e->op == '/' ? a.i / b.i : a.i % b.i;
        break;
    }
    if (overflow)
      return err(c, WEFT_EPARSE, e->line, e->col, "integer overflow in '%c'; expected a result within 64 bits", e->op);
    out->i = r;
    return OK;
  }
  double x = as_double(a), y = as_double(b);
  switch (e->op) {
    case '+': out->f = x + y; break;
    case '-': out->f = x - y; break;
    case '*': out->f = x * y; break;
    case '/': out->f = x / y; break;
    default:
      return err(c, WEFT_EPARSE, e->line, e->col, "'%%' takes integers; expected integer operands");
  }
  return OK;
}

static int eval_num(ctx *c, const weft__dsl_expr *e, value *out) {
  value a, b;
  memset(out, 0, sizeof *out);
  switch (e->kind) {
    case EX_INT:
      out->i = e->i;
      return OK;
    case EX_FLOAT:
      out->is_float = 1;
      out->f = e->f;
      return OK;
    case EX_INF:
    case EX_NAN:
      out->is_float = 1;
      out->f = e->kind == EX_INF ? __builtin_inf() : __builtin_nan("");
      return OK;
    case EX_PAREN:
    case EX_POS:
      return eval_num(c, e->a, out);
    case EX_NEG:
      if (eval_num(c, e->a, &a) != OK) return FAIL;
      if (a.is_float) {
        out->is_float = 1;
        out->f = -a.f;
      } else if (a.i == INT64_MIN) {
        return err(c, WEFT_EPARSE, e->line, e->col, "integer overflow in '-'; expected a result within 64 bits");
      } else {
        out->i = -a.i;
      }
      return OK;
    case EX_BIN:
      if (eval_num(c, e->a, &a) != OK || eval_num(c, e->b, &b) != OK) return FAIL;
      return eval_bin(c, e, a, b, out);
    case EX_NAME: {
      if (e->has_index)
        return err(c, WEFT_EPARSE, e->line, e->col, "'%s[...]' names a tensor; expected a number",
                   e->text);
      sym *s = symtab_find(&c->syms, e->text);
      if (s == NULL || s->kind == SYM_NONE)
        return err(c, WEFT_EPARSE, e->line, e->col,
                   "unknown name '%s'; expected a number, a parameter or a loop variable", e->text);
      if (s->kind == SYM_POISON) return FAIL;
      if (s->kind != SYM_PARAM && s->kind != SYM_LOOP)
        return err(c, WEFT_EPARSE, e->line, e->col, "'%s' is %s; expected a number", e->text,
                   kind_word(s->kind));
      *out = s->v;
      return OK;
    }
    case EX_CALL:
      return err(c, WEFT_EPARSE, e->line, e->col, "'%s(...)' is not a number; expected a number",
                 e->text);
    case EX_CPU:
    case EX_CUDA:
      return err(c, WEFT_EPARSE, e->line, e->col, "a device is not a number; expected a number");
    default:
      return err(c, WEFT_EPARSE, e->line, e->col, "expected a number");
  }
}

/* ---- devices and tensors --------------------------------------------------------------------- */

/* Evaluates a device: cpu, cuda:N, rank(R, DEVICE) or a declared name. A literal cuda:N must
 * exist unless `may_be_absent` (a declaration's alternatives). */
static int eval_device(ctx *c, const weft__dsl_expr *e, int may_be_absent, weft_device *out) {
  char list[256];
  switch (e->kind) {
    case EX_CALL:
      if (strcmp(e->text, "rank") == 0) { /* rank(R, DEVICE): process R's device (MPI) */
        int64_t r = 0;
        if (e->nitems != 2 || e->keys[0] != NULL || e->keys[1] != NULL)
          return err(c, WEFT_EPARSE, e->line, e->col, "rank takes a rank and a device: rank(1, cpu)");
        if (eval_int(c, e->items[0], "a rank", &r) != OK) return FAIL;
        int nranks = weft_runtime_ranks(c->rt);
        if (r < 0 || r >= nranks)
          return err(c, WEFT_EDEVICE, e->items[0]->line, e->items[0]->col,
                     "rank %lld does not exist: this run has %d rank%s (0..%d; mpirun -np N starts N)", (long long)r,
                     nranks, nranks == 1 ? "" : "s", nranks - 1);
        if (eval_device(c, e->items[1], may_be_absent, out) != OK) return FAIL;
        if (out->rank != 0)
          return err(c, WEFT_EPARSE, e->items[1]->line, e->items[1]->col, "a device of rank(...) has a rank already");
        out->rank = (int)r;
        return OK;
      }
      break;
    case EX_CPU:
      *out = weft_cpu();
      return OK;
    case EX_CUDA: {
      int64_t idx = 0;
      if (eval_int(c, e->a, "a GPU index", &idx) != OK) return FAIL;
      if (idx < 0 || idx > 1000000)
        return err(c, WEFT_EPARSE, e->a->line, e->a->col, "GPU index %lld; expected 0 or more",
                   (long long)idx);
      *out = weft_cuda((int)idx);
      if (!may_be_absent && !weft_device_exists(c->rt, *out))
        return err(c, WEFT_EDEVICE, e->line, e->col,
                   "device cuda:%lld does not exist on this machine (it has %s); expected one "
                   "that does, or a declared device with a fallback (device gpu = cuda:%lld | cpu)",
                   (long long)idx, device_list(c, list, sizeof list), (long long)idx);
      return OK;
    }
    case EX_NAME: {
      if (!e->has_index) {
        sym *s = symtab_find(&c->syms, e->text);
        if (s != NULL && s->kind == SYM_POISON) return FAIL;
        if (s != NULL && s->kind == SYM_DEVICE) {
          *out = s->dev;
          return OK;
        }
        if ((s == NULL || s->kind == SYM_NONE) && strcmp(e->text, "auto") == 0) {
          *out = weft_auto(); /* the planner decides (docs/placement.md) */
          return OK;
        }
        if (s == NULL || s->kind == SYM_NONE)
          return err(c, WEFT_EPARSE, e->line, e->col,
                     "unknown device '%s'; expected cpu, cuda:N, auto or a name declared with 'device'",
                     e->text);
        return err(c, WEFT_EPARSE, e->line, e->col, "'%s' is %s; expected a device", e->text,
                   kind_word(s->kind));
      }
      break;
    }
    default:
      break;
  }
  return err(c, WEFT_EPARSE, e->line, e->col,
             "expected a device: cpu, cuda:N, auto, rank(R, DEVICE) or a declared device name");
}

/* A copy weft inserted is read through its source's name (weft reuses it while the source is
 * unchanged); writing into it would make that reuse wrong, so the program may not. */
static int check_writable(ctx *c, const weft__dsl_expr *e, const weft_tensor *t) {
  if (t->flags & WEFT__T_INSERTED)
    return err(c, WEFT_EPARSE, e->line, e->col,
               "'%s' is a copy weft inserted and may only be read; expected a tensor of the program",
               weft_tensor_name(t));
  return OK;
}

/* Looks a tensor up by a name expression. */
static int eval_tensor(ctx *c, const weft__dsl_expr *e, weft_tensor **out) {
  if (e->kind != EX_NAME) {
    const char *got = e->kind == EX_CALL ? "an op or initialiser call"
                      : e->kind == EX_CPU || e->kind == EX_CUDA ? "a device"
                                                                : "a number";
    return err(c, WEFT_EPARSE, e->line, e->col, "expected a tensor name; got %s", got);
  }
  if (eval_name(c, e) != OK) return FAIL;
  sym *s = symtab_find(&c->syms, c->name.data);
  if (s != NULL && s->kind == SYM_TENSOR) {
    *out = s->t;
    return OK;
  }
  if (s != NULL && s->kind == SYM_POISON) return FAIL;
  if (s == NULL || s->kind == SYM_NONE)
    return err(c, WEFT_EPARSE, e->line, e->col,
               "unknown tensor '%s'; expected a tensor declared with 'tensor' or assigned by an "
               "op before this line",
               c->name.data);
  return err(c, WEFT_EPARSE, e->line, e->col, "'%s' is %s; expected a tensor", c->name.data,
             kind_word(s->kind));
}

/* Evaluates an initialiser: zeros, ones, eye, full(v), eye(v), uniform(lo, hi, seed=S),
 * normal(m, s, seed=S). */
static int eval_init(ctx *c, const weft__dsl_expr *e, weft_init *out) {
  static const char *const expected =
      "zeros, ones, eye, full(v), eye(v), uniform(lo, hi, seed=S) or normal(mean, std, seed=S)";
  if (e->kind == EX_NAME && !e->has_index) {
    if (strcmp(e->text, "zeros") == 0) {
      *out = weft_zeros();
      return OK;
    }
    if (strcmp(e->text, "ones") == 0) {
      *out = weft_ones();
      return OK;
    }
    if (strcmp(e->text, "eye") == 0) {
      *out = weft_eye(1.0);
      return OK;
    }
  }
  if (e->kind != EX_CALL) return err(c, WEFT_EPARSE, e->line, e->col, "expected an initialiser: %s", expected);
  const char *f = e->text;
  int npos = 0, want;
  const weft__dsl_expr *pos[2] = {NULL, NULL}, *seed = NULL;
  if (strcmp(f, "zeros") == 0 || strcmp(f, "ones") == 0)
    want = 0;
  else if (strcmp(f, "full") == 0 || strcmp(f, "eye") == 0)
    want = 1;
  else if (strcmp(f, "uniform") == 0 || strcmp(f, "normal") == 0)
    want = 2;
  else
    return err(c, WEFT_EPARSE, e->line, e->col, "unknown initialiser '%s'; expected %s", f, expected);
  for (int i = 0; i < e->nitems; i++) {
    const weft__dsl_expr *arg = e->items[i];
    if (e->keys[i] != NULL) {
      if (want != 2 || strcmp(e->keys[i], "seed") != 0)
        return err(c, WEFT_EPARSE, arg->line, arg->col, "unknown argument '%s' of %s; expected %s",
                   e->keys[i], f, want == 2 ? "seed" : "no keyword arguments");
      seed = arg;
    } else if (seed != NULL) {
      return err(c, WEFT_EPARSE, arg->line, arg->col, "positional argument after seed=; expected seed= last");
    } else {
      if (npos < 2) pos[npos] = arg;
      npos++;
    }
  }
  if (npos != want)
    return err(c, WEFT_EPARSE, e->line, e->col, "%s takes %d argument%s%s, got %d", f, want,
               want == 1 ? "" : "s", want == 2 ? " and an optional seed=S" : "", npos);
  value a = {0, 0, 0}, b = {0, 0, 0};
  int64_t s = 0;
  if (want >= 1 && eval_num(c, pos[0], &a) != OK) return FAIL;
  if (want >= 2 && eval_num(c, pos[1], &b) != OK) return FAIL;
  if (seed != NULL && eval_int(c, seed, "the seed", &s) != OK) return FAIL;
  char n1[40], n2[40];
  if (strcmp(f, "uniform") == 0 && !(as_double(a) <= as_double(b)))
    return err(c, WEFT_EPARSE, e->line, e->col, "uniform(%s, %s): the low bound is above the high bound; expected lo <= hi",
               weft__dsl_fmt_number(n1, as_double(a), 0), weft__dsl_fmt_number(n2, as_double(b), 0));
  if (strcmp(f, "normal") == 0 && !(as_double(b) >= 0))
    return err(c, WEFT_EPARSE, e->line, e->col,
               "normal(%s, %s): the standard deviation is negative; expected std >= 0",
               weft__dsl_fmt_number(n1, as_double(a), 0), weft__dsl_fmt_number(n2, as_double(b), 0));
  if (strcmp(f, "zeros") == 0)
    *out = weft_zeros();
  else if (strcmp(f, "ones") == 0)
    *out = weft_ones();
  else if (strcmp(f, "full") == 0)
    *out = weft_full(as_double(a));
  else if (strcmp(f, "eye") == 0)
    *out = weft_eye(as_double(a));
  else if (strcmp(f, "uniform") == 0)
    *out = weft_uniform(as_double(a), as_double(b), (uint64_t)s);
  else
    *out = weft_normal(as_double(a), as_double(b), (uint64_t)s);
  return OK;
}

/* ---- binding and bookkeeping ------------------------------------------------------------------ */

/* Binds y as what statement s made. */
static void bind(sym *y, int kind, const weft__dsl_stmt *s) {
  y->kind = kind;
  y->line = s->line;
  y->col = s->col;
}

/* Marks the name of expression `e` poisoned if it is not bound to something else already. */
static void poison(ctx *c, const weft__dsl_expr *e) {
  if (e == NULL || e->kind != EX_NAME) return;
  /* The indices may not evaluate (that may be the error): poison the bare name then. */
  int ok = eval_name(c, e) == OK;
  sym *s = symtab_slot(&c->syms, c->a, ok ? c->name.data : e->text);
  if (s == NULL) {
    oom(c);
    return;
  }
  if (s->kind == SYM_NONE) s->kind = SYM_POISON;
}

static void poison_name(ctx *c, const char *name) {
  sym *s = symtab_slot(&c->syms, c->a, name);
  if (s == NULL) {
    oom(c);
    return;
  }
  if (s->kind == SYM_NONE) s->kind = SYM_POISON;
}

/* Sets the origin of the nodes [from, now) and enters the tensors [tfrom, now) that weft made
 * by itself (automatic copies) under their names when those are free. */
static int after_call(ctx *c, const weft__dsl_stmt *s, size_t from, size_t tfrom, weft_tensor *result) {
  char origin[512];
  snprintf(origin, sizeof origin, "%s:%u:%u", c->d->file, s->line, s->col);
  size_t n = weft_graph_node_count(c->g);
  for (size_t i = from; i < n; i++)
    if (weft_node_set_origin(weft_graph_node(c->g, i), origin) != WEFT_OK) return oom(c);
  size_t nt = weft_graph_tensor_count(c->g);
  for (size_t i = tfrom; i < nt; i++) {
    weft_tensor *t = weft_graph_tensor(c->g, i);
    if (t == result) continue;
    sym *y = symtab_slot(&c->syms, c->a, weft_tensor_name(t));
    if (y == NULL) return oom(c);
    if (y->kind == SYM_NONE) {
      bind(y, SYM_TENSOR, s);
      y->t = t;
    }
  }
  if (n > c->max_nodes) {
    c->stop = 1;
    return err(c, WEFT_ELIMIT, s->line, s->col,
               "the program makes more than %zu nodes; expected at most max_nodes (%zu)", c->max_nodes,
               c->max_nodes);
  }
  return OK;
}

/* Names the statement's node (`as name`). */
static int set_label(ctx *c, const weft__dsl_stmt *s) {
  if (s->label == NULL) return OK;
  weft_node *n = weft_graph_last_node(c->g);
  if (eval_name(c, s->label) != OK) return FAIL;
  sym *y = symtab_slot(&c->nodes, c->a, c->name.data);
  if (y == NULL) return oom(c);
  y->kind = SYM_NODE;
  y->node = n;
  if (weft_node_set_name(n, c->name.data) != WEFT_OK) return oom(c);
  return OK;
}

/* The target of a statement that defines a name: its symbol if free, else an error. */
static int claim(ctx *c, const weft__dsl_expr *where, const char *name, sym **out) {
  sym *y = symtab_slot(&c->syms, c->a, name);
  if (y == NULL) return oom(c);
  if (y->kind == SYM_POISON) return FAIL;
  if (y->kind != SYM_NONE)
    return err(c, WEFT_EPARSE, where->line, where->col, "'%s' is already %s (from %u:%u); expected a new name",
               name, kind_word(y->kind), y->line, y->col);
  *out = y;
  return OK;
}

/* ---- ops ------------------------------------------------------------------------------------ */

/* Checks an op call's argument count and that it has no keywords. */
static int check_args(ctx *c, const weft__dsl_expr *call, int lo, int hi, const char *sig) {
  for (int i = 0; i < call->nitems; i++)
    if (call->keys[i] != NULL)
      return err(c, WEFT_EPARSE, call->items[i]->line, call->items[i]->col,
                 "%s takes no keyword arguments; expected %s", call->text, sig);
  if (call->nitems < lo || call->nitems > hi)
    return err(c, WEFT_EPARSE, call->line, call->col, "%s takes %d%s argument%s, got %d; expected %s",
               call->text, lo, hi > lo ? " or more" : "", hi == 1 ? "" : "s", call->nitems, sig);
  return OK;
}

static const char *op_signature(int kind) {
  switch (kind) {
    case WEFT__OP_MM: return "mm(a, b)";
    case WEFT__OP_ADD: return "add(a, b)";
    case WEFT__OP_SUB: return "sub(a, b)";
    case WEFT__OP_MUL: return "mul(a, b)";
    case WEFT__OP_SCALE: return "scale(x, alpha)";
    case WEFT__OP_RELU: return "relu(x)";
    case WEFT__OP_SUM: return "sum(x)";
    case WEFT__OP_NORM: return "norm(x)";
    case WEFT__OP_LINEAR: return "linear(x, w) or linear(x, w, b)";
    case WEFT__OP_COPY: return "copy(x, device)";
    case WEFT__OP_FILL: return "fill(x, init)";
    case WEFT__OP_GEMM: return "gemm(a, b, c, alpha=1, beta=1, trans_a=0, trans_b=0)";
    case WEFT__OP_POTRF: return "potrf(a, upper=0)";
    case WEFT__OP_TRSM: return "trsm(t, b, side=left, trans=0, alpha=1, upper=0)";
    case WEFT__OP_TRMM: return "trmm(t, b, side=left, trans=0, alpha=1, upper=0)";
    case WEFT__OP_TRTRI: return "trtri(t, w, upper=0)";
    case WEFT__OP_SYRK: return "syrk(a, c, alpha=1, beta=1, trans=0, upper=0)";
    default: return "?";
  }
}

static const char *const op_list =
    "mm, add, sub, mul, scale, relu, sum, norm, linear, copy, fill, gemm, potrf, trsm, trmm, trtri, syrk, tiles, "
    "distribute or a user op registered by the program that embeds weft";

static int is_linear_algebra(int kind) {
  return kind == WEFT__OP_GEMM || kind == WEFT__OP_POTRF || kind == WEFT__OP_TRSM || kind == WEFT__OP_TRMM ||
         kind == WEFT__OP_TRTRI || kind == WEFT__OP_SYRK;
}

/* y = op(...) with a built-in op. `out` is the existing target or NULL. */
static int builtin_assign(ctx *c, int kind, const weft__dsl_expr *call, weft_tensor **out) {
  const char *sig = op_signature(kind);
  weft_tensor *t[3] = {NULL, NULL, NULL};
  int lo = 1, hi = 1, ntensors = 1, rc;
  switch (kind) {
    case WEFT__OP_MM:
    case WEFT__OP_ADD:
    case WEFT__OP_SUB:
    case WEFT__OP_MUL:
      lo = hi = ntensors = 2;
      break;
    case WEFT__OP_SCALE:
      lo = hi = 2;
      break;
    case WEFT__OP_LINEAR:
      lo = 2;
      hi = ntensors = 3;
      break;
    case WEFT__OP_COPY:
      hi = 2;
      break;
    default:
      break;
  }
  if (check_args(c, call, lo, hi, sig) != OK) return FAIL;
  for (int i = 0; i < ntensors && i < call->nitems; i++)
    if (eval_tensor(c, call->items[i], &t[i]) != OK) return FAIL;
  switch (kind) {
    case WEFT__OP_MM: rc = weft_mm(c->g, t[0], t[1], out); break;
    case WEFT__OP_ADD: rc = weft_add(c->g, t[0], t[1], out); break;
    case WEFT__OP_SUB: rc = weft_sub(c->g, t[0], t[1], out); break;
    case WEFT__OP_MUL: rc = weft_mul(c->g, t[0], t[1], out); break;
    case WEFT__OP_RELU: rc = weft_relu(c->g, t[0], out); break;
    case WEFT__OP_SUM: rc = weft_sum(c->g, t[0], out); break;
    case WEFT__OP_NORM: rc = weft_norm(c->g, t[0], out); break;
    case WEFT__OP_LINEAR: rc = weft_linear(c->g, t[0], t[1], t[2], out); break;
    case WEFT__OP_SCALE: {
      value alpha;
      if (eval_num(c, call->items[1], &alpha) != OK) return FAIL;
      rc = weft_scale(c->g, t[0], as_double(alpha), out);
      break;
    }
    case WEFT__OP_COPY: {
      weft_device dev = weft_cpu();
      char d1[32], d2[32];
      if (call->nitems == 2 && eval_device(c, call->items[1], 0, &dev) != OK) return FAIL;
      if (*out == NULL && call->nitems < 2)
        return err(c, WEFT_EPARSE, call->line, call->col,
                   "copy to a new tensor needs a device; expected copy(x, device)");
      if (*out != NULL && call->nitems == 2 && !weft_device_equal(dev, weft_tensor_device(*out)))
        return err(c, WEFT_EPARSE, call->items[1]->line, call->items[1]->col,
                   "'%s' lives on %s, so the copy into it cannot go to %s; expected %s or no device",
                   weft_tensor_name(*out), weft_device_str(weft_tensor_device(*out), d1, sizeof d1),
                   weft_device_str(dev, d2, sizeof d2), d1);
      rc = weft_copy(c->g, t[0], dev, out);
      break;
    }
    default:
      return FAIL;
  }
  if (rc != WEFT_OK) return api_err(c, rc, call->line, call->col);
  return OK;
}

/* Parameter bytes of a user op: a typed list f64[...], f32, i64, i32 or u8, or several joined
 * with '+' (f64[0.5] + i32[3, 0]), appended to `out` in order, little-endian. */
static int eval_params(ctx *c, const weft__dsl_expr *e, weft__strbuf *out) {
  static const char *const types[] = {"f64", "f32", "i64", "i32", "u8"};
  if (e->kind == EX_BIN && e->op == '+') return eval_params(c, e->a, out) == OK ? eval_params(c, e->b, out) : FAIL;
  int type = -1;
  if (e->kind == EX_NAME && e->has_index)
    for (int k = 0; k < 5; k++)
      if (strcmp(e->text, types[k]) == 0) type = k;
  if (type < 0)
    return err(c, WEFT_EPARSE, e->line, e->col,
               "params must be a typed list; expected f64[...], f32[...], i64[...], i32[...] or u8[...], "
               "or several joined with '+'");
  for (int i = 0; i < e->nitems; i++) {
    value v;
    const weft__dsl_expr *x = e->items[i];
    if (eval_num(c, x, &v) != OK) return FAIL;
    if (type == 0) {
      double d = as_double(v);
      weft__strbuf_put(out, (const char *)&d, 8);
    } else if (type == 1) {
      float f = (float)as_double(v);
      weft__strbuf_put(out, (const char *)&f, 4);
    } else {
      if (v.is_float) return err(c, WEFT_EPARSE, x->line, x->col, "%s values must be integers", types[type]);
      if ((type == 3 && (v.i < INT32_MIN || v.i > INT32_MAX)) || (type == 4 && (v.i < 0 || v.i > 255)))
        return err(c, WEFT_EPARSE, x->line, x->col, "%lld does not fit in %s", (long long)v.i, types[type]);
      int32_t w = (int32_t)v.i;
      unsigned char b = (unsigned char)v.i;
      if (type == 2)
        weft__strbuf_put(out, (const char *)&v.i, 8);
      else if (type == 3)
        weft__strbuf_put(out, (const char *)&w, 4);
      else
        weft__strbuf_put(out, (const char *)&b, 1);
    }
  }
  return out->failed ? oom(c) : OK;
}

static int user_call(ctx *c, const weft_op *op, const weft__dsl_expr *call) {
  /* An op with `rest` takes any number of tensors past its listed ones, each with that mode. */
  int want = op->desc.nargs, variadic = op->desc.rest != 0, n = 0, rc = OK;
  weft_tensor **args = weft__malloc((size_t)(call->nitems > 0 ? call->nitems : 1) * sizeof *args);
  if (args == NULL) return oom(c);
  weft__strbuf params;
  weft__strbuf_init(&params);
  for (int i = 0; i < call->nitems && rc == OK; i++) {
    const weft__dsl_expr *x = call->items[i];
    if (call->keys[i] != NULL) {
      if (strcmp(call->keys[i], "params") != 0)
        rc = err(c, WEFT_EPARSE, x->line, x->col, "unknown argument '%s' of %s; expected params=", call->keys[i],
                 call->text);
      else
        rc = eval_params(c, x, &params);
      continue;
    }
    weft_access mode = n < want ? op->desc.access[n] : op->desc.rest;
    if ((n < want || variadic) &&
        (eval_tensor(c, x, &args[n]) != OK || ((mode & WEFT_WRITE) && check_writable(c, x, args[n]) != OK)))
      rc = FAIL;
    n++;
  }
  if (rc == OK && !variadic && n != want)
    rc = err(c, WEFT_EPARSE, call->line, call->col, "%s takes %d tensor argument%s, got %d", call->text, want,
             want == 1 ? "" : "s", n);
  if (rc == OK && variadic && n < want)
    rc = err(c, WEFT_EPARSE, call->line, call->col, "%s takes at least %d tensor argument%s, got %d", call->text,
             want, want == 1 ? "" : "s", n);
  if (rc == OK) {
    int st = weft_call(c->g, op, args, n, params.data, params.len);
    if (st != WEFT_OK) rc = api_err(c, st, call->line, call->col);
  }
  weft__strbuf_fini(&params);
  weft__free(args);
  return rc;
}

/* ---- statements ----------------------------------------------------------------------------- */

static int exec_block(ctx *c, const weft__dsl_block *b);

static int exec_param(ctx *c, const weft__dsl_stmt *s) {
  weft__dsl_expr where = {.line = s->name_line, .col = s->name_col};
  if (c->loop_depth > 0) {
    poison_name(c, s->name);
    return err(c, WEFT_EPARSE, s->line, s->col, "'param' inside a loop; expected parameters at the top level");
  }
  sym *y;
  if (claim(c, &where, s->name, &y) != OK) return FAIL;
  value v;
  if (eval_num(c, s->value, &v) != OK) {
    poison_name(c, s->name);
    return FAIL;
  }
  for (int i = 0; i < c->ndefs; i++)
    if (strcmp(c->defs[i].name, s->name) == 0) {
      v = c->defs[i].v;
      c->defs[i].used = 1;
    }
  y = symtab_slot(&c->syms, c->a, s->name);
  bind(y, SYM_PARAM, s);
  y->v = v;
  return OK;
}

static int exec_device(ctx *c, const weft__dsl_stmt *s) {
  weft__dsl_expr where = {.line = s->name_line, .col = s->name_col};
  char list[256];
  if (c->loop_depth > 0) {
    poison_name(c, s->name);
    return err(c, WEFT_EPARSE, s->line, s->col, "'device' inside a loop; expected devices at the top level");
  }
  sym *y;
  if (claim(c, &where, s->name, &y) != OK) return FAIL;
  weft_device chosen = weft_cpu();
  int found = 0;
  for (int i = 0; i < s->nlist; i++) {
    weft_device d;
    if (eval_device(c, s->list[i], 1, &d) != OK) {
      poison_name(c, s->name);
      return FAIL;
    }
    if (!found && weft_device_exists(c->rt, d)) {
      chosen = d;
      found = 1;
    }
  }
  if (c->have_override) {
    chosen = c->override;
    found = 1;
  }
  if (!found) {
    poison_name(c, s->name);
    return err(c, WEFT_EDEVICE, s->line, s->col,
               "no device of '%s' exists on this machine (it has %s); expected a fallback that "
               "does, such as '| cpu'",
               s->name, device_list(c, list, sizeof list));
  }
  y = symtab_slot(&c->syms, c->a, s->name);
  bind(y, SYM_DEVICE, s);
  y->dev = chosen;
  return OK;
}

/* Resolves `path` against the base directory into the arena. */
static const char *resolve_path(ctx *c, const char *path) {
  if (c->base_dir == NULL || c->base_dir[0] == '\0' || path[0] == '/') return weft__arena_strdup(c->a, path);
  size_t nb = strlen(c->base_dir), np = strlen(path);
  char *s = weft__arena_alloc(c->a, nb + np + 2, 1);
  if (s == NULL) return NULL;
  memcpy(s, c->base_dir, nb);
  size_t k = nb;
  if (s[k - 1] != '/') s[k++] = '/';
  memcpy(s + k, path, np + 1);
  return s;
}

static int exec_tensor(ctx *c, const weft__dsl_stmt *s) {
  if (eval_name(c, s->target) != OK) {
    poison(c, s->target);
    return FAIL;
  }
  sym *y;
  if (claim(c, s->target, c->name.data, &y) != OK) return FAIL;
  const char *name = y->key;
  int64_t shape[WEFT_MAX_DIMS];
  int ndim = s->nlist;
  weft_device dev = c->default_dev;
  weft_init init = weft_zeros();
  int bad = 0;
  if (ndim > WEFT_MAX_DIMS) {
    bad = err(c, WEFT_EPARSE, s->list[WEFT_MAX_DIMS]->line, s->list[WEFT_MAX_DIMS]->col,
              "tensor '%s' has %d dimensions; expected at most %d", name, ndim, WEFT_MAX_DIMS);
  }
  for (int i = 0; !bad && i < ndim; i++) {
    if (eval_int(c, s->list[i], "a dimension", &shape[i]) != OK) bad = 1;
    else if (shape[i] < 0)
      bad = err(c, WEFT_EPARSE, s->list[i]->line, s->list[i]->col,
                "dimension %d of '%s' is %lld; expected 0 or more", i, name, (long long)shape[i]);
  }
  if (!bad && s->device != NULL && eval_device(c, s->device, 0, &dev) != OK) bad = 1;
  if (!bad && s->value != NULL && eval_init(c, s->value, &init) != OK) bad = 1;
  if (!bad && s->path != NULL && c->deny_files)
    bad = err(c, WEFT_EPARSE, s->path_line, s->path_col,
              "reading files is not allowed here; expected an initialiser such as zeros or uniform(0, 1)");
  weft_tensor *t = NULL;
  int rc;
  if (!bad && (rc = weft_tensor_create(c->g, name, (weft_dtype)s->dtype, ndim, shape, dev, init, &t)) != WEFT_OK)
    bad = api_err(c, rc, s->line, s->col);
  if (!bad && s->path != NULL) {
    const char *path = resolve_path(c, s->path);
    if (path == NULL) return oom(c);
    if ((rc = weft__dsl_load_tensor(t, path, s->text_format)) != WEFT_OK) {
      if (rc == WEFT_ENOMEM) return oom(c);
      err(c, rc, s->path_line, s->path_col, "%s", weft_last_error());
    }
  }
  if (bad) {
    y->kind = SYM_POISON;
    return FAIL;
  }
  bind(y, SYM_TENSOR, s);
  y->t = t;
  return OK;
}

static int exec_assign(ctx *c, const weft__dsl_stmt *s) {
  const weft__dsl_expr *call = s->value;
  if (eval_name(c, s->target) != OK) {
    poison(c, s->target);
    return FAIL;
  }
  sym *y = symtab_slot(&c->syms, c->a, c->name.data);
  if (y == NULL) return oom(c);
  if (y->kind == SYM_POISON) return FAIL;
  if (y->kind != SYM_NONE && y->kind != SYM_TENSOR)
    return err(c, WEFT_EPARSE, s->target->line, s->target->col, "'%s' is %s; expected a tensor name to assign to",
               y->key, kind_word(y->kind));
  const char *name = y->key;
  weft_tensor *out = y->kind == SYM_TENSOR ? y->t : NULL;
  int is_new = out == NULL;
  if (out != NULL && check_writable(c, s->target, out) != OK) return FAIL;
  int kind = weft__op_kind_find(call->text);
  size_t n0 = weft_graph_node_count(c->g), t0 = weft_graph_tensor_count(c->g);
  int rc;
  if (kind == WEFT__OP_FILL) {
    rc = err(c, WEFT_EPARSE, call->line, call->col,
             "fill writes the tensor it is given and has no result; expected a statement of its own: "
             "fill(tensor, init)");
  } else if (is_linear_algebra(kind)) {
    rc = err(c, WEFT_EPARSE, call->line, call->col, "%s %s and has no result; expected a statement of its own: %s",
             call->text, kind == WEFT__OP_TRTRI ? "writes the inverse into its last tensor" : "updates its last tensor in place",
             op_signature(kind));
  } else if (strcmp(call->text, "tiles") == 0) {
    rc = err(c, WEFT_EPARSE, call->line, call->col,
             "tiles partitions a tensor and has no result; expected a statement of its own: tiles(x, rows) or "
             "tiles(x, rows, cols)");
  } else if (strcmp(call->text, "distribute") == 0) {
    rc = err(c, WEFT_EPARSE, call->line, call->col,
             "distribute places a tensor's tiles and has no result; expected a statement of its own: "
             "distribute(x, P, Q)");
  } else if (kind >= 0) {
    rc = builtin_assign(c, kind, call, &out);
  } else if (weft_op_find(c->rt, call->text) != NULL) {
    rc = err(c, WEFT_EPARSE, call->line, call->col,
             "'%s' is a user op: it writes its own arguments and has no result; expected a call "
             "statement: %s(...)",
             call->text, call->text);
  } else {
    rc = err(c, WEFT_EPARSE, call->line, call->col, "unknown op '%s'; expected %s", call->text, op_list);
  }
  if (rc != OK) {
    if (is_new && y->kind == SYM_NONE) y->kind = SYM_POISON;
    return FAIL;
  }
  if (is_new) {
    if (weft_tensor_set_name(out, name) != WEFT_OK) return oom(c);
    bind(y, SYM_TENSOR, s);
    y->t = out;
  }
  if (after_call(c, s, n0, t0, out) != OK) return FAIL;
  return set_label(c, s);
}

/* The keyword arguments of a linear-algebra op: each name in `names` (NULL-terminated) with
 * its value in vals[] (numbers; side takes left or right, 0 and 1 in vals). Positional
 * arguments are counted into *npos and must come first. */
static int la_args(ctx *c, const weft__dsl_expr *call, const char *const *names, double *vals, int *npos) {
  const char *sig = op_signature(weft__op_kind_find(call->text));
  *npos = 0;
  for (int i = 0; i < call->nitems; i++) {
    const weft__dsl_expr *x = call->items[i];
    if (call->keys[i] == NULL) {
      if (*npos < i)
        return err(c, WEFT_EPARSE, x->line, x->col, "a tensor after keyword arguments; expected %s", sig);
      (*npos)++;
      continue;
    }
    int k = 0;
    while (names[k] != NULL && strcmp(names[k], call->keys[i]) != 0) k++;
    if (names[k] == NULL)
      return err(c, WEFT_EPARSE, x->line, x->col, "unknown argument '%s' of %s; expected %s", call->keys[i], call->text,
                 sig);
    if (strcmp(names[k], "side") == 0) {
      if (x->kind != EX_NAME || x->has_index || (strcmp(x->text, "left") != 0 && strcmp(x->text, "right") != 0))
        return err(c, WEFT_EPARSE, x->line, x->col, "side must be left or right");
      vals[k] = strcmp(x->text, "right") == 0;
      continue;
    }
    value v;
    if (eval_num(c, x, &v) != OK) return FAIL;
    vals[k] = as_double(v);
    if ((strncmp(names[k], "trans", 5) == 0 || strcmp(names[k], "upper") == 0) && vals[k] != 0 && vals[k] != 1)
      return err(c, WEFT_EPARSE, x->line, x->col, "%s must be 0 or 1", names[k]);
  }
  return OK;
}

/* gemm, potrf, trsm, trmm, trtri, syrk: statements that update their last tensor in place
 * (trtri writes it whole). */
static int exec_linear_algebra(ctx *c, int kind, const weft__dsl_expr *call) {
  static const char *const gemm_keys[] = {"alpha", "beta", "trans_a", "trans_b", NULL};
  static const char *const trsm_keys[] = {"side", "trans", "alpha", "upper", NULL};
  static const char *const syrk_keys[] = {"alpha", "beta", "trans", "upper", NULL};
  static const char *const potrf_keys[] = {"upper", NULL};
  int triangular = kind == WEFT__OP_TRSM || kind == WEFT__OP_TRMM;
  const char *const *keys = kind == WEFT__OP_GEMM ? gemm_keys : triangular ? trsm_keys
                            : kind == WEFT__OP_SYRK ? syrk_keys : potrf_keys;
  /* gemm: alpha, beta, trans_a, trans_b; trsm, trmm: side, trans, alpha, upper; syrk: alpha,
   * beta, trans, upper; potrf, trtri: upper. */
  double v[4] = {1, 1, 0, 0};
  if (triangular) v[0] = 0, v[1] = 0, v[2] = 1;
  if (kind == WEFT__OP_POTRF || kind == WEFT__OP_TRTRI) v[0] = 0;
  int npos, want = kind == WEFT__OP_GEMM ? 3 : kind == WEFT__OP_POTRF ? 1 : 2;
  if (la_args(c, call, keys, v, &npos) != OK) return FAIL;
  if (npos != want)
    return err(c, WEFT_EPARSE, call->line, call->col, "%s takes %d tensor argument%s, got %d; expected %s", call->text,
               want, want == 1 ? "" : "s", npos, op_signature(kind));
  weft_tensor *t[3];
  for (int i = 0; i < want; i++)
    if (eval_tensor(c, call->items[i], &t[i]) != OK) return FAIL;
  if (check_writable(c, call->items[want - 1], t[want - 1]) != OK) return FAIL;
  int rc;
  switch (kind) {
    case WEFT__OP_GEMM: rc = weft_gemm(c->g, t[0], (int)v[2], t[1], (int)v[3], v[0], v[1], t[2]); break;
    case WEFT__OP_POTRF: rc = weft_potrf(c->g, v[0] != 0 ? WEFT_UPPER : WEFT_LOWER, t[0]); break;
    case WEFT__OP_TRSM:
      rc = weft_trsm(c->g, v[0] != 0 ? WEFT_RIGHT : WEFT_LEFT, v[3] != 0 ? WEFT_UPPER : WEFT_LOWER, (int)v[1], v[2], t[0],
                     t[1]);
      break;
    case WEFT__OP_TRMM:
      rc = weft_trmm(c->g, v[0] != 0 ? WEFT_RIGHT : WEFT_LEFT, v[3] != 0 ? WEFT_UPPER : WEFT_LOWER, (int)v[1], v[2], t[0],
                     t[1]);
      break;
    case WEFT__OP_TRTRI: rc = weft_trtri(c->g, v[0] != 0 ? WEFT_UPPER : WEFT_LOWER, t[0], t[1]); break;
    default: rc = weft_syrk(c->g, v[3] != 0 ? WEFT_UPPER : WEFT_LOWER, (int)v[2], v[0], t[0], v[1], t[1]); break;
  }
  return rc == WEFT_OK ? OK : api_err(c, rc, call->line, call->col);
}

/* tiles(x, rows, cols): partitions x; its tiles are the tensors x[i, j]. */
static int exec_tiles(ctx *c, const weft__dsl_expr *call) {
  static const char *const sig = "tiles(x, rows) or tiles(x, rows, cols)";
  weft_tensor *x;
  int64_t r = 0, k = 0;
  if (check_args(c, call, 2, 3, sig) != OK || eval_tensor(c, call->items[0], &x) != OK ||
      eval_int(c, call->items[1], "a tile's rows", &r) != OK ||
      (call->nitems == 3 && eval_int(c, call->items[2], "a tile's columns", &k) != OK))
    return FAIL;
  if (call->nitems == 2) k = r;
  if (strchr(weft_tensor_name(x), '[') != NULL)
    return err(c, WEFT_EPARSE, call->items[0]->line, call->items[0]->col,
               "tiles takes a tensor with a plain name (its tiles are named %s[i, j]); '%s' is not one",
               weft_tensor_name(x), weft_tensor_name(x));
  size_t t0 = weft_graph_tensor_count(c->g);
  int rc = weft_tensor_tiles(c->g, x, r, k);
  if (rc != WEFT_OK) return api_err(c, rc, call->line, call->col);
  for (size_t i = t0; i < weft_graph_tensor_count(c->g); i++) {
    weft_tensor *t = weft_graph_tensor(c->g, i);
    sym *y = symtab_slot(&c->syms, c->a, weft_tensor_name(t));
    if (y == NULL) return oom(c);
    if (y->kind != SYM_NONE)
      return err(c, WEFT_EPARSE, call->line, call->col, "tile '%s' of %s: the name is already %s (from %u:%u)",
                 y->key, weft_tensor_name(x), kind_word(y->kind), y->line, y->col);
  }
  return OK;
}

/* distribute(x, P, Q): x's tiles over a P x Q grid of the run's ranks (docs/distributed.md). */
static int exec_distribute(ctx *c, const weft__dsl_expr *call) {
  static const char *const sig = "distribute(x, P, Q)";
  weft_tensor *x;
  int64_t P = 0, Q = 0;
  if (check_args(c, call, 3, 3, sig) != OK || eval_tensor(c, call->items[0], &x) != OK ||
      eval_int(c, call->items[1], "the rows of the grid of ranks", &P) != OK ||
      eval_int(c, call->items[2], "the columns of the grid of ranks", &Q) != OK)
    return FAIL;
  if (P < 1 || Q < 1 || P > INT_MAX || Q > INT_MAX)
    return err(c, WEFT_EPARSE, call->line, call->col, "distribute(%s, %lld, %lld): the grid of ranks must be at least 1 x 1",
               weft_tensor_name(x), (long long)P, (long long)Q);
  int rc = weft_tensor_distribute(c->g, x, (int)P, (int)Q);
  return rc == WEFT_OK ? OK : api_err(c, rc, call->line, call->col);
}

static int exec_call(ctx *c, const weft__dsl_stmt *s) {
  const weft__dsl_expr *call = s->value;
  int kind = weft__op_kind_find(call->text);
  size_t n0 = weft_graph_node_count(c->g), t0 = weft_graph_tensor_count(c->g);
  if (kind == WEFT__OP_FILL) {
    weft_tensor *t;
    weft_init init;
    if (check_args(c, call, 2, 2, "fill(x, init)") != OK || eval_tensor(c, call->items[0], &t) != OK ||
        check_writable(c, call->items[0], t) != OK || eval_init(c, call->items[1], &init) != OK)
      return FAIL;
    int rc = weft_fill(c->g, t, init);
    if (rc != WEFT_OK) return api_err(c, rc, call->line, call->col);
  } else if (is_linear_algebra(kind)) {
    if (exec_linear_algebra(c, kind, call) != OK) return FAIL;
  } else if (kind >= 0) {
    return err(c, WEFT_EPARSE, call->line, call->col, "%s computes a result; expected an assignment: y = %s",
               call->text, op_signature(kind));
  } else if (strcmp(call->text, "tiles") == 0) {
    if (exec_tiles(c, call) != OK) return FAIL;
  } else if (strcmp(call->text, "distribute") == 0) {
    if (exec_distribute(c, call) != OK) return FAIL;
  } else {
    const weft_op *op = weft_op_find(c->rt, call->text);
    if (op == NULL)
      return err(c, WEFT_EPARSE, call->line, call->col, "unknown op '%s'; expected %s", call->text, op_list);
    if (user_call(c, op, call) != OK) return FAIL;
  }
  if (after_call(c, s, n0, t0, NULL) != OK) return FAIL;
  return set_label(c, s);
}

static int exec_outputs(ctx *c, const weft__dsl_stmt *s) {
  int bad = 0;
  int count = s->kind == ST_SAVE ? 1 : s->nlist;
  for (int i = 0; i < count; i++) {
    const weft__dsl_expr *e = s->kind == ST_SAVE ? s->target : s->list[i];
    weft_tensor *t;
    if (eval_tensor(c, e, &t) != OK) {
      bad = 1;
      continue;
    }
    weft_tensor_keep(t);
    if (s->kind == ST_KEEP) continue;
    weft__dsl_output o = {s->kind == ST_SAVE ? WEFT__DSL_SAVE : WEFT__DSL_PRINT, t,
                          weft__arena_strdup(c->a, c->name.data), NULL, s->text_format};
    if (o.name == NULL) return oom(c);
    if (s->kind == ST_SAVE) {
      if (c->deny_files)
        return err(c, WEFT_EPARSE, s->path_line, s->path_col,
                   "writing files is not allowed here; expected print instead of save");
      if ((o.path = resolve_path(c, s->path)) == NULL) return oom(c);
    }
    if (weft__vec_push(&c->prog->outputs, &o) != WEFT_OK) return oom(c);
  }
  return bad ? FAIL : OK;
}

static int node_ref(ctx *c, const weft__dsl_expr *e, weft_node **out) {
  if (e->kind == EX_NODEID) {
    int64_t id = 0;
    if (eval_int(c, e->a, "a node number", &id) != OK) return FAIL;
    size_t n = weft_graph_node_count(c->g);
    if (id < 0 || (uint64_t)id >= n)
      return err(c, WEFT_EPARSE, e->line, e->col, "there is no node @%lld; expected @0 to @%zu (the nodes so far)",
                 (long long)id, n ? n - 1 : 0);
    *out = weft_graph_node(c->g, (size_t)id);
    return OK;
  }
  if (eval_name(c, e) != OK) return FAIL;
  sym *y = symtab_find(&c->nodes, c->name.data);
  if (y == NULL || y->kind != SYM_NODE)
    return err(c, WEFT_EPARSE, e->line, e->col,
               "unknown node '%s'; expected a name given to a node earlier with 'as', or @N (a node's number)",
               c->name.data);
  *out = y->node;
  return OK;
}

static int exec_edge(ctx *c, const weft__dsl_stmt *s) {
  weft_node *prev = NULL;
  for (int i = 0; i < s->nlist; i++) {
    weft_node *n = NULL;
    if (node_ref(c, s->list[i], &n) != OK) return FAIL;
    if (prev == n)
      return err(c, WEFT_EPARSE, s->list[i]->line, s->list[i]->col,
                 "an edge from a node to itself would be a cycle; expected two different nodes");
    if (prev != NULL) {
      int rc = weft_graph_add_edge(c->g, prev, n);
      if (rc != WEFT_OK) return api_err(c, rc, s->list[i]->line, s->list[i]->col);
    }
    prev = n;
  }
  return OK;
}

static int exec_for(ctx *c, const weft__dsl_stmt *s) {
  int64_t lo = 0, hi = 1;
  int poisoned = s->poison_var;
  if (!poisoned && (eval_int(c, s->lo, "a loop bound", &lo) != OK || eval_int(c, s->hi, "a loop bound", &hi) != OK))
    poisoned = 1;
  /* The variable is bound for the loop's duration only; a name in use already is an error
   * (and the body is still checked once). */
  int own = 0; /* the loop binds its variable */
  if (s->name != NULL) {
    weft__dsl_expr where = {.line = s->name_line, .col = s->name_col};
    sym *y;
    if (claim(c, &where, s->name, &y) == OK)
      own = 1;
    else
      poisoned = 1;
    if (c->stop) return FAIL;
  }
  if (poisoned) {
    lo = 0;
    hi = 1;
  }
  c->loop_depth++;
  for (int64_t i = lo; i < hi && !c->stop; i++) {
    if (++c->steps > c->max_steps) {
      c->stop = 1;
      err(c, WEFT_ELIMIT, s->line, s->col,
          "the program runs more than %llu statements (loop iterations included); expected at most "
          "4 x max_nodes",
          (unsigned long long)c->max_steps);
      break;
    }
    if (own) {
      /* Looked up each time: the body may grow the table and move the slot. */
      sym *y = symtab_find(&c->syms, s->name);
      bind(y, poisoned ? SYM_POISON : SYM_LOOP, s);
      y->v.is_float = 0;
      y->v.i = i;
    }
    exec_block(c, s->body);
  }
  c->loop_depth--;
  if (own) symtab_find(&c->syms, s->name)->kind = SYM_NONE;
  return poisoned ? FAIL : OK;
}

static int exec_stmt(ctx *c, const weft__dsl_stmt *s) {
  if (++c->steps > c->max_steps) {
    c->stop = 1;
    return err(c, WEFT_ELIMIT, s->line, s->col,
               "the program runs more than %llu statements (loop iterations included); expected at "
               "most 4 x max_nodes",
               (unsigned long long)c->max_steps);
  }
  switch (s->kind) {
    case ST_PARAM: return exec_param(c, s);
    case ST_DEVICE: return exec_device(c, s);
    case ST_TENSOR: return exec_tensor(c, s);
    case ST_ASSIGN: return exec_assign(c, s);
    case ST_CALL: return exec_call(c, s);
    case ST_FOR: return exec_for(c, s);
    case ST_PRINT:
    case ST_SAVE:
    case ST_KEEP: return exec_outputs(c, s);
    case ST_EDGE: return exec_edge(c, s);
    case ST_STRICT:
      weft_graph_set_strict(c->g, 1);
      return OK;
    case ST_BROKEN:
      poison(c, s->target);
      return FAIL;
    default:
      return FAIL;
  }
}

static int exec_block(ctx *c, const weft__dsl_block *b) {
  for (int i = 0; i < b->n && !c->stop; i++) exec_stmt(c, b->stmts[i]);
  return OK;
}

/* ---- options -------------------------------------------------------------------------------- */

void weft_dsl_options_init(weft_dsl_options *o) {
  memset(o, 0, sizeof *o);
}

/* Parses a -D value: an integer or a decimal number, optionally signed ("400", "-2", "0.5",
 * "1e-3"). */
static int parse_number(const char *s, value *out) {
  const char *digits = (*s == '-' || *s == '+') ? s + 1 : s;
  int is_int = *digits != '\0';
  for (const char *p = s; *p; p++) {
    if (*p >= '0' && *p <= '9') continue;
    is_int = 0;
    if (!strchr("+-.eE", *p)) return 0;
  }
  if (*digits < '0' || *digits > '9') return 0;
  char *end;
  errno = 0;
  if (is_int) {
    long long v = strtoll(s, &end, 10);
    if (*end != '\0' || errno == ERANGE) return 0;
    out->is_float = 0;
    out->i = v;
    return 1;
  }
  double d = strtod(s, &end);
  if (*end != '\0' || isinf(d) || isnan(d)) return 0;
  out->is_float = 1;
  out->f = d;
  return 1;
}

static int load_defines(ctx *c, const weft_dsl_options *o) {
  if (o->ndefines <= 0) return OK;
  if (o->defines == NULL) return err(c, WEFT_EINVAL, 0, 0, "ndefines is %d but defines is NULL", o->ndefines);
  c->defs = weft__calloc((size_t)o->ndefines, sizeof *c->defs);
  if (c->defs == NULL) return oom(c);
  c->ndefs = o->ndefines;
  int bad = 0;
  for (int i = 0; i < o->ndefines; i++) {
    const char *d = o->defines[i] ? o->defines[i] : "";
    const char *eq = strchr(d, '=');
    size_t n = eq ? (size_t)(eq - d) : strlen(d);
    char *name = weft__malloc(n + 1);
    if (name == NULL) return oom(c);
    memcpy(name, d, n);
    name[n] = '\0';
    c->defs[i].name = name;
    c->defs[i].text = d;
    c->defs[i].used = 1; /* until it parses */
    int ident = n > 0 && !(name[0] >= '0' && name[0] <= '9');
    for (size_t k = 0; k < n; k++) {
      char ch = name[k];
      if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_')) ident = 0;
    }
    if (eq == NULL || !ident) {
      bad = err(c, WEFT_EINVAL, 0, 0, "-D %s: expected NAME=VALUE with a parameter name (-D N=400)", d);
      continue;
    }
    if (!parse_number(eq + 1, &c->defs[i].v)) {
      bad = err(c, WEFT_EINVAL, 0, 0, "-D %s: '%s' is not a number; expected an integer or a decimal number",
                d, eq + 1);
      continue;
    }
    c->defs[i].used = 0;
  }
  return bad ? FAIL : OK;
}

static void check_defines(ctx *c) {
  for (int i = 0; i < c->ndefs; i++) {
    if (c->defs[i].used) continue;
    weft__strbuf list;
    weft__strbuf_init(&list);
    for (size_t k = 0; k < c->syms.len; k++) /* in declaration order */
      if (c->syms.entries[k].kind == SYM_PARAM)
        weft__strbuf_printf(&list, "%s%s", list.len ? ", " : "", c->syms.entries[k].key);
    err(c, WEFT_EINVAL, 0, 0, "-D %s: the program has no parameter '%s'; expected one of its parameters (%s)",
        c->defs[i].text, c->defs[i].name, list.len ? list.data : "it has none");
    weft__strbuf_fini(&list);
  }
}

/* ---- public --------------------------------------------------------------------------------- */

void weft_program_destroy(weft_program *p) {
  if (p == NULL) return;
  weft_graph_destroy(p->graph);
  weft__vec_fini(&p->outputs);
  weft__arena_fini(&p->arena);
  weft__free(p);
}

weft_graph *weft_program_graph(const weft_program *p) { return p->graph; }

static int build(ctx *c, const weft_dsl_options *o) {
  char list[256];
  if (o->device != NULL) {
    if (weft_device_parse(o->device, &c->override) != WEFT_OK)
      return err(c, WEFT_EINVAL, 0, 0, "--device %s: %s", o->device, weft_last_error());
    if (!weft_device_exists(c->rt, c->override))
      return err(c, WEFT_EDEVICE, 0, 0, "--device %s: this machine has no such device (it has %s)", o->device,
                 device_list(c, list, sizeof list));
    c->have_override = 1;
    c->default_dev = c->override;
  }
  load_defines(c, o); /* a bad -D is reported, and the program is still checked */
  if (c->stop) return FAIL;
  exec_block(c, c->prog->ast);
  if (!c->stop) check_defines(c);
  return OK;
}

int weft_program_parse(weft_runtime *rt, const char *filename, const char *text, size_t len,
                       const weft_dsl_options *opts, weft_program **out) {
  if (out != NULL) *out = NULL;
  if (rt == NULL || out == NULL || (text == NULL && len > 0))
    return weft__err(WEFT_EINVAL, "weft_program_parse: NULL argument");
  if (len > UINT32_MAX - 16)
    return weft__err(WEFT_ELIMIT, "weft_program_parse: %zu bytes is too large for a .weft file", len);
  weft_dsl_options defaults;
  weft_dsl_options_init(&defaults);
  const weft_dsl_options *o = opts ? opts : &defaults;
  const char *file = filename ? filename : "<input>";
  if (text == NULL) text = "";

  weft_program *p = weft__calloc(1, sizeof *p);
  if (p == NULL) return weft__oom("a program");
  weft__arena_init(&p->arena, 16 * 1024, NULL);
  weft__vec_init(&p->outputs, sizeof(weft__dsl_output));
  weft__dsl_diags d;
  weft__dsl_diags_init(&d, file, text, len);
  weft__vec toks, comments;
  weft__vec_init(&toks, sizeof(weft__dsl_tok));
  weft__vec_init(&comments, sizeof(weft__dsl_comment));
  ctx c;
  memset(&c, 0, sizeof c);
  weft__strbuf_init(&c.name);

  int rc = weft__dsl_lex(&d, &p->arena, &toks, &comments);
  if (rc == WEFT_OK)
    rc = weft__dsl_parse(&d, &p->arena, toks.data, toks.len, comments.data, comments.len, &p->ast);
  if (rc == WEFT_OK) rc = weft_graph_create(rt, &p->graph);
  if (rc == WEFT_OK) {
    c.rt = rt;
    c.g = p->graph;
    c.prog = p;
    c.d = &d;
    c.a = &p->arena;
    c.default_dev = weft_cpu();
    c.base_dir = o->base_dir;
    c.deny_files = o->deny_files;
    c.max_nodes = o->max_nodes ? o->max_nodes : 10000000;
    c.max_steps = (uint64_t)c.max_nodes * 4;
    build(&c, o);
    rc = weft__dsl_diags_finish(&d);
  }
  for (int i = 0; i < c.ndefs; i++) weft__free((void *)c.defs[i].name);
  weft__free(c.defs);
  symtab_fini(&c.syms);
  symtab_fini(&c.nodes);
  weft__strbuf_fini(&c.name);
  weft__vec_fini(&toks);
  weft__vec_fini(&comments);
  weft__dsl_diags_fini(&d);
  if (rc != WEFT_OK) {
    weft_program_destroy(p);
    return rc;
  }
  *out = p;
  return WEFT_OK;
}
