// bookend on the CPU: the alias arithmetic of every meta op against hand-computed layouts, the
// boundary chains of the bundled rope and layernorm traces against the strides PyTorch recorded
// and the op table's own alias rows, the vector width chooser (the broadcast + expand input that
// defeated nvFuser keeps 16 bytes; a non-unit innermost stride, a misaligned base or an odd outer
// stride fall back to the right narrower width), the segment copy's plan, the launch width log,
// the registry rows, and both variants over a probe binder on the CPU (host_alias resolving each
// view per replay, its wrong-offset mutant caught; segmented handing over contiguous tensors).
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>

#include "harness/report/results.hpp"
#include "impls/fusions/bookend/alias.hpp"
#include "impls/fusions/bookend/segment.hpp"
#include "impls/fusions/bookend/variants.hpp"
#include "impls/fusions/bookend/vector_width.hpp"
#include "impls/fusions/launch_record.hpp"
#include "impls/fusions/registry.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/op.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::bookend;
using namespace replay::test;

namespace {

AliasLayout contiguous(std::vector<int64_t> shape) {
  return {shape, contiguous_strides(shape), 0};
}

MetaOp op(MetaOp::Kind k) {
  MetaOp m;
  m.kind = k;
  return m;
}

AliasLayout apply_ok(const AliasLayout& in, const MetaOp& m) {
  auto out = apply_meta_op(in, m);
  EXPECT_TRUE(out.has_value()) << m.str() << " of " << in.str();
  return out.value_or(AliasLayout{});
}

}  // namespace

TEST(BookendAlias, ViewMergesAndSplitsDimsAndRefusesANonViewableLayout) {
  MetaOp v = op(MetaOp::Kind::kView);
  v.shape = {6, 4};
  EXPECT_EQ(apply_ok(contiguous({2, 3, 4}), v), (AliasLayout{{6, 4}, {4, 1}, 0}));
  // [B, T, 3 H D] -> [B, T, H, 3 D] (GPT-NeoX's per-head qkv), offset kept
  v.shape = {2, 8, 4, 192};
  EXPECT_EQ(apply_ok(AliasLayout{{2, 8, 768}, {6144, 768, 1}, 5}, v),
            (AliasLayout{{2, 8, 4, 192}, {6144, 768, 192, 1}, 5}));
  // a transposed [3, 4] cannot be viewed as [12]: reshape would copy
  v.shape = {12};
  EXPECT_FALSE(apply_meta_op(AliasLayout{{3, 4}, {1, 3}, 0}, v).has_value());
  v.shape = {5, 2};  // wrong element count
  EXPECT_FALSE(apply_meta_op(contiguous({3, 4}), v).has_value());
}

TEST(BookendAlias, PermuteSliceSelectSplit) {
  MetaOp p = op(MetaOp::Kind::kPermute);
  p.dims = {2, 0, 1};
  EXPECT_EQ(apply_ok(contiguous({2, 3, 4}), p), (AliasLayout{{4, 2, 3}, {1, 12, 4}, 0}));
  p.dims = {0, 0, 1};
  EXPECT_FALSE(apply_meta_op(contiguous({2, 3, 4}), p).has_value());
  // slice(dim 2, start 1, step 2): elements 1 and 3 of the last dim
  MetaOp s = op(MetaOp::Kind::kSlice);
  s.dim = 2;
  s.start = 1;
  s.size = 2;
  s.step = 2;
  EXPECT_EQ(apply_ok(contiguous({2, 3, 4}), s), (AliasLayout{{2, 3, 2}, {12, 4, 2}, 1}));
  s.start = 2;  // 2, 4: past the end
  EXPECT_FALSE(apply_meta_op(contiguous({2, 3, 4}), s).has_value());
  // split(64, dim 2) of qkv [2, 8, 192], chunk 1 (k): offset 64
  MetaOp k = op(MetaOp::Kind::kSlice);
  k.dim = 2;
  k.start = 64;
  k.size = 64;
  EXPECT_EQ(apply_ok(contiguous({2, 8, 192}), k), (AliasLayout{{2, 8, 64}, {1536, 192, 1}, 64}));
  MetaOp sel = op(MetaOp::Kind::kSelect);
  sel.dim = 1;
  sel.start = 2;
  EXPECT_EQ(apply_ok(contiguous({2, 3, 4}), sel), (AliasLayout{{2, 4}, {12, 1}, 8}));
  sel.start = 3;
  EXPECT_FALSE(apply_meta_op(contiguous({2, 3, 4}), sel).has_value());
}

