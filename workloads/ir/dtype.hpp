// Element types of trace tensors, as PyTorch names them, with host-side conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace replay {

/// Element type of a tensor. Names follow torch (`torch.bfloat16` -> "bfloat16").
enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kFloat8E4M3,  // torch.float8_e4m3fn
  kFloat8E5M2,  // torch.float8_e5m2
  kInt64,
  kInt32,
  kBool,
  kCount
};

/// torch's name of a dtype ("bfloat16").
std::string_view dtype_name(DType t);
/// Parse torch's name; std::nullopt for an unknown name.
std::optional<DType> parse_dtype(std::string_view name);
/// "expected one of float32, float64, ...": the dtype names a trace may use, for error messages.
std::string dtype_list();
/// Size of one element in bytes.
size_t dtype_size(DType t);
bool is_floating(DType t);
/// bfloat16 or float16: the dtypes whose every value a 65536-entry table indexes by its bits.
bool is_16bit_float(DType t);
/// Explicit mantissa bits of a floating dtype (bfloat16 7, float16 10, float32 23, float64 52,
/// float8_e4m3fn 3, float8_e5m2 2); 0 for integers and bool.
int mantissa_bits(DType t);
/// Exponent of the smallest normal value of a floating dtype (float32 -126, float16 -14, ...).
int min_normal_exponent(DType t);

/// torch.promote_types(a, b): the smallest dtype both convert to without losing their category
/// (bool < integer < floating); float16 with bfloat16 gives float32. std::nullopt where PyTorch
/// refuses (two different float8 dtypes, or float8 with any other dtype).
std::optional<DType> promote_types(DType a, DType b);
bool is_integral(DType t);  ///< int32, int64 (not bool)
/// A cast from `from` to `to` keeps every value exactly and changes the dtype: both floating and
/// `to` is what promote_types gives (bfloat16/float16 to float32/float64, float32 to float64).
bool exact_widening(DType from, DType to);

/// Round a value to the nearest value representable in `t` (round-to-nearest-even, as a cast
/// in PyTorch does); float64 is returned unchanged, float32 is rounded to float.
double round_to(DType t, double v);

/// Store `v` (rounded to `t`) into `dst`, which points at one element of type `t`.
void store_as(DType t, double v, void* dst);
/// Load one element of type `t` from `src`, widened to double.
double load_as(DType t, const void* src);

/// bfloat16 bits <-> float, round-to-nearest-even, NaN kept quiet.
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t h);
/// IEEE binary16 bits <-> float, round-to-nearest-even.
uint16_t float_to_f16_bits(float f);
float f16_bits_to_float(uint16_t h);

}  // namespace replay
