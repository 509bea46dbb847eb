/* test_serve.c — `weft serve` and `weft submit` end to end over loopback TCP and a Unix
 * socket, through the HTTP API (docs/cli.md, "The HTTP API"): answers equal to `weft run`'s,
 * asynchronous submissions and their records, list, trace, timeline, devices, metrics and
 * dashboard; several clients at once, pipelined requests, malformed and oversized requests,
 * the in-flight bound and cancelling, clients that leave mid-run, idle connections, address
 * checks, and shutdown on SIGTERM (runs finish within the grace period, or are cancelled after
 * it). Also the query-string and address parsers. Every server listens on port 0 (or a fresh
 * socket path) and prints its address, so parallel test runs never collide. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include "cli/http.h"
#include "cli_proc.h"
#include "testutil.h"

/* ---- the programs ------------------------------------------------------------------------ */

/* A valid program whose output depends on the parameter N. */
#define PROG_OK "param N = 8\ntensor x: f32[N, N] = ones\ny = mm(x, x)\nprint y\n"
/* A program with an error at line 2, column 1. */
#define PROG_BAD "param N = 8\nfrobnicate x\n"
#define PROG_BAD_WHERE ":2:1:"
/* A chain of 2K matrix products of 512 x 512 (a few milliseconds each): long for a large K,
 * and cancelled within one product. w = 1/512 keeps the values near their start: with a
 * smaller w each product would shrink them, and after some hundred products they would be
 * denormal floats, which an Intel CPU multiplies through microcode assists, far slower than
 * normal ones, so test_sigterm_finishes_runs's 400 products would take minutes there. */
#define PROG_SLOW                                                                          \
  "param K = 25\ntensor a: f32[512, 512] = uniform(-1, 1, seed=1)\n"                       \
  "tensor b: f32[512, 512] = uniform(-1, 1, seed=2)\n"                                      \
  "tensor w: f32[512, 512] = full(0.001953125)\n"                                          \
  "for i in 0..K {\n  a = mm(b, w)\n  b = mm(a, w)\n}\nn = norm(b)\nprint n\n"

static const double T = 60; /* generous bound for any one step, sanitizers included */

/* ---- a raw client ------------------------------------------------------------------------ */

typedef struct server {
  tp_proc proc;
  char addr[256];
} server;

static void server_start(server *s, const char *const *extra) {
  const char *args[32] = {"serve", "--listen", "127.0.0.1:0"};
  int n = 3;
  int has_listen = 0;
  for (int i = 0; extra != NULL && extra[i] != NULL; i++)
    has_listen |= !strcmp(extra[i], "--listen");
  if (has_listen) n = 1;
  for (int i = 0; extra != NULL && extra[i] != NULL && n < 31; i++) args[n++] = extra[i];
  args[n] = NULL;
  tp_spawn(&s->proc, args);
  const char *a = tp_read_line(&s->proc, "listening on ", T);
  if (a == NULL) {
    char *err = NULL;
    tp_stop(&s->proc, SIGKILL, T, &err);
    fail_msg("the server did not start: %s", err);
  }
  snprintf(s->addr, sizeof s->addr, "%s", a);
}

/* Stops the server with SIGTERM; asserts a clean exit (0, no sanitizer report). */
static char *server_stop(server *s) {
  char *err = NULL;
  int code = tp_stop(&s->proc, SIGTERM, T, &err);
  if (code != 0) fail_msg("the server exited with %d:\n%s", code, err);
  return err;
}

static int client_connect(const char *addr) {
  int fd;
  if (strncmp(addr, "unix:", 5) == 0) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", addr + 5);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }
  const char *colon = strrchr(addr, ':');
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
  char host[64];
  snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
  inet_pton(AF_INET, host, &sa.sin_addr);
  /* Close-on-exec: a command the test starts must not keep the connection open. */
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void send_str(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    assert_true(k > 0);
    s += k;
    n -= (size_t)k;
  }
}

/* Reads exactly n bytes; returns how many came before EOF or the deadline. */
static size_t recv_exact(int fd, char *buf, size_t n, double deadline) {
  size_t got = 0;
  while (got < n) {
    int left = (int)((deadline - tp_now()) * 1000);
    if (left <= 0) break;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) continue;
    ssize_t k = recv(fd, buf + got, n - got, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += (size_t)k;
  }
  return got;
}

/* 1 if the server closes the connection (EOF or reset) within `timeout_s`, reading and
 * dropping whatever else it sends. */
static int closed_by_server(int fd, double timeout_s) {
  double deadline = tp_now() + timeout_s;
  char buf[4096];
  for (;;) {
    int left = (int)((deadline - tp_now()) * 1000);
    if (left <= 0) return 0;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) continue;
    ssize_t k = recv(fd, buf, sizeof buf, 0);
    if (k == 0 || (k < 0 && errno != EINTR)) return 1;
  }
}

/* Sends one HTTP/1.1 request: `target` with its query, the body if any. */
static void send_http_with(int fd, const char *method, const char *target, const char *headers, const char *body) {
  char head[16384];
  size_t blen = body != NULL ? strlen(body) : 0;
  int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: test\r\n%sContent-Length: %zu\r\n\r\n", method,
                   target, headers != NULL ? headers : "", blen);
  assert_true(n > 0 && (size_t)n < sizeof head);
  send_str(fd, head, (size_t)n);
  if (blen > 0) send_str(fd, body, blen);
}

static void send_http(int fd, const char *method, const char *target, const char *body) {
  send_http_with(fd, method, target, NULL, body);
}

typedef struct response {
  int code;
  int close;    /* the server said Connection: close */
  char *head;   /* the status line and headers */
  char *body;
  size_t len;
} response;

/* Reads one response (status line, headers, Content-Length bytes); fails the test if none
 * comes within T. */
static void read_response(int fd, response *r) {
  double deadline = tp_now() + T;
  size_t cap = 65536, n = 0;
  char *head = malloc(cap);
  for (;;) {
    if (recv_exact(fd, head + n, 1, deadline) != 1) fail_msg("no complete response (got %zu bytes)", n);
    n++;
    if (n >= 4 && memcmp(head + n - 4, "\r\n\r\n", 4) == 0) break;
    assert_true(n + 1 < cap);
  }
  head[n] = '\0';
  memset(r, 0, sizeof *r);
  r->head = head;
  if (sscanf(head, "HTTP/1.1 %d", &r->code) != 1) fail_msg("not an HTTP response: '%.80s'", head);
  if (r->code == 100) { /* an interim answer: the real one follows */
    free(head);
    read_response(fd, r);
    return;
  }
  const char *cl = strcasestr(head, "\r\ncontent-length: ");
  assert_non_null(cl);
  r->len = (size_t)strtoull(cl + 18, NULL, 10);
  r->close = strcasestr(head, "\r\nconnection: close") != NULL;
  r->body = calloc(1, r->len + 1);
  assert_int_equal(recv_exact(fd, r->body, r->len, deadline), r->len);
}

static void response_fini(response *r) {
  free(r->head);
  free(r->body);
  memset(r, 0, sizeof *r);
}

/* One request on a fresh connection. */
static void request(const char *addr, const char *method, const char *target, const char *body, response *r) {
  int fd = client_connect(addr);
  assert_true(fd >= 0);
  send_http(fd, method, target, body);
  read_response(fd, r);
  close(fd);
}

/* The integer or string member `key` of a JSON object's text (jansson). */
static long json_int(const char *text, const char *key) {
  json_error_t e;
  json_t *j = json_loads(text, 0, &e);
  if (j == NULL) fail_msg("not JSON (%s): '%.120s'", e.text, text);
  json_t *v = json_object_get(j, key);
  long x = json_is_integer(v) ? (long)json_integer_value(v) : -999;
  json_decref(j);
  return x;
}

