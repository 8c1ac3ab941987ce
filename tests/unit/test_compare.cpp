// `replay compare`: the rank test against known answers, verdicts on synthetic samples with known
// answers, numerics regressions, and self-comparison of a committed H200 run.
#include <gtest/gtest.h>

#include <cmath>

#include "harness/report/compare.hpp"
#include "harness/report/results.hpp"
#include "test_util.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

// Samples around `median` with a spread of +-`spread` (relative), deterministic.
std::vector<double> samples(double median, double spread, int n = 50, int phase = 0) {
  std::vector<double> s;
  for (int i = 0; i < n; ++i)
    s.push_back(median * (1 + spread * std::sin(0.7 * (i + phase) + 0.3)));
  return s;
}

json run_with(const std::vector<double>& us, const std::string& verdict = "PASS",
              double host_us = 0) {
  json v = {{"variant", "optimized"},
            {"samples_us", us},
            {"verdict", verdict},
            {"host_enqueue", {{"median_us", host_us}}}};
  return {{"schema", kResultsSchema},
          {"traces", {{{"name", "t"}, {"regions", {{{"label", "trace"}, {"variants", {v}}}}}}}}};
}

Change verdict_of(const std::vector<double>& a, const std::vector<double>& b) {
  auto rows = compare_runs(run_with(a), run_with(b), CompareOptions{});
  EXPECT_EQ(rows.size(), 1u);
  return rows.empty() ? Change::kOnlyOld : rows[0].verdict;
}

}  // namespace

TEST(Compare, MannWhitneyKnownAnswers) {
  // Identical samples: no evidence of a shift.
  EXPECT_NEAR(mann_whitney_p({1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3, 4, 5, 6, 7, 8}), 1.0, 1e-9);
  // Complete separation, 10 vs 10: U = 0; normal approximation with continuity correction:
  // z = (50 - 0.5) / sqrt(10 * 10 * 21 / 12) = 3.742, p = erfc(z / sqrt 2) = 1.83e-4.
  std::vector<double> lo, hi;
  for (int i = 0; i < 10; ++i) lo.push_back(i), hi.push_back(100 + i);
  EXPECT_NEAR(mann_whitney_p(lo, hi), 1.83e-4, 0.02e-4);
  EXPECT_NEAR(mann_whitney_p(hi, lo), mann_whitney_p(lo, hi), 1e-12);  // two-sided
  EXPECT_EQ(mann_whitney_p({}, hi), 1.0);
  EXPECT_EQ(mann_whitney_p({5, 5, 5}, {5, 5, 5}), 1.0);  // all tied
}

TEST(Compare, VerdictsFromSamples) {
  EXPECT_EQ(verdict_of(samples(30, 0.01), samples(30, 0.01, 50, 7)), Change::kSame);
  EXPECT_EQ(verdict_of(samples(30, 0.01), samples(33, 0.01)), Change::kSlower);  // +10 %, quiet
  EXPECT_EQ(verdict_of(samples(30, 0.01), samples(27, 0.01)), Change::kFaster);  // -10 %, quiet
  EXPECT_EQ(verdict_of(samples(30, 0.01), samples(30.6, 0.01)), Change::kSame);  // +2 % < 5 %
  // +8 % but with +-60 % noise and few samples: not significant.
  EXPECT_EQ(verdict_of(samples(30, 0.6, 10), samples(32.4, 0.6, 10, 3)), Change::kUnsure);
}

TEST(Compare, GateFailsOnSlowerOrNumericsRegressionOnly) {
  const auto a = samples(30, 0.01);
  EXPECT_FALSE(compare_fails(compare_runs(run_with(a), run_with(samples(27, 0.01)), {})));
  EXPECT_TRUE(compare_fails(compare_runs(run_with(a), run_with(samples(33, 0.01)), {})));
  auto rows = compare_runs(run_with(a), run_with(a, "FAIL"), {});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].numerics_regressed);
  EXPECT_TRUE(compare_fails(rows));
  EXPECT_FALSE(compare_fails(compare_runs(run_with(a, "FAIL"), run_with(a, "FAIL"), {})));
  std::string md = render_compare(rows, {});
  EXPECT_NE(md.find("**Gate: FAIL**"), std::string::npos) << md;
  EXPECT_NE(md.find("**PASS → FAIL**"), std::string::npos) << md;
}

