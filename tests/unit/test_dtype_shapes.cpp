#include <gtest/gtest.h>

#include <cmath>

#include "workloads/ir/dtype.hpp"
#include "workloads/ir/layout.hpp"

using namespace replay;

TEST(DType, NamesRoundTrip) {
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    auto t = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
  EXPECT_FALSE(parse_dtype("bfloat17").has_value());
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(round_to(DType::kBFloat16, 1.0 + std::ldexp(1.0, -9)), 1.0);  // below half an ulp
  EXPECT_EQ(round_to(DType::kBFloat16, 1.0 + 3 * std::ldexp(1.0, -9)), 1.0 + std::ldexp(1.0, -7));
  EXPECT_EQ(round_to(DType::kBFloat16, 3.140625), 3.140625);
  EXPECT_TRUE(std::isnan(round_to(DType::kBFloat16, NAN)));
}

TEST(DType, Float16AndFloat8) {
  EXPECT_EQ(round_to(DType::kFloat16, 1.0 + std::ldexp(1.0, -11)), 1.0);
  EXPECT_EQ(round_to(DType::kFloat16, 65504.0), 65504.0);
  EXPECT_TRUE(std::isinf(round_to(DType::kFloat16, 70000.0)));
  EXPECT_EQ(round_to(DType::kFloat16, std::ldexp(1.0, -24)), std::ldexp(1.0, -24));  // subnormal
  EXPECT_EQ(round_to(DType::kFloat8E4M3, 448.0), 448.0);
  EXPECT_EQ(round_to(DType::kFloat8E4M3, 1.0625), 1.0);  // 3 mantissa bits, tie to even
  EXPECT_EQ(round_to(DType::kFloat8E4M3, 1.1875), 1.25);
}

TEST(Shapes, Broadcast) {
  EXPECT_EQ(broadcast_shapes({2, 8, 1}, {1600}), (Shape{2, 8, 1600}));
  EXPECT_THROW(broadcast_shapes({2, 3}, {4}), std::invalid_argument);
}

TEST(Shapes, ReductionDims) {
  EXPECT_EQ(normalize_dims({-1}, 3), (std::vector<int64_t>{2}));
  EXPECT_EQ(normalize_dims({}, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_THROW(normalize_dims({3}, 3), std::invalid_argument);
  EXPECT_EQ(reduced_shape({2, 8, 16}, {2}, true), (Shape{2, 8, 1}));
  EXPECT_EQ(reduced_shape({2, 8, 16}, {0, 2}, false), (Shape{8}));
}

TEST(Shapes, ViewStrides) {
  EXPECT_EQ(resolve_view_shape({-1, 16}, 64), (Shape{4, 16}));
  EXPECT_THROW(resolve_view_shape({-1, -1}, 64), std::invalid_argument);
  auto st = view_strides({2, 8, 16}, {128, 16, 1}, {16, 16});
  ASSERT_TRUE(st);
  EXPECT_EQ(*st, (std::vector<int64_t>{16, 1}));
  // A transposed tensor cannot be flattened without a copy.
  EXPECT_FALSE(view_strides({4, 8}, {1, 4}, {32}).has_value());
  // Splitting a dim of a strided (sliced) tensor is fine.
  auto sp = view_strides({4, 8}, {16, 1}, {4, 2, 4});
  ASSERT_TRUE(sp);
  EXPECT_EQ(*sp, (std::vector<int64_t>{16, 4, 1}));
}

TEST(Shapes, Expand) {
  TensorMeta m{{1, 4}, {4, 1}, DType::kFloat32};
  TensorMeta e = expand_meta(m, {3, 2, -1});
  EXPECT_EQ(e.shape, (Shape{3, 2, 4}));
  EXPECT_EQ(e.stride, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_THROW(expand_meta(m, {3, 5}), std::invalid_argument);
}
