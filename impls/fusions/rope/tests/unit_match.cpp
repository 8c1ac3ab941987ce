// rope matcher: every small bundled rotary forward (traces/byog/rope, both partitioners: Llama
// with cos/sin given and computed from the inverse frequencies, GPT-NeoX's per-head qkv with
// partial rotary, Phi-3's qkv split along the last dim, Cohere's and GPT-J's interleaved pairs)
// gives one region with q and k, every backward one with dq and dk; captured graphs
// edited into the wrong forms (the first half negated, the halves not meeting at R / 2, strided
// slices under a rotate-half cat, contiguous halves under an interleaved cat, a pass-through that
// does not follow the rotary dim, an intermediate read outside; a backward scattering into the
// wrong half, or with a misplaced pass-through) are declined with their reasons; the
// binder takes every region and refuses what its kernels cannot read; the cost counts each
// tensor once.
#include <gtest/gtest.h>

#include <filesystem>

#include "workloads/ops/op_id.hpp"

#include "impls/fusions/registry.hpp"
#include "impls/fusions/rope/params.hpp"
#include "impls/fusions/rope/tests/synthetic.hpp"
#include "tests/unit/fake_buffers.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay::fusions {
extern const FusionSpec rope;
}

using namespace replay;
using namespace replay::test;
using rope::Params;
using rope::Style;

namespace {

std::vector<const Region*> rope_regions(const Plan& p) {
  std::vector<const Region*> out;
  for (const Region& r : p.regions)
    if (r.fusion == &fusions::rope) out.push_back(&r);
  return out;
}

const Params& params(const Region* r) {
  return std::any_cast<const Params&>(r->params);
}

std::string rope_declines(const Graph& g, const Plan& p) {
  std::string s;
  for (const auto& d : p.declined)
    if (d.fusion == "rope") s += g.nodes[d.node].id + ": " + d.reason + "\n";
  return s;
}

std::string rope_trace(const std::string& family, const std::string& part,
                       const std::string& phase) {
  const std::string shape = family == "gptj_rope" ? "2x8x2x256" : "2x8x4x64";
  return "byog/rope/" + family + "_" + part + "_train_" + phase + "_" + shape;
}

struct Expected {
  const char* family;
  Style style;
  int64_t head_dim, rotary_dim;
  DType mul_dtype;  ///< x * cos, rot * sin and the sum
  DType out_dtype;
};

const Expected kForms[] = {
    {"llama_rope_table", Style::kRotateHalf, 64, 64, DType::kBFloat16, DType::kBFloat16},
    {"llama_rope_inv_freq", Style::kRotateHalf, 64, 64, DType::kBFloat16, DType::kBFloat16},
    {"gpt_neox_rope", Style::kRotateHalf, 64, 16, DType::kBFloat16, DType::kBFloat16},
    {"phi3_rope", Style::kRotateHalf, 64, 64, DType::kBFloat16, DType::kBFloat16},
    // float32 math on x.float(), the sum converted back to bfloat16
    {"cohere_rope", Style::kInterleaved, 64, 64, DType::kFloat32, DType::kBFloat16},
    // bfloat16 x times a float32 table, the cat with the pass-through promoted to float32
    {"gptj_rope", Style::kInterleaved, 256, 64, DType::kFloat32, DType::kFloat32},
};

// The node of `doc` with id `id`.
nlohmann::json& node(nlohmann::json& doc, const std::string& id) {
  for (auto& n : doc["nodes"])
    if (n["id"] == id) return n;
  throw std::runtime_error("no node " + id);
}

Plan plan_of(const nlohmann::json& doc, Graph& g) {
  g = parse_trace(doc, doc["name"].get<std::string>());
  return make_plan(g, fusion_registry());
}

}  // namespace

