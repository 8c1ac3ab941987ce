#include "harness/report/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <tuple>

#include "harness/report/results.hpp"
#include "harness/report/table.hpp"

namespace replay {

double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b) {
  const double n1 = static_cast<double>(a.size()), n2 = static_cast<double>(b.size());
  if (a.empty() || b.empty()) return 1;
  std::vector<std::pair<double, int>> all;  // value, which sample
  for (double v : a) all.push_back({v, 0});
  for (double v : b) all.push_back({v, 1});
  std::sort(all.begin(), all.end());
  double rank_sum_a = 0, tie_term = 0;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;  // mid-rank
    const double t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    for (size_t k = i; k < j; ++k)
      if (all[k].second == 0) rank_sum_a += rank;
    i = j;
  }
  const double u = rank_sum_a - n1 * (n1 + 1) / 2;
  const double n = n1 + n2;
  const double mean = n1 * n2 / 2;
  const double var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)));
  if (var <= 0) return 1;  // every value equal
  const double z = (std::fabs(u - mean) - 0.5) / std::sqrt(var);
  return std::min(1.0, std::erfc(std::max(z, 0.0) / std::sqrt(2.0)));
}

std::string_view change_name(Change c) {
  switch (c) {
    case Change::kSame:
      return "SAME";
    case Change::kFaster:
      return "FASTER";
    case Change::kSlower:
      return "SLOWER";
    case Change::kUnsure:
      return "UNSURE";
    case Change::kNotTimed:
      return "not timed";
    case Change::kOnlyOld:
      return "only in old";
    case Change::kOnlyNew:
      return "only in new";
  }
  return "?";
}

