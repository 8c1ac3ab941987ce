// fp8_quantize matcher: the bundled float8 linears (tensorwise and rowwise, forward and backward,
// both shapes) give one region per quantized tensor with every quantization of it and every
// output the graph reads; synthetic forms for each granularity, amax form, float8 dtype, groups
// and the column-major copy; negatives declined with their reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "impls/fusions/fp8_quantize/params.hpp"
#include "impls/fusions/fp8_quantize/tests/synthetic.hpp"
#include "impls/fusions/registry.hpp"
#include "tests/unit/fake_buffers.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/canonical.hpp"

namespace replay::fusions {
extern const FusionSpec fp8_quantize;
}

using namespace replay;
using namespace replay::test;
using fp8_quantize::Granularity;
using fp8_quantize::Params;
using fp8_quantize::Quantization;

namespace {

std::vector<const Region*> fp8_regions(const Plan& p) {
  std::vector<const Region*> out;
  for (const Region& r : p.regions)
    if (r.fusion == &fusions::fp8_quantize) out.push_back(&r);
  return out;
}

const Params& params(const Region* r) {
  return std::any_cast<const Params&>(r->params);
}

std::vector<std::string> names(const Graph& g, const std::vector<int>& vs) {
  std::vector<std::string> out;
  for (int v : vs) out.push_back(g.values[v].name);
  return out;
}

// The region quantizing value `x`.
const Region* region_of(const Graph& g, const Plan& p, const std::string& x) {
  for (const Region* r : fp8_regions(p))
    if (g.values[params(r).x].name == x) return r;
  return nullptr;
}

std::string fp8_declines(const Graph& g, const Plan& p) {
  std::string s;
  for (const auto& d : p.declined)
    if (d.fusion == "fp8_quantize") s += g.nodes[d.node].id + ": " + d.reason + "\n";
  return s;
}

using V = std::vector<std::string>;

}  // namespace

TEST(Fp8QuantizeMatch, TensorwiseForwardQuantizesXAndWeightWithTheirColumnMajorCopies) {
  for (const char* t : {"float8_linear_tensorwise_train_fwd_2x8x64x32",
                        "float8_linear_tensorwise_train_fwd_2x4096x4096x4096"}) {
    Graph g = load_trace(trace_path(t));
    Plan p = make_plan(g, fusion_registry());
    ASSERT_EQ(fp8_regions(p).size(), 2u) << t;
    EXPECT_EQ(fp8_declines(g, p), "") << t;
    const Region* x = region_of(g, p, "view");
    ASSERT_TRUE(x) << t;
    ASSERT_EQ(params(x).quants.size(), 1u);
    const Quantization& qx = params(x).quants[0];
    EXPECT_EQ(qx.granularity, Granularity::kTensorwise);
    EXPECT_EQ(qx.fp8, DType::kFloat8E4M3);
    EXPECT_EQ(qx.fp8_max, 448);
    EXPECT_EQ(qx.eps, 1e-12);
    EXPECT_TRUE(qx.abs);
    // the float8 x for the forward GEMM and its column-major copy (permute_4, cloned) for dW
    EXPECT_EQ(names(g, qx.q_outs), (V{"convert_element_type_3", "permute_4"})) << t;
    EXPECT_EQ(names(g, qx.recip_outs), V{"reciprocal_2"});
    EXPECT_TRUE(qx.scale_outs.empty());
    // The fused step runs at the abs, before the GEMM that reads the float8 x; the clone of the
    // transpose is a tail whose layout the output takes.
    EXPECT_EQ(g.nodes[x->anchor].id, "abs_1");
    ASSERT_EQ(x->tail.size(), 1u);
    EXPECT_EQ(g.nodes[x->tail[0].node].id, "clone_2");
    const Region* w = region_of(g, p, "weight");
    ASSERT_TRUE(w);
    ASSERT_EQ(params(w).quants.size(), 1u);
    // The GEMM reads the weight's transpose as its mat2 (the column-major view of the row-major
    // float8 weight): the region writes the weight, the view and its clone stay eager.
    EXPECT_EQ(names(g, params(w).quants[0].q_outs), V{"convert_element_type_7"});
    EXPECT_TRUE(w->tail.empty());
    EXPECT_EQ(names(g, params(w).quants[0].recip_outs), V{"reciprocal_3"});
    const bool small = t == std::string("float8_linear_tensorwise_train_fwd_2x8x64x32");
    EXPECT_EQ(params(w).rows, small ? 32 : 4096);
    EXPECT_EQ(params(w).cols, small ? 64 : 4096);
  }
}

