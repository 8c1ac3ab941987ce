// Indexing, scatter, scan and sort ops: one row each (see op.hpp). The addressing of the index
// and scatter family is shared with the eager lowering (indexing.hpp). The float64 reference
// checks every index it reads: one out of range throws TraceError naming the trace, the node,
// the index and the dim's size (bad input, exit 2: PyTorch raises or asserts on the device).
//
// Orders and ties, as PyTorch defines them:
//   argmax / argmin   the first index of the extreme value; NaN counts as the extreme.
//   sort              ascending puts NaN last, descending first. The reference and the eager
//                     kernel both sort stably (equal values, -0.0 and 0.0 included, keep their
//                     input order), which is what sort.stable(stable=True) guarantees; for
//                     sort.default and stable=False PyTorch guarantees no order among equal
//                     values, so its indices there can differ from ours (the op corpus uses
//                     distinct values for those).
//   topk              the k largest (smallest) in descending (ascending) order, equal values
//                     by lower index first; PyTorch leaves the order of equal values (and with
//                     sorted=False the order of all) unspecified: the corpus uses distinct
//                     values and sorted=True.
//   scatter, index_put (accumulate=False) with a duplicate index: PyTorch leaves the winner
//                     undefined; the reference writes in domain order (the last one wins).
//   scatter_add, index_put (accumulate=True), embedding_dense_backward: the duplicates' sum, in
//                     float64 on the reference and rounded once to the output dtype.
#include "workloads/ops/indexing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "workloads/ir/error.hpp"
#include "workloads/ops/eigen_ref.hpp"
#include "workloads/ops/row_util.hpp"

namespace replay {

IndexAddressing advanced_index(const Shape& self, const std::vector<int64_t>& self_stride,
                               const std::vector<int>& index_ops,
                               const std::vector<Shape>& index_shapes,
                               const std::vector<std::vector<int64_t>>& index_strides) {
  if (index_ops.size() > self.size())
    throw std::invalid_argument("too many indices (" + std::to_string(index_ops.size()) +
                                ") for a tensor of shape " + shape_str(self));
  std::vector<size_t> pos;
  for (size_t j = 0; j < index_ops.size(); ++j)
    if (index_ops[j] >= 0) pos.push_back(j);
  if (pos.empty()) throw std::invalid_argument("index without an index tensor (all None)");
  Shape b = index_shapes[pos[0]];
  for (size_t j : pos) b = broadcast_shapes(b, index_shapes[j]);
  const bool adjacent = pos.back() - pos.front() + 1 == pos.size();
  IndexAddressing a;
  auto self_dim = [&](size_t d) {
    a.domain.push_back(self[d]);
    a.base_stride.push_back(self_stride[d]);
  };
  auto index_dims = [&] {
    const size_t at = a.domain.size();
    for (int64_t s : b) {
      a.domain.push_back(s);
      a.base_stride.push_back(0);
    }
    return at;
  };
  auto indexed = [&](size_t d) { return d < index_ops.size() && index_ops[d] >= 0; };
  size_t bstart = 0;
  if (adjacent) {
    for (size_t d = 0; d < pos.front(); ++d) self_dim(d);
    bstart = index_dims();
    for (size_t d = pos.back() + 1; d < self.size(); ++d) self_dim(d);
  } else {
    bstart = index_dims();
    for (size_t d = 0; d < self.size(); ++d)
      if (!indexed(d)) self_dim(d);
  }
  for (size_t j : pos) {
    IndexAddressing::Index ix;
    ix.operand = index_ops[j];
    ix.stride.assign(a.domain.size(), 0);
    const Shape& s = index_shapes[j];
    const size_t lead = b.size() - s.size();
    for (size_t q = 0; q < s.size(); ++q)
      if (s[q] != 1) ix.stride[bstart + lead + q] = index_strides[j][q];
    ix.target_stride = self_stride[j];
    ix.size = self[j];
    a.idx.push_back(std::move(ix));
  }
  a.wrap_negative = true;
  return a;
}

IndexAddressing dim_index(const Shape& target, const std::vector<int64_t>& target_stride,
                          int64_t dim, int index_op, const Shape& index,
                          const std::vector<int64_t>& index_stride) {
  IndexAddressing a;
  a.domain = index;
  a.base_stride = target_stride;
  a.base_stride[dim] = 0;
  IndexAddressing::Index ix;
  ix.operand = index_op;
  ix.stride = index_stride;
  ix.target_stride = target_stride[dim];
  ix.size = target[dim];
  a.idx.push_back(std::move(ix));
  return a;
}

IndexAddressing embedding_index(const Shape& table, const std::vector<int64_t>& table_stride,
                                int index_op, const Shape& indices,
                                const std::vector<int64_t>& index_stride) {
  IndexAddressing a;
  a.domain = indices;
  a.domain.push_back(table[1]);
  a.base_stride.assign(indices.size(), 0);
  a.base_stride.push_back(table_stride[1]);
  IndexAddressing::Index ix;
  ix.operand = index_op;
  ix.stride = index_stride;
  ix.stride.push_back(0);
  ix.target_stride = table_stride[0];
  ix.size = table[0];
  a.idx.push_back(std::move(ix));
  return a;
}

Shape padded_shape(const Shape& in, const std::vector<int64_t>& pad) {
  if (pad.size() % 2 != 0)
    throw std::invalid_argument("pad of odd length " + std::to_string(pad.size()));
  if (pad.size() / 2 > in.size())
    throw std::invalid_argument("pad of length " + std::to_string(pad.size()) +
                                " for a tensor of rank " + std::to_string(in.size()));
  Shape out = in;
  for (size_t k = 0; k < pad.size() / 2; ++k) {
    const size_t d = in.size() - 1 - k;
    out[d] = in[d] + pad[2 * k] + pad[2 * k + 1];
    if (out[d] < 0)
      throw std::invalid_argument("pad " + shape_str(pad) + " leaves dim " + std::to_string(d) +
                                  " of " + shape_str(in) + " with size " + std::to_string(out[d]));
  }
  return out;
}

namespace {

using rows::read_dim;

// An index tensor operand: int64 (or int32 where `int32_ok`); a bool mask is refused (its result's
// shape depends on its values).
void check_index_dtype(ArgReader& a, const Graph& g, int v, const char* what, bool int32_ok) {
  const DType t = g.meta(v).dtype;
  if (t == DType::kBool)
    a.fail(std::string(what) + " is a bool mask: not supported (the result's shape depends on " +
           "the mask's values)");
  if (!(t == DType::kInt64 || (int32_ok && t == DType::kInt32)))
    a.fail(std::string(what) + " has dtype " + std::string(dtype_name(t)) + ", expected int64" +
           (int32_ok ? " or int32" : ""));
}

// index.Tensor(self, indices): operands (self, index_0 | None, ...).
void parse_index(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  for (int v : a.opt_tensor_list(1, "indices")) {
    Operand o;
    if (v < 0)
      o.none = true;
    else
      o.value = v;
    if (v >= 0) check_index_dtype(a, g, v, "an index tensor", true);
    n.operands.push_back(o);
  }
}

// index_put(self, indices, values, accumulate=False): operands (self, values, index_0 | None, ...).
void parse_index_put(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}, {a.tensor(2, "values")}};
  for (int v : a.opt_tensor_list(1, "indices")) {
    Operand o;
    if (v < 0)
      o.none = true;
    else
      o.value = v;
    if (v >= 0) check_index_dtype(a, g, v, "an index tensor", true);
    n.operands.push_back(o);
  }
  n.flag = a.boolean(3, "accumulate", false);
}

