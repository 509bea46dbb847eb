/* parser.c — tokens to the syntax tree, by recursive descent, with statement-level recovery.
 *
 * Grammar (docs/dsl.md has the reference with examples):
 *
 *   program   = { stmt end } ;                    end = NEWLINE | ';' | before '}' | EOF
 *   stmt      = "param" IDENT "=" expr
 *             | "device" IDENT "=" expr { "|" expr }
 *             | "tensor" name ":" IDENT [ "[" [ expr { "," expr } ] "]" ]
 *                   [ "on" expr ] [ "=" ( expr | "from" [ "text" ] STRING ) ]
 *             | name "=" call [ "as" name ]
 *             | call [ "as" name ]
 *             | "for" IDENT "in" expr ".." expr "{" program "}"
 *             | "print" name { "," name }    | "keep" name { "," name }
 *             | "save" name "to" [ "text" ] STRING
 *             | "edge" node "->" node { "->" node }
 *             | "strict" ;
 *   node      = name | "@" primary ;
 *   name      = ( IDENT | QNAME ) [ "[" expr { "," expr } "]" ] ;
 *   call      = ( IDENT | QNAME ) "(" [ arg { "," arg } ] ")" ;   arg = [ IDENT "=" ] expr
 *   expr      = term { ( "+" | "-" ) term } ;  term = unary { ( "*" | "/" | "%" ) unary } ;
 *   unary     = ( "-" | "+" ) unary | primary ;
 *   primary   = INT | FLOAT | "inf" | "nan" | name | call | "(" expr ")" | "cpu" | "cuda" ":" primary ;
 *
 * Words like on, as, in, to, from, text, f32 are recognised by position, not reserved. Every
 * expression is parsed the same way; what an argument must be (a tensor, a number, a device,
 * an initialiser) is checked when the program is built, where the message can say why.
 *
 * Recovery: an error records one diagnostic and skips to the end of the statement (the next
 * end of line or ';' outside braces, or a '}' that closes the block). A statement broken after
 * the name it defines leaves an ST_BROKEN that poisons the name, so later uses of it are not
 * reported again. A broken loop header still has its body parsed (and checked once). Nesting
 * is bounded (expressions 200 deep, loops 64 deep) so no input exhausts the stack. */
#include <string.h>

#include "dsl/dsl_internal.h"

enum { MAX_EXPR_DEPTH = 200, MAX_BLOCK_DEPTH = 64 };

typedef struct parser {
  weft__dsl_diags *d;
  weft__arena *a;
  const weft__dsl_tok *t;
  size_t n, pos;
  const weft__dsl_comment *c;
  size_t nc, ci;
  uint32_t last_line; /* line of the last token or comment taken, 0 at the start of a block */
  int depth, block_depth;
  int oom;
} parser;

static const weft__dsl_tok *cur(const parser *p) { return &p->t[p->pos]; }
static int at(const parser *p, int kind) { return p->t[p->pos].kind == kind; }
static const weft__dsl_tok *prev_tok(const parser *p) { return &p->t[p->pos ? p->pos - 1 : 0]; }
static void advance(parser *p) {
  if (p->t[p->pos].kind != TK_EOF) p->pos++;
}
static int at_word(const parser *p, const char *w) {
  return at(p, TK_IDENT) && strcmp(cur(p)->str, w) == 0;
}

/* "name 'x'", "number 3", "'for'", "')'", "end of line". */
static void describe(const parser *p, const weft__dsl_tok *t, char *buf, size_t size) {
  switch (t->kind) {
    case TK_IDENT:
      snprintf(buf, size, "name '%.60s'", t->str);
      break;
    case TK_QNAME:
      snprintf(buf, size, "name `%.60s`", t->str);
      break;
    case TK_INT:
    case TK_FLOAT:
      snprintf(buf, size, "number %.*s", (int)(t->len > 40 ? 40 : t->len), p->d->text + t->off);
      break;
    case TK_STRING:
      snprintf(buf, size, "string \"%.60s\"", t->str);
      break;
    default:
      snprintf(buf, size, t->kind >= TK_KW_PARAM ? "'%s'" : "%s", weft__dsl_tk_desc(t->kind));
      break;
  }
}

