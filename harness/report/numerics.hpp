// Numerics check: a GPU (or golden) tensor against the reference, llm.c style tolerance
// |got - ref| <= atol + rtol * |ref|, per element. NaN in `got` never passes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/ir/host_tensor.hpp"
#include "workloads/ir/tolerance.hpp"

namespace replay {

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
