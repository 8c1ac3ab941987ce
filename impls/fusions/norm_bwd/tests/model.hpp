// A CPU model of the norm_bwd kernels (kernels.cu): the same fp32 arithmetic, roundings and
// accumulation structure (chunks of `split` rows per block, `rows_per_iter` interleaved row groups
// per block summed in group order, partial rows summed by 32 slices in slice order), computed
// from the matcher's params. The unit tests check it against the float64 reference with the
// harness's own bounds: proof, without a GPU, that the params describe each graph's computation
// (its roundings included) and that fp32 accumulation in this order stays within the bounds.
// Not bit-exact with the GPU (nvcc contracts a * b + c into FMA). A dx epilogue add (dx_add) is
// applied as the kernels' dx store does; a saved normalized value (Params::xs, the default
// partitioner's form) replaces xhat in the dw term as the kernels read it.
#pragma once

#include <cmath>
#include <map>

#include "impls/fusions/norm_bwd/params.hpp"
#include "workloads/ir/host_tensor.hpp"

namespace replay::test {

struct NormBwdModelOut {
  HostTensor dx, dw, db;  ///< db empty without a bias; dw, db empty for dx only
};

inline float model_round(float v, DType t) {
  if (t == DType::kBFloat16 || t == DType::kFloat16) return static_cast<float>(round_to(t, v));
  return v;
}

/// Runs the model of the optimized kernel (split rows per block; baseline: any split, its
/// column sums are a different fixed order of the same fp32 sums). `values` holds at least the
/// region's inputs (value index -> logical data).
inline NormBwdModelOut run_norm_bwd_model(const Graph& g, const norm_bwd::Params& p,
                                          const std::map<int, HostTensor>& values, int64_t split,
                                          int rows_per_iter) {
  const int64_t R = p.rows, C = p.cols;
  auto at = [&](int v) -> const HostData& { return values.at(v).data; };
  const auto &x = at(p.x), &dy = at(p.dy);
  std::vector<float> weff(C, 1.f);  // no weight (dx only): w = 1
  if (p.w >= 0)
    for (int64_t c = 0; c < C; ++c)
      weff[c] =
          model_round(static_cast<float>(at(p.w)[c]) + static_cast<float>(p.w_offset), p.w_round);
  float eps = static_cast<float>(p.eps);
  if (p.eps_value >= 0) eps += static_cast<float>(at(p.eps_value)[0]);
  const float var_scale = p.layernorm ? static_cast<float>(C / (C - p.correction)) : 1.f;
  const float inv_c = 1.f / static_cast<float>(C);

  NormBwdModelOut out;
  out.dx.meta = g.meta(p.dx);
  out.dx.meta.stride = contiguous_strides(out.dx.meta.shape);
  // Rows the kernel does not write keep the harness's NaN poison.
  out.dx.data.assign(static_cast<size_t>(out.dx.meta.numel()), std::nan(""));
  const int64_t parts = (R + split - 1) / split;
  std::vector<float> part_w(static_cast<size_t>(parts * C)), part_b(part_w.size());
  std::vector<float> gw(static_cast<size_t>(rows_per_iter * C)), gb(gw.size());
  for (int64_t b = 0; b < parts; ++b) {
    const int64_t r0 = b * split, r1 = std::min(R, r0 + split);
    std::fill(gw.begin(), gw.end(), 0.f);
    std::fill(gb.begin(), gb.end(), 0.f);
    for (int64_t r = r0; r < r1; ++r) {
      const int grp = static_cast<int>((r - r0) % rows_per_iter);
      const double* xr = x.data() + r * C;
      const double* dr = dy.data() + r * C;
      float m = 0, s = 1, rs = 1;
      if (p.stats == NormBwdStats::kSaved) {
        m = p.mean >= 0 ? static_cast<float>(at(p.mean)[r]) : 0.f;
        s = rs = static_cast<float>(at(p.rstd)[r]);
      } else if (p.stats == NormBwdStats::kNormalized) {
        rs = static_cast<float>(at(p.rstd)[r]);
      } else {
        float s1 = 0, s2 = 0;
        for (int64_t c = 0; c < C; ++c) s1 += static_cast<float>(xr[c]);
        const float mean = p.layernorm ? s1 * inv_c : 0.f;
        for (int64_t c = 0; c < C; ++c) {
          const float d = static_cast<float>(xr[c]) - mean;
          s2 = std::fma(d, d, s2);
        }
        rs = 1.f / std::sqrt(s2 * inv_c * var_scale + eps);
        m = mean;
        s = rs;
      }
      const float ms = -m * s;
      float S1 = 0, S2 = 0, S3 = 0;
      for (int64_t c = 0; c < C; ++c) {
        const float g1 = model_round(static_cast<float>(dr[c]) * weff[c], p.g_round);
        const float xh = std::fma(static_cast<float>(xr[c]), s, ms);
        S1 += g1;
        S2 = std::fma(g1, xh, S2);
        S3 += xh;
      }
      if (!p.recenter) S3 = 0;
      const float ca = rs, cb = -rs * S2 * inv_c;
      const float cc = (p.layernorm ? -rs * S1 * inv_c : 0.f) - cb * S3 * inv_c;
      for (int64_t c = 0; c < C; ++c) {
        const float d = static_cast<float>(dr[c]);
        const float g1 = model_round(d * weff[c], p.g_round);
        const float xh = std::fma(static_cast<float>(xr[c]), s, ms);
        // dx_part_round (T5): the two terms rounded apart before their sum.
        const float dx32 = p.dx_part_round == DType::kBFloat16 || p.dx_part_round == DType::kFloat16
                               ? model_round(ca * g1, p.dx_part_round) +
                                     model_round(std::fma(cb, xh, cc), p.dx_part_round)
                               : std::fma(ca, g1, std::fma(cb, xh, cc));
        double dxv = round_to(out.dx.meta.dtype, dx32);
        if (p.dx_add >= 0)  // the epilogue add: dx rounded first, then the fp32 add, rounded again
          dxv = round_to(out.dx.meta.dtype,
                         static_cast<float>(dxv) + static_cast<float>(at(p.dx_add)[r * C + c]));
        out.dx.data[r * C + c] = dxv;
        // dw term: xhat, or the graph's saved normalized value (Params::xs), as the kernels read
        // it.
        const float xd = p.xs >= 0 ? static_cast<float>(at(p.xs)[r * C + c]) : xh;
        const float t = model_round(d * model_round(xd, p.xhat_round), p.dwt_round);
        gw[grp * C + c] += t;
        gb[grp * C + c] += d;
      }
    }
    for (int64_t c = 0; c < C; ++c) {
      float tw = gw[c], tb = gb[c];
      for (int i = 1; i < rows_per_iter; ++i) tw += gw[i * C + c], tb += gb[i * C + c];
      part_w[b * C + c] = tw;
      part_b[b * C + c] = tb;
    }
  }
  auto finalize = [&](const std::vector<float>& part, int v, DType round) {
    HostTensor t;
    t.meta = g.meta(v);
    t.meta.stride = contiguous_strides(t.meta.shape);
    t.data.resize(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      float slice[32] = {};
      for (int y = 0; y < 32; ++y)
        for (int64_t q = y; q < parts; q += 32) slice[y] += part[q * C + c];
      float s = slice[0];
      for (int y = 1; y < 32; ++y) s += slice[y];
      t.data[c] = round_to(t.meta.dtype, model_round(s, round));
    }
    return t;
  };
  if (p.dw >= 0) out.dw = finalize(part_w, p.dw, p.dw_round);  // dx only: no column sums
  if (p.db >= 0) out.db = finalize(part_b, p.db, p.db_round);
  return out;
}

}  // namespace replay::test