/* Reports "unexpected <token>; expected <what>" at the current token (silently for a token the
 * lexer already reported). Returns NULL for the callers' convenience. */
static void *unexpected(parser *p, const char *what) {
  const weft__dsl_tok *t = cur(p);
  if (t->kind == TK_ERROR) return NULL;
  char d[96];
  describe(p, t, d, sizeof d);
  weft__dsl_error(p->d, WEFT_EPARSE, t->line, t->col, "unexpected %s; expected %s", d, what);
  return NULL;
}

static int expect(parser *p, int kind, const char *what) {
  if (at(p, kind)) {
    advance(p);
    return 1;
  }
  unexpected(p, what);
  return 0;
}

static void *alloc(parser *p, size_t size) {
  void *m = weft__arena_alloc(p->a, size, 8);
  if (m == NULL) {
    p->oom = 1;
    return NULL;
  }
  memset(m, 0, size);
  return m;
}

/* Copies a vector of pointers into the arena. */
static void **freeze(parser *p, weft__vec *v, int *n) {
  *n = (int)v->len;
  void **out = NULL;
  if (v->len) {
    out = alloc(p, v->len * sizeof(void *));
    if (out) memcpy(out, v->data, v->len * sizeof(void *));
  }
  weft__vec_fini(v);
  return out;
}

static void vpush(parser *p, weft__vec *v, const void *item) {
  if (weft__vec_push(v, &item) != WEFT_OK) p->oom = 1;
}

/* Continuation lines: a newline right after '(' '[' ',' is skipped. */
static void skip_newlines(parser *p) {
  while (at(p, TK_NEWLINE)) advance(p);
}

/* Before a closing ')' or ']' (or a loop's '{'): newlines are skipped only when that token
 * follows them. */
static void newlines_before(parser *p, int closer) {
  size_t k = p->pos;
  while (p->t[k].kind == TK_NEWLINE) k++;
  if (k != p->pos && p->t[k].kind == closer) p->pos = k;
}

static weft__dsl_expr *new_expr(parser *p, int kind, const weft__dsl_tok *at_tok) {
  weft__dsl_expr *e = alloc(p, sizeof *e);
  if (e) {
    e->kind = kind;
    e->line = at_tok->line;
    e->col = at_tok->col;
  }
  return e;
}

static weft__dsl_expr *parse_expr(parser *p);

/* Parses a comma-separated list up to `closer` (the opener is consumed already). Call
 * arguments may carry keywords (`seed=42`). Returns 0 on a syntax error. */
static int parse_list(parser *p, int closer, int keywords, weft__dsl_expr *into) {
  weft__vec items, keys;
  weft__vec_init(&items, sizeof(void *));
  weft__vec_init(&keys, sizeof(void *));
  const char *what = closer == TK_RPAREN ? "',' or ')'" : "',' or ']'";
  int ok = 1;
  skip_newlines(p);
  newlines_before(p, closer);
  if (!at(p, closer)) {
    for (;;) {
      const char *key = NULL;
      if (keywords && at(p, TK_IDENT) && p->t[p->pos + 1].kind == TK_ASSIGN) {
        key = cur(p)->str;
        advance(p);
        advance(p);
      }
      weft__dsl_expr *e = parse_expr(p);
      if (e == NULL) {
        ok = 0;
        break;
      }
      vpush(p, &items, e);
      vpush(p, &keys, key);
      newlines_before(p, closer);
      if (at(p, TK_COMMA)) {
        advance(p);
        skip_newlines(p);
        continue;
      }
      if (!at(p, closer)) {
        unexpected(p, what);
        ok = 0;
      }
      break;
    }
  }
  if (ok) advance(p); /* the closer */
  into->items = (weft__dsl_expr **)freeze(p, &items, &into->nitems);
  int nk;
  into->keys = (const char **)freeze(p, &keys, &nk);
  return ok && !p->oom;
}

