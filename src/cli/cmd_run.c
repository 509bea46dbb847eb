/* cmd_run.c — `weft run FILE`: load a program, run its graph --repeat times on one runtime
 * (tensor contents persist between runs, as the API promises), then print its outputs, or
 * one JSON document with --json. Runs are blocking here: the process has nothing else to do.
 *
 * What the last run did (weft/report.h): a short summary on standard error when it is a
 * terminal (or with --stats; scripts that read standard error see nothing new), the
 * statistics under "stats" with --json, a Chrome trace with --trace and an SVG timeline with
 * --timeline; a progress bar on standard error while runs are long, when it is a terminal.
 * --quiet drops the summary and the bar. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "weft/report.h"
#include "weft/sim.h"

static const char run_help[] =
    "Usage: weft run [OPTIONS] FILE\n"
    "Run the .weft program FILE (\"-\" reads standard input) and print its outputs.\n"
    "\n"
    "Options:\n" CLI_PROG_HELP
    "      --repeat N           run the graph N times (default 1); outputs after the last\n"
    "      --json               print one JSON document: status, per-run wall time, outputs\n"
    "      --time               print each run's wall time on standard error\n"
    "      --trace FILE         write the last run's Chrome trace (open it in Perfetto)\n"
    "      --timeline FILE      write the last run's timeline as an SVG picture\n"
    "      --stats              print a summary of the last run on standard error (the\n"
    "                           default when it is a terminal), with its setup before the\n"
    "                           first node; with --repeat, the first run's setup too\n"
    "      --quiet              no summary and no progress bar on standard error\n"
    "\n"
    "Exit status: 0 success, 1 the run failed, 2 bad input or usage.\n";

enum { OPT_REPEAT = CLI_OPT_LOCAL, OPT_JSON, OPT_TIME, OPT_TRACE, OPT_TIMELINE, OPT_QUIET, OPT_STATS };

typedef struct run_flags {
  long repeat;
  int json, time, quiet, stats; /* stats 2: the summary goes to stdout (simulated runs) */
  const char *trace, *timeline;
} run_flags;

static int run_option(int c, const char *arg, void *ctx) {
  run_flags *f = ctx;
  switch (c) {
    case OPT_REPEAT: return cli_parse_int("run", "--repeat", arg, 1, 100000000, &f->repeat);
    case OPT_JSON: f->json = 1; return 0;
    case OPT_TIME: f->time = 1; return 0;
    case OPT_TRACE: f->trace = arg; return 0;
    case OPT_TIMELINE: f->timeline = arg; return 0;
    case OPT_QUIET: f->quiet = 1; return 0;
    case OPT_STATS: f->stats = 1; return 0;
    default: return -1;
  }
}

/* The first of several runs: its setup (the runtime's creation, the tensors' materialisation)
 * is what the later ones do not pay; with the summary asked for, one line says it. */
static void report_first_run(const run_flags *f, weft_run *r) {
  weft_run_stats *st;
  if (f->json || f->quiet || !(f->stats || isatty(fileno(stderr))) || weft_run_stats_create(r, &st) != WEFT_OK) return;
  weft_stats_summary s;
  weft_run_stats_summary(st, &s);
  fprintf(f->stats == 2 ? stdout : stderr,
          "first run: setup %.3f ms before its first node (runtime creation %.3f ms; %zu tensors materialised, "
          "%llu bytes, in %.3f ms)\n",
          s.setup_s * 1e3, s.setup_runtime_s * 1e3, s.setup_tensors, (unsigned long long)s.setup_bytes,
          s.setup_tensors_s * 1e3);
  weft_run_stats_destroy(st);
}

/* Reports the run `r` (the last one): the trace and timeline files, the statistics into the
 * JSON document or the summary on standard error. Returns 0, or 1 when a file could not be
 * written (the message printed). With timing off there is nothing to report. */
