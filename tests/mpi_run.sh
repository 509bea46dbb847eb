#!/bin/sh
# `mpirun -np N weft run` as a user runs it: the distributed example must print its output once
# (rank 0), and the same value a single process gives when every tensor is on this host's CPU.
# Usage: mpi_run.sh MPIEXEC NRANKS WEFT EXAMPLE
set -eu
mpiexec=$1 n=$2 weft=$3 example=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$mpiexec" -np "$n" --oversubscribe --allow-run-as-root --mca btl self,vader "$weft" run "$example" >"$tmp/ranks.out"
sed 's/rank([0-9]*, *cpu)/cpu/' "$example" >"$tmp/one.weft"
"$weft" run "$tmp/one.weft" >"$tmp/one.out"
lines=$(grep -c ' = ' "$tmp/ranks.out" || true)
if [ "$lines" != "$(grep -c ' = ' "$tmp/one.out")" ]; then
  echo "expected each output once from $n ranks; got:"; cat "$tmp/ranks.out"; exit 1
fi
if ! cmp -s "$tmp/ranks.out" "$tmp/one.out"; then
  echo "$n ranks and one process disagree:"; diff "$tmp/ranks.out" "$tmp/one.out"; exit 1
fi
cat "$tmp/ranks.out"
