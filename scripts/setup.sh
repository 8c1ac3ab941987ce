#!/usr/bin/env bash
# Set up a machine and build: checks for what the build needs (tools on PATH, headers of the
# libraries CMake finds), installs only what is missing from Debian packages when apt-get can,
# configures with CMake (Ninja when present, else CMake's default generator) and builds ./build.
# Works on a fresh Debian machine and on a GPU host whose tools were installed without apt (apt
# with no network there). The CUDA toolkit (nvcc, cuBLASLt, CUPTI, NCCL) must already be
# installed; no GPU is needed to build. Idempotent.
# Usage: bash scripts/setup.sh [extra cmake args]
# Takes: ~2 min on a fresh 16-core GPU host (103-112 s measured, setup and build); much longer on 2
# cores without a warm ccache; seconds when everything is built.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

missing=()
need_tool() {  # need_tool COMMAND DEBIAN_PACKAGE
  command -v "$1" >/dev/null 2>&1 || missing+=("$2")
}
need_header() {  # need_header PATH_UNDER_INCLUDE DEBIAN_PACKAGE
  local d
  for d in /usr/include /usr/local/include; do
    [ -e "$d/$1" ] && return 0
  done
  missing+=("$2")
}
need_tool cmake cmake
if command -v cmake >/dev/null 2>&1; then  # CMakeLists.txt needs 3.25 (Debian 12's)
  v=$(cmake --version | head -n1 | sed 's/[^0-9.]*\([0-9.]*\).*/\1/')
  if [ "$(printf '%s\n3.25\n' "$v" | sort -V | head -n1)" != "3.25" ]; then
    echo "cmake $v is older than 3.25"
    missing+=(cmake)
  fi
fi
need_tool g++ g++
need_tool git git
need_tool python3 python3  # the peers-schema test (traces/capture/peer_results.py)
need_header eigen3/Eigen/Core libeigen3-dev
need_header nlohmann/json.hpp nlohmann-json3-dev
need_header CLI/CLI.hpp libcli11-dev
need_header gtest/gtest.h libgtest-dev
need_header benchmark/benchmark.h libbenchmark-dev

if [ ${#missing[@]} -gt 0 ]; then
  command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
  echo "installing: ${missing[*]}"
  if ! apt_install "${missing[@]}"; then
    # Not fatal: a library outside /usr/include (conda, /opt) is still found by CMake, which then
    # names whatever is really missing.
    echo "setup: could not install ${missing[*]} (no apt-get or no network); trying the build" >&2
  fi
elif ! command -v ninja >/dev/null 2>&1; then
  apt_install ninja-build >/dev/null 2>&1 || echo "ninja not found: using CMake's default generator"
fi

find_nvcc || { echo "nvcc not found: install the CUDA toolkit (13.x)" >&2; exit 1; }

generator=()
if [ ! -f build/CMakeCache.txt ] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)  # an existing build folder keeps the generator it was made with
fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