namespace {

struct Entry {
  std::vector<double> samples;
  std::vector<double> graph_samples;  ///< CUDA-graph mode, where measured
  double median = 0;
  double host_median = 0;  ///< host enqueue time of one replay, µs
  std::string numerics;
};
using Key = std::tuple<std::string, std::string, std::string>;

std::map<Key, Entry> entries(const nlohmann::json& run, const char* which) {
  const std::string schema = run.is_object() ? run.value("schema", "") : "";
  if ((schema != kResultsSchema && schema != "replay-results/1") || !run.contains("traces") ||
      !run["traces"].is_array())
    throw std::invalid_argument(std::string(which) + " is not a results.json of schema " +
                                kResultsSchema + " (or replay-results/1)");
  std::map<Key, Entry> out;
  std::map<std::string, std::string> file_of;  // trace name -> file
  for (const auto& t : run["traces"]) {
    const std::string name = t.value("name", std::string()), file = t.value("file", std::string());
    auto [it, fresh] = file_of.emplace(name, file);
    if (!fresh && it->second != file)
      throw std::invalid_argument(std::string(which) + " names trace '" + name + "' twice (" +
                                  it->second + " and " + file +
                                  "): compare keys rows on trace names; rename one trace");
    for (const auto& r : t.value("regions", nlohmann::json::array()))
      for (const auto& v : r.value("variants", nlohmann::json::array())) {
        Entry e;
        if (v.contains("samples_us") && v["samples_us"].is_array())
          for (const auto& s : v["samples_us"])
            if (s.is_number()) e.samples.push_back(s.get<double>());
        if (!e.samples.empty()) e.median = summarize(e.samples).median;
        if (v.contains("graph") && v["graph"].is_object() && v["graph"].contains("samples_us") &&
            v["graph"]["samples_us"].is_array())
          for (const auto& s : v["graph"]["samples_us"])
            if (s.is_number()) e.graph_samples.push_back(s.get<double>());
        e.numerics = v.value("verdict", std::string());
        if (v.contains("host_enqueue") && v["host_enqueue"].is_object())
          e.host_median = v["host_enqueue"].value("median_us", 0.0);
        out[{name, r.value("label", std::string()), v.value("variant", std::string())}] =
            std::move(e);
      }
  }
  return out;
}

std::string device_of(const nlohmann::json& run) {
  if (!run.contains("environment") || !run["environment"].is_object()) return "";
  const auto& env = run["environment"];
  return env.contains("device") && env["device"].is_string() ? env["device"].get<std::string>()
                                                             : "";
}

std::string fmt(const char* f, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::vector<CompareRow> compare_runs(const nlohmann::json& old_run, const nlohmann::json& new_run,
                                     const CompareOptions& opt) {
  const auto a = entries(old_run, "the old run"), b = entries(new_run, "the new run");
  const std::string dev_a = device_of(old_run), dev_b = device_of(new_run);
  if (!opt.allow_device_mismatch && !dev_a.empty() && !dev_b.empty() && dev_a != dev_b)
    throw std::invalid_argument(
        "the old run was measured on '" + dev_a + "', the new one on '" + dev_b +
        "': their times are not comparable (`replay compare --any-device` compares them anyway)");
  // A move within the timing resolution between processes: small in µs and in share.
  auto within_floor = [&](double from, double to) {
    return std::fabs(to - from) <= opt.min_change_us &&
           std::fabs(to - from) <= opt.min_change_max_share * from;
  };
  auto host_method = [](const nlohmann::json& run) {
    const auto& info = run.contains("run") ? run["run"] : nlohmann::json();
    return info.is_object() && info.contains("host_enqueue_method") &&
                   info["host_enqueue_method"].is_string()
               ? info["host_enqueue_method"].get<std::string>()
               : std::string("back_to_back");
  };
  const bool same_host_method = host_method(old_run) == host_method(new_run);
  std::vector<CompareRow> rows;
  for (const auto& [key, e] : a) {
    CompareRow r;
    std::tie(r.trace, r.row, r.variant) = key;
    r.old_median_us = e.median;
    r.old_numerics = e.numerics;
    r.old_host_us = e.host_median;
    auto it = b.find(key);
    if (it == b.end()) {
      r.verdict = Change::kOnlyOld;
      rows.push_back(r);
      continue;
    }
    const Entry& n = it->second;
    r.new_median_us = n.median;
    r.new_numerics = n.numerics;
    r.new_host_us = n.host_median;
    r.numerics_regressed = n.numerics == "FAIL" && e.numerics != "FAIL";
    if (e.samples.empty() || n.samples.empty()) {
      r.verdict = Change::kNotTimed;
      r.timing_lost = !e.samples.empty();
      rows.push_back(r);
      continue;
    }
    const bool both_graphs = !e.graph_samples.empty() && !n.graph_samples.empty();
    // Host enqueue 0: not measured (older results), not a measured zero. Host times measured two
    // different ways (run.host_enqueue_method) are not set against each other.
    const bool both_hosts = e.host_median > 0 && n.host_median > 0 && same_host_method;
    r.launch_bound = both_hosts && e.host_median >= opt.launch_bound_share * e.median &&
                     n.host_median >= opt.launch_bound_share * n.median;
    r.host_regressed = both_hosts &&
                       n.host_median - e.host_median > opt.host_change_limit * e.host_median &&
                       n.host_median - e.host_median > opt.min_change_us;
    // A launch-bound row's cold interval times the host's launch rate; where both runs timed the
    // CUDA graph of the replay (no launch gaps), the verdict is the graph's, unless the launch
    // path itself regressed (the graph would hide that).
    const bool by_graph = r.launch_bound && both_graphs && !r.host_regressed;
    const std::vector<double>& sa = by_graph ? e.graph_samples : e.samples;
    const std::vector<double>& sb = by_graph ? n.graph_samples : n.samples;
    const double ma = by_graph ? summarize(sa).median : e.median;
    const double mb = by_graph ? summarize(sb).median : n.median;
    r.judged_on_graph = by_graph;
    if (by_graph) r.old_median_us = ma, r.new_median_us = mb;
    r.change = (mb - ma) / ma;
    r.p = mann_whitney_p(sa, sb);
    const double threshold = opt.threshold * (r.launch_bound && !by_graph ? 3 : 1);
    if (std::fabs(r.change) <= threshold || within_floor(ma, mb))
      r.verdict = Change::kSame;
    else if (r.p < opt.alpha)
      r.verdict = r.change > 0 ? Change::kSlower : Change::kFaster;
    else
      r.verdict = Change::kUnsure;
    // A cold change the CUDA graph of the same replay does not show is the launch path's (the
    // gaps between launches differ between processes), not the kernels': UNSURE. Not so when the
    // host enqueue regressed: then the launch path is what got slower.
    if (!by_graph && !r.host_regressed && both_graphs &&
        (r.verdict == Change::kSlower || r.verdict == Change::kFaster)) {
      const double ga = summarize(e.graph_samples).median, gb = summarize(n.graph_samples).median;
      const bool graph_moved = !within_floor(ga, gb) && std::fabs(gb - ga) > opt.threshold * ga &&
                               (gb > ga) == (r.change > 0) &&
                               mann_whitney_p(e.graph_samples, n.graph_samples) < opt.alpha;
      if (!graph_moved) {
        r.verdict = Change::kUnsure;
        r.graph_disagrees = true;
      }
    }
    rows.push_back(r);
  }
  for (const auto& [key, n] : b)
    if (!a.count(key)) {
      CompareRow r;
      std::tie(r.trace, r.row, r.variant) = key;
      r.new_median_us = n.median;
      r.new_numerics = n.numerics;
      r.new_host_us = n.host_median;
      r.numerics_regressed = n.numerics == "FAIL";
      r.verdict = Change::kOnlyNew;
      rows.push_back(r);
    }
  return rows;
}

bool compare_fails(const std::vector<CompareRow>& rows, const CompareOptions& opt) {
  return std::any_of(rows.begin(), rows.end(), [&](const CompareRow& r) {
    const bool missing = r.verdict == Change::kOnlyOld || r.timing_lost;
    return r.verdict == Change::kSlower || r.numerics_regressed || (missing && !opt.allow_missing);
  });
}

std::string render_compare(const std::vector<CompareRow>& rows, const CompareOptions& opt) {
  std::map<Change, int> count;
  int regressed = 0, lost = 0;
  for (const auto& r : rows) {
    ++count[r.verdict];
    regressed += r.numerics_regressed;
    lost += r.timing_lost;
  }
  std::string md = "# Replay compare\n\n";
  md += "Threshold " + fmt("%.1f", 100 * opt.threshold) + " % of the median (a move of at most " +
        fmt("%.2g", opt.min_change_us) + " µs and " + fmt("%.0f", 100 * opt.min_change_max_share) +
        " % is SAME), Mann-Whitney U at " + fmt("%.2g", opt.alpha) +
        "; launch-bound rows judged on their CUDA-graph times where both runs have them and the "
        "host enqueue did not grow by more than " +
        fmt("%.0f", 100 * opt.host_change_limit) +
        " %; a cold change the CUDA graph does not show is UNSURE. ";
  for (Change c : {Change::kSlower, Change::kFaster, Change::kUnsure, Change::kSame,
                   Change::kNotTimed, Change::kOnlyOld, Change::kOnlyNew})
    md += std::string(change_name(c)) + " " + std::to_string(count[c]) + " · ";
  md += "timing lost " + std::to_string(lost) + " · numerics regressions " +
        std::to_string(regressed) + "\n\n";
  md += compare_fails(rows, opt) ? "**Gate: FAIL**" : "Gate: pass";
  if (!opt.allow_missing && (count[Change::kOnlyOld] > 0 || lost > 0))
    md += " (rows of the old run missing or untimed in the new one fail it)";
  md += "\n\n";
  const std::vector<Column<CompareRow>> cols = {
      {"trace", false, [](const CompareRow& r) { return r.trace; }},
      {"row", false, [](const CompareRow& r) { return r.row; }},
      {"variant", false, [](const CompareRow& r) { return r.variant; }},
      {"old µs", true,
       [](const CompareRow& r) {
         return r.old_median_us > 0 ? fmt("%.2f", r.old_median_us) : "–";
       }},
      {"new µs", true,
       [](const CompareRow& r) {
         return r.new_median_us > 0 ? fmt("%.2f", r.new_median_us) : "–";
       }},
      {"change", true,
       [](const CompareRow& r) {
         return r.old_median_us > 0 && r.new_median_us > 0 ? fmt("%+.1f %%", 100 * r.change)
                                                           : std::string("–");
       }},
      {"p", true, [](const CompareRow& r) { return fmt("%.2g", r.p); }},
      {"verdict", false,
       [](const CompareRow& r) {
         std::string v(change_name(r.verdict));
         if (r.verdict == Change::kSlower) v = "**" + v + "**";
         if (r.timing_lost) return "**" + v + " (was timed)**";
         if (r.verdict == Change::kOnlyOld) return "**" + v + "**";
         if (r.judged_on_graph) return v + " (launch-bound: CUDA graph µs)";
         if (r.graph_disagrees) return v + " (cold only: the CUDA graph did not move)";
         if (r.host_regressed)
           return v + " (host enqueue " + fmt("%.1f", r.old_host_us) + " → " +
                  fmt("%.1f", r.new_host_us) + " µs)";
         return r.launch_bound ? v + " (launch-bound)" : v;
       }},
      {"numerics old → new", false, [](const CompareRow& r) {
         std::string s = (r.old_numerics.empty() ? "–" : r.old_numerics) + " → " +
                         (r.new_numerics.empty() ? "–" : r.new_numerics);
         return r.numerics_regressed ? "**" + s + "**" : s;
       }}};
  return md + markdown_table(cols, rows);
}

}  // namespace replay
