// fp8_quantize on the GPU: both variants on every bundled float8 linear (tensorwise and rowwise,
// forward and backward, both shapes) and on synthetic groups (every granularity, both float8
// dtypes, float16/float32 sources, shapes that are not multiples of the tiles, column-major
// copies): every value the region writes bit-identical to the eager executor's, and the graph's
// outputs passing the harness's numerics check against the float64 reference (small shapes).
// Mutants that must fail both: rowwise scales swapped between rows, a tensorwise scale used for a
// rowwise quantization, the reciprocal dropped (the scale written instead), e5m2 written where
// e4m3 was asked, the amax of x instead of |x|, a power-of-two scale left unrounded. (The swapped
// scales run the two-pass kernels even on a rowwise-only group: the one-pass kernel computes each
// row's scale where it casts the row, so it has no index to swap; the other mutants reach it.)
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>

#include "harness/replay/variants.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/fp8_quantize/params.hpp"
#include "impls/fusions/fp8_quantize/tests/model.hpp"
#include "impls/fusions/fp8_quantize/tests/synthetic.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/op.hpp"

namespace replay::fusions {
extern const FusionSpec fp8_quantize;
}

using namespace replay;
using namespace replay::test;
using fp8_quantize::Granularity;
using fp8_quantize::Params;

