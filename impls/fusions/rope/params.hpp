// rope: the rotary position embedding forward and backward as model code writes it (issue 28): q
// and k (views of q / k inputs or of a fused qkv: grouped, per head as GPT-NeoX, split along the
// last dim as Phi-3) rotated by a cos / sin table, out = x * cos + rot(x) * sin, with rot the
// rotate-half (cat(-x2, x1): Llama, GPT-NeoX, Phi-3) or interleaved pairs (GPT-J, Cohere); partial
// rotary (the first rotary_dim of the head rotated, the rest passed through by a cat). The backward
// as aot_autograd writes it: dx = rotT(g * sin) + g * cos, rotT through neg and slice_scatter into
// zeros (select for the interleaved pairs), the partial tail scattered into zeros. The tables and
// the views at the region's boundary stay outside: the graph returns the tables for the backward
// (they are written anyway), and the views are aliases the kernel reads through strides.
//
//   params.hpp  this file        match.cpp   structural matcher      cost.cpp   bytes, describe
//   kernels.*   both variants    bind.cpp    params -> kernel args   TUNING.md  predictions
//   tests/      matcher positives and negatives (unit_*), GPU cases and mutants (gpu_*)
#pragma once

#include <vector>

#include "impls/fusions/binding.hpp"
#include "impls/fusions/rope/joint.hpp"
#include "impls/fusions/rope/kernels.hpp"
#include "workloads/plan/fusion_spec.hpp"

namespace replay::rope {

/// One rotated tensor. Value indices, not names.
struct Rotation {
  int x = -1;              ///< the head vectors read: [.., D] (before an absorbed exact upcast)
  int cos = -1, sin = -1;  ///< the tables as the multiplies read them, broadcast to [.., R]
  int out = -1;  ///< what the region writes: [.., D] (the rotated x or dx, the cat, the sum)
  int64_t head_dim = 0;    ///< D: x's last dim
  int64_t rotary_dim = 0;  ///< R: the rotated part, even, <= D (R < D: partial rotary)
  DType mul_cos_dtype = DType::kFloat32;  ///< dtype of x * cos (each op rounds to its dtype)
  DType mul_sin_dtype = DType::kFloat32;  ///< dtype of rot(x) * sin
  DType add_dtype = DType::kFloat32;      ///< dtype of the sum
  /// Converts the graph applies after each product, after the sum, and to the pass-through tail
  /// (float32 where there is none: rounding to float32 changes no value the kernels hold).
  DType mul_cos_cvt = DType::kFloat32, mul_sin_cvt = DType::kFloat32, sum_cvt = DType::kFloat32,
        tail_cvt = DType::kFloat32;
  /// The backward's partial rotary: rotated part and tail slice_scattered into zeros and added.
  bool zero_add = false;
  /// The backward's association of its three summands (kernels.hpp, RopeJob::sum_order).
  int sum_order = 0;
  /// cos / sin hold one entry per pair, broadcast to [.., R / 2] (Meta Llama's real-pair form).
  bool pair_table = false;
};

/// The joint gradient a backward region writes (joint.hpp): the value, and per rotation (in
/// order) the layout steps from it down to the rotation's output.
struct Joint {
  int value = -1;  ///< -1: none (each rotation writes its own output)
  std::vector<std::vector<LayoutStep>> steps;
  /// The parts of the joint tensor no job writes, which the graph leaves zero (a sum of scatters
  /// into zeros that covers only dq and dk: Phi-3): the layout steps from the joint down to each,
  /// zeroed by a 2-D memset beside the kernel.
  std::vector<std::vector<LayoutStep>> zero_steps;
};

/// A matched region: the rotations that read the same tables (q and k), one kernel.
struct Params {
  Style style = Style::kRotateHalf;
  /// The backward: out = dx from x = the incoming gradient (rotT(g * sin) + g * cos).
  bool backward = false;
  std::vector<Rotation> rotations;  ///< graph order (copies last), at most kRopeMaxJobs
  Joint joint;
  /// Test hooks, no matcher sets them: -1 flips sin's sign (the GPU mutant "sin sign flipped");
  /// false leaves the pass-through tail unwritten (the mutant "tail dropped").
  float sin_sign = 1;
  bool write_tail = true;
  bool force_index64 = false;  ///< the optimized kernel's 64-bit index path (a GPU test)
  bool force_generic = false;  ///< the optimized variant's generic kernel (a GPU test)
  bool fixed_forms = true;     ///< RopeArgs::fixed_forms
};

std::string_view style_name(Style s);

void match(const Graph& g, Matches& out);
Cost cost(const Graph& g, const Region& r);
nlohmann::json describe(const Graph& g, const Region& r);
Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx);

}  // namespace replay::rope
