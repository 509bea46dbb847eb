/* text.c — the canonical spellings of numbers and names, and diagnostics.
 *
 * Canonical spellings are what make the writer's output parse back to the same graph: a
 * double is written with the fewest digits that read back to the same bits (17 at most), a
 * name either as the identifier or indexed name the parser would build from it or between
 * backticks. Diagnostics are kept until the end of a parse, then sorted by position and
 * composed into one message: "file:line:col: error: what; expected what", the source line,
 * and a caret under the column (tabs copied, so the caret lines up in a terminal). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl_internal.h"

/* ---- numbers ------------------------------------------------------------------------------- */

/* The fewest significant digits that read back to v (as a float when is_f32). Numbers below
 * 1e15 are written without an exponent ("10", not "1e+01"). */
static void shortest(char *buf, double v, int is_f32) {
  int p = 1;
  for (; p <= 17; p++) {
    snprintf(buf, 40, "%.*g", p, v);
    double back = strtod(buf, NULL);
    if (is_f32 ? (float)back == (float)v : (back == v && signbit(back) == signbit(v))) break;
  }
  const char *e = strchr(buf, 'e');
  if (e != NULL) {
    int exp = atoi(e + 1);
    if (exp >= 0 && exp < 15) snprintf(buf, 40, "%.*g", exp + 1 > p ? exp + 1 : p, v);
  }
}

char *weft__dsl_fmt_number(char *buf, double v, int is_f32) {
  if (isnan(v))
    strcpy(buf, "nan");
  else if (isinf(v))
    strcpy(buf, v < 0 ? "-inf" : "inf");
  else
    shortest(buf, v, is_f32);
  return buf;
}

char *weft__dsl_fmt_double(char *buf, double v) {
  weft__dsl_fmt_number(buf, v, 0);
  if (strpbrk(buf, ".ena") == NULL) strcat(buf, ".0"); /* a float literal: "2.0", not "2" */
  return buf;
}

/* ---- names and strings ----------------------------------------------------------------- */

