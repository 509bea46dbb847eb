/* test_graph.c — first version: a runtime and an empty graph run (more tests follow). */
#include "testutil.h"

static void empty_graph_runs(void **state) {
  (void)state;
  weft_runtime *rt = tu_runtime_cpu(2);
  weft_graph *g = NULL;
  CHECK(weft_graph_create(rt, &g));
  CHECK(weft_graph_run(g));
  assert_int_equal(weft_graph_node_count(g), 0);
  weft_graph_destroy(g);
  weft_runtime_destroy(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(empty_graph_runs)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
