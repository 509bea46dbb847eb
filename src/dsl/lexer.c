/* lexer.c — .weft text to tokens and comments.
 *
 * One pass over the bytes. Newlines are tokens (a statement ends at the end of its line); the
 * parser lets a line continue after '(' '[' ',' and before ')' ']'. Reserved words are found
 * here; the language's other words (on, as, to, from, text, f32, zeros, ...) are ordinary
 * identifiers that the parser recognises where they can appear, so they stay usable as names.
 * Names and strings are decoded (escapes resolved) into the arena. A lexical error is reported
 * once per line and becomes a TK_ERROR token, which the parser skips silently: a bad byte does
 * not bury the real mistakes under a cascade. Line and column are 1-based; the column counts
 * bytes, which is what the caret under a diagnostic needs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl_internal.h"

static const struct {
  const char *word;
  int kind;
} keywords[] = {
    {"param", TK_KW_PARAM}, {"device", TK_KW_DEVICE}, {"tensor", TK_KW_TENSOR},
    {"for", TK_KW_FOR},     {"print", TK_KW_PRINT},   {"save", TK_KW_SAVE},
    {"keep", TK_KW_KEEP},   {"edge", TK_KW_EDGE},     {"strict", TK_KW_STRICT},
    {"cpu", TK_KW_CPU},     {"cuda", TK_KW_CUDA},     {"inf", TK_KW_INF},
    {"nan", TK_KW_NAN},
};

int weft__dsl_keyword(const char *s, size_t n) {
  for (size_t k = 0; k < sizeof keywords / sizeof keywords[0]; k++)
    if (strlen(keywords[k].word) == n && memcmp(keywords[k].word, s, n) == 0) return keywords[k].kind;
  return 0;
}

const char *weft__dsl_tk_desc(int kind) {
  switch (kind) {
    case TK_EOF: return "end of file";
    case TK_NEWLINE: return "end of line";
    case TK_ERROR: return "an invalid token";
    case TK_IDENT: return "a name";
    case TK_QNAME: return "a quoted name";
    case TK_INT: return "an integer";
    case TK_FLOAT: return "a number";
    case TK_STRING: return "a string";
    case TK_LPAREN: return "'('";
    case TK_RPAREN: return "')'";
    case TK_LBRACKET: return "'['";
    case TK_RBRACKET: return "']'";
    case TK_LBRACE: return "'{'";
    case TK_RBRACE: return "'}'";
    case TK_COMMA: return "','";
    case TK_COLON: return "':'";
    case TK_SEMI: return "';'";
    case TK_ASSIGN: return "'='";
    case TK_PIPE: return "'|'";
    case TK_PLUS: return "'+'";
    case TK_MINUS: return "'-'";
    case TK_STAR: return "'*'";
    case TK_SLASH: return "'/'";
    case TK_PERCENT: return "'%'";
    case TK_DOTDOT: return "'..'";
    case TK_ARROW: return "'->'";
    case TK_AT: return "'@'";
    default:
      for (size_t k = 0; k < sizeof keywords / sizeof keywords[0]; k++)
        if (keywords[k].kind == kind) return keywords[k].word;
      return "?";
  }
}

typedef struct lexer {
  weft__dsl_diags *d;
  weft__arena *a;
  weft__vec *toks, *comments;
  const char *s;
  size_t len, pos;
  uint32_t line;
  size_t line_start;
  uint32_t err_line; /* the last line a lexical error was reported on */
  int line_has_token;
  int oom;
} lexer;

