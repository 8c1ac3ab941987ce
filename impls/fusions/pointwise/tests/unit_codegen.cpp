// pointwise codegen without a GPU: the visiting geometry of broadcast and permuted operands, the
// kernel source's shape (chunked 16-byte accesses where rows allow, single elements otherwise,
// each op the eager table's function and rounding), bad specs refused, and every chain the
// matcher finds in the bundled traces built over fake buffers and compiled by NVRTC for sm_90 (a
// compile error in generated code fails here, not on the GPU host).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "impls/fusions/pointwise/params.hpp"
#include "impls/fusions/pointwise/tests/synthetic.hpp"
#include "impls/fusions/registry.hpp"
#include "tests/unit/fake_buffers.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

namespace replay::fusions {
extern const FusionSpec pointwise;
}

using namespace replay;
using namespace replay::pointwise;
using replay::test::FakeBuffers;

namespace {

using I = std::vector<int64_t>;

KernelSpec two_op_spec(int64_t rows, int64_t cols, DType dt, int align) {
  KernelSpec s;
  s.numel = rows * cols;
  Load x;  // [rows, cols] row-major
  x.slot = 0;
  x.dtype = dt;
  x.geo = visit_geometry({rows, cols}, {cols, 1}, {rows, cols}, {cols, 1});
  Load b;  // [cols] broadcast along the rows
  b.slot = 1;
  b.dtype = dt;
  b.geo = visit_geometry({cols}, {1}, {rows, cols}, {cols, 1});
  s.loads = {x, b};
  s.load_align = {align, align};
  Step add;
  add.fn = PointwiseFn::kAdd;
  add.args = {Arg{Arg::kLoad, 0, 0}, Arg{Arg::kLoad, 1, 0}};
  add.dtype = dt;
  Step tanh;
  tanh.fn = PointwiseFn::kTanh;
  tanh.args = {Arg{Arg::kStep, 0, 0}};
  tanh.dtype = dt;
  s.steps = {add, tanh};
  Store y;
  y.step = 1;
  y.slot = 0;
  y.dtype = dt;
  y.geo = visit_geometry({rows, cols}, {cols, 1}, {rows, cols}, {cols, 1});
  s.stores = {y};
  s.store_align = {align};
  return s;
}

}  // namespace

TEST(PointwiseCodegen, VisitGeometryCoalescesBroadcastsAndPermutations) {
  auto eq = [](const Geometry& g, I size, I stride) {
    EXPECT_EQ(g.size, size);
    EXPECT_EQ(g.stride, stride);
  };
  eq(visit_geometry({4, 8}, {8, 1}, {4, 8}, {8, 1}), {32}, {1});       // contiguous: one dim
  eq(visit_geometry({8}, {1}, {4, 8}, {8, 1}), {4, 8}, {0, 1});        // a row vector
  eq(visit_geometry({4, 1}, {1, 1}, {4, 8}, {8, 1}), {4, 8}, {1, 0});  // a column vector
  eq(visit_geometry({}, {}, {4, 8}, {8, 1}), {32}, {0});               // a 0-dim tensor
  eq(visit_geometry({4, 8}, {1, 4}, {4, 8}, {8, 1}), {4, 8}, {1, 4});  // transposed operand
  // visited in the order of a transposed dense layout: a transposed operand is then contiguous
  eq(visit_geometry({4, 8}, {1, 4}, {4, 8}, {1, 4}), {32}, {1});
  eq(visit_geometry({2, 1, 8}, {8, 8, 1}, {2, 3, 8}, {24, 8, 1}), {2, 3, 8}, {8, 0, 1});
  EXPECT_THROW(visit_geometry({3}, {1}, {4, 8}, {8, 1}), std::invalid_argument);
}

