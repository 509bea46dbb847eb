#!/usr/bin/env bash
# run_mpi.sh [BIN_DIR] — weft across ranks on one host against raw MPI (the MPI issue): ping-pong
# and bandwidth on 2 ranks, and the 1-D stencil's parallel efficiency on 2 and 4 ranks (weft's
# default workers on a shared host: CORES / R - 1 each, CORES default this machine's cores)
# against 1 rank with the same total workers.
# bench_mpi is taken from BIN_DIR (default build/benchmarks, else PATH). Builds nothing.
# Prints a Markdown table; exits 1 if a target is missed.
set -uo pipefail
bin=${1:-build/benchmarks}
exe=$bin/bench_mpi
[ -x "$exe" ] || exe=$(command -v bench_mpi) || { echo "run_mpi.sh: bench_mpi not found in $bin or PATH" >&2; exit 2; }
cores=${CORES:-$(nproc)}
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
[ -n "${LD_LIBRARY_PATH:-}" ] && mpirun+=(-x LD_LIBRARY_PATH)
reps=${REPS:-5}
out=$(mktemp)
"${mpirun[@]}" -np 2 "$exe" --part pingpong --workers 2 --reps "$reps" | tee -a "$out"
"${mpirun[@]}" -np 2 "$exe" --part bandwidth --workers 2 --reps "$reps" | tee -a "$out"
# R ranks with weft's default workers on a shared host (its share of the cores less one for
# the rank's progress thread), against 1 rank with as many workers in all.
for r in 2 4; do
  w=$((cores / r - 1))
  [ "$w" -ge 1 ] || continue
  for np in 1 "$r"; do
    "${mpirun[@]}" -np "$np" "$exe" --part stencil --workers $((np == 1 ? r * w : w)) --width $((2 * cores)) \
      --steps 200 --task-us 100 --reps "$reps" | tee -a "$out"
  done
done
python3 - "$out" "$cores" <<'PY'
import sys
rows = [dict(x.split("=", 1) for x in l.split()[1:]) for l in open(sys.argv[1]) if l.startswith("RESULT")]
ok = True
def line(what, fig, target, good):
    global ok
    ok &= good
    print(f"| {what} | {fig} | {target} | {'met' if good else 'MISSED'} |")
print(f"\n| figure ({sys.argv[2]} cores) | weft / raw MPI or 1 rank | target | result |\n| --- | --- | --- | --- |")
for r in rows:
    if r["part"] == "pingpong":
        line("ping-pong, 8 bytes, 2 ranks", f"{r['weft_us']} / {r['mpi_us']} us a message, {float(r['ratio']):.2f} x", "<= 2 x", float(r["ratio"]) <= 2)
    if r["part"] == "bandwidth":
        line("256 MiB between 2 ranks", f"{r['weft_gbs']} / {r['mpi_gbs']} GB/s, {float(r['ratio']):.3f}", ">= 0.9", float(r["ratio"]) >= 0.9)
sten = [r for r in rows if r["part"] == "stencil"]
for one, r in zip(sten[0::2], sten[1::2]):  # 1 rank, then R ranks with as many workers in all
    eff = float(one["ms"]) / float(r["ms"])
    line(f"1-D stencil, 100 us tasks, {r['ranks']} ranks x {r['workers']} workers", f"{r['ms']} ms / {one['ms']} ms on 1 rank x {one['workers']}, efficiency {eff:.3f}", ">= 0.9", eff >= 0.9)
sys.exit(0 if ok else 1)
PY
status=$?
rm -f "$out"
exit $status
