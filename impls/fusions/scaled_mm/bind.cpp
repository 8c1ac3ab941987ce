// scaled_mm binder: typed params (match.cpp) -> the reciprocal kernel (kernels.hpp) and cuBLASLt
// (impls/eager/gemm.hpp).
//
//   optimized: [reciprocals of the scales, one kernel]
//              + one cuBLASLt float8 matmul: TN in place, tensorwise (A/B scale pointers) or
//                rowwise (OUTER_VEC_32F) scales, bias epilogue, the output dtype direct into the
//                region's result (its [.., N] view: no copy), use_fast_accum as the graph asks;
//                algorithm timed once among deterministic candidates (prepare_scaled_matmul)
//   baseline:  [the same reciprocals]
//              + dequantize: self and mat2 cast to bfloat16 (exact: every float8 value is a
//                bfloat16 value), in their layouts
//              + a bfloat16 cuBLASLt GEMM (prepare_matmul) into a float32 [M, N] buffer
//              + one kernel: acc * scale_a[m] * scale_b[n] (+ bias[n]) in float32, rounded once
//                to out_dtype (launch_scaled_epilogue)
// Why the baseline applies the scales after the GEMM and not to the operands (x.to(bf16) * scale,
// what a user without float8 kernels writes): rounding each scaled element to bfloat16 errs by
// up to 2^-9 relative per operand, which alone takes the output past the _scaled_mm bounds
// (TUNING.md); the GEMM runs at bfloat16 speed either way.
#include <string>
#include <vector>

#include "impls/eager/gemm.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/scaled_mm/kernels.hpp"
#include "impls/fusions/scaled_mm/params.hpp"

namespace replay::scaled_mm {
namespace {

// The stride of a tensor's elements along its one dim longer than 1 (1 when it has none).
int64_t vector_stride(const TensorMeta& m) {
  for (size_t d = 0; d < m.shape.size(); ++d)
    if (m.shape[d] > 1) return m.stride[d];
  return 1;
}

// A [rows, cols] DeviceTensor over `t`: its own 2-D layout, or rows of `cols` elements `cols`
// apart when it is a contiguous tensor of rows * cols elements ([B, T, K] as [M, K]).
bool as_matrix(const BoundTensor& t, int64_t rows, int64_t cols, DeviceTensor& out) {
  const TensorMeta& l = t.layout;
  if (l.numel() != rows * cols) return false;
  if (l.shape.size() == 2 && l.shape[0] == rows) {
    out = device_tensor(t.ptr, l);
    return true;
  }
  if (!l.is_contiguous()) return false;
  out = device_tensor(t.ptr, TensorMeta{{rows, cols}, {cols, 1}, l.dtype});
  return true;
}

}  // namespace

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Binding b;
  if (v.role == Role::kAlternative) {
    b.unsupported = "scaled_mm has no variant '" + std::string(v.name) + "'";
    return b;
  }
  const bool optimized = v.role == Role::kOptimized;
  const int64_t M = p.M, N = p.N, K = p.K;
  auto fail = [&](const std::string& why) {
    b.unsupported = why;
    return b;
  };

  // The scales the GEMM reads: the graph's value, or the reciprocal this region computes.
  RecipArgs recips;
  struct ScalePtr {
    const float* ptr = nullptr;
    int64_t stride = 0;
  };
  auto scale_of = [&](const Scale& s, int64_t n, ScalePtr& out) -> std::string {
    const BoundTensor src = ctx.tensor(s.source);
    const int64_t sn = src.layout.numel();  // one element: broadcast after the reciprocal
    if ((sn != n && !(s.reciprocal && sn == 1)) || src.layout.dtype != DType::kFloat32)
      return "scale '" + g.values[s.source].name + "' is " + src.layout.str() + ", expected " +
             std::to_string(n) + " float32 elements";
    out = {static_cast<const float*>(src.ptr), sn == 1 ? 0 : vector_stride(src.layout)};
    // cuBLASLt's outer-vector scales are unit-stride vectors: a strided or broadcast one read as
    // it is (the graph's expand, its contiguous clone folded away) is copied by the same kernel.
    const bool copy = optimized && !s.reciprocal && p.rowwise && n > 1 && out.stride != 1;
    if (!s.reciprocal && !copy) return "";
    RecipVec& rv = recips.v[recips.count++];
    rv.src = out.ptr;
    rv.src_stride = out.stride;
    rv.n = n;
    rv.invert = s.reciprocal;
    if (s.exported) {  // the graph reads the reciprocal too: write it where it lives
      const BoundTensor dst = ctx.tensor(s.value);
      rv.dst = static_cast<float*>(dst.ptr);
      rv.dst_stride = n == 1 ? 0 : vector_stride(dst.layout);
    } else {
      rv.dst = static_cast<float*>(ctx.workspace(static_cast<size_t>(n) * sizeof(float)));
      rv.dst_stride = 1;
    }
    out = {rv.dst, rv.dst_stride};
    return "";
  };
  ScalePtr sa, sb;
  if (std::string why = scale_of(p.scale_a, p.rowwise ? M : 1, sa); !why.empty()) return fail(why);
  if (std::string why = scale_of(p.scale_b, p.rowwise ? N : 1, sb); !why.empty()) return fail(why);

