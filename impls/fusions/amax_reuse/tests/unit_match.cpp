// The amax_reuse matcher on the bundled float8 traces and on synthetic forms: every form it takes
// (aten.amax with dims and keepdim true / false, over every dim, aten.max.default, aten.amin; |x|
// reached through abs -> float32 -> abs), and the reasons it gives where it declines.
#include <gtest/gtest.h>

#include "impls/fusions/amax_reuse/params.hpp"
#include "impls/fusions/amax_reuse/tests/synthetic.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;
using replay::amax_reuse::AmaxKind;
using replay::amax_reuse::Extreme;

namespace replay::fusions {
extern const FusionSpec amax_reuse;
}

namespace {

Plan plan_of(const Graph& g) {
  const FusionSpec* only[] = {&fusions::amax_reuse};
  return make_plan(g, only);
}

const amax_reuse::Params& params(const Region& r) {
  return std::any_cast<const amax_reuse::Params&>(r.params);
}

std::string name(const Graph& g, int v) {
  return v >= 0 ? g.values[v].name : "<none>";
}

std::vector<std::string> node_ids(const Graph& g, const std::vector<int>& nodes) {
  std::vector<std::string> out;
  for (int n : nodes) out.push_back(g.nodes[n].id);
  return out;
}

Graph synth(const AmaxForm& f) {
  return parse_trace(amax_trace(f), f.name);
}

// The region whose reductions read x `x`, or nullptr.
const Region* region_of(const Graph& g, const Plan& p, const std::string& x) {
  for (const Region& r : p.regions)
    if (name(g, params(r).x) == x) return &r;
  return nullptr;
}

}  // namespace

// torchao's axiswise form: |x| -> float32 -> |.| -> amax over [-1] (keepdim) and torch.amax over
// every dim, each read right after it: one region, x read once, the tensorwise from the rows.
TEST(AmaxReuseMatch, RowwiseAndTensorwiseOfAbsUpcastAbs) {
  Graph g = synth(AmaxForm{});
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const Region& r = p.regions[0];
  const auto& a = params(r);
  EXPECT_EQ(name(g, a.x), "x");
  EXPECT_TRUE(a.abs);
  EXPECT_EQ(a.M, 16);
  EXPECT_EQ(a.N, 64);
  EXPECT_EQ(a.split, 1);
  ASSERT_EQ(a.reductions.size(), 2u);
  EXPECT_EQ(a.reductions[0].kind, AmaxKind::kRows);
  EXPECT_EQ(a.reductions[1].kind, AmaxKind::kAll);
  EXPECT_EQ(a.reductions[1].from, 0);  // B ⊃ A: the tensorwise amax from the row maxima
  EXPECT_EQ(a.reductions[0].extreme, Extreme::kMax);
  EXPECT_EQ(node_ids(g, r.nodes),
            (std::vector<std::string>{"abs_x", "up_x", "abs2_x", "red_0", "red_1"}));
  EXPECT_EQ(node_ids(g, {r.anchor}), std::vector<std::string>{"red_0"});  // before scale_0
  std::vector<std::string> outs;
  for (int v : r.outputs) outs.push_back(name(g, v));
  EXPECT_EQ(outs, (std::vector<std::string>{"red_0", "red_1"}));
  // Cost: x read once (bf16), 16 + 1 float32 results written.
  EXPECT_DOUBLE_EQ(r.fusion->cost(g, r).bytes, 16 * 64 * 2 + 17 * 4);
  const nlohmann::json d = r.fusion->describe(g, r);
  EXPECT_EQ(d["reductions"][1]["from"], "red_0");
  EXPECT_EQ(d["reductions"][0]["over"], "rows");
  EXPECT_EQ(d["prologue"].size(), 3u);
}

