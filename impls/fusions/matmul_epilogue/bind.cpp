// matmul_epilogue binder: typed params (match.cpp) -> cuBLASLt matmuls (impls/eager/gemm.hpp's
// prepare_matmul) and the epilogue kernel (kernels.hpp).
//
//   optimized: GEMM (CUBLASLT_EPILOGUE_BIAS for addmm, the graph's dtype direct) [+ the up GEMM]
//              [+ one fused kernel: bias of mm + add, activation, gating, casts, residual]
//   baseline:  GEMM without epilogue (float32 output when addmm's bias follows) [+ the up GEMM]
//              + one kernel per step: bias, activation, gating
// Both compute what the graph computes with its roundings (the GEMM output rounded to its dtype,
// each cast a rounding); TUNING.md says why cuBLASLt's GELU epilogues are not used.
#include <string>
#include <vector>

#include "impls/eager/gemm.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/matmul_epilogue/params.hpp"

namespace replay::matmul_epilogue {
namespace {

// A row-major [M, N] view of a bound tensor of M * N elements with a unit last stride and rows
// N apart (a contiguous [.., N]), or of a 2-D one with any row stride; ptr null when neither.
EpiMat as_rows(const BoundTensor& t, int64_t M, int64_t N) {
  EpiMat m;
  const TensorMeta& l = t.layout;
  if (l.numel() != M * N) return m;
  if (l.shape.size() == 2 && (l.stride[1] == 1 || N == 1) && (l.stride[0] >= N || M == 1)) {
    m.ld = M == 1 ? N : l.stride[0];
  } else if (l.is_contiguous()) {
    m.ld = N;
  } else {
    return m;
  }
  m.ptr = t.ptr;
  m.dtype = l.dtype;
  return m;
}

DeviceTensor dev2(const EpiMat& m, int64_t M, int64_t N) {
  DeviceTensor t;
  t.ptr = m.ptr;
  t.dtype = m.dtype;
  t.ndim = 2;
  t.shape[0] = M;
  t.shape[1] = N;
  t.stride[0] = m.ld;
  t.stride[1] = 1;
  return t;
}

}  // namespace

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Binding b;
  if (v.role == Role::kAlternative) {
    b.unsupported = "matmul_epilogue has no variant '" + std::string(v.name) + "'";
    return b;
  }
  const bool optimized = v.role == Role::kOptimized;
  const int64_t M = p.M, N = p.N;
  const DType dt = p.gemm_dtype;
  const size_t mn = static_cast<size_t>(M * N);

  // A GEMM output's buffer: the graph's value when the region exports it, else a workspace.
  auto gemm_out = [&](const Gemm& gm, EpiMat& z) -> bool {
    if (gm.exported || gm.out == p.out) {
      z = as_rows(ctx.tensor(gm.out), M, N);
      if (!z.ptr) {
        b.unsupported = "GEMM output '" + g.values[gm.out].name + "' is not a row-major [M, N]";
        return false;
      }
    } else {
      z.ptr = ctx.workspace(mn * dtype_size(dt));
      z.dtype = dt;
      z.ld = N;
    }
    return true;
  };
  auto vector_of = [&](int value, const void*& ptr, DType& dtype) -> bool {
    BoundTensor t = ctx.tensor(value);
    if (t.layout.numel() != N || (N > 1 && t.layout.stride.back() != 1)) {
      b.unsupported = "bias '" + g.values[value].name + "' is not a unit-stride [N]";
      return false;
    }
    ptr = t.ptr;
    dtype = t.layout.dtype;
    return true;
  };

  struct Step {
    EagerLaunch gemm;
    EpilogueArgs epi;
    bool is_gemm = false;
  };
  std::vector<Step> steps;
  // One GEMM and, for addmm, its bias: fused (optimized) or through a float32 buffer (baseline).
  auto add_gemm = [&](const Gemm& gm, const EpiMat& z) -> bool {
    MatmulOperands mo;
    BoundTensor ta = ctx.tensor(gm.a), tb = ctx.tensor(gm.b);
    mo.a = device_tensor(ta.ptr, ta.layout);
    mo.b = device_tensor(tb.ptr, tb.layout);
    const void* bias = nullptr;
    DType bias_dtype = dt;
    if (gm.bias >= 0 && !vector_of(gm.bias, bias, bias_dtype)) return false;
    if (!bias || optimized) {
      mo.d = dev2(z, M, N);
      mo.bias = bias;
      mo.bias_dtype = bias_dtype;
      steps.push_back({prepare_matmul(g.nodes[g.values[gm.out].producer].id, mo), {}, true});
      return true;
    }
    EpiMat acc{ctx.workspace(mn * sizeof(float)), DType::kFloat32, N};
    mo.d = dev2(acc, M, N);
    steps.push_back({prepare_matmul(g.nodes[g.values[gm.out].producer].id, mo), {}, true});
    EpilogueArgs e;
    e.M = M;
    e.N = N;
    e.z = acc;
    e.bias = bias;
    e.bias_dtype = bias_dtype;
    e.bias_round = dt;
    e.y = z;
    steps.push_back({{}, e, false});
    return true;
  };

