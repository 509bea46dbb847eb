/* bench_taskbench_taskflow.cc — the peer of taskbench_weft: the same Task Bench graphs as one
 * Taskflow taskflow, with explicit edges.
 *
 * One task per (graph, timestep, point); task (t, p) runs after the tasks of its inputs at
 * t-1 (`precede`), calls `task_graph_execute_point_scratch` on pre-allocated buffers, and Task
 * Bench's check inside it aborts the program on a wrong order.
 *
 * Outside the timed part: the executor (its workers: -worker N, else one per core) and one run
 * of a one-task taskflow on it (the warm-up the weft driver does too; --no-warmup skips it), one output
 * buffer per task, each task's list of input pointers, each worker's scratch (prepared with
 * task_graph_prepare_scratch) and the expansion of the dependence intervals
 * (taskbench_graphs.h, shared with the weft driver). The timed part allocates nothing per task
 * beyond what Taskflow does itself: each task's callable captures one pointer, which
 * std::function keeps inline.
 *
 * Timings, printed as "Timing: first|replay" and then Task Bench's report over all graphs:
 *   first   build the taskflow (tasks and edges) and run it;
 *   replay  run the same taskflow again (the median of --replays runs); every output is zeroed
 *           before, untimed, so that the checks see the replay's order too.
 *
 * Usage: taskbench_taskflow [Task Bench options] [-worker N | --workers N]
 *                           [--timing first|replay|both] [--replays N] [--no-warmup] */
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <taskflow/taskflow.hpp>

#include "taskbench_graphs.h"

namespace {

struct Task {
  const tb_graph *tg;
  long t, point;
  long nin;
  const char **in; /* nin input buffers */
  char *out;
};

struct Driver {
  std::vector<tb_graph> graphs;
  std::vector<Task> tasks;             /* every task of every graph, in build order */
  std::vector<const char *> inputs;    /* the input lists, one after the other */
  std::vector<long> input_task;        /* the task that wrote each input */
  std::vector<char *> buffers;         /* one output buffer per graph, task-sized slices */
  std::vector<size_t> buffer_bytes;
  std::vector<char *> scratch;         /* one per worker */
  size_t scratch_bytes = 0;
};

/* What every task reaches without capturing it (a capture of more than 16 bytes would make
 * std::function allocate per task). */
tf::Executor *the_executor;
char **the_scratch;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void prepare(Driver &d) {
  size_t ntasks = 0, ninputs = 0;
  for (const tb_graph &tg : d.graphs) {
    ntasks += (size_t)tg.tasks;
    ninputs += (size_t)tg.deps;
  }
  d.tasks.reserve(ntasks);
  d.inputs.reserve(ninputs);
  d.input_task.reserve(ninputs);
  std::vector<long> pts;
  for (tb_graph &tg : d.graphs) {
    size_t bytes = tg.g.output_bytes_per_task;
    size_t stride = (bytes + 63) / 64 * 64;
    size_t all = stride * (size_t)(tg.g.timesteps * tg.width);
    char *buf = (char *)std::aligned_alloc(64, all);
    if (buf == nullptr) std::exit(1);
    std::memset(buf, 0, all); /* and fault its pages in, as weft's first run does */
    d.buffers.push_back(buf);
    d.buffer_bytes.push_back(all);
    std::vector<long> slot((size_t)(tg.g.timesteps * tg.width), -1);
    pts.resize((size_t)tg.max_inputs + 1);
    for (long t = 0; t < tg.g.timesteps; t++) {
      long off = task_graph_offset_at_timestep(tg.g, t);
      long w = task_graph_width_at_timestep(tg.g, t);
      for (long p = off; p < off + w; p++) {
        long n = tb_inputs(&tg, t, p, pts.data());
        size_t first = d.inputs.size();
        for (long i = 0; i < n; i++) {
          long s = (t - 1) * tg.width + pts[(size_t)i];
          d.inputs.push_back(buf + stride * (size_t)s);
          d.input_task.push_back(slot[(size_t)s]);
        }
        slot[(size_t)(t * tg.width + p)] = (long)d.tasks.size();
        d.tasks.push_back(Task{&tg, t, p, n, d.inputs.data() + first,
                               buf + stride * (size_t)(t * tg.width + p)});
      }
    }
    if (tg.g.scratch_bytes_per_task > d.scratch_bytes) d.scratch_bytes = tg.g.scratch_bytes_per_task;
  }
}

void run_task(const Task *k) {
  char *scratch = the_scratch[the_executor->this_worker_id()];
  task_graph_execute_point_scratch(k->tg->g, k->t, k->point, k->out, k->tg->g.output_bytes_per_task,
                                   k->in, k->tg->input_bytes, (size_t)k->nin, scratch,
                                   k->tg->g.scratch_bytes_per_task);
}

}  // namespace

