// Collectives (workloads/ops/collective.cpp) and the multi-rank reference
// (impls/reference/reference.hpp run_reference_ranks): the loader's errors name the node; every
// rank's values at world sizes 2, 4 and 8 equal a hand computation from every rank's inputs; the
// bundled per-rank traces (traces/tp/) load, plan, and their reference equals the gather / matmul /
// reduce-scatter computed directly on the ranks' inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "harness/replay/runner.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "test_util.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

json tmeta(const std::vector<int64_t>& shape, const std::string& dtype) {
  return {{"shape", shape}, {"stride", contiguous_strides(shape)}, {"dtype", dtype}};
}

// One collective node `c` on input x of `shape`, over `world` ranks; `out` its recorded shape.
json one_op(int world, const std::string& op, const std::vector<int64_t>& shape,
            const std::string& dtype, const json& args, const std::vector<int64_t>& out) {
  json x = tmeta(shape, dtype);
  x["id"] = "x";
  return {{"schema", "replay-trace/1"},
          {"name", "collective"},
          {"source", {{"model", "test"}, {"phase", "fwd"}}},
          {"world_size", world},
          {"inputs", json::array({x})},
          {"nodes", {{{"id", "c"}, {"op", op}, {"args", args}, {"outputs", {tmeta(out, dtype)}}}}},
          {"outputs", {"c"}}};
}

const std::string kAllGather = "_c10d_functional.all_gather_into_tensor.default";
const std::string kReduceScatter = "_c10d_functional.reduce_scatter_tensor.default";
const std::string kAllReduce = "_c10d_functional.all_reduce.default";
const std::string kWait = "_c10d_functional.wait_tensor.default";

// The TraceError of parsing `t` (the test fails without one); it must name node "c".
std::string parse_error(const json& t) {
  try {
    parse_trace(t, "<collective>");
  } catch (const TraceError& e) {
    EXPECT_EQ(e.node(), "c") << e.what();
    EXPECT_NE(std::string(e.what()).find("<collective>: node 'c'"), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no TraceError for " << t["nodes"].dump();
  return "";
}

::testing::AssertionResult has(const std::string& s, const std::string& part) {
  if (s.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << s << "' does not say '" << part << "'";
}

std::vector<std::map<int, HostTensor>> rank_inputs(const Graph& g, uint64_t seed) {
  std::vector<std::map<int, HostTensor>> in;
  for (int r = 0; r < g.world_size; ++r) in.push_back(generate_inputs(g, rank_seed(seed, r)));
  return in;
}

}  // namespace

TEST(Collective, ParsesAndRecordsTheGroup) {
  Graph g = parse_trace(
      one_op(4, kReduceScatter, {8, 3}, "bfloat16", {{{"ref", "x"}}, "avg", 4, "tp"}, {2, 3}),
      "<collective>");
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, Op::kReduceScatterTensor);
  EXPECT_EQ(g.nodes[0].group_size, 4);
  EXPECT_EQ(g.nodes[0].group_name, "tp");
  EXPECT_EQ(g.nodes[0].mode, "avg");
  Graph ar = parse_trace(one_op(8, kAllReduce, {3}, "float32", {{{"ref", "x"}}, "sum", "0"}, {3}),
                         "<collective>");
  EXPECT_EQ(ar.nodes[0].group_size, 8);  // all_reduce records no size: the world's
}

TEST(Collective, BadArgumentsNameTheNode) {
  const json x = {{"ref", "x"}};
  // group size other than the world's
  EXPECT_TRUE(has(parse_error(one_op(2, kAllGather, {4, 3}, "bfloat16", {x, 4, "0"}, {16, 3})),
                  "group_size 4 differs from the trace's world_size 2"));
  EXPECT_TRUE(
      has(parse_error(one_op(4, kReduceScatter, {4, 3}, "float32", {x, "sum", 2, "0"}, {2, 3})),
          "group_size 2 differs from the trace's world_size 4"));
  // indivisible reduce_scatter dim 0
  EXPECT_TRUE(
      has(parse_error(one_op(4, kReduceScatter, {6, 3}, "float32", {x, "sum", 4, "0"}, {1, 3})),
          "dim 0 of the input float32[6, 3] does not divide by group_size 4"));
  // missing arguments
  EXPECT_TRUE(
      has(parse_error(one_op(2, kAllGather, {4, 3}, "bfloat16", {x, 2}, {8, 3})), "group_name"));
  EXPECT_TRUE(has(parse_error(one_op(2, kAllGather, {4, 3}, "bfloat16", json::array({x}), {8, 3})),
                  "group_size"));
  EXPECT_TRUE(has(parse_error(one_op(2, kAllReduce, {4, 3}, "float32", json::array({x}), {4, 3})),
                  "reduce_op"));
  EXPECT_TRUE(
      has(parse_error(one_op(2, kWait, {4, 3}, "float32", json::array(), {4, 3})), "tensor"));
  // unsupported reductions and dtypes
  EXPECT_TRUE(has(parse_error(one_op(2, kAllReduce, {4, 3}, "float32", {x, "product", "0"}, {4, 3})),
                  "reduce_op 'product' is not supported"));
  EXPECT_TRUE(
      has(parse_error(one_op(2, kAllReduce, {4, 3}, "float8_e4m3fn", {x, "sum", "0"}, {4, 3})),
          "a float8_e4m3fn reduction"));
  // a recorded output that is not the gathered shape
  EXPECT_TRUE(has(parse_error(one_op(2, kAllGather, {4, 3}, "bfloat16", {x, 2, "0"}, {4, 3})),
                  "gives [8, 3]"));
  EXPECT_TRUE(has(parse_error(one_op(2, kAllGather, {}, "bfloat16", {x, 2, "0"}, {2})), "0-dim"));
}

// The single-rank executor refuses a collective over several ranks, naming the node.
TEST(Collective, SingleRankReferenceRefusesSeveralRanks) {
  Graph g = parse_trace(one_op(2, kAllGather, {4, 3}, "bfloat16", {{{"ref", "x"}}, 2, "0"}, {8, 3}),
                        "<collective>");
  try {
    run_reference(g, generate_inputs(g, 1));
    ADD_FAILURE() << "run_reference ran a collective over 2 ranks";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.node(), "c");
    EXPECT_TRUE(has(e.what(), "run_reference_ranks")) << e.what();
  }
  EXPECT_NO_THROW(run_reference_ranks(g, rank_inputs(g, 1)));  // the multi-rank one runs it
}