TEST(Compare, RowsInOnlyOneRunAreListed) {
  json b = run_with(samples(30, 0.01));
  b["traces"][0]["regions"][0]["variants"][0]["variant"] = "baseline";
  auto rows = compare_runs(run_with(samples(30, 0.01)), b, {});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].verdict, Change::kOnlyOld);
  EXPECT_EQ(rows[1].verdict, Change::kOnlyNew);
  // A row that disappeared fails the gate (a trace that stopped running must not pass it) ...
  EXPECT_TRUE(compare_fails(rows));
  EXPECT_NE(render_compare(rows, {}).find("**Gate: FAIL** (rows of the old run missing"),
            std::string::npos);
  // ... unless asked not to; the row only in the new run does not fail it.
  CompareOptions lenient;
  lenient.allow_missing = true;
  EXPECT_FALSE(compare_fails(rows, lenient));
}

TEST(Compare, ARowThatIsNoLongerTimedFailsTheGate) {
  json b = run_with(samples(30, 0.01));
  b["traces"][0]["regions"][0]["variants"][0].erase("samples_us");
  auto rows = compare_runs(run_with(samples(30, 0.01)), b, {});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].verdict, Change::kNotTimed);
  EXPECT_TRUE(rows[0].timing_lost);
  EXPECT_TRUE(compare_fails(rows));
  EXPECT_NE(render_compare(rows, {}).find("not timed (was timed)"), std::string::npos);
  // Untimed in both runs (a reference row): nothing lost.
  rows = compare_runs(b, b, {});
  EXPECT_FALSE(rows[0].timing_lost);
  EXPECT_FALSE(compare_fails(rows));
}

TEST(Compare, RunsOfDifferentGpusOrTwoTracesOfOneNameAreAnError) {
  json a = run_with(samples(30, 0.01)), b = a;
  a["environment"]["device"] = "NVIDIA H100 80GB HBM3";
  b["environment"]["device"] = "NVIDIA H100 PCIe";
  try {
    compare_runs(a, b, {});
    ADD_FAILURE() << "no error for runs of two GPUs";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("NVIDIA H100 PCIe"), std::string::npos) << e.what();
  }
  CompareOptions any;
  any.allow_device_mismatch = true;
  EXPECT_EQ(compare_runs(a, b, any).size(), 1u);
  // One name, two files: rows of the two would be confused.
  json dup = run_with(samples(30, 0.01));
  dup["traces"][0]["file"] = "traces/a/t.json";
  dup["traces"].push_back(dup["traces"][0]);
  dup["traces"][1]["file"] = "traces/b/t.json";
  try {
    compare_runs(dup, run_with(samples(30, 0.01)), {});
    ADD_FAILURE() << "no error for two traces of one name";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("traces/b/t.json"), std::string::npos) << e.what();
  }
}

TEST(Compare, RejectsWhatIsNotAResultsFile) {
  EXPECT_THROW(compare_runs(json::object(), run_with({1}), {}), std::invalid_argument);
  EXPECT_THROW(compare_runs(run_with({1}), json::array(), {}), std::invalid_argument);
}

TEST(Compare, SelfComparisonOfACommittedH200RunHasNoSlower) {
  json run = read_json(std::string(REPLAY_TRACES_DIR) +
                       "/../tests/data/results/h200_verdicts_schema1.json");
  auto rows = compare_runs(run, run, {});
  EXPECT_GE(rows.size(), 12u);
  for (const auto& r : rows) {
    const Change want = r.variant == "reference" ? Change::kNotTimed : Change::kSame;
    EXPECT_EQ(r.verdict, want) << r.trace << " " << r.variant;
    EXPECT_FALSE(r.numerics_regressed);
  }
  EXPECT_FALSE(compare_fails(rows));
}

