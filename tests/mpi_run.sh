#!/bin/sh
# `mpirun -np N weft run` as a user runs it: a distributed example must print its output once
# (rank 0), and the same value, bit for bit, as a single process gives running the same program
# with every tensor on its CPU (rank(R, cpu) read as cpu, distribute statements left out).
# Usage: mpi_run.sh MPIEXEC NRANKS WEFT EXAMPLE [weft run options...]
set -eu
mpiexec=$1 n=$2 weft=$3 example=$4
shift 4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$mpiexec" -np "$n" --oversubscribe --allow-run-as-root --mca btl self,vader "$weft" run "$@" "$example" >"$tmp/ranks.out"
sed -e 's/rank([0-9]*, *cpu)/cpu/' -e '/^distribute(/d' "$example" >"$tmp/one.weft"
"$weft" run "$@" "$tmp/one.weft" >"$tmp/one.out"
lines=$(grep -c ' = ' "$tmp/ranks.out" || true)
if [ "$lines" != "$(grep -c ' = ' "$tmp/one.out")" ]; then
  echo "expected each output once from $n ranks; got:"; cat "$tmp/ranks.out"; exit 1
fi
if ! cmp -s "$tmp/ranks.out" "$tmp/one.out"; then
  echo "$n ranks and one process disagree:"; diff "$tmp/ranks.out" "$tmp/one.out"; exit 1
fi
cat "$tmp/ranks.out"