/* A name with optional indices, or a call. `what` says what the caller wanted. */
static weft__dsl_expr *parse_name_or_call(parser *p, int allow_call) {
  const weft__dsl_tok *t = cur(p);
  weft__dsl_expr *e = new_expr(p, EX_NAME, t);
  if (e == NULL) return NULL;
  e->text = t->str;
  e->quoted = t->kind == TK_QNAME;
  advance(p);
  if (allow_call && at(p, TK_LPAREN)) {
    e->kind = EX_CALL;
    e->has_parens = 1;
    advance(p);
    return parse_list(p, TK_RPAREN, 1, e) ? e : NULL;
  }
  if (at(p, TK_LBRACKET)) {
    const weft__dsl_tok *open = cur(p);
    e->has_index = 1;
    advance(p);
    if (!parse_list(p, TK_RBRACKET, 0, e)) return NULL;
    if (e->nitems == 0) {
      weft__dsl_error(p->d, WEFT_EPARSE, open->line, open->col,
                      "empty index in '%s[]'; expected at least one index (y[i])", e->text);
      return NULL;
    }
  }
  return e;
}

static weft__dsl_expr *parse_unary(parser *p);

static weft__dsl_expr *parse_primary(parser *p) {
  const weft__dsl_tok *t = cur(p);
  weft__dsl_expr *e;
  switch (t->kind) {
    case TK_INT:
    case TK_FLOAT: {
      e = new_expr(p, t->kind == TK_INT ? EX_INT : EX_FLOAT, t);
      if (e == NULL) return NULL;
      e->i = t->i;
      e->f = t->f;
      char *s = weft__arena_alloc(p->a, t->len + 1, 1);
      if (s == NULL) {
        p->oom = 1;
        return NULL;
      }
      memcpy(s, p->d->text + t->off, t->len);
      s[t->len] = '\0';
      e->text = s;
      advance(p);
      return e;
    }
    case TK_KW_INF:
    case TK_KW_NAN:
    case TK_KW_CPU:
      e = new_expr(p, t->kind == TK_KW_INF ? EX_INF : t->kind == TK_KW_NAN ? EX_NAN : EX_CPU, t);
      advance(p);
      return e;
    case TK_KW_CUDA:
      e = new_expr(p, EX_CUDA, t);
      advance(p);
      if (e == NULL) return NULL;
      if (!at(p, TK_COLON)) return unexpected(p, "':' and a GPU index after 'cuda' (cuda:0)");
      advance(p);
      if ((e->a = parse_primary(p)) == NULL) return NULL;
      return e;
    case TK_IDENT:
    case TK_QNAME:
      return parse_name_or_call(p, 1);
    case TK_LPAREN: {
      e = new_expr(p, EX_PAREN, t);
      advance(p);
      skip_newlines(p);
      if (e == NULL || (e->a = parse_expr(p)) == NULL) return NULL;
      newlines_before(p, TK_RPAREN);
      if (!expect(p, TK_RPAREN, "')'")) return NULL;
      return e;
    }
    default:
      return unexpected(p, "a number, a name or '('");
  }
}

static weft__dsl_expr *parse_unary(parser *p) {
  if (++p->depth > MAX_EXPR_DEPTH) {
    const weft__dsl_tok *t = cur(p);
    weft__dsl_error(p->d, WEFT_EPARSE, t->line, t->col,
                    "expression nested too deeply; expected at most %d levels", MAX_EXPR_DEPTH);
    p->depth--;
    return NULL;
  }
  weft__dsl_expr *e;
  if (at(p, TK_MINUS) || at(p, TK_PLUS)) {
    e = new_expr(p, at(p, TK_MINUS) ? EX_NEG : EX_POS, cur(p));
    advance(p);
    if (e != NULL && (e->a = parse_unary(p)) == NULL) e = NULL;
  } else {
    e = parse_primary(p);
  }
  p->depth--;
  return e;
}

/* A chain a + b + c ... builds a tree as deep as it is long, and evaluating and formatting it
 * recurse that deep: each link counts as a level of nesting. */
