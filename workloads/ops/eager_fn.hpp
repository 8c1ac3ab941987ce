// The functions of the eager executor's generic kernels (impls/eager/kernels.cu), named by the op
// rows' eager lowerings (op.hpp). Kept apart from op.hpp so that device code includes only this.
#pragma once

#include <cstdint>

namespace replay {

/// Functions of the eager executor's generic pointwise kernel (impls/eager/kernels.cu).
enum class PointwiseFn : uint8_t {
  kCopy,
  kRsqrt,
  kSqrt,
  kNeg,
  kAbs,
  kExp,
  kReciprocal,
  kPow,
  kAdd,
  kSub,
  kMul,
  kDiv,
  kCount
};
/// Functions of the eager executor's generic reduction kernel.
enum class ReduceFn : uint8_t { kSum, kMean, kAmax, kVarMean, kCount };

}  // namespace replay
