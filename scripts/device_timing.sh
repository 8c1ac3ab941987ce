#!/usr/bin/env bash
# GPU-host check of the timing layer and the compare gate (issue 9), one device call (~8 min):
#   bash scripts/device_timing.sh OUT [TRACE...]
# builds (scripts/setup.sh) unless BUILD holds a build, runs the timing GPU tests, then
# `replay run` twice back to back (A, B) and once with a 5 µs spin added to every optimized replay
# (C, --test-slowdown), and `replay compare` A->B (must give no SLOWER, exit 0) and A->C (must
# flag the slowed variant SLOWER, exit 1). Prints each run's wall time and, per measurement, why
# it stopped and its noise (scripts/timing_summary.py).
set -uo pipefail
OUT=${1:?out dir}
shift
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
here=$(cd "$(dirname "$0")" && pwd)
BUILD=${BUILD:-build}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
if [ ! -x "$BUILD/replay" ]; then
  t0=$SECONDS
  bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 4; }
  echo "setup+build: $((SECONDS - t0)) s"
fi
traces=("$@")
((${#traces[@]})) || traces=(traces/nanogpt_layernorm_fwd_16x1024x1600.json
  traces/nanogpt_layernorm_train_fwd_16x1024x1600.json
  traces/nanogpt_layernorm_train_bwd_16x1024x1600.json
  traces/litgpt_rmsnorm_train_bwd_2x4096x4096.json
  traces/nanogpt_layernorm_fwd_2x8x1600.json)
timeout 120 "$BUILD/tests/replay_gpu_tests" --gtest_filter="${GTEST_FILTER:-*GpuTiming*:*Cupti*}" \
  > "$OUT/gpu_tests.log" 2>&1
echo "timing gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED) " "$OUT/gpu_tests.log"
run() {  # name, extra args
  local name=$1
  shift
  local t0=$SECONDS
  timeout 170 "$BUILD/replay" run "${traces[@]}" --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  echo "run $name rc=$? wall $((SECONDS - t0)) s"
}
run A
run B
run C --test-slowdown optimized:5
python3 "$here/timing_summary.py" "$OUT/A/results.json" | tee "$OUT/timing_A.txt"
"$BUILD/replay" compare "$OUT/A/results.json" "$OUT/B/results.json" > "$OUT/compare_AB.md" 2>&1
echo "compare A->B rc=$? (want 0)"; grep -cE "SLOWER" "$OUT/compare_AB.md"
"$BUILD/replay" compare "$OUT/A/results.json" "$OUT/C/results.json" > "$OUT/compare_AC.md" 2>&1
echo "compare A->C rc=$? (want 1)"; grep -E "SLOWER" "$OUT/compare_AC.md" | head -10