TEST(Fp8QuantizeMatch, RowwiseForwardGroupsRowwiseAndColumnwiseOfOneTensor) {
  for (const char* t : {"float8_linear_rowwise_train_fwd_2x8x64x32",
                        "float8_linear_rowwise_train_fwd_2x4096x4096x4096"}) {
    Graph g = load_trace(trace_path(t));
    Plan p = make_plan(g, fusion_registry());
    ASSERT_EQ(fp8_regions(p).size(), 2u) << t;
    EXPECT_EQ(fp8_declines(g, p), "") << t;
    const Region* x = region_of(g, p, "view");
    ASSERT_TRUE(x);
    const auto& qx = params(x).quants;
    ASSERT_EQ(qx.size(), 2u);
    EXPECT_EQ(qx[0].granularity, Granularity::kRowwise);
    EXPECT_EQ(names(g, qx[0].q_outs), V{"convert_element_type_4"});
    EXPECT_EQ(names(g, qx[0].recip_outs), V{"reciprocal_2"});
    EXPECT_EQ(qx[1].granularity, Granularity::kColumnwise);
    EXPECT_EQ(names(g, qx[1].q_outs), V{"permute_5"});
    EXPECT_EQ(names(g, qx[1].recip_outs), V{"reciprocal_11"});
    EXPECT_EQ(g.nodes[x->anchor].id, "abs_1");
    const Region* w = region_of(g, p, "weight");
    ASSERT_TRUE(w);
    const auto& qw = params(w).quants;
    ASSERT_EQ(qw.size(), 2u);
    EXPECT_EQ(qw[0].granularity, Granularity::kRowwise);
    EXPECT_EQ(names(g, qw[0].q_outs), V{"convert_element_type_9"});  // read as mat2: a view
    // the weight's rowwise scale is read transposed: permute_1 -> reciprocal_3
    EXPECT_EQ(names(g, qw[0].recip_outs), V{"reciprocal_3"});
    EXPECT_EQ(qw[1].granularity, Granularity::kColumnwise);
    EXPECT_EQ(names(g, qw[1].q_outs), V{"permute_2"});
    EXPECT_EQ(names(g, qw[1].recip_outs), V{"reciprocal_7"});
    // the abs -> float32 -> abs chain is claimed: both amaxes read it
    bool has_abs_4 = false;
    for (int n : w->nodes) has_abs_4 |= g.nodes[n].id == "abs_4";
    EXPECT_TRUE(has_abs_4);
  }
}

TEST(Fp8QuantizeMatch, BackwardQuantizesTheGradient) {
  {
    Graph g = load_trace(trace_path("float8_linear_tensorwise_train_bwd_2x8x64x32"));
    Plan p = make_plan(g, fusion_registry());
    ASSERT_EQ(fp8_regions(p).size(), 1u);
    const auto& q = params(fp8_regions(p)[0]).quants;
    ASSERT_EQ(q.size(), 1u);
    EXPECT_EQ(q[0].fp8, DType::kFloat8E5M2);
    EXPECT_EQ(q[0].fp8_max, 57344);
    EXPECT_EQ(names(g, q[0].q_outs), (V{"convert_element_type_11", "permute_3"}));
    EXPECT_EQ(names(g, q[0].recip_outs), V{"reciprocal_6"});
  }
  for (const char* t : {"float8_linear_rowwise_train_bwd_2x8x64x32",
                        "float8_linear_rowwise_train_bwd_2x4096x4096x4096"}) {
    Graph g = load_trace(trace_path(t));
    Plan p = make_plan(g, fusion_registry());
    ASSERT_EQ(fp8_regions(p).size(), 1u) << t;
    const auto& q = params(fp8_regions(p)[0]).quants;
    ASSERT_EQ(q.size(), 2u);
    EXPECT_EQ(names(g, q[0].q_outs), V{"convert_element_type_14"});
    EXPECT_EQ(names(g, q[1].q_outs), V{"permute_4"});
    EXPECT_EQ(names(g, q[1].recip_outs), V{"reciprocal_10"});  // through permute_7
  }
}

