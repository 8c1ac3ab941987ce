#!/usr/bin/env bash
# The whole bundled suite on a GPU host, one shard per device call (issue 9's closing run):
#   bash scripts/device_suite.sh OUT I/N
# Runs `replay run traces --shard I/N --reference-budget 0` (every mode: cold, hot, CUDA graph;
# every variant; the float64 reference of the realistic traces on the host's cores) into OUT/run,
# gzips its results.json (raw samples) and keeps report.md, report.html and the Perfetto trace.
# BUILD (default build) holds the binary: a build carried from the build machine, else
# scripts/setup.sh builds one here first. GPU_TESTS=1 also runs the GPU tests of the timing modes
# and the CUDA-graph capture (needs a build made here: the test binary names the source tree).
# The shards' results join with `replay merge OUT*/run/results.json --out DIR` on any machine.
set -uo pipefail
OUT=${1:?out dir}
SHARD=${2:?shard I/N}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
BUILD=${BUILD:-build}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
nproc
if [ ! -x "$BUILD/replay" ]; then
  t0=$SECONDS
  bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 4; }
  echo "setup+build: $((SECONDS - t0)) s"
fi
if [ "${GPU_TESTS:-0}" = 1 ]; then
  t0=$SECONDS
  timeout 300 "$BUILD/tests/replay_gpu_tests" \
    --gtest_filter="${GTEST_FILTER:-*GpuTiming*:*Captured*}" > "$OUT/gpu_tests.log" 2>&1
  echo "gpu tests rc=$? $((SECONDS - t0)) s"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]|SKIPPED \]" "$OUT/gpu_tests.log" | sort | uniq -c | head -8
fi
t0=$SECONDS
"$BUILD/replay" run traces --shard "$SHARD" --reference-budget 0 --out "$OUT/run" > "$OUT/run.log" 2>&1
echo "shard $SHARD: rc=$? wall $((SECONDS - t0)) s"
grep -E "^\[|traces|numerics check" "$OUT/run.log" | tail -4
python3 scripts/timing_summary.py "$OUT/run/results.json" > "$OUT/timing.txt" 2>&1
tail -4 "$OUT/timing.txt"
gzip -9 "$OUT/run/results.json"
ls -la "$OUT/run" | head
