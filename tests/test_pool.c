/* test_pool.c — src/sched/pool.c: every worker of the pool takes work when there is enough for
 * all of them. A graph as wide as the pool, whose tasks each wait until as many tasks as there
 * are workers are in flight at once, completes only if every worker runs one: a worker that is
 * lost (asleep while work waits, never started, or starved of its core) turns it into a wait
 * that a generous deadline turns into a failure. Checked right after the runtime is created,
 * right after a matrix product (a BLAS that starts threads of its own would compete then), and
 * over many steps of a stencil, for 1, 2, 4, 16 workers and one a core, and of an all_to_all whose
 * steps are bursts that workers hand to each other; and the run's counts of steals, hand-offs and
 * wake-ups. No timing is asserted: the deadline only bounds a hang.
 *
 * And the block pool's warm-up (src/sched/blockpool.c): blocks asked for after a first one that
 * found none come with their pages already in memory (mincore), touched by an idle worker, and
 * blocks that recycle warm nothing more; a vector's next growth finds its block warmed, in
 * pieces, while it fills the one before. */
#define _DEFAULT_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "sched/sched.h"
#include "testutil.h"
#include "weft/report.h"

enum { DEADLINE_S = 60 };

typedef struct barrier {
  atomic_int in_flight; /* tasks of the current step that have started */
  int width;
  atomic_int timed_out;
} barrier;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct task_params {
  barrier *b;
  int step;
} task_params;

/* A task of step k: arrives, then waits until the whole step (width tasks) has arrived. The
 * counter counts arrivals over all steps, so step k waits for (k + 1) x width. */
static int barrier_task(weft_kernel_ctx *ctx) {
  const task_params *tp = weft_ctx_params(ctx, NULL);
  barrier *b = tp->b;
  const int *step = &tp->step;
  int want = (*step + 1) * b->width;
  atomic_fetch_add(&b->in_flight, 1);
  double give_up = now_s() + DEADLINE_S;
  struct timespec nap = {0, 20000};
  while (atomic_load(&b->in_flight) < want) {
    if (atomic_load(&b->timed_out) || now_s() > give_up) {
      atomic_store(&b->timed_out, 1);
      return weft_ctx_fail(ctx, "only %d of %d tasks of step %d were ever in flight at once: a worker was lost",
                           atomic_load(&b->in_flight) - *step * b->width, b->width, *step);
    }
    nanosleep(&nap, NULL); /* more workers than cores must still all get to run */
  }
  return WEFT_OK;
}

/* A runtime of `workers` and a graph of `steps` x `workers` barrier tasks; each task of a step
 * reads its neighbours' tensors of the step before (a 1-D stencil), or with `all` every tensor of
 * the step before (all_to_all: the last task of a step to end readies the whole next step), so
 * steps follow each other through the dependencies alone. Runs it and checks that every worker
 * ran a task each step; *pc (when not NULL) gets the run's pool counts. */
static void run_barrier_graph_counted(weft_runtime *rt, int workers, int steps, int all, weft_pool_counts *pc) {
  static const weft_access modes[3] = {WEFT_WRITE, WEFT_READ, WEFT_READ};
  barrier b = {.width = workers};
  atomic_init(&b.in_flight, 0);
  atomic_init(&b.timed_out, 0);
  const char *name = all ? "barrier_all" : "barrier";
  const weft_op *op = weft_op_find(rt, name);
  if (op == NULL) op = all ? tu_op_gather(rt, name, barrier_task) : tu_op(rt, name, 3, modes, barrier_task, NULL);
  weft_graph *g = tu_graph(rt);
  weft_tensor **cur = calloc((size_t)workers, sizeof *cur), **next = calloc((size_t)workers, sizeof *next);
  weft_tensor **args = calloc((size_t)(workers > 2 ? workers : 2) + 1, sizeof *args);
  assert_non_null(cur);
  assert_non_null(next);
  assert_non_null(args);
  for (int i = 0; i < workers; i++) cur[i] = tu_scalar(g, "s", 0);
  for (int k = 0; k < steps; k++) {
    for (int i = 0; i < workers; i++) {
      next[i] = tu_scalar(g, "s", 0);
      args[0] = next[i];
      int nargs = all ? workers + 1 : 3;
      for (int j = 1; j < nargs; j++)
        args[j] = all ? cur[j - 1] : cur[(i + (j == 1 ? workers - 1 : 1)) % workers];
      task_params tp = {&b, k};
      CHECK(weft_call(g, op, args, nargs, &tp, sizeof tp));
    }
    weft_tensor **t = cur;
    cur = next;
    next = t;
  }
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  int rc = weft_run_wait(r);
  if (rc != WEFT_OK) fail_msg("%d workers, %d steps: %s", workers, steps, weft_run_error(r));
  assert_int_equal(atomic_load(&b.in_flight), workers * steps);
  /* Every worker ran one task of each step. */
  weft_run_stats *st;
  CHECK(weft_run_stats_create(r, &st));
  int busy = 0;
  for (size_t l = 0; l < weft_run_stats_lane_count(st); l++) {
    weft_lane_stats ls;
    CHECK(weft_run_stats_lane(st, l, &ls));
    if (strcmp(ls.kind, "cpu") == 0 && ls.nodes > 0) {
      busy++;
      assert_int_equal(ls.nodes, steps);
    }
  }
  assert_int_equal(busy, workers);
  if (pc != NULL) weft_run_stats_pool(st, pc);
  weft_run_stats_destroy(st);
  weft_run_destroy(r);
  weft_graph_destroy(g);
  free(cur);
  free(next);
  free(args);
}