static weft__dsl_expr *parse_binary(parser *p, int level) {
  weft__dsl_expr *l = level == 0 ? parse_binary(p, 1) : parse_unary(p);
  int links = 0;
  while (l != NULL) {
    int k = cur(p)->kind, op;
    if (level == 0 && (k == TK_PLUS || k == TK_MINUS))
      op = k == TK_PLUS ? '+' : '-';
    else if (level == 1 && (k == TK_STAR || k == TK_SLASH || k == TK_PERCENT))
      op = k == TK_STAR ? '*' : k == TK_SLASH ? '/' : '%';
    else
      break;
    if (p->depth + ++links > MAX_EXPR_DEPTH) {
      weft__dsl_error(p->d, WEFT_EPARSE, cur(p)->line, cur(p)->col,
                      "expression nested too deeply; expected at most %d levels", MAX_EXPR_DEPTH);
      l = NULL;
      break;
    }
    weft__dsl_expr *e = new_expr(p, EX_BIN, cur(p));
    advance(p);
    if (e == NULL) return NULL;
    e->op = op;
    e->a = l;
    p->depth += links;
    e->b = level == 0 ? parse_binary(p, 1) : parse_unary(p);
    p->depth -= links;
    if (e->b == NULL) return NULL;
    l = e;
  }
  return l;
}

static weft__dsl_expr *parse_expr(parser *p) { return parse_binary(p, 0); }

/* A tensor (or node) name: IDENT or QNAME with optional indices. */
static weft__dsl_expr *parse_name(parser *p, const char *what) {
  if (at(p, TK_IDENT) || at(p, TK_QNAME)) return parse_name_or_call(p, 0);
  const weft__dsl_tok *t = cur(p);
  if (t->kind >= TK_KW_PARAM) {
    weft__dsl_error(p->d, WEFT_EPARSE, t->line, t->col,
                    "'%s' is a reserved word; expected %s (write `%s` in backticks to use it as a name)",
                    weft__dsl_tk_desc(t->kind), what, weft__dsl_tk_desc(t->kind));
    return NULL;
  }
  return unexpected(p, what);
}

/* Reports a missing identifier (a reserved word gets its own hint). */
static void no_ident(parser *p, const char *what) {
  const weft__dsl_tok *t = cur(p);
  if (t->kind >= TK_KW_PARAM)
    weft__dsl_error(p->d, WEFT_EPARSE, t->line, t->col, "'%s' is a reserved word; expected %s",
                    weft__dsl_tk_desc(t->kind), what);
  else
    unexpected(p, what);
}

/* ---- statements ----------------------------------------------------------------------------- */

static weft__dsl_block *parse_block(parser *p, const weft__dsl_tok *open);

static weft__dsl_stmt *new_stmt(parser *p, int kind, const weft__dsl_tok *t) {
  weft__dsl_stmt *s = alloc(p, sizeof *s);
  if (s) {
    s->kind = kind;
    s->line = t->line;
    s->col = t->col;
  }
  return s;
}

/* Skips the rest of a broken statement: up to an end of line or ';' outside braces, or a '}'
 * that closes the enclosing block (not consumed). */
static void sync(parser *p) {
  int depth = 0;
  for (;;) {
    int k = cur(p)->kind;
    if (k == TK_EOF) return;
    if (k == TK_LBRACE) depth++;
    if (k == TK_RBRACE) {
      if (depth == 0) return;
      depth--;
    }
    if ((k == TK_NEWLINE || k == TK_SEMI) && depth == 0) return;
    advance(p);
  }
}

/* A statement that failed after naming what it defines. */
static weft__dsl_stmt *broken(parser *p, weft__dsl_stmt *s, weft__dsl_expr *name) {
  sync(p);
  if (s == NULL || name == NULL) return NULL;
  s->kind = ST_BROKEN;
  s->target = name;
  return s;
}

static weft__dsl_expr *ident_expr(parser *p, const weft__dsl_tok *t) {
  weft__dsl_expr *e = new_expr(p, EX_NAME, t);
  if (e) e->text = t->str;
  return e;
}

/* The head "KEYWORD IDENT =" of param and device. Returns the name as an expression (what a
 * broken statement poisons), or NULL after reporting; *ok says whether the head was whole. */
