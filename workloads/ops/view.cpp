// Views: one row each (see op.hpp). The eager executor aliases the input's storage with the
// layout the row's `alias` gives; reshape-like ops copy when the layout cannot be aliased. The
// reference materializes the same alias of a contiguous input.
#include <algorithm>

#include "workloads/ops/eigen_ref.hpp"

namespace replay {
namespace {

// --- parsers -----------------------------------------------------------------------------------

void parse_shape(ArgReader& a, const Graph&, Node& n) {  // view/_unsafe_view/reshape/expand
  n.operands = {{a.tensor(0, "self")}};
  n.dims = a.int_list(1, "size");
}

void parse_expand(ArgReader& a, const Graph& g, Node& n) {
  parse_shape(a, g, n);
  a.boolean(ArgReader::kKwOnly, "implicit", false);
}

void parse_permute(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  n.dims = a.int_list(1, "dims");
  const auto nd = g.meta(n.operands[0].value).shape.size();
  for (auto& d : n.dims) d = d < 0 ? d + static_cast<int64_t>(nd) : d;
  std::vector<int64_t> sorted = n.dims;
  std::sort(sorted.begin(), sorted.end());
  bool ok = sorted.size() == nd;
  for (size_t i = 0; ok && i < nd; ++i) ok = sorted[i] == static_cast<int64_t>(i);
  if (!ok)
    a.fail("permute dims " + shape_str(n.dims) + " are not a permutation of " + std::to_string(nd) +
           " dims");
}

void parse_unsqueeze(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  const auto nd = static_cast<int64_t>(g.meta(n.operands[0].value).shape.size()) + 1;
  n.dim = a.integer(1, "dim", -nd, nd - 1);
  if (n.dim < 0) n.dim += nd;
}

// --- shape rules (a view keeps its input's dtype) ---------------------------------------------

std::vector<OutSpec> infer_view(const Graph& g, const Node& n) {
  const TensorMeta& m = g.meta(n.operands[0].value);
  return {{resolve_view_shape(n.dims, m.numel()), m.dtype}};
}

std::vector<OutSpec> infer_permute(const Graph& g, const Node& n) {
  const TensorMeta& m = g.meta(n.operands[0].value);
  Shape s;
  for (int64_t d : n.dims) s.push_back(m.shape.at(d));
  return {{s, m.dtype}};
}

std::vector<OutSpec> infer_unsqueeze(const Graph& g, const Node& n) {
  const TensorMeta& m = g.meta(n.operands[0].value);
  Shape s = m.shape;
  s.insert(s.begin() + n.dim, 1);
  return {{s, m.dtype}};
}

std::vector<OutSpec> infer_expand(const Graph& g, const Node& n) {
  const TensorMeta& m = g.meta(n.operands[0].value);
  return {{expand_meta(m, n.dims).shape, m.dtype}};
}

// --- aliases: the output's strides over the input's storage -----------------------------------

std::optional<std::vector<int64_t>> alias_view(const Node& n, const TensorMeta& in,
                                               const Shape& out) {
  auto st = view_strides(in.shape, in.stride, out);
  if (!st && n.op == Op::kView)
    throw std::invalid_argument("view of a non-viewable layout " + shape_str(in.stride) +
                                " (strides) as " + shape_str(out) + "; reshape would copy");
  return st;  // reshape / _unsafe_view copy when std::nullopt
}

std::optional<std::vector<int64_t>> alias_permute(const Node& n, const TensorMeta& in,
                                                  const Shape&) {
  std::vector<int64_t> st;
  for (int64_t d : n.dims) st.push_back(in.stride[d]);
  return st;
}

std::optional<std::vector<int64_t>> alias_unsqueeze(const Node& n, const TensorMeta& in,
                                                    const Shape&) {
  const auto d = static_cast<size_t>(n.dim);
  std::vector<int64_t> st = in.stride;
  st.insert(st.begin() + n.dim, d < in.shape.size() ? in.shape[d] * in.stride[d] : 1);
  return st;
}

std::optional<std::vector<int64_t>> alias_expand(const Node& n, const TensorMeta& in,
                                                 const Shape&) {
  return expand_meta(in, n.dims).stride;
}

// The reference of every view: the same alias of a contiguous input, materialized.
std::vector<HostTensor> ref_view(const RefArgs& a) {
  const HostTensor& x = *a.in[0];
  const TensorMeta& om = a.out[0];
  auto st = op_def(a.node.op).alias(a.node, x.meta, om.shape);
  if (!st) {  // a copy: same logical order, new shape
    HostTensor t = x;
    t.meta = TensorMeta{om.shape, contiguous_strides(om.shape), om.dtype};
    return {std::move(t)};
  }
  return {strided_view(x, TensorMeta{om.shape, *st, om.dtype})};
}

#define IN_2x3x4 \
  R"({"inputs": [{"shape": [2, 3, 4], "dtype": "float32"}], "args": [{"ref": "in0"}, )"

constexpr OpDef kRows[] = {
    {Op::kView, "aten.view.default", OpKind::kView, 1, parse_shape, infer_view, ref_view,
     eager_alias(), alias_view, IN_2x3x4 R"([6, -1]]})"},
    {Op::kUnsafeView, "aten._unsafe_view.default", OpKind::kView, 1, parse_shape, infer_view,
     ref_view, eager_alias(), alias_view,
     R"({"inputs": [{"shape": [3, 4], "stride": [1, 3], "dtype": "float32"}],
         "args": [{"ref": "in0"}, [12]]})"},
    {Op::kReshape, "aten.reshape.default", OpKind::kView, 1, parse_shape, infer_view, ref_view,
     eager_alias(), alias_view,
     R"({"inputs": [{"shape": [3, 4], "stride": [1, 3], "dtype": "bfloat16"}],
         "args": [{"ref": "in0"}, [2, 6]]})"},
    {Op::kPermute, "aten.permute.default", OpKind::kView, 1, parse_permute, infer_permute, ref_view,
     eager_alias(), alias_permute, IN_2x3x4 R"([2, 0, 1]]})"},
    {Op::kUnsqueeze, "aten.unsqueeze.default", OpKind::kView, 1, parse_unsqueeze, infer_unsqueeze,
     ref_view, eager_alias(), alias_unsqueeze, IN_2x3x4 R"(-1]})"},
    {Op::kExpand, "aten.expand.default", OpKind::kView, 1, parse_expand, infer_expand, ref_view,
     eager_alias(), alias_expand,
     R"({"inputs": [{"shape": [3, 1], "dtype": "float32"}], "args": [{"ref": "in0"}, [2, 3, 4]]})"},
};
static_assert(rows_cover(kRows, kViewOps), "one row per view op, in enum order");

}  // namespace

std::span<const OpDef> view_op_rows() {
  return kRows;
}

}  // namespace replay