namespace {

Plan plan_of(const QuantForm& f, Graph& g, const std::string& name = "synthetic_fp8") {
  g = parse_trace(quant_trace(f, name), name);
  return make_plan(g, fusion_registry());
}

QuantSpec spec(std::string gran, std::string fp8 = "float8_e4m3fn") {
  QuantSpec q;
  q.gran = std::move(gran);
  q.fp8 = std::move(fp8);
  return q;
}

}  // namespace

TEST(Fp8QuantizeMatch, EveryGranularityAmaxFormAndFloat8Dtype) {
  for (const char* gran : {"tensorwise", "tensorwise_max", "rowwise", "columnwise"})
    for (const char* fp8 : {"float8_e4m3fn", "float8_e5m2"}) {
      QuantForm f;
      f.quants = {spec(gran, fp8)};
      Graph g;
      Plan p = plan_of(f, g);
      const std::string label = std::string(gran) + " " + fp8;
      ASSERT_EQ(fp8_regions(p).size(), 1u) << label << "\n" << fp8_declines(g, p);
      const Region* r = fp8_regions(p)[0];
      const Quantization& q = params(r).quants.at(0);
      const Granularity want = std::string(gran) == "rowwise"      ? Granularity::kRowwise
                               : std::string(gran) == "columnwise" ? Granularity::kColumnwise
                                                                   : Granularity::kTensorwise;
      EXPECT_EQ(q.granularity, want) << label;
      EXPECT_EQ(q.fp8, std::string(fp8) == "float8_e5m2" ? DType::kFloat8E5M2 : DType::kFloat8E4M3);
      EXPECT_EQ(names(g, q.q_outs), V{"q_0"}) << label;
      EXPECT_EQ(names(g, q.recip_outs), V{"rcp_0"}) << label;
      // the whole chain is claimed, x.float() and |x| included
      EXPECT_EQ(r->inputs, std::vector<int>{g.find_value("x")}) << label;
      EXPECT_EQ(r->outputs.size(), 2u) << label;
    }
}

// torchao's round_scales_to_power_of_2 (on in its rowwise recipes): log2 -> floor -> exp2 of the
// float32 scale (or pow(2, .)) is part of the scale chain; the rounded value is the scale the
// cast and the reciprocal read.
TEST(Fp8QuantizeMatch, PowerOfTwoScaleRoundingIsPartOfTheScaleChain) {
  for (const char* gran : {"tensorwise", "rowwise", "columnwise"})
    for (bool pow : {false, true}) {
      QuantForm f;
      f.quants = {spec(gran)};
      f.quants[0].pow2 = true;
      f.quants[0].pow2_pow = pow;
      Graph g;
      Plan p = plan_of(f, g);
      const std::string label = std::string(gran) + (pow ? " pow(2, .)" : " exp2");
      ASSERT_EQ(fp8_regions(p).size(), 1u) << label << "\n" << fp8_declines(g, p);
      EXPECT_EQ(fp8_declines(g, p), "") << label;
      const Region* r = fp8_regions(p)[0];
      const Quantization& q = params(r).quants.at(0);
      EXPECT_TRUE(q.pow2) << label;
      EXPECT_EQ(g.values[q.scale].name, "pow2_0") << label;
      EXPECT_EQ(names(g, q.recip_outs), V{"rcp_0"}) << label;
      EXPECT_EQ(r->inputs, std::vector<int>{g.find_value("x")}) << label;
      for (const char* n : {"log2_0", "round_0", "pow2_0"})
        EXPECT_NE(std::find(r->nodes.begin(), r->nodes.end(), g.values[g.find_value(n)].producer),
                  r->nodes.end())
            << label << ": " << n << " not in the region";
      EXPECT_EQ(fusions::fp8_quantize.describe(g, *r)["quantizations"][0]["scale_pow2"], true);
    }
  QuantForm plain;
  plain.quants = {spec("rowwise")};
  Graph g;
  Plan p = plan_of(plain, g);
  ASSERT_EQ(fp8_regions(p).size(), 1u);
  EXPECT_FALSE(params(fp8_regions(p)[0]).quants[0].pow2);
}

