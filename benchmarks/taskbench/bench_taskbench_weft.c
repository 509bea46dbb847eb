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
 *   replay  run the same graph again (the median of --replays runs). Every output is zeroed
 *           before each replay, untimed, so that the checks see the replay's order too.
 * Outside the timed part: the runtime, the op registration, and the expansion of Task Bench's
 * dependence intervals into lists (taskbench_graphs.h), which the Taskflow driver shares.
 *
 * Scratch: Task Bench wants scratch_bytes_per_task of scratch per worker, prepared with
 * task_graph_prepare_scratch. weft's workers are its own threads, so each gets its scratch on
 * its first task (thread-local), at most once per thread for the whole program.
 *
 * Arity: a task reading k tensors is a node of k + 1 arguments (k reads, then its write), and
 * the user ops of this weft take at most WEFT_MAX_ARGS arguments: the driver registers one op
 * per arity it needs and refuses, before timing anything, a graph whose tasks read more.
 *
 * Usage: taskbench_weft [Task Bench options] [-worker N | --workers N]
 *                       [--timing first|replay|both] [--replays N] [--no-node-timing] */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "taskbench_graphs.h"
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
  const weft_op **ops;  /* ops[k]: a task of k inputs (k + 1 arguments), registered if needed */
  weft_tensor ***out;   /* out[graph][t * width + point] */
} driver;

/* ---- scratch, one per worker thread ---------------------------------------------------- */

/* Each thread's scratch sits after a header that links it into a list, freed at the end. */
typedef struct scratch_hdr {
  struct scratch_hdr *next;
  char pad[56]; /* the scratch starts 64 bytes in */
} scratch_hdr;

static _Atomic(scratch_hdr *) all_scratch;
static _Thread_local char *my_scratch;

static char *thread_scratch(size_t bytes) {
  if (bytes == 0) return NULL;
  if (my_scratch == NULL) {
    scratch_hdr *h = NULL;
    if (posix_memalign((void **)&h, 64, sizeof *h + bytes) != 0) return NULL;
    my_scratch = (char *)(h + 1);
    task_graph_prepare_scratch(my_scratch, bytes);
    /* release: the list is only walked after the runtime is gone (its workers joined) */
    h->next = atomic_load_explicit(&all_scratch, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&all_scratch, &h->next, h,
                                                  memory_order_release, memory_order_relaxed)) {
    }
  }
  return my_scratch;
}

static void free_scratch(void) {
  scratch_hdr *h = atomic_exchange_explicit(&all_scratch, NULL, memory_order_acquire);
  while (h != NULL) {
    scratch_hdr *next = h->next;
    free(h);
    h = next;
  }
}

/* ---- the kernel ------------------------------------------------------------------------ */

static int task_kernel(weft_kernel_ctx *ctx) {
  const driver *d = weft_ctx_user(ctx);
  const tb_task *p = weft_ctx_params(ctx, NULL);
  const tb_graph *tg = &d->graphs[p->graph];
  int nargs = weft_ctx_nargs(ctx);
  int nin = nargs - 1;
  const char *in[nin > 0 ? nin : 1];
  for (int i = 0; i < nin; i++) in[i] = weft_ctx_data(ctx, i);
  char *scratch = thread_scratch(d->scratch_bytes);
  if (d->scratch_bytes > 0 && scratch == NULL)
    return weft_ctx_fail(ctx, "no memory for %zu bytes of scratch", d->scratch_bytes);
  task_graph_execute_point_scratch(tg->g, (long)p->t, (long)p->point, weft_ctx_data(ctx, nin),
                                   tg->g.output_bytes_per_task, in, tg->input_bytes,
                                   (size_t)nin, scratch, tg->g.scratch_bytes_per_task);
  return WEFT_OK;
}

static void register_ops(weft_runtime *rt, driver *d) {
  d->ops = calloc((size_t)d->max_inputs + 1, sizeof *d->ops);
  if (d->ops == NULL) exit(1);
  for (long k = 0; k <= d->max_inputs; k++) {
    weft_op_desc desc;
    memset(&desc, 0, sizeof desc);
    char name[32];
    snprintf(name, sizeof name, "taskbench_%ld", k);
    desc.name = name;
    desc.nargs = (int)k + 1;
    for (long i = 0; i < k; i++) desc.access[i] = WEFT_READ;
    desc.access[k] = WEFT_WRITE;
    desc.cpu = task_kernel;
    desc.user = d;
    CHECK(weft_op_register(rt, &desc, &d->ops[k]));
  }
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
        for (long i = 0; i < n; i++) args[i] = out[(t - 1) * tg->width + pts[i]];
        weft_tensor **o = &out[t * tg->width + p];
        CHECK(weft_tensor_create(g, NULL, WEFT_F64, 1, &elems, weft_cpu(), weft_zeros(), o));
        args[n] = *o;
        tb_task task = {gi, t, p};
        CHECK(weft_call(g, d->ops[n], args, (int)n + 1, &task, sizeof task));
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
  if (d.max_inputs + 1 > WEFT_MAX_ARGS) {
    for (long i = 0; i < d.ngraphs; i++)
      if (d.graphs[i].max_inputs + 1 > WEFT_MAX_ARGS)
        fprintf(stderr,
                "taskbench_weft: graph %ld: a task reads %ld tensors and writes 1, but weft's user "
                "ops take at most WEFT_MAX_ARGS = %d arguments (%d inputs); use a smaller -width "
                "or -radix (all_to_all reads -width tensors)\n",
                i, d.graphs[i].max_inputs, WEFT_MAX_ARGS, WEFT_MAX_ARGS - 1);
    return 2;
  }

  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = f.workers;
  o.max_gpus = 0;
  o.flags |= WEFT_RUNTIME_QUIET | (f.no_timing ? WEFT_RUNTIME_NO_TIMING : 0u);
  weft_runtime *rt;
  CHECK(weft_runtime_create(&o, &rt));
  register_ops(rt, &d);
  app_display(app);
  printf("Runtime: weft, %d workers, node timing %s\n", weft_runtime_cpu_workers(rt),
         f.no_timing ? "off" : "on");

  weft_graph *g;
  double t0 = now_s();
  CHECK(weft_graph_create(rt, &g));
  build(g, &d);
  CHECK(weft_graph_run(g));
  double first = now_s() - t0;
  if (f.timing & TB_FIRST) {
    printf("Timing: first\n");
    app_report_timing(app, first);
  }
  if (f.timing & TB_REPLAY) {
    double *r = malloc(sizeof *r * (size_t)f.replays);
    if (r == NULL) exit(1);
    for (int i = 0; i < f.replays; i++) {
      poison(&d);
      t0 = now_s();
      CHECK(weft_graph_run(g));
      r[i] = now_s() - t0;
    }
    printf("Timing: replay\n");
    app_report_timing(app, tb_median(r, f.replays));
    free(r);
  }
  fflush(stdout);

  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
  free_scratch();
  for (long i = 0; i < d.ngraphs; i++) {
    tb_graph_fini(&d.graphs[i]);
    free(d.out[i]);
  }
  free(d.out);
  free(d.graphs);
  free(d.ops);
  app_destroy(app);
  return 0;
}
