// lower_gemm (impls/eager/gemm.cu) on device buffers against the float64 reference, for every
// matmul op: odd sizes, transposed operands, batch-broadcast (stride 0) and gapped operands
// (copied), broadcast addmm/baddbmm self with alpha/beta and the bias epilogue, float32 (no TF32),
// float64, bfloat16 and float16; _scaled_mm with tensorwise and rowwise scales, with and without
// bias, bfloat16/float16/float32/float8 outputs, layouts other than TN, fast accumulation. Plus a
// wrong variant (scale_a and scale_b swapped) that the check must reject, and the cached
// algorithm giving the same bits.
//
// Tolerances. Non-float8 ops: the harness's own verdict (check_numerics) with default_bounds(out
// dtype, 1 op, k = K): a float32-accumulated K-term sum before the last rounding (bf16/fp16
// outputs: rel_l2 <= 2 sqrt(delta u), float32: 2 delta, delta = 2^-24 (8 + 4 sqrt(K)); float64
// with 2^-53). Float8 (_scaled_mm): the same with the float8 GEMM's error model
// (float8_gemm_error: Hopper's float8 tensor cores add with about 14 mantissa bits, an absolute
// error of rms <= 2^-11 of the output's rms without fast accumulation), fitted to what
// ScaledMmModel below measures. A wrong scale or a lost bias gives rel_l2 >= 0.1 (asserted by the
// swapped-scales test).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "impls/eager/gemm.hpp"
#include "impls/eager/gemm_choice.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/ir/host_tensor.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/op.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

const json kScaleStats = {{"mean", 1}, {"std", 0.3}, {"min", 0.5}, {"max", 2}};

struct Case {
  std::string name;
  std::string op;  // ATen name
  json example;    // {"inputs", "args", "kwargs"} as the op rows' examples
};

// One node's inputs on the device (each in its recorded layout) and its output buffer.
struct DeviceNode {
  Graph g;
  std::map<int, HostTensor> inputs;
  std::vector<DeviceBuffer> bufs;
  std::vector<DeviceTensor> in;
  DeviceBuffer out_buf;
  DeviceTensor out;
  TensorMeta out_meta;

  const Node& node() const { return g.nodes[0]; }

