// Neural-network ops: softmax and log_softmax with their backwards, nll_loss, layer and group norm
// with their backwards, and dropout's backward; one row each (see op.hpp). The rows accept exactly
// the dtypes PyTorch 2.11 accepts on CUDA (checked on an H200; the op corpus records the cases):
//   _softmax / _log_softmax      out: the input's dtype; half_to_float only for float16 (float32
//   out)
//   *_softmax_backward_data      grad and output of one dtype; grad_input in input_dtype, which is
//                                grad's, or float16 with a float32 grad (half_to_float's backward)
//   nll_loss_forward             target int64; weight of self's dtype; output and total_weight in
//                                self's dtype; total_weight is 0 for reduction none over a batch
//   native_layer_norm            weight, bias of the input's dtype; mean and rstd in the
//                                accumulate dtype (float32 for bfloat16/float16 input)
//   native_group_norm            weight, bias, mean and rstd all of the input's dtype; out is
//                                computed from mean and rstd as stored (rounded to that dtype)
//   native_*_norm_backward       an output whose output_mask entry is false is None (a `null`
//                                recorded output, OutSpec::none); dw needs the weight, db the bias
//                                (layer norm) or the weight (group norm), as ATen does
//   native_dropout_backward      mask bool; out = grad * mask * scale in grad's dtype
// The references compute in float64 from the operands as given (a backward takes the recorded
// mean and rstd, rounded to their dtype, as the GPU does).
#include "workloads/ops/nn.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "workloads/ops/eigen_ref.hpp"
#include "workloads/ops/row_util.hpp"

namespace replay {

RowGeometry softmax_rows(const Shape& shape, int64_t dim) {
  RowGeometry r;
  if (shape.empty()) return r;
  for (int64_t d = 0; d < dim; ++d) r.outer *= shape[d];
  r.len = shape[dim];
  for (size_t d = dim + 1; d < shape.size(); ++d) r.inner *= shape[d];
  return r;
}

int nll_reduction(const Node& n) {
  return n.mode == "none" ? 0 : n.mode == "mean" ? 1 : 2;
}

GroupNormDims group_norm_dims(const Node& n) {
  return {n.sizes.at(0), n.sizes.at(1), n.sizes.at(2), n.sizes.at(3)};
}

namespace {

std::string dt(DType t) {
  return std::string(dtype_name(t));
}
// float32 for the 16-bit floats, the dtype itself otherwise: at::toAccumulateType on CUDA, the
// dtype of native_layer_norm's mean and rstd.
DType acc_dtype(DType t) {
  return t == DType::kBFloat16 || t == DType::kFloat16 ? DType::kFloat32 : t;
}
bool is_float_tensor(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 ||
         t == DType::kFloat16;
}
int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// An optional tensor operand (weight, bias): None or a tensor, never a number.
Operand opt_tensor(ArgReader& a, size_t i, const char* kw) {
  Operand o = a.opt_operand(i, kw);
  if (!o.none && !o.is_tensor())
    a.fail(std::string("expected a tensor or None for '") + kw + "', found a number");
  return o;
}
bool require_bool(ArgReader& a, size_t i, const char* kw) {
  if (!a.present(i, kw)) a.fail("expected argument " + std::to_string(i) + " ('" + kw + "')");
  return a.boolean(i, kw, false);
}
std::vector<bool> read_output_mask(ArgReader& a, size_t i) {
  std::vector<bool> m = a.bool_list(i, "output_mask");
  if (m.size() != 3)
    a.fail("expected output_mask to hold 3 booleans (grad_input, grad_weight, grad_bias), found " +
           std::to_string(m.size()));
  return m;
}
const TensorMeta& meta(const Graph& g, const Node& n, size_t k) {
  return g.meta(n.operands.at(k).value);
}
void expect_float(const TensorMeta& m, const char* what, const char* op) {
  if (!is_float_tensor(m.dtype))
    throw std::invalid_argument(
        std::string(op) + ": " + what + " is " + m.str() +
        ", expected a floating dtype (float32, float64, bfloat16, float16)");
}
// An optional per-channel/per-feature tensor operand of `shape` and dtype `want`.
void expect_param(const Graph& g, const Node& n, size_t k, const Shape& shape, DType want,
                  const char* what, const char* op) {
  if (n.operands.at(k).none) return;
  const TensorMeta& m = meta(g, n, k);
  if (m.shape != shape || m.dtype != want)
    throw std::invalid_argument(std::string(op) + ": " + what + " is " + m.str() + ", expected " +
                                dt(want) + shape_str(shape) + " (PyTorch takes no mixed dtypes)");
}

// ---- softmax --------------------------------------------------------------------------------

// _softmax / _log_softmax(self, dim, half_to_float)
void parse_softmax(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")}};
  n.dim = rows::read_dim(a, g, n.operands[0].value, 1, "dim");
  n.flag = require_bool(a, 2, "half_to_float");
  const DType in = g.meta(n.operands[0].value).dtype;
  if (n.flag && in != DType::kFloat16)
    a.fail(
        "half_to_float with a " + dt(in) +
        " input: PyTorch converts float16 only (\"conversion is supported for Half type only\")");
  n.dtype = n.flag ? DType::kFloat32 : in;
}

std::vector<OutSpec> infer_softmax(const Graph& g, const Node& n) {
  expect_float(meta(g, n, 0), "self", "softmax");
  return {{meta(g, n, 0).shape, n.dtype}};
}

// _softmax_backward_data / _log_softmax_backward_data(grad_output, output, dim, input_dtype)
void parse_softmax_backward(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "grad_output")}, {a.tensor(1, "output")}};
  n.dim = rows::read_dim(a, g, n.operands[0].value, 2, "dim");
  n.dtype = a.dtype(3, "input_dtype");
}

