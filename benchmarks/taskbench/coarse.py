#!/usr/bin/env python3
"""coarse.py — issue 22's coarse-task targets: weft's first run against its replay, and weft
against Taskflow, with tasks of 0.3 ms or more, width = cores.

For each pattern (default stencil_1d and no_comm) it picks the compute_bound -iter whose tasks
take >= 0.3 ms (doubling from --iter until one weft replay says so: task time = replay time x
cores / tasks), then runs taskbench_weft and taskbench_taskflow --runs times each, interleaved
(one process a run; each gives its first run, build + run, and a replay of the same graph).
It prints, per pattern, the medians and the ratios the targets name:

  weft first / weft replay      <= 1.05   (a first run costs no more than a replay)
  weft / Taskflow, first, replay <= 1.02
  no run >= 2 x its series' median (a lost worker doubles a run: the test of issue 22)

and exits 1 if a target is missed or a run failed. Every run checks its inputs (Task Bench's
core). The environment is kept as a user has it (no OPENBLAS_NUM_THREADS), as the targets ask.
Python 3 standard library only; the runs go to --out/taskbench_coarse_runs.csv.

  benchmarks/taskbench/coarse.py                      # width = workers = this machine's cores
  benchmarks/taskbench/coarse.py --cores 16 --runs 10 --bin .devrun/bin --out $OUT
"""
import argparse
import csv
import datetime
import os
import platform
import statistics
import subprocess
import sys

import metg

TARGET_FIRST_REPLAY = 1.05
TARGET_VS_TASKFLOW = 1.02
LOST_WORKER = 2.0


