// Errors and exit codes. Library code throws; `main` decides the exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace replay {

/// Process exit codes of the `replay` CLI (documented in README.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitNumerics = 1,  ///< a numerics check failed (GPU vs reference, or reference vs golden)
  kExitBadInput = 2,  ///< malformed/inconsistent trace, unknown op or dtype, missing file, bad CLI
  kExitNoDevice = 3,  ///< GPU variants were asked for explicitly and no CUDA device is present
  kExitRuntime = 4,   ///< a CUDA / CUPTI / runtime failure while replaying
};

/// A trace that cannot be loaded: names the file, the node id (if any) and what was expected.
/// Maps to exit code 2.
class TraceError : public std::runtime_error {
 public:
  TraceError(std::string file, std::string node, const std::string& what)
      : std::runtime_error(format(file, node, what)),
        file_(std::move(file)),
        node_(std::move(node)) {}
  const std::string& file() const { return file_; }
  const std::string& node() const { return node_; }

 private:
  static std::string format(const std::string& file, const std::string& node,
                            const std::string& what) {
    std::string s = file;
    if (!node.empty()) s += ": node '" + node + "'";
    return s + ": " + what;
  }
  std::string file_, node_;
};

/// A failure of the device runtime (CUDA, CUPTI). Maps to exit code 4.
class RuntimeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace replay
