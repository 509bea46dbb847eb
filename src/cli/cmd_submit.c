/* cmd_submit.c — `weft submit FILE --to ADDR`: the client of `weft serve`. POSTs the program
 * with its -D, --device and --repeat to /v1/runs?wait=1 through libcurl (docs/cli.md, "The HTTP
 * API"), prints the finished run's output on standard output and its errors on standard error,
 * and exits with the run's code, so a submission behaves like `weft run` on the server's
 * runtime. A 429 (busy) answer is retried, with a growing pause, until --wait seconds have
 * passed. */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/http.h"
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
    "      --token-file FILE    send the server's token (the file's first line) as\n"
    "                           'Authorization: Bearer TOKEN' (default $WEFT_TOKEN_FILE)\n"
    "  -h, --help               show this help and exit\n"
    "\n"
    "Exit status: the run's: 0 success, 1 the run failed (or the server was unreachable,\n"
    "busy, or closed the connection), 2 bad input or usage.\n";

enum { OPT_TO = CLI_OPT_LOCAL, OPT_REPEAT, OPT_JSON, OPT_WAIT, OPT_TIMEOUT, OPT_TOKEN };

typedef struct submit_flags {
  const char *to, *token_file;
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
    case OPT_TOKEN: f->token_file = arg; return 0;
    default: return -1;
  }
}

/* The answer being received. */
typedef struct answer {
  char *data;
  size_t len, cap;
  int failed;
} answer;

static size_t on_data(char *p, size_t size, size_t n, void *arg) {
  answer *a = arg;
  size_t k = size * n;
  if (a->len + k + 1 > a->cap) {
    size_t cap = a->cap ? a->cap : 65536;
    while (cap < a->len + k + 1) cap *= 2;
    char *d = realloc(a->data, cap);
    if (d == NULL) {
      a->failed = 1;
      return 0; /* curl stops: CURLE_WRITE_ERROR */
    }
    a->data = d;
    a->cap = cap;
  }
  memcpy(a->data + a->len, p, k);
  a->len += k;
  a->data[a->len] = '\0';
  return k;
}

/* Appends "&key=value" (value escaped) to the URL. */
static void query(weft__strbuf *url, CURL *curl, const char *key, const char *value) {
  char *v = curl_easy_escape(curl, value, 0);
  if (v == NULL) {
    url->failed = 1;
    return;
  }
  weft__strbuf_printf(url, "&%s=%s", key, v);
  curl_free(v);
}

/* Prints the record the server answered (docs/cli.md, "The HTTP API") as `weft run` would:
 * its output on standard output, its errors on standard error; returns its exit code. */
static int print_record(const char *to, const answer *a) {
  json_error_t jerr;
  json_t *rec = json_loadb(a->data != NULL ? a->data : "", a->len, 0, &jerr);
  json_t *code = rec != NULL ? json_object_get(rec, "exit_code") : NULL;
  json_t *out = rec != NULL ? json_object_get(rec, "output") : NULL;
  json_t *err = rec != NULL ? json_object_get(rec, "errors") : NULL;
  if (!json_is_integer(code) || !json_is_string(out) || !json_is_string(err)) {
    json_decref(rec);
    return cli_error(CLI_EXIT_FAILED, "%s answered something that is not a finished run: '%.60s'", to,
                     a->data != NULL ? a->data : "");
  }
  fwrite(json_string_value(out), 1, json_string_length(out), stdout);
  fflush(stdout);
  fwrite(json_string_value(err), 1, json_string_length(err), stderr);
  json_int_t c = json_integer_value(code);
  json_decref(rec);
  return c >= 0 && c <= CLI_EXIT_USAGE ? (int)c : CLI_EXIT_FAILED;
}

/* The message of an error answer ({"error": ...}), or its first bytes. */
static void error_text(const answer *a, char *buf, size_t size) {
  json_error_t jerr;
  json_t *rec = json_loadb(a->data != NULL ? a->data : "", a->len, 0, &jerr);
  json_t *msg = rec != NULL ? json_object_get(rec, "error") : NULL;
  if (json_is_string(msg))
    snprintf(buf, size, "%s", json_string_value(msg));
  else
    snprintf(buf, size, "%.80s", a->data != NULL ? a->data : "(no answer)");
  json_decref(rec);
}

/* One attempt: POST the source, wait for the answer. Returns the exit code to use, or -1 for
 * "busy, retry". */
