// Vector access for the eager kernels (impls/eager/kernels.cu): vectors of kVec = 8 elements
// moved by aligned 1- to 16-byte accesses into 32-bit registers, and per-element conversions that
// call load_elem / store_elem (impls/cuda/dtype_device.cuh) with a compile-time dtype on a local of
// the element's own type. The vector paths therefore widen and round exactly as the scalar paths:
// the same functions run, only the memory access differs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "impls/cuda/dtype_device.cuh"

namespace replay::eager {

/// "Known only at run time" in a kernel's dtype template arguments.
constexpr DType kDyn = DType::kCount;

/// Elements per vector.
constexpr int kVec = 8;

/// Bytes of one element of `t`.
__host__ __device__ constexpr int dsize(DType t) {
  switch (t) {
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    default:  // float8, bool
      return 1;
  }
}

/// The alignment (bytes) a vector of kVec elements of `size` bytes needs: its accesses are of
/// min(16, 8 * size) bytes each.
__host__ __device__ constexpr int vec_align(int size) {
  return size * kVec < 16 ? size * kVec : 16;
}

/// Up to 8 elements of up to 8 bytes each, packed little-endian into 32-bit words. Indexed with
/// compile-time constants only (unrolled loops), so it lives in registers.
struct Raw8 {
  uint32_t w[16];
};

/// Copy `Bytes` (1, 2, 4, 8, 16, 32 or 64) from `src`, aligned to min(Bytes, 16), into r.
template <int Bytes>
__device__ __forceinline__ void load_bytes(Raw8& r, const void* src) {
  static_assert(Bytes == 1 || Bytes == 2 || Bytes == 4 || Bytes == 8 || Bytes == 16 ||
                Bytes == 32 || Bytes == 64);
  if constexpr (Bytes == 1) {
    r.w[0] = *static_cast<const uint8_t*>(src);
  } else if constexpr (Bytes == 2) {
    r.w[0] = *static_cast<const uint16_t*>(src);
  } else if constexpr (Bytes == 4) {
    r.w[0] = *static_cast<const uint32_t*>(src);
  } else if constexpr (Bytes == 8) {
    const uint2 v = *static_cast<const uint2*>(src);
    r.w[0] = v.x;
    r.w[1] = v.y;
  } else {
#pragma unroll
    for (int k = 0; k < Bytes / 16; ++k) {
      const uint4 v = static_cast<const uint4*>(src)[k];
      r.w[4 * k] = v.x;
      r.w[4 * k + 1] = v.y;
      r.w[4 * k + 2] = v.z;
      r.w[4 * k + 3] = v.w;
    }
  }
}

/// Copy the first `Bytes` of r to `dst`, aligned to min(Bytes, 16).
template <int Bytes>
__device__ __forceinline__ void store_bytes(void* dst, const Raw8& r) {
  static_assert(Bytes == 8 || Bytes == 16 || Bytes == 32 || Bytes == 64);
  if constexpr (Bytes == 8) {
    *static_cast<uint2*>(dst) = make_uint2(r.w[0], r.w[1]);
  } else {
#pragma unroll
    for (int k = 0; k < Bytes / 16; ++k)
      static_cast<uint4*>(dst)[k] =
          make_uint4(r.w[4 * k], r.w[4 * k + 1], r.w[4 * k + 2], r.w[4 * k + 3]);
  }
}

/// Bits of element e (of S bytes) of r.
template <int S>
__device__ __forceinline__ uint64_t get_bits(const Raw8& r, int e) {
  if constexpr (S == 8)
    return r.w[2 * e] | (uint64_t(r.w[2 * e + 1]) << 32);
  else if constexpr (S == 4)
    return r.w[e];
  else if constexpr (S == 2)
    return (r.w[e >> 1] >> (16 * (e & 1))) & 0xFFFFu;
  else
    return (r.w[e >> 2] >> (8 * (e & 3))) & 0xFFu;
}

/// Set element e (of S bytes) of r to `b`; r's other bits are kept.
template <int S>
__device__ __forceinline__ void set_bits(Raw8& r, int e, uint64_t b) {
  if constexpr (S == 8) {
    r.w[2 * e] = static_cast<uint32_t>(b);
    r.w[2 * e + 1] = static_cast<uint32_t>(b >> 32);
  } else if constexpr (S == 4) {
    r.w[e] = static_cast<uint32_t>(b);
  } else {
    constexpr uint32_t mask = S == 2 ? 0xFFFFu : 0xFFu;
    const int k = e / (4 / S), sh = 8 * S * (e % (4 / S));
    r.w[k] = (r.w[k] & ~(mask << sh)) | ((static_cast<uint32_t>(b) & mask) << sh);
  }
}

/// An element of dtype D given by its bits, widened to acc_t by load_elem.
template <typename acc_t, DType D>
__device__ __forceinline__ acc_t from_bits(uint64_t b) {
  if constexpr (D == DType::kFloat32) {
    const float v = __uint_as_float(static_cast<uint32_t>(b));
    return load_elem<acc_t>(&v, 0, D);
  } else if constexpr (D == DType::kFloat64) {
    const double v = __longlong_as_double(static_cast<long long>(b));
    return load_elem<acc_t>(&v, 0, D);
  } else if constexpr (D == DType::kBFloat16) {
    const __nv_bfloat16 v = __ushort_as_bfloat16(static_cast<unsigned short>(b));
    return load_elem<acc_t>(&v, 0, D);
  } else if constexpr (D == DType::kFloat16) {
    const __half v = __ushort_as_half(static_cast<unsigned short>(b));
    return load_elem<acc_t>(&v, 0, D);
  } else if constexpr (D == DType::kFloat8E4M3) {
    __nv_fp8_e4m3 v;
    v.__x = static_cast<__nv_fp8_storage_t>(b);
    return load_elem<acc_t>(&v, 0, D);
  } else if constexpr (D == DType::kFloat8E5M2) {
    __nv_fp8_e5m2 v;
    v.__x = static_cast<__nv_fp8_storage_t>(b);
    return load_elem<acc_t>(&v, 0, D);
  } else if constexpr (D == DType::kInt64) {
    const int64_t v = static_cast<int64_t>(b);
    return load_elem<acc_t>(&v, 0, D);
  } else if constexpr (D == DType::kInt32) {
    const int32_t v = static_cast<int32_t>(static_cast<uint32_t>(b));
    return load_elem<acc_t>(&v, 0, D);
  } else {
    static_assert(D == DType::kBool);
    const uint8_t v = static_cast<uint8_t>(b);
    return load_elem<acc_t>(&v, 0, D);
  }
}

/// The bits of `v` rounded to dtype D by store_elem.
template <typename acc_t, DType D>
__device__ __forceinline__ uint64_t to_bits(acc_t v) {
  if constexpr (D == DType::kFloat32) {
    float t;
    store_elem<acc_t>(&t, 0, D, v);
    return __float_as_uint(t);
  } else if constexpr (D == DType::kFloat64) {
    double t;
    store_elem<acc_t>(&t, 0, D, v);
    return static_cast<uint64_t>(__double_as_longlong(t));
  } else if constexpr (D == DType::kBFloat16) {
    __nv_bfloat16 t;
    store_elem<acc_t>(&t, 0, D, v);
    return __bfloat16_as_ushort(t);
  } else if constexpr (D == DType::kFloat16) {
    __half t;
    store_elem<acc_t>(&t, 0, D, v);
    return __half_as_ushort(t);
  } else if constexpr (D == DType::kFloat8E4M3 || D == DType::kFloat8E5M2) {
    __nv_fp8_storage_t t;
    store_elem<acc_t>(&t, 0, D, v);
    return t;
  } else if constexpr (D == DType::kInt64) {
    int64_t t;
    store_elem<acc_t>(&t, 0, D, v);
    return static_cast<uint64_t>(t);
  } else if constexpr (D == DType::kInt32) {
    int32_t t;
    store_elem<acc_t>(&t, 0, D, v);
    return static_cast<uint32_t>(t);
  } else {
    static_assert(D == DType::kBool);
    uint8_t t;
    store_elem<acc_t>(&t, 0, D, v);
    return t;
  }
}

template <DType D>
struct DTag {
  static constexpr DType value = D;
};

/// Bit of dtype t in a dtype set.
__host__ __device__ constexpr unsigned dmask(DType t) {
  return 1u << static_cast<unsigned>(t);
}
constexpr unsigned kAllDtypes = (1u << static_cast<unsigned>(DType::kCount)) - 1;
/// The floating dtypes narrower than float64: the inputs of a float accumulation.
constexpr unsigned kNarrowFloats = dmask(DType::kFloat32) | dmask(DType::kBFloat16) |
                                   dmask(DType::kFloat16) | dmask(DType::kFloat8E4M3) |
                                   dmask(DType::kFloat8E5M2);

/// Calls fn(DTag<t>{}) for the run-time dtype t if t is in kMask (else nothing): a switch once,
/// typed code inside.
template <unsigned kMask, typename Fn>
__device__ __forceinline__ void dispatch_dtype(DType t, Fn&& fn) {
#define REPLAY_DISPATCH_CASE(D)                           \
  case D:                                                 \
    if constexpr ((kMask & dmask(D)) != 0) fn(DTag<D>{}); \
    return;
  switch (t) {
    REPLAY_DISPATCH_CASE(DType::kFloat32)
    REPLAY_DISPATCH_CASE(DType::kBFloat16)
    REPLAY_DISPATCH_CASE(DType::kFloat16)
    REPLAY_DISPATCH_CASE(DType::kFloat8E4M3)
    REPLAY_DISPATCH_CASE(DType::kFloat8E5M2)
    REPLAY_DISPATCH_CASE(DType::kFloat64)
    REPLAY_DISPATCH_CASE(DType::kInt64)
    REPLAY_DISPATCH_CASE(DType::kInt32)
    REPLAY_DISPATCH_CASE(DType::kBool)
    default:
      return;
  }
#undef REPLAY_DISPATCH_CASE
}

/// Load kVec elements (or 1 when `one`) at `src` into r; `src` aligned as vec_align says. kT is
/// the dtype, or kDyn for `dt` at run time, whose size is at most kMaxSize (a switch on the size
/// only: the loads of several operands are all issued before any conversion waits on one).
template <DType kT, int kMaxSize>
__device__ __forceinline__ void load_vec(Raw8& r, const void* src, DType dt, bool one) {
  const int size = kT == kDyn ? dsize(dt) : dsize(kT);
  if (size == 1) {
    if (one)
      load_bytes<1>(r, src);
    else
      load_bytes<kVec>(r, src);
  } else if (size == 2 && kMaxSize >= 2) {
    if (one)
      load_bytes<2>(r, src);
    else
      load_bytes<2 * kVec>(r, src);
  } else if (size == 4 && kMaxSize >= 4) {
    if (one)
      load_bytes<4>(r, src);
    else
      load_bytes<4 * kVec>(r, src);
  } else if constexpr (kMaxSize >= 8) {
    if (one)
      load_bytes<8>(r, src);
    else
      load_bytes<8 * kVec>(r, src);
  }
}

/// The first N (1 or kVec) elements of r, of dtype kT (or `dt` in kMask when kT is kDyn),
/// widened to acc_t into v.
template <typename acc_t, DType kT, unsigned kMask, int N>
__device__ __forceinline__ void unpack(const Raw8& r, DType dt, acc_t (&v)[kVec]) {
  auto body = [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
#pragma unroll
    for (int e = 0; e < N; ++e) v[e] = from_bits<acc_t, D>(get_bits<dsize(D)>(r, e));
  };
  if constexpr (kT == kDyn)
    dispatch_dtype<kMask>(dt, body);
  else
    body(DTag<kT>{});
}

/// v[0..kVec) rounded to dtype kT (or `dt` in kMask when kT is kDyn), stored as one vector.
template <typename acc_t, DType kT, unsigned kMask>
__device__ __forceinline__ void pack_store(void* dst, DType dt, const acc_t (&v)[kVec]) {
  auto body = [&](auto tag) {
    constexpr DType D = decltype(tag)::value;
    constexpr int S = dsize(D);
    Raw8 r{};
#pragma unroll
    for (int e = 0; e < kVec; ++e) set_bits<S>(r, e, to_bits<acc_t, D>(v[e]));
    store_bytes<S * kVec>(dst, r);
  };
  if constexpr (kT == kDyn)
    dispatch_dtype<kMask>(dt, body);
  else
    body(DTag<kT>{});
}

}  // namespace replay::eager
