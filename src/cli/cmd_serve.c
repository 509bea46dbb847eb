/* cmd_serve.c — `weft serve`: one warm runtime behind an HTTP/1.1 API (docs/cli.md, "The HTTP
 * API"). Each submission (the .weft source as the body of POST /v1/runs) becomes its own
 * program and graph; submissions run at the same time on the shared runtime. A submission is
 * a record with an id: its status and progress while it runs, then what `weft run --json`
 * would print, its Chrome trace and its SVG timeline, kept until --keep newer ones have
 * finished. `?wait=1` answers the POST itself when the run is done (what `weft submit` uses).
 *
 * Everything happens on one libuv loop (this thread), except the two steps that may take long
 * on the CPU: loading (parse and build) and reporting (formatting the outputs, destroying the
 * graph), which go to libuv's thread pool. Runs go through weft_uv_launch, so the loop never
 * blocks on a graph. Requests are parsed by http-parser (the parser written for libuv's
 * servers: streaming, callbacks, no allocation), one connection at a time on this loop.
 *
 *   connection:  requests parsed as bytes arrive; each answered in order. A ?wait=1 POST
 *                pauses the parser (later bytes are kept) until its answer is written.
 *                Malformed, too large: answered (400, 413, 414, 431), then the write side
 *                is shut down and input dropped until the client closes.
 *   submission:  load (pool) ─► admit ─► [queue] ─► run × repeat (weft_uv_launch) ─► report (pool) ─► kept
 *
 * Limits: a body of at most --max-bytes (413), a URL of at most 8 KiB (414), headers of at most
 * 80 KiB (http-parser's limit, 431); a graph of at most --max-nodes nodes (a load error,
 * exit_code 2), repeat at most --max-repeat (400); at most --max-inflight submissions loading,
 * queued, running or reporting (the next is answered 429 with Retry-After), of which at most
 * --max-running run at once (from the first run to the report; the others wait in the queue,
 * first come first served, and DELETE takes one out at once); at most --max-connections
 * connections (more wait in the kernel's backlog); a connection idle for --idle-timeout
 * seconds (no byte while a request is incomplete, or between requests) is closed, and one whose
 * request has not arrived --request-timeout seconds after its first byte is answered 408.
 *
 * Admission: a loaded submission's tensors are estimated per memory (weft_graph_memory_estimate)
 * before anything is allocated; more than --max-memory (the host; a GPU: --gpu-memory-budget,
 * nine tenths of it by default) is refused 413, more than what --memory-budget
 * (--gpu-memory-budget) leaves beside the submissions in progress 503. /metrics, /v1/devices
 * and the dashboard show what each device holds (weft_device_memory_usage).
 * The POST is answered then (202), or, with ?wait=1, when the submission is done. A submission
 * in progress past --time-limit is cancelled.
 *
 * A ?wait=1 client that goes away before its answer is written cancels its run (nobody waits
 * for it); a submission without ?wait runs to its end, or until DELETE /v1/runs/ID.
 *
 * Shutdown (SIGINT or SIGTERM): stop listening, close idle connections, let submissions in
 * progress finish (and answer the clients waiting for them), then close; after --grace seconds
 * (or a second signal) cancel the runs still in flight. The loop ends when the last connection
 * and submission in progress are gone, and the command exits 0. */
#include <errno.h>
#include <http_parser.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "cli/cli.h"
#include "cli/http.h"
#include "weft/report.h"
#include "weft/sim.h"
#include "weft/uv.h"

typedef struct server server;
typedef struct conn conn;
typedef struct submission submission;

enum { MAX_URL = 8192, MAX_DEFINES = 256, MAX_GPUS = 64 };
/* Submission latency buckets of /metrics (seconds, Prometheus' le). */
static const double buckets[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300};
enum { NBUCKETS = sizeof buckets / sizeof buckets[0] };
/* How a finished submission ended, for /metrics. */
enum { END_SUCCEEDED, END_FAILED, END_INVALID, END_CANCELLED, NENDS };
static const char *const end_words[NENDS] = {"succeeded", "failed", "invalid", "cancelled"};

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
  long max_inflight, max_running, max_conns, max_repeat, max_nodes, keep;
  uint64_t idle_ms, grace_ms, request_ms;
  int quiet, allow_files;
  char *token; /* --token-file's token: every request but GET / must carry it, or NULL */
  /* State. */
  long inflight, nconns, nkept;
  /* Runs at once: at most max_running submissions hold a slot (from their first run to their
   * report); admitted ones beyond wait in the queue, first come first served. */
  long running, queued;
  submission *queue_head, *queue_tail;
  int pending_accept; /* a connection waits in the listener for a free slot */
  int stopping, cancelling, closed_handles;
  int unlink_socket;
  uint64_t next_id;
  conn *conns;      /* doubly linked */
  submission *subs; /* doubly linked, newest first: in progress, then kept once finished */
  /* Memory admission (0: the host, 1 + k: cuda:k): what one submission may take, what all in
   * progress may take together, what they hold now. */
  int ngpus;
  size_t max_mem[1 + MAX_GPUS], budget[1 + MAX_GPUS], reserved[1 + MAX_GPUS];
  /* The time limit: submissions in progress longer than this are cancelled (0: none). */
  uint64_t time_limit_ms;
  uv_timer_t tick;
  /* What /metrics counts. */
  uint64_t ended[NENDS], requests, busy, refused_memory, timed_out, nodes_run;
  uint64_t bytes[4]; /* copied: host to device, device to host, between GPUs, within a device */
  uint64_t hist[NBUCKETS + 1];
  double hist_sum;
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
  int closing, open_handles, reading, close_after_write, discard, writes;
  char peer[80];
  http_parser parser;
  /* The request being parsed. */
  weft__strbuf url, field, value;
  int authorized; /* the request carried the server's token (or it has none) */
  uint64_t t_request; /* uv_now() at the request's first byte; 0 between requests */
  int in_value, refused; /* refused: answered an error while parsing; drop the rest */
  int expect_continue;
  weft__strbuf body;
  /* A ?wait=1 submission this connection waits for (the parser paused meanwhile), and the
   * bytes received since, parsed once it is answered. */
  submission *waiting;
  weft__strbuf held;
};

enum phase { P_LOADING, P_QUEUED, P_RUNNING, P_REPORTING, P_DONE };
static const char *const phase_words[] = {"loading", "queued", "running", "reporting", "done"};

struct submission {
  server *srv;
  submission *prev, *next;
  uint64_t id;
  conn *waiter; /* the ?wait=1 connection, NULL without one or once it left */
  int phase, cancel, wanted_wait;
  char *name, *device, *body;
  const char *defines[MAX_DEFINES];
  int ndefines;
  size_t body_len;
  cli_job job;
  uv_work_t work;
  weft_run *run; /* the run in flight, valid until its callback returns */
  uint64_t t_submit, t0; /* uv_hrtime() */
  double total_ms, elapsed_s;
  time_t submitted;
  size_t nodes, nodes_done;
  int discard; /* snapshot for the pool: nobody will read the outputs */
  /* Once done: what `weft run` would print, and the last run's views. */
  char *out, *err, *trace, *svg;
  size_t out_len, err_len, trace_len, svg_len;
  int exit_code, end;
  /* Admission: the bytes each memory would take (0: the host, 1 + k: cuda:k). */
  size_t need[1 + MAX_GPUS];
  int admitted, timed_out;
  int slot;            /* holds one of the server's --max-running slots */
  submission *qnext;   /* in the queue: the one after it */
};

/* A response written from the loop: its bytes live until the write completes. */
typedef struct note {
  uv_write_t wreq;
  conn *c;
  char *data;
} note;

