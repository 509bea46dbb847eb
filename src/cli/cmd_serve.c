/* cmd_serve.c — `weft serve`: one warm runtime, many clients. Each submission (a .weft
 * program, see proto.h for the framing) becomes its own program and graph; they run at the
 * same time on the shared runtime, and each is answered with what `weft run` would print.
 *
 * Everything happens on one libuv loop (this thread), except the two steps that may take long
 * on the CPU: loading (parse and build) and reporting (formatting the outputs, destroying the
 * graph), which go to libuv's thread pool. Runs go through weft_uv_launch, so the loop never
 * blocks on a graph.
 *
 *   connection:  HEADER ──► BODY ──► BUSY ──(response written)──► HEADER ...
 *                   │  too large / busy / bad Repeat: answer, then DRAIN the declared body
 *                   └─ malformed: answer, shut down the write side, DISCARD until EOF
 *   submission:  load (pool) ─► run × Repeat (weft_uv_launch) ─► report (pool) ─► write
 *
 * Limits: a submission's source is at most --max-bytes (answered "too-large" otherwise), its
 * graph at most --max-nodes nodes (a load error, exit 2), its Repeat at most --max-repeat; at
 * most --max-inflight submissions are held at once, from the end of their header to their
 * response (the next is answered "busy" at once: clients retry); at most --max-connections
 * connections are accepted (more wait in the kernel's backlog); a connection idle for
 * --idle-timeout seconds (no byte while a request is incomplete or awaited) is closed.
 *
 * A client that goes away (EOF or error on its socket) before its answer is written loses
 * its submission: a run in flight is cancelled, the rest is freed when the pool step it is in
 * returns. A submission therefore never outlives the server, but may outlive its connection:
 * `sub->conn` is NULL from then on, and the submission frees itself instead of answering.
 *
 * Shutdown (SIGINT or SIGTERM): stop listening, close idle connections, let submissions in
 * progress finish and answer, then close; after --grace seconds (or a second signal) cancel
 * the runs still in flight. The loop ends when the last connection and submission are gone,
 * and the command exits 0. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "cli/cli.h"
#include "cli/proto.h"
#include "weft/sim.h"
#include "weft/uv.h"

typedef struct server server;
typedef struct conn conn;
typedef struct submission submission;

enum conn_state {
  C_HEADER,  /* reading a request header */
  C_BODY,    /* reading the source of c->sub */
  C_BUSY,    /* c->sub is loading, running or reporting */
  C_DRAIN,   /* skipping the body of a refused request */
  C_DISCARD, /* after a malformed request: read and drop until EOF */
};

struct server {
  uv_loop_t *loop;
  weft_runtime *rt;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } listener;
  uv_signal_t sigint, sigterm;
  uv_timer_t grace;
  cli_addr addr;
  /* Limits. */
  size_t max_bytes;
  long max_inflight, max_conns, max_repeat, max_nodes;
  uint64_t idle_ms, grace_ms;
  int quiet, allow_files;
  /* State. */
  long inflight, nconns;
  int pending_accept; /* a connection waits in the listener for a free slot */
  int stopping, cancelling, closed_handles;
  int unlink_socket;
  conn *conns;       /* doubly linked */
  submission *subs;  /* doubly linked: every submission with a reserved slot */
};

struct conn {
  server *srv;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } h;
  uv_timer_t idle;
  conn *prev, *next;
  int state, closing, open_handles, reading, close_after_write;
  char peer[80];
  char *in; /* received and not yet consumed */
  size_t in_len, in_cap;
  size_t drain_left;
  submission *sub;
};

struct submission {
  server *srv;
  conn *conn; /* NULL once the client is gone */
  submission *prev, *next;
  char *hdr; /* the request header; req's strings point into it */
  cli_request req;
  char *body;
  size_t body_len, body_got;
  cli_job job;
  uv_work_t work;
  weft_run *run; /* the run in flight, valid until its callback returns */
  uint64_t t0;
  int discard; /* snapshot for the pool: nobody waits for the answer */
  double total_ms;
  /* The answer. */
  char line[128];
  char *out, *err;
  size_t out_len, err_len;
  int exit_code;
  const char *status_word;
  uv_write_t wreq;
};

/* A small answer written from the loop (refusals). */
typedef struct note {
  uv_write_t wreq;
  char *data;
} note;

