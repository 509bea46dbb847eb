#!/usr/bin/env bash
# run_fuzz.sh SECONDS — builds the .weft parser fuzzer (fuzz/fuzz_parser.c) with clang,
# libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer, and runs it for SECONDS (default
# 60) from the seed corpus fuzz/corpus/. Exits non-zero on any crash, leak, timeout, undefined
# behaviour or broken round trip; the failing input is left as $WEFT_FUZZ_BUILD/crash-*.
#
#   fuzz/run_fuzz.sh 60                          # what CI runs
#   WEFT_FUZZ_BUILD=/tmp/f fuzz/run_fuzz.sh 600  # build elsewhere, run longer
#   fuzz/run_fuzz.sh 0 crash-1234                # re-run one input (SECONDS is ignored)
#
# New inputs the fuzzer finds go to $WEFT_FUZZ_BUILD/corpus, never into the seed corpus.
set -euo pipefail
seconds=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${WEFT_FUZZ_BUILD:-$root/build-fuzz}
jobs=$(nproc 2>/dev/null || echo 2)
cc=${CC_FUZZ:-clang}
command -v "$cc" > /dev/null || { echo "run_fuzz.sh: $cc not found (install clang and libclang-rt-dev)" >&2; exit 2; }

mkdir -p "$build"
# The library, instrumented for coverage and built with ASan+UBSan (the project's 'address'
# sanitizer setting), then the target linked against it with libFuzzer's main. The parser needs
# no MPI: the library is built without its transport, so the target links no MPI libraries.
cmake -S "$root" -B "$build/lib" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DWEFT_SANITIZE=address -DWEFT_CUDA=OFF -DWEFT_MPI=OFF -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCHMARKS=OFF \
  -DWEFT_BUILD_EXAMPLES=OFF -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" > "$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; exit 1; }
cmake --build "$build/lib" --target weft_static -j "$jobs" > "$build/build.log" 2>&1 \
  || { cat "$build/build.log"; exit 1; }
blas=$(grep -E '^WEFT_BLAS_LIBRARY:' "$build/lib/CMakeCache.txt" | cut -d= -f2)
jansson=$(grep -E '^WEFT_JANSSON_LIB:' "$build/lib/CMakeCache.txt" | cut -d= -f2)
hwloc=$(grep -E '^WEFT_HWLOC_LIB:' "$build/lib/CMakeCache.txt" | cut -d= -f2)
"$cc" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I"$root/include" \
  "$root/fuzz/fuzz_parser.c" "$build/lib/libweft_static.a" "$blas" -Wl,-rpath,"$(dirname "$blas")" \
  "$jansson" "$hwloc" -ldl -lm -lpthread \
  -o "$build/fuzz_parser"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if [ $# -ge 2 ]; then
  exec "$build/fuzz_parser" "${@:2}"
fi
mkdir -p "$build/corpus"
echo "run_fuzz.sh: fuzzing the .weft parser for ${seconds}s"
"$build/fuzz_parser" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -dict="$root/fuzz/weft.dict" -artifact_prefix="$build/" -print_final_stats=1 \
  "$build/corpus" "$root/fuzz/corpus"
