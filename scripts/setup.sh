#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine and build: installs the build dependencies from Debian
# packages (when apt-get is available and they are missing), configures with CMake and builds
# into ./build. The CUDA toolkit (nvcc, cuBLASLt, CUPTI, NCCL) must already be installed;
# no GPU is needed to build. Idempotent.
# Usage: bash scripts/setup.sh [extra cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="cmake ninja-build g++ git pkg-config libeigen3-dev nlohmann-json3-dev libbenchmark-dev libgtest-dev libcli11-dev"
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    echo "installing:$missing"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
  else
    echo "missing packages:$missing (no apt-get here: install them by hand)" >&2
    exit 1
  fi
fi

if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do
    [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
  done
fi
command -v nvcc >/dev/null 2>&1 || { echo "nvcc not found: install the CUDA toolkit (13.x)" >&2; exit 1; }

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$jobs"
