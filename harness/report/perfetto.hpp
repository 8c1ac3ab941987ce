// Chrome / Perfetto trace JSON of a run's CUPTI timelines (the Trace Event Format, which
// ui.perfetto.dev and chrome://tracing open): what ran on the GPU for every region and variant.
#pragma once

#include <nlohmann/json.hpp>

#include "harness/report/results.hpp"

namespace replay {

/// Gap between two consecutive region replays on the trace's time axis, µs.
inline constexpr double kPerfettoReplayGapUs = 20.0;
/// A multi-process run's rank r > 0 of trace i (0-based) is process kPerfettoRankPidBase * (i + 1)
/// + r; rank 0 keeps the trace's pid i + 1.
inline constexpr int kPerfettoRankPidBase = 10000;

/// The run as a Trace Event Format document ({"traceEvents": [...], "displayTimeUnit": "ns",
/// "otherData": {...}}; format: the "Trace Event Format" document of the Chromium project).
/// One process per trace (pid = its index + 1, named by the trace); in a multi-process run
/// (VariantResult::rank_cupti) one per rank, named "<trace> · rank <r>", each with that rank's
/// timelines. Per variant one track of
/// region slices (name = the row's label, args: median µs, % SOL, verdict, kernel sum and span
/// µs) and one track per CUDA stream of its kernels (args: grid, block, registers per thread,
/// static and dynamic shared memory bytes). Each (row, variant) has its own CUPTI replay, so the
/// replays are laid out one after another, kPerfettoReplayGapUs apart, in the order of the
/// results; kernel times inside a replay are CUPTI's, relative to the replay's first kernel. Rows
/// without a CUPTI timeline add nothing. Times are µs (the format's unit).
nlohmann::json perfetto_trace(const RunResult& run);

}  // namespace replay