  explicit DeviceNode(const Case& c, uint64_t seed)
      : g(parse_trace(example_trace(c.op, c.example), "<" + c.name + ">")),
        inputs(generate_inputs(g, seed)) {
    for (const Operand& o : node().operands) {
      if (!o.is_tensor()) {
        in.emplace_back();
        continue;
      }
      const TensorMeta& m = g.meta(o.value);
      std::vector<uint8_t> bytes = pack(inputs.at(o.value), m);
      bufs.emplace_back(std::max<size_t>(bytes.size(), 16));
      REPLAY_CUDA(
          cudaMemcpy(bufs.back().get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
      in.push_back(device_tensor(bufs.back().get(), m));
    }
    out_meta = g.meta(node().outputs[0]);
    out_buf = DeviceBuffer(std::max<size_t>(out_meta.nbytes(), 16));
    out = device_tensor(out_buf.get(), out_meta);
  }

  // Poison the output (NaN in every float dtype), run `launches` launches, download.
  HostTensor run(const EagerLaunch& launch, int launches = 1) {
    REPLAY_CUDA(cudaMemset(out_buf.get(), 0xFF, out_buf.bytes()));
    for (int i = 0; i < launches; ++i) launch(nullptr);
    REPLAY_CUDA(cudaDeviceSynchronize());
    return download();
  }
  std::vector<uint8_t> bits() const {
    std::vector<uint8_t> bytes(static_cast<size_t>(out_meta.storage_elems()) *
                               dtype_size(out_meta.dtype));
    REPLAY_CUDA(cudaMemcpy(bytes.data(), out_buf.get(), bytes.size(), cudaMemcpyDeviceToHost));
    return bytes;
  }
  HostTensor download() const { return unpack(bits(), out_meta); }

  HostTensor reference() const { return run_reference(g, inputs).at(node().outputs[0]); }

  int64_t inner_dim() const {
    const int a = node().op == Op::kAddmm || node().op == Op::kBaddbmm ? 1 : 0;
    return g.meta(node().operands[a].value).shape.back();
  }
};

NumericsBounds bounds_for(const DeviceNode& d) {
  const DType dt = d.out_meta.dtype;
  const int64_t K = std::max<int64_t>(d.inner_dim(), 1);
  if (d.node().op != Op::kScaledMm) return default_bounds(dt, 1, K);
  return default_bounds(dt, 1, K, float8_gemm_error(K, d.node().flag));  // flag: use_fast_accum
}

void expect_matches(const Case& c, uint64_t seed) {
  DeviceNode d(c, seed);
  EagerLaunch launch = lower_gemm(d.node(), d.in, {d.out});
  HostTensor got = d.run(launch);
  auto res = check_numerics("y", got, d.reference(), bounds_for(d));
  std::cout << "[ gemm ] " << c.name << " seed " << seed << ": rel_l2 " << res.rel_l2 << " ("
            << res.rel_l2 / res.bounds.max_rel_l2 << " of the bound), beyond 1 ulp "
            << res.beyond_1ulp_share << "\n";
  EXPECT_TRUE(res.pass()) << c.name << " seed " << seed << ": " << res.failure() << " (rel_l2 "
                          << res.rel_l2 << ", bound " << res.bounds.max_rel_l2 << ")";
}

std::vector<Case> cases() {
  std::vector<Case> v;
  auto mm = [&](std::string name, json a, json b) {
    v.push_back({name, "aten.mm.default", {{"inputs", {a, b}}, {"args", input_refs(2)}}});
  };
  mm("mm_f32_7x13x5", example_input({7, 13}, "float32"), example_input({13, 5}, "float32"));
  mm("mm_bf16_7x13x5", example_input({7, 13}, "bfloat16"), example_input({13, 5}, "bfloat16"));
  mm("mm_f16_7x13x5_both_t", example_input({7, 13}, "float16", {1, 7}),
     example_input({13, 5}, "float16", {1, 13}));
  mm("mm_f16_64x256x48_a_t", example_input({64, 256}, "float16", {1, 64}),
     example_input({256, 48}, "float16"));
  mm("mm_bf16_128x1024x96_b_t", example_input({128, 1024}, "bfloat16"),
     example_input({1024, 96}, "bfloat16", {1, 1024}));
  mm("mm_f32_33x65x17_both_t", example_input({33, 65}, "float32", {1, 33}),
     example_input({65, 17}, "float32", {1, 65}));
  mm("mm_f32_256x2048x128", example_input({256, 2048}, "float32"),
     example_input({2048, 128}, "float32"));
  mm("mm_f64_9x11x7", example_input({9, 11}, "float64"), example_input({11, 7}, "float64"));
  mm("mm_bf16_gapped_a", example_input({12, 40}, "bfloat16", {80, 2}),
     example_input({40, 24}, "bfloat16"));
  mm("mm_bf16_1x64x1", example_input({1, 64}, "bfloat16"), example_input({64, 1}, "bfloat16"));
  mm("mm_bf16_padded_ld", example_input({16, 48}, "bfloat16", {64, 1}),
     example_input({48, 40}, "bfloat16", {1, 56}));
  mm("mm_f32_k0", example_input({3, 0}, "float32"), example_input({0, 4}, "float32"));

  auto addmm = [&](std::string name, std::string op, json self, json a, json b, double beta,
                   double alpha) {
    v.push_back({name,
                 op,
                 {{"inputs", {self, a, b}},
                  {"args", input_refs(3)},
                  {"kwargs", {{"beta", beta}, {"alpha", alpha}}}}});
  };
  const std::string am = "aten.addmm.default", bb = "aten.baddbmm.default";
  addmm("addmm_bf16_linear_bias_epilogue", am, example_input({96}, "bfloat16"),
        example_input({64, 512}, "bfloat16"), example_input({512, 96}, "bfloat16", {1, 512}), 1, 1);
  addmm("addmm_f16_bias_epilogue_alpha", am, example_input({40}, "float16"),
        example_input({24, 128}, "float16"), example_input({128, 40}, "float16", {1, 128}), 1, 0.5);
  addmm("addmm_f32_bias_epilogue_odd", am, example_input({5}, "float32"),
        example_input({7, 13}, "float32"), example_input({13, 5}, "float32"), 1, 1);
  addmm("addmm_f32_col_bias_beta_alpha", am, example_input({33, 1}, "float32"),
        example_input({33, 65}, "float32"), example_input({65, 17}, "float32"), 0.5, 2);
  addmm("addmm_bf16_full_self_beta2", am, example_input({48, 80}, "bfloat16"),
        example_input({48, 256}, "bfloat16"), example_input({256, 80}, "bfloat16"), 2, 1);
  // A bfloat16/float16 C with beta == 1 goes through a float32 temporary (gemm.cu says why).
  addmm("addmm_bf16_full_self_beta1", am, example_input({16, 24}, "bfloat16"),
        example_input({16, 64}, "bfloat16"), example_input({64, 24}, "bfloat16"), 1, 1);
  addmm("addmm_bf16_full_self_beta1_alpha2", am, example_input({16, 24}, "bfloat16"),
        example_input({16, 64}, "bfloat16"), example_input({64, 24}, "bfloat16"), 1, 2);
  addmm("addmm_bf16_full_self_beta_half", am, example_input({16, 24}, "bfloat16"),
        example_input({16, 64}, "bfloat16"), example_input({64, 24}, "bfloat16"), 0.5, 1);
  addmm("addmm_bf16_256x1024x256_full_self_beta1", am, example_input({256, 256}, "bfloat16"),
        example_input({256, 1024}, "bfloat16"), example_input({1024, 256}, "bfloat16"), 1, 1);
  addmm("addmm_f16_col_self_beta1", am, example_input({16, 1}, "float16"),
        example_input({16, 64}, "float16"), example_input({64, 24}, "float16"), 1, 1);
  addmm("addmm_bf16_row_self_1xN_epilogue", am, example_input({1, 40}, "bfloat16"),
        example_input({24, 128}, "bfloat16"), example_input({128, 40}, "bfloat16"), 1, 1);
  addmm("addmm_f32_beta0", am, example_input({17}, "float32"), example_input({9, 31}, "float32"),
        example_input({31, 17}, "float32"), 0, 1.5);
  addmm("addmm_bf16_expanded_bias", am, example_input({24}, "bfloat16", {0}),
        example_input({16, 64}, "bfloat16"), example_input({64, 24}, "bfloat16"), 1, 1);
  addmm("addmm_f64_bias", am, example_input({7}, "float64"), example_input({5, 9}, "float64"),
        example_input({9, 7}, "float64"), 1, 1);
  addmm("addmm_bf16_k0", am, example_input({4}, "bfloat16"), example_input({3, 0}, "bfloat16"),
        example_input({0, 4}, "bfloat16"), 2, 1);

  auto bmm = [&](std::string name, json a, json b) {
    v.push_back({name, "aten.bmm.default", {{"inputs", {a, b}}, {"args", input_refs(2)}}});
  };
  bmm("bmm_f32_3x7x13x5", example_input({3, 7, 13}, "float32"),
      example_input({3, 13, 5}, "float32"));
  bmm("bmm_bf16_b_t", example_input({4, 64, 128}, "bfloat16"),
      example_input({4, 128, 32}, "bfloat16", {4096, 1, 128}));
  bmm("bmm_f16_a_batch_broadcast", example_input({3, 20, 48}, "float16", {0, 48, 1}),
      example_input({3, 48, 24}, "float16"));
  bmm("bmm_bf16_b_batch_broadcast", example_input({5, 7, 13}, "bfloat16"),
      example_input({5, 13, 5}, "bfloat16", {0, 5, 1}));
  bmm("bmm_f32_permuted_batch", example_input({2, 16, 32}, "float32", {32, 64, 1}),
      example_input({2, 32, 8}, "float32"));

  addmm("baddbmm_f32_broadcast_self", bb, example_input({7, 5}, "float32"),
        example_input({2, 7, 13}, "float32"), example_input({2, 13, 5}, "float32"), 0.5, 2);
  addmm("baddbmm_bf16_full_self", bb, example_input({3, 32, 40}, "bfloat16"),
        example_input({3, 32, 64}, "bfloat16"), example_input({3, 64, 40}, "bfloat16"), 1, 1);
  addmm("baddbmm_f16_bias_vector", bb, example_input({48}, "float16"),
        example_input({2, 64, 96}, "float16"), example_input({2, 96, 48}, "float16", {4608, 1, 96}),
        1, 1);
  addmm("baddbmm_bf16_per_batch_bias_epilogue", bb, example_input({3, 1, 40}, "bfloat16"),
        example_input({3, 24, 64}, "bfloat16"), example_input({3, 64, 40}, "bfloat16"), 1, 0.5);
  addmm("baddbmm_f16_self_beta2", bb, example_input({2, 16, 24}, "float16"),
        example_input({2, 16, 96}, "float16"), example_input({2, 96, 24}, "float16"), 2, 1);
  addmm("baddbmm_f32_beta0", bb, example_input({4, 1, 6}, "float32"),
        example_input({4, 5, 3}, "float32"), example_input({4, 3, 6}, "float32"), 0, -1);

  // _scaled_mm(self, mat2, scale_a, scale_b, bias=, out_dtype=, use_fast_accum=).
  auto scaled = [&](std::string name, int64_t M, int64_t K, int64_t N, bool rowwise,
                    std::string bias, std::string out, bool mat2_col = true, bool fast = false,
                    std::string a_dt = "float8_e4m3fn", std::string b_dt = "float8_e4m3fn",
                    bool self_col = false) {
    std::vector<json> ins = {
        example_input({M, K}, a_dt, self_col ? std::vector<int64_t>{1, M} : std::vector<int64_t>{}),
        example_input({K, N}, b_dt, mat2_col ? std::vector<int64_t>{1, K} : std::vector<int64_t>{}),
        example_input(rowwise ? std::vector<int64_t>{M, 1} : std::vector<int64_t>{}, "float32", {},
                      kScaleStats),
        example_input(rowwise ? std::vector<int64_t>{1, N} : std::vector<int64_t>{}, "float32", {},
                      kScaleStats)};
    json kwargs = {{"out_dtype", {{"dtype", out}}}, {"use_fast_accum", fast}};
    if (!bias.empty()) {
      ins.push_back(example_input({N}, bias));
      kwargs["bias"] = test::ref("in4");
    }
    v.push_back({name,
                 "aten._scaled_mm.default",
                 {{"inputs", ins}, {"args", input_refs(4)}, {"kwargs", kwargs}}});
  };
  scaled("scaled_tensorwise_bf16", 32, 64, 48, false, "", "bfloat16");
  scaled("scaled_tensorwise_bias_bf16", 40, 128, 64, false, "bfloat16", "bfloat16");
  scaled("scaled_tensorwise_e4m3_e5m2_f32", 24, 96, 32, false, "", "float32", true, false,
         "float8_e4m3fn", "float8_e5m2");
  scaled("scaled_tensorwise_e5m2_e4m3_f16_bias", 24, 64, 32, false, "float16", "float16", true,
         false, "float8_e5m2", "float8_e4m3fn");
  scaled("scaled_rowwise_bf16", 48, 128, 32, true, "", "bfloat16");
  scaled("scaled_rowwise_bias_bf16", 48, 256, 80, true, "bfloat16", "bfloat16");
  scaled("scaled_rowwise_f32", 33, 64, 16, true, "", "float32");
  scaled("scaled_rowwise_bias_bf16_out_f32", 16, 64, 48, true, "bfloat16", "float32");
  scaled("scaled_rowwise_bias_f32_fallback", 20, 32, 32, true, "float32", "bfloat16");
  scaled("scaled_tensorwise_out_e4m3_fallback", 16, 64, 32, false, "", "float8_e4m3fn");
  scaled("scaled_rowwise_m1", 1, 32, 16, true, "bfloat16", "bfloat16");
  scaled("scaled_rowwise_fast_accum", 64, 512, 96, true, "", "bfloat16", true, true);
  scaled("scaled_rowwise_f32_k2048", 64, 2048, 64, true, "", "float32");
  scaled("scaled_rowwise_f32_k2048_fast_accum", 64, 2048, 64, true, "", "float32", true, true);
  scaled("scaled_mat2_row_major_copied", 32, 64, 48, true, "", "bfloat16", false);
  scaled("scaled_self_col_major_copied", 32, 64, 48, false, "bfloat16", "bfloat16", true, false,
         "float8_e4m3fn", "float8_e4m3fn", true);
  scaled("scaled_k0_bias", 4, 0, 16, false, "bfloat16", "bfloat16");
  return v;
}

class Gemm : public ::testing::TestWithParam<Case> {};

TEST_P(Gemm, MatchesReference) {
  REQUIRE_GPU();
  for (uint64_t seed : {1u, 2u}) expect_matches(GetParam(), seed);
}

INSTANTIATE_TEST_SUITE_P(AllMatmuls, Gemm, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return test_name(info.param.name); });

// The wrong variant: rowwise scales swapped (scale_a's values where scale_b's go and vice versa,
// M != N; both buffers padded to max(M, N) so nothing reads out of bounds) must fail the check
// by a wide margin, and the right one must pass it.
TEST(GemmMutation, SwappedRowwiseScalesAreCaught) {
  REQUIRE_GPU();
  for (const std::string bias : {"", "bfloat16"}) {
    const int64_t M = 48, K = 128, N = 32;
    std::vector<json> ins = {example_input({M, K}, "float8_e4m3fn"),
                             example_input({K, N}, "float8_e4m3fn", {1, K}),
                             example_input({M, 1}, "float32", {}, kScaleStats),
                             example_input({1, N}, "float32", {}, kScaleStats)};
    json kwargs = {{"out_dtype", {{"dtype", "bfloat16"}}}};
    if (!bias.empty()) {
      ins.push_back(example_input({N}, bias));
      kwargs["bias"] = test::ref("in4");
    }
    Case c{"swapped",
           "aten._scaled_mm.default",
           {{"inputs", ins}, {"args", input_refs(4)}, {"kwargs", kwargs}}};
    DeviceNode d(c, 7);
    const HostTensor target = d.reference();
    HostTensor good = d.run(lower_gemm(d.node(), d.in, {d.out}));
    auto ok = check_numerics("y", good, target, bounds_for(d));
    EXPECT_TRUE(ok.pass()) << ok.failure();

    // Padded copies of the scales, swapped.
    const HostTensor& sa = d.inputs.at(d.node().operands[2].value);
    const HostTensor& sb = d.inputs.at(d.node().operands[3].value);
    std::vector<float> pa(static_cast<size_t>(std::max(M, N)), 1.0f), pb = pa;
    for (size_t i = 0; i < sa.data.size(); ++i) pa[i] = static_cast<float>(sa.data[i]);
    for (size_t i = 0; i < sb.data.size(); ++i) pb[i] = static_cast<float>(sb.data[i]);
    DeviceBuffer da(pa.size() * sizeof(float)), db(pb.size() * sizeof(float));
    REPLAY_CUDA(cudaMemcpy(da.get(), pa.data(), da.bytes(), cudaMemcpyHostToDevice));
    REPLAY_CUDA(cudaMemcpy(db.get(), pb.data(), db.bytes(), cudaMemcpyHostToDevice));
    std::vector<DeviceTensor> swapped = d.in;
    swapped[2].ptr = db.get();  // scale_a [M, 1] reads scale_b's values
    swapped[3].ptr = da.get();  // scale_b [1, N] reads scale_a's values
    HostTensor bad = d.run(lower_gemm(d.node(), swapped, {d.out}));
    auto res = check_numerics("y", bad, target, bounds_for(d));
    std::cout << "[ gemm ] swapped rowwise scales, bias '" << bias << "': rel_l2 " << res.rel_l2
              << " (correct: " << ok.rel_l2 << ")\n";
    EXPECT_FALSE(res.pass()) << "swapped scales passed: rel_l2 " << res.rel_l2;
    EXPECT_GT(res.rel_l2, 0.05) << "the swapped-scales error should be large";
  }
}

// A second launch of a plan, and a second plan of the same problem (its algorithm from the
// cache: no new heuristic query), give the same bits; a cached launch enqueues in a few µs.
TEST(GemmCache, SecondCallsGiveIdenticalBits) {
  REQUIRE_GPU();
  for (const Case& c : {Case{"bf16",
                             "aten.mm.default",
                             {{"inputs",
                               {example_input({256, 512}, "bfloat16"),
                                example_input({512, 384}, "bfloat16", {1, 512})}},
                              {"args", input_refs(2)}}},
                        Case{"rowwise",
                             "aten._scaled_mm.default",
                             {{"inputs",
                               {example_input({64, 256}, "float8_e4m3fn"),
                                example_input({256, 128}, "float8_e4m3fn", {1, 256}),
                                example_input({64, 1}, "float32", {}, kScaleStats),
                                example_input({1, 128}, "float32", {}, kScaleStats)}},
                              {"args", input_refs(4)},
                              {"kwargs", {{"out_dtype", {{"dtype", "bfloat16"}}}}}}}}) {
    DeviceNode d(c, 3);
    EagerLaunch first = lower_gemm(d.node(), d.in, {d.out});
    d.run(first);
    const std::vector<uint8_t> bits1 = d.bits();
    d.run(first);
    EXPECT_EQ(d.bits(), bits1) << c.name << ": second launch of the plan";
    const int64_t queries = gemm_counters().heuristic_queries;
    EagerLaunch second = lower_gemm(d.node(), d.in, {d.out});
    d.run(second);
    EXPECT_EQ(d.bits(), bits1) << c.name << ": second plan";
    EXPECT_EQ(gemm_counters().heuristic_queries, queries) << c.name << ": algorithm not cached";

    // Host enqueue of a cached launch (no sync inside the loop).
    constexpr int kLaunches = 200;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kLaunches; ++i) second(nullptr);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        kLaunches;
    REPLAY_CUDA(cudaDeviceSynchronize());
    // The floor on this host: an async memset's enqueue.
    const auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < kLaunches; ++i)
      REPLAY_CUDA(cudaMemsetAsync(d.out_buf.get(), 0, 4, nullptr));
    const double floor_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() /
        kLaunches;
    REPLAY_CUDA(cudaDeviceSynchronize());
    std::cout << "[ gemm ] " << c.name << ": host enqueue " << us
              << " us per launch (cudaMemsetAsync: " << floor_us << " us)\n";
    RecordProperty(c.name + "_enqueue_us", std::to_string(us));
    EXPECT_LT(us, 50.0) << "host enqueue of a cached GEMM launch";
  }
  const GemmCounters k = gemm_counters();
  std::cout << "[ gemm ] counters: heuristic queries " << k.heuristic_queries << ", matmuls "
            << k.matmuls << ", copied operands " << k.copied_operands << ", _scaled_mm fallbacks "
            << k.scaled_fallbacks << "\n";
}

