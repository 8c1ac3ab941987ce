#include "harness/report/markdown.hpp"

#include <cstdio>

#include "harness/report/table.hpp"

namespace replay {
namespace {

std::string fmt_num(double v, int prec = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

// PASS with the worst output's figures, FAIL with the first failing output and why, or
// "not compared" (never PASS) when nothing was checked.
std::string numerics_cell(const VariantResult& v) {
  std::string prefix = v.skipped.empty() ? "" : "skipped: " + v.skipped + "; ";
  if (!v.timing_note.empty()) prefix += "timing: " + v.timing_note + "; ";
  if (v.numerics.empty()) return prefix + "not compared";
  for (const auto& n : v.numerics)
    if (!n.pass())
      return prefix + "**FAIL** `" + n.value + "`: " + n.failure() +
             (v.repro.empty() ? "" : "; reproducer: " + v.repro);
  double rel = 0, ratio = 0, share = 0, ulps = 0;
  for (const auto& n : v.numerics) {
    rel = std::max(rel, n.rel_l2);
    ratio = std::max(ratio, n.bounds.max_rel_l2 > 0 ? n.rel_l2 / n.bounds.max_rel_l2 : 0.0);
    share = std::max(share, n.beyond_1ulp_share);
    ulps = std::max(ulps, n.max_ulp_err);
  }
  return prefix + "PASS rel_l2 " + sci(rel) + " (" + fmt_num(100 * ratio, 0) +
         "% of bound), >1 ulp " + fmt_num(100 * share, 3) + "%, max " + fmt_num(ulps, 0) + " ulp";
}

std::string cupti_cell(const VariantResult& v) {
  if (!v.cupti) return "–";
  if (!v.cupti->error.empty()) return "CUPTI error: " + v.cupti->error;
  int launches = 0;
  for (const auto& k : v.cupti->kernels) launches += k.count;
  // The busy time (kernels overlapping each other counted once), and the plain sum beside it
  // when overlapping kernels (a programmatic dependent launch) make it larger.
  std::string busy = fmt_num(v.cupti->kernel_busy_us, 2);
  if (v.cupti->kernels_overlap()) busy += " (sum " + fmt_num(v.cupti->kernel_sum_us, 2) + ")";
  return std::to_string(launches) + ", " + busy + ", " + fmt_num(v.cupti->span_us, 2);
}

std::vector<Column<VariantRow>> make_variant_columns() {
  auto timed = [](auto f) {
    return [f](const VariantRow& r) { return r.v->timed() ? f(r) : std::string("–"); };
  };
  return {
      {"variant", false, [](const VariantRow& r) { return r.v->variant.name; }},
      {"median µs", true, timed([](const VariantRow& r) { return fmt_num(r.v->stats.median, 2); })},
      {"IQR µs", true, timed([](const VariantRow& r) { return fmt_num(r.v->stats.iqr, 2); })},
      {"min µs", true, timed([](const VariantRow& r) { return fmt_num(r.v->stats.min, 2); })},
      {"samples", true, timed([](const VariantRow& r) { return std::to_string(r.v->stats.n); })},
      {"± median (95% CI), stop", false, timed([](const VariantRow& r) {
         std::string c = fmt_num(100 * r.v->stats.rel_ci, 2) + "%, " + stop_reason_name(r.v->stop);
         if (r.v->discarded_slow_clock)
           c += ", " + std::to_string(r.v->discarded_slow_clock) + " slow-clock samples dropped";
         return c;
       })},
      {"% SOL", true, timed([](const VariantRow& r) {
         return fmt_num(r.region->sol_pct(r.v->stats.median, *r.ceilings));
       })},
      {"vs baseline", true, timed([](const VariantRow& r) {
         const VariantResult* base = r.region->find(Role::kBaseline);
         return base && base->timed() ? fmt_num(base->stats.median / r.v->stats.median, 2) + "×"
                                      : std::string("–");
       })},
      {"hot µs", true, timed([](const VariantRow& r) {
         return r.v->hot_stats.n ? fmt_num(r.v->hot_stats.median, 2) : std::string("–");
       })},
      {"CUDA graph µs", true, timed([](const VariantRow& r) {
         return r.v->graph_stats.n ? fmt_num(r.v->graph_stats.median, 2)
                                   : (r.v->graph_skipped.empty() ? "–" : "not capturable");
       })},
      {"host enqueue µs", true, timed([](const VariantRow& r) {
         return r.v->host_stats.n ? fmt_num(r.v->host_stats.median, 2) : std::string("–");
       })},
      {"numerics", false, [](const VariantRow& r) { return numerics_cell(*r.v); }},
      {"CUPTI: launches, kernel busy µs, span µs", false,
       [](const VariantRow& r) { return cupti_cell(*r.v); }},
      {"vector B", false,
       [](const VariantRow& r) {
         const std::string w = width_range(r.v->vector_widths);
         return w.empty() ? std::string("–") : w;
       }},
  };
}

// The overlap figures of `r` against the baseline (RegionResult::overlaps), or nullptr.
const RegionOverlap* overlap_vs_baseline(
    const VariantRow& r, const std::vector<std::pair<const VariantResult*, RegionOverlap>>& all) {
  for (const auto& [v, o] : all)
    if (v == r.v) return &o;
  return nullptr;
}

std::vector<Column<VariantRow>> make_overlap_columns() {
  auto stats = [](auto f) {
    return [f](const VariantRow& r) { return f(timeline_overlap(r.v->cupti->timeline, true)); };
  };
  auto vs_base = [](auto f) {
    return [f](const VariantRow& r) {
      const auto all = r.region->overlaps();
      const RegionOverlap* o = overlap_vs_baseline(r, all);
      return o ? f(*o) : std::string("–");
    };
  };
  return {
      {"variant", false, [](const VariantRow& r) { return r.v->variant.name; }},
      {"comm µs", true, stats([](const OverlapStats& o) { return fmt_num(o.comm_us, 2); })},
      {"compute µs", true, stats([](const OverlapStats& o) { return fmt_num(o.compute_us, 2); })},
      {"comm hidden (HTA)", true, stats([](const OverlapStats& o) {
         return o.has_comm ? fmt_num(100 * o.overlap_fraction) + "%" : std::string("n/a");
       })},
      {"exposed comm µs", true,
       stats([](const OverlapStats& o) { return fmt_num(o.exposed_comm_us, 2); })},
      {"E vs baseline", true,
       vs_base([](const RegionOverlap& o) { return fmt_num(100 * o.efficiency) + "%"; })},
      {"Flux T_eff µs", true,
       vs_base([](const RegionOverlap& o) { return fmt_num(o.flux_eff_comm_us, 2); })},
      {"GEMM slowdown", true,
       vs_base([](const RegionOverlap& o) { return fmt_num(o.gemm_slowdown, 2) + "×"; })},
      {"baseline busbw GB/s", true,
       vs_base([](const RegionOverlap& o) { return fmt_num(o.busbw_gbps, 1); })},
  };
}

}  // namespace

const std::vector<Column<VariantRow>>& overlap_columns() {
  static const auto columns = make_overlap_columns();
  return columns;
}

std::string overlap_caveat(const std::vector<VariantRow>& rows) {
  for (const VariantRow& r : rows)
    if (!r.v->timing_note.empty()) return " (" + r.v->timing_note + ")";
  return "";
}

std::vector<VariantRow> overlap_rows(const RegionResult& region, const Ceilings& c) {
  std::vector<VariantRow> rows;
  if (!region.communicates()) return rows;
  for (const auto& v : region.variants)
    if (v.cupti && !v.cupti->timeline.empty()) rows.push_back({&region, &v, &c});
  return rows;
}

const std::vector<Column<VariantRow>>& variant_columns() {
  static const auto columns = make_variant_columns();
  return columns;
}

std::string render_markdown(const RunResult& r) {
  std::string md = "# Replay report\n\n";
  const nlohmann::json env = r.environment.is_object() ? r.environment : nlohmann::json::object();
  md += "- device: " + env.value("device", std::string("none")) + "\n";
  if (env.contains("cuda_runtime"))
    md += "- driver " + env.value("driver_version", std::string("?")) + " (CUDA driver API " +
          env.value("cuda_driver_api", std::string("?")) + "), CUDA runtime " +
          env.value("cuda_runtime", std::string("?")) + "\n";
  md += "- git revision: " + env.value("git_revision", std::string("unknown")) + "\n";
  md += "- seed: " + std::to_string(r.seed) + "\n";
  if (r.ceilings.copy_gbps > 0)
    md += "- measured copy bandwidth (device-to-device, read + write): " +
          fmt_num(r.ceilings.copy_gbps, 0) + " GB/s; SOL = bytes that must move / this bandwidth\n";
  if (!r.ceilings.matmul_tflops.empty()) {
    md += "- measured matmul peaks (TFLOP/s):";
    for (const auto& [cls, tf] : r.ceilings.matmul_tflops) md += " " + cls + " " + fmt_num(tf, 0);
    md += "; " + r.ceilings.matmul_problem +
          ". A region's SOL is the largest of its memory term and its matmul term (FLOPs / peak, "
          "summed over its GEMMs)\n";
  }
  if (r.run_info.is_object() && r.run_info.contains("complete") &&
      !r.run_info.value("complete", true))
    md +=
        "\n> **Incomplete: the run had not finished when this report was written (it is "
        "rewritten after every trace; a run that stopped early leaves it so).**\n";
  if (!r.gpu_note.empty()) md += "\n> **" + r.gpu_note + "**\n";
  const Verdict overall = r.verdict();
  int yes = 0, no = 0;
  for (const auto& t : r.traces) {
    auto [y, n] = t.compared_and_not();
    yes += y;
    no += n;
  }
  size_t cut_traces = 0;
  for (const auto& t : r.traces) cut_traces += t.cut_nodes.empty() && t.lacked.empty() ? 0 : 1;
  md += "\nOverall numerics: " +
        std::string(overall == Verdict::kFail ? "**FAIL**" : verdict_name(overall)) + " (" +
        std::to_string(yes) + " comparisons made, " + std::to_string(no) + " not compared)" +
        (cut_traces ? "; " + std::to_string(cut_traces) +
                          " trace(s) replayed with their graph cut around ops or dtypes the "
                          "harness cannot run (their verdicts cover the rest of the graph)"
                    : std::string()) +
        "\n";

  const auto& columns = variant_columns();
  for (const auto& t : r.traces) {
    const Verdict tv = t.verdict();
    const auto [yes_t, no_t] = t.compared_and_not();
    md += "\n## " + t.name + " — " +
          (tv == Verdict::kFail ? "**FAIL**" : std::string(verdict_name(tv))) + " (" +
          std::to_string(yes_t) + " compared, " + std::to_string(no_t) + " not compared)" +
          (t.cut_nodes.empty()
               ? ""
               : " — graph cut at " + std::to_string(t.cut_nodes.size()) + " node(s)") +
          (t.lacked.empty() ? ""
                            : " — " + std::to_string(t.lacked.size()) + " value(s) not replayed") +
          "\n\n";
    md += "`" + t.file + "` — inputs: " + t.input_source + "\n";
    if (!t.error.empty())
      md += "\n**error** (" +
            std::string(t.error_kind == TraceResult::Error::kBadInput ? "bad input"
                                                                      : "runtime failure") +
            "): " + t.error + "\n";
    // A cut graph is never a silent pass: every cut node is named, with where its outputs came
    // from, and the verdict covers the rest of the graph only.
    for (const CutNode& c : t.cut_nodes)
      md += "\n- **graph cut**: " + c.describe() +
            " (the rest of the graph replayed; the verdict does not cover this node)\n";
    for (const auto& l : t.lacked)
      md += "\n- **not replayed**: graph " + l +
            ", a dtype the harness lacks (the nodes reading it are cut)\n";
    for (const auto& n : t.golden_not_compared)
      md += "\n- reference vs PyTorch golden: not compared: " + n + "\n";
    for (const auto& n : t.golden_check)
      md += "\n- reference vs PyTorch golden `" + n.value +
            "`: " + (n.pass() ? "PASS" : "**FAIL** " + n.failure()) + " (rel_l2 " + sci(n.rel_l2) +
            ", max " + fmt_num(n.max_ulp_err, 0) + " ulp)";
    if (!t.golden_check.empty()) md += "\n";
    for (const auto& d : t.dropped_matches) md += "\n- match not taken: " + d + "\n";
    for (const auto& d : t.declined) md += "\n- declined: " + d + "\n";
    if (!t.not_replayed.empty()) {
      md += "\n**" + t.not_replayed + "**\n";
      continue;
    }
    for (const auto& reg : t.regions) {
      md += "\n### " + reg.label + "\n\n";
      md += "SOL bytes: " + fmt_num(reg.cost.bytes / 1e6, 2) + " MB";
      if (r.ceilings.copy_gbps > 0)
        md += " → SOL time " + fmt_num(reg.sol_us(r.ceilings), 2) + " µs";
      if (const SolTerms st = reg.sol_terms(r.ceilings); st.matmul_us > 0 || !st.unmeasured.empty())
        md += " (" + st.describe() + ")";
      if (reg.copy_us > 0)
        md += "; a device copy of the same bytes, timed the same way: " + fmt_num(reg.copy_us, 2) +
              " µs";
      md += "\n\n";
      std::vector<VariantRow> rows;
      for (const auto& v : reg.variants) rows.push_back({&reg, &v, &r.ceilings});
      md += markdown_table(columns, rows);
      if (reg.region >= 0)  // the whole-trace row repeats the regions' choices
        for (const auto& v : reg.variants)
          for (const GemmChoice& c : v.gemms)
            md += "\n- GEMM of " + v.variant.name + ": " + describe(c) + "\n";
      if (const auto orows = overlap_rows(reg, r.ceilings); !orows.empty())
        md += "\nCommunication overlap" + overlap_caveat(orows) + ":\n\n" +
              markdown_table(overlap_columns(), orows) + "\n" + kOverlapNote + "\n";
    }
  }
  return md;
}

}  // namespace replay