TEST(Collective, RankReferenceNeedsEveryRanksInputs) {
  Graph g = parse_trace(
      one_op(4, kAllGather, {4, 3}, "bfloat16", {{{"ref", "x"}}, 4, "0"}, {16, 3}), "<collective>");
  auto in = rank_inputs(g, 1);
  in.pop_back();
  EXPECT_THROW(run_reference_ranks(g, std::move(in)), std::invalid_argument);
}

// Every rank's output against a hand computation over every rank's inputs, world sizes 2, 4, 8.
class CollectiveRanks : public ::testing::TestWithParam<int> {};

TEST_P(CollectiveRanks, MatchHandComputedResults) {
  const int ws = GetParam();
  const json x = {{"ref", "x"}};
  const int64_t n = 3, c = 5;  // per-rank chunk [n, c]
  struct Case {
    std::string op;
    json args;
    std::vector<int64_t> in, out;
    std::string dtype;
  };
  const std::vector<Case> cases = {
      {kAllGather, {x, ws, "0"}, {n, c}, {ws * n, c}, "bfloat16"},
      {kReduceScatter, {x, "sum", ws, "0"}, {ws * n, c}, {n, c}, "bfloat16"},
      {kReduceScatter, {x, "avg", ws, "0"}, {ws * n, c}, {n, c}, "float32"},
      {kAllReduce, {x, "sum", "0"}, {n, c}, {n, c}, "float32"},
      {kAllReduce, {x, "avg", "0"}, {n, c}, {n, c}, "bfloat16"},
      {kAllReduce, {x, "max", "0"}, {n, c}, {n, c}, "float32"},  // a tensorwise amax's
      {kReduceScatter, {x, "min", ws, "0"}, {ws * n, c}, {n, c}, "bfloat16"},
      {kWait, json::array({x}), {n, c}, {n, c}, "bfloat16"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.op + " " + k.args.dump() + " " + k.dtype);
    Graph g = parse_trace(one_op(ws, k.op, k.in, k.dtype, k.args, k.out), "<collective>");
    const DType dt = g.meta(g.outputs[0]).dtype;
    auto in = rank_inputs(g, 7);
    const int xv = g.inputs[0];
    std::vector<std::vector<double>> xs;  // every rank's input, as the reference saw it
    for (auto& m : in) xs.emplace_back(m.at(xv).data.begin(), m.at(xv).data.end());
    ASSERT_NE(xs[0], xs[1]) << "ranks drew the same inputs: a reduction would not tell them apart";
    const auto vals = run_reference_ranks(g, std::move(in));
    ASSERT_EQ(vals.size(), static_cast<size_t>(ws));
    const int64_t out_numel = g.meta(g.outputs[0]).numel();
    const std::string mode = k.args.size() > 1 && k.args[1].is_string() ? k.args[1] : "";
    for (int r = 0; r < ws; ++r) {
      const HostTensor& got = vals[r].at(g.outputs[0]);
      ASSERT_EQ(got.meta.shape, k.out);
      std::vector<double> want(static_cast<size_t>(out_numel));
      for (int64_t i = 0; i < out_numel; ++i) {
        double s = 0;
        if (k.op == kAllGather) {
          s = xs[i / (n * c)][i % (n * c)];  // rank q's chunk at rows [q n, (q + 1) n)
        } else if (k.op == kWait) {
          s = xs[r][i];
        } else {
          const int64_t at = k.op == kReduceScatter ? r * out_numel + i : i;
          if (mode == "max" || mode == "min") {
            s = xs[0][at];
            for (int q = 1; q < ws; ++q)
              s = mode == "max" ? std::max(s, xs[q][at]) : std::min(s, xs[q][at]);
          } else {
            for (int q = 0; q < ws; ++q) s += xs[q][at];
          }
          if (mode == "avg") s /= ws;
        }
        want[i] = round_to(dt, s);
      }
      for (int64_t i = 0; i < out_numel; ++i)
        ASSERT_EQ(got.data[i], want[i]) << "rank " << r << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectiveRanks, ::testing::Values(2, 4, 8));

// A wrong rank offset would be caught: reduce_scatter gives each rank a different chunk, and the
// ranks' gathered outputs are equal.
TEST(Collective, RanksGetTheirOwnChunk) {
  Graph g = parse_trace(
      one_op(4, kReduceScatter, {8, 3}, "float32", {{{"ref", "x"}}, "sum", 4, "0"}, {2, 3}),
      "<collective>");
  const auto vals = run_reference_ranks(g, rank_inputs(g, 3));
  for (int r = 1; r < 4; ++r)
    EXPECT_NE(vals[r].at(g.outputs[0]).data, vals[0].at(g.outputs[0]).data) << "rank " << r;
  Graph ag = parse_trace(one_op(4, kAllGather, {2, 3}, "float32", {{{"ref", "x"}}, 4, "0"}, {8, 3}),
                         "<collective>");
  const auto gv = run_reference_ranks(ag, rank_inputs(ag, 3));
  for (int r = 1; r < 4; ++r) EXPECT_EQ(gv[r].at(ag.outputs[0]).data, gv[0].at(ag.outputs[0]).data);
}

// --- the bundled per-rank traces (traces/tp/) ---------------------------------------------------

namespace {

std::vector<std::string> tp_traces() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(REPLAY_TRACES_DIR) + "/tp"))
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// x [m, k] @ w [k, n] (w's logical layout), float64, rounded to `dt`.
std::vector<double> matmul(const std::vector<double>& x, const std::vector<double>& w, int64_t m,
                           int64_t k, int64_t n, DType dt) {
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += x[i * k + l] * w[l * n + j];
      y[i * n + j] = round_to(dt, s);
    }
  return y;
}

