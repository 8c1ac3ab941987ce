// CUPTI activity tracing of one replay: which kernels ran, how often, for how long, and the span
// from the first kernel start to the last kernel end (span - sum = launch gaps).
#pragma once

#include <functional>

#include "harness/results.hpp"

namespace replay {

/// Run `fn` (which enqueues and synchronizes GPU work) twice with CUPTI concurrent-kernel activity
/// recording on, and summarize the second run's kernel records by demangled name. Never throws for
/// CUPTI failures: they are reported in CuptiSummary::error.
CuptiSummary trace_kernels(const std::function<void()>& fn);

}  // namespace replay
