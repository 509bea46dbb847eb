/* cmd_inspect.c — the commands that look at a program without running it:
 *   weft check FILE    counts (tensors, nodes, edges by hazard, devices, depth);
 *   weft explain FILE  every node with its device and lane and why, every inserted copy and
 *                      what it serves, every edge with its hazard and tensor;
 *   weft dot FILE      the same graph for Graphviz.
 * Each loads the program (building its graph) and runs the dependency analysis; explain also
 * builds the plan, which is where streams are chosen. Nothing is launched. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const char *hazard_name(int h) {
  switch (h) {
    case WEFT_HAZARD_RAW: return "RAW";
    case WEFT_HAZARD_WAR: return "WAR";
    case WEFT_HAZARD_WAW: return "WAW";
    default: return "explicit";
  }
}

/* The node's written tensor (its result), or NULL. */
static weft_tensor *result_of(const weft_node *n) {
  for (int i = weft_node_nargs(n) - 1; i >= 0; i--) {
    weft_access m;
    weft_tensor *t = weft_node_arg(n, i, &m);
    if (m & WEFT_WRITE) return t;
  }
  return NULL;
}

/* Loads FILE with the program options and analyses it. On failure prints why and returns
 * the exit code. */
static int load_analysed(int argc, char **argv, const char *sub, const char *help,
                         const struct option *extra, int (*local)(int, const char *, void *),
                         void *ctx, weft_runtime **rt, weft_program **prog, const char **file) {
  cli_prog_opts po = {0};
  int code;
  *file = cli_parse_prog_args(argc, argv, sub, help, extra, local, ctx, &po, &code);
  if (*file == NULL) goto done;
  if ((code = cli_prog_runtime(&po, (int)(po.workers ? po.workers : 1), rt)) != 0) goto done;
  weft_dsl_options dsl;
  cli_prog_dsl(&po, &dsl);
  if ((code = cli_load_program(*rt, *file, &dsl, prog)) != CLI_EXIT_OK) goto done;
  int rc = weft_graph_analyse(weft_program_graph(*prog));
  if (rc != WEFT_OK) code = cli_error(cli_exit_for_status(rc), "%s: %s", *file, weft_last_error());
done:
  cli_prog_opts_fini(&po);
  return code;
}

/* Prints what a command built on standard output and frees it; returns the exit code. */
static int emit(weft__strbuf *b) {
  int code = CLI_EXIT_OK;
  if (b->failed)
    code = cli_error(CLI_EXIT_FAILED, "out of memory");
  else if (b->data != NULL && (fputs(b->data, stdout) == EOF || fflush(stdout) != 0))
    code = cli_error(CLI_EXIT_FAILED, "cannot write to standard output");
  weft__strbuf_fini(b);
  return code;
}

/* ---- check ------------------------------------------------------------------------------ */

static const char check_help[] =
    "Usage: weft check [OPTIONS] FILE\n"
    "Parse and analyse the .weft program FILE without running it: tensors, nodes, edges by\n"
    "hazard, devices, and the depth of the graph.\n"
    "\n"
    "Options:\n" CLI_PROG_HELP
    "      --json               print one JSON object\n"
    "\n"
    "Exit status: 0 the program is valid, 1 out of memory, 2 bad input or usage.\n";

typedef struct dev_count {
  weft_device dev;
  size_t nodes, tensors, bytes;
} dev_count;

static dev_count *dev_slot(dev_count *dc, int *ndc, int cap, weft_device d) {
  for (int i = 0; i < *ndc; i++)
    if (weft_device_equal(dc[i].dev, d)) return &dc[i];
  if (*ndc == cap) return NULL;
  dc[*ndc] = (dev_count){.dev = d};
  return &dc[(*ndc)++];
}

static int check_option(int c, const char *arg, void *ctx) {
  (void)arg;
  if (c != CLI_OPT_LOCAL) return -1;
  *(int *)ctx = 1;
  return 0;
}

