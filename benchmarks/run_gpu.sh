#!/usr/bin/env bash
# run_gpu.sh — runs weft's GPU benchmarks and the PyTorch reference in the same call and prints
# ONE table: benchmark, weft's figure, the reference measured now, their ratio, the target, and
# whether weft meets it. Builds nothing: the bench_gpu_* programs are taken from PATH (or from
# WEFT_BENCH_DIR), torch_reference.py from beside this script or from the repository's
# benchmarks/. Raw outputs go to $OUT/run_gpu/ (or /tmp/run_gpu/; WEFT_RUN_GPU_LOGS changes it).
# WEFT_REF_RESULTS=FILE takes the reference's REF lines from FILE (an earlier call's
# torch_reference.txt) instead of running PyTorch again: for a second pass in the same call,
# e.g. with WEFT_TIMING=0 to measure what node timing costs.
#
#   run_gpu.sh [--only overlap,small_ops,...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
only=""
[ "${1:-}" = "--only" ] && only=${2:-}
logs=${WEFT_RUN_GPU_LOGS:-${OUT:-/tmp}/run_gpu}
mkdir -p "$logs"
export NCCL_NVLS_ENABLE=0
ref_py=""
for p in "$here/torch_reference.py" "$here/benchmarks/torch_reference.py" "$here/../benchmarks/torch_reference.py"; do
  [ -f "$p" ] && ref_py=$p && break
done
find_bench() {
  if [ -n "${WEFT_BENCH_DIR:-}" ] && [ -x "$WEFT_BENCH_DIR/$1" ]; then echo "$WEFT_BENCH_DIR/$1"; else command -v "$1"; fi
}
wanted() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

echo "run_gpu.sh: $(date -u "+%Y-%m-%d %H:%M UTC") on $(hostname); node timing $([ "${WEFT_TIMING:-1}" = 0 ] && echo off || echo on)"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/  gpu /'
: > "$logs/results.txt"
if [ -n "${WEFT_REF_RESULTS:-}" ] && [ -f "$WEFT_REF_RESULTS" ]; then
  echo "== PyTorch reference: the REF lines of $WEFT_REF_RESULTS"
  grep '^REF' "$WEFT_REF_RESULTS" | tee "$logs/torch_reference.txt" >> "$logs/results.txt"
elif [ -n "$ref_py" ] && command -v python3 > /dev/null; then
  echo "== PyTorch reference ($ref_py)"
  python3 "$ref_py" ${only:+--only "$only"} 2>&1 | tee "$logs/torch_reference.txt"
  grep '^REF' "$logs/torch_reference.txt" >> "$logs/results.txt"
else
  echo "run_gpu.sh: no torch_reference.py or python3: the reference column will be empty" >&2
fi
for b in overlap multi_gpu small_ops dispatch sync_logging gemm_rate memory; do
  wanted "$b" || { [ "$b" = memory ] && wanted overlap; } || continue
  exe=$(find_bench "bench_gpu_$b") || { echo "run_gpu.sh: bench_gpu_$b not found" >&2; continue; }
  echo "== bench_gpu_$b"
  "$exe" 2>&1 | tee "$logs/bench_gpu_$b.txt"
  grep -E '^(RESULT|SKIP)' "$logs/bench_gpu_$b.txt" >> "$logs/results.txt"
done