TEST(RopeMatch, EverySmallBundledForwardIsOneRegionOfQAndK) {
  for (const Expected& e : kForms)
    for (const char* part : {"default", "mincut"}) {
      const std::string t = rope_trace(e.family, part, "fwd");
      Graph g = load_trace(trace_path(t));
      const Plan p = make_plan(g, fusion_registry());
      const auto rs = rope_regions(p);
      ASSERT_EQ(rs.size(), 1u) << t << "\n" << rope_declines(g, p);
      const Params& pr = params(rs[0]);
      EXPECT_EQ(pr.style, e.style) << t;
      ASSERT_EQ(pr.rotations.size(), 2u) << t;
      for (const rope::Rotation& r : pr.rotations) {
        EXPECT_EQ(r.head_dim, e.head_dim) << t;
        EXPECT_EQ(r.rotary_dim, e.rotary_dim) << t;
        EXPECT_EQ(r.mul_cos_dtype, e.mul_dtype) << t;
        EXPECT_EQ(r.mul_sin_dtype, e.mul_dtype) << t;
        EXPECT_EQ(r.add_dtype, e.mul_dtype) << t;
        EXPECT_EQ(g.meta(r.out).dtype, e.out_dtype) << t;
        // the region reads bfloat16 head vectors (Cohere's x.float() is absorbed) and writes
        // what the rest of the graph reads
        EXPECT_EQ(g.meta(r.x).dtype, DType::kBFloat16) << t;
        EXPECT_EQ(g.meta(r.x).shape.back(), e.head_dim) << t;
        EXPECT_TRUE(std::find(rs[0]->outputs.begin(), rs[0]->outputs.end(), r.out) !=
                    rs[0]->outputs.end())
            << t;
        EXPECT_TRUE(std::find(rs[0]->inputs.begin(), rs[0]->inputs.end(), r.cos) !=
                    rs[0]->inputs.end())
            << t;
      }
      EXPECT_EQ(rope_declines(g, p), "") << t;
      // q and k are different head vectors
      EXPECT_NE(pr.rotations[0].x, pr.rotations[1].x) << t;
    }
}

// The backwards as aot_autograd writes them (neg + slice_scatter into zeros, select pairs for
// the interleaved forms, the partial tail scattered into zeros): one region of dq and dk each,
// with the converts each form applies.
TEST(RopeMatch, EverySmallBundledBackwardIsOneRegionOfDqAndDk) {
  for (const Expected& e : kForms)
    for (const char* part : {"default", "mincut"}) {
      const std::string t = rope_trace(e.family, part, "bwd");
      Graph g = load_trace(trace_path(t));
      const Plan p = make_plan(g, fusion_registry());
      const auto rs = rope_regions(p);
      ASSERT_EQ(rs.size(), 1u) << t << "\n" << rope_declines(g, p);
      const Params& pr = params(rs[0]);
      EXPECT_TRUE(pr.backward) << t;
      EXPECT_EQ(pr.style, e.style) << t;
      const bool gptj = std::string(e.family) == "gptj_rope";
      const bool cohere = std::string(e.family) == "cohere_rope";
      const bool phi3 = std::string(e.family) == "phi3_rope";
      // GPT-NeoX stacks dq, dk and dv into its qkv gradient: the region writes it (joint.hpp),
      // dv copied in as a third job; Phi-3 scatters dq and dk into a zero qkv gradient and adds
      // them: the region writes that, its dv range zeroed
      const bool neox = std::string(e.family) == "gpt_neox_rope";
      ASSERT_EQ(pr.rotations.size(), neox ? 3u : 2u) << t;
      EXPECT_EQ(pr.joint.value >= 0, neox || phi3) << t;
      EXPECT_EQ(pr.joint.zero_steps.size(), phi3 ? 1u : 0u) << t;
      if (phi3) {
        EXPECT_EQ(g.values[pr.joint.value].name, "add_8") << t;
        ASSERT_EQ(rs[0]->outputs.size(), 1u) << t;
        EXPECT_EQ(rs[0]->outputs[0], pr.joint.value) << t;
      }
      if (neox) {
        EXPECT_EQ(g.values[pr.joint.value].name, "view_5") << t;
        EXPECT_EQ(pr.rotations[2].rotary_dim, 0) << t;
        EXPECT_EQ(g.values[pr.rotations[2].x].name, "tangents_3") << t;
        ASSERT_EQ(rs[0]->outputs.size(), 1u) << t;
        EXPECT_EQ(rs[0]->outputs[0], pr.joint.value) << t;
      }
      for (const rope::Rotation& r : pr.rotations) {
        if (r.cos < 0) continue;  // the copy
        EXPECT_EQ(r.head_dim, e.head_dim) << t;
        EXPECT_EQ(r.rotary_dim, e.rotary_dim) << t;
        EXPECT_EQ(r.mul_cos_dtype, e.mul_dtype) << t;
        EXPECT_EQ(r.mul_sin_dtype, e.mul_dtype) << t;
        // GPT-J: float32 products converted to bfloat16, summed in bfloat16, the float32
        // pass-through gradient converted to bfloat16; Cohere: the float32 sum converted
        EXPECT_EQ(r.add_dtype, gptj ? DType::kBFloat16 : e.mul_dtype) << t;
        EXPECT_EQ(r.mul_cos_cvt, gptj ? DType::kBFloat16 : DType::kFloat32) << t;
        EXPECT_EQ(r.mul_sin_cvt, gptj ? DType::kBFloat16 : DType::kFloat32) << t;
        EXPECT_EQ(r.sum_cvt, cohere ? DType::kBFloat16 : DType::kFloat32) << t;
        EXPECT_EQ(r.tail_cvt, gptj ? DType::kBFloat16 : DType::kFloat32) << t;
        // Phi-3 scatters an empty tail (its qkv split) and adds it: + 0 as with partial rotary
        EXPECT_EQ(r.zero_add, e.rotary_dim < e.head_dim || phi3) << t;
        EXPECT_EQ(g.meta(r.out).shape.back(), e.head_dim) << t;
        int x = r.x;  // the gradient, through views
        while (g.values[x].producer >= 0) x = g.nodes[g.values[x].producer].operands.at(0).value;
        EXPECT_EQ(g.values[x].role, "tangent") << t;
      }
      EXPECT_EQ(rope_declines(g, p), "") << t;
      // the zero tensors are the region's own
      for (int v : rs[0]->inputs)
        EXPECT_TRUE(g.values[v].producer < 0 || g.nodes[g.values[v].producer].op != Op::kFull)
            << t << ": " << g.values[v].name;
    }
}