static weft__dsl_expr *parse_head(parser *p, weft__dsl_stmt *s, const char *what_name, const char *what_eq, int *ok) {
  *ok = 0;
  advance(p);
  if (!at(p, TK_IDENT)) {
    no_ident(p, what_name);
    return NULL;
  }
  const weft__dsl_tok *nt = cur(p);
  s->name = nt->str;
  s->name_line = nt->line;
  s->name_col = nt->col;
  advance(p);
  weft__dsl_expr *self = ident_expr(p, nt);
  *ok = expect(p, TK_ASSIGN, what_eq);
  return self;
}

static weft__dsl_stmt *parse_param(parser *p, weft__dsl_stmt *s) {
  int ok;
  weft__dsl_expr *self = parse_head(p, s, "a parameter name (param N = 400)",
                                    "'=' and the parameter's default value (param N = 400)", &ok);
  if (!ok || (s->value = parse_expr(p)) == NULL) return broken(p, s, self);
  return s;
}

static weft__dsl_stmt *parse_device(parser *p, weft__dsl_stmt *s) {
  int ok;
  weft__dsl_expr *self = parse_head(p, s, "a device name (device gpu = cuda:0 | cpu)",
                                    "'=' and a device (device gpu = cuda:0 | cpu)", &ok);
  if (!ok) return broken(p, s, self);
  weft__vec alts;
  weft__vec_init(&alts, sizeof(void *));
  for (;;) {
    weft__dsl_expr *e = parse_expr(p);
    if (e == NULL) {
      weft__vec_fini(&alts);
      return broken(p, s, self);
    }
    vpush(p, &alts, e);
    if (!at(p, TK_PIPE)) break;
    advance(p);
  }
  s->list = (weft__dsl_expr **)freeze(p, &alts, &s->nlist);
  return s;
}

static weft__dsl_stmt *parse_tensor(parser *p, weft__dsl_stmt *s) {
  advance(p);
  weft__dsl_expr *name = parse_name(p, "a tensor name");
  if (name == NULL) return broken(p, s, NULL);
  s->target = name;
  if (!expect(p, TK_COLON, "':' and a dtype (tensor x: f32[4, 4])")) return broken(p, s, name);
  if (!at(p, TK_IDENT) || (strcmp(cur(p)->str, "f32") != 0 && strcmp(cur(p)->str, "f64") != 0)) {
    if (at(p, TK_IDENT))
      weft__dsl_error(p->d, WEFT_EPARSE, cur(p)->line, cur(p)->col, "unknown dtype '%s'; expected f32 or f64",
                      cur(p)->str);
    else
      unexpected(p, "a dtype (f32 or f64)");
    return broken(p, s, name);
  }
  s->dtype = strcmp(cur(p)->str, "f64") == 0 ? WEFT_F64 : WEFT_F32;
  advance(p);
  if (at(p, TK_LBRACKET)) {
    weft__dsl_expr shape;
    memset(&shape, 0, sizeof shape);
    advance(p);
    if (!parse_list(p, TK_RBRACKET, 0, &shape)) return broken(p, s, name);
    s->has_shape = 1;
    s->list = shape.items;
    s->nlist = shape.nitems;
  }
  if (at_word(p, "on")) {
    advance(p);
    if ((s->device = parse_expr(p)) == NULL) return broken(p, s, name);
  }
  if (at(p, TK_ASSIGN)) {
    advance(p);
    if (at_word(p, "from")) {
      advance(p);
      if (at_word(p, "text")) {
        s->text_format = 1;
        advance(p);
      }
      if (!at(p, TK_STRING)) {
        unexpected(p, "a file name in double quotes (from \"w.bin\" or from text \"w.txt\")");
        return broken(p, s, name);
      }
      s->path = cur(p)->str;
      s->path_line = cur(p)->line;
      s->path_col = cur(p)->col;
      advance(p);
    } else if ((s->value = parse_expr(p)) == NULL) {
      return broken(p, s, name);
    }
  } else if (!at(p, TK_NEWLINE) && !at(p, TK_SEMI) && !at(p, TK_RBRACE) && !at(p, TK_EOF)) {
    unexpected(p, s->device ? "'=' and an initialiser, or end of line"
                            : "'on' and a device, '=' and an initialiser, or end of line");
    return broken(p, s, name);
  }
  return s;
}

