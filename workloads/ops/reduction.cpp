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

// The optional accumulation/output dtype of sum, mean and prod; absent: the input's dtype, with
// integers and bool summed (and multiplied) as int64, as PyTorch does.
void read_out_dtype(ArgReader& a, const Graph& g, Node& n) {
  const DType in = g.meta(n.operands[0].value).dtype;
  if (a.present(ArgReader::kKwOnly, "dtype"))
    n.dtype = a.dtype(ArgReader::kKwOnly, "dtype");
  else
    n.dtype = is_floating(in) ? in : DType::kInt64;
}

// mean.dim / sum.dim_IntList(self, dim, keepdim=False, *, dtype=None)
void parse_dim_keepdim_dtype(ArgReader& a, const Graph& g, Node& n) {
  read_dims(a, g, n, 2);
  read_out_dtype(a, g, n);
}

// sum.default / mean.default / prod.default(self, *, dtype=None): every dim.
void parse_all_dtype(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  const auto nd = g.meta(n.operands[0].value).shape.size();
  for (size_t d = 0; d < nd; ++d) n.dims.push_back(static_cast<int64_t>(d));
  read_out_dtype(a, g, n);
}

void fail_on_empty(ArgReader& a, const Graph& g, const Node& n, const char* what) {
  const auto& shape = g.meta(n.operands[0].value).shape;
  for (int64_t d : n.dims)
    if (shape[d] == 0)
      a.fail(std::string(what) + " over dim " + std::to_string(d) + " of size 0 (shape " +
             shape_str(shape) + "): a max of no elements is undefined");
}

// amax/amin(self, dim=[], keepdim=False). A max over no elements has no value: PyTorch raises
// ("Expected reduction dim to have non-zero size"), and so does the loader.
void parse_amax(ArgReader& a, const Graph& g, Node& n) {
  read_dims(a, g, n, 2);
  n.dtype = g.meta(n.operands[0].value).dtype;
  fail_on_empty(a, g, n, n.op == Op::kAmin ? "amin" : "amax");
}

// max.default / min.default(self): the value over every dim, 0-dim; an empty input raises, as in
// PyTorch ("max(): Expected reduction dim to be specified for input.numel() == 0").
void parse_max_all(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  const auto nd = g.meta(n.operands[0].value).shape.size();
  for (size_t d = 0; d < nd; ++d) n.dims.push_back(static_cast<int64_t>(d));
  n.dtype = g.meta(n.operands[0].value).dtype;
  fail_on_empty(a, g, n, n.op == Op::kMin ? "min" : "max");
}

// max.dim / prod.dim_int(self, dim, keepdim=False): one dim.
void parse_one_dim(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  const auto nd = static_cast<int64_t>(g.meta(n.operands[0].value).shape.size());
  int64_t d = a.integer(1, "dim", -std::max<int64_t>(nd, 1), std::max<int64_t>(nd, 1) - 1);
  n.dims = {nd == 0 ? 0 : (d < 0 ? d + nd : d)};
  if (nd == 0) n.dims.clear();
  n.keepdim = a.boolean(2, "keepdim", false);
}

void parse_max_dim(ArgReader& a, const Graph& g, Node& n) {
  parse_one_dim(a, g, n);
  n.dtype = g.meta(n.operands[0].value).dtype;
  fail_on_empty(a, g, n, "max.dim");
}

void parse_prod_dim(ArgReader& a, const Graph& g, Node& n) {
  parse_one_dim(a, g, n);
  read_out_dtype(a, g, n);
}

std::vector<OutSpec> infer_reduced(const Graph& g, const Node& n) {
  return {{reduced_shape(g.meta(n.operands[0].value).shape, n.dims, n.keepdim), n.dtype}};
}

std::vector<OutSpec> infer_mean(const Graph& g, const Node& n) {
  if (!is_floating(n.dtype))
    throw std::invalid_argument("mean of a " + std::string(dtype_name(n.dtype)) +
                                " tensor (PyTorch needs a floating dtype; pass dtype=)");
  return infer_reduced(g, n);
}

std::vector<OutSpec> infer_var(const Graph& g, const Node& n) {
  const DType in = g.meta(n.operands[0].value).dtype;
  if (!is_floating(in))
    throw std::invalid_argument("variance of a " + std::string(dtype_name(in)) +
                                " tensor (PyTorch needs a floating dtype)");
  return {{reduced_shape(g.meta(n.operands[0].value).shape, n.dims, n.keepdim), in}};
}