TEST(BookendAlias, ExpandUnsqueezeSqueeze) {
  // nanoGPT's LayerNorm weight [1600] broadcast to [16, 1024, 1600]: stride 0 outer, 1 inner
  MetaOp e = op(MetaOp::Kind::kExpand);
  e.shape = {16, 1024, 1600};
  EXPECT_EQ(apply_ok(contiguous({1600}), e), (AliasLayout{{16, 1024, 1600}, {0, 0, 1}, 0}));
  e.shape = {2, 3, 4};
  EXPECT_EQ(apply_ok(AliasLayout{{3, 1}, {1, 1}, 7}, e), (AliasLayout{{2, 3, 4}, {0, 1, 0}, 7}));
  e.shape = {2, 5, 4};  // 3 does not broadcast to 5
  EXPECT_FALSE(apply_meta_op(AliasLayout{{3, 1}, {1, 1}, 0}, e).has_value());
  MetaOp u = op(MetaOp::Kind::kUnsqueeze);
  u.dim = 1;  // ATen: the new dim's stride is size * stride of the dim it precedes
  EXPECT_EQ(apply_ok(contiguous({2, 3}), u), (AliasLayout{{2, 1, 3}, {3, 3, 1}, 0}));
  u.dim = 2;
  EXPECT_EQ(apply_ok(contiguous({2, 3}), u), (AliasLayout{{2, 3, 1}, {3, 1, 1}, 0}));
  MetaOp q = op(MetaOp::Kind::kSqueeze);
  q.dims = {1};
  EXPECT_EQ(apply_ok(AliasLayout{{2, 1, 3}, {3, 3, 1}, 4}, q), (AliasLayout{{2, 3}, {3, 1}, 4}));
  q.dims = {0};  // size 2: not squeezable
  EXPECT_FALSE(apply_meta_op(AliasLayout{{2, 1, 3}, {3, 3, 1}, 0}, q).has_value());
}

TEST(BookendAlias, GptNeoxChainGivesQAndKAsStridedViewsOfQkv) {
  // qkv [B, T, H * 3 D] -> view [B, T, H, 3 D] -> slice [.., s, s + D) -> permute(0, 2, 1, 3)
  const int64_t B = 2, T = 8, H = 4, D = 64;
  MetaOp v = op(MetaOp::Kind::kView);
  v.shape = {B, T, H, 3 * D};
  MetaOp s = op(MetaOp::Kind::kSlice);
  s.dim = 3;
  s.size = D;
  MetaOp p = op(MetaOp::Kind::kPermute);
  p.dims = {0, 2, 1, 3};
  for (int64_t part : {0, 1, 2}) {
    s.start = part * D;
    const auto l = resolve(contiguous({B, T, H * 3 * D}), {v, s, p});
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(*l, (AliasLayout{{B, H, T, D}, {T * H * 3 * D, 3 * D, H * 3 * D, 1}, part * D}));
  }
}

