#!/usr/bin/env bash
# Issue 9's closing checks on a GPU host, one device call (~8 min):
#   bash scripts/device_gate.sh OUT
# builds (scripts/setup.sh) unless BUILD holds a build; runs the GPU tests of the timing modes;
# runs the gate set (every small trace with golden tensors + five realistic ones) twice back to
# back through scripts/gate.sh (A: --update, the new baseline; B: gated against A: must pass),
# then the small traces with a 5 µs spin added to every optimized replay (C, --test-slowdown:
# compare A -> C must exit 1 with SLOWER rows); times the PyTorch peers of the realistic traces in our
# schema (torch_replay.py --results). Copies reports and logs to OUT.
set -uo pipefail
OUT=${1:?out dir}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export BUILD=${BUILD:-build}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
# results.json names the revision built (the device's copy has no .git): REPLAY_GIT_REVISION.
if [ ! -x "$BUILD/replay" ]; then
  t0=$SECONDS
  bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 4; }
  echo "setup+build: $((SECONDS - t0)) s"
fi
t0=$SECONDS
timeout 240 "$BUILD/tests/replay_gpu_tests" \
  --gtest_filter="${GTEST_FILTER:-*GpuTiming*}" > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? $((SECONDS - t0)) s"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]|SKIPPED \]" "$OUT/gpu_tests.log" | sort | uniq -c | sort -rn | head -8
grep -A6 "Failure" "$OUT/gpu_tests.log" | head -30
small=$(ls traces/*.json | while read -r f; do [ -f "${f%.json}.safetensors" ] && echo "$f"; done)
realistic="traces/nanogpt_layernorm_fwd_16x1024x1600.json traces/nanogpt_layernorm_train_bwd_16x1024x1600.json
  traces/litgpt_rmsnorm_train_bwd_2x4096x4096.json traces/meta_llama_rope_train_fwd_2x4096x32x8x128.json
  traces/float8_linear_tensorwise_train_fwd_2x4096x4096x4096.json"
t0=$SECONDS
GATE_KIND=h100 bash scripts/gate.sh --update --out "$OUT/A" $small $realistic > "$OUT/A.log" 2>&1
echo "A (baseline) rc=$? wall $((SECONDS - t0)) s, $(echo $small $realistic | wc -w) traces"
t0=$SECONDS
GATE_KIND=h100 bash scripts/gate.sh --out "$OUT/B" > "$OUT/B.log" 2>&1
echo "B (gated against A) rc=$? wall $((SECONDS - t0)) s (want 0)"
grep -E "^Threshold|^Gate" "$OUT/B/compare.md"
t0=$SECONDS
"$BUILD/replay" run $small --modes cold,graph --test-slowdown optimized:5 --out "$OUT/C" > "$OUT/C.log" 2>&1
echo "C (slowed) rc=$? wall $((SECONDS - t0)) s"
"$BUILD/replay" compare "$OUT/A/results.json" "$OUT/C/results.json" --out "$OUT/compare_AC.md" > /dev/null 2>&1
echo "compare A -> C rc=$? (want 1)"; grep -E "^Threshold|^Gate" "$OUT/compare_AC.md"
python3 scripts/timing_summary.py "$OUT/A/results.json" > "$OUT/timing_A.txt" 2>&1
tail -3 "$OUT/timing_A.txt"
t0=$SECONDS
timeout 150 python3 traces/capture/torch_replay.py $realistic --out "$OUT/peers.json" \
  --results "$OUT/peers_results.json" > "$OUT/peers.log" 2>&1
echo "peers rc=$? wall $((SECONDS - t0)) s"; tail -2 "$OUT/peers.log"
cp reports/baselines/h100/results.json.gz "$OUT/baseline_results.json.gz"
# The peers joined to our rows (replay merge), and the HTML report of that.
"$BUILD/replay" merge "$OUT/A/results.json" "$OUT/peers_results.json" --out "$OUT/merged" > /dev/null 2>&1
echo "merge A + peers rc=$?"
# A reproducer bundle replayed on the GPU and in PyTorch alone.
"$BUILD/replay" repro traces/nanogpt_layernorm_train_bwd_2x8x1600.json --region 0 --variant optimized \
  --out "$OUT/bundle" > /dev/null && "$BUILD/replay" run "$OUT"/bundle/*_r0.json --modes cold \
  --out "$OUT/bundle_run" > "$OUT/bundle_run.log" 2>&1
echo "bundle replay rc=$?"; grep -E "optimized|golden" "$OUT/bundle_run.log" | head -3
(cd "$OUT/bundle" && timeout 120 python3 repro.py > ../bundle_repro_py.log 2>&1); echo "repro.py rc=$?"
tail -4 "$OUT/bundle_repro_py.log"
du -sh "$OUT"/*/ 2>/dev/null | sort -h | tail -3
# One archive of everything (the device tool brings back a limited number of files).
tar czf /tmp/device_gate.tgz -C "$OUT" . && rm -rf "$OUT"/A "$OUT"/B "$OUT"/C "$OUT"/merged "$OUT"/bundle "$OUT"/bundle_run &&
  mv /tmp/device_gate.tgz "$OUT/all.tgz"
ls "$OUT"