TEST(PointwiseCodegen, ChunkedKernelUsesVectorAccessesWhereRowsAllow) {
  const KernelSpec s = two_op_spec(64, 128, DType::kBFloat16, 16);
  ASSERT_TRUE(chunked(s));
  const std::string src = generate(s);
  EXPECT_NE(src.find("extern \"C\" __global__"), std::string::npos);
  EXPECT_NE(src.find(kEntry), std::string::npos);
  EXPECT_NE(src.find("*reinterpret_cast<const uint4*>"), std::string::npos) << "vector load of x";
  EXPECT_NE(src.find("*reinterpret_cast<uint4*>"), std::string::npos) << "vector store of y";
  // x + bias of two bfloat16 loads in pairs; tanh in float32, rounded to bfloat16 in pairs
  EXPECT_NE(src.find("pv0[j] = fma_bf16x2(pl1[j], 0x3f803f80u, pl0[j])"), std::string::npos) << src;
  EXPECT_NE(src.find("pv1[j] = pk_bf16(replay::pw_kTanh(v0[2 * j]"), std::string::npos) << src;
  EXPECT_NE(src.find("make_uint4(pv1[0], pv1[1], pv1[2], pv1[3])"), std::string::npos)
      << "y stored from its pairs";
  EXPECT_NE(src.find("typedef unsigned ix_t"), std::string::npos) << "32-bit indices fit";
  // the same spec at an 8-byte alignment: element accesses, still chunked
  const std::string src8 = generate(two_op_spec(64, 128, DType::kBFloat16, 8));
  EXPECT_EQ(src8.find("*reinterpret_cast<const uint4*>"), std::string::npos);
  // a row of 100 elements: chunks would cross rows, so single elements
  const KernelSpec odd = two_op_spec(64, 100, DType::kFloat32, 16);
  EXPECT_FALSE(chunked(odd));
  EXPECT_NE(generate(odd).find("const float v1 = rd_f32(replay::pw_kTanh("), std::string::npos);
  // equal specs give equal text (the JIT cache's key)
  EXPECT_EQ(generate(s), src);
}

// Which bfloat16 steps run as fma.rn.bf16x2 pairs: a product, sum or difference (alpha 1) of
// bfloat16 values or numbers that are bfloat16 values, x ** 2, a same-dtype cast; not a number
// that bfloat16 cannot hold (0.044715: the eager kernel multiplies by the float), not alpha 2,
// not float32 steps, not the single-element kernel.
TEST(PointwiseCodegen, BFloat16OpsOfBFloat16ValuesRunInPairs) {
  auto one_step = [](PointwiseFn fn, Arg b, double alpha, DType dt) {
    KernelSpec s = two_op_spec(64, 128, dt, 16);
    s.steps[0].fn = fn;
    s.steps[0].args[1] = b;
    s.steps[0].alpha = alpha;
    return generate(s);
  };
  const Arg bias{Arg::kLoad, 1, 0};
  const auto bf = DType::kBFloat16;
  EXPECT_NE(one_step(PointwiseFn::kMul, bias, 1, bf)
                .find("pv0[j] = fma_bf16x2(pl0[j], pl1[j], "
                      "0x80008000u)"),
            std::string::npos);
  EXPECT_NE(one_step(PointwiseFn::kMul, Arg{Arg::kNumber, 0, 0.5}, 1, bf)
                .find("pv0[j] = fma_bf16x2(pl0[j], 0x3f003f00u, 0x80008000u)"),
            std::string::npos);
  EXPECT_NE(one_step(PointwiseFn::kSub, bias, 1, bf)
                .find("pv0[j] = fma_bf16x2(pl1[j], 0xbf80bf80u, pl0[j])"),
            std::string::npos);
  EXPECT_NE(one_step(PointwiseFn::kRsub, Arg{Arg::kNumber, 0, 1.0}, 1, bf)
                .find("pv0[j] = fma_bf16x2(pl0[j], 0xbf80bf80u, 0x3f803f80u)"),
            std::string::npos);
  EXPECT_NE(one_step(PointwiseFn::kPow, Arg{Arg::kNumber, 0, 2.0}, 1, bf)
                .find("pv0[j] = fma_bf16x2(pl0[j], pl0[j], 0x80008000u)"),
            std::string::npos);
  EXPECT_NE(one_step(PointwiseFn::kMul, Arg{Arg::kNumber, 0, 0.044715}, 1, bf)
                .find("pv0[j] = pk_bf16(replay::pw_kMul("),
            std::string::npos)
      << "0.044715 is no bfloat16";
  EXPECT_NE(one_step(PointwiseFn::kPow, Arg{Arg::kNumber, 0, 3.0}, 1, bf)
                .find("pv0[j] = pk_bf16(replay::pw_kPow("),
            std::string::npos)
      << "x * x * x is exact in float32: one rounding";
  EXPECT_NE(one_step(PointwiseFn::kAdd, bias, 2, bf).find("pv0[j] = pk_bf16(replay::pw_kAdd("),
            std::string::npos);
  const std::string f32 = one_step(PointwiseFn::kMul, bias, 1, DType::kFloat32);
  EXPECT_EQ(f32.find("pv0["), std::string::npos) << "float32 steps have no pairs";
  EXPECT_EQ(f32.find("pl0["), std::string::npos);
  KernelSpec odd = two_op_spec(64, 100, bf, 16);
  EXPECT_EQ(generate(odd).find("pv0["), std::string::npos) << "the single-element kernel";
  for (PointwiseFn fn : {PointwiseFn::kMul, PointwiseFn::kAdd, PointwiseFn::kSub})
    EXPECT_NO_THROW(compile_cubin(one_step(fn, bias, 1, bf), 90));
  // a vector bfloat16 load's words are its pairs; a float32 load rounded to bfloat16 (a 0-dim
  // operand) packs its values
  KernelSpec s = two_op_spec(64, 128, bf, 16);
  s.steps[0].fn = PointwiseFn::kMul;
  EXPECT_NE(generate(s).find("pl1[j] = w[j];"), std::string::npos);
  s.loads[1].dtype = DType::kFloat32;
  s.loads[1].round = true;
  s.loads[1].round_to = bf;
  const std::string src = generate(s);
  EXPECT_NE(src.find("pl1[j] = pk_bf16(l1[2 * j], l1[2 * j + 1])"), std::string::npos) << src;
  EXPECT_NE(src.find("pv0[j] = fma_bf16x2(pl0[j], pl1[j], 0x80008000u)"), std::string::npos);
  EXPECT_NO_THROW(compile_cubin(src, 90));
}