static const char serve_help[] =
    "Usage: weft serve [OPTIONS]\n"
    "Keep one weft runtime warm and run the .weft programs that clients submit (weft submit,\n"
    "or any program speaking the protocol in docs/cli.md), several at a time.\n"
    "Prints 'listening on ADDR' on standard output once it accepts connections.\n"
    "\n"
    "Options:\n"
    "      --listen ADDR        HOST:PORT or unix:PATH (default 127.0.0.1:7878; port 0 picks a\n"
    "                           free port, printed on standard output)\n"
    "      --allow-remote       allow a non-loopback address (submissions run as this user!)\n"
    "      --allow-files        let submissions read (from \"f\") and write (save) files, as\n"
    "                           this user, relative to the current directory\n"
    "      --max-bytes N        largest submission in bytes (default 1048576)\n"
    "      --max-inflight N     submissions held at once; more are answered 'busy' (default 16)\n"
    "      --max-connections N  connections at once; more wait to be accepted (default 128)\n"
    "      --max-repeat N       largest Repeat a submission may ask for (default 1000)\n"
    "      --max-nodes N        most nodes a submission's graph may have (default 1000000)\n"
    "      --idle-timeout SEC   close a connection idle this long (default 60)\n"
    "      --grace SEC          on SIGINT/SIGTERM, cancel runs still going after SEC (default 10)\n"
    "      --workers N          CPU worker threads (default: one per core)\n"
    "      --simulate PROFILE   run submissions on the virtual devices of a machine profile\n"
    "      --quiet              do not log each submission on standard error\n"
    "  -h, --help               show this help and exit\n"
    "\n"
    "Exit status: 0 after a clean shutdown, 1 the server could not start, 2 usage.\n";

/* The most one part of an answer may hold. */
#define CLI_MAX_ANSWER 0x7fffffffu

static char read_buf[65536]; /* the loop's one read buffer: on_read consumes it at once */

/* The server's lists of connections and submissions are intrusive and doubly linked. */
#define LIST_PUSH(head, item)                  \
  do {                                         \
    (item)->prev = NULL;                       \
    (item)->next = (head);                     \
    if ((head) != NULL) (head)->prev = (item); \
    (head) = (item);                           \
  } while (0)
#define LIST_REMOVE(head, item)                                  \
  do {                                                           \
    if ((item)->prev != NULL)                                    \
      (item)->prev->next = (item)->next;                         \
    else                                                         \
      (head) = (item)->next;                                     \
    if ((item)->next != NULL) (item)->next->prev = (item)->prev; \
  } while (0)