// The backward with -y[0:h] scattered back at [0, h) and y[h:R] at [h, R): not the transposed
// rotation (its sign and halves are wrong).
TEST(RopeMatch, BackwardScatterAtTheWrongHalfIsDeclined) {
  auto doc = read_json(trace_path(rope_trace("llama_rope_table", "mincut", "bwd")));
  auto& a = node(doc, "slice_scatter");  // -y[0:h] at [h, end) -> [0, h)
  a["args"][3] = 0;
  a["args"][4] = 32;
  auto& b = node(doc, "slice_scatter_1");  // y[h:R] at [0, h) -> [h, R)
  b["args"][3] = 32;
  b["args"][4] = 64;
  Graph g;
  const Plan p = plan_of(doc, g);
  EXPECT_NE(declined_at(g, p, "neg_2").find("-y[0:h] is not scattered into zeros at [h, R)"),
            std::string::npos)
      << rope_declines(g, p);
  ASSERT_EQ(rope_regions(p).size(), 1u);  // dq is still taken
  EXPECT_EQ(params(rope_regions(p)[0]).rotations.size(), 1u);
}

// The backward's pass-through gradient taken two elements before the rotary dim ends.
TEST(RopeMatch, BackwardPassThroughThatDoesNotFollowTheRotaryDimIsDeclined) {
  auto doc = read_json(trace_path(rope_trace("gptj_rope", "mincut", "bwd")));
  auto& s = node(doc, "slice_10");  // permute_3[..., 64:256] -> [62:254]
  s["args"][2] = 62;
  s["args"][3] = 254;
  s["outputs"][0]["storage_offset"] = 62;
  Graph g;
  const Plan p = plan_of(doc, g);
  EXPECT_NE(declined_at(g, p, "neg_2").find("does not add the gradient's pass-through [64, 256)"),
            std::string::npos)
      << rope_declines(g, p);
}

// neg reads the first half and the cat is cat(-x1, x2): the inverse rotation (sin's sign
// flipped), not the forward.
TEST(RopeMatch, FirstHalfNegatedIsDeclined) {
  auto doc = read_json(trace_path(rope_trace("llama_rope_table", "mincut", "fwd")));
  node(doc, "neg")["args"][0]["ref"] = "slice_1";
  node(doc, "cat")["args"][0] = nlohmann::json::array({ref("neg"), ref("slice_2")});
  Graph g;
  const Plan p = plan_of(doc, g);
  ASSERT_EQ(rope_regions(p).size(), 1u);  // k is still taken
  EXPECT_EQ(params(rope_regions(p)[0]).rotations.size(), 1u);
  EXPECT_NE(declined_at(g, p, "neg").find("the first half is negated"), std::string::npos)
      << rope_declines(g, p);
}

// The negated half x[30:62] does not start at R / 2: the halves do not split the rotary dim.
TEST(RopeMatch, HalvesThatDoNotMeetAtHalfTheRotaryDimAreDeclined) {
  auto doc = read_json(trace_path(rope_trace("llama_rope_table", "mincut", "fwd")));
  auto& s = node(doc, "slice_2");
  s["args"][2] = 30;
  s["args"][3] = 62;
  s["outputs"][0]["storage_offset"] = 30;
  Graph g;
  const Plan p = plan_of(doc, g);
  EXPECT_NE(
      declined_at(g, p, "neg")
          .find("rotate-half halves [0, 32) and [30, 62) do not split the rotary dim 64 at 32"),
      std::string::npos)
      << rope_declines(g, p);
}