std::vector<OutSpec> infer_softmax_backward(const Graph& g, const Node& n) {
  const TensorMeta &gr = meta(g, n, 0), &y = meta(g, n, 1);
  expect_float(gr, "grad_output", "softmax backward");
  if (gr.shape != y.shape || gr.dtype != y.dtype)
    throw std::invalid_argument("softmax backward: grad_output " + gr.str() + " and output " +
                                y.str() + " must have one shape and dtype");
  if (n.dtype != gr.dtype && !(gr.dtype == DType::kFloat32 && n.dtype == DType::kFloat16))
    throw std::invalid_argument(
        "softmax backward: input_dtype " + dt(n.dtype) + " with a " + dt(gr.dtype) +
        " grad: PyTorch takes grad's dtype, or float16 with a float32 grad");
  return {{gr.shape, n.dtype}};
}

// Calls f(base, stride) for each row of a softmax over `dim` of contiguous `shape`, in parallel.
template <typename F>
void for_rows(const Shape& shape, int64_t dim, F f) {
  const RowGeometry r = softmax_rows(shape, dim);
  parallel_for(
      r.rows(),
      [&](int64_t row) { f((row / r.inner) * r.len * r.inner + row % r.inner, r.inner, r.len); },
      r.len);
}

// max over a row, NaN if any element is NaN.
double row_max(const double* x, int64_t stride, int64_t len) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < len; ++j) {
    const double v = x[j * stride];
    if (std::isnan(v)) return v;
    m = std::max(m, v);
  }
  return m;
}

template <bool kLog>
std::vector<HostTensor> ref_softmax(const RefArgs& a) {
  const HostTensor& x = *a.in[0];
  HostTensor y = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  for_rows(x.meta.shape, a.node.dim, [&](int64_t base, int64_t st, int64_t len) {
    const double* xr = x.data.data() + base;
    double* yr = y.data.data() + base;
    const double m = row_max(xr, st, len);  // all -inf: x - m is NaN, as in PyTorch
    double s = 0;
    for (int64_t j = 0; j < len; ++j) s += std::exp(xr[j * st] - m);
    const double ls = std::log(s);
    for (int64_t j = 0; j < len; ++j)
      yr[j * st] = kLog ? xr[j * st] - m - ls : std::exp(xr[j * st] - m) / s;
  });
  return ref_outputs(std::move(y));
}

// softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g).
template <bool kLog>
std::vector<HostTensor> ref_softmax_backward(const RefArgs& a) {
  const HostTensor &gr = *a.in[0], &y = *a.in[1];
  HostTensor dx = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  for_rows(gr.meta.shape, a.node.dim, [&](int64_t base, int64_t st, int64_t len) {
    const double *gp = gr.data.data() + base, *yp = y.data.data() + base;
    double* out = dx.data.data() + base;
    double s = 0;
    for (int64_t j = 0; j < len; ++j) s += kLog ? gp[j * st] : gp[j * st] * yp[j * st];
    for (int64_t j = 0; j < len; ++j)
      out[j * st] = kLog ? gp[j * st] - std::exp(yp[j * st]) * s : yp[j * st] * (gp[j * st] - s);
  });
  return ref_outputs(std::move(dx));
}

// ---- nll_loss -------------------------------------------------------------------------------

void read_reduction(ArgReader& a, size_t i, Node& n) {
  static const char* kNames[] = {"none", "mean", "sum"};
  n.mode = kNames[a.integer(i, "reduction", 0, 2)];
}

// nll_loss_forward(self, target, weight, reduction, ignore_index)
void parse_nll_forward(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}, {a.tensor(1, "target")}, opt_tensor(a, 2, "weight")};
  read_reduction(a, 3, n);
  n.ignore_index = a.integer(4, "ignore_index");
}

// self [N, C] with target [N], or self [C] with a 0-dim target; weight [C] of self's dtype.
void check_nll_operands(const Graph& g, const Node& n, size_t self, size_t target, size_t weight,
                        const char* op) {
  const TensorMeta &x = meta(g, n, self), &t = meta(g, n, target);
  expect_float(x, "self", op);
  if (x.shape.empty() || x.shape.size() > 2)
    throw std::invalid_argument(std::string(op) + ": self is " + x.str() +
                                ", expected [N, C] or [C]");
  const Shape want_t = x.shape.size() == 2 ? Shape{x.shape[0]} : Shape{};
  if (t.dtype != DType::kInt64 || t.shape != want_t)
    throw std::invalid_argument(std::string(op) + ": target is " + t.str() + ", expected int64" +
                                shape_str(want_t) + " for self " + x.str());
  expect_param(g, n, weight, {x.shape.back()}, x.dtype, "weight", op);
}

