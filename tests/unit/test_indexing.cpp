// The indexing family's reference (workloads/ops/indexing.cpp) on hand-made values: PyTorch's
// advanced-index placement, negative pads, duplicates in scatter_add / index_put, stable sort
// ties and NaN order, argmax ties, embedding backward's padding and scaling, out-of-range
// indices; and the Core ATen coverage count (workloads/ops/core_aten.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include "harness/report/numerics.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "opcorpus.hpp"
#include "test_util.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/core_aten.hpp"
#include "workloads/ops/op.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

struct In {
  std::vector<int64_t> shape;
  std::string dtype;
  std::vector<double> values;
};

// Runs `op` on the given inputs (in0, in1, ...) through the reference; the outputs' values.
std::vector<HostTensor> run_op(const std::string& op, const std::vector<In>& inputs,
                               const json& args, const json& kwargs = json::object()) {
  json ex = {{"inputs", json::array()}, {"args", args}, {"kwargs", kwargs}};
  for (const In& i : inputs) ex["inputs"].push_back(example_input(i.shape, i.dtype));
  const Graph g = parse_trace(example_trace(op, ex), "<test>");
  std::map<int, HostTensor> in;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int v = g.inputs.at(k);
    HostTensor t = make_host_tensor(inputs[k].shape, g.meta(v).dtype);
    EXPECT_EQ(t.data.size(), inputs[k].values.size()) << "input " << k;
    std::copy(inputs[k].values.begin(), inputs[k].values.end(), t.data.begin());
    in[v] = std::move(t);
  }
  auto vals = run_reference(g, in);
  std::vector<HostTensor> out;
  for (int v : g.outputs) out.push_back(vals.at(v));
  return out;
}

std::vector<double> iota(int64_t n, double from = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = from + static_cast<double>(i);
  return v;
}

std::vector<double> values(const HostTensor& t) {
  return {t.data.begin(), t.data.end()};
}

json refs(std::initializer_list<json> l) {
  return json(l);
}

}  // namespace

// Adjacent advanced indices replace their dims in place: x[:, i, j] with i [2, 1], j [3]
// broadcast to [2, 3] gives [B, 2, 3].
TEST(IndexingRef, AdjacentIndicesReplaceInPlace) {
  const std::vector<double> x = iota(2 * 4 * 5);  // [2, 4, 5]
  auto out =
      run_op("aten.index.Tensor",
             {{{2, 4, 5}, "float32", x}, {{2, 1}, "int64", {3, -1}}, {{3}, "int32", {0, 4, 2}}},
             refs({ref("in0"), refs({nullptr, ref("in1"), ref("in2")})}));
  ASSERT_EQ(out[0].meta.shape, (std::vector<int64_t>{2, 2, 3}));
  const int64_t i[2] = {3, 3};  // -1 wraps to 3
  const int64_t j[3] = {0, 4, 2};
  for (int b = 0; b < 2; ++b)
    for (int p = 0; p < 2; ++p)
      for (int q = 0; q < 3; ++q)
        EXPECT_EQ(out[0].data[(b * 2 + p) * 3 + q], x[(b * 4 + i[p]) * 5 + j[q]]) << b << p << q;
}

// Advanced indices separated by a slice go first: x[i, :, j] with i, j [2] gives [2, C].
TEST(IndexingRef, SeparatedIndicesGoFirst) {
  const std::vector<double> x = iota(3 * 4 * 5);  // [3, 4, 5]
  auto out = run_op("aten.index.Tensor",
                    {{{3, 4, 5}, "float32", x}, {{2}, "int64", {2, 0}}, {{2}, "int64", {4, 1}}},
                    refs({ref("in0"), refs({ref("in1"), nullptr, ref("in2")})}));
  ASSERT_EQ(out[0].meta.shape, (std::vector<int64_t>{2, 4}));
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(out[0].data[c], x[(2 * 4 + c) * 5 + 4]);
    EXPECT_EQ(out[0].data[4 + c], x[(0 * 4 + c) * 5 + 1]);
  }
}

