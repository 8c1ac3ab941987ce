// Reductions over a list of dims: one row each (see op.hpp). The reference accumulates in
// float64 (two-pass variance); the eager kernel accumulates in float32.
#include "workloads/ops/eigen_ref.hpp"

namespace replay {
namespace {

using ref::ArrayXd;

// dims (an empty or absent list means every dim, as ATen's sum/mean/amax take it), keepdim.
void read_dims(ArgReader& a, const Graph& g, Node& n, size_t keepdim_pos) {
  n.operands = {{a.tensor(0, "self")}};
  std::vector<int64_t> dims = a.opt_int_list(1, "dim").value_or(std::vector<int64_t>{});
  n.keepdim = a.boolean(keepdim_pos, "keepdim", false);
  try {
    n.dims = normalize_dims(dims, g.meta(n.operands[0].value).shape.size());
  } catch (const std::invalid_argument& e) {
    a.fail(e.what());
  }
}

void parse_var_mean(ArgReader& a, const Graph& g, Node& n) {
  read_dims(a, g, n, ArgReader::kKwOnly);
  n.correction = a.opt_scalar(ArgReader::kKwOnly, "correction").value_or(1.0);
}

// mean.dim / sum.dim_IntList(self, dim, keepdim=False, *, dtype=None)
void parse_dim_keepdim_dtype(ArgReader& a, const Graph& g, Node& n) {
  read_dims(a, g, n, 2);
  if (a.present(ArgReader::kKwOnly, "dtype"))  // an accumulation dtype: not supported yet
    a.fail("keyword argument 'dtype' is not supported");
}

// amax(self, dim=[], keepdim=False). A max over no elements has no value: PyTorch raises
// ("Expected reduction dim to have non-zero size"), and so does the loader.
void parse_amax(ArgReader& a, const Graph& g, Node& n) {
  read_dims(a, g, n, 2);
  const auto& shape = g.meta(n.operands[0].value).shape;
  for (int64_t d : n.dims)
    if (shape[d] == 0)
      a.fail("amax over dim " + std::to_string(d) + " of size 0 (shape " + shape_str(shape) +
             "): a max of no elements is undefined");
}

std::vector<OutSpec> infer_reduced(const Graph& g, const Node& n) {
  return {{reduced_shape(g.meta(n.operands[0].value).shape, n.dims, n.keepdim), std::nullopt}};
}

std::vector<OutSpec> infer_var_mean(const Graph& g, const Node& n) {
  auto s = infer_reduced(g, n);
  return {s[0], s[0]};
}

std::vector<HostTensor> ref_sum(const RefArgs& a) {
  return {ref::from_array(ref::reduction_matrix(*a.in[0], a.node.dims).rowwise().sum(), a.out[0])};
}
std::vector<HostTensor> ref_mean(const RefArgs& a) {
  ref::RowMajorXXd m = ref::reduction_matrix(*a.in[0], a.node.dims);
  return {ref::from_array(m.rowwise().sum() / static_cast<double>(m.cols()), a.out[0])};
}
std::vector<HostTensor> ref_amax(const RefArgs& a) {
  return {
      ref::from_array(ref::reduction_matrix(*a.in[0], a.node.dims).rowwise().maxCoeff(), a.out[0])};
}
std::vector<HostTensor> ref_var_mean(const RefArgs& a) {  // two-pass variance in float64
  ref::RowMajorXXd m = ref::reduction_matrix(*a.in[0], a.node.dims);
  const auto cols = static_cast<double>(m.cols());
  ArrayXd mean = m.rowwise().sum() / cols;
  ArrayXd var =
      (m.colwise() - mean).square().rowwise().sum() / std::max(cols - a.node.correction, 0.0);
  return {ref::from_array(var, a.out[0]), ref::from_array(mean, a.out[1])};
}

constexpr OpDef kRows[] = {
    {Op::kVarMean, "aten.var_mean.correction", OpKind::kReduction, 2, parse_var_mean,
     infer_var_mean, ref_var_mean, eager_reduction(ReduceFn::kVarMean), nullptr,
     R"({"inputs": [{"shape": [4, 6, 5], "dtype": "bfloat16"}],
         "args": [{"ref": "in0"}, [0, 2]], "kwargs": {"correction": 1, "keepdim": true}})"},
    {Op::kMeanDim, "aten.mean.dim", OpKind::kReduction, 1, parse_dim_keepdim_dtype, infer_reduced,
     ref_mean, eager_reduction(ReduceFn::kMean), nullptr,
     R"({"inputs": [{"shape": [4, 6], "dtype": "float32"}], "args": [{"ref": "in0"}, [-1], true]})"},
    {Op::kSumDim, "aten.sum.dim_IntList", OpKind::kReduction, 1, parse_dim_keepdim_dtype,
     infer_reduced, ref_sum, eager_reduction(ReduceFn::kSum), nullptr,
     R"({"inputs": [{"shape": [4, 6], "stride": [1, 4], "dtype": "float32"}],
         "args": [{"ref": "in0"}, [0]]})"},
    {Op::kAmax, "aten.amax.default", OpKind::kReduction, 1, parse_amax, infer_reduced, ref_amax,
     eager_reduction(ReduceFn::kAmax), nullptr,
     R"({"inputs": [{"shape": [3, 7], "dtype": "bfloat16"}], "args": [{"ref": "in0"}, [1]]})"},
};
static_assert(rows_cover(kRows, kReductionOps), "one row per reduction, in enum order");

}  // namespace

std::span<const OpDef> reduction_op_rows() {
  return kRows;
}

}  // namespace replay