static void run_barrier_graph(weft_runtime *rt, int workers, int steps) {
  run_barrier_graph_counted(rt, workers, steps, 0, NULL);
}

static int cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static void every_worker_right_after_create(void **state) {
  (void)state;
  int widths[4] = {1, 2, 4, cores()};
  for (int w = 0; w < 4; w++) {
    weft_runtime *rt = tu_runtime_cpu(widths[w]);
    run_barrier_graph(rt, widths[w], 1);
    weft_runtime_destroy(rt);
  }
}

static void every_worker_right_after_a_product(void **state) {
  (void)state;
  int widths[3] = {2, 4, cores()};
  for (int w = 0; w < 3; w++) {
    weft_runtime *rt = tu_runtime_cpu(widths[w]);
    weft_graph *g = tu_graph(rt);
    weft_tensor *a = tu_matrix(g, "a", 384, 384, 1), *c = NULL;
    CHECK(weft_mm(g, a, a, &c));
    CHECK(weft_graph_run(g));
    weft_graph_destroy(g);
    run_barrier_graph(rt, widths[w], 1);
    weft_runtime_destroy(rt);
  }
}

static void every_worker_every_step(void **state) {
  (void)state;
  /* And 16 whatever the cores: many workers searching and sleeping at once, the case in which
   * a node queued while one searched was once left unclaimed (found on 16 and 32 cores). */
  int widths[3] = {2, cores() > 2 ? cores() : 3, 16};
  for (int w = 0; w < 3; w++) {
    weft_runtime *rt = tu_runtime_cpu(widths[w]);
    run_barrier_graph(rt, widths[w], 20);
    run_barrier_graph(rt, widths[w], 20); /* a second graph in the same runtime */
    /* A graph large enough that its launch wakes the workers before it is planned, and they
     * watch for its roots (weft__pool_launch_begin): none may miss them or the steps after. */
    run_barrier_graph(rt, widths[w], 1100 / widths[w] + 1);
    weft_runtime_destroy(rt);
  }
}

/* A burst: the last task of each all_to_all step readies W tasks at once, runs one, queues two
 * and hands the rest to workers searching (pool.c, "Hand-off"), the other workers of the step
 * before, which ended with it (each task waits for the whole step) and search: none may be lost
 * (the barrier of the next step), and hand-offs happen (W - 3 a step, where every other worker
 * still searches; over 20 steps some must, though a worker the kernel keeps from its core may
 * fall asleep first). 16 workers and one a core, hand-offs turned on whatever the cores (so that
 * a machine of few cores checks them too); and by default none in a pool of more workers than
 * cores, where a searcher is often off its core. */
static void bursts_are_handed_off(void **state) {
  (void)state;
  int widths[2] = {16, cores() > 4 ? cores() : 5};
  weft_pool_counts pc;
  for (int w = 0; w < 2; w++) {
    weft_runtime *rt = tu_runtime_cpu(widths[w]);
    weft__pool_set_hand_offs(rt->pool, 1);
    run_barrier_graph_counted(rt, widths[w], 20, 1, &pc);
    assert_true(pc.handoffs > 0);
    assert_true(pc.handoffs <= (uint64_t)(widths[w] - 3) * 19);
    weft_runtime_destroy(rt);
  }
  int over = cores() + 3;
  weft_runtime *rt = tu_runtime_cpu(over);
  run_barrier_graph_counted(rt, over, 20, 1, &pc);
  assert_int_equal(pc.handoffs, 0);
  weft_runtime_destroy(rt);
}