# The tiled Cholesky against cuSOLVER (f64 and f32, n = 32768, tiles of 2048 and 4096, each
# panel by trsm and by products with the inverted diagonal factor; then the upper triangle's
# factorisation, tiles of 2048, inverse panel). The table takes the best of each dtype.
if wanted cholesky; then
  exe=$(find_bench bench_cholesky) || echo "run_gpu.sh: bench_cholesky not found" >&2
  for dt in f64 f32; do
    [ -n "$exe" ] || break
    echo "== bench_cholesky --device cuda --dtype $dt --panel both"
    "$exe" --device cuda --dtype "$dt" --tile 2048,4096 --panel both 2>&1 | tee "$logs/bench_cholesky_$dt.txt"
    echo "== bench_cholesky --device cuda --dtype $dt --panel inverse --uplo upper"
    "$exe" --device cuda --dtype "$dt" --tile 2048 --panel inverse --uplo upper 2>&1 | tee -a "$logs/bench_cholesky_$dt.txt"
    grep -E '^RESULT' "$logs/bench_cholesky_$dt.txt" >> "$logs/results.txt"
  done
  # The same with the matrix on auto: weft places the nodes itself; then out of core, the GPU
  # limited to a quarter of the matrix (2 GiB of its 8).
  if [ -n "$exe" ]; then
    echo "== bench_cholesky --device auto --dtype f64 --panel both"
    "$exe" --device auto --dtype f64 --tile 2048,4096 --panel both 2>&1 | tee "$logs/bench_cholesky_auto.txt"
    grep -E '^RESULT' "$logs/bench_cholesky_auto.txt" >> "$logs/results.txt"
    echo "== bench_cholesky --device auto --dtype f64 --panel both --device-memory-limit 2048"
    "$exe" --device auto --dtype f64 --tile 2048 --panel both --device-memory-limit 2048 2>&1 | tee "$logs/bench_cholesky_ooc.txt"
    grep -E '^RESULT' "$logs/bench_cholesky_ooc.txt" >> "$logs/results.txt"
  fi
fi

