/* trace.c — the Chrome trace-event JSON of a run (the "JSON Array/Object Format" that
 * Perfetto and chrome://tracing open).
 *
 * Mapping: one process per device (pid 1 the CPU, 2 + i cuda:i), one thread per lane (tid =
 * the lane's index in the statistics, named after the lane); one complete event ("ph": "X")
 * per node that ran, with its op, label, tensors read and written, bytes touched and whether
 * it is on the critical path; a flow ("s" inside the producer, "f" bound to the consumer's
 * start) along every edge whose ends ran on different lanes; a counter track ("ph": "C") per
 * device with the memory in use; the run's setup (what happened before its first node:
 * weft_run_stats_setup) as slices on a "setup" thread of the CPU's process. Times are
 * microseconds from the start of the setup (the launch call, or the runtime's creation laid
 * just before it in the runtime's first run), with nanosecond digits; the nodes follow it. */
#include <inttypes.h>

#include "sched/report/stats.h"
#include "sched/sched.h"
#include "util/json.h"

/* The event array's writer: every event but the first is preceded by a comma. `rc` is the
 * strings' status (json.h): WEFT_OK, or the allocation that failed. */
typedef struct tw {
  FILE *f;
  int first;
  int rc;
  int rank;        /* in a trace of several ranks, this one's (its processes are named so); else -1 */
  int pid_base;    /* added to every pid: 1000 x the rank in a trace of several ranks */
  double shift_us; /* added to every time: this rank's clock against rank 0's */
} tw;

static void ev(tw *w) {
  fputs(w->first ? "\n" : ",\n", w->f);
  w->first = 0;
}

/* A device's process: 1 the CPU, 2 + i cuda:i, from the rank's base. */
static int pid_of(const tw *w, weft_device d) { return w->pid_base + (d.kind == WEFT_DEVICE_CPU ? 1 : 2 + d.index); }

static double us(uint64_t ns) { return (double)ns * 1e-3; }

/* A node time (ns from the launch of the first node) on the trace's clock, this rank's shift added. */
static double at(const tw *w, const weft_run_stats *st, uint64_t ns) { return us(ns + st->setup_ns) + w->shift_us; }

static void tensor_list(tw *w, const weft_node *n, int mode) {
  FILE *f = w->f;
  fputc('[', f);
  int first = 1;
  for (int i = 0; i < n->nargs; i++) {
    if (!(n->args[i].mode & mode)) continue;
    if (!first) fputs(", ", f);
    weft__json_fput_str(f, weft__tensor_name(n->args[i].t), &w->rc);
    first = 0;
  }
  fputc(']', f);
}

static void metadata(const weft_run_stats *st, tw *w) {
  FILE *f = w->f;
  const weft__rep *r = st->rep;
  char dev[32];
  /* One process per device that has a lane or memory. */
  for (size_t i = 0; i < st->nmem; i++) {
    weft_device d = st->mem[i].device;
    ev(w);
    char who[24] = "";
    if (w->rank >= 0) snprintf(who, sizeof who, "rank %d: ", w->rank);
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"%s%s\"}}",
            pid_of(w, d), who, weft_device_str(d, dev, sizeof dev));
    ev(w);
    fprintf(f, "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"sort_index\": %d}}",
            pid_of(w, d), pid_of(w, d));
  }
  for (uint32_t l = 0; l < r->nlanes; l++) {
    ev(w);
    fprintf(f, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %u, \"args\": {\"name\": ",
            pid_of(w, r->lanes[l].device), l);
    weft__json_fput_str(f, st->lane_name[l], &w->rc);
    fputs("}}", f);
    ev(w);
    fprintf(f, "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %u, "
               "\"args\": {\"sort_index\": %u}}",
            pid_of(w, r->lanes[l].device), l, l);
  }
}