// log2 -> ceil -> exp2 is not torchao's rounding (it would round the scale up, past the float8
// range): declined, saying which step.
TEST(Fp8QuantizeMatch, ScaleRoundedUpIsDeclined) {
  QuantForm f;
  f.quants = {spec("rowwise")};
  f.quants[0].pow2 = true;
  f.quants[0].pow2_round = "ceil";
  Graph g;
  Plan p = plan_of(f, g);
  EXPECT_TRUE(fp8_regions(p).empty());
  EXPECT_NE(
      declined_at(g, p, "amax_0")
          .find("the reader of 'log2_0' (aten.log2.default) is 'round_0' (aten.ceil.default), "
                "not a floor"),
      std::string::npos)
      << fp8_declines(g, p);
  // one decline: the cast by the rounded value is this chain's, not another tensor's scale
  EXPECT_EQ(declined_at(g, p, "scaled_0"), "") << fp8_declines(g, p);
}

// A given amax whose scale is rounded to a power of two: walked back through exp2, floor, log2.
TEST(Fp8QuantizeMatch, GivenAmaxThroughAPowerOfTwoRounding) {
  QuantForm f;
  f.quants = {spec("tensorwise")};
  f.foreign_scale = true;
  f.foreign_pow2 = true;
  Graph g;
  Plan p = plan_of(f, g);
  ASSERT_EQ(fp8_regions(p).size(), 1u) << fp8_declines(g, p);
  const Params& pr = params(fp8_regions(p)[0]);
  ASSERT_EQ(pr.quants.size(), 2u);
  EXPECT_TRUE(pr.quants[1].given);
  EXPECT_TRUE(pr.quants[1].pow2);
  EXPECT_EQ(g.values[pr.quants[1].amax].name, "amax_y");
  EXPECT_EQ(g.values[pr.quants[1].scale].name, "pow2_y");
  EXPECT_EQ(declined_at(g, p, "scaled_xy"), "") << fp8_declines(g, p);
}

TEST(Fp8QuantizeMatch, GroupOfThreeQuantizationsWithColumnMajorCopiesIsOneRegion) {
  QuantForm f;
  f.quants = {spec("rowwise"), spec("columnwise"), spec("tensorwise", "float8_e5m2")};
  f.quants[0].f32_abs = f.quants[1].f32_abs = true;
  f.quants[1].row_major_out = false;
  f.quants[1].col_major_out = true;
  f.quants[2].col_major_out = true;
  f.quants[2].amax_out = true;
  Graph g;
  Plan p = plan_of(f, g);
  ASSERT_EQ(fp8_regions(p).size(), 1u) << fp8_declines(g, p);
  const Region* r = fp8_regions(p)[0];
  const auto& q = params(r).quants;
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(names(g, q[0].q_outs), V{"q_0"});
  EXPECT_EQ(names(g, q[1].q_outs), V{"qp_1"});  // the transpose whose clone is the copy
  EXPECT_EQ(names(g, q[2].q_outs), (V{"q_2", "qp_2"}));
  EXPECT_EQ(names(g, q[2].amax_outs), V{"amax_2"});
  EXPECT_EQ(r->inputs, std::vector<int>{g.find_value("x")});
  // the clones are tails: their buffers are the column-major copies the kernels write
  EXPECT_EQ(r->tail.size(), 2u);
}

TEST(Fp8QuantizeMatch, Float32SourceAndRank3Rowwise) {
  QuantForm f;
  f.shape = {2, 8, 64};
  f.dtype = "float32";
  f.quants = {spec("rowwise")};
  Graph g;
  Plan p = plan_of(f, g);
  ASSERT_EQ(fp8_regions(p).size(), 1u) << fp8_declines(g, p);
  EXPECT_EQ(params(fp8_regions(p)[0]).rows, 16);
  EXPECT_EQ(params(fp8_regions(p)[0]).cols, 64);
}