static int attempt(CURL *curl, const char *to, double timeout_s) {
  answer a = {0};
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &a);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1e3));
  CURLcode rc = curl_easy_perform(curl);
  long http = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &http);
  int code;
  char msg[600];
  if (rc == CURLE_COULDNT_CONNECT) {
    code = cli_error(CLI_EXIT_FAILED, "cannot connect to %s: %s", to, curl_easy_strerror(rc));
  } else if (rc != CURLE_OK) {
    code = a.failed ? cli_error(CLI_EXIT_FAILED, "out of memory for the answer")
                    : cli_error(CLI_EXIT_FAILED, "%s: %s", to, curl_easy_strerror(rc));
  } else if (http == 429) {
    code = -1;
  } else if (http == 200) {
    code = print_record(to, &a);
  } else {
    error_text(&a, msg, sizeof msg);
    code = cli_error(http >= 400 && http < 500 ? CLI_EXIT_USAGE : CLI_EXIT_FAILED, "%s answered %ld: %s", to, http, msg);
  }
  free(a.data);
  return code;
}

int cli_cmd_submit(int argc, char **argv) {
  static const struct option extra[] = {{"to", required_argument, NULL, OPT_TO},
                                        {"repeat", required_argument, NULL, OPT_REPEAT},
                                        {"json", no_argument, NULL, OPT_JSON},
                                        {"wait", required_argument, NULL, OPT_WAIT},
                                        {"timeout", required_argument, NULL, OPT_TIMEOUT},
                                        {"token-file", required_argument, NULL, OPT_TOKEN},
                                        {NULL, 0, NULL, 0}};
  cli_prog_opts po = {0};
  submit_flags f = {.repeat = 1, .wait_s = 30};
  char *src = NULL;
  size_t len = 0;
  weft__strbuf req; /* the URL */
  weft__strbuf_init(&req);
  CURL *curl = NULL;
  struct curl_slist *headers = NULL;
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
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || (curl = curl_easy_init()) == NULL) {
    code = cli_error(CLI_EXIT_FAILED, "cannot start libcurl");
    goto done;
  }
  /* POST /v1/runs?wait=1&...: the source as the body; the answer is the finished run's record. */
  if (addr.is_unix)
    weft__strbuf_puts(&req, "http://localhost/v1/runs?wait=1");
  else
    weft__strbuf_printf(&req, addr.ipv6 ? "http://[%s]:%d/v1/runs?wait=1" : "http://%s:%d/v1/runs?wait=1", addr.host,
                        addr.port);
  weft__strbuf_printf(&req, "&repeat=%ld&format=%s", f.repeat, f.json ? "json" : "text");
  query(&req, curl, "name", name);
  for (int i = 0; i < po.defines.n; i++) query(&req, curl, "define", po.defines.v[i]);
  if (po.device != NULL) query(&req, curl, "device", po.device);
  if (req.failed) {
    code = cli_error(CLI_EXIT_FAILED, "out of memory");
    goto done;
  }
  headers = curl_slist_append(NULL, "Content-Type: text/plain; charset=utf-8");
  if (f.token_file == NULL) f.token_file = getenv("WEFT_TOKEN_FILE");
  if (f.token_file != NULL && *f.token_file) {
    char *token = cli_read_token(f.token_file, "submit");
    if (token == NULL) {
      code = CLI_EXIT_USAGE;
      goto done;
    }
    char *auth = malloc(strlen(token) + 32);
    if (auth != NULL) {
      sprintf(auth, "Authorization: Bearer %s", token);
      headers = curl_slist_append(headers, auth);
      memset(auth, 0, strlen(auth));
      free(auth);
    }
    memset(token, 0, strlen(token));
    free(token);
  }
  headers = curl_slist_append(headers, "Expect:"); /* send the body at once */
  curl_easy_setopt(curl, CURLOPT_URL, req.data);
  if (addr.is_unix) curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, addr.path);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, src);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROXY, ""); /* the server is local to its user: no proxy */
  uint64_t deadline = weft_clock_ns() + (uint64_t)(f.wait_s * 1e9);
  double pause = 0.05;
  for (;;) {
    code = attempt(curl, f.to, f.timeout_s);
    if (code >= 0) break;
    if (weft_clock_ns() + (uint64_t)(pause * 1e9) > deadline) {
      code = cli_error(CLI_EXIT_FAILED, "%s is busy%s", f.to, f.wait_s > 0 ? " (gave up after --wait seconds)" : "");
      break;
    }
    struct timespec ts = {.tv_sec = (time_t)pause, .tv_nsec = (long)((pause - (double)(time_t)pause) * 1e9)};
    nanosleep(&ts, NULL);
    pause = pause * 2 < 1.0 ? pause * 2 : 1.0;
  }
done:
  curl_slist_free_all(headers);
  if (curl != NULL) {
    curl_easy_cleanup(curl);
    curl_global_cleanup();
  }
  weft__strbuf_fini(&req);
  free(src);
  cli_prog_opts_fini(&po);
  return code;
}
