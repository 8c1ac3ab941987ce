// The host's parallel strided loops (workloads/ir/strided_loop.hpp) and the reference executor
// built on them: every element visited once at the right offsets for permuted, broadcast, sliced
// and 0-d layouts across chunk boundaries; dims merged only where every operand allows it; and
// the float64 reference bit-identical on one thread and on several (OpenMP).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include <Eigen/Core>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "harness/report/numerics.hpp"
#include "impls/reference/reference.hpp"
#include "test_util.hpp"
#include "workloads/ir/host_tensor.hpp"
#include "workloads/ir/strided_loop.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;

namespace {

// sum_d idx_d * stride[d] for row-major linear index i of `shape`.
int64_t naive_offset(int64_t i, const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& stride) {
  int64_t off = 0;
  for (size_t d = shape.size(); d-- > 0;) {
    off += (i % shape[d]) * stride[d];
    i /= shape[d];
  }
  return off;
}

// Runs the loop and checks that each index is visited once with both operands' offsets.
void expect_visits(const std::vector<int64_t>& shape, const std::vector<int64_t>& a,
                   const std::vector<int64_t>& b) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  std::atomic<int64_t> wrong{0};
  parallel_strided_loop(shape, {&a, &b}, [&](int64_t i, const auto& off) {
    seen[i].fetch_add(1);
    if (off[0] != naive_offset(i, shape, a) || off[1] != naive_offset(i, shape, b)) ++wrong;
  });
  EXPECT_EQ(wrong.load(), 0) << shape_str(shape);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "index " << i;
}

}  // namespace

TEST(StridedLoop, CollapsesDimsEveryOperandWalksAsOne) {
  const std::vector<int64_t> c = {25, 5, 1}, bc = {0, 5, 1}, perm = {1, 4, 20};
  LoopDims l = collapse_loop({4, 5, 5}, {&c});
  EXPECT_EQ(l.shape, (std::vector<int64_t>{100}));
  EXPECT_EQ(l.stride[0], (std::vector<int64_t>{1}));
  l = collapse_loop({4, 5, 5}, {&c, &bc});  // the broadcast dim stays apart, the rest merges
  EXPECT_EQ(l.shape, (std::vector<int64_t>{4, 25}));
  EXPECT_EQ(l.stride[1], (std::vector<int64_t>{0, 1}));
  l = collapse_loop({4, 5, 5}, {&c, &perm});  // a permuted operand keeps every dim
  EXPECT_EQ(l.shape, (std::vector<int64_t>{4, 5, 5}));
  const std::vector<int64_t> one = {7, 1, 1};
  l = collapse_loop({3, 1, 1}, {&one});  // size-1 dims drop out
  EXPECT_EQ(l.shape, (std::vector<int64_t>{3}));
  const std::vector<int64_t> none;
  l = collapse_loop({}, {&none});  // 0-d: one element
  EXPECT_EQ(l.shape, (std::vector<int64_t>{1}));
  const std::vector<int64_t> wrong_rank = {1};
  EXPECT_THROW(collapse_loop({2, 2}, {&wrong_rank}), std::invalid_argument);
}