// x.float() cast by a scale from y's amax: for x's region that amax is given (read, not computed
// from x), so x's region takes both casts; y, whose scale casts no y.float(), is declined.
TEST(Fp8QuantizeMatch, ScaleFromAnotherTensorsAmaxIsAGivenAmax) {
  QuantForm f;
  f.quants = {spec("tensorwise")};
  f.foreign_scale = true;
  Graph g;
  Plan p = plan_of(f, g);
  ASSERT_EQ(fp8_regions(p).size(), 1u) << fp8_declines(g, p);
  const Params& pr = params(fp8_regions(p)[0]);
  EXPECT_EQ(g.values[pr.x].name, "x");
  ASSERT_EQ(pr.quants.size(), 2u);
  EXPECT_FALSE(pr.quants[0].given);
  EXPECT_TRUE(pr.quants[1].given);
  EXPECT_EQ(g.values[pr.quants[1].amax].name, "amax_y");
  EXPECT_EQ(g.values[pr.quants[1].scale].name, "scale_y");
  EXPECT_EQ(declined_at(g, p, "scaled_xy"), "") << fp8_declines(g, p);
  EXPECT_NE(declined_at(g, p, "amax_y").find("multiplies no x.float() of 'y'"), std::string::npos)
      << fp8_declines(g, p);
}

// y's scale casts y.float() and x.float(): y's own region claims the scale chain, so for x it is
// not a given amax (taking it would overlap y's region and drop one of them); x's cast by it is
// declined and both tensors' own quantizations are regions.
TEST(Fp8QuantizeMatch, ScaleThatAlsoCastsItsOwnTensorIsNotGiven) {
  QuantForm f;
  f.quants = {spec("tensorwise")};
  f.foreign_scale = true;
  f.foreign_scale_casts_y = true;
  Graph g;
  Plan p = plan_of(f, g);
  ASSERT_EQ(fp8_regions(p).size(), 2u) << fp8_declines(g, p);
  for (const Region* r : fp8_regions(p)) {
    ASSERT_EQ(params(r).quants.size(), 1u);
    EXPECT_FALSE(params(r).quants[0].given);
  }
  EXPECT_NE(
      declined_at(g, p, "scaled_xy")
          .find("the scale 'scale_y' (prims.convert_element_type.default) multiplying x.float() "
                "of 'x' is not computed from this tensor's amax"),
      std::string::npos)
      << fp8_declines(g, p);
  for (const auto& d : p.dropped) EXPECT_NE(d.fusion, "fp8_quantize") << d.reason;
}

// x's own amax feeding a second scale chain: not a given amax (the region computes it: reading it
// in the launch that writes it would race); the first chain's quantization is still the region.
TEST(Fp8QuantizeMatch, OwnAmaxFeedingASecondScaleChainIsDeclined) {
  QuantForm f;
  f.quants = {spec("tensorwise")};
  f.second_chain_from_own_amax = true;
  Graph g;
  Plan p = plan_of(f, g);
  ASSERT_EQ(fp8_regions(p).size(), 1u) << fp8_declines(g, p);
  const auto& q = params(fp8_regions(p)[0]).quants;
  ASSERT_EQ(q.size(), 1u);
  EXPECT_FALSE(q[0].given);
  EXPECT_EQ(g.values[q[0].scale].name, "scale_0");
  EXPECT_NE(declined_at(g, p, "scaled_b").find("feeds a second scale chain"), std::string::npos)
      << fp8_declines(g, p);
}

