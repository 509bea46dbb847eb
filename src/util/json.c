/* json.c — the JSON path of json.h: UTF-8 repair, string literals and numbers written through
 * jansson, documents read by jansson with weft's error messages.
 *
 * Well-formed UTF-8 (Unicode table 3-7): a lead byte fixes the length and the range of the
 * second byte; every later byte is 80..BF.
 *
 *   00..7F
 *   C2..DF  80..BF
 *   E0      A0..BF  80..BF        (E0 80..9F would be overlong)
 *   E1..EC  80..BF  80..BF
 *   ED      80..9F  80..BF        (ED A0..BF would be a surrogate, D800..DFFF)
 *   EE..EF  80..BF  80..BF
 *   F0      90..BF  80..BF 80..BF (F0 80..8F would be overlong)
 *   F1..F3  80..BF  80..BF 80..BF
 *   F4      80..8F  80..BF 80..BF (F4 90.. would be above U+10FFFF)
 *
 * 80..C1 and F5..FF never start a sequence. The maximal ill-formed subpart at a position is the
 * longest prefix of a sequence that this table allows (at least one byte), and it becomes one
 * U+FFFD: "\xe2\x82" cut short is one replacement, "\xc0\xaf" (overlong) two, "\xed\xa0\x80"
 * (a surrogate) three. */
#include "util/json.h"

#include <math.h>
#include <string.h>

/* Length of the well-formed sequence at p[0..n) (n >= 1), or 0 with *bad set to the length
 * of the maximal ill-formed subpart there. */
static size_t utf8_seq(const unsigned char *p, size_t n, size_t *bad) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  size_t need;
  unsigned lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    need = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    need = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    need = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t i = 1; i < need; i++) {
    if (i >= n || p[i] < lo || p[i] > hi) {
      *bad = i;
      return 0;
    }
    lo = 0x80;
    hi = 0xbf;
  }
  return need;
}

int weft__utf8_valid(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t bad;
  for (size_t i = 0; i < n;) {
    size_t k = utf8_seq(p + i, n - i, &bad);
    if (k == 0) return 0;
    i += k;
  }
  return 1;
}

void weft__utf8_repair(weft__strbuf *b, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t run = 0, i = 0, bad;
  while (i < n) {
    size_t k = utf8_seq(p + i, n - i, &bad);
    if (k != 0) {
      i += k;
      continue;
    }
    weft__strbuf_put(b, s + run, i - run);
    weft__strbuf_put(b, "\xef\xbf\xbd", 3); /* U+FFFD */
    i += bad;
    run = i;
  }
  weft__strbuf_put(b, s + run, n - run);
}

/* A jansson string of s, repaired; NULL out of memory. */
static json_t *string_of(const char *s) {
  size_t n = strlen(s);
  if (weft__utf8_valid(s, n)) return json_stringn_nocheck(s, n);
  weft__strbuf fixed;
  weft__strbuf_init(&fixed);
  weft__utf8_repair(&fixed, s, n);
  json_t *j = fixed.failed ? NULL : json_stringn_nocheck(fixed.data, fixed.len);
  weft__strbuf_fini(&fixed);
  return j;
}

void weft__json_fput_str(FILE *f, const char *s, int *rc) {
  if (*rc != WEFT_OK) return;
  json_t *j = s != NULL ? string_of(s) : json_null();
  if (j == NULL) {
    *rc = weft__oom("a JSON string");
    return;
  }
  json_dumpf(j, f, JSON_ENCODE_ANY); /* encoding a string allocates nothing; errors show in f */
  json_decref(j);
}

static int put_cb(const char *text, size_t size, void *data) {
  weft__strbuf *b = data;
  weft__strbuf_put(b, text, size);
  return b->failed ? -1 : 0;
}

void weft__json_put_str(weft__strbuf *b, const char *s) {
  if (b->failed) return;
  json_t *j = s != NULL ? string_of(s) : json_null();
  if (j == NULL || json_dump_callback(j, put_cb, b, JSON_ENCODE_ANY) != 0) b->failed = 1;
  json_decref(j);
}