def run(exe, pattern, width, cores, steps, it, timeout):
    """One process: {'first': seconds, 'replay': seconds, 'tasks': n}, or a string (failure)."""
    cmd = [exe, "-steps", str(steps), "-width", str(width), "-type", pattern] + metg.PATTERNS[pattern] + \
          ["-kernel", "compute_bound", "-iter", str(it), "-worker", str(cores), "--timing", "both"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timed out after %g s" % timeout
    reports = metg.parse_reports(r.stdout) if r.returncode == 0 else {}
    if "first" not in reports or "replay" not in reports:
        lines = (r.stderr or r.stdout).strip().splitlines()
        return "exit %d: %s" % (r.returncode, lines[-1] if lines else "no report")
    return {"first": reports["first"]["elapsed"], "replay": reports["replay"]["elapsed"],
            "tasks": reports["replay"]["tasks"]}


def pick_iter(exe, pattern, a, width):
    """The smallest power-of-two -iter from --iter up whose weft replay tasks take >= 0.3 ms."""
    it = a.iter
    while True:
        r = run(exe, pattern, width, a.cores, a.steps, it, a.timeout)
        if isinstance(r, str):
            sys.exit("coarse.py: %s -iter %d: %s" % (pattern, it, r))
        task_s = r["replay"] * a.cores / r["tasks"]
        if task_s >= metg.COARSE_S or it >= 1 << 24:
            return it, task_s
        it *= 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=None, help="directory of taskbench_weft/_taskflow "
                    "(default: build/benchmarks/taskbench of this script's checkout, else PATH)")
    ap.add_argument("--cores", type=int, default=os.cpu_count(), help="workers and width (default: this machine's cores)")
    ap.add_argument("--patterns", default="stencil_1d,no_comm")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--iter", type=int, default=1 << 16, help="first -iter tried (doubled until tasks take >= 0.3 ms)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run")
    ap.add_argument("--out", default=os.environ.get("OUT") or "taskbench-results")
    a = ap.parse_args()
    for name, v, least in (("--cores", a.cores, 1), ("--runs", a.runs, 1), ("--steps", a.steps, 1), ("--iter", a.iter, 1)):
        if v < least:
            sys.exit("coarse.py: %s must be at least %d, got %d" % (name, least, v))
    here = os.path.dirname(os.path.abspath(__file__))
    bindir = a.bin or os.path.normpath(os.path.join(here, "..", "..", "build", "benchmarks", "taskbench"))
    exe = {s: metg.find_bin(bindir, "taskbench_" + s) for s in ("weft", "taskflow")}
    for s, e in exe.items():
        if e is None:
            sys.exit("coarse.py: taskbench_%s not found in %s or on PATH (build the taskbench targets or pass --bin)"
                     % (s, bindir))
    patterns = [p for p in a.patterns.split(",") if p]
    for p in patterns:
        if p not in metg.PATTERNS:
            sys.exit("coarse.py: unknown pattern %s (%s)" % (p, ", ".join(metg.PATTERNS)))
    os.makedirs(a.out, exist_ok=True)
    width = a.cores
    rows, misses, failed = [], [], 0
    with open(os.path.join(a.out, "taskbench_coarse_runs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["pattern", "system", "iterations", "run", "first_s", "replay_s", "status"])
        for p in patterns:
            it, task_s = pick_iter(exe["weft"], p, a, width)
            series = {(s, t): [] for s in exe for t in ("first", "replay")}
            for i in range(a.runs):
                for s in exe:
                    r = run(exe[s], p, width, a.cores, a.steps, it, a.timeout)
                    if isinstance(r, str):
                        failed += 1
                        w.writerow([p, s, it, i, "", "", "FAILED: " + r])
                        continue
                    w.writerow([p, s, it, i, "%.9g" % r["first"], "%.9g" % r["replay"], "ok"])
                    for t in ("first", "replay"):
                        series[(s, t)].append(r[t])
            med = {k: statistics.median(v) if v else float("nan") for k, v in series.items()}
            worst = {k: max(v) / med[k] if v else float("nan") for k, v in series.items()}
            fr_w = med[("weft", "first")] / med[("weft", "replay")]
            fr_t = med[("taskflow", "first")] / med[("taskflow", "replay")]
            vs_f = med[("weft", "first")] / med[("taskflow", "first")]
            vs_r = med[("weft", "replay")] / med[("taskflow", "replay")]
            lost = max(worst[("weft", "first")], worst[("weft", "replay")])
            rows.append((p, it, task_s, med, fr_w, fr_t, vs_f, vs_r, lost,
                         max(worst[("taskflow", "first")], worst[("taskflow", "replay")])))
            if fr_w > TARGET_FIRST_REPLAY:
                misses.append("%s: weft first / replay %.3f > %.2f" % (p, fr_w, TARGET_FIRST_REPLAY))
            if vs_f > TARGET_VS_TASKFLOW or vs_r > TARGET_VS_TASKFLOW:
                misses.append("%s: weft / Taskflow first %.3f, replay %.3f (target <= %.2f)"
                              % (p, vs_f, vs_r, TARGET_VS_TASKFLOW))
            if lost >= LOST_WORKER:
                misses.append("%s: a weft run took %.2f x its series' median" % (p, lost))
    print("**Machine**: %s, %d CPUs. **Date**: %s UTC. **Command**: `benchmarks/taskbench/coarse.py %s`. "
          "Width = workers = %d, %d steps, medians of %d runs each, interleaved; ms."
          % (platform.node() or "?", os.cpu_count(), datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
             " ".join(sys.argv[1:]), a.cores, a.steps, a.runs))
    print()
    print("| pattern (-iter, task) | weft first / replay | Taskflow first / replay | weft first / replay: ratio "
          "| Taskflow's | weft / Taskflow: first, replay | slowest run / median: weft, Taskflow |")
    print("| --- | --- | --- | ---: | ---: | --- | --- |")
    for p, it, task_s, med, fr_w, fr_t, vs_f, vs_r, lost, lost_t in rows:
        print("| %s (%d, %.2f ms) | %.2f / %.2f | %.2f / %.2f | %.3f | %.3f | %.3f, %.3f | %.2f, %.2f |"
              % (p, it, task_s * 1e3, med[("weft", "first")] * 1e3, med[("weft", "replay")] * 1e3,
                 med[("taskflow", "first")] * 1e3, med[("taskflow", "replay")] * 1e3, fr_w, fr_t, vs_f, vs_r,
                 lost, lost_t))
    print()
    for m in misses:
        print("coarse.py: missed: " + m)
    if failed:
        print("coarse.py: %d runs failed (see taskbench_coarse_runs.csv)" % failed)
    return 1 if misses or failed else 0


if __name__ == "__main__":
    sys.exit(main())
