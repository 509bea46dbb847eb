#!/usr/bin/env bash
# setup.sh — install what weft needs to build and test on a fresh Debian/Ubuntu machine.
# Idempotent: packages already present are skipped. The CUDA toolkit is optional and is not
# installed here; where /usr/local/cuda (or nvcc on PATH) exists, the build uses it.
set -euo pipefail
# libjansson-dev, libxml2-dev, libpng-dev, chromium: test_report checks the JSON, SVG and a
# rendering of the timeline with real parsers and a real browser.
pkgs=(build-essential cmake pkg-config libuv1-dev libcmocka-dev libopenblas-dev clang libclang-rt-dev python3
      libjansson-dev libxml2-dev libpng-dev chromium)
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
