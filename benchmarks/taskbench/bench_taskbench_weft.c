/* bench_taskbench_weft.c — weft's driver for Task Bench (Slaughter et al., SC'20).
 *
 * Every Task Bench graph `app_create` describes becomes part of one weft graph: one weft tensor
 * per (graph, timestep, point) holding that task's output bytes, and one node per task, a user
 * op whose CPU kernel calls `task_graph_execute_point_scratch`. A node reads the tensors of its
 * dependencies at the previous timestep and writes its own; weft infers every edge from those
 * accesses (the driver adds none), and Task Bench's check inside each task aborts the program
 * if weft ran a task before one of its inputs was written.
 *
 * Timings, each printed as "Timing: first|replay" and then Task Bench's report over the whole
 * set of graphs (app_report_timing):
 *   first   build the weft graph (graph, tensors, nodes) and run it, the runtime already made;
 *           the line also gives the run's setup before its first node (the plan, the tensors'
 *           storage and initial values) and how long ready tasks waited for a worker, from the
 *           run's statistics, taken untimed;
 *   replay  run the same graph again (the median of --replays runs). Every output is zeroed
 *           before each replay, untimed, so that the checks see the replay's order too.
 * Outside the timed part: the runtime, the op registration, the expansion of Task Bench's
 * dependence intervals into lists (taskbench_graphs.h), which the Taskflow driver shares, and a
 * warm-up: one run of a graph of one empty node, so that what a process pays once is not
 * counted (until ea4364b, weft's first launch in a process spun 2 ms calibrating its timing
 * clock; src/util/clock.c). --no-warmup counts it. The Taskflow driver warms its executor the
 * same way.
 *
 * Per worker: Task Bench wants scratch_bytes_per_task of scratch per worker, prepared with
 * task_graph_prepare_scratch, and a task needs the list of its input pointers. weft's workers
 * are its own threads, so each gets both on its first task (thread-local), once per thread
 * for the whole program.
 *
 * Arity: one op, "taskbench_task", writes its first argument and reads any number after it
 * (weft_op_desc.rest = WEFT_READ), so a task of k inputs is a node of k + 1 arguments, up to
 * WEFT_MAX_CALL_ARGS: all_to_all at width W reads W tensors. A graph whose tasks read more is
 * refused before anything is timed.
 *
 * --stats prints where each timed run's time went (details(): the workers' busy share, node
 * times, ready waits, steals, sleeps, wake-ups); --trace PREFIX saves its timeline.
 *
 * Usage: taskbench_weft [Task Bench options] [-worker N | --workers N]
 *                       [--timing first|replay|both] [--replays N] [--no-warmup] [--no-node-timing]
 *                       [--stats] [--trace PREFIX] */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "taskbench_graphs.h"
#include "weft/report.h"
#include "weft/weft.h"

