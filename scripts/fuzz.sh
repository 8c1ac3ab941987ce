#!/usr/bin/env bash
# Fuzz the trace loader: configures and builds the libFuzzer target replay_fuzz_loader (CMake
# option REPLAY_FUZZ: clang, ASan + UBSan) in BUILD_DIR and runs it for a fixed budget on a fresh
# corpus folder in BUILD_DIR, seeded with copies of traces/*.json and tests/data/**/*.json (plus
# small variants, see below), with tests/fuzz/trace.dict. Exits non-zero on any crash, escaping
# exception, leak, timeout, out-of-memory or sanitizer report; the reproducer is left in
# BUILD_DIR/fuzz-artifacts/ (rerun it: BUILD_DIR/replay_fuzz_loader FILE). Nothing in the repo is
# touched but build/'s replay_impls, brought up to date when build/ exists (see below).
# Installs clang, libclang-rt-14-dev (libFuzzer, sanitizer runtimes) and jq with apt-get when they
# are missing and apt-get is there; the project's other build dependencies come from setup.sh.
# Usage: bash scripts/fuzz.sh BUILD_DIR SECONDS|-runs=N [more libFuzzer flags]
# Takes: the fuzzing budget given (CI: 60 s) plus the first build of BUILD_DIR (minutes on 2 cores;
# the CUDA kernels are not compiled again when build/ holds them, see below).
set -euo pipefail

usage() {
  echo "usage: $0 BUILD_DIR SECONDS|-runs=N [libFuzzer flags]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
mkdir -p "$1"
build=$(cd "$1" && pwd)  # resolved before the cd below, so it may be relative to the caller
budget=$2
shift 2
case "$budget" in
  -runs=[0-9]*) limit=("$budget") ;;
  [0-9]*) limit=(-max_total_time="$budget") ;;
  *) usage ;;
esac
[[ "${limit[0]#*=}" =~ ^[0-9]+$ ]] || usage
cd "$(dirname "$0")/.."
repo=$(pwd)
source scripts/common.sh


# A compiler that can link a fuzzer with both sanitizers: clang alone is not enough on Debian, the
# runtimes are in libclang-rt-14-dev, which clang only recommends.
cxx=""
can_fuzz() {
  local c
  for c in clang++ clang++-14; do
    command -v "$c" >/dev/null 2>&1 || continue
    if printf 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }\n' |
      "$c" -x c++ -fsanitize=fuzzer,address,undefined -o "$build/.fuzz_probe" - 2>/dev/null; then
      cxx=$(command -v "$c")
      return 0
    fi
  done
  return 1
}
missing=()
can_fuzz || missing+=(clang libclang-rt-14-dev)
command -v jq >/dev/null 2>&1 || missing+=(jq)
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz: installing ${missing[*]}"
  apt_install "${missing[@]}" || echo "fuzz: apt-get could not install ${missing[*]}" >&2
fi
[ -n "$cxx" ] || can_fuzz || {
  echo "fuzz: no clang++ that links -fsanitize=fuzzer,address,undefined (install clang and" \
    "libclang-rt-14-dev)" >&2
  exit 1
}

find_nvcc || true  # the libraries have CUDA sources; CMake names nvcc if it is missing

# The CXX compiler of a build folder is fixed at its first configure; nvcc keeps its own default
# host compiler (g++) for the CUDA sources either way, since CMake passes no -ccbin unless
# CMAKE_CUDA_HOST_COMPILER / CUDAHOSTCXX is set.
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
# The fuzzed path runs no CUDA code: when the main build folder build/ exists (CI builds it first),
# bring its replay_impls up to date and link its CUDA objects instead of compiling the kernels a
# second time (CMakeLists.txt, REPLAY_FUZZ_CUDA_OBJECTS_FROM); without it they are compiled here.
cuda_from=(-DREPLAY_FUZZ_CUDA_OBJECTS_FROM=)  # (a cache variable: cleared unless set below)
if [ -f "$repo/build/CMakeCache.txt" ] && [ "$(realpath "$build")" != "$(realpath "$repo/build")" ]; then
  if cmake --build "$repo/build" --target replay_impls -j "$(nproc 2>/dev/null || echo 2)"; then
    cuda_from=(-DREPLAY_FUZZ_CUDA_OBJECTS_FROM="$repo/build")
  else
    echo "fuzz: build/ did not build its replay_impls: compiling the CUDA sources in $build" >&2
  fi
fi
cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" -DREPLAY_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cuda_from[@]}"
cmake --build "$build" --target replay_fuzz_loader -j "$(nproc 2>/dev/null || echo 2)"