// The claim pair_expr rests on, checked on the host without float32 in the exact path: for
// bfloat16 a and b, rounding the float32 product, sum and difference to bfloat16 (what the eager
// kernel stores) gives the correctly rounded bfloat16 result (the exact value, in double, rounded
// once to nearest even, subnormals included). All 65536 a (NaN and inf left out) against 96
// values of b spread over the binades, and a and b both small positive values (products from
// 2^-142 up: the subnormals and the flushes to zero).
TEST(PointwiseCodegen, Float32RoundedToBFloat16IsTheCorrectlyRoundedBFloat16Op) {
  auto bf = [](uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  auto rn_f32 = [](float f) {  // cvt.rn.bf16.f32 of a finite float
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  };
  auto rn_exact = [&](double x) -> uint16_t {  // x rounded once to bfloat16, to nearest even
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double m = std::fabs(x);
    if (m == 0) return sign;
    const int e = std::max(std::ilogb(m), -126);
    const double ulp = std::ldexp(1.0, e - 7);
    const double q = std::nearbyint(m / ulp);  // exact scaling; round half to even
    const double r = q * ulp;
    if (r >= std::ldexp(2.0, 127)) return sign | 0x7f80;  // past the largest finite: inf
    float f = static_cast<float>(r);                      // exactly a bfloat16 value
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>(sign | ((u >> 16) & 0x7fff));
  };
  std::vector<uint16_t> bs;
  for (int k = 0; k < 96; ++k) bs.push_back(static_cast<uint16_t>((k * 0x2ab5 + 0x1f3) & 0xffff));
  for (uint16_t t : {0x0001, 0x0080, 0x007f, 0x3f80, 0x3f81, 0xbf80, 0x0000, 0x8000})
    bs.push_back(t);
  int64_t checked = 0;
  auto same = [&](uint16_t a, uint16_t b) {
    const float fa = bf(a), fb = bf(b);
    if (!std::isfinite(fa) || !std::isfinite(fb)) return;
    const double da = fa, db = fb;
    // the product of two 8-bit significands is exact in double; the sum and difference are
    // when the exponents are within 40 (the others: the smaller is below half an ulp of both)
    const float pm = fa * fb, ps = fa + fb, pd = fa - fb;
    if (std::isfinite(pm)) EXPECT_EQ(rn_f32(pm), rn_exact(da * db)) << a << " * " << b;
    if (std::abs(std::ilogb(da == 0 ? 1 : da) - std::ilogb(db == 0 ? 1 : db)) < 40) {
      if (std::isfinite(ps)) EXPECT_EQ(rn_f32(ps), rn_exact(da + db)) << a << " + " << b;
      if (std::isfinite(pd)) EXPECT_EQ(rn_f32(pd), rn_exact(da - db)) << a << " - " << b;
    }
    ++checked;
  };
  for (uint32_t a = 0; a < 65536; ++a)
    for (uint16_t b : bs) same(static_cast<uint16_t>(a), b);
  for (uint32_t a = 0; a < 0x2000; a += 7)  // in [2^-71, 2^-7): products down to the subnormals
    for (uint32_t b = 0; b < 0x2000; b += 13) same(static_cast<uint16_t>(a + 0x1c00), b + 0x1c00);
  EXPECT_GT(checked, 6000000);
}

TEST(PointwiseCodegen, RefusesSpecsThatBreakTheirInvariants) {
  KernelSpec s = two_op_spec(4, 8, DType::kFloat32, 16);
  s.steps[0].args[1] = Arg{Arg::kStep, 1, 0};  // a later step
  EXPECT_THROW(generate(s), std::invalid_argument);
  s = two_op_spec(4, 8, DType::kFloat32, 16);
  s.steps[1].dtype = DType::kFloat64;
  EXPECT_THROW(generate(s), std::invalid_argument);
  s = two_op_spec(4, 8, DType::kFloat32, 16);
  s.loads[1].geo.size = {3};  // not the iteration space
  s.loads[1].geo.stride = {1};
  EXPECT_THROW(generate(s), std::invalid_argument);
}

// The column-sum form: a 2-D grid of 32 chunks by 8 row lanes, each sum's float32 accumulators
// added in row order, a fixed tree over the lanes in shared memory, the partials written by lane
// 0; it needs the chunked form and a column count of chunks that divides the elements.
TEST(PointwiseCodegen, ColumnSumFormAccumulatesInRowOrderAndReducesByAFixedTree) {
  KernelSpec s = two_op_spec(64, 128, DType::kBFloat16, 16);
  s.sums = {ColSum{1, 1}};
  s.sum_cols = 128;
  const std::string src = generate(s);
  EXPECT_NE(src.find("__shared__ float red[2048]"), std::string::npos) << src;
  EXPECT_NE(src.find("acc0[e] = __fadd_rn(acc0[e], v1[e])"), std::string::npos);
  EXPECT_NE(src.find("for (unsigned h = 4u; h > 0u; h /= 2u)"), std::string::npos);
  EXPECT_NE(src.find("static_cast<float*>(a.out[1]) + ix_t(blockIdx.y) * 128u"), std::string::npos);
  EXPECT_NE(src.find("*reinterpret_cast<uint4*>"), std::string::npos) << "vector store of y";
  EXPECT_NO_THROW(compile_cubin(src, 90));
  KernelSpec sm = s;  // the accumulators in shared memory, 8 blocks an SM asked for
  sm.sum_acc_smem = true;
  sm.sum_min_blocks = 8;
  const std::string src_sm = generate(sm);
  EXPECT_NE(src_sm.find("__launch_bounds__(256, 8)"), std::string::npos);
  EXPECT_NE(src_sm.find("red[(0 * 8 + e) * 256 + threadIdx.x] = __fadd_rn(red[(0 * 8 + e) * 256 "
                        "+ threadIdx.x], v1[e])"),
            std::string::npos)
      << src_sm;
  EXPECT_NO_THROW(compile_cubin(src_sm, 90));
  KernelSpec bad = s;
  bad.sum_cols = 100;  // not chunks of 8
  EXPECT_THROW(generate(bad), std::invalid_argument);
  bad = s;
  bad.sums[0].step = 2;  // no such step
  EXPECT_THROW(generate(bad), std::invalid_argument);
  bad = two_op_spec(64, 100, DType::kFloat32, 16);  // not chunked
  bad.sums = {ColSum{1, 1}};
  bad.sum_cols = 6400;
  EXPECT_THROW(generate(bad), std::invalid_argument);
}

TEST(PointwiseCodegen, GeneratedKernelCompilesWithNvrtc) {
  ASSERT_EQ(nvrtc_status(), "");
  for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kBool}) {
    KernelSpec s = two_op_spec(16, 64, dt == DType::kBool ? DType::kFloat32 : dt, 16);
    if (dt == DType::kBool) s.stores[0].dtype = s.steps[1].dtype = DType::kBool;
    const std::vector<char> cubin = compile_cubin(generate(s), 90);
    EXPECT_GT(cubin.size(), 1000u) << dtype_name(dt);
  }
  EXPECT_THROW(compile_cubin("this is not CUDA", 90), std::runtime_error);
}