Shape nll_output_shape(const TensorMeta& x, const Node& n) {
  return nll_reduction(n) == 0 && x.shape.size() == 2 ? Shape{x.shape[0]} : Shape{};
}

std::vector<OutSpec> infer_nll_forward(const Graph& g, const Node& n) {
  check_nll_operands(g, n, 0, 1, 2, "nll_loss_forward");
  const TensorMeta& x = meta(g, n, 0);
  return {{nll_output_shape(x, n), x.dtype}, {{}, x.dtype}};
}

// nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight)
void parse_nll_backward(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "grad_output")},
                {a.tensor(1, "self")},
                {a.tensor(2, "target")},
                opt_tensor(a, 3, "weight")};
  read_reduction(a, 4, n);
  n.ignore_index = a.integer(5, "ignore_index");
  n.operands.push_back({a.tensor(6, "total_weight")});
}

std::vector<OutSpec> infer_nll_backward(const Graph& g, const Node& n) {
  check_nll_operands(g, n, 1, 2, 3, "nll_loss_backward");
  const TensorMeta &x = meta(g, n, 1), &gr = meta(g, n, 0), &tw = meta(g, n, 4);
  const Shape want = nll_output_shape(x, n);
  if (gr.shape != want || gr.dtype != x.dtype)
    throw std::invalid_argument("nll_loss_backward: grad_output is " + gr.str() + ", expected " +
                                dt(x.dtype) + shape_str(want) + " (reduction " + n.mode + ")");
  if (tw.numel() != 1 || tw.dtype != x.dtype)
    throw std::invalid_argument("nll_loss_backward: total_weight is " + tw.str() +
                                ", expected one element of " + dt(x.dtype));
  return {{x.shape, x.dtype}};
}

// The class of row i, or -1 where it is ignore_index; throws for a class out of [0, C) (PyTorch
// asserts on the device).
int64_t nll_class(const RefArgs& a, size_t target, int64_t i, int64_t classes) {
  const double v = a.in[target]->data[i];
  const auto t = static_cast<int64_t>(v);
  if (t == a.node.ignore_index) return -1;
  if (t < 0 || t >= classes)
    throw std::invalid_argument("node " + a.node.id + ": nll_loss target " + std::to_string(t) +
                                " at row " + std::to_string(i) + " is out of range [0, " +
                                std::to_string(classes) + ") and not ignore_index " +
                                std::to_string(a.node.ignore_index));
  return t;
}

std::vector<HostTensor> ref_nll_forward(const RefArgs& a) {
  const HostTensor& x = *a.in[0];
  const int64_t C = x.meta.shape.back();
  const int64_t N = x.meta.shape.size() == 2 ? x.meta.shape[0] : 1;
  const HostTensor* w = a.in[2];
  const int red = nll_reduction(a.node);
  HostTensor out = make_host_tensor(a.out[0].shape, a.out[0].dtype);
  HostTensor tw = make_host_tensor(a.out[1].shape, a.out[1].dtype);
  double sum = 0, wsum = 0;
  for (int64_t i = 0; i < N; ++i) {  // in row order
    const int64_t t = nll_class(a, 1, i, C);
    if (t < 0) continue;
    const double wt = w ? w->data[t] : 1.0;
    const double loss = -wt * x.data[i * C + t];
    if (red == 0 && x.meta.shape.size() == 2) out.data[i] = loss;
    sum += loss;
    wsum += wt;
  }
  if (red != 0 || x.meta.shape.size() == 1) {
    out.data[0] = red == 1 ? sum / wsum : sum;  // mean over no weight: 0 / 0 = NaN, as PyTorch
    tw.data[0] = wsum;                          // reduction none over a batch leaves total_weight 0
  }
  return ref_outputs(std::move(out), std::move(tw));
}

std::vector<HostTensor> ref_nll_backward(const RefArgs& a) {
  const HostTensor &gr = *a.in[0], &x = *a.in[1];
  const int64_t C = x.meta.shape.back();
  const int64_t N = x.meta.shape.size() == 2 ? x.meta.shape[0] : 1;
  const HostTensor* w = a.in[3];
  const int red = nll_reduction(a.node);
  const double total = a.in[4]->data[0];
  HostTensor dx = make_host_tensor(a.out[0].shape, a.out[0].dtype);  // zeros
  for (int64_t i = 0; i < N; ++i) {
    const int64_t t = nll_class(a, 2, i, C);
    if (t < 0) continue;
    const double wt = w ? w->data[t] : 1.0;
    const double g = gr.data[gr.data.size() == 1 ? 0 : i];
    dx.data[i * C + t] = red == 1 ? -wt * g / total : -wt * g;
  }
  return ref_outputs(std::move(dx));
}

// ---- layer norm -----------------------------------------------------------------------------

// The [M, N] split of `x` by `normalized_shape` (its trailing dims); throws when they differ.
std::pair<int64_t, int64_t> layer_norm_rows(const Shape& x, const std::vector<int64_t>& ns,
                                            const char* op) {
  bool ok = !ns.empty() && ns.size() <= x.size();
  for (size_t i = 0; ok && i < ns.size(); ++i) ok = x[x.size() - ns.size() + i] == ns[i];
  if (!ok)
    throw std::invalid_argument(std::string(op) + ": normalized_shape " + shape_str(ns) +
                                " is not a nonempty list of trailing dims of the input " +
                                shape_str(x));
  const int64_t N = numel_of(ns);
  return {N == 0 ? 0 : numel_of(x) / N, N};
}

