/* test_report_cli.c — what `weft run` reports about its last run: the summary on standard
 * error (and none with --quiet), the statistics under "stats" with --json, --trace and
 * --timeline files (parsed with jansson), and a clear failure for a file it cannot write. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli_proc.h"
#include "testutil.h"

/* The overlap example, small: products on the CPU, each copied. */
#define PROG                                                                               \
  "param N = 64\ntensor x: f32[N, N] = uniform(0, 1, seed=7)\n"                              \
  "for i in 0..6 {\n  y[i] = mm(x, x)\n  h[i] = copy(y[i], cpu)\n}\nprint h[5]\n"

static const double T = 60;

static const char *prog(void) {
  static char *path;
  if (path == NULL) path = tp_write("overlap.weft", PROG);
  return path;
}

static json_t *load(const char *text, size_t len) {
  json_error_t e;
  json_t *j = json_loadb(text, len, 0, &e);
  if (j == NULL) fail_msg("not JSON (%s, line %d): %.200s", e.text, e.line, text);
  return j;
}

static size_t count(const char *s, const char *needle) {
  size_t k = 0;
  for (const char *p = strstr(s, needle); p != NULL; p = strstr(p + 1, needle)) k++;
  return k;
}

static void summary_on_stderr_unless_quiet(void **state) {
  (void)state;
  tp_out r;
  /* Standard error is not a terminal here: nothing unless asked for. Two workers, so the
   * summary lists each worker lane whatever the machine (many workers are grouped). */
  tp_run(&r, NULL, NULL, T, (const char *[]){"run", prog(), NULL});
  assert_int_equal(r.code, 0);
  assert_int_equal(r.err_len, 0);
  tp_out_fini(&r);
  tp_run(&r, NULL, NULL, T, (const char *[]){"run", "--stats", "--workers", "2", "--repeat", "3", prog(), NULL});
  assert_int_equal(r.code, 0);
  assert_true(tp_has(r.out, "f32[64, 64]"));
  assert_int_equal(count(r.err, "run: "), 2); /* the last run, and the first run's setup */
  assert_true(tp_has(r.err, "first run: setup "));
  assert_true(tp_has(r.err, "runtime creation"));
  assert_int_equal(count(r.err, "\nsetup: "), 1); /* the last run's setup */
  assert_true(tp_has(r.err, "critical path"));
  assert_true(tp_has(r.err, "cpu worker 0"));
  assert_true(tp_has(r.err, "hidden behind compute"));
  assert_false(tp_has(r.err, "\033[K")); /* not a terminal: no progress bar */
  tp_out_fini(&r);
  tp_run(&r, NULL, NULL, T, (const char *[]){"run", "--quiet", "--stats", prog(), NULL});
  assert_int_equal(r.code, 0);
  assert_false(tp_has(r.err, "run: "));
  tp_out_fini(&r);
}

static void json_trace_and_timeline(void **state) {
  (void)state;
  char trace[512], svg[512];
  snprintf(trace, sizeof trace, "%s/run.trace.json", tp_dir());
  snprintf(svg, sizeof svg, "%s/run.svg", tp_dir());
  tp_out r;
  tp_run(&r, NULL, NULL, T,
         (const char *[]){"run", "--json", "--trace", trace, "--timeline", svg, prog(), NULL});
  assert_int_equal(r.code, 0);
  assert_false(tp_has(r.err, "run: ")); /* --json: the statistics go into the document */
  json_t *doc = load(r.out, r.out_len);
  json_t *st = json_object_get(doc, "stats");
  assert_true(json_is_object(st));
  assert_int_equal(json_integer_value(json_object_get(st, "nodes")), 12);
  assert_int_equal(json_integer_value(json_object_get(st, "copies")), 6);
  assert_true(json_is_number(json_object_get(st, "makespan_s")));
  assert_true(json_is_number(json_object_get(st, "hidden_copy_fraction")));
  assert_true(json_is_array(json_object_get(st, "lanes")));
  assert_true(json_is_object(json_object_get(st, "peak_bytes")));
  assert_true(json_is_object(json_object_get(doc, "outputs")));
  /* The first run of the command's runtime: its setup has the runtime's creation, the plan and
   * the program's tensors (6 inputs and results on the host). */
  json_t *setup = json_object_get(st, "setup"), *steps = json_object_get(setup, "steps");
  assert_true(json_number_value(json_object_get(setup, "total_s")) > 0);
  assert_true(json_number_value(json_object_get(setup, "runtime_s")) > 0);
  assert_true(json_integer_value(json_object_get(setup, "tensors")) > 0);
  size_t nsteps = json_array_size(steps), kinds[3] = {0}, k;
  json_t *step;
  json_array_foreach(steps, k, step) {
    const char *kind = json_string_value(json_object_get(step, "kind"));
    kinds[0] += strcmp(kind, "runtime") == 0;
    kinds[1] += strcmp(kind, "plan") == 0;
    if (strcmp(kind, "tensor") == 0) kinds[2] += (size_t)json_integer_value(json_object_get(step, "count"));
    assert_true(json_number_value(json_object_get(step, "end_s")) >= json_number_value(json_object_get(step, "start_s")));
  }
  assert_true(kinds[0] >= 2 && kinds[1] == 1);
  assert_int_equal(kinds[2], json_integer_value(json_object_get(setup, "tensors")));
  json_decref(doc);
  tp_out_fini(&r);

  json_error_t e;
  json_t *tr = json_load_file(trace, 0, &e);
  if (tr == NULL) fail_msg("%s: %s", trace, e.text);
  size_t slices = 0, setup_slices = 0, i;
  json_t *ev;
  json_array_foreach(json_object_get(tr, "traceEvents"), i, ev) {
    if (strcmp(json_string_value(json_object_get(ev, "ph")), "X") != 0) continue;
    const char *cat = json_string_value(json_object_get(ev, "cat"));
    if (strcmp(cat, "setup") == 0)
      setup_slices++;
    else
      slices++;
  }
  assert_int_equal(slices, 12);
  assert_int_equal(setup_slices, nsteps); /* every setup step is a slice of the trace */
  json_decref(tr);
  FILE *f = fopen(svg, "r");
  assert_non_null(f);
  char head[64] = {0};
  assert_true(fread(head, 1, sizeof head - 1, f) > 0);
  fclose(f);
  assert_true(tp_has(head, "<?xml"));
}

static void unwritable_trace_fails_with_the_path(void **state) {
  (void)state;
  tp_out r;
  tp_run(&r, NULL, NULL, T, (const char *[]){"run", "--trace", "/nonexistent-dir/t.json", prog(), NULL});
  assert_int_equal(r.code, 1);
  assert_true(tp_has(r.err, "--trace"));
  assert_true(tp_has(r.err, "/nonexistent-dir/t.json"));
  tp_out_fini(&r);
  tp_run(&r, NULL, NULL, T, (const char *[]){"run", "--timeline", NULL});
  assert_int_equal(r.code, 2);
  tp_out_fini(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(summary_on_stderr_unless_quiet),
      cmocka_unit_test(json_trace_and_timeline),
      cmocka_unit_test(unwritable_trace_fails_with_the_path),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
