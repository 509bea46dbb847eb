/* test_topology.c — src/sched/topology.c: the CPU topology hwloc reports (counts that agree with
 * each other and with the process's CPUs), workers bound to one core each with WEFT_BIND_CORES
 * (seen from inside a kernel through the thread's affinity), not bound with WEFT_BIND_NONE, bound
 * by default when the pool has a worker a hardware thread (or the machine several NUMA nodes),
 * and a bad option or WEFT_BIND value refused with a message naming it. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>

#include "testutil.h"

static weft_runtime *runtime(int workers, int bind) {
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.cpu_workers = workers;
  o.max_gpus = 0;
  o.flags = WEFT_RUNTIME_QUIET;
  o.bind = bind;
  weft_runtime *rt;
  CHECK(weft_runtime_create(&o, &rt));
  return rt;
}

static void topology_is_consistent(void **state) {
  (void)state;
  weft_runtime *rt = runtime(2, WEFT_BIND_NONE);
  weft_cpu_topology t;
  CHECK(weft_runtime_cpu_topology(rt, &t));
  cpu_set_t mine;
  assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
  assert_true(t.packages >= 1 && t.numa_nodes >= 1 && t.cores >= 1);
  assert_true(t.cores >= t.packages && t.pus >= t.cores);
  assert_int_equal(t.pus, CPU_COUNT(&mine)); /* the hardware threads this process may use */
  assert_int_equal(t.workers, 2);
  assert_int_equal(t.bound, 0);
  assert_int_equal(weft_runtime_cpu_topology(NULL, &t), WEFT_EINVAL);
  weft_runtime_destroy(rt);
}

/* Writes the number of CPUs the running worker may use into its f64 argument. */
static int affinity_width(weft_kernel_ctx *ctx) {
  cpu_set_t s;
  if (sched_getaffinity(0, sizeof s, &s) != 0) return weft_ctx_fail(ctx, "sched_getaffinity failed");
  *(double *)weft_ctx_data(ctx, 0) = CPU_COUNT(&s);
  return WEFT_OK;
}

static void workers_bound_to_one_core_each(void **state) {
  (void)state;
  for (int bind = WEFT_BIND_NONE; bind <= WEFT_BIND_CORES; bind++) {
    weft_runtime *rt = runtime(2, bind);
    weft_cpu_topology t;
    CHECK(weft_runtime_cpu_topology(rt, &t));
    assert_int_equal(t.bound, bind == WEFT_BIND_CORES);
    const weft_op *op = tu_op1(rt, "affinity", WEFT_WRITE, affinity_width, NULL);
    weft_graph *g;
    CHECK(weft_graph_create(rt, &g));
    enum { N = 16 };
    weft_tensor *out[N];
    for (int i = 0; i < N; i++) {
      out[i] = tu_scalar(g, NULL, 0);
      CHECK(weft_call(g, op, &out[i], 1, NULL, 0));
    }
    CHECK(weft_graph_run(g));
    for (int i = 0; i < N; i++) {
      double w = tu_value(out[i]);
      if (bind == WEFT_BIND_CORES)
        assert_true(w == (double)(t.pus / t.cores)); /* one core's hardware threads */
      else
        assert_true(w == (double)t.pus); /* wherever the system puts it */
    }
    weft_graph_destroy(g);
    weft_runtime_destroy(rt);
  }
}

/* WEFT_BIND_AUTO: bound when the pool has a worker for every hardware thread the process may
 * use (the default pool, cpu_workers 0), or on a machine of several NUMA nodes; a smaller pool
 * is left to the system on one NUMA node. */
static void auto_binds_a_pool_that_fills_the_cpu(void **state) {
  (void)state;
  weft_runtime *rt = runtime(0, WEFT_BIND_AUTO);
  weft_cpu_topology t;
  CHECK(weft_runtime_cpu_topology(rt, &t));
  assert_int_equal(t.workers, t.pus);
  assert_int_equal(t.bound, 1);
  int multi_numa = t.numa_nodes > 1, pus = t.pus;
  weft_runtime_destroy(rt);
  if (pus < 2) return; /* no smaller pool to try */
  rt = runtime(pus - 1, WEFT_BIND_AUTO);
  CHECK(weft_runtime_cpu_topology(rt, &t));
  assert_int_equal(t.bound, multi_numa);
  weft_runtime_destroy(rt);
}

static void bad_binding_is_refused(void **state) {
  (void)state;
  weft_runtime_options o;
  weft_runtime_options_init(&o);
  o.flags = WEFT_RUNTIME_QUIET;
  o.max_gpus = 0;
  o.bind = 7;
  weft_runtime *rt = NULL;
  assert_int_equal(weft_runtime_create(&o, &rt), WEFT_EINVAL);
  assert_null(rt);
  assert_true(tu_contains(weft_last_error(), "bind is 7"));
  o.bind = WEFT_BIND_AUTO;
  setenv("WEFT_BIND", "sometimes", 1);
  assert_int_equal(weft_runtime_create(&o, &rt), WEFT_EINVAL);
  assert_true(tu_contains(weft_last_error(), "WEFT_BIND is 'sometimes'"));
  setenv("WEFT_BIND", "cores", 1); /* the environment overrides the option */
  o.bind = WEFT_BIND_NONE;
  CHECK(weft_runtime_create(&o, &rt));
  weft_cpu_topology t;
  CHECK(weft_runtime_cpu_topology(rt, &t));
  assert_int_equal(t.bound, 1);
  weft_runtime_destroy(rt);
  unsetenv("WEFT_BIND");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(topology_is_consistent),
      cmocka_unit_test(workers_bound_to_one_core_each),
      cmocka_unit_test(auto_binds_a_pool_that_fills_the_cpu),
      cmocka_unit_test(bad_binding_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
