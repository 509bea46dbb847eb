/* dsl.h — .weft programs: parse a text into a graph, print its outputs, write any graph back
 * as .weft text. The language is specified in docs/dsl.md.
 *
 * A weft_program owns the graph it built (and nothing of the runtime). Parsing reports every
 * error it can find in one pass; each diagnostic carries file:line:col, the offending line with
 * a caret under the column, and what was expected. */
#ifndef WEFT_DSL_H
#define WEFT_DSL_H

#include <stdio.h>

#include "weft/weft.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_program weft_program;

typedef struct weft_dsl_options {
  /* Parameter overrides, each "NAME=VALUE" (the command line's -D). */
  const char *const *defines;
  int ndefines;
  /* If not NULL, every device declaration resolves to this device ("cpu", "cuda:1"): the
   * command line's --device. */
  const char *device;
  /* Directory that relative paths of `from "file"` initialisers and `save` outputs are
   * resolved against (NULL: the current directory). */
  const char *base_dir;
  /* Upper bound on the nodes a program may create (loops included); 0: 10 000 000. A program
   * may also run at most 4 x max_nodes statements (each loop iteration counts as one). */
  size_t max_nodes;
  /* 1: `from "file"` initialisers and `save` outputs are errors (a server running programs
   * it did not write; the fuzzer). 0 by default. */
  int deny_files;
} weft_dsl_options;

/* Fills `o` with the defaults. Thread-safe: yes. */
WEFT_API void weft_dsl_options_init(weft_dsl_options *o);

/* Parses `len` bytes of `text` (named `filename` in messages) and builds its graph on `rt`.
 * On success stores the program in *out and returns WEFT_OK. On failure returns WEFT_EPARSE
 * (syntax or semantic errors: every one found, in weft_last_error(), one diagnostic per
 * error separated by blank lines), or another status (WEFT_EDEVICE for a device that does not
 * exist and has no fallback, ...), and *out is NULL. Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_program_parse(weft_runtime *rt, const char *filename,
                                               const char *text, size_t len,
                                               const weft_dsl_options *opts,
                                               weft_program **out);

/* Reads the file at `path` and parses it, as weft_program_parse (WEFT_ENOENT or WEFT_EIO when
 * it cannot be read). Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_program_load(weft_runtime *rt, const char *path,
                                              const weft_dsl_options *opts,
                                              weft_program **out);

/* The graph the program built (owned by the program). Thread-safe: yes. */
WEFT_API weft_graph *weft_program_graph(const weft_program *p);

/* Prints the program's outputs (its `print` statements) after a run, as text, or as a JSON
 * object {"name": value-or-array, ...} when json is 1; performs its `save` statements.
 * Returns WEFT_OK or an error (WEFT_EIO for a file that cannot be written). Thread-safe: no
 * (with respect to the program's graph: not while a run of it is in flight). */
WEFT_NODISCARD WEFT_API int weft_program_outputs(weft_program *p, FILE *out, int json);

/* Destroys the program and its graph. NULL is a no-op. Thread-safe: no (with respect to the
 * program). */
WEFT_API void weft_program_destroy(weft_program *p);

/* Writes `g` as canonical .weft text: declarations of every device and tensor, then every
 * node in order. Parsing the text gives the same graph (same tensors, nodes, accesses and
 * edges). Returns a malloc'd NUL-terminated string in *out (free with free()), or
 * WEFT_ENOTSUP, naming the tensors, for the rare graph the text cannot spell (docs/dsl.md).
 * Thread-safe: no (with respect to `g`: not while it is being built). */
WEFT_NODISCARD WEFT_API int weft_graph_write(const weft_graph *g, char **out);

/* Writes the program's source in canonical form (weft fmt): like weft_graph_write but keeping
 * the program's parameters, loops, outputs and comments. Returns a malloc'd string in *out
 * (free with free()). Thread-safe: yes. */
WEFT_NODISCARD WEFT_API int weft_program_format(const weft_program *p, char **out);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_DSL_H */
