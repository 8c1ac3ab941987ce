#include "harness/results.hpp"

#include <algorithm>

namespace replay {

bool VariantResult::numerics_pass() const {
  return std::all_of(numerics.begin(), numerics.end(), [](const auto& n) { return n.pass(); });
}

double RegionResult::sol_pct(double median_us, double bandwidth_gbps) const {
  if (median_us <= 0 || bandwidth_gbps <= 0) return 0;
  double sol_us = sol_bytes / (bandwidth_gbps * 1e3);  // GB/s = 1e3 bytes/µs
  return 100.0 * sol_us / median_us;
}

const VariantResult* RegionResult::find(const std::string& v) const {
  for (const auto& x : variants)
    if (x.variant == v) return &x;
  return nullptr;
}

bool TraceResult::numerics_pass() const {
  bool ok =
      std::all_of(golden_check.begin(), golden_check.end(), [](const auto& n) { return n.pass(); });
  for (const auto& r : regions)
    for (const auto& v : r.variants) ok &= v.numerics_pass();
  return ok;
}

bool RunResult::numerics_pass() const {
  return std::all_of(traces.begin(), traces.end(), [](const auto& t) { return t.numerics_pass(); });
}

namespace {

nlohmann::json variant_json(const VariantResult& v, const RegionResult& r, double bw) {
  nlohmann::json j = {{"variant", v.variant}};
  if (!v.skipped.empty()) j["skipped"] = v.skipped;
  if (!v.samples_us.empty()) {
    j["samples_us"] = v.samples_us;
    j["stats"] = to_json(v.stats);
    j["host_enqueue"] = to_json(v.host_stats);
    j["sol_pct"] = r.sol_pct(v.stats.median, bw);
  }
  nlohmann::json nums = nlohmann::json::array();
  for (const auto& n : v.numerics) nums.push_back(to_json(n));
  j["numerics"] = nums;
  j["numerics_pass"] = v.numerics_pass();
  if (v.cupti) {
    nlohmann::json ks = nlohmann::json::array();
    for (const auto& k : v.cupti->kernels)
      ks.push_back({{"name", k.name}, {"count", k.count}, {"total_us", k.total_us}});
    j["cupti"] = {
        {"kernels", ks}, {"kernel_sum_us", v.cupti->kernel_sum_us}, {"span_us", v.cupti->span_us}};
    if (!v.cupti->error.empty()) j["cupti"]["error"] = v.cupti->error;
  }
  return j;
}

}  // namespace

nlohmann::json to_json(const RunResult& r) {
  nlohmann::json traces = nlohmann::json::array();
  for (const auto& t : r.traces) {
    nlohmann::json regions = nlohmann::json::array();
    for (const auto& reg : t.regions) {
      nlohmann::json vs = nlohmann::json::array();
      for (const auto& v : reg.variants) vs.push_back(variant_json(v, reg, r.bandwidth_gbps));
      regions.push_back({{"label", reg.label},
                         {"fusion", reg.fusion},
                         {"nodes", reg.nodes},
                         {"sol_bytes", reg.sol_bytes},
                         {"copy_us", reg.copy_us},
                         {"variants", vs}});
    }
    nlohmann::json golden = nlohmann::json::array();
    for (const auto& n : t.golden_check) golden.push_back(to_json(n));
    nlohmann::json tj = {
        {"name", t.name},         {"file", t.file},     {"input_source", t.input_source},
        {"golden_check", golden}, {"regions", regions}, {"numerics_pass", t.numerics_pass()}};
    if (!t.error.empty()) tj["error"] = t.error;
    traces.push_back(tj);
  }
  return {{"schema", kResultsSchema}, {"environment", r.environment},
          {"seed", r.seed},           {"copy_bandwidth_GBps", r.bandwidth_gbps},
          {"gpu_note", r.gpu_note},   {"numerics_pass", r.numerics_pass()},
          {"traces", traces}};
}

namespace {

std::string fmt_num(double v, int prec = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string numerics_cell(const VariantResult& v) {
  if (v.numerics.empty()) return "–";
  int64_t bad = 0, total = 0;
  double rel = 0;
  for (const auto& n : v.numerics) {
    bad += n.mismatches;
    total += n.numel;
    rel = std::max(rel, n.rel_l2);
  }
  std::string s = v.numerics_pass() ? "PASS"
                                    : "**FAIL** " + std::to_string(bad) + "/" +
                                          std::to_string(total) + " mismatched";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", rel);
  return s + " (rel_l2 " + (rel == rel ? std::string(buf) : std::string("NaN")) + ")";
}

}  // namespace

std::string render_markdown(const RunResult& r) {
  std::string md = "# Replay report\n\n";
  const nlohmann::json env = r.environment.is_object() ? r.environment : nlohmann::json::object();
  md += "- device: " + env.value("device", std::string("none")) + "\n";
  if (env.contains("driver_version"))
    md += "- driver " + env["driver_version"].get<std::string>() + ", CUDA runtime " +
          env.value("cuda_runtime", std::string("?")) + "\n";
  md += "- git revision: " + env.value("git_revision", std::string("unknown")) + "\n";
  md += "- seed: " + std::to_string(r.seed) + "\n";
  if (r.bandwidth_gbps > 0)
    md += "- measured copy bandwidth (device-to-device, read + write): " +
          fmt_num(r.bandwidth_gbps, 0) + " GB/s; SOL = bytes that must move / this bandwidth\n";
  if (!r.gpu_note.empty()) md += "\n> **" + r.gpu_note + "**\n";
  md += "\nOverall numerics: " + std::string(r.numerics_pass() ? "PASS" : "**FAIL**") + "\n";

  for (const auto& t : r.traces) {
    md += "\n## " + t.name + "\n\n";
    md += "`" + t.file + "` — inputs: " + t.input_source + "\n";
    if (!t.error.empty()) {
      md += "\n**error:** " + t.error + "\n";
      continue;
    }
    for (const auto& n : t.golden_check)
      md += "\n- reference vs PyTorch golden `" + n.value +
            "`: " + (n.pass() ? "PASS" : "**FAIL**") + " (max abs err " +
            fmt_num(n.max_abs_err, 6) + ", " + std::to_string(n.mismatches) + " mismatched)";
    if (!t.golden_check.empty()) md += "\n";
    for (const auto& reg : t.regions) {
      md += "\n### " + reg.label + "\n\n";
      md += "SOL bytes: " + fmt_num(reg.sol_bytes / 1e6, 2) + " MB";
      if (r.bandwidth_gbps > 0)
        md += " → SOL time " + fmt_num(reg.sol_bytes / (r.bandwidth_gbps * 1e3), 2) + " µs";
      if (reg.copy_us > 0)
        md += "; a device copy of the same bytes, timed the same way: " + fmt_num(reg.copy_us, 2) +
              " µs";
      md +=
          "\n\n| variant | median µs | IQR µs | min µs | samples | % SOL | vs baseline | "
          "numerics | CUPTI: launches, kernel sum µs, span µs (host launch gaps included) |\n";
      md += "|---|---:|---:|---:|---:|---:|---:|---|---|\n";
      const VariantResult* base = reg.find("baseline");
      for (const auto& v : reg.variants) {
        md += "| " + v.variant + " | ";
        if (!v.skipped.empty()) {
          md += "– | – | – | – | – | – | – | skipped: " + v.skipped + " | – |\n";
          continue;
        }
        if (v.samples_us.empty()) {
          md += "– | – | – | – | – | – | – | ";
        } else {
          md += fmt_num(v.stats.median, 2) + " | " + fmt_num(v.stats.iqr, 2) + " | " +
                fmt_num(v.stats.min, 2) + " | " + std::to_string(v.stats.n) + " | " +
                fmt_num(reg.sol_pct(v.stats.median, r.bandwidth_gbps)) + " | ";
          md += (base && !base->samples_us.empty())
                    ? fmt_num(base->stats.median / v.stats.median, 2) + "×"
                    : std::string("–");
          md +=
              " | " + (v.host_stats.n ? fmt_num(v.host_stats.median, 2) : std::string("–")) + " | ";
        }
        md += numerics_cell(v) + " | ";
        if (v.cupti && v.cupti->error.empty()) {
          int launches = 0;
          for (const auto& k : v.cupti->kernels) launches += k.count;
          md += std::to_string(launches) + ", " + fmt_num(v.cupti->kernel_sum_us, 2) + ", " +
                fmt_num(v.cupti->span_us, 2);
        } else if (v.cupti) {
          md += "CUPTI error: " + v.cupti->error;
        } else {
          md += "–";
        }
        md += " |\n";
      }
    }
  }
  return md;
}

}  // namespace replay
