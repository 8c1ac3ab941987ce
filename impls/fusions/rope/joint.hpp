// rope's joint gradient: a backward region whose dq and dk are stacked into one tensor by the
// graph (GPT-NeoX: cat([dq, dk, dv], -1) -> permute -> clone -> view as [B, T, 3 H D]; litgpt:
// each permuted, cloned, viewed, then cat) writes that tensor directly: each job's output is a
// strided view of it, found by undoing the graph's layout steps from the joint end (the alias
// algebra of the output side), and the other operands of the cat (dv) are copied in by the same
// kernel. Phi-3 stacks by a sum of slice_scatters into one zero tensor instead (its dq and dk
// scattered into a zero [B, T, (H + 2G) D] and added, dv's range left zero): the same, each job a
// part of the sum's output, written with + 0 (the adds turn -0 into +0), and the ranges nothing
// is scattered into zeroed (Joint::zero_steps, rows_2d). Steps are stated from the joint tensor
// down to a job's value.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace replay::rope {

struct LayoutStep {
  enum class Kind : uint8_t {
    kView,     ///< undo a view / reshape: view the current layout as `shape` (the value before)
    kPermute,  ///< undo permute(dims): in dim dims[k] is the current dim k
    kPart,     ///< a cat operand: the slice [start, start + size) of dim `dim`
  };
  Kind kind = Kind::kView;
  std::vector<int64_t> shape;  ///< kView
  std::vector<int64_t> dims;   ///< kPermute: the forward permutation
  int dim = 0;                 ///< kPart
  int64_t start = 0, size = 0;
};

/// A strided view of a buffer: element i at offset + sum_k i_k * stride[k] (elements).
struct StridedLayout {
  std::vector<int64_t> shape, stride;
  int64_t offset = 0;
};

/// A strided layout as one 2-D byte range for cudaMemset2D: `height` rows of `width` bytes,
/// `pitch` bytes apart, from byte `offset`.
struct Rows2D {
  int64_t offset = 0, pitch = 0, width = 0, height = 0;
};

/// `l` (elements of `esize` bytes) as Rows2D: its innermost dims that are dense form a row, the
/// others must collapse into one dim of uniform pitch (size-1 dims ignored); std::nullopt
/// otherwise (a last stride other than 1, or outer dims that do not collapse).
std::optional<Rows2D> rows_2d(const StridedLayout& l, int64_t esize);

/// The layout of a job's value in the joint tensor laid out as `joint`, through `steps`;
/// std::nullopt where a view cannot be undone without a copy (ATen's view rule) or a step does
/// not fit the shape.
std::optional<StridedLayout> apply_steps(StridedLayout joint, const std::vector<LayoutStep>& steps);

}  // namespace replay::rope
