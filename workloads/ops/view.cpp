// Views: one row each (see op.hpp). The eager executor aliases the input's storage with the
// layout the row's `alias` gives; reshape-like ops copy when the layout cannot be aliased. The
// reference materializes the same alias of a contiguous input.
#include <algorithm>

#include "workloads/ops/eigen_ref.hpp"
#include "workloads/ops/row_util.hpp"

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

void parse_alias(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
}

int64_t rank_of(const Graph& g, const Node& n) {
  return static_cast<int64_t>(g.meta(n.operands[0].value).shape.size());
}

// A dim argument of the node's input (rows::read_dim).
int64_t read_dim(ArgReader& a, const Graph& g, const Node& n, size_t i, const char* kw,
                 std::optional<int64_t> dflt = std::nullopt) {
  return rows::read_dim(a, g, n.operands[0].value, i, kw, dflt);
}

// slice.Tensor(self, dim=0, start=None, end=None, step=1), bounds normalized as ATen does:
// negative from the end, clamped to [0, size], end at least start; step must be positive.
void parse_slice(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  if (rank_of(g, n) == 0) a.fail("slice of a 0-d tensor");
  n.dim = read_dim(a, g, n, 1, "dim", 0);
  rows::read_slice_bounds(a, 2, g.meta(n.operands[0].value).shape[n.dim], n);
}

// select.int(self, dim, index): index in [-size, size).
void parse_select(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  if (rank_of(g, n) == 0) a.fail("select of a 0-d tensor");
  n.dim = read_dim(a, g, n, 1, "dim");
  const int64_t size = g.meta(n.operands[0].value).shape[n.dim];
  const int64_t idx = a.integer(2, "index", -size, size - 1);
  n.offset = idx < 0 ? idx + size : idx;
}

// split.Tensor(self, split_size, dim=0): chunks of split_size (the last may be smaller).
void parse_split(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  if (rank_of(g, n) == 0) a.fail("split of a 0-d tensor");
  const int64_t split = a.integer(1, "split_size", 0);
  n.dim = read_dim(a, g, n, 2, "dim", 0);
  const int64_t size = g.meta(n.operands[0].value).shape[n.dim];
  if (split == 0 && size != 0) a.fail("split_size 0 of a non-empty dim");
  n.sizes.clear();
  for (int64_t at = 0; at < size || (at == 0 && size == 0); at += std::max<int64_t>(split, 1)) {
    n.sizes.push_back(std::min(split, size - at));
    if (size == 0) break;
  }
}

// split_with_sizes(self, split_sizes, dim=0): the sizes must add up to the dim.
void parse_split_sizes(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  if (rank_of(g, n) == 0) a.fail("split of a 0-d tensor");
  n.sizes = a.int_list(1, "split_sizes");
  n.dim = read_dim(a, g, n, 2, "dim", 0);
  int64_t total = 0;
  for (int64_t s : n.sizes) {
    if (s < 0) a.fail("negative split size in " + shape_str(n.sizes));
    total += s;
  }
  if (total != g.meta(n.operands[0].value).shape[n.dim])
    a.fail("split sizes " + shape_str(n.sizes) + " do not add up to dim " + std::to_string(n.dim) +
           " of size " + std::to_string(g.meta(n.operands[0].value).shape[n.dim]));
}

// squeeze.default: every size-1 dim; squeeze.dim / squeeze.dims: those dims when of size 1.
void parse_squeeze(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  const auto& shape = g.meta(n.operands[0].value).shape;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] == 1) n.dims.push_back(static_cast<int64_t>(d));
}

void parse_squeeze_dim(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  const int64_t d = read_dim(a, g, n, 1, "dim");
  if (rank_of(g, n) > 0 && g.meta(n.operands[0].value).shape[d] == 1) n.dims = {d};
}

void parse_squeeze_dims(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  std::vector<int64_t> dims = a.int_list(1, "dim");
  try {
    dims = normalize_dims(dims, g.meta(n.operands[0].value).shape.size());
  } catch (const std::invalid_argument& e) {
    a.fail(e.what());
  }
  for (int64_t d : dims)
    if (rank_of(g, n) > 0 && g.meta(n.operands[0].value).shape[d] == 1) n.dims.push_back(d);
}

