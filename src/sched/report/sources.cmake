# src/sched/report — node timing, run statistics, overlap accounting, trace and timeline writers,
# progress. Public API: include/weft/report.h.
list(APPEND WEFT_SOURCES
  src/sched/report/clock.c
  src/sched/report/timing.c
  src/sched/report/analysis.c
  src/sched/report/stats.c
  src/sched/report/trace.c
  src/sched/report/svg.c
  src/sched/report/progress.c
)
