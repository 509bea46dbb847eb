#!/usr/bin/env bash
# install_test.sh BUILD_DIR SOURCE_DIR BLAS_DIR — installs weft from BUILD_DIR into a temporary
# prefix, then builds and runs a consumer through the CMake package (weft::weft) and through
# pkg-config; each consumer must load the BLAS weft was built with, from BLAS_DIR, whatever the
# system's alternatives select (the installed libweft carries that directory as its RUNPATH).
set -euo pipefail
build=$1 src=$2 blasdir=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
test -f "$tmp/prefix/include/weft/weft.h"
pc=$(find "$tmp/prefix" -name weft.pc | head -1)
cm=$(find "$tmp/prefix" -name weftConfig.cmake | head -1)
test -n "$pc" && test -n "$cm"
libdir=$(dirname "$(find "$tmp/prefix" -name 'libweft.so' | head -1)")
cmake -S "$src/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/consumer.log"
cmake --build "$tmp/consumer" > "$tmp/consumer-build.log"
LD_LIBRARY_PATH="$libdir" "$tmp/consumer/consumer"
LD_LIBRARY_PATH="$libdir" "$tmp/consumer/consumer_uv"
PKG_CONFIG_PATH=$(dirname "$pc") cc "$src/tests/install/consumer.c" -o "$tmp/consumer-pc" \
  $(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs weft)
LD_LIBRARY_PATH="$libdir" "$tmp/consumer-pc"
# (The listings are read whole before grep: grep -q would stop early and fail the pipe.)
dyn=$(readelf -d "$libdir/libweft.so")
grep -q "RUNPATH.*\[$blasdir[]:]" <<< "$dyn" ||
  { echo "install test: the installed libweft.so has no RUNPATH $blasdir" >&2; exit 1; }
for c in consumer/consumer consumer/consumer_uv consumer-pc; do
  libs=$(LD_LIBRARY_PATH="$libdir" ldd "$tmp/$c")
  grep -q " => $blasdir/" <<< "$libs" ||
    { echo "install test: $c does not load its BLAS from $blasdir:" >&2; echo "$libs" >&2; exit 1; }
done
echo "install test passed: CMake package and pkg-config, the BLAS from $blasdir"
