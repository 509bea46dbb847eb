#!/usr/bin/env bash
# run_cpu.sh [BUILD_DIR] — runs the CPU benchmarks of issue 2 and prints one table against the
# targets: bench_overhead (Taskflow 4.1's figures on the 2-core development machine, measured
# there with the same workloads; oneTBB's flow graph measured in the same run where installed) and bench_cpu_parallel (two independent GEMM chains vs the
# same chains serialised, measured in the same run). Builds nothing. Exit 1 if a target is missed.
set -euo pipefail
build=${1:-build}
ov="$build/benchmarks/bench_overhead"
par="$build/benchmarks/bench_cpu_parallel"
for b in "$ov" "$par"; do
  [ -x "$b" ] || { echo "run_cpu.sh: $b not built (cmake --build $build --target $(basename "$b"))" >&2; exit 2; }
done
json=$("$ov" --json --reps "${REPS:-5}")
pj=$("$par" --json --reps "${REPS:-5}")
python3 - "$json" "$pj" <<'PY'
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
par = json.loads(sys.argv[2])
target = {"indep": (305, 221), "chain": (173, 78), "wave": (232, 135)}
ok = True
print(f"{'benchmark':<22}{'weft':>12}{'target (Taskflow 4.1)':>24}{'ratio':>8}  result")
for r in rows:
    t_total, t_rerun = target[r["workload"]]
    for key, t in (("total_ns_per_task", t_total), ("rerun_ns_per_task", t_rerun)):
        v = r[key]; good = v <= t; ok &= good
        name = f"{r['workload']} {key.split('_')[0]} ns/task"
        print(f"{name:<22}{v:>12.1f}{t:>24}{v/t:>8.2f}  {'met' if good else 'MISSED'}")
for r in rows:  # oneTBB measured in the same run, where installed (issue 18: first run <= 0.3 x TBB)
    if "tbb_total_ns_per_task" not in r: continue
    v = r["total_ns_per_task"] / r["tbb_total_ns_per_task"]; good = v <= 0.3; ok &= good
    print(f"{r['workload'] + ' total / TBB':<22}{v:>12.3f}{'<= 0.3 x oneTBB':>24}{'':>8}  {'met' if good else 'MISSED'}"
          f"   (TBB {r['tbb_total_ns_per_task']:.1f} ns/task, re-run {r['tbb_rerun_ns_per_task']:.1f})")
good = par["ratio"] <= 0.6; ok &= good
print(f"{'2 chains mm parallel':<22}{par['ratio']:>12.3f}{'<= 0.6 x serial':>24}{'':>8}  {'met' if good else 'MISSED'}"
      f"   (serial {par['serial_s']*1e3:.1f} ms, parallel {par['parallel_s']*1e3:.1f} ms)")
sys.exit(0 if ok else 1)
PY
