/* cmd_run.c — `weft run FILE`: load a program, run its graph --repeat times on one runtime
 * (tensor contents persist between runs, as the API promises), then print its outputs, or
 * one JSON document with --json. Runs are blocking here: the process has nothing else to do. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const char run_help[] =
    "Usage: weft run [OPTIONS] FILE\n"
    "Run the .weft program FILE (\"-\" reads standard input) and print its outputs.\n"
    "\n"
    "Options:\n" CLI_PROG_HELP
    "      --repeat N           run the graph N times (default 1); outputs after the last\n"
    "      --json               print one JSON document: status, per-run wall time, outputs\n"
    "      --time               print each run's wall time on standard error\n"
    "\n"
    "Exit status: 0 success, 1 the run failed, 2 bad input or usage.\n";

enum { OPT_REPEAT = CLI_OPT_LOCAL, OPT_JSON, OPT_TIME };

typedef struct run_flags {
  long repeat;
  int json, time;
} run_flags;

static int run_option(int c, const char *arg, void *ctx) {
  run_flags *f = ctx;
  switch (c) {
    case OPT_REPEAT: return cli_parse_int("run", "--repeat", arg, 1, 100000000, &f->repeat);
    case OPT_JSON: f->json = 1; return 0;
    case OPT_TIME: f->time = 1; return 0;
    default: return -1;
  }
}

int cli_cmd_run(int argc, char **argv) {
  static const struct option extra[] = {{"repeat", required_argument, NULL, OPT_REPEAT},
                                        {"json", no_argument, NULL, OPT_JSON},
                                        {"time", no_argument, NULL, OPT_TIME},
                                        {NULL, 0, NULL, 0}};
  cli_prog_opts po = {0};
  run_flags f = {.repeat = 1};
  weft_runtime *rt = NULL;
  int code;
  cli_job j;
  cli_job_init(&j);
  const char *file = cli_parse_prog_args(argc, argv, "run", run_help, extra, run_option, &f, &po,
                                         &code);
  if (file == NULL) goto done;
  if ((rt = cli_runtime((int)po.workers)) == NULL) {
    code = CLI_EXIT_FAILED;
    goto done;
  }
  j.name = file;
  j.path = file;
  cli_prog_dsl(&po, &j.dsl);
  j.repeat = (int)f.repeat;
  j.json = f.json;
  if (cli_job_load(&j, rt) == CLI_EXIT_OK) {
    weft_graph *g = weft_program_graph(j.prog);
    for (long i = 0; i < f.repeat; i++) {
      weft_run *r = NULL;
      double t0 = cli_now();
      int st = weft_graph_launch(g, &r);
      if (st == WEFT_OK) st = weft_run_wait(r);
      double ms = (cli_now() - t0) * 1e3;
      cli_job_record(&j, st, r, ms);
      weft_run_destroy(r);
      if (f.time)
        fprintf(stderr, "%s: run %ld: %.3f ms%s\n", cli_progname, i + 1, ms,
                st == WEFT_OK ? "" : " (failed)");
      if (st != WEFT_OK) break;
    }
  }
  code = cli_job_report(&j, stdout, stderr);
done:
  cli_job_fini(&j);
  weft_runtime_destroy(rt);
  cli_prog_opts_fini(&po);
  return code;
}
