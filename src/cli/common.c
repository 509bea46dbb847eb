/* common.c — helpers every subcommand uses: error messages with the conventional
 * "weft: ..." prefix and a --help hint, strict integer parsing, -D collection, the runtime,
 * whole-file reads with a size bound, and program loading with diagnostics. Nothing here keeps
 * state besides the program name. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"

const char *cli_progname = "weft";

static void vreport(const char *fmt, va_list ap) {
  fprintf(stderr, "%s: ", cli_progname);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

int cli_usage_error(const char *sub, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(fmt, ap);
  va_end(ap);
  if (sub != NULL)
    fprintf(stderr, "Try '%s %s --help' for more information.\n", cli_progname, sub);
  else
    fprintf(stderr, "Try '%s --help' for more information.\n", cli_progname);
  return CLI_EXIT_USAGE;
}

int cli_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(fmt, ap);
  va_end(ap);
  return code;
}

int cli_bad_option(const char *sub, int c, char **argv) {
  const char *arg = optind > 0 ? argv[optind - 1] : "?";
  if (c == ':') return cli_usage_error(sub, "option '%s' needs a value", arg);
  if (strncmp(arg, "--", 2) == 0) {
    const char *eq = strchr(arg, '=');
    /* getopt names the option in optopt when it exists but was given a value it takes not. */
    if (eq != NULL && optopt != 0)
      return cli_usage_error(sub, "option '%.*s' takes no value", (int)(eq - arg), arg);
    return cli_usage_error(sub, "unknown option '%s'", arg);
  }
  if (optopt > 0 && optopt < 256) return cli_usage_error(sub, "unknown option '-%c'", optopt);
  return cli_usage_error(sub, "unknown option '%s'", arg);
}

