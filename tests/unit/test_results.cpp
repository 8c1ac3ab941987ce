// Results JSON and Markdown report: what they contain, from plain data.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "harness/cli/exit_codes.hpp"
#include "harness/replay/runner.hpp"
#include "harness/report/markdown.hpp"
#include "harness/report/results.hpp"

using namespace replay;

namespace {

VariantInfo fusion_variant(const std::string& name, Role role) {
  return {VariantInfo::kFusion, name, role};
}

VariantResult timed(VariantInfo variant, std::vector<double> us, bool pass = true) {
  VariantResult v;
  v.variant = std::move(variant);
  v.samples_us = std::move(us);
  v.stats = summarize(v.samples_us);
  v.host_stats = summarize({3.0, 3.5, 4.0});
  NumericsResult n;
  n.value = "y";
  n.numel = 10;
  n.bounds = default_bounds(DType::kBFloat16, 8, 1600);
  n.rel_l2 = pass ? 2e-5 : 1.3e-3;
  v.numerics.push_back(n);
  return v;
}

RunResult sample_run(bool pass) {
  RunResult run;
  run.seed = 42;
  run.ceilings.copy_gbps = 4000;
  run.environment = {{"device", "NVIDIA H200"},
                     {"git_revision", "abc123"},
                     {"driver_version", "13.0"},
                     {"cuda_runtime", "13.0"}};
  TraceResult t;
  t.name = "nanogpt_layernorm_fwd_16x1024x1600";
  t.file = "traces/x.json";
  t.input_source = "generated (seed 42)";
  RegionResult r;
  r.label = "trace = region 0: layernorm_fwd";
  r.fusion = "layernorm_fwd";
  r.cost.bytes = 100e6;  // 100 MB at 4000 GB/s = 25 µs
  r.copy_us = 27.5;
  VariantResult ref;
  ref.variant = {VariantInfo::kReference, "reference"};
  ref.skipped = "CPU float64 oracle: not timed";
  r.variants = {ref, timed({VariantInfo::kEager, "eager"}, {400, 410, 420}),
                timed(fusion_variant("baseline", Role::kBaseline), {50, 50, 50}),
                timed(fusion_variant("optimized", Role::kOptimized), {25, 26, 27}, pass)};
  t.regions.push_back(r);
  run.traces.push_back(t);
  return run;
}

}  // namespace

TEST(Results, SolPercent) {
  RegionResult r;
  r.cost.bytes = 100e6;
  Ceilings c;
  c.copy_gbps = 4000;
  EXPECT_DOUBLE_EQ(r.sol_pct(25.0, c), 100.0);
  EXPECT_DOUBLE_EQ(r.sol_pct(50.0, c), 50.0);
  EXPECT_EQ(r.sol_pct(0, c), 0);
}

TEST(Results, SolIsTheLargestMeasuredTerm) {
  RegionResult r;
  r.cost = {100e6, 2e12, 0};  // 25 µs of bytes at 4000 GB/s
  r.cost.matmul_flops = {{"bf16", 2e12}};
  Ceilings c;
  c.copy_gbps = 4000;
  EXPECT_DOUBLE_EQ(r.sol_us(c), 25.0);  // no matmul peak measured: the FLOP term is left out
  EXPECT_EQ(r.sol_terms(c).bound(), "memory");
  EXPECT_EQ(r.sol_terms(c).unmeasured, std::vector<std::string>{"bf16"});
  c.matmul_tflops["fp16"] = 1000;  // another class's peak does not count for bf16 FLOPs
  EXPECT_DOUBLE_EQ(r.sol_us(c), 25.0);
  c.matmul_tflops["bf16"] = 1000;  // 2e12 FLOP at 1000 TFLOP/s = 2000 µs
  EXPECT_DOUBLE_EQ(r.sol_us(c), 2000.0);
  EXPECT_EQ(r.sol_terms(c).bound(), "matmul");
  EXPECT_TRUE(r.sol_terms(c).unmeasured.empty());
  r.cost.comm_bytes = 1e10;  // 10 GB at 2000 GB/s = 5000 µs
  c.bus_gbps = 2000;
  EXPECT_DOUBLE_EQ(r.sol_us(c), 5000.0);
  EXPECT_EQ(r.sol_terms(c).bound(), "comm");
}

