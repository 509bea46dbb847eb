/* strbuf.h — the one growable text buffer: the .weft writer, formatter and diagnostics, the
 * program outputs, the JSON writers and the `weft` command all build their text in it.
 *
 * A buffer is always NUL-terminated once it holds anything (`data` is NULL before the first
 * append). An allocation failure sets `failed` and makes every later append a no-op, so a
 * writer appends without checking and looks once at the end; the text kept is what was there
 * before the failure. Storage comes from the allocation hook (weft__realloc), so the
 * out-of-memory tests reach it; weft__strbuf_take hands the text over in a block from the C
 * library's malloc, for callers that free() what they are given.
 *
 * The command (src/cli) uses this buffer although it otherwise keeps to the public API: it is
 * a utility with no view of graphs or runs, and one implementation is better than two. */
#ifndef WEFT_UTIL_STRBUF_H
#define WEFT_UTIL_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

#include "util/util.h"

typedef struct weft__strbuf {
  char *data;
  size_t len, cap;
  int failed; /* an allocation (or a formatting) failed: appends are ignored */
} weft__strbuf;

void weft__strbuf_init(weft__strbuf *b);
/* Frees the text; the buffer is empty and usable again. */
void weft__strbuf_fini(weft__strbuf *b);
/* Appends n bytes of s (which may hold NUL bytes). */
void weft__strbuf_put(weft__strbuf *b, const char *s, size_t n);
void weft__strbuf_puts(weft__strbuf *b, const char *s);
void weft__strbuf_printf(weft__strbuf *b, const char *fmt, ...) WEFT__PRINTF(2, 3);
void weft__strbuf_vprintf(weft__strbuf *b, const char *fmt, va_list ap);
/* Cuts the text back to its first `len` bytes (len <= b->len). */
void weft__strbuf_truncate(weft__strbuf *b, size_t len);
/* Moves the text into a block from the C library's malloc ("" when empty) and empties the
 * buffer. Returns WEFT_OK, or WEFT_ENOMEM (message naming `what`; *out NULL) when an append
 * failed or the block cannot be had. */
int weft__strbuf_take(weft__strbuf *b, const char *what, char **out);

#endif