std::vector<OutSpec> infer_var_mean(const Graph& g, const Node& n) {
  auto s = infer_var(g, n);
  return {s[0], s[0]};
}

std::vector<OutSpec> infer_max_dim(const Graph& g, const Node& n) {
  auto s = infer_reduced(g, n);
  return {s[0], {s[0].shape, DType::kInt64}};
}

// Each kept element's reduction is one Eigen redux over its row, rows split over threads: the
// summation order of a row does not depend on the thread count.
std::vector<HostTensor> ref_sum(const RefArgs& a) {
  const ref::ReductionMatrix m(*a.in[0], a.node.dims);
  return ref_outputs(ref::reduce_rows(m, a.out[0], [](const auto& row) { return row.sum(); }));
}
std::vector<HostTensor> ref_prod(const RefArgs& a) {
  const ref::ReductionMatrix m(*a.in[0], a.node.dims);
  return ref_outputs(ref::reduce_rows(m, a.out[0], [](const auto& row) { return row.prod(); }));
}
std::vector<HostTensor> ref_mean(const RefArgs& a) {
  const ref::ReductionMatrix m(*a.in[0], a.node.dims);
  const auto cols = static_cast<double>(m.cols());
  return ref_outputs(
      ref::reduce_rows(m, a.out[0], [cols](const auto& row) { return row.sum() / cols; }));
}

// max/min with NaN propagation (Eigen's maxCoeff does not propagate NaN); for max.dim also the
// index of the first maximum (or first NaN).
template <bool kMax>
std::pair<double, int64_t> extreme(
    const Eigen::Map<const Eigen::Array<double, 1, Eigen::Dynamic>>& row) {
  double best = row[0];
  int64_t at = 0;
  for (Eigen::Index c = 1; c < row.size() && !std::isnan(best); ++c) {
    const double e = row[c];
    if (std::isnan(e) || (kMax ? e > best : e < best)) {
      best = e;
      at = c;
    }
  }
  return {best, at};
}

std::vector<HostTensor> ref_amax(const RefArgs& a) {
  const ref::ReductionMatrix m(*a.in[0], a.node.dims);
  return ref_outputs(
      ref::reduce_rows(m, a.out[0], [](const auto& row) { return extreme<true>(row).first; }));
}
std::vector<HostTensor> ref_amin(const RefArgs& a) {
  const ref::ReductionMatrix m(*a.in[0], a.node.dims);
  return ref_outputs(
      ref::reduce_rows(m, a.out[0], [](const auto& row) { return extreme<false>(row).first; }));
}
std::vector<HostTensor> ref_max_dim(const RefArgs& a) {
  const ref::ReductionMatrix m(*a.in[0], a.node.dims);
  HostTensor v = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  HostTensor idx = make_host_tensor_for_overwrite(a.out[1].shape, a.out[1].dtype);
  parallel_for(
      m.rows(),
      [&](int64_t r) {
        const auto [best, at] = extreme<true>(m.row(r));
        v.data[r] = best;
        idx.data[r] = static_cast<double>(at);
      },
      m.cols());
  return ref_outputs(std::move(v), std::move(idx));
}

std::vector<HostTensor> ref_var_mean(const RefArgs& a) {  // two-pass variance in float64
  const ref::ReductionMatrix m(*a.in[0], a.node.dims);
  const auto cols = static_cast<double>(m.cols());
  const double divisor = std::max(cols - a.node.correction, 0.0);
  const bool with_mean = a.out.size() > 1;
  HostTensor var = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  HostTensor mean =
      with_mean ? make_host_tensor_for_overwrite(a.out[1].shape, a.out[1].dtype) : HostTensor{};
  parallel_for(
      m.rows(),
      [&](int64_t r) {
        const auto row = m.row(r);
        const double mu = row.sum() / cols;
        if (with_mean) mean.data[r] = mu;
        var.data[r] = (row - mu).square().sum() / divisor;
      },
      m.cols());
  if (!with_mean) return ref_outputs(std::move(var));
  return ref_outputs(std::move(var), std::move(mean));
}

