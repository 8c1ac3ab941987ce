// Planning over the fusion registry: registry invariants, overlapping matches, the plan JSON.
#include <gtest/gtest.h>

#include <set>

#include "harness/replay/variants.hpp"
#include "impls/fusions/registry.hpp"
#include "test_util.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/match_util.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;

TEST(Registry, EveryFusionIsComplete) {
  std::set<std::string_view> names;
  ASSERT_FALSE(fusion_registry().empty());
  for (const FusionSpec* f : fusion_registry()) {
    SCOPED_TRACE(std::string(f->name));
    EXPECT_TRUE(names.insert(f->name).second) << "duplicate fusion name";
    EXPECT_FALSE(f->description.empty());
    // one matcher: match, or match_rest for the fusion that takes what the others leave (last)
    EXPECT_NE(f->match == nullptr, f->match_rest == nullptr);
    if (f->match_rest) {
      EXPECT_EQ(f, fusion_registry().back()) << "match_rest runs last";
    }
    EXPECT_NE(f->cost, nullptr);
    EXPECT_NE(f->describe, nullptr);
    EXPECT_NE(f->bind, nullptr);
    EXPECT_GE(f->min_world_size, 1);
    // Exactly one baseline called "baseline" and one optimized called "optimized", so that a
    // trace-level variant means the same role in every fusion; alternatives have other names.
    int baselines = 0, optimized = 0;
    std::set<std::string_view> vnames;
    for (const VariantSpec& v : f->variants) {
      EXPECT_TRUE(vnames.insert(v.name).second) << "duplicate variant " << v.name;
      EXPECT_NE(v.name, kReferenceVariant);
      EXPECT_NE(v.name, kEagerVariant);
      EXPECT_FALSE(v.description.empty()) << v.name;
      baselines += v.role == Role::kBaseline;
      optimized += v.role == Role::kOptimized;
      if (v.role == Role::kBaseline) {
        EXPECT_EQ(v.name, "baseline");
      } else if (v.role == Role::kOptimized) {
        EXPECT_EQ(v.name, "optimized");
      } else {
        EXPECT_TRUE(v.name != "baseline" && v.name != "optimized");
      }
    }
    EXPECT_EQ(baselines, 1);
    EXPECT_EQ(optimized, 1);
  }
}

TEST(Registry, KnownVariantsStartWithTheExecutors) {
  auto vs = known_variants(fusion_registry());
  ASSERT_GE(vs.size(), 4u);
  EXPECT_EQ(vs[0].kind, VariantInfo::kReference);
  EXPECT_EQ(vs[1].kind, VariantInfo::kEager);
  EXPECT_EQ(vs[2].name, "baseline");
  EXPECT_EQ(vs[3].name, "optimized");
  EXPECT_FALSE(find_variant(fusion_registry(), "fastest").has_value());
}

namespace {

// Two toy fusions over a 3-node chain: the first claims nodes {0, 1}, the second {1, 2}.
void claim_01(const Graph& g, Matches& out) {
  out.regions.push_back(make_region(g, {0, 1}, 0));
}
void claim_12(const Graph& g, Matches& out) {
  out.regions.push_back(make_region(g, {1, 2}, 0));
}
Cost no_cost(const Graph&, const Region&) {
  return {};
}
nlohmann::json no_params(const Graph&, const Region&) {
  return nlohmann::json::object();
}
constexpr VariantSpec kToyVariants[] = {{"baseline", Role::kBaseline, "b"},
                                        {"optimized", Role::kOptimized, "o"}};
const FusionSpec kFirst{"first", "toy", kToyVariants, claim_01, no_cost, no_params, nullptr};
const FusionSpec kSecond{"second", "toy", kToyVariants, claim_12, no_cost, no_params, nullptr};

Graph chain3() {
  nlohmann::json t = {{"schema", "replay-trace/1"}, {"name", "chain"}, {"outputs", {"c"}}};
  nlohmann::json x = tensor({4}, "float32");
  x["id"] = "x";
  t["inputs"] = {x};
  t["nodes"] = nlohmann::json::array();
  const char* prev = "x";
  for (const char* id : {"a", "b", "c"}) {
    t["nodes"].push_back({{"id", id},
                          {"op", "aten.neg.default"},
                          {"args", {ref(prev)}},
                          {"outputs", {tensor({4}, "float32")}}});
    prev = id;
  }
  return parse_trace(t, "<chain>");
}

}  // namespace