// A rotate-half cat over the even and odd elements (the two styles mixed up) is neither form.
TEST(RopeMatch, RotateHalfCatOfInterleavedSlicesIsDeclined) {
  auto doc = read_json(trace_path(rope_trace("llama_rope_table", "mincut", "fwd")));
  for (const auto& [id, start] : {std::pair{"slice_1", 0}, std::pair{"slice_2", 1}}) {
    auto& s = node(doc, id);
    s["args"] = nlohmann::json::array({ref("permute"), 3, start, 9223372036854775807LL, 2});
    s["outputs"][0]["stride"] = nlohmann::json::array({2048, 64, 256, 2});
    s["outputs"][0]["storage_offset"] = start;
  }
  Graph g;
  const Plan p = plan_of(doc, g);
  EXPECT_NE(declined_at(g, p, "neg").find("rotate-half slices with a step (2, 2)"),
            std::string::npos)
      << rope_declines(g, p);
}

// An interleaving cat over the two contiguous halves (the styles mixed up the other way).
TEST(RopeMatch, InterleavedCatOfContiguousHalvesIsDeclined) {
  auto doc = read_json(trace_path(rope_trace("cohere_rope", "mincut", "fwd")));
  for (const auto& [id, start] : {std::pair{"slice_1", 0}, std::pair{"slice_2", 32}}) {
    auto& s = node(doc, id);
    s["args"] = nlohmann::json::array({ref("convert_element_type_3"), 3, start, start + 32});
    s["outputs"][0]["stride"] = nlohmann::json::array({2048, 64, 256, 1});
    s["outputs"][0]["storage_offset"] = start;
  }
  Graph g;
  const Plan p = plan_of(doc, g);
  EXPECT_NE(declined_at(g, p, "neg").find("are not the even and odd elements of the rotary dim 64"),
            std::string::npos)
      << rope_declines(g, p);
}

// Partial rotary whose pass-through starts two elements after the rotary dim.
TEST(RopeMatch, PassThroughThatDoesNotFollowTheRotaryDimIsDeclined) {
  auto doc = read_json(trace_path(rope_trace("gptj_rope", "mincut", "fwd")));
  auto& s = node(doc, "slice_2");  // k[..., 64:] -> k[..., 62:254]
  s["args"][2] = 62;
  s["args"][3] = 254;
  s["outputs"][0]["storage_offset"] = 62;
  Graph g;
  const Plan p = plan_of(doc, g);
  EXPECT_NE(
      declined_at(g, p, "neg")
          .find("the pass-through [62, 254) does not follow the rotary dim 64 of head dim 256"),
      std::string::npos)
      << rope_declines(g, p);
  // q's rotation is still taken
  ASSERT_EQ(rope_regions(p).size(), 1u);
  EXPECT_EQ(params(rope_regions(p)[0]).rotations.size(), 1u);
}

// The rotation returned as an output (an intermediate the fused step does not write).
TEST(RopeMatch, IntermediateReadOutsideIsDeclined) {
  auto doc = read_json(trace_path(rope_trace("phi3_rope", "mincut", "fwd")));
  doc["outputs"].push_back("cat");
  Graph g;
  const Plan p = plan_of(doc, g);
  EXPECT_NE(declined_at(g, p, "neg").find("is not read by one multiply"), std::string::npos)
      << rope_declines(g, p);
}

// The sin product read by something else: the sum's operand is not private.
TEST(RopeMatch, ProductReadOutsideIsDeclined) {
  auto doc = read_json(trace_path(rope_trace("llama_rope_table", "mincut", "fwd")));
  doc["outputs"].push_back("mul_1");
  Graph g;
  const Plan p = plan_of(doc, g);
  EXPECT_NE(declined_at(g, p, "neg").find("rot * sin is not read by one add"), std::string::npos)
      << rope_declines(g, p);
}

// The binder on the recorded layouts, without a device: every small bundled region (forward and
// backward) binds in both
// variants; an alternative variant and a table that does not broadcast are refused.
TEST(RopeBind, EveryBundledRegionBindsAndABadTableIsRefused) {
  for (const Expected& e : kForms)
    for (const char* part : {"default", "mincut"})
      for (const char* phase : {"fwd", "bwd"}) {
        const std::string t = rope_trace(e.family, part, phase);
        Graph g = load_trace(trace_path(t));
        const Plan p = make_plan(g, fusion_registry());
        ASSERT_EQ(rope_regions(p).size(), 1u) << t;
        for (const Region* r : rope_regions(p)) {
          for (const VariantSpec& v : fusions::rope.variants) {
            FakeBuffers buf(g);
            const Binding b = fusions::rope.bind(g, *r, v, buf);
            EXPECT_EQ(b.unsupported, "") << t << " " << v.name;
            EXPECT_TRUE(static_cast<bool>(b.launch)) << t << " " << v.name;
          }
          const VariantSpec other{"triton", Role::kAlternative, ""};
          FakeBuffers buf(g);
          EXPECT_NE(fusions::rope.bind(g, *r, other, buf).unsupported, "");
          struct WrongTable : FakeBuffers {
            WrongTable(const Graph& g, int v) : FakeBuffers(g), v_(v) {}
            BoundTensor tensor(int v) override {
              BoundTensor b = FakeBuffers::tensor(v);
              if (v == v_) b.layout.shape.back() -= 2;  // a table of R - 2
              return b;
            }
            int v_;
          } wrong(g, params(r).rotations[0].sin);
          EXPECT_NE(fusions::rope.bind(g, *r, fusions::rope.variants[1], wrong)
                        .unsupported.find("does not broadcast"),
                    std::string::npos)
              << t;
        }
      }
}