static char *json_str(const char *text, const char *key) {
  json_error_t e;
  json_t *j = json_loads(text, 0, &e);
  if (j == NULL) fail_msg("not JSON (%s): '%.120s'", e.text, text);
  json_t *v = json_object_get(j, key);
  char *x = strdup(json_is_string(v) ? json_string_value(v) : "(not a string)");
  json_decref(j);
  return x;
}

/* Polls GET /v1/runs/ID until its status is not in progress; returns the record. */
static void wait_done(const char *addr, long id, response *r) {
  char target[64];
  snprintf(target, sizeof target, "/v1/runs/%ld", id);
  double deadline = tp_now() + T;
  for (;;) {
    request(addr, "GET", target, NULL, r);
    assert_int_equal(r->code, 200);
    char *st = json_str(r->body, "status");
    int busy = !strcmp(st, "loading") || !strcmp(st, "queued") || !strcmp(st, "running") || !strcmp(st, "reporting");
    free(st);
    if (!busy) return;
    if (tp_now() > deadline) fail_msg("run %ld is still in progress: %s", id, r->body);
    response_fini(r);
    usleep(20000);
  }
}

/* ---- query strings and addresses ------------------------------------------------------------ */

static void test_query_and_addresses(void **state) {
  (void)state;
  char k[32], v[64], err[256];
  const char *q = "a=1&define=N%3D5&&name=x+y.weft&flag&b=%e2%82%ac", *end = q + strlen(q);
  assert_int_equal(cli_query_next(&q, end, k, sizeof k, v, sizeof v, err, sizeof err), 1);
  assert_string_equal(k, "a");
  assert_string_equal(v, "1");
  assert_int_equal(cli_query_next(&q, end, k, sizeof k, v, sizeof v, err, sizeof err), 1);
  assert_string_equal(k, "define");
  assert_string_equal(v, "N=5");
  assert_int_equal(cli_query_next(&q, end, k, sizeof k, v, sizeof v, err, sizeof err), 1);
  assert_string_equal(v, "x y.weft");
  assert_int_equal(cli_query_next(&q, end, k, sizeof k, v, sizeof v, err, sizeof err), 1);
  assert_string_equal(k, "flag");
  assert_string_equal(v, "");
  assert_int_equal(cli_query_next(&q, end, k, sizeof k, v, sizeof v, err, sizeof err), 1);
  assert_string_equal(v, "\xe2\x82\xac");
  assert_int_equal(cli_query_next(&q, end, k, sizeof k, v, sizeof v, err, sizeof err), 0);
  static const char *bad[] = {"a=%", "a=%4", "a=%zz", "a=%00", "k=0123456789012345678901234567890123456789012345678901234567890123456789"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    q = bad[i];
    if (cli_query_next(&q, bad[i] + strlen(bad[i]), k, sizeof k, v, sizeof v, err, sizeof err) != -1)
      fail_msg("accepted query '%s'", bad[i]);
    assert_true(strlen(err) > 0);
  }
  assert_string_equal(cli_http_reason(413), "Content Too Large");
  assert_string_equal(cli_http_reason(299), "Unknown");

  cli_addr a;
  char txt[160];
  assert_int_equal(cli_addr_parse("127.0.0.1:7878", &a, err, sizeof err), 0);
  assert_true(cli_addr_is_local(&a));
  assert_int_equal(a.port, 7878);
  assert_int_equal(cli_addr_parse("localhost:0", &a, err, sizeof err), 0);
  assert_true(cli_addr_is_local(&a));
  cli_addr_format(&a, txt, sizeof txt);
  assert_string_equal(txt, "127.0.0.1:0");
  assert_int_equal(cli_addr_parse("127.3.4.5:1", &a, err, sizeof err), 0);
  assert_true(cli_addr_is_local(&a));
  assert_int_equal(cli_addr_parse("[::1]:80", &a, err, sizeof err), 0);
  assert_true(cli_addr_is_local(&a));
  cli_addr_format(&a, txt, sizeof txt);
  assert_string_equal(txt, "[::1]:80");
  assert_int_equal(cli_addr_parse("0.0.0.0:80", &a, err, sizeof err), 0);
  assert_false(cli_addr_is_local(&a));
  assert_int_equal(cli_addr_parse("[::]:80", &a, err, sizeof err), 0);
  assert_false(cli_addr_is_local(&a));
  assert_int_equal(cli_addr_parse("10.0.0.1:80", &a, err, sizeof err), 0);
  assert_false(cli_addr_is_local(&a));
  assert_int_equal(cli_addr_parse("unix:/tmp/x.sock", &a, err, sizeof err), 0);
  assert_true(a.is_unix && cli_addr_is_local(&a));
  static const char *bad_addr[] = {"7878", "host:80", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                              "[::1:80", "::1:80", "unix:", ":80"};
  for (size_t i = 0; i < sizeof bad_addr / sizeof bad_addr[0]; i++)
    if (cli_addr_parse(bad_addr[i], &a, err, sizeof err) == 0) fail_msg("accepted address '%s'", bad_addr[i]);
}

/* ---- end to end ----------------------------------------------------------------------------- */

static void test_submit_matches_run(void **state) {
  (void)state;
  char *ok = tp_write("ok.weft", PROG_OK), *bad = tp_write("bad.weft", PROG_BAD);
  server s;
  server_start(&s, NULL);
  tp_out local, remote;
  /* The same program, run locally and submitted: same output, same exit code. */
  tp_run(&local, NULL, NULL, T, (const char *[]){"run", "ok.weft", "-D", "N=5", NULL});
  tp_run(&remote, NULL, NULL, T,
         (const char *[]){"submit", "ok.weft", "-D", "N=5", "--to", s.addr, NULL});
  assert_int_equal(local.code, 0);
  assert_int_equal(remote.code, 0);
  assert_true(local.out_len > 0);
  assert_string_equal(remote.out, local.out);
  tp_out_fini(&remote);
  tp_out_fini(&local);
  /* A bad program: exit 2 and the diagnostic with its file:line:col, as locally. */
  tp_expect(&remote, 2, NULL, (const char *[]){"submit", "--to", s.addr, "bad.weft", NULL});
  assert_true(tp_has(remote.err, "bad.weft" PROG_BAD_WHERE));
  assert_int_equal(remote.out_len, 0);
  tp_out_fini(&remote);
  /* --json: the document of weft run --json. */
  tp_expect(&remote, 0, NULL,
            (const char *[]){"submit", "--json", "--repeat", "3", "--to", s.addr, "ok.weft", NULL});
  assert_true(tp_has(remote.out, "\"status\": \"ok\""));
  assert_true(tp_has(remote.out, "\"exit_code\": 0"));
  assert_true(tp_has(remote.out, "\"wall_ms\""));
  assert_true(tp_has(remote.out, "\"outputs\": {"));
  tp_out_fini(&remote);
  tp_expect(&remote, 2, NULL,
            (const char *[]){"submit", "--json", "--to", s.addr, "bad.weft", NULL});
  assert_true(tp_has(remote.out, "\"status\": \"invalid\""));
  assert_true(tp_has(remote.out, "\"diagnostics\": [{\"file\": \"bad.weft\", \"line\": 2"));
  tp_out_fini(&remote);
  /* Standard input. */
  tp_expect(&remote, 0, PROG_OK, (const char *[]){"submit", "-", "--to", s.addr, NULL});
  tp_out_fini(&remote);
  free(server_stop(&s));
  free(ok);
  free(bad);
}

/* The API end to end: an asynchronous submission, its record while and after it runs, the
 * list, its trace and timeline, the devices, the metrics, the dashboard, and the answers to
 * what does not exist. */