TEST(Plan, OverlappingMatchIsDroppedWithAReason) {
  Graph g = chain3();
  const FusionSpec* order[] = {&kFirst, &kSecond};
  Plan p = make_plan(g, order);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(p.regions[0].fusion, &kFirst);
  EXPECT_EQ(p.node_region, (std::vector<int>{0, 0, -1}));
  ASSERT_EQ(p.dropped.size(), 1u);
  EXPECT_EQ(p.dropped[0].fusion, "second");
  EXPECT_NE(p.dropped[0].reason.find("overlaps region 0 (first) at node 'b'"), std::string::npos)
      << p.dropped[0].reason;
  auto j = plan_to_json(g, p);
  ASSERT_EQ(j["dropped_matches"].size(), 1u);
  EXPECT_EQ(j["dropped_matches"][0]["nodes"], nlohmann::json::array({"b", "c"}));
  EXPECT_EQ(j["eager_nodes"], nlohmann::json::array({"c"}));
}

TEST(Plan, RegionIoAndBytes) {
  Graph g = chain3();
  Region r = make_region(g, {2, 1}, 0);
  EXPECT_EQ(r.nodes, (std::vector<int>{1, 2}));
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(g.values[r.inputs[0]].name, "a");
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(g.values[r.outputs[0]].name, "c");
  // Each value counted once, even when listed twice.
  EXPECT_EQ(value_bytes(g, {r.inputs[0], r.outputs[0], r.outputs[0]}), 2 * 4 * 4);
}

// The whole-trace SOL bytes (trace_io_bytes): a fused qkv [2, 12] whose q and k parts are
// computed and whose v part is returned as a view (litgpt's split): v is neither read nor
// written, so the trace moves q and k in (2 x 32 bytes) and q and k out (2 x 32 bytes), not
// 96 + 96. Counting every input and output whole gave 107 % of SOL on litgpt's RoPE forward.
TEST(Plan, TraceIoBytesLeaveOutPassThroughViews) {
  nlohmann::json t = {
      {"schema", "replay-trace/1"}, {"name", "qkv"}, {"outputs", {"qn", "kn", "v2"}}};
  nlohmann::json x = tensor({2, 12}, "float32");
  x["id"] = "qkv";
  t["inputs"] = {x};
  auto slice = [](const char* id, int start, int end) {
    return nlohmann::json{{"id", id},
                          {"op", "aten.slice.Tensor"},
                          {"args", {ref("qkv"), 1, start, end}},
                          {"outputs", {tensor({2, 4}, "float32")}}};
  };
  t["nodes"] = {slice("q", 0, 4),
                slice("k", 4, 8),
                slice("v", 8, 12),
                {{"id", "qn"},
                 {"op", "aten.neg.default"},
                 {"args", {ref("q")}},
                 {"outputs", {tensor({2, 4}, "float32")}}},
                {{"id", "kn"},
                 {"op", "aten.neg.default"},
                 {"args", {ref("k")}},
                 {"outputs", {tensor({2, 4}, "float32")}}},
                {{"id", "v2"},
                 {"op", "aten.view.default"},
                 {"args", {ref("v"), {8}}},
                 {"outputs", {tensor({8}, "float32")}}}};
  Graph g = parse_trace(t, "<qkv>");
  const int qkv = g.find_value("qkv");
  EXPECT_EQ(view_root_input(g, g.find_value("v2")), qkv);
  EXPECT_EQ(view_root_input(g, qkv), qkv);
  EXPECT_EQ(view_root_input(g, g.find_value("qn")), -1);  // a computing op on the way
  EXPECT_EQ(trace_io_bytes(g), 4 * 32.0);
  // Every input and output whole, as before: what the graph's data movement does not need.
  EXPECT_EQ(value_bytes(g, {qkv, g.find_value("qn"), g.find_value("kn"), g.find_value("v2")}),
            96.0 + 32 + 32 + 32);
  // A computed output is counted whole: the chain of three negations writes c and reads x.
  EXPECT_EQ(trace_io_bytes(chain3()), 2 * 4 * 4.0);
}

TEST(Plan, FusionNeedingMoreRanksIsDropped) {
  Graph g = chain3();
  FusionSpec collective = kFirst;
  collective.name = "collective";
  collective.min_world_size = 2;
  const FusionSpec* order[] = {&collective, &kSecond};
  Plan p = make_plan(g, order);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(p.regions[0].fusion, &kSecond);
  ASSERT_EQ(p.dropped.size(), 1u);
  EXPECT_EQ(p.dropped[0].reason, "needs world_size >= 2; the trace has 1");
}
