# src/sched/report — node timing, run statistics, overlap accounting, trace and timeline writers.
list(APPEND WEFT_SOURCES
  src/sched/report/clock.c
  src/sched/report/timing.c
)
