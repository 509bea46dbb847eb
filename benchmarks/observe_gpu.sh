#!/usr/bin/env bash
# observe_gpu.sh — the GPU measurements of issues 5 (timing, timelines) and 6 (the simulator's
# accuracy, calibrated profiles) in one call on a lent GPU machine, staged by
# shared/device/stage.sh and run through .devrun/run.sh (which puts the programs on PATH):
#
#   cd .devrun && ./run.sh ./observe_gpu.sh one     # one GPU (the H100)
#   cd .devrun && ./run.sh ./observe_gpu.sh multi   # several GPUs (2 H200)
#
# one:   test_cuda_timing; the overlap example's timeline (a first run, and a second one with
#        cuBLAS loaded); benchmarks/run_gpu.sh with node timing on (the default) and off
#        (WEFT_TIMING=0) against one PyTorch reference; the benchmarks the timing could slow
#        (dispatch, small_ops, sync_logging) three times each way, interleaved, since these VMs
#        drift by several percent between runs; with OBSERVE_VARIANTS=1 also the timing variants
#        (WEFT_CUDA_TIMING=0: no device timing; WEFT_CUDA_TIMING_GROUP_US=0: a tick per node in
#        replays too; WEFT_CUDA_TIMING_CHECK=1: a start event as well, compared with the derived
#        start); every test binary; bench_sim_accuracy with a profile calibrated here.
# multi: the CUDA tests, the two-GPU example's timeline (a first run, and a second one),
#        run_gpu.sh --only multi_gpu, dispatch and sync_logging with timing off and on
#        (interleaved), and the multi_gpu accuracy row with a profile calibrated here.
# Knobs (for a shorter call): OBSERVE_OFF=0 skips the timing-off pass of run_gpu.sh,
# OBSERVE_ROUNDS=N sets the interleaved rounds (3), OBSERVE_SKIP=REGEX skips test binaries.
# Everything goes to $OUT/observe.tgz (refreshed after each step, so a call stopped at its time
# limit still brings back what was done) and the log to standard output.
set -uo pipefail
mode=${1:-one}
budget=${OBSERVE_BUDGET_S:-560} # end the last step before the call's limit
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
o=/tmp/observe
rm -rf "$o"
mkdir -p "$o"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec > >(tee "$o/observe.log") 2>&1
save() { [ -n "${OUT:-}" ] && tar czf "$OUT/observe.tgz" -C /tmp observe; }
step() {
  save
  echo
  echo "=== $(date -u +%H:%M:%S) (+${SECONDS}s) $*"
}
left() { local l=$((budget - SECONDS)); [ "$l" -gt 10 ] && echo "$l" || echo 10; }
tests() {
  local pass=0 fail=0
  mkdir -p "$o/tests"
  for t in "$@"; do
    [ -x "bin/$t" ] || continue
    local t0=$SECONDS
    if timeout 240 "bin/$t" > "$o/tests/$t.log" 2>&1; then
      pass=$((pass + 1))
      echo "ok     $t ($((SECONDS - t0)) s)"
    else
      fail=$((fail + 1))
      echo "FAILED $t ($((SECONDS - t0)) s)"
      tail -25 "$o/tests/$t.log"
    fi
  done
  echo "tests: $pass passed, $fail failed"
}

echo "observe_gpu.sh $mode: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname)"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
lscpu | grep -E '^Model name|^CPU\(s\)'