// torchao's tensorwise min-cut backward requantizes the weight from the amax its forward saved
// (an input): one region for the weight, its quantization given, x read once.
TEST(Fp8QuantizeMatch, WeightRequantizedFromTheSavedAmax) {
  for (const char* t : {"byog/float8/float8_tensorwise_2d_mincut_train_bwd_16x64x32",
                        "byog/float8/float8_tensorwise_mincut_train_bwd_2x8x64x32"}) {
    Graph g = load_trace(trace_path(t));
    Plan p = make_plan(g, fusion_registry());
    const Region* w = nullptr;
    for (const Region* r : fp8_regions(p))
      if (g.values[params(r).x].name == "weight") w = r;
    ASSERT_NE(w, nullptr) << t << ": " << fp8_declines(g, p);
    const auto& q = params(w).quants;
    ASSERT_EQ(q.size(), 1u) << t;
    EXPECT_TRUE(q[0].given) << t;
    EXPECT_EQ(g.values[q[0].amax].name, "max_2") << t;
    EXPECT_EQ(q[0].granularity, Granularity::kTensorwise) << t;
    EXPECT_EQ(q[0].fp8, DType::kFloat8E4M3) << t;
    EXPECT_EQ(fusions::fp8_quantize.describe(g, *w)["x_reads"], 1) << t;
    EXPECT_EQ(fp8_declines(g, p), "") << t;
  }
}

TEST(Fp8QuantizeMatch, ClampBoundThatIsNotTheDtypesMaxIsDeclined) {
  QuantForm f;
  f.quants = {spec("rowwise")};
  f.quants[0].clamp = 400;
  Graph g;
  Plan p = plan_of(f, g);
  EXPECT_TRUE(fp8_regions(p).empty());
  EXPECT_NE(declined_at(g, p, "amax_0")
                .find("clamp bounds [-400, 400] are not float8_e4m3fn's [-448, 448]"),
            std::string::npos)
      << fp8_declines(g, p);
}

TEST(Fp8QuantizeMatch, ScaleMultiplierThatIsNotTheDtypesMaxIsDeclined) {
  QuantForm f;
  f.quants = {spec("tensorwise", "float8_e5m2")};
  f.quants[0].scale_mul = 448;
  Graph g;
  Plan p = plan_of(f, g);
  EXPECT_TRUE(fp8_regions(p).empty());
  EXPECT_NE(
      declined_at(g, p, "amax_0").find("the scale multiplies by 448, not float8_e5m2's max 57344"),
      std::string::npos)
      << fp8_declines(g, p);
}

TEST(Fp8QuantizeMatch, CastToANonFloat8DtypeIsDeclined) {
  QuantForm f;
  f.quants = {spec("tensorwise")};
  f.quants[0].cast_to = "bfloat16";
  Graph g;
  Plan p = plan_of(f, g);
  EXPECT_TRUE(fp8_regions(p).empty());
  EXPECT_NE(declined_at(g, p, "amax_0")
                .find("the quantized value is cast to bfloat16 by 'q_0' "
                      "(prims.convert_element_type.default), not to a "
                      "float8 dtype"),
            std::string::npos)
      << fp8_declines(g, p);
}

TEST(Fp8QuantizeMatch, OneBadQuantizationLeavesTheOthersOfTheTensorFused) {
  QuantForm f;
  f.quants = {spec("rowwise"), spec("columnwise")};
  f.quants[1].clamp = 400;  // declined; its amax reads |x| from outside, which then stays eager
  Graph g;
  Plan p = plan_of(f, g);
  ASSERT_EQ(fp8_regions(p).size(), 1u) << fp8_declines(g, p);
  const Region* r = fp8_regions(p)[0];
  ASSERT_EQ(params(r).quants.size(), 1u);
  EXPECT_EQ(params(r).quants[0].granularity, Granularity::kRowwise);
  EXPECT_NE(declined_at(g, p, "amax_1").find("clamp bounds"), std::string::npos);
  // |x| is read by the declined amax: not claimed, an input of the region
  bool abs_claimed = false;
  for (int n : r->nodes) abs_claimed |= g.nodes[n].id == "abs_1";
  EXPECT_FALSE(abs_claimed);
}