  // A column-major self: the captured graph's contiguous clone of it, absorbed by the region, is
  // made here (row-major: cuBLASLt's float8 kernels read only TN); without that clone, no copy.
  // Where an earlier region already wrote self in the clone's row-major layout (fp8_quantize
  // writes a float8 transpose in the layout of the clone it passes on), it is read as it is.
  const TensorMeta& self_now = ctx.tensor(p.a).layout;
  const bool self_row_major =
      self_now.shape.size() == 2 && self_now.stride[1] == 1 && (M == 1 || self_now.stride[0] >= K);
  const bool clone_self_here = p.copy_self && !self_row_major;
  if (clone_self_here) {
    bool cloned = false;
    for (int k : r.absorbed)
      cloned |= g.nodes[k].op == Op::kClone && g.nodes[k].operands[0].value == p.a;
    if (!cloned)
      return fail("self '" + g.values[p.a].name + "' " + g.meta(p.a).str() + " strides " +
                  shape_str(g.meta(p.a).stride) +
                  " is column-major and the graph makes no contiguous copy of it: cuBLASLt's "
                  "float8 kernels take only the TN layout (self row-major), so the fusion would "
                  "add a copy (the eager executor makes one)");
  }
  DeviceTensor a, bm, d;
  const BoundTensor ta = ctx.tensor(p.a), tb = ctx.tensor(p.b), td = ctx.tensor(p.out);
  if (!as_matrix(ta, M, K, a))
    return fail("self '" + g.values[p.a].name + "' " + ta.layout.str() + " is not an [M, K]");
  if (tb.layout.shape.size() != 2) return fail("mat2 is not 2-D");
  bm = device_tensor(tb.ptr, tb.layout);
  if (!as_matrix(td, M, N, d))
    return fail("result '" + g.values[p.out].name + "' " + td.layout.str() +
                " is not a contiguous [.., N]");
  const void* bias = nullptr;
  int64_t bias_stride = 1;
  if (p.bias >= 0) {
    const BoundTensor t = ctx.tensor(p.bias);
    bias = t.ptr;
    bias_stride = N == 1 ? 1 : vector_stride(t.layout);
  }
  const std::string name = g.nodes[g.values[p.mm_out].producer].id;
  EagerLaunch clone_self;  // the graph's clone of a column-major self, into a row-major buffer
  if (clone_self_here && optimized) {
    DeviceTensor c = a;
    c.stride[0] = K;
    c.stride[1] = 1;
    c.ptr = ctx.workspace(static_cast<size_t>(M * K) * dtype_size(a.dtype));
    clone_self = prepare_copy(c, a);
    a = c;
  }

  if (optimized) {
    ScaledMatmulOperands m;
    m.a = a;
    m.b = bm;
    m.d = d;
    m.scale_a = sa.ptr;
    m.scale_b = sb.ptr;
    m.rowwise = p.rowwise;
    if (bias && bias_stride != 1) return fail("the bias is not a unit-stride [N]");
    m.bias = bias;
    m.bias_dtype = p.bias_dtype;
    m.fast_accum = p.fast_accum;
    m.tune = true;
    PreparedMatmul pm = prepare_scaled_matmul(name, m);
    if (!pm.launch) return fail(pm.unsupported);
    b.launch = [recips, clone_self, gemm = pm.launch](const LaunchContext& c) {
      launch_reciprocals(recips, c.stream);
      if (clone_self) clone_self(c.stream);
      gemm(c.stream);
    };
    return b;
  }

  // Baseline: dequantize (exact casts to bfloat16, layouts kept), bfloat16 GEMM into float32,
  // scales and bias in float32.
  // self row-major (a column-major one is the graph's clone: this cast makes it), mat2
  // column-major.
  auto bf16_copy = [&](const DeviceTensor& t, bool col_major) {
    DeviceTensor c = t;
    c.dtype = DType::kBFloat16;
    c.stride[0] = col_major ? 1 : t.shape[1];
    c.stride[1] = col_major ? t.shape[0] : 1;
    c.ptr = ctx.workspace(static_cast<size_t>(t.shape[0] * t.shape[1]) * 2);
    return c;
  };
  const DeviceTensor a16 = bf16_copy(a, false), b16 = bf16_copy(bm, true);
  EagerLaunch cast_a = prepare_copy(a16, a), cast_b = prepare_copy(b16, bm);
  MatmulOperands mo;
  mo.a = a16;
  mo.b = b16;
  float* acc = static_cast<float*>(ctx.workspace(static_cast<size_t>(M * N) * sizeof(float)));
  mo.d = device_tensor(acc, TensorMeta{{M, N}, {N, 1}, DType::kFloat32});
  EagerLaunch gemm = prepare_matmul(name + " (dequantized, bfloat16)", mo);
  ScaledEpilogue e;
  e.acc = acc;
  e.M = M;
  e.N = N;
  e.sa = sa.ptr;
  e.sa_stride = sa.stride;
  e.sb = sb.ptr;
  e.sb_stride = sb.stride;
  e.bias = bias;
  e.bias_dtype = p.bias_dtype;
  e.bias_stride = bias_stride;
  e.out = device_tensor(
      d.ptr, TensorMeta{{1, M, N}, {M * d.stride[0], d.stride[0], d.stride[1]}, d.dtype});
  b.launch = [recips, cast_a, cast_b, gemm, e](const LaunchContext& c) {
    launch_reciprocals(recips, c.stream);
    cast_a(c.stream);
    cast_b(c.stream);
    gemm(c.stream);
    launch_scaled_epilogue(e, c.stream);
  };
  return b;
}

}  // namespace replay::scaled_mm
