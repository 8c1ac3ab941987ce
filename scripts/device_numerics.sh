#!/usr/bin/env bash
# The realistic MLP traces (every variant, cold timing only) and the GPU tests, on a GPU host:
#   bash scripts/device_numerics.sh OUT
# GTEST_FILTER narrows the GPU tests (GPU_TESTS_S: their time limit, default 300 s).
# BUILD (default build) holds replay and tests/replay_gpu_tests, built here by scripts/setup.sh
# when missing. A test binary built on another machine reads the traces from the source tree it
# was built in (REPLAY_TRACES_DIR): SRC_LINK=/that/path links it to this tree first.
set -uo pipefail
OUT=${1:?out dir}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
BUILD=${BUILD:-build}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ ! -x "$BUILD/replay" ]; then
  bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 4; }
fi
if [ -n "${SRC_LINK:-}" ] && [ ! -e "$SRC_LINK" ]; then
  mkdir -p "$(dirname "$SRC_LINK")" && ln -s "$PWD" "$SRC_LINK"
fi
t0=$SECONDS
"$BUILD/replay" run traces/nanogpt_mlp_*8x1024x1600.json traces/llama_swiglu_mlp_*2x4096x4096x14336.json \
  --reference-budget 0 --modes cold --no-repro --out "$OUT/mlp" > "$OUT/mlp.log" 2>&1
echo "mlp traces rc=$? wall $((SECONDS - t0)) s"
grep -E "^## .*(PASS|FAIL)|^Overall" "$OUT/mlp/report.md" | head -12
t0=$SECONDS
timeout "${GPU_TESTS_S:-300}" "$BUILD/tests/replay_gpu_tests" ${GTEST_FILTER:+--gtest_filter="$GTEST_FILTER"} \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? $((SECONDS - t0)) s"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" "$OUT/gpu_tests.log" | head -20
gzip -9 "$OUT/mlp/results.json"