// Bytes: q and k read and written once each, each table once (read by both).
TEST(RopeMatch, CostCountsEachTensorOnce) {
  Graph g = load_trace(trace_path(rope_trace("llama_rope_table", "mincut", "fwd")));
  const Plan p = make_plan(g, fusion_registry());
  ASSERT_EQ(rope_regions(p).size(), 1u);
  const Cost c = fusions::rope.cost(g, *rope_regions(p)[0]);
  // q [2, 8, 4, 64] and k [2, 8, 2, 64] bf16 read and written, cos and sin [2, 1, 8, 64] bf16
  EXPECT_EQ(c.bytes, 2.0 * (8192 + 4096) + 2 * 2048);
  EXPECT_EQ(c.flops, 3.0 * (2 * 8 * 4 + 2 * 8 * 2) * 64);
  const nlohmann::json d = fusions::rope.describe(g, *rope_regions(p)[0]);
  EXPECT_EQ(d["style"], "rotate_half");
  EXPECT_EQ(d["rotations"][0]["x"], "permute");
  EXPECT_EQ(d["rotations"][1]["x"], "permute_1");
}

// Synthetic forwards (tests/synthetic.hpp): head dims 72, 80, 96 and rotary dims 20, 32 (rotate-
// half halves that are not multiples of 8), both styles, float16 and float32 tables: one region,
// the dims read back; the kernels' vector width follows the dims.
TEST(RopeMatch, SyntheticShapesStylesAndDtypes) {
  struct Case {
    int64_t D, R;
    bool interleaved;
    const char* dtype;
    const char* table;
    int vector_width;
  };
  const Case cases[] = {
      {72, 72, false, "bfloat16", "bfloat16", 4}, {80, 80, false, "bfloat16", "float32", 8},
      {96, 32, false, "bfloat16", "bfloat16", 8}, {96, 20, false, "float16", "float16", 2},
      {72, 20, true, "bfloat16", "bfloat16", 4},  {80, 32, true, "float32", "float32", 8},
      {128, 128, true, "bfloat16", "float32", 8}, {66, 66, false, "bfloat16", "bfloat16", 1},
  };
  for (const Case& c : cases) {
    RopeForm f;
    f.D = c.D;
    f.R = c.R;
    f.interleaved = c.interleaved;
    f.dtype = c.dtype;
    f.table_dtype = c.table;
    const std::string label = "D" + std::to_string(c.D) + " R" + std::to_string(c.R) +
                              (c.interleaved ? " interleaved " : " rotate_half ") + c.dtype +
                              " table " + c.table;
    Graph g = parse_trace(rope_trace_json(f), "synthetic");
    const Plan p = make_plan(g, fusion_registry());
    const auto rs = rope_regions(p);
    ASSERT_EQ(rs.size(), 1u) << label << "\n" << rope_declines(g, p);
    const Params& pr = params(rs[0]);
    EXPECT_EQ(pr.style, c.interleaved ? Style::kInterleaved : Style::kRotateHalf) << label;
    ASSERT_EQ(pr.rotations.size(), 1u);
    EXPECT_EQ(pr.rotations[0].head_dim, c.D) << label;
    EXPECT_EQ(pr.rotations[0].rotary_dim, c.R) << label;
    EXPECT_EQ(g.values[pr.rotations[0].x].name, "permute") << label;
    rope::RopeArgs a;
    a.style = pr.style;
    a.n_jobs = 1;
    a.jobs[0].head_dim = c.D;
    a.jobs[0].rotary_dim = c.R;
    EXPECT_EQ(rope::rope_vector_width(a), c.vector_width) << label;
    FakeBuffers buf(g);
    EXPECT_EQ(fusions::rope.bind(g, *rs[0], fusions::rope.variants[1], buf).unsupported, "")
        << label;
  }
}