// The trace's output on rank r computed directly from every rank's inputs (x, w):
// colwise: concat_q(x_q) @ w_r; rowwise: rows of chunk r of sum_q round(x_q @ w_q).
std::vector<double> direct(const Graph& g, const std::vector<std::map<int, HostTensor>>& in, int r,
                           bool reversed_ranks = false) {
  const bool colwise = g.name.find("tp_colwise") == 0;
  const int xv = g.find_value("x"), wv = g.find_value("w");
  const int ws = g.world_size;
  const auto& wshape = g.meta(wv).shape;
  const int64_t k = wshape[0], n = wshape[1];
  const DType dt = g.meta(g.outputs[0]).dtype;
  auto rank = [&](int q) { return reversed_ranks ? ws - 1 - q : q; };
  if (colwise) {
    std::vector<double> x;
    for (int q = 0; q < ws; ++q) {
      const auto& d = in[rank(q)].at(xv).data;
      x.insert(x.end(), d.begin(), d.end());
    }
    const auto& w = in[r].at(wv).data;
    return matmul(x, std::vector<double>(w.begin(), w.end()), static_cast<int64_t>(x.size()) / k, k,
                  n, dt);
  }
  const int64_t m = g.meta(xv).numel() / k;
  std::vector<double> s(static_cast<size_t>(m * n), 0.0);
  for (int q = 0; q < ws; ++q) {
    const auto& xd = in[q].at(xv).data;
    const auto& wd = in[q].at(wv).data;
    const auto p = matmul(std::vector<double>(xd.begin(), xd.end()),
                          std::vector<double>(wd.begin(), wd.end()), m, k, n, dt);
    for (size_t i = 0; i < s.size(); ++i) s[i] += p[i];
  }
  const int64_t chunk = m * n / ws;
  std::vector<double> out(static_cast<size_t>(chunk));
  for (int64_t i = 0; i < chunk; ++i) out[i] = round_to(dt, s[rank(r) * chunk + i]);
  return out;
}

