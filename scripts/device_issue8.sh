#!/usr/bin/env bash
# GPU-host batch for issue 8's first part (one device call, ~10 min):
#   bash scripts/device_issue8.sh OUT [DIAG_DIR]
# build (scripts/setup.sh), GPU tests of the training LayerNorm/RMSNorm forwards and the op corpus,
# `replay run` over DIAG_DIR's traces, then capture the new norm workloads (capture.py) and show
# their plans; the captured traces come back in OUT/captured.tgz.
set -uo pipefail
OUT=${1:?out dir}
DIAG=${2:-}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$SECONDS
bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 4; }
echo "setup+build: $((SECONDS - t0)) s"
timeout 200 build/tests/replay_gpu_tests \
  --gtest_filter='*Training*:*LayerNormFwd*:*train_fwd_2x8*:*EagerOpCorpus*:*Mutant*-*16x1024*:*4096x4096*' \
  > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$?"
grep -E "^\[  FAILED|^\[  PASSED|tests ran" "$OUT/gpu_tests.log" | cut -c1-160 | head -30
if [ -n "$DIAG" ]; then
  timeout 90 build/replay run "$DIAG" --max-time 0.2 --no-cupti --out "$OUT/diag" > "$OUT/diag.log" 2>&1
  grep -E "^==|eager|FAIL" "$OUT/diag.log" | head -20
fi
mkdir -p "$OUT/cap"
timeout 150 python3 traces/capture/capture.py --out "$OUT/cap" --only pr165370_layernorm \
  --only pr165370_rmsnorm --only hf_llama_rmsnorm --only rmsnorm_eps_tensor > "$OUT/capture.log" 2>&1
echo "capture rc=$?"; tail -5 "$OUT/capture.log"
cp "$OUT"/cap/* traces/ 2>/dev/null
build/replay validate "$OUT"/cap/*.json | tail -20
for f in "$OUT"/cap/*_fwd_*.json "$OUT"/cap/*_bwd_*.json; do
  echo "$(basename "$f"): $(build/replay plan "$f" | grep -c '"fusion"') region(s)"
done
timeout 120 build/replay run "$OUT"/cap/*_2x8x4096.json "$OUT"/cap/*_32x384.json --max-time 0.2 \
  --out "$OUT/caprun" > "$OUT/caprun.log" 2>&1
echo "caprun rc=$?"; grep -E "^==|golden|FAIL|     (eager|baseline|optimized)" "$OUT/caprun.log" | head -60
(cd "$OUT" && tar czf captured.tgz cap && rm -rf cap)
