#include "impls/eager/lower.hpp"

#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "impls/cuda/cuda_check.hpp"
#include "impls/eager/gemm.hpp"
#include "impls/eager/indexing.hpp"
#include "impls/eager/nn.hpp"
#include "workloads/ops/op.hpp"
#include "workloads/ops/promote.hpp"

namespace replay {
namespace {

bool is_comparison(PointwiseFn f) {
  return f >= PointwiseFn::kEq && f <= PointwiseFn::kLogicalXor;
}

// The pointwise operands of node `n`: tensors and numbers in order; a None bound of clamp
// becomes -inf / +inf (the most negative / positive int64 for integer math).
std::vector<PwOperand> pointwise_operands(const Node& n, const std::vector<DeviceTensor>& in,
                                          bool integral) {
  std::vector<PwOperand> ops;
  for (size_t i = 0; i < n.operands.size(); ++i) {
    const Operand& o = n.operands[i];
    if (o.is_tensor()) {
      ops.push_back({in.at(i), true, 0});
    } else if (o.none) {
      const double big = integral ? 9.2e18 : std::numeric_limits<double>::infinity();
      ops.push_back({{}, false, i == 1 ? -big : big});
    } else {
      ops.push_back({{}, false, o.scalar});
    }
  }
  return ops;
}

EagerLaunch lower_pointwise(const Graph& g, const Node& n, PointwiseFn fn,
                            const std::vector<DeviceTensor>& in, const DeviceTensor& out) {
  // Comparisons compute in the promoted dtype of their operands; everything else in the result's.
  const DType compute =
      is_comparison(fn) ? result_type(promote_operands(g, n.operands)) : out.dtype;
  if (fn == PointwiseFn::kDiv && n.mode == "trunc") fn = PointwiseFn::kDivTrunc;
  if (fn == PointwiseFn::kDiv && n.mode == "floor") fn = PointwiseFn::kDivFloor;
  std::vector<PwOperand> ops;
  if (fn == PointwiseFn::kFill || fn == PointwiseFn::kIota) {  // creation: numbers only
    for (const auto& o : n.operands)
      if (!o.is_tensor()) ops.push_back({{}, false, o.scalar});
  } else {
    ops = pointwise_operands(n, in, !is_floating(compute));
  }
  if (fn == PointwiseFn::kCopy) return prepare_copy(out, ops.at(0).t);  // exact casts
  // PyTorch casts every operand to the op's common dtype before computing in its opmath type.
  // A 0-dim tensor does not take part in promotion within its category, so a float32 0-dim
  // operand of a bfloat16 op is rounded to bfloat16 first (TensorIterator's fetch-and-cast): here
  // a cast into a one-element temporary before the op. Other operands are never wider than the
  // common dtype (their promotion made it).
  std::vector<EagerLaunch> casts;  // into the temporaries
  std::vector<std::shared_ptr<DeviceBuffer>> temps;
  for (size_t i = 0; i < n.operands.size() && i < ops.size(); ++i) {
    const Operand& o = n.operands[i];
    const DType d = ops[i].t.dtype;
    const bool exact_widening =
        d == DType::kBool || (is_floating(d) && dtype_size(d) < dtype_size(compute));
    if (!o.is_tensor() || !g.meta(o.value).shape.empty() || !is_floating(compute) || d == compute ||
        exact_widening)
      continue;
    temps.push_back(std::make_shared<DeviceBuffer>(dtype_size(compute)));
    DeviceTensor rounded = ops[i].t;  // same broadcast strides (all 0), one element
    rounded.ptr = temps.back()->get();
    rounded.dtype = compute;
    DeviceTensor src = ops[i].t, dst = rounded;
    src.ndim = dst.ndim = 0;
    casts.push_back(prepare_copy(dst, src));
    ops[i].t = rounded;
  }
  EagerLaunch op = prepare_pointwise(fn, out, ops, n.alpha, compute);
  if (casts.empty()) return op;
  return [casts, op, temps](cudaStream_t s) {
    for (const auto& cast : casts) cast(s);
    op(s);
  };
}

// `t` narrowed to [start, start + len * step) along `dim`, or with `dim` removed at `index`.
DeviceTensor narrow(DeviceTensor t, int dim, int64_t start, int64_t len, int64_t step) {
  t.ptr =
      static_cast<char*>(t.ptr) + start * t.stride[dim] * static_cast<int64_t>(dtype_size(t.dtype));
  t.shape[dim] = len;
  t.stride[dim] *= step;
  return t;
}
DeviceTensor select(DeviceTensor t, int dim, int64_t index) {
  t = narrow(t, dim, index, 1, 1);
  for (int d = dim; d + 1 < t.ndim; ++d) {
    t.shape[d] = t.shape[d + 1];
    t.stride[d] = t.stride[d + 1];
  }
  --t.ndim;
  return t;
}

EagerLaunch lower_composite(const Node& n, CompositeFn fn, const std::vector<DeviceTensor>& in,
                            const DeviceTensor& out) {
  std::vector<std::pair<DeviceTensor, DeviceTensor>> copies;  // (dst, src)
  const int dim = static_cast<int>(n.dim);
  switch (fn) {
    case CompositeFn::kCat: {
      int64_t at = 0;
      for (const DeviceTensor& t : in) {
        if (t.ndim == 1 && t.shape[0] == 0) continue;  // legacy empty input
        copies.push_back({narrow(out, dim, at, t.shape[dim], 1), t});
        at += t.shape[dim];
      }
      break;
    }
    case CompositeFn::kSliceScatter:
      copies.push_back({out, in.at(0)});
      copies.push_back({narrow(out, dim, n.start, in.at(1).shape[dim], n.step), in.at(1)});
      break;
    case CompositeFn::kSelectScatter:
      copies.push_back({out, in.at(0)});
      copies.push_back({select(out, dim, n.offset), in.at(1)});
      break;
    case CompositeFn::kCopy:
      copies.push_back({out, in.at(1)});
      break;
    case CompositeFn::kCount:
      throw std::invalid_argument("node " + n.id + ": bad composite lowering");
  }
  std::vector<EagerLaunch> steps;
  for (const auto& [dst, src] : copies) steps.push_back(prepare_copy(dst, src));
  if (steps.size() == 1) return steps[0];
  return [steps](cudaStream_t s) {
    for (const auto& step : steps) step(s);
  };
}

// Random ops read the drawn U[0, 1) tensor, their last operand (workloads/ops/random.cpp).
EagerLaunch lower_random(const Node& n, const std::vector<DeviceTensor>& in,
                         const std::vector<DeviceTensor>& out) {
  const DeviceTensor u = in.back();
  switch (n.op) {
    case Op::kRand:
    case Op::kRandLike:
      return prepare_copy(out[0], u);
    case Op::kBernoulliP: {
      std::vector<PwOperand> ops = {{u, true, 0}, {{}, false, n.operands[1].scalar}};
      return prepare_pointwise(PointwiseFn::kLt, out[0], ops, 1, DType::kFloat32);
    }
    case Op::kNativeDropout: {
      const double keep = 1 - n.operands[1].scalar, scale = keep > 0 ? 1 / keep : 0;
      std::vector<PwOperand> mask_ops = {{u, true, 0}, {{}, false, keep}};
      std::vector<PwOperand> out_ops = {{in[0], true, 0}, {u, true, 0}, {{}, false, keep}};
      EagerLaunch x =
          prepare_pointwise(PointwiseFn::kDropout, out[0], out_ops, scale, out[0].dtype);
      EagerLaunch m = prepare_pointwise(PointwiseFn::kLt, out[1], mask_ops, 1, DType::kFloat32);
      return [x, m](cudaStream_t s) {
        x(s);
        m(s);
      };
    }
    default:
      break;
  }
  throw std::invalid_argument("node " + n.id + ": no eager lowering for random op " +
                              std::string(op_name(n.op)));
}

}  // namespace

EagerLaunch lower_node(const Graph& g, const Node& n, const std::vector<DeviceTensor>& in,
                       const std::vector<DeviceTensor>& out) {
  const EagerLowering low = op_def(n.op).eager;
  switch (low.kernel) {
    case EagerLowering::kPointwise:
      return lower_pointwise(g, n, static_cast<PointwiseFn>(low.fn), in, out.at(0));
    case EagerLowering::kReduction: {
      return prepare_reduction(static_cast<ReduceFn>(low.fn), in.at(0), n.dims, out.at(0),
                               out.size() > 1 ? &out[1] : nullptr, n.correction);
    }
    case EagerLowering::kGemm:
      return lower_gemm(n, in, out);
    case EagerLowering::kComposite:
      return lower_composite(n, static_cast<CompositeFn>(low.fn), in, out.at(0));
    case EagerLowering::kGenerated:
      return lower_random(n, in, out);
    case EagerLowering::kIndexing:
      return lower_indexing(g, n, static_cast<IndexingFn>(low.fn), in, out);
    case EagerLowering::kNn:
      return prepare_nn(g, n, static_cast<NnFn>(low.fn), in, out);
    case EagerLowering::kCollective:  // a group of one rank: the values pass through
      if (n.group_size > 1)
        throw std::invalid_argument(
            "node " + n.id + ": " + std::string(op_name(n.op)) + " over " +
            std::to_string(n.group_size) +
            " ranks needs the multi-process path (one process per GPU, NCCL), not built yet");
      return prepare_copy(out.at(0), in.at(0));
    case EagerLowering::kAlias:
      break;
  }
  throw std::invalid_argument("node " + n.id + ": " + std::string(op_name(n.op)) +
                              " has no kernel lowering (views are aliased, not lowered)");
}

EagerLaunch lower_copy(const DeviceTensor& dst, const DeviceTensor& src) {
  return prepare_copy(dst, src);
}

}  // namespace replay