static const char serve_help[] =
    "Usage: weft serve [OPTIONS]\n"
    "Keep one weft runtime warm and run the .weft programs that clients submit over HTTP\n"
    "(weft submit, curl, the dashboard at / ; the API is in docs/cli.md), several at a time.\n"
    "Prints 'listening on ADDR' on standard output once it accepts connections.\n"
    "\n"
    "Options:\n"
    "      --listen ADDR        HOST:PORT or unix:PATH (default 127.0.0.1:7878; port 0 picks a\n"
    "                           free port, printed on standard output)\n"
    "      --allow-remote       allow a non-loopback address (submissions run as this user!)\n"
    "      --token-file FILE    require 'Authorization: Bearer TOKEN' on every request (but the\n"
    "                           page at /), TOKEN the file's first line; needed off loopback\n"
    "      --allow-files        let submissions read (from \"f\") and write (save) files, as\n"
    "                           this user, relative to the current directory\n"
    "      --max-bytes N        largest submission in bytes (default 1048576)\n"
    "      --max-inflight N     submissions in progress at once (queued ones included); more\n"
    "                           are answered 429 (default 16)\n"
    "      --max-running N      submissions running at once; admitted ones beyond wait in a\n"
    "                           queue, first come first served (default 4)\n"
    "      --max-connections N  connections at once; more wait to be accepted (default 128)\n"
    "      --max-repeat N       largest repeat a submission may ask for (default 1000)\n"
    "      --max-nodes N        most nodes a submission's graph may have (default 1000000)\n"
    "      --keep N             finished submissions kept for GET /v1/runs (default 100)\n"
    "      --max-memory SIZE    most host memory one submission's tensors may take (413 beyond;\n"
    "                           default: the budget)\n"
    "      --memory-budget SIZE most host memory the submissions in progress may take together\n"
    "                           (503 beyond; default: 3/4 of the host's memory)\n"
    "      --gpu-memory-budget SIZE  most memory of each GPU the submissions in progress may\n"
    "                           take together, and one of them alone (default: 9/10 of it)\n"
    "      --time-limit SEC     cancel a submission in progress longer than SEC (default: none)\n"
    "      --idle-timeout SEC   close a connection idle this long (default 60)\n"
    "      --request-timeout SEC  answer 408 and close when a request takes longer than SEC\n"
    "                           to arrive, however it trickles in (default 30)\n"
    "      --grace SEC          on SIGINT/SIGTERM, cancel runs still going after SEC (default 10)\n"
    "      --workers N          CPU worker threads (default: one per core)\n"
    "      --simulate PROFILE   run submissions on the virtual devices of a machine profile\n"
    "      --quiet              do not log each submission on standard error\n"
    "  -h, --help               show this help and exit\n"
    "\n"
    "Exit status: 0 after a clean shutdown, 1 the server could not start, 2 usage.\n";

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
static void conn_feed(conn *c, const char *data, size_t len);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf);
static void maybe_finish(server *s);
static void run_next(submission *sub);
static void report(submission *sub);
static void start_queued(server *s);
static void answer_waiter(submission *sub);
static void release_waiter(submission *sub);
static void respond_error(conn *c, int code, int fatal, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

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
  if (sub->phase == P_DONE) s->nkept--;
  cli_job_fini(&sub->job);
  free(sub->name);
  free(sub->device);
  for (int i = 0; i < sub->ndefines; i++) free((char *)sub->defines[i]);
  free(sub->body);
  free(sub->out);
  free(sub->err);
  free(sub->trace);
  free(sub->svg);
  free(sub);
}

/* Keeps the newest --keep finished submissions. */
static void evict(server *s) {
  if (s->nkept <= s->keep) return;
  submission *last = s->subs;
  while (last != NULL && last->next != NULL) last = last->next;
  for (submission *x = last, *prev; x != NULL && s->nkept > s->keep; x = prev) {
    prev = x->prev;
    if (x->phase == P_DONE && x->waiter == NULL) sub_free(x);
  }
}

static submission *sub_find(server *s, uint64_t id) {
  for (submission *x = s->subs; x != NULL; x = x->next)
    if (x->id == id) return x;
  return NULL;
}

/* Writes the report of one of the run's views (the statistics' JSON, the trace, the SVG)
 * into *text; nothing on failure. */
static void view(const weft_run_stats *st, int format, char **text, size_t *len) {
  FILE *mem = open_memstream(text, len);
  int rc = mem != NULL ? weft_run_stats_write(st, format, mem) : WEFT_ENOMEM;
  if (mem != NULL && fclose(mem) != 0) rc = WEFT_ENOMEM;
  if (rc != WEFT_OK) {
    free(*text);
    *text = NULL;
    *len = 0;
  }
}

/* The last run's statistics (in the JSON document, as `weft run --json` has them), trace and
 * timeline. */
static void keep_views(submission *sub, const weft_run_stats *st) {
  size_t len = 0;
  free(sub->job.stats_json);
  sub->job.stats_json = NULL;
  view(st, WEFT_REPORT_JSON, &sub->job.stats_json, &len);
  while (len > 0 && sub->job.stats_json[len - 1] == '\n') sub->job.stats_json[--len] = '\0';
  free(sub->trace);
  free(sub->svg);
  sub->trace = sub->svg = NULL;
  view(st, WEFT_REPORT_TRACE, &sub->trace, &sub->trace_len);
  view(st, WEFT_REPORT_SVG, &sub->svg, &sub->svg_len);
}

/* A run's statistics: the bytes its copies moved (for /metrics), and, for the submission's
 * last run, its views. */
static void account(submission *sub, weft_run *run, int last) {
  weft_run_stats *st = NULL;
  if (run == NULL || weft_run_stats_create(run, &st) != WEFT_OK) return;
  weft_stats_summary sum;
  weft_run_stats_summary(st, &sum);
  uint64_t *b = sub->srv->bytes;
  b[0] += sum.bytes_h2d;
  b[1] += sum.bytes_d2h;
  b[2] += sum.bytes_peer;
  b[3] += sum.bytes_local;
  if (last) keep_views(sub, st);
  weft_run_stats_destroy(st);
}

/* Pool thread: the answer's two parts, and the graph's destruction. */
static void work_report(uv_work_t *w) {
  submission *sub = w->data;
  FILE *out = open_memstream(&sub->out, &sub->out_len);
  FILE *err = open_memstream(&sub->err, &sub->err_len);
  if (out != NULL && err != NULL) cli_job_report(&sub->job, out, err);
  if (out != NULL) fclose(out);
  if (err != NULL) fclose(err);
  if (out == NULL || err == NULL) {
    cli_job_fail(&sub->job, "outputs", WEFT_ENOMEM, "out of memory for the answer");
    sub->job.exit_code = CLI_EXIT_FAILED;
    free(sub->out);
    free(sub->err);
    sub->out = sub->err = NULL;
    sub->out_len = sub->err_len = 0;
  }
  weft_program_destroy(sub->job.prog);
  sub->job.prog = NULL;
}

static void after_report(uv_work_t *w, int status) {
  (void)status;
  submission *sub = w->data;
  server *s = sub->srv;
  sub->exit_code = sub->job.exit_code;
  sub->end = sub->job.status == WEFT_ECANCELED               ? END_CANCELLED
             : sub->exit_code == CLI_EXIT_OK                 ? END_SUCCEEDED
             : sub->exit_code == CLI_EXIT_USAGE              ? END_INVALID
                                                             : END_FAILED;
  sub->phase = P_DONE;
  sub->elapsed_s = (double)(uv_hrtime() - sub->t_submit) / 1e9;
  s->inflight--;
  if (sub->admitted)
    for (int k = 0; k <= s->ngpus; k++) s->reserved[k] -= sub->need[k];
  if (sub->slot) {
    sub->slot = 0;
    s->running--;
    start_queued(s);
  }
  s->nkept++;
  s->ended[sub->end]++;
  int b = 0;
  while (b < NBUCKETS && sub->elapsed_s > buckets[b]) b++;
  s->hist[b]++;
  s->hist_sum += sub->elapsed_s;
  say(s, "run %llu: %s: %s (exit %d), %d run%s, %.3f ms", (unsigned long long)sub->id, sub->name,
      end_words[sub->end], sub->exit_code, sub->job.nruns, sub->job.nruns == 1 ? "" : "s", sub->total_ms);
  if (sub->waiter != NULL) answer_waiter(sub);
  evict(s);
  maybe_finish(s);
}

static void report(submission *sub) {
  sub->phase = P_REPORTING;
  sub->work.data = sub;
  if (uv_queue_work(sub->srv->loop, &sub->work, work_report, after_report) != 0) {
    work_report(&sub->work); /* cannot happen with a valid loop; do it here rather than leak */
    after_report(&sub->work, 0);
  }
}

/* Why a submission was cancelled: its record says so. */
static const char *cancel_reason(const submission *sub) {
  if (sub->timed_out) return "the submission ran past the server's --time-limit: the run was cancelled";
  if (sub->srv->cancelling) return "the server is shutting down: the run was cancelled";
  if (sub->wanted_wait && sub->waiter == NULL) return "the client left: the run was cancelled";
  return "the run was cancelled (DELETE)";
}

/* Launches the next run, or reports: after the last run, a failure, or when the submission is
 * cancelled (DELETE, its waiting client left, or the server's grace period is over). */