// Every boundary chain of the bundled rope and layernorm traces: resolved from its root's
// recorded layout, the shape and strides PyTorch recorded for the region input, and the storage
// offset the op table's alias rows (the eager executor's arithmetic) give.
TEST(BookendAlias, BundledChainsMatchPyTorchStridesAndTheOpTable) {
  int chains = 0;
  for (const std::string& name : bundled_trace_names()) {
    if (name.find("rope") == std::string::npos && name.find("layernorm") == std::string::npos)
      continue;
    Graph g = load_trace(trace_path(name));
    const Plan plan = make_plan(g, fusion_registry());
    for (const Region& r : plan.regions) {
      if (r.fusion->name != "rope" && r.fusion->name != "layernorm_fwd") continue;
      for (int in : r.inputs) {
        const BoundaryChain ch = input_chain(g, in);
        if (ch.ops.empty()) continue;
        ++chains;
        const TensorMeta& root = g.meta(ch.root);
        const auto l = resolve(AliasLayout{root.shape, root.stride, 0}, ch.ops);
        ASSERT_TRUE(l.has_value()) << name << " " << g.values[in].name;
        EXPECT_EQ(l->shape, g.meta(in).shape) << name << " " << g.values[in].name;
        EXPECT_EQ(l->stride, g.meta(in).stride) << name << " " << g.values[in].name;
        // the op table's rows, one node after another
        TensorMeta cur = root;
        int64_t off = 0;
        for (size_t i = 0; i < ch.nodes.size(); ++i) {
          const Node& n = g.nodes[ch.nodes[i]];
          const int out = i + 1 < ch.nodes.size() ? ch.inputs[i + 1] : in;
          const TensorMeta& om = g.meta(out);
          const auto lay = op_def(n.op).alias(n, cur, om.shape, g.values[out].output_index);
          ASSERT_TRUE(lay.has_value());
          off = lay->absolute ? lay->offset : off + lay->offset;
          cur = TensorMeta{om.shape, lay->stride, om.dtype};
        }
        EXPECT_EQ(l->offset, off) << name << " " << g.values[in].name;
        EXPECT_EQ(l->stride, cur.stride) << name << " " << g.values[in].name;
      }
    }
  }
  EXPECT_GT(chains, 10) << "the rope traces read q and k through views of qkv";
}

TEST(BookendWidth, BroadcastExpandInputKeeps16Bytes) {
  // bf16 weight [1600] expanded to [16, 1024, 1600]: outer strides 0, inner 1 (nvFuser's case)
  const int64_t outer[] = {0, 0};
  EXPECT_EQ(vector_bytes(0x1000, 2, outer, 2, 1, 1600), 16);
  // a rope table [1, T, 1, D] broadcast over batch and heads: strides [0, D, 0], inner 1
  const int64_t table[] = {0, 128, 0};
  EXPECT_EQ(vector_bytes(0x2000, 2, table, 3, 1, 128), 16);
  // float32 too: 16 bytes are 4 elements
  EXPECT_EQ(vector_bytes(0x2000, 4, outer, 2, 1, 1600), 16);
}

TEST(BookendWidth, FallsBackToTheRightNarrowerWidth) {
  const int64_t outer[] = {0, 1600};
  // innermost stride not 1: one element per access
  EXPECT_EQ(vector_bytes(0x1000, 2, outer, 2, 2, 1600), 2);
  EXPECT_EQ(vector_bytes(0x1000, 4, outer, 2, 3, 1600), 4);
  // misaligned base: bf16 by one element (2 bytes), two (4), four (8)
  EXPECT_EQ(vector_bytes(0x1002, 2, outer, 2, 1, 1600), 2);
  EXPECT_EQ(vector_bytes(0x1004, 2, outer, 2, 1, 1600), 4);
  EXPECT_EQ(vector_bytes(0x1008, 2, outer, 2, 1, 1600), 8);
  // an outer stride of 1601 bf16 elements (3202 bytes) breaks 4-byte alignment of odd rows
  const int64_t odd[] = {1601};
  EXPECT_EQ(vector_bytes(0x1000, 2, odd, 1, 1, 1600), 2);
  // an inner extent of 3 float32 (12 bytes): 4-byte accesses
  EXPECT_EQ(vector_bytes(0x1000, 4, nullptr, 0, 1, 3), 4);
  // a single inner element: its stride does not matter
  EXPECT_EQ(vector_bytes(0x1000, 2, nullptr, 0, 7, 1), 2);
  // the cap
  EXPECT_EQ(vector_bytes(0x1000, 2, nullptr, 0, 1, 64, 8), 8);
}

