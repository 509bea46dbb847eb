#!/usr/bin/env python3
"""metg.py — METG(50%) of weft, Taskflow and Task Bench's OpenMP driver, side by side.

Sweeps the task granularity (the -iter of Task Bench's compute_bound kernel, powers of two from
2^max-iter-log2 down to 1, then 0) for each dependence pattern, width = cores, and runs at each
point: taskbench_weft and taskbench_taskflow (each gives its first run, build + run, and a
replay of the same graph), and taskbench_openmp (Task Bench's own driver: it creates its tasks
inside its timed region, so its one timing is a first run). Every task of every run checks its
inputs (Task Bench's core, asserts on): a wrong order aborts the run, and the script reports it.

METG(50%) as the paper defines it and its script computes it (task-bench/scripts/chart_metg.py):
  efficiency  = FLOP/s / the best FLOP/s that system reached in the sweep (at the largest tasks);
  granularity = wall time x cores / tasks;
  METG        = the smallest granularity at which efficiency >= 50%, interpolated linearly
                toward the next (smaller) task size when that one has a smaller granularity.
Each point is the median of --reps runs (one process each), repetitions outermost so that a
slow minute of a shared machine does not own one pattern's medians. Also per pattern: the time
per timestep with empty tasks (-iter 0), and the first-run / replay ratio with coarse tasks (the
smallest -iter whose replay granularity is >= 0.3 ms). Every run gets OPENBLAS_NUM_THREADS=1
(--keep-env: not; see --help).

Output: the table on stdout, and in --out: taskbench_metg.md (the table, for docs/benchmarks.md),
taskbench_points.csv (each point: its median or best run, efficiency, granularity) and taskbench_runs.csv (every
run). --from-runs makes the table from runs files instead of running anything: several calls
(one per group of patterns, to fit a time limit) merge into one table.
Python 3 standard library only.

  benchmarks/taskbench/metg.py                       # width = workers = this machine's cores
  benchmarks/taskbench/metg.py --cores 16 --patterns stencil_1d,nearest --out a
  benchmarks/taskbench/metg.py --from-runs a/taskbench_runs.csv b/taskbench_runs.csv --out all
"""
import argparse
import collections
import csv
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

PATTERNS = {  # name -> extra Task Bench flags
    "stencil_1d": [],
    "nearest": ["-radix", "5"],
    "fft": [],
    "tree": [],
    "all_to_all": [],
    "dom": [],
    "no_comm": [],
    "trivial": [],
    "stencil_1d_periodic": [],
    "random_nearest": ["-radix", "5"],
}
SYSTEMS = ["weft", "taskflow", "openmp"]
COLUMNS = [  # (key, header)
    ("weft/first", "weft first"),
    ("weft/replay", "weft replay"),
    ("taskflow/first", "Taskflow first"),
    ("taskflow/replay", "Taskflow replay"),
    ("openmp/first", "OpenMP"),
]
# Task Bench's OpenMP driver has one task function per arity, up to itself + 9 inputs
# (openmp/main.cc, MAX_NUM_ARGS 10); a task with more inputs fails its assert.
OPENMP_MAX_INPUTS = 9
COARSE_S = 0.3e-3
RUN_FIELDS = ["pattern", "system", "timing", "iterations", "rep", "elapsed_s", "tasks", "flops",
              "width", "steps", "cores", "load1", "status"]


