#!/usr/bin/env bash
# test.sh — set up a machine and run weft's whole test suite, as CI does.
#
#   ./scripts/test.sh            everything: the plain build (with CUDA where the toolkit is
#                                found; GPU tests skip themselves without a GPU), then the suite
#                                under AddressSanitizer+UBSan and under ThreadSanitizer, then
#                                the parser fuzzer for a bounded time
#   ./scripts/test.sh --quick    the plain build and its suite only
#
# Exits non-zero on any failure or sanitizer report.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
quick=0
[ "${1:-}" = "--quick" ] && quick=1
jobs=$(nproc 2>/dev/null || echo 2)

bash scripts/setup.sh --tests
# The browser tests (the timeline picture, the server's dashboard) skip without Chromium; in CI
# they must run.
if [ -n "${CI:-}" ] && ! command -v chromium > /dev/null && ! command -v chromium-browser > /dev/null; then
  echo "test.sh: no chromium after setup: the browser tests would be skipped" >&2
  exit 1
fi

run_suite() { # name, extra cmake args...
  local name=$1; shift
  local dir="build-$name"
  echo "== $name: configure and build ($dir)"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_WERROR=ON "$@" > "$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j "$jobs" 2>&1 | grep -E "error|warning|Error" || true
  cmake --build "$dir" -j "$jobs" > /dev/null
  echo "== $name: ctest"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 900)
}

run_suite plain
if [ $quick = 0 ]; then
  # Sanitizer builds leave CUDA out: without a GPU its code cannot run, and the CUDA runtime
  # is not instrumented. Any report fails the run (halt_on_error, exitcode).
  export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  run_suite asan -DWEFT_SANITIZE=address -DWEFT_CUDA=OFF -DWEFT_BUILD_BENCHMARKS=OFF
  WEFT_ORACLE_PROGRAMS=${WEFT_ORACLE_PROGRAMS_TSAN:-300} \
    run_suite tsan -DWEFT_SANITIZE=thread -DWEFT_CUDA=OFF -DWEFT_BUILD_BENCHMARKS=OFF
  if [ -x fuzz/run_fuzz.sh ]; then
    echo "== fuzz: the .weft parser under libFuzzer + ASan"
    fuzz/run_fuzz.sh "${WEFT_FUZZ_SECONDS:-60}"
  fi
fi
echo "== all tests passed"
