// fp8_quantize kernels (kernels.cu): the passes both variants are made of, over a row-major
// source x seen as [rows, cols] (bfloat16, float16 or float32) and up to kMaxQuants
// quantizations of it. bind.cpp strings them together:
//   optimized: amax pass (every amax of x in one read) -> cast pass computing the scales (every
//              float8 tensor of x, row-major and column-major, in one more read); rowwise
//              quantizations alone, row-major: one kernel, one read of x;
//   baseline:  per quantization: amax pass -> scale -> cast pass (row-major) -> transpose copy
//              for a column-major float8 copy (the eager sequence's passes, minus the
//              materialized |x|, x.float() and clamps).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "workloads/ir/dtype.hpp"

namespace replay::fp8_quantize {

inline constexpr int kMaxQuants = 4;    ///< quantizations of one tensor in one region
inline constexpr int kMaxDests = 2;     ///< float8 values one quantization writes
inline constexpr int kMaxVecOuts = 2;   ///< scale (or reciprocal, or amax) values it writes, each
inline constexpr int kMaxColMajor = 2;  ///< column-major float8 values per cast pass (smem tiles)
inline constexpr int kCastTile = 128;  ///< the cast pass's tile: kCastTile x kCastTile of x per CTA
inline constexpr int kAmaxCols = 256;  ///< columns of x one CTA of the amax pass covers
/// Widest row the one-pass rowwise kernel holds in registers (elements); wider rows take the
/// streaming kernel, which reads each row twice (the second time from L2).
inline constexpr int64_t kRowwiseMaxCols = 512 * 8 * 8;

enum class Granularity : uint8_t {
  kTensorwise,  ///< one amax and scale for the whole tensor ([] or [1, 1])
  kRowwise,     ///< one per row: amax over dim -1, keepdim ([rows, 1])
  kColumnwise,  ///< one per column of a 2-D tensor: amax over dim 0 ([1, cols] or [cols])
};

/// Amax workspace slot of a granularity and abs flag (kAmaxSlots in all): element keys
/// (quant_math.hpp max_key), 1, rows or cols of them.
inline constexpr int amax_slot(Granularity g, bool abs) {
  return static_cast<int>(g) * 2 + (abs ? 1 : 0);
}
inline constexpr int kAmaxSlots = 6;

/// A float8 tensor written as [rows, cols]: element (r, c) at ptr[r * rs + c * cs].
/// Row-major (cs == 1) is written straight from registers; column-major (rs == 1) through a
/// shared-memory tile (smem_slot >= 0 in the optimized cast pass).
struct Fp8Dest {
  uint8_t* ptr = nullptr;
  int64_t rs = 0, cs = 0;
  int smem_slot = -1;
};

/// A vector output (a scale, its reciprocal or an amax): element i at ptr[i * stride], `dtype`.
struct VecOut {
  void* ptr = nullptr;
  int64_t stride = 1;
  DType dtype = DType::kFloat32;
};

struct QuantArgs {
  Granularity gran = Granularity::kTensorwise;
  bool abs = true;         ///< amax of |x| (false: of x)
  bool e5m2 = false;       ///< float8_e5m2 (false: float8_e4m3fn)
  double scale_mul = 448;  ///< scale = scale_mul / max(amax, eps)
  double eps = 1e-12;
  /// The scale is rounded down to a power of two (quant_math.hpp round_scale_pow2).
  bool pow2 = false;
  Fp8Dest dests[kMaxDests];
  int n_dests = 0;
  VecOut scales[kMaxVecOuts], recips[kMaxVecOuts], amaxes[kMaxVecOuts];
  int n_scales = 0, n_recips = 0, n_amaxes = 0;
  /// [len] float32 scales (len 1, rows or cols), written by the scales kernel and read by a cast
  /// that does not fold them; null where nothing reads it (the optimized variant).
  float* scale_ws = nullptr;
  /// A given amax (one element of given_dtype, tensorwise) instead of the amax workspace slot.
  const void* given = nullptr;
  DType given_dtype = DType::kFloat32;
};

struct QuantizeArgs {
  const void* x = nullptr;  ///< [rows, cols] row-major, rows `cols` elements apart
  DType x_dtype = DType::kBFloat16;
  int64_t rows = 0, cols = 0;
  QuantArgs q[kMaxQuants];
  int n_quants = 0;
  uint32_t* amax_ws[kAmaxSlots] = {};  ///< max keys per slot (amax_slot); null where unused
  /// Test hook, 0 in production: the GPU mutants set 1 so that a rowwise cast reads row r ^ 1's
  /// scale (tests/gpu_fp8_quantize.cpp, "swapped rowwise scales"); the generic cast kernel only
  /// (cast_fast_plan declines a set hook).
  int row_scale_xor = 0;
};

/// Elements of a granularity's vectors: 1, rows or cols.
int64_t vec_len(const QuantizeArgs& a, Granularity g);

/// Sets the amax slots in `slots` (a bit per slot) to the empty max and takes every amax they
/// stand for in one read of x. Returns true when the last work it put in `s` is an amax kernel
/// (false: no slot, nothing launched), which a following launch_cast may overlap (after_amax).
bool launch_amax(const QuantizeArgs& a, unsigned slots, cudaStream_t s);
/// For each quantization in `quants` (a bit each): its scales from its amax slot into scale_ws,
/// and its scale, reciprocal and amax outputs.
void launch_scales(const QuantizeArgs& a, unsigned quants, cudaStream_t s);
/// One read of x: every float8 dest of the quantizations in `quants`. Column-major dests need
/// smem_slot set (at most kMaxColMajor), else they are written byte by byte. The scales: from
/// scale_ws (launch_scales before), or, when `fold_scales`, computed by each CTA from the amax
/// slots (or given amaxes) for its tile, the scale, reciprocal and amax outputs written on the
/// way (then no launch_scales: one launch fewer, ~3-4 µs per quantized tensor on the H200).
/// `after_amax`: the previous work in `s` is launch_amax's kernel (its return value), so the cast
/// is launched as its programmatic dependent (impls/cuda/pdl.cuh): each CTA's loads of x are
/// issued before it waits for the amax pass. Never set it after other work: x itself may be what
/// that work writes.
void launch_cast(const QuantizeArgs& a, unsigned quants, bool fold_scales, cudaStream_t s,
                 bool after_amax = false);
/// REPLAY_FP8_PDL: unset, empty or 1 -> true (launch_cast's after_amax honoured); 0 -> false (the
/// cast a plain launch everywhere: the A/B switch of TUNING.md v4). Read once per process.
/// Throws std::invalid_argument naming the variable for any other value.
bool pdl_enabled();
/// The cast pass's specialized groups: one or two quantizations, each with at most one row-major
/// dest (8-byte aligned rows) and one column-major dest staged in shared memory (smem_slot), x in
/// 16-byte vectors: the float8 linears' groups (a tensorwise x with its row-major and
/// column-major copies; a rowwise row-major beside a columnwise column-major; a weight's
/// column-major copy alone). Their fields sit at static offsets of the kernel's parameters.
struct CastFast {
  struct Quant {
    int qi = -1;  ///< index in QuantizeArgs::q
    Granularity gran = Granularity::kTensorwise;
    bool e5m2 = false;
    const float* scale_ws = nullptr;  ///< as QuantArgs::scale_ws (when the scales are not folded)
    uint8_t* rm = nullptr;            ///< the row-major dest ([rows, cols], row stride rs), or null
    int64_t rs = 0;
    int slot = -1;  ///< the column-major dest's shared-memory tile, or -1
  };
  Quant q[2];
  int nq = 0;
  unsigned quants = 0;     ///< the bits of the quantizations in q
  bool col_major = false;  ///< some quantization has a column-major dest
};
/// Fills `f` and returns true when `quants` is such a group (launch_cast then takes the
/// specialized kernel unless cast_generic()).
bool cast_fast_plan(const QuantizeArgs& a, unsigned quants, CastFast& f);
/// Whether launch_cast takes the generic kernel for every group: false by default, true when the
/// environment sets REPLAY_FP8_CAST=generic (an A/B switch for a device sweep); set_cast_generic
/// changes it (the GPU tests run both kernels). Not thread-safe: set it between replays.
bool cast_generic();
void set_cast_generic(bool generic);

/// True when the quantizations in `quants` are all rowwise with row-major dests (and no test
/// hook is set): launch_rowwise then does the whole work in one read of x.
bool rowwise_one_pass(const QuantizeArgs& a, unsigned quants);
/// One read of x: the row amaxes, scales (and their outputs) and row-major float8 rows of the
/// rowwise quantizations in `quants` (rowwise_one_pass must hold; no workspaces needed). 16-bit
/// rows of up to 4096 elements in 16-byte vectors take the ring kernel (rows through shared
/// memory by cp.async.bulk, TUNING.md v5 and v6) unless rowwise_ring_enabled() is false.
void launch_rowwise(const QuantizeArgs& a, unsigned quants, cudaStream_t s);
/// REPLAY_FP8_RING: unset, empty or 1 -> true; 0 -> false (those rows take the warp-per-row
/// register kernel of v3: the A/B switch of TUNING.md v5). Read once per process; throws
/// std::invalid_argument naming the variable for any other value. set_rowwise_ring changes it
/// (the GPU tests run both kernels). Not thread-safe: set it between replays.
bool rowwise_ring_enabled();
void set_rowwise_ring(bool on);
/// The ring kernel's geometry: warps per CTA (1-16), row slots per warp, and a cap on its CTAs
/// (0: the resident count). Default 16 warps with 8 KB of row slots each (1 slot at 4096 columns,
/// up to 8 for narrower rows), no cap.
struct RingGeometry {
  int warps = 0, stages = 0, max_ctas = 0;
};
/// Test hook: launch_rowwise's ring kernel at `g` instead of the default (or of
/// REPLAY_FP8_ROWWISE=rW,S); warps = 0 restores them. A geometry that does not fit (ring_fits: at
/// most 16 warps, 128 slots per CTA; the device's shared memory) leaves those rows to the warp
/// kernel. Thread-safe; set it between replays.
void set_rowwise_ring_geometry(RingGeometry g);
/// Ring kernel launches since the process started (the GPU tests check the kernel they meant ran).
uint64_t rowwise_ring_launches();
/// Reads REPLAY_FP8_RING and REPLAY_FP8_ROWWISE (once per process); throws std::invalid_argument
/// naming the variable for a value of the wrong form. Called at bind.
void validate_rowwise_env();
/// dst = src, both [rows, cols] float8 in their strides (the baseline's column-major copy), through
/// 32 x 32 shared-memory tiles.
void launch_transpose_copy(Fp8Dest src, Fp8Dest dst, int64_t rows, int64_t cols, cudaStream_t s);

}  // namespace replay::fp8_quantize