TEST(AmaxReuseMatch, EveryAmaxForm) {
  struct Case {
    const char* label;
    std::vector<AmaxRed> reds;
    std::vector<AmaxKind> kinds;
    std::vector<Extreme> ext;
  };
  const AmaxRed rows_keep{"aten.amax.default", {-1}, true};
  const AmaxRed rows_flat{"aten.amax.default", {1}, false};
  const AmaxRed cols{"aten.amax.default", {0}, true};
  const AmaxRed all_dims{"aten.amax.default", {0, 1}, false};
  const AmaxRed all_noarg{"aten.amax.default", {}, false, false};
  const AmaxRed max_all{"aten.max.default", {}, false, false};
  const AmaxRed amin_rows{"aten.amin.default", {-1}, true};
  const AmaxRed min_all{"aten.min.default", {}, false, false};
  const std::vector<Case> cases = {
      {"keepdim false", {rows_flat, all_dims}, {AmaxKind::kRows, AmaxKind::kAll}, {}},
      {"amax(x) without dims", {rows_keep, all_noarg}, {AmaxKind::kRows, AmaxKind::kAll}, {}},
      {"torch.max(|x|) (torchao tensorwise)",
       {rows_keep, max_all},
       {AmaxKind::kRows, AmaxKind::kAll},
       {}},
      {"rowwise, columnwise, tensorwise of one abs",
       {rows_keep, cols, max_all},
       {AmaxKind::kRows, AmaxKind::kCols, AmaxKind::kAll},
       {}},
      {"amin beside amax",
       {amin_rows, rows_keep, min_all},
       {AmaxKind::kRows, AmaxKind::kRows, AmaxKind::kAll},
       {Extreme::kMin, Extreme::kMax, Extreme::kMin}},
      {"two amaxes over the same dims",
       {rows_keep, rows_flat},
       {AmaxKind::kRows, AmaxKind::kRows},
       {}},
  };
  for (const Case& c : cases) {
    for (const char* prologue : {"abs_f32_abs", "abs", "none"}) {
      AmaxForm f;
      f.reds = c.reds;
      f.prologue = prologue;
      Graph g = synth(f);
      Plan p = plan_of(g);
      ASSERT_EQ(p.regions.size(), 1u) << c.label << " " << prologue;
      const auto& a = params(p.regions[0]);
      EXPECT_EQ(name(g, a.x), "x") << c.label;
      EXPECT_EQ(a.abs, std::string(prologue) != "none") << c.label;
      ASSERT_EQ(a.reductions.size(), c.kinds.size()) << c.label;
      for (size_t i = 0; i < c.kinds.size(); ++i) {
        EXPECT_EQ(a.reductions[i].kind, c.kinds[i]) << c.label << " " << i;
        if (!c.ext.empty()) {
          EXPECT_EQ(a.reductions[i].extreme, c.ext[i]) << c.label << " " << i;
        }
      }
      EXPECT_EQ(p.regions[0].inputs.size(), 1u);
    }
  }
}

// x [2, 8, 64]: rowwise over [-1], columnwise over [0, 1] (the tokens), tensorwise: x as
// [16, 64]; size-1 dims anywhere do not change the split.
TEST(AmaxReuseMatch, ThreeDimsAndSizeOneDims) {
  AmaxForm f;
  f.shape = {2, 8, 64};
  f.reds = {{"aten.amax.default", {-1}, true},
            {"aten.amax.default", {0, 1}, true},
            {"aten.max.default", {}, false, false}};
  Graph g = synth(f);
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const auto& a = params(p.regions[0]);
  EXPECT_EQ(a.split, 2);
  EXPECT_EQ(a.M, 16);
  EXPECT_EQ(a.N, 64);
  EXPECT_EQ(a.reductions[1].kind, AmaxKind::kCols);
  f.shape = {16, 1, 64};
  f.reds = {{"aten.amax.default", {2}, true}, {"aten.amax.default", {0, 1}, false}};
  g = synth(f);
  p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(params(p.regions[0]).M, 16);
  EXPECT_EQ(params(p.regions[0]).N, 64);
  EXPECT_EQ(params(p.regions[0]).reductions[1].kind, AmaxKind::kCols);
}

