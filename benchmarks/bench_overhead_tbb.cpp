// bench_overhead_tbb.cpp — oneTBB's flow graph as bench_overhead's peer: the same three
// workloads, with the edges written by hand (TBB infers none), measured the same way: total ns
// per task (build + first run + destruction) and re-run ns per task, medians of `reps`.
//   indep  200 000 continue_nodes, no edge, each started by a message
//   chain  100 000 continue_nodes in a line
//   wave   a 300 x 300 grid: node (i, j) feeds (i + 1, j) and (i, j + 1)
// Empty bodies, as weft's empty kernels.
#include <tbb/flow_graph.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

using namespace tbb::flow;
using node_t = continue_node<continue_msg>;

static double now_ns() {
  return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct built {
  std::unique_ptr<graph> g;
  std::vector<std::unique_ptr<node_t>> nodes;
  std::vector<node_t *> roots;
};

static size_t build(built &b, const char *w) {
  b.g = std::make_unique<graph>();
  auto add = [&b]() {
    b.nodes.push_back(std::make_unique<node_t>(*b.g, [](const continue_msg &) {}));
    return b.nodes.back().get();
  };
  if (std::strcmp(w, "indep") == 0) {
    b.nodes.reserve(200000);
    for (int i = 0; i < 200000; i++) b.roots.push_back(add());
  } else if (std::strcmp(w, "chain") == 0) {
    b.nodes.reserve(100000);
    node_t *prev = nullptr;
    for (int i = 0; i < 100000; i++) {
      node_t *n = add();
      if (prev != nullptr)
        make_edge(*prev, *n);
      else
        b.roots.push_back(n);
      prev = n;
    }
  } else {
    enum { N = 300 };
    b.nodes.reserve((size_t)N * N);
    for (int i = 0; i < N; i++)
      for (int j = 0; j < N; j++) {
        node_t *n = add();
        if (i > 0) make_edge(*b.nodes[(size_t)(i - 1) * N + j], *n);
        if (j > 0) make_edge(*b.nodes[(size_t)i * N + j - 1], *n);
      }
    b.roots.push_back(b.nodes[0].get());
  }
  return b.nodes.size();
}

static void run(built &b) {
  for (node_t *r : b.roots) r->try_put(continue_msg());
  b.g->wait_for_all();
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

extern "C" void bench_tbb_measure(const char *workload, int reps, int threads, double *total, double *rerun) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, (size_t)threads);
  std::vector<double> tot, re;
  for (int r = 0; r < reps; r++) {
    built b;
    double t0 = now_ns();
    size_t tasks = build(b, workload);
    run(b);
    double t1 = now_ns();
    run(b);
    double t2 = now_ns();
    b.nodes.clear();
    b.g.reset();
    double t3 = now_ns();
    tot.push_back(((t1 - t0) + (t3 - t2)) / (double)tasks);
    re.push_back((t2 - t1) / (double)tasks);
  }
  *total = median(tot);
  *rerun = median(re);
}