namespace {

struct GpuCase {
  std::string name;
  std::function<Graph()> load;
  bool reference = true;  ///< small enough for the float64 reference (its GEMMs) in a test
};

std::vector<GpuCase> cases() {
  std::vector<GpuCase> out;
  for (const char* kind : {"tensorwise", "rowwise"})
    for (const char* phase : {"fwd", "bwd"})
      for (const char* shape : {"2x8x64x32", "2x4096x4096x4096"}) {
        const std::string t =
            std::string("float8_linear_") + kind + "_train_" + phase + "_" + shape;
        out.push_back({t, [t] { return load_trace(trace_path(t)); }, shape[2] == '8'});
      }
  // The byog captures (torchao's recipes through the backend) at their small shapes, and the
  // 2-D forms at [8192, 4096] x 4096 (bit-identity only: no float64 reference of their GEMMs).
  const std::filesystem::path byog = std::filesystem::path(REPLAY_TRACES_DIR) / "byog" / "float8";
  std::vector<std::string> names;
  if (std::filesystem::is_directory(byog))
    for (const auto& e : std::filesystem::directory_iterator(byog))
      if (e.path().extension() == ".json" && e.path().stem().string().rfind("float8_", 0) == 0)
        names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    const bool small =
        n.find("_2x8x64x32") != std::string::npos || n.find("_16x64x32") != std::string::npos;
    const bool big_2d = n.find("_2d_mincut_") != std::string::npos &&
                        n.find("_8192x4096x4096") != std::string::npos;
    if (!small && !big_2d) continue;
    const std::string t = "byog/float8/" + n;
    out.push_back({t, [t] { return load_trace(trace_path(t)); }, small});
  }
  auto synth = [&](std::string name, QuantForm f) {
    out.push_back({name, [f, name] { return parse_trace(quant_trace(f, name), name); }, true});
  };
  QuantForm group;  // four quantizations of one tensor, two column-major copies
  group.shape = {300, 1000};
  group.quants = {QuantSpec{}, QuantSpec{}, QuantSpec{}, QuantSpec{}};
  group.quants[0].gran = "rowwise";
  group.quants[0].f32_abs = true;
  group.quants[1].gran = "columnwise";
  group.quants[1].f32_abs = true;
  group.quants[1].row_major_out = false;
  group.quants[1].col_major_out = true;
  group.quants[2].gran = "tensorwise_max";
  group.quants[2].fp8 = "float8_e5m2";
  group.quants[2].col_major_out = true;
  group.quants[2].amax_out = true;
  group.quants[3].gran = "rowwise";
  group.quants[3].fp8 = "float8_e5m2";
  synth("synthetic_group_300x1000", group);
  for (const char* dt : {"float16", "float32"}) {
    QuantForm f = group;
    f.dtype = dt;
    f.shape = {130, 264};
    synth(std::string("synthetic_group_130x264_") + dt, f);
  }
  QuantForm odd = group;  // columns not a multiple of 8: the element-wise paths
  odd.shape = {37, 50};
  synth("synthetic_group_37x50", odd);
  QuantForm rowwise;  // rowwise only, row-major: the optimized variant's one-pass kernel
  rowwise.shape = {256, 4096};
  rowwise.quants = {QuantSpec{}, QuantSpec{}};
  rowwise.quants[0].gran = rowwise.quants[1].gran = "rowwise";
  rowwise.quants[0].f32_abs = true;
  rowwise.quants[1].fp8 = "float8_e5m2";
  rowwise.quants[1].amax_out = true;
  synth("synthetic_rowwise_only_256x4096", rowwise);
  rowwise.shape = {33, 50};
  synth("synthetic_rowwise_only_33x50", rowwise);
  // Each row width the one-pass kernel dispatches on (128 to 512 threads, 1 to 8 chunks of 8 per
  // thread, odd tails), and rows wider than kRowwiseMaxCols (the streaming kernel).
  for (int64_t cols : {1000, 2000, 6000, 14336, 20000, 40000}) {
    rowwise.shape = {cols > 20000 ? 5 : 37, cols};
    synth("synthetic_rowwise_only_" + std::to_string(rowwise.shape[0]) + "x" + std::to_string(cols),
          rowwise);
  }
  QuantForm tiles = group;  // full 128 x 128 cast tiles and a partial one on each side
  tiles.quants.resize(3);
  tiles.shape = {384, 640};
  synth("synthetic_group_384x640", tiles);
  tiles.shape = {200, 136};
  synth("synthetic_group_200x136", tiles);
  // The specialized cast kernel's groups (cast_fast_plan) with partial tiles on both sides: a
  // rowwise row-major quantization beside a columnwise column-major one, and a tensorwise one
  // with both copies.
  QuantForm pair;
  pair.shape = {200, 136};
  pair.quants = {QuantSpec{}, QuantSpec{}};
  pair.quants[0].gran = "rowwise";
  pair.quants[0].f32_abs = true;
  pair.quants[1].gran = "columnwise";
  pair.quants[1].f32_abs = true;
  pair.quants[1].row_major_out = false;
  pair.quants[1].col_major_out = true;
  synth("synthetic_pair_rowwise_columnwise_200x136", pair);
  QuantForm tensorwise;
  tensorwise.shape = {300, 264};
  tensorwise.quants = {QuantSpec{}};
  tensorwise.quants[0].gran = "tensorwise_max";
  tensorwise.quants[0].col_major_out = true;
  tensorwise.quants[0].amax_out = true;
  synth("synthetic_tensorwise_both_copies_300x264", tensorwise);
  // The other source dtypes through the same kernel.
  for (const char* dt : {"float16", "float32"}) {
    pair.dtype = tensorwise.dtype = dt;
    synth(std::string("synthetic_pair_rowwise_columnwise_200x136_") + dt, pair);
    synth(std::string("synthetic_tensorwise_both_copies_300x264_") + dt, tensorwise);
  }
  // Power-of-two scales (torchao's round_scales_to_power_of_2): the rowwise one-pass kernel, the
  // specialized cast's pair and the generic group (exp2 and pow(2, .) forms).
  QuantForm pow2_rows = rowwise;
  pow2_rows.shape = {256, 4096};
  for (auto& q : pow2_rows.quants) q.pow2 = true;
  synth("synthetic_pow2_rowwise_only_256x4096", pow2_rows);
  QuantForm pow2_pair = pair;
  pow2_pair.dtype = "bfloat16";
  for (auto& q : pow2_pair.quants) q.pow2 = true;
  synth("synthetic_pow2_pair_rowwise_columnwise_200x136", pow2_pair);
  QuantForm pow2_group = group;
  for (auto& q : pow2_group.quants) q.pow2 = true;
  pow2_group.quants[2].pow2_pow = true;
  synth("synthetic_pow2_group_300x1000", pow2_group);
  QuantForm rank3;
  rank3.shape = {2, 40, 96};
  rank3.quants = {QuantSpec{}, QuantSpec{}};
  rank3.quants[0].gran = "rowwise";
  rank3.quants[1].fp8 = "float8_e5m2";
  synth("synthetic_rank3_2x40x96", rank3);
  return out;
}

// Values the fp8_quantize regions write.
std::vector<int> region_outputs(const Plan& plan) {
  return fusion_region_outputs(plan, "fp8_quantize");
}