/* The run's pool counts: a node whose W successors each wait until W of them are in flight
 * makes the other workers steal W - 1 of them (the worker that readies them runs one and queues
 * the rest on its own deque); and a launch after the workers have fallen asleep wakes one. */
static void the_pool_counts_steals_and_wakeups(void **state) {
  (void)state;
  enum { W = 3 };
  weft_runtime *rt = tu_runtime_cpu(W);
  static const weft_access modes[3] = {WEFT_WRITE, WEFT_READ, WEFT_READ};
  const weft_op *op = tu_op(rt, "barrier", 3, modes, barrier_task, NULL);
  barrier b = {.width = W};
  atomic_init(&b.in_flight, 0);
  atomic_init(&b.timed_out, 0);
  weft_graph *g = tu_graph(rt);
  weft_tensor *root = tu_scalar(g, "root", 0);
  CHECK(weft_fill(g, root, weft_full(1)));
  for (int i = 0; i < W; i++) {
    weft_tensor *args[3] = {tu_scalar(g, "s", 0), root, root};
    task_params tp = {&b, 0};
    CHECK(weft_call(g, op, args, 3, &tp, sizeof tp));
  }
  struct timespec idle = {0, 300000000}; /* long past the workers' spin and watch */
  nanosleep(&idle, NULL);
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  CHECK(weft_run_wait(r));
  weft_run_stats *st;
  CHECK(weft_run_stats_create(r, &st));
  weft_pool_counts pc;
  weft_run_stats_pool(st, &pc);
  assert_true(pc.steals >= W - 1);
  assert_true(pc.wakeups >= 1);
  assert_int_equal(pc.injected, 0);
  weft_run_stats_destroy(st);
  weft_run_destroy(r);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

/* The pages of [b, b + size) not in memory now. */
static size_t absent_pages(const void *b, size_t size) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)b / page * page, hi = ((uintptr_t)b + size + page - 1) / page * page;
  size_t n = (hi - lo) / page, out = 0;
  unsigned char *v = malloc(n);
  assert_non_null(v);
  assert_int_equal(mincore((void *)lo, hi - lo, v), 0);
  for (size_t i = 0; i < n; i++) out += !(v[i] & 1);
  free(v);
  return out;
}

/* The blocks primed when the runtime is made: 1 + W/4 of each class from 64 KiB to 2 MiB and
 * W/16 of 4 MiB (W up to 32). */
static size_t primed_bytes(int workers) {
  size_t n = 0;
  if (workers > 32) workers = 32;
  for (int c = 16; c <= 21; c++) n += (size_t)(1 + workers / 4) << c;
  return n + ((size_t)(workers / 16) << 22);
}

/* The bytes that the runtime's first run says its setup readied in the block pool. */
static uint64_t setup_pool_bytes(weft_runtime *rt) {
  weft_graph *g = tu_graph(rt);
  weft_tensor *t = tu_scalar(g, "t", 0);
  CHECK(weft_fill(g, t, weft_full(1)));
  weft_run *r;
  CHECK(weft_graph_launch(g, &r));
  CHECK(weft_run_wait(r));
  weft_run_stats *st;
  CHECK(weft_run_stats_create(r, &st));
  const weft_setup_step *steps;
  size_t n = weft_run_stats_setup(st, &steps);
  uint64_t bytes = 0;
  int found = 0;
  for (size_t i = 0; i < n; i++)
    if (strcmp(steps[i].kind, "runtime") == 0 && strstr(steps[i].what, "block pool") != NULL) {
      bytes = steps[i].bytes;
      found++;
    }
  assert_int_equal(found, 1);
  weft_run_stats_destroy(st);
  weft_run_destroy(r);
  weft_graph_destroy(g);
  return bytes;
}

/* A fresh runtime's pool already holds the blocks a first graph takes as its arenas and
 * vectors double (64 KiB to 4 MiB), every page in memory before anyone writes it; its first
 * run's setup says so. A request of a class below 2 MiB past the primed ones comes from the
 * allocator and warms nothing ahead (a graph asks for those once each as it grows). */
