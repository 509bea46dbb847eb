#!/usr/bin/env bash
# run_mpi.sh [BIN_DIR] — weft across ranks on one host against raw MPI (the MPI issue): ping-pong
# and bandwidth on 2 ranks, and the 1-D stencil's parallel efficiency on 2 and 4 ranks against
# 1 rank with the same total workers (CORES, default this machine's cores, split evenly).
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
for r in 1 2 4; do
  [ $((cores / r)) -ge 1 ] || continue
  "${mpirun[@]}" -np "$r" "$exe" --part stencil --workers $((cores / r)) --width $((2 * cores)) --steps 200 \
    --task-us 100 --reps "$reps" | tee -a "$out"
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
one = next((float(r["ms"]) for r in rows if r["part"] == "stencil" and r["ranks"] == "1"), None)
for r in rows:
    if r["part"] == "stencil" and r["ranks"] != "1" and one:
        eff = one / float(r["ms"])
        line(f"1-D stencil, 100 us tasks, {r['ranks']} ranks x {r['workers']} workers", f"{r['ms']} ms / {one} ms on 1 rank, efficiency {eff:.3f}", ">= 0.9", eff >= 0.9)
sys.exit(0 if ok else 1)
PY
status=$?
rm -f "$out"
exit $status