int64_t read_tensor_dim(ArgReader& a, const Graph& g, int v, size_t i, const char* what) {
  if (g.meta(v).shape.empty()) a.fail(std::string(what) + " of a 0-d tensor is not supported");
  return read_dim(a, g, v, i, "dim");
}

// gather(self, dim, index, *, sparse_grad=False): operands (self, index).
void parse_gather(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}, {a.tensor(2, "index")}};
  n.dim = read_tensor_dim(a, g, n.operands[0].value, 1, "gather");
  check_index_dtype(a, g, n.operands[1].value, "index", false);
  a.boolean(ArgReader::kKwOnly, "sparse_grad", false);  // a hint for the backward only
}

// scatter.src / scatter_add(self, dim, index, src), scatter.value(self, dim, index, value):
// operands (self, index, src | value).
void parse_scatter(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}, {a.tensor(2, "index")}};
  n.dim = read_tensor_dim(a, g, n.operands[0].value, 1, "scatter");
  check_index_dtype(a, g, n.operands[1].value, "index", false);
  if (n.op == Op::kScatterValue)
    n.operands.push_back(a.scalar_operand(3, "value"));
  else
    n.operands.push_back({a.tensor(3, "src")});
}

// embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False): the
// forward ignores the last three (they shape the backward).
void parse_embedding(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "weight")}, {a.tensor(1, "indices")}};
  check_index_dtype(a, g, n.operands[1].value, "indices", true);
  n.offset = a.present(2, "padding_idx") ? a.integer(2, "padding_idx") : -1;
  n.flag = a.boolean(3, "scale_grad_by_freq", false);
  a.boolean(4, "sparse", false);
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
// n.sizes = {num_weights}, n.offset = padding_idx (negative: none), n.flag = scale_grad_by_freq.
void parse_embedding_backward(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "grad_output")}, {a.tensor(1, "indices")}};
  check_index_dtype(a, g, n.operands[1].value, "indices", true);
  n.sizes = {a.integer(2, "num_weights", 0)};
  n.offset = a.integer(3, "padding_idx");
  n.flag = a.boolean(4, "scale_grad_by_freq", false);
}