int cli_parse_size(const char *sub, const char *flag, const char *text, size_t *out) {
  static const struct {
    const char *unit;
    double scale;
  } units[] = {{"", 1},      {"B", 1},         {"KB", 1e3},         {"MB", 1e6},         {"GB", 1e9},
               {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  char *end;
  double v = strtod(text, &end);
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (end != text && strcmp(end, units[i].unit) == 0 && v > 0 && v * units[i].scale < 1.8e19) {
      *out = (size_t)(v * units[i].scale);
      return 0;
    }
  cli_usage_error(sub, "%s expects a positive size such as 2GiB, 512MiB or 4000000000, not '%s'", flag, text);
  return -1;
}

int cli_parse_int(const char *sub, const char *flag, const char *text, long lo, long hi,
                  long *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (text[0] == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    cli_usage_error(sub, "%s expects an integer from %ld to %ld, not '%s'", flag, lo, hi, text);
    return -1;
  }
  *out = v;
  return 0;
}

int cli_exit_for_status(int status) {
  switch (status) {
    case WEFT_OK:
      return CLI_EXIT_OK;
    case WEFT_EKERNEL:
    case WEFT_ECANCELED:
    case WEFT_ENOMEM:
    case WEFT_EDEVMEM:
    case WEFT_ECUDA:
    case WEFT_ECUBLAS:
    case WEFT_EBUSY:
    case WEFT_EAGAIN:
    case WEFT_ESTATE:
      return CLI_EXIT_FAILED;
    default:
      return CLI_EXIT_USAGE;
  }
}

int cli_defines_add(cli_defines *d, const char *sub, const char *text) {
  const char *eq = strchr(text, '=');
  if (eq == NULL || eq == text) {
    cli_usage_error(sub, "-D expects NAME=VALUE, not '%s'", text);
    return -1;
  }
  if (d->n == d->cap) {
    int cap = d->cap ? d->cap * 2 : 8;
    const char **v = realloc(d->v, (size_t)cap * sizeof *v);
    if (v == NULL) {
      cli_error(CLI_EXIT_FAILED, "out of memory");
      return -1;
    }
    d->v = v;
    d->cap = cap;
  }
  d->v[d->n++] = text;
  return 0;
}

void cli_defines_fini(cli_defines *d) {
  free(d->v);
  d->v = NULL;
  d->n = d->cap = 0;
}

int cli_prog_option(cli_prog_opts *o, const char *sub, int c, const char *arg) {
  switch (c) {
    case 'D':
      return cli_defines_add(&o->defines, sub, arg) == 0 ? 1 : -1;
    case CLI_OPT_DEVICE: {
      weft_device d;
      if (weft_device_parse(arg, &d) != WEFT_OK) {
        cli_usage_error(sub, "--device expects cpu, cuda or cuda:N, not '%s'", arg);
        return -1;
      }
      o->device = arg;
      return 1;
    }
    case CLI_OPT_WORKERS:
      return cli_parse_int(sub, "--workers", arg, 0, 4096, &o->workers) == 0 ? 1 : -1;
    case CLI_OPT_SIMULATE:
      o->simulate = arg;
      return 1;
    case CLI_OPT_POLICY:
      o->policy = arg;
      return 1;
    case CLI_OPT_PROFILE:
      o->profile = arg;
      return 1;
    case CLI_OPT_MEMLIMIT:
      return cli_parse_size(sub, "--device-memory-limit", arg, &o->memlimit) == 0 ? 1 : -1;
    case CLI_OPT_RANKS:
      return cli_parse_int(sub, "--ranks", arg, 1, 4096, &o->ranks) == 0 ? 1 : -1;
    case CLI_OPT_RANKS_PER_HOST:
      return cli_parse_int(sub, "--ranks-per-host", arg, 1, 4096, &o->ranks_per_host) == 0 ? 1 : -1;
    case 'h':
      o->help = 1;
      return 1;
    default:
      return 0;
  }
}

void cli_prog_dsl(const cli_prog_opts *o, weft_dsl_options *dsl) {
  weft_dsl_options_init(dsl);
  dsl->defines = o->defines.v;
  dsl->ndefines = o->defines.n;
  dsl->device = o->device;
}

void cli_prog_opts_fini(cli_prog_opts *o) { cli_defines_fini(&o->defines); }

const char *cli_parse_prog_args(int argc, char **argv, const char *sub, const char *help,
                                const struct option *extra,
                                int (*local)(int c, const char *arg, void *ctx), void *ctx,
                                cli_prog_opts *o, int *exit_code) {
  struct option opts[32] = {CLI_PROG_LONGOPTS};
  int n = 0;
  while (opts[n].name != NULL) n++;
  for (const struct option *e = extra; e != NULL && e->name != NULL && n < 31; e++) opts[n++] = *e;
  memset(&opts[n], 0, sizeof opts[n]);
  int c;
  *exit_code = CLI_EXIT_USAGE;
  while ((c = getopt_long(argc, argv, ":D:h", opts, NULL)) != -1) {
    int r = cli_prog_option(o, sub, c, optarg);
    if (r < 0) return NULL;
    if (r > 0) continue;
    if (c == '?' || c == ':' || local == NULL) {
      cli_bad_option(sub, c, argv);
      return NULL;
    }
    if (local(c, optarg, ctx) != 0) return NULL;
  }
  if (o->help) {
    fputs(help, stdout);
    *exit_code = CLI_EXIT_OK;
    return NULL;
  }
  if (optind + 1 != argc) {
    if (optind == argc)
      cli_usage_error(sub, "missing FILE");
    else
      cli_usage_error(sub, "expected one FILE, got %d arguments", argc - optind);
    return NULL;
  }
  *exit_code = CLI_EXIT_OK;
  return argv[optind];
}

static int make_runtime(const weft_runtime_options *o, weft_runtime **out) {
  *out = NULL;
  int rc = weft_runtime_create(o, out);
  if (rc == WEFT_OK) return CLI_EXIT_OK;
  *out = NULL;
  int code = (o->simulate != NULL || o->policy != NULL || o->profile != NULL || o->sim_ranks > 0) && rc != WEFT_ENOMEM
                 ? CLI_EXIT_USAGE
                 : CLI_EXIT_FAILED;
  return cli_error(code, "cannot start the runtime: %s", weft_last_error());
}

int cli_runtime(int workers, const char *simulate, const char *policy, const char *profile, size_t memlimit,
                weft_runtime **out) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = workers;
  o.flags |= WEFT_RUNTIME_QUIET;
  o.simulate = simulate;
  o.policy = policy;
  o.profile = profile;
  o.device_memory_limit = memlimit;
  return make_runtime(&o, out);
}

int cli_prog_runtime(const cli_prog_opts *po, int workers, weft_runtime **out) {
  *out = NULL;
  if ((po->ranks > 0 || po->ranks_per_host > 0) && po->simulate == NULL)
    return cli_error(CLI_EXIT_USAGE, "--ranks and --ranks-per-host simulate a job of several ranks: they need "
                     "--simulate PROFILE (a real job's ranks come from mpirun)");
  if (po->ranks_per_host > 0 && po->ranks == 0)
    return cli_error(CLI_EXIT_USAGE, "--ranks-per-host needs --ranks N");
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = workers;
  o.flags |= WEFT_RUNTIME_QUIET;
  o.simulate = po->simulate;
  o.policy = po->policy;
  o.profile = po->profile;
  o.device_memory_limit = po->memlimit;
  o.sim_ranks = (int)po->ranks;
  o.sim_ranks_per_host = (int)po->ranks_per_host;
  return make_runtime(&o, out);
}

int cli_read_file(const char *path, size_t max_bytes, char **out, size_t *len, char *err,
                  size_t err_size) {
  *out = NULL;
  *len = 0;
  int is_stdin = strcmp(path, "-") == 0;
  FILE *f = is_stdin ? stdin : fopen(path, "rb");
  if (f == NULL) {
    int e = errno;
    snprintf(err, err_size, "%s: %s", path, strerror(e));
    return e == ENOENT ? WEFT_ENOENT : WEFT_EIO;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap + 1);
  int rc = WEFT_OK;
  if (buf == NULL) {
    snprintf(err, err_size, "%s: out of memory", path);
    rc = WEFT_ENOMEM;
    goto fail;
  }
  for (;;) {
    if (n == cap) {
      if (cap > max_bytes) break;
      size_t ncap = cap * 2;
      char *nb = realloc(buf, ncap + 1);
      if (nb == NULL) {
        snprintf(err, err_size, "%s: out of memory", path);
        rc = WEFT_ENOMEM;
        goto fail;
      }
      buf = nb;
      cap = ncap;
    }
    size_t k = fread(buf + n, 1, cap - n, f);
    n += k;
    if (k == 0) break;
  }
  if (ferror(f)) {
    snprintf(err, err_size, "%s: %s", path, strerror(errno ? errno : EIO));
    rc = WEFT_EIO;
    goto fail;
  }
  if (n > max_bytes) {
    snprintf(err, err_size, "%s: larger than the limit of %zu bytes", path, max_bytes);
    rc = WEFT_ELIMIT;
    goto fail;
  }
  buf[n] = '\0';
  if (!is_stdin) fclose(f);
  *out = buf;
  *len = n;
  return WEFT_OK;
fail:
  free(buf);
  if (f != NULL && !is_stdin) fclose(f);
  return rc;
}

int cli_load_program(weft_runtime *rt, const char *path, const weft_dsl_options *opts,
                     weft_program **out) {
  cli_job j;
  cli_job_init(&j);
  j.name = path;
  j.path = path;
  j.dsl = *opts;
  int code = cli_job_load(&j, rt);
  if (code != CLI_EXIT_OK) {
    cli_job_report(&j, stdout, stderr);
    cli_job_fini(&j);
    return code;
  }
  *out = j.prog;
  j.prog = NULL;
  cli_job_fini(&j);
  return CLI_EXIT_OK;
}

char *cli_read_token(const char *path, const char *sub) {
  struct stat st;
  if (stat(path, &st) != 0) {
    cli_usage_error(sub, "--token-file %s: %s", path, strerror(errno));
    return NULL;
  }
  if (st.st_mode & 077) {
    cli_usage_error(sub, "--token-file %s can be read by others: make it the owner's alone (chmod 600 %s)", path, path);
    return NULL;
  }
  char *text = NULL, err[512];
  size_t len = 0;
  if (cli_read_file(path, 4096, &text, &len, err, sizeof err) != WEFT_OK) {
    cli_usage_error(sub, "--token-file: %s", err);
    return NULL;
  }
  text[strcspn(text, "\r\n")] = '\0';
  char *b = text, *e = text + strlen(text);
  while (*b == ' ' || *b == '\t') b++;
  while (e > b && (e[-1] == ' ' || e[-1] == '\t')) *--e = '\0';
  if (e - b < 16) {
    free(text);
    cli_usage_error(sub, "--token-file %s: the token (its first line) has fewer than 16 characters", path);
    return NULL;
  }
  memmove(text, b, (size_t)(e - b) + 1);
  return text;
}
