// Host-side checks of the eager executor's helpers (no device needed): the GPU tests' table of
// pointwise functions covers every PointwiseFn, and FastDiv's arithmetic equals plain division.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "../gpu/eager_fn_table.hpp"
#include "impls/eager/fast_div.cuh"
#include "impls/eager/kernels.hpp"

using namespace replay;
using replay::test::fn_table;

TEST(EagerPointwiseTable, CoversEveryFunction) {
  ASSERT_EQ(fn_table().size(), static_cast<size_t>(PointwiseFn::kCount));
  for (size_t i = 0; i < fn_table().size(); ++i)
    EXPECT_EQ(static_cast<size_t>(fn_table()[i].fn), i) << fn_table()[i].name;
}

// FastDiv (host side; the same arithmetic runs on the device) against plain division.
TEST(EagerFastDiv, MatchesDivision) {
  std::mt19937_64 rng(1);
  std::vector<uint32_t> divisors = {1,
                                    2,
                                    3,
                                    5,
                                    7,
                                    8,
                                    10,
                                    1600,
                                    1601,
                                    4096,
                                    65535,
                                    65536,
                                    65537,
                                    1000003,
                                    (1u << 30) - 1,
                                    1u << 30,
                                    (1u << 30) + 1,
                                    (1u << 31) - 1,
                                    1u << 31};
  for (int i = 0; i < 2000; ++i) divisors.push_back(1 + rng() % (1u << 31));
  for (uint32_t d : divisors) {
    const FastDiv f(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, (1u << 31) - 1, (1u << 31) - 2};
    for (int k = 0; k < 200; ++k) ns.push_back(static_cast<uint32_t>(rng() % (1u << 31)));
    for (uint32_t m = 1; m < 50 && uint64_t(m) * d < (1u << 31); ++m) {
      ns.push_back(m * d);
      ns.push_back(m * d - 1);
    }
    for (uint32_t n : ns) {
      if (n >= (1u << 31)) continue;
      ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
    }
  }
}

// Which copies take the tiled transpose kernel (kernels.cu, transpose_copy): decided on the host
// from shapes and strides alone (no device memory is touched; the pointers only give alignment).
TEST(EagerTransposeCopy, TilesOnlyWhereBothTransposedDimsAreLong) {
  auto tensor = [](std::vector<int64_t> shape, std::vector<int64_t> stride) {
    DeviceTensor t;
    t.ptr = reinterpret_cast<void*>(uintptr_t{1} << 20);  // aligned, never dereferenced
    t.dtype = DType::kFloat32;
    t.ndim = static_cast<int>(shape.size());
    for (int d = 0; d < t.ndim; ++d) {
      t.shape[d] = shape[d];
      t.stride[d] = stride[d];
    }
    return t;
  };
  // .t().contiguous() of a [64, 96] matrix, and with a batch dim: tiles
  EXPECT_TRUE(copy_takes_tiles(tensor({64, 96}, {96, 1}), tensor({64, 96}, {1, 64})));
  EXPECT_TRUE(
      copy_takes_tiles(tensor({9, 40, 65}, {2600, 65, 1}), tensor({9, 40, 65}, {1, 9, 360})));
  // repeat_interleave(table, 2, -1): the clone of a [8192, 64, 2] expand over the last dim (dst's
  // unit-stride dim 2 long): pointwise
  EXPECT_FALSE(
      copy_takes_tiles(tensor({8192, 64, 2}, {128, 2, 1}), tensor({8192, 64, 2}, {64, 1, 0})));
  // a transposed extent of 7 and of 8
  EXPECT_FALSE(copy_takes_tiles(tensor({7, 96}, {96, 1}), tensor({7, 96}, {1, 7})));
  EXPECT_TRUE(copy_takes_tiles(tensor({8, 96}, {96, 1}), tensor({8, 96}, {1, 8})));
  // not a transpose: both unit strides on one dim
  EXPECT_FALSE(copy_takes_tiles(tensor({64, 96}, {96, 1}), tensor({64, 96}, {192, 1})));
}