// Every elementwise row of the eager table (pw_math.cuh) computes the same instructions with and
// without FMA contraction: the eager kernels are built by nvcc with its default --fmad=true, the
// generated ones with --fmad=false (so that no two ops of a chain contract), and a row whose
// expression contracted under one and not the other (1 / (1 + exp(-x)), before its add was
// written pw_add_rn) would give other bits. Compared as the PTX's opcode sequence, the rounding
// modifiers --fmad=false spells out (.rn on mul / add / sub) removed.
TEST(PointwiseCodegen, TableRowsDoNotDependOnContraction) {
  ASSERT_EQ(nvrtc_status(), "");
  auto opcodes = [](const std::string& ptx) {
    std::vector<std::string> ops;
    std::istringstream in(ptx);
    std::string line;
    bool body = false;
    while (std::getline(in, line)) {
      if (line.find('{') != std::string::npos) body = true;
      if (!body) continue;
      std::istringstream w(line);
      std::string op;
      w >> op;
      if (op.empty() || op[0] == '/' || op[0] == '$' || op[0] == '.' || op == "{" || op == "}")
        continue;
      for (const char* m : {"mul.rn.", "add.rn.", "sub.rn."}) {
        const std::string from(m);
        if (op.rfind(from, 0) == 0) op = from.substr(0, 4) + op.substr(from.size());
      }
      ops.push_back(op);
    }
    return ops;
  };
  for (int f = 0; f < static_cast<int>(PointwiseFn::kCount); ++f) {
    const auto fn = static_cast<PointwiseFn>(f);
    if (fn == PointwiseFn::kFill || fn == PointwiseFn::kIota || fn == PointwiseFn::kDropout)
      continue;  // never members
    KernelSpec s;
    s.numel = 1024;
    Step st;
    st.fn = fn;
    for (int k = 0; k < 3; ++k) {
      Load l;
      l.slot = k;
      l.geo = visit_geometry({1024}, {1}, {1024}, {1});
      s.loads.push_back(l);
      s.load_align.push_back(16);
      st.args.push_back(Arg{Arg::kLoad, k, 0});
    }
    s.steps = {st};
    Store y;
    y.geo = visit_geometry({1024}, {1}, {1024}, {1});
    s.stores = {y};
    s.store_align = {16};
    const std::string src = generate(s);
    EXPECT_EQ(opcodes(compile_ptx(src, 90, true)), opcodes(compile_ptx(src, 90, false)))
        << "row " << f << " computes differently under FMA contraction";
  }
}

