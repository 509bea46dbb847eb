/* cli.h — what the files of the `weft` command share: exit codes, the subcommands, option
 * helpers, and the "job" that loads, runs and reports one .weft program (used by `weft run`
 * and, a step at a time, by `weft serve`). Text is built in libweft's string buffer and JSON
 * strings are written by its JSON writer (util/strbuf.h, util/json.h): utilities with no view
 * of graphs or runs, the only internal headers the command uses besides the public API.
 *
 * Exit codes, everywhere: 0 success, 1 the run failed (a node failed, the run was cancelled,
 * out of memory, a server could not be reached or was busy), 2 bad input or usage (an unknown
 * flag, a missing file, a parse error, a device that does not exist). */
#ifndef WEFT_CLI_H
#define WEFT_CLI_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "util/json.h"
#include "util/strbuf.h"
#include "weft/dsl.h"
#include "weft/weft.h"

enum { CLI_EXIT_OK = 0, CLI_EXIT_FAILED = 1, CLI_EXIT_USAGE = 2 };

/* ---- subcommands (one file per family) -------------------------------------------------- */

int cli_cmd_run(int argc, char **argv);     /* cmd_run.c */
int cli_cmd_check(int argc, char **argv);   /* cmd_inspect.c */
int cli_cmd_explain(int argc, char **argv); /* cmd_inspect.c */
int cli_cmd_dot(int argc, char **argv);     /* cmd_inspect.c */
int cli_cmd_fmt(int argc, char **argv);     /* cmd_fmt.c */
int cli_cmd_devices(int argc, char **argv); /* cmd_devices.c */
int cli_cmd_serve(int argc, char **argv);   /* cmd_serve.c */
int cli_cmd_submit(int argc, char **argv);  /* cmd_submit.c */
int cli_cmd_calibrate(int argc, char **argv);  /* cmd_calibrate.c */

/* ---- messages and options (common.c) ---------------------------------------------------- */

/* The program name for messages ("weft"). */
extern const char *cli_progname;