// The hand-captured rotary traces (traces/: litgpt's qkv split + RoPE with partial rotary at the
// small shape, Meta Llama's apply_rotary_emb on real pairs) and the decoder layers that hold a
// rotary embedding: one region of q and k (dq and dk) each, in both phases. litgpt's backward
// sums g * cos with the negated scatter first (sum_order 1); Meta's forms read a table per pair.
TEST(RopeMatch, LitgptMetaLlamaAndDecoderLayers) {
  struct Case {
    const char* trace;
    Style style;
    int64_t head_dim, rotary_dim;
    bool pair_table;
    int sum_order;
  };
  const Case cases[] = {
      {"litgpt_rope_train_fwd_1x8x4x2x16", Style::kRotateHalf, 16, 4, false, 0},
      {"litgpt_rope_train_bwd_1x8x4x2x16", Style::kRotateHalf, 16, 4, false, 1},
      {"litgpt_rope_train_fwd_2x4096x40x40x128", Style::kRotateHalf, 128, 128, false, 0},
      {"litgpt_rope_train_bwd_2x4096x40x40x128", Style::kRotateHalf, 128, 128, false, 1},
      {"meta_llama_rope_train_fwd_1x8x4x2x16", Style::kInterleaved, 16, 16, true, 0},
      {"meta_llama_rope_train_bwd_1x8x4x2x16", Style::kInterleaved, 16, 16, true, 0},
      {"meta_llama_rope_train_fwd_2x4096x32x8x128", Style::kInterleaved, 128, 128, true, 0},
      {"meta_llama_rope_train_bwd_2x4096x32x8x128", Style::kInterleaved, 128, 128, true, 0},
      {"byog/decoder/llama_decoder_layer_mincut_train_fwd_2x64x256", Style::kRotateHalf, 64, 64,
       false, 0},
      {"byog/decoder/llama_decoder_layer_mincut_train_bwd_2x64x256", Style::kRotateHalf, 64, 64,
       false, 0},
      {"byog/decoder/qwen3_decoder_layer_default_train_fwd_2x64x256", Style::kRotateHalf, 64, 64,
       false, 0},
      {"byog/decoder/qwen3_decoder_layer_default_train_bwd_2x64x256", Style::kRotateHalf, 64, 64,
       false, 0},
  };
  for (const Case& c : cases) {
    Graph g = load_trace(trace_path(c.trace), cut_options());  // the decoders' attention is cut
    const Plan p = make_plan(g, fusion_registry());
    const auto rs = rope_regions(p);
    ASSERT_EQ(rs.size(), 1u) << c.trace << "\n" << rope_declines(g, p);
    const Params& pr = params(rs[0]);
    EXPECT_EQ(pr.backward, std::string(c.trace).find("_bwd_") != std::string::npos) << c.trace;
    EXPECT_EQ(pr.style, c.style) << c.trace;
    // litgpt's backward stacks dq, dk, dv (each permuted, cloned, viewed) by a cat: the region
    // writes it, dv copied in
    const bool litgpt_bwd = std::string(c.trace).rfind("litgpt_rope_train_bwd", 0) == 0;
    ASSERT_EQ(pr.rotations.size(), litgpt_bwd ? 3u : 2u) << c.trace;
    EXPECT_EQ(pr.joint.value >= 0, litgpt_bwd) << c.trace;
    for (const rope::Rotation& r : pr.rotations) {
      if (r.cos < 0) continue;  // the copy
      EXPECT_EQ(r.head_dim, c.head_dim) << c.trace;
      EXPECT_EQ(r.rotary_dim, c.rotary_dim) << c.trace;
      EXPECT_EQ(r.pair_table, c.pair_table) << c.trace;
      EXPECT_EQ(r.sum_order, c.sum_order) << c.trace;
    }
    EXPECT_EQ(rope_declines(g, p), "") << c.trace;
    for (const VariantSpec& v : fusions::rope.variants) {
      FakeBuffers buf(g);
      EXPECT_EQ(fusions::rope.bind(g, *rs[0], v, buf).unsupported, "") << c.trace << " " << v.name;
    }
  }
}

// Meta's pairs with the odd products swapped into the sub (x_e * c - x_o * c): not the rotation.
TEST(RopeMatch, MetaPairsWithTheWrongTableIsDeclined) {
  auto doc = read_json(trace_path("meta_llama_rope_train_fwd_1x8x4x2x16"));
  node(doc, "mul_1")["args"][1] = ref("view_1");  // x_o * cos where x_o * sin was
  Graph g;
  const Plan p = plan_of(doc, g);
  EXPECT_NE(declined_at(g, p, "sub").find("no x_even * sin + x_odd * cos beside the sub"),
            std::string::npos)
      << rope_declines(g, p);
}

