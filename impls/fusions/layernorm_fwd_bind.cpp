// Binding of the layernorm_fwd region params (workloads/matchers/layernorm_fwd.cpp) to the
// kernels of layernorm_fwd.cu.
#include "impls/fusions/fusion_binding.hpp"
#include "impls/fusions/layernorm_fwd.hpp"
#include "workloads/shapes.hpp"

namespace replay {
namespace {

// Row stride of `m` seen as [rows, cols] with a contiguous last dim; -1 if it cannot be.
int64_t row_stride(const TensorMeta& m, int64_t rows, int64_t cols) {
  if (m.shape.empty() || m.shape.back() != cols) return -1;
  auto st = view_strides(m.shape, m.stride, {rows, cols});
  if (!st || (*st)[1] != 1) return -1;
  return rows == 1 ? cols : (*st)[0];
}

}  // namespace

FusionBinding bind_layernorm_fwd(const nlohmann::json& p, const std::string& variant,
                                 const FusionContext& ctx) {
  FusionBinding b;
  NormFwdArgs a;
  a.kind = p.at("kind") == "rmsnorm" ? NormKind::kRMSNorm : NormKind::kLayerNorm;
  a.rows = p.at("rows").get<int64_t>();
  a.cols = p.at("cols").get<int64_t>();
  a.eps = static_cast<float>(p.at("eps").get<double>());
  BoundValue x = ctx.value(p.at("x").get<std::string>());
  BoundValue y = ctx.value(p.at("out").get<std::string>());
  a.x = x.ptr;
  a.x_dtype = x.layout.dtype;
  a.x_row_stride = row_stride(x.layout, a.rows, a.cols);
  a.out = y.ptr;
  a.out_dtype = y.layout.dtype;
  a.out_row_stride = row_stride(y.layout, a.rows, a.cols);
  if (a.x_row_stride < 0 || a.out_row_stride < 0) {
    b.unsupported = "input or output rows are not [rows, cols] with a contiguous last dim";
    return b;
  }
  for (const auto& st : p.at("epilogue")) {
    if (a.n_epilogue == kNormMaxEpilogue) {
      b.unsupported = "epilogue longer than " + std::to_string(kNormMaxEpilogue) + " steps";
      return b;
    }
    NormEpilogueStep& s = a.epilogue[a.n_epilogue++];
    s.dtype = parse_dtype(st.at("dtype").get<std::string>()).value_or(DType::kFloat32);
    const std::string op = st.at("op");
    s.op = op == "round" ? EpilogueOp::kRound : op == "mul" ? EpilogueOp::kMul : EpilogueOp::kAdd;
    if (s.op == EpilogueOp::kRound) continue;
    if (a.n_weights == kNormMaxWeights) {
      b.unsupported = "more than 2 weight operands in the epilogue";
      return b;
    }
    BoundValue w = ctx.value(st.at("value").get<std::string>());
    if (w.layout.numel() != a.cols || w.layout.stride.back() != 1) {
      b.unsupported = "weight '" + st.at("value").get<std::string>() + "' is not a contiguous [C]";
      return b;
    }
    s.weight = a.n_weights;
    a.w[a.n_weights] = w.ptr;
    a.w_dtype[a.n_weights++] = w.layout.dtype;
  }
  b.unsupported = layernorm_fwd_supports(a, variant);
  if (!b.unsupported.empty()) return b;
  if (variant == "baseline") {
    auto* mean = static_cast<float*>(ctx.workspace(sizeof(float) * a.rows));
    auto* rstd = static_cast<float*>(ctx.workspace(sizeof(float) * a.rows));
    b.launch = [a, mean, rstd](cudaStream_t s) { layernorm_fwd_baseline(a, mean, rstd, s); };
  } else {
    b.launch = [a](cudaStream_t s) { layernorm_fwd_optimized(a, s); };
  }
  return b;
}

}  // namespace replay