// constant_pad_nd(self, pad, value=0): n.sizes = pad, operands (self, value).
void parse_pad(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  n.sizes = a.int_list(1, "pad");
  try {
    padded_shape(g.meta(n.operands[0].value).shape, n.sizes);
  } catch (const std::invalid_argument& e) {
    a.fail(e.what());
  }
  Operand v;
  v.scalar_type = DType::kInt64;
  if (a.present(2, "value")) v = a.scalar_operand(2, "value");
  n.operands.push_back(v);
}

// cumsum(self, dim, *, dtype=None): integers and bool sum as int64, as PyTorch does.
void parse_cumsum(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  n.dim = read_dim(a, g, n.operands[0].value, 1, "dim");
  const DType in = g.meta(n.operands[0].value).dtype;
  if (a.present(ArgReader::kKwOnly, "dtype"))
    n.dtype = a.dtype(ArgReader::kKwOnly, "dtype");
  else
    n.dtype = is_floating(in) ? in : DType::kInt64;
}

// argmax / argmin(self, dim=None, keepdim=False): n.dims = {dim}, or every dim for None (the
// index into the flattened tensor).
void parse_arg(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  const Shape& s = g.meta(n.operands[0].value).shape;
  if (a.present(1, "dim")) {
    const int64_t d = read_dim(a, g, n.operands[0].value, 1, "dim");
    if (!s.empty()) n.dims = {d};
  } else {
    for (size_t d = 0; d < s.size(); ++d) n.dims.push_back(static_cast<int64_t>(d));
  }
  n.keepdim = a.boolean(2, "keepdim", false);
  for (int64_t d : n.dims)
    if (s[d] == 0) a.fail("argmax/argmin over dim " + std::to_string(d) + " of size 0");
  if (s.empty() || n.dims.size() == s.size()) {
    int64_t numel = 1;
    for (int64_t x : s) numel *= x;
    if (numel == 0) a.fail("argmax/argmin of an empty tensor");
  }
}

// topk(self, k, dim=-1, largest=True, sorted=True): n.dim, n.offset = k, n.flag = largest. The
// result is always sorted (sorted=False leaves the order to the implementation).
void parse_topk(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  n.dim = read_dim(a, g, n.operands[0].value, 2, "dim", -1);
  const Shape& s = g.meta(n.operands[0].value).shape;
  const int64_t len = s.empty() ? 1 : s[n.dim];
  n.offset = a.integer(1, "k", 0, len);
  n.flag = a.boolean(3, "largest", true);
  a.boolean(4, "sorted", true);
}

// sort.default(self, dim=-1, descending=False), sort.stable(self, *, stable, dim=-1,
// descending=False): n.dim, n.flag = descending; both sort stably.
void parse_sort(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  const size_t pos = n.op == Op::kSortStable ? ArgReader::kKwOnly : 1;
  if (n.op == Op::kSortStable) a.boolean(ArgReader::kKwOnly, "stable", false);
  n.dim = read_dim(a, g, n.operands[0].value, pos, "dim", -1);
  n.flag = a.boolean(n.op == Op::kSortStable ? ArgReader::kKwOnly : 2, "descending", false);
}

// --- shape rules ---------------------------------------------------------------------------------

std::vector<int> index_operands(const Node& n, size_t first) {
  std::vector<int> ops;
  for (size_t k = first; k < n.operands.size(); ++k)
    ops.push_back(n.operands[k].none ? -1 : static_cast<int>(k));
  return ops;
}

// The addressing of index / index_put on the node's operands, with the given target strides.
IndexAddressing node_advanced_index(const Graph& g, const Node& n,
                                    const std::vector<int64_t>& target_stride) {
  const size_t first = n.op == Op::kIndexPut ? 2 : 1;
  std::vector<int> ops = index_operands(n, first);
  std::vector<Shape> shapes(ops.size());
  std::vector<std::vector<int64_t>> strides(ops.size());
  for (size_t j = 0; j < ops.size(); ++j)
    if (ops[j] >= 0) {
      shapes[j] = g.meta(n.operands[ops[j]].value).shape;
      strides[j] = contiguous_strides(shapes[j]);
    }
  return advanced_index(g.meta(n.operands[0].value).shape, target_stride, ops, shapes, strides);
}

std::vector<OutSpec> infer_index(const Graph& g, const Node& n) {
  const TensorMeta& x = g.meta(n.operands[0].value);
  return {{node_advanced_index(g, n, contiguous_strides(x.shape)).domain, x.dtype}};
}