void weft__json_put_blas(weft__strbuf *b, const weft_blas_info *bi) {
  weft__strbuf_puts(b, "{\"library\": ");
  weft__json_put_str(b, bi->library[0] ? bi->library : NULL);
  weft__strbuf_puts(b, ", \"name\": ");
  weft__json_put_str(b, bi->name);
  weft__strbuf_puts(b, ", \"config\": ");
  weft__json_put_str(b, bi->config);
  weft__strbuf_printf(b, ", \"threading\": \"%s\", \"threads\": %d, \"stopped\": %s, \"competes\": %s, "
                         "\"thread_safe\": %s, \"message\": ",
                      weft_blas_threading_name(bi->threading), bi->threads, bi->stopped ? "true" : "false",
                      bi->competes ? "true" : "false", bi->thread_safe ? "true" : "false");
  weft__json_put_str(b, bi->message[0] ? bi->message : NULL);
  weft__strbuf_puts(b, "}");
}

void weft__json_fput_num(FILE *f, double v) {
  if (isfinite(v))
    fprintf(f, "%.9g", v);
  else
    fputs("null", f);
}

/* ---- reading ------------------------------------------------------------------------------ */

enum { PATH_DEPTH = 32 };

/* Writes into out the path ("gpu.launch_s", "a[2].b") of the object member whose key ends at
 * byte `pos`: jansson names a key given twice only by its position. jansson has read the text
 * up to `pos`, so it is well-formed there, and following strings and brackets is enough. The
 * key ending at `pos` is the last string seen; the levels around it give the rest. */
static void path_at(const char *text, size_t pos, char *out, size_t size) {
  struct level {
    char open;        /* '{' or '[' */
    size_t index;     /* in an array: the element's index */
    const char *key;  /* in an object: the current member's key (raw, escapes kept) */
    size_t klen;
  } lv[PATH_DEPTH];
  size_t depth = 0; /* levels deeper than PATH_DEPTH are counted, not kept */
  const char *str = "";
  size_t slen = 0;
  for (size_t i = 0; i < pos; i++) {
    char c = text[i];
    if (c == '"') {
      size_t start = ++i;
      while (i < pos && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
      str = text + start;
      slen = (i < pos ? i : pos) - start;
    } else if (c == '{' || c == '[') {
      if (depth < PATH_DEPTH) lv[depth] = (struct level){c, 0, "", 0};
      depth++;
    } else if ((c == '}' || c == ']') && depth > 0) {
      depth--;
    } else if (c == ':' && depth > 0 && depth <= PATH_DEPTH) {
      lv[depth - 1].key = str;
      lv[depth - 1].klen = slen;
    } else if (c == ',' && depth > 0 && depth <= PATH_DEPTH) {
      lv[depth - 1].index++;
    }
  }
  size_t n = 0;
  out[0] = '\0';
  for (size_t d = 0; d + 1 < depth && d < PATH_DEPTH && n < size; d++) {
    if (lv[d].open == '[')
      n += (size_t)snprintf(out + n, size - n, "[%zu]", lv[d].index);
    else
      n += (size_t)snprintf(out + n, size - n, "%s%.*s", n ? "." : "", (int)lv[d].klen, lv[d].key);
  }
  if (n < size) snprintf(out + n, size - n, "%s%.*s", n ? "." : "", (int)slen, str);
}

int weft__json_read(const char *text, size_t len, const char *what, json_t **out) {
  json_error_t e;
  *out = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL,
                    &e);
  if (*out != NULL) return WEFT_OK;
  switch (json_error_code(&e)) {
    case json_error_out_of_memory:
      return weft__oom(what);
    case json_error_duplicate_key: {
      char path[200];
      path_at(text, (size_t)e.position < len ? (size_t)e.position : len, path, sizeof path);
      return weft__err(WEFT_EINVAL, "%s: line %d, column %d: %s: field given twice", what, e.line,
                       e.column, path);
    }
    default:
      return weft__err(WEFT_EPARSE, "%s: line %d, column %d: %s", what, e.line, e.column, e.text);
  }
}

const char *weft__json_type_name(const json_t *v) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER:
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "boolean";
    default: return "null";
  }
}
