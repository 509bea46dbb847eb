/* job.c — one .weft program from source to report: load (parse and build), record each run,
 * then report as text or as one JSON document. `weft run` drives a job with blocking runs;
 * `weft serve` drives the same steps asynchronously (load and report on libuv's thread pool,
 * the runs through weft_uv_launch), so a submission answers exactly what `weft run --json`
 * prints.
 *
 * The JSON document (documented in docs/cli.md):
 *
 *   {"file": "f.weft", "status": "ok" | "failed" | "invalid", "exit_code": 0 | 1 | 2,
 *    "error": null | "message", "phase": null | "load" | "run" | "outputs",
 *    "diagnostics": [{"file": "f.weft", "line": 3, "col": 5, "severity": "error",
 *                     "message": "..."}],
 *    "failed_node": null | {"id": 3, "op": "mm", "origin": "f.weft:4:3"},
 *    "runs": [{"status": "OK", "wall_ms": 1.25}, ...],
 *    "outputs": null | {"name": value, ...}}
 *
 * Outputs are printed (and saved) only when every run succeeded. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

void cli_job_init(cli_job *j) {
  memset(j, 0, sizeof *j);
  weft_dsl_options_init(&j->dsl);
  j->repeat = 1;
  j->failed_node = -1;
  j->status = WEFT_OK;
}

void cli_job_fini(cli_job *j) {
  weft_program_destroy(j->prog);
  free(j->owned_text);
  free(j->error);
  free(j->wall_ms);
  free(j->run_status);
  free(j->stats_json);
  memset(j, 0, sizeof *j);
}

static void set_failure(cli_job *j, const char *phase, int status, const char *msg) {
  if (j->status != WEFT_OK) return; /* keep the first */
  j->phase = phase;
  j->status = status;
  free(j->error);
  j->error = strdup(msg != NULL && *msg ? msg : weft_strerror(status));
  j->exit_code = cli_exit_for_status(status);
  /* A failure while running is the run's failure (1), whatever the status is. */
  if (strcmp(phase, "load") != 0 && j->exit_code == CLI_EXIT_USAGE) j->exit_code = CLI_EXIT_FAILED;
}

void cli_job_fail(cli_job *j, const char *phase, int status, const char *msg) {
  set_failure(j, phase, status, msg);
}

int cli_job_load(cli_job *j, weft_runtime *rt) {
  int rc;
  if (j->path != NULL && strcmp(j->path, "-") == 0) {
    char err[512];
    if ((rc = cli_read_file("-", CLI_STDIN_MAX, &j->owned_text, &j->len, err, sizeof err)) !=
        WEFT_OK) {
      set_failure(j, "load", rc, err);
      return j->exit_code;
    }
    j->text = j->owned_text;
    j->path = NULL;
    if (j->name == NULL || strcmp(j->name, "-") == 0) j->name = "<stdin>";
  }
  if (j->path != NULL)
    rc = weft_program_load(rt, j->path, &j->dsl, &j->prog);
  else
    rc = weft_program_parse(rt, j->name, j->text, j->len, &j->dsl, &j->prog);
  if (rc != WEFT_OK) {
    j->prog = NULL;
    set_failure(j, "load", rc, weft_last_error());
    return j->exit_code;
  }
  int n = j->repeat > 0 ? j->repeat : 1;
  j->wall_ms = calloc((size_t)n, sizeof *j->wall_ms);
  j->run_status = calloc((size_t)n, sizeof *j->run_status);
  if (j->wall_ms == NULL || j->run_status == NULL) {
    set_failure(j, "load", WEFT_ENOMEM, "out of host memory for the run records");
    j->exit_code = CLI_EXIT_FAILED;
  }
  return j->exit_code;
}

int cli_job_record(cli_job *j, int status, weft_run *run, double wall_ms) {
  if (j->nruns < (j->repeat > 0 ? j->repeat : 1)) {
    j->wall_ms[j->nruns] = wall_ms;
    j->run_status[j->nruns] = status;
    j->nruns++;
  }
  if (status != WEFT_OK) {
    const char *msg = run != NULL ? weft_run_error(run) : weft_last_error();
    set_failure(j, "run", status, msg);
    weft_node *n = run != NULL ? weft_run_failed_node(run) : NULL;
    if (n != NULL) {
      j->failed_node = (long)weft_node_id(n);
      weft_node_describe(n, j->failed_desc, sizeof j->failed_desc);
    }
  }
  return j->exit_code;
}

