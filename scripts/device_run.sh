#!/usr/bin/env bash
# One batch job for the GPU machine (see README "Running on a GPU host"):
#   1. GPU tests (label gpu) against the float64 reference, outputs poisoned;
#   2. the main job (`replay run`) on the bundled traces: numerics, timing, % SOL, CUPTI;
#   3. optionally PyTorch peers (../shared/peers/anchors.py) in the same job, for comparison.
# Usage: scripts/device_run.sh BUILD_DIR OUT_DIR [PEERS_SCRIPT [PEERS_ARGS...]]
# Exit status: that of the GPU tests, else that of `replay run`.
set -uo pipefail
BUILD=${1:?build dir}
OUT=${2:?out dir}
shift 2
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT/run"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  echo "== GPU tests"
} | tee "$OUT/run.log"
"$BUILD/tests/replay_gpu_tests" --gtest_output="xml:$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1
rc_tests=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED|Failure" "$OUT/gpu_tests.log" | tail -30 | tee -a "$OUT/run.log"
echo "== replay run traces" | tee -a "$OUT/run.log"
"$BUILD/replay" run traces --out "$OUT/run" 2>&1 | tee -a "$OUT/run.log"
rc_run=${PIPESTATUS[0]}
if [ $# -gt 0 ]; then
  echo "== peers: $*" | tee -a "$OUT/run.log"
  OUT="$OUT" timeout 420 python3 "$@" 2>&1 | grep -vE "^\s*$" > "$OUT/peers.log"
  grep -E "copy_1GiB|ln_fwd" "$OUT/peers.log" | tee -a "$OUT/run.log"
fi
echo "gpu tests rc=$rc_tests, replay run rc=$rc_run" | tee -a "$OUT/run.log"
[ $rc_tests -ne 0 ] && exit $rc_tests
exit $rc_run
