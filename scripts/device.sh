#!/usr/bin/env bash
# shellcheck disable=SC2317  # the phase functions are called through their names
# The one entry point for a GPU host: build (unless built), then the phases asked for, in order.
#   bash scripts/device.sh OUT PHASE[=ARG]...
# Each phase writes under OUT/<phase>/ and prints a short summary; a failing phase does not stop
# the next. Exit status: the first non-zero phase status (0 when all pass). Times are from an
# H100 host with 16 cores (a device call is limited to 10 min: split long work over calls).
#
#   tests           GPU tests (replay_gpu_tests) but the realistic-shape instances of BundledTrace
#                   and MutatedGpuOutput (`run` and `mutations` cover those): ~3900 tests
#                   (2026-12-02; 140 s on an H200 ran ~740 of them: narrow with GTEST_FILTER).
#                   GTEST_FILTER narrows (e.g. '*GpuTiming*:*Cupti*'); TESTS_S limits (570 s).
#   mutations       MutatedGpuOutput on $TRACES (default: the realistic traces, ~6-70 s each:
#                   pass a few per call) -> every output mutation must fail the numerics check.
#   run             `replay run $TRACES --reference-budget 0` (default: every bundled trace,
#                   ~6 min; RUN_ARGS adds options, e.g. RUN_ARGS='--modes cold').
#   suite=I/N       share I of N of the whole bundled suite, every mode (cold, hot, CUDA graph), no
#                   reference budget; results.json gzipped. I/4: 3-7 min per share. Join the
#                   shares anywhere: gunzip OUT/suite-*/run/results.json.gz, then
#                   `replay merge OUT/suite-*/run/results.json --out DIR`.
#   modes           every mode on four traces (default) and a table of cold / hot / graph / host
#                   enqueue per row: ~3 min.
#   timing          timing GPU tests, then `replay run` A, B back to back and C with a 5 us spin in
#                   every optimized replay, on five traces; compare A->B (want exit 0) and A->C
#                   (want exit 1); per-measurement noise and stop reasons (timing_summary.py): ~8 min.
#   gate-check      the gate end to end (scripts/gate.sh): A = --update on the gate set (every small
#                   trace + five realistic ones; GATE_KIND, default h100), B gated against A (want
#                   0), C slowed by 5 us (compare A->C: want 1); PyTorch peers of the realistic ones
#                   merged with A; a reproducer bundle replayed on the GPU and by repro.py: ~8 min.
#   peers           PyTorch op by op and torch.compile on $TRACES (default: the realistic traces),
#                   timed our way (traces/capture/torch_replay.py): ~2 min per quarter of them.
#   pair=I/N        share I of N of the realistic traces: `run` (cold only) then `peers` on the same
#                   traces in one job; then scripts/eager_vs_pytorch.py joins the shares. I/4: ~8 min.
#   numerics        the realistic MLP traces (nanoGPT, Llama SwiGLU), every variant, cold only, no
#                   reference budget: the numerics of GEMMs fed by rounded intermediates. ~4 min.
#   gemm            host enqueue of one cuBLASLt matmul against its size and algorithm
#                   (replay_bench_gemm_host) -> gemm/gemm_host.json: ~3 min.
#   normbwd         norm_bwd split-size sweep of the [576000, 384] LayerNorm and RMSNorm backward
#                   (replay_bench_norm_bwd) -> normbwd/bench_{ln,rms}.json: <= 10 min.
#   normfwd         layernorm_fwd sweep mode (REPLAY_NORM_FWD_GEOMETRY) on the [576000, 384],
#                   [16384, 1600] and [8192, 4096] forwards (or $TRACES; NORMFWD_GEOMETRIES picks
#                   the configurations) -> normfwd/sweep.txt: ~3 min.
#   epifwd          matmul_epilogue forward geometry sweep (REPLAY_EPILOGUE_GEOMETRY: vectors per
#                   thread, table kernel threads, raw lookups) on five bfloat16 MLP forwards
#                   -> epifwd/sweep.txt: ~45 s per geometry.
#   ropegeo         rope fixed-form geometry sweep (REPLAY_ROPE_GEOMETRY: packed bf16 math, persistent
#                   pipelined grid) on the all-bf16 rotate-half traces and litgpt's forward
#                   -> ropegeo/sweep.txt: ~1 min per geometry.
#   pwsum           pointwise column-sum form sweep (REPLAY_POINTWISE_SUM_FORM: launch-bounds
#                   blocks, accumulators in shared memory) on three backward chains with a fused
#                   bias gradient -> pwsum/sweep.txt: ~30 s per form.
#   pwpairs         pointwise bfloat16 pair math on (heuristic) and off (REPLAY_POINTWISE_PAIRS=0)
#                   on five bfloat16 chains (GPT-2's MLP, BERT's backward) -> pwpairs/sweep.txt:
#                   ~30 s per setting.
#   redsplit        eager column reduction sweep (REPLAY_OUTER_MIN_ROWS) on HotCases' reductions
#                   -> redsplit/sweep.txt: ~5 s per value.
#   fp8rows         fp8_quantize's one-pass rowwise kernel geometry sweep (REPLAY_FP8_ROWWISE:
#                   threads per row, vectors per thread; rW,S: the ring kernel's warps per CTA
#                   and row slots per warp) on two rowwise float8 forwards, each line naming the
#                   kernels that ran (block, dynamic smem) -> fp8rows/sweep.txt: ~25 s per
#                   geometry.
#   normbwd-peers=DIR  Inductor with mix-order reduction off and on, and eager, on the norm
#                   backwards (DIR/anchors.py normbwd: a copy of ../shared/peers): ~9 min.
#   ncu=REGEX       Nsight Compute on the first optimized-variant launch (NCU_COUNT: the first
#                   N launches) of each kernel whose name matches REGEX, per trace of $TRACES
#                   (default: the Llama-3-8B rope forward):
#                   speed of light, memory workload, occupancy, launch, warp state sections
#                   -> ncu/<trace>.txt: ~20-40 s per trace.
#   tp              the multi-process path on this host's GPUs: the NCCL and chunked-pipeline GPU
#                   tests (world sizes 1, 2, 4; ranks may share a GPU), the multigpu tests (they
#                   skip below 2 / 4 GPUs), then `replay launch --nproc N -- run` on traces/tp at
#                   world sizes 1 (NCCL), 2 and 4 -> tp/ws<N>/: ~2-4 min.
#   tp-large=PEERS  one process per GPU (world size = the GPU count, or TP_WS): the GPUs' links
#                   (nvidia-smi topo), `replay launch --nproc N -- run traces/tp/large/*_wsN_*`
#                   (issue 29's shapes, every variant, cold, no reference budget), PyTorch's fused
#                   ops in the same job (PEERS/tp_anchor.py under torchrun: a copy of
#                   ../shared/peers), the ws N small traces once more with srun-style variables
#                   and once with rank 1 killed (rank 0 must end within --rank-timeout, exit 4)
#                   -> tp-large/: ~5-8 min on 2 GPUs.
#   bench           the Google Benchmark runner (replay_bench) over the bundled traces, JSON.
#   compare=REPLAY  another `replay` binary and this build alternated twice on $TRACES (default:
#                   the small traces) in one job, medians side by side (scripts/medians.py);
#                   RUN_ARGS are passed to both (e.g. '--modes cold --variants optimized'),
#                   COMPARE_ROUNDS (default 2) sets the rounds.
#   knobs="V=X ..."  those environment settings (A) against the defaults (B), `replay run`
#                   alternated COMPARE_ROUNDS (default 2) times on $TRACES (default: the small
#                   traces), RUN_ARGS passed to both; medians side by side (scripts/medians.py),
#                   results.json gzipped (e.g. knobs="REPLAY_FP8_PDL=0": an A/B of one change).
#   tour            README's 5-minute tour as a newcomer runs it: capture_script.py on
#                   traces/capture/examples/train_tiny.py, validate, plan, run, compare, repro and
#                   repro.py -> tour/tour.tgz (logs, traces, report): ~2 min.
#   capture         capture the bundled workloads again with PyTorch (traces/capture/capture.py;
#                   CAPTURE_ARGS='--only NAME' narrows), validate and plan each
#                   -> capture/captured.tgz: ~3 min.
#
# Environment: TRACES='traces/a.json traces/b*.json' (or `small`: the traces with PyTorch's golden
# tensors, `realistic`: the others) replaces a phase's default traces. BUILD (default build) holds
# replay and tests/; replay and replay_gpu_tests built elsewhere travel as .carry/bins.tar.xz
# (scripts/carry.sh; every phase but gemm, normbwd, bench and tp's multigpu tests needs no other
# binary), unpacked into BUILD; scripts/setup.sh builds BUILD here when missing (setup and build
# took ~2 min on 16 cores before layernorm_fwd's paired stores; that kernels.cu alone now takes ~15
# min of one core of the 2-core build machine). A test binary built on another machine reads the
# traces from the source tree it was built in: SRC_LINK=/that/path links it to this tree. On a
# copy of the tree without .git, REPLAY_GIT_REVISION=<commit> names the revision in results.json.
set -uo pipefail
OUT=${1:?usage: bash scripts/device.sh OUT PHASE[=ARG]...}
shift
(($#)) || { echo "usage: bash scripts/device.sh OUT PHASE[=ARG]... (phases: see its header)" >&2; exit 2; }
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda-13.0/targets/x86_64-linux/lib:/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
BUILD=${BUILD:-build}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit \
  --format=csv | tee "$OUT/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)" | tee "$OUT/cpu.txt"
if [ ! -x "$BUILD/replay" ] && [ -f .carry/bins.tar.xz ]; then  # made by scripts/carry.sh
  # A carried archive that does not unpack (e.g. copied while carry.sh was still writing it) ends
  # the call here: falling back to a build would spend the whole call building.
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    .carry/bins.tar.xz "$BUILD" > "$OUT/carry.log" 2>&1 || {
    tail -2 "$OUT/carry.log"
    echo "error: .carry/bins.tar.xz did not unpack (truncated?): run scripts/carry.sh again" >&2
    rm -rf "$BUILD/replay" "$BUILD/tests/replay_gpu_tests"
    exit 4
  }
  echo "unpacked .carry/bins.tar.xz into $BUILD"
fi
if [ ! -x "$BUILD/replay" ] || [ ! -x "$BUILD/tests/replay_gpu_tests" ]; then
  t0=$SECONDS
  bash scripts/setup.sh > "$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 4; }
  echo "setup+build: $((SECONDS - t0)) s"
fi
# A build/ left by an earlier call (or carried binaries) is used as it is: say which revision it
# is, so a stale binary cannot pass for this tree's (rm -rf build to rebuild from this tree).
echo "replay binary: $("$BUILD/replay" --version 2>&1 | head -1) (tree: $(git rev-parse --short HEAD 2>/dev/null || echo "${REPLAY_GIT_REVISION:-no .git}"))" | tee "$OUT/binary.txt"
if [ -n "${SRC_LINK:-}" ] && [ ! -e "$SRC_LINK" ]; then
  mkdir -p "$(dirname "$SRC_LINK")" && ln -s "$PWD" "$SRC_LINK"
fi
R=$BUILD/replay

small() {  # bundled traces with PyTorch's golden tensors
  for f in traces/*.json; do [ -e "${f%.json}.safetensors" ] && echo "$f"; done
}
realistic() {  # bundled traces without golden tensors (the realistic shapes)
  for f in traces/*.json; do [ -e "${f%.json}.safetensors" ] || echo "$f"; done
}
traces_or() {  # $TRACES (space-separated; `small`, `realistic`) if set, else the given command's
  # shellcheck disable=SC2086  # $TRACES is a list (and may hold globs)
  case ${TRACES:-} in
    "") "$@" ;;
    small) small ;;
    realistic) realistic ;;
    *) printf '%s\n' $TRACES ;;
  esac
}
gpu_tests() {  # LOG FILTER: the GPU test binary, summary lines
  timeout "${TESTS_S:-570}" "$BUILD/tests/replay_gpu_tests" --gtest_filter="$2" \
    --gtest_output="xml:${1%.log}.xml" > "$1" 2>&1
  local rc=$?
  grep -E "^\[==========\]|^\[  PASSED|^\[  FAILED|^\[  SKIPPED|YOU HAVE" "$1" | sort | uniq -c | sort -rn | head -40
  grep -E "Failure" -A6 "$1" | head -60
  return $rc
}
modes_table() {  # RESULTS.json: per row cold / hot / graph / host enqueue medians
  python3 - "$1" << 'PY'
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
                  f'host {v["host_enqueue"]["median_us"]:7.2f} stop {v["timing"]["stop_reason"]}')
PY
}

phase_tests() {
  local skip=""
  for f in $(realistic); do
    local n
    n=$(basename "$f" .json)
    skip+=":*BundledTrace.*/${n}*:*MutatedGpuOutput.*/${n}_*"
  done
  gpu_tests "$D/gpu_tests.log" "${GTEST_FILTER:-*}-${skip#:}"
}
phase_mutations() {
  local filter="" f
  for f in $(traces_or realistic); do filter+=":*MutatedGpuOutput.*/$(basename "$f" .json)_*"; done
  gpu_tests "$D/gpu_mutations.log" "${filter#:}"
}
phase_run() {  # [TRACE...]: default $TRACES, else every bundled trace
  local t=("$@")
  ((${#t[@]})) || mapfile -t t < <(traces_or echo traces)
  # shellcheck disable=SC2086
  timeout "${RUN_S:-580}" "$R" run "${t[@]}" --reference-budget 0 ${RUN_ARGS:-} --out "$D/run" \
    > "$D/run.log" 2>&1
  local rc=$?
  grep -E "^==|FAIL|ERROR|NOT REPL|fallback|eagerly" "$D/run.log" | head -80
  tail -3 "$D/run.log"
  return $rc
}
phase_suite() {  # I/N
  "$R" run traces --shard "${1:?suite=I/N}" --reference-budget 0 --out "$D/run" > "$D/run.log" 2>&1
  local rc=$?
  grep -E "^\[|traces|numerics check" "$D/run.log" | tail -4
  python3 scripts/timing_summary.py "$D/run/results.json" > "$D/timing.txt" 2>&1
  tail -2 "$D/timing.txt"
  gzip -9f "$D/run/results.json"
  return $rc
}
phase_modes() {
  local t
  mapfile -t t < <(traces_or printf '%s\n' traces/nanogpt_layernorm_fwd_16x1024x1600.json \
    traces/nanogpt_layernorm_train_bwd_16x1024x1600.json \
    traces/meta_llama_rope_train_fwd_2x4096x32x8x128.json traces/nanogpt_layernorm_fwd_2x8x1600.json)
  timeout 500 "$R" run "${t[@]}" --out "$D/run" > "$D/run.log" 2>&1
  local rc=$?
  modes_table "$D/run/results.json" | tee "$D/modes.txt"
  return $rc
}
phase_timing() {
  local t rc=0
  mapfile -t t < <(traces_or printf '%s\n' traces/nanogpt_layernorm_fwd_16x1024x1600.json \
    traces/nanogpt_layernorm_train_fwd_16x1024x1600.json \
    traces/nanogpt_layernorm_train_bwd_16x1024x1600.json \
    traces/litgpt_rmsnorm_train_bwd_2x4096x4096.json traces/nanogpt_layernorm_fwd_2x8x1600.json)
  TESTS_S=120 gpu_tests "$D/gpu_tests.log" "${GTEST_FILTER:-*GpuTiming*:*Cupti*}" || rc=$?
  local name
  for name in A B C; do
    local extra=()
    [ $name = C ] && extra=(--test-slowdown optimized:5)
    timeout 170 "$R" run "${t[@]}" --out "$D/$name" "${extra[@]}" > "$D/$name.log" 2>&1
    echo "run $name rc=$?"
  done
  python3 scripts/timing_summary.py "$D/A/results.json" | tee "$D/timing_A.txt" | tail -3
  "$R" compare "$D/A/results.json" "$D/B/results.json" > "$D/compare_AB.md" 2>&1
  local ab=$?
  "$R" compare "$D/A/results.json" "$D/C/results.json" > "$D/compare_AC.md" 2>&1
  local ac=$?
  echo "compare A->B rc=$ab (want 0), A->C rc=$ac (want 1)"
  { [ $ab -eq 0 ] && [ $ac -eq 1 ]; } || [ $rc -ne 0 ] || rc=1
  return $rc
}
phase_gate_check() {
  local kind=${GATE_KIND:-h100} rc=0 small_t realistic_t
  small_t=$(small)
  realistic_t="traces/nanogpt_layernorm_fwd_16x1024x1600.json traces/nanogpt_layernorm_train_bwd_16x1024x1600.json
    traces/litgpt_rmsnorm_train_bwd_2x4096x4096.json traces/meta_llama_rope_train_fwd_2x4096x32x8x128.json
    traces/float8_linear_tensorwise_train_fwd_2x4096x4096x4096.json"
  # A becomes the baseline for B; the committed baseline is put back afterwards.
  local committed=reports/baselines/$kind/results.json.gz
  [ -f "$committed" ] && cp "$committed" "$D/committed_baseline.json.gz"
  # shellcheck disable=SC2086
  GATE_KIND=$kind BUILD=$BUILD bash scripts/gate.sh --update --out "$D/A" $small_t $realistic_t > "$D/A.log" 2>&1
  echo "A (baseline for B) rc=$?"
  GATE_KIND=$kind BUILD=$BUILD bash scripts/gate.sh --out "$D/B" > "$D/B.log" 2>&1
  local b=$?
  if [ -f "$D/committed_baseline.json.gz" ]; then
    cp "$D/committed_baseline.json.gz" "$committed"
  else
    rm -f "$committed"
  fi
  echo "B gated against A rc=$b (want 0)"; grep -E "^Threshold|^Gate" "$D/B/compare.md"
  # shellcheck disable=SC2086
  "$R" run $small_t --modes cold,graph --test-slowdown optimized:5 --out "$D/C" > "$D/C.log" 2>&1
  "$R" compare "$D/A/results.json" "$D/C/results.json" --out "$D/compare_AC.md" > /dev/null 2>&1
  local c=$?
  echo "compare A -> C rc=$c (want 1)"; grep -E "^Threshold|^Gate" "$D/compare_AC.md"
  { [ $b -eq 0 ] && [ $c -eq 1 ]; } || rc=1
  python3 scripts/timing_summary.py "$D/A/results.json" > "$D/timing_A.txt" 2>&1
  # shellcheck disable=SC2086
  timeout 150 python3 traces/capture/torch_replay.py $realistic_t --out "$D/peers.json" \
    --results "$D/peers_results.json" > "$D/peers.log" 2>&1
  echo "peers rc=$?"
  "$R" merge "$D/A/results.json" "$D/peers_results.json" --out "$D/merged" > /dev/null 2>&1
  echo "merge A + peers rc=$?"
  "$R" repro traces/nanogpt_layernorm_train_bwd_2x8x1600.json --region 0 --variant optimized \
    --out "$D/bundle" > /dev/null && "$R" run "$D"/bundle/*_r0.json --modes cold \
    --out "$D/bundle_run" > "$D/bundle_run.log" 2>&1
  echo "bundle replay rc=$?"
  (cd "$D/bundle" && timeout 120 python3 repro.py > ../bundle_repro_py.log 2>&1)
  echo "repro.py rc=$?"
  return $rc
}
phase_peers() {  # [TRACE...]: default $TRACES, else the realistic traces
  local t=("$@")
  ((${#t[@]})) || mapfile -t t < <(traces_or realistic)
  timeout "${PEERS_S:-560}" python3 traces/capture/torch_replay.py "${t[@]}" --compile --reps 100 \
    --out "$D/peers.json" --results "$D/peers_results.json" > "$D/peers.log" 2>&1
  local rc=$?
  tail -15 "$D/peers.log"
  return $rc
}
phase_pair() {  # I/N
  local i n all t=() k
  IFS=/ read -r i n <<< "${1:?pair=I/N}"
  mapfile -t all < <(realistic | sort)
  for ((k = i; k < ${#all[@]}; k += n)); do t+=("${all[k]}"); done
  RUN_S=${RUN_S:-450} RUN_ARGS="--modes cold ${RUN_ARGS:-}" phase_run "${t[@]}"
  local rc_run=$?
  PEERS_S=${PEERS_S:-120} phase_peers "${t[@]}"
  local rc_peers=$?
  echo "pair: run rc=$rc_run, peers rc=$rc_peers (then: python3 scripts/eager_vs_pytorch.py" \
    "OUT/pair-*/run/results.json --peers PEERS.json)"
  return $((rc_run ? rc_run : rc_peers))
}
phase_numerics() {
  "$R" run traces/nanogpt_mlp_*8x1024x1600.json traces/llama_swiglu_mlp_*2x4096x4096x14336.json \
    --reference-budget 0 --modes cold --no-repro --out "$D/mlp" > "$D/mlp.log" 2>&1
  local rc=$?
  grep -E "^## .*(PASS|FAIL)|^Overall" "$D/mlp/report.md" | head -12
  gzip -9f "$D/mlp/results.json"
  return $rc
}
phase_gemm() {
  timeout "${GEMM_S:-300}" "$BUILD/tests/replay_bench_gemm_host" \
    --benchmark_out="$D/gemm_host.json" --benchmark_out_format=json > "$D/gemm_host.log" 2>&1
  local rc=$?
  tail -20 "$D/gemm_host.log"
  return $rc
}
phase_normbwd() {
  # The heuristic's split, the baseline and split sizes around the heuristic's (~2200 rows).
  local filt='/(baseline|optimized|optimized/split:(256|512|1024|2048|4096|8192))/manual_time$'
  local kind shape rc=0
  for kind in ln rms; do
    shape=576000x384
    [ $kind = rms ] && shape=576000x384:rms
    timeout 280 "$BUILD/tests/replay_bench_norm_bwd" --shape "$shape" --benchmark_filter="$filt" \
      --benchmark_min_time=0.3s --benchmark_out="$D/bench_$kind.json" \
      --benchmark_out_format=json > "$D/bench_$kind.log" 2>&1 || rc=$?
    grep -E "^(norm|<)|median_us|skipped" "$D/bench_$kind.log" | cut -c1-200 | head -20
  done
  return $rc
}
phase_normfwd() {
  # layernorm_fwd sweep mode: REPLAY_NORM_FWD_GEOMETRY=TPG,VPT,D,MINB,CS,P (kernels.cu) over
  # $NORMFWD_GEOMETRIES (default below; each must be compiled in REPLAY_NORM_FWD_SWEEP), on the
  # [576000, 384], [16384, 1600] and [8192, 4096] forwards it holds (or $TRACES: the generic
  # body's list, REPLAY_NORM_FWD_SWEEP_GENERIC, on default-partitioner forwards), cold, optimized
  # only; the heuristic's choice first ("heuristic"). -> normfwd/sweep.txt
  local rc=0 g g_env f cols tpg vpt
  local t
  mapfile -t t < <(traces_or printf '%s\n' traces/pr165370_layernorm_train_fwd_576000x384.json \
    traces/pr165370_rmsnorm_train_fwd_576000x384.json \
    traces/nanogpt_layernorm_train_fwd_16x1024x1600.json \
    traces/meta_llama_rmsnorm_train_fwd_2x4096x4096.json)
  local geoms=${NORMFWD_GEOMETRIES:-"heuristic 8,6,1,4,1,1 16,3,2,4,1,1 16,3,2,4,0,1 16,3,1,8,1,0
    16,3,1,8,0,0 32,2,1,8,1,0 32,7,1,4,1,1 32,7,1,4,0,1 128,4,2,4,1,1 128,4,2,4,0,1 128,4,2,3,1,1
    128,4,2,3,0,1 128,4,1,4,1,1 64,8,1,3,0,1"}
  for g in $geoms; do
    for f in "${t[@]}"; do
      cols=${f##*x}; cols=${cols%.json}
      if [ "$g" != heuristic ]; then
        IFS=, read -r tpg vpt _ <<< "$g"
        # only the configurations that hold the row with less than a vector per thread to spare
        (( tpg * vpt * 8 >= cols && (tpg * (vpt - 1)) * 8 < cols )) || continue
      fi
      [ "$g" = heuristic ] && g_env= || g_env=$g
      REPLAY_NORM_FWD_GEOMETRY=$g_env timeout 120 "$R" run "$f" --modes cold --variants optimized \
        --no-matmul-ceilings --no-repro --out "$D/run_${g//,/_}_$(basename "$f" .json)" \
        > "$D/run.log" 2>&1 || rc=$?
      printf '%-14s %-48s %s  copy %s us\n' "$g" "$(basename "$f" .json)" \
        "$(grep -E '^ +optimized' "$D/run.log" | awk '{print $2, $4, $NF}')" \
        "$(grep -oE 'same bytes, timed the same way: [0-9.]+' \
          "$D/run_${g//,/_}_$(basename "$f" .json)/report.md" | head -1 | awk '{print $NF}')" |
        tee -a "$D/sweep.txt"
    done
  done
  return $rc
}
# A geometry sweep: for each geometry of $2 (`heuristic`: the variable unset), `replay run` of each
# trace with the variable $1 set to it, cold, baseline and optimized, numerics checked (no reference
# budget); per geometry and trace the variants' medians, the CUPTI sum (µs) of the kernels whose
# names hold $3, and the numerics verdicts -> $D/sweep.txt, a log per run beside its folder.
geometry_sweep() {  # VAR GEOMETRIES KERNEL_SUBSTRING TRACE...
  local var=$1 geoms=$2 kernel=$3 rc=0 g f out
  shift 3
  for g in $geoms; do
    for f in "$@"; do
      out=$D/run_${g//,/_}_$(basename "$f" .json)
      if [ "$g" = heuristic ]; then
        env -u "$var" timeout 120 "$R" run "$f" --modes cold --variants baseline,optimized \
          --reference-budget 0 --no-matmul-ceilings --no-repro --out "$out" > "$out.log" 2>&1 || rc=$?
      else
        env "$var=$g" timeout 120 "$R" run "$f" --modes cold --variants baseline,optimized \
          --reference-budget 0 --no-matmul-ceilings --no-repro --out "$out" > "$out.log" 2>&1 || rc=$?
      fi
      python3 - "$g" "$out/results.json" "$kernel" <<'PY' | tee -a "$D/sweep.txt"
import json, sys
g, path, kernel = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    t = json.load(open(path))["traces"][0]
except (OSError, ValueError, KeyError, IndexError) as e:
    print(f"{g:10s} {path}: no result ({e})")
    sys.exit(0)
for r in t["regions"]:
    if r["region"] != -1:
        continue
    cells = []
    for v in r["variants"]:
        if "stats" not in v:
            continue
        k_us = sum(k["total_us"] for k in v.get("cupti", {}).get("kernels", [])
                   if kernel in k["name"])
        # Which kernels of the kind ran, at what block and dynamic shared memory: a geometry
        # that did not take the rows shows here as the heuristic's kernel.
        ran = sorted({f"{k['name'].split('<')[0].split('::')[-1]}<<<{k['block'][0]}, {k['dynamic_smem']}>>>"
                      for k in v.get("cupti", {}).get("timeline", []) if kernel in k["name"]})
        cells.append(f"{v['variant']} {v['stats']['median_us']:8.1f} ({kernel} {k_us:6.1f}) "
                     f"{v.get('verdict', '?')}" + (f" [{' '.join(ran)}]" if ran else ""))
    print(f"{g:10s} {t['name'][:46]:46s} " + "  ".join(cells))
PY
    done
  done
  return $rc
}
phase_epifwd() {
  # matmul_epilogue forward geometry: REPLAY_EPILOGUE_GEOMETRY=VPT,TABLE_THREADS,RAW (kernels.cu)
  # over $EPIFWD_GEOMETRIES on the bfloat16 MLP forwards ($TRACES or the five below); the
  # heuristic's choice first. -> epifwd/sweep.txt
  local default_traces="traces/nanogpt_mlp_train_fwd_8x1024x1600.json
    traces/nanogpt_mlp_gelu_tanh_train_fwd_8x1024x1600.json
    traces/byog/linear/bert_intermediate_mincut_train_fwd_32x512x1024.json
    traces/byog/linear/gpt2_mlp_mincut_train_fwd_8x1024x1024.json
    traces/byog/linear/llama_mlp_mincut_train_fwd_1x8192x4096.json"
  # shellcheck disable=SC2046  # one trace per word
  geometry_sweep REPLAY_EPILOGUE_GEOMETRY \
    "${EPIFWD_GEOMETRIES:-heuristic 1,512,0 1,512,1 1,1024,0 2,1024,1 4,1024,1}" matmul_epilogue \
    $(traces_or echo $default_traces)
}
phase_ropegeo() {
  # rope fixed-form geometry: REPLAY_ROPE_GEOMETRY=PACKED,BLOCKS_PER_SM (kernels.cu) over
  # $ROPEGEO_GEOMETRIES on the all-bf16 rotate-half traces and litgpt's forward (float32 table:
  # no packed form, a control) ($TRACES or the seven below); the default first.
  # -> ropegeo/sweep.txt
  local default_traces="traces/byog/rope/llama_rope_table_mincut_train_fwd_1x8192x32x128.json
    traces/byog/rope/llama_rope_table_mincut_train_bwd_1x8192x32x128.json
    traces/byog/rope/phi3_rope_mincut_train_fwd_1x4096x40x128.json
    traces/byog/rope/phi3_rope_mincut_train_bwd_1x4096x40x128.json
    traces/byog/rope/gpt_neox_rope_mincut_train_fwd_2x2048x32x128.json
    traces/byog/rope/gpt_neox_rope_mincut_train_bwd_2x2048x32x128.json
    traces/litgpt_rope_train_fwd_2x4096x40x40x128.json"
  # shellcheck disable=SC2046  # one trace per word
  geometry_sweep REPLAY_ROPE_GEOMETRY "${ROPEGEO_GEOMETRIES:-heuristic 0,0 1,1 1,2 1,3}" \
    rope_fixed_kernel $(traces_or echo $default_traces)
}
phase_pwsum() {
  # pointwise column-sum form: REPLAY_POINTWISE_SUM_FORM=MIN_BLOCKS,SMEM (codegen.hpp) over
  # $PWSUM_FORMS on the backward chains with a fused bias gradient ($TRACES or the three below);
  # the default first. -> pwsum/sweep.txt
  local default_traces="traces/byog/linear/gpt2_mlp_default_train_bwd_8x1024x1024.json
    traces/byog/linear/gpt2_mlp_mincut_train_bwd_8x1024x1024.json
    traces/byog/linear/bert_intermediate_default_train_bwd_32x512x1024.json"
  # shellcheck disable=SC2046  # one trace per word
  geometry_sweep REPLAY_POINTWISE_SUM_FORM "${PWSUM_FORMS:-heuristic 8,0 0,1 8,1 4,0}" \
    replay_pointwise $(traces_or echo $default_traces)
}
phase_pwpairs() {
  # pointwise bfloat16 pair math (codegen.hpp, bf16_pairs) on and off (REPLAY_POINTWISE_PAIRS=0)
  # on the bfloat16 chains of $TRACES or the five below. -> pwpairs/sweep.txt
  local default_traces="traces/byog/linear/gpt2_mlp_default_train_bwd_8x1024x1024.json
    traces/byog/linear/gpt2_mlp_mincut_train_bwd_8x1024x1024.json
    traces/byog/linear/gpt2_mlp_mincut_train_fwd_8x1024x1024.json
    traces/byog/linear/gpt2_mlp_default_train_fwd_8x1024x1024.json
    traces/byog/linear/bert_intermediate_default_train_bwd_32x512x1024.json"
  # shellcheck disable=SC2046  # one trace per word
  geometry_sweep REPLAY_POINTWISE_PAIRS "${PWPAIRS_FORMS:-heuristic 0}" \
    replay_pointwise $(traces_or echo $default_traces)
}
phase_redsplit() {
  # eager column reduction: REPLAY_OUTER_MIN_ROWS (rows per thread a split keeps, kernels.cu)
  # over $REDSPLIT_ROWS, EagerKernelsBench.HotCases' reductions (the bias-gradient shapes).
  # -> redsplit/sweep.txt
  local m rc=0
  for m in ${REDSPLIT_ROWS:-8 16 32 64 128}; do
    echo "== REPLAY_OUTER_MIN_ROWS=$m" | tee -a "$D/sweep.txt"
    REPLAY_OUTER_MIN_ROWS=$m timeout 60 "$BUILD/tests/replay_gpu_tests" \
      --gtest_filter=EagerKernelsBench.HotCases 2>&1 | grep -E "bench.*(sum|copy)" | tee -a "$D/sweep.txt" || rc=$?
  done
  return $rc
}
phase_fp8rows() {
  # fp8_quantize's one-pass rowwise kernel: REPLAY_FP8_ROWWISE=THREADS,V (kernels.cu) over
  # $FP8ROWS_GEOMETRIES on torchao's rowwise forwards ($TRACES or the two below: x [8192, 4096],
  # W [4096, 4096]; x [8192, 14336], W [4096, 14336]); the heuristic first; a geometry that does not
  # hold a row falls back to the heuristic. -> fp8rows/sweep.txt
  local default_traces="traces/byog/float8/float8_rowwise_2d_default_train_fwd_8192x4096x4096.json
    traces/byog/float8/float8_rowwise_default_train_fwd_1x8192x14336x4096.json"
  # shellcheck disable=SC2046  # one trace per word
  geometry_sweep REPLAY_FP8_ROWWISE \
    "${FP8ROWS_GEOMETRIES:-heuristic 128,4 256,2 256,4 448,4 1024,4}" rowwise \
    $(traces_or echo $default_traces)
}
phase_normbwd_peers() {  # DIR holding anchors.py
  local peers=${1:?normbwd-peers=DIR} mix rc=0
  for mix in 0 1; do
    TORCHINDUCTOR_MIX_ORDER_REDUCTION=$mix TAG=_mix$mix OUT="$D" timeout 280 \
      python3 "$peers/anchors.py" normbwd > "$D/anchors_mix$mix.log" 2>&1 || rc=$?
    grep -E "mix_order|_bwd_" "$D/anchors_mix$mix.log" | head -10
  done
  return $rc
}
phase_ncu() {  # REGEX
  local regex=${1:?ncu=REGEX} f rc=0
  for f in $(traces_or echo traces/byog/rope/llama_rope_table_mincut_train_fwd_1x8192x32x128.json); do
    # One launch profiled (after 2 skipped: warm-up), the replay kept short; CUPTI off (ncu owns
    # the profiler interface).
    timeout 240 ncu --kernel-name "regex:$regex" --launch-skip 2 --launch-count "${NCU_COUNT:-1}" \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      --section LaunchStats --section WarpStateStats --section SchedulerStats \
      --section InstructionStats --section ComputeWorkloadAnalysis \
      "$R" run "$f" --variants optimized --modes cold --no-cupti --no-matmul-ceilings --reference-budget 0 \
      --min-samples 3 --max-time 0.2 --no-repro --out "$D/run_$(basename "$f" .json)" \
      > "$D/$(basename "$f" .json).txt" 2>&1 || rc=$?
    grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Theoretical Occ|Block Limit|L2 Hit|L1/TEX Hit|Warp Cycles Per Issued|No Eligible" \
      "$D/$(basename "$f" .json).txt" | head -$((30 * ${NCU_COUNT:-1}))
  done
  return $rc
}
phase_tp() {
  local rc=0 n
  export NCCL_NVLS_ENABLE=0
  gpu_tests "$D/gpu_tests.log" \
    'NcclOneRank*:SharedGpu*:WorldSize/*Pipeline*:*PipelineTimeout*' || rc=1
  if [ -x "$BUILD/tests/replay_multigpu_tests" ]; then  # skips, saying why, below 2 / 4 GPUs
    timeout 300 "$BUILD/tests/replay_multigpu_tests" > "$D/multigpu.log" 2>&1 || rc=1
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |needs [0-9]+ GPUs" "$D/multigpu.log" | head -8
  fi
  timeout 150 "$R" launch --nproc 1 --timeout 140 -- run traces/tp/ws1 --modes cold \
    --no-matmul-ceilings --out "$D/ws1" > "$D/ws1.log" 2>&1 || rc=1
  echo "ws1: $(tail -3 "$D/ws1.log")"
  for n in 2 4; do
    # shellcheck disable=SC2046  # the trace list
    timeout 200 "$R" launch --nproc $n --timeout 190 -- run $(ls traces/tp/*_ws${n}_*.json) \
      --modes cold --no-matmul-ceilings --rank-timeout 60 --out "$D/ws$n" > "$D/ws$n.log" 2>&1 ||
      rc=1
    echo "ws$n: $(tail -3 "$D/ws$n.log")"
  done
  # The captured per-rank graphs (traces/tp/captured, small shapes) at their world sizes, ranks
  # sharing the GPU: correctness only (few samples, no CUPTI: the timings mean nothing).
  # CAPTURED_WS picks the world sizes (default 2 4 8).
  for n in ${CAPTURED_WS:-2 4 8}; do
    # shellcheck disable=SC2046  # the trace list
    timeout "${CAPTURED_S:-240}" "$R" launch --nproc $n --timeout "${CAPTURED_S:-240}" -- run \
      $(ls traces/tp/captured/*_ws${n}_*_2x*.json) --modes cold --no-matmul-ceilings --no-cupti \
      --min-samples 3 --max-time 0.05 --rank-timeout 60 --out "$D/captured_ws$n" \
      > "$D/captured_ws$n.log" 2>&1 || rc=1
    echo "captured ws$n: $(grep -c ' — PASS' "$D/captured_ws$n/report.md" 2>/dev/null) traces pass," \
      "$(grep -c ' — \*\*FAIL' "$D/captured_ws$n/report.md" 2>/dev/null) fail; $(tail -1 "$D/captured_ws$n.log")"
  done
  return $rc
}
phase_tp_large() {  # PEERS: a folder holding tp_anchor.py
  local peers=${1:?tp-large=PEERS} rc=0 n t0 pid0 pid1 port=29611 i
  n=${TP_WS:-$(nvidia-smi -L | wc -l)}
  # NVLink multicast stays off (KINDS.md): NCCL, PyTorch's symmetric memory, NVSHMEM.
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  nvidia-smi topo -m > "$D/topo.txt" 2>&1
  cat "$D/topo.txt"
  # The reference of each trace (float64, every rank simulated) runs before its GPU replay: the
  # rank timeout covers it (a rank waits for the others' references at the replay decision).
  t0=$SECONDS
  # shellcheck disable=SC2046  # the trace list
  timeout "${LARGE_S:-420}" "$R" launch --nproc "$n" --timeout "${LARGE_S:-420}" -- run \
    $(ls traces/tp/large/*_ws"${n}"_*.json) --modes cold --reference-budget 0 --rank-timeout 240 \
    --out "$D/ws$n" > "$D/ws$n.log" 2>&1 || rc=1
  echo "large ws$n ($((SECONDS - t0)) s): $(grep -c ' — PASS' "$D/ws$n/report.md" 2>/dev/null) pass," \
    "$(grep -c ' — \*\*FAIL' "$D/ws$n/report.md" 2>/dev/null) fail; $(tail -2 "$D/ws$n.log")"
  # PyTorch in the same job: NCCL then mm, fused_all_gather_matmul, fused_matmul_reduce_scatter.
  t0=$SECONDS
  OUT="$D" timeout 300 torchrun --nproc-per-node "$n" "$peers/tp_anchor.py" > "$D/tp_anchor.log" 2>&1 ||
    rc=1
  echo "tp_anchor ($((SECONDS - t0)) s):"
  grep -E "^(ag_mm|mm_rs)_" "$D/tp_anchor.log"
  # srun-style variables (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID), no launcher process.
  local small small2 pids=()
  small=$(ls traces/tp/*_ws"${n}"_*.json)
  small2=$(ls traces/tp/*_ws2_*.json)  # the kill check runs 2 ranks
  for i in $(seq 0 $((n - 1))); do
    # shellcheck disable=SC2086  # the trace list
    SLURM_PROCID=$i SLURM_NTASKS=$n SLURM_LOCALID=$i MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 200 "$R" run $small --modes cold --no-matmul-ceilings --rank-timeout 60 \
      --out "$D/srun_ws$n" > "$D/srun_rank$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  echo "srun-style ws$n: $(grep -c ' — PASS' "$D/srun_ws$n/report.md" 2>/dev/null) pass; $(tail -1 "$D/srun_rank0.log")"
  # Rank 1 killed (SIGKILL) while the ranks time: rank 0 must end within its rank timeout (20 s),
  # exit 4, naming the rank. Long measurements (--noise 0) keep them timing when the kill comes.
  # shellcheck disable=SC2086
  SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 1)) \
    timeout 200 "$R" run $small2 --modes cold --no-matmul-ceilings --no-cupti --noise 0 \
    --max-time 20 --rank-timeout 20 --out "$D/killed_ws2" > "$D/killed_rank0.log" 2>&1 &
  pid0=$!
  # rank 1 without a `timeout` wrapper, so $! is the replay process itself (the one killed)
  # shellcheck disable=SC2086
  SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 1)) \
    "$R" run $small2 --modes cold --no-matmul-ceilings --no-cupti --noise 0 \
    --max-time 20 --rank-timeout 20 --out "$D/killed_ws2" > "$D/killed_rank1.log" 2>&1 &
  pid1=$!
  sleep "${KILL_AFTER_S:-15}"
  kill -9 "$pid1"
  t0=$SECONDS
  wait "$pid0"
  local code=$?
  echo "killed rank 1: rank 0 ended $((SECONDS - t0)) s after the kill, exit $code (want 4, <= ~25 s):"
  tail -3 "$D/killed_rank0.log"
  [ "$code" = 4 ] || rc=1
  wait
  return $rc
}
phase_bench() {
  "$BUILD/tests/replay_bench" --benchmark_out="$D/bench.json" --benchmark_out_format=json \
    > "$D/bench.txt" 2>&1
  local rc=$?
  tail -20 "$D/bench.txt"
  return $rc
}
phase_compare() {  # OTHER_REPLAY
  local other=${1:?compare=OTHER_REPLAY} t i
  mapfile -t t < <(traces_or small)
  for i in $(seq 1 "${COMPARE_ROUNDS:-2}"); do
    # shellcheck disable=SC2086
    "$other" run "${t[@]}" ${RUN_ARGS:-} --out "$D/before_$i" > "$D/before_$i.log" 2>&1
    echo "round $i: $other rc=$?"
    # shellcheck disable=SC2086
    "$R" run "${t[@]}" ${RUN_ARGS:-} --out "$D/after_$i" > "$D/after_$i.log" 2>&1
    echo "round $i: $R rc=$?"
  done
  local files=()
  for i in $(seq 1 "${COMPARE_ROUNDS:-2}"); do
    files+=("$D/before_$i/results.json" "$D/after_$i/results.json")
  done
  python3 scripts/medians.py "${files[@]}" | tee "$D/medians.txt"
}
phase_knobs() {  # "VAR=VALUE ...": those settings (A) against the defaults (B), alternated
  local knobs=${1:-} t i k st rc=0 files=() f unset_b=()
  for k in $knobs; do  # only VAR=VALUE words: anything else would be run by env as a command
    [[ $k =~ ^[A-Z_][A-Z0-9_]*=.*$ ]] || { echo "knobs: '$k' is not VAR=VALUE" >&2; return 2; }
    unset_b+=(-u "${k%%=*}")  # B runs with these unset: the defaults, whatever the caller exported
  done
  ((${#unset_b[@]})) || { echo 'knobs: usage knobs="VAR=VALUE ..."' >&2; return 2; }
  mapfile -t t < <(traces_or small)
  for i in $(seq 1 "${COMPARE_ROUNDS:-2}"); do
    # shellcheck disable=SC2086
    env $knobs "$R" run "${t[@]}" ${RUN_ARGS:-} --out "$D/A_$i" > "$D/A_$i.log" 2>&1
    st=$?
    echo "round $i: A ($knobs) rc=$st"
    ((st == 0)) || rc=1
    # shellcheck disable=SC2086
    env "${unset_b[@]}" "$R" run "${t[@]}" ${RUN_ARGS:-} --out "$D/B_$i" > "$D/B_$i.log" 2>&1
    st=$?
    echo "round $i: B (defaults) rc=$st"
    ((st == 0)) || rc=1
    files+=("$D/A_$i/results.json" "$D/B_$i/results.json")
  done
  echo "columns: run 1 = A, run 2 = B, alternating" | tee "$D/medians.txt"
  python3 scripts/medians.py "${files[@]}" | tee -a "$D/medians.txt"
  ((PIPESTATUS[0] == 0)) || rc=1
  for f in "${files[@]}"; do [ -f "$f" ] && gzip -9f "$f"; done
  return $rc
}
phase_capture() {
  mkdir -p "$D/cap"
  # shellcheck disable=SC2086
  timeout 400 python3 traces/capture/capture.py --out "$D/cap" ${CAPTURE_ARGS:-} > "$D/capture.log" 2>&1
  local rc=$?
  tail -5 "$D/capture.log"
  "$R" validate "$D"/cap/*.json | tail -20
  local f
  for f in "$D"/cap/*.json; do
    echo "$(basename "$f"): $("$R" plan "$f" | grep -c '"fusion"') region(s)"
  done
  (cd "$D" && tar czf captured.tgz cap && rm -rf cap)
  return $rc
}

phase_tour() {  # README's 5-minute tour, command by command, as a newcomer runs it
  local T=$D/tour rc=0 f
  mkdir -p "$T"
  # 1. capture a training script of one's own through the backend (both partitioners)
  timeout 240 python3 traces/capture/capture_script.py --out "$T/my_traces" --golden -- \
    traces/capture/examples/train_tiny.py --graph-break > "$T/capture.log" 2>&1 || rc=1
  tail -4 "$T/capture.log"
  "$R" validate "$T/my_traces" > "$T/validate.log" 2>&1 || rc=1
  tail -3 "$T/validate.log"
  for f in "$T"/my_traces/*.json; do
    "$R" plan "$f" > "$T/plan_$(basename "$f")" 2>&1 || rc=1
    python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
print(j["trace"], [r["fusion"] for r in j["regions"]], len(j["declined"]), "declined")' \
      "$T/plan_$(basename "$f")"
  done
  # 2. replay it; 3. the report; 4. gate a change (a run against itself: SAME); 5. a reproducer
  "$R" run "$T/my_traces" --out "$T/mine" > "$T/run.log" 2>&1 || rc=1
  tail -3 "$T/run.log"
  ls "$T/mine"
  "$R" compare "$T/mine/results.json" "$T/mine/results.json" > "$T/compare.log" 2>&1 || rc=1
  tail -2 "$T/compare.log"
  f=$(python3 -c 'import json, sys
for p in sys.argv[1:]:
    if json.load(open(p))["regions"]:
        print(p.rsplit("/plan_", 1)[1]); break' "$T"/plan_*.json)
  if [ -n "$f" ]; then
    "$R" repro "$T/my_traces/$f" --region 0 --variant optimized --out "$T/bundle" \
      > "$T/repro.log" 2>&1 || rc=1
    (cd "$T/bundle" && python3 repro.py) > "$T/repro_py.log" 2>&1 || rc=1
    tail -2 "$T/repro_py.log"
  fi
  (cd "$D" && tar czf tour.tgz --exclude='*.safetensors' tour && rm -rf tour)
  return $rc
}

status=0
for p in "$@"; do
  name=${p%%=*}
  arg=""
  [ "$name" != "$p" ] && arg=${p#*=}
  fn=phase_${name//-/_}
  if ! declare -F "$fn" > /dev/null; then
    echo "device.sh: unknown phase '$name' (see the header of scripts/device.sh)" >&2
    [ "$status" -eq 0 ] && status=2
    continue
  fi
  D=$OUT/$name${arg:+-${arg//\//-}}
  [[ $name = compare || $name = knobs || $name = normbwd-peers || $name = tp-large ]] && D=$OUT/$name
  mkdir -p "$D"
  echo "== $p"
  t0=$SECONDS
  if [ -n "$arg" ]; then "$fn" "$arg"; else "$fn"; fi
  rc=$?
  echo "== $p: rc=$rc, $((SECONDS - t0)) s"
  [ "$status" -eq 0 ] && status=$rc
done
exit "$status"
