// Input errors of the IR layer. Library code throws; the CLI decides the exit code
// (harness/cli/exit_codes.hpp).
#pragma once

#include <stdexcept>
#include <string>

namespace replay {

/// A trace (or a file it refers to) that cannot be loaded: names the file, the node id (if any)
/// and what was expected, e.g. `traces/x.json: node 'sub': recorded output shape [2, 8, 1599]
/// disagrees with the inputs: ...`. The CLI maps it to exit code 2 (bad input).
class TraceError : public std::runtime_error {
 public:
  TraceError(std::string file, std::string node, const std::string& what)
      : std::runtime_error(format(file, node, what)),
        file_(std::move(file)),
        node_(std::move(node)),
        detail_(what) {}
  const std::string& file() const { return file_; }
  const std::string& node() const { return node_; }
  /// What was wrong, without the file and node (to rethrow with the file where it is known).
  const std::string& detail() const { return detail_; }

 private:
  static std::string format(const std::string& file, const std::string& node,
                            const std::string& what) {
    std::string s = file;
    if (!node.empty()) s += ": node '" + node + "'";
    return s + ": " + what;
  }
  std::string file_, node_, detail_;
};

}  // namespace replay