#define CHECK(x)                                                                       \
  do {                                                                                 \
    int rc_ = (x);                                                                     \
    if (rc_ != WEFT_OK) {                                                              \
      fprintf(stderr, "taskbench_weft: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,       \
              weft_last_error());                                                      \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

/* A node's parameters: which task it is. */
typedef struct tb_task {
  int64_t graph, t, point;
} tb_task;

typedef struct driver {
  tb_graph *graphs;
  long ngraphs;
  size_t scratch_bytes; /* the largest scratch_bytes_per_task of the graphs */
  long max_inputs;
  const weft_op *op;    /* taskbench_task: writes argument 0, reads the rest */
  weft_tensor ***out;   /* out[graph][t * width + point] */
} driver;

/* ---- what each worker thread keeps ---------------------------------------------------- */

/* A worker's scratch and input list, after a header that links it into a list freed at the
 * end: [hdr | inputs (max_inputs pointers) | scratch (64-byte aligned)]. */
typedef struct worker_mem {
  struct worker_mem *next;
  const char **in;
  char *scratch;
} worker_mem;

static _Atomic(worker_mem *) all_mem;
static _Thread_local worker_mem *my_mem;

static worker_mem *thread_mem(const driver *d) {
  if (my_mem == NULL) {
    size_t in_bytes = ((size_t)d->max_inputs * sizeof(char *) + 63) / 64 * 64;
    worker_mem *m = NULL;
    if (posix_memalign((void **)&m, 64, 64 + in_bytes + d->scratch_bytes) != 0) return NULL;
    m->in = (const char **)((char *)m + 64);
    m->scratch = d->scratch_bytes > 0 ? (char *)m + 64 + in_bytes : NULL;
    if (m->scratch != NULL) task_graph_prepare_scratch(m->scratch, d->scratch_bytes);
    /* release, paired with free_mem's acquire: the list is walked once the workers are gone */
    m->next = atomic_load_explicit(&all_mem, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&all_mem, &m->next, m, memory_order_release,
                                                  memory_order_relaxed)) {
    }
    my_mem = m;
  }
  return my_mem;
}

static void free_mem(void) {
  worker_mem *m = atomic_exchange_explicit(&all_mem, NULL, memory_order_acquire);
  while (m != NULL) {
    worker_mem *next = m->next;
    free(m);
    m = next;
  }
}

/* ---- the kernel ------------------------------------------------------------------------ */

static int task_kernel(weft_kernel_ctx *ctx) {
  const driver *d = weft_ctx_user(ctx);
  const tb_task *p = weft_ctx_params(ctx, NULL);
  const tb_graph *tg = &d->graphs[p->graph];
  int nin = weft_ctx_nargs(ctx) - 1;
  worker_mem *m = thread_mem(d);
  if (m == NULL) return weft_ctx_fail(ctx, "no memory for a worker's scratch and inputs");
  for (int i = 0; i < nin; i++) m->in[i] = weft_ctx_data(ctx, i + 1);
  task_graph_execute_point_scratch(tg->g, (long)p->t, (long)p->point, weft_ctx_data(ctx, 0),
                                   tg->g.output_bytes_per_task, m->in, tg->input_bytes,
                                   (size_t)nin, m->scratch, tg->g.scratch_bytes_per_task);
  return WEFT_OK;
}

static void register_op(weft_runtime *rt, driver *d) {
  weft_op_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.name = "taskbench_task";
  desc.nargs = 1;
  desc.access[0] = WEFT_WRITE;
  desc.rest = WEFT_READ;
  desc.cpu = task_kernel;
  desc.user = d;
  CHECK(weft_op_register(rt, &desc, &d->op));
}

/* ---- the graph ------------------------------------------------------------------------- */

/* Adds every task of every graph: the timed build. */
static void build(weft_graph *g, driver *d) {
  long *pts = NULL;
  weft_tensor **args = NULL;
  long cap = d->max_inputs + 1;
  pts = malloc(sizeof *pts * (size_t)cap);
  args = malloc(sizeof *args * (size_t)cap);
  if (pts == NULL || args == NULL) exit(1);
  for (long gi = 0; gi < d->ngraphs; gi++) {
    const tb_graph *tg = &d->graphs[gi];
    weft_tensor **out = d->out[gi];
    int64_t elems = (int64_t)((tg->g.output_bytes_per_task + 7) / 8);
    for (long t = 0; t < tg->g.timesteps; t++) {
      long off = task_graph_offset_at_timestep(tg->g, t);
      long w = task_graph_width_at_timestep(tg->g, t);
      for (long p = off; p < off + w; p++) {
        long n = tb_inputs(tg, t, p, pts);
        weft_tensor **o = &out[t * tg->width + p];
        CHECK(weft_tensor_create(g, NULL, WEFT_F64, 1, &elems, weft_cpu(), weft_zeros(), o));
        args[0] = *o;
        for (long i = 0; i < n; i++) args[i + 1] = out[(t - 1) * tg->width + pts[i]];
        tb_task task = {gi, t, p};
        CHECK(weft_call(g, d->op, args, (int)n + 1, &task, sizeof task));
      }
    }
  }
  free(pts);
  free(args);
}

/* Zeroes every output before a replay (untimed), so that Task Bench's checks see a replay's
 * order too: without it each input would still hold the first run's correct value. */
static void poison(const driver *d) {
  static const char zeros[4096];
  for (long gi = 0; gi < d->ngraphs; gi++) {
    const tb_graph *tg = &d->graphs[gi];
    for (long i = 0; i < tg->g.timesteps * tg->width; i++) {
      weft_tensor *t = d->out[gi][i];
      if (t == NULL) continue;
      size_t n = weft_tensor_bytes(t);
      char *z = n <= sizeof zeros ? (char *)zeros : calloc(1, n);
      if (z == NULL) exit(1);
      CHECK(weft_tensor_write(t, z, n));
      if (z != zeros) free(z);
    }
  }
}

static int empty_kernel(weft_kernel_ctx *ctx) {
  (void)ctx;
  return WEFT_OK;
}

/* One run of a one-node graph on the runtime: the process's one-time costs, untimed. */
static void warm_up(weft_runtime *rt) {
  weft_op_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.name = "taskbench_warmup";
  desc.cpu = empty_kernel;
  const weft_op *op;
  weft_graph *g;
  CHECK(weft_op_register(rt, &desc, &op));
  CHECK(weft_graph_create(rt, &g));
  CHECK(weft_call(g, op, NULL, 0, NULL, 0));
  CHECK(weft_graph_run(g));
  weft_graph_destroy(g);
}

/* --stats and --trace: where a run's time went, from its statistics (taken untimed). The line:
 * the makespan (first node start to last node end), how busy the workers were over it (the sum
 * of their node time over workers x makespan), the median and longest node, the waits of ready
 * nodes for a worker, and the pool's steals, sleeps and wake-ups during the run. */
static void details(const weft_run_stats *st, const tb_flags *f, const char *which) {
  if (f->stats) {
    weft_stats_summary su;
    weft_pool_counts pc;
    weft_run_stats_summary(st, &su);
    weft_run_stats_pool(st, &pc);
    double busy = 0;
    size_t workers = 0;
    for (size_t i = 0; i < weft_run_stats_lane_count(st); i++) {
      weft_lane_stats l;
      if (weft_run_stats_lane(st, i, &l) == WEFT_OK && strcmp(l.kind, "cpu") == 0) {
        busy += l.busy_s;
        workers++;
      }
    }
    double *dur = malloc(sizeof *dur * (su.nodes > 0 ? su.nodes : 1));
    size_t n = 0;
    for (size_t i = 0; dur != NULL && i < su.nodes; i++) {
      weft_node_timing nt;
      if (weft_run_stats_node(st, i, &nt) == WEFT_OK && nt.ran) dur[n++] = nt.end_s - nt.start_s;
    }
    double med = n > 0 ? tb_median(dur, (int)n) : 0, max = 0;
    for (size_t i = 0; i < n; i++) max = dur[i] > max ? dur[i] : max;
    free(dur);
    printf("Stats: %s: makespan %.6e s, workers busy %.1f%% of it (%zu workers), node median "
           "%.3e s, max %.3e s; ready waits median %.3e s, p99 %.3e s, max %.3e s; steals %llu, "
           "hand-offs %llu, sleeps %llu, wake-ups %llu\n",
           which, su.makespan_s,
           su.makespan_s > 0 && workers > 0 ? 100.0 * busy / ((double)workers * su.makespan_s) : 0,
           workers, med, max, su.ready_wait_p50_s, su.ready_wait_p99_s, su.ready_wait_max_s,
           (unsigned long long)pc.steals, (unsigned long long)pc.handoffs, (unsigned long long)pc.sleeps,
           (unsigned long long)pc.wakeups);
  }
  if (f->trace != NULL) {
    char path[4096];
    snprintf(path, sizeof path, "%s-%s.json", f->trace, which);
    CHECK(weft_run_stats_save(st, WEFT_REPORT_TRACE, path));
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  tb_flags f = tb_parse_flags(argc, argv, "taskbench_weft");
  app_t app = app_create(argc, argv);
  task_graph_list_t list = app_task_graphs(app);
  driver d;
  memset(&d, 0, sizeof d);
  d.ngraphs = task_graph_list_num_task_graphs(list);
  d.graphs = calloc((size_t)d.ngraphs, sizeof *d.graphs);
  d.out = calloc((size_t)d.ngraphs, sizeof *d.out);
  if (d.graphs == NULL || d.out == NULL) exit(1);
  for (long i = 0; i < d.ngraphs; i++) {
    tb_graph *tg = &d.graphs[i];
    tb_graph_init(tg, task_graph_list_task_graph(list, i));
    if (tg->g.scratch_bytes_per_task > d.scratch_bytes) d.scratch_bytes = tg->g.scratch_bytes_per_task;
    if (tg->max_inputs > d.max_inputs) d.max_inputs = tg->max_inputs;
    d.out[i] = calloc((size_t)(tg->g.timesteps * tg->width), sizeof **d.out);
    if (d.out[i] == NULL) exit(1);
  }
  if (d.max_inputs + 1 > WEFT_MAX_CALL_ARGS) {
    for (long i = 0; i < d.ngraphs; i++)
      if (d.graphs[i].max_inputs + 1 > WEFT_MAX_CALL_ARGS)
        fprintf(stderr,
                "taskbench_weft: graph %ld: a task reads %ld tensors and writes 1, but a weft call "
                "takes at most WEFT_MAX_CALL_ARGS = %d arguments (%d inputs); use a smaller -width "
                "or -radix (all_to_all reads -width tensors)\n",
                i, d.graphs[i].max_inputs, WEFT_MAX_CALL_ARGS, WEFT_MAX_CALL_ARGS - 1);
    return 2;
  }

  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = f.workers;
  o.max_gpus = 0;
  o.flags |= WEFT_RUNTIME_QUIET | (f.no_timing ? WEFT_RUNTIME_NO_TIMING : 0u);
  weft_runtime *rt;
  CHECK(weft_runtime_create(&o, &rt));
  register_op(rt, &d);
  if (!f.no_warmup) warm_up(rt);
  app_display(app);
  printf("Runtime: weft, %d workers, node timing %s, %s\n", weft_runtime_cpu_workers(rt),
         f.no_timing ? "off" : "on", f.no_warmup ? "no warm-up" : "warmed up");

  weft_graph *g;
  double t0 = now_s();
  CHECK(weft_graph_create(rt, &g));
  build(g, &d);
  double built = now_s();
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  CHECK(weft_run_wait(run));
  double first = now_s() - t0;
  if (f.timing & TB_FIRST) {
    /* The run's setup, from its statistics (taken after the timed part): what came before the
     * first node. */
    double plan = 0, tensors = 0;
    weft_run_stats *st;
    weft_stats_summary su;
    CHECK(weft_run_stats_create(run, &st));
    weft_run_stats_summary(st, &su);
    const weft_setup_step *steps;
    size_t nsteps = weft_run_stats_setup(st, &steps);
    for (size_t i = 0; i < nsteps; i++) {
      double dt = steps[i].end_s - steps[i].start_s;
      if (strcmp(steps[i].kind, "plan") == 0) plan += dt;
      if (strcmp(steps[i].kind, "tensor") == 0) tensors += dt;
    }
    printf("Timing: first (build %.6e s: graph, tensors, nodes; run %.6e s: setup %.6e s (plan "
           "%.6e s, tensors %.6e s), then the nodes; waits for a worker, ready to start: median "
           "%.3e s, p99 %.3e s, max %.3e s)\n",
           built - t0, first - (built - t0), su.setup_s, plan, tensors, su.ready_wait_p50_s,
           su.ready_wait_p99_s, su.ready_wait_max_s);
    details(st, &f, "first");
    weft_run_stats_destroy(st);
    app_report_timing(app, first);
  }
  weft_run_destroy(run);
  if (f.timing & TB_REPLAY) {
    double *r = malloc(sizeof *r * (size_t)f.replays);
    if (r == NULL) exit(1);
    weft_run_stats *st = NULL;
    for (int i = 0; i < f.replays; i++) {
      poison(&d);
      t0 = now_s();
      CHECK(weft_graph_launch(g, &run));
      CHECK(weft_run_wait(run));
      r[i] = now_s() - t0;
      if (i == f.replays - 1 && (f.stats || f.trace != NULL)) CHECK(weft_run_stats_create(run, &st));
      weft_run_destroy(run);
    }
    printf("Timing: replay\n");
    if (st != NULL) {
      details(st, &f, "replay");
      weft_run_stats_destroy(st);
    }
    app_report_timing(app, tb_median(r, f.replays));
    free(r);
  }
  fflush(stdout);

  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  free_mem();
  for (long i = 0; i < d.ngraphs; i++) {
    tb_graph_fini(&d.graphs[i]);
    free(d.out[i]);
  }
  free(d.out);
  free(d.graphs);
  app_destroy(app);
  return 0;
}