TEST(StridedLoop, VisitsEveryElementOnceAtItsOffsets) {
  // contiguous vs transposed, over many chunks (2^15 elements each) with a ragged last one
  expect_visits({301, 257}, {257, 1}, {1, 301});
  // broadcast rows and columns, odd inner dim shorter than a chunk boundary's remainder
  expect_visits({3, 70001}, {0, 1}, {1, 0});
  // sliced with a step and a leading size-1 dim
  expect_visits({1, 9, 4099}, {0, 2 * 4099 * 3, 3}, {9 * 4099, 4099, 1});
  // 0-d and a single element
  expect_visits({}, {}, {});
  expect_visits({1}, {5}, {0});
  int calls = 0;
  const std::vector<int64_t> s = {1, 0};
  parallel_strided_loop({0, 3}, {&s}, [&](int64_t, const auto&) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(StridedLoop, StridedViewAndUnpackAgreeWithTheNaiveGather) {
  const std::vector<int64_t> shape = {65, 33, 31};
  HostTensor storage = make_host_tensor({65 * 33 * 31 * 2}, DType::kFloat32);
  for (size_t i = 0; i < storage.data.size(); ++i) storage.data[i] = static_cast<double>(i);
  const TensorMeta layout{shape, {1, 65 * 2, 65 * 33 * 2}, DType::kFloat32};  // permuted, step 2
  const HostTensor v = strided_view(storage, layout, 1);
  ASSERT_EQ(v.data.size(), 65u * 33 * 31);
  for (int64_t i = 0; i < static_cast<int64_t>(v.data.size()); ++i)
    ASSERT_EQ(v.data[i], storage.data[1 + naive_offset(i, shape, layout.stride)]) << i;
  const std::vector<uint8_t> bytes = pack(v, layout);
  EXPECT_EQ(unpack(bytes, layout).data, v.data);
}

// Host buffers are aligned to kHostDataAlignment bytes however they are made: Eigen's vectorized
// sum peels to the first aligned element, so a reduction's last bits would otherwise depend on
// where malloc put the row.
TEST(StridedLoop, HostBuffersAreAligned) {
  for (int64_t n : {1, 3, 1001, 100003}) {
    const HostTensor z = make_host_tensor({n}, DType::kFloat32);
    const HostTensor u = make_host_tensor_for_overwrite({n}, DType::kFloat32);
    const HostTensor c = z;
    const HostData d(static_cast<size_t>(n), 1.0);
    for (const double* p : {z.data.data(), u.data.data(), c.data.data(), d.data()})
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHostDataAlignment, 0u) << n;
  }
}

// The float64 reference gives the same bits on one thread as on four (OpenMP loops and Eigen's
// GEMM), through pointwise ops with broadcasting and casts, reductions over leading and trailing
// dims (enough work per row to split them), views and a matmul.
TEST(StridedLoop, ReferenceIsBitIdenticalOnAnyThreadCount) {
#ifndef _OPENMP
  GTEST_SKIP() << "skipped: built without OpenMP (one thread only)";
#else
  const std::string text = R"({
    "schema": "replay-trace/1", "name": "threads", "world_size": 1,
    "inputs": [
      {"id": "x", "shape": [96, 40, 33], "stride": [1320, 33, 1], "dtype": "bfloat16"},
      {"id": "w", "shape": [33], "stride": [1], "dtype": "float32"},
      {"id": "m", "shape": [33, 17], "stride": [17, 1], "dtype": "float32"}],
    "nodes": [
      {"id": "p", "op": "aten.permute.default", "args": [{"ref": "x"}, [2, 0, 1]],
       "outputs": [{"shape": [33, 96, 40], "stride": [1, 1320, 33], "dtype": "bfloat16"}]},
      {"id": "e", "op": "aten.exp.default", "args": [{"ref": "p"}],
       "outputs": [{"shape": [33, 96, 40], "stride": [3840, 40, 1], "dtype": "bfloat16"}]},
      {"id": "xw", "op": "aten.mul.Tensor", "args": [{"ref": "x"}, {"ref": "w"}],
       "outputs": [{"shape": [96, 40, 33], "stride": [1320, 33, 1], "dtype": "float32"}]},
      {"id": "s0", "op": "aten.sum.dim_IntList", "args": [{"ref": "xw"}, [0]],
       "outputs": [{"shape": [40, 33], "stride": [33, 1], "dtype": "float32"}]},
      {"id": "vm", "op": "aten.var_mean.correction", "args": [{"ref": "xw"}, [2]],
       "kwargs": {"correction": 0, "keepdim": true},
       "outputs": [{"shape": [96, 40, 1], "stride": [40, 1, 1], "dtype": "float32"},
                   {"shape": [96, 40, 1], "stride": [40, 1, 1], "dtype": "float32"}]},
      {"id": "v", "op": "getitem", "args": [{"ref": "vm"}, 0]},
      {"id": "mm", "op": "aten.mm.default", "args": [{"ref": "s0"}, {"ref": "m"}],
       "outputs": [{"shape": [40, 17], "stride": [17, 1], "dtype": "float32"}]}],
    "outputs": ["e", "s0", "v", "mm"]})";
  const Graph g = parse_trace(nlohmann::json::parse(text), "<threads>");
  const auto inputs = generate_inputs(g, 7);
  const int threads = omp_get_max_threads();
  run_reference(g, inputs);  // the GEMM sets Eigen's thread count once; set it after that
  const int eigen_threads = Eigen::nbThreads();
  omp_set_num_threads(1);
  Eigen::setNbThreads(1);
  const auto one = run_reference(g, inputs);
  omp_set_num_threads(4);
  Eigen::setNbThreads(4);
  const auto four = run_reference(g, inputs);
  omp_set_num_threads(threads);
  Eigen::setNbThreads(eigen_threads);
  for (const auto& [v, t] : one) {
    const HostTensor& u = four.at(v);
    ASSERT_EQ(t.data.size(), u.data.size()) << g.values[v].name;
    EXPECT_EQ(std::memcmp(t.data.data(), u.data.data(), t.data.size() * sizeof(double)), 0)
        << g.values[v].name;
  }
#endif
}

// The numerics check's sums, counts and first bad element do not depend on the thread count:
// its chunks are fixed and combined in order.
TEST(StridedLoop, NumericsCheckIsBitIdenticalOnAnyThreadCount) {
#ifndef _OPENMP
  GTEST_SKIP() << "skipped: built without OpenMP (one thread only)";
#else
  HostTensor ref = make_host_tensor({512, 999}, DType::kBFloat16);
  HostTensor got = make_host_tensor({512, 999}, DType::kBFloat16);
  for (size_t i = 0; i < ref.data.size(); ++i) {
    ref.data[i] = std::sin(0.001 * static_cast<double>(i)) * 3;
    got.data[i] = round_to(DType::kBFloat16, ref.data[i] * (1 + (i % 7 ? 0.0 : 0.05)));
  }
  got.data[400000] = INFINITY;
  NumericsBounds b = default_bounds(DType::kBFloat16, 3, 999);
  b.addend_ulps = true;  // and the per-element magnitudes
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const NumericsResult one = check_numerics("y", got, ref, b, &ref);
  omp_set_num_threads(4);
  const NumericsResult four = check_numerics("y", got, ref, b, &ref);
  omp_set_num_threads(threads);
  EXPECT_EQ(to_json(one).dump(), to_json(four).dump());
  EXPECT_EQ(std::memcmp(&one.rel_l2, &four.rel_l2, sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(&one.bias_se, &four.bias_se, sizeof(double)), 0);
  EXPECT_EQ(one.nonfinite_mismatch, 1);
  EXPECT_GT(one.beyond_1ulp, 0);
#endif
}