std::vector<OutSpec> infer_index_put(const Graph& g, const Node& n) {
  const TensorMeta& x = g.meta(n.operands[0].value);
  const TensorMeta& v = g.meta(n.operands[1].value);
  if (v.dtype != x.dtype)
    throw std::invalid_argument("index_put values of dtype " + std::string(dtype_name(v.dtype)) +
                                " into " + std::string(dtype_name(x.dtype)) +
                                " (PyTorch needs the same dtype)");
  const Shape domain = node_advanced_index(g, n, contiguous_strides(x.shape)).domain;
  if (broadcast_shapes(domain, v.shape) != domain)
    throw std::invalid_argument("index_put values of shape " + shape_str(v.shape) +
                                " do not broadcast to the indexed shape " + shape_str(domain));
  return {{x.shape, x.dtype}};
}

// gather / scatter: index has self's rank, and no dim larger than self's (but along dim) or
// than src's.
void check_dim_index(const Graph& g, const Node& n, const Shape* src) {
  const Shape& x = g.meta(n.operands[0].value).shape;
  const Shape& idx = g.meta(n.operands[1].value).shape;
  if (idx.size() != x.size())
    throw std::invalid_argument("index of shape " + shape_str(idx) + " for self of shape " +
                                shape_str(x) + ": the ranks differ");
  for (size_t d = 0; d < x.size(); ++d) {
    if (static_cast<int64_t>(d) != n.dim && idx[d] > x[d])
      throw std::invalid_argument("index of shape " + shape_str(idx) + " exceeds self of shape " +
                                  shape_str(x) + " in dim " + std::to_string(d));
    if (src && (src->size() != x.size() || idx[d] > (*src)[d]))
      throw std::invalid_argument("index of shape " + shape_str(idx) + " exceeds src of shape " +
                                  shape_str(*src) + " in dim " + std::to_string(d));
  }
}

std::vector<OutSpec> infer_gather(const Graph& g, const Node& n) {
  check_dim_index(g, n, nullptr);
  return {{g.meta(n.operands[1].value).shape, g.meta(n.operands[0].value).dtype}};
}

std::vector<OutSpec> infer_scatter(const Graph& g, const Node& n) {
  const TensorMeta& x = g.meta(n.operands[0].value);
  if (n.operands[2].is_tensor()) {
    const TensorMeta& src = g.meta(n.operands[2].value);
    if (src.dtype != x.dtype)
      throw std::invalid_argument("scatter src of dtype " + std::string(dtype_name(src.dtype)) +
                                  " into " + std::string(dtype_name(x.dtype)));
    check_dim_index(g, n, &src.shape);
  } else {
    check_dim_index(g, n, nullptr);
  }
  return {{x.shape, x.dtype}};
}

std::vector<OutSpec> infer_embedding(const Graph& g, const Node& n) {
  const TensorMeta& w = g.meta(n.operands[0].value);
  if (w.shape.size() != 2)
    throw std::invalid_argument("embedding weight of shape " + shape_str(w.shape) +
                                ", expected [num_weights, embedding_dim]");
  Shape s = g.meta(n.operands[1].value).shape;
  s.push_back(w.shape[1]);
  return {{s, w.dtype}};
}

std::vector<OutSpec> infer_embedding_backward(const Graph& g, const Node& n) {
  const TensorMeta& grad = g.meta(n.operands[0].value);
  const Shape& idx = g.meta(n.operands[1].value).shape;
  Shape want = idx;
  want.push_back(grad.shape.empty() ? 0 : grad.shape.back());
  if (grad.shape != want)
    throw std::invalid_argument("grad_output of shape " + shape_str(grad.shape) +
                                " for indices of shape " + shape_str(idx) + ", expected " +
                                shape_str(want));
  return {{{n.sizes[0], want.back()}, grad.dtype}};
}

std::vector<OutSpec> infer_pad(const Graph& g, const Node& n) {
  const TensorMeta& x = g.meta(n.operands[0].value);
  return {{padded_shape(x.shape, n.sizes), x.dtype}};
}

std::vector<OutSpec> infer_cumsum(const Graph& g, const Node& n) {
  return {{g.meta(n.operands[0].value).shape, n.dtype}};
}

std::vector<OutSpec> infer_arg(const Graph& g, const Node& n) {
  return {{reduced_shape(g.meta(n.operands[0].value).shape, n.dims, n.keepdim), DType::kInt64}};
}

std::vector<OutSpec> infer_topk(const Graph& g, const Node& n) {
  const TensorMeta& x = g.meta(n.operands[0].value);
  Shape s = x.shape;
  if (!s.empty()) s[n.dim] = n.offset;
  return {{s, x.dtype}, {s, DType::kInt64}};
}