// pad [left, right, top, bottom] = [-1, 2, 1, -1] on [3, 4]: one column cropped on the left,
// two padded on the right, one row padded on top, one cropped at the bottom.
TEST(IndexingRef, NegativePadsCrop) {
  auto out = run_op("aten.constant_pad_nd.default", {{{3, 4}, "float32", iota(12)}},
                    refs({ref("in0"), {-1, 2, 1, -1}, 9.5}));
  ASSERT_EQ(out[0].meta.shape, (std::vector<int64_t>{3, 5}));
  const std::vector<double> want = {9.5, 9.5, 9.5, 9.5, 9.5,  //
                                    1,   2,   3,   9.5, 9.5,  //
                                    5,   6,   7,   9.5, 9.5};
  EXPECT_EQ(values(out[0]), want);
  EXPECT_THROW(run_op("aten.constant_pad_nd.default", {{{3, 4}, "float32", iota(12)}},
                      refs({ref("in0"), {-3, -2}})),
               TraceError);  // width 4 - 5 < 0
}

TEST(IndexingRef, ScatterAddSumsDuplicates) {
  auto out = run_op("aten.scatter_add.default",
                    {{{3}, "float32", {10, 20, 30}},
                     {{4}, "int64", {0, 0, 2, 0}},
                     {{4}, "float32", {1, 2, 3, 4}}},
                    refs({ref("in0"), 0, ref("in1"), ref("in2")}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{17, 20, 33}));
  // index_put: accumulate sums duplicates; without it the last write wins in the reference.
  auto acc = run_op("aten.index_put.default",
                    {{{3}, "float32", {10, 20, 30}},
                     {{4}, "int64", {0, 0, -1, 0}},
                     {{4}, "float32", {1, 2, 3, 4}}},
                    refs({ref("in0"), refs({ref("in1")}), ref("in2"), true}));
  EXPECT_EQ(values(acc[0]), (std::vector<double>{17, 20, 33}));
  auto put = run_op("aten.index_put.default",
                    {{{3}, "float32", {10, 20, 30}}, {{2}, "int64", {2, 0}}, {{1}, "float32", {5}}},
                    refs({ref("in0"), refs({ref("in1")}), ref("in2")}));
  EXPECT_EQ(values(put[0]), (std::vector<double>{5, 20, 5}));
}

TEST(IndexingRef, GatherAndScatterAlongDim) {
  // [[0 1 2], [3 4 5]] gathered along dim 1 by [[2, 0], [1, 1]]
  auto g =
      run_op("aten.gather.default", {{{2, 3}, "float32", iota(6)}, {{2, 2}, "int64", {2, 0, 1, 1}}},
             refs({ref("in0"), -1, ref("in1")}));
  EXPECT_EQ(values(g[0]), (std::vector<double>{2, 0, 4, 4}));
  auto s = run_op("aten.scatter.value", {{{2, 3}, "float32", iota(6)}, {{1, 2}, "int64", {1, 0}}},
                  refs({ref("in0"), 0, ref("in1"), -1.0}));
  EXPECT_EQ(values(s[0]), (std::vector<double>{0, -1, 2, -1, 4, 5}));
}