#define RED(op, name, nout, parse, infer, ref, fn, example)                                        \
  {                                                                                                \
    op, name, OpKind::kReduction, nout, parse, infer, ref, eager_reduction(ReduceFn::fn), nullptr, \
        example                                                                                    \
  }

constexpr OpDef kRows[] = {
    RED(Op::kVarMean, "aten.var_mean.correction", 2, parse_var_mean, infer_var_mean, ref_var_mean,
        kVarMean, R"({"inputs": [{"shape": [4, 6, 5], "dtype": "bfloat16"}],
         "args": [{"ref": "in0"}, [0, 2]], "kwargs": {"correction": 1, "keepdim": true}})"),
    RED(Op::kVar, "aten.var.correction", 1, parse_var_mean, infer_var, ref_var_mean, kVar,
        R"({"inputs": [{"shape": [4, 6], "dtype": "float32"}], "args": [{"ref": "in0"}, [1]],
            "kwargs": {"correction": 0}})"),
    RED(Op::kMeanDim, "aten.mean.dim", 1, parse_dim_keepdim_dtype, infer_mean, ref_mean, kMean,
        R"({"inputs": [{"shape": [4, 6], "dtype": "float32"}], "args": [{"ref": "in0"}, [-1], true]})"),
    RED(Op::kMean, "aten.mean.default", 1, parse_all_dtype, infer_mean, ref_mean, kMean,
        R"({"inputs": [{"shape": [4, 6], "dtype": "bfloat16"}], "args": [{"ref": "in0"}]})"),
    RED(Op::kSumDim, "aten.sum.dim_IntList", 1, parse_dim_keepdim_dtype, infer_reduced, ref_sum,
        kSum, R"({"inputs": [{"shape": [4, 6], "stride": [1, 4], "dtype": "float32"}],
         "args": [{"ref": "in0"}, [0]]})"),
    RED(Op::kSum, "aten.sum.default", 1, parse_all_dtype, infer_reduced, ref_sum, kSum,
        R"({"inputs": [{"shape": [4, 6], "dtype": "bfloat16"}], "args": [{"ref": "in0"}],
            "kwargs": {"dtype": {"dtype": "float32"}}})"),
    RED(Op::kAmax, "aten.amax.default", 1, parse_amax, infer_reduced, ref_amax, kAmax,
        R"({"inputs": [{"shape": [3, 7], "dtype": "bfloat16"}], "args": [{"ref": "in0"}, [1]]})"),
    RED(Op::kAmin, "aten.amin.default", 1, parse_amax, infer_reduced, ref_amin, kAmin,
        R"({"inputs": [{"shape": [3, 7], "dtype": "float32"}], "args": [{"ref": "in0"}, [0], true]})"),
    RED(Op::kMax, "aten.max.default", 1, parse_max_all, infer_reduced, ref_amax, kAmax,
        R"({"inputs": [{"shape": [3, 7], "dtype": "bfloat16"}], "args": [{"ref": "in0"}]})"),
    RED(Op::kMin, "aten.min.default", 1, parse_max_all, infer_reduced, ref_amin, kAmin,
        R"({"inputs": [{"shape": [2, 5], "dtype": "float32"}], "args": [{"ref": "in0"}]})"),
    RED(Op::kMaxDim, "aten.max.dim", 2, parse_max_dim, infer_max_dim, ref_max_dim, kMaxDim,
        R"({"inputs": [{"shape": [3, 7], "dtype": "float32"}], "args": [{"ref": "in0"}, -1]})"),
    RED(Op::kProdDim, "aten.prod.dim_int", 1, parse_prod_dim, infer_reduced, ref_prod, kProd,
        R"({"inputs": [{"shape": [3, 4], "dtype": "float32", "stats": {"mean": 1, "std": 0.2, "min": 0.5, "max": 1.5}}],
            "args": [{"ref": "in0"}, 1, true]})"),
    RED(Op::kProd, "aten.prod.default", 1, parse_all_dtype, infer_reduced, ref_prod, kProd,
        R"({"inputs": [{"shape": [2, 3], "dtype": "float32", "stats": {"mean": 1, "std": 0.2, "min": 0.5, "max": 1.5}}],
            "args": [{"ref": "in0"}]})"),
};
static_assert(rows_cover(kRows, kReductionOps), "one row per reduction, in enum order");

}  // namespace

std::span<const OpDef> reduction_op_rows() {
  return kRows;
}

}  // namespace replay