static void blocks_primed(void **state) {
  (void)state;
  static const int sizes[] = {2, 9, 16};
  for (int i = 0; i < 3; i++) {
    int workers = sizes[i];
    weft_runtime *rt = tu_runtime_cpu(workers);
    const weft__mem *mem = weft__blockpool_mem(rt->blocks);
    size_t primed = primed_bytes(workers);
    assert_int_equal(weft__blockpool_cached(rt->blocks), primed);
    size_t n = (size_t)(1 + workers / 4), big = (size_t)2 << 20, taken = 0;
    void *b[8][5];
    for (int c = 16; c <= 20; c++)
      for (size_t k = 0; k < n; k++) {
        b[k][c - 16] = weft__mem_get(mem, (size_t)1 << c);
        assert_non_null(b[k][c - 16]);
        assert_int_equal(absent_pages(b[k][c - 16], (size_t)1 << c), 0);
        taken += (size_t)1 << c;
      }
    /* the 2 and 4 MiB ones left */
    assert_int_equal(weft__blockpool_cached(rt->blocks), primed - taken);
    void *more = weft__mem_get(mem, (size_t)1 << 16);
    assert_non_null(more);
    usleep(20000); /* a warm-up started by mistake would have listed its block by now */
    assert_int_equal(weft__blockpool_cached(rt->blocks), primed - taken);
    void *two = weft__mem_get(mem, big);
    assert_non_null(two);
    assert_int_equal(absent_pages(two, big), 0);
    weft__mem_put(mem, two, big);
    weft__mem_put(mem, more, (size_t)1 << 16);
    for (int c = 16; c <= 20; c++)
      for (size_t k = 0; k < n; k++) weft__mem_put(mem, b[k][c - 16], (size_t)1 << c);
    /* (taking a 2 MiB block may have warmed more of them ahead) */
    assert_true(weft__blockpool_cached(rt->blocks) >= primed + ((size_t)1 << 16));
    weft_runtime_destroy(rt);
    rt = tu_runtime_cpu(workers);
    assert_int_equal(setup_pool_bytes(rt), primed);
    weft_runtime_destroy(rt);
  }
}

/* A graph larger than any before asks for 2 MiB blocks again and again (its arenas' chunks):
 * when a request leaves none listed, an idle worker warms blocks of that class, so the next
 * requests get blocks whose every page is in memory before anyone writes them. Recycling them
 * afterwards warms nothing more. At most a worker fewer than the pool has warm at once. */
static void blocks_warmed_ahead(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(3); /* two warm-ups at once: a worker fewer than the pool has */
  const weft__mem *mem = weft__blockpool_mem(rt->blocks);
  size_t size = (size_t)2 << 20;
  size_t base = primed_bytes(3) - size; /* the primed blocks but the one taken first */
  void *first = weft__mem_get(mem, size);
  assert_non_null(first);
  /* The warm-ups are a worker's: wait until two blocks are listed (the deadline bounds a hang). */
  double t0 = now_s();
  while (weft__blockpool_cached(rt->blocks) < base + 2 * size && now_s() - t0 < DEADLINE_S) usleep(1000);
  assert_int_equal(weft__blockpool_cached(rt->blocks), base + 2 * size);
  void *next = weft__mem_get(mem, size);
  assert_non_null(next);
  assert_int_equal(absent_pages(next, size), 0); /* warmed */
  memset(first, 1, size);
  memset(next, 2, size);
  /* Taking `next` left one block listed: one more warm-up, then the two blocks come back: four
   * listed, the two ahead and the two taken. */
  weft__mem_put(mem, next, size);
  weft__mem_put(mem, first, size);
  t0 = now_s();
  while (weft__blockpool_cached(rt->blocks) < base + 4 * size && now_s() - t0 < DEADLINE_S) usleep(1000);
  size_t held = weft__blockpool_cached(rt->blocks);
  assert_int_equal(held, base + 4 * size);
  /* Recycling: the blocks go and come again; the pool holds no more than before. */
  for (int k = 0; k < 100; k++) {
    void *b = weft__mem_get(mem, size);
    assert_non_null(b);
    weft__mem_put(mem, b, size);
  }
  usleep(20000); /* a warm-up started by mistake would have listed its block by now */
  assert_int_equal(weft__blockpool_cached(rt->blocks), held);
  weft_runtime_destroy(rt);

  /* Two workers: one warm-up at a time (the builder keeps a core), so a request that takes the
   * last listed block leaves one block warmed, not two. */
  rt = tu_runtime_cpu(2);
  mem = weft__blockpool_mem(rt->blocks);
  base = primed_bytes(2) - size;
  first = weft__mem_get(mem, size);
  assert_non_null(first);
  t0 = now_s();
  while (weft__blockpool_cached(rt->blocks) < base + size && now_s() - t0 < DEADLINE_S) usleep(1000);
  usleep(20000); /* a second warm-up would have listed its block by now */
  assert_int_equal(weft__blockpool_cached(rt->blocks), base + size);
  weft__mem_put(mem, first, size);
  weft_runtime_destroy(rt);
}

