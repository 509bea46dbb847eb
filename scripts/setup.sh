#!/usr/bin/env bash
# setup.sh [--tests] — install what weft needs on a fresh Debian/Ubuntu machine: what it takes
# to build and run (always; jansson among it, libweft's JSON reader and writer, with which the
# tests also check weft's JSON; hwloc, the CPU topology and the workers' binding; OpenBLAS, whose pthreads build weft links where no serial,
# thread-safe BLAS is installed — none is packaged for Debian 12: docs/architecture.md,
# "Threads and the cores" — and which bench_cpu_gemm's baseline runs), and with --tests what the
# test suite uses besides (clang and its sanitizer runtimes for the fuzzer; libxml2, libpng and
# Chromium, with which test_report checks the SVG and a rendering of the timeline with a real
# parser and a real browser; OpenBLAS's serial build, which test_cpu_blas preloads as an
# application's own BLAS that is not thread-safe; LAPACKE, the second baseline of
# bench_cholesky, which skips it where it is missing; Open MPI, whose transport weft builds where
# it is found and whose tests run under mpirun).
# Idempotent: packages already present are skipped. The CUDA toolkit is optional and not
# installed here; where /usr/local/cuda (or nvcc on PATH) exists, the build uses it.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libuv1-dev libhttp-parser-dev libcurl4-openssl-dev libcmocka-dev libopenblas-dev libjansson-dev
  libhwloc-dev python3)
if [ "${1:-}" = "--tests" ]; then
  pkgs+=(clang libclang-rt-dev libxml2-dev libpng-dev chromium libopenblas0-serial liblapacke openmpi-bin
    libopenmpi-dev)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