def load1():
    """The 1-minute load average when a run ends, kept with the run: on a shared machine, a
    run that met other processes' load shows it."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return ""


def max_inputs(pattern, width, radix):
    """The most inputs a task of the pattern reads (Task Bench's dependencies, core.cc)."""
    return {
        "trivial": 0, "no_comm": 1, "stencil_1d": min(3, width),
        "stencil_1d_periodic": min(3, width), "dom": 2, "tree": 1, "fft": 3,
        "all_to_all": width, "nearest": min(radix, width), "random_nearest": min(radix, width),
    }.get(pattern, width)


def find_bin(bindir, name):
    p = os.path.join(bindir, name)
    return p if os.access(p, os.X_OK) else shutil.which(name)


def parse_reports(text):
    """Task Bench reports in a driver's output: {'first': {...}, 'replay': {...}}. A report
    with no 'Timing:' line before it (Task Bench's OpenMP driver) is the first run."""
    out, current = {}, "first"
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Timing: "):
            current = line.split()[1]
        elif line.startswith("Total Tasks "):
            out.setdefault(current, {})["tasks"] = int(line.split()[2])
        elif line.startswith("Total FLOPs "):
            out.setdefault(current, {})["flops"] = int(line.split()[2])
        elif line.startswith("Elapsed Time "):
            out.setdefault(current, {})["elapsed"] = float(line.split()[2])
    return {k: v for k, v in out.items() if len(v) == 3}


def metg(points, threshold):
    """points: [(iterations, efficiency, granularity)], any order. As chart_metg.py: sort by
    iterations, largest first; among the points at or above the threshold take the one of
    smallest granularity; if the next point has a smaller granularity, interpolate linearly
    between the two at the threshold. Returns (metg, note)."""
    pts = sorted(points, key=lambda p: -p[0])
    above = [i for i, p in enumerate(pts) if p[1] >= threshold]
    if not above:
        return None, "no point reaches the threshold"
    i = min(above, key=lambda k: pts[k][2])
    g = pts[i][2]
    if i + 1 < len(pts) and pts[i + 1][2] < g:
        (e0, g0), (e1, g1) = (pts[i][1], pts[i][2]), (pts[i + 1][1], pts[i + 1][2])
        # numpy.interp(threshold, [e1, e0], [g1, g0]): clamped at the ends
        if threshold <= e1:
            g = g1
        elif threshold >= e0 or e0 == e1:
            g = g0
        else:
            g = g1 + (g0 - g1) * (threshold - e1) / (e0 - e1)
    note = "" if any(p[1] < threshold for p in pts) else "every point is above the threshold"
    return g, note


def fmt(v):
    if v >= 100:
        return "%.0f" % v
    return "%.3g" % v


def run_sweep(a, runs):
    """Runs every point; writes each run to the csv writer `runs`."""
    here = os.path.dirname(os.path.abspath(__file__))
    bindir = a.bin or os.path.normpath(os.path.join(here, "..", "..", "build", "benchmarks", "taskbench"))
    width = a.width or a.cores
    patterns = [p for p in a.patterns.split(",") if p]
    systems = [s for s in a.systems.split(",") if s]
    for p in patterns:
        if p not in PATTERNS:
            sys.exit("metg.py: unknown pattern %s (%s)" % (p, ", ".join(PATTERNS)))
    exe = {}
    for s in systems:
        if s not in SYSTEMS:
            sys.exit("metg.py: unknown system %s (%s)" % (s, ", ".join(SYSTEMS)))
        exe[s] = find_bin(bindir, "taskbench_" + s)
        if exe[s] is None:
            sys.exit("metg.py: taskbench_%s not found in %s or on PATH (build the taskbench targets "
                     "or pass --bin)" % (s, bindir))
    iters = [2 ** k for k in range(a.max_iter_log2, -1, -1)] + [0]
    env = dict(os.environ)
    if not a.keep_env:
        env["OPENBLAS_NUM_THREADS"] = "1"
    t_start, failed = time.time(), 0
    for rep in range(a.reps):
        for pat in patterns:
            extra = PATTERNS[pat]
            radix = int(extra[extra.index("-radix") + 1]) if "-radix" in extra else 3
            for it in iters:
                for s in systems:
                    base = {"pattern": pat, "system": s, "iterations": it, "rep": rep,
                            "width": width, "steps": a.steps, "cores": a.cores}
                    if s == "openmp" and max_inputs(pat, width, radix) > OPENMP_MAX_INPUTS:
                        runs.writerow(dict(base, timing="first",
                                           status="n/a (> %d inputs)" % OPENMP_MAX_INPUTS))
                        continue
                    cmd = [exe[s], "-steps", str(a.steps), "-width", str(width), "-type", pat] + extra + \
                          ["-kernel", "compute_bound", "-iter", str(it), "-worker", str(a.cores)]
                    if s != "openmp":
                        cmd += ["--timing", "both"]
                    try:
                        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env)
                        ok, text = r.returncode == 0, r.stdout
                        why = (r.stderr or r.stdout).strip().splitlines()[-1:] if not ok else []
                    except subprocess.TimeoutExpired:
                        ok, text, why = False, "", ["timed out after %g s" % a.timeout]
                    reports = parse_reports(text) if ok else {}
                    base["load1"] = load1()
                    if not reports:
                        failed += 1
                        runs.writerow(dict(base, timing="first",
                                           status="FAILED: " + (" ".join(why) or "no report")))
                        continue
                    for timing, rr in reports.items():
                        runs.writerow(dict(base, timing=timing, elapsed_s="%.9g" % rr["elapsed"],
                                           tasks=rr["tasks"], flops=rr["flops"], status="ok"))
            print("metg.py: rep %d/%d, %s done (%.0f s)" % (rep + 1, a.reps, pat, time.time() - t_start),
                  file=sys.stderr)
    return failed


