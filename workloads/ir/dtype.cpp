#include "workloads/ir/dtype.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace replay {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
  bool floating;
  int mant = 0;  ///< explicit mantissa bits (floating dtypes)
  int emin = 0;  ///< smallest normal exponent (floating dtypes)
};

constexpr std::array<DTypeInfo, static_cast<size_t>(DType::kCount)> kInfo = {{
    {DType::kFloat32, "float32", 4, true, 23, -126},
    {DType::kFloat64, "float64", 8, true, 52, -1022},
    {DType::kFloat16, "float16", 2, true, 10, -14},
    {DType::kBFloat16, "bfloat16", 2, true, 7, -126},
    {DType::kFloat8E4M3, "float8_e4m3fn", 1, true, 3, -6},
    {DType::kFloat8E5M2, "float8_e5m2", 1, true, 2, -14},
    {DType::kInt64, "int64", 8, false},
    {DType::kInt32, "int32", 4, false},
    {DType::kBool, "bool", 1, false},
}};
static_assert(kInfo.size() == static_cast<size_t>(DType::kCount), "every dtype needs a row");

constexpr bool table_in_enum_order() {
  for (size_t i = 0; i < kInfo.size(); ++i)
    if (static_cast<size_t>(kInfo[i].type) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kInfo rows must follow the enum order");

const DTypeInfo& info(DType t) {
  return kInfo.at(static_cast<size_t>(t));
}

// Generic minifloat rounding for float8 formats: `mant` explicit mantissa bits, `emin` smallest
// normal exponent, `maxval` largest finite value (saturating formats return NaN past it, as
// torch's cast does for e4m3fn; e5m2 goes to inf).
double round_minifloat(double v, int mant, int emin, double maxval, bool has_inf) {
  if (std::isnan(v)) return v;
  if (std::isinf(v)) return has_inf ? v : NAN;
  double a = std::fabs(v);
  if (a == 0) return v;
  int e = std::max(std::ilogb(a), emin);  // exact (std::log2 may round differently per libm)
  double quantum = std::ldexp(1.0, e - mant);
  double r = std::nearbyint(a / quantum) * quantum;  // ties to even under the default mode
  if (r > maxval) {
    // Values that round past the largest finite number overflow.
    r = has_inf ? INFINITY : NAN;
  }
  return std::copysign(r, v);
}

// float8 bits of a value already rounded to the format (round_to), and back. Layout: sign,
// exponent (bias 7 for e4m3fn, 15 for e5m2), mantissa; e4m3fn's NaN is 0x7F/0xFF (no inf),
// e5m2's inf 0x7C, NaN 0x7F.
uint8_t encode_fp8(double r, int mant, int emin, int bias, bool has_inf) {
  const uint8_t sign = std::signbit(r) ? 0x80 : 0;
  if (std::isnan(r)) return sign | 0x7F;
  if (std::isinf(r)) return sign | (has_inf ? 0x7C : 0x7F);
  const double a = std::fabs(r);
  if (a == 0) return sign;
  int e = std::ilogb(a);
  if (e < emin) return sign | static_cast<uint8_t>(std::lround(a / std::ldexp(1.0, emin - mant)));
  const auto m = static_cast<int>(std::lround((a / std::ldexp(1.0, e) - 1) * (1 << mant)));
  return sign | static_cast<uint8_t>(((e + bias) << mant) | m);
}

double decode_fp8(uint8_t b, int mant, int emin, int bias, bool has_inf) {
  const double sign = (b & 0x80) ? -1 : 1;
  const int e = (b & 0x7F) >> mant, m = b & ((1 << mant) - 1);
  if (has_inf && e == (0x7F >> mant)) return m ? NAN : sign * INFINITY;
  if (!has_inf && (b & 0x7F) == 0x7F) return NAN;
  if (e == 0) return sign * std::ldexp(m, emin - mant);
  return sign * std::ldexp(1.0 + std::ldexp(m, -mant), e - bias);
}

}  // namespace

std::string_view dtype_name(DType t) {
  return info(t).name;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return std::nullopt;
}

std::string dtype_list() {
  std::string s = "expected one of ";
  for (size_t i = 0; i < kInfo.size(); ++i) s += (i ? ", " : "") + std::string(kInfo[i].name);
  return s;
}

size_t dtype_size(DType t) {
  return info(t).size;
}
bool is_floating(DType t) {
  return info(t).floating;
}
bool is_16bit_float(DType t) {
  return t == DType::kBFloat16 || t == DType::kFloat16;
}
int mantissa_bits(DType t) {
  return info(t).mant;
}
int min_normal_exponent(DType t) {
  return info(t).emin;
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_bits_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

uint16_t float_to_f16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    float a = std::bit_cast<float>(abs);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float f16_bits_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

bool is_integral(DType t) {
  return t == DType::kInt32 || t == DType::kInt64;
}

std::optional<DType> promote_types(DType a, DType b) {
  if (a == b) return a;
  auto fp8 = [](DType t) { return t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2; };
  if (fp8(a) || fp8(b)) return std::nullopt;  // c10: "Promotion for Float8 Types is not supported"
  auto rank = [](DType t) {  // bool < int32 < int64 < {float16, bfloat16} < float32 < float64
    switch (t) {
      case DType::kBool:
        return 0;
      case DType::kInt32:
        return 1;
      case DType::kInt64:
        return 2;
      case DType::kFloat16:
      case DType::kBFloat16:
        return 3;
      case DType::kFloat32:
        return 4;
      default:
        return 5;
    }
  };
  if (rank(a) == 3 && rank(b) == 3) return DType::kFloat32;  // float16 + bfloat16
  return rank(a) >= rank(b) ? a : b;
}

double round_to(DType t, double v) {
  switch (t) {
    case DType::kFloat64:
      return v;
    case DType::kFloat32:
      return static_cast<float>(v);
    case DType::kBFloat16:
      return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(v)));
    case DType::kFloat16:
      return f16_bits_to_float(float_to_f16_bits(static_cast<float>(v)));
    case DType::kFloat8E4M3:
      return round_minifloat(v, mantissa_bits(t), min_normal_exponent(t), 448.0, false);
    case DType::kFloat8E5M2:
      return round_minifloat(v, mantissa_bits(t), min_normal_exponent(t), 57344.0, true);
    case DType::kInt64:
    case DType::kInt32:
      return std::trunc(v);
    case DType::kBool:
      return v != 0 ? 1.0 : 0.0;
    case DType::kCount:
      break;
  }
  throw std::logic_error("round_to: bad dtype");
}

