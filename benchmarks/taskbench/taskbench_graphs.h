/* taskbench_graphs.h — what the weft and Taskflow drivers share about Task Bench's graphs: each
 * graph's dependencies, expanded once before any timing, and the driver flags.
 *
 * Task Bench describes a graph by its timesteps, the width and offset at each timestep, and,
 * for each dependence set, the intervals of points at timestep t-1 that point p of timestep t
 * reads (`task_graph_dependencies`). A task's inputs are those points, in that order, that
 * exist at t-1 (offset <= dep < offset + width); `task_graph_execute_point_scratch` checks
 * each input, in that order, against the value its producer must have written, and aborts on
 * a mismatch. Both drivers expand the intervals here into one list per (dependence set,
 * point) outside the timed part, so the timed part of each runtime is its own: weft's tensors
 * and nodes, or Taskflow's tasks and edges, and the run. Dependence sets repeat with the
 * graph's period, so the lists stay small (sets x width x radix).
 *
 * Valid C11 and C++20; every function is static inline. No copy of Task Bench's code: only
 * its C API (core_c.h). */
#ifndef WEFT_TASKBENCH_GRAPHS_H
#define WEFT_TASKBENCH_GRAPHS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_c.h"

typedef struct tb_graph {
  task_graph_t g;
  long width;           /* max_width */
  long nsets;           /* dependence sets */
  long *dep_off;        /* [nsets * width + 1]: the list of (set, point) is dep[off[i]..off[i+1]) */
  long *dep;            /* points at t-1, in Task Bench's order, not yet clipped to t-1's range */
  size_t *input_bytes;  /* [max_inputs + 1]: output_bytes_per_task for every input */
  long max_inputs;      /* the most inputs any task of this graph reads */
  long tasks;           /* tasks over all timesteps */
  long deps;            /* dependencies over all tasks (edges of the graph) */
} tb_graph;

/* The inputs of task (t, point): *n points of timestep t-1 into out (at least max_inputs). */
static inline long tb_inputs(const tb_graph *tg, long t, long point, long *out) {
  if (t == 0) return 0;
  long lo = task_graph_offset_at_timestep(tg->g, t - 1);
  long hi = lo + task_graph_width_at_timestep(tg->g, t - 1);
  long set = task_graph_dependence_set_at_timestep(tg->g, t);
  const long *d = tg->dep + tg->dep_off[set * tg->width + point];
  const long *e = tg->dep + tg->dep_off[set * tg->width + point + 1];
  long n = 0;
  for (; d < e; d++)
    if (*d >= lo && *d < hi) out[n++] = *d;
  return n;
}

