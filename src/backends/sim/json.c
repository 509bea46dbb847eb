/* json.c — the strict JSON reader of json.h: one recursive-descent pass over the text, values
 * allocated from the caller's arena. Depth is bounded (MAX_DEPTH), so the recursion is too.
 * The position of every error is tracked by line and column; the first error ends the parse. */
#include "backends/sim/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 64 };

typedef struct parser {
  const char *p, *end;
  const char *line_start;
  int line;
  const char *what;
  weft__arena *a;
  int rc; /* first error, or WEFT_OK */
} parser;

static int col(const parser *ps, const char *at) { return (int)(at - ps->line_start) + 1; }

static int fail_at(parser *ps, const char *at, const char *msg) {
  if (ps->rc == WEFT_OK)
    ps->rc = weft__err(WEFT_EPARSE, "%s: line %d, column %d: %s", ps->what, ps->line, col(ps, at), msg);
  return ps->rc;
}

static void skip_ws(parser *ps) {
  while (ps->p < ps->end) {
    char c = *ps->p;
    if (c == '\n') {
      ps->line++;
      ps->line_start = ps->p + 1;
    } else if (c != ' ' && c != '\t' && c != '\r') {
      return;
    }
    ps->p++;
  }
}

static weft__json *new_value(parser *ps, int type) {
  weft__json *v = weft__arena_alloc(ps->a, sizeof *v, 8);
  if (v == NULL) {
    if (ps->rc == WEFT_OK) ps->rc = WEFT_ENOMEM;
    return NULL;
  }
  memset(v, 0, sizeof *v);
  v->type = type;
  v->line = ps->line;
  v->col = col(ps, ps->p);
  return v;
}

static int hex4(const char *s, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (unsigned)(c - 'A' + 10);
    else
      return -1;
  }
  *out = v;
  return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* Reads a string literal at ps->p (the opening quote). The decoded text is never longer than
 * the literal, so one allocation of the literal's length suffices. */
static int parse_string(parser *ps, const char **out, size_t *out_len) {
  const char *start = ps->p++;
  const char *q = ps->p;
  while (q < ps->end && *q != '"') q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
  if (q >= ps->end) return fail_at(ps, start, "unterminated string");
  char *buf = weft__arena_alloc(ps->a, (size_t)(q - ps->p) + 1, 1);
  if (buf == NULL) return ps->rc = WEFT_ENOMEM;
  size_t n = 0;
  while (ps->p < q) {
    unsigned char c = (unsigned char)*ps->p;
    if (c < 0x20) return fail_at(ps, ps->p, "control character in a string (escape it)");
    if (c != '\\') {
      buf[n++] = (char)c;
      ps->p++;
      continue;
    }
    const char *esc = ps->p;
    char e = ps->p[1];
    ps->p += 2;
    switch (e) {
      case '"': buf[n++] = '"'; break;
      case '\\': buf[n++] = '\\'; break;
      case '/': buf[n++] = '/'; break;
      case 'b': buf[n++] = '\b'; break;
      case 'f': buf[n++] = '\f'; break;
      case 'n': buf[n++] = '\n'; break;
      case 'r': buf[n++] = '\r'; break;
      case 't': buf[n++] = '\t'; break;
      case 'u': {
        unsigned cp, lo;
        if (q - ps->p < 4 || hex4(ps->p, &cp) != 0) return fail_at(ps, esc, "bad \\u escape");
        ps->p += 4;
        if (cp >= 0xd800 && cp < 0xdc00) {
          if (q - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' || hex4(ps->p + 2, &lo) != 0 ||
              lo < 0xdc00 || lo >= 0xe000)
            return fail_at(ps, esc, "unpaired UTF-16 surrogate in a \\u escape");
          ps->p += 6;
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else if (cp >= 0xdc00 && cp < 0xe000) {
          return fail_at(ps, esc, "unpaired UTF-16 surrogate in a \\u escape");
        }
        n += put_utf8(buf + n, cp);
        break;
      }
      default:
        return fail_at(ps, esc, "unknown escape in a string");
    }
  }
  buf[n] = '\0';
  ps->p = q + 1;
  *out = buf;
  *out_len = n;
  return WEFT_OK;
}

static int parse_number(parser *ps, weft__json *v) {
  const char *s = ps->p, *q = s;
  if (q < ps->end && *q == '-') q++;
  if (q >= ps->end || !(*q >= '0' && *q <= '9')) return fail_at(ps, s, "invalid number");
  if (*q == '0' && q + 1 < ps->end && q[1] >= '0' && q[1] <= '9')
    return fail_at(ps, s, "a number may not have leading zeros");
  while (q < ps->end && *q >= '0' && *q <= '9') q++;
  if (q < ps->end && *q == '.') {
    q++;
    if (q >= ps->end || !(*q >= '0' && *q <= '9')) return fail_at(ps, s, "invalid number: digits must follow '.'");
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
  }
  if (q < ps->end && (*q == 'e' || *q == 'E')) {
    q++;
    if (q < ps->end && (*q == '+' || *q == '-')) q++;
    if (q >= ps->end || !(*q >= '0' && *q <= '9')) return fail_at(ps, s, "invalid number: bad exponent");
    while (q < ps->end && *q >= '0' && *q <= '9') q++;
  }
  char tmp[64];
  size_t n = (size_t)(q - s);
  if (n >= sizeof tmp) return fail_at(ps, s, "number too long");
  memcpy(tmp, s, n);
  tmp[n] = '\0';
  errno = 0;
  v->num = strtod(tmp, NULL);
  if (errno == ERANGE && (v->num > 1.0 || v->num < -1.0)) return fail_at(ps, s, "number out of range");
  ps->p = q;
  return WEFT_OK;
}

static int literal(parser *ps, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
    return fail_at(ps, ps->p, "unexpected character (expected a value)");
  ps->p += n;
  return WEFT_OK;
}

static weft__json *parse_value(parser *ps, int depth);

static weft__json *parse_members(parser *ps, weft__json *v, int depth, char close) {
  int object = close == '}';
  weft__json **tail = &v->child;
  ps->p++; /* the opening bracket */
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    return v;
  }
  for (;;) {
    const char *key = NULL;
    size_t klen;
    skip_ws(ps);
    if (object) {
      if (ps->p >= ps->end || *ps->p != '"') {
        fail_at(ps, ps->p, "expected a member name in double quotes");
        return NULL;
      }
      if (parse_string(ps, &key, &klen) != WEFT_OK) return NULL;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') {
        fail_at(ps, ps->p, "expected ':' after a member name");
        return NULL;
      }
      ps->p++;
    }
    weft__json *m = parse_value(ps, depth + 1);
    if (m == NULL) return NULL;
    m->key = key;
    *tail = m;
    tail = &m->next;
    v->len++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      skip_ws(ps);
      if (ps->p < ps->end && *ps->p == close) {
        fail_at(ps, ps->p, "trailing comma");
        return NULL;
      }
      continue;
    }
    if (ps->p < ps->end && *ps->p == close) {
      ps->p++;
      return v;
    }
    fail_at(ps, ps->p, object ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array");
    return NULL;
  }
}