static void conn_close(conn *c);
static void conn_process(conn *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
static void maybe_finish(server *s);
static void run_next(submission *sub);
static void report(submission *sub);

static void say(server *s, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void say(server *s, const char *fmt, ...) {
  if (s->quiet) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s serve: ", cli_progname);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* ---- submissions ---------------------------------------------------------------------- */

static void sub_free(submission *sub) {
  server *s = sub->srv;
  LIST_REMOVE(s->subs, sub);
  s->inflight--;
  cli_job_fini(&sub->job);
  free(sub->hdr);
  free(sub->body);
  free(sub->out);
  free(sub->err);
  free(sub);
  /* A slot is free: a connection waiting for one may have been refused, but the listener's
   * backlog is gated by connections, not slots, so nothing to resume here. */
  maybe_finish(s);
}

/* Pool thread: the answer's two parts, and the graph's destruction. */
static void work_report(uv_work_t *w) {
  submission *sub = w->data;
  if (!sub->discard) {
    FILE *out = open_memstream(&sub->out, &sub->out_len);
    FILE *err = open_memstream(&sub->err, &sub->err_len);
    if (out != NULL && err != NULL) cli_job_report(&sub->job, out, err);
    if (out != NULL) fclose(out);
    if (err != NULL) fclose(err);
    if (out == NULL || err == NULL) {
      sub->job.exit_code = CLI_EXIT_FAILED;
      free(sub->out);
      free(sub->err);
      sub->out = sub->err = NULL;
      sub->out_len = sub->err_len = 0;
    }
  }
  sub->exit_code = sub->job.exit_code;
  sub->status_word = cli_job_status_word(&sub->job);
  if (sub->out_len > CLI_MAX_ANSWER || sub->err_len > CLI_MAX_ANSWER) {
    /* A buffer of the answer is written in one piece (libuv's lengths are 32-bit). */
    char msg[128];
    snprintf(msg, sizeof msg, "the answer has more than %u bytes; print less (or save it)",
             CLI_MAX_ANSWER);
    weft__strbuf out, err;
    weft__strbuf_init(&out);
    weft__strbuf_init(&err);
    if (sub->job.json) cli_refusal_json(&out, sub->job.name, "failed", CLI_EXIT_FAILED, msg);
    weft__strbuf_printf(&err, "%s: %s: %s\n", cli_progname, sub->job.name, msg);
    free(sub->out);
    free(sub->err);
    sub->out_len = out.len;
    sub->err_len = err.len;
    /* Out of memory: an empty answer, which the client reports as a broken one. */
    if (weft__strbuf_take(&out, "an answer", &sub->out) != WEFT_OK) sub->out_len = 0;
    if (weft__strbuf_take(&err, "an answer", &sub->err) != WEFT_OK) sub->err_len = 0;
    sub->exit_code = CLI_EXIT_FAILED;
    sub->status_word = "failed";
  }
  weft_program_destroy(sub->job.prog);
  sub->job.prog = NULL;
}

static void on_answer_written(uv_write_t *w, int status) {
  submission *sub = w->data;
  conn *c = sub->conn;
  (void)status; /* a failed write means the client left: its close is on its way */
  if (c != NULL) {
    c->sub = NULL;
    sub->conn = NULL;
    if (!c->closing) {
      c->state = C_HEADER;
      if (c->close_after_write || c->srv->stopping) {
        conn_close(c);
      } else {
        uv_timer_again(&c->idle);
        if (!c->reading && uv_read_start(&c->h.stream, on_alloc, on_read) == 0) c->reading = 1;
        conn_process(c); /* a request may already be waiting */
      }
    }
  }
  sub_free(sub);
}

static void after_report(uv_work_t *w, int status) {
  (void)status;
  submission *sub = w->data;
  server *s = sub->srv;
  conn *c = sub->conn;
  say(s, "%s: %s: %s (exit %d), %d run%s, %.3f ms", c != NULL ? c->peer : "(gone)",
        sub->job.name, sub->status_word, sub->exit_code, sub->job.nruns,
        sub->job.nruns == 1 ? "" : "s", sub->total_ms);
  if (c == NULL || c->closing) {
    sub_free(sub);
    return;
  }
  int n = snprintf(sub->line, sizeof sub->line, "RESULT %d %s %zu %zu\n", sub->exit_code,
                   sub->status_word, sub->out_len, sub->err_len);
  uv_buf_t bufs[3] = {uv_buf_init(sub->line, (unsigned)n),
                      uv_buf_init(sub->out != NULL ? sub->out : sub->line, (unsigned)sub->out_len),
                      uv_buf_init(sub->err != NULL ? sub->err : sub->line, (unsigned)sub->err_len)};
  sub->wreq.data = sub;
  if (uv_write(&sub->wreq, &c->h.stream, bufs, 3, on_answer_written) != 0) {
    c->sub = NULL;
    sub->conn = NULL;
    conn_close(c);
    sub_free(sub);
  }
}

static void report(submission *sub) {
  sub->discard = sub->conn == NULL;
  sub->work.data = sub;
  if (uv_queue_work(sub->srv->loop, &sub->work, work_report, after_report) != 0) {
    work_report(&sub->work); /* cannot happen with a valid loop; do it here rather than leak */
    after_report(&sub->work, 0);
  }
}

/* Launches the next run, or reports: after the last run, a failure, or when the job is
 * cancelled (its client left, or the server's grace period is over). */
static void next_or_report(submission *sub) {
  if (sub->job.exit_code != CLI_EXIT_OK || sub->job.nruns >= sub->job.repeat) {
    report(sub);
  } else if (sub->conn == NULL || sub->srv->cancelling) {
    cli_job_fail(&sub->job, "run", WEFT_ECANCELED,
                 sub->conn == NULL ? "the client left: the run was cancelled"
                                   : "the server is shutting down: the run was cancelled");
    report(sub);
  } else {
    run_next(sub);
  }
}

static void on_run(weft_run *run, int status, void *arg) {
  submission *sub = arg;
  double ms = (double)(uv_hrtime() - sub->t0) / 1e6;
  sub->run = NULL;
  sub->total_ms += ms;
  cli_job_record(&sub->job, status, run, ms);
  next_or_report(sub);
}

static void run_next(submission *sub) {
  sub->t0 = uv_hrtime();
  int rc = weft_uv_launch(sub->srv->loop, weft_program_graph(sub->job.prog), on_run, sub,
                          &sub->run);
  if (rc != WEFT_OK) {
    cli_job_record(&sub->job, rc, NULL, 0);
    report(sub);
  }
}

static void work_load(uv_work_t *w) {
  submission *sub = w->data;
  cli_job_load(&sub->job, sub->srv->rt);
}

static void after_load(uv_work_t *w, int status) {
  (void)status;
  next_or_report(w->data);
}

static void sub_start(submission *sub) {
  conn *c = sub->conn;
  c->state = C_BUSY;
  uv_timer_stop(&c->idle); /* the client is waiting on us now */
  cli_job *j = &sub->job;
  j->name = sub->req.name != NULL && *sub->req.name ? sub->req.name : "submission.weft";
  j->text = sub->body;
  j->len = sub->body_len;
  j->dsl.defines = sub->req.defines;
  j->dsl.ndefines = sub->req.ndefines;
  j->dsl.device = sub->req.device;
  j->repeat = (int)sub->req.repeat;
  j->json = sub->req.json;
  j->dsl.deny_files = !sub->srv->allow_files;
  j->dsl.max_nodes = (size_t)sub->srv->max_nodes;
  sub->work.data = sub;
  if (uv_queue_work(sub->srv->loop, &sub->work, work_load, after_load) != 0) {
    work_load(&sub->work);
    after_load(&sub->work, 0);
  }
}

/* ---- connections ---------------------------------------------------------------------- */

static void on_note_written(uv_write_t *w, int status) {
  (void)status;
  note *n = w->data;
  free(n->data);
  free(n);
}

/* Answers a request refused before it ran. */
static void refuse(conn *c, int json, const char *name, const char *status, int exit_code,
                   const char *msg) {
  weft__strbuf out, err, all;
  weft__strbuf_init(&out);
  weft__strbuf_init(&err);
  weft__strbuf_init(&all);
  if (json) cli_refusal_json(&out, name, status, exit_code, msg);
  weft__strbuf_printf(&err, "%s: %s%s%s\n", cli_progname, name != NULL ? name : "",
                      name != NULL ? ": " : "", msg);
  weft__strbuf_printf(&all, "RESULT %d %s %zu %zu\n", exit_code, status, out.len, err.len);
  weft__strbuf_put(&all, out.data != NULL ? out.data : "", out.len);
  weft__strbuf_put(&all, err.data, err.len);
  weft__strbuf_fini(&out);
  weft__strbuf_fini(&err);
  say(c->srv, "%s: refused (%s): %s", c->peer, status, msg);
  note *n = malloc(sizeof *n);
  size_t len = all.len;
  if (n == NULL || weft__strbuf_take(&all, "an answer", &n->data) != WEFT_OK) {
    free(n);
    weft__strbuf_fini(&all);
    conn_close(c);
    return;
  }
  n->wreq.data = n;
  uv_buf_t buf = uv_buf_init(n->data, (unsigned)len);
  if (uv_write(&n->wreq, &c->h.stream, &buf, 1, on_note_written) != 0) {
    free(n->data);
    free(n);
    conn_close(c);
  }
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  free(req);
}

static void consume(conn *c, size_t n) {
  memmove(c->in, c->in + n, c->in_len - n);
  c->in_len -= n;
}

/* Rebases the request's strings from `from` (the connection's buffer) into `to` (a copy). */
static char *rebase(char *p, const char *from, char *to) {
  return p != NULL ? to + (p - from) : NULL;
}

/* Starts reading the body of a request whose header (hlen bytes) is parsed in req. */
static void accept_request(conn *c, cli_request *req, size_t hlen) {
  server *s = c->srv;
  const char *name = req->name;
  if (req->length > s->max_bytes || req->repeat > s->max_repeat || s->inflight >= s->max_inflight) {
    char msg[160];
    const char *word = "busy";
    int code = CLI_EXIT_FAILED;
    if (req->length > s->max_bytes) {
      snprintf(msg, sizeof msg, "the submission has %zu bytes; this server takes at most %zu",
               req->length, s->max_bytes);
      word = "too-large";
      code = CLI_EXIT_USAGE;
    } else if (req->repeat > s->max_repeat) {
      snprintf(msg, sizeof msg, "Repeat %ld exceeds this server's --max-repeat of %ld",
               req->repeat, s->max_repeat);
      word = "invalid";
      code = CLI_EXIT_USAGE;
    } else {
      snprintf(msg, sizeof msg, "the server is busy (%ld submissions in progress); try again",
               s->inflight);
    }
    refuse(c, req->json, name, word, code, msg);
    consume(c, hlen);
    c->drain_left = req->length;
    c->state = C_DRAIN;
    return;
  }
  submission *sub = calloc(1, sizeof *sub);
  char *hdr = malloc(hlen + 1);
  char *body = malloc(req->length + 1);
  if (sub == NULL || hdr == NULL || body == NULL) {
    free(sub);
    free(hdr);
    free(body);
    refuse(c, req->json, name, "failed", CLI_EXIT_FAILED, "the server is out of memory");
    consume(c, hlen);
    c->drain_left = req->length;
    c->state = C_DRAIN;
    return;
  }
  memcpy(hdr, c->in, hlen);
  hdr[hlen] = '\0';
  sub->req = *req;
  sub->req.name = rebase(req->name, c->in, hdr);
  sub->req.device = rebase(req->device, c->in, hdr);
  for (int i = 0; i < req->ndefines; i++)
    sub->req.defines[i] = rebase((char *)req->defines[i], c->in, hdr);
  sub->hdr = hdr;
  sub->body = body;
  sub->body_len = req->length;
  sub->srv = s;
  sub->conn = c;
  cli_job_init(&sub->job);
  sub->job.no_values = weft_sim_active(s->rt) && !weft_sim_computes(s->rt);
  LIST_PUSH(s->subs, sub);
  s->inflight++;
  c->sub = sub;
  c->state = C_BODY;
  consume(c, hlen);
}

/* Consumes what has been received, as far as the state allows. */
static void conn_process(conn *c) {
  while (!c->closing) {
    if (c->state == C_DISCARD) {
      c->in_len = 0;
      return;
    }
    if (c->state == C_BUSY) return; /* kept for after the answer */
    if (c->state == C_DRAIN) {
      size_t k = c->drain_left < c->in_len ? c->drain_left : c->in_len;
      consume(c, k);
      c->drain_left -= k;
      if (c->drain_left > 0) return;
      c->state = C_HEADER;
      continue;
    }
    if (c->state == C_BODY) {
      submission *sub = c->sub;
      size_t want = sub->body_len - sub->body_got;
      size_t k = want < c->in_len ? want : c->in_len;
      memcpy(sub->body + sub->body_got, c->in, k);
      sub->body_got += k;
      consume(c, k);
      if (sub->body_got < sub->body_len) return;
      sub->body[sub->body_len] = '\0';
      sub_start(sub);
      return;
    }
    /* C_HEADER */
    if (c->in_len == 0) return;
    cli_request req;
    char err[256];
    long h = cli_proto_parse_request(c->in, c->in_len, &req, err, sizeof err);
    if (h == 0) return;
    if (h < 0) {
      refuse(c, 1, NULL, "malformed", CLI_EXIT_USAGE, err);
      /* The framing is lost: say so, send FIN, and drop what else comes until the client
       * closes (closing at once could reset the connection before it reads the answer). */
      c->state = C_DISCARD;
      c->in_len = 0;
      uv_shutdown_t *sd = malloc(sizeof *sd);
      if (sd == NULL || uv_shutdown(sd, &c->h.stream, on_shutdown) != 0) {
        free(sd);
        conn_close(c);
      }
      return;
    }
    accept_request(c, &req, (size_t)h);
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(read_buf, sizeof read_buf);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn *c = st->data;
  if (nread < 0) {
    /* EOF or error: the client is gone (a client must keep its side open until it has read
     * its answer). A submission in progress is cancelled. */
    if (c->sub != NULL && nread != UV_EOF)
      say(c->srv, "%s: connection lost: %s", c->peer, uv_strerror((int)nread));
    conn_close(c);
    return;
  }
  if (nread == 0) return;
  if (c->state != C_BUSY) uv_timer_again(&c->idle);
  if (c->state == C_DISCARD) return;
  const char *data = buf->base;
  size_t len = (size_t)nread;
  if (c->state == C_DRAIN && c->in_len == 0) {
    /* Skip the refused body without copying it. */
    size_t k = len < c->drain_left ? len : c->drain_left;
    c->drain_left -= k;
    if (c->drain_left == 0) c->state = C_HEADER;
    data += k;
    len -= k;
    if (len == 0) return;
  }
  if (c->in_len + len > c->in_cap) {
    size_t cap = c->in_cap ? c->in_cap : 4096;
    while (cap < c->in_len + len) cap *= 2;
    char *in = realloc(c->in, cap);
    if (in == NULL) {
      say(c->srv, "%s: out of memory for the connection's input", c->peer);
      conn_close(c);
      return;
    }
    c->in = in;
    c->in_cap = cap;
  }
  memcpy(c->in + c->in_len, data, len);
  c->in_len += len;
  conn_process(c);
  /* A client that sends ahead while its submission runs is held back at one header's worth,
   * so it cannot make the server buffer without bound. */
  if (!c->closing && c->state == C_BUSY && c->in_len > CLI_PROTO_MAX_HEADER && c->reading) {
    uv_read_stop(&c->h.stream);
    c->reading = 0;
  }
}

static void on_idle(uv_timer_t *t) {
  conn *c = t->data;
  say(c->srv, "%s: idle for %.0f s, closing", c->peer, (double)c->srv->idle_ms / 1e3);
  conn_close(c);
}

static void on_conn_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->open_handles > 0) return;
  server *s = c->srv;
  free(c->in);
  free(c);
  maybe_finish(s);
}

static void accept_one(server *s);

static void conn_close(conn *c) {
  if (c->closing) return;
  c->closing = 1;
  server *s = c->srv;
  LIST_REMOVE(s->conns, c);
  s->nconns--;
  submission *sub = c->sub;
  c->sub = NULL;
  if (sub != NULL) {
    sub->conn = NULL;
    if (c->state == C_BODY) {
      sub_free(sub); /* never started */
    } else if (sub->run != NULL) {
      weft_run_cancel(sub->run); /* nobody waits for it */
    }
  }
  uv_close(&c->h.handle, on_conn_closed);
  uv_close((uv_handle_t *)&c->idle, on_conn_closed);
  if (s->pending_accept && !s->stopping) accept_one(s);
}

static void peer_name(conn *c) {
  struct sockaddr_storage ss;
  int len = sizeof ss;
  snprintf(c->peer, sizeof c->peer, "%s", c->srv->addr.is_unix ? "unix" : "?");
  if (c->srv->addr.is_unix || uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &len) != 0)
    return;
  char ip[64];
  if (ss.ss_family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    uv_ip6_name(a, ip, sizeof ip);
    snprintf(c->peer, sizeof c->peer, "[%s]:%d", ip, ntohs(a->sin6_port));
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    uv_ip4_name(a, ip, sizeof ip);
    snprintf(c->peer, sizeof c->peer, "%s:%d", ip, ntohs(a->sin_port));
  }
}

static void accept_one(server *s) {
  s->pending_accept = 0;
  conn *c = calloc(1, sizeof *c);
  if (c == NULL) {
    /* Leave it in the listener: it is accepted when memory or a slot frees up. */
    s->pending_accept = 1;
    return;
  }
  c->srv = s;
  int rc = s->addr.is_unix ? uv_pipe_init(s->loop, &c->h.pipe, 0) : uv_tcp_init(s->loop, &c->h.tcp);
  if (rc != 0) {
    free(c);
    s->pending_accept = 1;
    return;
  }
  c->h.handle.data = c;
  c->open_handles = 1;
  if ((rc = uv_accept(&s->listener.stream, &c->h.stream)) != 0) {
    say(s, "accept failed: %s", uv_strerror(rc));
    c->closing = 1;
    uv_close(&c->h.handle, on_conn_closed);
    return;
  }
  LIST_PUSH(s->conns, c);
  s->nconns++;
  uv_timer_init(s->loop, &c->idle);
  c->idle.data = c;
  c->open_handles = 2;
  peer_name(c);
  if (!s->addr.is_unix) uv_tcp_nodelay(&c->h.tcp, 1);
  uv_timer_start(&c->idle, on_idle, s->idle_ms, s->idle_ms);
  if ((rc = uv_read_start(&c->h.stream, on_alloc, on_read)) != 0) {
    conn_close(c);
    return;
  }
  c->reading = 1;
}

static void on_connection(uv_stream_t *l, int status) {
  server *s = l->data;
  if (status != 0) {
    say(s, "listener error: %s", uv_strerror(status));
    return;
  }
  if (s->stopping) return;
  if (s->nconns >= s->max_conns) {
    s->pending_accept = 1; /* libuv stops accepting until uv_accept is called */
    return;
  }
  accept_one(s);
}

/* ---- shutdown --------------------------------------------------------------------------- */

static void cancel_all(server *s) {
  if (s->cancelling) return;
  s->cancelling = 1;
  /* Runs in flight stop at their next node; a submission still loading is cancelled when
   * its load returns (next_or_report sees `cancelling`). */
  long n = 0;
  for (submission *sub = s->subs; sub != NULL; sub = sub->next) {
    if (sub->run != NULL) weft_run_cancel(sub->run);
    n++;
  }
  if (n > 0) say(s, "cancelling %ld submission%s still in progress", n, n == 1 ? "" : "s");
}

static void on_grace(uv_timer_t *t) { cancel_all(t->data); }

static void maybe_finish(server *s) {
  if (!s->stopping || s->closed_handles || s->nconns > 0 || s->subs != NULL) return;
  s->closed_handles = 1;
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
  uv_close((uv_handle_t *)&s->grace, NULL);
}

static void on_signal(uv_signal_t *sig, int signum) {
  server *s = sig->data;
  if (s->stopping) {
    say(s, "%s again: cancelling now", signum == SIGINT ? "SIGINT" : "SIGTERM");
    cancel_all(s);
    return;
  }
  s->stopping = 1;
  say(s, "%s: no new connections; finishing %ld submission%s",
      signum == SIGINT ? "SIGINT" : "SIGTERM", s->inflight, s->inflight == 1 ? "" : "s");
  uv_close(&s->listener.handle, NULL);
  if (s->unlink_socket) unlink(s->addr.path);
  for (conn *c = s->conns, *next; c != NULL; c = next) {
    next = c->next;
    if (c->state == C_BUSY)
      c->close_after_write = 1;
    else
      conn_close(c);
  }
  if (s->grace_ms == 0)
    cancel_all(s);
  else
    uv_timer_start(&s->grace, on_grace, s->grace_ms, 0);
  maybe_finish(s);
}

/* ---- listening -------------------------------------------------------------------------- */

/* 1 if something accepts connections at the Unix socket `path`. */
static int unix_socket_alive(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return 1; /* cannot tell: assume alive, never remove what may be in use */
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
  int e = errno;
  close(fd);
  return rc == 0 || e != ECONNREFUSED;
}

static int start_listening(server *s, char *bound, size_t bound_size) {
  int rc;
  if (s->addr.is_unix) {
    if ((rc = uv_pipe_init(s->loop, &s->listener.pipe, 0)) != 0) goto fail;
    rc = uv_pipe_bind(&s->listener.pipe, s->addr.path);
    if (rc == UV_EADDRINUSE && !unix_socket_alive(s->addr.path)) {
      /* A socket file left by a server that died: nobody listens, so it is safe to replace. */
      unlink(s->addr.path);
      rc = uv_pipe_bind(&s->listener.pipe, s->addr.path);
    }
    if (rc == 0) s->unlink_socket = 1;
  } else {
    if ((rc = uv_tcp_init(s->loop, &s->listener.tcp)) != 0) goto fail;
    struct sockaddr_storage ss;
    if (s->addr.ipv6)
      rc = uv_ip6_addr(s->addr.host, s->addr.port, (struct sockaddr_in6 *)&ss);
    else
      rc = uv_ip4_addr(s->addr.host, s->addr.port, (struct sockaddr_in *)&ss);
    if (rc == 0) rc = uv_tcp_bind(&s->listener.tcp, (struct sockaddr *)&ss, 0);
  }
  s->listener.handle.data = s;
  if (rc == 0) rc = uv_listen(&s->listener.stream, 128, on_connection);
  if (rc != 0) {
    uv_close(&s->listener.handle, NULL);
    goto fail;
  }
  if (!s->addr.is_unix) {
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getsockname(&s->listener.tcp, (struct sockaddr *)&ss, &len) == 0)
      s->addr.port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                    : ((struct sockaddr_in *)&ss)->sin_port);
  }
  cli_addr_format(&s->addr, bound, bound_size);
  return 0;
