// amax_reuse binder: typed params (match.cpp) -> kernel arguments (kernels.hpp).
//
//   optimized: one launch_multi_amax with every reduction of the region (one read of x)
//   baseline:  one launch_multi_amax per reduction (the reductions as captured: x read by each)
// The |x| and upcasts the region claims are applied in registers by both.
#include <memory>
#include <string>
#include <vector>

#include "impls/fusions/amax_reuse/params.hpp"
#include "impls/fusions/binding.hpp"
#include "workloads/ir/layout.hpp"

namespace replay::amax_reuse {

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Binding b;
  if (v.role == Role::kAlternative) {
    b.unsupported = "amax_reuse has no variant '" + std::string(v.name) + "'";
    return b;
  }
  MultiAmaxArgs all;
  const BoundTensor x = ctx.tensor(p.x);
  all.x = x.ptr;
  all.x_dtype = x.layout.dtype;
  all.M = p.M;
  all.N = p.N;
  all.ld = row_stride(x.layout, p.N);
  all.abs = p.abs;
  if (all.ld < 0 || x.layout.numel() != p.M * p.N) {
    b.unsupported = "x '" + g.values[p.x].name + "' is " + x.layout.str() + ", not [" +
                    std::to_string(p.M) + ", " + std::to_string(p.N) +
                    "] with a contiguous last dim";
    return b;
  }
  if (p.reductions.size() > static_cast<size_t>(kMaxAmaxOutputs)) {
    b.unsupported = std::to_string(p.reductions.size()) + " reductions (the kernels write up to " +
                    std::to_string(kMaxAmaxOutputs) + ")";
    return b;
  }
  for (const Reduction& red : p.reductions) {
    const BoundTensor t = ctx.tensor(red.out);
    const int64_t n = red.kind == AmaxKind::kRows ? p.M : red.kind == AmaxKind::kCols ? p.N : 1;
    AmaxOutput& o = all.out[all.n_out++];
    o.ptr = t.ptr;
    o.dtype = t.layout.dtype;
    o.extreme = red.extreme;
    o.kind = red.kind;
    o.stride = flat_stride(t.layout, n);
    if (o.stride < 0 || t.layout.numel() != n) {
      b.unsupported = "result '" + g.values[red.out].name + "' is " + t.layout.str() + ", not " +
                      std::to_string(n) + " values " + kind_name(red.kind) + " apart";
      return b;
    }
  }
  b.unsupported = multi_amax_supports(all);
  if (!b.unsupported.empty()) return b;
  // One launch for every reduction (optimized) or one per reduction (baseline), each with its
  // own workspace, zeroed before its first launch (the kernels leave it zero).
  std::vector<MultiAmaxArgs> launches;
  if (v.role == Role::kOptimized) {
    launches.push_back(all);
  } else {
    for (int o = 0; o < all.n_out; ++o) {
      MultiAmaxArgs one = all;
      one.out[0] = all.out[o];
      one.n_out = 1;
      launches.push_back(one);
    }
  }
  std::vector<void*> ws;
  for (const MultiAmaxArgs& a : launches)
    ws.push_back(ctx.workspace(multi_amax_workspace_bytes(a)));
  auto cleared = std::make_shared<bool>(false);
  b.launch = [launches, ws, cleared](const LaunchContext& c) {
    if (!*cleared) {
      for (size_t i = 0; i < launches.size(); ++i)
        clear_multi_amax_workspace(ws[i], launches[i], c.stream);
      *cleared = true;
    }
    for (size_t i = 0; i < launches.size(); ++i) launch_multi_amax(launches[i], ws[i], c.stream);
  };
  return b;
}

}  // namespace replay::amax_reuse