static weft__json *parse_value(parser *ps, int depth) {
  skip_ws(ps);
  if (depth > MAX_DEPTH) {
    fail_at(ps, ps->p, "nesting deeper than 64 levels");
    return NULL;
  }
  if (ps->p >= ps->end) {
    fail_at(ps, ps->p, "unexpected end of input (expected a value)");
    return NULL;
  }
  weft__json *v;
  switch (*ps->p) {
    case '{':
      if ((v = new_value(ps, WEFT__JSON_OBJECT)) == NULL) return NULL;
      return parse_members(ps, v, depth, '}');
    case '[':
      if ((v = new_value(ps, WEFT__JSON_ARRAY)) == NULL) return NULL;
      return parse_members(ps, v, depth, ']');
    case '"':
      if ((v = new_value(ps, WEFT__JSON_STRING)) == NULL) return NULL;
      return parse_string(ps, &v->str, &v->len) == WEFT_OK ? v : NULL;
    case 't':
    case 'f':
      if ((v = new_value(ps, WEFT__JSON_BOOL)) == NULL) return NULL;
      v->num = *ps->p == 't';
      return literal(ps, *ps->p == 't' ? "true" : "false") == WEFT_OK ? v : NULL;
    case 'n':
      if ((v = new_value(ps, WEFT__JSON_NULL)) == NULL) return NULL;
      return literal(ps, "null") == WEFT_OK ? v : NULL;
    default:
      if ((v = new_value(ps, WEFT__JSON_NUMBER)) == NULL) return NULL;
      return parse_number(ps, v) == WEFT_OK ? v : NULL;
  }
}

int weft__json_parse(const char *text, size_t len, const char *what, weft__arena *a,
                     weft__json **out) {
  parser ps = {text, text + len, text, 1, what, a, WEFT_OK};
  if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) ps.p = ps.line_start = text + 3;
  weft__json *root = parse_value(&ps, 0);
  if (root != NULL) {
    skip_ws(&ps);
    if (ps.p < ps.end) fail_at(&ps, ps.p, "unexpected text after the document");
  }
  if (ps.rc != WEFT_OK) return ps.rc == WEFT_ENOMEM ? weft__oom("a JSON document") : ps.rc;
  *out = root;
  return WEFT_OK;
}

const weft__json *weft__json_get(const weft__json *obj, const char *key) {
  if (obj == NULL || obj->type != WEFT__JSON_OBJECT) return NULL;
  for (const weft__json *m = obj->child; m != NULL; m = m->next)
    if (strcmp(m->key, key) == 0) return m;
  return NULL;
}

const char *weft__json_type_name(int type) {
  static const char *const names[] = {"null", "boolean", "number", "string", "array", "object"};
  return type >= 0 && type <= WEFT__JSON_OBJECT ? names[type] : "?";
}