int main(int argc, char **argv) {
  tb_flags f = tb_parse_flags(argc, argv, "taskbench_taskflow");
  app_t app = app_create(argc, argv);
  task_graph_list_t list = app_task_graphs(app);
  Driver d;
  long ngraphs = task_graph_list_num_task_graphs(list);
  d.graphs.resize((size_t)ngraphs);
  for (long i = 0; i < ngraphs; i++) tb_graph_init(&d.graphs[(size_t)i], task_graph_list_task_graph(list, i));
  prepare(d);

  size_t workers = f.workers > 0 ? (size_t)f.workers : std::thread::hardware_concurrency();
  tf::Executor executor(workers);
  for (size_t w = 0; w < workers; w++) {
    char *s = nullptr;
    if (d.scratch_bytes > 0) {
      s = (char *)std::aligned_alloc(64, (d.scratch_bytes + 63) / 64 * 64);
      if (s == nullptr) std::exit(1);
      task_graph_prepare_scratch(s, d.scratch_bytes);
    }
    d.scratch.push_back(s);
  }
  std::vector<tf::Task> handles(d.tasks.size());
  app_display(app);
  std::printf("Runtime: Taskflow %d.%d.%d, %zu workers, %s\n", TF_VERSION / 100000, TF_VERSION / 100 % 1000,
              TF_VERSION % 100, executor.num_workers(), f.no_warmup ? "no warm-up" : "warmed up");

  if (!f.no_warmup) {
    tf::Taskflow warm;
    warm.emplace([] {});
    executor.run(warm).wait();
  }
  the_executor = &executor;
  the_scratch = d.scratch.data();
  double t0 = now_s();
  tf::Taskflow flow;
  {
    size_t in = 0;
    for (size_t i = 0; i < d.tasks.size(); i++) {
      const Task *k = &d.tasks[i];
      handles[i] = flow.emplace([k] { run_task(k); });
      for (long j = 0; j < k->nin; j++, in++) handles[(size_t)d.input_task[in]].precede(handles[i]);
    }
  }
  double built = now_s();
  executor.run(flow).wait();
  double first = now_s() - t0;
  if (f.timing & TB_FIRST) {
    std::printf("Timing: first (build %.6e s: tasks, edges; run %.6e s)\n", built - t0, first - (built - t0));
    app_report_timing(app, first);
  }
  if (f.timing & TB_REPLAY) {
    std::vector<double> r((size_t)f.replays);
    for (double &x : r) {
      /* untimed: zero every output, so that the checks see the replay's order too */
      for (size_t i = 0; i < d.buffers.size(); i++) std::memset(d.buffers[i], 0, d.buffer_bytes[i]);
      t0 = now_s();
      executor.run(flow).wait();
      x = now_s() - t0;
    }
    std::printf("Timing: replay\n");
    app_report_timing(app, tb_median(r.data(), f.replays));
  }
  std::fflush(stdout);

  for (char *s : d.scratch) std::free(s);
  for (char *b : d.buffers) std::free(b);
  for (tb_graph &tg : d.graphs) tb_graph_fini(&tg);
  app_destroy(app);
  return 0;
}