static int parse_label(parser *p, weft__dsl_stmt *s) {
  if (!at_word(p, "as")) return 1;
  advance(p);
  return (s->label = parse_name(p, "a node name after 'as'")) != NULL;
}

static int parse_names(parser *p, weft__dsl_stmt *s, const char *what) {
  weft__vec names;
  weft__vec_init(&names, sizeof(void *));
  for (;;) {
    weft__dsl_expr *e = parse_name(p, what);
    if (e == NULL) {
      weft__vec_fini(&names);
      return 0;
    }
    vpush(p, &names, e);
    if (!at(p, TK_COMMA)) break;
    advance(p);
    skip_newlines(p);
  }
  s->list = (weft__dsl_expr **)freeze(p, &names, &s->nlist);
  return 1;
}

static weft__dsl_stmt *parse_save(parser *p, weft__dsl_stmt *s) {
  advance(p);
  if ((s->target = parse_name(p, "a tensor name")) == NULL) return broken(p, s, NULL);
  if (!at_word(p, "to")) {
    unexpected(p, "'to' and a file name (save x to \"x.bin\")");
    return broken(p, s, NULL);
  }
  advance(p);
  if (at_word(p, "text")) {
    s->text_format = 1;
    advance(p);
  }
  if (!at(p, TK_STRING)) {
    unexpected(p, "a file name in double quotes");
    return broken(p, s, NULL);
  }
  s->path = cur(p)->str;
  s->path_line = cur(p)->line;
  s->path_col = cur(p)->col;
  advance(p);
  return s;
}

static weft__dsl_expr *parse_node_ref(parser *p) {
  if (at(p, TK_AT)) {
    weft__dsl_expr *e = new_expr(p, EX_NODEID, cur(p));
    advance(p);
    if (e == NULL || (e->a = parse_primary(p)) == NULL) return NULL;
    return e;
  }
  return parse_name(p, "a node name (given with 'as') or @N");
}

static weft__dsl_stmt *parse_edge(parser *p, weft__dsl_stmt *s) {
  advance(p);
  weft__vec nodes;
  weft__vec_init(&nodes, sizeof(void *));
  for (;;) {
    weft__dsl_expr *e = parse_node_ref(p);
    if (e == NULL) break;
    vpush(p, &nodes, e);
    if (!at(p, TK_ARROW)) {
      if (nodes.len < 2) {
        unexpected(p, "'->' and the node that must wait (edge a -> b)");
        break;
      }
      s->list = (weft__dsl_expr **)freeze(p, &nodes, &s->nlist);
      return s;
    }
    advance(p);
  }
  weft__vec_fini(&nodes);
  return broken(p, s, NULL);
}

static weft__dsl_stmt *parse_for(parser *p, weft__dsl_stmt *s) {
  const weft__dsl_tok *open_kw = cur(p);
  advance(p);
  int ok = 1;
  if (!at(p, TK_IDENT)) {
    no_ident(p, "a loop variable (for i in 0..N { ... })");
    ok = 0;
  } else {
    s->name = cur(p)->str;
    s->name_line = cur(p)->line;
    s->name_col = cur(p)->col;
    advance(p);
    if (!at_word(p, "in")) {
      unexpected(p, "'in' and a range (for i in 0..N)");
      ok = 0;
    } else {
      advance(p);
      ok = (s->lo = parse_expr(p)) != NULL && expect(p, TK_DOTDOT, "'..' between the bounds (0..N)") &&
           (s->hi = parse_expr(p)) != NULL;
    }
  }
  if (ok) newlines_before(p, TK_LBRACE); /* the '{' may open the next line */
  if (ok && !at(p, TK_LBRACE)) {
    unexpected(p, "'{' to open the loop's body");
    ok = 0;
  }
  if (!ok) {
    /* Keep the body: skip the rest of the header, up to a '{' on the same line. */
    while (!at(p, TK_LBRACE) && !at(p, TK_NEWLINE) && !at(p, TK_SEMI) && !at(p, TK_EOF) && !at(p, TK_RBRACE))
      advance(p);
    if (!at(p, TK_LBRACE)) return NULL;
    s->poison_var = 1;
  }
  const weft__dsl_tok *brace = cur(p);
  advance(p);
  if (p->c && p->ci < p->nc && p->c[p->ci].line == brace->line) {
    s->brace_trail = p->c[p->ci].text;
    p->ci++;
  }
  if (p->block_depth >= MAX_BLOCK_DEPTH) {
    weft__dsl_error(p->d, WEFT_EPARSE, open_kw->line, open_kw->col,
                    "loops nested too deeply; expected at most %d levels", MAX_BLOCK_DEPTH);
    /* Skip the body wholesale. */
    int depth = 1;
    while (!at(p, TK_EOF) && depth > 0) {
      if (at(p, TK_LBRACE)) depth++;
      if (at(p, TK_RBRACE)) depth--;
      advance(p);
    }
    return NULL;
  }
  p->block_depth++;
  s->body = parse_block(p, open_kw);
  p->block_depth--;
  if (s->body == NULL) return NULL;
  return s;
}