// Unrelated negs and subs (a LayerNorm's centered x, SiLU's backward) are not candidates: no
// declines.
TEST(RopeMatch, UnrelatedNegsAndSubsAreNotCandidates) {
  for (const char* t :
       {"nanogpt_layernorm_fwd_2x8x1600", "llama_swiglu_mlp_train_bwd_2x8x64x176"}) {
    Graph g = load_trace(trace_path(t));
    const Plan p = make_plan(g, fusion_registry());
    EXPECT_EQ(rope_declines(g, p), "") << t;
    EXPECT_TRUE(rope_regions(p).empty()) << t;
  }
}

// The output side's alias algebra (joint.hpp) against hand-computed layouts: GPT-NeoX's qkv
// gradient view_5 [2, 8, 768] (contiguous) is view(clone(permute(cat([dq, dk, dv], -1), [0, 2, 1,
// 3])), [2, 8, 768]); undone, dq is [2, 4, 8, 64] at strides [6144, 192, 768, 1] offset 0, dk the
// same at offset 64, dv at 128; a view that needs a copy is refused.
TEST(RopeJoint, LayoutStepsAgainstHandComputedLayouts) {
  using rope::LayoutStep;
  using rope::StridedLayout;
  const StridedLayout joint{{2, 8, 768}, {6144, 768, 1}, 0};
  LayoutStep view{LayoutStep::Kind::kView, {2, 8, 4, 192}, {}, 0, 0, 0};
  LayoutStep perm{LayoutStep::Kind::kPermute, {}, {0, 2, 1, 3}, 0, 0, 0};
  for (int64_t part = 0; part < 3; ++part) {
    LayoutStep cat{LayoutStep::Kind::kPart, {}, {}, 3, 64 * part, 64};
    const auto l = rope::apply_steps(joint, {view, perm, cat});
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(l->shape, (std::vector<int64_t>{2, 4, 8, 64}));
    EXPECT_EQ(l->stride, (std::vector<int64_t>{6144, 192, 768, 1}));
    EXPECT_EQ(l->offset, 64 * part);
  }
  // litgpt: cat([view(clone(permute(dq))) [1, 8, 64], ...], 2) of [1, 8, 128]: dk's part
  const StridedLayout lit{{1, 8, 128}, {1024, 128, 1}, 0};
  const auto dk =
      rope::apply_steps(lit, {LayoutStep{LayoutStep::Kind::kPart, {}, {}, 2, 64, 32},
                              LayoutStep{LayoutStep::Kind::kView, {1, 8, 2, 16}, {}, 0, 0, 0},
                              LayoutStep{LayoutStep::Kind::kPermute, {}, {0, 2, 1, 3}, 0, 0, 0}});
  ASSERT_TRUE(dk.has_value());
  EXPECT_EQ(dk->shape, (std::vector<int64_t>{1, 2, 8, 16}));
  EXPECT_EQ(dk->stride, (std::vector<int64_t>{1024, 16, 128, 1}));
  EXPECT_EQ(dk->offset, 64);
  // a transposed [4, 6] cannot be viewed as [24] without a copy; a part past the end is refused
  EXPECT_FALSE(rope::apply_steps(StridedLayout{{4, 6}, {1, 4}, 0},
                                 {LayoutStep{LayoutStep::Kind::kView, {24}, {}, 0, 0, 0}}));
  EXPECT_FALSE(
      rope::apply_steps(joint, {LayoutStep{LayoutStep::Kind::kPart, {}, {}, 2, 700, 100}}));
  // the matcher's steps for the bundled GPT-NeoX backward give the same layouts
  Graph g = load_trace(trace_path(rope_trace("gpt_neox_rope", "mincut", "bwd")));
  const Plan p = make_plan(g, fusion_registry());
  ASSERT_EQ(rope_regions(p).size(), 1u);
  const Params& pr = params(rope_regions(p)[0]);
  ASSERT_EQ(pr.joint.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto l = rope::apply_steps(joint, pr.joint.steps[i]);
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(l->stride, (std::vector<int64_t>{6144, 192, 768, 1})) << i;
    // dq is add_7 (tangents_1), dk add_6: the cat's order is [dq, dk, dv]
    const std::string x = g.values[pr.rotations[i].x].name;
    EXPECT_EQ(l->offset, x == "tangents_1" ? 0 : x == "tangents_2" ? 64 : 128) << x;
  }
}

