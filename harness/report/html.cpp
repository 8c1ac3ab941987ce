#include "harness/report/html.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "harness/report/markdown.hpp"

namespace replay {

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  return out;
}

namespace {

std::string num(double v, int prec = 2) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

// A table cell from a Markdown cell: escaped, emphasis markers dropped, FAIL highlighted.
std::string cell(const std::string& md) {
  std::string plain;
  for (size_t i = 0; i < md.size(); ++i) {
    if (md.compare(i, 2, "**") == 0) {
      ++i;
      continue;
    }
    if (md[i] != '`') plain += md[i];
  }
  const bool fail = plain.find("FAIL") != std::string::npos;
  return std::string(fail ? "<td class=fail>" : "<td>") + html_escape(plain) + "</td>";
}

const char* kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ccc}
h3{font-size:15px;margin-top:20px}
table{border-collapse:collapse;margin:8px 0;font-size:12px}
td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.fail{background:#fdd}
.pass{color:#070}.failv{color:#b00;font-weight:bold}.note{background:#fff6d5;padding:6px}
svg{display:block;margin:6px 0}svg text{font:11px system-ui,sans-serif}
.meta{color:#555}
)";

// Variant colours: stable per name within the page.
const char* colour(const std::string& variant) {
  static const char* kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                   "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};
  static std::map<std::string, int> seen;
  auto [it, fresh] = seen.try_emplace(variant, static_cast<int>(seen.size()));
  return kPalette[it->second % 8];
}

std::string verdict_html(Verdict v) {
  if (v == Verdict::kFail) return "<span class=failv>FAIL</span>";
  if (v == Verdict::kPass) return "<span class=pass>PASS</span>";
  return "not compared";
}

// Horizontal bars: one per timed variant, the cold median with its 95 % CI as a whisker.
std::string time_chart(const RegionResult& row) {
  std::vector<const VariantResult*> vs;
  for (const auto& v : row.variants)
    if (v.timed()) vs.push_back(&v);
  if (vs.empty()) return "";
  double hi = 0;
  for (auto* v : vs) hi = std::max({hi, v->stats.median, v->stats.median_ci_hi});
  const int label_w = 110, plot_w = 520, bar_h = 18, gap = 6, top = 8;
  const int h = top + static_cast<int>(vs.size()) * (bar_h + gap) + 28;
  auto x = [&](double us) { return label_w + plot_w * us / (hi * 1.08); };
  std::string s = "<svg class=chart width=" + std::to_string(label_w + plot_w + 90) +
                  " height=" + std::to_string(h) + " role=img aria-label='time per variant'>";
  for (size_t i = 0; i < vs.size(); ++i) {
    const VariantResult& v = *vs[i];
    const int y = top + static_cast<int>(i) * (bar_h + gap);
    const std::string tip = v.variant.name + ": median " + num(v.stats.median) + " µs, 95% CI [" +
                            num(v.stats.median_ci_lo) + ", " + num(v.stats.median_ci_hi) +
                            "] µs, " + std::to_string(v.stats.n) + " samples";
    s += "<text x=" + std::to_string(label_w - 6) + " y=" + std::to_string(y + 13) +
         " text-anchor=end>" + html_escape(v.variant.name) + "</text>";
    s += "<rect x=" + num(x(0), 1) + " y=" + std::to_string(y) +
         " width=" + num(std::max(1.0, x(v.stats.median) - x(0)), 1) +
         " height=" + std::to_string(bar_h) + " fill='" + colour(v.variant.name) + "'><title>" +
         html_escape(tip) + "</title></rect>";
    const int my = y + bar_h / 2;
    s += "<line x1=" + num(x(v.stats.median_ci_lo), 1) + " x2=" + num(x(v.stats.median_ci_hi), 1) +
         " y1=" + std::to_string(my) + " y2=" + std::to_string(my) + " stroke='#000'/>";
    s += "<text x=" + num(x(std::max(v.stats.median, v.stats.median_ci_hi)) + 4, 1) +
         " y=" + std::to_string(y + 13) + ">" + num(v.stats.median) + " µs</text>";
  }
  const int axis_y = top + static_cast<int>(vs.size()) * (bar_h + gap);
  s += "<line x1=" + std::to_string(label_w) + " x2=" + std::to_string(label_w + plot_w) +
       " y1=" + std::to_string(axis_y) + " y2=" + std::to_string(axis_y) + " stroke='#888'/>";
  for (int t = 0; t <= 4; ++t) {
    const double us = hi * 1.08 * t / 4;
    s += "<text x=" + num(x(us), 1) + " y=" + std::to_string(axis_y + 14) + " text-anchor=middle>" +
         num(us, us < 10 ? 1 : 0) + "</text>";
  }
  s += "<text x=" + std::to_string(label_w + plot_w / 2) + " y=" + std::to_string(axis_y + 26) +
       " text-anchor=middle>cold median, µs (whisker: 95% CI)</text></svg>";
  return s;
}

// Per region of a trace: speedup of optimized over baseline (×) and the optimized % SOL.
std::string speedup_chart(const TraceResult& t, const Ceilings& c) {
  struct Bar {
    std::string label;
    double speedup, sol;
  };
  std::vector<Bar> bars;
  for (const auto& row : t.regions) {
    const VariantResult *b = row.find(Role::kBaseline), *o = row.find(Role::kOptimized);
    if (!b || !o || !b->timed() || !o->timed()) continue;
    bars.push_back({row.label, b->stats.median / o->stats.median, row.sol_pct(o->stats.median, c)});
  }
  if (bars.empty()) return "";
  double max_speedup = 1;
  for (const auto& b : bars) max_speedup = std::max(max_speedup, b.speedup);
  const int label_w = 260, half = 260, bar_h = 16, gap = 8, top = 22;
  const int h = top + static_cast<int>(bars.size()) * (bar_h + gap) + 8;
  std::string s = "<svg class=chart width=" + std::to_string(label_w + 2 * half + 60) +
                  " height=" + std::to_string(h) + " role=img aria-label='speedup and SOL'>";
  s += "<text x=" + std::to_string(label_w) + " y=12>speedup vs baseline (×)</text>";
  s += "<text x=" + std::to_string(label_w + half + 30) + " y=12>optimized % SOL</text>";
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const int y = top + static_cast<int>(i) * (bar_h + gap);
    s += "<text x=" + std::to_string(label_w - 6) + " y=" + std::to_string(y + 12) +
         " text-anchor=end>" + html_escape(b.label) + "</text>";
    const double w1 = (half - 40) * b.speedup / (max_speedup * 1.05);
    s += "<rect x=" + std::to_string(label_w) + " y=" + std::to_string(y) +
         " width=" + num(std::max(1.0, w1), 1) + " height=" + std::to_string(bar_h) +
         " fill='#59a14f'><title>" + num(b.speedup) + "×</title></rect>";
    s += "<text x=" + num(label_w + w1 + 4, 1) + " y=" + std::to_string(y + 12) + ">" +
         num(b.speedup) + "×</text>";
    const double x2 = label_w + half + 30, w2 = (half - 70) * std::min(b.sol, 100.0) / 100;
    s += "<rect x=" + num(x2, 1) + " y=" + std::to_string(y) + " width=" + num(half - 70.0, 1) +
         " height=" + std::to_string(bar_h) + " fill='#eee'/>";
    s += "<rect x=" + num(x2, 1) + " y=" + std::to_string(y) +
         " width=" + num(std::max(1.0, w2), 1) + " height=" + std::to_string(bar_h) +
         " fill='#4e79a7'><title>" + num(b.sol, 1) + "% SOL</title></rect>";
    s += "<text x=" + num(x2 + half - 66, 1) + " y=" + std::to_string(y + 12) + ">" +
         num(b.sol, 1) + "%</text>";
  }
  return s + "</svg>";
}

// The kernels of each variant's CUPTI replay: a lane per (variant, stream), one time axis.
std::string timeline_chart(const RegionResult& row) {
  struct Lane {
    std::string name;
    const VariantResult* v;
    uint32_t stream;
  };
  std::vector<Lane> lanes;
  double span = 0;
  for (const auto& v : row.variants) {
    if (!v.cupti || v.cupti->timeline.empty()) continue;
    std::vector<uint32_t> streams;
    for (const auto& k : v.cupti->timeline) {
      span = std::max(span, k.start_us + k.dur_us);
      if (std::find(streams.begin(), streams.end(), k.stream) == streams.end())
        streams.push_back(k.stream);
    }
    for (uint32_t st : streams)
      lanes.push_back(
          {v.variant.name + (streams.size() > 1 ? " s" + std::to_string(st) : ""), &v, st});
  }
  if (lanes.empty() || span <= 0) return "";
  const int label_w = 110, plot_w = 620, lane_h = 16, gap = 4, top = 4;
  const int h = top + static_cast<int>(lanes.size()) * (lane_h + gap) + 26;
  auto x = [&](double us) { return label_w + plot_w * us / span; };
  std::string s = "<svg class=chart width=" + std::to_string(label_w + plot_w + 20) +
                  " height=" + std::to_string(h) + " role=img aria-label='kernel timeline'>";
  for (size_t i = 0; i < lanes.size(); ++i) {
    const int y = top + static_cast<int>(i) * (lane_h + gap);
    s += "<text x=" + std::to_string(label_w - 6) + " y=" + std::to_string(y + 12) +
         " text-anchor=end>" + html_escape(lanes[i].name) + "</text>";
    s += "<rect x=" + std::to_string(label_w) + " y=" + std::to_string(y) +
         " width=" + std::to_string(plot_w) + " height=" + std::to_string(lane_h) +
         " fill='#f7f7f7'/>";
    for (const auto& k : lanes[i].v->cupti->timeline) {
      if (k.stream != lanes[i].stream) continue;
      const std::string tip = k.name + "\n" + num(k.dur_us) + " µs at +" + num(k.start_us) +
                              " µs, grid (" + std::to_string(k.grid[0]) + ", " +
                              std::to_string(k.grid[1]) + ", " + std::to_string(k.grid[2]) +
                              "), block (" + std::to_string(k.block[0]) + ", " +
                              std::to_string(k.block[1]) + ", " + std::to_string(k.block[2]) +
                              "), " + std::to_string(k.registers) + " registers";
      s += "<rect x=" + num(x(k.start_us), 2) + " y=" + std::to_string(y + 1) +
           " width=" + num(std::max(0.5, x(k.start_us + k.dur_us) - x(k.start_us)), 2) +
           " height=" + std::to_string(lane_h - 2) + " fill='" + colour(lanes[i].v->variant.name) +
           "' stroke='#fff' stroke-width='0.5'><title>" + html_escape(tip) + "</title></rect>";
    }
  }
  const int axis_y = top + static_cast<int>(lanes.size()) * (lane_h + gap) + 12;
  s += "<text x=" + std::to_string(label_w) + " y=" + std::to_string(axis_y) + ">0</text>";
  s += "<text x=" + std::to_string(label_w + plot_w) + " y=" + std::to_string(axis_y) +
       " text-anchor=end>" + num(span) + " µs</text>";
  s += "<text x=" + std::to_string(label_w + plot_w / 2) + " y=" + std::to_string(axis_y + 12) +
       " text-anchor=middle>kernels of one replay per variant (CUPTI), µs</text></svg>";
  return s;
}

std::string html_table(const std::vector<Column<VariantRow>>& cols,
                       const std::vector<VariantRow>& rows) {
  std::string s = "<table><tr>";
  for (const auto& col : cols) s += "<th>" + html_escape(col.header) + "</th>";
  s += "</tr>";
  for (const VariantRow& r : rows) {
    s += "<tr>";
    for (const auto& col : cols) s += cell(col.cell(r));
    s += "</tr>";
  }
  return s + "</table>";
}

std::string variant_table(const RegionResult& row, const Ceilings& c) {
  std::vector<VariantRow> rows;
  for (const auto& v : row.variants) rows.push_back({&row, &v, &c});
  std::string s = html_table(variant_columns(), rows);
  if (const auto orows = overlap_rows(row, c); !orows.empty())
    s += "<p class=meta>Communication overlap" + html_escape(overlap_caveat(orows)) + "</p>" +
         html_table(overlap_columns(), orows) + "<p class=meta>" + html_escape(kOverlapNote) +
         "</p>";
  return s;
}

}  // namespace