// t(self): transpose of a tensor of at most 2 dims.
void parse_t(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  const int64_t nd = rank_of(g, n);
  if (nd > 2) a.fail("t() of a " + std::to_string(nd) + "-d tensor (at most 2 dims)");
  n.dims = nd == 2 ? std::vector<int64_t>{1, 0} : std::vector<int64_t>(nd == 1 ? 1 : 0, 0);
}

// transpose.int(self, dim0, dim1): a permutation swapping two dims.
void parse_transpose(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  const int64_t nd = rank_of(g, n);
  const int64_t d0 = read_dim(a, g, n, 1, "dim0"), d1 = read_dim(a, g, n, 2, "dim1");
  n.dims.clear();
  for (int64_t d = 0; d < nd; ++d) n.dims.push_back(d);
  if (nd > 0) std::swap(n.dims[d0], n.dims[d1]);
}

// as_strided(self, size, stride, storage_offset=None): a layout over self's storage. The
// reference (which holds logical values, not storage) supports it on a contiguous input only.
void parse_as_strided(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  n.sizes = a.int_list(1, "size");
  n.strides = a.int_list(2, "stride");
  n.flag = a.present(3, "storage_offset");
  n.offset = n.flag ? a.integer(3, "storage_offset", 0) : 0;
  if (n.sizes.size() != n.strides.size())
    a.fail("as_strided size " + shape_str(n.sizes) + " and stride " + shape_str(n.strides) +
           " differ in rank");
  int64_t span = 1;
  for (size_t i = 0; i < n.sizes.size(); ++i) {
    if (n.sizes[i] < 0 || n.strides[i] < 0) a.fail("negative size or stride in as_strided");
    if (n.sizes[i] == 0) span = 0;
    if (span) span += (n.sizes[i] - 1) * n.strides[i];
  }
  const TensorMeta& in = g.meta(n.operands[0].value);
  if (span && n.offset + span > in.storage_elems())
    a.fail("as_strided reaches element " + std::to_string(n.offset + span - 1) +
           " of an input whose storage holds " + std::to_string(in.storage_elems()));
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

std::vector<OutSpec> infer_alias(const Graph& g, const Node& n) {
  const TensorMeta& m = g.meta(n.operands[0].value);
  return {{m.shape, m.dtype}};
}

std::vector<OutSpec> infer_slice(const Graph& g, const Node& n) {
  const TensorMeta& m = g.meta(n.operands[0].value);
  Shape s = m.shape;
  s[n.dim] = (n.end - n.start + n.step - 1) / n.step;
  return {{s, m.dtype}};
}

std::vector<OutSpec> infer_select(const Graph& g, const Node& n) {
  const TensorMeta& m = g.meta(n.operands[0].value);
  Shape s = m.shape;
  s.erase(s.begin() + n.dim);
  return {{s, m.dtype}};
}

std::vector<OutSpec> infer_split(const Graph& g, const Node& n) {
  const TensorMeta& m = g.meta(n.operands[0].value);
  std::vector<OutSpec> out;
  for (int64_t size : n.sizes) {
    Shape s = m.shape;
    s[n.dim] = size;
    out.push_back({s, m.dtype});
  }
  return out;
}

std::vector<OutSpec> infer_squeeze(const Graph& g, const Node& n) {
  const TensorMeta& m = g.meta(n.operands[0].value);
  Shape s;
  for (size_t d = 0; d < m.shape.size(); ++d)
    if (std::find(n.dims.begin(), n.dims.end(), static_cast<int64_t>(d)) == n.dims.end())
      s.push_back(m.shape[d]);
  return {{s, m.dtype}};
}

std::vector<OutSpec> infer_as_strided(const Graph& g, const Node& n) {
  return {{n.sizes, g.meta(n.operands[0].value).dtype}};
}

std::vector<OutSpec> infer_expand(const Graph& g, const Node& n) {
  const TensorMeta& m = g.meta(n.operands[0].value);
  return {{expand_meta(m, n.dims).shape, m.dtype}};
}

// --- aliases: the output's strides over the input's storage -----------------------------------

std::optional<ViewLayout> alias_view(const Node& n, const TensorMeta& in, const Shape& out, int) {
  auto st = view_strides(in.shape, in.stride, out);
  if (!st && n.op == Op::kView)
    throw std::invalid_argument("view of a non-viewable layout " + shape_str(in.stride) +
                                " (strides) as " + shape_str(out) + "; reshape would copy");
  if (!st) return std::nullopt;  // reshape / _unsafe_view copy
  return ViewLayout{*st, 0};
}

std::optional<ViewLayout> alias_permute(const Node& n, const TensorMeta& in, const Shape&, int) {
  std::vector<int64_t> st;
  for (int64_t d : n.dims) st.push_back(in.stride[d]);
  return ViewLayout{st, 0};
}

std::optional<ViewLayout> alias_unsqueeze(const Node& n, const TensorMeta& in, const Shape&, int) {
  const auto d = static_cast<size_t>(n.dim);
  std::vector<int64_t> st = in.stride;
  st.insert(st.begin() + n.dim, d < in.shape.size() ? in.shape[d] * in.stride[d] : 1);
  return ViewLayout{st, 0};
}

std::optional<ViewLayout> alias_expand(const Node& n, const TensorMeta& in, const Shape&, int) {
  return ViewLayout{expand_meta(in, n.dims).stride, 0};
}

std::optional<ViewLayout> alias_same(const Node&, const TensorMeta& in, const Shape&, int) {
  return ViewLayout{in.stride, 0};
}

std::optional<ViewLayout> alias_slice(const Node& n, const TensorMeta& in, const Shape&, int) {
  std::vector<int64_t> st = in.stride;
  st[n.dim] *= n.step;
  return ViewLayout{st, n.start * in.stride[n.dim]};
}

std::optional<ViewLayout> alias_select(const Node& n, const TensorMeta& in, const Shape&, int) {
  std::vector<int64_t> st = in.stride;
  st.erase(st.begin() + n.dim);
  return ViewLayout{st, n.offset * in.stride[n.dim]};
}

std::optional<ViewLayout> alias_split(const Node& n, const TensorMeta& in, const Shape&, int k) {
  int64_t start = 0;
  for (int i = 0; i < k; ++i) start += n.sizes.at(i);
  return ViewLayout{in.stride, start * in.stride[n.dim]};
}

std::optional<ViewLayout> alias_squeeze(const Node& n, const TensorMeta& in, const Shape&, int) {
  std::vector<int64_t> st;
  for (size_t d = 0; d < in.shape.size(); ++d)
    if (std::find(n.dims.begin(), n.dims.end(), static_cast<int64_t>(d)) == n.dims.end())
      st.push_back(in.stride[d]);
  return ViewLayout{st, 0};
}

// as_strided's storage_offset is absolute in the storage; std::nullopt (absent) keeps the input's.
// The harness's input storages start at offset 0, so "absolute" is relative to the storage base;
// GpuProgram and the reference apply it to the input's own offset 0 (see ViewLayout).
std::optional<ViewLayout> alias_as_strided(const Node& n, const TensorMeta&, const Shape&, int) {
  return ViewLayout{n.strides, n.offset, n.flag};
}

// The reference of every view: the same alias of a contiguous input, materialized.
std::vector<HostTensor> ref_view(const RefArgs& a) {
  const HostTensor& x = *a.in[0];
  std::vector<HostTensor> outs;
  for (size_t k = 0; k < a.out.size(); ++k) {
    const TensorMeta& om = a.out[k];
    auto lay = op_def(a.node.op).alias(a.node, x.meta, om.shape, static_cast<int>(k));
    if (!lay) {  // a copy: same logical order, new shape
      HostTensor t = x;
      t.meta = TensorMeta{om.shape, contiguous_strides(om.shape), om.dtype};
      outs.push_back(std::move(t));
      continue;
    }
    if (a.node.op == Op::kAsStrided && !a.in_meta.empty() && a.in_meta[0]) {
      // as_strided reads storage: lay the input's values out in its recorded layout first (the
      // harness's tensors start at storage offset 0).
      const TensorMeta& im = *a.in_meta[0];
      HostTensor storage = make_host_tensor({im.storage_elems()}, im.dtype);
      for (int64_t i = 0; i < static_cast<int64_t>(x.data.size()); ++i) {
        int64_t rem = i, off = 0;
        for (size_t d = im.shape.size(); d-- > 0;) {
          off += (rem % im.shape[d]) * im.stride[d];
          rem /= im.shape[d];
        }
        storage.data[off] = x.data[i];
      }
      outs.push_back(
          strided_view(storage, TensorMeta{om.shape, lay->stride, om.dtype}, lay->offset));
      continue;
    }
    outs.push_back(strided_view(x, TensorMeta{om.shape, lay->stride, om.dtype}, lay->offset));
  }
  return outs;
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
    {Op::kAlias, "aten.alias.default", OpKind::kView, 1, parse_alias, infer_alias, ref_view,
     eager_alias(), alias_same,
     R"({"inputs": [{"shape": [2, 3], "dtype": "float32"}], "args": [{"ref": "in0"}]})"},
    {Op::kSlice, "aten.slice.Tensor", OpKind::kView, 1, parse_slice, infer_slice, ref_view,
     eager_alias(), alias_slice, IN_2x3x4 R"(2, 1, 9223372036854775807, 2]})"},
    {Op::kSelect, "aten.select.int", OpKind::kView, 1, parse_select, infer_select, ref_view,
     eager_alias(), alias_select, IN_2x3x4 R"(1, -1]})"},
    {Op::kSplit, "aten.split.Tensor", OpKind::kView, 0, parse_split, infer_split, ref_view,
     eager_alias(), alias_split, IN_2x3x4 R"(3, -1]})"},
    {Op::kSplitWithSizes, "aten.split_with_sizes.default", OpKind::kView, 0, parse_split_sizes,
     infer_split, ref_view, eager_alias(), alias_split, IN_2x3x4 R"([1, 2], 1]})"},
    {Op::kSqueeze, "aten.squeeze.default", OpKind::kView, 1, parse_squeeze, infer_squeeze, ref_view,
     eager_alias(), alias_squeeze,
     R"({"inputs": [{"shape": [2, 1, 3, 1], "dtype": "float32"}], "args": [{"ref": "in0"}]})"},
    {Op::kSqueezeDim, "aten.squeeze.dim", OpKind::kView, 1, parse_squeeze_dim, infer_squeeze,
     ref_view, eager_alias(), alias_squeeze,
     R"({"inputs": [{"shape": [2, 1, 3], "dtype": "float32"}], "args": [{"ref": "in0"}, 1]})"},
    {Op::kSqueezeDims, "aten.squeeze.dims", OpKind::kView, 1, parse_squeeze_dims, infer_squeeze,
     ref_view, eager_alias(), alias_squeeze,
     R"({"inputs": [{"shape": [2, 1, 3, 1], "dtype": "float32"}], "args": [{"ref": "in0"}, [1, -1]]})"},
    {Op::kT, "aten.t.default", OpKind::kView, 1, parse_t, infer_permute, ref_view, eager_alias(),
     alias_permute,
     R"({"inputs": [{"shape": [3, 5], "dtype": "bfloat16"}], "args": [{"ref": "in0"}]})"},
    {Op::kTranspose, "aten.transpose.int", OpKind::kView, 1, parse_transpose, infer_permute,
     ref_view, eager_alias(), alias_permute, IN_2x3x4 R"(0, -1]})"},
    {Op::kAsStrided, "aten.as_strided.default", OpKind::kView, 1, parse_as_strided,
     infer_as_strided, ref_view, eager_alias(), alias_as_strided,
     IN_2x3x4 R"([3, 2], [4, 1], 2]})"},
};
static_assert(rows_cover(kRows, kViewOps), "one row per view op, in enum order");

}  // namespace

std::span<const OpDef> view_op_rows() {
  return kRows;
}

}  // namespace replay
