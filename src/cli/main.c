/* main.c — the `weft` command: finds the subcommand and hands it the rest of the command
 * line (argv[0] becomes "weft SUB", so getopt's state starts fresh for it). Global flags are
 * only --help and --version; everything else belongs to a subcommand. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct subcommand {
  const char *name;
  int (*fn)(int argc, char **argv);
  const char *summary;
} subcommand;

static const subcommand subcommands[] = {
    {"run", cli_cmd_run, "run a .weft program and print its outputs"},
    {"check", cli_cmd_check, "parse and analyse a program without running it"},
    {"explain", cli_cmd_explain, "show every edge and its hazard, inserted copies, placement"},
    {"dot", cli_cmd_dot, "print the graph for Graphviz"},
    {"fmt", cli_cmd_fmt, "print a program in canonical form"},
    {"devices", cli_cmd_devices, "list the devices weft sees"},
    {"serve", cli_cmd_serve, "keep a runtime warm and run programs submitted over a socket"},
    {"submit", cli_cmd_submit, "send a program to 'weft serve' and print its results"},
    {"calibrate", cli_cmd_calibrate, "measure a machine profile for --simulate"},
};
#define NSUB (sizeof subcommands / sizeof subcommands[0])

static void usage(FILE *f) {
  fprintf(f,
          "Usage: weft COMMAND [OPTIONS] [ARGS]\n"
          "       weft --help | --version\n"
          "Run dataflow graphs of ops and copies, written as .weft programs, on CPU threads and\n"
          "CUDA GPUs with automatic parallelism.\n"
          "\n"
          "Commands:\n");
  for (size_t i = 0; i < NSUB; i++)
    fprintf(f, "  %-9s %s\n", subcommands[i].name, subcommands[i].summary);
  fprintf(f,
          "\n"
          "'weft COMMAND --help' (or 'weft help COMMAND') describes a command.\n"
          "Exit status: 0 success, 1 the run failed, 2 bad input or usage.\n");
}

static const subcommand *find(const char *name) {
  for (size_t i = 0; i < NSUB; i++)
    if (strcmp(subcommands[i].name, name) == 0) return &subcommands[i];
  return NULL;
}

static int dispatch(const subcommand *s, int argc, char **argv) {
  char name[64];
  snprintf(name, sizeof name, "%s %s", cli_progname, s->name);
  argv[0] = name;
  optind = 0; /* glibc: a full re-initialisation of getopt for the subcommand */
  opterr = 0;
  return s->fn(argc, argv);
}

int main(int argc, char **argv) {
  setvbuf(stderr, NULL, _IOLBF, 0);
  if (argc < 2) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
    printf("weft %d.%d.%d\n", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH);
    return CLI_EXIT_OK;
  }
  if (strcmp(cmd, "help") == 0) {
    if (argc == 2) {
      usage(stdout);
      return CLI_EXIT_OK;
    }
    const subcommand *s = find(argv[2]);
    if (s == NULL) return cli_usage_error(NULL, "unknown command '%s'", argv[2]);
    char help[] = "--help";
    char *hargv[] = {argv[2], help, NULL};
    return dispatch(s, 2, hargv);
  }
  if (cmd[0] == '-') return cli_usage_error(NULL, "unknown option '%s'", cmd);
  const subcommand *s = find(cmd);
  if (s == NULL) return cli_usage_error(NULL, "unknown command '%s'", cmd);
  return dispatch(s, argc - 1, argv + 1);
}
