// The ATen/prims ops the harness understands, as identifiers. Each op's definition (argument
// parser, shape rule, reference, eager lowering) is one row in its family's file:
//   pointwise  workloads/ops/pointwise.cpp
//   reduction  workloads/ops/reduction.cpp
//   view       workloads/ops/view.cpp
// Each family is a contiguous range of the enum; the family file static_asserts that its rows
// cover its range in order, so an op added here without a row does not compile (ggml's
// GGML_OP_COUNT check, per family).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace replay {

/// Ops as they appear in a decomposed ATen graph. ATen spellings: see the rows (`replay list`).
enum class Op : uint8_t {
  // pointwise (pointwise.cpp)
  kConvertElementType,  // prims.convert_element_type.default(x, dtype)
  kClone,               // aten.clone.default
  kRsqrt,               // aten.rsqrt.default
  kSqrt,                // aten.sqrt.default
  kNeg,                 // aten.neg.default
  kAbs,                 // aten.abs.default
  kExp,                 // aten.exp.default
  kReciprocal,          // aten.reciprocal.default
  kPowTensorScalar,     // aten.pow.Tensor_Scalar(x, exponent)
  kAdd,                 // aten.add.Tensor(a, b, alpha=1)
  kSub,                 // aten.sub.Tensor(a, b, alpha=1)
  kMul,                 // aten.mul.Tensor
  kDiv,                 // aten.div.Tensor
  // reductions (reduction.cpp)
  kVarMean,  // aten.var_mean.correction(x, dims, correction=, keepdim=) -> (var, mean)
  kMeanDim,  // aten.mean.dim(x, dims, keepdim=False)
  kSumDim,   // aten.sum.dim_IntList(x, dims, keepdim=False)
  kAmax,     // aten.amax.default(x, dims, keepdim=False)
  // views: host-side aliases where the layout allows (view.cpp)
  kView,        // aten.view.default(x, shape)
  kUnsafeView,  // aten._unsafe_view.default(x, shape)
  kReshape,     // aten.reshape.default(x, shape)
  kPermute,     // aten.permute.default(x, dims)
  kUnsqueeze,   // aten.unsqueeze.default(x, dim)
  kExpand,      // aten.expand.default(x, shape)
  kCount
};

inline constexpr size_t kOpCount = static_cast<size_t>(Op::kCount);

/// An inclusive range of the enum: the ops of one family file.
struct OpRange {
  Op first, last;
  constexpr size_t size() const {
    return static_cast<size_t>(last) - static_cast<size_t>(first) + 1;
  }
};
inline constexpr OpRange kPointwiseOps{Op::kConvertElementType, Op::kDiv};
inline constexpr OpRange kReductionOps{Op::kVarMean, Op::kAmax};
inline constexpr OpRange kViewOps{Op::kView, Op::kExpand};
static_assert(static_cast<size_t>(kPointwiseOps.first) == 0 &&
                  static_cast<size_t>(kReductionOps.first) ==
                      static_cast<size_t>(kPointwiseOps.last) + 1 &&
                  static_cast<size_t>(kViewOps.first) ==
                      static_cast<size_t>(kReductionOps.last) + 1 &&
                  static_cast<size_t>(kViewOps.last) + 1 == kOpCount,
              "the family ranges must tile the Op enum");

/// ATen spelling of an op, e.g. "aten.var_mean.correction".
std::string_view op_name(Op op);
/// Look an ATen op name up; std::nullopt for an op the harness does not know.
std::optional<Op> parse_op(std::string_view name);

}  // namespace replay
