// Process exit codes of the `replay` CLI (documented in README.md). Library code throws or records
// errors in the results; main() maps them to these.
#pragma once

#include "harness/report/results.hpp"

namespace replay {

enum ExitCode : int {
  kExitOk = 0,
  kExitNumerics = 1,  ///< a numerics check failed (GPU vs reference, or reference vs golden)
  kExitBadInput = 2,  ///< malformed/inconsistent trace, unknown op or dtype, missing file, bad CLI
  kExitNoDevice = 3,  ///< GPU variants were asked for explicitly and no CUDA device is present
  kExitRuntime = 4,   ///< a CUDA / CUPTI / runtime failure while replaying
};

/// The exit code of a run. When several apply, the first of 1, 4, 2, 3 wins: a wrong result is the
/// finding a CI gate must never lose, so a numerics failure is never hidden by bad input or a
/// runtime failure elsewhere in the suite; a crash outranks bad input; "no device" is the least
/// specific. `gpu_failed`: the device could not be used or its context was lost;
/// `no_device_for_named_variants`: GPU variants were named on a machine without one.
inline int exit_code(const RunResult& run, bool gpu_failed, bool no_device_for_named_variants) {
  if (run.verdict() == Verdict::kFail) return kExitNumerics;
  bool runtime = gpu_failed, bad = false;
  for (const auto& t : run.traces) {
    runtime |= t.error_kind == TraceResult::Error::kRuntime;
    bad |= t.error_kind == TraceResult::Error::kBadInput;
  }
  if (runtime) return kExitRuntime;
  if (bad) return kExitBadInput;
  if (no_device_for_named_variants) return kExitNoDevice;
  return kExitOk;
}

}  // namespace replay