static int report_run(const run_flags *f, cli_job *j, weft_run *r) {
  weft_run_stats *st;
  if (weft_run_stats_create(r, &st) != WEFT_OK) {
    if (f->trace == NULL && f->timeline == NULL) return 0;
    return cli_error(CLI_EXIT_FAILED, "no trace or timeline: %s", weft_last_error());
  }
  int code = 0;
  /* Across ranks, one trace of every rank's lanes and rank 0's timeline (every rank takes
   * part); in one process, the run's own. */
  if (f->trace != NULL && weft_run_stats_save_all(st, WEFT_REPORT_TRACE, f->trace) != WEFT_OK)
    code = cli_error(CLI_EXIT_FAILED, "--trace: %s", weft_last_error());
  if (f->timeline != NULL && weft_run_stats_save_all(st, WEFT_REPORT_SVG, f->timeline) != WEFT_OK)
    code = cli_error(CLI_EXIT_FAILED, "--timeline: %s", weft_last_error());
  if (f->json) {
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    int rc = mem != NULL ? weft_run_stats_write(st, WEFT_REPORT_JSON, mem) : WEFT_ENOMEM;
    if (mem != NULL && fclose(mem) != 0) rc = WEFT_ENOMEM;
    if (rc == WEFT_OK) {
      while (len > 0 && text[len - 1] == '\n') text[--len] = '\0';
      free(j->stats_json);
      j->stats_json = text;
    } else {
      free(text);
    }
  } else if (!f->quiet && (f->stats || isatty(fileno(stderr)))) {
    if (weft_run_stats_print(st, f->stats == 2 ? stdout : stderr) != WEFT_OK) code = CLI_EXIT_FAILED;
  }
  weft_run_stats_destroy(st);
  return code;
}

int cli_cmd_run(int argc, char **argv) {
  static const struct option extra[] = {{"repeat", required_argument, NULL, OPT_REPEAT},
                                        {"json", no_argument, NULL, OPT_JSON},
                                        {"time", no_argument, NULL, OPT_TIME},
                                        {"trace", required_argument, NULL, OPT_TRACE},
                                        {"timeline", required_argument, NULL, OPT_TIMELINE},
                                        {"quiet", no_argument, NULL, OPT_QUIET},
                                        {"stats", no_argument, NULL, OPT_STATS},
                                        {NULL, 0, NULL, 0}};
  cli_prog_opts po = {0};
  run_flags f = {.repeat = 1};
  weft_runtime *rt = NULL;
  int code, report_code = 0;
  cli_job j;
  cli_job_init(&j);
  const char *file = cli_parse_prog_args(argc, argv, "run", run_help, extra, run_option, &f, &po,
                                         &code);
  if (file == NULL) goto done;
  if ((code = cli_prog_runtime(&po, (int)po.workers, &rt)) != 0) goto done;
  j.name = file;
  j.path = file;
  cli_prog_dsl(&po, &j.dsl);
  j.repeat = (int)f.repeat;
  j.json = f.json;
  if (weft_runtime_rank(rt) != 0) f.quiet = 1; /* rank 0 reports a run across ranks */
  /* Without values, a simulated run's result is its statistics: print them on stdout. */
  j.no_values = weft_sim_active(rt) && !weft_sim_computes(rt);
  if (j.no_values && !f.json && !f.quiet) f.stats = 2;
  if (cli_job_load(&j, rt) == CLI_EXIT_OK) {
    weft_graph *g = weft_program_graph(j.prog);
    for (long i = 0; i < f.repeat; i++) {
      weft_run *r = NULL;
      uint64_t t0 = weft_clock_ns();
      int st = weft_graph_launch(g, &r);
      if (st == WEFT_OK)
        st = weft_run_wait_progress(r, f.quiet || f.json ? NULL : stderr, (int)i, (int)f.repeat);
      double ms = (double)(weft_clock_ns() - t0) * 1e-6;
      cli_job_record(&j, st, r, ms);
      if (r != NULL && st == WEFT_OK && i == 0 && f.repeat > 1) report_first_run(&f, r);
      if (r != NULL && (st != WEFT_OK || i + 1 == f.repeat)) report_code = report_run(&f, &j, r);
      weft_run_destroy(r);
      if (f.time)
        fprintf(stderr, "%s: run %ld: %.3f ms%s\n", cli_progname, i + 1, ms,
                st == WEFT_OK ? "" : " (failed)");
      if (st != WEFT_OK) break;
    }
  }
  /* Across ranks (mpirun): rank 0 prints the outputs and the report; the others take part in
   * gathering the outputs, and say only their own errors: a run's error is every rank's (the
   * ranks agree on it), so rank 0 says it once. */
  FILE *out = stdout, *err = stderr, *sink = NULL;
  if (rt != NULL && weft_runtime_rank(rt) != 0 && (sink = fopen("/dev/null", "w")) != NULL) {
    out = sink;
    if (j.phase != NULL && strcmp(j.phase, "run") == 0) err = sink;
  }
  code = cli_job_report(&j, out, err);
  if (sink != NULL) fclose(sink);
  if (code == CLI_EXIT_OK) code = report_code;
done:
  cli_job_fini(&j);
  weft_runtime_destroy(rt);
  cli_prog_opts_fini(&po);
  return code;
}