std::vector<OutSpec> infer_sort(const Graph& g, const Node& n) {
  const TensorMeta& x = g.meta(n.operands[0].value);
  return {{x.shape, x.dtype}, {x.shape, DType::kInt64}};
}

// --- references ----------------------------------------------------------------------------------

// Index value `v` of `ix`, checked against the target's dim (wrapped when negative and allowed).
int64_t checked_index(double v, const IndexAddressing::Index& ix, bool wrap, const Node& n) {
  const auto i = static_cast<int64_t>(v);
  const int64_t w = wrap && i < 0 ? i + ix.size : i;
  if (w < 0 || w >= ix.size)
    throw TraceError("", n.id,
                     std::string(op_name(n.op)) + ": index " + std::to_string(i) +
                         " is out of bounds for a dim of size " + std::to_string(ix.size));
  return w;
}

// Calls f(i, target offset, src offset) for every domain element i in row-major order (the
// order the reference's duplicates resolve in); src offsets follow `src_stride` over the domain
// (empty: 0). Index tensors are the contiguous operands a.in[ix.operand].
template <typename F>
void walk(const IndexAddressing& ia, const RefArgs& a, const std::vector<int64_t>& src_stride,
          F f) {
  int64_t total = 1;
  for (int64_t d : ia.domain) total *= d;
  if (total == 0) return;
  const size_t nd = ia.domain.size(), ni = ia.idx.size();
  std::vector<int64_t> c(nd, 0), ioff(ni, 0);
  std::vector<int64_t> ss = src_stride.empty() ? std::vector<int64_t>(nd, 0) : src_stride;
  int64_t base = 0, soff = 0;
  for (int64_t i = 0; i < total; ++i) {
    int64_t off = base;
    for (size_t j = 0; j < ni; ++j)
      off += checked_index(a.in[ia.idx[j].operand]->data[ioff[j]], ia.idx[j], ia.wrap_negative,
                           a.node) *
             ia.idx[j].target_stride;
    f(i, off, soff);
    for (size_t k = nd; k-- > 0;) {
      if (++c[k] < ia.domain[k]) {
        base += ia.base_stride[k];
        soff += ss[k];
        for (size_t j = 0; j < ni; ++j) ioff[j] += ia.idx[j].stride[k];
        break;
      }
      base -= (ia.domain[k] - 1) * ia.base_stride[k];
      soff -= (ia.domain[k] - 1) * ss[k];
      for (size_t j = 0; j < ni; ++j) ioff[j] -= (ia.domain[k] - 1) * ia.idx[j].stride[k];
      c[k] = 0;
    }
  }
}

// The addressing of index / index_put over the contiguous reference tensors.
IndexAddressing ref_advanced_index(const RefArgs& a) {
  const size_t first = a.node.op == Op::kIndexPut ? 2 : 1;
  std::vector<int> ops = index_operands(a.node, first);
  std::vector<Shape> shapes(ops.size());
  std::vector<std::vector<int64_t>> strides(ops.size());
  for (size_t j = 0; j < ops.size(); ++j)
    if (ops[j] >= 0) {
      shapes[j] = a.in[ops[j]]->meta.shape;
      strides[j] = contiguous_strides(shapes[j]);
    }
  const Shape& x = a.in[0]->meta.shape;
  return advanced_index(x, contiguous_strides(x), ops, shapes, strides);
}

HostTensor copy_of(const HostTensor& x, const TensorMeta& out) {
  HostTensor t = make_host_tensor_for_overwrite(out.shape, out.dtype);
  parallel_copy(t.data.data(), x.data.data(), static_cast<int64_t>(t.data.size()));
  return t;
}

std::vector<HostTensor> ref_index(const RefArgs& a) {
  HostTensor out = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  const double* x = a.in[0]->data.data();
  walk(ref_advanced_index(a), a, {},
       [&](int64_t i, int64_t off, int64_t) { out.data[i] = x[off]; });
  return ref_outputs(std::move(out));
}

std::vector<HostTensor> ref_index_put(const RefArgs& a) {
  HostTensor out = copy_of(*a.in[0], a.out[0]);
  const IndexAddressing ia = ref_advanced_index(a);
  const ref::ArrayXd v = ref::broadcast_to(*a.in[1], ia.domain);
  const bool acc = a.node.flag;
  walk(ia, a, {},
       [&](int64_t i, int64_t off, int64_t) { out.data[off] = acc ? out.data[off] + v[i] : v[i]; });
  return ref_outputs(std::move(out));
}

IndexAddressing ref_dim_index(const RefArgs& a) {
  const Shape& x = a.in[0]->meta.shape;
  const Shape& idx = a.in[1]->meta.shape;
  return dim_index(x, contiguous_strides(x), a.node.dim, 1, idx, contiguous_strides(idx));
}