// Phi-3's backward stacks dq and dk by scattering each into one zero [B, T, (H + 2G) D] and adding
// (slice_scatter_7: dq at [0, 256), slice_scatter_6: dk at [256, 384) of 512): the region writes
// add_8 itself, each job a part of it and [384, 512) (dv's, which this graph leaves zero) zeroed.
TEST(RopeJoint, SumOfScattersIntoZerosIsAJointGradient) {
  Graph g = load_trace(trace_path(rope_trace("phi3_rope", "mincut", "bwd")));
  const Plan p = make_plan(g, fusion_registry());
  ASSERT_EQ(rope_regions(p).size(), 1u);
  const Region& r = *rope_regions(p)[0];
  const Params& pr = params(&r);
  ASSERT_EQ(g.values[pr.joint.value].name, "add_8");
  const rope::StridedLayout joint{{2, 8, 512}, {4096, 512, 1}, 0};
  ASSERT_EQ(pr.joint.steps.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto l = rope::apply_steps(joint, pr.joint.steps[i]);
    ASSERT_TRUE(l.has_value());
    const std::string x = g.values[pr.rotations[i].x].name;  // dq from tangents_1, dk tangents_2
    EXPECT_EQ(l->offset, x == "tangents_1" ? 0 : 256) << x;
    EXPECT_EQ(l->shape, (std::vector<int64_t>{2, x == "tangents_1" ? 4 : 2, 8, 64})) << x;
    EXPECT_EQ(l->stride, (std::vector<int64_t>{4096, 64, 512, 1})) << x;
    EXPECT_TRUE(pr.rotations[i].zero_add) << x;  // x + 0 turns -0 into +0, as the adds do
  }
  ASSERT_EQ(pr.joint.zero_steps.size(), 1u);
  const auto z = rope::apply_steps(joint, pr.joint.zero_steps[0]);
  ASSERT_TRUE(z.has_value());
  EXPECT_EQ(z->offset, 384);
  EXPECT_EQ(z->shape, (std::vector<int64_t>{2, 8, 128}));
  const auto rows = rope::rows_2d(*z, 2);
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(rows->offset, 768);
  EXPECT_EQ(rows->width, 256);
  EXPECT_EQ(rows->pitch, 1024);
  EXPECT_EQ(rows->height, 16);
  // every node from the tangents to add_8 is the region's, the zero tensors included
  for (const char* id : {"full_6", "slice_scatter_6", "slice_scatter_7", "add_8", "clone_3"}) {
    const int n = g.values[g.find_value(id)].producer;
    EXPECT_EQ(std::count(r.nodes.begin(), r.nodes.end(), n), 1) << id;
  }
}

// Scatters whose ranges overlap are a real sum, not a stacking: dk scattered at [128, 256)
// overlaps dq's [0, 256): each rotation writes its own output and the adds stay eager.
TEST(RopeJoint, OverlappingScattersAreNotAStacking) {
  auto doc = read_json(trace_path(rope_trace("phi3_rope", "mincut", "bwd")));
  auto& ss = node(doc, "slice_scatter_6");
  ss["args"][3] = 128;
  ss["args"][4] = 256;
  Graph g;
  const Plan p = plan_of(doc, g);
  ASSERT_EQ(rope_regions(p).size(), 1u);
  EXPECT_EQ(params(rope_regions(p)[0]).joint.value, -1);
  EXPECT_TRUE(params(rope_regions(p)[0]).joint.zero_steps.empty());
}

// A negative zero to scatter into is not a stacking either: -0 + -0 stays -0, so the adds do not
// turn a job's -0 into +0 and the gaps are not +0 bits.
TEST(RopeJoint, NegativeZeroBaseIsNotAStacking) {
  auto doc = read_json(trace_path(rope_trace("phi3_rope", "mincut", "bwd")));
  node(doc, "full_6")["args"][1] = -0.0;
  Graph g;
  const Plan p = plan_of(doc, g);
  ASSERT_EQ(rope_regions(p).size(), 1u);
  EXPECT_EQ(params(rope_regions(p)[0]).joint.value, -1);
}

TEST(RopeJoint, RowsOfUniformPitch) {
  using rope::StridedLayout;
  // dense: one row
  auto r = rope::rows_2d(StridedLayout{{2, 3, 4}, {12, 4, 1}, 5}, 4);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->offset, 20);
  EXPECT_EQ(r->width, 96);
  EXPECT_EQ(r->height, 1);
  // a column block of a [6, 10] matrix seen through a [2, 3, 4] view: 6 rows of 4, pitch 10
  r = rope::rows_2d(StridedLayout{{2, 3, 4}, {30, 10, 1}, 6}, 2);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->width, 8);
  EXPECT_EQ(r->pitch, 20);
  EXPECT_EQ(r->height, 6);
  // size-1 dims ignored
  r = rope::rows_2d(StridedLayout{{1, 6, 1, 4}, {999, 10, 7, 1}, 0}, 2);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->height, 6);
  EXPECT_EQ(r->pitch, 20);
  // a last stride other than 1, or outer dims that do not collapse into one pitch
  EXPECT_FALSE(rope::rows_2d(StridedLayout{{4, 3}, {1, 4}, 0}, 2).has_value());
  EXPECT_FALSE(rope::rows_2d(StridedLayout{{2, 3, 4}, {100, 10, 1}, 0}, 2).has_value());
}
