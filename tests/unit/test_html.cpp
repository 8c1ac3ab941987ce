// report.html: what the page contains (structural checks on hand-built runs) and that it renders:
// headless Chromium (Debian's `chromium`) loads it, lays out every chart and every box in them.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "harness/report/html.hpp"

using namespace replay;

namespace {

VariantResult timed(VariantInfo info, std::vector<double> us, bool timeline) {
  VariantResult v;
  v.variant = std::move(info);
  v.samples_us = std::move(us);
  v.stats = summarize(v.samples_us);
  v.host_stats = summarize({3, 4});
  if (timeline) {
    CuptiSummary c;
    KernelEvent a, b;
    a.name = "void k<__nv_bfloat16, 4>(Args&)";
    a.dur_us = v.stats.median * 0.6;
    a.stream = 7;
    b.name = "finalize";
    b.start_us = a.dur_us + 1;
    b.dur_us = v.stats.median * 0.3;
    b.stream = 7;
    c.timeline = {a, b};
    c.kernels = {{a.name, 1, a.dur_us}, {b.name, 1, b.dur_us}};
    c.kernel_sum_us = a.dur_us + b.dur_us;
    c.span_us = b.start_us + b.dur_us;
    v.cupti = c;
  }
  return v;
}

RunResult sample_run() {
  RunResult run;
  run.environment = {{"device", "NVIDIA H100 80GB HBM3"}, {"git_revision", "abc"}};
  run.ceilings.copy_gbps = 3000;
  TraceResult t;
  t.name = "norm<bf16> & \"friends\"";
  t.file = "traces/x.json";
  RegionResult whole;
  whole.label = "trace";
  whole.cost.bytes = 100e6;
  RegionResult r0 = whole;
  r0.label = "region 0: norm_bwd";
  for (RegionResult* r : {&whole, &r0}) {
    r->variants.push_back(timed({VariantInfo::kEager, "eager"}, {400, 401, 402}, true));
    r->variants.push_back(
        timed({VariantInfo::kFusion, "baseline", Role::kBaseline}, {60, 61, 62}, true));
    r->variants.push_back(
        timed({VariantInfo::kFusion, "optimized", Role::kOptimized}, {38.5, 38.78, 39}, true));
  }
  t.regions = {whole, r0};
  run.traces.push_back(t);
  TraceResult bad;
  bad.name = "broken";
  bad.error = "traces/broken.json: node 'mul': expected 2 inputs";
  bad.error_kind = TraceResult::Error::kBadInput;
  run.traces.push_back(bad);
  return run;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// The Chromium binary on the PATH, or "".
std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string cmd = std::string("command -v ") + name + " > /dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return name;
  }
  return "";
}

}  // namespace

TEST(Html, ChartsTablesAndEscaping) {
  const std::string h = render_html(sample_run());
  EXPECT_EQ(h.rfind("<!doctype html>", 0), 0u);
  // Per row a time chart and a timeline, per trace with regions a speedup chart: 2*2 + 1.
  EXPECT_EQ(count(h, "<svg class=chart"), 5u);
  EXPECT_NE(h.find("norm&lt;bf16&gt; &amp; &quot;friends&quot;"), std::string::npos);
  EXPECT_EQ(h.find("norm<bf16>"), std::string::npos);  // never raw
  EXPECT_NE(h.find("void k&lt;__nv_bfloat16, 4&gt;(Args&amp;)"), std::string::npos);
  EXPECT_NE(h.find("38.78 µs"), std::string::npos);  // the optimized median, as a bar label
  EXPECT_NE(h.find("1.57×"), std::string::npos);     // 61 / 38.78, speedup chart and table
  EXPECT_NE(h.find("node &#39;mul&#39;: expected 2 inputs"), std::string::npos);
  // Self-contained: nothing fetched from anywhere.
  EXPECT_EQ(h.find("http://"), std::string::npos);
  EXPECT_EQ(h.find("https://"), std::string::npos);
  EXPECT_EQ(h.find("src="), std::string::npos);
  EXPECT_EQ(h.find("<link"), std::string::npos);
  // Every SVG element that closes itself has its last attribute quoted (an unquoted value before
  // "/>" swallows the slash and leaves the element open).
  EXPECT_FALSE(std::regex_search(h, std::regex("=[^'\" >]+/>")));
}

TEST(Html, RunWithoutGpuSaysSo) {
  RunResult run;
  run.gpu_note = "GPU replay needs a CUDA device: none was found";
  TraceResult t;
  t.name = "cpu";
  RegionResult whole;
  whole.label = "trace";
  VariantResult v;
  v.variant = {VariantInfo::kEager, "eager"};
  v.skipped = "no CUDA device (GPU replay needs one)";
  whole.variants = {v};
  t.regions = {whole};
  run.traces.push_back(t);
  const std::string h = render_html(run);
  EXPECT_NE(h.find("GPU replay needs a CUDA device: none was found"), std::string::npos);
  EXPECT_NE(h.find("no CUDA device (GPU replay needs one)"), std::string::npos);
  EXPECT_EQ(count(h, "<svg"), 0u);  // nothing timed, nothing drawn
}

// The page as a browser shows it: Chromium lays it out and the page's own script counts the
// charts and the boxes (bars, kernels) that got a non-zero size.
TEST(Html, RendersInHeadlessChromium) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) GTEST_SKIP() << "skipped: chromium not installed";
  const auto dir = std::filesystem::temp_directory_path() / "replay_html_test";
  std::filesystem::create_directories(dir);
  const auto page = dir / "report.html";
  std::ofstream(page) << render_html(sample_run());
  const std::string cmd =
      "timeout 120 " + chromium +
      " --headless --no-sandbox --disable-gpu --user-data-dir=" + (dir / "profile").string() +
      " --dump-dom file://" + page.string() + " 2>/dev/null";
  std::string dom;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) dom.append(buf.data(), n);
  const int rc = pclose(p);
  ASSERT_EQ(rc, 0) << cmd;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom, m,
                                std::regex("data-charts=\"(\\d+)\" data-charts-drawn=\"(\\d+)\" "
                                           "data-boxes=\"(\\d+)\" data-boxes-drawn=\"(\\d+)\"")))
      << dom.substr(0, 2000);
  EXPECT_EQ(m[1], "5");
  EXPECT_EQ(m[2], "5");
  // 3 bars per time chart, 2 lanes + 2 kernels per variant per timeline, 2 + 2 in the speedup
  // chart (speedup bar, % SOL background and bar per region).
  EXPECT_GT(std::stoi(m[3]), 20);
  EXPECT_EQ(m[3], m[4]) << "boxes laid out with no size";
}
