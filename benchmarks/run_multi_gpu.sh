#!/usr/bin/env bash
# run_multi_gpu.sh PART... — the runs of the multi-GPU issue on a machine with several GPUs
# (nvidia-h200-x2/-x4, nvidia-h100-x2/-x4), from a staged .devrun (`cd .devrun && ./run.sh
# ./run_multi_gpu.sh gpu`). Builds nothing. Logs go to $OUT/multi_gpu/ (or /tmp/multi_gpu/).
#
#   env        the GPUs, how they are linked, Open MPI and whether it is CUDA-aware
#   gpu        multi_gpu beside PyTorch on 2 GPUs and on all (run_gpu.sh --only multi_gpu); the
#              GPU test programs (the CPU+GPU oracle over every GPU)
#   sim        the simulator against measurements on 2 GPUs and on all, with a profile measured
#              here (sim_accuracy.sh; the profiles land in the logs)
#   sanitizer  compute-sanitizer (memcheck, then synccheck) over the CUDA test programs
#   calibrate  weft calibrate on 2 GPUs and on all (CALIBRATE_GPUS="4" for a list): the profiles h200x2/h200xN, or h100xN (GEMM, copies,
#              launches and the potrf/trsm/syrk curves) land in the logs, to ship in profiles/
#   cholesky   the tiled Cholesky on auto over 1, 2 and all GPUs priced by the profiles `calibrate`
#              just measured (the shipped ones where it did not run), each panel both ways, with
#              each tile size's last run's statistics and Chrome trace in the logs (traces/)
#   cyclic     the tiled Cholesky with its tiles distributed 2-D block-cyclically over 2 GPUs and
#              over all (weft_tensor_distribute, owner computes), each panel both ways (trsm, and
#              products with the inverse diagonal factor), against one GPU (weft and cuSOLVER)
#              and cusolverMgPotrf: n = 32768 with traces (traces_cyclic/), n = 65536 over all
#   ranks      the same Cholesky with one MPI rank a GPU (mpirun -np 2 and -np all, each rank its
#              share of the host's GPUs: one), the tiles over the ranks' GPUs, both panels; the
#              single-process rate is the `cyclic` part's
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
logs=${OUT:-/tmp}/multi_gpu
mkdir -p "$logs"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
model=h200
nvidia-smi -L 2>/dev/null | grep -q H100 && model=h100
first2=0,1
status=0
for part in "$@"; do
  case "$part" in
    env)
      echo "== env: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $ngpus GPUs"
      nvidia-smi -L
      nvidia-smi topo -m 2>&1 | head -12
      command -v mpirun && mpirun --version 2>&1 | head -1
      ompi_info --parsable --all 2>/dev/null | grep -E 'mpi_built_with_cuda_support:value|mca:btl:smcuda' | head -3
      ;;
    gpu)
      echo "== multi_gpu on 2 GPUs"
      CUDA_VISIBLE_DEVICES=$first2 WEFT_RUN_GPU_LOGS=$logs/run_gpu_2 "$here/run_gpu.sh" --only multi_gpu | tail -4
      echo "== multi_gpu on $ngpus GPUs"
      WEFT_RUN_GPU_LOGS=$logs/run_gpu_all "$here/run_gpu.sh" --only multi_gpu | tail -4
      echo "== the GPU test programs on $ngpus GPUs"
      (cd "$here" && OUT=$logs ./run.sh ctest-gpu) 2>&1 | tail -12 || status=1
      ;;
    sim)
      for g in 2 "$ngpus"; do
        echo "== sim_accuracy.sh on $g GPUs"
        visible=$(seq -s, 0 $((g - 1)))
        CUDA_VISIBLE_DEVICES=$visible OUT=$logs/sim_$g "$here/sim_accuracy.sh" --only overlap,multi_gpu 2>&1 | tail -30
      done
      ;;
    sanitizer)
      for tool in memcheck synccheck; do
        for t in "$here"/bin/test_cuda_*; do
          echo "== compute-sanitizer --tool $tool $(basename "$t")"
          WEFT_TEST_SANITIZER=1 timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 \
            "$t" > "$logs/sanitizer_${tool}_$(basename "$t").log" 2>&1
          rc=$?
          tail -2 "$logs/sanitizer_${tool}_$(basename "$t").log"
          [ "$rc" = 0 ] || { echo "  exit $rc"; status=1; }
        done
      done
      ;;
    calibrate)
      for g in $(printf '%s\n' ${CALIBRATE_GPUS:-2 $ngpus} | sort -un); do
        echo "== weft calibrate on $g GPUs"
        CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((g - 1))) timeout 300 "$here/bin/weft" calibrate --quiet --name "${model}x$g" \
          -o "$logs/${model}x$g.json" || status=1
        grep -E '"(potrf|trsm|syrk|trtri)_f64_flops"' -A1 "$logs/${model}x$g.json" 2>/dev/null | head -16
      done
      ;;
    cholesky)
      mkdir -p "$logs/traces"
      for run in $(printf '%s\n' 32768:1 32768:2 "32768:$ngpus" "65536:$ngpus" | awk '!seen[$0]++'); do
        n=${run%:*} g=${run#*:}
        opts=(--tile 2048,4096 --panel both)
        [ "$n" -gt 32768 ] && opts=(--tile 4096 --reps 2 --panel inverse)
        [ "$g" -gt 1 ] && [ -f "$logs/${model}x$g.json" ] && opts+=(--profile "$logs/${model}x$g.json")
        echo "== bench_cholesky --device auto --gpus $g --n $n ${opts[*]}"
        CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((g - 1))) "$here/bin/bench_cholesky" --device auto --gpus "$g" --n "$n" \
          --dtype f64 --trace "$logs/traces" "${opts[@]}" 2>&1 | grep -E 'tiled|tiles of|RESULT' || status=1
      done
      ;;
    cyclic)
      mkdir -p "$logs/traces_cyclic"
      for run in $(printf '%s\n' 32768:1:2048,4096 32768:2:2048,4096 "32768:$ngpus:1024,2048,4096" | awk -F: '!seen[$1":"$2]++'); do
        IFS=: read -r n g tiles <<< "$run"
        echo "== bench_cholesky --device cuda --gpus $g --n $n --tile $tiles --panel both"
        CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((g - 1))) timeout 300 "$here/bin/bench_cholesky" --device cuda --gpus "$g" --n "$n" \
          --dtype f64 --tile "$tiles" --panel both --trace "$logs/traces_cyclic" 2>&1 | grep -E 'tiled|tiles of|cusolverMg|cuSOLVER' || status=1
      done
      echo "== bench_cholesky --device cuda --gpus $ngpus --n 65536 --tile 4096 --panel inverse --reps 2"
      timeout 300 "$here/bin/bench_cholesky" --device cuda --gpus "$ngpus" --n 65536 --dtype f64 --tile 4096 --panel inverse \
        --reps 2 2>&1 | grep -E 'tiled|tiles of|cusolverMg' || status=1
      ;;
    ranks)
      echo "== mpirun -np 2 bench_mpi --part gpu"
      timeout 120 mpirun -np 2 --allow-run-as-root --oversubscribe --bind-to none -x LD_LIBRARY_PATH \
        "$here/bin/bench_mpi" --part gpu --reps 9 2>&1 | grep -E 'gpu copy|RESULT' || status=1
      for g in $(printf '%s\n' 2 "$ngpus" | sort -un); do
        echo "== mpirun -np $g bench_cholesky --device cuda --gpus 1 --n 32768 --tile 2048 --panel both"
        timeout 300 mpirun -np "$g" --allow-run-as-root --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
          "$here/bin/bench_cholesky" --device cuda --gpus 1 --n 32768 --dtype f64 --tile 2048 --panel both 2>&1 |
          grep -E 'tiled|tiles of' || status=1
      done
      ;;
    *) echo "run_multi_gpu.sh: unknown part '$part' (env, gpu, sim, sanitizer, calibrate, cholesky, cyclic, ranks)" >&2; exit 2 ;;
  esac
done
exit "$status"
