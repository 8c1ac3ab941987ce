// Process exit codes of the `replay` CLI (documented in README.md). Library code throws; main()
// maps errors to these.
#pragma once

namespace replay {

enum ExitCode : int {
  kExitOk = 0,
  kExitNumerics = 1,  ///< a numerics check failed (GPU vs reference, or reference vs golden)
  kExitBadInput = 2,  ///< malformed/inconsistent trace, unknown op or dtype, missing file, bad CLI
  kExitNoDevice = 3,  ///< GPU variants were asked for explicitly and no CUDA device is present
  kExitRuntime = 4,   ///< a CUDA / CUPTI / runtime failure while replaying
};

}  // namespace replay