TEST(BookendSegment, CopyPlanMergesDimsAndChoosesTheCommonWidth) {
  // q as the permuted view of a [B, T, H, 3 D] buffer into a contiguous [B, H, T, D] workspace
  alignas(16) static uint16_t src_buf[64], dst_buf[64];
  BoundTensor src{src_buf, TensorMeta{{2, 4, 8, 64}, {6144, 192, 768, 1}, DType::kBFloat16}};
  BoundTensor dst{dst_buf, TensorMeta{{2, 4, 8, 64}, {2048, 512, 64, 1}, DType::kBFloat16}};
  SegmentCopy c = make_segment_copy(dst, src);
  EXPECT_EQ(c.rank, 4);  // nothing merges: src's dims are not contiguous across each other
  EXPECT_EQ(c.vec_bytes, 16);
  EXPECT_EQ(c.numel, 2 * 4 * 8 * 64);
  // both contiguous: one dim
  SegmentCopy flat = make_segment_copy(dst, dst);
  EXPECT_EQ(flat.rank, 1);
  EXPECT_EQ(flat.shape[0], 2 * 4 * 8 * 64);
  // a source with inner stride 2: element accesses
  BoundTensor strided{src_buf, TensorMeta{{2, 4, 8, 64}, {4096, 1024, 128, 2}, DType::kBFloat16}};
  EXPECT_EQ(make_segment_copy(dst, strided).vec_bytes, 2);
  // a destination one element off 16-byte alignment: 2 bytes
  BoundTensor off{dst_buf + 1, dst.layout};
  EXPECT_EQ(make_segment_copy(off, src).vec_bytes, 2);
  // shapes must agree
  BoundTensor other{dst_buf, TensorMeta{{2, 4, 8, 32}, {1024, 256, 32, 1}, DType::kBFloat16}};
  EXPECT_THROW(make_segment_copy(other, src), std::invalid_argument);
}

TEST(BookendLaunchWidths, RecordedOnlyWhileALogIsAlive) {
  record_launch_width("k", "x", 16);  // no log: dropped
  EXPECT_FALSE(launch_widths_recording());
  LaunchWidthLog outer;
  record_launch_width("k", "x", 16);
  {
    LaunchWidthLog inner;
    record_launch_width("k", "y", 2);
    const auto w = inner.take();
    ASSERT_EQ(w.size(), 1u);
    EXPECT_EQ(w[0].operand, "y");
    EXPECT_EQ(width_range(w), "2 B");
  }
  record_launch_width("k", "z", 4);
  const auto w = outer.take();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(width_range(w), "4-16 B");
  EXPECT_TRUE(outer.take().empty());
}

TEST(BookendLaunchWidths, ResultsJsonCarriesThem) {
  VariantResult v;
  v.variant.name = "host_alias";
  v.vector_widths = {{"rope_kernel<8>", "x[0]", 16}, {"bookend_copy", "src", 2}};
  RunResult run;
  TraceResult t;
  t.name = "t";
  RegionResult row;
  row.label = "trace";
  row.variants.push_back(v);
  t.regions.push_back(row);
  run.traces.push_back(t);
  const nlohmann::json j = to_json(run);
  const auto& w = j["traces"][0]["regions"][0]["variants"][0]["vector_widths"];
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0]["kernel"], "rope_kernel<8>");
  EXPECT_EQ(w[1]["bytes"], 2);
}

TEST(BookendRegistry, RopeAndLayerNormHaveTheThreeBoundaryVariants) {
  for (const FusionSpec* f : fusion_registry()) {
    if (f->name != "rope" && f->name != "layernorm_fwd") continue;
    for (const char* v : {"optimized", "segmented", "host_alias"})
      EXPECT_NE(f->find_variant(v), nullptr) << f->name << " " << v;
  }
}

namespace {

// A BindContext without a device that aliases as the GPU program does: a value made by view ops
// lives in its root's fake buffer at the offset and strides the op table's alias rows give; any
// other value at its own 16-byte aligned fake address.
class AliasingBuffers : public BindContext {
 public:
  explicit AliasingBuffers(const Graph& g) : g_(g) {}
  BoundTensor tensor(int v) override {
    const BoundaryChain ch = input_chain(g_, v);
    auto* base = reinterpret_cast<char*>(uintptr_t(0x100000) * uintptr_t(ch.root + 1));
    TensorMeta cur = g_.meta(ch.root);
    int64_t off = 0;
    for (size_t i = 0; i < ch.nodes.size(); ++i) {
      const Node& n = g_.nodes[ch.nodes[i]];
      const int out = i + 1 < ch.nodes.size() ? ch.inputs[i + 1] : v;
      const TensorMeta& om = g_.meta(out);
      const auto lay = op_def(n.op).alias(n, cur, om.shape, g_.values[out].output_index);
      off += lay->offset;
      cur = TensorMeta{om.shape, lay->stride, om.dtype};
    }
    return {base + off * static_cast<int64_t>(dtype_size(cur.dtype)), cur};
  }
  void* workspace(size_t) override { return reinterpret_cast<void*>(uintptr_t(0x10000000)); }