/* ---- the report ------------------------------------------------------------------------ */

const char *cli_job_status_word(const cli_job *j) {
  if (j->exit_code == CLI_EXIT_OK) return "ok";
  return j->exit_code == CLI_EXIT_USAGE ? "invalid" : "failed";
}

/* Adds one {"file","line","col","message"} per line of the error that starts with
 * "<name>:<line>:<col>:" — the parser's diagnostics (the source line and caret under each are
 * left to the "error" text). */
static void json_diagnostics(weft__strbuf *b, const cli_job *j) {
  weft__strbuf_puts(b, "\"diagnostics\": [");
  const char *name = j->name != NULL ? j->name : "";
  size_t nl = strlen(name);
  int first = 1;
  for (const char *line = j->error; line != NULL && *line;) {
    const char *eol = strchr(line, '\n');
    size_t len = eol != NULL ? (size_t)(eol - line) : strlen(line);
    long ln, col;
    int used = 0;
    if (nl > 0 && len > nl && strncmp(line, name, nl) == 0 && line[nl] == ':' &&
        sscanf(line + nl, ":%ld:%ld:%n", &ln, &col, &used) == 2 && used > 0 &&
        nl + (size_t)used <= len) {
      const char *msg = line + nl + used;
      size_t mlen = len - nl - (size_t)used;
      while (mlen > 0 && *msg == ' ') msg++, mlen--;
      /* "error: ..." / "warning: ...": the severity becomes its own field. */
      const char *severity = "error";
      static const char *const sev[] = {"error", "warning", "note"};
      for (size_t k = 0; k < sizeof sev / sizeof sev[0]; k++) {
        size_t sl = strlen(sev[k]);
        if (mlen > sl + 1 && strncmp(msg, sev[k], sl) == 0 && msg[sl] == ':' &&
            msg[sl + 1] == ' ') {
          severity = sev[k];
          msg += sl + 2;
          mlen -= sl + 2;
          break;
        }
      }
      char *m = strndup(msg, mlen);
      weft__strbuf_printf(b, "%s{\"file\": ", first ? "" : ", ");
      weft__json_put_str(b, name);
      weft__strbuf_printf(b, ", \"line\": %ld, \"col\": %ld, \"severity\": \"%s\", \"message\": ",
                          ln, col, severity);
      weft__json_put_str(b, m != NULL ? m : "");
      weft__strbuf_puts(b, "}");
      free(m);
      first = 0;
    }
    line = eol != NULL ? eol + 1 : NULL;
  }
  weft__strbuf_puts(b, "]");
}

static void json_head(weft__strbuf *b, const cli_job *j) {
  weft__strbuf_puts(b, "{\"file\": ");
  weft__json_put_str(b, j->name);
  weft__strbuf_printf(b, ", \"status\": \"%s\", \"exit_code\": %d, \"error\": ", cli_job_status_word(j),
                      j->exit_code);
  weft__json_put_str(b, j->error);
  weft__strbuf_puts(b, ", \"phase\": ");
  weft__json_put_str(b, j->exit_code == CLI_EXIT_OK ? NULL : j->phase);
  weft__strbuf_puts(b, ", ");
  json_diagnostics(b, j);
  weft__strbuf_puts(b, ", \"failed_node\": ");
  if (j->failed_node >= 0 && j->prog != NULL) {
    weft_node *n = weft_graph_node(weft_program_graph(j->prog), (size_t)j->failed_node);
    weft__strbuf_printf(b, "{\"id\": %ld, \"op\": ", j->failed_node);
    weft__json_put_str(b, n != NULL ? weft_node_op_name(n) : NULL);
    weft__strbuf_puts(b, ", \"origin\": ");
    weft__json_put_str(b, n != NULL ? weft_node_origin(n) : NULL);
    weft__strbuf_puts(b, ", \"description\": ");
    weft__json_put_str(b, j->failed_desc);
    weft__strbuf_puts(b, "}");
  } else {
    weft__strbuf_puts(b, "null");
  }
  weft__strbuf_puts(b, ", \"runs\": [");
  for (int i = 0; i < j->nruns; i++)
    weft__strbuf_printf(b, "%s{\"status\": \"%s\", \"wall_ms\": %.3f}", i ? ", " : "",
                        weft_status_name(j->run_status[i]), j->wall_ms[i]);
  weft__strbuf_puts(b, "], \"stats\": ");
  weft__strbuf_puts(b, j->stats_json != NULL ? j->stats_json : "null");
  weft__strbuf_puts(b, ", \"outputs\": ");
}

