/* cmd_fmt.c — `weft fmt FILE`: the program's canonical text (weft_program_format) on standard
 * output; --check only says whether the file is already canonical (exit 1 if not), --write
 * replaces the file with its canonical form (through a temporary file and rename, so the
 * file is never left half-written). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

static const char fmt_help[] =
    "Usage: weft fmt [OPTIONS] FILE\n"
    "Print the .weft program FILE (\"-\" reads standard input) in canonical form.\n"
    "\n"
    "Options:\n" CLI_PROG_HELP
    "      --check              print nothing; exit 1 if FILE is not in canonical form\n"
    "      --write              rewrite FILE in canonical form (not with \"-\")\n"
    "\n"
    "Exit status: 0 success (and, with --check, already canonical), 1 not canonical or the\n"
    "file could not be written, 2 bad input or usage.\n";

enum { OPT_CHECK = CLI_OPT_LOCAL, OPT_WRITE };

static int fmt_option(int c, const char *arg, void *ctx) {
  (void)arg;
  int *mode = ctx;
  if (c != OPT_CHECK && c != OPT_WRITE) return -1;
  if (*mode != 0 && *mode != c) {
    cli_usage_error("fmt", "--check and --write exclude each other");
    return -1;
  }
  *mode = c;
  return 0;
}

static int write_atomically(const char *path, const char *text, size_t len) {
  size_t n = strlen(path);
  char *tmp = malloc(n + 16);
  if (tmp == NULL) return cli_error(CLI_EXIT_FAILED, "%s: out of memory", path);
  snprintf(tmp, n + 16, "%s.fmt-XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    int code = cli_error(CLI_EXIT_FAILED, "%s: cannot create a temporary file beside it", path);
    free(tmp);
    return code;
  }
  struct stat st;
  if (stat(path, &st) == 0) fchmod(fd, st.st_mode & 07777); /* keep the file's permissions */
  FILE *f = fdopen(fd, "wb");
  int ok = f != NULL && fwrite(text, 1, len, f) == len;
  if (f != NULL)
    ok = (fclose(f) == 0) && ok;
  else
    close(fd);
  if (!ok || rename(tmp, path) != 0) {
    unlink(tmp);
    free(tmp);
    return cli_error(CLI_EXIT_FAILED, "%s: cannot write the canonical form", path);
  }
  free(tmp);
  return CLI_EXIT_OK;
}

int cli_cmd_fmt(int argc, char **argv) {
  static const struct option extra[] = {{"check", no_argument, NULL, OPT_CHECK},
                                        {"write", no_argument, NULL, OPT_WRITE},
                                        {NULL, 0, NULL, 0}};
  cli_prog_opts po = {0};
  int mode = 0, code;
  weft_runtime *rt = NULL;
  char *src = NULL, *canon = NULL;
  size_t len = 0;
  cli_job j;
  cli_job_init(&j);
  const char *file = cli_parse_prog_args(argc, argv, "fmt", fmt_help, extra, fmt_option, &mode,
                                         &po, &code);
  if (file == NULL) goto done;
  if (mode == OPT_WRITE && strcmp(file, "-") == 0) {
    code = cli_usage_error("fmt", "--write needs a file, not standard input");
    goto done;
  }
  char err[512];
  int rc = cli_read_file(file, CLI_STDIN_MAX, &src, &len, err, sizeof err);
  if (rc != WEFT_OK) {
    code = cli_error(cli_exit_for_status(rc), "%s", err);
    goto done;
  }
  if ((code = cli_prog_runtime(&po, (int)(po.workers ? po.workers : 1), &rt)) != 0) goto done;
  j.name = strcmp(file, "-") == 0 ? "<stdin>" : file;
  j.text = src;
  j.len = len;
  cli_prog_dsl(&po, &j.dsl);
  if ((code = cli_job_load(&j, rt)) != CLI_EXIT_OK) {
    cli_job_report(&j, stdout, stderr);
    goto done;
  }
  if ((rc = weft_program_format(j.prog, &canon)) != WEFT_OK) {
    code = cli_error(CLI_EXIT_FAILED, "%s: %s", j.name, weft_last_error());
    goto done;
  }
  size_t clen = strlen(canon);
  int same = clen == len && memcmp(canon, src, len) == 0;
  if (mode == OPT_CHECK) {
    code = same ? CLI_EXIT_OK : CLI_EXIT_FAILED;
    if (!same)
      fprintf(stderr, "%s: %s is not in canonical form (weft fmt --write %s fixes it)\n",
              cli_progname, j.name, j.name);
  } else if (mode == OPT_WRITE) {
    code = same ? CLI_EXIT_OK : write_atomically(file, canon, clen);
  } else {
    code = fwrite(canon, 1, clen, stdout) == clen && fflush(stdout) == 0
               ? CLI_EXIT_OK
               : cli_error(CLI_EXIT_FAILED, "cannot write to standard output");
  }
done:
  free(canon);
  free(src);
  cli_job_fini(&j);
  weft_runtime_destroy(rt);
  cli_prog_opts_fini(&po);
  return code;
}