Shape layer_norm_stat_shape(const Shape& x, const std::vector<int64_t>& ns) {
  Shape s(x.begin(), x.end() - static_cast<std::ptrdiff_t>(ns.size()));
  s.resize(x.size(), 1);
  return s;
}

// native_layer_norm(input, normalized_shape, weight, bias, eps)
void parse_layer_norm(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "input")}, opt_tensor(a, 2, "weight"), opt_tensor(a, 3, "bias")};
  n.sizes = a.int_list(1, "normalized_shape");
  n.eps = a.scalar(4, "eps");
}

std::vector<OutSpec> infer_layer_norm(const Graph& g, const Node& n) {
  const TensorMeta& x = meta(g, n, 0);
  expect_float(x, "input", "native_layer_norm");
  layer_norm_rows(x.shape, n.sizes, "native_layer_norm");
  expect_param(g, n, 1, n.sizes, x.dtype, "weight", "native_layer_norm");
  expect_param(g, n, 2, n.sizes, x.dtype, "bias", "native_layer_norm");
  const Shape st = layer_norm_stat_shape(x.shape, n.sizes);
  return {{x.shape, x.dtype}, {st, acc_dtype(x.dtype)}, {st, acc_dtype(x.dtype)}};
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
// output_mask)
void parse_layer_norm_backward(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "grad_out")}, {a.tensor(1, "input")},     {a.tensor(3, "mean")},
                {a.tensor(4, "rstd")},     opt_tensor(a, 5, "weight"), opt_tensor(a, 6, "bias")};
  n.sizes = a.int_list(2, "normalized_shape");
  n.output_mask = read_output_mask(a, 7);
}

std::vector<OutSpec> infer_layer_norm_backward(const Graph& g, const Node& n) {
  const char* op = "native_layer_norm_backward";
  const TensorMeta &gr = meta(g, n, 0), &x = meta(g, n, 1);
  expect_float(x, "input", op);
  if (gr.shape != x.shape || gr.dtype != x.dtype)
    throw std::invalid_argument(std::string(op) + ": grad_out " + gr.str() +
                                " differs from input " + x.str());
  layer_norm_rows(x.shape, n.sizes, op);
  const Shape st = layer_norm_stat_shape(x.shape, n.sizes);
  for (size_t k : {2, 3})
    if (meta(g, n, k).shape != st || meta(g, n, k).dtype != acc_dtype(x.dtype))
      throw std::invalid_argument(std::string(op) + ": " + (k == 2 ? "mean" : "rstd") + " is " +
                                  meta(g, n, k).str() + ", expected " + dt(acc_dtype(x.dtype)) +
                                  shape_str(st) + " (what native_layer_norm gives)");
  expect_param(g, n, 4, n.sizes, x.dtype, "weight", op);
  expect_param(g, n, 5, n.sizes, x.dtype, "bias", op);
  if (n.output_mask[1] && n.operands[4].none)
    throw std::invalid_argument(std::string(op) +
                                ": output_mask asks for grad_weight without a weight");
  if (n.output_mask[2] && n.operands[5].none)
    throw std::invalid_argument(std::string(op) +
                                ": output_mask asks for grad_bias without a bias");
  std::vector<OutSpec> out = {{x.shape, x.dtype}, {n.sizes, x.dtype}, {n.sizes, x.dtype}};
  for (size_t k = 0; k < 3; ++k)
    if (!n.output_mask[k]) out[k] = {{0}, x.dtype, true};
  return out;
}

// Mean and biased variance of `len` elements at x[0], x[st], ... (two passes).
std::pair<double, double> moments(const double* x, int64_t len) {
  double s = 0;
  for (int64_t j = 0; j < len; ++j) s += x[j];
  const double mu = s / static_cast<double>(len);
  double m2 = 0;
  for (int64_t j = 0; j < len; ++j) m2 += (x[j] - mu) * (x[j] - mu);
  return {mu, m2 / static_cast<double>(len)};
}

std::vector<HostTensor> ref_layer_norm(const RefArgs& a) {
  const HostTensor& x = *a.in[0];
  const HostTensor *w = a.in[1], *b = a.in[2];
  // No structured binding: the lambdas below capture M and N (clang before 16 refuses that).
  const std::pair<int64_t, int64_t> rows_cols =
      layer_norm_rows(x.meta.shape, a.node.sizes, "native_layer_norm");
  const int64_t M = rows_cols.first, N = rows_cols.second;
  HostTensor y = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  HostTensor mean = make_host_tensor_for_overwrite(a.out[1].shape, a.out[1].dtype);
  HostTensor rstd = make_host_tensor_for_overwrite(a.out[2].shape, a.out[2].dtype);
  parallel_for(
      M,
      [&](int64_t r) {
        const double* xr = x.data.data() + r * N;
        const auto [mu, var] = moments(xr, N);
        const double rs = 1 / std::sqrt(var + a.node.eps);
        mean.data[r] = mu;
        rstd.data[r] = rs;
        for (int64_t j = 0; j < N; ++j)
          y.data[r * N + j] = (xr[j] - mu) * rs * (w ? w->data[j] : 1.0) + (b ? b->data[j] : 0.0);
      },
      N);
  return ref_outputs(std::move(y), std::move(mean), std::move(rstd));
}