static int is_alpha(int c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_alnum(int c) { return is_alpha(c) || is_digit(c); }
static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int peek(const lexer *L, size_t k) {
  return L->pos + k < L->len ? (unsigned char)L->s[L->pos + k] : -1;
}

static uint32_t col_of(const lexer *L, size_t pos) { return (uint32_t)(pos - L->line_start + 1); }

static void lex_error(lexer *L, size_t at, const char *fmt, ...) WEFT__PRINTF(3, 4);
static void lex_error(lexer *L, size_t at, const char *fmt, ...) {
  if (L->err_line == L->line) return;
  L->err_line = L->line;
  va_list ap;
  va_start(ap, fmt);
  weft__dsl_verror(L->d, WEFT_EPARSE, L->line, col_of(L, at), fmt, ap);
  va_end(ap);
}

static weft__dsl_tok *push(lexer *L, int kind, size_t start) {
  weft__dsl_tok t;
  memset(&t, 0, sizeof t);
  t.kind = kind;
  t.line = L->line;
  t.col = col_of(L, start);
  t.off = (uint32_t)start;
  t.len = (uint32_t)(L->pos - start);
  if (weft__vec_push(L->toks, &t) != WEFT_OK) {
    L->oom = 1;
    return NULL;
  }
  L->line_has_token = 1;
  return &WEFT__VEC_AT(L->toks, weft__dsl_tok, L->toks->len - 1);
}

/* A name between backticks or a string between double quotes; L->pos is on the opening
 * quote. */
static void lex_quoted(lexer *L, char quote) {
  size_t start = L->pos++;
  const char *what = quote == '"' ? "string" : "quoted name";
  /* The decoded text is never longer than the raw text up to the closing quote or the end
   * of the line. */
  size_t scan = L->pos;
  while (scan < L->len && L->s[scan] != '\n' && L->s[scan] != quote)
    scan += (L->s[scan] == '\\' && scan + 1 < L->len && L->s[scan + 1] != '\n') ? 2 : 1;
  char *out = weft__arena_alloc(L->a, scan - L->pos + 1, 1);
  if (out == NULL) {
    L->oom = 1;
    return;
  }
  size_t n = 0;
  int bad = 0;
  for (;;) {
    int c = peek(L, 0);
    if (c < 0 || c == '\n') {
      if (!bad)
        lex_error(L, start, "unterminated %s; expected a closing %s before the end of the line", what,
                  quote == '"' ? "'\"'" : "'`'");
      push(L, TK_ERROR, start);
      return;
    }
    if (c == quote) {
      L->pos++;
      break;
    }
    if (c == '\\') {
      int e = peek(L, 1), v = -1;
      switch (e) {
        case '\\': v = '\\'; break;
        case '"': v = '"'; break;
        case '`': v = '`'; break;
        case 'n': v = '\n'; break;
        case 't': v = '\t'; break;
        case 'r': v = '\r'; break;
        case 'x': {
          int h1 = hexval(peek(L, 2)), h2 = h1 >= 0 ? hexval(peek(L, 3)) : -1;
          if (h1 >= 0 && h2 >= 0) v = h1 * 16 + h2;
          if (v == 0) {
            if (!bad) lex_error(L, L->pos, "a %s cannot contain a NUL byte (\\x00)", what);
            bad = 1;
            v = -2;
          }
          break;
        }
        default:
          break;
      }
      if (v == -1) {
        if (!bad)
          lex_error(L, L->pos, "unknown escape in a %s; expected \\\\, \\\", \\`, \\n, \\t, \\r or \\xHH", what);
        bad = 1;
        L->pos += e >= 0 && e != '\n' ? 2 : 1;
        continue;
      }
      L->pos += e == 'x' ? 4 : 2;
      if (v >= 0) out[n++] = (char)v;
      continue;
    }
    if (c < 0x20 && c != '\t') {
      if (!bad) lex_error(L, L->pos, "control character 0x%02x in a %s; write it as \\x%02x", c, what, c);
      bad = 1;
    }
    out[n++] = (char)c;
    L->pos++;
  }
  out[n] = '\0';
  if (bad) {
    push(L, TK_ERROR, start);
    return;
  }
  if (quote == '`' && n == 0) {
    lex_error(L, start, "empty quoted name; expected at least one character between the backticks");
    push(L, TK_ERROR, start);
    return;
  }
  weft__dsl_tok *t = push(L, quote == '"' ? TK_STRING : TK_QNAME, start);
  if (t) t->str = out;
}

static void lex_number(lexer *L) {
  size_t start = L->pos;
  int is_float = 0, bad = 0;
  if (peek(L, 0) == '0' && (peek(L, 1) == 'x' || peek(L, 1) == 'X')) {
    L->pos += 2;
    uint64_t v = 0;
    int digits = 0;
    while (hexval(peek(L, 0)) >= 0) {
      v = v * 16 + (uint64_t)hexval(peek(L, 0));
      digits++;
      L->pos++;
    }
    while (is_alnum(peek(L, 0))) {
      L->pos++;
      bad = 1;
    }
    if (digits == 0 || digits > 16 || bad) {
      lex_error(L, start, "invalid hexadecimal number '%.*s'; expected 0x and 1 to 16 hex digits",
                (int)(L->pos - start), L->s + start);
      push(L, TK_ERROR, start);
      return;
    }
    weft__dsl_tok *t = push(L, TK_INT, start);
    if (t) t->i = (int64_t)v;
    return;
  }
  while (is_digit(peek(L, 0))) L->pos++;
  if (peek(L, 0) == '.' && peek(L, 1) != '.') {
    is_float = 1;
    L->pos++;
    if (!is_digit(peek(L, 0))) bad = 1;
    while (is_digit(peek(L, 0))) L->pos++;
  }
  if (!bad && (peek(L, 0) == 'e' || peek(L, 0) == 'E')) {
    is_float = 1;
    L->pos++;
    if (peek(L, 0) == '+' || peek(L, 0) == '-') L->pos++;
    if (!is_digit(peek(L, 0))) bad = 1;
    while (is_digit(peek(L, 0))) L->pos++;
  }
  while (is_alnum(peek(L, 0)) || (bad && peek(L, 0) == '.')) {
    L->pos++;
    bad = 1;
  }
  size_t n = L->pos - start;
  if (bad) {
    lex_error(L, start, "invalid number '%.*s'; expected digits, an optional fraction and exponent (1, 2.5, 1e-3)",
              (int)n, L->s + start);
    push(L, TK_ERROR, start);
    return;
  }
  char tmp[512];
  if (n >= sizeof tmp) {
    lex_error(L, start, "number with %zu characters is too long; expected at most %zu", n, sizeof tmp - 1);
    push(L, TK_ERROR, start);
    return;
  }
  memcpy(tmp, L->s + start, n);
  tmp[n] = '\0';
  if (!is_float) {
    int64_t v = 0;
    for (size_t k = 0; k < n; k++) {
      int dgt = tmp[k] - '0';
      if (v > (INT64_MAX - dgt) / 10) {
        lex_error(L, start, "integer %s is too large; expected at most 9223372036854775807", tmp);
        push(L, TK_ERROR, start);
        return;
      }
      v = v * 10 + dgt;
    }
    weft__dsl_tok *t = push(L, TK_INT, start);
    if (t) t->i = v;
    return;
  }
  errno = 0;
  double v = strtod(tmp, NULL);
  if (errno == ERANGE && (v > 1 || v < -1)) {
    lex_error(L, start, "number %s is too large for a double", tmp);
    push(L, TK_ERROR, start);
    return;
  }
  weft__dsl_tok *t = push(L, TK_FLOAT, start);
  if (t) t->f = v;
}

static void lex_comment(lexer *L) {
  size_t start = L->pos;
  while (L->pos < L->len && L->s[L->pos] != '\n') L->pos++;
  size_t end = L->pos;
  while (end > start && (L->s[end - 1] == ' ' || L->s[end - 1] == '\t' || L->s[end - 1] == '\r')) end--;
  char *text = weft__arena_alloc(L->a, end - start + 1, 1);
  if (text == NULL) {
    L->oom = 1;
    return;
  }
  /* A NUL or control byte in a comment would cut or garble it when weft fmt writes it back. */
  for (size_t k = start; k < end; k++) {
    unsigned char c = (unsigned char)L->s[k];
    text[k - start] = (c < 0x20 && c != '\t') || c == 0x7f ? '?' : (char)c;
  }
  text[end - start] = '\0';
  weft__dsl_comment c = {L->line, col_of(L, start), text, !L->line_has_token};
  if (weft__vec_push(L->comments, &c) != WEFT_OK) L->oom = 1;
}

int weft__dsl_lex(weft__dsl_diags *d, weft__arena *a, weft__vec *toks, weft__vec *comments) {
  lexer L;
  memset(&L, 0, sizeof L);
  L.d = d;
  L.a = a;
  L.toks = toks;
  L.comments = comments;
  L.s = d->text;
  L.len = d->len;
  L.line = 1;
  /* A UTF-8 byte-order mark some editors write is not part of the program. Columns still count
   * its bytes, as they count every byte. */
  if (L.len >= 3 && memcmp(L.s, "\xef\xbb\xbf", 3) == 0) L.pos = 3;
  while (!L.oom) {
    int c = peek(&L, 0);
    if (c < 0) break;
    size_t start = L.pos;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      L.pos++;
      continue;
    }
    if (c == '\n') {
      L.pos++;
      push(&L, TK_NEWLINE, start);
      L.line++;
      L.line_start = L.pos;
      L.line_has_token = 0;
      continue;
    }
    if (c == '#') {
      lex_comment(&L);
      continue;
    }
    if (is_alpha(c)) {
      while (is_alnum(peek(&L, 0))) L.pos++;
      int kw = weft__dsl_keyword(L.s + start, L.pos - start);
      weft__dsl_tok *t = push(&L, kw ? kw : TK_IDENT, start);
      if (t && !kw) {
        char *s = weft__arena_alloc(a, L.pos - start + 1, 1);
        if (s == NULL) {
          L.oom = 1;
          break;
        }
        memcpy(s, L.s + start, L.pos - start);
        s[L.pos - start] = '\0';
        t->str = s;
      }
      continue;
    }
    if (is_digit(c)) {
      lex_number(&L);
      continue;
    }
    if (c == '"' || c == '`') {
      lex_quoted(&L, (char)c);
      continue;
    }
    int kind = -1, width = 1;
    switch (c) {
      case '(': kind = TK_LPAREN; break;
      case ')': kind = TK_RPAREN; break;
      case '[': kind = TK_LBRACKET; break;
      case ']': kind = TK_RBRACKET; break;
      case '{': kind = TK_LBRACE; break;
      case '}': kind = TK_RBRACE; break;
      case ',': kind = TK_COMMA; break;
      case ':': kind = TK_COLON; break;
      case ';': kind = TK_SEMI; break;
      case '=': kind = TK_ASSIGN; break;
      case '|': kind = TK_PIPE; break;
      case '+': kind = TK_PLUS; break;
      case '*': kind = TK_STAR; break;
      case '/': kind = TK_SLASH; break;
      case '%': kind = TK_PERCENT; break;
      case '@': kind = TK_AT; break;
      case '-':
        kind = TK_MINUS;
        if (peek(&L, 1) == '>') kind = TK_ARROW, width = 2;
        break;
      case '.':
        if (peek(&L, 1) == '.') kind = TK_DOTDOT, width = 2;
        break;
      default:
        break;
    }
    if (kind >= 0) {
      L.pos += (size_t)width;
      push(&L, kind, start);
      continue;
    }
    /* An unexpected byte: skip the rest of its UTF-8 sequence too. */
    L.pos++;
    while ((peek(&L, 0) & 0xc0) == 0x80 && c >= 0x80) L.pos++;
    if (c == '.')
      lex_error(&L, start, "unexpected '.'; expected '..' in a range (0..N) or a digit in a number");
    else if (c >= 0x21 && c < 0x7f)
      lex_error(&L, start, "unexpected character '%c'; expected a name, a number or an operator", c);
    else
      lex_error(&L, start,
                "unexpected byte 0x%02x; names are ASCII letters, digits and '_' (write other "
                "names between backticks)",
                c);
    push(&L, TK_ERROR, start);
  }
  if (!L.oom) push(&L, TK_EOF, L.pos);
  return L.oom ? weft__oom("the .weft tokens") : WEFT_OK;
}
