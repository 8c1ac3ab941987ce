// Walks the op table (workloads/ops): every op has every part of its row, its example loads,
// and the reference evaluates it. A new op that misses a part fails here (the family files'
// static_asserts catch a missing row at compile time).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "impls/reference/reference.hpp"
#include "test_util.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/op.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

TEST(OpTable, EveryOpHasACompleteRow) {
  ASSERT_EQ(all_ops().size(), kOpCount);
  std::set<std::string_view> names;
  for (size_t i = 0; i < kOpCount; ++i) {
    const OpDef& d = *all_ops()[i];
    SCOPED_TRACE(std::string(d.name));
    EXPECT_EQ(static_cast<size_t>(d.op), i);
    EXPECT_TRUE(names.insert(d.name).second) << "duplicate name";
    EXPECT_EQ(parse_op(d.name), d.op);
    EXPECT_NE(d.parse, nullptr);
    EXPECT_NE(d.infer, nullptr);
    EXPECT_NE(d.reference, nullptr);
    EXPECT_GE(d.num_outputs, 0);  // 0: as many as the arguments say (split)
    EXPECT_FALSE(d.example.empty());
    if (d.kind == OpKind::kView) {
      EXPECT_EQ(d.eager.kernel, EagerLowering::kAlias);
      EXPECT_NE(d.alias, nullptr);
    } else {
      EXPECT_NE(d.eager.kernel, EagerLowering::kAlias);
      EXPECT_EQ(d.alias, nullptr);
      size_t count = 1;  // kGenerated has one form
      switch (d.eager.kernel) {
        case EagerLowering::kPointwise:
          count = static_cast<size_t>(PointwiseFn::kCount);
          break;
        case EagerLowering::kReduction:
          count = static_cast<size_t>(ReduceFn::kCount);
          break;
        case EagerLowering::kGemm:
          count = static_cast<size_t>(GemmFn::kCount);
          break;
        case EagerLowering::kComposite:
          count = static_cast<size_t>(CompositeFn::kCount);
          break;
        case EagerLowering::kIndexing:
          count = static_cast<size_t>(IndexingFn::kCount);
          break;
        default:
          break;
      }
      EXPECT_LT(d.eager.fn, count);
    }
  }
  EXPECT_FALSE(parse_op("getitem").has_value());  // resolved by the loader, not an op
  EXPECT_FALSE(parse_op("aten.fancy.default").has_value());
}

class OpExample : public ::testing::TestWithParam<size_t> {};

TEST_P(OpExample, LoadsAndRunsOnTheReference) {
  const OpDef& d = *all_ops()[GetParam()];
  json t = example_trace(std::string(d.name), json::parse(d.example));
  Graph g = parse_trace(t, "<example>");
  ASSERT_EQ(g.nodes.size(), 1u);
  if (d.num_outputs > 0) EXPECT_EQ(g.nodes[0].outputs.size(), static_cast<size_t>(d.num_outputs));
  auto vals = run_reference(g, generate_inputs(g, 1));
  for (int v : g.outputs) {
    const HostTensor& out = vals.at(v);
    EXPECT_EQ(out.meta.shape, g.meta(v).shape);
    for (double x : out.data) ASSERT_TRUE(std::isfinite(x)) << d.name;
  }
}

TEST_P(OpExample, RejectsAnExtraArgumentAndAnUnknownKeyword) {
  const OpDef& d = *all_ops()[GetParam()];
  const json good = example_trace(std::string(d.name), json::parse(d.example));
  json extra = good;  // a value at position 8, past every op's signature (nulls are "absent")
  while (extra["nodes"][0]["args"].size() < 8) extra["nodes"][0]["args"].push_back(nullptr);
  extra["nodes"][0]["args"].push_back(7);
  try {
    parse_trace(extra, "<extra>");
    ADD_FAILURE() << d.name << " accepted an extra positional argument";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.node(), "y");
    EXPECT_NE(std::string(e.what()).find("positional argument"), std::string::npos) << e.what();
  }
  json kw = good;
  kw["nodes"][0]["kwargs"]["bogus"] = 1;
  try {
    parse_trace(kw, "<kw>");
    ADD_FAILURE() << d.name << " accepted an unknown keyword argument";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected keyword argument 'bogus'"), std::string::npos)
        << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpExample, ::testing::Range<size_t>(0, kOpCount),
                         [](const auto& info) {
                           return test_name(std::string(all_ops()[info.param]->name));
                         });
