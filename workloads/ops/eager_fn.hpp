// The functions of the eager executor's generic kernels (impls/eager/kernels.cu), named by the op
// rows' eager lowerings (op.hpp). Kept apart from op.hpp so that device code includes only this.
#pragma once

#include <cstdint>

namespace replay {

/// Functions of the eager executor's generic pointwise kernel (impls/eager/kernels.cu):
/// out = f(x, y, z) with up to three operands (tensors or scalars) and `alpha`.
enum class PointwiseFn : uint8_t {
  kCopy,  // x (casts)
  kRsqrt,
  kSqrt,
  kNeg,
  kAbs,
  kExp,
  kLog,
  kLog1p,
  kExpm1,
  kReciprocal,
  kTanh,
  kSigmoid,
  kErf,
  kSin,
  kCos,
  kSign,
  kRelu,
  kLog2,
  kExp2,
  kFloor,  // floor(x); x itself for integers (so ceil, trunc, round)
  kCeil,
  kTrunc,
  kRound,     // half to even
  kPow,       // x ** y
  kAdd,       // x + alpha * y
  kSub,       // x - alpha * y
  kRsub,      // y - alpha * x
  kMul,       // x * y
  kDiv,       // x / y
  kDivTrunc,  // trunc(x / y)
  kDivFloor,  // floor(x / y)
  kMaximum,   // NaN-propagating
  kMinimum,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLogicalNot,
  kLogicalAnd,
  kLogicalOr,
  kLogicalXor,
  kWhere,    // x ? y : z
  kClamp,    // min(max(x, y), z), NaN-propagating
  kFill,     // x (a scalar)
  kIota,     // x + y * linear index
  kDropout,  // y < z ? x * alpha : 0 (x input, y the drawn U[0, 1), z keep probability)
  kCount
};
/// Functions of the eager executor's generic reduction kernel.
enum class ReduceFn : uint8_t {
  kSum,
  kMean,
  kAmax,
  kAmin,
  kProd,
  kVar,
  kVarMean,  // out0 = var, out1 = mean
  kMaxDim,   // out0 = max, out1 = int64 index of its first occurrence (NaN counts as max)
  kCount
};
/// Matmuls, run through cuBLASLt (impls/eager/gemm.hpp).
enum class GemmFn : uint8_t { kMm, kAddmm, kBmm, kBaddbmm, kScaledMm, kCount };
/// Ops that copy their operands into views of the output (impls/eager/lower.cpp).
enum class CompositeFn : uint8_t { kCat, kSliceScatter, kSelectScatter, kCopy, kCount };
/// Indexing, scatter, scan and sort ops (impls/eager/indexing.cu).
enum class IndexingFn : uint8_t {
  kIndex,              // out = x[indices] (advanced indexing)
  kIndexPut,           // out = x; out[indices] = values (or += with accumulate)
  kGather,             // out[i] = x[i with dim replaced by index[i]]
  kScatter,            // out = x; out[i with dim replaced by index[i]] = src[i] (or a value)
  kScatterAdd,         // ... += src[i]
  kEmbedding,          // out = weight[indices]
  kEmbeddingBackward,  // grad_weight[indices[i]] += grad_output[i]
  kConstantPad,        // out = x padded (or cropped) with a value
  kCumsum,             // inclusive scan along dim
  kArgmax,             // index of the first max (NaN counts as max)
  kArgmin,
  kSort,  // stable sort along dim: (values, int64 indices); topk keeps the first k
  kCount
};
/// The neural-network ops' kernels (impls/eager/nn.cu): one per op of workloads/ops/nn.cpp.
enum class NnFn : uint8_t {
  kSoftmax,
  kLogSoftmax,
  kSoftmaxBackward,
  kLogSoftmaxBackward,
  kNllLossForward,
  kNllLossBackward,
  kLayerNorm,
  kLayerNormBackward,
  kGroupNorm,
  kGroupNormBackward,
  kDropoutBackward,
  kCount
};

}  // namespace replay
