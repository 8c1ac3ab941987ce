#include "impls/reference/reference.hpp"

#include <cmath>
#include <numeric>
#include <stdexcept>

#include <Eigen/Core>

#include "workloads/shapes.hpp"

namespace replay {
namespace {

using Eigen::ArrayXd;
using Eigen::ArrayXXd;
using RowMajorXXd = Eigen::Array<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

Eigen::Map<const ArrayXd> as_array(const HostTensor& t) {
  return {t.data.data(), static_cast<Eigen::Index>(t.data.size())};
}

HostTensor from_array(const ArrayXd& a, const TensorMeta& out) {
  HostTensor t = make_host_tensor(out.shape, out.dtype);
  for (Eigen::Index i = 0; i < a.size(); ++i) t.data[i] = a[i];
  return t;
}

void round_inplace(HostTensor& t) {
  if (t.meta.dtype == DType::kFloat32 || t.meta.dtype == DType::kFloat64) return;
  for (double& v : t.data) v = round_to(t.meta.dtype, v);
}

// `t` broadcast to `shape` (materialized, row-major).
ArrayXd broadcast_to(const HostTensor& t, const Shape& shape) {
  if (t.meta.shape == shape) return as_array(t);
  TensorMeta layout{shape, std::vector<int64_t>(shape.size(), 0), t.meta.dtype};
  auto st = contiguous_strides(t.meta.shape);
  size_t lead = shape.size() - t.meta.shape.size();
  for (size_t i = 0; i < t.meta.shape.size(); ++i)
    layout.stride[lead + i] = t.meta.shape[i] == 1 ? 0 : st[i];
  HostTensor b = strided_view(t, layout);
  return as_array(b);
}

ArrayXd operand_array(const Node& n, size_t i, const std::map<int, HostTensor>& vals,
                      const Shape& shape) {
  const Operand& o = n.operands.at(i);
  if (!o.is_tensor())
    return ArrayXd::Constant(static_cast<Eigen::Index>(std::accumulate(
                                 shape.begin(), shape.end(), int64_t{1}, std::multiplies<>())),
                             o.scalar);
  return broadcast_to(vals.at(o.value), shape);
}

// Rows = kept elements, cols = reduced elements, for a reduction over `dims`.
RowMajorXXd reduction_matrix(const HostTensor& x, const std::vector<int64_t>& dims) {
  const size_t nd = x.meta.shape.size();
  std::vector<int64_t> perm;
  for (size_t d = 0; d < nd; ++d)
    if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end())
      perm.push_back(static_cast<int64_t>(d));
  int64_t rows = 1, cols = 1;
  for (int64_t d : perm) rows *= x.meta.shape[d];
  for (int64_t d : dims) {
    perm.push_back(d);
    cols *= x.meta.shape[d];
  }
  auto st = contiguous_strides(x.meta.shape);
  TensorMeta layout;
  layout.dtype = x.meta.dtype;
  for (int64_t d : perm) {
    layout.shape.push_back(x.meta.shape[d]);
    layout.stride.push_back(st[d]);
  }
  HostTensor p = strided_view(x, layout);
  return Eigen::Map<const RowMajorXXd>(p.data.data(), rows, cols);
}

}  // namespace

std::vector<HostTensor> reference_node(const Graph& g, const Node& n,
                                       const std::map<int, HostTensor>& vals) {
  const TensorMeta& om = g.meta(n.outputs[0]);
  const HostTensor& x = vals.at(n.operands[0].value);
  std::vector<HostTensor> out;
  switch (n.op) {
    case Op::kConvertElementType:
    case Op::kClone:
      out.push_back(from_array(as_array(x), om));
      break;
    case Op::kRsqrt:
      out.push_back(from_array(as_array(x).rsqrt(), om));
      break;
    case Op::kSqrt:
      out.push_back(from_array(as_array(x).sqrt(), om));
      break;
    case Op::kNeg:
      out.push_back(from_array(-as_array(x), om));
      break;
    case Op::kAbs:
      out.push_back(from_array(as_array(x).abs(), om));
      break;
    case Op::kExp:
      out.push_back(from_array(as_array(x).exp(), om));
      break;
    case Op::kReciprocal:
      out.push_back(from_array(as_array(x).inverse(), om));
      break;
    case Op::kPowTensorScalar: {
      double e = n.operands[1].scalar;
      out.push_back(
          from_array(e == 2 ? ArrayXd(as_array(x).square()) : ArrayXd(as_array(x).pow(e)), om));
      break;
    }
    case Op::kAdd:
    case Op::kSub:
    case Op::kMul:
    case Op::kDiv: {
      ArrayXd a = operand_array(n, 0, vals, om.shape);
      ArrayXd b = operand_array(n, 1, vals, om.shape);
      ArrayXd r = n.op == Op::kAdd   ? ArrayXd(a + n.alpha * b)
                  : n.op == Op::kSub ? ArrayXd(a - n.alpha * b)
                  : n.op == Op::kMul ? ArrayXd(a * b)
                                     : ArrayXd(a / b);
      out.push_back(from_array(r, om));
      break;
    }
    case Op::kVarMean:
    case Op::kMeanDim:
    case Op::kSumDim:
    case Op::kAmax: {
      RowMajorXXd m = reduction_matrix(x, n.dims);
      const auto cols = static_cast<double>(m.cols());
      ArrayXd sum = m.rowwise().sum();
      if (n.op == Op::kSumDim) {
        out.push_back(from_array(sum, om));
      } else if (n.op == Op::kAmax) {
        out.push_back(from_array(m.rowwise().maxCoeff(), om));
      } else if (n.op == Op::kMeanDim) {
        out.push_back(from_array(sum / cols, om));
      } else {  // two-pass variance in float64
        ArrayXd mean = sum / cols;
        ArrayXd var =
            (m.colwise() - mean).square().rowwise().sum() / std::max(cols - n.correction, 0.0);
        out.push_back(from_array(var, om));
        out.push_back(from_array(mean, g.meta(n.outputs[1])));
      }
      break;
    }
    case Op::kView:
    case Op::kUnsafeView:
    case Op::kReshape:
    case Op::kUnsqueeze: {
      HostTensor t = x;
      t.meta = TensorMeta{om.shape, contiguous_strides(om.shape), om.dtype};
      out.push_back(std::move(t));
      break;
    }
    case Op::kPermute: {
      auto st = contiguous_strides(x.meta.shape);
      TensorMeta layout{om.shape, {}, om.dtype};
      for (int64_t d : n.dims) layout.stride.push_back(st[d]);
      out.push_back(strided_view(x, layout));
      break;
    }
    case Op::kExpand: {
      TensorMeta contiguous{x.meta.shape, contiguous_strides(x.meta.shape), x.meta.dtype};
      out.push_back(strided_view(x, expand_meta(contiguous, n.dims)));
      break;
    }
    case Op::kGetItem:
    case Op::kCount:
      throw std::invalid_argument("reference: no rule for " + std::string(op_name(n.op)));
  }
  for (auto& t : out) round_inplace(t);
  return out;
}

std::map<int, HostTensor> run_reference(const Graph& g, const std::map<int, HostTensor>& inputs) {
  std::map<int, HostTensor> vals = inputs;
  for (int v : g.inputs)
    if (!vals.count(v)) throw std::invalid_argument("reference: missing input " + g.values[v].name);
  for (const Node& n : g.nodes) {
    auto outs = reference_node(g, n, vals);
    for (size_t k = 0; k < outs.size(); ++k) vals[n.outputs[k]] = std::move(outs[k]);
  }
  return vals;
}

}  // namespace replay
