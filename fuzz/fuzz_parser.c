/* fuzz_parser.c — libFuzzer target for the .weft front end.
 *
 * Each input is parsed as a program on a simulated machine with two GPUs (so devices, their
 * fallbacks and the copies weft inserts between them are reachable; nothing runs), with files
 * denied and at most 2000 nodes, so no input touches the disk or runs long. A crash, hang, leak or undefined behaviour is a bug, and so is a broken
 * round trip: when an input parses, its graph written as text must parse back to a graph with
 * the same tensors and nodes whose text is the same again, and its formatted source (weft fmt)
 * must parse back to the same number of nodes. Build and run with fuzz/run_fuzz.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/dsl.h"

static int touch_cpu(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}

static weft_runtime *runtime(void) {
  static weft_runtime *rt;
  if (rt != NULL) return rt;
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = 1;
  o.flags |= WEFT_RUNTIME_QUIET;
  o.simulate = "h200x2";
  if (weft_runtime_create(&o, &rt) != WEFT_OK) abort();
  /* A user op, so that calls with accesses and parameters are reachable. */
  weft_op_desc d;
  memset(&d, 0, sizeof d);
  d.name = "touch";
  d.nargs = 2;
  d.access[0] = WEFT_READ;
  d.access[1] = WEFT_READ_WRITE;
  d.cpu = touch_cpu;
  if (weft_op_register(rt, &d, NULL) != WEFT_OK) abort();
  return rt;
}

static weft_program *parse(const char *name, const char *text, size_t len) {
  weft_dsl_options o;
  weft_dsl_options_init(&o);
  o.max_nodes = 2000;
  o.deny_files = 1;
  weft_program *p = NULL;
  if (weft_program_parse(runtime(), name, text, len, &o, &p) != WEFT_OK) return NULL;
  return p;
}

/* A round-trip failure: print what broke and stop the fuzzer with a crash it reports. */
static void broken(const char *what, const char *text) {
  fprintf(stderr, "round trip broken: %s\n%s\n--- text ---\n%s\n", what, weft_last_error(), text ? text : "");
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  weft_program *p = parse("fuzz.weft", (const char *)data, size);
  if (p == NULL) return 0;
  weft_graph *g = weft_program_graph(p);
  char *text = NULL, *again = NULL, *fmt = NULL;
  if (weft_graph_write(g, &text) != WEFT_OK) broken("weft_graph_write failed", NULL);
  weft_program *q = parse("written.weft", text, strlen(text));
  if (q == NULL) broken("the written graph does not parse", text);
  weft_graph *h = weft_program_graph(q);
  if (weft_graph_tensor_count(g) != weft_graph_tensor_count(h) || weft_graph_node_count(g) != weft_graph_node_count(h))
    broken("the written graph has other tensors or nodes", text);
  if (weft_graph_write(h, &again) != WEFT_OK || strcmp(text, again) != 0) broken("writing it again gives other text", again);
  weft_program_destroy(q);
  if (weft_program_format(p, &fmt) != WEFT_OK) broken("weft_program_format failed", NULL);
  q = parse("formatted.weft", fmt, strlen(fmt));
  if (q == NULL || weft_graph_node_count(weft_program_graph(q)) != weft_graph_node_count(g))
    broken("the formatted program does not build the same nodes", fmt);
  weft_program_destroy(q);
  free(text);
  free(again);
  free(fmt);
  weft_program_destroy(p);
  return 0;
}
