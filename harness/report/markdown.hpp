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

/// The communication-overlap table of a region that communicates (RegionResult::communicates),
/// one row per variant with a CUPTI timeline (overlap_rows): communication and computation time on
/// the timeline, the share of communication hidden (HTA), exposed communication, and against the
/// baseline's serial timeline E, Flux's effective communication time and the baseline's busbw
/// (harness/measure/timeline_overlap.hpp). Declared once for both reports.
const std::vector<Column<VariantRow>>& overlap_columns();
/// The rows of that table; empty when the region does not communicate or nothing was traced.
std::vector<VariantRow> overlap_rows(const RegionResult& region, const Ceilings& c);
/// " (<timing note>)" when a row's timings carry one (ranks sharing a GPU: they mean nothing),
/// else "": appended to the table's caption.
std::string overlap_caveat(const std::vector<VariantRow>& rows);
/// One line under that table: what the figures mean and where they come from.
inline constexpr const char* kOverlapNote =
    "comm = NCCL kernels and copies between ranks, compute = the other kernels, on one CUPTI "
    "replay (L2 not flushed; rank 0's in a multi-process run, every rank's in results.json and "
    "the Perfetto trace); hidden = |comm ∩ compute| / |comm| (HTA); E = (T_gemm + T_comm − "
    "T_total) / min(T_gemm, T_comm) with T_gemm and T_comm from the baseline's serial timeline "
    "and T_total the variant's span on its own; Flux T_eff = T_total − T_gemm; GEMM slowdown = "
    "the variant's computation / T_gemm; busbw = the region's communication bytes / the "
    "baseline's T_comm (nccl-tests' factors).";

}  // namespace replay