int cli_cmd_check(int argc, char **argv) {
  static const struct option extra[] = {{"json", no_argument, NULL, CLI_OPT_LOCAL},
                                        {NULL, 0, NULL, 0}};
  int json = 0;
  weft_runtime *rt = NULL;
  weft_program *prog = NULL;
  const char *file;
  int code = load_analysed(argc, argv, "check", check_help, extra, check_option, &json, &rt,
                           &prog, &file);
  if (code != CLI_EXIT_OK || prog == NULL) goto done; /* an error, or --help */
  weft_graph *g = weft_program_graph(prog);
  enum { MAXDEV = 64 };
  dev_count dc[MAXDEV];
  int ndc = 0;
  size_t nt = weft_graph_tensor_count(g), nn = weft_graph_node_count(g);
  size_t ne = weft_graph_edge_count(g), bytes = 0, ncopies = 0, ninserted = 0;
  size_t hz[5] = {0};
  for (size_t i = 0; i < nt; i++) {
    weft_tensor *t = weft_graph_tensor(g, i);
    dev_count *s = dev_slot(dc, &ndc, MAXDEV, weft_tensor_device(t));
    if (s != NULL) s->tensors++, s->bytes += weft_tensor_bytes(t);
    bytes += weft_tensor_bytes(t);
  }
  for (size_t i = 0; i < nn; i++) {
    weft_node *n = weft_graph_node(g, i);
    dev_count *s = dev_slot(dc, &ndc, MAXDEV, weft_node_device(n));
    if (s != NULL) s->nodes++;
    if (strcmp(weft_node_op_name(n), "copy") == 0) ncopies++;
    if (weft_node_is_inserted(n)) ninserted++;
  }
  for (size_t k = 0; k < ne; k++) {
    weft_edge e;
    if (weft_graph_edge(g, k, &e) == WEFT_OK && e.hazard >= 1 && e.hazard <= 4) hz[e.hazard]++;
  }
  size_t depth = 0;
  if (weft_graph_depth(g, &depth) != WEFT_OK) {
    code = cli_error(CLI_EXIT_FAILED, "%s: %s", file, weft_last_error());
    goto done;
  }
  weft__strbuf b;
  weft__strbuf_init(&b);
  char dev[32];
  if (json) {
    weft__strbuf_puts(&b, "{\"file\": ");
    weft__json_put_str(&b, file);
    weft__strbuf_printf(&b,
                        ", \"status\": \"ok\", \"tensors\": %zu, \"tensor_bytes\": %zu, \"nodes\": "
                        "%zu, \"copies\": %zu, \"inserted_copies\": %zu, \"edges\": {\"total\": %zu, "
                        "\"RAW\": %zu, \"WAR\": %zu, \"WAW\": %zu, \"explicit\": %zu}, \"depth\": %zu, "
                        "\"devices\": [",
                        nt, bytes, nn, ncopies, ninserted, ne, hz[1], hz[2], hz[3], hz[4], depth);
    for (int i = 0; i < ndc; i++)
      weft__strbuf_printf(&b, "%s{\"device\": \"%s\", \"nodes\": %zu, \"tensors\": %zu, \"bytes\": %zu}",
                          i ? ", " : "", weft_device_str(dc[i].dev, dev, sizeof dev), dc[i].nodes,
                          dc[i].tensors, dc[i].bytes);
    weft__strbuf_puts(&b, "]}\n");
  } else {
    weft__strbuf_printf(&b, "%s: ok\n", file);
    weft__strbuf_printf(&b, "  tensors  %zu (%.2f MiB)\n", nt, (double)bytes / 1048576.0);
    weft__strbuf_printf(&b, "  nodes    %zu (%zu copies, %zu inserted by weft)\n", nn, ncopies,
                        ninserted);
    weft__strbuf_printf(&b, "  edges    %zu (RAW %zu, WAR %zu, WAW %zu, explicit %zu)\n", ne, hz[1],
                        hz[2], hz[3], hz[4]);
    weft__strbuf_printf(&b, "  depth    %zu node%s on the longest dependency chain\n", depth,
                        depth == 1 ? "" : "s");
    weft__strbuf_puts(&b, "  devices ");
    for (int i = 0; i < ndc; i++)
      weft__strbuf_printf(&b, "%s %s (%zu node%s, %zu tensor%s)", i ? "," : "",
                          weft_device_str(dc[i].dev, dev, sizeof dev), dc[i].nodes,
                          dc[i].nodes == 1 ? "" : "s", dc[i].tensors, dc[i].tensors == 1 ? "" : "s");
    weft__strbuf_puts(&b, ndc ? "\n" : " none\n");
  }
  code = emit(&b);
done:
  weft_program_destroy(prog);
  weft_runtime_destroy(rt);
  return code;
}

