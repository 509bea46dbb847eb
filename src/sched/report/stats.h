/* stats.h — the snapshot behind weft_run_stats, shared by the writers (stats.c: text and
 * JSON; trace.c: Chrome trace events; svg.c: the timeline).
 *
 * A snapshot holds the analysed model of the run (model.h), the lane names, the memory of each
 * device with the backends' samples, and the diagnostics of exposed copies. It points to the
 * graph for node and tensor names, which is why the graph must outlive it. */
#ifndef WEFT_REPORT_STATS_H
#define WEFT_REPORT_STATS_H

#include <stdio.h>

#include "sched/report/model.h"
#include "sched/report/timing.h"
#include "weft/report.h"

struct weft_run_stats {
  weft_graph *graph;
  weft__rep *rep;
  uint32_t nworkers;         /* the first nworkers lanes are the CPU workers */
  char (*lane_name)[48];
  weft_device_memory *mem;   /* per device: CPU first, then GPUs by index */
  size_t nmem;
  weft__mem_sample *samples; /* the backends' samples, ns from the launch, by time */
  size_t nsamples, dropped;
  weft_copy_diagnostic *diag;
  size_t ndiag;
  size_t edges, events, inserted, copies;
  size_t hostside;           /* device nodes with host-side times only */
  weft_pool_counts pool;     /* the worker pool's counts over the run */
  weft_setup_step *setup;    /* before the first node (weft_run_stats_setup) */
  size_t nsetup;
  uint64_t setup_ns;         /* the setup's length: the nodes' times are from its end */
  uint64_t t_launch;         /* the run's launch (its nodes' zero), weft__clock_now() base */
};

/* A short label of node i: "mm y3 (node 7)", "copy y3 cuda:0->cpu (node 8)". */
char *weft__stats_label(const weft_run_stats *st, uint32_t i, char *buf, size_t size);
/* The lane's kind: "cpu", "compute" or "copy". */
const char *weft__stats_lane_kind(const weft_run_stats *st, uint32_t lane);

/* "1.234 s", "12.345 ms" or "12.3 us". */
void weft__fmt_time(char *buf, size_t size, double seconds);

/* Writers; each returns WEFT_OK or WEFT_EIO (message set) when the stream reports an error. */
int weft__stats_write_text(const weft_run_stats *st, FILE *f);
int weft__stats_write_json(const weft_run_stats *st, FILE *f);
int weft__stats_write_trace(const weft_run_stats *st, FILE *f);
/* The trace's events alone, of rank `rank` (its processes named "rank R: ...", pids from
 * 1000 R; -1: one process's trace), times shifted by shift_us; `first`: no comma before the
 * first event. Returns the strings' status. */
int weft__stats_write_trace_events(const weft_run_stats *st, FILE *f, int rank, double shift_us, int first);
/* A trace of several ranks: st's header, the events, the end. */
int weft__stats_write_trace_ranks(const weft_run_stats *st, FILE *f, const char *events, size_t len);
int weft__stats_write_svg(const weft_run_stats *st, FILE *f, int width);

/* Writes `s` escaped for XML text and attribute values. */
void weft__xml_str(FILE *f, const char *s);
/* The stream's status: WEFT_OK, or WEFT_EIO with a message naming `what`. */
int weft__stats_stream_status(FILE *f, const char *what);

#endif