std::vector<HostTensor> ref_gather(const RefArgs& a) {
  HostTensor out = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  const double* x = a.in[0]->data.data();
  walk(ref_dim_index(a), a, {}, [&](int64_t i, int64_t off, int64_t) { out.data[i] = x[off]; });
  return ref_outputs(std::move(out));
}

std::vector<HostTensor> ref_scatter(const RefArgs& a) {
  HostTensor out = copy_of(*a.in[0], a.out[0]);
  const bool acc = a.node.op == Op::kScatterAdd;
  if (!a.in[2]) {  // scatter.value
    const double v = a.node.operands[2].scalar;
    walk(ref_dim_index(a), a, {}, [&](int64_t, int64_t off, int64_t) { out.data[off] = v; });
    return ref_outputs(std::move(out));
  }
  const double* src = a.in[2]->data.data();
  walk(ref_dim_index(a), a, contiguous_strides(a.in[2]->meta.shape),
       [&](int64_t, int64_t off, int64_t s) {
         out.data[off] = acc ? out.data[off] + src[s] : src[s];
       });
  return ref_outputs(std::move(out));
}

std::vector<HostTensor> ref_embedding(const RefArgs& a) {
  HostTensor out = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  const Shape& w = a.in[0]->meta.shape;
  const Shape& idx = a.in[1]->meta.shape;
  const double* x = a.in[0]->data.data();
  walk(embedding_index(w, contiguous_strides(w), 1, idx, contiguous_strides(idx)), a, {},
       [&](int64_t i, int64_t off, int64_t) { out.data[i] = x[off]; });
  return ref_outputs(std::move(out));
}

// grad_weight[r] = sum of grad_output rows whose index is r (divided by how often r occurs with
// scale_grad_by_freq); the padding_idx row stays 0.
std::vector<HostTensor> ref_embedding_backward(const RefArgs& a) {
  HostTensor out = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  std::fill(out.data.begin(), out.data.end(), 0.0);
  const Shape& w = a.out[0].shape;
  const Shape& idx = a.in[1]->meta.shape;
  const IndexAddressing ia =
      embedding_index(w, contiguous_strides(w), 1, idx, contiguous_strides(idx));
  std::vector<double> count(static_cast<size_t>(w[0]), 0);
  for (double v : a.in[1]->data) count[checked_index(v, ia.idx[0], false, a.node)] += 1;
  const int64_t dim = w[1], pad = a.node.offset;
  const bool scale = a.node.flag;
  const double* g = a.in[0]->data.data();
  walk(ia, a, {}, [&](int64_t i, int64_t off, int64_t) {
    const int64_t r = dim > 0 ? off / dim : 0;
    if (r == pad) return;
    out.data[off] += scale ? g[i] / count[r] : g[i];
  });
  return ref_outputs(std::move(out));
}

std::vector<HostTensor> ref_pad(const RefArgs& a) {
  HostTensor out = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  std::fill(out.data.begin(), out.data.end(), a.node.operands[1].scalar);
  const Shape& in = a.in[0]->meta.shape;
  const Shape& os = a.out[0].shape;
  const auto ost = contiguous_strides(os);
  std::vector<int64_t> before(in.size(), 0);
  const auto& pad = a.node.sizes;
  for (size_t k = 0; k < pad.size() / 2; ++k) before[in.size() - 1 - k] = pad[2 * k];
  const double* x = a.in[0]->data.data();
  int64_t total = 1;
  for (int64_t d : in) total *= d;
  std::vector<int64_t> c(in.size(), 0);
  for (int64_t i = 0; i < total; ++i) {
    int64_t off = 0;
    bool inside = true;
    for (size_t d = 0; d < in.size() && inside; ++d) {
      const int64_t o = c[d] + before[d];
      inside = o >= 0 && o < os[d];
      off += o * ost[d];
    }
    if (inside) out.data[off] = x[i];
    for (size_t d = in.size(); d-- > 0;) {
      if (++c[d] < in[d]) break;
      c[d] = 0;
    }
  }
  return ref_outputs(std::move(out));
}

// A contiguous tensor of `shape` as rows along `dim`: element j of row (o, q) at
// o * len * inner + j * inner + q.
struct Rows {
  int64_t outer = 1, len = 1, inner = 1;
  Rows(const Shape& s, int64_t dim) {
    if (s.empty()) return;
    for (int64_t d = 0; d < dim; ++d) outer *= s[d];
    len = s[dim];
    for (size_t d = dim + 1; d < s.size(); ++d) inner *= s[d];
  }
  int64_t rows() const { return outer * inner; }
  int64_t at(int64_t r, int64_t j, int64_t row_len) const {
    return (r / inner) * row_len * inner + j * inner + r % inner;
  }
};