std::string render_html(const RunResult& run) {
  const nlohmann::json env =
      run.environment.is_object() ? run.environment : nlohmann::json::object();
  std::string h =
      "<!doctype html><html lang=en><head><meta charset=utf-8>"
      "<title>Replay report</title><style>" +
      std::string(kStyle) + "</style></head><body>";
  h += "<h1>Replay report — " + verdict_html(run.verdict()) +
       "</h1><p class=meta>device: " + html_escape(env.value("device", std::string("none"))) +
       " · git revision: " + html_escape(env.value("git_revision", std::string("unknown"))) +
       " · seed " + std::to_string(run.seed);
  if (run.ceilings.copy_gbps > 0)
    h += " · copy bandwidth " + num(run.ceilings.copy_gbps, 0) + " GB/s (the SOL denominator)";
  if (!run.ceilings.matmul_tflops.empty()) {
    h += " · matmul peaks (TFLOP/s):";
    for (const auto& [cls, tf] : run.ceilings.matmul_tflops)
      h += " " + html_escape(cls) + " " + num(tf, 0);
  }
  if (run.run_info.is_object() && run.run_info.contains("started_utc"))
    h += " · started " + html_escape(run.run_info.value("started_utc", std::string()));
  h += "</p>";
  if (!run.gpu_note.empty()) h += "<p class=note><b>" + html_escape(run.gpu_note) + "</b></p>";
  // Summary: one line per trace.
  h += "<table><tr><th>trace</th><th>verdict</th><th>rows</th><th>best speedup</th></tr>";
  for (const auto& t : run.traces) {
    double best = 0;
    for (const auto& row : t.regions) {
      const VariantResult *b = row.find(Role::kBaseline), *o = row.find(Role::kOptimized);
      if (b && o && b->timed() && o->timed())
        best = std::max(best, b->stats.median / o->stats.median);
    }
    h += "<tr><td><a href='#" + html_escape(t.name) + "'>" + html_escape(t.name) + "</a></td><td>" +
         (t.error.empty() ? verdict_html(t.verdict()) : "<span class=failv>error</span>") +
         (t.cut_nodes.empty() ? ""
                              : " <span class=note>(graph cut at " +
                                    std::to_string(t.cut_nodes.size()) + " node(s))</span>") +
         "</td><td>" + std::to_string(t.regions.size()) + "</td><td>" +
         (best > 0 ? num(best) + "×" : "–") + "</td></tr>";
  }
  h += "</table>";
  for (const auto& t : run.traces) {
    h += "<h2 id='" + html_escape(t.name) + "'>" + html_escape(t.name) + " — " +
         verdict_html(t.verdict()) + "</h2><p class=meta>" + html_escape(t.file) +
         (t.input_source.empty() ? "" : " · inputs: " + html_escape(t.input_source)) + "</p>";
    if (!t.error.empty())
      h += "<p class=note><b>error (" +
           std::string(t.error_kind == TraceResult::Error::kBadInput ? "bad input"
                                                                     : "runtime failure") +
           "):</b> " + html_escape(t.error) + "</p>";
    if (!t.not_replayed.empty()) h += "<p class=note>" + html_escape(t.not_replayed) + "</p>";
    // A cut graph is never a silent pass: the verdict covers the rest of the graph only.
    for (const CutNode& c : t.cut_nodes)
      h += "<p class=note><b>graph cut:</b> " + html_escape(c.describe()) +
           " (the rest of the graph replayed; the verdict does not cover this node)</p>";
    for (const auto& l : t.lacked)
      h += "<p class=note><b>not replayed:</b> graph " + html_escape(l) +
           ", a dtype the harness lacks (the nodes reading it are cut)</p>";
    for (const auto& n : t.golden_not_compared)
      h += "<p class=meta>reference vs PyTorch golden: not compared: " + html_escape(n) + "</p>";
    for (const auto& n : t.golden_check)
      h += "<p>reference vs PyTorch golden <code>" + html_escape(n.value) + "</code>: " +
           (n.pass() ? "<span class=pass>PASS</span>"
                     : "<span class=failv>FAIL</span> " + html_escape(n.failure())) +
           "</p>";
    for (const auto& d : t.dropped_matches)
      h += "<p class=meta>match not taken: " + html_escape(d) + "</p>";
    for (const auto& d : t.declined) h += "<p class=meta>declined: " + html_escape(d) + "</p>";
    h += speedup_chart(t, run.ceilings);
    for (const auto& row : t.regions) {
      h += "<h3>" + html_escape(row.label) + "</h3><p class=meta>SOL bytes " +
           num(row.cost.bytes / 1e6) + " MB";
      if (run.ceilings.copy_gbps > 0) h += " → SOL time " + num(row.sol_us(run.ceilings)) + " µs";
      if (const SolTerms st = row.sol_terms(run.ceilings);
          st.matmul_us > 0 || !st.unmeasured.empty())
        h += " (" + html_escape(st.describe()) + ")";
      if (row.copy_us > 0) h += " · a device copy of the same bytes: " + num(row.copy_us) + " µs";
      h += "</p>" + time_chart(row) + timeline_chart(row) + variant_table(row, run.ceilings);
    }
  }
  // After layout: how many charts were drawn with a size (read by the headless render test).
  h += "<script>addEventListener('load',function(){var c=document.querySelectorAll('svg.chart'),"
       "n=0;c.forEach(function(e){var r=e.getBoundingClientRect();if(r.width>0&&r.height>0&&"
       "e.getBBox().width>0)n++;});var b=document.querySelectorAll('svg.chart rect'),m=0;"
       "b.forEach(function(e){var r=e.getBoundingClientRect();if(r.width>0&&r.height>0)m++;});"
       "var d=document.body;d.setAttribute('data-charts',c.length);"
       "d.setAttribute('data-charts-drawn',n);d.setAttribute('data-boxes',b.length);"
       "d.setAttribute('data-boxes-drawn',m);});</script>";
  return h + "</body></html>\n";
}

}  // namespace replay