// GEMMs of several classes run one after the other on the tensor cores: their times add.
TEST(Results, MatmulTermsOfSeveralClassesAdd) {
  RegionResult r;
  r.cost.bytes = 1e6;
  r.cost.matmul_flops = {{"bf16", 1e12}, {"float8_rowwise", 2e12}};
  Ceilings c;
  c.copy_gbps = 4000;
  c.matmul_tflops = {{"bf16", 500}, {"float8_rowwise", 1000}};  // 2000 µs + 2000 µs
  const SolTerms t = r.sol_terms(c);
  EXPECT_DOUBLE_EQ(t.matmul_us, 4000.0);
  EXPECT_DOUBLE_EQ(t.memory_us, 0.25);
  EXPECT_EQ(t.describe(), "SOL 4000.0 µs, bound by matmul (memory 0.2 µs, matmul 4000.0 µs)");
  c.matmul_tflops.erase("bf16");
  EXPECT_DOUBLE_EQ(r.sol_terms(c).matmul_us, 2000.0);
  EXPECT_NE(r.sol_terms(c).describe().find("no bf16 matmul peak measured"), std::string::npos);
}

TEST(Results, JsonCarriesSchemaSamplesAndVerdicts) {
  auto j = to_json(sample_run(true));
  EXPECT_EQ(j["schema"], kResultsSchema);
  EXPECT_EQ(j["seed"], 42);
  EXPECT_EQ(j["environment"]["git_revision"], "abc123");
  EXPECT_EQ(j["traces"][0]["regions"][0]["copy_us"], 27.5);
  EXPECT_EQ(j["traces"][0]["regions"][0]["cost"]["bytes"], 100e6);
  EXPECT_EQ(j["traces"][0]["regions"][0]["variants"][3]["role"], "optimized");
  EXPECT_EQ(j["verdict"], "PASS");
  const auto& vs = j["traces"][0]["regions"][0]["variants"];
  ASSERT_EQ(vs.size(), 4u);
  EXPECT_EQ(vs[0]["skipped"], "CPU float64 oracle: not timed");
  EXPECT_EQ(vs[3]["samples_us"], nlohmann::json::array({25.0, 26.0, 27.0}));
  EXPECT_DOUBLE_EQ(vs[3]["stats"]["median_us"].get<double>(), 26.0);
  EXPECT_NEAR(vs[3]["sol_pct"].get<double>(), 100.0 * 25.0 / 26.0, 1e-9);
  EXPECT_DOUBLE_EQ(vs[3]["host_enqueue"]["median_us"].get<double>(), 3.5);
}

// Hot and CUDA-graph samples, and a graph that could not be captured, reach results.json and the
// Markdown table; a variant measured cold only carries neither key.
TEST(Results, HotAndGraphModes) {
  RunResult run = sample_run(true);
  auto& vs = run.traces[0].regions[0].variants;
  vs[3].hot_samples_us = {20, 21, 22};
  vs[3].hot_stats = summarize(vs[3].hot_samples_us);
  vs[3].graph_samples_us = {24, 24.5, 25};
  vs[3].graph_stats = summarize(vs[3].graph_samples_us);
  vs[2].graph_skipped = "the replay cannot be captured into a CUDA graph: x";
  const auto j = to_json(run)["traces"][0]["regions"][0]["variants"];
  EXPECT_DOUBLE_EQ(j[3]["hot"]["stats"]["median_us"].get<double>(), 21.0);
  EXPECT_EQ(j[3]["graph"]["samples_us"], nlohmann::json::array({24.0, 24.5, 25.0}));
  EXPECT_EQ(j[2]["graph"]["skipped"], vs[2].graph_skipped);
  EXPECT_FALSE(j[1].contains("hot"));
  EXPECT_FALSE(j[1].contains("graph"));
  const std::string md = render_markdown(run);
  EXPECT_NE(md.find("| 21.00 | 24.50 | 3.50 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| – | not capturable | 3.50 |"), std::string::npos) << md;
}

TEST(Results, FailingNumericsPropagate) {
  RunResult run = sample_run(false);
  EXPECT_EQ(run.verdict(), Verdict::kFail);
  EXPECT_EQ(to_json(run)["traces"][0]["verdict"], "FAIL");
  std::string md = render_markdown(run);
  EXPECT_NE(md.find("**FAIL** `y`: rel_l2 1.30e-03 > 4.57e-04"), std::string::npos) << md;
  EXPECT_NE(md.find("Overall numerics: **FAIL**"), std::string::npos);
}

TEST(Results, MarkdownTable) {
  std::string md = render_markdown(sample_run(true));
  EXPECT_NE(md.find("## nanogpt_layernorm_fwd_16x1024x1600"), std::string::npos);
  EXPECT_NE(md.find("| variant | median µs |"), std::string::npos);
  EXPECT_NE(md.find("| optimized | 26.00 |"), std::string::npos) << md;
  // baseline 50 / optimized 26; no hot or graph samples: dashes; host enqueue 3.50
  EXPECT_NE(md.find("1.92× | – | – | 3.50 |"), std::string::npos) << md;
  EXPECT_NE(md.find("SOL time 25.00 µs"), std::string::npos) << md;
  EXPECT_NE(md.find("timed the same way: 27.50 µs"), std::string::npos) << md;
  EXPECT_NE(md.find("skipped: CPU float64 oracle"), std::string::npos);
  EXPECT_NE(md.find("Overall numerics: PASS"), std::string::npos);
}