// The bundled float8 rowwise captures: x and the weight each get amax over [-1] and over [0] of
// the same |.| (abs -> float32 -> abs); the forward's rowwise scale is read before the
// columnwise amax is reached, so the fused step runs at the first reduction.
TEST(AmaxReuseMatch, Float8RowwiseTraces) {
  Graph g = load_trace(trace_path("float8_linear_rowwise_train_fwd_2x8x64x32"));
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 2u);
  const Region* x = region_of(g, p, "view");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(node_ids(g, x->nodes),
            (std::vector<std::string>{"abs_1", "convert_element_type", "abs_2", "amax", "amax_5"}));
  EXPECT_EQ(g.nodes[x->anchor].id, "amax");
  const auto& a = params(*x);
  EXPECT_TRUE(a.abs);
  EXPECT_EQ(a.reductions[0].kind, AmaxKind::kRows);
  EXPECT_EQ(a.reductions[1].kind, AmaxKind::kCols);
  const Region* w = region_of(g, p, "weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(node_ids(g, w->nodes), (std::vector<std::string>{"abs_3", "convert_element_type_5",
                                                             "abs_4", "amax_1", "amax_3"}));
  EXPECT_EQ(params(*w).M, 32);
  EXPECT_EQ(params(*w).N, 64);

  Graph b = load_trace(trace_path("float8_linear_rowwise_train_bwd_2x8x64x32"));
  Plan pb = plan_of(b);
  ASSERT_EQ(pb.regions.size(), 1u);
  EXPECT_EQ(name(b, params(pb.regions[0]).x), "view_2");
  EXPECT_EQ(b.nodes[pb.regions[0].anchor].id, "amax_2");

  // aot_autograd's default partitioner recomputes |dy| for the columnwise amax: two abs chains of
  // one tensor, one region reading it once.
  Graph d = load_trace(trace_path("byog/float8/float8_rowwise_default_train_bwd_2x8x64x32"));
  Plan pd = plan_of(d);
  ASSERT_EQ(pd.regions.size(), 1u);
  EXPECT_EQ(node_ids(d, pd.regions[0].nodes),
            (std::vector<std::string>{"abs_5", "convert_element_type_10", "abs_6", "amax_2",
                                      "abs_9", "convert_element_type_20", "abs_10", "amax_4"}));
  EXPECT_EQ(name(d, params(pd.regions[0]).x), "view_2");
  EXPECT_EQ(params(pd.regions[0]).reductions[1].kind, AmaxKind::kCols);
}

// Tensorwise float8: one amax per tensor, nothing to share a pass with.
TEST(AmaxReuseMatch, Float8TensorwiseTraceDeclinesSingleReductions) {
  Graph g = load_trace(trace_path("float8_linear_tensorwise_train_fwd_2x8x64x32"));
  Plan p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  EXPECT_NE(declined_at(g, p, "amax").find("the only max-like reduction of |view|"),
            std::string::npos)
      << declined_at(g, p, "amax");
  EXPECT_NE(declined_at(g, p, "amax_1").find("the only max-like reduction of |weight|"),
            std::string::npos);
}

TEST(AmaxReuseMatch, DeclinesAmaxesOfDifferentTensors) {
  AmaxForm f;
  f.reds = {{"aten.amax.default", {-1}, true, true, "x"},
            {"aten.amax.default", {}, false, false, "w"}};
  Graph g = synth(f);
  Plan p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  EXPECT_NE(declined_at(g, p, "red_0").find("the only max-like reduction of |x|"),
            std::string::npos)
      << declined_at(g, p, "red_0");
  EXPECT_NE(declined_at(g, p, "red_1").find("the only max-like reduction of |w|"),
            std::string::npos);
  // |x| and x are not one tensor either.
  f.prologue = "abs";
  f.reds = {{"aten.amax.default", {-1}, true}, {"aten.amax.default", {}, false, false}};
  nlohmann::json doc = amax_trace(f);
  doc["nodes"][1]["args"][0] = test::ref("x");  // red_0 reduces x itself
  g = parse_trace(doc, "mixed");
  p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  EXPECT_NE(declined_at(g, p, "red_0").find("the only max-like reduction of x ("),
            std::string::npos)
      << declined_at(g, p, "red_0");
}

TEST(AmaxReuseMatch, DeclinesASingleReduction) {
  AmaxForm f;
  f.reds = {{"aten.amax.default", {-1}, true}};
  Graph g = synth(f);
  Plan p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  EXPECT_NE(declined_at(g, p, "red_0").find("no other amax/amin/max of the same tensor"),
            std::string::npos);
}

// A sum of the same |x| is never reused (regrouped float sums round differently); the amaxes
// beside it are fused, reading |x| (which the sum needs anyway) instead of claiming its chain.
TEST(AmaxReuseMatch, SumIsNotReused) {
  AmaxForm f;
  f.reds = {{"aten.amax.default", {-1}, true},
            {"aten.amax.default", {}, false, false},
            {"", {-1}, true, true, "x", "sum"}};
  Graph g = synth(f);
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  const auto& a = params(p.regions[0]);
  EXPECT_EQ(a.reductions.size(), 2u);
  EXPECT_EQ(name(g, a.x), "abs2_x");  // the sum reads it: not private, read as it is
  EXPECT_EQ(node_ids(g, p.regions[0].nodes), (std::vector<std::string>{"red_0", "red_1"}));
  EXPECT_NE(declined_at(g, p, "red_2").find("is not reused: a float sum regrouped"),
            std::string::npos)
      << declined_at(g, p, "red_2");
}