std::vector<HostTensor> ref_cumsum(const RefArgs& a) {
  HostTensor out = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  const Rows r(a.in[0]->meta.shape, a.node.dim);
  const double* x = a.in[0]->data.data();
  parallel_for(
      r.rows(),
      [&](int64_t row) {
        double s = 0;
        for (int64_t j = 0; j < r.len; ++j) {
          s += x[r.at(row, j, r.len)];
          out.data[r.at(row, j, r.len)] = s;
        }
      },
      r.len);
  return ref_outputs(std::move(out));
}

// argmax / argmin: the first index of the extreme, NaN counting as the extreme.
template <bool kMax>
std::vector<HostTensor> ref_arg(const RefArgs& a) {
  const ref::ReductionMatrix m(*a.in[0], a.node.dims);
  return ref_outputs(ref::reduce_rows(m, a.out[0], [](const auto& row) {
    double best = row[0];
    Eigen::Index at = 0;
    for (Eigen::Index c = 1; c < row.size() && !std::isnan(best); ++c)
      if (std::isnan(row[c]) || (kMax ? row[c] > best : row[c] < best)) {
        best = row[c];
        at = c;
      }
    return static_cast<double>(at);
  }));
}

// Stable sort of each row along dim (NaN above everything), keeping the first `k` (values and
// int64 indices).
std::vector<HostTensor> sorted_rows(const RefArgs& a, int64_t k, bool descending) {
  HostTensor vals = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  HostTensor idx = make_host_tensor_for_overwrite(a.out[1].shape, a.out[1].dtype);
  const Rows r(a.in[0]->meta.shape, a.node.dim);
  const double* x = a.in[0]->data.data();
  parallel_for(
      r.rows(),
      [&](int64_t row) {
        std::vector<int64_t> order(static_cast<size_t>(r.len));
        std::iota(order.begin(), order.end(), 0);
        auto v = [&](int64_t j) { return x[r.at(row, j, r.len)]; };
        std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
          const double vp = v(p), vq = v(q);
          if (descending) return std::isnan(vp) ? !std::isnan(vq) : vp > vq;
          return !std::isnan(vp) && (std::isnan(vq) || vp < vq);
        });
        for (int64_t j = 0; j < k; ++j) {
          vals.data[r.at(row, j, k)] = v(order[j]);
          idx.data[r.at(row, j, k)] = static_cast<double>(order[j]);
        }
      },
      r.len);
  return ref_outputs(std::move(vals), std::move(idx));
}

std::vector<HostTensor> ref_topk(const RefArgs& a) {
  return sorted_rows(a, a.node.offset, a.node.flag);
}
std::vector<HostTensor> ref_sort(const RefArgs& a) {
  return sorted_rows(a, Rows(a.in[0]->meta.shape, a.node.dim).len, a.node.flag);
}

#define ROW(op, name, nout, parse, infer, ref, fn, example)                                        \
  {                                                                                                \
    op, name, OpKind::kIndexing, nout, parse, infer, ref, eager_indexing(IndexingFn::fn), nullptr, \
        example                                                                                    \
  }