# The tiled Cholesky placed by weft over several GPUs (issue 20): f64 n = 32768 on 1, 2 and 4
# GPUs (as many as the machine has; tiles of 2048 and 4096), n = 65536 on 4 (tiles of
# 4096, 2 reps), each against cuSOLVER in the same process (cusolverMgPotrf over as many GPUs;
# cusolverDnXpotrf on one).
ngpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
[ -n "${CUDA_VISIBLE_DEVICES:-}" ] && ngpus=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
if wanted cholesky_multi && [ "$ngpus" -ge 2 ]; then
  exe=$(find_bench bench_cholesky) || echo "run_gpu.sh: bench_cholesky not found" >&2
  for run in 32768:1 32768:2 32768:4 65536:4; do
    n=${run%:*} g=${run#*:}
    [ -n "$exe" ] && [ "$g" -le "$ngpus" ] || continue
    echo "== bench_cholesky --device auto --gpus $g --n $n"
    opts=(--tile 2048,4096)
    [ "$n" -gt 32768 ] && opts=(--tile 4096 --reps 2)  # 32 GiB: one tile size, fewer reps
    "$exe" --device auto --gpus "$g" --n "$n" --dtype f64 "${opts[@]}" 2>&1 | tee "$logs/bench_cholesky_multi_${n}_$g.txt"
    grep -E '^RESULT' "$logs/bench_cholesky_multi_${n}_$g.txt" | sed 's/^RESULT bench=auto_cholesky_f64[a-z_]*/RESULT bench=multi_cholesky/' >> "$logs/results.txt"
  done
fi

python3 - "$logs/results.txt" <<'PY'
import sys
res, ref, multi, chol = {}, {}, {}, []
skips = []
for line in open(sys.argv[1]):
    w = line.split()
    if not w:
        continue
    if w[0] == "SKIP":
        skips.append(line.strip())
        continue
    kv = dict(x.split("=", 1) for x in w[1:] if "=" in x)
    d = res if w[0] == "RESULT" else ref
    old = d.get(kv.get("bench"))
    if kv.get("bench") == "multi_cholesky":  # the fastest tile size of each (n, gpus)
        key = (int(kv["n"]), int(kv["gpus"]))
        if key not in multi or float(kv["weft_ms"]) < float(multi[key]["weft_ms"]):
            multi[key] = kv
        continue
    # The Cholesky's tile sizes and panels: the best one stands (all kept for the auto row);
    # any other line replaces the one before.
    if "cholesky" in kv.get("bench", ""):
        chol.append(kv)
    if old is None or "cholesky" not in kv.get("bench", "") or float(kv["ratio"]) > float(old["ratio"]):
        d[kv.get("bench")] = kv

def f(d, k):
    try:
        return float(d[k])
    except (KeyError, TypeError, ValueError):
        return None

rows = []
def row(name, w, r, wfmt, rfmt, target, ok, ratio=None):
    ws = wfmt % w if w is not None else "-"
    rs = rfmt % r if r is not None else "-"
    if ratio is None and w is not None and r:
        ratio = w / r
    rows.append((name, ws, rs, "%.3f" % ratio if ratio is not None else "-", target,
                 "-" if w is None or target == "-" else ("PASS" if ok else "FAIL")))

o, ro = res.get("overlap", {}), ref.get("overlap", {})
w = f(o, "ratio")
row("overlap: total / max(compute, copies)", w, f(ro, "ratio"), "%.4f", "%.4f (torch copy stream+pinned)",
    "<= 1.01", w is not None and w <= 1.01)
m, rm = res.get("multi_gpu", {}), ref.get("multi_gpu", {})
w, g = f(m, "speedup"), f(m, "gpus")
need = {2: 1.97, 4: 3.9}.get(int(g), g * 0.975) if g else None
row("multi_gpu: speed-up on %s GPUs" % (int(g) if g else "N"), w, f(rm, "speedup"), "%.3f x", "%.3f x",
    ">= %.2f" % need if need else ">= 1.97 (2), 3.9 (4)", w is not None and w >= need)
s, rs = res.get("small_ops", {}), ref.get("small_ops", {})
w, r = f(s, "eager_ms"), f(rs, "eager_ms")
row("small_ops: first (eager) run, ms", w, r, "%.3f", "%.3f (torch eager)", "<= torch eager",
    w is not None and r is not None and w <= r)
w, r = f(s, "replay_ms"), f(rs, "graph_ms")
row("small_ops: replay, ms", w, r, "%.3f", "%.3f (torch CUDA graph)", "<= torch graph",
    w is not None and r is not None and w <= r)
d, rd = res.get("dispatch", {}), ref.get("dispatch", {})
w = f(d, "eager_us_per_node")
row("dispatch: eager run, us/node", w, f(rd, "eager_us_per_op"), "%.3f", "%.3f (torch eager/op)", "<= 3", w is not None and w <= 3)
w = f(d, "first_us_per_node")
row("dispatch: cold first run (fresh graph), us/node", w, f(rd, "eager_us_per_op"), "%.3f", "%.3f (torch eager/op)", "<= 3",
    w is not None and w <= 3)
w = f(d, "unbatched_us_per_node")
row("dispatch: eager, batching off (info), us/node", w, f(d, "raw_launch_us"), "%.3f", "%.3f (bare launch loop)", "-", True)
w = f(d, "replay_us_per_node")
row("dispatch: replay, us/node", w, f(rd, "graph_us_per_op"), "%.3f", "%.3f (torch graph/op)", "<= 1", w is not None and w <= 1)
sl, rsl = res.get("sync_logging", {}), ref.get("sync_logging", {})
w = f(sl, "ratio")
row("sync_logging: every step / once", w, f(rsl, "ratio"), "%.3f", "%.3f (torch .item())", "<= 1.1", w is not None and w <= 1.1)
gr, rg = res.get("gemm_rate", {}), ref.get("gemm_rate", {})
w = f(gr, "fraction")
row("gemm_rate: weft / raw cuBLAS", None if w is None else 100 * w, f(gr, "raw_tflops"), "%.2f %%",
    "%.1f TFLOP/s (cuBLAS)", ">= 97 %", w is not None and w >= 0.97, ratio=w)
mm, rmm = res.get("memory", {}), ref.get("memory", {})
w = f(mm, "buffers")
row("memory: peak device buffers, overlap graph", w, f(rmm, "notes_buffers"), "%.2f", "%.2f (notes' torch code)",
    "<= 5", w is not None and w <= 5)
for dt, target in (("f64", 1.0), ("f32", 1.0)):
    c = res.get("cholesky_" + dt)
    if c is None:
        continue
    w = f(c, "weft_tflops")
    row("cholesky %s n=%s, best (tile %s, %s, %s), TFLOP/s" % (dt, c.get("n"), c.get("tile"), c.get("panel"), c.get("uplo")),
        w, f(c, "baseline_tflops"),
        "%.2f", "%.2f (cuSOLVER potrf)", ">= %.1f x" % target, f(c, "ratio") is not None and f(c, "ratio") >= target,
        ratio=f(c, "ratio"))
au = res.get("auto_cholesky_f64")
if au is not None:  # the best auto run against the hand-placed one of the same tile and panel
    fx = [c for c in chol if c["bench"] == "cholesky_f64" and c.get("tile") == au.get("tile") and c.get("panel") == au.get("panel")]
    w, r = f(au, "weft_ms"), f(fx[0], "weft_ms") if fx else None
    row("cholesky f64 on auto, ms (tile %s, %s panel)" % (au.get("tile"), au.get("panel")), w, r, "%.1f",
        "%.1f (placed by hand, cuda:0)", "<= 1.02", w is not None and r is not None and w / r <= 1.02)
oc = res.get("auto_cholesky_f64_ooc")
if oc is not None:  # out of core against in core, the same tile and panel
    ic = [c for c in chol if c["bench"] == "auto_cholesky_f64" and c.get("tile") == oc.get("tile") and c.get("panel") == oc.get("panel")]
    w, r = f(oc, "weft_ms"), f(ic[0], "weft_ms") if ic else None
    row("cholesky f64 auto, GPU limited to 1/4 of A, ms (%s panel)" % oc.get("panel"), w, r, "%.1f", "%.1f (in core)",
        ">= 0.75 x", w is not None and r is not None and r / w >= 0.75, ratio=r / w if w and r else None)
for (n, g), c in sorted(multi.items()):
    one = multi.get((n, 1))
    w = f(c, "weft_ms")
    if g == 1:
        row("cholesky f64 n=%d auto, 1 GPU, ms (tile %s)" % (n, c["tile"]), w, f(c, "baseline_ms"), "%.1f",
            "%.1f (cuSOLVER Xpotrf)", "-", True, ratio=f(c, "ratio"))
        continue
    row("cholesky f64 n=%d auto, %d GPUs, ms (tile %s)" % (n, g, c["tile"]), w, f(c, "baseline_ms"), "%.1f",
        "%%.1f (cusolverMg, %d GPUs)" % g, "-", True, ratio=f(c, "ratio"))
    if one is not None:
        need = {2: 1.8, 4: 3.3}.get(g, 0.8 * g)
        s_ = f(one, "weft_ms") / w
        row("  speed-up over weft on 1 GPU", s_, None, "%.3f x", "%s", ">= %.1f x" % need, s_ >= need, ratio=s_)

head = ("benchmark", "weft", "reference (same call)", "ratio", "target", "result")
widths = [max(len(str(x[i])) for x in rows + [head]) for i in range(6)]
fmt = " | ".join("%%-%ds" % wd for wd in widths)
print()
print(fmt % head)
print("-+-".join("-" * wd for wd in widths))
for x in rows:
    print(fmt % x)
if "gemm_rate" in ref:
    print("  (torch.mm 4000^2 fp32: %.1f TFLOP/s)" % f(rg, "torch_tflops"))
if "overlap" in ref:
    print("  (the reference notes' overlap code: %.3f x bound)" % f(ro, "notes_ratio"))
if "memory" in ref:
    print("  (torch hand-written overlap peak: %.2f buffers)" % f(rmm, "hand_buffers"))
for s_ in skips:
    print("  " + s_)
PY
