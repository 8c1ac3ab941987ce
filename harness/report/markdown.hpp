// Markdown report (CI summaries): per trace and region, time per variant, speedup vs baseline,
// % SOL, host enqueue time, numerics, CUPTI summary. Reads RunResult only.
#pragma once

#include <string>

#include "harness/report/results.hpp"

namespace replay {

std::string render_markdown(const RunResult& r);

}  // namespace replay