/* ---- explain ---------------------------------------------------------------------------- */

static const char explain_help[] =
    "Usage: weft explain [OPTIONS] FILE\n"
    "Show how weft will run the .weft program FILE: each node with its device, its lane (CPU\n"
    "workers, or a GPU stream once planned) and why; each copy weft inserted and the node it\n"
    "serves; each inferred edge with its hazard (RAW, WAR, WAW) and the tensor behind it.\n"
    "\n"
    "Options:\n" CLI_PROG_HELP
    "\n"
    "Exit status: 0 success, 1 out of memory, 2 bad input or usage.\n";

/* Appends "name(arg, arg)" or "res = name(args)" for a node. */
static void node_call(weft__strbuf *b, const weft_node *n) {
  weft_tensor *res = result_of(n);
  int nargs = weft_node_nargs(n);
  /* Built-in ops list their inputs first and their result last; a result that is also read
   * (an in-place update) is shown as an argument too. */
  int user = weft_node_user_op(n) != NULL;
  if (res != NULL && !user) weft__strbuf_printf(b, "%s = ", weft_tensor_name(res));
  weft__strbuf_printf(b, "%s(", weft_node_op_name(n));
  int first = 1;
  for (int i = 0; i < nargs; i++) {
    weft_access m;
    weft_tensor *t = weft_node_arg(n, i, &m);
    if (t == res && m == WEFT_WRITE && !user) continue;
    const char *mode = !user ? "" : m == WEFT_READ ? ":r" : m == WEFT_WRITE ? ":w" : ":rw";
    weft__strbuf_printf(b, "%s%s%s", first ? "" : ", ", weft_tensor_name(t), mode);
    first = 0;
  }
  weft__strbuf_puts(b, ")");
}

/* Why the node runs on its device. */
static void device_reason(weft__strbuf *b, const weft_graph *g, const weft_node *n) {
  char d1[32], d2[32], d3[32];
  weft_device dev = weft_node_device(n);
  weft_device_str(dev, d1, sizeof d1);
  if (weft_node_is_inserted(n)) {
    weft_access m;
    weft_tensor *src = weft_node_arg(n, 0, &m), *dst = weft_node_arg(n, 1, &m);
    weft_device_str(weft_tensor_device(src), d2, sizeof d2);
    weft_device_str(weft_tensor_device(dst), d3, sizeof d3);
    /* The first later node that reads the copy is the one it was inserted for. */
    const weft_node *user = NULL;
    for (size_t i = weft_node_id(n) + 1; i < weft_graph_node_count(g) && user == NULL; i++) {
      weft_node *k = weft_graph_node(g, i);
      for (int a = 0; a < weft_node_nargs(k); a++) {
        weft_access am;
        if (weft_node_arg(k, a, &am) == dst && (am & WEFT_READ)) {
          user = k;
          break;
        }
      }
    }
    weft__strbuf_printf(b, "inserted by weft: ");
    if (user != NULL) {
      char desc[300];
      weft__strbuf_printf(b, "%s reads %s, which lives on %s; ",
                          weft_node_describe(user, desc, sizeof desc), weft_tensor_name(src), d2);
    }
    if (weft_tensor_device(src).rank != weft_tensor_device(dst).rank)
      weft__strbuf_printf(b, "the copy to %s is a message from rank %d to rank %d", d3, weft_tensor_device(src).rank,
                          weft_tensor_device(dst).rank);
    else
      weft__strbuf_printf(b, "the copy to %s runs on %s (%s)", d3, d1,
                          weft_tensor_device(src).kind != WEFT_DEVICE_CPU
                              ? "the side that owns the GPU data"
                              : "the GPU side issues host-to-device copies");
    return;
  }
  if (strcmp(weft_node_op_name(n), "copy") == 0) {
    weft_access m;
    weft_tensor *src = weft_node_arg(n, 0, &m), *dst = weft_node_arg(n, 1, &m);
    weft_device_str(weft_tensor_device(src), d2, sizeof d2);
    weft_device_str(weft_tensor_device(dst), d3, sizeof d3);
    if (weft_tensor_device(src).kind == WEFT_DEVICE_CPU &&
        weft_tensor_device(dst).kind == WEFT_DEVICE_CPU)
      weft__strbuf_printf(b, "a copy of %s to %s within host memory", weft_tensor_name(src),
                          weft_tensor_name(dst));
    else
      weft__strbuf_printf(b, "a copy of %s (%s) to %s (%s) runs on the GPU side of the transfer",
                          weft_tensor_name(src), d2, weft_tensor_name(dst), d3);
    return;
  }
  weft_tensor *res = result_of(n);
  if (res != NULL && weft_device_equal(weft_tensor_device(res), dev))
    weft__strbuf_printf(b, "an op runs where its result %s lives", weft_tensor_name(res));
  else
    weft__strbuf_printf(b, "runs on the device of its first argument");
}