def analyse(rows, threshold, stat, points_out):
    """The table from runs rows: [(pattern, figure, [cell per column])], and failures."""
    samples = collections.defaultdict(list)   # (pattern, column, iter) -> [elapsed]
    meta = {}                                 # (pattern, iter) -> (tasks, flops)
    status = {}                               # (pattern, column) -> a note instead of figures
    shape = {}                                # pattern -> (width, steps, cores)
    patterns, failures = [], []
    for r in rows:
        pat, col, it = r["pattern"], r["system"] + "/" + r["timing"], int(r["iterations"])
        if pat not in patterns:
            patterns.append(pat)
        shape[pat] = (int(r["width"]), int(r["steps"]), int(r["cores"]))
        if r["status"] == "ok":
            samples[(pat, col, it)].append(float(r["elapsed_s"]))
            meta[(pat, it)] = (int(r["tasks"]), int(r["flops"]))
        elif r["status"].startswith("FAILED"):
            failures.append("%s %s -iter %d: %s" % (r["system"], pat, it, r["status"]))
            status[(pat, r["system"] + "/first")] = status[(pat, r["system"] + "/replay")] = "FAILED"
        else:
            status[(pat, col)] = r["status"]
    table = []
    w = csv.writer(points_out)
    w.writerow(["pattern", "column", "iterations", "reps", "elapsed_s", "tasks",
                "flops_per_s", "efficiency", "granularity_us"])
    for pat in patterns:
        width, steps, cores = shape[pat]
        iters = sorted({it for (p, _, it) in samples if p == pat}, reverse=True)
        pick = min if stat == "min" else statistics.median
        med = {(col, it): pick(samples[(pat, col, it)])
               for col, _ in COLUMNS for it in iters if (pat, col, it) in samples}
        metg_row, step_row, ratio_row = [], [], []
        for col, _ in COLUMNS:
            mine = [it for it in iters if (col, it) in med]
            if (pat, col) in status or not mine:
                note = status.get((pat, col), "n/a")
                metg_row.append(note)
                step_row.append(note)
                continue
            best = max(meta[(pat, it)][1] / med[(col, it)] for it in mine)
            pts = []
            for it in mine:
                tasks, flops = meta[(pat, it)]
                e = med[(col, it)]
                eff, gran = flops / e / best, e * cores / tasks * 1e6
                pts.append((it, eff, gran))
                w.writerow([pat, col, it, len(samples[(pat, col, it)]), "%.9g" % e, tasks,
                            "%.6g" % (flops / e), "%.4f" % eff, "%.4f" % gran])
            m, note = metg(pts, threshold)
            metg_row.append(("n/a (%s)" % note) if m is None else fmt(m) + (" (%s)" % note if note else ""))
            step_row.append(fmt(med[(col, 0)] / steps * 1e6) if (col, 0) in med else "n/a")
        for sysname in ("weft", "taskflow"):
            first, replay = sysname + "/first", sysname + "/replay"
            # the smallest task size whose replay granularity is still >= 0.3 ms
            coarse = [it for it in iters if (replay, it) in med and (first, it) in med and
                      med[(replay, it)] * cores / meta[(pat, it)][0] >= COARSE_S]
            if coarse:
                it = coarse[-1]
                gran = med[(replay, it)] * cores / meta[(pat, it)][0] * 1e3
                ratio_row += ["%.2f (-iter %d, %.2f ms)" % (med[(first, it)] / med[(replay, it)], it, gran), "—"]
            else:
                ratio_row += ["n/a (no task >= 0.3 ms)", "—"]
        ratio_row.append("n/a (no replay)")
        table.append((pat, "METG(50%), µs", metg_row))
        table.append((pat, "empty tasks (-iter 0), µs per step", step_row))
        table.append((pat, "coarse tasks: first / replay", ratio_row))
    return table, failures, shape


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=None, help="directory of taskbench_weft/_taskflow/_openmp "
                    "(default: build/benchmarks/taskbench of this script's checkout, else PATH)")
    ap.add_argument("--cores", type=int, default=os.cpu_count(), help="workers of every runtime "
                    "and the cores in the granularity (default: this machine's)")
    ap.add_argument("--width", type=int, default=None, help="graph width (default: --cores)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-iter-log2", type=int, default=19,
                    help="largest -iter is 2^this (default 19: about 1.2 ms a task at 2.2 ns an "
                    "iteration)")
    ap.add_argument("--patterns", default="stencil_1d,nearest,fft,tree,all_to_all")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--stat", choices=["median", "min"], default="median",
                    help="each point's figure over its runs (default median; min: the best run, "
                    "for a machine whose other load comes and goes)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    ap.add_argument("--keep-env", action="store_true",
                    help="do not set OPENBLAS_NUM_THREADS=1 for the runs (weft links OpenBLAS, whose "
                    "pthreads build starts a thread per core at load that spins ~0.1 s and takes "
                    "cores from the workers of a short run; Task Bench's kernels use no BLAS)")
    ap.add_argument("--machine", default=None, help="label for the results file")
    ap.add_argument("--from-runs", nargs="+", default=None, metavar="CSV",
                    help="make the table from these taskbench_runs.csv files; run nothing")
    ap.add_argument("--out", default=os.environ.get("OUT") or "taskbench-results")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    runs_path = os.path.join(a.out, "taskbench_runs.csv")
    rows = []
    if a.from_runs:
        for path in a.from_runs:
            with open(path, newline="") as f:
                rows += [dict({"load1": ""}, **r) for r in csv.DictReader(f)]
        with open(runs_path, "w", newline="") as f:
            out = csv.DictWriter(f, RUN_FIELDS)
            out.writeheader()
            out.writerows(rows)
    else:
        with open(runs_path, "w", newline="") as f:
            out = csv.DictWriter(f, RUN_FIELDS)
            out.writeheader()
            run_sweep(a, out)
        with open(runs_path, newline="") as f:
            rows = list(csv.DictReader(f))
    if not rows:
        sys.exit("metg.py: no runs")

    with open(os.path.join(a.out, "taskbench_points.csv"), "w", newline="") as f:
        table, failures, shape = analyse(rows, a.threshold, a.stat, f)

    header = ["pattern", "figure"] + [h for _, h in COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "| --- | --- |" + " ---: |" * len(COLUMNS)]
    for pat, figure, cells in table:
        lines.append("| " + " | ".join([pat, figure] + cells) + " |")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shapes = sorted(set(shape.values()))
    reps = max(int(r["rep"]) for r in rows) + 1
    machine = a.machine or "%s, %d CPUs" % (platform.node(), os.cpu_count())
    iters = sorted({int(r["iterations"]) for r in rows}, reverse=True)
    params = "; ".join("width %d, %d steps, %d workers" % s for s in shapes) + \
        ", compute_bound -iter %d..1 and 0 (powers of two), %s of %d runs, threshold %g" % (
            iters[0], "medians" if a.stat == "median" else "best", reps, a.threshold)
    cmdline = "benchmarks/taskbench/metg.py " + " ".join(sys.argv[1:])
    md = ["**Machine**: %s. **Date**: %s. **Command**: `%s`. %s." % (
        machine, now, cmdline.strip(), params[0].upper() + params[1:]), "", *lines, ""]
    if failures:
        md += ["Failed runs:", ""] + ["- " + x for x in failures] + [""]
    with open(os.path.join(a.out, "taskbench_metg.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))
    print("metg.py: results in %s (taskbench_metg.md, taskbench_points.csv, taskbench_runs.csv)" % a.out,
          file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