/* A statement that starts with a name: an assignment or a call. */
static weft__dsl_stmt *parse_name_stmt(parser *p, weft__dsl_stmt *s) {
  const weft__dsl_tok *first = cur(p);
  if (p->t[p->pos + 1].kind == TK_LPAREN) {
    s->kind = ST_CALL;
    if ((s->value = parse_name_or_call(p, 1)) == NULL || !parse_label(p, s)) return broken(p, s, NULL);
    return s;
  }
  int next = p->t[p->pos + 1].kind;
  if (first->kind == TK_IDENT && (next == TK_IDENT || next == TK_QNAME)) {
    /* Two names in a row: most likely a misspelt statement word ("tensr x: f32[4]"). */
    weft__dsl_error(p->d, WEFT_EPARSE, first->line, first->col,
                    "unknown statement '%s'; expected param, device, tensor, for, print, save, "
                    "keep, edge, strict, an assignment (y = mm(a, b)) or an op call",
                    first->str);
    advance(p);
    weft__dsl_expr *name = parse_name(p, "a name");
    return broken(p, s, name);
  }
  s->kind = ST_ASSIGN;
  weft__dsl_expr *target = parse_name(p, "a tensor name");
  if (target == NULL) return broken(p, s, NULL);
  s->target = target;
  if (!at(p, TK_ASSIGN)) {
    unexpected(p, "'=' and an op (y = mm(a, b))");
    return broken(p, s, target);
  }
  advance(p);
  if (!(at(p, TK_IDENT) || at(p, TK_QNAME)) || p->t[p->pos + 1].kind != TK_LPAREN) {
    unexpected(p, "an op call such as mm(a, b) or copy(x, cpu)");
    return broken(p, s, target);
  }
  if ((s->value = parse_name_or_call(p, 1)) == NULL || !parse_label(p, s)) return broken(p, s, target);
  return s;
}

static weft__dsl_stmt *parse_stmt(parser *p) {
  const weft__dsl_tok *t = cur(p);
  weft__dsl_stmt *s = new_stmt(p, ST_STRICT, t);
  if (s == NULL) return NULL;
  switch (t->kind) {
    case TK_KW_PARAM:
      s->kind = ST_PARAM;
      return parse_param(p, s);
    case TK_KW_DEVICE:
      s->kind = ST_DEVICE;
      return parse_device(p, s);
    case TK_KW_TENSOR:
      s->kind = ST_TENSOR;
      return parse_tensor(p, s);
    case TK_KW_FOR:
      s->kind = ST_FOR;
      return parse_for(p, s);
    case TK_KW_PRINT:
    case TK_KW_KEEP:
      s->kind = t->kind == TK_KW_PRINT ? ST_PRINT : ST_KEEP;
      advance(p);
      if (!parse_names(p, s, "a tensor name")) return broken(p, s, NULL);
      return s;
    case TK_KW_SAVE:
      s->kind = ST_SAVE;
      return parse_save(p, s);
    case TK_KW_EDGE:
      s->kind = ST_EDGE;
      return parse_edge(p, s);
    case TK_KW_STRICT:
      advance(p);
      return s;
    case TK_IDENT:
    case TK_QNAME:
      return parse_name_stmt(p, s);
    default:
      unexpected(p, "a statement");
      if (at(p, TK_LBRACE) || at(p, TK_RBRACE)) advance(p);
      sync(p);
      return NULL;
  }
}

