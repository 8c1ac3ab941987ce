// report.html: the run as a self-contained page (inline CSS and SVG drawn here, no external
// resource), for people: charts first, the tables of report.md below them.
#pragma once

#include <string>

#include "harness/report/results.hpp"

namespace replay {

/// The page of `run`. Per trace: its verdict and, where regions have a baseline and an optimized
/// variant, a chart of speedup (baseline median / optimized median, ×) and % SOL per region. Per
/// row (the whole trace, each region): a chart of the cold median per variant in µs with its 95 %
/// confidence interval as a whisker, the kernel timeline of each variant's CUPTI replay (one lane
/// per CUDA stream, kernels as boxes whose tooltip gives name, µs, grid, block), and the table of
/// report.md (hot, CUDA graph and host times, numerics, skipped reasons). Every string from the
/// results is HTML-escaped. A short inline script, run after layout, records on <body> how many
/// charts have a non-zero size (data-charts, data-charts-drawn), for the render test.
std::string render_html(const RunResult& run);

/// `s` with & < > " ' escaped for HTML text and attribute values.
std::string html_escape(const std::string& s);

}  // namespace replay