static void slices(const weft_run_stats *st, tw *w) {
  FILE *f = w->f;
  const weft__rep *r = st->rep;
  char label[200];
  for (uint32_t i = 0; i < r->n; i++) {
    const weft__rnode *x = &r->node[i];
    if (x->lane == WEFT__REP_NONE) continue;
    const weft_node *n = weft_graph_node(st->graph, i);
    size_t bytes = 0;
    for (int a = 0; a < n->nargs; a++) bytes += n->args[a].t->bytes;
    ev(w);
    fputs("{\"name\": ", f);
    weft__json_fput_str(f, weft_node_op_name(n), &w->rc);
    fprintf(f, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f, "
               "\"args\": {\"node\": %u, \"label\": ",
            x->copy ? "copy" : "compute", pid_of(w, r->lanes[x->lane].device), x->lane, at(w, st, x->start),
            us(x->end - x->start), i);
    weft__json_fput_str(f, weft__stats_label(st, i, label, sizeof label), &w->rc);
    fputs(", \"reads\": ", f);
    tensor_list(w, n, WEFT_READ);
    fputs(", \"writes\": ", f);
    tensor_list(w, n, WEFT_WRITE);
    fprintf(f, ", \"bytes\": %zu, \"critical\": %s", bytes, x->critical ? "true" : "false");
    if (weft__node_origin(n) != NULL) {
      fputs(", \"origin\": ", f);
      weft__json_fput_str(f, weft__node_origin(n), &w->rc);
    }
    fputs("}}", f);
  }
}

/* The setup's steps on their own thread of the CPU's process, after the lanes. */
static void setup(const weft_run_stats *st, tw *w) {
  FILE *f = w->f;
  if (st->nsetup == 0) return;
  uint32_t tid = st->rep->nlanes;
  ev(w);
  fprintf(f, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %u, "
             "\"args\": {\"name\": \"setup (before the first node)\"}}",
          pid_of(w, weft_cpu()), tid);
  ev(w);
  fprintf(f, "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %u, "
             "\"args\": {\"sort_index\": -1}}",
          pid_of(w, weft_cpu()), tid);
  char dev[32];
  for (size_t i = 0; i < st->nsetup; i++) {
    const weft_setup_step *x = &st->setup[i];
    ev(w);
    fputs("{\"name\": ", f);
    weft__json_fput_str(f, x->kind[0] == 't' ? "materialise" : x->kind[0] == 'r' ? "runtime" : x->kind, &w->rc);
    fprintf(f, ", \"cat\": \"setup\", \"ph\": \"X\", \"pid\": %d, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f, "
               "\"args\": {\"kind\": \"%s\"",
            pid_of(w, weft_cpu()), tid, x->start_s * 1e6 + w->shift_us, (x->end_s - x->start_s) * 1e6, x->kind);
    if (x->what != NULL) {
      fputs(", \"what\": ", f);
      weft__json_fput_str(f, x->what, &w->rc);
    }
    if (x->kind[0] == 't')
      fprintf(f, ", \"count\": %zu, \"device\": \"%s\", \"bytes\": %llu, \"pinned\": %s", x->count,
              weft_device_str(x->device, dev, sizeof dev), (unsigned long long)x->bytes, x->pinned ? "true" : "false");
    else if (x->bytes > 0)
      fprintf(f, ", \"bytes\": %llu", (unsigned long long)x->bytes);
    fputs("}}", f);
  }
}

static void flows(const weft_run_stats *st, tw *w) {
  FILE *f = w->f;
  const weft__rep *r = st->rep;
  uint64_t id = 0;
  for (uint32_t i = 0; i < r->n; i++) {
    const weft__rnode *a = &r->node[i];
    if (a->lane == WEFT__REP_NONE) continue;
    for (uint32_t k = r->succ_off[i]; k < r->succ_off[i + 1]; k++) {
      const weft__rnode *b = &r->node[r->succ[k]];
      if (b->lane == WEFT__REP_NONE || b->lane == a->lane) continue;
      id++;
      /* The start sits inside the producer's slice, the end binds to the consumer's start. */
      ev(w);
      fprintf(f, "{\"name\": \"dependency\", \"cat\": \"edge\", \"ph\": \"s\", \"id\": %" PRIu64
                 ", \"pid\": %d, \"tid\": %u, \"ts\": %.3f}",
              id, pid_of(w, r->lanes[a->lane].device), a->lane, at(w, st, a->start + (a->end - a->start) / 2));
      ev(w);
      fprintf(f, "{\"name\": \"dependency\", \"cat\": \"edge\", \"ph\": \"f\", \"bp\": \"e\", \"id\": %" PRIu64
                 ", \"pid\": %d, \"tid\": %u, \"ts\": %.3f}",
              id, pid_of(w, r->lanes[b->lane].device), b->lane, at(w, st, b->start));
    }
  }
}