// The first value of `vals` whose bits differ between the two programs ("" when none).
std::string first_difference(const Graph& g, const GpuProgram& a, const GpuProgram& b,
                             const std::vector<int>& vals) {
  return first_bit_difference(g, a, b, vals);
}

class Fp8QuantizeGpu : public ::testing::TestWithParam<std::tuple<size_t, std::string>> {};

}  // namespace

// "optimized_generic_cast": the optimized variant with the generic cast kernel for every group
// (fp8_quantize::set_cast_generic); "optimized_warp_rows": with the rowwise one-pass groups in
// the warp-per-row register kernel instead of the ring kernel (set_rowwise_ring(false)). The ring
// kernel's geometries, float16 rows and the amax of x: Fp8QuantizeRingGpu below.
TEST_P(Fp8QuantizeGpu, BitIdenticalToEagerAndPassesNumerics) {
  REQUIRE_GPU();
  const auto& [ci, param] = GetParam();
  const GpuCase c = cases()[ci];
  Graph g = c.load();
  const Plan plan = make_plan(g, fusion_registry());
  const std::vector<int> outs = region_outputs(plan);
  ASSERT_FALSE(outs.empty()) << c.name << ": no fp8_quantize region";
  const bool generic = param == "optimized_generic_cast";
  const bool warp_rows = param == "optimized_warp_rows";
  const std::string variant = generic || warp_rows ? "optimized" : param;
  struct KernelChoice {  // restores the process-wide choices however the test ends
    bool cast_before = fp8_quantize::cast_generic();
    bool ring_before = fp8_quantize::rowwise_ring_enabled();
    KernelChoice(bool generic, bool ring) {
      fp8_quantize::set_cast_generic(generic);
      fp8_quantize::set_rowwise_ring(ring);
    }
    ~KernelChoice() {
      fp8_quantize::set_cast_generic(cast_before);
      fp8_quantize::set_rowwise_ring(ring_before);
    }
  } choice(generic, !warp_rows);
  for (uint64_t seed : {41u, 42u, 43u}) {
    expect_bit_identical_to_eager(g, plan, variant, outs, seed, c.reference, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Traces, Fp8QuantizeGpu,
                         ::testing::Combine(::testing::Range<size_t>(0, cases().size()),
                                            ::testing::Values("baseline", "optimized",
                                                              "optimized_generic_cast",
                                                              "optimized_warp_rows")),
                         [](const auto& info) {
                           return test_name(cases()[std::get<0>(info.param)].name + "_" +
                                            std::get<1>(info.param));
                         });

// --- the ring kernel's geometries ------------------------------------------------------------

namespace {

// The ring switch and the geometry hook as the test found them (the default), on every exit.
struct RingSettingsRestored {
  bool ring = fp8_quantize::rowwise_ring_enabled();
  ~RingSettingsRestored() {
    fp8_quantize::set_rowwise_ring(ring);
    fp8_quantize::set_rowwise_ring_geometry({});
  }
};

// Rowwise-only groups the ring kernel takes (16-bit rows of <= 4096 columns in 16-byte vectors):
// rows not a multiple of any geometry's warps or slots, float16 as well as bfloat16, and an amax
// of x itself (no abs) beside one of |x|; every chunk count per lane (kV 1, 2, 4, 8, 16), rows
// that end inside a lane's last chunk round (the lanes past the end load the row's last chunk
// again and must not store it), torchao's one |x| quantization alone, and more rows than the
// default geometry's slots (every warp refills them).
std::vector<std::pair<std::string, QuantForm>> ring_forms() {
  std::vector<std::pair<std::string, QuantForm>> out;
  QuantForm f;
  f.quants = {QuantSpec{}, QuantSpec{}};
  f.quants[0].gran = f.quants[1].gran = "rowwise";
  f.quants[0].f32_abs = true;
  f.quants[1].fp8 = "float8_e5m2";
  f.quants[1].amax_out = true;
  f.shape = {67, 4096};
  out.push_back({"ring_rowwise_67x4096", f});
  f.shape = {1001, 512};
  out.push_back({"ring_rowwise_1001x512", f});
  f.shape = {259, 4096};
  f.dtype = "float16";
  out.push_back({"ring_rowwise_259x4096_float16", f});
  f.dtype = "bfloat16";
  f.shape = {130, 264};
  f.quants[0].f32_abs = false;
  f.quants[0].no_abs = true;  // the amax of x: the kernel's key path for x
  out.push_back({"ring_rowwise_x_and_abs_130x264", f});
  QuantForm one;  // torchao's recipe: one rowwise |x| quantization
  one.quants = {QuantSpec{}};
  one.quants[0].gran = "rowwise";
  one.shape = {2500, 2040};  // kV 8, lane 31's last chunk past the row
  out.push_back({"ring_rowwise_abs_only_2500x2040", one});
  one.shape = {700, 200};  // kV 1, lanes 25-31 past the row
  out.push_back({"ring_rowwise_abs_only_700x200", one});
  // More rows than the default grid's warps x its 8 slots (132 SMs x 16 warps x 8 at 512
  // columns): every warp refills its slots.
  one.shape = {17000, 512};
  out.push_back({"ring_rowwise_abs_only_17000x512", one});
  one.shape = {1003, 1000};  // kV 4, lanes 29-31's last chunk past the row
  one.dtype = "float16";
  out.push_back({"ring_rowwise_abs_only_1003x1000_float16", one});
  return out;
}

}  // namespace

// Every ring geometry (warps x slots, the grid capped so that each warp walks many rows: every
// slot refilled, every barrier phase flipped, rows per warp not a multiple of the slots) writes
// eager's bits, and the ring kernel is what ran (its launch count rises; with the ring switched
// off it does not, and the warp kernel's bits match too). 1 x 1 on one CTA waits on a refilled
// slot for every row: a wrong parity or a missing wait reads a stale row there.
TEST(Fp8QuantizeRingGpu, EveryGeometryBitIdenticalToEager) {
  REQUIRE_GPU();
  const RingSettingsRestored restore;
  // {0, 0, 0}: the default geometry (16 warps, slots for 8 KB of rows each), uncapped.
  const fp8_quantize::RingGeometry geometries[] = {{1, 1, 1},  {2, 2, 2},  {3, 5, 1}, {16, 1, 3},
                                                   {16, 1, 1}, {16, 1, 0}, {8, 3, 0}, {0, 0, 0}};
  for (const auto& [name, form] : ring_forms()) {
    Graph g = parse_trace(quant_trace(form, name), name);
    const Plan plan = make_plan(g, fusion_registry());
    const std::vector<int> outs = region_outputs(plan);
    ASSERT_FALSE(outs.empty()) << name << ": no fp8_quantize region";
    fp8_quantize::set_rowwise_ring(true);
    for (const auto& geo : geometries) {
      fp8_quantize::set_rowwise_ring_geometry(geo);
      const uint64_t before = fp8_quantize::rowwise_ring_launches();
      const std::string label =
          name + " ring " +
          (geo.warps ? std::to_string(geo.warps) + "x" + std::to_string(geo.stages) + " ctas " +
                           std::to_string(geo.max_ctas)
                     : std::string("default"));
      expect_bit_identical_to_eager(g, plan, "optimized", outs, 7, false, label);
      EXPECT_GT(fp8_quantize::rowwise_ring_launches(), before)
          << label << ": the ring kernel did not run";
    }
    fp8_quantize::set_rowwise_ring_geometry({});
    fp8_quantize::set_rowwise_ring(false);
    const uint64_t before = fp8_quantize::rowwise_ring_launches();
    expect_bit_identical_to_eager(g, plan, "optimized", outs, 7, true, name + " warp kernel");
    EXPECT_EQ(fp8_quantize::rowwise_ring_launches(), before) << name << ": ring switched off ran";
  }
}

namespace {

// One rowwise |x| quantization of a bfloat16 x [rows, cols] by launch_rowwise, ring and warp
// kernels, into float8 rows `rs` bytes apart starting `offset` bytes into the buffer, against the
// host model: every byte of every row, the scales, and the gaps between and after the rows (and
// the bytes before the first) untouched.
void expect_dest_rows_match_the_host_model(int64_t rows, int64_t cols, int64_t rs, int offset) {
  const std::string where = std::to_string(rows) + "x" + std::to_string(cols) + " rs " +
                            std::to_string(rs) + " offset " + std::to_string(offset);
  std::vector<uint16_t> xb(static_cast<size_t>(rows * cols));
  std::vector<float> xf(xb.size());
  uint32_t state = 12345u;
  for (size_t i = 0; i < xb.size(); ++i) {  // bfloat16 bits: the top half of a float's
    state = state * 1664525u + 1013904223u;
    const float v = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 8.0f * (1 + i % 7);
    uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    xb[i] = static_cast<uint16_t>(bits >> 16);
    bits = static_cast<uint32_t>(xb[i]) << 16;
    std::memcpy(&xf[i], &bits, 4);
  }
  fp8_quantize::Quantization mq;
  mq.granularity = Granularity::kRowwise;
  const test::QuantModel want = test::model_quantize(xf, rows, cols, mq);
  const size_t qbytes = static_cast<size_t>(offset + rows * rs + 8);
  void *dx = nullptr, *dq = nullptr, *ds = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, xb.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dq, qbytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ds, static_cast<size_t>(rows) * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  fp8_quantize::QuantizeArgs a;
  a.x = dx;
  a.x_dtype = DType::kBFloat16;
  a.rows = rows;
  a.cols = cols;
  a.n_quants = 1;
  a.q[0].gran = Granularity::kRowwise;
  a.q[0].dests[0] = {static_cast<uint8_t*>(dq) + offset, rs, 1};
  a.q[0].n_dests = 1;
  a.q[0].scales[0] = {ds, 1, DType::kFloat32};
  a.q[0].n_scales = 1;
  ASSERT_TRUE(fp8_quantize::rowwise_one_pass(a, 1u));
  for (bool ring : {true, false}) {
    const std::string k = where + (ring ? ", ring kernel" : ", warp kernel");
    fp8_quantize::set_rowwise_ring(ring);
    const uint64_t before = fp8_quantize::rowwise_ring_launches();
    ASSERT_EQ(cudaMemset(dq, 0xAB, qbytes), cudaSuccess);
    fp8_quantize::launch_rowwise(a, 1u, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(fp8_quantize::rowwise_ring_launches() > before, ring) << k;
    std::vector<uint8_t> q(qbytes);
    std::vector<float> sc(static_cast<size_t>(rows));
    ASSERT_EQ(cudaMemcpy(q.data(), dq, q.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(sc.data(), ds, sc.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    int bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_EQ(sc[r], want.scale[r]) << k << ": row " << r << " scale";
      for (int64_t c = 0; c < cols && bad < 5; ++c)
        if (q[offset + r * rs + c] != want.q[r * cols + c]) {
          ++bad;
          ADD_FAILURE() << k << ": row " << r << " col " << c << ": " << int(q[offset + r * rs + c])
                        << ", model " << int(want.q[r * cols + c]);
        }
      for (int64_t c = cols; c < rs && bad < 5; ++c)  // the gaps stay untouched
        if (q[offset + r * rs + c] != 0xAB) {
          ++bad;
          ADD_FAILURE() << k << ": row " << r << " gap byte " << c << " written";
        }
    }
    for (int b = 0; b < offset; ++b)
      EXPECT_EQ(q[b], 0xAB) << k << ": byte " << b << " before row 0";
    for (size_t b = offset + rows * rs; b < qbytes; ++b)
      EXPECT_EQ(q[b], 0xAB) << k << ": byte " << b << " after the last row";
  }
  cudaFree(dx);
  cudaFree(dq);
  cudaFree(ds);
}

}  // namespace

// The one-pass rowwise kernels with float8 rows that are not 8-byte aligned (no capture has them:
// the byte-store path): launch_rowwise on a hand-built group, dest rows cols + 3 bytes apart from
// an odd base, against the host model (model.hpp), the ring kernel and the warp kernel in turn.
TEST(Fp8QuantizeRingGpu, UnalignedDestRowsMatchTheHostModel) {
  REQUIRE_GPU();
  const RingSettingsRestored restore;
  expect_dest_rows_match_the_host_model(37, 1024, 1027, 1);
}

// 8-byte aligned dest rows with gaps between them, rows that end inside the lanes' last chunk
// round (kV 4: 1000 columns; kV 1: 200): the lanes past a row's end load its last chunk again,
// and a store of it would land in the gap.
TEST(Fp8QuantizeRingGpu, AlignedDestRowsWithGapsMatchTheHostModel) {
  REQUIRE_GPU();
  const RingSettingsRestored restore;
  expect_dest_rows_match_the_host_model(37, 1000, 1008, 0);
  expect_dest_rows_match_the_host_model(41, 200, 216, 8);
}

// --- mutants ----------------------------------------------------------------------------------

namespace {

struct Mutant {
  const char* name;
  bool (*applies)(const Params&);
  void (*mutate)(Params&);
  /// Which of the values the region writes the mutant gets wrong: the float8 tensors, or the
  /// reciprocals of the scales.
  bool wrong_float8 = true;
  /// The mutant is wrong only on inputs where it shows (the amax of x equals the amax of |x|
  /// when the largest magnitude is positive): some seed must fail, not every one.
  bool some_seed = false;
};

bool has(const Params& p, Granularity g) {
  for (const auto& q : p.quants)
    if (q.granularity == g) return true;
  return false;
}

const Mutant kMutants[] = {
    {"swapped_rowwise_scales", [](const Params& p) { return has(p, Granularity::kRowwise); },
     [](Params& p) { p.row_scale_xor = 1; }},
    {"tensorwise_scale_for_rowwise", [](const Params& p) { return has(p, Granularity::kRowwise); },
     [](Params& p) {
       // its per-row scale outputs are then left unwritten: the float8 tensors must show it
       for (auto& q : p.quants)
         if (q.granularity == Granularity::kRowwise) {
           q.granularity = Granularity::kTensorwise;
           q.scale_outs.clear();
           q.recip_outs.clear();
           q.amax_outs.clear();
         }
     }},
    {"dropped_reciprocal",
     [](const Params& p) {
       for (const auto& q : p.quants)
         if (!q.recip_outs.empty()) return true;
       return false;
     },
     [](Params& p) {
       for (auto& q : p.quants) {
         q.scale_outs.insert(q.scale_outs.end(), q.recip_outs.begin(), q.recip_outs.end());
         q.recip_outs.clear();
       }
     },
     false},
    {"e5m2_for_e4m3",
     [](const Params& p) {
       for (const auto& q : p.quants)
         if (q.fp8 == DType::kFloat8E4M3) return true;
       return false;
     },
     [](Params& p) {  // e5m2's recipe (its max, its saturation) where e4m3's was asked
       for (auto& q : p.quants) {
         q.fp8 = DType::kFloat8E5M2;
         q.fp8_max = 57344;
       }
     }},
    {"amax_of_x_not_abs",
     [](const Params& p) {  // a given amax is read, not computed: nothing to get wrong there
       for (const auto& q : p.quants)
         if (!q.given) return true;
       return false;
     },
     [](Params& p) {
       for (auto& q : p.quants) q.abs = false;
     },
     true, true},
    {"pow2_rounding_dropped",  // the scale as computed, not rounded down to a power of two
     [](const Params& p) {
       for (const auto& q : p.quants)
         if (q.pow2) return true;
       return false;
     },
     [](Params& p) {
       for (auto& q : p.quants) q.pow2 = false;
     }},
};

const Mutant* g_mutant = nullptr;

Binding mutant_bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  Region m = r;
  auto p = std::any_cast<Params>(r.params);
  g_mutant->mutate(p);
  m.params = p;
  return fp8_quantize::bind(g, m, v, ctx);
}

class Fp8QuantizeMutant : public ::testing::TestWithParam<std::tuple<size_t, size_t, std::string>> {
};

}  // namespace

TEST_P(Fp8QuantizeMutant, Fails) {
  REQUIRE_GPU();
  const auto& [mi, ci, variant] = GetParam();
  g_mutant = &kMutants[mi];
  const GpuCase c = cases()[ci];
  Graph g = c.load();
  FusionSpec spec = fusions::fp8_quantize;
  spec.bind = mutant_bind;
  const FusionSpec* fusions[] = {&spec};
  const Plan plan = make_plan(g, fusions);
  ASSERT_FALSE(plan.regions.empty());
  bool applies = false;
  for (const Region& r : plan.regions)
    applies |= g_mutant->applies(std::any_cast<const Params&>(r.params));
  if (!applies) GTEST_SKIP() << g_mutant->name << " does not apply to " << c.name;
  const auto bounds = default_value_bounds(g);
  int failing_seeds = 0, differing_seeds = 0;
  bool watched_is_output = false;  // the wrong values reach the graph's outputs as they are
  // A mutant wrong only on some inputs gets more seeds (a tensorwise amax of x differs from
  // that of |x| on about half of them).
  const int n_seeds = g_mutant->some_seed ? 8 : 3;
  for (uint64_t seed = 41; seed < 41u + n_seeds; ++seed) {
    auto inputs = generate_inputs(g, seed);
    // A mutant that shows only where the largest magnitude is negative gets the quantized
    // sources negated on every other seed: a trace's recorded value range may clamp the drawn
    // inputs so that the largest magnitude is always positive (a tangent in [-2.67, 3.31]).
    if (g_mutant->some_seed && seed % 2 == 0)
      for (const Region& r : plan.regions) {
        int v = std::any_cast<const Params&>(r.params).x;  // the graph input under its views
        while (g.values[v].producer >= 0 &&
               op_def(g.nodes[g.values[v].producer].op).kind == OpKind::kView)
          v = g.nodes[g.values[v].producer].operands.at(0).value;
        if (auto it = inputs.find(v); it != inputs.end())
          for (double& e : it->second.data) e = -e;
      }
    GpuProgram eager(g, plan, std::string(kEagerVariant), inputs, nullptr);
    eager.run_all(LaunchContext{});
    GpuProgram prog(g, plan, variant, inputs, nullptr);
    for (size_t r = 0; r < plan.regions.size(); ++r)
      ASSERT_EQ(prog.fallback_reason(static_cast<int>(r)), "") << "the mutant must run fused";
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    std::vector<int> watched;  // the values this mutant gets wrong
    for (const Region& r : plan.regions)
      for (const auto& q : std::any_cast<const Params&>(r.params).quants) {
        const auto& vs = g_mutant->wrong_float8 ? q.q_outs : q.recip_outs;
        watched.insert(watched.end(), vs.begin(), vs.end());
      }
    for (int v : watched) watched_is_output |= g.values[v].graph_output;
    const bool differs = !first_difference(g, prog, eager, watched).empty();
    differing_seeds += differs;
    const auto ref = run_reference(g, inputs);
    bool all_pass = true;
    for (int v : g.outputs)
      all_pass &= check_value(g, v, prog.download(v, nullptr), ref.at(v), ref,
                              output_bounds(g, plan, bounds, v))
                      .pass();
    if (!g_mutant->some_seed) {
      EXPECT_TRUE(differs) << c.name << " " << variant << " " << g_mutant->name << " seed " << seed
                           << ": bit-identical to eager";
      EXPECT_FALSE(all_pass) << c.name << " " << variant << " " << g_mutant->name << " seed "
                             << seed << ": passed the numerics check";
    }
    failing_seeds += differs && !all_pass;
  }
  // A mutant wrong on some inputs only, whose wrong scale feeds only a float8 GEMM (a tensorwise
  // e5m2 dy: an amax of x instead of |x| moves the scale by a few %, inside the GEMM's float8
  // bounds), must still differ from eager; the numerics check is required to catch it where the
  // scale or the float8 tensor is a graph output.
  if (g_mutant->some_seed && !watched_is_output) {
    EXPECT_GT(differing_seeds, 0) << c.name << " " << variant << " " << g_mutant->name;
    if (failing_seeds == 0)
      std::cout << "note: " << c.name << " " << variant << " " << g_mutant->name
                << ": differs from "
                << "eager on " << differing_seeds << " of " << n_seeds
                << " seeds, within the bounds of the float8 GEMM it feeds\n";
    return;
  }
  EXPECT_GT(failing_seeds, 0) << c.name << " " << variant << " " << g_mutant->name;
}

namespace {
// The small bundled float8 linears and three synthetic groups (the reference checks them).
std::vector<size_t> mutant_cases() {
  std::vector<size_t> out;
  const auto cs = cases();
  for (size_t i = 0; i < cs.size(); ++i) {
    const std::string& n = cs[i].name;
    if ((n.rfind("float8_linear_", 0) == 0 && n.find("2x8x64x32") != std::string::npos) ||
        n == "synthetic_group_300x1000" || n == "synthetic_group_37x50" ||
        n == "synthetic_rowwise_only_256x4096" || n == "synthetic_pow2_rowwise_only_256x4096" ||
        n == "synthetic_pow2_group_300x1000")
      out.push_back(i);
  }
  return out;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Kernels, Fp8QuantizeMutant,
                         ::testing::Combine(::testing::Range<size_t>(0, std::size(kMutants)),
                                            ::testing::ValuesIn(mutant_cases()),
                                            ::testing::Values("baseline", "optimized")),
                         [](const auto& info) {
                           return test_name(std::string(kMutants[std::get<0>(info.param)].name) +
                                            "_" + cases()[std::get<1>(info.param)].name + "_" +
                                            std::get<2>(info.param));
                         });