constexpr OpDef kRows[] = {
    ROW(Op::kIndex, "aten.index.Tensor", 1, parse_index, infer_index, ref_index, kIndex,
        R"({"inputs": [{"shape": [4, 5, 3], "dtype": "bfloat16"},
                       {"shape": [2, 1], "dtype": "int64", "stats": {"mean": 0, "std": 3, "min": -4, "max": 3}},
                       {"shape": [3], "dtype": "int32", "stats": {"mean": 2, "std": 2, "min": 0, "max": 4}}],
            "args": [{"ref": "in0"}, [{"ref": "in1"}, {"ref": "in2"}]]})"),
    ROW(Op::kIndexPut, "aten.index_put.default", 1, parse_index_put, infer_index_put, ref_index_put,
        kIndexPut,
        R"({"inputs": [{"shape": [5, 4], "dtype": "float32"},
                       {"shape": [7], "dtype": "int64", "stats": {"mean": 2, "std": 2, "min": 0, "max": 4}},
                       {"shape": [7, 4], "dtype": "float32"}],
            "args": [{"ref": "in0"}, [{"ref": "in1"}], {"ref": "in2"}, true]})"),
    ROW(Op::kGather, "aten.gather.default", 1, parse_gather, infer_gather, ref_gather, kGather,
        R"({"inputs": [{"shape": [3, 6], "dtype": "float32"},
                       {"shape": [3, 4], "dtype": "int64", "stats": {"mean": 3, "std": 3, "min": 0, "max": 5}}],
            "args": [{"ref": "in0"}, -1, {"ref": "in1"}]})"),
    ROW(Op::kScatterSrc, "aten.scatter.src", 1, parse_scatter, infer_scatter, ref_scatter, kScatter,
        R"({"inputs": [{"shape": [4, 5], "dtype": "bfloat16"},
                       {"shape": [1, 5], "dtype": "int64", "stats": {"mean": 2, "std": 2, "min": 0, "max": 3}},
                       {"shape": [2, 5], "dtype": "bfloat16"}],
            "args": [{"ref": "in0"}, 0, {"ref": "in1"}, {"ref": "in2"}]})"),
    ROW(Op::kScatterValue, "aten.scatter.value", 1, parse_scatter, infer_scatter, ref_scatter,
        kScatter,
        R"({"inputs": [{"shape": [3, 6], "dtype": "float32"},
                       {"shape": [3, 2], "dtype": "int64", "stats": {"mean": 3, "std": 3, "min": 0, "max": 5}}],
            "args": [{"ref": "in0"}, 1, {"ref": "in1"}, -2.5]})"),
    ROW(Op::kScatterAdd, "aten.scatter_add.default", 1, parse_scatter, infer_scatter, ref_scatter,
        kScatterAdd,
        R"({"inputs": [{"shape": [4, 5], "dtype": "float32"},
                       {"shape": [9, 5], "dtype": "int64", "stats": {"mean": 2, "std": 2, "min": 0, "max": 3}},
                       {"shape": [9, 5], "dtype": "float32"}],
            "args": [{"ref": "in0"}, 0, {"ref": "in1"}, {"ref": "in2"}]})"),
    ROW(Op::kEmbedding, "aten.embedding.default", 1, parse_embedding, infer_embedding,
        ref_embedding, kEmbedding,
        R"({"inputs": [{"shape": [10, 8], "dtype": "bfloat16"},
                       {"shape": [2, 3], "dtype": "int64", "stats": {"mean": 5, "std": 4, "min": 0, "max": 9}}],
            "args": [{"ref": "in0"}, {"ref": "in1"}]})"),
    ROW(Op::kEmbeddingDenseBackward, "aten.embedding_dense_backward.default", 1,
        parse_embedding_backward, infer_embedding_backward, ref_embedding_backward,
        kEmbeddingBackward,
        R"({"inputs": [{"shape": [2, 6, 4], "dtype": "float32"},
                       {"shape": [2, 6], "dtype": "int64", "stats": {"mean": 2, "std": 2, "min": 0, "max": 4}}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, 5, 0, true]})"),
    ROW(Op::kConstantPadNd, "aten.constant_pad_nd.default", 1, parse_pad, infer_pad, ref_pad,
        kConstantPad,
        R"({"inputs": [{"shape": [3, 4, 5], "dtype": "bfloat16"}],
            "args": [{"ref": "in0"}, [1, -2, -1, 2], 0.5]})"),
    ROW(Op::kCumsum, "aten.cumsum.default", 1, parse_cumsum, infer_cumsum, ref_cumsum, kCumsum,
        R"({"inputs": [{"shape": [3, 40], "stride": [1, 3], "dtype": "float32"}], "args": [{"ref": "in0"}, -1]})"),
    ROW(Op::kArgmax, "aten.argmax.default", 1, parse_arg, infer_arg, ref_arg<true>, kArgmax,
        R"({"inputs": [{"shape": [4, 7], "dtype": "float32"}], "args": [{"ref": "in0"}, 1, true]})"),
    ROW(Op::kArgmin, "aten.argmin.default", 1, parse_arg, infer_arg, ref_arg<false>, kArgmin,
        R"({"inputs": [{"shape": [4, 7], "dtype": "bfloat16"}], "args": [{"ref": "in0"}]})"),
    ROW(Op::kTopk, "aten.topk.default", 2, parse_topk, infer_topk, ref_topk, kSort,
        R"({"inputs": [{"shape": [3, 9], "dtype": "float32"}], "args": [{"ref": "in0"}, 3]})"),
    ROW(Op::kSort, "aten.sort.default", 2, parse_sort, infer_sort, ref_sort, kSort,
        R"({"inputs": [{"shape": [5, 4], "dtype": "float32"}], "args": [{"ref": "in0"}, 0, true]})"),
    ROW(Op::kSortStable, "aten.sort.stable", 2, parse_sort, infer_sort, ref_sort, kSort,
        R"({"inputs": [{"shape": [3, 8], "dtype": "bfloat16", "stats": {"mean": 0, "std": 2, "min": -2, "max": 2}}],
            "args": [{"ref": "in0"}], "kwargs": {"stable": true}})"),
};
static_assert(rows_cover(kRows, kIndexingOps), "one row per indexing op, in enum order");

}  // namespace

std::span<const OpDef> indexing_op_rows() {
  return kRows;
}

}  // namespace replay
