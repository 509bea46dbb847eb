/* strbuf.c — the growable text buffer of strbuf.h. Capacity doubles from 256 bytes, so
 * appending n bytes one at a time costs O(n); a size that would overflow is an allocation
 * failure like any other. */
#include "util/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void weft__strbuf_init(weft__strbuf *b) { memset(b, 0, sizeof *b); }

void weft__strbuf_fini(weft__strbuf *b) {
  weft__free(b->data);
  memset(b, 0, sizeof *b);
}

/* Makes room for `extra` more bytes and the NUL; 0 if the buffer has failed. */
static int grow(weft__strbuf *b, size_t extra) {
  if (b->failed) return 0;
  if (extra < b->cap - b->len) return 1; /* cap > len whenever cap > 0: the NUL's byte */
  if (extra >= SIZE_MAX / 2 - b->len) {
    b->failed = 1;
    return 0;
  }
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *d = weft__realloc(b->data, cap);
  if (d == NULL) {
    b->failed = 1;
    return 0;
  }
  b->data = d;
  b->cap = cap;
  return 1;
}

void weft__strbuf_put(weft__strbuf *b, const char *s, size_t n) {
  if (!grow(b, n)) return;
  if (n) memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void weft__strbuf_puts(weft__strbuf *b, const char *s) { weft__strbuf_put(b, s, strlen(s)); }

void weft__strbuf_vprintf(weft__strbuf *b, const char *fmt, va_list ap) {
  char small[256];
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  if (n < 0) {
    b->failed = 1;
  } else if ((size_t)n < sizeof small) {
    weft__strbuf_put(b, small, (size_t)n);
  } else if (grow(b, (size_t)n)) {
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, again);
    b->len += (size_t)n;
  }
  va_end(again);
}

void weft__strbuf_printf(weft__strbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weft__strbuf_vprintf(b, fmt, ap);
  va_end(ap);
}

void weft__strbuf_truncate(weft__strbuf *b, size_t len) {
  WEFT_ASSERT(len <= b->len);
  b->len = len;
  if (b->data != NULL) b->data[len] = '\0';
}

int weft__strbuf_take(weft__strbuf *b, const char *what, char **out) {
  *out = NULL;
  char *s = b->failed ? NULL : malloc(b->len + 1);
  if (s == NULL) {
    weft__strbuf_fini(b);
    return weft__oom(what);
  }
  if (b->len) memcpy(s, b->data, b->len);
  s[b->len] = '\0';
  weft__strbuf_fini(b);
  *out = s;
  return WEFT_OK;
}
