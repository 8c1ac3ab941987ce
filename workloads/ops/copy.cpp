// Ops that copy their operands into (views of) a new tensor: one row each (see op.hpp). The eager
// executor lowers each to strided copies into views of the output (impls/eager/lower.cpp);
// cat promotes its inputs to a common dtype as PyTorch does.
#include "workloads/ops/eigen_ref.hpp"
#include "workloads/ops/promote.hpp"
#include "workloads/ops/row_util.hpp"

namespace replay {
namespace {

using rows::read_dim;

// cat(tensors, dim=0). Like ATen, 1-d tensors of size 0 are skipped (legacy empty inputs);
// every other input has the rank of the first and the same sizes except along dim.
void parse_cat(ArgReader& a, const Graph& g, Node& n) {
  const std::vector<int> ts = a.tensor_list(0, "tensors");
  if (ts.empty()) a.fail("cat of an empty list");
  for (int v : ts) n.operands.push_back({v});
  int ref = -1;
  for (int v : ts)
    if (!(g.meta(v).shape.size() == 1 && g.meta(v).shape[0] == 0)) ref = ref < 0 ? v : ref;
  if (ref < 0) ref = ts[0];
  if (g.meta(ref).shape.empty()) a.fail("cat of 0-d tensors");
  n.dim = read_dim(a, g, ref, 1, "dim", 0);
}

// slice_scatter(self, src, dim=0, start=None, end=None, step=1)
void parse_slice_scatter(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}, {a.tensor(1, "src")}};
  const int x = n.operands[0].value;
  if (g.meta(x).shape.empty()) a.fail("slice_scatter into a 0-d tensor");
  n.dim = read_dim(a, g, x, 2, "dim", 0);
  rows::read_slice_bounds(a, 3, g.meta(x).shape[n.dim], n);
}

// select_scatter(self, src, dim, index)
void parse_select_scatter(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}, {a.tensor(1, "src")}};
  const int x = n.operands[0].value;
  if (g.meta(x).shape.empty()) a.fail("select_scatter into a 0-d tensor");
  n.dim = read_dim(a, g, x, 2, "dim", std::nullopt);
  const int64_t size = g.meta(x).shape[n.dim];
  const int64_t idx = a.integer(3, "index", -size, size - 1);
  n.offset = idx < 0 ? idx + size : idx;
}

// copy(self, src, non_blocking=False): src broadcast to self's shape, in self's dtype.
void parse_copy(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}, {a.tensor(1, "src")}};
  a.boolean(2, "non_blocking", false);
}

std::vector<OutSpec> infer_cat(const Graph& g, const Node& n) {
  Shape out;
  for (const auto& o : n.operands) {
    const Shape& s = g.meta(o.value).shape;
    if (s.size() == 1 && s[0] == 0) continue;
    if (out.empty()) {
      out = s;
      continue;
    }
    if (s.size() != out.size())
      throw std::invalid_argument("cat of tensors of ranks " + std::to_string(out.size()) +
                                  " and " + std::to_string(s.size()));
    for (size_t d = 0; d < s.size(); ++d)
      if (static_cast<int64_t>(d) != n.dim && s[d] != out[d])
        throw std::invalid_argument("cat inputs differ in dim " + std::to_string(d) + ": " +
                                    shape_str(out) + " vs " + shape_str(s));
    out[n.dim] += s[n.dim];
  }
  if (out.empty()) out = {0};
  return {{out, result_type(promote_operands(g, n.operands))}};
}

Shape slice_shape(const Graph& g, const Node& n) {
  Shape s = g.meta(n.operands[0].value).shape;
  if (n.op == Op::kSelectScatter)
    s.erase(s.begin() + n.dim);
  else
    s[n.dim] = (n.end - n.start + n.step - 1) / n.step;
  return s;
}

std::vector<OutSpec> infer_scatter(const Graph& g, const Node& n) {
  const Shape want = slice_shape(g, n);
  if (g.meta(n.operands[1].value).shape != want)
    throw std::invalid_argument("src of shape " + shape_str(g.meta(n.operands[1].value).shape) +
                                " does not fill the slice of shape " + shape_str(want));
  const TensorMeta& x = g.meta(n.operands[0].value);
  return {{x.shape, x.dtype}};
}