// dx = rstd (gw - mean(gw) - xhat mean(gw xhat)) over each row (layer norm) or (n, group) block
// (group norm), gw = g w, xhat = (x - mean) rstd with the recorded mean and rstd (ATen's
// dx = rstd gw + b x + c, the same algebra); dw = sum g xhat, db = sum g per channel.
std::vector<HostTensor> ref_layer_norm_backward(const RefArgs& a) {
  const HostTensor &gr = *a.in[0], &x = *a.in[1], &mean = *a.in[2], &rstd = *a.in[3];
  const HostTensor* w = a.in[4];
  const auto& mask = a.node.output_mask;
  const std::pair<int64_t, int64_t> rows_cols =
      layer_norm_rows(x.meta.shape, a.node.sizes, "native_layer_norm_backward");
  const int64_t M = rows_cols.first, N = rows_cols.second;
  HostTensor dx = make_host_tensor(mask[0] ? a.out[0].shape : Shape{0}, a.out[0].dtype);
  HostTensor dw = make_host_tensor(mask[1] ? a.out[1].shape : Shape{0}, a.out[1].dtype);
  HostTensor db = make_host_tensor(mask[2] ? a.out[2].shape : Shape{0}, a.out[2].dtype);
  if (mask[1] || mask[2])
    parallel_for(
        N,
        [&](int64_t j) {  // summed over the rows in row order
          double sw = 0, sb = 0;
          for (int64_t r = 0; r < M; ++r) {
            const int64_t e = r * N + j;
            sw += gr.data[e] * (x.data[e] - mean.data[r]) * rstd.data[r];
            sb += gr.data[e];
          }
          if (mask[1]) dw.data[j] = sw;
          if (mask[2]) db.data[j] = sb;
        },
        M);
  if (mask[0])
    parallel_for(
        M,
        [&](int64_t r) {
          const double mu = mean.data[r], rs = rstd.data[r];
          const double* g = gr.data.data() + r * N;
          const double* xr = x.data.data() + r * N;
          double s1 = 0, s2 = 0;
          for (int64_t j = 0; j < N; ++j) {
            const double gw = g[j] * (w ? w->data[j] : 1.0);
            s1 += gw;
            s2 += gw * (xr[j] - mu) * rs;
          }
          const double m1 = s1 / static_cast<double>(N), m2 = s2 / static_cast<double>(N);
          for (int64_t j = 0; j < N; ++j)
            dx.data[r * N + j] = rs * (g[j] * (w ? w->data[j] : 1.0) - m1 - (xr[j] - mu) * rs * m2);
        },
        N);
  return ref_outputs(std::move(dx), std::move(dw), std::move(db));
}

// ---- group norm -----------------------------------------------------------------------------

void read_group_dims(ArgReader& a, size_t first, Node& n) {
  const int64_t N = a.integer(first, "N", 0), C = a.integer(first + 1, "C", 0),
                HxW = a.integer(first + 2, "HxW", 0), group = a.integer(first + 3, "group", 1);
  if (C % group != 0)
    a.fail("C = " + std::to_string(C) + " is not divisible by group = " + std::to_string(group));
  n.sizes = {N, C, HxW, group};
}

// input [N, C, *] with numel N * C * HxW.
void check_group_input(const TensorMeta& x, const GroupNormDims& d, const char* op) {
  expect_float(x, "input", op);
  if (x.shape.size() < 2 || x.shape[0] != d.N || x.shape[1] != d.C ||
      x.numel() != d.N * d.C * d.HxW)
    throw std::invalid_argument(std::string(op) + ": input " + x.str() +
                                " is not [N, C, *] with N = " + std::to_string(d.N) + ", C = " +
                                std::to_string(d.C) + ", HxW = " + std::to_string(d.HxW));
}

// native_group_norm(input, weight, bias, N, C, HxW, group, eps)
void parse_group_norm(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "input")}, opt_tensor(a, 1, "weight"), opt_tensor(a, 2, "bias")};
  read_group_dims(a, 3, n);
  n.eps = a.scalar(7, "eps");
}

std::vector<OutSpec> infer_group_norm(const Graph& g, const Node& n) {
  const GroupNormDims d = group_norm_dims(n);
  const TensorMeta& x = meta(g, n, 0);
  check_group_input(x, d, "native_group_norm");
  expect_param(g, n, 1, {d.C}, x.dtype, "weight", "native_group_norm");
  expect_param(g, n, 2, {d.C}, x.dtype, "bias", "native_group_norm");
  return {{x.shape, x.dtype}, {{d.N, d.group}, x.dtype}, {{d.N, d.group}, x.dtype}};
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)
void parse_group_norm_backward(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "grad_out")},
                {a.tensor(1, "input")},
                {a.tensor(2, "mean")},
                {a.tensor(3, "rstd")},
                opt_tensor(a, 4, "weight")};
  read_group_dims(a, 5, n);
  n.output_mask = read_output_mask(a, 9);
}

