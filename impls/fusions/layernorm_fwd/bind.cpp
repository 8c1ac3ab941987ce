// layernorm_fwd binder: typed params (match.cpp) -> kernel arguments (kernels.hpp).
#include <tuple>

#include "impls/fusions/binding.hpp"
#include "impls/fusions/bookend/variants.hpp"
#include "impls/fusions/layernorm_fwd/params.hpp"
#include "workloads/ir/layout.hpp"

namespace replay::layernorm_fwd {

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  if (bookend::is_bookend_variant(v)) return bookend::bind_bookend(g, r, v, ctx, &bind);
  Binding b;
  if (v.role == Role::kAlternative) {
    b.unsupported = "layernorm_fwd has no variant '" + std::string(v.name) + "'";
    return b;
  }
  NormFwdArgs a;
  a.kind = p.kind;
  a.rows = p.rows;
  a.cols = p.cols;
  a.eps = static_cast<float>(p.eps);
  if (p.eps_value >= 0) {
    BoundTensor e = ctx.tensor(p.eps_value);
    if (e.layout.dtype != DType::kFloat32 || e.layout.numel() != 1) {
      b.unsupported = "eps tensor '" + g.values[p.eps_value].name + "' is " + e.layout.str() +
                      " (needs one float32)";
      return b;
    }
    a.eps_ptr = static_cast<const float*>(e.ptr);
  }
  if (p.correction != 0) {
    if (!(p.correction < static_cast<double>(p.cols))) {
      b.unsupported = "variance correction " + std::to_string(p.correction) +
                      " leaves no degrees of freedom in a row of " + std::to_string(p.cols);
      return b;
    }
    a.var_scale = static_cast<float>(p.cols / (p.cols - p.correction));
  }
  BoundTensor x = ctx.tensor(p.x);
  BoundTensor y = ctx.tensor(p.out);
  a.x = x.ptr;
  a.x_dtype = x.layout.dtype;
  a.x_row_stride = row_stride(x.layout, a.cols);
  a.out = y.ptr;
  a.out_dtype = y.layout.dtype;
  a.out_row_stride = row_stride(y.layout, a.cols);
  if (a.x_row_stride < 0 || a.out_row_stride < 0) {
    b.unsupported = "input or output rows are not [rows, cols] with a contiguous last dim";
    return b;
  }
  // The residual prologue: the norm reads h = x + residual, written to p.h when it is exported.
  if (p.residual >= 0) {
    BoundTensor res = ctx.tensor(p.residual);
    a.residual = res.ptr;
    a.residual_row_stride = row_stride(res.layout, a.cols);
    a.h_round = p.h_round;
    if (res.layout.dtype != a.x_dtype || a.residual_row_stride < 0) {
      b.unsupported = "residual '" + g.values[p.residual].name + "' is " + res.layout.str() +
                      " (needs x's dtype, [rows, cols] with a contiguous last dim)";
      return b;
    }
    if (p.h >= 0) {
      BoundTensor h = ctx.tensor(p.h);
      a.h_out = h.ptr;
      a.h_row_stride = row_stride(h.layout, a.cols);
      if (h.layout.dtype != a.x_dtype || a.h_row_stride < 0) {
        b.unsupported = "the sum h '" + g.values[p.h].name + "' is " + h.layout.str() +
                        " (needs x's dtype, [rows, cols] with a contiguous last dim)";
        return b;
      }
    }
  }
  // What a training forward saves for the backward, written by the same kernels.
  for (auto [value, ptr, stride] : {std::tuple{p.mean, &a.mean_out, &a.mean_stride},
                                    std::tuple{p.rstd, &a.rstd_out, &a.rstd_stride}}) {
    if (value < 0) continue;
    BoundTensor t = ctx.tensor(value);
    // At least one value per row (as norm_bwd binds them): the kernel writes rows [0, rows).
    *stride = flat_stride(t.layout, t.layout.numel());
    if (t.layout.dtype != DType::kFloat32 || *stride < 0 || t.layout.numel() < a.rows) {
      b.unsupported = "saved statistic '" + g.values[value].name + "' is " + t.layout.str() +
                      " (needs float32, one value per row)";
      return b;
    }
    *ptr = static_cast<float*>(t.ptr);
  }
  if (p.x32 >= 0) {
    BoundTensor t = ctx.tensor(p.x32);
    a.x32_row_stride = row_stride(t.layout, a.cols);
    if (t.layout.dtype != DType::kFloat32 || a.x32_row_stride < 0) {
      b.unsupported = "exported upcast x '" + g.values[p.x32].name + "' is not float32 [rows, " +
                      "cols] with a contiguous last dim";
      return b;
    }
    a.x32_out = static_cast<float*>(t.ptr);
  }
  // Intermediates a default-partitioner forward saves, each written in its own dtype.
  if (p.row_exports.size() > static_cast<size_t>(kNormMaxExports)) {
    b.unsupported = "more than " + std::to_string(kNormMaxExports) + " exported intermediates";
    return b;
  }
  for (const RowExport& e : p.row_exports) {
    BoundTensor t = ctx.tensor(e.value);
    NormRowExport& x = a.row_exports[a.n_row_exports++];
    x.ptr = t.ptr;
    x.dtype = t.layout.dtype;
    x.row_stride = row_stride(t.layout, a.cols);
    x.stage = e.stage;
    if (x.row_stride < 0) {
      b.unsupported = "exported intermediate '" + g.values[e.value].name + "' is " +
                      t.layout.str() + " (needs [rows, cols] with a contiguous last dim)";
      return b;
    }
  }
  if (p.epilogue.size() > static_cast<size_t>(kNormMaxEpilogue)) {
    b.unsupported = "epilogue longer than " + std::to_string(kNormMaxEpilogue) + " steps";
    return b;
  }
  for (const EpilogueStep& st : p.epilogue) {
    NormEpilogueStep& s = a.epilogue[a.n_epilogue++];
    s.op = st.op;
    s.dtype = st.dtype;
    if (st.op == EpilogueOp::kRound) continue;
    if (a.n_weights == kNormMaxWeights) {
      b.unsupported = "more than 2 weight operands in the epilogue";
      return b;
    }
    BoundTensor w = ctx.tensor(st.weight);
    if (w.layout.numel() != a.cols || w.layout.stride.back() != 1) {
      b.unsupported = "weight '" + g.values[st.weight].name + "' is not a contiguous [C]";
      return b;
    }
    s.weight = a.n_weights;
    a.w_offset[a.n_weights] = static_cast<float>(st.offset);
    a.w_offset_dtype[a.n_weights] = st.offset_dtype;
    if (st.offset != 0 && static_cast<double>(a.w_offset[a.n_weights]) != st.offset) {
      b.unsupported = "weight offset " + std::to_string(st.offset) + " is not a float32 value";
      return b;
    }
    a.w[a.n_weights] = w.ptr;
    a.w_dtype[a.n_weights++] = w.layout.dtype;
  }
  // The [C] weights as the epilogue uses them, where the graph returns them (Gemma's 1 + w).
  for (const WeightExport& e : p.weight_exports) {
    const int step = e.step;
    if (step < 0 || step >= a.n_epilogue || a.epilogue[step].weight < 0 ||
        a.n_weight_exports == kNormMaxWeights) {
      b.unsupported = "exported weight '" + g.values[e.value].name + "' is not one per weight of " +
                      "an epilogue step";
      return b;
    }
    BoundTensor t = ctx.tensor(e.value);
    if (t.layout.numel() != a.cols || t.layout.stride.back() != 1) {
      b.unsupported = "exported weight '" + g.values[e.value].name + "' is not a contiguous [C]";
      return b;
    }
    NormWeightExport& x = a.weight_exports[a.n_weight_exports++];
    x.ptr = t.ptr;
    x.dtype = t.layout.dtype;
    x.weight = a.epilogue[step].weight;
    x.offset = e.offset;
  }
  const NormVariant kernel =
      v.role == Role::kBaseline ? NormVariant::kBaseline : NormVariant::kOptimized;
  b.unsupported = layernorm_fwd_supports(a, kernel);
  if (!b.unsupported.empty()) return b;
  if (kernel == NormVariant::kBaseline) {
    auto* mean = static_cast<float*>(ctx.workspace(sizeof(float) * a.rows));
    auto* rstd = static_cast<float*>(ctx.workspace(sizeof(float) * a.rows));
    // h goes through memory in the baseline; when the graph does not return it, to a workspace.
    void* h_ws = a.residual && !a.h_out
                     ? ctx.workspace(static_cast<size_t>(a.rows * a.cols) * dtype_size(a.x_dtype))
                     : nullptr;
    b.launch = [a, mean, rstd, h_ws](const LaunchContext& c) {
      layernorm_fwd_baseline(a, mean, rstd, h_ws, c.stream);
    };
  } else {
    b.launch = [a](const LaunchContext& c) { layernorm_fwd_optimized(a, c.stream); };
  }
  return b;
}

}  // namespace replay::layernorm_fwd