static void next_or_report(submission *sub) {
  if (sub->job.exit_code != CLI_EXIT_OK || sub->job.nruns >= sub->job.repeat) {
    report(sub);
  } else if (sub->cancel || sub->srv->cancelling) {
    cli_job_fail(&sub->job, "run", WEFT_ECANCELED, cancel_reason(sub));
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
  if (status == WEFT_ECANCELED && (sub->cancel || sub->srv->cancelling))
    cli_job_fail(&sub->job, "run", WEFT_ECANCELED, cancel_reason(sub)); /* the first failure stays */
  cli_job_record(&sub->job, status, run, ms);
  if (status == WEFT_OK) sub->srv->nodes_run += sub->nodes;
  account(sub, run, status != WEFT_OK || sub->job.nruns >= sub->job.repeat);
  next_or_report(sub);
}

static void run_next(submission *sub) {
  sub->phase = P_RUNNING;
  sub->t0 = uv_hrtime();
  int rc = weft_uv_launch(sub->srv->loop, weft_program_graph(sub->job.prog), on_run, sub, &sub->run);
  if (rc != WEFT_OK) {
    cli_job_record(&sub->job, rc, NULL, 0);
    report(sub);
  }
}

/* A slot for a submission about to run (or report at once: a refused or failed load holds
 * none). */
static void take_slot(submission *sub) {
  if (sub->job.prog == NULL) return;
  sub->slot = 1;
  sub->srv->running++;
}

/* A slot came free: the oldest queued submission runs (or, cancelled meanwhile, reports). */
static void start_queued(server *s) {
  while (s->running < s->max_running && s->queue_head != NULL) {
    submission *sub = s->queue_head;
    s->queue_head = sub->qnext;
    if (s->queue_head == NULL) s->queue_tail = NULL;
    s->queued--;
    take_slot(sub);
    next_or_report(sub);
  }
}

static void work_load(uv_work_t *w) {
  submission *sub = w->data;
  cli_job_load(&sub->job, sub->srv->rt);
}

/* What the submission's tensors will take in each memory, before anything is allocated
 * (weft_graph_memory_estimate: what lives through the run, plus its temporaries' peak in the
 * program's order). */
static int measure(submission *sub) {
  weft_graph *g = weft_program_graph(sub->job.prog);
  for (int k = 0; k <= sub->srv->ngpus; k++) {
    int rc = weft_graph_memory_estimate(g, k == 0 ? weft_cpu() : weft_cuda(k - 1), &sub->need[k]);
    if (rc != WEFT_OK) return rc;
  }
  return WEFT_OK;
}

static void memory_name(int k, char *buf, size_t size) {
  if (k == 0)
    snprintf(buf, size, "host memory");
  else
    snprintf(buf, size, "memory of cuda:%d", k - 1);
}

/* Admits a loaded submission against the memory limits: 0, or the HTTP code of a refusal with
 * its message. */
static int admit(submission *sub, char *msg, size_t size) {
  server *s = sub->srv;
  if (measure(sub) != WEFT_OK) {
    snprintf(msg, size, "%s: its memory cannot be estimated: %s", sub->name, weft_last_error());
    return 422;
  }
  char what[40];
  for (int k = 0; k <= s->ngpus; k++) {
    memory_name(k, what, sizeof what);
    if (sub->need[k] > s->max_mem[k]) {
      snprintf(msg, size, "%s needs %.1f MiB of %s (its tensors); this server takes at most %.1f MiB a submission%s",
               sub->name, (double)sub->need[k] / 1048576, what, (double)s->max_mem[k] / 1048576,
               k == 0 ? " (--max-memory)" : "");
      return 413;
    }
  }
  for (int k = 0; k <= s->ngpus; k++) {
    memory_name(k, what, sizeof what);
    if (s->reserved[k] + sub->need[k] > s->budget[k]) {
      snprintf(msg, size, "%s needs %.1f MiB of %s; the submissions in progress hold %.1f of the server's %.1f MiB%s: "
               "try again later", sub->name, (double)sub->need[k] / 1048576, what, (double)s->reserved[k] / 1048576,
               (double)s->budget[k] / 1048576, k == 0 ? " (--memory-budget)" : "");
      return 503;
    }
  }
  for (int k = 0; k <= s->ngpus; k++) s->reserved[k] += sub->need[k];
  sub->admitted = 1;
  return 0;
}

static void after_load(uv_work_t *w, int status) {
  (void)status;
  submission *sub = w->data;
  server *s = sub->srv;
  char msg[400];
  int code;
  if (sub->job.prog != NULL && !sub->cancel && (code = admit(sub, msg, sizeof msg)) != 0) {
    /* Refused: no record is kept; the client is told why. */
    say(s, "run %llu: %s: refused: %s", (unsigned long long)sub->id, sub->name, msg);
    s->refused_memory++;
    if (sub->waiter != NULL) {
      conn *c = sub->waiter;
      respond_error(c, code, 0, "%s", msg);
      release_waiter(sub);
    }
    s->inflight--;
    sub_free(sub);
    maybe_finish(s);
    return;
  }
  if (sub->job.prog != NULL) sub->nodes = weft_graph_node_count(weft_program_graph(sub->job.prog));
  if (sub->job.prog != NULL && !sub->cancel && !s->cancelling && s->running >= s->max_running) {
    /* Every slot is taken: it waits its turn (start_queued). */
    sub->phase = P_QUEUED;
    sub->qnext = NULL;
    if (s->queue_tail != NULL)
      s->queue_tail->qnext = sub;
    else
      s->queue_head = sub;
    s->queue_tail = sub;
    s->queued++;
  } else {
    take_slot(sub);
    next_or_report(sub);
  }
  if (sub->waiter != NULL && !sub->wanted_wait) answer_waiter(sub); /* 202: admitted, running or queued */
}

static void sub_start(submission *sub) {
  cli_job *j = &sub->job;
  j->name = sub->name;
  j->text = sub->body;
  j->len = sub->body_len;
  j->dsl.defines = sub->defines;
  j->dsl.ndefines = sub->ndefines;
  j->dsl.device = sub->device;
  j->dsl.deny_files = !sub->srv->allow_files;
  j->dsl.max_nodes = (size_t)sub->srv->max_nodes;
  sub->phase = P_LOADING;
  sub->work.data = sub;
  if (uv_queue_work(sub->srv->loop, &sub->work, work_load, after_load) != 0) {
    work_load(&sub->work);
    after_load(&sub->work, 0);
  }
}

/* Cancels a submission in progress: its run stops at its next node; a load or a report
 * finishes first (next_or_report sees `cancel`); a queued one leaves the queue and is
 * reported cancelled at once, without a slot. */
static void sub_cancel(submission *sub) {
  sub->cancel = 1;
  if (sub->run != NULL) weft_run_cancel(sub->run);
  if (sub->phase == P_QUEUED) {
    server *s = sub->srv;
    submission **at = &s->queue_head, *before = NULL;
    while (*at != sub) {
      before = *at;
      at = &(*at)->qnext;
    }
    *at = sub->qnext;
    if (s->queue_tail == sub) s->queue_tail = before;
    s->queued--;
    next_or_report(sub);
  }
}

/* The time limit's check, a few times per limit: submissions in progress past it are
 * cancelled (their records say why). */
static void on_tick(uv_timer_t *t) {
  server *s = t->data;
  uint64_t now = uv_hrtime();
  for (submission *x = s->subs; x != NULL; x = x->next) {
    if (x->phase == P_DONE || x->cancel || (now - x->t_submit) / 1000000 < s->time_limit_ms) continue;
    x->timed_out = 1;
    s->timed_out++;
    say(s, "run %llu: %s: past --time-limit, cancelled", (unsigned long long)x->id, x->name);
    sub_cancel(x);
  }
}

/* ---- the record of a submission, as JSON --------------------------------------------------- */

static const char *status_word(const submission *sub) {
  return sub->phase == P_DONE ? end_words[sub->end] : phase_words[sub->phase];
}

/* {"id", "name", "status", "exit_code", "submitted", "elapsed_s", "repeat", "runs_done",
 *  "progress": {"nodes_done", "nodes"}, "links"} and, with `full` once done: "output" (what
 * `weft run` printed on standard output), "errors" (on standard error) and "result" (the JSON
 * document of `weft run --json`, when the submission asked for json). */
static void record_json(const submission *sub, weft__strbuf *b, int full) {
  char when[32];
  struct tm tm;
  gmtime_r(&sub->submitted, &tm);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  size_t done = sub->nodes_done, total = sub->nodes;
  if (sub->run != NULL && weft_run_progress(sub->run, &done, &total) != WEFT_OK) done = 0;
  double elapsed = sub->phase == P_DONE ? sub->elapsed_s : (double)(uv_hrtime() - sub->t_submit) / 1e9;
  weft__strbuf_printf(b, "{\"id\": %llu, \"name\": ", (unsigned long long)sub->id);
  weft__json_put_str(b, sub->name);
  weft__strbuf_printf(b, ", \"status\": \"%s\", \"exit_code\": ", status_word(sub));
  if (sub->phase == P_DONE)
    weft__strbuf_printf(b, "%d", sub->exit_code);
  else
    weft__strbuf_puts(b, "null");
  weft__strbuf_printf(b,
                      ", \"submitted\": \"%s\", \"elapsed_s\": %.6f, \"repeat\": %d, \"runs_done\": %d, "
                      "\"progress\": {\"nodes_done\": %zu, \"nodes\": %zu}",
                      when, elapsed, sub->job.repeat, sub->job.nruns, sub->phase == P_DONE ? total : done, total);
  weft__strbuf_printf(b, ", \"trace\": %s, \"timeline\": %s", sub->trace != NULL ? "true" : "false",
                      sub->svg != NULL ? "true" : "false");
  if (full && sub->phase == P_DONE) {
    weft__strbuf_puts(b, ", \"output\": ");
    weft__json_put_str(b, sub->out != NULL ? sub->out : "");
    weft__strbuf_puts(b, ", \"errors\": ");
    weft__json_put_str(b, sub->err != NULL ? sub->err : "");
    weft__strbuf_puts(b, ", \"result\": ");
    if (sub->job.json && sub->out_len > 0)
      weft__strbuf_put(b, sub->out, sub->out_len);
    else
      weft__strbuf_puts(b, "null");
  }
  weft__strbuf_puts(b, "}");
}

/* ---- responses ------------------------------------------------------------------------------ */

static void on_note_written(uv_write_t *w, int status) {
  note *n = w->data;
  conn *c = n->c;
  free(n->data);
  free(n);
  c->writes--;
  if (status != 0 || c->closing) return; /* a failed write: the client left, its close is on its way */
  if (c->close_after_write && c->writes == 0 && c->waiting == NULL) conn_close(c);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  free(req);
}

/* After an answer that ends the connection (an error, "Connection: close"): the write side is
 * shut down once the answer is out, and what else comes is dropped until the client closes
 * (closing at once could reset the connection before the client reads the answer). */
static void end_after_answer(conn *c) {
  if (c->discard || c->closing) return;
  c->discard = 1;
  weft__strbuf_truncate(&c->held, 0);
  uv_shutdown_t *sd = malloc(sizeof *sd);
  if (sd == NULL || uv_shutdown(sd, &c->h.stream, on_shutdown) != 0) {
    free(sd);
    c->close_after_write = 1;
  }
}

/* Writes one response: status line, headers (extra: more header lines, each ending in \r\n),
 * the body. `keep` 0 ends the connection after it. */
static void respond(conn *c, int code, const char *type, const char *body, size_t len, const char *extra,
                    int keep) {
  if (c->closing) return;
  weft__strbuf h;
  weft__strbuf_init(&h);
  if (c->srv->stopping) keep = 0;
  weft__strbuf_printf(&h,
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
                      "Connection: %s\r\n%s\r\n",
                      code, cli_http_reason(code), type, len, keep ? "keep-alive" : "close", extra != NULL ? extra : "");
  weft__strbuf_put(&h, body != NULL ? body : "", len);
  note *n = malloc(sizeof *n);
  size_t total = h.len;
  if (n == NULL || h.len > 0x7fffffffu || weft__strbuf_take(&h, "an answer", &n->data) != WEFT_OK) {
    free(n);
    weft__strbuf_fini(&h);
    say(c->srv, "%s: out of memory for an answer of %zu bytes", c->peer, len);
    conn_close(c);
    return;
  }
  n->c = c;
  n->wreq.data = n;
  uv_buf_t buf = uv_buf_init(n->data, (unsigned)total);
  if (uv_write(&n->wreq, &c->h.stream, &buf, 1, on_note_written) != 0) {
    free(n->data);
    free(n);
    conn_close(c);
    return;
  }
  c->writes++;
  if (!keep) end_after_answer(c);
}

static void respond_json(conn *c, int code, const weft__strbuf *b, const char *extra) {
  if (b->failed) {
    respond(c, 500, "text/plain", "out of memory\n", 14, NULL, 0);
    return;
  }
  respond(c, code, "application/json", b->data, b->len, extra, http_should_keep_alive(&c->parser));
}

/* {"error": msg, "code": code}, then the connection ends if `fatal` (the request's framing is
 * lost, or its body was not read). */
static void respond_error(conn *c, int code, int fatal, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  weft__strbuf b;
  weft__strbuf_init(&b);
  weft__strbuf_puts(&b, "{\"error\": ");
  weft__json_put_str(&b, msg);
  weft__strbuf_printf(&b, ", \"code\": %d}\n", code);
  say(c->srv, "%s: %d: %s", c->peer, code, msg);
  if (code == 429) c->srv->busy++;
  const char *extra = code == 429 || code == 503 ? "Retry-After: 1\r\n" : NULL;
  if (b.failed)
    respond(c, 500, "text/plain", "out of memory\n", 14, NULL, 0);
  else
    respond(c, code, "application/json", b.data, b.len, extra, !fatal && http_should_keep_alive(&c->parser));
  weft__strbuf_fini(&b);
}

/* Answers with a submission's record (record_json). */
static void respond_record(conn *c, int code, const submission *sub, int full, const char *extra) {
  weft__strbuf b;
  weft__strbuf_init(&b);
  record_json(sub, &b, full);
  weft__strbuf_puts(&b, "\n");
  respond_json(c, code, &b, extra);
  weft__strbuf_fini(&b);
}

/* The connection waited for sub: it reads its next requests again (those that came meanwhile
 * first). */
static void release_waiter(submission *sub) {
  conn *c = sub->waiter;
  sub->waiter = NULL;
  c->waiting = NULL;
  if (c->closing || c->discard) return;
  uv_timer_again(&c->idle);
  http_parser_pause(&c->parser, 0);
  weft__strbuf held = c->held;
  weft__strbuf_init(&c->held);
  if (held.len > 0) conn_feed(c, held.data, held.len);
  weft__strbuf_fini(&held);
  if (!c->closing && !c->reading && c->waiting == NULL && uv_read_start(&c->h.stream, on_alloc, on_read) == 0)
    c->reading = 1;
}

/* Answers the client waiting for sub: the finished record (wait=1), or, for a submission
 * without wait, the record once admitted (202). */
static void answer_waiter(submission *sub) {
  conn *c = sub->waiter;
  if (sub->phase == P_DONE && sub->wanted_wait) {
    respond_record(c, 200, sub, 1, NULL);
  } else {
    char loc[64];
    snprintf(loc, sizeof loc, "Location: /v1/runs/%llu\r\n", (unsigned long long)sub->id);
    respond_record(c, 202, sub, 0, loc);
  }
  release_waiter(sub);
}

/* ---- the routes --------------------------------------------------------------------------- */

static const char dashboard_html[] =
#include "cli/dashboard.inc"
    ;

/* POST /v1/runs?name=&repeat=&device=&define=NAME=VALUE&format=json|text&wait=1 */
static void post_run(conn *c, const char *query, size_t qlen) {
  server *s = c->srv;
  char key[64], val[1024], err[256];
  const char *q = query, *end = query + qlen;
  char *name = NULL, *device = NULL;
  const char *defines[MAX_DEFINES];
  int ndefines = 0, json = 1, wait = 0, rc;
  long repeat = 1;
  int bad = 0;
  while (!bad && (rc = cli_query_next(&q, end, key, sizeof key, val, sizeof val, err, sizeof err)) != 0) {
    if (rc < 0) {
      respond_error(c, 400, 0, "%s", err);
      bad = 1;
    } else if (strcmp(key, "name") == 0) {
      free(name);
      name = strdup(val);
    } else if (strcmp(key, "device") == 0) {
      free(device);
      device = strdup(val);
    } else if (strcmp(key, "define") == 0) {
      if (ndefines == MAX_DEFINES) {
        respond_error(c, 400, 0, "more than %d defines", MAX_DEFINES);
        bad = 1;
      } else if (strchr(val, '=') == NULL) {
        respond_error(c, 400, 0, "define '%.200s' is not NAME=VALUE", val);
        bad = 1;
      } else {
        defines[ndefines++] = strdup(val);
      }
    } else if (strcmp(key, "repeat") == 0) {
      char *e;
      errno = 0;
      repeat = strtol(val, &e, 10);
      if (*val == '\0' || *e != '\0' || errno != 0 || repeat < 1 || repeat > s->max_repeat) {
        respond_error(c, 400, 0, "repeat '%.40s': a number from 1 to this server's --max-repeat, %ld", val,
                      s->max_repeat);
        bad = 1;
      }
    } else if (strcmp(key, "format") == 0) {
      if (strcmp(val, "json") == 0 || strcmp(val, "text") == 0) {
        json = strcmp(val, "json") == 0;
      } else {
        respond_error(c, 400, 0, "format '%.40s': json or text", val);
        bad = 1;
      }
    } else if (strcmp(key, "wait") == 0) {
      wait = strcmp(val, "0") != 0 && strcmp(val, "false") != 0;
    } else {
      respond_error(c, 400, 0, "unknown query parameter '%.60s' (name, repeat, device, define, format, wait)", key);
      bad = 1;
    }
  }
  if (!bad && s->inflight >= s->max_inflight) {
    respond_error(c, 429, 0, "the server is busy (%ld submissions in progress); try again", s->inflight);
    bad = 1;
  }
  submission *sub = bad ? NULL : calloc(1, sizeof *sub);
  size_t body_len = c->body.len;
  /* The body is taken: the connection gets a new buffer for its next request. */
  if (!bad && (sub == NULL || (name == NULL && (name = strdup("submission.weft")) == NULL) ||
               weft__strbuf_take(&c->body, "a submission", &sub->body) != WEFT_OK)) {
    respond_error(c, 503, 0, "the server is out of memory");
    bad = 1;
  }
  if (bad) {
    if (sub != NULL) free(sub->body);
    free(sub);
    free(name);
    free(device);
    for (int i = 0; i < ndefines; i++) free((char *)defines[i]);
    return;
  }
  sub->srv = s;
  sub->id = ++s->next_id;
  sub->name = name;
  sub->device = device;
  memcpy(sub->defines, defines, (size_t)ndefines * sizeof *defines);
  sub->ndefines = ndefines;
  sub->body_len = body_len;
  sub->submitted = time(NULL);
  sub->t_submit = uv_hrtime();
  cli_job_init(&sub->job);
  sub->job.repeat = (int)repeat;
  sub->job.json = json;
  sub->job.no_values = weft_sim_active(s->rt) && !weft_sim_computes(s->rt);
  sub->wanted_wait = wait;
  LIST_PUSH(s->subs, sub);
  s->inflight++;
  say(s, "%s: run %llu: %s submitted (%zu bytes)", c->peer, (unsigned long long)sub->id, sub->name, sub->body_len);
  /* Answered once loaded and admitted (202), or, with wait=1, when done; later requests on
   * this connection wait meanwhile (the parser pauses). */
  sub->waiter = c;
  c->waiting = sub;
  uv_timer_stop(&c->idle);
  http_parser_pause(&c->parser, 1);
  sub_start(sub);
}

static void get_runs(conn *c) {
  weft__strbuf b;
  weft__strbuf_init(&b);
  weft__strbuf_puts(&b, "{\"runs\": [");
  for (submission *x = c->srv->subs; x != NULL; x = x->next) {
    weft__strbuf_puts(&b, x == c->srv->subs ? "\n  " : ",\n  ");
    record_json(x, &b, 0);
  }
  weft__strbuf_printf(&b, "\n], \"in_progress\": %ld, \"running\": %ld, \"queued\": %ld, \"kept\": %ld}\n",
                      c->srv->inflight, c->srv->running, c->srv->queued, c->srv->nkept);
  respond_json(c, 200, &b, NULL);
  weft__strbuf_fini(&b);
}

static void get_devices(conn *c) {
  weft__strbuf b;
  weft__strbuf_init(&b);
  if (cli_devices_write(c->srv->rt, 1, &b) != CLI_EXIT_OK)
    respond_error(c, 500, 0, "the devices could not be listed: %s", weft_last_error());
  else
    respond_json(c, 200, &b, NULL);
  weft__strbuf_fini(&b);
}

static void get_metrics(conn *c) {
  server *s = c->srv;
  weft__strbuf b;
  weft__strbuf_init(&b);
  weft__strbuf_puts(&b, "# HELP weft_runs_total Submissions finished, by how they ended.\n# TYPE weft_runs_total counter\n");
  for (int e = 0; e < NENDS; e++)
    weft__strbuf_printf(&b, "weft_runs_total{status=\"%s\"} %llu\n", end_words[e], (unsigned long long)s->ended[e]);
  weft__strbuf_printf(&b,
                      "# HELP weft_runs_in_progress Submissions loading, queued, running or reporting.\n"
                      "# TYPE weft_runs_in_progress gauge\nweft_runs_in_progress %ld\n"
                      "# HELP weft_runs_running Submissions holding a --max-running slot.\n"
                      "# TYPE weft_runs_running gauge\nweft_runs_running %ld\n"
                      "# HELP weft_runs_queued Admitted submissions waiting for a slot (the queue's depth).\n"
                      "# TYPE weft_runs_queued gauge\nweft_runs_queued %ld\n"
                      "# HELP weft_runs_refused_busy_total Submissions answered 429 (--max-inflight reached).\n"
                      "# TYPE weft_runs_refused_busy_total counter\nweft_runs_refused_busy_total %llu\n"
                      "# HELP weft_runs_refused_memory_total Submissions refused for their memory (413, 503).\n"
                      "# TYPE weft_runs_refused_memory_total counter\nweft_runs_refused_memory_total %llu\n"
                      "# HELP weft_runs_timed_out_total Submissions cancelled at --time-limit.\n"
                      "# TYPE weft_runs_timed_out_total counter\nweft_runs_timed_out_total %llu\n"
                      "# HELP weft_nodes_run_total Nodes of the runs that succeeded.\n"
                      "# TYPE weft_nodes_run_total counter\nweft_nodes_run_total %llu\n"
                      "# HELP weft_http_requests_total HTTP requests answered or being answered.\n"
                      "# TYPE weft_http_requests_total counter\nweft_http_requests_total %llu\n"
                      "# HELP weft_connections Open connections.\n# TYPE weft_connections gauge\nweft_connections %ld\n",
                      s->inflight, s->running, s->queued, (unsigned long long)s->busy, (unsigned long long)s->refused_memory,
                      (unsigned long long)s->timed_out, (unsigned long long)s->nodes_run,
                      (unsigned long long)s->requests, s->nconns);
  static const char *const links[4] = {"h2d", "d2h", "peer", "local"};
  weft__strbuf_puts(&b, "# HELP weft_bytes_copied_total Bytes the runs' copies moved, by link.\n"
                        "# TYPE weft_bytes_copied_total counter\n");
  for (int k = 0; k < 4; k++)
    weft__strbuf_printf(&b, "weft_bytes_copied_total{link=\"%s\"} %llu\n", links[k], (unsigned long long)s->bytes[k]);
  weft__strbuf_puts(&b, "# HELP weft_memory_reserved_bytes What the submissions in progress may take, by memory.\n"
                        "# TYPE weft_memory_reserved_bytes gauge\n");
  weft__strbuf_printf(&b, "weft_memory_reserved_bytes{memory=\"host\"} %zu\n", s->reserved[0]);
  for (int k = 1; k <= s->ngpus; k++)
    weft__strbuf_printf(&b, "weft_memory_reserved_bytes{memory=\"cuda:%d\"} %zu\n", k - 1, s->reserved[k]);
  weft__strbuf_puts(&b, "# HELP weft_memory_budget_bytes What the submissions in progress may take together.\n"
                        "# TYPE weft_memory_budget_bytes gauge\n");
  weft__strbuf_printf(&b, "weft_memory_budget_bytes{memory=\"host\"} %zu\n", s->budget[0]);
  for (int k = 1; k <= s->ngpus; k++)
    weft__strbuf_printf(&b, "weft_memory_budget_bytes{memory=\"cuda:%d\"} %zu\n", k - 1, s->budget[k]);
  /* Each device's memory as weft holds it (weft_device_memory_usage; simulated GPUs have none)
   * and in all, each device asked once. */
  static const char *const mem_names[4] = {"in_use", "peak", "reserved", "total"};
  static const char *const mem_help[4] = {"Bytes the tensors of the runs hold now, by device.",
                                          "The most bytes the tensors of the runs held at once since the server started, by device.",
                                          "Bytes weft holds from the system or driver for tensors, by device.",
                                          "Memory of each device."};
  size_t mem[1 + MAX_GPUS][4];
  int has_use[1 + MAX_GPUS], has_total[1 + MAX_GPUS];
  for (int k = 0; k <= s->ngpus; k++) {
    weft_device d = k == 0 ? weft_cpu() : weft_cuda(k - 1);
    weft_memory_usage use = {0};
    weft_device_info info = {0};
    has_use[k] = weft_device_memory_usage(s->rt, d, &use) == WEFT_OK;
    has_total[k] = weft_device_info_get(s->rt, d, &info) == WEFT_OK;
    mem[k][0] = use.in_use;
    mem[k][1] = use.peak;
    mem[k][2] = use.reserved;
    mem[k][3] = info.memory_bytes;
  }
  for (int m = 0; m < 4; m++) {
    weft__strbuf_printf(&b, "# HELP weft_device_memory_%s_bytes %s\n# TYPE weft_device_memory_%s_bytes gauge\n",
                        mem_names[m], mem_help[m], mem_names[m]);
    for (int k = 0; k <= s->ngpus; k++) {
      char name[32];
      if (!(m == 3 ? has_total[k] : has_use[k])) continue;
      weft__strbuf_printf(&b, "weft_device_memory_%s_bytes{device=\"%s\"} %zu\n", mem_names[m],
                          weft_device_str(k == 0 ? weft_cpu() : weft_cuda(k - 1), name, sizeof name), mem[k][m]);
    }
  }
  /* The process's own, under Prometheus' standard names (Linux: /proc/self). */
  long pages = 0, fds = 0;
  FILE *statm = fopen("/proc/self/statm", "r");
  if (statm != NULL) {
    long size;
    if (fscanf(statm, "%ld %ld", &size, &pages) != 2) pages = 0;
    fclose(statm);
  }
  uv_fs_t req;
  if (uv_fs_scandir(NULL, &req, "/proc/self/fd", 0, NULL) >= 0) fds = (long)req.result;
  uv_fs_req_cleanup(&req);
  weft__strbuf_printf(&b,
                      "# HELP process_resident_memory_bytes Resident memory of the server.\n"
                      "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %lld\n"
                      "# HELP process_open_fds Open file descriptors of the server.\n"
                      "# TYPE process_open_fds gauge\nprocess_open_fds %ld\n",
                      (long long)pages * sysconf(_SC_PAGESIZE), fds);
  weft__strbuf_puts(&b, "# HELP weft_submission_seconds From a submission's arrival to its end.\n"
                        "# TYPE weft_submission_seconds histogram\n");
  uint64_t cum = 0, count = 0;
  for (int k = 0; k <= NBUCKETS; k++) count += s->hist[k];
  for (int k = 0; k < NBUCKETS; k++) {
    cum += s->hist[k];
    weft__strbuf_printf(&b, "weft_submission_seconds_bucket{le=\"%g\"} %llu\n", buckets[k], (unsigned long long)cum);
  }
  weft__strbuf_printf(&b, "weft_submission_seconds_bucket{le=\"+Inf\"} %llu\nweft_submission_seconds_sum %.6f\n"
                          "weft_submission_seconds_count %llu\n",
                      (unsigned long long)count, s->hist_sum, (unsigned long long)count);
  if (b.failed)
    respond(c, 500, "text/plain", "out of memory\n", 14, NULL, 0);
  else
    respond(c, 200, "text/plain; version=0.0.4", b.data, b.len, NULL, http_should_keep_alive(&c->parser));
  weft__strbuf_fini(&b);
}

/* /v1/runs/ID[/trace|/timeline.svg] */
static void run_route(conn *c, int method, uint64_t id, const char *rest) {
  submission *sub = sub_find(c->srv, id);
  if (sub == NULL) {
    respond_error(c, 404, 0, "no run %llu (finished runs are kept until --keep newer ones finish)",
                  (unsigned long long)id);
    return;
  }
  int is_trace = strcmp(rest, "/trace") == 0, is_svg = strcmp(rest, "/timeline.svg") == 0;
  if (*rest != '\0' && !is_trace && !is_svg) {
    respond_error(c, 404, 0, "no such resource under /v1/runs/%llu (trace, timeline.svg)", (unsigned long long)id);
    return;
  }
  if (*rest == '\0' && method == HTTP_DELETE) {
    if (sub->phase == P_DONE) {
      respond_error(c, 409, 0, "run %llu has already finished (%s)", (unsigned long long)id, status_word(sub));
      return;
    }
    sub_cancel(sub);
    say(c->srv, "%s: run %llu: cancelled", c->peer, (unsigned long long)id);
    respond_record(c, 202, sub, 0, NULL);
    return;
  }
  if (method != HTTP_GET) {
    respond_error(c, 405, 0, "%s %s: use GET%s", http_method_str((enum http_method)method), c->url.data,
                  *rest == '\0' ? " or DELETE" : "");
    return;
  }
  if (*rest == '\0') {
    respond_record(c, 200, sub, 1, NULL);
    return;
  }
  const char *text = is_trace ? sub->trace : sub->svg;
  if (sub->phase != P_DONE) {
    respond_error(c, 409, 0, "run %llu is %s: its %s comes when it is done", (unsigned long long)id, status_word(sub),
                  is_trace ? "trace" : "timeline");
  } else if (text == NULL) {
    respond_error(c, 404, 0, "run %llu has no %s: it ended before a run (%s)", (unsigned long long)id,
                  is_trace ? "trace" : "timeline", status_word(sub));
  } else {
    respond(c, 200, is_trace ? "application/json" : "image/svg+xml", text, is_trace ? sub->trace_len : sub->svg_len,
            NULL, http_should_keep_alive(&c->parser));
  }
}

static void handle(conn *c) {
  server *s = c->srv;
  s->requests++;
  int method = c->parser.method;
  const char *url = c->url.data != NULL ? c->url.data : "";
  struct http_parser_url u;
  http_parser_url_init(&u);
  if (http_parser_parse_url(url, c->url.len, 0, &u) != 0 || !(u.field_set & (1 << UF_PATH))) {
    respond_error(c, 400, 0, "'%.200s' is not a request target", url);
    return;
  }
  char path[256];
  size_t plen = u.field_data[UF_PATH].len;
  if (plen >= sizeof path) {
    respond_error(c, 404, 0, "no such resource '%.200s'", url);
    return;
  }
  memcpy(path, url + u.field_data[UF_PATH].off, plen);
  path[plen] = '\0';
  const char *query = (u.field_set & (1 << UF_QUERY)) ? url + u.field_data[UF_QUERY].off : "";
  size_t qlen = (u.field_set & (1 << UF_QUERY)) ? u.field_data[UF_QUERY].len : 0;
  const char *mname = http_method_str((enum http_method)method);
  int page = method == HTTP_GET && (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0);
  if (!c->authorized && !page) {
    /* The page itself holds no secret; everything else needs the token. */
    weft__strbuf b;
    weft__strbuf_init(&b);
    weft__strbuf_puts(&b, "{\"error\": \"this server needs its token: send 'Authorization: Bearer TOKEN'\", \"code\": 401}\n");
    say(s, "%s: 401: %s %s without the token", c->peer, mname, path);
    respond_json(c, 401, &b, "WWW-Authenticate: Bearer realm=\"weft\"\r\n");
    weft__strbuf_fini(&b);
    return;
  }
  if (strcmp(path, "/v1/runs") == 0) {
    if (method == HTTP_POST)
      post_run(c, query, qlen);
    else if (method == HTTP_GET)
      get_runs(c);
    else
      respond_error(c, 405, 0, "%s /v1/runs: use POST (submit) or GET (list)", mname);
    return;
  }
  if (strncmp(path, "/v1/runs/", 9) == 0) {
    char *e;
    errno = 0;
    unsigned long long id = strtoull(path + 9, &e, 10);
    if (e == path + 9 || errno != 0 || path[9] == '-' || path[9] == '+') {
      respond_error(c, 404, 0, "'%s': a run's id is a number", path);
      return;
    }
    run_route(c, method, id, e);
    return;
  }
  int get = method == HTTP_GET;
  if (strcmp(path, "/v1/devices") == 0 && get) {
    get_devices(c);
  } else if (strcmp(path, "/metrics") == 0 && get) {
    get_metrics(c);
  } else if ((strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0) && get) {
    respond(c, 200, "text/html; charset=utf-8", dashboard_html, sizeof dashboard_html - 1, NULL,
            http_should_keep_alive(&c->parser));
  } else if (strcmp(path, "/v1/devices") == 0 || strcmp(path, "/metrics") == 0 || strcmp(path, "/") == 0) {
    respond_error(c, 405, 0, "%s %s: use GET", mname, path);
  } else {
    respond_error(c, 404, 0, "no such resource '%s' (/, /v1/runs, /v1/runs/ID, /v1/devices, /metrics)", path);
  }
}

/* ---- parsing -------------------------------------------------------------------------------- */

static int on_message_begin(http_parser *p) {
  conn *c = p->data;
  if (c->discard) return -1;
  weft__strbuf_truncate(&c->url, 0);
  weft__strbuf_truncate(&c->field, 0);
  weft__strbuf_truncate(&c->value, 0);
  c->in_value = 0;
  c->expect_continue = 0;
  c->authorized = c->srv->token == NULL;
  c->t_request = uv_now(c->srv->loop);
  weft__strbuf_truncate(&c->body, 0);
  uv_timer_again(&c->idle);
  return 0;
}

static int on_url(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  if (c->url.len + len > MAX_URL) {
    respond_error(c, 414, 1, "the request's URL is longer than %d bytes", MAX_URL);
    c->refused = 1;
    return 1;
  }
  weft__strbuf_put(&c->url, at, len);
  return 0;
}

/* The one request header weft reads: Expect: 100-continue (curl sends it before a body). */
/* Compares the secret with what came in a time that does not depend on where they differ. */
static int same_secret(const char *secret, const char *given, size_t given_len) {
  size_t n = strlen(secret);
  unsigned diff = (unsigned)(n ^ given_len);
  for (size_t i = 0; i < n; i++) diff |= (unsigned char)secret[i] ^ (unsigned char)(i < given_len ? given[i] : 0);
  return diff == 0;
}

/* The request headers weft reads: Expect: 100-continue (curl sends it before a body), and
 * Authorization: Bearer TOKEN when the server has a token. */
static void header_done(conn *c) {
  const char *f = c->field.data, *v = c->value.data;
  if (f != NULL && v != NULL && strcasecmp(f, "expect") == 0 && strcasecmp(v, "100-continue") == 0)
    c->expect_continue = 1;
  if (f != NULL && v != NULL && c->srv->token != NULL && strcasecmp(f, "authorization") == 0 &&
      strncasecmp(v, "Bearer ", 7) == 0)
    c->authorized = same_secret(c->srv->token, v + 7, c->value.len - 7);
  weft__strbuf_truncate(&c->field, 0);
  weft__strbuf_truncate(&c->value, 0);
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  if (c->in_value) header_done(c);
  c->in_value = 0;
  if (c->field.len < 64) weft__strbuf_put(&c->field, at, len);
  return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  c->in_value = 1;
  if (c->value.len < 4096) weft__strbuf_put(&c->value, at, len);
  return 0;
}

static int on_headers_complete(http_parser *p) {
  conn *c = p->data;
  if (c->in_value) header_done(c);
  c->in_value = 0;
  uint64_t declared = p->content_length != ULLONG_MAX ? p->content_length : 0;
  if (declared > c->srv->max_bytes) {
    respond_error(c, 413, 1, "the body has %llu bytes; this server takes at most %zu (--max-bytes)",
                  (unsigned long long)declared, c->srv->max_bytes);
    c->refused = 1;
    return -1; /* an error for http-parser: it stops; the connection ends after the answer */
  }
  if (c->expect_continue) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    note *n = malloc(sizeof *n);
    if (n != NULL && (n->data = malloc(sizeof cont)) != NULL) {
      memcpy(n->data, cont, sizeof cont);
      n->c = c;
      n->wreq.data = n;
      uv_buf_t buf = uv_buf_init(n->data, sizeof cont - 1);
      if (uv_write(&n->wreq, &c->h.stream, &buf, 1, on_note_written) == 0) {
        c->writes++;
      } else {
        free(n->data);
        free(n);
      }
    } else {
      free(n);
    }
  }
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  conn *c = p->data;
  if (c->body.len + len > c->srv->max_bytes) { /* a chunked body that grows too large */
    respond_error(c, 413, 1, "the body has more than %zu bytes (--max-bytes)", c->srv->max_bytes);
    c->refused = 1;
    return 1;
  }
  weft__strbuf_put(&c->body, at, len);
  if (c->body.failed) {
    respond_error(c, 503, 1, "the server is out of memory for the body");
    c->refused = 1;
    return 1;
  }
  return 0;
}