// The float8 GEMM error model (float8_gemm_error, workloads/ir/tolerance.hpp) against this GPU:
// 256 x K x 256 problems, K = 32 to 16384, tensorwise and rowwise scales, with and without
// use_fast_accum. The float32 output (no output rounding) gives the measured noise, rms(e) /
// rms(y) with the drift taken out, and the drift, sum(e y) / sum(y^2): the data the model is
// fitted to, printed. The model must bound the noise, the drift and the worst element with a
// margin of 2, and the bfloat16 output must pass its default bounds.
TEST(ScaledMmModel, ErrorWithinTheFloat8Model) {
  REQUIRE_GPU();
  const int64_t M = 256, N = 256;
  for (const bool fast : {false, true})
    for (const bool rowwise : {false, true})
      for (const int64_t K : {32, 256, 2048, 8192, 16384})
        for (const std::string out : {"float32", "bfloat16"}) {
          const std::vector<int64_t> sa =
              rowwise ? std::vector<int64_t>{M, 1} : std::vector<int64_t>{};
          const std::vector<int64_t> sb =
              rowwise ? std::vector<int64_t>{1, N} : std::vector<int64_t>{};
          const std::string name = std::string(rowwise ? "rowwise" : "tensorwise") + "_k" +
                                   std::to_string(K) + (fast ? "_fast" : "") + "_" + out;
          Case c{name,
                 "aten._scaled_mm.default",
                 {{"inputs",
                   {example_input({M, K}, "float8_e4m3fn"),
                    example_input({K, N}, "float8_e4m3fn", {1, K}),
                    example_input(sa, "float32", {}, kScaleStats),
                    example_input(sb, "float32", {}, kScaleStats)}},
                  {"args", input_refs(4)},
                  {"kwargs", {{"out_dtype", {{"dtype", out}}}, {"use_fast_accum", fast}}}}};
          DeviceNode d(c, 3);
          const HostTensor got = d.run(lower_gemm(d.node(), d.in, {d.out}));
          const NumericsBounds b = bounds_for(d);
          const auto r = check_numerics("y", got, d.reference(), b);
          const Float8GemmError model = float8_gemm_error(K, fast);
          if (out == "float32") {
            const HostTensor ref = d.reference();
            double ss = 0, worst = 0;  // sum of y^2; the largest |e| with the drift taken out
            for (size_t i = 0; i < ref.data.size(); ++i) ss += ref.data[i] * ref.data[i];
            for (size_t i = 0; i < ref.data.size(); ++i)
              worst = std::max(worst, std::fabs(got.data[i] - ref.data[i] * (1 + r.bias)));
            const double rms =
                std::sqrt(ss / static_cast<double>(std::max<size_t>(ref.data.size(), 1)));
            const double noise = std::sqrt(std::max(0.0, r.rel_l2 * r.rel_l2 - r.bias * r.bias));
            std::cout << "[ f8model ] " << name << ": noise " << noise << " (model " << model.noise
                      << "), max |e| " << worst / rms << " rms = " << worst / rms / noise
                      << " sigma (model " << model.max_err << "), drift " << r.bias << " +- "
                      << r.bias_se << " (model " << model.drift << ")\n";
            EXPECT_LE(worst / rms, model.max_err / 2) << name;
            RecordProperty(name + "_noise", std::to_string(noise));
            RecordProperty(name + "_drift", std::to_string(r.bias));
            EXPECT_LE(noise, model.noise / 2) << name;
          } else {
            std::cout << "[ f8model ] " << name << ": rel_l2 " << r.rel_l2 << " (bound "
                      << b.max_rel_l2 << "), beyond 1 ulp " << r.beyond_1ulp_share << "\n";
          }
          EXPECT_LE(std::fabs(r.bias), model.drift / 2 + 6 * r.bias_se) << name;
          EXPECT_TRUE(r.pass()) << name << ": " << r.failure();
        }
}

