// rope cost and description.
// Bytes that must move (forward and backward alike: the backward reads the gradient where the
// forward reads x): per rotated tensor, its head vectors read once (x: the elements of the
// view the region reads, not the fused qkv around it), its output written once, and the cos and
// sin tables read once each (their own elements: a [B, 1, T, R] table broadcast over the heads
// is read once, not once per head; q and k reading the same table count it once). A backward
// writing the joint gradient (joint.hpp) writes it once instead, and reads what it copies in (dv).
// FLOPs per
// rotated element: two multiplies and an add (3); the pass-through tail moves bytes only.
#include <set>

#include "impls/fusions/rope/params.hpp"
#include "workloads/plan/match_util.hpp"

namespace replay::rope {

Cost cost(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Cost c;
  std::set<int> tables;
  for (const Rotation& rot : p.rotations) {
    c.bytes += static_cast<double>(g.meta(rot.x).nbytes());
    if (p.joint.value < 0) c.bytes += static_cast<double>(g.meta(rot.out).nbytes());
    if (rot.cos < 0) continue;  // a copy into the joint gradient
    tables.insert(rot.cos);
    tables.insert(rot.sin);
    const double rows =
        static_cast<double>(g.meta(rot.x).numel() / std::max<int64_t>(rot.head_dim, 1));
    c.flops += 3.0 * rows * static_cast<double>(rot.rotary_dim);
  }
  if (p.joint.value >= 0) c.bytes += static_cast<double>(g.meta(p.joint.value).nbytes());
  c.bytes += value_bytes(g, std::vector<int>(tables.begin(), tables.end()));
  return c;
}

nlohmann::json describe(const Graph& g, const Region& r) {
  const auto& p = std::any_cast<const Params&>(r.params);
  nlohmann::json rs = nlohmann::json::array();
  auto name = [&](int v) { return v < 0 ? std::string() : g.values[v].name; };
  for (const Rotation& rot : p.rotations)
    rs.push_back({{"x", name(rot.x)},
                  {"cos", name(rot.cos)},
                  {"sin", name(rot.sin)},
                  {"out", name(rot.out)},
                  {"head_dim", rot.head_dim},
                  {"rotary_dim", rot.rotary_dim},
                  {"partial", rot.rotary_dim < rot.head_dim},
                  {"mul_cos_dtype", dtype_name(rot.mul_cos_dtype)},
                  {"mul_sin_dtype", dtype_name(rot.mul_sin_dtype)},
                  {"add_dtype", dtype_name(rot.add_dtype)},
                  {"mul_cos_convert", dtype_name(rot.mul_cos_cvt)},
                  {"mul_sin_convert", dtype_name(rot.mul_sin_cvt)},
                  {"sum_convert", dtype_name(rot.sum_cvt)},
                  {"tail_convert", dtype_name(rot.tail_cvt)},
                  {"scattered_into_zeros", rot.zero_add},
                  {"sum_order", rot.sum_order},
                  {"pair_table", rot.pair_table}});
  return {{"style", style_name(p.style)},
          {"phase", p.backward ? "backward" : "forward"},
          {"rotations", rs},
          {"joint", name(p.joint.value)},
          {"joint_zero_parts", p.joint.zero_steps.size()}};
}

}  // namespace replay::rope