// sort.stable keeps equal values (and -0.0 with 0.0) in input order; NaN sorts last ascending,
// first descending, as PyTorch documents.
TEST(IndexingRef, StableSortTiesAndNaN) {
  const std::vector<In> ties = {{{6}, "float32", {1, 0, 1, 0, 1, -0.0}}};
  auto up = run_op("aten.sort.stable", ties, refs({ref("in0")}), {{"stable", true}});
  EXPECT_EQ(values(up[1]), (std::vector<double>{1, 3, 5, 0, 2, 4}));
  auto down = run_op("aten.sort.stable", ties, refs({ref("in0")}),
                     {{"stable", true}, {"descending", true}});
  EXPECT_EQ(values(down[1]), (std::vector<double>{0, 2, 4, 1, 3, 5}));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<In> with_nan = {{{5}, "float32", {nan, 1, nan, -2, 0}}};
  auto a = run_op("aten.sort.default", with_nan, refs({ref("in0")}));
  EXPECT_EQ(values(a[1]), (std::vector<double>{3, 4, 1, 0, 2}));
  auto d = run_op("aten.sort.default", with_nan, refs({ref("in0"), -1, true}));
  EXPECT_EQ(values(d[1]), (std::vector<double>{0, 2, 1, 4, 3}));
  // topk: the k largest in order, equal values by lower index
  auto t = run_op("aten.topk.default", {{{2, 4}, "float32", {3, 7, 7, 1, 0, -1, 5, 5}}},
                  refs({ref("in0"), 2}));
  EXPECT_EQ(values(t[0]), (std::vector<double>{7, 7, 5, 5}));
  EXPECT_EQ(values(t[1]), (std::vector<double>{1, 2, 2, 3}));
}

TEST(IndexingRef, ArgmaxTakesTheFirstExtremeAndNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto a = run_op("aten.argmax.default", {{{2, 4}, "float32", {1, 3, 3, 0, 2, nan, 9, nan}}},
                  refs({ref("in0"), 1}));
  EXPECT_EQ(values(a[0]), (std::vector<double>{1, 1}));
  auto m =
      run_op("aten.argmin.default", {{{2, 3}, "float32", {4, 1, 2, 1, 5, 1}}}, refs({ref("in0")}));
  EXPECT_EQ(values(m[0]), (std::vector<double>{1}));  // flattened: the first 1
}

TEST(IndexingRef, CumsumAlongDim) {
  auto c =
      run_op("aten.cumsum.default", {{{2, 3}, "int32", {1, 2, 3, 4, 5, 6}}}, refs({ref("in0"), 0}));
  EXPECT_EQ(c[0].meta.dtype, DType::kInt64);
  EXPECT_EQ(values(c[0]), (std::vector<double>{1, 2, 3, 5, 7, 9}));
}

// grad_weight rows: summed over the indices that hit them; padding_idx's row stays zero; with
// scale_grad_by_freq each contribution is divided by its index's count.
TEST(IndexingRef, EmbeddingBackwardPaddingAndScale) {
  const std::vector<In> in = {{{4, 2}, "float32", {1, 2, 3, 4, 5, 6, 7, 8}},
                              {{4}, "int64", {2, 0, 2, 1}}};
  auto plain = run_op("aten.embedding_dense_backward.default", in,
                      refs({ref("in0"), ref("in1"), 3, 0, false}));
  EXPECT_EQ(values(plain[0]), (std::vector<double>{0, 0, 7, 8, 6, 8}));
  auto scaled = run_op("aten.embedding_dense_backward.default", in,
                       refs({ref("in0"), ref("in1"), 3, -1, true}));
  EXPECT_EQ(values(scaled[0]), (std::vector<double>{3, 4, 7, 8, 3, 4}));
}