/* Takes the comments that come before token `t` as leading comments ("" marks a blank line). */
static void take_comments(parser *p, const weft__dsl_tok *t, weft__vec *lead) {
  while (p->ci < p->nc) {
    const weft__dsl_comment *c = &p->c[p->ci];
    if (c->line > t->line || (c->line == t->line && c->col > t->col)) break;
    if (p->last_line && c->line > p->last_line + 1) vpush(p, lead, "");
    vpush(p, lead, c->text);
    p->last_line = c->line;
    p->ci++;
  }
  if (t->kind != TK_EOF && t->kind != TK_RBRACE && p->last_line && t->line > p->last_line + 1)
    vpush(p, lead, "");
}

static weft__dsl_block *parse_block(parser *p, const weft__dsl_tok *open) {
  weft__dsl_block *b = alloc(p, sizeof *b);
  if (b == NULL) return NULL;
  weft__vec stmts;
  weft__vec_init(&stmts, sizeof(void *));
  p->last_line = 0;
  if (open != NULL) p->last_line = prev_tok(p)->line;
  while (!p->oom) {
    while (at(p, TK_NEWLINE) || at(p, TK_SEMI)) advance(p);
    const weft__dsl_tok *t = cur(p);
    if (t->kind == TK_EOF || t->kind == TK_RBRACE) {
      weft__vec tail;
      weft__vec_init(&tail, sizeof(void *));
      if (t->kind == TK_EOF || open != NULL) take_comments(p, t, &tail);
      b->tail = (const char **)freeze(p, &tail, &b->ntail);
      if (t->kind == TK_EOF && open != NULL)
        weft__dsl_error(p->d, WEFT_EPARSE, t->line, t->col,
                        "unexpected end of file; expected '}' to close the loop at %u:%u", open->line,
                        open->col);
      if (t->kind == TK_RBRACE && open == NULL) {
        unexpected(p, "a statement");
        advance(p);
        continue;
      }
      if (t->kind == TK_RBRACE) advance(p);
      break;
    }
    weft__vec lead;
    weft__vec_init(&lead, sizeof(void *));
    take_comments(p, t, &lead);
    weft__dsl_stmt *s = parse_stmt(p);
    if (s == NULL) {
      weft__vec_fini(&lead);
      p->last_line = prev_tok(p)->line;
      continue;
    }
    s->lead = (const char **)freeze(p, &lead, &s->nlead);
    /* The statement must end here. */
    if (!at(p, TK_NEWLINE) && !at(p, TK_SEMI) && !at(p, TK_RBRACE) && !at(p, TK_EOF)) {
      unexpected(p, "end of line or ';' after the statement");
      sync(p);
    }
    const weft__dsl_tok *last = prev_tok(p);
    p->last_line = last->line;
    if (p->ci < p->nc && p->c[p->ci].line == last->line && !p->c[p->ci].own_line) {
      s->trail = p->c[p->ci].text;
      p->ci++;
    }
    vpush(p, &stmts, s);
  }
  b->stmts = (weft__dsl_stmt **)freeze(p, &stmts, &b->n);
  return p->oom ? NULL : b;
}

int weft__dsl_parse(weft__dsl_diags *d, weft__arena *a, const weft__dsl_tok *toks, size_t ntoks,
                    const weft__dsl_comment *comments, size_t ncomments, weft__dsl_block **out) {
  parser p;
  memset(&p, 0, sizeof p);
  p.d = d;
  p.a = a;
  p.t = toks;
  p.n = ntoks;
  p.c = comments;
  p.nc = ncomments;
  weft__dsl_block *b = parse_block(&p, NULL);
  if (p.oom || b == NULL) return weft__oom("the .weft syntax tree");
  *out = b;
  return WEFT_OK;
}