static void test_api(void **state) {
  (void)state;
  free(tp_write("api.weft", PROG_OK));
  server s;
  server_start(&s, NULL);
  response r;
  request(s.addr, "POST", "/v1/runs?name=api.weft&define=N%3D5", PROG_OK, &r);
  assert_int_equal(r.code, 202);
  assert_true(tp_has(r.head, "Location: /v1/runs/1\r\n"));
  long id = json_int(r.body, "id");
  assert_int_equal(id, 1);
  response_fini(&r);
  wait_done(s.addr, id, &r);
  char *st = json_str(r.body, "status");
  assert_string_equal(st, "succeeded");
  free(st);
  assert_int_equal(json_int(r.body, "exit_code"), 0);
  /* Its result is the document of weft run --json, outputs included. */
  tp_out local;
  tp_run(&local, NULL, NULL, T, (const char *[]){"run", "--json", "api.weft", "-D", "N=5", NULL});
  const char *o1 = strstr(r.body, "\"outputs\""), *o2 = strstr(local.out, "\"outputs\"");
  assert_non_null(o1);
  assert_non_null(o2);
  assert_memory_equal(o1, o2, strcspn(o2, "}") + 1);
  tp_out_fini(&local);
  assert_true(tp_has(r.body, "\"progress\": {\"nodes_done\": 1, \"nodes\": 1}"));
  response_fini(&r);
  request(s.addr, "GET", "/v1/runs", NULL, &r);
  assert_int_equal(r.code, 200);
  assert_true(tp_has(r.body, "\"name\": \"api.weft\""));
  assert_true(tp_has(r.body, "\"kept\": 1"));
  response_fini(&r);
  request(s.addr, "GET", "/v1/runs/1/trace", NULL, &r);
  assert_int_equal(r.code, 200);
  assert_true(tp_has(r.head, "application/json"));
  assert_true(tp_has(r.body, "\"traceEvents\""));
  response_fini(&r);
  request(s.addr, "GET", "/v1/runs/1/timeline.svg", NULL, &r);
  assert_int_equal(r.code, 200);
  assert_true(tp_has(r.head, "image/svg+xml"));
  assert_true(tp_has(r.body, "<svg"));
  response_fini(&r);
  request(s.addr, "GET", "/v1/devices", NULL, &r);
  assert_int_equal(r.code, 200);
  assert_true(tp_has(r.body, "\"device\": \"cpu\""));
  response_fini(&r);
  request(s.addr, "GET", "/metrics", NULL, &r);
  assert_int_equal(r.code, 200);
  assert_true(tp_has(r.body, "weft_runs_total{status=\"succeeded\"} 1\n"));
  assert_true(tp_has(r.body, "weft_submission_seconds_count 1\n"));
  assert_true(tp_has(r.body, "weft_nodes_run_total 1\n"));
  assert_true(tp_has(r.body, "\nprocess_resident_memory_bytes "));
  assert_false(tp_has(r.body, "\nprocess_resident_memory_bytes 0\n"));
  assert_true(tp_has(r.body, "\nprocess_open_fds "));
  response_fini(&r);
  request(s.addr, "GET", "/", NULL, &r);
  assert_int_equal(r.code, 200);
  assert_true(tp_has(r.head, "text/html"));
  assert_true(tp_has(r.body, "<title>weft serve</title>"));
  response_fini(&r);
  /* What does not exist, and methods a resource does not take. */
  static const char *const missing[][3] = {
      {"GET", "/v1/runs/2", "no run 2"},          {"GET", "/v1/runs/x", "a number"},
      {"GET", "/v1/runs/1/nothing", "no such"},    {"GET", "/nowhere", "no such resource"},
      {"DELETE", "/v1/runs/77", "no run 77"}};
  for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
    request(s.addr, missing[i][0], missing[i][1], NULL, &r);
    assert_int_equal(r.code, 404);
    assert_true(tp_has(r.body, missing[i][2]));
    response_fini(&r);
  }
  static const char *const wrong[][2] = {{"PUT", "/v1/runs"}, {"POST", "/v1/devices"}, {"DELETE", "/metrics"},
                                         {"POST", "/v1/runs/1/trace"}};
  for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
    request(s.addr, wrong[i][0], wrong[i][1], NULL, &r);
    assert_int_equal(r.code, 405);
    response_fini(&r);
  }
  /* A finished run cannot be cancelled. */
  request(s.addr, "DELETE", "/v1/runs/1", NULL, &r);
  assert_int_equal(r.code, 409);
  assert_true(tp_has(r.body, "already finished"));
  response_fini(&r);
  free(server_stop(&s));
}

/* A run that fails keeps its error and the failing node; a program that does not load has no
 * trace. --keep bounds what is kept. */
static void test_failures_and_keep(void **state) {
  (void)state;
  server s;
  server_start(&s, (const char *[]){"--keep", "2", NULL});
  response r;
  request(s.addr, "POST", "/v1/runs?wait=1&name=bad.weft", PROG_BAD, &r);
  assert_int_equal(r.code, 200);
  assert_int_equal(json_int(r.body, "exit_code"), 2);
  char *st = json_str(r.body, "status"), *errs = json_str(r.body, "errors");
  assert_string_equal(st, "invalid");
  assert_true(tp_has(errs, "bad.weft" PROG_BAD_WHERE));
  free(st);
  free(errs);
  response_fini(&r);
  request(s.addr, "GET", "/v1/runs/1/timeline.svg", NULL, &r);
  assert_int_equal(r.code, 404);
  assert_true(tp_has(r.body, "ended before a run"));
  response_fini(&r);
  /* A node that fails while running: potrf of a matrix that is not positive definite. */
  request(s.addr, "POST", "/v1/runs?wait=1&name=np.weft",
          "tensor a: f64[4, 4] = full(-1)\npotrf(a)\nprint a\n", &r);
  assert_int_equal(r.code, 200);
  assert_int_equal(json_int(r.body, "exit_code"), 1);
  assert_true(tp_has(r.body, "\"status\": \"failed\""));
  assert_true(tp_has(r.body, "\"failed_node\": {"));
  response_fini(&r);
  request(s.addr, "POST", "/v1/runs?wait=1", PROG_OK, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 0);
  response_fini(&r);
  /* Three finished, two kept: the oldest went. */
  request(s.addr, "GET", "/v1/runs/1", NULL, &r);
  assert_int_equal(r.code, 404);
  response_fini(&r);
  request(s.addr, "GET", "/v1/runs", NULL, &r);
  assert_true(tp_has(r.body, "\"kept\": 2"));
  response_fini(&r);
  request(s.addr, "GET", "/metrics", NULL, &r);
  assert_true(tp_has(r.body, "weft_runs_total{status=\"invalid\"} 1\n"));
  assert_true(tp_has(r.body, "weft_runs_total{status=\"failed\"} 1\n"));
  assert_true(tp_has(r.body, "weft_runs_total{status=\"succeeded\"} 1\n"));
  response_fini(&r);
  free(server_stop(&s));
}

static void test_concurrent_clients(void **state) {
  (void)state;
  enum { N = 12 };
  server s;
  server_start(&s, (const char *[]){"--max-inflight", "32", NULL});
  /* Every client sends before any reads: the server holds them all at once. Each asks for
   * its own N, and must get its own answer. */
  int fd[N];
  for (int i = 0; i < N; i++) {
    fd[i] = client_connect(s.addr);
    assert_true(fd[i] >= 0);
    char target[128];
    snprintf(target, sizeof target, "/v1/runs?wait=1&format=text&name=c%d.weft&define=N%%3D%d", i, i + 1);
    send_http(fd[i], "POST", target, PROG_OK);
  }
  free(tp_write("conc.weft", PROG_OK));
  for (int i = N - 1; i >= 0; i--) {
    response r;
    read_response(fd[i], &r);
    assert_int_equal(r.code, 200);
    assert_int_equal(json_int(r.body, "exit_code"), 0);
    char name[64], def[32];
    snprintf(name, sizeof name, "\"name\": \"c%d.weft\"", i);
    assert_true(tp_has(r.body, name));
    /* The outputs equal a local run with the same N. */
    snprintf(def, sizeof def, "N=%d", i + 1);
    tp_out ref;
    tp_run(&ref, NULL, NULL, T, (const char *[]){"run", "conc.weft", "-D", def, NULL});
    char *out = json_str(r.body, "output");
    assert_string_equal(out, ref.out);
    free(out);
    tp_out_fini(&ref);
    response_fini(&r);
    close(fd[i]);
  }
  free(server_stop(&s));
}

