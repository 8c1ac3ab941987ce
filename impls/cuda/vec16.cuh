// 16-byte vectors of bf16 / fp16 / fp32 widened to and narrowed from fp32 registers: the load and
// store unit of the row kernels (layernorm_fwd, norm_bwd). The 16-bit types convert in pairs (one
// F2FP instruction for two elements; single conversions take the slower pipe).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace replay {

/// The unsigned word of B bytes (1, 2, 4, 8, 16) one access moves: RawWord<16>::type is uint4.
template <int B>
struct RawWord;
template <>
struct RawWord<16> {
  using type = uint4;
};
template <>
struct RawWord<8> {
  using type = uint2;
};
template <>
struct RawWord<4> {
  using type = uint32_t;
};
template <>
struct RawWord<2> {
  using type = uint16_t;
};
template <>
struct RawWord<1> {
  using type = uint8_t;
};

/// Vec<T>: kElems elements of T in one uint4; unpack -> fp32[kElems], pack <- fp32[kElems]
/// (round to nearest even), first(p) = *p as fp32.
template <typename T>
struct Vec;

template <typename T2, typename Ops>
struct Vec16 {
  static constexpr int kElems = 8;
  __device__ static void unpack(const uint4& raw, float* f) {
    const T2* p = reinterpret_cast<const T2*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 t = Ops::to_float2(p[i]);
      f[2 * i] = t.x;
      f[2 * i + 1] = t.y;
    }
  }
  __device__ static uint4 pack(const float* f) {
    uint4 raw;
    T2* p = reinterpret_cast<T2*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = Ops::from_float2(f[2 * i], f[2 * i + 1]);
    return raw;
  }
};
struct Bf16Ops {
  __device__ static float2 to_float2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
  __device__ static __nv_bfloat162 from_float2(float a, float b) {
    return __floats2bfloat162_rn(a, b);
  }
};
struct F16Ops {
  __device__ static float2 to_float2(__half2 v) { return __half22float2(v); }
  __device__ static __half2 from_float2(float a, float b) { return __floats2half2_rn(a, b); }
};
template <>
struct Vec<__nv_bfloat16> : Vec16<__nv_bfloat162, Bf16Ops> {
  __device__ static float first(const __nv_bfloat16* p) { return __bfloat162float(*p); }
};
template <>
struct Vec<__half> : Vec16<__half2, F16Ops> {
  __device__ static float first(const __half* p) { return __half2float(*p); }
};
template <>
struct Vec<float> {
  static constexpr int kElems = 4;
  __device__ static void unpack(const uint4& raw, float* f) {
    f[0] = __uint_as_float(raw.x);
    f[1] = __uint_as_float(raw.y);
    f[2] = __uint_as_float(raw.z);
    f[3] = __uint_as_float(raw.w);
  }
  __device__ static uint4 pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
  __device__ static float first(const float* p) { return *p; }
};

}  // namespace replay