TEST(Compare, LaunchBoundRowsNeedThreeTimesTheThreshold) {
  // Host enqueue 26 µs for a 28 µs replay: the interval times the host's launch rate too. +8 %
  // between two runs is SAME there, not SLOWER; +20 % still is SLOWER.
  const auto a = samples(28, 0.01);
  auto rows = compare_runs(run_with(a, "PASS", 26), run_with(samples(30.3, 0.01), "PASS", 26), {});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].launch_bound);
  EXPECT_EQ(rows[0].verdict, Change::kSame);
  EXPECT_FALSE(compare_fails(rows));
  rows = compare_runs(run_with(a, "PASS", 26), run_with(samples(33.6, 0.01), "PASS", 26), {});
  EXPECT_EQ(rows[0].verdict, Change::kSlower);
  // The same +8 % on a row whose host enqueue is small is SLOWER.
  rows = compare_runs(run_with(a, "PASS", 3), run_with(samples(30.3, 0.01), "PASS", 3), {});
  EXPECT_FALSE(rows[0].launch_bound);
  EXPECT_EQ(rows[0].verdict, Change::kSlower);
}

// Real H200 runs (tests/data/results/h200_compare/): two back-to-back runs give no SLOWER; a run
// with a 5 µs spin added to the optimized variant is SLOWER on every trace's optimized row.
TEST(Compare, BackToBackH200RunsPassAndASlowedVariantFails) {
  const std::string dir = std::string(REPLAY_TRACES_DIR) + "/../tests/data/results/h200_compare/";
  const json a = read_json(dir + "run_a.json"), b = read_json(dir + "run_b.json"),
             c = read_json(dir + "run_c_slowed.json");
  auto ab = compare_runs(a, b, {});
  EXPECT_FALSE(compare_fails(ab)) << render_compare(ab, {});
  auto ac = compare_runs(a, c, {});
  EXPECT_TRUE(compare_fails(ac));
  int slower = 0;
  for (const auto& r : ac) {
    if (r.variant == "optimized") {
      EXPECT_EQ(r.verdict, Change::kSlower) << r.trace;
    }
    slower += r.verdict == Change::kSlower;
  }
  EXPECT_EQ(slower, 4);
}

// A move of at most min_change_us (1.5 µs) and 25 % is SAME: the H100 gate runs moved 10-16 µs
// kernels by up to 1.0 µs between two processes with nothing changed.
TEST(Compare, SmallAbsoluteChangesAreSame) {
  EXPECT_EQ(verdict_of(samples(11.17, 0.002), samples(12.16, 0.002)), Change::kSame);    // +8.9 %
  EXPECT_EQ(verdict_of(samples(11.17, 0.002), samples(16.17, 0.002)), Change::kSlower);  // +5 µs
  // 1.5 µs on a 3 µs row is +50 %: beyond the floor's share cap, SLOWER.
  EXPECT_EQ(verdict_of(samples(3, 0.002), samples(4.5, 0.002)), Change::kSlower);
  EXPECT_EQ(verdict_of(samples(6, 0.002), samples(7.4, 0.002)), Change::kSame);  // +23 %
  CompareOptions strict;
  strict.min_change_us = 0;
  auto rows =
      compare_runs(run_with(samples(11.17, 0.002)), run_with(samples(12.16, 0.002)), strict);
  EXPECT_EQ(rows[0].verdict, Change::kSlower);
}