std::vector<OutSpec> infer_copy(const Graph& g, const Node& n) {
  const TensorMeta& x = g.meta(n.operands[0].value);
  // broadcast_shapes throws when src does not broadcast at all; it must also not grow self.
  if (broadcast_shapes(x.shape, g.meta(n.operands[1].value).shape) != x.shape)
    throw std::invalid_argument("copy src of shape " +
                                shape_str(g.meta(n.operands[1].value).shape) +
                                " does not broadcast to " + shape_str(x.shape));
  return {{x.shape, x.dtype}};
}

// Writes src's values into the view of `out` at element `base` with strides `stride` (src's
// shape), split over threads: the view's elements are distinct, so no two threads share one.
void write_view(const HostTensor& src, HostTensor& out, int64_t base,
                const std::vector<int64_t>& stride) {
  double* dst = out.data.data() + base;
  const double* from = src.data.data();
  parallel_strided_loop(src.meta.shape, {&stride},
                        [&](int64_t i, const auto& off) { dst[off[0]] = from[i]; });
}

std::vector<HostTensor> ref_cat(const RefArgs& a) {
  HostTensor out = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  const std::vector<int64_t>& st = out.meta.stride;
  int64_t at = 0;
  for (const HostTensor* t : a.in) {
    const Shape& s = t->meta.shape;
    if (s.size() == 1 && s[0] == 0) continue;  // the legacy empty operand of cat
    write_view(*t, out, at * st[a.node.dim], st);
    at += s[a.node.dim];
  }
  return ref_outputs(std::move(out));
}

std::vector<HostTensor> ref_scatter(const RefArgs& a) {
  HostTensor out = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  const HostTensor& self = *a.in[0];
  parallel_copy(out.data.data(), self.data.data(), static_cast<int64_t>(out.data.size()));
  std::vector<int64_t> st = out.meta.stride;
  const auto dim = static_cast<size_t>(a.node.dim);
  int64_t base = 0;
  if (a.node.op == Op::kSelectScatter) {
    base = a.node.offset * st[dim];
    st.erase(st.begin() + static_cast<std::ptrdiff_t>(dim));
  } else {
    base = a.node.start * st[dim];
    st[dim] *= a.node.step;
  }
  write_view(*a.in[1], out, base, st);
  return ref_outputs(std::move(out));
}

std::vector<HostTensor> ref_copy(const RefArgs& a) {
  HostTensor out = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  ref::broadcast_into(*a.in[1], out.meta.shape, out.data.data());
  return ref_outputs(std::move(out));
}

#define ROW(op, name, parse, infer, ref, fn, example)                                         \
  {                                                                                           \
    op, name, OpKind::kCopy, 1, parse, infer, ref, eager_composite(CompositeFn::fn), nullptr, \
        example                                                                               \
  }

constexpr OpDef kRows[] = {
    ROW(Op::kCat, "aten.cat.default", parse_cat, infer_cat, ref_cat, kCat,
        R"({"inputs": [{"shape": [2, 3], "dtype": "float32"}, {"shape": [2, 4], "stride": [1, 2], "dtype": "bfloat16"}],
            "args": [[{"ref": "in0"}, {"ref": "in1"}], -1]})"),
    ROW(Op::kSliceScatter, "aten.slice_scatter.default", parse_slice_scatter, infer_scatter,
        ref_scatter, kSliceScatter,
        R"({"inputs": [{"shape": [4, 6], "dtype": "float32"}, {"shape": [4, 2], "dtype": "float32"}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, 1, 1, 5, 2]})"),
    ROW(Op::kSelectScatter, "aten.select_scatter.default", parse_select_scatter, infer_scatter,
        ref_scatter, kSelectScatter,
        R"({"inputs": [{"shape": [3, 5], "dtype": "bfloat16"}, {"shape": [3], "dtype": "bfloat16"}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, 1, -2]})"),
    ROW(Op::kCopy, "aten.copy.default", parse_copy, infer_copy, ref_copy, kCopy,
        R"({"inputs": [{"shape": [3, 5], "dtype": "bfloat16"}, {"shape": [5], "dtype": "float32"}],
            "args": [{"ref": "in0"}, {"ref": "in1"}]})"),
};
static_assert(rows_cover(kRows, kCopyOps), "one row per copy op, in enum order");

}  // namespace

std::span<const OpDef> copy_op_rows() {
  return kRows;
}

}  // namespace replay
