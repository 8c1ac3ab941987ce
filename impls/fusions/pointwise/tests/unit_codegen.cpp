// pointwise codegen without a GPU: the visiting geometry of broadcast and permuted operands, the
// kernel source's shape (chunked 16-byte accesses where rows allow, single elements otherwise,
// each op the eager table's function and rounding), bad specs refused, and every chain the
// matcher finds in the bundled traces built over fake buffers and compiled by NVRTC for sm_90 (a
// compile error in generated code fails here, not on the GPU host).
#include <gtest/gtest.h>

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
  EXPECT_NE(src.find("replay::pw_kAdd("), std::string::npos);
  EXPECT_NE(src.find("rd_bf16(replay::pw_kTanh("), std::string::npos) << "rounded as bfloat16";
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