void store_as(DType t, double v, void* dst) {
  switch (t) {
    case DType::kFloat64:
      std::memcpy(dst, &v, 8);
      return;
    case DType::kFloat32: {
      float f = static_cast<float>(v);
      std::memcpy(dst, &f, 4);
      return;
    }
    case DType::kBFloat16: {
      uint16_t h = float_to_bf16_bits(static_cast<float>(v));
      std::memcpy(dst, &h, 2);
      return;
    }
    case DType::kFloat16: {
      uint16_t h = float_to_f16_bits(static_cast<float>(v));
      std::memcpy(dst, &h, 2);
      return;
    }
    case DType::kInt64: {
      int64_t i = static_cast<int64_t>(v);
      std::memcpy(dst, &i, 8);
      return;
    }
    case DType::kInt32: {
      int32_t i = static_cast<int32_t>(v);
      std::memcpy(dst, &i, 4);
      return;
    }
    case DType::kBool:
      *static_cast<uint8_t*>(dst) = v != 0;
      return;
    case DType::kFloat8E4M3:
      *static_cast<uint8_t*>(dst) = encode_fp8(round_to(t, v), 3, -6, 7, false);
      return;
    case DType::kFloat8E5M2:
      *static_cast<uint8_t*>(dst) = encode_fp8(round_to(t, v), 2, -14, 15, true);
      return;
    case DType::kCount:
      break;
  }
  throw std::runtime_error("store_as: no host storage for dtype " + std::string(dtype_name(t)));
}

double load_as(DType t, const void* src) {
  switch (t) {
    case DType::kFloat64: {
      double d;
      std::memcpy(&d, src, 8);
      return d;
    }
    case DType::kFloat32: {
      float f;
      std::memcpy(&f, src, 4);
      return f;
    }
    case DType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, src, 2);
      return bf16_bits_to_float(h);
    }
    case DType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, src, 2);
      return f16_bits_to_float(h);
    }
    case DType::kInt64: {
      int64_t i;
      std::memcpy(&i, src, 8);
      return static_cast<double>(i);
    }
    case DType::kInt32: {
      int32_t i;
      std::memcpy(&i, src, 4);
      return i;
    }
    case DType::kBool:
      return *static_cast<const uint8_t*>(src) ? 1.0 : 0.0;
    case DType::kFloat8E4M3:
      return decode_fp8(*static_cast<const uint8_t*>(src), 3, -6, 7, false);
    case DType::kFloat8E5M2:
      return decode_fp8(*static_cast<const uint8_t*>(src), 2, -14, 15, true);
    case DType::kCount:
      break;
  }
  throw std::runtime_error("load_as: no host storage for dtype " + std::string(dtype_name(t)));
}

bool exact_widening(DType from, DType to) {
  return from != to && is_floating(from) && is_floating(to) &&
         promote_types(from, to) == std::optional<DType>(to);
}

}  // namespace replay