// An index outside its dim: the reference names the trace, the node and the index (TraceError:
// bad input), never reads past the tensor. index.Tensor wraps negative indices; gather and
// embedding do not.
TEST(IndexingRef, OutOfRangeIndexIsAnError) {
  auto expect_error = [](const std::string& op, const std::vector<In>& in, const json& args) {
    try {
      run_op(op, in, args);
      ADD_FAILURE() << op << " accepted an out-of-range index";
    } catch (const TraceError& e) {
      EXPECT_EQ(e.node(), "y");
      EXPECT_EQ(e.file(), "<test>");
      EXPECT_NE(std::string(e.what()).find("node 'y'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("out of bounds"), std::string::npos) << e.what();
    }
  };
  expect_error("aten.gather.default", {{{2, 3}, "float32", iota(6)}, {{2, 1}, "int64", {0, 3}}},
               refs({ref("in0"), 1, ref("in1")}));
  expect_error("aten.embedding.default", {{{3, 2}, "float32", iota(6)}, {{2}, "int64", {0, -1}}},
               refs({ref("in0"), ref("in1")}));
  expect_error("aten.index.Tensor", {{{4}, "float32", iota(4)}, {{1}, "int64", {-5}}},
               refs({ref("in0"), refs({ref("in1")})}));
  expect_error("aten.scatter_add.default",
               {{{3}, "float32", iota(3)}, {{1}, "int64", {3}}, {{1}, "float32", {1}}},
               refs({ref("in0"), 0, ref("in1"), ref("in2")}));
  auto ok = run_op("aten.index.Tensor", {{{4}, "float32", iota(4)}, {{1}, "int64", {-4}}},
                   refs({ref("in0"), refs({ref("in1")})}));
  EXPECT_EQ(values(ok[0]), (std::vector<double>{0}));
}

TEST(IndexingParse, RejectsBoolMasksAndWrongIndexDtypes) {
  json mask = {{"inputs", {example_input({4}, "float32"), example_input({4}, "bool")}},
               {"args", refs({ref("in0"), refs({ref("in1")})})}};
  EXPECT_THROW(parse_trace(example_trace("aten.index.Tensor", mask), "<mask>"), TraceError);
  json i32 = {{"inputs", {example_input({2, 3}, "float32"), example_input({2, 3}, "int32")}},
              {"args", refs({ref("in0"), 1, ref("in1")})}};
  EXPECT_THROW(parse_trace(example_trace("aten.gather.default", i32), "<gather int32>"),
               TraceError);  // gather needs int64, as PyTorch
}

TEST(CoreAten, CountsTheListAgainstTheTable) {
  const CoreAtenCoverage c = core_aten_coverage(
      "# Core ATen IR: test list\n"
      "aten.index.Tensor\n\naten.sort.default\naten.no_such_op.default\n",
      all_ops());
  EXPECT_EQ(c.total, 3);
  EXPECT_EQ(c.covered, 2);
  EXPECT_EQ(c.missing, (std::vector<std::string>{"aten.no_such_op.default"}));
  EXPECT_EQ(c.source, "Core ATen IR: test list");
  EXPECT_THROW(core_aten_coverage("aten.add\n", all_ops()), std::invalid_argument);
  EXPECT_THROW(core_aten_coverage("aten.add.Tensor\naten.add.Tensor\n", all_ops()),
               std::invalid_argument);
}

// The embedded list is tests/data/core_aten_ops.txt as committed, and the count follows the op
// table: every listed name with a row, counted here independently.
TEST(CoreAten, EmbeddedListMatchesTheFileAndTheTable) {
  std::ifstream f(std::string(REPLAY_TRACES_DIR) + "/../tests/data/core_aten_ops.txt");
  ASSERT_TRUE(f) << "tests/data/core_aten_ops.txt missing";
  std::set<std::string> rows;
  for (const OpDef* d : all_ops()) rows.insert(std::string(d->name));
  int total = 0, covered = 0;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    ++total;
    covered += rows.count(line) ? 1 : 0;
  }
  const CoreAtenCoverage c = core_aten_coverage();
  EXPECT_EQ(c.total, total);
  EXPECT_EQ(c.covered, covered);
  EXPECT_EQ(c.total - c.covered, static_cast<int>(c.missing.size()));
  EXPECT_GE(c.total, 180);  // PyTorch 2.11's list has 189
  for (const char* op : {"aten.index.Tensor", "aten.embedding.default", "aten.topk.default"})
    EXPECT_EQ(std::count(c.missing.begin(), c.missing.end(), op), 0) << op;
}

// topk and sort.default leave the order of equal values to the implementation: an index output
// that differs from the target only among equal values passes, one that picks another value, or
// repeats an index, fails; sort.stable's order is defined and compared exactly.
TEST(IndexingNumerics, IndicesComparedUpToTies) {
  auto check = [](const std::string& op, const json& args, const json& kwargs,
                  const std::vector<double>& got_idx, const std::vector<double>& target_idx) {
    json ex = {{"inputs", {example_input({1, 4}, "float32")}}, {"args", args}, {"kwargs", kwargs}};
    const Graph g = parse_trace(example_trace(op, ex), "<ties>");
    std::map<int, HostTensor> in;
    HostTensor x = make_host_tensor({1, 4}, DType::kFloat32);
    x.data[0] = 3;
    x.data[1] = 7;
    x.data[2] = 7;
    x.data[3] = 1;
    in[g.inputs[0]] = x;
    const auto ref = run_reference(g, in);
    const int v = g.outputs.at(1);
    HostTensor got = ref.at(v), target = ref.at(v);
    std::copy(got_idx.begin(), got_idx.end(), got.data.begin());
    std::copy(target_idx.begin(), target_idx.end(), target.data.begin());
    return check_value(g, v, got, target, ref, default_value_bounds(g)[v]).pass();
  };
  const json topk = json::array({ref("in0"), 2});
  EXPECT_TRUE(check("aten.topk.default", topk, json::object(), {1, 2}, {2, 1}));
  EXPECT_TRUE(check("aten.topk.default", topk, json::object(), {1, 2}, {1, 2}));
  EXPECT_FALSE(check("aten.topk.default", topk, json::object(), {1, 1}, {2, 1}));  // repeated
  EXPECT_FALSE(check("aten.topk.default", topk, json::object(), {1, 0}, {1, 2}));  // 3 for 7
  const json sort = json::array({ref("in0")});
  EXPECT_TRUE(check("aten.sort.default", sort, json::object(), {3, 0, 2, 1}, {3, 0, 1, 2}));
  EXPECT_FALSE(check("aten.sort.default", sort, json::object(), {3, 0, 2, 1}, {0, 3, 1, 2}));
  EXPECT_FALSE(check("aten.sort.stable", sort, {{"stable", true}}, {3, 0, 2, 1}, {3, 0, 1, 2}));
}

// The op corpus compares PyTorch's 16-bit cumsum (every partial sum rounded) with wider bounds
// (tests/unit/opcorpus.hpp): they still catch a wrong scan. An exclusive scan, or one that drops
// a row's last term, fails every 16-bit case; the reference passes.
TEST(IndexingNumerics, WiderCumsumBoundsStillCatchAWrongScan) {
  int checked = 0;
  for (const auto& c : load_opcorpus(opcorpus_dir() + "/aten_cumsum_default.json")) {
    const int v = c.g.outputs.at(0);
    const DType t = c.g.meta(v).dtype;
    if (t != DType::kBFloat16 && t != DType::kFloat16) continue;
    SCOPED_TRACE(c.label());
    const ReplayInputs in = make_inputs(c.g, 1);
    const auto ref = run_reference(c.g, in.values);
    const HostTensor& golden = in.golden.at(c.g.values[v].name);
    const Plan plan = make_plan(c.g, fusion_registry());
    const NumericsBounds b =
        pytorch_bounds(c, v, output_bounds(c.g, plan, default_value_bounds(c.g), v));
    EXPECT_TRUE(check_numerics("y", ref.at(v), golden, b).pass());
    const Node& n = c.g.nodes.at(0);
    const Shape& s = c.g.meta(v).shape;
    int64_t inner = 1;
    for (size_t d = n.dim + 1; d < s.size(); ++d) inner *= s[d];
    const int64_t len = s[n.dim];
    HostTensor exclusive = ref.at(v), short_row = ref.at(v);
    const HostTensor& x = in.values.at(c.g.inputs.at(0));
    for (size_t i = 0; i < exclusive.data.size(); ++i) {
      const int64_t j = (static_cast<int64_t>(i) / inner) % len;
      exclusive.data[i] = round_to(t, ref.at(v).data[i] - x.data[i]);
      if (j == len - 1) short_row.data[i] = round_to(t, ref.at(v).data[i] - x.data[i]);
    }
    EXPECT_FALSE(check_numerics("y", exclusive, golden, b).pass());
    EXPECT_FALSE(check_numerics("y", short_row, golden, b).pass());
    ++checked;
  }
  EXPECT_GE(checked, 1);
}