static int is_ident_start(int c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static int is_ident_char(int c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

/* 1 if s[0..n) is an integer as the parser prints an evaluated index: -?(0|[1-9][0-9]*),
 * in int64 range, and not "-0". */
static int canonical_int(const char *s, size_t n) {
  size_t i = 0;
  if (i < n && s[i] == '-') i++;
  if (i == n) return 0;
  if (s[i] == '0') return i + 1 == n && s[0] != '-';
  size_t digits = n - i;
  for (size_t k = i; k < n; k++)
    if (s[k] < '0' || s[k] > '9') return 0;
  if (digits < 19) return 1;
  if (digits > 19) return 0;
  const char *lim = s[0] == '-' ? "9223372036854775808" : "9223372036854775807";
  return memcmp(s + i, lim, 19) <= 0;
}

/* 1 if the parser reads `name` back as a plain or indexed name. */
static int plain_name(const char *name) {
  size_t n = strlen(name), i = 0;
  if (n == 0 || !is_ident_start((unsigned char)name[0])) return 0;
  while (i < n && is_ident_char((unsigned char)name[i])) i++;
  if (weft__dsl_keyword(name, i)) return 0;
  if (i == n) return 1;
  if (name[i] != '[' || name[n - 1] != ']') return 0;
  size_t start = i + 1;
  for (size_t k = start; k < n; k++) {
    if (name[k] == ',' || k == n - 1) {
      if (!canonical_int(name + start, k - start)) return 0;
      start = k + 1;
    }
  }
  return 1;
}

static void put_quoted(weft__strbuf *b, const char *s, char quote) {
  char esc[8];
  weft__strbuf_put(b, &quote, 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == (unsigned char)quote || *p == '\\') {
      esc[0] = '\\';
      esc[1] = (char)*p;
      weft__strbuf_put(b, esc, 2);
    } else if (*p == '\n') {
      weft__strbuf_puts(b, "\\n");
    } else if (*p == '\t') {
      weft__strbuf_puts(b, "\\t");
    } else if (*p == '\r') {
      weft__strbuf_puts(b, "\\r");
    } else if (*p < 0x20 || *p == 0x7f) {
      snprintf(esc, sizeof esc, "\\x%02x", *p);
      weft__strbuf_puts(b, esc);
    } else {
      weft__strbuf_put(b, (const char *)p, 1);
    }
  }
  weft__strbuf_put(b, &quote, 1);
}

void weft__dsl_buf_name(weft__strbuf *b, const char *name) {
  if (plain_name(name))
    weft__strbuf_puts(b, name);
  else
    put_quoted(b, name, '`');
}

void weft__dsl_buf_ident(weft__strbuf *b, const char *name) {
  size_t n = 0;
  int plain = is_ident_start((unsigned char)name[0]);
  for (; name[n]; n++) plain = plain && is_ident_char((unsigned char)name[n]);
  if (plain && !weft__dsl_keyword(name, n))
    weft__strbuf_puts(b, name);
  else
    put_quoted(b, name, '`');
}

void weft__dsl_buf_string(weft__strbuf *b, const char *s) { put_quoted(b, s, '"'); }

/* ---- name tables -------------------------------------------------------------------------- */

/* FNV-1a, then a final mix: FNV's low bits hardly depend on the earlier characters, and the
 * table indexes by the low bits, so names like "y[123]" and "y[124]" would cluster. */
static uint32_t hash_str(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

void weft__dsl_symtab_fini(weft__dsl_symtab *st) {
  weft__free(st->index);
  weft__free(st->entries);
  memset(st, 0, sizeof *st);
}

weft__dsl_sym *weft__dsl_sym_find(const weft__dsl_symtab *st, const char *key) {
  if (st->cap == 0) return NULL;
  uint32_t h = hash_str(key);
  for (size_t i = h & (st->cap - 1);; i = (i + 1) & (st->cap - 1)) {
    uint32_t e = st->index[i].entry;
    if (e == 0) return NULL;
    if (st->index[i].hash == h && strcmp(st->entries[e - 1].key, key) == 0) return &st->entries[e - 1];
  }
}

/* Rebuilds the index with `cap` slots (a power of two). */
static int reindex(weft__dsl_symtab *st, size_t cap) {
  struct weft__dsl_slot *index = weft__calloc(cap, sizeof *index);
  if (index == NULL) return 0;
  for (size_t e = 0; e < st->len; e++) {
    uint32_t h = st->entries[e].hash;
    size_t i = h & (cap - 1);
    while (index[i].entry != 0) i = (i + 1) & (cap - 1);
    index[i].hash = h;
    index[i].entry = (uint32_t)(e + 1);
  }
  weft__free(st->index);
  st->index = index;
  st->cap = cap;
  return 1;
}

weft__dsl_sym *weft__dsl_sym_slot(weft__dsl_symtab *st, weft__arena *a, const char *key) {
  weft__dsl_sym *s = weft__dsl_sym_find(st, key);
  if (s != NULL) return s;
  if (st->len >= UINT32_MAX - 1) return NULL;
  /* At most half the slots in use: a miss probes about two slots of 8 bytes. */
  if ((st->len + 1) * 2 > st->cap && !reindex(st, st->cap ? st->cap * 2 : 64)) return NULL;
  if (st->len == st->entries_cap) {
    size_t n = st->entries_cap ? st->entries_cap * 2 : 32;
    weft__dsl_sym *e = weft__realloc(st->entries, n * sizeof *e);
    if (e == NULL) return NULL;
    st->entries = e;
    st->entries_cap = n;
  }
  char *k = weft__arena_strdup(a, key);
  if (k == NULL) return NULL;
  uint32_t h = hash_str(key);
  size_t i = h & (st->cap - 1);
  while (st->index[i].entry != 0) i = (i + 1) & (st->cap - 1);
  s = &st->entries[st->len++];
  memset(s, 0, sizeof *s);
  s->key = k;
  s->hash = h;
  st->index[i].hash = h;
  st->index[i].entry = (uint32_t)st->len;
  return s;
}

/* ---- diagnostics --------------------------------------------------------------------------- */

void weft__dsl_diags_init(weft__dsl_diags *d, const char *file, const char *text, size_t len) {
  memset(d, 0, sizeof *d);
  d->file = file;
  d->text = text;
  d->len = len;
  weft__vec_init(&d->list, sizeof(weft__dsl_diag));
}

void weft__dsl_diags_fini(weft__dsl_diags *d) {
  for (size_t i = 0; i < d->list.len; i++) weft__free(WEFT__VEC_AT(&d->list, weft__dsl_diag, i).msg);
  weft__vec_fini(&d->list);
}

size_t weft__dsl_error_count(const weft__dsl_diags *d) { return d->list.len + d->dropped; }

int weft__dsl_verror(weft__dsl_diags *d, int status, uint32_t line, uint32_t col, const char *fmt,
                     va_list ap) {
  for (size_t i = 0; line != 0 && i < d->list.len; i++) {
    const weft__dsl_diag *o = &WEFT__VEC_AT(&d->list, weft__dsl_diag, i);
    if (o->line == line && o->col == col) return status;
  }
  if (d->list.len >= WEFT__DSL_MAX_ERRORS) {
    d->dropped++;
    return status;
  }
  char tmp[1024];
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  weft__dsl_diag g = {line, col, (uint32_t)d->list.len, status, weft__strdup(tmp)};
  if (g.msg == NULL || weft__vec_push(&d->list, &g) != WEFT_OK) {
    weft__free(g.msg);
    d->oom = 1;
  }
  return status;
}

int weft__dsl_error(weft__dsl_diags *d, int status, uint32_t line, uint32_t col, const char *fmt,
                    ...) {
  va_list ap;
  va_start(ap, fmt);
  weft__dsl_verror(d, status, line, col, fmt, ap);
  va_end(ap);
  return status;
}

static int diag_cmp(const void *pa, const void *pb) {
  const weft__dsl_diag *a = pa, *b = pb;
  if (a->line != b->line) return a->line < b->line ? -1 : 1;
  if (a->col != b->col) return a->col < b->col ? -1 : 1;
  return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Longest part of a source line shown under a diagnostic, in bytes. */
enum { SHOWN = 160 };

/* Appends source line `line` and a caret under byte column `col`. A long line is shown as a
 * window around the column; control characters are shown as '?' so that the message stays
 * one printable string. */
static void put_excerpt(weft__strbuf *b, const char *text, size_t len, uint32_t line, uint32_t col) {
  size_t start = 0;
  for (uint32_t l = 1; l < line && start < len; start++)
    if (text[start] == '\n') l++;
  if (start > len) return;
  size_t end = start;
  while (end < len && text[end] != '\n') end++;
  if (end > start && text[end - 1] == '\r') end--;
  size_t at = start + (col ? col - 1 : 0);
  if (at > end) at = end;
  size_t from = start, to = end;
  if (to - from > SHOWN) {
    from = at > start + SHOWN / 2 ? at - SHOWN / 2 : start;
    to = from + SHOWN < end ? from + SHOWN : end;
  }
  const char *pre = from > start ? "..." : "";
  weft__strbuf_puts(b, pre);
  for (size_t i = from; i < to; i++) {
    unsigned char c = (unsigned char)text[i];
    weft__strbuf_put(b, (c < 0x20 && c != '\t') || c == 0x7f ? "?" : &text[i], 1);
  }
  if (to < end) weft__strbuf_puts(b, "...");
  weft__strbuf_puts(b, "\n");
  weft__strbuf_puts(b, *pre ? "   " : "");
  for (size_t i = from; i < at; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == '\t')
      weft__strbuf_puts(b, "\t");
    else if ((c & 0xc0) != 0x80) /* one column per UTF-8 character */
      weft__strbuf_puts(b, " ");
  }
  weft__strbuf_puts(b, "^");
}

/* The most bytes of diagnostics put into the thread's error message. */
enum { MESSAGE_MAX = 15000 };

int weft__dsl_diags_finish(weft__dsl_diags *d) {
  if (d->oom) return weft__oom("the parser's diagnostics");
  if (d->list.len == 0) return WEFT_OK;
  weft__dsl_diag *g = d->list.data;
  qsort(g, d->list.len, sizeof *g, diag_cmp);
  weft__strbuf b;
  weft__strbuf_init(&b);
  size_t shown = 0, kept = 0;
  uint32_t last_line = 0;
  for (; shown < d->list.len; shown++) {
    /* One error per line, the leftmost: a second one on the same line is nearly always the
     * first one's echo (a bad character inside a statement that no longer parses). */
    if (g[shown].line != 0 && g[shown].line == last_line) continue;
    last_line = g[shown].line;
    size_t mark = b.len;
    if (kept++) weft__strbuf_puts(&b, "\n\n");
    if (g[shown].line == 0) {
      weft__strbuf_printf(&b, "%s: error: %s", d->file, g[shown].msg);
    } else {
      weft__strbuf_printf(&b, "%s:%u:%u: error: %s\n", d->file, g[shown].line, g[shown].col,
                          g[shown].msg);
      put_excerpt(&b, d->text, d->len, g[shown].line, g[shown].col);
    }
    if (b.len > MESSAGE_MAX && kept > 1) {
      weft__strbuf_truncate(&b, mark);
      break;
    }
  }
  if (d->dropped || shown < d->list.len)
    weft__strbuf_printf(&b, "\n\n%s: too many errors; the first %zu are shown", d->file, kept - (shown < d->list.len));
  int status = g[0].status;
  if (b.failed)
    weft__err(status, "%s:%u:%u: error: %s", d->file, g[0].line, g[0].col, g[0].msg);
  else
    weft__set_last_error(b.data);
  weft__strbuf_fini(&b);
  return status;
}
