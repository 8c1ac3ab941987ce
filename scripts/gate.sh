#!/usr/bin/env bash
# The CI performance gate on a GPU host: run the gate's traces and compare with the committed
# baseline of this GPU kind.
#   bash scripts/gate.sh [--update] [--out DIR] [--threshold PCT] [TRACE...]
# Baseline: reports/baselines/<kind>/results.json.gz (gzip: the raw samples), <kind> from the
# GPU's name (h100, h100-pcie, h200, gh200, ...; GATE_KIND overrides). Traces: the ones given, else the files the baseline measured (so the gate
# runs what the baseline ran). Runs `replay run --modes cold,graph` (compare judges the cold times,
# and a launch-bound row's CUDA-graph times) into DIR (default reports/gate), then
# `replay compare BASELINE DIR/results.json --threshold PCT` (default 5) into DIR/compare.md.
# Exit status: compare's (0 pass; 1 a SLOWER beyond the threshold, a numerics regression, or a
# baseline row missing or untimed in the run; 2 a baseline of another GPU model), or run's when
# the run itself failed (2 bad input, 3 no GPU, 4 runtime). --update: after a run that passed its numerics, copy DIR/results.json over the
# baseline (commit it with a note of why).
# Takes what the baseline's traces take: the h100 gate set (41 traces) ran in 104 s on an H100.
# The rules of compare and the gate: harness/report/COMPARE.md.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
out=reports/gate
threshold=5
update=0
traces=()
while (($#)); do
  case $1 in
    --update) update=1 ;;
    --out) out=$2; shift ;;
    --threshold) threshold=$2; shift ;;
    *) traces+=("$1") ;;
  esac
  shift
done
[ -x "$BUILD/replay" ] || { echo "error: no $BUILD/replay (bash scripts/setup.sh builds it)" >&2; exit 2; }
if [ -z "${GATE_KIND:-}" ]; then
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  [ -n "$name" ] || { echo "error: no GPU (nvidia-smi found none); the gate needs one" >&2; exit 3; }
  # "NVIDIA H100 80GB HBM3" -> h100, "NVIDIA H100 PCIe" -> h100-pcie, "NVIDIA H100 NVL" ->
  # h100-nvl, "NVIDIA GH200 480GB" -> gh200, "NVIDIA H200" -> h200. compare also refuses a
  # baseline whose recorded device name differs from this GPU's.
  lower=$(echo "$name" | tr 'A-Z' 'a-z')
  GATE_KIND=$(echo "$lower" | grep -oE '\b(gh|gb|[a-z])[0-9]{2,4}' | head -1)
  [ -n "$GATE_KIND" ] || { echo "error: cannot tell the GPU kind of '$name'; set GATE_KIND" >&2; exit 2; }
  case $lower in
    *pcie*) GATE_KIND=$GATE_KIND-pcie ;;
    *nvl*) GATE_KIND=$GATE_KIND-nvl ;;
  esac
fi
baseline=reports/baselines/$GATE_KIND/results.json.gz
if [ ! -f "$baseline" ] && [ "$update" = 0 ]; then
  echo "error: no baseline for GPU kind '$GATE_KIND' ($baseline); create one with --update" >&2
  exit 2
fi
if ((${#traces[@]} == 0)); then
  [ -f "$baseline" ] || { echo "error: --update without a baseline needs TRACE arguments" >&2; exit 2; }
  mapfile -t traces < <(gzip -dc "$baseline" | python3 -c 'import json,sys; [print(t["file"]) for t in json.load(sys.stdin)["traces"]]')
fi
"$BUILD/replay" run "${traces[@]}" --modes cold,graph --out "$out"
rc=$?
if ((rc != 0)); then
  echo "gate: replay run exited $rc (see $out/report.md)" >&2
  exit $rc
fi
if [ "$update" = 1 ]; then
  mkdir -p "$(dirname "$baseline")"
  gzip -9c "$out/results.json" > "$baseline"
  echo "gate: baseline $baseline updated"
  exit 0
fi
gzip -dc "$baseline" > "$out/baseline.json"
"$BUILD/replay" compare "$out/baseline.json" "$out/results.json" --threshold "$threshold" --out "$out/compare.md"
rc=$?
echo "gate: compare against $baseline exited $rc (table in $out/compare.md)"
exit $rc