// Rowwise scales run through cuBLASLt's outer-vector mode where the GPU has it (Hopper, cuBLAS
// 12.9+); this reports which path ran (the fallback is correct too, only slower).
TEST(GemmCache, ReportsTheRowwisePath) {
  REQUIRE_GPU();
  Case c{"rowwise",
         "aten._scaled_mm.default",
         {{"inputs",
           {example_input({128, 256}, "float8_e4m3fn"),
            example_input({256, 64}, "float8_e4m3fn", {1, 256}),
            example_input({128, 1}, "float32", {}, kScaleStats),
            example_input({1, 64}, "float32", {}, kScaleStats)}},
          {"args", input_refs(4)},
          {"kwargs", {{"out_dtype", {{"dtype", "bfloat16"}}}}}}};
  DeviceNode d(c, 11);
  const int64_t before = gemm_counters().scaled_fallbacks;
  d.run(lower_gemm(d.node(), d.in, {d.out}));
  const bool fell_back = gemm_counters().scaled_fallbacks > before;
  std::cout << "[ gemm ] rowwise _scaled_mm ran through "
            << (fell_back ? "the float32-GEMM + scale-kernel fallback"
                          : "cuBLASLt outer-vector scaling")
            << "\n";
  RecordProperty("rowwise_path", fell_back ? "fallback" : "outer_vec");
}

}  // namespace

