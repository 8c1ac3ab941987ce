#include "workloads/ir/tolerance.hpp"

namespace replay {

Tolerance default_tolerance(DType t) {
  switch (t) {
    case DType::kBFloat16:
      return {1.6e-2, 1.6e-2};
    case DType::kFloat16:
      return {2e-3, 2e-3};
    case DType::kFloat32:
      return {1e-5, 1e-5};
    case DType::kFloat64:
      return {1e-7, 1e-7};
    case DType::kFloat8E4M3:
      return {1e-3, 1.25e-1};  // 3 mantissa bits
    case DType::kFloat8E5M2:
      return {1e-3, 2.5e-1};  // 2 mantissa bits
    default:
      return {0, 0};  // integers and bool: exact
  }
}

}  // namespace replay