int cli_cmd_explain(int argc, char **argv) {
  weft_runtime *rt = NULL;
  weft_program *prog = NULL;
  const char *file;
  int code = load_analysed(argc, argv, "explain", explain_help, NULL, NULL, NULL, &rt, &prog,
                           &file);
  if (code != CLI_EXIT_OK || prog == NULL) goto done; /* an error, or --help */
  weft_graph *g = weft_program_graph(prog);
  size_t nn = weft_graph_node_count(g), ne = weft_graph_edge_count(g), ninserted = 0;
  for (size_t i = 0; i < nn; i++) ninserted += (size_t)weft_node_is_inserted(weft_graph_node(g, i));
  weft__strbuf b;
  weft__strbuf_init(&b);
  weft__strbuf_printf(&b, "%s: %zu node%s, %zu edge%s, %zu inserted cop%s\n\n", file, nn,
                      nn == 1 ? "" : "s", ne, ne == 1 ? "" : "s", ninserted,
                      ninserted == 1 ? "y" : "ies");
  weft__strbuf_puts(&b, "nodes, in program order:\n");
  char dev[32];
  for (size_t i = 0; i < nn && !b.failed; i++) {
    weft_node *n = weft_graph_node(g, i);
    weft__strbuf_printf(&b, "  #%-4zu ", i);
    node_call(&b, n);
    if (weft_node_is_inserted(n)) weft__strbuf_puts(&b, "  [inserted]");
    const char *origin = weft_node_origin(n);
    if (origin != NULL && *origin) weft__strbuf_printf(&b, "  at %s", origin);
    weft_placement pl;
    int rc = weft_node_placement(g, n, &pl);
    weft__strbuf_printf(&b, "\n         device %s: ",
                        weft_device_str(weft_node_device(n), dev, sizeof dev));
    if (weft_node_device(n).kind == WEFT_DEVICE_AUTO && rc == WEFT_OK) /* the planner's choice */
      weft__strbuf_printf(&b, "placed on %s by the planner (the lane says why)", weft_device_str(pl.device, dev, sizeof dev));
    else
      device_reason(&b, g, n);
    if (rc == WEFT_OK)
      weft__strbuf_printf(&b, "\n         lane   %s: %s\n", pl.lane, pl.why);
    else
      weft__strbuf_printf(&b, "\n         lane   unknown: %s\n", weft_last_error());
  }
  weft__strbuf_puts(&b, "\nedges (the second node waits for the first):\n");
  if (ne == 0) weft__strbuf_puts(&b, "  none: every node is independent\n");
  for (size_t k = 0; k < ne && !b.failed; k++) {
    weft_edge e;
    if (weft_graph_edge(g, k, &e) != WEFT_OK) continue;
    size_t f = weft_node_id(e.from), t = weft_node_id(e.to);
    const char *tn = e.tensor != NULL ? weft_tensor_name(e.tensor) : "";
    weft__strbuf_printf(&b, "  #%zu -> #%zu  %-8s %-12s ", f, t, hazard_name(e.hazard), tn);
    switch (e.hazard) {
      case WEFT_HAZARD_RAW:
        weft__strbuf_printf(&b, "#%zu reads %s, which #%zu writes\n", t, tn, f);
        break;
      case WEFT_HAZARD_WAR:
        weft__strbuf_printf(&b, "#%zu overwrites %s, which #%zu reads first\n", t, tn, f);
        break;
      case WEFT_HAZARD_WAW:
        weft__strbuf_printf(&b, "#%zu writes %s after #%zu wrote it\n", t, tn, f);
        break;
      default:
        weft__strbuf_printf(&b, "added by the program (after)\n");
    }
  }
  code = emit(&b);
done:
  weft_program_destroy(prog);
  weft_runtime_destroy(rt);
  return code;
}

/* ---- dot -------------------------------------------------------------------------------- */

