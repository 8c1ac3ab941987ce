// pointwise codegen: a chain of elementwise ops over one iteration space, as the CUDA source of
// one kernel (host code; NVRTC compiles it, jit.hpp). Every op is the eager kernel's expression
// (impls/eager/pw_math.cuh, compute type float) on its operands' values, rounded to the op's
// dtype as the eager kernel stores it; the values live in registers between ops, only the
// chain's inputs are loaded and only its outputs stored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workloads/ir/dtype.hpp"
#include "workloads/ops/eager_fn.hpp"

namespace replay::pointwise {

/// How an iteration index s in [0, numel) maps to an element offset of a tensor: s split in the
/// mixed radix of `size` (outermost first), each digit times its `stride` (elements; 0 along a
/// broadcast dim). Coalesced: no two adjacent dims could merge.
struct Geometry {
  std::vector<int64_t> size, stride;
};

/// The geometry of a tensor of `stride` (broadcast to `shape`: size-1 or missing leading dims get
/// stride 0) as visited in the storage order of a dense layout (`order_shape`, `order_stride`):
/// the dims sorted by that layout's strides, outermost first, then coalesced.
Geometry visit_geometry(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride,
                        const std::vector<int64_t>& order_shape,
                        const std::vector<int64_t>& order_stride);

/// A tensor read from outside the chain: kernel argument `slot`, its dtype, its geometry, and
/// whether the value is rounded to `round_to` after the load (a float32 0-dim tensor in a
/// bfloat16 op: the eager executor casts it to the op's dtype first, as PyTorch does).
struct Load {
  int slot = 0;
  DType dtype = DType::kFloat32;
  Geometry geo;
  bool round = false;
  DType round_to = DType::kFloat32;
};

/// An operand of a step: a load, an earlier step's value, or a number (a Python scalar, or +-inf
/// for a clamp bound given as None).
struct Arg {
  enum Kind : uint8_t { kLoad, kStep, kNumber } kind = kNumber;
  int index = 0;      ///< the load or the step
  double number = 0;  ///< kNumber: the value (the eager kernel takes it as float: (float)number)
};

/// One op: value = round(dtype, fn(args..., alpha)) per element.
struct Step {
  PointwiseFn fn = PointwiseFn::kCopy;
  std::vector<Arg> args;  ///< 1 to 3
  double alpha = 1;
  DType dtype = DType::kFloat32;  ///< the op's output dtype: its value is rounded to it
};

/// A value written: step `step`'s value into kernel output `slot` (dtype, geometry).
struct Store {
  int step = 0;
  int slot = 0;
  DType dtype = DType::kFloat32;
  Geometry geo;
};

/// A column sum: step `step`'s values (as rounded to its dtype, widened to float32) summed over
/// the rows of the iteration space seen as [numel / sum_cols, sum_cols], one float32 partial per
/// row block (gridDim.y) into kernel output `slot`, laid out [gridDim.y, sum_cols]. Summing the
/// partials over the row blocks (the binder: one eager column sum) gives the column sums.
struct ColSum {
  int step = 0;
  int slot = 0;
};

struct KernelSpec {
  int64_t numel = 0;
  std::vector<Load> loads;
  std::vector<Step> steps;
  std::vector<Store> stores;
  /// Column sums (at most 4, one column count `sum_cols` for all). Non-empty: the kernel takes
  /// the column-sum form (`generate`), which needs `chunked` and sum_cols a multiple of 8.
  std::vector<ColSum> sums;
  int64_t sum_cols = 0;
  /// Column-sum form only: __launch_bounds__'s minimum blocks per SM (0: none given) and whether
  /// each thread's accumulators live in its shared-memory slots instead of registers (the same
  /// additions in the same order for a given grid; the binder sizes the grid from the loaded
  /// kernel's occupancy, which these change, so the bits may change with them: deterministic for
  /// one build, device and setting, not across them). The binder's default is (0, false);
  /// REPLAY_POINTWISE_SUM_FORM="MIN_BLOCKS,SMEM" overrides it (a sweep knob, TUNING.md).
  int sum_min_blocks = 0;
  bool sum_acc_smem = false;
  /// Chunked forms: bfloat16 values also carried as pairs, the bfloat16 ops of bfloat16 values
  /// computed two at a time by fma.rn.bf16x2 and the other bfloat16 results rounded two at a
  /// time (the same bits: codegen.cpp, Emitter::pair_expr). false: every op in float32, rounded
  /// one element at a time (REPLAY_POINTWISE_PAIRS=0, the comparison knob of TUNING.md).
  bool bf16_pairs = true;
  /// Per load / store: the base pointer's alignment in bytes (a power of two; 16 or more lets an
  /// 8-element chunk of a unit-stride row be one or two 16-byte accesses).
  std::vector<int> load_align, store_align;
};

/// The kernel's entry point: extern "C" __global__ void replay_pointwise(PwKernelArgs).
inline constexpr const char* kEntry = "replay_pointwise";
/// Elements per thread and chunk, and threads per block, of the generated kernel.
inline constexpr int kChunk = 8;
inline constexpr int kThreads = 256;

/// Threads of a column-sum block: kSumLanes column chunks (8 columns each) by kSumRows row lanes.
inline constexpr int kSumLanes = 32;
inline constexpr int kSumRows = 8;

/// The kernel's source (self-contained: pw_math.cuh's text and the chain). Deterministic: equal
/// specs give equal text (the JIT cache key). Throws std::invalid_argument for a spec that breaks
/// its own invariants (an arg naming a later step, a slot out of range, a dtype other than
/// float32 / bfloat16 / float16 / bool; column sums without the chunked form, sum_cols not a
/// multiple of 8 or not dividing numel, more than 4 sums).
///
/// Without sums: a grid-stride loop over chunks (or elements), launched by `launch` (jit.hpp).
/// With sums (the column-sum form): block (kSumLanes * kSumRows threads) = 32 chunks of 8
/// consecutive columns by 8 row lanes, gridDim.x = ceil(sum_cols / 256) column strips, gridDim.y
/// row blocks of ceil(rows / gridDim.y) rows; each thread computes the chain at its chunk of rows
/// r0 + lane, r0 + lane + 8, ... in order, adding each summed value to a float32 accumulator per
/// column; the 8 lanes are added by a fixed tree in shared memory (lane l + 4 into l, then + 2,
/// + 1); lane 0 writes the block's partials. Same grid, same bits, run to run (the binder's grid
/// follows the loaded kernel's occupancy).
std::string generate(const KernelSpec& spec);

/// Whether the chunked path (8 consecutive iteration indices per thread, unit-stride rows as
/// 16-byte accesses) applies: numel a multiple of 8 and every geometry's innermost size too (a
/// chunk never crosses a row of any tensor). Otherwise each thread takes single elements.
bool chunked(const KernelSpec& spec);

}  // namespace replay::pointwise
