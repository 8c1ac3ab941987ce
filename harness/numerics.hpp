// Numerics check: a GPU (or golden) tensor against the reference, llm.c style tolerance
// |got - ref| <= atol + rtol * |ref|, per element. NaN in `got` never passes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/host_tensor.hpp"

namespace replay {

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
/// against float64). A wrong kernel misses by far more than this on most elements; the GPU tests
/// also bound rel_l2 over the whole tensor.
Tolerance default_tolerance(DType t);

struct NumericsResult {
  std::string value;  ///< value (tensor) name checked
  int64_t numel = 0;
  int64_t mismatches = 0;  ///< elements outside tolerance, NaN/inf included
  int64_t nan_count = 0;   ///< NaN (or inf where the reference is finite) in `got`
  double max_abs_err = 0;
  double max_rel_err = 0;               ///< max |got-ref| / |ref| over elements with ref != 0
  double rel_l2 = 0;                    ///< ||got - ref|| / ||ref||
  std::vector<int64_t> first_mismatch;  ///< multi-index of the first mismatch (empty if none)
  double first_got = 0, first_ref = 0;
  Tolerance tol;
  bool pass() const { return mismatches == 0; }
};

/// Compare `got` with `ref` (same shape). Throws std::invalid_argument on a shape mismatch.
NumericsResult compare_tensors(const std::string& value, const HostTensor& got,
                               const HostTensor& ref, Tolerance tol);

nlohmann::json to_json(const NumericsResult& r);

}  // namespace replay