TEST(Fp8QuantizeMatch, DescribeAndCostStateTheReadsOfX) {
  Graph g = load_trace(trace_path("float8_linear_tensorwise_train_fwd_2x4096x4096x4096"));
  Plan p = make_plan(g, fusion_registry());
  const Region* x = region_of(g, p, "view");
  ASSERT_TRUE(x);
  const auto d = fusions::fp8_quantize.describe(g, *x);
  EXPECT_EQ(d["x_reads"], 2);
  EXPECT_EQ(d["quantizations"][0]["granularity"], "tensorwise");
  EXPECT_EQ(d["quantizations"][0]["dtype"], "float8_e4m3fn");
  const Cost c = fusions::fp8_quantize.cost(g, *x);
  // x [8192, 4096] bf16 read twice, float8 written twice (row-major and column-major), 1/scale
  const double x_bytes = 8192.0 * 4096 * 2, q_bytes = 8192.0 * 4096;
  EXPECT_DOUBLE_EQ(c.bytes, 2 * x_bytes + 2 * q_bytes + 4);
  QuantForm f;
  f.quants = {spec("rowwise")};
  Graph gs;
  Plan ps = plan_of(f, gs);
  ASSERT_EQ(fp8_regions(ps).size(), 1u);
  EXPECT_EQ(fusions::fp8_quantize.describe(gs, *fp8_regions(ps)[0])["x_reads"], 1);
}

// The fused step runs early (Region::anchor): after everything the region reads, before every
// node outside that reads what it writes, on the captured graph the executors run.
TEST(Fp8QuantizeMatch, AnchorAfterInputsAndBeforeEveryOutsideReader) {
  for (const char* kind : {"tensorwise", "rowwise"})
    for (const char* phase : {"fwd", "bwd"})
      for (const char* shape : {"2x8x64x32", "2x4096x4096x4096"}) {
        const std::string t =
            std::string("float8_linear_") + kind + "_train_" + phase + "_" + shape;
        Graph g = load_trace(trace_path(t));
        Plan p = make_plan(g, fusion_registry());
        for (const Region* r : fp8_regions(p)) {
          ASSERT_GE(r->anchor, 0);
          for (int v : r->inputs) EXPECT_LT(g.values[v].producer, r->anchor) << t;
          std::set<int> mine(r->nodes.begin(), r->nodes.end());
          for (int n : r->nodes)
            for (int v : g.nodes[n].outputs)
              for (int u : g.values[v].users)
                if (!mine.count(u))
                  EXPECT_GT(u, r->anchor) << t << ": " << g.nodes[u].id << " reads "
                                          << g.values[v].name << " before the fused step";
        }
      }
}

TEST(Fp8QuantizeMatch, AnchorThatIsNotARegionNodeIsRefused) {
  QuantForm f;
  Graph g = parse_trace(quant_trace(f), "synthetic");
  const CanonicalGraph c = canonicalize(g);
  Matches m;
  fp8_quantize::match(c.graph, m);
  ASSERT_EQ(m.regions.size(), 1u);
  Region r = m.regions[0];
  r.anchor = static_cast<int>(c.graph.nodes.size());  // no node of the region
  EXPECT_EQ(map_region(g, c, r), "the anchor the matcher chose is not one of the region's nodes");
}

// The binder on the recorded layouts, without a device: every bundled region binds in both
// variants; an alternative variant and a strided x are refused with the reason.
TEST(Fp8QuantizeBind, EveryBundledRegionBindsAndAStridedXIsRefused) {
  for (const char* kind : {"tensorwise", "rowwise"})
    for (const char* phase : {"fwd", "bwd"}) {
      const std::string t = std::string("float8_linear_") + kind + "_train_" + phase + "_2x8x64x32";
      Graph g = load_trace(trace_path(t));
      Plan p = make_plan(g, fusion_registry());
      for (const Region* r : fp8_regions(p)) {
        for (const VariantSpec& v : fusions::fp8_quantize.variants) {
          FakeBuffers buf(g);
          const Binding b = fusions::fp8_quantize.bind(g, *r, v, buf);
          EXPECT_EQ(b.unsupported, "") << t << " " << v.name;
          EXPECT_TRUE(static_cast<bool>(b.launch)) << t << " " << v.name;
        }
        const VariantSpec other{"cublas", Role::kAlternative, ""};
        FakeBuffers buf(g);
        EXPECT_NE(fusions::fp8_quantize.bind(g, *r, other, buf).unsupported, "");
        struct Strided : FakeBuffers {
          Strided(const Graph& g, int x) : FakeBuffers(g), x_(x) {}
          BoundTensor tensor(int v) override {
            BoundTensor b = FakeBuffers::tensor(v);
            if (v == x_) std::swap(b.layout.stride[0], b.layout.stride[1]);
            return b;
          }
          int x_;
        } strided(g, params(r).x);
        EXPECT_NE(fusions::fp8_quantize.bind(g, *r, fusions::fp8_quantize.variants[1], strided)
                      .unsupported.find("is not contiguous"),
                  std::string::npos);
      }
    }
}

