// Reading results.json back, sharding a suite and merging results (harness/report/results_io).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include "harness/report/results_io.hpp"
#include "tests/unit/test_util.hpp"

using namespace replay;

namespace {

VariantResult timed(VariantInfo info, std::vector<double> us) {
  VariantResult v;
  v.variant = std::move(info);
  v.samples_us = std::move(us);
  v.stats = summarize(v.samples_us);
  v.host_stats = summarize({2.5, 3.0, 3.5});
  v.stop = StopReason::kConverged;
  v.timing_wall_s = 0.25;
  v.sm_clock_mhz = summarize({1980, 1975, 1980});
  v.clock_floor_mhz = 1485;
  v.discarded_slow_clock = 2;
  return v;
}

NumericsResult numerics(const std::string& value, bool pass) {
  NumericsResult n;
  n.value = value;
  n.dtype = DType::kBFloat16;
  n.numel = 1000;
  n.beyond_1ulp = pass ? 1 : 300;
  n.beyond_1ulp_share = n.beyond_1ulp / 1000.0;
  n.max_ulp_err = pass ? 1.5 : std::numeric_limits<double>::infinity();  // written as null
  n.max_abs_err = 0.01;
  n.max_rel_err = 0.02;
  n.rel_l2 = pass ? 1e-4 : 0.3;
  n.bias = 1e-6;
  n.bias_se = 1e-7;
  n.max_row_rel_l2 = 2e-4;
  n.worst_row = 7;
  n.elem_excess = pass ? 0 : 12;
  n.bounds = {4.6e-4, 2e-3, 1e-3, 1e-3, 0.016, 4, 1e-3, true, "bf16 after 3 ops, k = 1600"};
  if (!pass) {
    n.first_bad = {0, 3, 17};
    n.first_got = 2.5;
    n.first_target = 2.0;
  }
  return n;
}

// A run with every field results.json carries.
RunResult rich_run() {
  RunResult run;
  run.environment = {{"device", "NVIDIA H100 80GB HBM3"}, {"git_revision", "abc"}};
  run.run_info = {{"started_utc", "2026-11-22T15:00:00Z"}, {"modes", {"cold", "hot", "graph"}}};
  run.seed = (uint64_t(1) << 63) + 5;
  run.ceilings.copy_gbps = 3050.5;
  run.ceilings.matmul_tflops = {{"bf16", 701.5}, {"float8_rowwise", 1228.0}};
  run.ceilings.matmul_problem = "square GEMMs (bf16 8192^3)";
  run.gpu_note = "a note";
  TraceResult t;
  t.name = "nanogpt_layernorm_fwd_16x1024x1600";
  t.file = "traces/nanogpt_layernorm_fwd_16x1024x1600.json";
  t.input_source = "generated (seed 5)";
  t.reference_s = 1.7;
  t.reference_estimate_s = 1.5;
  t.golden_check = {numerics("y", true)};
  t.dropped_matches = {"norm_bwd on [a, b]: not convex"};
  RegionResult whole;
  whole.label = "trace";
  whole.region = -1;
  whole.nodes = {"n1", "n2", "n3"};
  whole.cost = {104.9e6, 0, 0};
  whole.cost.matmul_flops = {{"bf16", 2e12}, {"fp64", 1e9}};
  whole.copy_us = 40.2;
  VariantResult ref;
  ref.variant = {VariantInfo::kReference, "reference"};
  ref.skipped = "CPU float64 oracle: not timed";
  VariantResult eager = timed({VariantInfo::kEager, "eager"}, {466, 467, 468, 470});
  eager.hot_samples_us = {467, 468};
  eager.hot_stats = summarize(eager.hot_samples_us);
  eager.graph_samples_us = {450, 451};
  eager.graph_stats = summarize(eager.graph_samples_us);
  eager.numerics = {numerics("y", true)};
  eager.host_enqueue_waited = 3;
  eager.host_steps = {{"mm", 9.5, 0}, {"add (copy)", 3.25, 2}};
  CuptiSummary c;
  c.kernels = {{"void k<float>(int)", 2, 30.5}};
  c.kernel_sum_us = 30.5;
  c.kernel_busy_us = 15.25;  // the timeline's two kernels run at the same time
  c.span_us = 33;
  KernelEvent e;
  e.name = "void k<float>(int)";
  e.start_us = 1.5;
  e.dur_us = 15.25;
  e.stream = 13;
  e.grid[0] = 132;
  e.grid[1] = e.grid[2] = 1;
  e.block[0] = 256;
  e.block[1] = e.block[2] = 1;
  e.registers = 32;
  e.static_smem = 1024;
  e.dynamic_smem = 0;
  KernelEvent m;  // a copy rides in the same timeline
  m.kind = KernelEvent::Kind::kMemcpy;
  m.name = "memcpy DtoD";
  m.copy_kind = "DtoD";
  m.bytes = 1 << 20;
  m.start_us = 17;
  m.dur_us = 2.5;
  m.stream = 14;
  c.timeline = {e, e, m};
  eager.cupti = c;
  VariantResult base = timed({VariantInfo::kFusion, "baseline", Role::kBaseline}, {60, 61});
  base.graph_skipped = "the replay cannot be captured into a CUDA graph: x";
  base.numerics = {numerics("y", false)};
  VariantResult opt = timed({VariantInfo::kFusion, "optimized", Role::kOptimized}, {38, 39});
  GemmChoice gc;
  gc.name = "mm";
  gc.problem = "bfloat16 [8192, 4096] @ [4096, 14336] (b column-major) -> bfloat16, bias";
  gc.algo = "id 66 tile 20 stages 8 splitK 1 reduction 0 swizzle 0";
  gc.tuned = true;
  gc.candidates = 3;
  gc.candidate_us = {1350.5, -1, 1312.25};
  gc.chosen = 2;
  gc.workspace_bytes = 1u << 20;
  opt.gemms = {gc};
  VariantResult alt = timed({VariantInfo::kFusion, "cublas", Role::kAlternative}, {50});
  alt.stop = StopReason::kTimeout;
  VariantResult peer = timed({VariantInfo::kPeer, "pytorch_ops"}, {480, 490});
  peer.stop = StopReason::kFixedCount;
  whole.variants = {ref, eager, base, opt, alt, peer};
  t.regions = {whole};
  run.traces.push_back(t);
  TraceResult bad;
  bad.name = bad.file = "traces/bad.json";
  bad.error_kind = TraceResult::Error::kBadInput;
  bad.error = "traces/bad.json: node 'sub': shape";
  run.traces.push_back(bad);
  TraceResult big;
  big.name = "big";
  big.file = "traces/big.json";
  big.not_replayed = "not replayed: over the budget";
  run.traces.push_back(big);
  return run;
}

std::string error_of(const nlohmann::json& j) {
  try {
    results_from_json(j, "r.json");
  } catch (const ResultsError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ResultsIo, KernelBusyTimeFromTheTimelineWhereTheFileHasNone) {
  nlohmann::json j = to_json(rich_run());
  nlohmann::json& c = j["traces"][0]["regions"][0]["variants"][1]["cupti"];
  ASSERT_TRUE(c.contains("kernel_busy_us"));
  // A file from before the field: the union of its timeline's kernels (the two overlapping
  // kernels once, the copy left out), not the sum that counts the overlap twice.
  c.erase("kernel_busy_us");
  const RunResult back = results_from_json(j, "r.json");
  EXPECT_DOUBLE_EQ(back.traces[0].regions[0].variants[1].cupti->kernel_busy_us, 15.25);
  // Without a timeline either: the kernel sum (no overlap known).
  nlohmann::json no_tl = j;
  no_tl["traces"][0]["regions"][0]["variants"][1]["cupti"].erase("timeline");
  EXPECT_DOUBLE_EQ(
      results_from_json(no_tl, "r.json").traces[0].regions[0].variants[1].cupti->kernel_busy_us,
      30.5);
  // A negative busy time, or a timeline record of negative duration, is a named error.
  nlohmann::json bad = to_json(rich_run());
  bad["traces"][0]["regions"][0]["variants"][1]["cupti"]["kernel_busy_us"] = -1.0;
  EXPECT_NE(error_of(bad).find("kernel_busy_us"), std::string::npos) << error_of(bad);
  c["timeline"][0]["dur_us"] = -2.0;
  EXPECT_NE(error_of(j).find("negative duration"), std::string::npos) << error_of(j);
}

TEST(ResultsIo, EveryFieldSurvivesTheRoundTrip) {
  const nlohmann::json first = to_json(rich_run());
  const RunResult back = results_from_json(first, "r.json");
  EXPECT_EQ(to_json(back), first);
  // Spot checks on the structs, not only the JSON.
  EXPECT_EQ(back.seed, (uint64_t(1) << 63) + 5);
  const auto& vs = back.traces[0].regions[0].variants;
  EXPECT_EQ(vs[0].variant.kind, VariantInfo::kReference);
  EXPECT_EQ(vs[2].variant.role, Role::kBaseline);
  EXPECT_EQ(vs[5].variant.kind, VariantInfo::kPeer);
  EXPECT_EQ(vs[5].stop, StopReason::kFixedCount);
  EXPECT_TRUE(std::isinf(vs[2].numerics[0].max_ulp_err));  // infinity was written as null
  EXPECT_EQ(vs[1].cupti->timeline[1].stream, 13u);
  EXPECT_EQ(vs[1].cupti->timeline[2].kind, KernelEvent::Kind::kMemcpy);
  EXPECT_EQ(vs[1].cupti->timeline[2].bytes, 1u << 20);
  EXPECT_EQ(vs[1].host_enqueue_waited, 3u);
  ASSERT_EQ(vs[1].host_steps.size(), 2u);
  EXPECT_EQ(vs[1].host_steps[1].step, "add (copy)");
  EXPECT_EQ(vs[1].host_steps[1].median_us, 3.25);
  EXPECT_EQ(vs[1].host_steps[1].waited, 2u);
  EXPECT_EQ(vs[1].host_steps[0].waited, 0u);
  EXPECT_TRUE(vs[0].host_steps.empty());
  EXPECT_EQ(back.traces[0].reference_estimate_s, 1.5);
  EXPECT_EQ(back.ceilings.matmul_tflops.at("float8_rowwise"), 1228.0);
  EXPECT_EQ(back.ceilings.matmul_problem, "square GEMMs (bf16 8192^3)");
  EXPECT_EQ(back.traces[0].regions[0].cost.matmul_flops.at("bf16"), 2e12);
  EXPECT_EQ(back.traces[1].error_kind, TraceResult::Error::kBadInput);
  EXPECT_EQ(back.verdict(), Verdict::kFail);  // recomputed from the numerics read back
  ASSERT_EQ(vs[3].gemms.size(), 1u);
  EXPECT_EQ(vs[3].gemms[0].candidate_us[1], -1);  // a candidate cuBLASLt refused
  EXPECT_EQ(vs[3].gemms[0].chosen_us(), 1312.25);
  EXPECT_EQ(vs[3].gemms[0].first_us(), 1350.5);
  EXPECT_EQ(vs[3].gemms[0].workspace_bytes, 1u << 20);
  EXPECT_EQ(first["traces"][0]["regions"][0]["variants"][3]["gemms"][0]["heuristic_first_us"],
            1350.5);
}

// The log records only while alive, innermost first; describe() names the choice and its times.
TEST(GemmChoiceLog, RecordsWhileAliveAndDescribes) {
  GemmChoice c;
  c.name = "mm_1";
  c.problem = "bfloat16 [16, 32] @ [32, 64] -> bfloat16";
  c.algo = "id 1";
  record_gemm_choice(c);  // no log: dropped
  GemmChoiceLog outer;
  {
    GemmChoiceLog inner;
    record_gemm_choice(c);
    EXPECT_EQ(inner.take().size(), 1u);
  }
  EXPECT_TRUE(outer.take().empty());
  EXPECT_NE(describe(c).find("the heuristic's first of 0, not timed"), std::string::npos);
  c.tuned = true;
  c.candidate_us = {20.0, 10.0};
  c.chosen = 1;
  const std::string d = describe(c);
  EXPECT_NE(d.find("'mm_1' bfloat16 [16, 32] @ [32, 64] -> bfloat16: id 1, 10.0 µs"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("heuristic's first 20.0 µs"), std::string::npos) << d;
  EXPECT_NE(d.find("2 candidates timed"), std::string::npos) << d;
}

TEST(ResultsIo, SchemaOneIsRead) {
  const std::string path =
      std::string(REPLAY_TRACES_DIR) + "/../tests/data/results/h200_verdicts_schema1.json";
  const RunResult r = read_results(path);
  EXPECT_EQ(r.traces.size(), 4u);
  EXPECT_EQ(r.environment.value("device", ""), "NVIDIA H200");
  size_t timed = 0;
  for (const auto& t : r.traces)
    for (const auto& row : t.regions)
      for (const auto& v : row.variants) timed += v.timed();
  EXPECT_GT(timed, 0u);
}

// Before the per-class matmul peaks, ceilings.matmul_TFLOPs was one number (never measured) and
// costs had no matmul_FLOP: such files still read, with no matmul term.
TEST(ResultsIo, ScalarMatmulCeilingOfEarlierRunsReadsAsUnmeasured) {
  nlohmann::json j = to_json(rich_run());
  j["ceilings"]["matmul_TFLOPs"] = 0;
  j["ceilings"].erase("matmul_problem");
  j["traces"][0]["regions"][0]["cost"].erase("matmul_FLOP");
  const RunResult r = results_from_json(j, "r.json");
  EXPECT_TRUE(r.ceilings.matmul_tflops.empty());
  EXPECT_TRUE(r.traces[0].regions[0].cost.matmul_flops.empty());
  j["ceilings"]["matmul_TFLOPs"] = {{"bf16", "fast"}};
  EXPECT_NE(error_of(j).find("/ceilings/matmul_TFLOPs: expected a number at key 'bf16'"),
            std::string::npos)
      << error_of(j);
}

TEST(ResultsIo, ErrorsNameTheFileThePathAndWhatWasExpected) {
  nlohmann::json j = to_json(rich_run());
  nlohmann::json bad = j;
  bad["schema"] = "replay-results/9";
  EXPECT_NE(error_of(bad).find("r.json: /schema: expected \"replay-results/2\""), std::string::npos)
      << error_of(bad);
  bad = j;
  bad["traces"][0]["regions"][0]["variants"][1]["stats"].erase("median_us");
  EXPECT_NE(error_of(bad).find("/traces/0/regions/0/variants/1/stats: missing field \"median_us\""),
            std::string::npos)
      << error_of(bad);
  bad = j;
  bad["traces"][0]["regions"][0]["copy_us"] = "fast";
  EXPECT_NE(error_of(bad).find("/traces/0/regions/0/copy_us: expected a number"), std::string::npos)
      << error_of(bad);
  bad = j;
  bad["traces"][0]["regions"][0]["variants"][2]["role"] = "fastest";
  EXPECT_NE(error_of(bad).find("variants/2/role: expected baseline, optimized or alternative"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  bad["traces"] = nlohmann::json::object();
  EXPECT_NE(error_of(bad).find("/traces: expected an array"), std::string::npos);
  EXPECT_THROW(read_results("/nonexistent/results.json"), ResultsError);
}

// The first committed H200 run is an early draft of schema 1: refused with a message that says
// so (compare still reads its samples).
TEST(ResultsIo, EarlyDraftOfSchemaOneIsRefusedClearly) {
  const std::string f =
      std::string(REPLAY_TRACES_DIR) + "/../tests/data/results/h200_schema1_first_draft.json";
  try {
    read_results(f);
    ADD_FAILURE() << "read an early draft";
  } catch (const ResultsError& e) {
    EXPECT_NE(std::string(e.what()).find("early draft of replay-results/1"), std::string::npos)
        << e.what();
  }
}

TEST(ResultsIo, ShardSpecs) {
  EXPECT_EQ(parse_shard("0/1"), std::make_pair(size_t(0), size_t(1)));
  EXPECT_EQ(parse_shard("2/3"), std::make_pair(size_t(2), size_t(3)));
  for (const char* bad : {"3/2", "2/2", "0/0", "a/b", "1", "/2", "1/", "-1/2", "1/2/3", " 1/2"})
    EXPECT_THROW(parse_shard(bad), std::invalid_argument) << bad;
}

TEST(ResultsIo, ShardsPartitionTheTracesWhateverTheOrder) {
  std::vector<std::string> files;
  for (int i = 0; i < 23; ++i) files.push_back("traces/t" + std::to_string(i) + ".json");
  std::vector<std::string> reversed(files.rbegin(), files.rend());
  for (size_t n : {1, 2, 3, 5, 30}) {
    std::multiset<std::string> all;
    for (size_t i = 0; i < n; ++i) {
      const auto a = shard_files(files, i, n), b = shard_files(reversed, i, n);
      EXPECT_EQ(a, b);  // deterministic: the order given does not matter
      EXPECT_LE(a.size(), (files.size() + n - 1) / n);
      all.insert(a.begin(), a.end());
    }
    EXPECT_EQ(all, std::multiset<std::string>(files.begin(), files.end())) << n;
  }
}

TEST(ResultsIo, MergeJoinsShardsAndPeers) {
  RunResult a = rich_run(), b = rich_run();
  a.traces.resize(1);                // shard 0: the first trace
  b.traces.erase(b.traces.begin());  // shard 1: the other two
  RunResult peers;
  peers.run_info = {{"peers", true}};
  peers.environment = {{"device", "NVIDIA H100 80GB HBM3"}};
  TraceResult pt;
  pt.name = a.traces[0].name;
  pt.file = "elsewhere.json";
  RegionResult row;
  row.label = "trace";
  row.variants = {timed({VariantInfo::kPeer, "torch_compile"}, {300, 301})};
  pt.regions = {row};
  TraceResult only_peer = pt;
  only_peer.name = "only_in_peers";
  peers.traces = {pt, only_peer};
  const RunResult m = merge_runs({peers, a, b}, {"peers.json", "a.json", "b.json"});
  ASSERT_EQ(m.traces.size(), 4u);  // a's trace, b's two, and the peers' trace we did not run
  EXPECT_EQ(m.traces[0].name, a.traces[0].name);
  const auto& row0 = m.traces[0].regions[0].variants;
  EXPECT_EQ(row0.back().variant.name, "torch_compile");  // joined to our row
  EXPECT_EQ(row0.size(), a.traces[0].regions[0].variants.size() + 1);
  EXPECT_EQ(m.traces[3].name, "only_in_peers");
  EXPECT_EQ(m.environment, a.environment);  // the lead is the first part of ours
  EXPECT_EQ(m.run_info["merged_from"].size(), 3u);
  EXPECT_EQ(m.gpu_note, "a note");
  EXPECT_EQ(m.verdict(), Verdict::kFail);
  // The merged run writes and reads back like any other.
  EXPECT_EQ(to_json(results_from_json(to_json(m), "m.json")), to_json(m));
}

TEST(ResultsIo, MergeRefusesClashes) {
  RunResult a = rich_run(), b = rich_run();
  try {
    merge_runs({a, b}, {"a.json", "b.json"});
    ADD_FAILURE() << "a trace in two parts was merged";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is in both a.json and b.json"), std::string::npos)
        << e.what();
  }
  b.traces.clear();
  b.seed = 7;
  try {
    merge_runs({a, b}, {"a.json", "b.json"});
    ADD_FAILURE() << "runs of different seeds were merged";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("b.json ran with seed 7"), std::string::npos) << e.what();
  }
  b.seed = a.seed;
  b.environment["device"] = "NVIDIA H200";
  const RunResult m = merge_runs({a, b}, {"a.json", "b.json"});
  EXPECT_NE(m.gpu_note.find("MERGED FROM DIFFERENT DEVICES"), std::string::npos);
  EXPECT_THROW(merge_runs({}, {}), std::invalid_argument);
  // Two files of one trace name: rows are keyed on names, so this is a clash too.
  RunResult c = rich_run();
  c.traces.resize(1);
  c.traces[0].file = "other/dir/" + c.traces[0].file;
  RunResult d = rich_run();
  d.traces.resize(1);
  try {
    merge_runs({d, c}, {"d.json", "c.json"});
    ADD_FAILURE() << "two traces of one name were merged";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("two traces are named"), std::string::npos) << e.what();
  }
}

// Peers listed first, on a machine without a GPU run of ours: the lead is still our run (its
// seed is checked, its run info has no "peers"); a peer trace that failed as a whole joins our
// row as a skipped peer variant instead of clashing with our trace.
TEST(ResultsIo, MergeLeadIsOursAndFailedPeersJoinAsSkipped) {
  RunResult a = rich_run(), b = rich_run();
  a.traces.resize(1);
  b.traces.erase(b.traces.begin());
  a.environment.erase("device");
  b.environment.erase("device");
  b.seed = a.seed + 1;
  auto& ours = a.traces[0].regions[0].variants;  // rich_run's row has peers already: drop them
  std::erase_if(ours, [](const VariantResult& v) { return v.variant.kind == VariantInfo::kPeer; });
  RunResult peers;
  peers.run_info = {{"peers", true}};
  peers.environment = {{"device", "NVIDIA H100 80GB HBM3"}};
  peers.seed = 99;
  TraceResult failed;
  failed.name = a.traces[0].name;
  failed.file = a.traces[0].file;
  failed.error = "peer: CUDA out of memory";
  peers.traces = {failed};
  EXPECT_THROW(merge_runs({peers, a, b}, {"p.json", "a.json", "b.json"}), std::invalid_argument);
  b.seed = a.seed;
  const RunResult m = merge_runs({peers, a, b}, {"p.json", "a.json", "b.json"});
  EXPECT_EQ(m.seed, a.seed);
  EXPECT_FALSE(m.run_info.contains("peers"));
  ASSERT_EQ(m.traces.size(), 3u);
  const VariantResult& joined = m.traces[0].regions[0].variants.back();
  EXPECT_EQ(joined.variant.kind, VariantInfo::kPeer);
  EXPECT_EQ(joined.skipped, "peer failed: peer: CUDA out of memory");
  // Peers merged alone stay peers, so that they still join our rows in a later merge.
  EXPECT_TRUE(merge_runs({peers}, {"p.json"}).run_info.value("peers", false));
}
