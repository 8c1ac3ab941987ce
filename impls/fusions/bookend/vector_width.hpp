// bookend: the vector width chooser, shared by the kernels that read strided operands (rope's
// optimized kernel, the segmented form's copy kernels). An operand takes `w`-byte accesses when
// its innermost stride is 1 and every address a vector starts at is `w`-aligned: the base, each
// outer stride (a broadcast dim's stride 0 is aligned: the expanded weight or table that made
// nvFuser fall back to scalar accesses keeps 16 bytes) and the innermost extent.
#pragma once

#include <cstdint>

namespace replay::bookend {

/// Bytes per access for an operand of `elem_bytes`-byte elements at `base`, outer strides
/// `outer_stride[0..n_outer)` (elements, any sign; 0 = broadcast), innermost stride
/// `inner_stride` and extent `inner_size` (elements): the largest power of two w in
/// [elem_bytes, max_bytes] with inner_stride == 1 (or inner_size == 1), base % w == 0,
/// (inner_size * elem_bytes) % w == 0 and (outer_stride[k] * elem_bytes) % w == 0 for every k;
/// elem_bytes when none is larger. max_bytes: a power of two, at least elem_bytes (16: one
/// 128-bit load or store).
int vector_bytes(uintptr_t base, int elem_bytes, const int64_t* outer_stride, int n_outer,
                 int64_t inner_stride, int64_t inner_size, int max_bytes = 16);

}  // namespace replay::bookend
