// fp8_quantize binder: typed params (match.cpp) -> the passes of kernels.hpp.
//
//   optimized: amax pass (every amax slot the quantizations need, one read of x) -> cast pass
//              (every float8 dest, column-major ones through shared memory; each CTA computes
//              its tile's scales, and writes the scale outputs where its tile is the first of
//              its rows or columns): two launches (plus the amax memsets) for all quantizations;
//              rowwise quantizations alone with row-major dests: one kernel, one read of x;
//   baseline:  per quantization: its amax pass -> its scale -> a cast pass writing row-major ->
//              a transpose copy for each column-major dest (the eager sequence's passes).
#include <string>
#include <vector>

#include "impls/fusions/fp8_quantize/params.hpp"
#include "impls/fusions/fp8_quantize/quant_math.hpp"

namespace replay::fp8_quantize {
namespace {

// The [rows, cols] strides of float8 value `v`: x's shape (flattened to [rows, cols]) or, for a
// 2-D transpose, [cols, rows]. False when the leading dims do not flatten.
bool dest_strides(const TensorMeta& l, bool transposed, Fp8Dest& d) {
  const auto& sh = l.shape;
  const auto& st = l.stride;
  const size_t n = sh.size();
  if (transposed) {
    if (n != 2) return false;
    d.rs = st[1];
    d.cs = st[0];
    return true;
  }
  if (n == 1) {
    d.rs = 0;
    d.cs = st[0];
    return true;
  }
  for (size_t i = 0; i + 2 < n; ++i)
    if (sh[i] != 1 && st[i] != st[i + 1] * sh[i + 1]) return false;
  d.rs = st[n - 2];
  d.cs = st[n - 1];
  return true;
}

// A vector output of `len` elements: the stride of its one dim larger than 1.
bool vec_out(const TensorMeta& l, int64_t len, VecOut& o) {
  if (l.numel() != len) return false;
  o.stride = 1;
  for (size_t i = 0; i < l.shape.size(); ++i)
    if (l.shape[i] > 1) o.stride = l.stride[i];
  o.dtype = l.dtype;
  return true;
}

}  // namespace

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Binding b;
  if (v.role == Role::kAlternative) {
    b.unsupported = "fp8_quantize has no variant '" + std::string(v.name) + "'";
    return b;
  }
  if (p.quants.empty() || static_cast<int>(p.quants.size()) > kMaxQuants) {
    b.unsupported = std::to_string(p.quants.size()) + " quantizations (the kernels take 1 to " +
                    std::to_string(kMaxQuants) + ")";
    return b;
  }
  if (p.rows * p.cols == 0) {
    b.unsupported = "empty x";
    return b;
  }
  const BoundTensor xt = ctx.tensor(p.x);
  if (!xt.layout.is_contiguous()) {
    b.unsupported = "x '" + g.values[p.x].name + "' is not contiguous (" + xt.layout.str() + ")";
    return b;
  }
  QuantizeArgs a;
  a.x = xt.ptr;
  a.x_dtype = xt.layout.dtype;
  a.rows = p.rows;
  a.cols = p.cols;
  a.n_quants = static_cast<int>(p.quants.size());
  a.row_scale_xor = p.row_scale_xor;
  unsigned slots = 0;
  for (int i = 0; i < a.n_quants; ++i) {
    const Quantization& q = p.quants[i];
    QuantArgs& qa = a.q[i];
    qa.gran = q.granularity;
    qa.abs = q.abs;
    qa.e5m2 = q.fp8 == DType::kFloat8E5M2;
    if (q.fp8_max != float8_max(qa.e5m2)) {  // the kernels' cast saturates at the dtype's max
      b.unsupported = "a float8 clamp bound of " + std::to_string(q.fp8_max) + ", not " +
                      std::string(dtype_name(q.fp8)) + "'s max";
      return b;
    }
    qa.scale_mul = q.fp8_max;
    qa.eps = q.eps;
    qa.pow2 = q.pow2;
    const int64_t len = vec_len(a, q.granularity);
    if (q.given) {  // read where the scales are computed; no amax pass
      const BoundTensor t = ctx.tensor(q.amax);
      qa.given = t.ptr;
      qa.given_dtype = t.layout.dtype;
    } else {
      const int slot = amax_slot(q.granularity, q.abs);
      if (!a.amax_ws[slot])
        a.amax_ws[slot] = static_cast<uint32_t*>(ctx.workspace(len * sizeof(uint32_t)));
      slots |= 1u << slot;
    }
    // The scales kernel's output, read by the cast: the baseline only (the optimized cast
    // computes its tiles' scales, and the one-pass rowwise kernel its rows').
    if (v.role != Role::kOptimized)
      qa.scale_ws = static_cast<float*>(ctx.workspace(len * sizeof(float)));
    if (static_cast<int>(q.q_outs.size()) > kMaxDests) {
      b.unsupported = std::to_string(q.q_outs.size()) + " float8 copies of one quantization";
      return b;
    }
    for (int out : q.q_outs) {
      const BoundTensor t = ctx.tensor(out);
      Fp8Dest& d = qa.dests[qa.n_dests++];
      d.ptr = static_cast<uint8_t*>(t.ptr);
      if (!dest_strides(t.layout, out != q.q, d)) {
        b.unsupported = "float8 output '" + g.values[out].name + "' has a layout (" +
                        t.layout.str() + ") whose leading dims do not flatten";
        return b;
      }
    }
    auto vecs = [&](const std::vector<int>& vals, VecOut* outs, int& n, const char* what) {
      if (static_cast<int>(vals.size()) > kMaxVecOuts) {
        b.unsupported = std::to_string(vals.size()) + " " + what + " outputs of one quantization";
        return false;
      }
      for (int out : vals) {
        const BoundTensor t = ctx.tensor(out);
        VecOut& o = outs[n++];
        o.ptr = t.ptr;
        if (!vec_out(t.layout, len, o)) {
          b.unsupported = std::string(what) + " '" + g.values[out].name + "' is not " +
                          std::to_string(len) + " elements";
          return false;
        }
      }
      return true;
    };
    if (!vecs(q.scale_outs, qa.scales, qa.n_scales, "scale") ||
        !vecs(q.recip_outs, qa.recips, qa.n_recips, "reciprocal") ||
        !vecs(q.amax_outs, qa.amaxes, qa.n_amaxes, "amax"))
      return b;
  }
  const unsigned all = (1u << a.n_quants) - 1;
  if (v.role == Role::kOptimized) {
    int smem = 0;  // column-major dests through the shared-memory tile, as many as fit
    for (int i = 0; i < a.n_quants; ++i)
      for (int d = 0; d < a.q[i].n_dests; ++d)
        if (a.q[i].dests[d].cs != 1 && smem < kMaxColMajor) a.q[i].dests[d].smem_slot = smem++;
    if (rowwise_one_pass(a, all)) {
      validate_rowwise_env();  // a bad REPLAY_FP8_RING or _ROWWISE is an error at bind
      b.launch = [a, all](const LaunchContext& c) { launch_rowwise(a, all, c.stream); };
      return b;
    }
    (void)pdl_enabled();  // a bad REPLAY_FP8_PDL is an error at bind, not at the first launch
    b.launch = [a, slots, all](const LaunchContext& c) {
      const bool after_amax = launch_amax(a, slots, c.stream);
      launch_cast(a, all, /*fold_scales=*/true, c.stream, after_amax);
    };
    return b;
  }
  // Baseline: one quantization after the other, each its own passes; a float8 dest that is not
  // row-major is a transpose copy of the row-major one (or of a workspace).
  if ((p.rows + 31) / 32 > 65535) {
    b.unsupported = "the baseline's transpose grid takes at most 65535 x 32 rows";
    return b;
  }
  struct Step {
    QuantizeArgs args;
    unsigned quant = 0, slot = 0;
    std::vector<std::pair<Fp8Dest, Fp8Dest>> copies;
  };
  std::vector<Step> steps;
  for (int i = 0; i < a.n_quants; ++i) {
    Step st;
    st.args = a;
    st.quant = 1u << i;
    st.slot = a.q[i].given ? 0u : 1u << amax_slot(a.q[i].gran, a.q[i].abs);
    QuantArgs& qa = st.args.q[i];
    Fp8Dest row_major;
    std::vector<Fp8Dest> others;
    for (int d = 0; d < qa.n_dests; ++d) {
      if (qa.dests[d].cs == 1 && !row_major.ptr)
        row_major = qa.dests[d];
      else
        others.push_back(qa.dests[d]);
    }
    if (!row_major.ptr) {
      row_major.ptr = static_cast<uint8_t*>(ctx.workspace(static_cast<size_t>(p.rows * p.cols)));
      row_major.rs = p.cols;
      row_major.cs = 1;
    }
    qa.dests[0] = row_major;
    qa.n_dests = 1;
    for (const Fp8Dest& o : others) st.copies.push_back({row_major, o});
    steps.push_back(st);
  }
  const int64_t rows = p.rows, cols = p.cols;
  b.launch = [steps, rows, cols](const LaunchContext& c) {
    for (const Step& st : steps) {
      launch_amax(st.args, st.slot, c.stream);
      launch_scales(st.args, st.quant, c.stream);
      launch_cast(st.args, st.quant, /*fold_scales=*/false, c.stream);
      for (const auto& [src, dst] : st.copies)
        launch_transpose_copy(src, dst, rows, cols, c.stream);
    }
  };
  return b;
}

}  // namespace replay::fp8_quantize
