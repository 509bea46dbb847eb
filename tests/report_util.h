/* report_util.h — helpers shared by the report tests (test_report, test_report_sim). */
#ifndef WEFT_TEST_REPORT_UTIL_H
#define WEFT_TEST_REPORT_UTIL_H

#include "weft/report.h"

/* Launches g, waits for it (CHECKed), and returns the snapshot of that run. */
weft_run_stats *tr_run_stats(weft_graph *g);
/* The snapshot's summary. */
weft_stats_summary tr_summary(const weft_run_stats *st);

/* The exposed time of every diagnostic, summed; *of_why (may be NULL) receives the part of
 * reason `why`. Checks that each diagnostic has a reason, copies and a message. */
double tr_exposed(const weft_run_stats *st, int why, double *of_why);

#endif