std::vector<OutSpec> infer_group_norm_backward(const Graph& g, const Node& n) {
  const char* op = "native_group_norm_backward";
  const GroupNormDims d = group_norm_dims(n);
  const TensorMeta &gr = meta(g, n, 0), &x = meta(g, n, 1);
  check_group_input(x, d, op);
  if (gr.shape != x.shape || gr.dtype != x.dtype)
    throw std::invalid_argument(std::string(op) + ": grad_out " + gr.str() +
                                " differs from input " + x.str());
  for (size_t k : {2, 3})
    if (meta(g, n, k).shape != Shape{d.N, d.group} || meta(g, n, k).dtype != x.dtype)
      throw std::invalid_argument(std::string(op) + ": " + (k == 2 ? "mean" : "rstd") + " is " +
                                  meta(g, n, k).str() + ", expected " + dt(x.dtype) +
                                  shape_str({d.N, d.group}));
  expect_param(g, n, 4, {d.C}, x.dtype, "weight", op);
  if ((n.output_mask[1] || n.output_mask[2]) && n.operands[4].none)
    throw std::invalid_argument(std::string(op) +
                                ": output_mask asks for grad_weight or grad_bias without a weight");
  std::vector<OutSpec> out = {{x.shape, x.dtype}, {{d.C}, x.dtype}, {{d.C}, x.dtype}};
  for (size_t k = 0; k < 3; ++k)
    if (!n.output_mask[k]) out[k] = {{0}, x.dtype, true};
  return out;
}

std::vector<HostTensor> ref_group_norm(const RefArgs& a) {
  const GroupNormDims d = group_norm_dims(a.node);
  const HostTensor& x = *a.in[0];
  const HostTensor *w = a.in[1], *b = a.in[2];
  const int64_t len = d.group_size(), per = d.channels_per_group();
  HostTensor y = make_host_tensor_for_overwrite(a.out[0].shape, a.out[0].dtype);
  HostTensor mean = make_host_tensor_for_overwrite(a.out[1].shape, a.out[1].dtype);
  HostTensor rstd = make_host_tensor_for_overwrite(a.out[2].shape, a.out[2].dtype);
  parallel_for(
      d.N * d.group,
      [&](int64_t r) {  // (n, group) r: elements [r * len, (r + 1) * len)
        const double* xr = x.data.data() + r * len;
        const auto [mu, var] = moments(xr, len);
        // ATen's kernel stores mean and rstd in their dtype (the input's) and computes y from
        // what it stored: a bfloat16 group norm normalizes with bfloat16 statistics.
        const double mu_s = round_to(mean.meta.dtype, mu);
        const double rs_s = round_to(rstd.meta.dtype, 1 / std::sqrt(var + a.node.eps));
        mean.data[r] = mu;
        rstd.data[r] = rs_s;
        for (int64_t j = 0; j < len; ++j) {
          const int64_t c = (r % d.group) * per + j / std::max<int64_t>(d.HxW, 1);
          y.data[r * len + j] =
              (xr[j] - mu_s) * rs_s * (w ? w->data[c] : 1.0) + (b ? b->data[c] : 0.0);
        }
      },
      len);
  return ref_outputs(std::move(y), std::move(mean), std::move(rstd));
}

// As ref_layer_norm_backward, over (n, group) blocks of C/group channels x HxW; dw and db of
// channel c sum over the batch and its HxW positions.
std::vector<HostTensor> ref_group_norm_backward(const RefArgs& a) {
  const GroupNormDims d = group_norm_dims(a.node);
  const HostTensor &gr = *a.in[0], &x = *a.in[1], &mean = *a.in[2], &rstd = *a.in[3];
  const HostTensor* w = a.in[4];
  const auto& mask = a.node.output_mask;
  const int64_t len = d.group_size(), per = d.channels_per_group(), HxW = d.HxW;
  HostTensor dx = make_host_tensor(mask[0] ? a.out[0].shape : Shape{0}, a.out[0].dtype);
  HostTensor dw = make_host_tensor(mask[1] ? a.out[1].shape : Shape{0}, a.out[1].dtype);
  HostTensor db = make_host_tensor(mask[2] ? a.out[2].shape : Shape{0}, a.out[2].dtype);
  if (mask[1] || mask[2])
    parallel_for(
        d.C,
        [&](int64_t c) {
          double sw = 0, sb = 0;
          for (int64_t n = 0; n < d.N; ++n) {
            const int64_t r = n * d.group + c / per;  // the statistic of (n, c's group)
            for (int64_t h = 0; h < HxW; ++h) {
              const int64_t e = (n * d.C + c) * HxW + h;
              sw += gr.data[e] * (x.data[e] - mean.data[r]) * rstd.data[r];
              sb += gr.data[e];
            }
          }
          if (mask[1]) dw.data[c] = sw;
          if (mask[2]) db.data[c] = sb;
        },
        d.N * HxW);
  if (mask[0])
    parallel_for(
        d.N * d.group,
        [&](int64_t r) {  // block r: elements [r * len, (r + 1) * len), channels from c0
          const int64_t base = r * len, c0 = (r % d.group) * per;
          const double mu = mean.data[r], rs = rstd.data[r];
          auto gw = [&](int64_t j) {
            return gr.data[base + j] * (w ? w->data[c0 + j / HxW] : 1.0);
          };
          double s1 = 0, s2 = 0;
          for (int64_t j = 0; j < len; ++j) {
            s1 += gw(j);
            s2 += gw(j) * (x.data[base + j] - mu) * rs;
          }
          const double m1 = s1 / static_cast<double>(len), m2 = s2 / static_cast<double>(len);
          for (int64_t j = 0; j < len; ++j)
            dx.data[base + j] = rs * (gw(j) - m1 - (x.data[base + j] - mu) * rs * m2);
        },
        len);
  return ref_outputs(std::move(dx), std::move(dw), std::move(db));
}

