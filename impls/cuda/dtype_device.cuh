// Device-side element access by run-time dtype, shared by the eager kernels and the fusions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "workloads/ir/dtype.hpp"

namespace replay {

/// Element `i` of `p` (dtype `t`) widened to acc_t (float or double).
template <typename acc_t>
__device__ __forceinline__ acc_t load_elem(const void* p, int64_t i, DType t) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<acc_t>(static_cast<const float*>(p)[i]);
    case DType::kFloat64:
      return static_cast<acc_t>(static_cast<const double*>(p)[i]);
    case DType::kBFloat16:
      return static_cast<acc_t>(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    case DType::kFloat16:
      return static_cast<acc_t>(__half2float(static_cast<const __half*>(p)[i]));
    case DType::kInt64:
      return static_cast<acc_t>(static_cast<const int64_t*>(p)[i]);
    case DType::kInt32:
      return static_cast<acc_t>(static_cast<const int32_t*>(p)[i]);
    case DType::kBool:
      return static_cast<acc_t>(static_cast<const uint8_t*>(p)[i] != 0);
    case DType::kFloat8E4M3:
      return static_cast<acc_t>(float(static_cast<const __nv_fp8_e4m3*>(p)[i]));
    case DType::kFloat8E5M2:
      return static_cast<acc_t>(float(static_cast<const __nv_fp8_e5m2*>(p)[i]));
    default:
      return static_cast<acc_t>(NAN);
  }
}

/// Store `v` rounded (nearest-even) to dtype `t` at element `i` of `p`.
template <typename acc_t>
__device__ __forceinline__ void store_elem(void* p, int64_t i, DType t, acc_t v) {
  switch (t) {
    case DType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case DType::kFloat64:
      static_cast<double*>(p)[i] = static_cast<double>(v);
      return;
    case DType::kBFloat16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(static_cast<float>(v));
      return;
    case DType::kFloat16:
      static_cast<__half*>(p)[i] = __float2half_rn(static_cast<float>(v));
      return;
    case DType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      return;
    case DType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      return;
    case DType::kBool:
      static_cast<uint8_t*>(p)[i] = v != acc_t(0);
      return;
    // float8: round to nearest even; past the largest finite value e4m3fn gives NaN (it has no
    // inf) and e5m2 gives inf, as torch's cast does (c10/util/Float8_e4m3fn.h). From double
    // the value is rounded once (cuda_fp8 converts double directly).
    case DType::kFloat8E4M3:
      static_cast<__nv_fp8_storage_t*>(p)[i] =
          __nv_cvt_double_to_fp8(static_cast<double>(v), __NV_NOSAT, __NV_E4M3);
      return;
    case DType::kFloat8E5M2:
      static_cast<__nv_fp8_storage_t*>(p)[i] =
          __nv_cvt_double_to_fp8(static_cast<double>(v), __NV_NOSAT, __NV_E5M2);
      return;
    default:
      return;
  }
}

}  // namespace replay