static const char dot_help[] =
    "Usage: weft dot [OPTIONS] FILE\n"
    "Print the graph of the .weft program FILE in Graphviz's DOT language: one box per node,\n"
    "grouped by device; RAW edges solid, WAR dashed, WAW dotted, explicit bold; inserted\n"
    "copies dashed. Example: weft dot f.weft | dot -Tsvg > f.svg\n"
    "\n"
    "Options:\n" CLI_PROG_HELP
    "\n"
    "Exit status: 0 success, 1 out of memory, 2 bad input or usage.\n";

/* Appends `s` escaped for a DOT double-quoted string. */
static void dot_str(weft__strbuf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      weft__strbuf_printf(b, "\\%c", *s);
    else if (*s == '\n')
      weft__strbuf_puts(b, "\\n");
    else
      weft__strbuf_put(b, s, 1);
  }
}

int cli_cmd_dot(int argc, char **argv) {
  weft_runtime *rt = NULL;
  weft_program *prog = NULL;
  const char *file;
  int code = load_analysed(argc, argv, "dot", dot_help, NULL, NULL, NULL, &rt, &prog, &file);
  if (code != CLI_EXIT_OK || prog == NULL) goto done; /* an error, or --help */
  weft_graph *g = weft_program_graph(prog);
  size_t nn = weft_graph_node_count(g), ne = weft_graph_edge_count(g);
  weft__strbuf b, label;
  weft__strbuf_init(&b);
  weft__strbuf_init(&label);
  weft__strbuf_puts(&b, "digraph \"");
  dot_str(&b, file);
  weft__strbuf_puts(&b, "\" {\n  node [shape=box, fontname=\"Helvetica\"];\n"
                        "  edge [fontname=\"Helvetica\", fontsize=10];\n");
  /* One cluster per device, in order of first appearance. */
  char dev[32], dev2[32];
  for (size_t i = 0; i < nn; i++) {
    weft_device d = weft_node_device(weft_graph_node(g, i));
    size_t first = i;
    for (size_t k = 0; k < i; k++)
      if (weft_device_equal(weft_node_device(weft_graph_node(g, k)), d)) {
        first = k;
        break;
      }
    if (first != i) continue;
    weft_device_str(d, dev, sizeof dev);
    weft__strbuf_printf(&b, "  subgraph \"cluster_%s\" {\n    label=\"%s\";\n", dev, dev);
    for (size_t k = i; k < nn; k++) {
      weft_node *n = weft_graph_node(g, k);
      if (!weft_device_equal(weft_node_device(n), d)) continue;
      weft__strbuf_truncate(&label, 0);
      weft__strbuf_printf(&label, "#%zu ", k);
      node_call(&label, n);
      const char *origin = weft_node_origin(n);
      if (origin != NULL && *origin) weft__strbuf_printf(&label, "\n%s", origin);
      if (weft_node_is_inserted(n))
        weft__strbuf_printf(&label, "\ninserted copy to %s",
                            weft_device_str(weft_tensor_device(result_of(n)), dev2, sizeof dev2));
      weft__strbuf_printf(&b, "    n%zu [label=\"", k);
      dot_str(&b, label.data != NULL ? label.data : "");
      weft__strbuf_printf(&b, "\"%s];\n", weft_node_is_inserted(n) ? ", style=dashed" : "");
    }
    weft__strbuf_puts(&b, "  }\n");
  }
  for (size_t k = 0; k < ne; k++) {
    weft_edge e;
    if (weft_graph_edge(g, k, &e) != WEFT_OK) continue;
    static const char *style[] = {"", "solid", "dashed", "dotted", "bold"};
    weft__strbuf_printf(&b, "  n%zu -> n%zu [label=\"%s", weft_node_id(e.from), weft_node_id(e.to),
                        hazard_name(e.hazard));
    if (e.tensor != NULL) {
      weft__strbuf_puts(&b, " ");
      dot_str(&b, weft_tensor_name(e.tensor));
    }
    weft__strbuf_printf(&b, "\", style=%s];\n", style[e.hazard >= 1 && e.hazard <= 4 ? e.hazard : 4]);
  }
  weft__strbuf_puts(&b, "}\n");
  b.failed |= label.failed;
  weft__strbuf_fini(&label);
  code = emit(&b);
done:
  weft_program_destroy(prog);
  weft_runtime_destroy(rt);
  return code;
}