  EpiMat z, up, y;
  EpiMat res;
  if (p.residual >= 0) {
    res = as_rows(ctx.tensor(p.residual), M, N);
    if (!res.ptr) {
      b.unsupported = "residual '" + g.values[p.residual].name + "' is not a contiguous [.., N]";
      return b;
    }
  }
  if (!gemm_out(p.gemm, z) || !add_gemm(p.gemm, z)) return b;
  if (p.up.node >= 0 && (!gemm_out(p.up, up) || !add_gemm(p.up, up))) return b;
  const int64_t EN = p.split_halves ? N / 2 : N;  // the epilogue's columns
  if (p.out != p.gemm.out) {
    y = as_rows(ctx.tensor(p.out), M, EN);
    if (!y.ptr) {
      b.unsupported = "result '" + g.values[p.out].name + "' is not a contiguous [.., N]";
      return b;
    }
    EpilogueArgs e;
    e.M = M;
    e.N = EN;
    e.z = z;
    if (p.split_halves) {  // gate and up: the two halves of the one GEMM output
      auto half = [&](int h) {
        EpiMat m = z;
        m.ptr = static_cast<char*>(z.ptr) + static_cast<size_t>(h * EN) * dtype_size(z.dtype);
        return m;
      };
      e.z = half(p.gate_half);
      up = half(1 - p.gate_half);
    }
    const void* add_bias = nullptr;
    DType add_dtype = dt;
    if (p.add_bias >= 0 && !vector_of(p.add_bias, add_bias, add_dtype)) return b;
    e.res = res;
    if (p.residual >= 0) {  // GEMM output, then one kernel adding the residual (both variants)
      e.y = y;
      steps.push_back({{}, e, false});
    } else if (optimized) {  // one kernel, every step
      e.bias = add_bias;
      e.bias_dtype = add_dtype;
      e.bias_round = p.add_round;
      e.act_step = p.has_act_step;
      e.act = p.act;
      e.act_round = p.act_round;
      if (p.up.node >= 0 || p.split_halves) e.up = up;
      e.y = y;
      steps.push_back({{}, e, false});
    } else {  // one kernel per step, each result through memory
      EpiMat cur = e.z;
      auto step_out = [&](DType t, bool last) {
        return last ? y : EpiMat{ctx.workspace(static_cast<size_t>(M * EN) * dtype_size(t)), t, EN};
      };
      if (add_bias) {
        EpilogueArgs s;
        s.M = M;
        s.N = EN;
        s.z = cur;
        s.bias = add_bias;
        s.bias_dtype = add_dtype;
        s.bias_round = p.add_round;
        s.y = step_out(p.add_round, !p.has_act_step && p.up.node < 0);
        cur = s.y;
        steps.push_back({{}, s, false});
      }
      if (p.has_act_step) {
        EpilogueArgs s;
        s.M = M;
        s.N = EN;
        s.z = cur;
        s.act_step = true;
        s.act = p.act;
        s.act_round = p.act_round;
        s.y = step_out(p.act_round, p.up.node < 0 && !p.split_halves);
        cur = s.y;
        steps.push_back({{}, s, false});
      }
      if (p.up.node >= 0 || p.split_halves) {
        EpilogueArgs s;
        s.M = M;
        s.N = EN;
        s.z = cur;
        s.up = up;
        s.y = y;
        steps.push_back({{}, s, false});
      }
    }
  }
  b.launch = [steps](const LaunchContext& c) {
    for (const Step& s : steps) {
      if (s.is_gemm)
        s.gemm(c.stream);
      else
        launch_epilogue(s.epi, c.stream);
    }
  };
  return b;
}

}  // namespace replay::matmul_epilogue
