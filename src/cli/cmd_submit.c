/* cmd_submit.c — `weft submit FILE --to ADDR`: the client of `weft serve`. Sends the program
 * with its -D, --device and --repeat as one request (proto.h), copies the answer's two parts
 * to standard output and standard error, and exits with the run's code, so a submission
 * behaves like `weft run` on the server's runtime.
 *
 * Blocking sockets: a client has one request to make and nothing else to do meanwhile. A
 * "busy" answer is retried, with a growing pause, until --wait seconds have passed. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "cli/cli.h"
#include "cli/proto.h"
#include "weft/report.h"

static const char submit_help[] =
    "Usage: weft submit [OPTIONS] FILE --to ADDR\n"
    "Send the .weft program FILE (\"-\" reads standard input) to a running 'weft serve' at\n"
    "ADDR (HOST:PORT or unix:PATH; default $WEFT_SERVER), and print what it answers: the\n"
    "program's outputs on standard output, errors on standard error.\n"
    "\n"
    "Options:\n"
    "      --to ADDR            the server's address\n"
    "  -D, --define NAME=VALUE  override parameter NAME (repeatable)\n"
    "      --device DEV         resolve every device declaration to DEV on the server\n"
    "      --repeat N           run the graph N times (default 1)\n"
    "      --json               print the server's JSON document instead of text\n"
    "      --wait SEC           while the server answers 'busy', retry for up to SEC seconds\n"
    "                           (default 30; 0 fails at once)\n"
    "      --timeout SEC        give up if an answer takes longer than SEC (default: wait)\n"
    "  -h, --help               show this help and exit\n"
    "\n"
    "Exit status: the run's: 0 success, 1 the run failed (or the server was unreachable,\n"
    "busy, or closed the connection), 2 bad input or usage.\n";

enum { OPT_TO = CLI_OPT_LOCAL, OPT_REPEAT, OPT_JSON, OPT_WAIT, OPT_TIMEOUT };

typedef struct submit_flags {
  const char *to;
  long repeat;
  int json;
  double wait_s, timeout_s;
} submit_flags;

static int parse_secs(const char *flag, const char *arg, double *out) {
  char *end;
  errno = 0;
  double v = strtod(arg, &end);
  if (*arg == '\0' || *end != '\0' || errno != 0 || !(v >= 0) || v > 86400.0 * 365) {
    cli_usage_error("submit", "%s expects seconds (a number >= 0), not '%s'", flag, arg);
    return -1;
  }
  *out = v;
  return 0;
}

static int submit_option(int c, const char *arg, void *ctx) {
  submit_flags *f = ctx;
  switch (c) {
    case OPT_TO: f->to = arg; return 0;
    case OPT_REPEAT: return cli_parse_int("submit", "--repeat", arg, 1, 1000000000, &f->repeat);
    case OPT_JSON: f->json = 1; return 0;
    case OPT_WAIT: return parse_secs("--wait", arg, &f->wait_s);
    case OPT_TIMEOUT: return parse_secs("--timeout", arg, &f->timeout_s);
    default: return -1;
  }
}

static int connect_to(const cli_addr *a, double timeout_s, char *err, size_t err_size) {
  struct sockaddr_storage ss;
  socklen_t len;
  memset(&ss, 0, sizeof ss);
  if (a->is_unix) {
    struct sockaddr_un *u = (struct sockaddr_un *)&ss;
    u->sun_family = AF_UNIX;
    snprintf(u->sun_path, sizeof u->sun_path, "%s", a->path);
    len = sizeof *u;
  } else if (a->ipv6) {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)a->port);
    inet_pton(AF_INET6, a->host, &in6->sin6_addr);
    len = sizeof *in6;
  } else {
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    in4->sin_family = AF_INET;
    in4->sin_port = htons((uint16_t)a->port);
    inet_pton(AF_INET, a->host, &in4->sin_addr);
    len = sizeof *in4;
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, err_size, "socket: %s", strerror(errno));
    return -1;
  }
  if (timeout_s > 0) {
    struct timeval tv = {.tv_sec = (time_t)timeout_s,
                         .tv_usec = (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  int rc;
  do rc = connect(fd, (struct sockaddr *)&ss, len);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    snprintf(err, err_size, "%s", strerror(errno));
    close(fd);
    return -1;
  }
  if (!a->is_unix) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

static int send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Reads exactly n bytes into f (or drops them when f is NULL). */
static int copy_exact(int fd, size_t n, FILE *f) {
  char buf[65536];
  while (n > 0) {
    ssize_t k = recv(fd, buf, n < sizeof buf ? n : sizeof buf, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    if (f != NULL && fwrite(buf, 1, (size_t)k, f) != (size_t)k) return -2;
    n -= (size_t)k;
  }
  return 0;
}

/* Reads the answer's first line (without its newline) into line. */
static int read_line(int fd, char *line, size_t size) {
  size_t n = 0;
  for (;;) {
    char ch;
    ssize_t k = recv(fd, &ch, 1, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    if (ch == '\n') break;
    if (n + 1 >= size) return -1;
    line[n++] = ch;
  }
  line[n] = '\0';
  return 0;
}

/* One attempt: connect, send, read the answer. Returns the exit code to use, or -1 for
 * "busy, retry". */
static int attempt(const cli_addr *addr, const char *to, const weft__strbuf *request,
                   const char *source, size_t len, double timeout_s) {
  char err[256], line[256], status[32];
  int fd = connect_to(addr, timeout_s, err, sizeof err);
  if (fd < 0) return cli_error(CLI_EXIT_FAILED, "cannot connect to %s: %s", to, err);
  int code;
  /* If sending fails, the server may have refused the request early and closed: its answer
   * can still be read, so read either way. */
  if (send_all(fd, request->data, request->len) == 0) (void)send_all(fd, source, len);
  size_t out_len, err_len;
  int exit_code;
  if (read_line(fd, line, sizeof line) != 0) {
    code = cli_error(CLI_EXIT_FAILED, "%s closed the connection without an answer%s", to,
                     errno == EAGAIN || errno == EWOULDBLOCK ? " (timed out)" : "");
    goto done;
  }
  if (cli_proto_parse_result(line, &exit_code, status, sizeof status, &out_len, &err_len) != 0) {
    code = cli_error(CLI_EXIT_FAILED, "%s answered something that is not weft's protocol: '%.60s'",
                     to, line);
    goto done;
  }
  if (strcmp(status, "busy") == 0) {
    code = -1;
    goto done;
  }
  int r = copy_exact(fd, out_len, stdout);
  fflush(stdout);
  if (r == 0) r = copy_exact(fd, err_len, stderr);
  if (r == -2) {
    code = cli_error(CLI_EXIT_FAILED, "cannot write the answer");
  } else if (r != 0) {
    code = cli_error(CLI_EXIT_FAILED, "%s closed the connection in the middle of its answer", to);
  } else {
    code = exit_code <= CLI_EXIT_USAGE ? exit_code : CLI_EXIT_FAILED;
  }
done:
  close(fd);
  return code;
}

/* Appends a header line, refusing values that would break the framing. */
static int header(weft__strbuf *b, const char *key, const char *value) {
  if (strpbrk(value, "\r\n") != NULL) {
    cli_usage_error("submit", "%s '%s' contains a line break", key, value);
    return -1;
  }
  weft__strbuf_printf(b, "%s: %s\n", key, value);
  return 0;
}

int cli_cmd_submit(int argc, char **argv) {
  static const struct option extra[] = {{"to", required_argument, NULL, OPT_TO},
                                        {"repeat", required_argument, NULL, OPT_REPEAT},
                                        {"json", no_argument, NULL, OPT_JSON},
                                        {"wait", required_argument, NULL, OPT_WAIT},
                                        {"timeout", required_argument, NULL, OPT_TIMEOUT},
                                        {NULL, 0, NULL, 0}};
  cli_prog_opts po = {0};
  submit_flags f = {.repeat = 1, .wait_s = 30};
  char *src = NULL;
  size_t len = 0;
  weft__strbuf req;
  weft__strbuf_init(&req);
  int code;
  const char *file = cli_parse_prog_args(argc, argv, "submit", submit_help, extra,
                                         submit_option, &f, &po, &code);
  if (file == NULL) goto done;
  code = CLI_EXIT_USAGE;
  if (po.workers != 0 || po.simulate != NULL) {
    cli_usage_error("submit", "--%s is the server's option (weft serve --%s)",
                    po.workers ? "workers" : "simulate", po.workers ? "workers" : "simulate");
    goto done;
  }
  if (f.to == NULL) f.to = getenv("WEFT_SERVER");
  if (f.to == NULL || *f.to == '\0') {
    cli_usage_error("submit", "missing --to ADDR (or WEFT_SERVER in the environment)");
    goto done;
  }
  cli_addr addr;
  char err[256];
  if (cli_addr_parse(f.to, &addr, err, sizeof err) != 0) {
    cli_usage_error("submit", "--to %s", err);
    goto done;
  }
  if (addr.port == 0 && !addr.is_unix) {
    cli_usage_error("submit", "--to %s: port 0 is not a server's port", f.to);
    goto done;
  }
  int rc = cli_read_file(file, CLI_STDIN_MAX, &src, &len, err, sizeof err);
  if (rc != WEFT_OK) {
    code = cli_error(cli_exit_for_status(rc), "%s", err);
    goto done;
  }
  const char *name = strcmp(file, "-") == 0 ? "<stdin>" : file;
  weft__strbuf_printf(&req, "SUBMIT %zu\n", len);
  if (header(&req, "Name", name) != 0) goto done;
  for (int i = 0; i < po.defines.n; i++)
    if (header(&req, "Define", po.defines.v[i]) != 0) goto done;
  if (po.device != NULL && header(&req, "Device", po.device) != 0) goto done;
  weft__strbuf_printf(&req, "Repeat: %ld\nFormat: %s\n\n", f.repeat, f.json ? "json" : "text");
  if (req.failed) {
    code = cli_error(CLI_EXIT_FAILED, "out of memory");
    goto done;
  }
  signal(SIGPIPE, SIG_IGN);
  uint64_t deadline = weft_clock_ns() + (uint64_t)(f.wait_s * 1e9);
  double pause = 0.05;
  for (;;) {
    code = attempt(&addr, f.to, &req, src, len, f.timeout_s);
    if (code >= 0) break;
    if (weft_clock_ns() + (uint64_t)(pause * 1e9) > deadline) {
      code = cli_error(CLI_EXIT_FAILED, "%s is busy%s", f.to,
                       f.wait_s > 0 ? " (gave up after --wait seconds)" : "");
      break;
    }
    struct timespec ts = {.tv_sec = (time_t)pause,
                          .tv_nsec = (long)((pause - (double)(time_t)pause) * 1e9)};
    nanosleep(&ts, NULL);
    pause = pause * 2 < 1.0 ? pause * 2 : 1.0;
  }
done:
  weft__strbuf_fini(&req);
  free(src);
  cli_prog_opts_fini(&po);
  return code;
}