static inline void *tb_xmalloc(size_t n) {
  void *p = malloc(n > 0 ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "taskbench: out of memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

/* Expands graph g's dependencies; returns 0, or exits with a message. */
static inline void tb_graph_init(tb_graph *tg, task_graph_t g) {
  memset(tg, 0, sizeof *tg);
  tg->g = g;
  tg->width = g.max_width;
  tg->nsets = task_graph_max_dependence_sets(g);
  if (tg->nsets < 1) tg->nsets = 1;
  long lists = tg->nsets * tg->width;
  tg->dep_off = (long *)tb_xmalloc(sizeof(long) * (size_t)(lists + 1));
  long cap = lists * 4 + 16, n = 0;
  tg->dep = (long *)tb_xmalloc(sizeof(long) * (size_t)cap);
  for (long s = 0; s < tg->nsets; s++) {
    for (long p = 0; p < tg->width; p++) {
      tg->dep_off[s * tg->width + p] = n;
      interval_list_t iv = task_graph_dependencies(g, s, p);
      long m = interval_list_num_intervals(iv);
      for (long i = 0; i < m; i++) {
        interval_t v = interval_list_interval(iv, i);
        for (long d = v.start; d <= v.end; d++) {
          if (n == cap) {
            cap *= 2;
            long *grown = (long *)realloc(tg->dep, sizeof(long) * (size_t)cap);
            if (grown == NULL) {
              fprintf(stderr, "taskbench: out of memory\n");
              exit(1);
            }
            tg->dep = grown;
          }
          tg->dep[n++] = d;
        }
      }
      interval_list_destroy(iv);
    }
  }
  tg->dep_off[lists] = n;
  long *buf = (long *)tb_xmalloc(sizeof(long) * (size_t)(tg->width + 1));
  for (long t = 0; t < g.timesteps; t++) {
    long off = task_graph_offset_at_timestep(g, t);
    long w = task_graph_width_at_timestep(g, t);
    tg->tasks += w;
    for (long p = off; p < off + w; p++) {
      /* a list never holds more points than the width: Task Bench checks for duplicates */
      long k = tb_inputs(tg, t, p, buf);
      tg->deps += k;
      if (k > tg->max_inputs) tg->max_inputs = k;
    }
  }
  free(buf);
  tg->input_bytes = (size_t *)tb_xmalloc(sizeof(size_t) * (size_t)(tg->max_inputs + 1));
  for (long i = 0; i <= tg->max_inputs; i++) tg->input_bytes[i] = g.output_bytes_per_task;
}

static inline void tb_graph_fini(tb_graph *tg) {
  free(tg->dep_off);
  free(tg->dep);
  free(tg->input_bytes);
}

/* Which timings a driver reports (--timing). */
enum { TB_FIRST = 1, TB_REPLAY = 2 };

typedef struct tb_flags {
  int workers;   /* -worker N or --workers N; 0: one per core */
  int timing;    /* TB_FIRST | TB_REPLAY */
  int replays;   /* --replays N: replay N times, report the median */
  int no_timing; /* --no-node-timing (weft only) */
  int no_warmup; /* --no-warmup: no untimed run of a one-task graph before the first run */
  int stats;     /* --stats (weft only): a line of the run's statistics after each timing */
  const char *trace; /* --trace PREFIX (weft only): PREFIX-first.json, PREFIX-replay.json */
} tb_flags;

/* Reads the drivers' own flags; Task Bench's App ignores what it does not know, so argv goes
 * to app_create unchanged. Exits 2 on a bad value. */
static inline tb_flags tb_parse_flags(int argc, char **argv, const char *prog) {
  tb_flags f = {0, TB_FIRST | TB_REPLAY, 1, 0, 0, 0, NULL};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has = i + 1 < argc;
    if ((!strcmp(a, "-worker") || !strcmp(a, "--workers")) && has) {
      f.workers = atoi(argv[++i]);
      if (f.workers < 1) {
        fprintf(stderr, "%s: %s must be >= 1\n", prog, a);
        exit(2);
      }
    } else if (!strcmp(a, "--timing") && has) {
      const char *v = argv[++i];
      if (!strcmp(v, "first")) f.timing = TB_FIRST;
      else if (!strcmp(v, "replay")) f.timing = TB_REPLAY;
      else if (!strcmp(v, "both")) f.timing = TB_FIRST | TB_REPLAY;
      else {
        fprintf(stderr, "%s: --timing takes first, replay or both, not '%s'\n", prog, v);
        exit(2);
      }
    } else if (!strcmp(a, "--replays") && has) {
      f.replays = atoi(argv[++i]);
      if (f.replays < 1) {
        fprintf(stderr, "%s: --replays must be >= 1\n", prog);
        exit(2);
      }
    } else if (!strcmp(a, "--no-node-timing")) {
      f.no_timing = 1;
    } else if (!strcmp(a, "--stats")) {
      f.stats = 1;
    } else if (!strcmp(a, "--trace") && has) {
      f.trace = argv[++i];
    } else if (!strcmp(a, "--no-warmup")) {
      f.no_warmup = 1;
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      printf("usage: %s [Task Bench options] [-worker N | --workers N]\n"
             "          [--timing first|replay|both] [--replays N] [--no-warmup]%s\n"
             "Task Bench options: -steps N -width N -type PATTERN [-radix N] -kernel KERNEL\n"
             "  -iter N [-output BYTES] [-scratch BYTES] [-and ...next graph...]; -h after\n"
             "  these lists them all (Task Bench's own help).\n"
             "Each timing is printed as 'Timing: first' or 'Timing: replay' followed by\n"
             "Task Bench's report (Elapsed Time, FLOP/s) over the whole set of graphs.\n"
             "%s",
             prog, strstr(prog, "weft") ? " [--no-node-timing]\n          [--stats] [--trace PREFIX]" : "",
             strstr(prog, "weft") ? "--stats: a line after each timing: the workers' busy share, node times, ready\n"
                                    "  waits, steals, sleeps, wake-ups (a replay's: the last one's).\n"
                                    "--trace PREFIX: PREFIX-first.json and PREFIX-replay.json, the runs' timelines.\n"
                                  : "");
      if (!strcmp(a, "--help")) exit(0);
    }
  }
  return f;
}

static inline int tb_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static inline double tb_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, tb_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