/* Requests sent one after the other without waiting are answered in order; a ?wait=1 answer
 * holds back the requests behind it, and bytes sent meanwhile beyond 64 KiB stop the reading
 * until it is out. */
static void test_pipelined_requests(void **state) {
  (void)state;
  server s;
  server_start(&s, NULL);
  int fd = client_connect(s.addr);
  assert_true(fd >= 0);
  send_http(fd, "POST", "/v1/runs?wait=1&name=one.weft", PROG_OK);
  send_http(fd, "POST", "/v1/runs?wait=1&name=two.weft", PROG_BAD);
  send_http(fd, "GET", "/v1/runs", NULL);
  response r;
  read_response(fd, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 0);
  assert_true(tp_has(r.body, "one.weft"));
  response_fini(&r);
  read_response(fd, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 2);
  assert_true(tp_has(r.body, "two.weft" PROG_BAD_WHERE));
  response_fini(&r);
  read_response(fd, &r);
  assert_true(tp_has(r.body, "\"kept\": 2"));
  response_fini(&r);
  size_t big_len = 200000;
  char *big = malloc(big_len + sizeof PROG_OK);
  memset(big, '\n', big_len);
  memcpy(big, "# padding", 9);
  memcpy(big + big_len, PROG_OK, sizeof PROG_OK);
  send_http(fd, "POST", "/v1/runs?wait=1&name=slow.weft&define=K%3D20&format=text", PROG_SLOW);
  send_http(fd, "POST", "/v1/runs?wait=1&name=big.weft", big);
  free(big);
  read_response(fd, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 0);
  assert_true(tp_has(r.body, "slow.weft"));
  response_fini(&r);
  read_response(fd, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 0);
  assert_true(tp_has(r.body, "big.weft"));
  response_fini(&r);
  close(fd);
  free(server_stop(&s));
}

static void test_ipv6(void **state) {
  (void)state;
  int probe = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  int usable = probe >= 0 && bind(probe, (struct sockaddr *)&sa, sizeof sa) == 0;
  if (probe >= 0) close(probe);
  if (!usable) skip(); /* no IPv6 loopback on this machine */
  server s;
  server_start(&s, (const char *[]){"--listen", "[::1]:0", NULL});
  assert_true(strncmp(s.addr, "[::1]:", 6) == 0);
  free(tp_write("v6.weft", PROG_OK));
  tp_out r;
  tp_expect(&r, 0, NULL, (const char *[]){"submit", "v6.weft", "--to", s.addr, NULL});
  assert_true(tp_has(r.out, "f32[8, 8]"));
  tp_out_fini(&r);
  free(server_stop(&s));
}

static void test_malformed_requests(void **state) {
  (void)state;
  server s;
  server_start(&s, NULL);
  static const char *bad[] = {"SUBMIT 10\n\n0123456789", "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                              "POST /v1/runs HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                              "\x01\x02\x03\x04\x05\x06\x07\r\n\r\n",
                              "POST /v1/runs HTTP/1.1\r\nContent-Length: ten\r\n\r\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int fd = client_connect(s.addr);
    assert_true(fd >= 0);
    send_str(fd, bad[i], strlen(bad[i]));
    response r;
    read_response(fd, &r);
    assert_int_equal(r.code, 400);
    assert_true(r.close);
    assert_true(tp_has(r.body, "malformed HTTP request"));
    response_fini(&r);
    /* The framing is lost: the server ends the connection. */
    assert_true(closed_by_server(fd, T));
    close(fd);
  }
  /* Headers that never end (431), a URL too long (414), a bad query (400, the connection
   * goes on). */
  int fd = client_connect(s.addr);
  size_t n = 100000;
  char *junk = malloc(n);
  memset(junk, 'x', n);
  memcpy(junk, "GET / HTTP/1.1\r\nX-Long: ", 24);
  send_str(fd, junk, n);
  response r;
  read_response(fd, &r);
  assert_int_equal(r.code, 431);
  response_fini(&r);
  close(fd);
  fd = client_connect(s.addr);
  memset(junk, 'x', 10000);
  memcpy(junk, "GET /", 5);
  memcpy(junk + 10000, " HTTP/1.1\r\n\r\n", 13);
  send_str(fd, junk, 10013);
  read_response(fd, &r);
  assert_int_equal(r.code, 414);
  response_fini(&r);
  close(fd);
  free(junk);
  fd = client_connect(s.addr);
  send_http(fd, "POST", "/v1/runs?wait=1&define=%zz", PROG_OK);
  read_response(fd, &r);
  assert_int_equal(r.code, 400);
  assert_true(tp_has(r.body, "bad %-escape"));
  assert_false(r.close);
  response_fini(&r);
  send_http(fd, "POST", "/v1/runs?colour=red", PROG_OK);
  read_response(fd, &r);
  assert_int_equal(r.code, 400);
  assert_true(tp_has(r.body, "unknown query parameter 'colour'"));
  response_fini(&r);
  send_http(fd, "POST", "/v1/runs?define=N", PROG_OK);
  read_response(fd, &r);
  assert_int_equal(r.code, 400);
  assert_true(tp_has(r.body, "not NAME=VALUE"));
  response_fini(&r);
  send_http(fd, "POST", "/v1/runs?format=xml", PROG_OK);
  read_response(fd, &r);
  assert_int_equal(r.code, 400);
  response_fini(&r);
  /* The server still serves, on this connection too. */
  send_http(fd, "POST", "/v1/runs?wait=1", PROG_OK);
  read_response(fd, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 0);
  response_fini(&r);
  close(fd);
  free(server_stop(&s));
}

static void test_oversized_submission(void **state) {
  (void)state;
  server s;
  server_start(&s, (const char *[]){"--max-bytes", "1000", "--max-repeat", "5", "--max-nodes", "10", NULL});
  /* Too large: refused before its body is read, and the connection ends. */
  char *big = malloc(5001);
  memset(big, '#', 5000);
  big[5000] = '\0';
  int fd = client_connect(s.addr);
  send_http(fd, "POST", "/v1/runs?wait=1&name=big.weft", big);
  free(big);
  response r;
  read_response(fd, &r);
  assert_int_equal(r.code, 413);
  assert_true(tp_has(r.body, "5000 bytes"));
  assert_true(tp_has(r.body, "at most 1000"));
  assert_true(r.close);
  response_fini(&r);
  close(fd);
  /* A graph over --max-nodes is an error in the program. */
  request(s.addr, "POST", "/v1/runs?wait=1&name=many.weft&define=K%3D6", PROG_SLOW, &r);
  assert_int_equal(r.code, 200);
  assert_int_equal(json_int(r.body, "exit_code"), 2);
  assert_true(tp_has(r.body, "many.weft:"));
  assert_true(tp_has(r.body, "max_nodes (10)"));
  response_fini(&r);
  request(s.addr, "POST", "/v1/runs?wait=1&repeat=6", PROG_OK, &r);
  assert_int_equal(r.code, 400);
  assert_true(tp_has(r.body, "--max-repeat"));
  response_fini(&r);
  /* weft submit reports a refusal with exit 2. */
  char *path = tp_write("big.weft", "");
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 200; i++) fputs("# a comment line\n", f);
  fclose(f);
  free(path);
  tp_out o;
  tp_expect(&o, 2, NULL, (const char *[]){"submit", "big.weft", "--to", s.addr, NULL});
  assert_true(tp_has(o.err, "at most 1000"));
  tp_out_fini(&o);
  free(server_stop(&s));
}

/* The in-flight bound (429), cancelling a run (DELETE), and weft submit retrying while the
 * server is busy. */
/* The value of the sample `name` (with its labels) in a Prometheus text answer; fails the test
 * when it is missing. */
