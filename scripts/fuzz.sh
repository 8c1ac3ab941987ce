#!/usr/bin/env bash
# Fuzz the trace loader: configures and builds the libFuzzer target replay_fuzz_loader (CMake
# option REPLAY_FUZZ: clang, ASan + UBSan) in BUILD_DIR and runs it for a fixed budget on a fresh
# corpus folder in BUILD_DIR, seeded with copies of traces/*.json and tests/data/*.json (plus
# shrunk copies, see below), with tests/fuzz/trace.dict. Exits non-zero on any crash, escaping
# exception, leak, timeout, out-of-memory or sanitizer report; the reproducer is left in
# BUILD_DIR/fuzz-artifacts/ (rerun it: BUILD_DIR/replay_fuzz_loader FILE). The repo is not touched.
# Installs clang, libclang-rt-14-dev (libFuzzer, sanitizer runtimes) and jq with apt-get when they
# are missing and apt-get is there; the project's other build dependencies come from setup.sh.
# Usage: bash scripts/fuzz.sh BUILD_DIR SECONDS|-runs=N [more libFuzzer flags]
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

apt_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

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

if ! command -v nvcc >/dev/null 2>&1; then  # as setup.sh: the libraries have CUDA sources
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do
    [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
  done
fi

# The CXX compiler of a build folder is fixed at its first configure; nvcc keeps its own default
# host compiler (g++) for the CUDA sources either way, since CMake passes no -ccbin unless
# CMAKE_CUDA_HOST_COMPILER / CUDAHOSTCXX is set.
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" -DREPLAY_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" --target replay_fuzz_loader -j "$(nproc 2>/dev/null || echo 2)"

# Fresh corpus each run, so a budget always starts from the same seeds. The bundled traces are
# far above the fuzz target's size limit for the reference (and two name a golden file, which it
# skips), so shrunk copies are added too: every dim above 4 cut to 4 (the traces broadcast a
# trailing dim, so that stays consistent), strides dropped (contiguous) and golden removed, which
# lets mutations reach planning and the reference from the first execution.
corpus="$build/fuzz-corpus"
artifacts="$build/fuzz-artifacts"
rm -rf "$corpus"
mkdir -p "$corpus" "$artifacts"
cp traces/*.json tests/data/*.json "$corpus/"
if command -v jq >/dev/null 2>&1; then
  for f in traces/*.json tests/data/*.json; do
    jq -c 'del(.golden) | walk(if type == "object" and (.shape | type) == "array"
             then (.shape |= map(if type == "number" and . > 4 then 4 else . end) | del(.stride))
             else . end)' "$f" >"$corpus/small_$(basename "$f")" 2>/dev/null ||
      rm -f "$corpus/small_$(basename "$f")"
  done
else
  echo "fuzz: jq not found: seeding with the bundled traces only" >&2
fi

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