// An amax of x itself (no abs) that starts a scale chain is a quantization too, with abs false.
TEST(Fp8QuantizeMatch, AmaxOfXWithoutAbs) {
  QuantForm f;
  f.quants = {spec("rowwise"), spec("tensorwise")};
  f.quants[0].no_abs = true;
  Graph g;
  Plan p = plan_of(f, g);
  ASSERT_EQ(fp8_regions(p).size(), 1u) << fp8_declines(g, p);
  const auto& q = params(fp8_regions(p)[0]).quants;
  ASSERT_EQ(q.size(), 2u);
  EXPECT_FALSE(q[0].abs);
  EXPECT_TRUE(q[1].abs);
}

// Every byog float8 capture (torchao's tensorwise, rowwise and rowwise_with_gw_hp recipes, both
// partitioners, 2-D and reshape forms, both shapes): each quantized tensor is one region and no
// quantization is declined (the default partitioner's backward recomputes x.float() per
// quantization); the amax-only graphs have no scale chain, each amax declined with that reason.
TEST(Fp8QuantizeMatch, EveryByogFloat8Capture) {
  const std::filesystem::path dir = std::filesystem::path(REPLAY_TRACES_DIR) / "byog" / "float8";
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << "no " << dir;
  int traces = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    Graph g = load_trace(e.path().string());
    Plan p = make_plan(g, fusion_registry());
    const std::string name = e.path().stem().string();
    if (name.rfind("amax_", 0) == 0) {
      EXPECT_TRUE(fp8_regions(p).empty()) << name;
      EXPECT_NE(fp8_declines(g, p).find("is not converted to float64 for a scale"),
                std::string::npos)
          << name;
      continue;
    }
    ++traces;
    EXPECT_GE(fp8_regions(p).size(), 1u) << name;
    EXPECT_EQ(fp8_declines(g, p), "") << name;
    std::set<int> xs;
    for (const Region* r : fp8_regions(p)) EXPECT_TRUE(xs.insert(params(r).x).second) << name;
  }
  EXPECT_GT(traces, 0);
}

// The gradient's column-major copy (permute -> clone) feeds the second GEMM: the clone is this
// region's tail (its buffer is the copy the kernels write), and the GEMM's region, which also
// absorbs the clone of its input, is still taken, reading that buffer (make_plan: a shared tail
// stays with the earlier region).
TEST(Fp8QuantizeMatch, ColumnMajorCopyFeedsTheNextGemmRegion) {
  for (const char* t : {"float8_linear_tensorwise_train_bwd_2x8x64x32",
                        "float8_linear_rowwise_train_bwd_2x8x64x32"}) {
    Graph g = load_trace(trace_path(t));
    Plan p = make_plan(g, fusion_registry());
    ASSERT_EQ(fp8_regions(p).size(), 1u) << t;
    const Region* q = fp8_regions(p)[0];
    ASSERT_EQ(q->tail.size(), 1u);
    EXPECT_EQ(g.nodes[q->tail[0].node].id, "clone_1");
    int gemms = 0;
    for (const Region& r : p.regions)
      for (int n : r.nodes) gemms += g.nodes[n].op == Op::kScaledMm && r.fusion != q->fusion;
    EXPECT_EQ(gemms, 2) << t << ": both _scaled_mm in GEMM regions";
    for (const auto& d : p.dropped) EXPECT_NE(d.fusion, "scaled_mm") << t << ": " << d.reason;
  }
}
