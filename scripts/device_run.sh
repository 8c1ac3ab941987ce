#!/usr/bin/env bash
# One batch job for a GPU host (see README "Running on a GPU host"):
#   1. GPU tests (label gpu) against the float64 reference, outputs poisoned;
#   2. the main job (`replay run`) on the bundled traces: numerics, timing, % SOL, CUPTI;
#   3. with --compare OTHER_REPLAY: that binary and this build's `replay run`, alternated twice in
#      the same job, and a table of medians side by side (a before/after check of a change);
#   4. the Google Benchmark runner (replay_bench), JSON;
#   5. with --peers SCRIPT ARGS...: PyTorch peers (../shared/peers/anchors.py) in the same job.
# Usage: scripts/device_run.sh BUILD_DIR OUT_DIR [--compare OTHER_REPLAY] [--peers SCRIPT ARGS...]
# Exit status: that of the GPU tests, else that of `replay run`.
set -uo pipefail
BUILD=${1:?build dir}
OUT=${2:?out dir}
shift 2
COMPARE=""
PEERS=()
while [ $# -gt 0 ]; do
  case $1 in
    --compare) COMPARE=$2; shift 2 ;;
    --peers) shift; PEERS=("$@"); break ;;
    *) echo "device_run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
mkdir -p "$OUT"
log() { tee -a "$OUT/run.log"; }
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit --format=csv
  echo "== GPU tests"
} | log
"$BUILD/tests/replay_gpu_tests" --gtest_output="xml:$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1
rc_tests=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED|Failure" "$OUT/gpu_tests.log" | tail -30 | log
echo "== replay run traces" | log
"$BUILD/replay" run traces --out "$OUT/run" 2>&1 | log
rc_run=${PIPESTATUS[0]}
if [ -n "$COMPARE" ]; then
  for i in 1 2; do
    echo "== compare round $i: $COMPARE, then $BUILD/replay" | log
    "$COMPARE" run traces --out "$OUT/before_$i" > "$OUT/before_$i.log" 2>&1; echo "before rc=$?" | log
    "$BUILD/replay" run traces --out "$OUT/after_$i" > "$OUT/after_$i.log" 2>&1; echo "after rc=$?" | log
  done
  python3 "$here/medians.py" "$OUT"/before_1/results.json "$OUT"/after_1/results.json \
    "$OUT"/before_2/results.json "$OUT"/after_2/results.json | log
fi
if [ -x "$BUILD/tests/replay_bench" ]; then
  echo "== replay_bench" | log
  "$BUILD/tests/replay_bench" --benchmark_out="$OUT/bench.json" --benchmark_out_format=json \
    > "$OUT/bench.txt" 2>&1
  tail -20 "$OUT/bench.txt" | log
fi
if [ ${#PEERS[@]} -gt 0 ]; then
  echo "== peers: ${PEERS[*]}" | log
  OUT="$OUT" timeout 420 python3 "${PEERS[@]}" 2>&1 | grep -vE "^\s*$" > "$OUT/peers.log"
  grep -E "copy_1GiB|ln_fwd|norm" "$OUT/peers.log" | log
fi
echo "gpu tests rc=$rc_tests, replay run rc=$rc_run" | log
[ $rc_tests -ne 0 ] && exit $rc_tests
exit $rc_run