// A launch-bound row (host enqueue >= 80 % of its GPU time) is judged on its CUDA-graph samples
// where both runs have them: the cold time tracks the host's launch rate, the graph's does not.
TEST(Compare, LaunchBoundRowsAreJudgedOnTheirGraphTimes) {
  auto with_graph = [](double cold, double host, double graph) {
    json r = run_with(samples(cold, 0.005), "PASS", host);
    r["traces"][0]["regions"][0]["variants"][0]["graph"] = {{"samples_us", samples(graph, 0.005)}};
    return r;
  };
  // Cold +34 % with the host 27 % slower (H100, SwiGLU MLP bwd eager), graph unchanged: SAME.
  auto rows = compare_runs(with_graph(74.4, 105, 60), with_graph(99.8, 134, 60.2), {});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].launch_bound);
  EXPECT_TRUE(rows[0].judged_on_graph);
  EXPECT_EQ(rows[0].verdict, Change::kSame);
  EXPECT_DOUBLE_EQ(rows[0].old_median_us, summarize(samples(60, 0.005)).median);  // shown: graph
  // The graph itself 20 % slower: SLOWER, said to be judged on the graph.
  rows = compare_runs(with_graph(74.4, 105, 60), with_graph(75, 105, 72), {});
  EXPECT_EQ(rows[0].verdict, Change::kSlower);
  EXPECT_NE(render_compare(rows, {}).find("(launch-bound: CUDA graph µs)"), std::string::npos);
  // The launch path itself 2.3x slower (host enqueue 105 -> 240 µs), kernels unchanged: the
  // graph would hide it, so the cold samples judge (3x the threshold): SLOWER.
  rows = compare_runs(with_graph(74.4, 105, 60), with_graph(160, 240, 60), {});
  EXPECT_TRUE(rows[0].host_regressed);
  EXPECT_FALSE(rows[0].judged_on_graph);
  EXPECT_EQ(rows[0].verdict, Change::kSlower);
  EXPECT_NE(render_compare(rows, {}).find("host enqueue 105.0 → 240.0 µs"), std::string::npos);
  // Host +60 % with cold +34 % and the graph unchanged: what two unchanged H100 processes showed
  // (nanoGPT MLP fwd 2x8x64 eager, host 35 -> 56 µs): judged on the graph, SAME.
  rows = compare_runs(with_graph(74.4, 105, 60), with_graph(99.8, 168, 60.1), {});
  EXPECT_FALSE(rows[0].host_regressed);
  EXPECT_EQ(rows[0].verdict, Change::kSame);
  // Host times measured two ways (run.host_enqueue_method: back to back before, the blocking
  // kernel now) are not set against each other: neither launch-bound nor host-regressed.
  json blocked = with_graph(160, 240, 60);
  blocked["run"] = {{"host_enqueue_method", "blocking_kernel"}};
  rows = compare_runs(with_graph(74.4, 105, 60), blocked, {});
  EXPECT_FALSE(rows[0].launch_bound);
  EXPECT_FALSE(rows[0].host_regressed);
  json blocked_old = with_graph(74.4, 105, 60);
  blocked_old["run"] = blocked["run"];
  rows = compare_runs(blocked_old, blocked, {});  // the same method again: compared
  EXPECT_TRUE(rows[0].host_regressed);
  // A run without host times (0: not measured) is neither launch-bound nor host-regressed.
  rows = compare_runs(with_graph(74.4, 0, 60), with_graph(74.6, 105, 60), {});
  EXPECT_FALSE(rows[0].launch_bound);
  EXPECT_FALSE(rows[0].host_regressed);
  EXPECT_EQ(rows[0].verdict, Change::kSame);
  // Launch-bound only in the new run (its host enqueue grew past the GPU time): not judged on the
  // graph, and the cold +34 % is SLOWER at 1x the threshold.
  rows = compare_runs(with_graph(74.4, 20, 60), with_graph(99.8, 95, 60), {});
  EXPECT_FALSE(rows[0].launch_bound);
  EXPECT_EQ(rows[0].verdict, Change::kSlower);
  // Without graph samples in one run: the cold samples with 3x the threshold, as before.
  rows = compare_runs(run_with(samples(74.4, 0.005), "PASS", 105), with_graph(99.8, 134, 60), {});
  EXPECT_FALSE(rows[0].judged_on_graph);
  EXPECT_EQ(rows[0].verdict, Change::kSlower);  // +34 % > 15 %
}

// A cold change that the CUDA graph of the same replay does not show is UNSURE (launch path
// between processes); one the graph shows too stays SLOWER.
TEST(Compare, ColdChangeWithoutAGraphChangeIsUnsure) {
  auto run = [](double cold, double graph) {
    json r = run_with(samples(cold, 0.003), "PASS", 7);
    r["traces"][0]["regions"][0]["variants"][0]["graph"] = {{"samples_us", samples(graph, 0.003)}};
    return r;
  };
  // H100 back to back: norm_bwd optimized 10.82 -> 12.32 µs cold, graph 9.9 -> 9.95 µs.
  auto rows = compare_runs(run(10.82, 9.9), run(12.32, 9.95), {});
  EXPECT_EQ(rows[0].verdict, Change::kUnsure);
  EXPECT_TRUE(rows[0].graph_disagrees);
  EXPECT_FALSE(compare_fails(rows));
  // A 5 µs slower kernel moves both.
  rows = compare_runs(run(10.82, 9.9), run(15.82, 14.9), {});
  EXPECT_EQ(rows[0].verdict, Change::kSlower);
  EXPECT_TRUE(compare_fails(rows));
}
