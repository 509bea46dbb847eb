/* json.h — weft's one JSON path, on jansson: strings written as JSON literals, numbers, and
 * documents read (machine profiles).
 *
 * What is written is always valid JSON and valid UTF-8. Names in weft are bytes — a quoted
 * .weft name may hold "\xff", a file name anything the file system allows — so a string is
 * first repaired: each maximal ill-formed subsequence of UTF-8 becomes U+FFFD (Unicode's
 * "substitution of maximal subparts", chapter 3.9, which is also what WHATWG's decoder and
 * Python's errors="replace" do), and jansson then encodes it. jansson was chosen because it
 * checks UTF-8 on the way in (json_string refuses an invalid string, json_loads an invalid
 * document) and escapes what JSON requires on the way out; cJSON copies bytes as they come.
 *
 * Memory: jansson allocates with the C library's malloc, not through weft's allocation hook.
 * Its allocator is process-wide (json_set_alloc_funcs), and a library must not change it under
 * an application that uses jansson itself; a failed jansson allocation is still reported as
 * WEFT_ENOMEM. Thread-safe: yes (no state of our own; jansson keeps none that we change). */
#ifndef WEFT_UTIL_JSON_H
#define WEFT_UTIL_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "util/strbuf.h"
#include "weft/weft.h"

/* 1 if s[0..n) is well-formed UTF-8. */
int weft__utf8_valid(const char *s, size_t n);
/* Appends s[0..n) to b with each maximal ill-formed subsequence replaced by U+FFFD, so that
 * what is appended is well-formed UTF-8 (valid input is appended unchanged). */
void weft__utf8_repair(weft__strbuf *b, const char *s, size_t n);

/* Writes `s` (repaired as above) as a JSON string literal, quotes included; NULL writes null.
 * On a failed allocation nothing is written and *rc, if it was WEFT_OK, becomes WEFT_ENOMEM
 * (message set); nothing is written either once *rc holds an error, so a writer passes the
 * same status to every call and checks it once. A failed write shows in ferror(f). */
void weft__json_fput_str(FILE *f, const char *s, int *rc);
/* The same, appended to b; a failed allocation fails the buffer (b->failed). */
void weft__json_put_str(weft__strbuf *b, const char *s);
/* Appends the BLAS library a runtime found (weft_runtime_blas_info) to b as a JSON object:
 * library, name, config, threading, threads, competes, thread_safe, and message (null when
 * there is nothing to say),
 * as `weft devices --json` and the run statistics write it. */
void weft__json_put_blas(weft__strbuf *b, const weft_blas_info *bi);
/* Writes `v` with 9 significant digits, or null when it is not finite (JSON has no NaN). */
void weft__json_fput_num(FILE *f, double v);

/* Parses text[0..len) as one JSON document (any value at the top; integers read as doubles;
 * a key given twice in one object is refused). Returns WEFT_OK with the document in *out
 * (the caller releases it with json_decref), or, with *out NULL:
 *   WEFT_EPARSE  "what: line L, column C: what is wrong" (jansson's words: invalid UTF-8,
 *                a syntax error, nesting too deep, ...);
 *   WEFT_EINVAL  "what: line L, column C: gpu.launch_s: field given twice", the key named by
 *                its path from the top;
 *   WEFT_ENOMEM. */
int weft__json_read(const char *text, size_t len, const char *what, json_t **out);
/* "null", "boolean", "number", "string", "array" or "object". */
const char *weft__json_type_name(const json_t *v);

#endif