 private:
  const Graph& g_;
};

// What the probe binder was handed, per value, in its last call.
std::map<int, BoundTensor> g_seen;

Binding probe_bind(const Graph&, const Region& r, const VariantSpec& v, BindContext& ctx) {
  EXPECT_EQ(v.name, "optimized");
  g_seen.clear();
  for (int in : r.inputs) g_seen[in] = ctx.tensor(in);
  Binding b;
  b.launch = [](const LaunchContext&) {};  // nothing to launch: the test reads g_seen
  return b;
}

const Region& rope_region(const Plan& plan) {
  for (const Region& r : plan.regions)
    if (r.fusion->name == "rope") return r;
  throw std::logic_error("no rope region");
}

}  // namespace

// host_alias on the CPU: each replay resolves every region input from its root through its meta
// ops and hands the binder exactly the program's own aliases (GPT-NeoX: q and k as strided views
// of qkv); the mutant "wrong storage offset" moves exactly the chained ones by one element.
TEST(BookendHostAlias, ResolvesEachViewFromItsRootPerReplayAndTheOffsetMutantMovesIt) {
  Graph g = load_trace(trace_path("byog/rope/gpt_neox_rope_mincut_train_fwd_2x8x4x64"));
  const Plan plan = make_plan(g, fusion_registry());
  const Region& r = rope_region(plan);
  AliasingBuffers ctx(g);
  Binding b = bind_bookend(g, r, kHostAliasVariant, ctx, &probe_bind);
  ASSERT_TRUE(b.launch) << b.unsupported;
  int chained = 0;
  b.launch(LaunchContext{});
  ASSERT_EQ(g_seen.size(), r.inputs.size());
  for (const auto& [v, t] : g_seen) {
    const BoundTensor want = ctx.tensor(v);
    EXPECT_EQ(t.ptr, want.ptr) << g.values[v].name;
    EXPECT_EQ(t.layout.stride, want.layout.stride) << g.values[v].name;
    EXPECT_EQ(t.layout.shape, want.layout.shape) << g.values[v].name;
    chained += input_chain(g, v).ops.empty() ? 0 : 1;
  }
  EXPECT_GE(chained, 2) << "q and k are views of qkv";
  set_host_alias_offset_mutant(1);
  b.launch(LaunchContext{});
  set_host_alias_offset_mutant(0);
  int moved = 0;
  for (const auto& [v, t] : g_seen) {
    const BoundTensor want = ctx.tensor(v);
    const int64_t elem = static_cast<int64_t>(dtype_size(want.layout.dtype));
    if (t.ptr != want.ptr) {
      ++moved;
      EXPECT_EQ(static_cast<char*>(t.ptr) - static_cast<char*>(want.ptr), elem);
    }
  }
  EXPECT_EQ(moved, chained) << "the mutant must move every chained input, and only those";
}

// segmented at bind time: the binder is handed contiguous tensors only (q and k copied out of
// qkv into workspaces), the others as they are.
TEST(BookendSegmented, HandsTheBinderContiguousTensors) {
  Graph g = load_trace(trace_path("byog/rope/gpt_neox_rope_mincut_train_fwd_2x8x4x64"));
  const Plan plan = make_plan(g, fusion_registry());
  const Region& r = rope_region(plan);
  AliasingBuffers ctx(g);
  Binding b = bind_bookend(g, r, kSegmentedVariant, ctx, &probe_bind);
  ASSERT_TRUE(b.launch) << b.unsupported;
  int copied = 0;
  for (const auto& [v, t] : g_seen) {
    EXPECT_TRUE(t.layout.is_contiguous()) << g.values[v].name << " " << t.layout.str();
    copied += t.ptr != ctx.tensor(v).ptr ? 1 : 0;
  }
  EXPECT_GE(copied, 2) << "q and k are strided views of qkv";
}
