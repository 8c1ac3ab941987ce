// bookend: meta ops as aliases (alias.hpp).
#include "impls/fusions/bookend/alias.hpp"

#include <algorithm>

#include "workloads/ir/layout.hpp"
#include "workloads/ops/op.hpp"

namespace replay::bookend {

std::string AliasLayout::str() const {
  return shape_str(shape) + ":" + shape_str(stride) + "+" + std::to_string(offset);
}

std::string MetaOp::str() const {
  switch (kind) {
    case Kind::kView:
      return "view(" + shape_str(shape) + ")";
    case Kind::kPermute:
      return "permute(" + shape_str(dims) + ")";
    case Kind::kSlice:
      return "slice(dim " + std::to_string(dim) + ", " + std::to_string(size) + " from " +
             std::to_string(start) + " by " + std::to_string(step) + ")";
    case Kind::kSelect:
      return "select(dim " + std::to_string(dim) + ", " + std::to_string(start) + ")";
    case Kind::kExpand:
      return "expand(" + shape_str(shape) + ")";
    case Kind::kUnsqueeze:
      return "unsqueeze(" + std::to_string(dim) + ")";
    case Kind::kSqueeze:
      return "squeeze(" + shape_str(dims) + ")";
  }
  return "?";
}

std::optional<AliasLayout> apply_meta_op(const AliasLayout& in, const MetaOp& op) {
  const int rank = static_cast<int>(in.shape.size());
  AliasLayout out = in;
  switch (op.kind) {
    case MetaOp::Kind::kView: {
      const auto numel = checked_numel(op.shape);
      if (!numel || *numel != checked_numel(in.shape).value_or(-1)) return std::nullopt;
      auto st = view_strides(in.shape, in.stride, op.shape);
      if (!st) return std::nullopt;
      out.shape = op.shape;
      out.stride = *st;
      return out;
    }
    case MetaOp::Kind::kPermute: {
      if (static_cast<int>(op.dims.size()) != rank) return std::nullopt;
      std::vector<bool> seen(rank, false);
      for (int k = 0; k < rank; ++k) {
        const int64_t d = op.dims[k];
        if (d < 0 || d >= rank || seen[d]) return std::nullopt;
        seen[d] = true;
        out.shape[k] = in.shape[d];
        out.stride[k] = in.stride[d];
      }
      return out;
    }
    case MetaOp::Kind::kSlice: {
      if (op.dim < 0 || op.dim >= rank || op.step < 1 || op.start < 0 || op.size < 0) {
        return std::nullopt;
      }
      const int64_t last = op.size == 0 ? op.start : op.start + (op.size - 1) * op.step;
      if (last > in.shape[op.dim] || (op.size > 0 && last >= in.shape[op.dim])) return std::nullopt;
      out.offset += op.start * in.stride[op.dim];
      out.shape[op.dim] = op.size;
      out.stride[op.dim] = in.stride[op.dim] * op.step;
      return out;
    }
    case MetaOp::Kind::kSelect: {
      if (op.dim < 0 || op.dim >= rank || op.start < 0 || op.start >= in.shape[op.dim]) {
        return std::nullopt;
      }
      out.offset += op.start * in.stride[op.dim];
      out.shape.erase(out.shape.begin() + op.dim);
      out.stride.erase(out.stride.begin() + op.dim);
      return out;
    }
    case MetaOp::Kind::kExpand: {
      const int n = static_cast<int>(op.shape.size());
      if (n < rank) return std::nullopt;
      out.shape = op.shape;
      out.stride.assign(n, 0);
      for (int d = 0; d < n; ++d) {
        const int e = d - (n - rank);
        if (e < 0) continue;  // a new leading dim: broadcast
        const int64_t want = op.shape[d] == -1 ? in.shape[e] : op.shape[d];
        out.shape[d] = want;
        if (in.shape[e] == want) {
          out.stride[d] = in.stride[e];
        } else if (in.shape[e] != 1) {
          return std::nullopt;  // only size-1 dims broadcast
        }
      }
      return out;
    }
    case MetaOp::Kind::kUnsqueeze: {
      if (op.dim < 0 || op.dim > rank) return std::nullopt;
      // ATen's stride for the new dim: size * stride of the dim it precedes, 1 at the end.
      const int64_t st = op.dim < rank ? in.shape[op.dim] * in.stride[op.dim] : 1;
      out.shape.insert(out.shape.begin() + op.dim, 1);
      out.stride.insert(out.stride.begin() + op.dim, st);
      return out;
    }
    case MetaOp::Kind::kSqueeze: {
      out.shape.clear();
      out.stride.clear();
      for (int d = 0; d < rank; ++d) {
        const bool drop = std::find(op.dims.begin(), op.dims.end(), d) != op.dims.end();
        if (drop && in.shape[d] != 1) return std::nullopt;
        if (drop) continue;
        out.shape.push_back(in.shape[d]);
        out.stride.push_back(in.stride[d]);
      }
      return out;
    }
  }
  return std::nullopt;
}

std::optional<AliasLayout> resolve(AliasLayout root, const std::vector<MetaOp>& ops) {
  for (const MetaOp& op : ops) {
    auto next = apply_meta_op(root, op);
    if (!next) return std::nullopt;
    root = std::move(*next);
  }
  return root;
}

std::optional<MetaOp> meta_op_of(const Graph& g, const Node& n, int k) {
  if (k < 0 || k >= static_cast<int>(n.outputs.size())) return std::nullopt;
  const TensorMeta& out = g.meta(n.outputs[k]);
  MetaOp m;
  switch (n.op) {
    case Op::kView:
    case Op::kUnsafeView:
    case Op::kReshape:
    case Op::kAlias:
      m.kind = MetaOp::Kind::kView;
      m.shape = out.shape;
      return m;
    case Op::kPermute:
    case Op::kT:
    case Op::kTranspose:
      m.kind = MetaOp::Kind::kPermute;
      m.dims = n.dims;
      return m;
    case Op::kSlice:
      m.kind = MetaOp::Kind::kSlice;
      m.dim = static_cast<int>(n.dim);
      m.start = n.start;
      m.step = n.step;
      m.size = out.shape.at(n.dim);
      return m;
    case Op::kSplit:
    case Op::kSplitWithSizes: {
      m.kind = MetaOp::Kind::kSlice;
      m.dim = static_cast<int>(n.dim);
      for (int i = 0; i < k; ++i) m.start += n.sizes.at(i);
      m.size = n.sizes.at(k);
      return m;
    }
    case Op::kSelect:
      m.kind = MetaOp::Kind::kSelect;
      m.dim = static_cast<int>(n.dim);
      m.start = n.offset;
      return m;
    case Op::kExpand:
      m.kind = MetaOp::Kind::kExpand;
      m.shape = out.shape;
      return m;
    case Op::kUnsqueeze:
      m.kind = MetaOp::Kind::kUnsqueeze;
      m.dim = static_cast<int>(n.dim);
      return m;
    case Op::kSqueeze:
    case Op::kSqueezeDim:
    case Op::kSqueezeDims:
      m.kind = MetaOp::Kind::kSqueeze;
      m.dims = n.dims;
      return m;
    default:
      return std::nullopt;
  }
}

BoundaryChain input_chain(const Graph& g, int value) {
  BoundaryChain c;
  int v = value;
  std::vector<MetaOp> rev;
  std::vector<int> rev_nodes, rev_inputs;
  while (true) {
    const int p = g.values.at(v).producer;
    if (p < 0) break;
    const Node& n = g.nodes[p];
    if (n.operands.empty() || !n.operands[0].is_tensor()) break;
    const auto op = meta_op_of(g, n, g.values[v].output_index);
    if (!op) break;
    rev.push_back(*op);
    rev_nodes.push_back(p);
    v = n.operands[0].value;
    rev_inputs.push_back(v);
  }
  c.root = v;
  c.ops.assign(rev.rbegin(), rev.rend());
  c.nodes.assign(rev_nodes.rbegin(), rev_nodes.rend());
  c.inputs.assign(rev_inputs.rbegin(), rev_inputs.rend());
  return c;
}

}  // namespace replay::bookend
