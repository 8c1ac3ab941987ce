#!/usr/bin/env bash
# GPU-host batch for the norm backward fusion (issue 8), in phases that each fit the device tool's
# 10 minutes:
#   bash scripts/device_normbwd.sh tests OUT   build here (scripts/setup.sh) unless built; GPU tests
#                                              of norm_bwd and layernorm_fwd (incl. mutants)
#   bash scripts/device_normbwd.sh bench OUT   split-size sweep of the synthetic [576000, 384]
#                                              LayerNorm and RMSNorm backward (replay_bench_norm_bwd,
#                                              a subset of split sizes) -> OUT/bench_{ln,rms}.json
#   bash scripts/device_normbwd.sh run OUT [TRACE...]  `replay run` over the realistic norm
#                                              backward traces (no reference budget)
#                                              -> OUT/run/{results.json,report.md}
#   bash scripts/device_normbwd.sh peers OUT PEERS_DIR  Inductor with mix-order reduction off and
#                                              on, and eager (PEERS_DIR/anchors.py normbwd: a copy
#                                              of ../shared/peers) -> OUT/anchors_normbwd_mix{0,1}.json
set -uo pipefail
phase=${1:?phase: tests | bench | run | peers}
OUT=${2:?out dir}
shift 2
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
BUILD=${BUILD:-build}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu_$phase.txt"
if [ ! -x "$BUILD/replay" ] || [ ! -x "$BUILD/tests/replay_gpu_tests" ]; then
  t0=$SECONDS
  bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 4; }
  echo "setup+build: $((SECONDS - t0)) s"
fi
case $phase in
  tests)
    timeout 400 "$BUILD/tests/replay_gpu_tests" \
      --gtest_filter="${GTEST_FILTER:-*NormBwd*:*LayerNormFwdMutant*:*norm*train_bwd*32x384*:*norm*train_bwd*2x8x*}" \
      --gtest_output="xml:$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1
    rc=$?
    grep -E "^\[  (PASSED|FAILED|  SKIPPED) |tests? ran" "$OUT/gpu_tests.log" | head -60
    grep -E "Failure|rel_l2|mismatch|error" "$OUT/gpu_tests.log" | head -40
    echo "gpu tests rc=$rc"
    exit $rc ;;
  bench)
    # The heuristic's split, the baseline and split sizes around the heuristic's (~2200 rows).
    filt='/(baseline|optimized|optimized/split:(256|512|1024|2048|4096|8192))/manual_time$'
    for kind in ln rms; do
      shape=576000x384
      [ $kind = rms ] && shape=576000x384:rms
      timeout 280 "$BUILD/tests/replay_bench_norm_bwd" --shape "$shape" --benchmark_filter="$filt" \
        --benchmark_min_time=0.3s --benchmark_out="$OUT/bench_$kind.json" \
        --benchmark_out_format=json > "$OUT/bench_$kind.log" 2>&1
      echo "bench $kind rc=$?"
      grep -E "^(norm|<)|median_us|skipped" "$OUT/bench_$kind.log" | cut -c1-200 | head -20
    done ;;
  run)
    traces=("$@")
    ((${#traces[@]})) || traces=(traces/pr165370_layernorm_train_bwd_576000x384.json
      traces/pr165370_rmsnorm_train_bwd_576000x384.json
      traces/nanogpt_layernorm_train_bwd_16x1024x1600.json
      traces/meta_llama_rmsnorm_train_bwd_2x4096x4096.json
      traces/hf_llama_rmsnorm_train_bwd_2x4096x4096.json)
    timeout 580 "$BUILD"/replay run "${traces[@]}" --max-time 0.5 --reference-budget 0 \
      --out "$OUT/run" > "$OUT/run.log" 2>&1
    rc=$?
    grep -E "^==|FAIL|ERROR|reference:|     (eager|baseline|optimized)|NOT REPL|fallback|eagerly" \
      "$OUT/run.log" | head -80
    echo "replay run rc=$rc"
    exit $rc ;;
  peers)
    PEERS=${1:?peers dir (a copy of ../shared/peers)}
    for mix in 0 1; do
      TORCHINDUCTOR_MIX_ORDER_REDUCTION=$mix TAG=_mix$mix OUT="$OUT" timeout 280 \
        python3 "$PEERS/anchors.py" normbwd > "$OUT/anchors_mix$mix.log" 2>&1
      echo "anchors mix$mix rc=$?"
      grep -E "mix_order|_bwd_" "$OUT/anchors_mix$mix.log" | head -10
    done ;;
esac
