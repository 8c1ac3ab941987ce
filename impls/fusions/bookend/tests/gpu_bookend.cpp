// bookend on the GPU: the segmented and host_alias variants of rope and layernorm_fwd on every
// bundled trace those fusions match (small shapes: bit-identical to `optimized`, which runs the
// same kernel, and passing the harness's numerics check against the float64 reference; three
// realistic shapes: bit-identical to `optimized`); the mutant "host alias with a wrong storage
// offset" must fail both; the widths each launch records (16 bytes on the rope and nanoGPT
// LayerNorm kernels; the segmented form's copies); the copy kernel on the broadcast + expand
// input (16 bytes) and on a misaligned one (2 bytes), both copying the right values.
// (rope's own GPU tests, impls/fusions/rope/tests/gpu_rope.cpp, run both variants on every
// rotary trace and synthetic form against the eager executor too.)
#include <cuda_bf16.h>

#include <algorithm>
#include <set>

#include "impls/fusions/bookend/segment.hpp"
#include "impls/fusions/bookend/variants.hpp"
#include "impls/fusions/launch_record.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;

namespace {

bool has_bookend_region(const Plan& plan) {
  for (const Region& r : plan.regions)
    if (r.fusion->name == "rope" || r.fusion->name == "layernorm_fwd") return true;
  return false;
}

std::vector<int> bookend_outputs(const Plan& plan) {
  std::vector<int> out = fusion_region_outputs(plan, "rope");
  const std::vector<int> ln = fusion_region_outputs(plan, "layernorm_fwd");
  out.insert(out.end(), ln.begin(), ln.end());
  return out;
}

// The traces bookend runs on: every small bundled trace with a rope or layernorm_fwd region,
// and three realistic ones (bits only: their float64 reference is too slow for a test).
std::vector<std::string> cases() {
  std::vector<std::string> out;
  for (const std::string& n : bundled_trace_names())
    if ((n.find("rope") != std::string::npos || n.find("layernorm") != std::string::npos ||
         n.find("norm") != std::string::npos) &&
        (n.find("_2x8x") != std::string::npos || n.find("1x8x4x2x16") != std::string::npos ||
         n.find("32x384") != std::string::npos))
      out.push_back(n);
  for (const char* big : {"nanogpt_layernorm_fwd_16x1024x1600",
                          "byog/rope/gpt_neox_rope_mincut_train_fwd_2x2048x32x128",
                          "byog/rope/llama_rope_table_mincut_train_bwd_1x8192x32x128"})
    out.push_back(big);
  return out;
}

// `variant` and `optimized` on the same inputs: the region outputs bit for bit.
void expect_bits_as_optimized(const Graph& g, const Plan& plan, const std::string& variant,
                              uint64_t seed, const std::string& label) {
  const auto inputs = generate_inputs(g, seed);
  GpuProgram opt(g, plan, "optimized", inputs, nullptr);
  opt.run_all(LaunchContext{});
  GpuProgram prog(g, plan, variant, inputs, nullptr);
  expect_fused_where_available(plan, prog, variant, label);
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  REPLAY_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(first_bit_difference(g, prog, opt, bookend_outputs(plan)), "")
      << label << " " << variant << " seed " << seed;
}

class BookendGpu : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

}  // namespace

TEST_P(BookendGpu, BitIdenticalToOptimizedAndPassesNumerics) {
  REQUIRE_GPU();
  const auto& [name, variant] = GetParam();
  Graph g = load_trace(trace_path(name));
  const Plan plan = make_plan(g, fusion_registry());
  if (!has_bookend_region(plan)) GTEST_SKIP() << name << ": no rope or layernorm_fwd region";
  const bool small = g.golden.has_value() || name.find("_2x8x") != std::string::npos;
  for (uint64_t seed : small ? std::vector<uint64_t>{41, 42} : std::vector<uint64_t>{41}) {
    expect_bits_as_optimized(g, plan, variant, seed, name);
    if (small) expect_variant_matches(g, variant, seed);
  }
}

INSTANTIATE_TEST_SUITE_P(Traces, BookendGpu,
                         ::testing::Combine(::testing::ValuesIn(cases()),
                                            ::testing::Values("segmented", "host_alias")),
                         [](const auto& info) {
                           return test_name(std::get<0>(info.param) + "_" +
                                            std::get<1>(info.param));
                         });

// The mutant: host_alias one element off in the storage offset of every tensor it resolves
// through a meta op (q and k of GPT-NeoX's qkv) must change the bits and fail the numerics.
TEST(BookendGpuMutant, HostAliasWithAWrongStorageOffsetFails) {
  REQUIRE_GPU();
  for (const char* name : {"byog/rope/gpt_neox_rope_mincut_train_fwd_2x8x4x64",
                           "byog/rope/phi3_rope_mincut_train_fwd_2x8x4x64"}) {
    Graph g = load_trace(trace_path(name));
    const Plan plan = make_plan(g, fusion_registry());
    const auto inputs = generate_inputs(g, 41);
    const auto ref = run_reference(g, inputs);
    GpuProgram opt(g, plan, "optimized", inputs, nullptr);
    opt.run_all(LaunchContext{});
    bookend::set_host_alias_offset_mutant(1);
    GpuProgram prog(g, plan, "host_alias", inputs, nullptr);
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    bookend::set_host_alias_offset_mutant(0);
    EXPECT_NE(first_bit_difference(g, prog, opt, bookend_outputs(plan)), "") << name;
    const auto bounds = default_value_bounds(g);
    bool all_pass = true;
    for (int v : g.outputs)
      all_pass &= check_value(g, v, prog.download(v, nullptr), ref.at(v), ref,
                              output_bounds(g, plan, bounds, v))
                      .pass();
    EXPECT_FALSE(all_pass) << name << ": the wrong storage offset passed the numerics check";
  }
}