# Fresh corpus each run, so a budget always starts from the same seeds: copies of the bundled
# traces, and variants made with jq. The traces are far above the fuzz target's size limit for
# planning and the reference (and two name a golden file, which it skips), and a mutation can
# hardly shrink every shape consistently or swap an op name for one of another length; so each
# trace also gets a shrunk copy (every dim above 4 cut to 4, which keeps the traces' broadcasts
# consistent; strides dropped, i.e. contiguous; golden removed) and, from that, one copy per op
# swapped in for rsqrt / mul / mean.dim and one per view op appended after the last node. All of
# these load, and they reach every op's reference from the first execution.
shrink='del(.golden) | walk(if type == "object" and (.shape | type) == "array"
  then (.shape |= map(if type == "number" and . > 4 then 4 else . end) | del(.stride)) else . end)'
variants='
def swap($from; $to):
  select(any(.nodes[]; .op == $from)) | .nodes |= map(if .op == $from then .op = $to else . end);
def swaps:
  (("aten.sqrt.default", "aten.neg.default", "aten.abs.default", "aten.exp.default",
    "aten.reciprocal.default", "aten.clone.default") as $to | swap("aten.rsqrt.default"; $to)),
  (("aten.add.Tensor", "aten.sub.Tensor", "aten.div.Tensor") as $to | swap("aten.mul.Tensor"; $to)),
  (("aten.sum.dim_IntList", "aten.amax.default") as $to | swap("aten.mean.dim"; $to));
def views:
  ([.nodes[] | select(.op != "getitem" and (.outputs | length) == 1)] | last) as $x
  | select($x != null)
  | ($x.outputs[0].shape) as $s
  | ([reduce $s[] as $d (1; . * $d)]) as $flat
  | (["aten.view.default", [[-1]], $flat], ["aten._unsafe_view.default", [[-1]], $flat],
     ["aten.reshape.default", [[-1]], $flat],
     ["aten.permute.default", [[range($s | length)] | reverse], ($s | reverse)],
     ["aten.unsqueeze.default", [0], ([1] + $s)],
     ["aten.expand.default", [[2] + $s], ([2] + $s)]) as [$op, $args, $shape]
  | .nodes += [{"id": "fz_view", "op": $op, "args": ([{"ref": $x.id}] + $args),
                "outputs": [{"shape": $shape, "dtype": $x.outputs[0].dtype}]}]
  | .outputs += ["fz_view"];
swaps, views'
corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
rm -rf "$corpus"
mkdir -p "$corpus" "$artifacts"
seeds=(traces/*.json)
# (tests/data/opcorpus holds op-corpus files, not traces: the loader never reads them as such)
while IFS= read -r f; do seeds+=("$f"); done < <(find tests/data -name '*.json' -not -path '*/opcorpus/*' | LC_ALL=C sort)
for f in "${seeds[@]}"; do
  cp "$f" "$corpus/$(printf '%s' "${f%.json}" | tr / _).json"  # tests/data/bad/x.json and others
done
if command -v jq >/dev/null 2>&1; then
  for f in "${seeds[@]}"; do
    small="$corpus/small_$(printf '%s' "${f%.json}" | tr / _)"
    jq -c "$shrink" "$f" >"$small.json" 2>/dev/null || { rm -f "$small.json"; continue; }
    i=0
    { jq -c "$variants" "$small.json" 2>/dev/null || true; } | while IFS= read -r line; do
      i=$((i + 1))
      printf '%s\n' "$line" >"${small}_v$i.json"
    done
  done
else
  echo "fuzz: jq not found: seeding with the bundled traces only" >&2
fi
echo "fuzz: $(find "$corpus" -type f | wc -l) seeds in $corpus"

# halt_on_error/print_stacktrace: UBSan stops at the first report and says where; ASan and LSan
# stop by default. libFuzzer itself turns crashes, leaks, timeouts and OOMs into a non-zero exit.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
log="$build/fuzz.log"
echo "fuzz: $build/replay_fuzz_loader ${limit[*]} on $corpus (log: $log)"
set +e
(cd "$build" && ./replay_fuzz_loader -dict="$repo/tests/fuzz/trace.dict" "${limit[@]}" \
  -timeout=30 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$@" "$corpus") 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
# A report that did not stop the run (a sanitizer option overridden by the caller) fails it too.
if [ "$rc" -eq 0 ] && grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
  rc=1
fi
if [ "$rc" -ne 0 ]; then
  echo "fuzz: FAILED (exit $rc); reproducer(s) in $artifacts:" >&2
  ls -1 "$artifacts" >&2 || true
  exit 1
fi
echo "fuzz: passed"
