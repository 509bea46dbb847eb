/* json.h — a small strict JSON reader for machine profiles: text in, a read-only tree out.
 *
 * Why our own: a profile is one small file read once per runtime, and the reader must say
 * where a file is wrong (line and column) in weft's own error style; the ~300 lines here cost
 * less than a new run-time dependency that the GPU machines (which cannot install packages)
 * would have to carry. It accepts RFC 8259 JSON only: no comments, no trailing commas, no
 * NaN; numbers are read as doubles; \u escapes (with surrogate pairs) become UTF-8. Nesting is
 * limited to 64 levels so that hostile input cannot exhaust the stack.
 *
 * Memory: every value of a tree comes from the arena passed to the parser and is freed with
 * it. Thread-safe: yes (no shared state). */
#ifndef WEFT_SIM_JSON_H
#define WEFT_SIM_JSON_H

#include <stddef.h>

#include "util/util.h"

typedef enum weft__json_type {
  WEFT__JSON_NULL = 0,
  WEFT__JSON_BOOL,
  WEFT__JSON_NUMBER,
  WEFT__JSON_STRING,
  WEFT__JSON_ARRAY,
  WEFT__JSON_OBJECT,
} weft__json_type;

typedef struct weft__json weft__json;

/* One value. Arrays and objects list their members through `child` and `next`, in document
 * order; object members carry their `key`. */
struct weft__json {
  int type;          /* weft__json_type */
  int line, col;     /* where the value starts (1-based), for messages */
  double num;        /* NUMBER; BOOL: 0 or 1 */
  const char *str;   /* STRING: NUL-terminated UTF-8 (may contain NUL: see len) */
  size_t len;        /* STRING: bytes; ARRAY, OBJECT: members */
  const char *key;   /* a member of an object: its key */
  weft__json *child; /* ARRAY, OBJECT: the first member */
  weft__json *next;  /* the next member of the enclosing array or object */
};

/* Parses text[0..len) into a tree allocated from `a`. Returns WEFT_OK and the root in *out,
 * or WEFT_EPARSE with "what: line L, column C: what is wrong" (what = `what`, e.g. the file
 * name) as the thread's error message, or WEFT_ENOMEM. */
int weft__json_parse(const char *text, size_t len, const char *what, weft__arena *a,
                     weft__json **out);

/* The member `key` of object `obj`, or NULL (also when obj is not an object). */
const weft__json *weft__json_get(const weft__json *obj, const char *key);

/* "null", "boolean", "number", "string", "array" or "object". */
const char *weft__json_type_name(int type);

#endif
