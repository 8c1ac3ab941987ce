// Core ATen IR coverage: how many of PyTorch's Core ATen overloads (the ops tagged torch.Tag.core,
// listed in tests/data/core_aten_ops.txt by traces/capture/core_aten.py and embedded at build
// time) the op table has a row for. `replay list` prints it.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "workloads/ops/op.hpp"

namespace replay {

struct CoreAtenCoverage {
  int covered = 0;                   ///< overloads of the list with an op row
  int total = 0;                     ///< overloads in the list
  std::vector<std::string> missing;  ///< the list's overloads without a row, in list order
  std::string source;                ///< the list's first comment line (PyTorch version, count)
};

/// Coverage of the list `text` (one ATen overload per line, e.g. "aten.add.Tensor"; lines
/// starting with '#' and blank lines are skipped) by `ops`. Throws std::invalid_argument for a
/// line that is not of the form namespace.op.overload, or a name listed twice.
CoreAtenCoverage core_aten_coverage(std::string_view text, std::span<const OpDef* const> ops);

/// The embedded list (tests/data/core_aten_ops.txt at build time) against the op table.
CoreAtenCoverage core_aten_coverage();

}  // namespace replay
