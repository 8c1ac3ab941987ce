// Markdown report (CI summaries): per trace and region, time per variant, speedup vs baseline,
// % SOL, host enqueue time, numerics, CUPTI summary. Reads RunResult only.
#pragma once

#include <string>

#include "harness/report/results.hpp"
#include "harness/report/table.hpp"

namespace replay {

std::string render_markdown(const RunResult& r);

/// One variant's row of a region's table (report.md, report.html).
struct VariantRow {
  const RegionResult* region;
  const VariantResult* v;
  const Ceilings* ceilings;
};
/// The columns of that table (median, CI and stop reason, % SOL, speedup vs baseline, hot, CUDA
/// graph and host enqueue µs, numerics, CUPTI), declared once for both reports; cells may hold
/// Markdown emphasis (**FAIL**, `name`).
const std::vector<Column<VariantRow>>& variant_columns();

}  // namespace replay
