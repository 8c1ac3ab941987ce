// The ATen/prims ops the harness understands, as identifiers. Each op's definition (argument
// parser, shape rule, reference, eager lowering) is one row in its family's file:
//   pointwise  workloads/ops/pointwise.cpp
//   reduction  workloads/ops/reduction.cpp
//   view       workloads/ops/view.cpp
//   indexing   workloads/ops/indexing.cpp (index, scatter, embedding, pad, cumsum, arg*, sort)
//   nn         workloads/ops/nn.cpp (softmax, nll_loss, layer/group norm, dropout backward)
//   collective workloads/ops/collective.cpp (_c10d_functional: all_gather, reduce_scatter, ...)
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
  // pointwise math (pointwise.cpp)
  kConvertElementType,  // prims.convert_element_type.default(x, dtype)
  kClone,               // aten.clone.default
  kToCopy,              // aten._to_copy.default(x, *, dtype=, layout=, device=, ...)
  kRsqrt,               // aten.rsqrt.default
  kSqrt,                // aten.sqrt.default
  kNeg,                 // aten.neg.default
  kAbs,                 // aten.abs.default
  kExp,                 // aten.exp.default
  kLog,                 // aten.log.default
  kLog1p,               // aten.log1p.default
  kExpm1,               // aten.expm1.default
  kReciprocal,          // aten.reciprocal.default
  kTanh,                // aten.tanh.default
  kSigmoid,             // aten.sigmoid.default
  kErf,                 // aten.erf.default
  kSin,                 // aten.sin.default
  kCos,                 // aten.cos.default
  kSign,                // aten.sign.default
  kRelu,                // aten.relu.default
  kLog2,                // aten.log2.default
  kExp2,                // aten.exp2.default
  kFloor,               // aten.floor.default
  kCeil,                // aten.ceil.default
  kTrunc,               // aten.trunc.default
  kRound,               // aten.round.default (half to even)
  kPowTensorScalar,     // aten.pow.Tensor_Scalar(x, exponent)
  kPowTensorTensor,     // aten.pow.Tensor_Tensor(x, exponent)
  kPowScalar,           // aten.pow.Scalar(base, exponent)
  kAdd,                 // aten.add.Tensor(a, b, alpha=1)
  kAddScalar,           // aten.add.Scalar(a, b, alpha=1)
  kSub,                 // aten.sub.Tensor(a, b, alpha=1)
  kSubScalar,           // aten.sub.Scalar(a, b, alpha=1)
  kRsubScalar,          // aten.rsub.Scalar(a, b, alpha=1): b - alpha * a
  kMul,                 // aten.mul.Tensor
  kMulScalar,           // aten.mul.Scalar
  kDiv,                 // aten.div.Tensor
  kDivScalar,           // aten.div.Scalar
  kDivMode,             // aten.div.Tensor_mode(a, b, *, rounding_mode)
  kMaximum,             // aten.maximum.default
  kMinimum,             // aten.minimum.default
  // comparison and selection (compare.cpp)
  kEq,           // aten.eq.Tensor
  kEqScalar,     // aten.eq.Scalar
  kNe,           // aten.ne.Tensor
  kNeScalar,     // aten.ne.Scalar
  kLt,           // aten.lt.Tensor
  kLtScalar,     // aten.lt.Scalar
  kLe,           // aten.le.Tensor
  kLeScalar,     // aten.le.Scalar
  kGt,           // aten.gt.Tensor
  kGtScalar,     // aten.gt.Scalar
  kGe,           // aten.ge.Tensor
  kGeScalar,     // aten.ge.Scalar
  kLogicalNot,   // aten.logical_not.default
  kLogicalAnd,   // aten.logical_and.default
  kLogicalOr,    // aten.logical_or.default
  kLogicalXor,   // aten.logical_xor.default
  kWhere,        // aten.where.self(cond, a, b)
  kClamp,        // aten.clamp.default(x, min=None, max=None)
  kClampTensor,  // aten.clamp.Tensor(x, min=None, max=None)
  kClampMin,     // aten.clamp_min.default(x, min)
  kClampMax,     // aten.clamp_max.default(x, max)
  // reductions (reduction.cpp)
  kVarMean,  // aten.var_mean.correction(x, dims, correction=, keepdim=) -> (var, mean)
  kVar,      // aten.var.correction(x, dims, correction=, keepdim=)
  kMeanDim,  // aten.mean.dim(x, dims, keepdim=False, dtype=None)
  kMean,     // aten.mean.default(x, dtype=None)
  kSumDim,   // aten.sum.dim_IntList(x, dims, keepdim=False, dtype=None)
  kSum,      // aten.sum.default(x, dtype=None)
  kAmax,     // aten.amax.default(x, dims, keepdim=False)
  kAmin,     // aten.amin.default(x, dims, keepdim=False)
  kMax,      // aten.max.default(x): every dim, a 0-dim result (torchao's tensorwise amax)
  kMin,      // aten.min.default(x): every dim
  kMaxDim,   // aten.max.dim(x, dim, keepdim=False) -> (values, indices)
  kProdDim,  // aten.prod.dim_int(x, dim, keepdim=False, dtype=None)
  kProd,     // aten.prod.default(x, dtype=None)
  // views: host-side aliases where the layout allows (view.cpp)
  kView,            // aten.view.default(x, shape)
  kUnsafeView,      // aten._unsafe_view.default(x, shape)
  kReshape,         // aten.reshape.default(x, shape)
  kPermute,         // aten.permute.default(x, dims)
  kUnsqueeze,       // aten.unsqueeze.default(x, dim)
  kExpand,          // aten.expand.default(x, shape)
  kAlias,           // aten.alias.default(x)
  kSlice,           // aten.slice.Tensor(x, dim=0, start=None, end=None, step=1)
  kSelect,          // aten.select.int(x, dim, index)
  kSplit,           // aten.split.Tensor(x, split_size, dim=0) -> tuple
  kSplitWithSizes,  // aten.split_with_sizes.default(x, split_sizes, dim=0) -> tuple
  kSqueeze,         // aten.squeeze.default(x)
  kSqueezeDim,      // aten.squeeze.dim(x, dim)
  kSqueezeDims,     // aten.squeeze.dims(x, dims)
  kT,               // aten.t.default(x)
  kTranspose,       // aten.transpose.int(x, dim0, dim1)
  kAsStrided,       // aten.as_strided.default(x, size, stride, storage_offset=None)
  // creation (creation.cpp)
  kFull,          // aten.full.default(size, fill_value, *, dtype=, layout=, device=, pin_memory=)
  kFullLike,      // aten.full_like.default(x, fill_value, *, dtype=, ...)
  kZeros,         // aten.zeros.default(size, *, dtype=, ...)
  kOnes,          // aten.ones.default(size, *, dtype=, ...)
  kZerosLike,     // aten.zeros_like.default(x, *, dtype=, ...)
  kOnesLike,      // aten.ones_like.default(x, *, dtype=, ...)
  kScalarTensor,  // aten.scalar_tensor.default(s, *, dtype=, ...)
  kArange,        // aten.arange.default(end, *, dtype=, ...)
  kArangeStart,   // aten.arange.start(start, end, *, dtype=, ...)
  kArangeStep,    // aten.arange.start_step(start, end, step, *, dtype=, ...)
  kIota,          // prims.iota.default(length, *, start, step, dtype, device, requires_grad)
  // copies into views of the output (copy.cpp)
  kCat,            // aten.cat.default(tensors, dim=0)
  kSliceScatter,   // aten.slice_scatter.default(x, src, dim=0, start=None, end=None, step=1)
  kSelectScatter,  // aten.select_scatter.default(x, src, dim, index)
  kCopy,           // aten.copy.default(x, src, non_blocking=False)
  // matmuls (matmul.cpp)
  kMm,        // aten.mm.default(a, b)
  kAddmm,     // aten.addmm.default(bias, a, b, *, beta=1, alpha=1)
  kBmm,       // aten.bmm.default(a, b)
  kBaddbmm,   // aten.baddbmm.default(x, a, b, *, beta=1, alpha=1)
  kScaledMm,  // aten._scaled_mm.default(a, b, scale_a, scale_b, bias, scale_result, out_dtype,
              // use_fast_accum)
  // random: drawn once on the host from the run's seed (random.cpp)
  kRand,           // aten.rand.default(size, *, dtype=, ...)
  kRandLike,       // aten.rand_like.default(x, *, dtype=, ...)
  kBernoulliP,     // aten.bernoulli.p(x, p=0.5, *, generator=None)
  kNativeDropout,  // aten.native_dropout.default(x, p, train) -> (out, mask)
  // indexing, scatter, scans and sorts (indexing.cpp)
  kIndex,                   // aten.index.Tensor(x, indices)
  kIndexPut,                // aten.index_put.default(x, indices, values, accumulate=False)
  kGather,                  // aten.gather.default(x, dim, index, *, sparse_grad=False)
  kScatterSrc,              // aten.scatter.src(x, dim, index, src)
  kScatterValue,            // aten.scatter.value(x, dim, index, value)
  kScatterAdd,              // aten.scatter_add.default(x, dim, index, src)
  kEmbedding,               // aten.embedding.default(weight, indices, padding_idx=-1, ...)
  kEmbeddingDenseBackward,  // aten.embedding_dense_backward.default(grad_output, indices, ...)
  kConstantPadNd,           // aten.constant_pad_nd.default(x, pad, value=0)
  kCumsum,                  // aten.cumsum.default(x, dim, *, dtype=None)
  kArgmax,                  // aten.argmax.default(x, dim=None, keepdim=False)
  kArgmin,                  // aten.argmin.default(x, dim=None, keepdim=False)
  kTopk,                    // aten.topk.default(x, k, dim=-1, largest=True, sorted=True) -> 2
  kSort,                    // aten.sort.default(x, dim=-1, descending=False) -> (values, indices)
  kSortStable,              // aten.sort.stable(x, *, stable, dim=-1, descending=False) -> 2
  // neural-network ops: row-wise softmax, losses, norms, dropout's backward (nn.cpp)
  kSoftmax,                  // aten._softmax.default(x, dim, half_to_float)
  kLogSoftmax,               // aten._log_softmax.default(x, dim, half_to_float)
  kSoftmaxBackward,          // aten._softmax_backward_data.default(grad, out, dim, input_dtype)
  kLogSoftmaxBackward,       // aten._log_softmax_backward_data.default(grad, out, dim, input_dtype)
  kNllLossForward,           // aten.nll_loss_forward.default(x, target, weight, reduction,
                             // ignore_index) -> (output, total_weight)
  kNllLossBackward,          // aten.nll_loss_backward.default(grad, x, target, weight, reduction,
                             // ignore_index, total_weight)
  kNativeLayerNorm,          // aten.native_layer_norm.default(x, normalized_shape, weight, bias,
                             // eps) -> (out, mean, rstd)
  kNativeLayerNormBackward,  // aten.native_layer_norm_backward.default(grad, x, normalized_shape,
                             // mean, rstd, weight, bias, output_mask) -> (dx, dw, db)
  kNativeGroupNorm,          // aten.native_group_norm.default(x, weight, bias, N, C, HxW, group,
                             // eps) -> (out, mean, rstd)
  kNativeGroupNormBackward,  // aten.native_group_norm_backward.default(grad, x, mean, rstd,
                             // weight, N, C, HxW, group, output_mask) -> (dx, dw, db)
  kNativeDropoutBackward,    // aten.native_dropout_backward.default(grad, mask, scale)
  // collectives of an SPMD (per-rank) graph over the whole world (collective.cpp)
  kAllGatherIntoTensor,  // _c10d_functional.all_gather_into_tensor.default(input, group_size,
                         // group_name): the ranks' inputs concatenated along dim 0
  kReduceScatterTensor,  // _c10d_functional.reduce_scatter_tensor.default(input, reduce_op,
                         // group_size, group_name): the rank's dim-0 chunk of the reduction
  kAllReduce,            // _c10d_functional.all_reduce.default(input, reduce_op, group_name)
  kWaitTensor,           // _c10d_functional.wait_tensor.default(tensor): identity on values
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
inline constexpr OpRange kPointwiseOps{Op::kConvertElementType, Op::kMinimum};
inline constexpr OpRange kCompareOps{Op::kEq, Op::kClampMax};
inline constexpr OpRange kReductionOps{Op::kVarMean, Op::kProd};
inline constexpr OpRange kViewOps{Op::kView, Op::kAsStrided};
inline constexpr OpRange kCreationOps{Op::kFull, Op::kIota};
inline constexpr OpRange kCopyOps{Op::kCat, Op::kCopy};
inline constexpr OpRange kMatmulOps{Op::kMm, Op::kScaledMm};
inline constexpr OpRange kRandomOps{Op::kRand, Op::kNativeDropout};
inline constexpr OpRange kIndexingOps{Op::kIndex, Op::kSortStable};
inline constexpr OpRange kNnOps{Op::kSoftmax, Op::kNativeDropoutBackward};
inline constexpr OpRange kCollectiveOps{Op::kAllGatherIntoTensor, Op::kWaitTensor};
/// Every family, in enum order.
inline constexpr OpRange kOpFamilies[] = {
    kPointwiseOps, kCompareOps, kReductionOps, kViewOps, kCreationOps,   kCopyOps,
    kMatmulOps,    kRandomOps,  kIndexingOps,  kNnOps,   kCollectiveOps,
};
constexpr bool families_tile() {
  size_t next = 0;
  for (const OpRange& r : kOpFamilies) {
    if (static_cast<size_t>(r.first) != next) return false;
    next = static_cast<size_t>(r.last) + 1;
  }
  return next == kOpCount;
}
static_assert(families_tile(), "the family ranges must tile the Op enum");

/// ATen spelling of an op, e.g. "aten.var_mean.correction".
std::string_view op_name(Op op);
/// Look an ATen op name up; std::nullopt for an op the harness does not know.
std::optional<Op> parse_op(std::string_view name);

}  // namespace replay