// A fusion's tuned bf16 matmul (prepare_matmul with tune, issue 26): the algorithm is chosen at
// preparation among the heuristic's timed candidates, recorded in a live GemmChoiceLog (with the
// times behind it, the kept one within 3 % of the fastest), cached (a second preparation of the
// same problem times nothing and reports the same choice), and its result passes the same
// verdict as the eager GEMM's.
TEST(GemmTune, ChoosesTimesRecordsAndStaysCorrect) {
  REQUIRE_GPU();
  const Case c{
      "bf16_tuned",
      "aten.mm.default",
      {{"inputs",
        {example_input({1024, 768}, "bfloat16"), example_input({768, 2048}, "bfloat16", {1, 768})}},
       {"args", input_refs(2)}}};
  DeviceNode d(c, 11);
  MatmulOperands m;
  m.a = d.in.at(0);
  m.b = d.in.at(1);
  m.d = d.out;
  m.tune = true;
  const int64_t tuned_before = gemm_counters().tuned_problems;
  std::vector<GemmChoice> log1, log2;
  EagerLaunch launch;
  {
    GemmChoiceLog log;
    launch = prepare_matmul("tuned_mm", m);
    log1 = log.take();
  }
  ASSERT_EQ(log1.size(), 1u);
  const GemmChoice& ch = log1[0];
  std::cout << "[ gemm ] " << describe(ch) << "\n";
  EXPECT_EQ(ch.name, "tuned_mm");
  EXPECT_NE(ch.problem.find("bfloat16 [1024, 768] @ [768, 2048] (b column-major)"),
            std::string::npos)
      << ch.problem;
  EXPECT_FALSE(ch.algo.empty());
  if (ch.candidates > 1) {
    EXPECT_TRUE(ch.tuned);
    EXPECT_EQ(gemm_counters().tuned_problems, tuned_before + 1);
    ASSERT_EQ(ch.candidate_us.size(), static_cast<size_t>(ch.candidates));
    double fastest = 1e30;
    for (double us : ch.candidate_us)
      if (us > 0) fastest = std::min(fastest, us);
    EXPECT_GT(ch.chosen_us(), 0);
    EXPECT_LE(ch.chosen_us(), fastest / 0.97 + 1e-9) << "kept a candidate over 3 % slower";
  }
  {
    GemmChoiceLog log;
    (void)prepare_matmul("tuned_mm_again", m);
    log2 = log.take();
  }
  ASSERT_EQ(log2.size(), 1u);
  EXPECT_EQ(log2[0].name, "tuned_mm_again");
  EXPECT_EQ(log2[0].algo, ch.algo);
  EXPECT_EQ(log2[0].candidate_us, ch.candidate_us) << "the choice was not cached";
  HostTensor got = d.run(launch);
  auto res = check_numerics("y", got, d.reference(), bounds_for(d));
  EXPECT_TRUE(res.pass()) << res.failure();
  const std::vector<uint8_t> bits1 = d.bits();
  d.run(launch);
  EXPECT_EQ(d.bits(), bits1) << "the tuned algorithm is not deterministic run to run";
}