TEST(Results, NoDeviceNoteAndTraceErrors) {
  RunResult run;
  run.gpu_note = "GPU replay needs a CUDA device: none was found";
  TraceResult bad;
  bad.name = "broken";
  bad.error = "traces/broken.json: node 'sub': recorded output shape ...";
  bad.error_kind = TraceResult::Error::kBadInput;
  run.traces.push_back(bad);
  std::string md = render_markdown(run);
  EXPECT_NE(md.find("GPU replay needs a CUDA device"), std::string::npos);
  EXPECT_NE(md.find("**error** (bad input): traces/broken.json: node 'sub'"), std::string::npos)
      << md;
  EXPECT_EQ(to_json(run)["traces"][0]["error"], bad.error);
  EXPECT_EQ(to_json(run)["traces"][0]["error_kind"], "bad input");
}

namespace {

// Cells of a Markdown table row: split on '|' not preceded by a backslash, outer pipes dropped.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '|' && line[i - 1] != '\\') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  return out;
}

// Every table of `md`: each row has as many cells as its header; the second line is the rule.
void expect_tables_well_formed(const std::string& md) {
  std::istringstream in(md);
  std::string line;
  size_t header = 0, row_in_table = 0, tables = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '|') {
      row_in_table = 0;
      continue;
    }
    auto c = cells(line);
    if (row_in_table == 0) {
      header = c.size();
      ++tables;
    } else {
      EXPECT_EQ(c.size(), header) << "row has " << c.size() << " cells, header " << header << ":\n"
                                  << line;
      if (row_in_table == 1) {
        for (const auto& cell : c) EXPECT_NE(cell.find("---"), std::string::npos) << line;
      }
    }
    ++row_in_table;
  }
  EXPECT_GT(tables, 0u);
}

}  // namespace

TEST(Report, EveryTableIsWellFormed) {
  RunResult run = sample_run(true);
  // A skip reason with a pipe in it, and a run without a device: the row keeps its shape.
  run.traces[0].regions[0].variants[0].skipped = "reason with a | pipe";
  expect_tables_well_formed(render_markdown(run));
  RunResult nodev = sample_run(false);
  for (auto& v : nodev.traces[0].regions[0].variants)
    if (v.variant.is_gpu()) {
      v.samples_us.clear();
      v.numerics.clear();
      v.skipped = "no CUDA device (GPU replay needs one)";
    }
  expect_tables_well_formed(render_markdown(nodev));
}

TEST(Report, TableCheckerCatchesARaggedRow) {
  EXPECT_NONFATAL_FAILURE(expect_tables_well_formed("| a | b |\n|---|---|\n| 1 | 2 | 3 |\n"),
                          "row has 3 cells");
}

TEST(Results, SkippedIsNotComparedNeverPass) {
  RunResult run;
  TraceResult t;
  t.name = "t";
  RegionResult r;
  r.label = "trace";
  VariantResult skipped;
  skipped.variant = {VariantInfo::kEager, "eager"};
  skipped.skipped = "no CUDA device (GPU replay needs one)";
  r.variants.push_back(skipped);
  t.regions.push_back(r);
  run.traces.push_back(t);
  EXPECT_EQ(run.verdict(), Verdict::kNotCompared);
  auto j = to_json(run);
  EXPECT_EQ(j["verdict"], "not compared");
  EXPECT_EQ(j["traces"][0]["regions"][0]["variants"][0]["verdict"], "not compared");
  std::string md = render_markdown(run);
  EXPECT_NE(md.find("Overall numerics: not compared"), std::string::npos) << md;
  EXPECT_EQ(md.find("PASS"), std::string::npos) << md;
}

TEST(ExitCode, PrecedenceNumericsThenRuntimeThenBadInputThenNoDevice) {
  auto with = [](bool numerics_fail, bool runtime, bool bad) {
    RunResult run = sample_run(!numerics_fail);
    if (runtime) {
      TraceResult t;
      t.error_kind = TraceResult::Error::kRuntime;
      run.traces.push_back(t);
    }
    if (bad) {
      TraceResult t;
      t.error_kind = TraceResult::Error::kBadInput;
      run.traces.push_back(t);
    }
    return run;
  };
  EXPECT_EQ(exit_code(with(false, false, false), false, false), kExitOk);
  EXPECT_EQ(exit_code(with(false, false, false), false, true), kExitNoDevice);
  EXPECT_EQ(exit_code(with(false, false, true), false, true), kExitBadInput);
  EXPECT_EQ(exit_code(with(false, true, true), false, true), kExitRuntime);
  EXPECT_EQ(exit_code(with(false, false, false), true, false), kExitRuntime);
  EXPECT_EQ(exit_code(with(true, true, true), true, true), kExitNumerics);
  EXPECT_EQ(exit_code(with(true, false, true), false, false), kExitNumerics);
}