/* A graph's vectors grow fourfold: one that has just grown to 4 MiB hints its next block,
 * 16 MiB, which idle workers warm in pieces meanwhile, so the growth finds every page in memory.
 * One block a class however often the hint comes; none past 16 MiB. With 2, 4 and 9 workers the
 * warm-ups have room for 1, up to 3 and up to 8 pieces at once: a block is cut into 1, 2 or 4 and
 * up to 8 (a power of two, so that the task at each piece's start is aligned: 3 pieces of 16 MiB
 * put them at odd addresses, which the sanitizer build's alignment check aborts on). */
static void vectors_next_block_warmed(void **state) {
  (void)state;
  const size_t four = (size_t)4 << 20, sixteen = (size_t)16 << 20, elem = 16;
  static const int sizes[] = {2, 4, 9};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    weft_runtime *rt = tu_runtime_cpu(sizes[i]);
    const weft__mem *mem = weft__blockpool_mem(rt->blocks);
    int warming = -1;
    assert_int_equal(weft__blockpool_listed(rt->blocks, sixteen, &warming), 0);
    assert_int_equal(warming, 0);
    weft__vec v;
    weft__vec_init_mem(&v, elem, mem);
    assert_int_equal(weft__vec_reserve(&v, four / elem), WEFT_OK);
    assert_int_equal(v.cap * elem, four);
    /* The hint finds no room while other warm-ups fill the workers it may use: hinted again
     * until the block is listed, and while one is warming or listed a hint adds none. */
    double t0 = now_s();
    int listed;
    while ((listed = weft__blockpool_listed(rt->blocks, sixteen, &warming)) < 1 && now_s() - t0 < DEADLINE_S) {
      assert_true(listed + warming <= 1);
      weft__mem_ahead(mem, sixteen);
      usleep(1000);
    }
    assert_int_equal(weft__blockpool_listed(rt->blocks, sixteen, &warming), 1);
    assert_int_equal(warming, 0);
    weft__mem_ahead(mem, sixteen);
    assert_int_equal(weft__blockpool_listed(rt->blocks, sixteen, &warming), 1);
    assert_int_equal(warming, 0);
    memset(v.data, 1, four);
    v.len = v.cap;
    assert_int_equal(weft__vec_reserve(&v, 1), WEFT_OK);
    assert_int_equal(v.cap * elem, sixteen);
    assert_int_equal(absent_pages(v.data, sixteen), 0); /* warmed, the copied part and the rest */
    assert_int_equal(weft__blockpool_listed(rt->blocks, sixteen, NULL), 0);
    assert_int_equal(((unsigned char *)v.data)[four - 1], 1);
    /* The growth hinted 64 MiB, past the classes warmed ahead: nothing listed or warming (a
     * warm-up is counted before the hint returns). */
    assert_int_equal(weft__blockpool_listed(rt->blocks, (size_t)64 << 20, &warming), 0);
    assert_int_equal(warming, 0);
    weft__vec_fini(&v);
    weft_runtime_destroy(rt);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_worker_right_after_create),
      cmocka_unit_test(every_worker_right_after_a_product),
      cmocka_unit_test(every_worker_every_step),
      cmocka_unit_test(bursts_are_handed_off),
      cmocka_unit_test(the_pool_counts_steals_and_wakeups),
      cmocka_unit_test(blocks_primed),
      cmocka_unit_test(blocks_warmed_ahead),
      cmocka_unit_test(vectors_next_block_warmed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