// The first |x| returned by the graph: the region reads it and claims the rest of the chain.
TEST(AmaxReuseMatch, ChainValueReadOutside) {
  AmaxForm f;
  f.leak_first_abs = true;
  Graph g = synth(f);
  Plan p = plan_of(g);
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(name(g, params(p.regions[0]).x), "abs_x");
  EXPECT_TRUE(params(p.regions[0]).abs);
  EXPECT_EQ(node_ids(g, p.regions[0].nodes),
            (std::vector<std::string>{"up_x", "abs2_x", "red_0", "red_1"}));
}

TEST(AmaxReuseMatch, DeclinesDimsThatAreNotRowsColumnsOrAll) {
  AmaxForm f;
  f.shape = {4, 8, 16};
  f.reds = {{"aten.amax.default", {1}, true}, {"aten.amax.default", {}, false, false}};
  Graph g = synth(f);
  Plan p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  EXPECT_NE(declined_at(g, p, "red_0").find("reduces neither its leading nor its trailing dims"),
            std::string::npos)
      << declined_at(g, p, "red_0");
  f.reds = {{"aten.amax.default", {2}, true}, {"aten.amax.default", {0}, true}};
  g = synth(f);
  p = plan_of(g);
  EXPECT_TRUE(p.regions.empty());
  EXPECT_NE(declined_at(g, p, "red_0").find("do not split it at one point"), std::string::npos)
      << declined_at(g, p, "red_0");
}

// The captures of the seed (traces/byog/float8/amax_*: torch.compile of the amaxes of one |x|):
// rowwise + tensorwise, and rowwise + columnwise + tensorwise (aten.max.default) of one abs, at
// the small shape with PyTorch's tensors and at [16384, 8192].
TEST(AmaxReuseMatch, SeedCaptures) {
  for (const char* shape : {"64x96", "16384x8192"}) {
    const std::string dir = "byog/float8/";
    Graph g = load_trace(trace_path(dir + "amax_row_tensor_fwd_" + shape));
    Plan p = plan_of(g);
    ASSERT_EQ(p.regions.size(), 1u) << shape;
    const Region& r = p.regions[0];
    const auto& a = params(r);
    EXPECT_EQ(node_ids(g, r.nodes), (std::vector<std::string>{"abs_1", "amax", "amax_1"}));
    EXPECT_EQ(name(g, a.x), "x");
    EXPECT_TRUE(a.abs);
    ASSERT_EQ(a.reductions.size(), 2u);
    EXPECT_EQ(a.reductions[0].kind, AmaxKind::kRows);
    EXPECT_EQ(a.reductions[1].kind, AmaxKind::kAll);
    EXPECT_EQ(a.reductions[1].from, 0);
    // x read once, the row maxima and the tensorwise amax written (bf16).
    EXPECT_DOUBLE_EQ(r.fusion->cost(g, r).bytes, 2.0 * a.M * a.N + 2.0 * a.M + 2);
    if (std::string(shape) == "16384x8192") {
      EXPECT_EQ(a.M, 16384);
      EXPECT_EQ(a.N, 8192);
      EXPECT_DOUBLE_EQ(r.fusion->cost(g, r).bytes, 268435456.0 + 32768 + 2);
    }

    Graph g3 = load_trace(trace_path(dir + "amax_row_col_tensor_fwd_" + shape));
    Plan p3 = plan_of(g3);
    ASSERT_EQ(p3.regions.size(), 1u) << shape;
    const auto& a3 = params(p3.regions[0]);
    EXPECT_EQ(node_ids(g3, p3.regions[0].nodes),
              (std::vector<std::string>{"abs_1", "amax", "amax_1", "max_1"}));
    ASSERT_EQ(a3.reductions.size(), 3u);
    EXPECT_EQ(a3.reductions[0].kind, AmaxKind::kRows);
    EXPECT_EQ(a3.reductions[1].kind, AmaxKind::kCols);
    EXPECT_EQ(a3.reductions[2].kind, AmaxKind::kAll);
    EXPECT_EQ(a3.reductions[2].from, 0);
  }
}