/* Prints "weft: <message>" to stderr; returns CLI_EXIT_USAGE, for `return cli_usage_error(..)`. */
int cli_usage_error(const char *sub, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prints "weft: <message>" to stderr (no hint); returns `code`. */
int cli_error(int code, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Reports the option getopt_long just rejected (it returned `c`, '?' or ':'; the option
 * string must start with ':' and opterr be 0) and returns CLI_EXIT_USAGE. */
int cli_bad_option(const char *sub, int c, char **argv);

/* Parses a decimal integer in [lo, hi] from `text` (the value of `flag`). Returns 0, or
 * prints a usage error and returns -1. */
int cli_parse_int(const char *sub, const char *flag, const char *text, long lo, long hi,
                  long *out);
/* A size in bytes: a number with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g.
 * 2GiB. 0, or -1 after a usage error that names `flag`. */
int cli_parse_size(const char *sub, const char *flag, const char *text, size_t *out);

/* The exit code for a weft status: 0 for WEFT_OK; 1 for what goes wrong while running (kernel,
 * cancellation, memory, CUDA); 2 for bad input (parse, shape, device, cycle, file). */
int cli_exit_for_status(int status);

/* -D NAME=VALUE collected from the command line (pointers into argv). */
typedef struct cli_defines {
  const char **v;
  int n, cap;
} cli_defines;

/* Appends a -D value after checking that it looks like NAME=VALUE. Returns 0, or prints a
 * usage error and returns -1. */
int cli_defines_add(cli_defines *d, const char *sub, const char *text);
void cli_defines_fini(cli_defines *d);

/* The options every program-reading command takes: -D NAME=VALUE, --device DEV,
 * --workers N, --simulate PROFILE, -h/--help. A command lists CLI_PROG_LONGOPTS in its option
 * table and "D:h" in its short options, and passes what getopt_long returns to
 * cli_prog_option first (cli_parse_prog_args does all of this). */
enum {
  CLI_OPT_DEVICE = 256,
  CLI_OPT_WORKERS,
  CLI_OPT_SIMULATE,
  CLI_OPT_POLICY,
  CLI_OPT_PROFILE,
  CLI_OPT_MEMLIMIT,
  CLI_OPT_RANKS,
  CLI_OPT_RANKS_PER_HOST,
  CLI_OPT_LOCAL = 300
};
#define CLI_PROG_LONGOPTS                                                                   \
  {"define", required_argument, NULL, 'D'}, {"device", required_argument, NULL, CLI_OPT_DEVICE}, \
      {"workers", required_argument, NULL, CLI_OPT_WORKERS},                                  \
      {"simulate", required_argument, NULL, CLI_OPT_SIMULATE},                                \
      {"policy", required_argument, NULL, CLI_OPT_POLICY},                                    \
      {"profile", required_argument, NULL, CLI_OPT_PROFILE},                                  \
      {"device-memory-limit", required_argument, NULL, CLI_OPT_MEMLIMIT},                     \
      {"ranks", required_argument, NULL, CLI_OPT_RANKS},                                      \
      {"ranks-per-host", required_argument, NULL, CLI_OPT_RANKS_PER_HOST}, {"help", no_argument, NULL, 'h'}
#define CLI_PROG_HELP                                                                     \
  "  -D, --define NAME=VALUE  override parameter NAME (repeatable)\n"                        \
  "      --device DEV         resolve every device declaration to DEV (cpu, cuda:N)\n"       \
  "      --workers N          CPU worker threads (default: one per core)\n"                  \
  "      --simulate PROFILE   run on the virtual devices of a machine profile (h100, h200x8,\n"\
  "                           or a JSON file) instead of this machine's\n"                  \
  "      --policy NAME        the planner's policy: fixed (the program's order, default) or\n"\
  "                           heft (list scheduling: the critical path first)\n"             \
  "      --profile PROFILE    the machine profile that prices auto placement (weft calibrate's\n"\
  "                           JSON file or a shipped name; default: h100)\n"                 \
  "      --device-memory-limit SIZE  the bytes of each GPU auto placement may fill (2GiB)\n" \
  "      --ranks N            with --simulate: a job of N ranks, every one simulated here, as\n"\
  "                           mpirun -np N would run it (docs/simulator.md)\n"              \
  "      --ranks-per-host H   with --ranks: H ranks share each simulated host (default: all)\n"\
  "  -h, --help               show this help and exit\n"

typedef struct cli_prog_opts {
  cli_defines defines;
  const char *device;
  long workers;
  const char *simulate; /* --simulate, or NULL */
  const char *policy;   /* --policy, or NULL */
  const char *profile;  /* --profile, or NULL */
  size_t memlimit;      /* --device-memory-limit, or 0 */
  long ranks;           /* --ranks (a simulated job), or 0 */
  long ranks_per_host;  /* --ranks-per-host, or 0 */
  int help;             /* -h was given */
} cli_prog_opts;

/* Handles option `c` if it is one of the program options: returns 1 if it was (0 if not), or
 * -1 after printing a usage error. `optarg` is getopt's. */
int cli_prog_option(cli_prog_opts *o, const char *sub, int c, const char *arg);
/* Fills a weft_dsl_options from the program options. */
void cli_prog_dsl(const cli_prog_opts *o, weft_dsl_options *dsl);
void cli_prog_opts_fini(cli_prog_opts *o);

/* Parses argv of a command that takes the program options, `extra` long options (may be NULL)
 * and exactly one FILE: handles -h (prints `help`, *exit = 0), usage errors (*exit = 2), and
 * hands other options to `local` (returns 0, or -1 after a usage error). Returns the FILE, or
 * NULL with *exit set. */
const char *cli_parse_prog_args(int argc, char **argv, const char *sub, const char *help,
                                const struct option *extra,
                                int (*local)(int c, const char *arg, void *ctx), void *ctx,
                                cli_prog_opts *o, int *exit_code);

/* Creates the runtime the command uses: quiet, `workers` CPU workers (0: one per core), the
 * real devices or, with `simulate` (may be NULL), a simulated machine. Returns 0, or prints
 * the reason and returns the exit code (2 for a bad profile, 1 otherwise). */
int cli_runtime(int workers, const char *simulate, const char *policy, const char *profile, size_t memlimit,
                weft_runtime **out);
/* The same from the program options, with `workers` CPU workers (0: one per core) and the
 * simulated job's ranks (--ranks, --ranks-per-host). */
int cli_prog_runtime(const cli_prog_opts *po, int workers, weft_runtime **out);

/* The most a program read from standard input may hold. */
#define CLI_STDIN_MAX ((size_t)256 << 20)

/* Reads a whole file (or standard input for "-") into a malloc'd buffer, refusing more than
 * `max_bytes`. Returns WEFT_OK, or WEFT_EIO / WEFT_ENOENT / WEFT_ELIMIT / WEFT_ENOMEM with the
 * reason written into err. */
int cli_read_file(const char *path, size_t max_bytes, char **out, size_t *len, char *err,
                  size_t err_size);
/* Reads the bearer token of `weft serve` / `weft submit` from `path`: its first line, without
 * surrounding spaces, at least 16 characters, from a file only its owner may read. Returns it
 * (malloc'd), or NULL after printing why (a usage error of `sub`). */
char *cli_read_token(const char *path, const char *sub);

/* Loads `path` as a program ("-" reads standard input) with `opts`; on failure prints the
 * diagnostics to stderr and returns the exit code (2 for bad input), else 0. */
int cli_load_program(weft_runtime *rt, const char *path, const weft_dsl_options *opts,
                     weft_program **out);

/* ---- jobs (job.c) ------------------------------------------------------------------------ */

/* One program to load, run `repeat` times and report. Fill the inputs, then:
 *   cli_job_load        parse and build (any thread);
 *   cli_job_record      after each run, with its status, run and wall time;
 *   cli_job_report      write the results: text (outputs to `out`, errors to `err`) or one
 *                       JSON document to `out` (errors to `err` as well);
 *   cli_job_fini        free everything.
 * The exit code is in `exit_code` after each step. */
typedef struct cli_job {
  /* Inputs. */
  const char *name;   /* the file name used in messages */
  const char *path;   /* where to read it ("-": standard input), or NULL when `text` is given */
  const char *text;   /* the source, when path is NULL */
  size_t len;
  weft_dsl_options dsl;
  int repeat;         /* >= 1 */
  int json;
  /* State. */
  char *owned_text;   /* standard input's contents, for path "-" */
  weft_program *prog;
  int exit_code;
  int status;         /* the weft status of the first failure, or WEFT_OK */
  const char *phase;  /* "load", "run" or "outputs": where it failed */
  char *error;        /* the failure's message (malloc'd), or NULL */
  int nruns;          /* runs recorded */
  double *wall_ms;    /* per run */
  int *run_status;
  long failed_node;   /* -1: none */
  char failed_desc[300];
  char *stats_json;   /* the last run's statistics (weft/report.h's JSON object), or NULL */
  /* The runtime simulates without computing (weft/sim.h): there are no values to print, the
   * run's statistics are the result. */
  int no_values;
} cli_job;

void cli_job_init(cli_job *j);
/* Parses and builds the program. Returns the exit code (0, or 2 / 1 on failure). */
int cli_job_load(cli_job *j, weft_runtime *rt);
/* Records one finished run (`run` may be NULL when the launch itself failed: `status` then
 * carries the launch error and weft_last_error() its message). Returns the exit code. */
int cli_job_record(cli_job *j, int status, weft_run *run, double wall_ms);
/* Records a failure that is not a run's own (phase "load", "run" or "outputs"): a run that
 * was never launched because the job was cancelled, for instance. The first failure stays. */
void cli_job_fail(cli_job *j, const char *phase, int status, const char *msg);
/* Writes the report. `err` may be NULL (errors then go only into the JSON). Performs the
 * program's outputs (print and save) when every run succeeded. Returns the exit code. */
int cli_job_report(cli_job *j, FILE *out, FILE *err);
void cli_job_fini(cli_job *j);
/* The devices of rt as `weft devices` prints them (json: its JSON array), appended to b.
 * Returns CLI_EXIT_OK, or the exit code of a device that could not be described. */
int cli_devices_write(weft_runtime *rt, int json, weft__strbuf *b);
/* "ok", "failed" or "invalid", from the exit code. */
const char *cli_job_status_word(const cli_job *j);
/* Appends the JSON document of a submission refused before it ran (busy, too large,
 * malformed): the job document's keys, with `status`, `exit_code` and `error` set. */
void cli_refusal_json(weft__strbuf *b, const char *name, const char *status, int exit_code,
                      const char *error);

#endif
