#!/usr/bin/env bash
# Run every capture tool on a GPU host, each with its own log, going on after a failure:
#   bash traces/capture/run_all.sh OUTDIR
# writes OUTDIR/traces/ (capture.py), OUTDIR/opcorpus/ (opcorpus.py), OUTDIR/peers.json
# (torch_replay.py --compile over OUTDIR/traces/*.json) and OUTDIR/{capture,opcorpus,torch_replay}.log.
# Exit status: 0 when all three succeeded, 1 otherwise. Extra arguments for capture.py can be given
# in CAPTURE_ARGS (e.g. CAPTURE_ARGS=--small), for torch_replay.py in REPLAY_ARGS (e.g. "--reps 50").
set -u
OUT=${1:?usage: bash traces/capture/run_all.sh OUTDIR}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

step() {  # step NAME LOG CMD...: run CMD, tee its output to LOG, remember its exit status
  local name=$1 log=$2
  shift 2
  echo "=== $name: $*" | tee "$log"
  local t0=$SECONDS
  "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$log"
  return "$rc"
}

step capture "$OUT/capture.log" "$PY" "$HERE/capture.py" --out "$OUT/traces" ${CAPTURE_ARGS:-}
rc_capture=$?
step opcorpus "$OUT/opcorpus.log" "$PY" "$HERE/opcorpus.py" --out "$OUT/opcorpus"
rc_opcorpus=$?

shopt -s nullglob
traces=("$OUT"/traces/*.json)
if ((${#traces[@]})); then
  step torch_replay "$OUT/torch_replay.log" "$PY" "$HERE/torch_replay.py" "${traces[@]}" --compile \
    --out "$OUT/peers.json" ${REPLAY_ARGS:-}
  rc_replay=$?
else
  echo "=== torch_replay: no traces in $OUT/traces, not run" | tee "$OUT/torch_replay.log"
  rc_replay=1
fi

echo
echo "=== summary ($OUT)"
printf '  %-13s exit %s  (%s)\n' capture "$rc_capture" "$OUT/capture.log" \
  opcorpus "$rc_opcorpus" "$OUT/opcorpus.log" torch_replay "$rc_replay" "$OUT/torch_replay.log"
echo "  traces: ${#traces[@]} json files in $OUT/traces"
grep -E '^(FAILED|[0-9]+ FAILED|  FAILED)' "$OUT/capture.log" "$OUT/opcorpus.log" 2>/dev/null | head -40
grep -E 'traces ok|failed:' "$OUT/torch_replay.log" 2>/dev/null | tail -3
if ((rc_capture || rc_opcorpus || rc_replay)); then
  echo "=== something failed (see the logs above)"
  exit 1
fi
echo "=== all succeeded"
exit 0
