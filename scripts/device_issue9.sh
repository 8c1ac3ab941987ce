#!/usr/bin/env bash
# GPU-host checks of issue 9's timing modes and outputs, one device call:
#   bash scripts/device_issue9.sh {tests|modes} OUT [TRACE...]
# builds (scripts/setup.sh) unless BUILD holds a build; `tests` runs the GPU tests of the timing
# layer (hot, CUDA graph, capture failure), the CUDA-graph capture of every bundled trace's
# variants, and CUPTI; `modes` runs `replay run` with every mode on the given traces (default: a
# few realistic ones) and prints per row cold / hot / graph / host enqueue medians.
set -uo pipefail
what=${1:?tests|modes}
OUT=${2:?out dir}
shift 2
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
BUILD=${BUILD:-build}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [ ! -x "$BUILD/replay" ]; then
  t0=$SECONDS
  bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 4; }
  echo "setup+build: $((SECONDS - t0)) s"
fi
case $what in
  tests)
    t0=$SECONDS
    timeout 400 "$BUILD/tests/replay_gpu_tests" \
      --gtest_filter="${GTEST_FILTER:-*GpuTiming*:*CapturedCudaGraph*:*Cupti*}" > "$OUT/gpu_tests.log" 2>&1
    echo "gpu tests rc=$? $((SECONDS - t0)) s"
    grep -E "^\[  (PASSED|FAILED) |FAILED  \]|cold .* hot|graph of" "$OUT/gpu_tests.log" | head -40
    grep -B2 -A8 "Failure" "$OUT/gpu_tests.log" | head -60
    ;;
  modes)
    traces=("$@")
    ((${#traces[@]})) || traces=(traces/nanogpt_layernorm_fwd_16x1024x1600.json
      traces/nanogpt_layernorm_train_bwd_16x1024x1600.json
      traces/meta_llama_rope_train_fwd_2x4096x32x8x128.json
      traces/nanogpt_layernorm_fwd_2x8x1600.json)
    t0=$SECONDS
    timeout 500 "$BUILD/replay" run "${traces[@]}" --out "$OUT/run" > "$OUT/run.log" 2>&1
    echo "run rc=$? wall $((SECONDS - t0)) s"
    tail -5 "$OUT/run.log"
    python3 - "$OUT/run/results.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for t in j["traces"]:
    for r in t["regions"]:
        for v in r["variants"]:
            if "stats" not in v: continue
            g = v.get("graph", {})
            gm = g.get("stats", {}).get("median_us") if "stats" in g else g.get("skipped", "-")
            print(f'{t["name"][:44]:44} {r["label"][:28]:28} {v["variant"]:10} cold {v["stats"]["median_us"]:9.2f} '
                  f'hot {v.get("hot", {}).get("stats", {}).get("median_us", float("nan")):9.2f} graph {gm} '
                  f'host {v["host_enqueue"]["median_us"]:7.2f} stop {v["timing"]["stop_reason"]} '
                  f'kernels {len(v.get("cupti", {}).get("timeline", []))}')
PY
    ls -la "$OUT/run"
    ;;
esac