void cli_refusal_json(weft__strbuf *b, const char *name, const char *status, int exit_code,
                      const char *error) {
  weft__strbuf_puts(b, "{\"file\": ");
  weft__json_put_str(b, name);
  weft__strbuf_puts(b, ", \"status\": ");
  weft__json_put_str(b, status);
  weft__strbuf_printf(b, ", \"exit_code\": %d, \"error\": ", exit_code);
  weft__json_put_str(b, error);
  weft__strbuf_puts(b, ", \"phase\": \"submit\", \"diagnostics\": [], \"failed_node\": null, "
                       "\"runs\": [], \"outputs\": null}\n");
}

/* Prints the error for a human: parse diagnostics as the parser wrote them, a run failure
 * with the file it came from. */
static void text_error(const cli_job *j, FILE *err) {
  if (err == NULL || j->error == NULL) return;
  if (strcmp(j->phase, "load") == 0 && j->status == WEFT_EPARSE) {
    fputs(j->error, err);
    if (j->error[0] && j->error[strlen(j->error) - 1] != '\n') fputc('\n', err);
  } else {
    /* Messages that already start with the file name (a file that cannot be read) keep it
     * once. */
    const char *name = j->name != NULL ? j->name : "-";
    size_t nl = strlen(name);
    int named = strncmp(j->error, name, nl) == 0 && j->error[nl] == ':';
    fprintf(err, "%s: %s%s%s%s\n", cli_progname, named ? "" : name, named ? "" : ": ",
            strcmp(j->phase, "run") == 0      ? "run failed: "
            : strcmp(j->phase, "outputs") == 0 ? "cannot write the outputs: "
                                               : "",
            j->error);
  }
}

int cli_job_report(cli_job *j, FILE *out, FILE *err) {
  int ok = j->exit_code == CLI_EXIT_OK && j->prog != NULL;
  if (ok && j->no_values) {
    /* A simulated run prices the graph without computing it: the outputs have no values. */
    fprintf(err, "%s: simulated run: outputs are not computed (WEFT_SIM_COMPUTE=1 computes them "
                 "on the CPU)\n", cli_progname);
    ok = 0;
  }
  if (!j->json) {
    if (ok) {
      int rc = weft_program_outputs(j->prog, out, 0);
      if (rc != WEFT_OK) set_failure(j, "outputs", rc, weft_last_error());
    }
    fflush(out);
    text_error(j, err);
    return j->exit_code;
  }
  /* JSON: the outputs are written straight into the document; if writing them fails midway
   * the document would be broken, so they go to a memory stream first. */
  char *outputs = NULL;
  size_t outputs_len = 0;
  if (ok) {
    FILE *mem = open_memstream(&outputs, &outputs_len);
    if (mem == NULL) {
      set_failure(j, "outputs", WEFT_ENOMEM, "out of host memory for the outputs");
    } else {
      int rc = weft_program_outputs(j->prog, mem, 1);
      if (fclose(mem) != 0 && rc == WEFT_OK) rc = WEFT_ENOMEM;
      if (rc != WEFT_OK) set_failure(j, "outputs", rc, weft_last_error());
    }
  }
  weft__strbuf b;
  weft__strbuf_init(&b);
  json_head(&b, j);
  if (j->exit_code == CLI_EXIT_OK && outputs != NULL && outputs_len > 0) {
    while (outputs_len > 0 && (outputs[outputs_len - 1] == '\n' || outputs[outputs_len - 1] == ' '))
      outputs_len--;
    weft__strbuf_put(&b, outputs, outputs_len);
  } else {
    weft__strbuf_puts(&b, "null");
  }
  weft__strbuf_puts(&b, "}\n");
  free(outputs);
  if (b.failed) {
    weft__strbuf_fini(&b);
    set_failure(j, "outputs", WEFT_ENOMEM, "out of host memory for the report");
    fputs("{\"status\": \"failed\", \"exit_code\": 1, "
          "\"error\": \"out of host memory for the report\"}\n",
          out);
  } else {
    fwrite(b.data, 1, b.len, out);
    weft__strbuf_fini(&b);
  }
  fflush(out);
  text_error(j, err);
  return j->exit_code;
}