static void memory(const weft_run_stats *st, tw *w) {
  FILE *f = w->f;
  char dev[32];
  uint64_t end = st->rep->wall > st->rep->span_end ? st->rep->wall : st->rep->span_end;
  for (size_t i = 0; i < st->nmem; i++) {
    const weft_device_memory *m = &st->mem[i];
    weft_device_str(m->device, dev, sizeof dev);
    if (st->nsamples == 0 || m->source[0] == 't') {
      /* No samples: the tensors' bytes held through the run. */
      for (int k = 0; k < 2; k++) {
        ev(w);
        fprintf(f, "{\"name\": \"memory %s\", \"ph\": \"C\", \"pid\": %d, \"ts\": %.3f, "
                   "\"args\": {\"bytes\": %llu}}",
                dev, pid_of(w, m->device), at(w, st, k ? end : 0), (unsigned long long)m->peak_bytes);
      }
      continue;
    }
    for (size_t s = 0; s < st->nsamples; s++) {
      const weft__mem_sample *x = &st->samples[s];
      if (x->device.kind != m->device.kind || x->device.index != m->device.index) continue;
      ev(w);
      fprintf(f, "{\"name\": \"memory %s\", \"ph\": \"C\", \"pid\": %d, \"ts\": %.3f, "
                 "\"args\": {\"bytes\": %llu}}",
              dev, pid_of(w, m->device), at(w, st, x->t_ns), (unsigned long long)x->bytes);
    }
  }
}

/* The header: the run's figures (rank 0's in a trace of several ranks). */
static void header(const weft_run_stats *st, FILE *f) {
  weft_stats_summary s;
  weft_run_stats_summary(st, &s);
  fprintf(f, "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"generator\": \"weft %d.%d.%d\", "
             "\"makespan_s\": ", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH);
  weft__json_fput_num(f, s.makespan_s);
  fputs(", \"critical_path_s\": ", f);
  weft__json_fput_num(f, s.critical_path_s);
  fputs(", \"hidden_copy_fraction\": ", f);
  if (s.hidden_copy_fraction < 0)
    fputs("null", f);
  else
    fprintf(f, "%.6f", s.hidden_copy_fraction);
  fputs(", \"setup_s\": ", f);
  weft__json_fput_num(f, s.setup_s);
  fputs("},\n\"traceEvents\": [", f);
}

int weft__stats_write_trace_events(const weft_run_stats *st, FILE *f, int rank, double shift_us, int first) {
  tw w = {f, first, WEFT_OK, rank, rank >= 0 ? 1000 * rank : 0, shift_us};
  metadata(st, &w);
  slices(st, &w);
  setup(st, &w);
  flows(st, &w);
  memory(st, &w);
  return w.rc;
}

int weft__stats_write_trace(const weft_run_stats *st, FILE *f) {
  header(st, f);
  int rc = weft__stats_write_trace_events(st, f, -1, 0, 1);
  fputs("\n]}\n", f);
  return rc != WEFT_OK ? rc : weft__stats_stream_status(f, "trace");
}

/* Several ranks: rank 0's header, then `events` (each rank's, in rank order, already written
 * with weft__stats_write_trace_events), then the end. */
int weft__stats_write_trace_ranks(const weft_run_stats *st, FILE *f, const char *events, size_t len) {
  header(st, f);
  fwrite(events, 1, len, f);
  fputs("\n]}\n", f);
  return weft__stats_stream_status(f, "trace");
}