// What the launches record: rope's kernel 16 bytes on x and out (q, k views of qkv: innermost
// stride 1, aligned), the nanoGPT LayerNorm kernel 16 bytes on x, w, b, y; the segmented form
// of GPT-NeoX copies q and k out of qkv first (bookend_copy entries), host_alias does not.
TEST(BookendGpuWidths, LaunchesRecordTheWidthTheyUsed) {
  REQUIRE_GPU();
  auto widths = [](const std::string& name, const std::string& variant) {
    Graph g = load_trace(trace_path(name));
    const Plan plan = make_plan(g, fusion_registry());
    GpuProgram prog(g, plan, variant, generate_inputs(g, 41), nullptr);
    LaunchWidthLog log;
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    return log.take();
  };
  auto count = [](const std::vector<LaunchWidth>& w, const std::string& kernel) {
    return std::count_if(w.begin(), w.end(),
                         [&](const LaunchWidth& e) { return e.kernel.rfind(kernel, 0) == 0; });
  };
  const std::string neox = "byog/rope/gpt_neox_rope_mincut_train_fwd_2x8x4x64";
  for (const char* variant : {"optimized", "host_alias", "segmented"}) {
    const auto w = widths(neox, variant);
    ASSERT_GT(count(w, "rope_"), 0) << variant;
    for (const LaunchWidth& e : w)
      if (e.operand.rfind("x[", 0) == 0 || e.operand.rfind("out[", 0) == 0)
        EXPECT_EQ(e.bytes, 16) << variant << " " << e.kernel << " " << e.operand;
    if (std::string(variant) == "segmented") {
      EXPECT_GT(count(w, "bookend_copy"), 0) << "GPT-NeoX's q and k are strided views of qkv";
    } else {
      EXPECT_EQ(count(w, "bookend_copy"), 0) << variant;
    }
  }
  for (const char* variant : {"optimized", "host_alias", "segmented"}) {
    const auto w = widths("nanogpt_layernorm_fwd_2x8x1600", variant);
    ASSERT_GT(count(w, "layernorm_fwd_rows"), 0) << variant;
    for (const LaunchWidth& e : w)
      if (e.operand == "x" || e.operand.rfind("w[", 0) == 0 || e.operand == "out")
        EXPECT_EQ(e.bytes, 16) << variant << " " << e.operand;
  }
}

// The copy kernel on the broadcast + expand input: a bf16 weight [C] read as [B, T, C] with
// strides [0, 0, 1] keeps 16-byte accesses and writes every row as the weight; one element off
// alignment it falls back to 2 bytes and still copies the right values.
TEST(BookendGpuCopy, ExpandedInputKeeps16BytesMisalignedFallsBackTo2) {
  REQUIRE_GPU();
  const int64_t B = 3, T = 5, C = 1600;
  std::vector<__nv_bfloat16> w(C + 8);
  for (int64_t i = 0; i < C + 8; ++i) w[i] = __float2bfloat16(static_cast<float>(i % 251) - 100.f);
  DeviceBuffer dw((C + 8) * 2), dout(B * T * C * 2);
  REPLAY_CUDA(cudaMemcpy(dw.get(), w.data(), (C + 8) * 2, cudaMemcpyHostToDevice));
  for (int64_t shift : {0, 1}) {
    auto* base = static_cast<__nv_bfloat16*>(dw.get()) + shift;
    BoundTensor src{base, TensorMeta{{B, T, C}, {0, 0, 1}, DType::kBFloat16}};
    BoundTensor dst{dout.get(), TensorMeta{{B, T, C}, {T * C, C, 1}, DType::kBFloat16}};
    const bookend::SegmentCopy c = bookend::make_segment_copy(dst, src);
    LaunchWidthLog log;
    bookend::launch_segment_copy(c, nullptr);
    REPLAY_CUDA(cudaDeviceSynchronize());
    const auto rec = log.take();
    ASSERT_EQ(rec.size(), 2u);
    EXPECT_EQ(rec[0].bytes, shift == 0 ? 16 : 2) << "shift " << shift;
    std::vector<__nv_bfloat16> out(B * T * C);
    REPLAY_CUDA(cudaMemcpy(out.data(), dout.get(), out.size() * 2, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t i = 0; i < C; ++i)
        wrong += __bfloat162float(out[r * C + i]) != __bfloat162float(w[i + shift]);
    EXPECT_EQ(wrong, 0u) << "shift " << shift;
  }
}