TEST(Report, TablesOfARealRunAreWellFormed) {
  // The bundled traces with golden tensors (the small shapes: the realistic ones' float64
  // references take minutes) and the malformed ones, through the run pipeline (reference only:
  // no GPU here), rendered as `replay run` renders them.
  RunResult run;
  RunOptions opt;
  opt.variants = {"reference", "eager", "baseline", "optimized"};
  for (const auto& dir :
       {std::string(REPLAY_TRACES_DIR), std::string(REPLAY_TRACES_DIR) + "/../tests/data/bad"})
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".json" &&
          (dir != REPLAY_TRACES_DIR ||
           std::filesystem::exists(
               std::filesystem::path(e.path()).replace_extension(".safetensors"))))
        run.traces.push_back(run_trace(e.path().string(), opt, nullptr));
  expect_tables_well_formed(render_markdown(run));
}

namespace {

KernelEvent event(const std::string& name, double start, double dur, uint32_t stream) {
  KernelEvent e;
  e.name = name;
  e.start_us = start;
  e.dur_us = dur;
  e.stream = stream;
  return e;
}

void add_timeline(VariantResult& v, std::vector<KernelEvent> tl) {
  CuptiSummary c;
  c.timeline = std::move(tl);
  v.cupti = c;
}

}  // namespace

TEST(Results, CommunicatingRegionCarriesOverlapFigures) {
  RunResult run = sample_run(true);
  RegionResult& r = run.traces[0].regions[0];
  r.fusion = "ag_matmul";
  r.cost.comm_bytes = 3e6;
  // Baseline: NCCL all-gather 40 µs then the GEMM 100 µs; optimized: its copies [0, 10) under
  // its GEMM [5, 25), a span of 25 µs on its own CUPTI replay.
  add_timeline(r.variants[2], {event("ncclDevKernel_AllGather_RING_LL(x)", 0, 40, 1),
                               event("nvjet_gemm", 40, 100, 1)});
  KernelEvent cp = event("memcpy DtoD", 0, 10, 2);
  cp.kind = KernelEvent::Kind::kMemcpy;
  cp.copy_kind = "DtoD";
  add_timeline(r.variants[3], {cp, event("nvjet_gemm", 5, 20, 1)});
  const nlohmann::json j = to_json(run);
  const auto& reg = j["traces"][0]["regions"][0];
  ASSERT_TRUE(reg.contains("overlap"));
  // E = (100 + 40 - 25) / 40
  EXPECT_DOUBLE_EQ(reg["overlap"]["optimized"]["efficiency"].get<double>(), (140.0 - 25) / 40);
  EXPECT_DOUBLE_EQ(reg["overlap"]["optimized"]["baseline_busbw_GBps"].get<double>(), 75);
  const auto& opt = reg["variants"][3]["overlap"];
  EXPECT_DOUBLE_EQ(opt["comm_us"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(opt["overlap_us"].get<double>(), 5);
  EXPECT_DOUBLE_EQ(opt["exposed_comm_us"].get<double>(), 5);
  const std::string md = render_markdown(run);
  EXPECT_NE(md.find("Communication overlap"), std::string::npos);
  EXPECT_NE(md.find("| optimized | 10.00 | 20.00 | 50.0% | 5.00 | 287.5% |"), std::string::npos)
      << md;
  expect_tables_well_formed(md);
  // The same region without communication: no overlap figures anywhere.
  r.cost.comm_bytes = 0;
  EXPECT_FALSE(to_json(run)["traces"][0]["regions"][0].contains("overlap"));
  EXPECT_EQ(render_markdown(run).find("Communication overlap"), std::string::npos);
}

// A results.json / report.md written before the run finished says so (run.complete).
TEST(Report, AnIncompleteRunSaysSo) {
  RunResult run = sample_run(true);
  run.run_info["complete"] = false;
  EXPECT_NE(render_markdown(run).find("Incomplete: the run had not finished"), std::string::npos);
  run.run_info["complete"] = true;
  EXPECT_EQ(render_markdown(run).find("Incomplete"), std::string::npos);
  run.run_info.erase("complete");  // results from before the flag: nothing claimed either way
  EXPECT_EQ(render_markdown(run).find("Incomplete"), std::string::npos);
}
