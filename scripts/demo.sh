#!/usr/bin/env bash
# demo.sh — set up a machine, build weft and run the overlap demo: 50 products y[i] = x.x,
# each copied to the host while the next one is computed, with no stream or event written by
# the user. On a GPU machine it runs on cuda:0 with 4000x4000 matrices; on a CPU-only machine
# it falls back to the CPU with smaller matrices (pass a size to override: demo.sh 800).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > build.configure.log 2>&1 || { cat build.configure.log; exit 1; }
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target example_overlap > build.log 2>&1 || { tail -50 build.log; exit 1; }
exec ./build/examples/overlap "$@"
