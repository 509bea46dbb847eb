/* cmd_calibrate.c — `weft calibrate -o FILE`: measure a machine profile for the simulator
 * (the calibration tool's weft_calibrate, src/tools/calibrate) on this machine's devices, or on
 * a simulated machine (which checks the calibration itself without a GPU), and write it as
 * JSON. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "tools/calibrate/calibrate.h"

static const char calibrate_help[] =
    "Usage: weft calibrate [OPTIONS] -o FILE\n"
    "Measure a machine profile for 'weft run --simulate' on this machine and write it to FILE:\n"
    "GEMM rates over sizes, copy bandwidths, launch and event costs, CPU rates.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE        where to write the profile (JSON)\n"
    "      --name NAME          the profile's name (default \"calibrated\")\n"
    "      --quick              fewer sizes and repetitions: a rough profile in seconds\n"
    "      --workers N          CPU worker threads (default: one per core)\n"
    "      --simulate PROFILE   calibrate a simulated machine instead (checks the method)\n"
    "  -q, --quiet              no progress on standard error\n"
    "  -h, --help               this text\n"
    "\n"
    "Exit status: 0 success, 1 a measurement failed, 2 bad usage.\n";

int cli_cmd_calibrate(int argc, char **argv) {
  enum { OPT_NAME = 256, OPT_QUICK, OPT_WORKERS, OPT_SIMULATE };
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"name", required_argument, NULL, OPT_NAME},
                                       {"quick", no_argument, NULL, OPT_QUICK},
                                       {"workers", required_argument, NULL, OPT_WORKERS},
                                       {"simulate", required_argument, NULL, OPT_SIMULATE},
                                       {"quiet", no_argument, NULL, 'q'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *out = NULL, *simulate = NULL;
  long workers = 0;
  int quiet = 0, c;
  weft_calibrate_options co;
  weft_calibrate_options_init(&co);
  while ((c = getopt_long(argc, argv, ":o:qh", opts, NULL)) != -1) {
    switch (c) {
      case 'o': out = optarg; break;
      case OPT_NAME: co.name = optarg; break;
      case OPT_QUICK: co.quick = 1; break;
      case OPT_WORKERS:
        if (cli_parse_int("calibrate", "--workers", optarg, 0, 4096, &workers) != 0) return CLI_EXIT_USAGE;
        break;
      case OPT_SIMULATE: simulate = optarg; break;
      case 'q': quiet = 1; break;
      case 'h': fputs(calibrate_help, stdout); return CLI_EXIT_OK;
      default: return cli_bad_option("calibrate", c, argv);
    }
  }
  if (optind < argc) return cli_usage_error("calibrate", "unexpected argument '%s'", argv[optind]);
  if (out == NULL) return cli_usage_error("calibrate", "missing -o FILE: where to write the profile");
  /* A profile takes up to a minute to measure: say at once when it could not be written. */
  char *dir = strdup(out);
  if (dir == NULL) return cli_error(CLI_EXIT_FAILED, "out of memory");
  int writable = access(dirname(dir), W_OK) == 0;
  free(dir);
  if (!writable)
    return cli_error(CLI_EXIT_USAGE, "calibrate: cannot write the profile %s: %s", out, strerror(errno));
  weft_runtime *rt = NULL;
  int code = cli_runtime((int)workers, simulate, NULL, NULL, 0, &rt);
  if (code != CLI_EXIT_OK) return code;
  co.log = quiet ? NULL : stderr;
  int rc = weft_calibrate(rt, &co, out);
  if (rc != WEFT_OK)
    code = cli_error(rc == WEFT_EINVAL || rc == WEFT_ENOENT ? CLI_EXIT_USAGE : CLI_EXIT_FAILED, "%s%s",
                     strncmp(weft_calibrate_last_error(), "calibrate: ", 11) == 0 ? "" : "calibrate: ",
                     weft_calibrate_last_error());
  else if (!quiet)
    fprintf(stderr, "%s: calibrate: wrote %s\n", cli_progname, out);
  weft_runtime_destroy(rt);
  return code;
}