static double metric(const char *text, const char *name) {
  size_t n = strlen(name);
  for (const char *p = text; (p = strstr(p, name)) != NULL; p += n)
    if ((p == text || p[-1] == '\n') && p[n] == ' ') return strtod(p + n + 1, NULL);
  fail_msg("no metric %s in:\n%s", name, text);
  return 0;
}

/* --max-running 1: admitted submissions beyond the one running wait in the queue, first come
 * first served; DELETE takes a queued one out at once (it never runs); the queue's depth is in
 * the listing and in /metrics. */
static void test_queue(void **state) {
  (void)state;
  server s;
  server_start(&s, (const char *[]){"--max-running", "1", NULL});
  response r;
  long id[3];
  for (int i = 0; i < 3; i++) {
    request(s.addr, "POST", i == 0 ? "/v1/runs?name=slow.weft&define=K%3D20000" : "/v1/runs?name=next.weft&define=K%3D2",
            PROG_SLOW, &r);
    assert_int_equal(r.code, 202);
    id[i] = json_int(r.body, "id");
    assert_true(tp_has(r.body, i == 0 ? "\"status\": \"running\"" : "\"status\": \"queued\""));
    response_fini(&r);
  }
  request(s.addr, "GET", "/v1/runs", NULL, &r);
  assert_true(tp_has(r.body, "\"in_progress\": 3, \"running\": 1, \"queued\": 2"));
  response_fini(&r);
  request(s.addr, "GET", "/metrics", NULL, &r);
  assert_true(metric(r.body, "weft_runs_queued") == 2);
  assert_true(metric(r.body, "weft_runs_running") == 1);
  response_fini(&r);
  /* The last one leaves the queue at once, without running. */
  char target[64];
  snprintf(target, sizeof target, "/v1/runs/%ld", id[2]);
  request(s.addr, "DELETE", target, NULL, &r);
  assert_int_equal(r.code, 202);
  response_fini(&r);
  wait_done(s.addr, id[2], &r);
  assert_true(tp_has(r.body, "\"status\": \"cancelled\""));
  assert_int_equal(json_int(r.body, "runs_done"), 0);
  response_fini(&r);
  request(s.addr, "GET", "/v1/runs/1", NULL, &r);
  assert_true(tp_has(r.body, "\"status\": \"running\""));
  response_fini(&r);
  /* Cancelling the running one gives its slot to the next in the queue, which runs to its end. */
  snprintf(target, sizeof target, "/v1/runs/%ld", id[0]);
  request(s.addr, "DELETE", target, NULL, &r);
  response_fini(&r);
  wait_done(s.addr, id[1], &r);
  if (!tp_has(r.body, "\"status\": \"succeeded\"")) fail_msg("the queued run: %s", r.body);
  assert_int_equal(json_int(r.body, "runs_done"), 1);
  response_fini(&r);
  request(s.addr, "GET", "/metrics", NULL, &r);
  assert_true(metric(r.body, "weft_runs_queued") == 0);
  assert_true(metric(r.body, "weft_runs_running") == 0);
  assert_true(tp_has(r.body, "weft_runs_total{status=\"cancelled\"} 2\n"));
  response_fini(&r);
  free(server_stop(&s));
  tp_out o;
  tp_expect(&o, 2, NULL, (const char *[]){"serve", "--max-running", "0", NULL});
  assert_true(tp_has(o.err, "--max-running"));
  tp_out_fini(&o);
}

static void test_busy_and_cancel(void **state) {
  (void)state;
  free(tp_write("busy.weft", PROG_OK));
  server s;
  server_start(&s, (const char *[]){"--max-inflight", "1", NULL});
  response r;
  request(s.addr, "POST", "/v1/runs?name=long.weft&define=K%3D20000", PROG_SLOW, &r);
  assert_int_equal(r.code, 202);
  long id = json_int(r.body, "id");
  response_fini(&r);
  request(s.addr, "POST", "/v1/runs?wait=1", PROG_OK, &r);
  assert_int_equal(r.code, 429);
  assert_true(tp_has(r.head, "Retry-After: 1\r\n"));
  assert_true(tp_has(r.body, "busy"));
  response_fini(&r);
  tp_out o;
  tp_expect(&o, 1, NULL, (const char *[]){"submit", "--wait", "0", "busy.weft", "--to", s.addr, NULL});
  assert_true(tp_has(o.err, "busy"));
  tp_out_fini(&o);
  char target[64];
  snprintf(target, sizeof target, "/v1/runs/%ld", id);
  request(s.addr, "DELETE", target, NULL, &r);
  assert_int_equal(r.code, 202);
  response_fini(&r);
  wait_done(s.addr, id, &r);
  char *st = json_str(r.body, "status"), *errs = json_str(r.body, "errors");
  assert_string_equal(st, "cancelled");
  assert_true(tp_has(errs, "cancelled (DELETE)"));
  free(st);
  free(errs);
  response_fini(&r);
  /* weft submit retries while busy: the slot is taken again, then freed in a moment. */
  request(s.addr, "POST", "/v1/runs?define=K%3D20000", PROG_SLOW, &r);
  id = json_int(r.body, "id");
  response_fini(&r);
  tp_proc bg;
  tp_spawn(&bg, (const char *[]){"submit", "--wait", "30", "busy.weft", "--to", s.addr, NULL});
  usleep(400000);
  snprintf(target, sizeof target, "/v1/runs/%ld", id);
  request(s.addr, "DELETE", target, NULL, &r);
  response_fini(&r);
  char *bg_err = NULL;
  int bg_code = tp_stop(&bg, 0, T, &bg_err);
  if (bg_code != 0) fail_msg("weft submit --wait exited %d: %s", bg_code, bg_err);
  free(bg_err);
  request(s.addr, "GET", "/metrics", NULL, &r);
  assert_true(tp_has(r.body, "weft_runs_total{status=\"cancelled\"} 2\n"));
  assert_false(tp_has(r.body, "weft_runs_refused_busy_total 0\n"));
  response_fini(&r);
  free(server_stop(&s));
}

static void test_disconnect_mid_run(void **state) {
  (void)state;
  server s;
  server_start(&s, NULL);
  /* Several clients wait for a long run and leave at once: the server cancels their runs
   * instead of holding them, and goes on serving. */
  for (int i = 0; i < 4; i++) {
    int fd = client_connect(s.addr);
    send_http(fd, "POST", "/v1/runs?wait=1&define=K%3D20000", PROG_SLOW);
    usleep(50000);
    close(fd);
  }
  double t0 = tp_now();
  response r;
  for (long id = 1; id <= 4; id++) {
    wait_done(s.addr, id, &r);
    assert_true(tp_has(r.body, "\"status\": \"cancelled\""));
    assert_true(tp_has(r.body, "the client left"));
    response_fini(&r);
  }
  request(s.addr, "POST", "/v1/runs?wait=1", PROG_OK, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 0);
  response_fini(&r);
  free(server_stop(&s));
  assert_true(tp_now() - t0 < 15); /* no abandoned 20 s run was waited for */
}

/* A client that trickles a request (slowloris) is answered 408 and closed at
 * --request-timeout; one that sends half a body and leaves costs nothing; the server serves on. */