fail:
  cli_addr_format(&s->addr, bound, bound_size);
  return cli_error(CLI_EXIT_FAILED, "cannot listen on %s: %s", bound, uv_strerror(rc));
}

/* ---- the command ------------------------------------------------------------------------ */

static int parse_seconds(const char *flag, const char *text, uint64_t *ms) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (*text == '\0' || *end != '\0' || errno != 0 || !(v >= 0) || v > 86400.0 * 365)
    return cli_usage_error("serve", "%s expects seconds (a number >= 0), not '%s'", flag, text);
  *ms = (uint64_t)(v * 1e3 + 0.5);
  return 0;
}

int cli_cmd_serve(int argc, char **argv) {
  enum {
    OPT_LISTEN = CLI_OPT_LOCAL, OPT_REMOTE, OPT_FILES, OPT_MAX_BYTES, OPT_MAX_INFLIGHT,
    OPT_MAX_CONNS, OPT_MAX_REPEAT, OPT_MAX_NODES, OPT_IDLE, OPT_GRACE, OPT_QUIET
  };
  static const struct option longopts[] = {
      {"listen", required_argument, NULL, OPT_LISTEN},
      {"allow-remote", no_argument, NULL, OPT_REMOTE},
      {"allow-files", no_argument, NULL, OPT_FILES},
      {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
      {"max-inflight", required_argument, NULL, OPT_MAX_INFLIGHT},
      {"max-connections", required_argument, NULL, OPT_MAX_CONNS},
      {"max-repeat", required_argument, NULL, OPT_MAX_REPEAT},
      {"max-nodes", required_argument, NULL, OPT_MAX_NODES},
      {"idle-timeout", required_argument, NULL, OPT_IDLE},
      {"grace", required_argument, NULL, OPT_GRACE},
      {"workers", required_argument, NULL, CLI_OPT_WORKERS},
      {"simulate", required_argument, NULL, CLI_OPT_SIMULATE},
      {"quiet", no_argument, NULL, OPT_QUIET},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  server s;
  memset(&s, 0, sizeof s);
  s.max_bytes = 1 << 20;
  s.max_inflight = 16;
  s.max_conns = 128;
  s.max_repeat = 1000;
  s.max_nodes = 1000000;
  s.idle_ms = 60000;
  s.grace_ms = 10000;
  const char *listen = "127.0.0.1:7878";
  long workers = 0, v;
  const char *simulate = NULL;
  int allow_remote = 0, c;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
      case OPT_LISTEN: listen = optarg; break;
      case OPT_REMOTE: allow_remote = 1; break;
      case OPT_FILES: s.allow_files = 1; break;
      case OPT_MAX_BYTES:
        if (cli_parse_int("serve", "--max-bytes", optarg, 1, 1L << 40, &v) != 0)
          return CLI_EXIT_USAGE;
        s.max_bytes = (size_t)v;
        break;
      case OPT_MAX_INFLIGHT:
        if (cli_parse_int("serve", "--max-inflight", optarg, 1, 100000, &s.max_inflight) != 0)
          return CLI_EXIT_USAGE;
        break;
      case OPT_MAX_CONNS:
        if (cli_parse_int("serve", "--max-connections", optarg, 1, 100000, &s.max_conns) != 0)
          return CLI_EXIT_USAGE;
        break;
      case OPT_MAX_REPEAT:
        if (cli_parse_int("serve", "--max-repeat", optarg, 1, 100000000, &s.max_repeat) != 0)
          return CLI_EXIT_USAGE;
        break;
      case OPT_MAX_NODES:
        if (cli_parse_int("serve", "--max-nodes", optarg, 1, 1000000000, &s.max_nodes) != 0)
          return CLI_EXIT_USAGE;
        break;
      case OPT_IDLE:
        if (parse_seconds("--idle-timeout", optarg, &s.idle_ms) != 0) return CLI_EXIT_USAGE;
        if (s.idle_ms == 0) return cli_usage_error("serve", "--idle-timeout must be more than 0");
        break;
      case OPT_GRACE:
        if (parse_seconds("--grace", optarg, &s.grace_ms) != 0) return CLI_EXIT_USAGE;
        break;
      case CLI_OPT_WORKERS:
        if (cli_parse_int("serve", "--workers", optarg, 0, 4096, &workers) != 0)
          return CLI_EXIT_USAGE;
        break;
      case CLI_OPT_SIMULATE: simulate = optarg; break;
      case OPT_QUIET: s.quiet = 1; break;
      case 'h': fputs(serve_help, stdout); return CLI_EXIT_OK;
      default: return cli_bad_option("serve", c, argv);
    }
  }
  if (optind != argc) return cli_usage_error("serve", "unexpected argument '%s'", argv[optind]);
  char err[256];
  if (cli_addr_parse(listen, &s.addr, err, sizeof err) != 0)
    return cli_usage_error("serve", "--listen %s", err);
  if (!cli_addr_is_local(&s.addr) && !allow_remote)
    return cli_usage_error("serve",
                           "--listen %s is not a loopback address; anyone who can reach it runs "
                           "programs as you. Add --allow-remote if that is what you want",
                           listen);

  signal(SIGPIPE, SIG_IGN); /* a client that leaves makes writes fail, not kill the server */
  int code;
  uv_loop_t loop;
  if (uv_loop_init(&loop) != 0) return cli_error(CLI_EXIT_FAILED, "cannot create the event loop");
  s.loop = &loop;
  if ((code = cli_runtime((int)workers, simulate, NULL, NULL, 0, &s.rt)) != 0) goto done;
  code = CLI_EXIT_FAILED;
  uv_signal_init(&loop, &s.sigint);
  uv_signal_init(&loop, &s.sigterm);
  uv_timer_init(&loop, &s.grace);
  s.sigint.data = s.sigterm.data = s.grace.data = &s;
  char bound[160];
  if (start_listening(&s, bound, sizeof bound) != 0) {
    uv_close((uv_handle_t *)&s.sigint, NULL);
    uv_close((uv_handle_t *)&s.sigterm, NULL);
    uv_close((uv_handle_t *)&s.grace, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    goto done;
  }
  uv_signal_start(&s.sigint, on_signal, SIGINT);
  uv_signal_start(&s.sigterm, on_signal, SIGTERM);
  printf("listening on %s\n", bound);
  fflush(stdout);
  uv_run(&loop, UV_RUN_DEFAULT);
  say(&s, "stopped");
  code = CLI_EXIT_OK;
done:
  if (uv_loop_close(&loop) != 0) {
    /* Only a bug leaves a handle open; run once more so everything closes, then give up. */
    uv_run(&loop, UV_RUN_NOWAIT);
    (void)uv_loop_close(&loop);
  }
  weft_runtime_destroy(s.rt);
  return code;
}
