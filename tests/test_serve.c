/* test_serve.c — `weft serve` and `weft submit` end to end over loopback TCP and a Unix
 * socket: answers equal to `weft run`'s, several clients at once, pipelined requests, malformed
 * and oversized submissions, the in-flight bound, clients that leave mid-submission and
 * mid-run, idle connections, address checks, and shutdown on SIGTERM (runs finish within the
 * grace period, or are cancelled after it). Also the protocol and address parsers. Every
 * server listens on port 0 (or a fresh socket path) and prints its address, so parallel test
 * runs never collide. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include "cli/proto.h"
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

/* Sends one request: `headers` (each "Key: value\n") then the source. */
static void send_request(int fd, const char *headers, const char *src) {
  char head[4096];
  int n = snprintf(head, sizeof head, "SUBMIT %zu\n%s\n", strlen(src),
                   headers != NULL ? headers : "");
  send_str(fd, head, (size_t)n);
  send_str(fd, src, strlen(src));
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

typedef struct answer {
  int exit_code;
  char status[32];
  char *out, *err;
} answer;

/* Reads one response; fails the test if none comes. */
static void read_answer(int fd, answer *a) {
  double deadline = tp_now() + T;
  char line[256];
  size_t n = 0;
  for (;;) {
    assert_int_equal(recv_exact(fd, line + n, 1, deadline), 1);
    if (line[n] == '\n') break;
    assert_true(++n < sizeof line);
  }
  line[n] = '\0';
  size_t ol, el;
  if (cli_proto_parse_result(line, &a->exit_code, a->status, sizeof a->status, &ol, &el) != 0)
    fail_msg("not a response line: '%s'", line);
  a->out = calloc(1, ol + 1);
  a->err = calloc(1, el + 1);
  assert_int_equal(recv_exact(fd, a->out, ol, deadline), ol);
  assert_int_equal(recv_exact(fd, a->err, el, deadline), el);
}

static void answer_fini(answer *a) {
  free(a->out);
  free(a->err);
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

/* One complete exchange on a fresh connection. */
static void exchange(const char *addr, const char *headers, const char *src, answer *a) {
  int fd = client_connect(addr);
  assert_true(fd >= 0);
  send_request(fd, headers, src);
  read_answer(fd, a);
  close(fd);
}

/* ---- protocol and addresses ---------------------------------------------------------------- */

static long parse_n(const char *text, size_t n, cli_request *req, char *err) {
  static char buf[1 << 17];
  memcpy(buf, text, n);
  return cli_proto_parse_request(buf, n, req, err, 256);
}

static long parse(const char *text, cli_request *req, char *err) {
  return parse_n(text, strlen(text), req, err);
}

static void test_proto_parse(void **state) {
  (void)state;
  cli_request req;
  char err[256];
  const char *full = "SUBMIT 12\r\nName: a b.weft\nDefine: N=4\ndefine:M=5\nDevice: cpu\n"
                     "Repeat: 3\nFormat: text\n\nbody";
  long h = parse(full, &req, err);
  assert_true(h > 0);
  assert_int_equal((size_t)h, strlen(full) - 4);
  assert_int_equal(req.length, 12);
  assert_string_equal(req.name, "a b.weft");
  assert_int_equal(req.ndefines, 2);
  assert_string_equal(req.defines[0], "N=4");
  assert_string_equal(req.defines[1], "M=5");
  assert_string_equal(req.device, "cpu");
  assert_int_equal(req.repeat, 3);
  assert_int_equal(req.json, 0);
  /* Defaults. */
  assert_true(parse("SUBMIT 0\n\n", &req, err) > 0);
  assert_int_equal(req.length, 0);
  assert_int_equal(req.repeat, 1);
  assert_int_equal(req.json, 1);
  assert_null(req.name);
  /* Not complete yet. */
  assert_int_equal(parse("SUB", &req, err), 0);
  assert_int_equal(parse("SUBMIT 5\nName: x\n", &req, err), 0);
  /* Malformed, each with its reason. */
  static const struct {
    const char *text, *why;
  } bad[] = {
      {"GET / HTTP/1.1\r\n\r\n", "SUBMIT <length>"},
      {"\n\n", "SUBMIT <length>"},
      {"SUBMIT\n\n", "SUBMIT <length>"},
      {"SUBMIT -3\n\n", "not a length"},
      {"SUBMIT 12x\n\n", "not a length"},
      {"SUBMIT 99999999999999999999999\n\n", "not a length"},
      {"SUBMIT 3\nName x\n\n", "has no ':'"},
      {"SUBMIT 3\nColour: red\n\n", "unknown header 'Colour'"},
      {"SUBMIT 3\nDefine: N\n\n", "NAME=VALUE"},
      {"SUBMIT 3\nRepeat: 0\n\n", "positive integer"},
      {"SUBMIT 3\nRepeat: two\n\n", "positive integer"},
      {"SUBMIT 3\nFormat: xml\n\n", "json or text"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    err[0] = '\0';
    if (parse(bad[i].text, &req, err) >= 0) fail_msg("accepted: %s", bad[i].text);
    if (!tp_has(err, bad[i].why))
      fail_msg("'%s': message '%s' lacks '%s'", bad[i].text, err, bad[i].why);
  }
  /* A NUL byte in the header. */
  assert_true(parse_n("SUBMIT 3\nName: a\0b\n\nabc", 21, &req, err) < 0);
  assert_true(tp_has(err, "NUL"));
  assert_true(parse_n("SUBM\0T 3\n\n", 11, &req, err) < 0);
  /* A header that never ends is refused at the bound. */
  static char big[CLI_PROTO_MAX_HEADER + 64];
  memset(big, 'a', sizeof big - 1);
  memcpy(big, "SUBMIT 1\nName: ", 15);
  big[sizeof big - 1] = '\0';
  assert_true(parse(big, &req, err) < 0);
  assert_true(tp_has(err, "longer than"));
  /* Too many defines. */
  char *many = malloc(CLI_PROTO_MAX_DEFINES * 16 + 64);
  size_t len = (size_t)sprintf(many, "SUBMIT 1\n");
  for (int i = 0; i <= CLI_PROTO_MAX_DEFINES; i++)
    len += (size_t)sprintf(many + len, "Define: a%d=1\n", i);
  strcpy(many + len, "\n");
  assert_true(parse(many, &req, err) < 0);
  assert_true(tp_has(err, "Define headers"));
  free(many);
}

/* The header parser against mutations of a valid header (bytes changed, dropped, doubled,
 * cut short): it must classify each (complete, incomplete, malformed) without reading outside
 * the buffer, and a complete header's strings must lie inside it. */
static void test_proto_parse_mutations(void **state) {
  (void)state;
  static const char base[] = "SUBMIT 12\r\nName: a.weft\nDefine: N=4\nDevice: cuda:0\nRepeat: 2\n"
                             "Format: text\n\nparam N = 4\n";
  static const char alphabet[] = "SUBMIT:\r\n =0123456789aZ\x00\xff";
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int iter = 0; iter < 20000; iter++) {
    char buf[256];
    size_t n = sizeof base - 1;
    memcpy(buf, base, n);
    int edits = 1 + iter % 4;
    for (int e = 0; e < edits && n > 0; e++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      size_t at = (size_t)(x >> 8) % n;
      char ch = alphabet[(x >> 40) % (sizeof alphabet - 1)];
      switch ((x >> 56) % 4) {
        case 0: buf[at] = ch; break;
        case 1: memmove(buf + at, buf + at + 1, n - at - 1), n--; break;
        case 2:
          if (n + 1 < sizeof buf) memmove(buf + at + 1, buf + at, n - at), buf[at] = ch, n++;
          break;
        default: n = at + 1; break;
      }
    }
    /* An exact-size heap copy, so ASan sees any read past the end. */
    char *copy = malloc(n ? n : 1);
    memcpy(copy, buf, n);
    cli_request req;
    char err[256];
    err[0] = '\0';
    long h = cli_proto_parse_request(copy, n, &req, err, sizeof err);
    if (h < 0) {
      assert_true(err[0] != '\0');
    } else if (h > 0) {
      assert_true((size_t)h <= n);
      const char *strs[3] = {req.name, req.device, req.ndefines > 0 ? req.defines[0] : NULL};
      for (int k = 0; k < 3; k++)
        if (strs[k] != NULL) assert_true(strs[k] >= copy && strs[k] < copy + h);
      assert_true(req.repeat >= 1);
    }
    free(copy);
  }
}

static void test_proto_result_and_addresses(void **state) {
  (void)state;
  int code;
  char st[32];
  size_t o, e;
  assert_int_equal(cli_proto_parse_result("RESULT 1 failed 10 20", &code, st, sizeof st, &o, &e),
                   0);
  assert_int_equal(code, 1);
  assert_string_equal(st, "failed");
  assert_int_equal(o, 10);
  assert_int_equal(e, 20);
  assert_int_equal(cli_proto_parse_result("RESULT 1 failed 10", &code, st, sizeof st, &o, &e), -1);
  assert_int_equal(cli_proto_parse_result("RESULT 1 ok 1 2 3", &code, st, sizeof st, &o, &e), -1);
  assert_int_equal(cli_proto_parse_result("HTTP/1.1 200 OK", &code, st, sizeof st, &o, &e), -1);

  cli_addr a;
  char err[256], txt[160];
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
  static const char *bad[] = {"7878", "host:80", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1",
                              "[::1:80", "::1:80", "unix:", ":80"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (cli_addr_parse(bad[i], &a, err, sizeof err) == 0) fail_msg("accepted address '%s'", bad[i]);
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
    char h[128];
    snprintf(h, sizeof h, "Name: c%d.weft\nDefine: N=%d\nFormat: json\n", i, i + 1);
    send_request(fd[i], h, PROG_OK);
  }
  tp_out ref;
  for (int i = N - 1; i >= 0; i--) {
    answer a;
    read_answer(fd[i], &a);
    assert_int_equal(a.exit_code, 0);
    assert_string_equal(a.status, "ok");
    char name[64], def[32];
    snprintf(name, sizeof name, "\"file\": \"c%d.weft\"", i);
    assert_true(tp_has(a.out, name));
    /* The outputs equal a local run with the same N. */
    snprintf(def, sizeof def, "N=%d", i + 1);
    char *path = tp_write("conc.weft", PROG_OK);
    free(path);
    tp_run(&ref, NULL, NULL, T, (const char *[]){"run", "--json", "conc.weft", "-D", def, NULL});
    const char *o1 = strstr(a.out, "\"outputs\""), *o2 = strstr(ref.out, "\"outputs\"");
    assert_non_null(o1);
    assert_non_null(o2);
    assert_string_equal(o1, o2);
    tp_out_fini(&ref);
    answer_fini(&a);
    close(fd[i]);
  }
  free(server_stop(&s));
}

static void test_pipelined_requests(void **state) {
  (void)state;
  server s;
  server_start(&s, NULL);
  int fd = client_connect(s.addr);
  assert_true(fd >= 0);
  send_request(fd, "Name: one.weft\n", PROG_OK);
  send_request(fd, "Name: two.weft\n", PROG_BAD);
  send_request(fd, "Name: three.weft\nDefine: N=3\n", PROG_OK);
  answer a;
  read_answer(fd, &a);
  assert_int_equal(a.exit_code, 0);
  assert_true(tp_has(a.out, "one.weft"));
  answer_fini(&a);
  read_answer(fd, &a);
  assert_int_equal(a.exit_code, 2);
  assert_true(tp_has(a.err, "two.weft" PROG_BAD_WHERE));
  answer_fini(&a);
  read_answer(fd, &a);
  assert_int_equal(a.exit_code, 0);
  assert_true(tp_has(a.out, "three.weft"));
  answer_fini(&a);
  /* Sent while a run goes on, more than the server reads ahead (64 KiB): it stops reading,
   * then resumes once the first answer is out. */
  size_t big_len = 3 * CLI_PROTO_MAX_HEADER;
  char *big = malloc(big_len + sizeof PROG_OK);
  memset(big, '\n', big_len);
  memcpy(big, "# padding", 9);
  memcpy(big + big_len, PROG_OK, sizeof PROG_OK);
  send_request(fd, "Name: slow.weft\nDefine: K=20\nFormat: text\n", PROG_SLOW);
  send_request(fd, "Name: big.weft\n", big);
  free(big);
  read_answer(fd, &a);
  assert_int_equal(a.exit_code, 0);
  answer_fini(&a);
  read_answer(fd, &a);
  assert_int_equal(a.exit_code, 0);
  assert_true(tp_has(a.out, "big.weft"));
  answer_fini(&a);
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
  static const char *bad[] = {"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "SUBMIT ten\n\n",
                              "SUBMIT 4\nColour: red\n\nabcd", "\x01\x02\x03\x04\x05\x06\x07\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int fd = client_connect(s.addr);
    assert_true(fd >= 0);
    send_str(fd, bad[i], strlen(bad[i]));
    answer a;
    read_answer(fd, &a);
    assert_int_equal(a.exit_code, 2);
    assert_string_equal(a.status, "malformed");
    assert_true(tp_has(a.out, "\"status\": \"malformed\""));
    assert_true(tp_has(a.err, "malformed request"));
    answer_fini(&a);
    /* The framing is lost: the server ends the connection. */
    assert_true(closed_by_server(fd, T));
    close(fd);
  }
  /* A header that never ends. */
  int fd = client_connect(s.addr);
  char *junk = malloc(CLI_PROTO_MAX_HEADER + 10);
  memset(junk, 'x', CLI_PROTO_MAX_HEADER + 10);
  memcpy(junk, "SUBMIT 1\nName: ", 15);
  send_str(fd, junk, CLI_PROTO_MAX_HEADER + 10);
  free(junk);
  answer a;
  read_answer(fd, &a);
  assert_string_equal(a.status, "malformed");
  assert_true(tp_has(a.err, "longer than"));
  answer_fini(&a);
  close(fd);
  /* The server still serves. */
  exchange(s.addr, NULL, PROG_OK, &a);
  assert_int_equal(a.exit_code, 0);
  answer_fini(&a);
  free(server_stop(&s));
}

static void test_oversized_submission(void **state) {
  (void)state;
  server s;
  server_start(&s, (const char *[]){"--max-bytes", "1000", "--max-repeat", "5", "--max-nodes",
                                    "10", NULL});
  int fd = client_connect(s.addr);
  assert_true(fd >= 0);
  /* Too large: refused, its body skipped, and the connection goes on. */
  char *big = malloc(5001);
  memset(big, '#', 5000);
  big[5000] = '\0';
  send_request(fd, "Name: big.weft\n", big);
  free(big);
  answer a;
  read_answer(fd, &a);
  assert_int_equal(a.exit_code, 2);
  assert_string_equal(a.status, "too-large");
  assert_true(tp_has(a.err, "5000 bytes"));
  assert_true(tp_has(a.err, "at most 1000"));
  assert_true(tp_has(a.out, "\"status\": \"too-large\""));
  answer_fini(&a);
  /* A graph over --max-nodes is an error in the program. */
  send_request(fd, "Name: many.weft\nDefine: K=6\n", PROG_SLOW);
  read_answer(fd, &a);
  assert_int_equal(a.exit_code, 2);
  assert_true(tp_has(a.err, "many.weft:"));
  assert_true(tp_has(a.err, "max_nodes (10)"));
  answer_fini(&a);
  send_request(fd, "Repeat: 6\n", PROG_OK);
  read_answer(fd, &a);
  assert_int_equal(a.exit_code, 2);
  assert_true(tp_has(a.err, "--max-repeat"));
  answer_fini(&a);
  send_request(fd, "Name: after.weft\n", PROG_OK);
  read_answer(fd, &a);
  assert_int_equal(a.exit_code, 0);
  assert_true(tp_has(a.out, "after.weft"));
  answer_fini(&a);
  close(fd);
  /* weft submit reports it with exit 2. */
  char *path = tp_write("big.weft", "");
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 200; i++) fputs("# a comment line\n", f);
  fclose(f);
  free(path);
  tp_out r;
  tp_expect(&r, 2, NULL, (const char *[]){"submit", "big.weft", "--to", s.addr, NULL});
  assert_true(tp_has(r.err, "at most 1000"));
  tp_out_fini(&r);
  free(server_stop(&s));
}

/* Submits PROG_OK on `fd` until the answer's status is `want` (at most T seconds, 20 ms
 * apart); returns the last status, its answer in *a. */
static const char *exchange_until(int fd, const char *headers, const char *want, answer *a) {
  double deadline = tp_now() + T;
  for (;;) {
    send_request(fd, headers, PROG_OK);
    read_answer(fd, a);
    if (strcmp(a->status, want) == 0 || tp_now() > deadline) return a->status;
    answer_fini(a);
    usleep(20000);
  }
}

/* The in-flight bound, a client that leaves mid-submission, and busy answers. A request
 * holds its slot from its header on, so a client that sends a header and half a body keeps
 * the only slot until it leaves. */
static void test_busy_and_disconnect_mid_submission(void **state) {
  (void)state;
  char *p = tp_write("busy.weft", PROG_OK);
  free(p);
  server s;
  server_start(&s, (const char *[]){"--max-inflight", "1", NULL});
  int holder = client_connect(s.addr);
  send_str(holder, "SUBMIT 100\n\nparam", 17); /* 5 of its 100 bytes */
  int fd = client_connect(s.addr);
  /* Once the server has read the holder's header, every other submission is busy. */
  answer a;
  assert_string_equal(exchange_until(fd, "Name: second.weft\n", "busy", &a), "busy");
  assert_int_equal(a.exit_code, 1);
  assert_true(tp_has(a.err, "busy"));
  answer_fini(&a);
  /* weft submit without waiting: exit 1, "busy". */
  tp_out r;
  tp_expect(&r, 1, NULL,
            (const char *[]){"submit", "--wait", "0", "busy.weft", "--to", s.addr, NULL});
  assert_true(tp_has(r.err, "busy"));
  tp_out_fini(&r);
  /* The holder leaves in the middle of its submission: its slot is freed (as soon as the
   * server has seen the close). */
  close(holder);
  assert_string_equal(exchange_until(fd, "Name: third.weft\n", "ok", &a), "ok");
  assert_int_equal(a.exit_code, 0);
  answer_fini(&a);
  close(fd);
  /* weft submit retries while busy: hold the slot again, release it in a moment. */
  holder = client_connect(s.addr);
  send_str(holder, "SUBMIT 100\n\n", 12);
  usleep(100000);
  tp_proc bg;
  tp_spawn(&bg, (const char *[]){"submit", "--wait", "30", "busy.weft", "--to", s.addr, NULL});
  usleep(400000);
  close(holder);
  char *bg_err = NULL;
  int bg_code = tp_stop(&bg, 0, T, &bg_err);
  if (bg_code != 0) fail_msg("weft submit --wait exited %d: %s", bg_code, bg_err);
  free(bg_err);
  char *err = server_stop(&s);
  assert_true(tp_has(err, "refused (busy)"));
  free(err);
}

static void test_disconnect_mid_run(void **state) {
  (void)state;
  server s;
  server_start(&s, NULL);
  /* Several clients submit a long run and leave at once: the server cancels their runs
   * instead of holding them, and goes on serving. */
  for (int i = 0; i < 4; i++) {
    int fd = client_connect(s.addr);
    send_request(fd, "Define: K=20000\n", PROG_SLOW);
    usleep(50000);
    close(fd);
  }
  answer a;
  double t0 = tp_now();
  exchange(s.addr, NULL, PROG_OK, &a);
  assert_int_equal(a.exit_code, 0);
  answer_fini(&a);
  char *err = server_stop(&s);
  assert_true(tp_now() - t0 < 15); /* no abandoned 20 s run was waited for */
  free(err);
}

static void test_idle_timeout(void **state) {
  (void)state;
  server s;
  server_start(&s, (const char *[]){"--idle-timeout", "0.3", NULL});
  int fd = client_connect(s.addr);
  send_str(fd, "SUBMIT 10\nName: slow", 20);
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
  send_request(fd, "Name: slow.weft\nDefine: K=200\n", PROG_SLOW); /* 400 products */
  usleep(300000);
  kill(s.proc.pid, SIGTERM);
  answer a;
  read_answer(fd, &a);
  assert_int_equal(a.exit_code, 0); /* it ran to the end */
  assert_string_equal(a.status, "ok");
  answer_fini(&a);
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
  send_request(fd, "Name: long.weft\nDefine: K=20000\nFormat: json\n", PROG_SLOW);
  int idle = client_connect(s.addr); /* an idle connection is simply closed */
  usleep(200000);
  double t0 = tp_now();
  kill(s.proc.pid, SIGINT);
  answer a;
  read_answer(fd, &a);
  assert_int_equal(a.exit_code, 1);
  assert_string_equal(a.status, "failed");
  assert_true(tp_has(a.out, "cancel"));
  answer_fini(&a);
  assert_true(closed_by_server(idle, T));
  close(idle);
  close(fd);
  char *err = NULL;
  assert_int_equal(tp_stop(&s.proc, 0, T, &err), 0);
  assert_true(tp_now() - t0 < 30);
  assert_true(tp_has(err, "cancelling"));
  free(err);
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

/* Submissions may not touch the server's files unless it allows them. */
static void test_files_policy(void **state) {
  (void)state;
  static const char save[] = "tensor x: f32[2, 2] = ones\nsave x to \"saved.bin\"\n";
  server s;
  server_start(&s, NULL);
  answer a;
  exchange(s.addr, "Name: save.weft\n", save, &a);
  assert_int_equal(a.exit_code, 2);
  assert_true(tp_has(a.err, "save.weft:2:"));
  answer_fini(&a);
  free(server_stop(&s));
  char path[300];
  snprintf(path, sizeof path, "%s/saved.bin", tp_dir());
  assert_int_equal(access(path, F_OK), -1);
  server_start(&s, (const char *[]){"--allow-files", NULL});
  exchange(s.addr, "Name: save.weft\n", save, &a);
  assert_int_equal(a.exit_code, 0);
  answer_fini(&a);
  free(server_stop(&s));
  assert_int_equal(access(path, F_OK), 0); /* relative to the server's directory */
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

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_proto_parse),
      cmocka_unit_test(test_proto_parse_mutations),
      cmocka_unit_test(test_proto_result_and_addresses),
      cmocka_unit_test(test_submit_matches_run),
      cmocka_unit_test(test_concurrent_clients),
      cmocka_unit_test(test_pipelined_requests),
      cmocka_unit_test(test_ipv6),
      cmocka_unit_test(test_malformed_requests),
      cmocka_unit_test(test_oversized_submission),
      cmocka_unit_test(test_busy_and_disconnect_mid_submission),
      cmocka_unit_test(test_disconnect_mid_run),
      cmocka_unit_test(test_idle_timeout),
      cmocka_unit_test(test_sigterm_finishes_runs),
      cmocka_unit_test(test_sigterm_cancels_after_grace),
      cmocka_unit_test(test_unix_socket),
      cmocka_unit_test(test_files_policy),
      cmocka_unit_test(test_addresses_and_usage),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
