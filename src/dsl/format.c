/* format.c — a program's canonical text (weft fmt), written from its syntax tree.
 *
 * Canonical form: one statement per line, two spaces of indentation per loop, one space
 * around '=' '|' '->' and binary operators, ", " between list items, keyword arguments as
 * `seed=42`, numbers as written, names unquoted wherever the lexer allows. Comments stay
 * where they were (on their own lines before a statement, or after it on its line); runs of
 * blank lines become one. Formatting is idempotent, and the formatted program builds the same
 * graph as the original (tests/test_dsl_writer.c checks both). */
#include <string.h>

#include "dsl/dsl_internal.h"

static void put_expr(weft__strbuf *b, const weft__dsl_expr *e);

static void put_list(weft__strbuf *b, weft__dsl_expr *const *items, const char *const *keys, int n) {
  for (int i = 0; i < n; i++) {
    if (i) weft__strbuf_puts(b, ", ");
    if (keys != NULL && keys[i] != NULL) weft__strbuf_printf(b, "%s=", keys[i]);
    put_expr(b, items[i]);
  }
}

static void put_expr(weft__strbuf *b, const weft__dsl_expr *e) {
  switch (e->kind) {
    case EX_INT:
    case EX_FLOAT:
      weft__strbuf_puts(b, e->text);
      break;
    case EX_INF:
      weft__strbuf_puts(b, "inf");
      break;
    case EX_NAN:
      weft__strbuf_puts(b, "nan");
      break;
    case EX_NAME:
      if (e->has_index)
        weft__dsl_buf_ident(b, e->text);
      else
        weft__dsl_buf_name(b, e->text);
      if (e->has_index) {
        weft__strbuf_puts(b, "[");
        put_list(b, e->items, NULL, e->nitems);
        weft__strbuf_puts(b, "]");
      }
      break;
    case EX_CALL:
      weft__dsl_buf_ident(b, e->text);
      weft__strbuf_puts(b, "(");
      put_list(b, e->items, e->keys, e->nitems);
      weft__strbuf_puts(b, ")");
      break;
    case EX_NEG:
    case EX_POS:
      weft__strbuf_puts(b, e->kind == EX_NEG ? "-" : "+");
      put_expr(b, e->a);
      break;
    case EX_BIN:
      put_expr(b, e->a);
      weft__strbuf_printf(b, " %c ", e->op);
      put_expr(b, e->b);
      break;
    case EX_PAREN:
      weft__strbuf_puts(b, "(");
      put_expr(b, e->a);
      weft__strbuf_puts(b, ")");
      break;
    case EX_CPU:
      weft__strbuf_puts(b, "cpu");
      break;
    case EX_CUDA:
      weft__strbuf_puts(b, "cuda:");
      put_expr(b, e->a);
      break;
    case EX_NODEID:
      weft__strbuf_puts(b, "@");
      put_expr(b, e->a);
      break;
    default:
      break;
  }
}

static void indent(weft__strbuf *b, int depth) {
  for (int i = 0; i < depth; i++) weft__strbuf_puts(b, "  ");
}

/* Comment lines ("" is a blank line), from `first` on. */
static void put_comments(weft__strbuf *b, const char *const *lines, int first, int n, int depth) {
  for (int i = first; i < n; i++) {
    if (lines[i][0] == '\0') {
      weft__strbuf_puts(b, "\n");
      continue;
    }
    indent(b, depth);
    weft__strbuf_puts(b, lines[i]);
    weft__strbuf_puts(b, "\n");
  }
}