static int on_message_complete(http_parser *p) {
  conn *c = p->data;
  if (c->discard) return -1;
  c->t_request = 0;
  handle(c);
  return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* Parses what has arrived; keeps what comes while a ?wait=1 answer is pending. */
static void conn_feed(conn *c, const char *data, size_t len) {
  while (len > 0 && !c->closing && !c->discard) {
    if (c->waiting != NULL) {
      weft__strbuf_put(&c->held, data, len);
      if (c->held.failed) {
        say(c->srv, "%s: out of memory for the connection's input", c->peer);
        conn_close(c);
        return;
      }
      /* A client that sends ahead while it waits is held back at 64 KiB. */
      if (c->held.len > 65536 && c->reading) {
        uv_read_stop(&c->h.stream);
        c->reading = 0;
      }
      return;
    }
    size_t n = http_parser_execute(&c->parser, &parser_settings, data, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
    if (e == HPE_PAUSED) { /* a submission waits: keep the rest */
      data += n;
      len -= n;
      /* Answered before the parser returned (a step done at once): read on. */
      if (c->waiting == NULL) http_parser_pause(&c->parser, 0);
      continue;
    }
    if (e != HPE_OK) {
      if (!c->refused)
        respond_error(c, e == HPE_HEADER_OVERFLOW ? 431 : 400, 1, "malformed HTTP request: %s",
                      http_errno_description(e));
      end_after_answer(c);
      return;
    }
    return;
  }
}

/* ---- connections ---------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(read_buf, sizeof read_buf);
}

/* A request begun longer ago than --request-timeout (a client that trickles its bytes). */
static int late(const conn *c) {
  return c->t_request != 0 && c->waiting == NULL && uv_now(c->srv->loop) - c->t_request > c->srv->request_ms;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn *c = st->data;
  if (nread < 0) {
    /* EOF or error: the client is gone. A ?wait=1 submission it waited for is cancelled. */
    if (c->waiting != NULL && nread != UV_EOF)
      say(c->srv, "%s: connection lost: %s", c->peer, uv_strerror((int)nread));
    conn_close(c);
    return;
  }
  if (nread == 0 || c->discard) return;
  if (c->waiting == NULL) uv_timer_again(&c->idle);
  conn_feed(c, buf->base, (size_t)nread);
  if (!c->closing && !c->discard && late(c)) {
    respond_error(c, 408, 1, "the request took more than --request-timeout (%.0f s) to arrive",
                  (double)c->srv->request_ms / 1e3);
  }
}

static void on_idle(uv_timer_t *t) {
  conn *c = t->data;
  if (c->waiting != NULL) return; /* the client waits for us */
  say(c->srv, "%s: idle for %.0f s, closing", c->peer, (double)c->srv->idle_ms / 1e3);
  conn_close(c);
}

static void on_conn_closed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->open_handles > 0) return;
  server *s = c->srv;
  weft__strbuf_fini(&c->url);
  weft__strbuf_fini(&c->field);
  weft__strbuf_fini(&c->value);
  weft__strbuf_fini(&c->body);
  weft__strbuf_fini(&c->held);
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
  submission *sub = c->waiting;
  c->waiting = NULL;
  if (sub != NULL) {
    sub->waiter = NULL;
    if (sub->phase != P_DONE) sub_cancel(sub); /* nobody waits for it */
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
  weft__strbuf_init(&c->url);
  weft__strbuf_init(&c->field);
  weft__strbuf_init(&c->value);
  weft__strbuf_init(&c->body);
  weft__strbuf_init(&c->held);
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
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
    if (sub->phase == P_DONE) continue;
    if (sub->run != NULL) weft_run_cancel(sub->run);
    if (sub->phase == P_QUEUED) sub_cancel(sub); /* never started: reported cancelled */
    n++;
  }
  if (n > 0) say(s, "cancelling %ld submission%s still in progress", n, n == 1 ? "" : "s");
}

