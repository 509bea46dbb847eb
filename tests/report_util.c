/* report_util.c — see report_util.h. */
#include "report_util.h"

#include "testutil.h"

weft_run_stats *tr_run_stats(weft_graph *g) {
  weft_run *run;
  CHECK(weft_graph_launch(g, &run));
  CHECK(weft_run_wait(run));
  weft_run_stats *st;
  CHECK(weft_run_stats_create(run, &st));
  weft_run_destroy(run);
  return st;
}

weft_stats_summary tr_summary(const weft_run_stats *st) {
  weft_stats_summary s;
  weft_run_stats_summary(st, &s);
  return s;
}

double tr_exposed(const weft_run_stats *st, int why, double *of_why) {
  double all = 0, part = 0;
  for (size_t i = 0; i < weft_run_stats_diagnostic_count(st); i++) {
    weft_copy_diagnostic d;
    CHECK(weft_run_stats_diagnostic(st, i, &d));
    assert_true(d.why > WEFT_WHY_NONE && d.why < WEFT_WHY_COUNT);
    assert_true(d.copies >= 1 && d.message[0] != '\0');
    all += d.exposed_s;
    if (d.why == why) part += d.exposed_s;
  }
  if (of_why != NULL) *of_why = part;
  return all;
}