// Elements of `got` farther than one bfloat16 rounding (2^-7 relative: the float64 sums of the
// reference and of `direct` differ in order) from `want`.
int64_t mismatches(const HostTensor& got, const std::vector<double>& want) {
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::fabs(got.data[i] - want[i]) > std::ldexp(std::fabs(want[i]), -7) + 1e-12) ++bad;
  return bad;
}

}  // namespace

TEST(TpTraces, LoadPlanAndMatchADirectComputation) {
  const auto paths = tp_traces();
  ASSERT_GE(paths.size(), 6u);
  std::set<int> worlds;
  for (const auto& path : paths) {
    SCOPED_TRACE(path);
    Graph g = load_trace(path);
    worlds.insert(g.world_size);
    ASSERT_GT(g.world_size, 1);
    Plan plan = make_plan(g, fusion_registry());  // must not throw
    (void)plan;
    auto in = rank_inputs(g, 5);
    const auto keep = in;  // the inputs as the reference saw them
    const auto vals = run_reference_ranks(g, std::move(in));
    for (int r = 0; r < g.world_size; ++r) {
      const HostTensor& got = vals[r].at(g.outputs[0]);
      const auto want = direct(g, keep, r);
      ASSERT_EQ(static_cast<size_t>(got.meta.numel()), want.size());
      EXPECT_EQ(mismatches(got, want), 0) << "rank " << r;
      // The check catches ranks taken in the wrong order (a gather or scatter off by a rank).
      EXPECT_GT(mismatches(got, direct(g, keep, r, true)), 0) << "rank " << r;
    }
  }
  EXPECT_TRUE(worlds.count(2) && worlds.count(4));
}

// `replay run` without a device: the reference simulates every rank, and every GPU row says
// that GPU replay of world_size > 1 runs one process per rank, and how to start them.
TEST(TpTraces, RunSaysGpuReplayNeedsTheMultiProcessPath) {
  for (const auto& path : tp_traces()) {
    SCOPED_TRACE(path);
    RunOptions opt;
    opt.reference_budget_s = 0;
    TraceResult tr = run_trace(path, opt, nullptr);
    EXPECT_EQ(tr.error_kind, TraceResult::Error::kNone) << tr.error;
    EXPECT_TRUE(tr.not_replayed.empty()) << tr.not_replayed;
    EXPECT_TRUE(has(tr.input_source, "generated per rank")) << tr.input_source;
    EXPECT_GE(tr.reference_s, 0);
    bool gpu_rows = false;
    for (const auto& row : tr.regions)
      for (const auto& v : row.variants) {
        if (!v.variant.is_gpu()) continue;
        gpu_rows = true;
        EXPECT_TRUE(has(v.skipped, "one process per rank")) << v.skipped;
        EXPECT_TRUE(has(v.skipped, "replay launch --nproc")) << v.skipped;
      }
    EXPECT_TRUE(gpu_rows);
  }
}

// A per-rank trace with a golden sidecar is refused (it would hold one rank's tensors).
TEST(TpTraces, GoldenSidecarIsRefused) {
  json t = read_json(tp_traces().front());
  t["golden"] = {{"file", "none.safetensors"}, {"tensors", {"x"}}};
  const std::string path = write_temp("tp_golden.json", t.dump());
  RunOptions opt;
  opt.reference_budget_s = 0;
  TraceResult tr = run_trace(path, opt, nullptr);
  EXPECT_EQ(tr.error_kind, TraceResult::Error::kBadInput);
  EXPECT_TRUE(has(tr.error, "per-rank golden")) << tr.error;
}