static void on_grace(uv_timer_t *t) { cancel_all(t->data); }

static void maybe_finish(server *s) {
  if (!s->stopping || s->closed_handles || s->nconns > 0 || s->inflight > 0) return;
  s->closed_handles = 1;
  uv_close((uv_handle_t *)&s->sigint, NULL);
  uv_close((uv_handle_t *)&s->sigterm, NULL);
  uv_close((uv_handle_t *)&s->grace, NULL);
  uv_close((uv_handle_t *)&s->tick, NULL);
}

static void on_signal(uv_signal_t *sig, int signum) {
  server *s = sig->data;
  if (s->stopping) {
    say(s, "%s again: cancelling now", signum == SIGINT ? "SIGINT" : "SIGTERM");
    cancel_all(s);
    return;
  }
  s->stopping = 1;
  say(s, "%s: no new connections; finishing %ld submission%s", signum == SIGINT ? "SIGINT" : "SIGTERM",
      s->inflight, s->inflight == 1 ? "" : "s");
  uv_close(&s->listener.handle, NULL);
  if (s->unlink_socket) unlink(s->addr.path);
  for (conn *c = s->conns, *next; c != NULL; c = next) {
    next = c->next;
    if (c->waiting != NULL || c->writes > 0)
      c->close_after_write = 1; /* answered (Connection: close), then closed */
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

/* The memory limits of admission: the host's from --max-memory and --memory-budget (default:
 * both three quarters of its memory), each GPU's nine tenths of its memory. */
static int init_memory(server *s, size_t max_memory, size_t budget, size_t gpu_budget) {
  weft_device_info info;
  size_t host = weft_device_info_get(s->rt, weft_cpu(), &info) == WEFT_OK ? info.memory_bytes : 0;
  s->budget[0] = budget ? budget : host / 4 * 3;
  s->max_mem[0] = max_memory ? max_memory : s->budget[0];
  if (s->max_mem[0] > s->budget[0])
    return cli_usage_error("serve", "--max-memory (%zu bytes) is more than the --memory-budget (%zu bytes)",
                           s->max_mem[0], s->budget[0]);
  int n = weft_device_count(s->rt, WEFT_DEVICE_CUDA);
  s->ngpus = n < MAX_GPUS ? n : MAX_GPUS;
  for (int k = 0; k < s->ngpus; k++) {
    size_t m = weft_device_info_get(s->rt, weft_cuda(k), &info) == WEFT_OK ? info.memory_bytes : 0;
    if (gpu_budget > m)
      return cli_usage_error("serve", "--gpu-memory-budget (%zu bytes) is more than the memory of cuda:%d (%zu bytes)",
                             gpu_budget, k, m);
    s->budget[1 + k] = s->max_mem[1 + k] = gpu_budget ? gpu_budget : m / 10 * 9;
  }
  return 0;
}

int cli_cmd_serve(int argc, char **argv) {
  enum {
    OPT_LISTEN = CLI_OPT_LOCAL, OPT_REMOTE, OPT_FILES, OPT_MAX_BYTES, OPT_MAX_INFLIGHT, OPT_MAX_RUNNING,
    OPT_MAX_CONNS, OPT_MAX_REPEAT, OPT_MAX_NODES, OPT_KEEP, OPT_IDLE, OPT_GRACE, OPT_QUIET, OPT_MAX_MEMORY,
    OPT_BUDGET, OPT_GPU_BUDGET, OPT_TIME_LIMIT, OPT_TOKEN, OPT_REQUEST_TIMEOUT
  };
  static const struct option longopts[] = {
      {"listen", required_argument, NULL, OPT_LISTEN},
      {"allow-remote", no_argument, NULL, OPT_REMOTE},
      {"allow-files", no_argument, NULL, OPT_FILES},
      {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
      {"max-inflight", required_argument, NULL, OPT_MAX_INFLIGHT},
      {"max-running", required_argument, NULL, OPT_MAX_RUNNING},
      {"max-connections", required_argument, NULL, OPT_MAX_CONNS},
      {"max-repeat", required_argument, NULL, OPT_MAX_REPEAT},
      {"max-nodes", required_argument, NULL, OPT_MAX_NODES},
      {"keep", required_argument, NULL, OPT_KEEP},
      {"max-memory", required_argument, NULL, OPT_MAX_MEMORY},
      {"memory-budget", required_argument, NULL, OPT_BUDGET},
      {"gpu-memory-budget", required_argument, NULL, OPT_GPU_BUDGET},
      {"time-limit", required_argument, NULL, OPT_TIME_LIMIT},
      {"token-file", required_argument, NULL, OPT_TOKEN},
      {"request-timeout", required_argument, NULL, OPT_REQUEST_TIMEOUT},
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
  s.max_running = 4;
  s.max_conns = 128;
  s.max_repeat = 1000;
  s.max_nodes = 1000000;
  s.keep = 100;
  s.idle_ms = 60000;
  s.request_ms = 30000;
  s.grace_ms = 10000;
  const char *listen = "127.0.0.1:7878";
  long workers = 0, v;
  const char *simulate = NULL;
  size_t max_memory = 0, budget = 0, gpu_budget = 0;
  const char *token_file = NULL;
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
      case OPT_MAX_RUNNING:
        if (cli_parse_int("serve", "--max-running", optarg, 1, 100000, &s.max_running) != 0)
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
      case OPT_MAX_MEMORY:
        if (cli_parse_size("serve", "--max-memory", optarg, &max_memory) != 0) return CLI_EXIT_USAGE;
        break;
      case OPT_BUDGET:
        if (cli_parse_size("serve", "--memory-budget", optarg, &budget) != 0) return CLI_EXIT_USAGE;
        break;
      case OPT_GPU_BUDGET:
        if (cli_parse_size("serve", "--gpu-memory-budget", optarg, &gpu_budget) != 0) return CLI_EXIT_USAGE;
        break;
      case OPT_TOKEN: token_file = optarg; break;
      case OPT_REQUEST_TIMEOUT:
        if (parse_seconds("--request-timeout", optarg, &s.request_ms) != 0) return CLI_EXIT_USAGE;
        if (s.request_ms == 0) return cli_usage_error("serve", "--request-timeout must be more than 0");
        break;
      case OPT_TIME_LIMIT:
        if (parse_seconds("--time-limit", optarg, &s.time_limit_ms) != 0) return CLI_EXIT_USAGE;
        break;
      case OPT_KEEP:
        if (cli_parse_int("serve", "--keep", optarg, 0, 1000000, &s.keep) != 0) return CLI_EXIT_USAGE;
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
                           "programs as you, over plain HTTP (no TLS). Add --allow-remote and --token-file if "
                           "that is what you want",
                           listen);
  if (!cli_addr_is_local(&s.addr) && token_file == NULL)
    return cli_usage_error("serve", "--listen %s is not a loopback address: a remote listener needs --token-file "
                           "(clients send the token as 'Authorization: Bearer TOKEN')", listen);
  if (token_file != NULL && (s.token = cli_read_token(token_file, "serve")) == NULL) return CLI_EXIT_USAGE;

  signal(SIGPIPE, SIG_IGN); /* a client that leaves makes writes fail, not kill the server */
  int code;
  uv_loop_t loop;
  if (uv_loop_init(&loop) != 0) return cli_error(CLI_EXIT_FAILED, "cannot create the event loop");
  s.loop = &loop;
  if ((code = cli_runtime((int)workers, simulate, NULL, NULL, 0, &s.rt)) != 0) goto done;
  code = CLI_EXIT_FAILED;
  if (init_memory(&s, max_memory, budget, gpu_budget) != 0) {
    code = CLI_EXIT_USAGE;
    goto done;
  }
  uv_timer_init(&loop, &s.tick);
  s.tick.data = &s;
  if (s.time_limit_ms > 0) {
    uint64_t every = s.time_limit_ms / 10;
    every = every < 10 ? 10 : every > 1000 ? 1000 : every;
    uv_timer_start(&s.tick, on_tick, every, every);
  }
  uv_signal_init(&loop, &s.sigint);
  uv_signal_init(&loop, &s.sigterm);
  uv_timer_init(&loop, &s.grace);
  s.sigint.data = s.sigterm.data = s.grace.data = &s;
  char bound[160];
  if (start_listening(&s, bound, sizeof bound) != 0) {
    uv_close((uv_handle_t *)&s.sigint, NULL);
    uv_close((uv_handle_t *)&s.sigterm, NULL);
    uv_close((uv_handle_t *)&s.grace, NULL);
    uv_close((uv_handle_t *)&s.tick, NULL);
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
  while (s.subs != NULL) sub_free(s.subs); /* the finished ones kept */
  if (uv_loop_close(&loop) != 0) {
    /* Only a bug leaves a handle open; run once more so everything closes, then give up. */
    uv_run(&loop, UV_RUN_NOWAIT);
    (void)uv_loop_close(&loop);
  }
  weft_runtime_destroy(s.rt);
  free(s.token);
  return code;
}
