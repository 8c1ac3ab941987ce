#!/usr/bin/env bash
# GPU-host batch job for op coverage (issue 7), in phases so each fits the device tool's 10 min:
#   bash scripts/device_ops.sh tests OUT        build here (scripts/setup.sh) unless built, GPU tests:
#                                               op corpus on the eager executor, matmuls, eager
#                                               kernels, every op example, every variant of the
#                                               small (golden) traces
#   bash scripts/device_ops.sh run OUT [TRACE]  `replay run` (reference, eager, fusions; timing) over
#                                               the given traces, default the realistic ones (no
#                                               golden sidecar), no reference budget
#                                               -> OUT/run/{results.json,report.md}
#   bash scripts/device_ops.sh peers OUT [TRACE] PyTorch on the same traces, op by op and
#                                               torch.compile, same timing method
#                                               (traces/capture/torch_replay.py) -> OUT/peers.json
#   bash scripts/device_ops.sh suite OUT        the whole GPU suite but the realistic-shape instances
#                                               of the per-trace tests (BundledTrace: 20 seeds each;
#                                               MutatedGpuOutput: ~1 min each), which `run` and
#                                               `mutations` cover -> OUT/gpu_suite.log
#   bash scripts/device_ops.sh mutations OUT [TRACE] MutatedGpuOutput on the given (realistic) traces
#   bash scripts/device_ops.sh gemm OUT         host enqueue of one cuBLASLt matmul against its size
#                                               (tests/bench/bench_gemm_host.cpp) -> OUT/gemm_host.json
#   bash scripts/device_ops.sh pair OUT I/N     share I of N of the realistic traces (`replay run
#                                               --shard` order): `run` with cold timing only, then
#                                               `peers` on the same traces, in one job on one GPU
# then: python3 scripts/eager_vs_pytorch.py OUT*/run/results.json --peers OUT/peers.json
set -uo pipefail
phase=${1:?phase: tests | suite | mutations | run | peers | gemm | pair}
OUT=${2:?out dir}
shift 2
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
BUILD=${BUILD:-build}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu_$phase.txt"
realistic() {  # bundled traces without golden tensors
  for f in traces/*.json; do [ -e "${f%.json}.safetensors" ] || echo "$f"; done
}
traces=("$@")
if [ "$phase" = pair ]; then  # every N-th of the sorted realistic traces from the I-th, as --shard
  IFS=/ read -r shard_i shard_n <<< "${1:?pair needs I/N}"
  mapfile -t all < <(realistic | sort)
  traces=()
  for ((k = shard_i; k < ${#all[@]}; k += shard_n)); do traces+=("${all[k]}"); done
fi
((${#traces[@]})) || mapfile -t traces < <(realistic)
case $phase in
  tests)
    lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200 | tee "$OUT/cpu.txt"
    if [ ! -x "$BUILD/tests/replay_gpu_tests" ]; then
      t0=$SECONDS
      bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 4; }
      echo "setup+build: $((SECONDS - t0)) s"
    fi
    # Realistic traces run in `run` (and their mutation tests, ~1 min each, in `mutations`); here
    # the small ones (every trace with golden tensors). GTEST_FILTER narrows further.
    timeout 420 "$BUILD/tests/replay_gpu_tests" \
      --gtest_filter="${GTEST_FILTER:-*}-*/BundledTrace.*16x1024*:*/BundledTrace.*16x128*:*/BundledTrace.*4096x4096*:*/BundledTrace.*8x1024x1600*:*/BundledTrace.*2x4096x*:*MutatedGpuOutput*16x1024*:*MutatedGpuOutput*16x128*:*MutatedGpuOutput*4096x*:*MutatedGpuOutput*8x1024x1600*:*MutatedGpuOutput*2x4096x*" \
      --gtest_output="xml:$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1
    rc=$?
    grep -E "^\[  (PASSED|FAILED) |tests? ran|^\[  FAILED" "$OUT/gpu_tests.log" | sort | uniq -c | sort -rn | head -60
    grep -E "Failure|rel_l2|mismatch" "$OUT/gpu_tests.log" | head -40
    echo "gpu tests rc=$rc"
    exit $rc ;;
  suite)
    lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-200 | tee "$OUT/cpu.txt"
    skip=""
    for f in $(realistic); do
      n=$(basename "$f" .json)
      skip+=":*BundledTrace.*/${n}*:*MutatedGpuOutput.*/${n}_*"
    done
    timeout "${SUITE_TIMEOUT:-570}" "$BUILD/tests/replay_gpu_tests" --gtest_filter="${GTEST_FILTER:-*}-${skip#:}" \
      > "$OUT/gpu_suite.log" 2>&1
    rc=$?
    grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|^\[  SKIPPED|YOU HAVE" "$OUT/gpu_suite.log" | sort | uniq -c | sort -rn | head -40
    grep -E "Failure" -A6 "$OUT/gpu_suite.log" | head -60
    echo "gpu suite rc=$rc"
    exit $rc ;;
  mutations)
    filter=""
    for f in "${traces[@]}"; do filter+=":*MutatedGpuOutput.*/$(basename "$f" .json)_*"; done
    timeout "${SUITE_TIMEOUT:-570}" "$BUILD/tests/replay_gpu_tests" --gtest_filter="${filter#:}" \
      > "$OUT/gpu_mutations.log" 2>&1
    rc=$?
    grep -E "^\[       OK|^\[  FAILED|^\[==========\]|^\[  PASSED" "$OUT/gpu_mutations.log" | head -60
    echo "mutations rc=$rc"
    exit $rc ;;
  run)
    # RUN_ARGS: more `replay run` options (e.g. --modes cold for the eager-vs-PyTorch table).
    # shellcheck disable=SC2086
    timeout "${RUN_TIMEOUT:-580}" ./"$BUILD"/replay run "${traces[@]}" --max-time 0.5 --reference-budget 0 \
      ${RUN_ARGS:-} --out "$OUT/run" > "$OUT/run.log" 2>&1
    rc=$?
    grep -E "^==|FAIL|ERROR|reference:|     eager|optimized|NOT REPL" "$OUT/run.log" | head -150
    echo "replay run rc=$rc"
    exit $rc ;;
  gemm)
    timeout "${GEMM_TIMEOUT:-300}" "$BUILD/tests/replay_bench_gemm_host" \
      --benchmark_out="$OUT/gemm_host.json" --benchmark_out_format=json 2>&1 | tee "$OUT/gemm_host.log"
    rc=${PIPESTATUS[0]}
    echo "gemm host rc=$rc"
    exit $rc ;;
  peers)
    timeout "${PEERS_TIMEOUT:-560}" python3 traces/capture/torch_replay.py "${traces[@]}" --compile --reps 100 \
      --out "$OUT/peers.json" > "$OUT/peers.log" 2>&1
    rc=$?
    tail -15 "$OUT/peers.log"
    echo "peers rc=$rc"
    exit $rc ;;
  pair)
    RUN_TIMEOUT=${RUN_TIMEOUT:-450} RUN_ARGS="--modes cold ${RUN_ARGS:-}" bash "$0" run "$OUT" "${traces[@]}"
    rc_run=$?
    PEERS_TIMEOUT=${PEERS_TIMEOUT:-120} bash "$0" peers "$OUT" "${traces[@]}"
    rc_peers=$?
    echo "pair: run rc=$rc_run, peers rc=$rc_peers"
    exit $((rc_run ? rc_run : rc_peers)) ;;
esac