// The GPU test's synthetic chains (tests/synthetic.hpp) plan as one pointwise region each, bind
// over fake buffers and compile; the transposed one in its dense layout, the odd-width ones on
// the single-element kernel.
TEST(PointwiseCodegen, TheGpuTestsSyntheticChainsPlanBindAndCompile) {
  ASSERT_EQ(nvrtc_status(), "");
  struct Case {
    const char* name;
    Graph g;
    bool chunked, linear;
  };
  Case cs[] = {{"gelu 256x1024", test::gelu_chain(256, 1024), true, true},
               {"gelu 37x100", test::gelu_chain(37, 100), false, true},
               {"silu f32", test::silu_f32(), true, true},
               {"transposed", test::transposed_chain(), true, false},
               {"sliced", test::sliced_input(), false, true}};
  for (Case& c : cs) {
    const Plan p = make_plan(c.g, fusion_registry());
    std::vector<const Region*> pw;
    for (const Region& r : p.regions)
      if (r.fusion == &fusions::pointwise) pw.push_back(&r);
    ASSERT_EQ(pw.size(), 1u) << c.name;
    EXPECT_EQ(std::any_cast<const Params&>(pw[0]->params).linear, c.linear) << c.name;
    FakeBuffers fb(c.g);
    KernelArgs args;
    std::string why;
    const KernelSpec spec = chain_spec(c.g, *pw[0], fb, args, why);
    ASSERT_EQ(why, "") << c.name;
    EXPECT_EQ(chunked(spec), c.chunked) << c.name;
    EXPECT_NO_THROW(compile_cubin(generate(spec), 90)) << c.name;
  }
}

// Every pointwise region of every bundled trace: built over fake buffers (the layouts the GPU
// program would give), its kernel generated and compiled.
TEST(PointwiseCodegen, EveryBundledChainCompiles) {
  ASSERT_EQ(nvrtc_status(), "");
  int compiled = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(REPLAY_TRACES_DIR)) {
    if (e.path().extension() != ".json" || e.path().string().find("/capture/") != std::string::npos)
      continue;
    Graph g = load_trace(e.path().string(), cut_options());
    Plan p = make_plan(g, fusion_registry());
    for (const Region& r : p.regions) {
      if (r.fusion != &fusions::pointwise) continue;
      FakeBuffers fb(g);
      KernelArgs args;
      std::string why;
      const KernelSpec spec = chain_spec(g, r, fb, args, why);
      ASSERT_EQ(why, "") << e.path();
      EXPECT_NO_THROW(compile_cubin(generate(spec), 90)) << e.path();
      ++compiled;
    }
  }
  EXPECT_GT(compiled, 10);
}
