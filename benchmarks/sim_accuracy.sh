#!/usr/bin/env bash
# sim_accuracy.sh — the simulator's accuracy on a GPU machine (issue 6): every workload of the
# CUDA backend's benchmarks measured on the GPUs and simulated, side by side, twice:
#   1. against the shipped profile of this kind of machine (h100, h200x2, h200x4);
#   2. against a profile measured here and now by weft_calibrate, written to
#      $OUT/sim_accuracy/<name>.json — copy it into profiles/ to ship measured figures.
# Builds nothing: bench_sim_accuracy is taken from PATH (e.g. .devrun/run.sh puts .devrun/bin
# there) or from WEFT_BENCH_DIR. Prints the two Markdown tables for docs/benchmarks.md; exits 1
# if a figure of the calibrated table is off by more than 10%.
#
#   sim_accuracy.sh [--quick] [--only overlap,multi_gpu,...]
set -uo pipefail
quick=""
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=--quick ;;
    --only) only=(--only "$2"); shift ;;
    *) echo "usage: sim_accuracy.sh [--quick] [--only LIST]" >&2; exit 2 ;;
  esac
  shift
done
logs=${OUT:-/tmp}/sim_accuracy
mkdir -p "$logs"
export NCCL_NVLS_ENABLE=0
exe=""
if [ -n "${WEFT_BENCH_DIR:-}" ] && [ -x "$WEFT_BENCH_DIR/bench_sim_accuracy" ]; then
  exe=$WEFT_BENCH_DIR/bench_sim_accuracy
else
  exe=$(command -v bench_sim_accuracy) || { echo "sim_accuracy.sh: bench_sim_accuracy not found (PATH or WEFT_BENCH_DIR)" >&2; exit 2; }
fi
ngpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
[ -n "${CUDA_VISIBLE_DEVICES:-}" ] && ngpus=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
case "$ngpus" in
  1) name=h100 ;;
  0) name=none ;;
  *) name=h200x$ngpus ;;
esac
echo "sim_accuracy.sh: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $ngpus GPU(s)"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/  gpu /'

echo "== 1. the shipped profile"
"$exe" $quick "${only[@]}" 2>&1 | tee "$logs/shipped.txt"
echo "== 2. a profile measured now (weft_calibrate), then the same table against it"
"$exe" $quick "${only[@]}" --calibrate "$logs/$name.json" 2>&1 | tee "$logs/calibrated.txt"
status=${PIPESTATUS[0]}
echo "sim_accuracy.sh: measured profile in $logs/$name.json; logs in $logs/"
exit "$status"