// ---- dropout backward -----------------------------------------------------------------------

// native_dropout_backward(grad_output, mask, scale)
void parse_dropout_backward(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "grad_output")}, {a.tensor(1, "mask")}, a.scalar_operand(2, "scale")};
}

std::vector<OutSpec> infer_dropout_backward(const Graph& g, const Node& n) {
  const TensorMeta &gr = meta(g, n, 0), &m = meta(g, n, 1);
  expect_float(gr, "grad_output", "native_dropout_backward");
  if (m.dtype != DType::kBool || m.shape != gr.shape)
    throw std::invalid_argument("native_dropout_backward: mask is " + m.str() + ", expected bool" +
                                shape_str(gr.shape) + " (\"Mask should be Bool Scalar Type\")");
  return {{gr.shape, gr.dtype}};
}

std::vector<HostTensor> ref_dropout_backward(const RefArgs& a) {
  const double scale = a.node.operands[2].scalar;
  return ref_outputs(
      ref::from_array(ref::as_array(*a.in[0]) * ref::as_array(*a.in[1]) * scale, a.out[0]));
}

#define ROW(op, name, nout, parse, infer, ref, fn, example) \
  { op, name, OpKind::kNn, nout, parse, infer, ref, eager_nn(NnFn::fn), nullptr, example }

