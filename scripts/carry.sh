#!/usr/bin/env bash
# Pack the two binaries a GPU call needs, built here, into .carry/bins.tar.xz (ignored by git) for
# the device tool's `carry`: replay and tests/replay_gpu_tests, stripped, in one xz stream. The
# call's working tree, carried paths included, is limited to 64 MiB; the two binaries share their
# kernels, so one stream with a 64 MiB dictionary packs both into about 13 MB (each alone: ~12 MB).
# scripts/device.sh unpacks it into BUILD when BUILD holds no replay binary; the phases that need
# other binaries (tp's multigpu tests, gemm, normbwd, bench) are not covered by it.
# Usage: bash scripts/carry.sh [BUILD_DIR]   (default: the repo's build/)
set -euo pipefail
build=$(realpath -m "${1:-$(dirname "$0")/../build}")
cd "$(dirname "$0")/.."
for b in replay tests/replay_gpu_tests; do
  [ -x "$build/$b" ] || { echo "carry: $build/$b not built (bash scripts/setup.sh)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tests" .carry
cp "$build/replay" "$tmp/replay"
cp "$build/tests/replay_gpu_tests" "$tmp/tests/replay_gpu_tests"
strip "$tmp/replay" "$tmp/tests/replay_gpu_tests"
# Written beside and renamed: a copy taken while this runs sees the old archive or the new one,
# never a truncated one.
tar -C "$tmp" -cf - replay tests/replay_gpu_tests | xz -9e -T1 > .carry/bins.tar.xz.part
mv .carry/bins.tar.xz.part .carry/bins.tar.xz
echo "carry: .carry/bins.tar.xz $(du -h .carry/bins.tar.xz | cut -f1) ($("$build/replay" --version | head -1);" \
  "the call's tree and carry together must stay under 64 MiB)"