static void test_slow_and_truncated_clients(void **state) {
  (void)state;
  server s;
  server_start(&s, (const char *[]){"--request-timeout", "0.5", "--idle-timeout", "30", NULL});
  int fd = client_connect(s.addr);
  static const char head[] = "POST /v1/runs HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  send_str(fd, head, sizeof head - 1);
  double t0 = tp_now();
  response r;
  int answered = 0;
  for (int i = 0; i < 200 && !answered; i++) {
    usleep(50000);
    if (send(fd, "a", 1, MSG_NOSIGNAL) != 1) break; /* the server may have closed already */
    struct pollfd p = {fd, POLLIN, 0};
    answered = poll(&p, 1, 0) > 0;
  }
  read_response(fd, &r);
  assert_int_equal(r.code, 408);
  assert_true(tp_has(r.body, "--request-timeout"));
  assert_true(r.close);
  response_fini(&r);
  assert_true(closed_by_server(fd, T));
  assert_true(tp_now() - t0 < 20);
  close(fd);
  for (int i = 0; i < 3; i++) { /* half a body, then gone */
    fd = client_connect(s.addr);
    static const char part[] = "POST /v1/runs?wait=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nparam N";
    send_str(fd, part, sizeof part - 1);
    close(fd);
  }
  request(s.addr, "POST", "/v1/runs?wait=1", PROG_OK, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 0);
  response_fini(&r);
  request(s.addr, "GET", "/metrics", NULL, &r);
  assert_true(tp_has(r.body, "weft_runs_total{status=\"succeeded\"} 1\n")); /* the halves never ran */
  assert_true(tp_has(r.body, "weft_bytes_copied_total{link=\"h2d\"} 0\n"));
  response_fini(&r);
  free(server_stop(&s));
}

static void test_idle_timeout(void **state) {
  (void)state;
  server s;
  server_start(&s, (const char *[]){"--idle-timeout", "0.3", NULL});
  int fd = client_connect(s.addr);
  send_str(fd, "POST /v1/runs HTTP/1.1\r\nContent-Le", 34);
  assert_true(closed_by_server(fd, T));
  close(fd);
  char *err = server_stop(&s);
  assert_true(tp_has(err, "idle"));
  free(err);
}

static void test_sigterm_finishes_runs(void **state) {
  (void)state;
  server s;
  server_start(&s, (const char *[]){"--grace", "60", NULL});
  int fd = client_connect(s.addr);
  send_http(fd, "POST", "/v1/runs?wait=1&name=slow.weft&define=K%3D200", PROG_SLOW); /* 400 products */
  usleep(300000);
  kill(s.proc.pid, SIGTERM);
  response r;
  read_response(fd, &r);
  assert_int_equal(r.code, 200);
  assert_int_equal(json_int(r.body, "exit_code"), 0); /* it ran to the end */
  assert_true(r.close);
  response_fini(&r);
  assert_true(closed_by_server(fd, T));
  close(fd);
  char *err = NULL;
  assert_int_equal(tp_stop(&s.proc, 0, T, &err), 0);
  assert_true(tp_has(err, "SIGTERM"));
  free(err);
  /* Nobody listens any more. */
  int again = client_connect(s.addr);
  assert_int_equal(again, -1);
}

static void test_sigterm_cancels_after_grace(void **state) {
  (void)state;
  server s;
  server_start(&s, (const char *[]){"--grace", "0.2", NULL});
  int fd = client_connect(s.addr);
  send_http(fd, "POST", "/v1/runs?wait=1&name=long.weft&define=K%3D20000", PROG_SLOW);
  int idle = client_connect(s.addr); /* an idle connection is simply closed */
  usleep(200000);
  double t0 = tp_now();
  kill(s.proc.pid, SIGINT);
  response r;
  read_response(fd, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 1);
  assert_true(tp_has(r.body, "\"status\": \"cancelled\""));
  assert_true(tp_has(r.body, "shutting down"));
  response_fini(&r);
  assert_true(closed_by_server(idle, T));
  close(idle);
  close(fd);
  char *err = NULL;
  assert_int_equal(tp_stop(&s.proc, 0, T, &err), 0);
  assert_true(tp_now() - t0 < 30);
  assert_true(tp_has(err, "cancelling"));
  free(err);
}

/* Submissions may not touch the server's files unless it allows them. */
static void test_files_policy(void **state) {
  (void)state;
  static const char save[] = "tensor x: f32[2, 2] = ones\nsave x to \"saved.bin\"\n";
  server s;
  server_start(&s, NULL);
  response r;
  request(s.addr, "POST", "/v1/runs?wait=1&name=save.weft", save, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 2);
  assert_true(tp_has(r.body, "save.weft:2:"));
  response_fini(&r);
  free(server_stop(&s));
  char path[300];
  snprintf(path, sizeof path, "%s/saved.bin", tp_dir());
  assert_int_equal(access(path, F_OK), -1);
  server_start(&s, (const char *[]){"--allow-files", NULL});
  request(s.addr, "POST", "/v1/runs?wait=1&name=save.weft", save, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 0);
  response_fini(&r);
  free(server_stop(&s));
  assert_int_equal(access(path, F_OK), 0); /* relative to the server's directory */
}

static void test_unix_socket(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "unix:%s/serve.sock", tp_dir());
  /* A stale socket file from a server that died is replaced. */
  int stale = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  assert_true(strlen(path + 5) < sizeof sa.sun_path);
  memcpy(sa.sun_path, path + 5, strlen(path + 5) + 1);
  assert_int_equal(bind(stale, (struct sockaddr *)&sa, sizeof sa), 0);
  close(stale);
  server s;
  server_start(&s, (const char *[]){"--listen", path, NULL});
  assert_string_equal(s.addr, path);
  char *p = tp_write("u.weft", PROG_OK);
  free(p);
  tp_out r;
  tp_expect(&r, 0, NULL, (const char *[]){"submit", "u.weft", "--to", path, NULL});
  tp_out_fini(&r);
  /* A second server on the same live socket is refused. */
  tp_expect(&r, 1, NULL, (const char *[]){"serve", "--listen", path, NULL});
  assert_true(tp_has(r.err, "cannot listen"));
  tp_out_fini(&r);
  free(server_stop(&s));
  assert_int_equal(access(path + 5, F_OK), -1); /* removed on exit */
}