constexpr OpDef kRows[] = {
    ROW(Op::kSoftmax, "aten._softmax.default", 1, parse_softmax, infer_softmax, ref_softmax<false>,
        kSoftmax,
        R"({"inputs": [{"shape": [4, 6, 33], "dtype": "bfloat16"}], "args": [{"ref": "in0"}, -1, false]})"),
    ROW(Op::kLogSoftmax, "aten._log_softmax.default", 1, parse_softmax, infer_softmax,
        ref_softmax<true>, kLogSoftmax,
        R"({"inputs": [{"shape": [5, 7, 3], "dtype": "float32"}], "args": [{"ref": "in0"}, 1, false]})"),
    ROW(Op::kSoftmaxBackward, "aten._softmax_backward_data.default", 1, parse_softmax_backward,
        infer_softmax_backward, ref_softmax_backward<false>, kSoftmaxBackward,
        R"({"inputs": [{"shape": [4, 40], "dtype": "float32"},
                       {"shape": [4, 40], "dtype": "float32", "stats": {"mean": 0.025, "std": 0.01, "min": 0, "max": 1}}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, -1, {"dtype": "float16"}]})"),
    ROW(Op::kLogSoftmaxBackward, "aten._log_softmax_backward_data.default", 1,
        parse_softmax_backward, infer_softmax_backward, ref_softmax_backward<true>,
        kLogSoftmaxBackward,
        R"({"inputs": [{"shape": [6, 50], "dtype": "bfloat16"},
                       {"shape": [6, 50], "dtype": "bfloat16", "stats": {"mean": -4, "std": 1, "min": -10, "max": -0.01}}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, 1, {"dtype": "bfloat16"}]})"),
    ROW(Op::kNllLossForward, "aten.nll_loss_forward.default", 2, parse_nll_forward,
        infer_nll_forward, ref_nll_forward, kNllLossForward,
        R"({"inputs": [{"shape": [16, 10], "dtype": "float32", "stats": {"mean": -2.3, "std": 1, "min": -8, "max": 0}},
                       {"shape": [16], "dtype": "int64", "stats": {"mean": 4, "std": 4, "min": -1, "max": 9}},
                       {"shape": [10], "dtype": "float32", "stats": {"mean": 1, "std": 0.3, "min": 0.1, "max": 2}}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, {"ref": "in2"}, 1, -1]})"),
    ROW(Op::kNllLossBackward, "aten.nll_loss_backward.default", 1, parse_nll_backward,
        infer_nll_backward, ref_nll_backward, kNllLossBackward,
        R"({"inputs": [{"shape": [], "dtype": "float32"},
                       {"shape": [16, 10], "dtype": "float32", "stats": {"mean": -2.3, "std": 1, "min": -8, "max": 0}},
                       {"shape": [16], "dtype": "int64", "stats": {"mean": 4, "std": 4, "min": -1, "max": 9}},
                       {"shape": [10], "dtype": "float32", "stats": {"mean": 1, "std": 0.3, "min": 0.1, "max": 2}},
                       {"shape": [], "dtype": "float32", "stats": {"mean": 12, "std": 0, "min": 0, "max": 100}}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, {"ref": "in2"}, {"ref": "in3"}, 1, -1, {"ref": "in4"}]})"),
    ROW(Op::kNativeLayerNorm, "aten.native_layer_norm.default", 3, parse_layer_norm,
        infer_layer_norm, ref_layer_norm, kLayerNorm,
        R"({"inputs": [{"shape": [2, 8, 64], "dtype": "bfloat16"},
                       {"shape": [64], "dtype": "bfloat16", "stats": {"mean": 1, "std": 0.1, "min": 0.5, "max": 1.5}},
                       {"shape": [64], "dtype": "bfloat16", "stats": {"mean": 0, "std": 0.1, "min": -1, "max": 1}}],
            "args": [{"ref": "in0"}, [64], {"ref": "in1"}, {"ref": "in2"}, 1e-5]})"),
    ROW(Op::kNativeLayerNormBackward, "aten.native_layer_norm_backward.default", 3,
        parse_layer_norm_backward, infer_layer_norm_backward, ref_layer_norm_backward,
        kLayerNormBackward,
        R"({"inputs": [{"shape": [6, 48], "dtype": "float32"}, {"shape": [6, 48], "dtype": "float32"},
                       {"shape": [6, 1], "dtype": "float32", "stats": {"mean": 0, "std": 0.1, "min": -1, "max": 1}},
                       {"shape": [6, 1], "dtype": "float32", "stats": {"mean": 1, "std": 0.1, "min": 0.5, "max": 2}},
                       {"shape": [48], "dtype": "float32", "stats": {"mean": 1, "std": 0.1, "min": 0.5, "max": 1.5}}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, [48], {"ref": "in2"}, {"ref": "in3"}, {"ref": "in4"},
                     null, [true, true, false]]})"),
    ROW(Op::kNativeGroupNorm, "aten.native_group_norm.default", 3, parse_group_norm,
        infer_group_norm, ref_group_norm, kGroupNorm,
        R"({"inputs": [{"shape": [2, 6, 5, 3], "dtype": "float32"},
                       {"shape": [6], "dtype": "float32", "stats": {"mean": 1, "std": 0.1, "min": 0.5, "max": 1.5}},
                       {"shape": [6], "dtype": "float32", "stats": {"mean": 0, "std": 0.1, "min": -1, "max": 1}}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, {"ref": "in2"}, 2, 6, 15, 3, 1e-5]})"),
    ROW(Op::kNativeGroupNormBackward, "aten.native_group_norm_backward.default", 3,
        parse_group_norm_backward, infer_group_norm_backward, ref_group_norm_backward,
        kGroupNormBackward,
        R"({"inputs": [{"shape": [2, 6, 5, 3], "dtype": "float32"}, {"shape": [2, 6, 5, 3], "dtype": "float32"},
                       {"shape": [2, 3], "dtype": "float32", "stats": {"mean": 0, "std": 0.1, "min": -1, "max": 1}},
                       {"shape": [2, 3], "dtype": "float32", "stats": {"mean": 1, "std": 0.1, "min": 0.5, "max": 2}},
                       {"shape": [6], "dtype": "float32", "stats": {"mean": 1, "std": 0.1, "min": 0.5, "max": 1.5}}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, {"ref": "in2"}, {"ref": "in3"}, {"ref": "in4"},
                     2, 6, 15, 3, [true, true, true]]})"),
    ROW(Op::kNativeDropoutBackward, "aten.native_dropout_backward.default", 1,
        parse_dropout_backward, infer_dropout_backward, ref_dropout_backward, kDropoutBackward,
        R"({"inputs": [{"shape": [4, 5], "dtype": "bfloat16"}, {"shape": [4, 5], "dtype": "bool"}],
            "args": [{"ref": "in0"}, {"ref": "in1"}, 1.1111111111111112]})"),
};
static_assert(rows_cover(kRows, kNnOps), "one row per nn op, in enum order");

}  // namespace

int64_t nn_reduced_terms(const Graph& g, const Node& n) {
  const auto shape = [&](size_t k) -> const Shape& { return g.meta(n.operands.at(k).value).shape; };
  switch (n.op) {
    case Op::kSoftmax:
    case Op::kLogSoftmax:
    case Op::kSoftmaxBackward:
    case Op::kLogSoftmaxBackward:
      return softmax_rows(shape(0), n.dim).len;
    case Op::kNllLossForward:
    case Op::kNllLossBackward: {
      const Shape& x = shape(n.op == Op::kNllLossForward ? 0 : 1);
      return x.size() == 2 ? std::max<int64_t>(x[0], 1) : 1;
    }
    case Op::kNativeLayerNorm:
    case Op::kNativeLayerNormBackward: {
      const Shape& x = shape(n.op == Op::kNativeLayerNorm ? 0 : 1);
      const auto [M, N] = layer_norm_rows(x, n.sizes, op_name(n.op).data());
      return std::max<int64_t>(n.op == Op::kNativeLayerNorm ? N : std::max(M, N), 1);
    }
    case Op::kNativeGroupNorm:
    case Op::kNativeGroupNormBackward: {
      const GroupNormDims d = group_norm_dims(n);
      const int64_t batch = n.op == Op::kNativeGroupNorm ? 1 : d.N * d.HxW;
      return std::max<int64_t>({d.group_size(), batch, 1});
    }
    default:
      return 1;
  }
}

std::span<const OpDef> nn_op_rows() {
  return kRows;
}

}  // namespace replay