static void put_stmt(weft__strbuf *b, const weft__dsl_stmt *s, int depth) {
  switch (s->kind) {
    case ST_PARAM:
      weft__strbuf_printf(b, "param %s = ", s->name);
      put_expr(b, s->value);
      break;
    case ST_DEVICE:
      weft__strbuf_printf(b, "device %s = ", s->name);
      for (int i = 0; i < s->nlist; i++) {
        if (i) weft__strbuf_puts(b, " | ");
        put_expr(b, s->list[i]);
      }
      break;
    case ST_TENSOR:
      weft__strbuf_puts(b, "tensor ");
      put_expr(b, s->target);
      weft__strbuf_printf(b, ": %s", s->dtype == WEFT_F64 ? "f64" : "f32");
      if (s->has_shape) {
        weft__strbuf_puts(b, "[");
        put_list(b, s->list, NULL, s->nlist);
        weft__strbuf_puts(b, "]");
      }
      if (s->device != NULL) {
        weft__strbuf_puts(b, " on ");
        put_expr(b, s->device);
      }
      if (s->value != NULL) {
        weft__strbuf_puts(b, " = ");
        put_expr(b, s->value);
      } else if (s->path != NULL) {
        weft__strbuf_puts(b, s->text_format ? " = from text " : " = from ");
        weft__dsl_buf_string(b, s->path);
      }
      break;
    case ST_ASSIGN:
    case ST_CALL:
      if (s->kind == ST_ASSIGN) {
        put_expr(b, s->target);
        weft__strbuf_puts(b, " = ");
      }
      put_expr(b, s->value);
      if (s->label != NULL) {
        weft__strbuf_puts(b, " as ");
        put_expr(b, s->label);
      }
      break;
    case ST_FOR:
      weft__strbuf_printf(b, "for %s in ", s->name);
      put_expr(b, s->lo);
      weft__strbuf_puts(b, "..");
      put_expr(b, s->hi);
      weft__strbuf_puts(b, " {");
      if (s->brace_trail != NULL) weft__strbuf_printf(b, "  %s", s->brace_trail);
      weft__strbuf_puts(b, "\n");
      weft__dsl_format_block(b, s->body, depth + 1);
      indent(b, depth);
      weft__strbuf_puts(b, "}");
      break;
    case ST_PRINT:
    case ST_KEEP:
      weft__strbuf_puts(b, s->kind == ST_PRINT ? "print " : "keep ");
      put_list(b, s->list, NULL, s->nlist);
      break;
    case ST_SAVE:
      weft__strbuf_puts(b, "save ");
      put_expr(b, s->target);
      weft__strbuf_puts(b, s->text_format ? " to text " : " to ");
      weft__dsl_buf_string(b, s->path);
      break;
    case ST_EDGE:
      weft__strbuf_puts(b, "edge ");
      for (int i = 0; i < s->nlist; i++) {
        if (i) weft__strbuf_puts(b, " -> ");
        put_expr(b, s->list[i]);
      }
      break;
    case ST_STRICT:
      weft__strbuf_puts(b, "strict");
      break;
    default:
      break;
  }
}

void weft__dsl_format_block(weft__strbuf *b, const weft__dsl_block *blk, int depth) {
  for (int i = 0; i < blk->n; i++) {
    const weft__dsl_stmt *s = blk->stmts[i];
    /* A blank line at the very start of a block is dropped. */
    int skip = i == 0 && s->nlead > 0 && s->lead[0][0] == '\0';
    put_comments(b, s->lead, skip, s->nlead, depth);
    indent(b, depth);
    put_stmt(b, s, depth);
    if (s->trail != NULL) weft__strbuf_printf(b, "  %s", s->trail);
    weft__strbuf_puts(b, "\n");
  }
  int skip = blk->n == 0 && blk->ntail > 0 && blk->tail[0][0] == '\0';
  put_comments(b, blk->tail, skip, blk->ntail, depth);
}

int weft_program_format(const weft_program *p, char **out) {
  if (out != NULL) *out = NULL;
  if (p == NULL || out == NULL) return weft__err(WEFT_EINVAL, "weft_program_format: NULL argument");
  weft__strbuf b;
  weft__strbuf_init(&b);
  weft__dsl_format_block(&b, p->ast, 0);
  return weft__strbuf_take(&b, "the .weft text", out);
}