static void test_addresses_and_usage(void **state) {
  (void)state;
  tp_out r;
  tp_expect(&r, 2, NULL, (const char *[]){"serve", "--listen", "0.0.0.0:0", NULL});
  assert_true(tp_has(r.err, "--allow-remote"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"serve", "--listen", "10.11.12.13:80", NULL});
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"serve", "--listen", "example.com:80", NULL});
  assert_true(tp_has(r.err, "numeric"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"serve", "--max-inflight", "0", NULL});
  tp_out_fini(&r);
  tp_expect(&r, 0, NULL, (const char *[]){"serve", "--help", NULL});
  assert_true(tp_has(r.out, "Usage: weft serve"));
  tp_out_fini(&r);
  char *p = tp_write("s.weft", PROG_OK);
  free(p);
  tp_expect(&r, 2, NULL, (const char *[]){"submit", "s.weft", NULL});
  assert_true(tp_has(r.err, "--to"));
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"submit", "s.weft", "--to", "nonsense", NULL});
  tp_out_fini(&r);
  tp_expect(&r, 2, NULL, (const char *[]){"submit", "missing.weft", "--to", "127.0.0.1:9", NULL});
  tp_out_fini(&r);
  /* Nothing listens on a port we just released. */
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  assert_int_equal(bind(probe, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t sl = sizeof sa;
  getsockname(probe, (struct sockaddr *)&sa, &sl);
  close(probe);
  char to[64];
  snprintf(to, sizeof to, "127.0.0.1:%d", ntohs(sa.sin_port));
  tp_expect(&r, 1, NULL, (const char *[]){"submit", "s.weft", "--to", to, NULL});
  assert_true(tp_has(r.err, "cannot connect"));
  tp_out_fini(&r);
}

/* Memory admission: a submission whose tensors need more than --max-memory is refused (413),
 * one that would push those in progress over --memory-budget too (503), before anything is
 * allocated; --time-limit cancels a submission that runs too long. The server serves on. */
static void test_admission_and_time_limit(void **state) {
  (void)state;
  server s;
  server_start(&s, (const char *[]){"--max-memory", "4MiB", "--memory-budget", "5MiB", "--time-limit", "1", NULL});
  response r;
  /* PROG_SLOW holds three 1 MiB tensors (a and b are assigned in place). */
  request(s.addr, "POST", "/v1/runs?name=long.weft&define=K%3D20000", PROG_SLOW, &r);
  assert_int_equal(r.code, 202);
  assert_true(tp_has(r.body, "\"status\": \"running\""));
  response_fini(&r);
  request(s.addr, "POST", "/v1/runs?wait=1&name=second.weft&define=K%3D2", PROG_SLOW, &r);
  assert_int_equal(r.code, 503);
  assert_true(tp_has(r.head, "Retry-After: 1\r\n"));
  assert_true(tp_has(r.body, "second.weft needs 3.0 MiB of host memory"));
  assert_true(tp_has(r.body, "--memory-budget"));
  response_fini(&r);
  request(s.addr, "POST", "/v1/runs?wait=1&name=huge.weft", "tensor x: f32[4096, 4096] = ones\nprint x\n", &r);
  assert_int_equal(r.code, 413);
  assert_true(tp_has(r.body, "huge.weft needs 64.0 MiB of host memory"));
  assert_true(tp_has(r.body, "--max-memory"));
  response_fini(&r);
  /* The long one is cancelled at the time limit; then the second fits. */
  wait_done(s.addr, 1, &r);
  assert_true(tp_has(r.body, "\"status\": \"cancelled\""));
  assert_true(tp_has(r.body, "--time-limit"));
  response_fini(&r);
  request(s.addr, "POST", "/v1/runs?wait=1&name=second.weft&define=K%3D2", PROG_SLOW, &r);
  assert_int_equal(r.code, 200);
  assert_int_equal(json_int(r.body, "exit_code"), 0);
  response_fini(&r);
  request(s.addr, "GET", "/metrics", NULL, &r);
  assert_true(tp_has(r.body, "weft_runs_refused_memory_total 2\n"));
  assert_true(tp_has(r.body, "weft_runs_timed_out_total 1\n"));
  assert_true(tp_has(r.body, "weft_memory_reserved_bytes{memory=\"host\"} 0\n"));
  assert_true(tp_has(r.body, "weft_memory_budget_bytes{memory=\"host\"} 5242880\n"));
  /* What the host held for the runs' tensors: at least the three 1 MiB tensors of one run at
   * its peak, and nothing once every run is over (their graphs are gone). */
  assert_true(metric(r.body, "weft_device_memory_peak_bytes{device=\"cpu\"}") >= 3 << 20);
  assert_int_equal(metric(r.body, "weft_device_memory_in_use_bytes{device=\"cpu\"}"), 0);
  assert_true(metric(r.body, "weft_device_memory_total_bytes{device=\"cpu\"}") > 0);
  response_fini(&r);
  request(s.addr, "GET", "/v1/devices", NULL, &r);
  assert_true(tp_has(r.body, "\"memory_in_use_bytes\": 0, \"memory_peak_bytes\": "));
  response_fini(&r);
  /* Refusals keep no record: runs 2 and 3 do not exist. */
  request(s.addr, "GET", "/v1/runs/2", NULL, &r);
  assert_int_equal(r.code, 404);
  response_fini(&r);
  free(server_stop(&s));
  tp_out o;
  tp_expect(&o, 2, NULL, (const char *[]){"serve", "--max-memory", "2GiB", "--memory-budget", "1GiB", NULL});
  assert_true(tp_has(o.err, "more than the --memory-budget"));
  tp_out_fini(&o);
  tp_expect(&o, 2, NULL, (const char *[]){"serve", "--gpu-memory-budget", "lots", NULL});
  assert_true(tp_has(o.err, "--gpu-memory-budget"));
  tp_out_fini(&o);
}

/* The server's open descriptors and resident memory (kB), from /proc. */
static void server_usage(const server *s, long *fds, long *rss_kb) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/fd", (int)s->proc.pid);
  *fds = 0;
  DIR *d = opendir(path);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') (*fds)++;
  closedir(d);
  snprintf(path, sizeof path, "/proc/%d/status", (int)s->proc.pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  *rss_kb = -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %ld kB", rss_kb) == 1) break;
  fclose(f);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* 1000 submissions from 50 clients at once, each a keep-alive connection sending its next
 * request when its answer is in: every one answered with its own result, and the server holds
 * no more descriptors, and not much more memory, afterwards than before. Prints the latency's
 * median and 99th percentile (no bound asserted: timings belong to benchmarks). */
static void test_many_clients(void **state) {
  (void)state;
  enum { CLIENTS = 50, TOTAL = 1000 };
  server s;
  server_start(&s, (const char *[]){"--max-inflight", "64", "--quiet", NULL});
  response r;
  request(s.addr, "POST", "/v1/runs?wait=1", PROG_OK, &r); /* warm: the first run's setup */
  response_fini(&r);
  long fds0, rss0, fds1, rss1;
  server_usage(&s, &fds0, &rss0);
  struct {
    int fd, n;
    double t0;
    char buf[8192];
    size_t len;
  } *c = calloc(CLIENTS, sizeof *c);
  double *lat = calloc(TOTAL, sizeof *lat);
  int sent = 0, done = 0;
  char req[512];
  int rlen = snprintf(req, sizeof req,
                      "POST /v1/runs?wait=1&format=text HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n%s",
                      strlen(PROG_OK), PROG_OK);
  for (int i = 0; i < CLIENTS; i++) {
    c[i].fd = client_connect(s.addr);
    assert_true(c[i].fd >= 0);
    send_str(c[i].fd, req, (size_t)rlen);
    c[i].t0 = tp_now();
    sent++;
  }
  double deadline = tp_now() + 10 * T;
  while (done < TOTAL) {
    if (tp_now() > deadline) fail_msg("only %d of %d answers came", done, TOTAL);
    struct pollfd p[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) p[i] = (struct pollfd){c[i].fd, POLLIN, 0};
    if (poll(p, CLIENTS, 1000) <= 0) continue;
    for (int i = 0; i < CLIENTS; i++) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t k = recv(c[i].fd, c[i].buf + c[i].len, sizeof c[i].buf - 1 - c[i].len, 0);
      if (k <= 0) fail_msg("client %d: the server closed the connection (%zd)", i, k);
      c[i].len += (size_t)k;
      c[i].buf[c[i].len] = '\0';
      char *end = strstr(c[i].buf, "\r\n\r\n");
      if (end == NULL) continue;
      const char *cl = strcasestr(c[i].buf, "\r\ncontent-length: ");
      assert_non_null(cl);
      size_t body = (size_t)strtoull(cl + 18, NULL, 10), need = (size_t)(end + 4 - c[i].buf) + body;
      if (c[i].len < need) continue;
      assert_true(strncmp(c[i].buf, "HTTP/1.1 200 ", 13) == 0);
      assert_true(tp_has(c[i].buf, "\"exit_code\": 0"));
      assert_true(tp_has(c[i].buf, "f32[8, 8]"));
      lat[done++] = tp_now() - c[i].t0;
      memmove(c[i].buf, c[i].buf + need, c[i].len - need);
      c[i].len -= need;
      if (sent < TOTAL) {
        send_str(c[i].fd, req, (size_t)rlen);
        c[i].t0 = tp_now();
        sent++;
      }
    }
  }
  for (int i = 0; i < CLIENTS; i++) close(c[i].fd);
  /* The server notices the closes; then it holds what it held before. */
  double until = tp_now() + T;
  do {
    usleep(50000);
    server_usage(&s, &fds1, &rss1);
  } while (fds1 > fds0 && tp_now() < until);
  qsort(lat, TOTAL, sizeof *lat, cmp_double);
  print_message("%d submissions from %d clients: latency p50 %.2f ms, p99 %.2f ms; server descriptors %ld -> %ld, "
                "resident %ld -> %ld kB\n",
                TOTAL, CLIENTS, lat[TOTAL / 2] * 1e3, lat[TOTAL * 99 / 100] * 1e3, fds0, fds1, rss0, rss1);
  assert_true(fds1 <= fds0); /* fds0 may still count the warm-up's connection */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  /* The --keep 100 records, and the allocator's slack. (Under the sanitizers freed memory is
   * held in quarantine, and LeakSanitizer checks the server instead.) */
  assert_true(rss1 - rss0 < 64 * 1024);
#endif
  request(s.addr, "GET", "/metrics", NULL, &r);
  assert_true(tp_has(r.body, "weft_runs_total{status=\"succeeded\"} 1001\n"));
  response_fini(&r);
  free(c);
  free(lat);
  free(server_stop(&s));
}

/* --token-file: every request but the page needs 'Authorization: Bearer TOKEN' (401 and
 * WWW-Authenticate otherwise); weft submit sends it; a remote listener needs one; the token file
 * must be its owner's alone and the token at least 16 characters. */
static void test_token(void **state) {
  (void)state;
  char *path = tp_write("token", "  0123456789abcdef-secret \n");
  assert_int_equal(chmod(path, 0600), 0);
  free(tp_write("t.weft", PROG_OK));
  server s;
  server_start(&s, (const char *[]){"--token-file", "token", NULL});
  static const char *const auth[] = {NULL, "Authorization: Bearer wrong-but-long-enough\r\n",
                                     "Authorization: Bearer 0123456789abcdef-secre\r\n",
                                     "Authorization: Bearer 0123456789abcdef-secret\r\n"};
  for (int i = 0; i < 4; i++) {
    int fd = client_connect(s.addr);
    send_http_with(fd, "GET", "/v1/runs", auth[i], NULL);
    response r;
    read_response(fd, &r);
    assert_int_equal(r.code, i == 3 ? 200 : 401);
    if (i < 3) assert_true(tp_has(r.head, "WWW-Authenticate: Bearer"));
    response_fini(&r);
    close(fd);
  }
  response r;
  request(s.addr, "GET", "/", NULL, &r); /* the page holds no secret */
  assert_int_equal(r.code, 200);
  response_fini(&r);
  tp_out o;
  tp_expect(&o, 0, NULL, (const char *[]){"submit", "t.weft", "--to", s.addr, "--token-file", "token", NULL});
  assert_true(tp_has(o.out, "f32[8, 8]"));
  tp_out_fini(&o);
  tp_expect(&o, 2, NULL, (const char *[]){"submit", "t.weft", "--to", s.addr, NULL});
  assert_true(tp_has(o.err, "answered 401"));
  tp_out_fini(&o);
  free(server_stop(&s));
  /* Refused: a remote listener without a token; a token others can read; a short one. */
  tp_expect(&o, 2, NULL, (const char *[]){"serve", "--listen", "0.0.0.0:0", "--allow-remote", NULL});
  assert_true(tp_has(o.err, "--token-file"));
  tp_out_fini(&o);
  assert_int_equal(chmod(path, 0644), 0);
  tp_expect(&o, 2, NULL, (const char *[]){"serve", "--token-file", "token", NULL});
  assert_true(tp_has(o.err, "can be read by others"));
  tp_out_fini(&o);
  free(path);
  path = tp_write("short", "abc\n");
  assert_int_equal(chmod(path, 0600), 0);
  tp_expect(&o, 2, NULL, (const char *[]){"serve", "--token-file", "short", NULL});
  assert_true(tp_has(o.err, "fewer than 16"));
  tp_out_fini(&o);
  tp_expect(&o, 2, NULL, (const char *[]){"submit", "t.weft", "--to", "127.0.0.1:9", "--token-file", "missing", NULL});
  tp_out_fini(&o);
  free(path);
}

/* The dashboard in headless Chromium: the page loads, lists a submitted run while it runs, its
 * progress moves, and a finished run's page shows its timeline. */
static char *dump_dom(const char *chromium, const char *addr, const char *fragment) {
  char url[300];
  snprintf(url, sizeof url, "http://%s/%s", addr, fragment);
  /* A fresh profile each time; --virtual-time-budget lets the page's fetches and timers run. */
  char profile[400];
  snprintf(profile, sizeof profile, "--user-data-dir=%s/chromium-profile", tp_dir());
  const char *argv[] = {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", profile,
                        "--virtual-time-budget=2000", "--dump-dom", url, NULL};
  char cmd[2048];
  int n = 0;
  for (int i = 0; argv[i] != NULL; i++) n += snprintf(cmd + n, sizeof cmd - (size_t)n, "'%s' ", argv[i]);
  snprintf(cmd + n, sizeof cmd - (size_t)n, "2>/dev/null");
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t cap = 1 << 20, len = 0;
  char *dom = malloc(cap);
  size_t k;
  while ((k = fread(dom + len, 1, cap - 1 - len, p)) > 0) len += k;
  dom[len] = '\0';
  pclose(p);
  return dom;
}

/* The first "D/N nodes" of the page's run row. */
static long nodes_done(const char *dom) {
  const char *p = strstr(dom, " nodes, run ");
  if (p == NULL) return -1;
  while (p > dom && p[-1] != '/') p--;
  const char *q = p - 1;
  while (q > dom && q[-1] >= '0' && q[-1] <= '9') q--;
  return strtol(q, NULL, 10);
}

static void test_dashboard_in_chromium(void **state) {
  (void)state;
  const char *chromium = tu_find_chromium();
  if (chromium == NULL) {
    print_message("no chromium on PATH: skipped (scripts/setup.sh --tests installs it)\n");
    skip();
  }
  server s;
  server_start(&s, NULL);
  response r;
  request(s.addr, "POST", "/v1/runs?name=long.weft&define=K%3D20000", PROG_SLOW, &r);
  assert_int_equal(r.code, 202);
  response_fini(&r);
  usleep(200000);
  char *a = dump_dom(chromium, s.addr, "");
  assert_true(tp_has(a, "<h1>weft serve</h1>"));
  assert_true(tp_has(a, "long.weft"));
  assert_true(tp_has(a, "class=\"running\""));
  assert_true(tp_has(a, "<td>cpu</td>"));
  assert_true(tp_has(a, "<td class=\"use\"><meter ")); /* the memory the running one holds */
  long first = nodes_done(a);
  free(a);
  usleep(500000);
  char *b = dump_dom(chromium, s.addr, "");
  long second = nodes_done(b);
  free(b);
  if (!(first >= 0 && second > first)) fail_msg("progress did not move: %ld then %ld nodes", first, second);
  request(s.addr, "DELETE", "/v1/runs/1", NULL, &r);
  response_fini(&r);
  request(s.addr, "POST", "/v1/runs?wait=1&name=ok.weft", PROG_OK, &r);
  assert_int_equal(json_int(r.body, "exit_code"), 0);
  response_fini(&r);
  char *c = dump_dom(chromium, s.addr, "#run=2");
  assert_true(tp_has(c, "Run 2: ok.weft"));
  assert_true(tp_has(c, "alt=\"timeline of run 2\""));
  assert_true(tp_has(c, "class=\"cancelled\""));
  free(c);
  free(server_stop(&s));
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_query_and_addresses),
      cmocka_unit_test(test_submit_matches_run),
      cmocka_unit_test(test_api),
      cmocka_unit_test(test_failures_and_keep),
      cmocka_unit_test(test_concurrent_clients),
      cmocka_unit_test(test_pipelined_requests),
      cmocka_unit_test(test_ipv6),
      cmocka_unit_test(test_malformed_requests),
      cmocka_unit_test(test_oversized_submission),
      cmocka_unit_test(test_busy_and_cancel),
      cmocka_unit_test(test_queue),
      cmocka_unit_test(test_admission_and_time_limit),
      cmocka_unit_test(test_many_clients),
      cmocka_unit_test(test_token),
      cmocka_unit_test(test_disconnect_mid_run),
      cmocka_unit_test(test_slow_and_truncated_clients),
      cmocka_unit_test(test_idle_timeout),
      cmocka_unit_test(test_sigterm_finishes_runs),
      cmocka_unit_test(test_sigterm_cancels_after_grace),
      cmocka_unit_test(test_unix_socket),
      cmocka_unit_test(test_files_policy),
      cmocka_unit_test(test_addresses_and_usage),
      cmocka_unit_test(test_dashboard_in_chromium),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
