#!/bin/sh
# A rank that dies mid-run (tests/mpi_rank_dies.c) ends the whole job within a bounded time
# (here 60 s; it takes a second or two), with a non-zero status, and the launcher names the rank
# that died: no rank is left waiting for the dead one's messages.
# Usage: mpi_dies.sh MPIEXEC PROGRAM
set -u
mpiexec=$1 prog=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
timeout -k 10 60 "$mpiexec" -np 2 --oversubscribe --allow-run-as-root --mca btl self,vader "$prog" >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
cat "$out"
if [ "$rc" -eq 124 ] || [ "$took" -ge 60 ]; then echo "mpi_dies: the job did not end within 60 s of rank 1's death"; exit 1; fi
if [ "$rc" -eq 0 ]; then echo "mpi_dies: the job ended with status 0 though rank 1 died"; exit 1; fi
grep -q "kills itself" "$out" || { echo "mpi_dies: rank 1 never reached its node"; exit 1; }
grep -q "rank 1" "$out" || { echo "mpi_dies: nothing names rank 1"; exit 1; }
grep -qi "signal 9\|killed" "$out" || { echo "mpi_dies: the launcher did not say rank 1 was killed"; exit 1; }
echo "mpi_dies: the job ended in ${took} s with status $rc"