case "$mode" in
  one)
    step "test_cuda_timing"
    tests test_cuda_timing
    step "the overlap example's timeline (N = 4000): a first run, then the second of two"
    weft run -D N=4000 --stats --timeline "$o/overlap-h100-first.svg" examples/copy_to_host.weft
    weft run -D N=4000 --repeat 2 --stats --timeline "$o/overlap-h100.svg" \
      --trace "$o/overlap-h100.trace.json" examples/copy_to_host.weft
    weft run -D N=4000 --repeat 2 --json examples/copy_to_host.weft > "$o/overlap-h100.json"
    step "run_gpu.sh, node timing on"
    WEFT_RUN_GPU_LOGS=$o/run_gpu_on timeout 300 ./run_gpu.sh
    if [ "${OBSERVE_OFF:-1}" = 1 ]; then
      step "run_gpu.sh, node timing off (WEFT_TIMING=0), the same reference"
      WEFT_TIMING=0 WEFT_REF_RESULTS=$o/run_gpu_on/torch_reference.txt WEFT_RUN_GPU_LOGS=$o/run_gpu_off \
        timeout 200 ./run_gpu.sh
    fi
    step "timing off / on, interleaved (RESULT lines)"
    for r in $(seq "${OBSERVE_ROUNDS:-3}"); do
      for t in 0 1; do
        for b in dispatch small_ops sync_logging; do
          echo "round $r timing $t: $(WEFT_TIMING=$t timeout 60 "bench_gpu_$b" --reps 15 | grep '^RESULT')"
        done
      done
    done
    if [ "${OBSERVE_VARIANTS:-0}" = 1 ]; then
      for v in WEFT_CUDA_TIMING=0 WEFT_CUDA_TIMING_GROUP_US=0 WEFT_CUDA_TIMING_CHECK=1; do
        step "tiny-node benchmarks with $v"
        for b in dispatch small_ops sync_logging; do env "$v" timeout 60 "bench_gpu_$b" 2>&1 | grep -v '^weft: timing check' ; done
      done
      step "the precision of derived starts (WEFT_CUDA_TIMING_CHECK=1, eager runs)"
      WEFT_CUDA_TIMING_CHECK=1 weft run -D N=4000 --quiet examples/copy_to_host.weft
      WEFT_CUDA_TIMING_CHECK=1 weft run --quiet examples/small_products.weft
      WEFT_CUDA_TIMING_CHECK=1 timeout 60 bench_gpu_small_ops --reps 3 2>&1 | grep -m 3 'timing check'
      WEFT_CUDA_TIMING_CHECK=1 timeout 60 bench_gpu_dispatch --reps 1 2>&1 | grep -m 3 'timing check'
    fi
    step "the precision of derived starts in eager groups (WEFT_CUDA_TIMING_CHECK=1)"
    WEFT_CUDA_TIMING_CHECK=1 timeout 60 bench_gpu_small_ops --reps 1 2>&1 | grep -m 2 'timing check'
    WEFT_CUDA_TIMING_CHECK=1 timeout 60 bench_gpu_dispatch --reps 1 2>&1 | grep -m 2 'timing check'
    step "every test binary"
    tests $(cd bin && ls test_* | grep -v '^test_cuda_timing$' | grep -Ev "${OBSERVE_SKIP:-^$}")
    step "the simulator against this machine, with a profile calibrated now"
    timeout "$(left)" bench_sim_accuracy --calibrate "$o/h100.json"
    ;;
  multi)
    step "the CUDA tests"
    tests test_cuda_timing test_cuda_backend test_cuda_memory test_cuda_replay test_cuda_oracle test_cuda_errors
    step "the two-GPU example's timeline (N = 4000): a first run, then the second of two"
    weft run -D N=4000 --stats --timeline "$o/two-gpus-h200x2-first.svg" examples/two_gpus.weft
    weft run -D N=4000 --repeat 2 --stats --timeline "$o/two-gpus-h200x2.svg" \
      --trace "$o/two-gpus-h200x2.trace.json" examples/two_gpus.weft
    step "run_gpu.sh --only multi_gpu"
    WEFT_RUN_GPU_LOGS=$o/run_gpu_multi timeout 200 ./run_gpu.sh --only multi_gpu
    step "timing off / on, interleaved, on cuda:0 (RESULT lines)"
    for r in $(seq "${OBSERVE_ROUNDS:-3}"); do
      for t in 0 1; do
        for b in dispatch sync_logging; do
          echo "round $r timing $t: $(WEFT_TIMING=$t timeout 60 "bench_gpu_$b" --reps 15 | grep '^RESULT')"
        done
      done
    done
    step "the simulator against this machine (multi_gpu), with a profile calibrated now"
    timeout "$(left)" bench_sim_accuracy --only multi_gpu --calibrate "$o/h200x2.json"
    ;;
  *)
    echo "usage: observe_gpu.sh one|multi" >&2
    exit 2
    ;;
esac
step "done"
save
