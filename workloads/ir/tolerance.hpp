// How close a result must be to the float64 reference: shared by the numerics check
// (harness/report/numerics.hpp) and the fusions that declare their own bounds.
#pragma once

#include "workloads/ir/dtype.hpp"

namespace replay {

/// Elementwise bound |got - ref| <= atol + rtol * |ref|.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

/// Tolerance for comparing a result of dtype `t` with the float64 reference. For bfloat16 and
/// float16 both atol and rtol are two units in the last place at magnitude 1 (bf16 1.6e-2, fp16
/// 2e-3): a chain of ops that each round to the narrow type can flip one rounding of an O(1)
/// intermediate, and a later add can cancel the value while the absolute error stays. (rtol is
/// torch.testing.assert_close's for bf16; its fp16 1e-3 is one ulp, too tight for such chains.)
/// float32 allows 1e-5 (fp32 arithmetic and accumulation over rows of a few thousand elements,
/// against float64). Integers and bool are exact.
Tolerance default_tolerance(DType t);

}  // namespace replay
