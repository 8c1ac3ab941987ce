// pointwise codegen (codegen.hpp). The generated kernel, for a chain of K steps over N elements:
//
//   pw_math.cuh's text; pw_<fn>(x, y, z, alpha, index) per row of its table, T = float
//   ld_<dtype> / rd_<dtype> / st_<dtype>: the eager executor's widening (load_elem), rounding and
//     narrowing (store_elem): bfloat16 and float16 through cvt.rn (what __float2bfloat16_rn and
//     __float2half_rn compile to), bool as != 0
//   chunked (codegen.hpp `chunked`): each thread takes 8 consecutive iteration indices per round
//     of a grid-stride loop; every load is issued before any step (one or two 16-byte accesses
//     where the row has unit stride and the pointer and outer strides are aligned, one load where
//     the row is broadcast, 8 strided loads otherwise), then the steps element by element in
//     registers, then the stores (16-byte where they can be);
//   else each thread takes single indices of a grid-stride loop, every offset from its index.
// Offsets come from the geometry's sizes and strides as compile-time constants (divisions by
// constants), in 32-bit arithmetic where every index and offset fits.
#include "impls/fusions/pointwise/codegen.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "impls/fusions/pointwise/pw_math_source.hpp"

namespace replay::pointwise {
namespace {

// `pre` followed by the number k ("l3"); built by appending (GCC 12 warns falsely on
// "literal" + std::to_string).
std::string id(const char* pre, size_t k) {
  std::string s(pre);
  s += std::to_string(k);
  return s;
}

const char* suffix(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "f32";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "f16";
    case DType::kBool:
      return "b8";
    default:
      throw std::invalid_argument("pointwise codegen: dtype " + std::string(dtype_name(t)) +
                                  " (float32, bfloat16, float16 and bool only)");
  }
}

// The PointwiseFn's name as pw_math.cuh's table spells it ("kMul").
const char* fn_name(PointwiseFn f) {
  switch (f) {
#define REPLAY_FN_NAME(fn) \
  case PointwiseFn::fn:    \
    return #fn;
    REPLAY_FN_NAME(kCopy)
    REPLAY_FN_NAME(kRsqrt)
    REPLAY_FN_NAME(kSqrt)
    REPLAY_FN_NAME(kNeg)
    REPLAY_FN_NAME(kAbs)
    REPLAY_FN_NAME(kExp)
    REPLAY_FN_NAME(kLog)
    REPLAY_FN_NAME(kLog1p)
    REPLAY_FN_NAME(kExpm1)
    REPLAY_FN_NAME(kReciprocal)
    REPLAY_FN_NAME(kTanh)
    REPLAY_FN_NAME(kSigmoid)
    REPLAY_FN_NAME(kErf)
    REPLAY_FN_NAME(kSin)
    REPLAY_FN_NAME(kCos)
    REPLAY_FN_NAME(kSign)
    REPLAY_FN_NAME(kRelu)
    REPLAY_FN_NAME(kLog2)
    REPLAY_FN_NAME(kExp2)
    REPLAY_FN_NAME(kFloor)
    REPLAY_FN_NAME(kCeil)
    REPLAY_FN_NAME(kTrunc)
    REPLAY_FN_NAME(kRound)
    REPLAY_FN_NAME(kPow)
    REPLAY_FN_NAME(kAdd)
    REPLAY_FN_NAME(kSub)
    REPLAY_FN_NAME(kRsub)
    REPLAY_FN_NAME(kMul)
    REPLAY_FN_NAME(kDiv)
    REPLAY_FN_NAME(kDivTrunc)
    REPLAY_FN_NAME(kDivFloor)
    REPLAY_FN_NAME(kMaximum)
    REPLAY_FN_NAME(kMinimum)
    REPLAY_FN_NAME(kEq)
    REPLAY_FN_NAME(kNe)
    REPLAY_FN_NAME(kLt)
    REPLAY_FN_NAME(kLe)
    REPLAY_FN_NAME(kGt)
    REPLAY_FN_NAME(kGe)
    REPLAY_FN_NAME(kLogicalNot)
    REPLAY_FN_NAME(kLogicalAnd)
    REPLAY_FN_NAME(kLogicalOr)
    REPLAY_FN_NAME(kLogicalXor)
    REPLAY_FN_NAME(kWhere)
    REPLAY_FN_NAME(kClamp)
    REPLAY_FN_NAME(kFill)
    REPLAY_FN_NAME(kIota)
    REPLAY_FN_NAME(kDropout)
#undef REPLAY_FN_NAME
    case PointwiseFn::kCount:
      break;
  }
  throw std::invalid_argument("pointwise codegen: no such function");
}
static_assert(static_cast<int>(PointwiseFn::kCount) == 48,
              "a new PointwiseFn needs its name in fn_name (pointwise codegen)");

// The float value `v` has as a float literal, exactly ((float)v, as the eager kernel takes a
// Python number).
std::string float_lit(double v) {
  const float f = static_cast<float>(v);
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  char c[48];
  std::snprintf(c, sizeof c, "__uint_as_float(0x%08xu)", b);
  return c;
}

int dsize(DType t) {
  return static_cast<int>(dtype_size(t));
}

// The preamble: pw_math's functions at T = float, the element accessors, the argument block.
const char* kAccessors = R"(
namespace replay {
#define REPLAY_PW(fn, has_int, expr)                                                          \
  __device__ __forceinline__ float pw_##fn(float x, float y, float z, float alpha,            \
                                           long long index) {                                 \
    typedef float T;                                                                          \
    (void)x; (void)y; (void)z; (void)alpha; (void)index;                                      \
    return expr;                                                                              \
  }
REPLAY_PW_FUNCTIONS(REPLAY_PW)
#undef REPLAY_PW
}  // namespace replay

struct PwKernelArgs {
  const void* in[16];
  void* out[16];
};

__device__ __forceinline__ float ld_f32(const void* p, long long i) {
  return static_cast<const float*>(p)[i];
}
__device__ __forceinline__ float bits_bf16(unsigned short h) {
  return __uint_as_float(static_cast<unsigned>(h) << 16);
}
__device__ __forceinline__ float bits_f16(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ float ld_bf16(const void* p, long long i) {
  return bits_bf16(static_cast<const unsigned short*>(p)[i]);
}
__device__ __forceinline__ float ld_f16(const void* p, long long i) {
  return bits_f16(static_cast<const unsigned short*>(p)[i]);
}
__device__ __forceinline__ float ld_b8(const void* p, long long i) {
  return static_cast<const unsigned char*>(p)[i] != 0 ? 1.0f : 0.0f;
}
__device__ __forceinline__ unsigned short to_bf16(float v) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
__device__ __forceinline__ unsigned short to_f16(float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
__device__ __forceinline__ float rd_f32(float v) { return v; }
__device__ __forceinline__ float rd_bf16(float v) { return bits_bf16(to_bf16(v)); }
__device__ __forceinline__ float rd_f16(float v) { return bits_f16(to_f16(v)); }
__device__ __forceinline__ float rd_b8(float v) { return v != 0.0f ? 1.0f : 0.0f; }
__device__ __forceinline__ void st_f32(void* p, long long i, float v) {
  static_cast<float*>(p)[i] = v;
}
__device__ __forceinline__ void st_bf16(void* p, long long i, float v) {
  static_cast<unsigned short*>(p)[i] = to_bf16(v);
}
__device__ __forceinline__ void st_f16(void* p, long long i, float v) {
  static_cast<unsigned short*>(p)[i] = to_f16(v);
}
__device__ __forceinline__ void st_b8(void* p, long long i, float v) {
  static_cast<unsigned char*>(p)[i] = v != 0.0f ? 1 : 0;
}
// Two bfloat16 values in one word, element 2j in the low half (the order of a row in memory).
// pk_bf16 rounds both as cvt.rn.bf16.f32 does; lo_bf16 / hi_bf16 widen them back exactly.
__device__ __forceinline__ unsigned pk_bf16(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
__device__ __forceinline__ float lo_bf16(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_bf16(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
// a * b + c on two pairs of bfloat16 values, rounded once to bfloat16 (sm_80 and later).
__device__ __forceinline__ unsigned fma_bf16x2(unsigned a, unsigned b, unsigned c) {
  unsigned r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
)";

// The bfloat16 bits of `v` as the eager kernel takes it ((float)v), when that float is a finite
// bfloat16 value (0.5, 1, 3; not 0.044715), else -1.
int bf16_bits(double v) {
  const float f = static_cast<float>(v);
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  if (!std::isfinite(f) || (b & 0xffffu) != 0) return -1;
  return static_cast<int>(b >> 16);
}

std::string pair_lit(int bits) {
  char c[16];
  std::snprintf(c, sizeof c, "0x%04x%04xu", bits, bits);
  return c;
}

struct Emitter {
  const KernelSpec& s;
  bool i32 = false;  // 32-bit index arithmetic
  std::ostringstream o;

  // Chunked forms with KernelSpec::bf16_pairs: whether a load / step also has its 8 values as 4
  // bfloat16 pairs (pl<i>[4], pv<k>[4]): a load read as (or rounded to) bfloat16, a bfloat16 step.
  bool load_pairs(size_t li) const {
    const Load& l = s.loads.at(li);
    return s.bf16_pairs && (l.round ? l.round_to : l.dtype) == DType::kBFloat16;
  }
  bool step_pairs(size_t k) const {
    return s.bf16_pairs && s.steps.at(k).dtype == DType::kBFloat16;
  }

  const char* ix() const { return "ix_t"; }  // typedef'd at the kernel's top
  const char* ix_type() const { return i32 ? "unsigned" : "long long"; }

  std::string lit(int64_t v) const {
    return i32 ? std::to_string(v) + "u" : std::to_string(v) + "LL";
  }

  // `off` = the element offset of iteration index `idx` in geometry g (statements, one block).
  void offset(const Geometry& g, const std::string& idx, const std::string& off) {
    const size_t m = g.size.size();
    o << "    " << ix() << " " << off << " = 0;\n    {\n      " << ix() << " r = " << idx << ";\n";
    for (size_t k = m; k-- > 0;) {
      if (k == 0) {
        if (g.stride[0] != 0) o << "      " << off << " += r * " << lit(g.stride[0]) << ";\n";
        break;
      }
      o << "      { const " << ix() << " q = r / " << lit(g.size[k]) << "; ";
      if (g.stride[k] != 0)
        o << off << " += (r - q * " << lit(g.size[k]) << ") * " << lit(g.stride[k]) << "; ";
      o << "r = q; }\n";
    }
    o << "    }\n";
  }

  std::string arg(const Arg& a, const std::string& e) const {
    switch (a.kind) {
      case Arg::kLoad:
        return id("l", a.index) + e;
      case Arg::kStep:
        return id("v", a.index) + e;
      case Arg::kNumber:
        return float_lit(a.number);
    }
    return "0.0f";
  }

  // The step's value before its rounding: "replay::pw_kX(a0, a1, a2, alpha, 0)".
  std::string raw_expr(const Step& st, const std::string& e) const {
    std::string a[3] = {"0.0f", "0.0f", "0.0f"};
    for (size_t k = 0; k < st.args.size(); ++k) a[k] = arg(st.args[k], e);
    return std::string("replay::pw_") + fn_name(st.fn) + "(" + a[0] + ", " + a[1] + ", " + a[2] +
           ", " + float_lit(st.alpha) + ", 0)";
  }
  // The step's value: "rd_<dt>(replay::pw_kX(a0, a1, a2, alpha, 0))".
  std::string step_expr(const Step& st, const std::string& e) const {
    return std::string("rd_") + suffix(st.dtype) + "(" + raw_expr(st, e) + ")";
  }

  // Operand `a` as a bfloat16 pair at word j ("pl0[j]", "pv3[j]", a literal), "" if it has none.
  std::string pair_arg(const Arg& a) const {
    switch (a.kind) {
      case Arg::kLoad:
        return load_pairs(a.index) ? id("pl", a.index) + "[j]" : "";
      case Arg::kStep:
        return step_pairs(a.index) ? id("pv", a.index) + "[j]" : "";
      case Arg::kNumber: {
        const int b = bf16_bits(a.number);
        return b < 0 ? "" : pair_lit(b);
      }
    }
    return "";
  }

  // A bfloat16 step that one fma.rn.bf16x2 computes with the eager kernel's bits, as that
  // expression of word j, else "". Its operands are bfloat16 values, so the float32 product is
  // exact and the float32 sum or difference rounded to bfloat16 is the correctly rounded one (a
  // double rounding from 24 to 8 bits is innocuous: 24 >= 2 * 8 + 2; Figueroa, "When is double
  // rounding innocuous?", SIGNUM 1995): one correctly rounded bfloat16 fma gives the same value.
  // -0 as the addend keeps a product's sign of zero; 1 as the multiplier keeps a sum's.
  std::string pair_expr(const Step& st) const {
    if (st.dtype != DType::kBFloat16) return "";
    std::string a[2];
    for (size_t k = 0; k < st.args.size() && k < 2; ++k) a[k] = pair_arg(st.args[k]);
    const bool two = st.args.size() == 2 && !a[0].empty() && !a[1].empty();
    auto fma = [](const std::string& x, const std::string& y, const std::string& z) {
      return "fma_bf16x2(" + x + ", " + y + ", " + z + ")";
    };
    const std::string neg0 = "0x80008000u", one = "0x3f803f80u", minus1 = "0xbf80bf80u";
    switch (st.fn) {
      case PointwiseFn::kCopy:  // a bfloat16 value into a bfloat16 value
        return st.args.size() == 1 && !a[0].empty() ? a[0] : "";
      case PointwiseFn::kMul:
        return two ? fma(a[0], a[1], neg0) : "";
      case PointwiseFn::kAdd:  // x + alpha * y, alpha 1
        return two && st.alpha == 1 ? fma(a[1], one, a[0]) : "";
      case PointwiseFn::kSub:  // x - alpha * y
        return two && st.alpha == 1 ? fma(a[1], minus1, a[0]) : "";
      case PointwiseFn::kRsub:  // y - alpha * x
        return two && st.alpha == 1 ? fma(a[0], minus1, a[1]) : "";
      case PointwiseFn::kPow:  // pw_pow: x * x for the exponent 2
        return st.args.size() == 2 && !a[0].empty() && st.args[1].kind == Arg::kNumber &&
                       static_cast<float>(st.args[1].number) == 2.0f
                   ? fma(a[0], a[0], neg0)
                   : "";
      default:
        return "";
    }
  }

  bool vec_ok(const Geometry& g, DType t, int align) const {
    const int64_t bytes = int64_t(kChunk) * dsize(t);  // one chunk of a unit-stride row
    const int64_t want = std::min<int64_t>(bytes, 16);
    if (g.stride.back() != 1 || align < want) return false;
    for (size_t k = 0; k + 1 < g.size.size(); ++k)
      if ((g.stride[k] * dsize(t)) % want != 0) return false;
    return true;
  }

  void emit_chunk_load(size_t li) {
    const Load& l = s.loads[li];
    const std::string n = id("l", li);
    const std::string p = id("a.in[", l.slot) + "]";
    const char* sx = suffix(l.dtype);
    offset(l.geo, "s0", id("o", li));
    const std::string off = id("o", li);
    o << "    float " << n << "[8];\n";
    const int64_t inner = l.geo.stride.back();
    const std::string rnd = l.round ? std::string("rd_") + suffix(l.round_to) : std::string("");
    const bool pairs = load_pairs(li);
    auto pack = [&] {  // the pairs of a load that is a bfloat16 (exact: each is one already)
      if (pairs)
        o << "    unsigned " << id("pl", li) << "[4];\n    _Pragma(\"unroll\") for (int j = 0; j < "
          << "4; ++j) " << id("pl", li) << "[j] = pk_bf16(" << n << "[2 * j], " << n
          << "[2 * j + 1]);\n";
    };
    if (inner == 0) {
      o << "    { const float t = " << rnd << "(ld_" << sx << "(" << p << ", " << off
        << ")); _Pragma(\"unroll\") for (int e = 0; e < 8; ++e) " << n << "[e] = t; }\n";
      pack();
      return;
    }
    if (vec_ok(l.geo, l.dtype, s.load_align.at(li))) {
      const int ds = dsize(l.dtype);
      if (ds == 4) {
        o << "    { const float4* q = reinterpret_cast<const float4*>(static_cast<const float*>("
          << p << ") + " << off << "); const float4 u0 = q[0], u1 = q[1]; "
          << "const float t[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w}; "
          << "_Pragma(\"unroll\") for (int e = 0; e < 8; ++e) " << n << "[e] = " << rnd
          << "(t[e]); }\n";
        pack();
      } else if (ds == 2) {
        const bool raw = pairs && !l.round;  // the loaded words are the pairs
        if (raw) o << "    unsigned " << id("pl", li) << "[4];\n";
        o << "    { const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const unsigned "
             "short*>("
          << p << ") + " << off << "); const unsigned w[4] = {u.x, u.y, u.z, u.w}; ";
        if (raw)
          o << "_Pragma(\"unroll\") for (int j = 0; j < 4; ++j) " << id("pl", li) << "[j] = w[j]; ";
        o << "_Pragma(\"unroll\") for (int e = 0; e < 8; ++e) " << n << "[e] = " << rnd << "(bits_"
          << sx << "(static_cast<unsigned short>(w[e / 2] >> (16 * (e % 2))))); }\n";
        if (!raw) pack();
        return;
      } else {
        o << "    { const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const unsigned "
             "char*>("
          << p << ") + " << off << "); const unsigned w[2] = {u.x, u.y}; "
          << "_Pragma(\"unroll\") for (int e = 0; e < 8; ++e) " << n << "[e] = " << rnd
          << "(((w[e / 4] >> (8 * (e % 4))) & 0xffu) != 0u ? 1.0f : 0.0f); }\n";
      }
      return;
    }
    o << "    _Pragma(\"unroll\") for (int e = 0; e < 8; ++e) " << n << "[e] = " << rnd << "(ld_"
      << sx << "(" << p << ", " << off << " + " << ix() << "(e) * " << lit(inner) << "));\n";
    pack();
  }

  void emit_chunk_store(size_t si) {
    const Store& st = s.stores[si];
    const std::string v = id("v", st.step);
    const std::string p = id("a.out[", st.slot) + "]";
    const std::string off = id("w", si);
    offset(st.geo, "s0", off);
    const char* sx = suffix(st.dtype);
    if (vec_ok(st.geo, st.dtype, s.store_align.at(si))) {
      const int ds = dsize(st.dtype);
      if (ds == 4) {
        o << "    { float4* q = reinterpret_cast<float4*>(static_cast<float*>(" << p << ") + "
          << off << "); q[0] = make_float4(" << v << "[0], " << v << "[1], " << v << "[2], " << v
          << "[3]); q[1] = make_float4(" << v << "[4], " << v << "[5], " << v << "[6], " << v
          << "[7]); }\n";
      } else if (ds == 2 && st.dtype == DType::kBFloat16 && step_pairs(st.step)) {
        const std::string pv = id("pv", st.step);
        o << "    *reinterpret_cast<uint4*>(static_cast<unsigned short*>(" << p << ") + " << off
          << ") = make_uint4(" << pv << "[0], " << pv << "[1], " << pv << "[2], " << pv
          << "[3]);\n";
      } else if (ds == 2) {
        const std::string to = std::string("to_") + sx;
        o << "    { unsigned w[4]; for (int k = 0; k < 4; ++k) w[k] = static_cast<unsigned>(" << to
          << "(" << v << "[2 * k])) | (static_cast<unsigned>(" << to << "(" << v
          << "[2 * k + 1])) << 16); *reinterpret_cast<uint4*>(static_cast<unsigned short*>(" << p
          << ") + " << off << ") = make_uint4(w[0], w[1], w[2], w[3]); }\n";
      } else {
        o << "    { unsigned w[2] = {0u, 0u}; _Pragma(\"unroll\") for (int e = 0; e < 8; ++e) w[e "
             "/ 4] |= ("
          << v << "[e] != 0.0f ? 1u : 0u) << (8 * (e % 4)); "
          << "*reinterpret_cast<uint2*>(static_cast<unsigned char*>(" << p << ") + " << off
          << ") = make_uint2(w[0], w[1]); }\n";
      }
      return;
    }
    o << "    _Pragma(\"unroll\") for (int e = 0; e < 8; ++e) st_" << sx << "(" << p << ", " << off
      << " + " << ix() << "(e) * " << lit(st.geo.stride.back()) << ", " << v << "[e]);\n";
  }

  void emit_chunked() {
    const int64_t nchunk = s.numel / kChunk;
    o << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") " << kEntry
      << "(PwKernelArgs a) {\n  typedef " << ix_type() << " ix_t;\n";
    o << "  for (" << ix() << " c = " << ix() << "(blockIdx.x) * " << lit(kThreads) << " + " << ix()
      << "(threadIdx.x); c < " << lit(nchunk) << "; c += " << ix() << "(gridDim.x) * "
      << lit(kThreads) << ") {\n";
    o << "    const " << ix() << " s0 = c * " << lit(kChunk) << ";\n";
    emit_chunk_body();
    o << "  }\n}\n";
  }

  // The loads, steps and stores of the chunk at iteration index s0.
  void emit_chunk_body() {
    for (size_t li = 0; li < s.loads.size(); ++li) emit_chunk_load(li);
    for (size_t k = 0; k < s.steps.size(); ++k) {
      const Step& st = s.steps[k];
      const std::string v = id("v", k), pv = id("pv", k);
      if (!step_pairs(k)) {
        o << "    float " << v << "[8];\n    _Pragma(\"unroll\") for (int e = 0; e < 8; ++e) " << v
          << "[e] = " << step_expr(st, "[e]") << ";\n";
        continue;
      }
      // A bfloat16 step: its pairs by one fma.rn.bf16x2 each, or its float32 values rounded in
      // pairs; then the values widened from the pairs (unused ones the compiler drops).
      const std::string px = pair_expr(st);
      o << "    unsigned " << pv << "[4];\n    float " << v << "[8];\n";
      o << "    _Pragma(\"unroll\") for (int j = 0; j < 4; ++j) {\n";
      if (!px.empty())
        o << "      " << pv << "[j] = " << px << ";\n";
      else
        o << "      " << pv << "[j] = pk_bf16(" << raw_expr(st, "[2 * j]") << ", "
          << raw_expr(st, "[2 * j + 1]") << ");\n";
      o << "      " << v << "[2 * j] = lo_bf16(" << pv << "[j]); " << v << "[2 * j + 1] = hi_bf16("
        << pv << "[j]);\n    }\n";
    }
    for (size_t si = 0; si < s.stores.size(); ++si) emit_chunk_store(si);
  }

  // The column-sum form (codegen.hpp, `generate`): the chunk body of emit_chunked at the
  // iteration index of (row, column chunk), then each sum's values added to its accumulators.
  void emit_colsum() {
    const int64_t C = s.sum_cols, R = s.numel / C, CC = C / kChunk;
    const size_t ns = s.sums.size();
    const int threads = kSumLanes * kSumRows;
    o << "extern \"C\" __global__ void __launch_bounds__(" << threads;
    if (s.sum_min_blocks > 0) o << ", " << s.sum_min_blocks;
    o << ") " << kEntry << "(PwKernelArgs a) {\n  typedef " << ix_type() << " ix_t;\n";
    o << "  __shared__ float red[" << ns * kChunk * threads << "];\n";
    o << "  const unsigned tx = threadIdx.x % " << kSumLanes << "u, ty = threadIdx.x / "
      << kSumLanes << "u;\n";
    o << "  const " << ix() << " cc = " << ix() << "(blockIdx.x) * " << lit(kSumLanes) << " + "
      << ix() << "(tx);\n";
    o << "  const bool valid = cc < " << lit(CC) << ";\n";
    o << "  const " << ix() << " rpb = (" << lit(R) << " + " << ix() << "(gridDim.y) - 1) / "
      << ix() << "(gridDim.y);\n";
    o << "  const " << ix() << " r0 = " << ix() << "(blockIdx.y) * rpb;\n";
    o << "  const " << ix() << " r1 = r0 + rpb < " << lit(R) << " ? r0 + rpb : " << lit(R) << ";\n";
    // accumulator e of sum k: acc<k>[e], or red[(k * 8 + e) * threads + threadIdx.x]
    auto acc = [&](size_t k, const char* e) {
      if (!s.sum_acc_smem) return id("acc", k) + "[" + e + "]";
      return "red[(" + std::to_string(k) + " * 8 + " + e + ") * " + std::to_string(threads) +
             " + threadIdx.x]";
    };
    for (size_t k = 0; k < ns; ++k) {
      if (s.sum_acc_smem)
        o << "  _Pragma(\"unroll\") for (int e = 0; e < 8; ++e) " << acc(k, "e") << " = 0.0f;\n";
      else
        o << "  float acc" << k << "[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};\n";
    }
    o << "  if (valid) for (" << ix() << " r = r0 + " << ix()
      << "(ty); r < r1; r += " << lit(kSumRows) << ") {\n";
    o << "    const " << ix() << " s0 = r * " << lit(C) << " + cc * " << lit(kChunk) << ";\n";
    emit_chunk_body();
    for (size_t k = 0; k < ns; ++k)
      o << "    _Pragma(\"unroll\") for (int e = 0; e < 8; ++e) " << acc(k, "e") << " = __fadd_rn("
        << acc(k, "e") << ", v" << s.sums[k].step << "[e]);\n";
    o << "  }\n";
    // red[(k * 8 + e) * threads + ty * 32 + tx]
    if (!s.sum_acc_smem)
      for (size_t k = 0; k < ns; ++k)
        o << "  _Pragma(\"unroll\") for (int e = 0; e < 8; ++e) red[(" << k << " * 8 + e) * "
          << threads << " + threadIdx.x] = acc" << k << "[e];\n";
    o << "  __syncthreads();\n";
    o << "  for (unsigned h = " << kSumRows / 2 << "u; h > 0u; h /= 2u) {\n";
    o << "    if (ty < h) { _Pragma(\"unroll\") for (int i = 0; i < " << ns * kChunk
      << "; ++i) red[i * " << threads << " + threadIdx.x] = __fadd_rn(red[i * " << threads
      << " + threadIdx.x], red[i * " << threads << " + threadIdx.x + h * " << kSumLanes
      << "u]); }\n";
    o << "    __syncthreads();\n  }\n";
    o << "  if (ty == 0u && valid) {\n";
    for (size_t k = 0; k < ns; ++k) {
      o << "    { float* q = static_cast<float*>(a.out[" << s.sums[k].slot << "]) + " << ix()
        << "(blockIdx.y) * " << lit(C) << " + cc * " << lit(kChunk) << ";\n";
      o << "      _Pragma(\"unroll\") for (int e = 0; e < 8; ++e) q[e] = red[(" << k
        << " * 8 + e) * " << threads << " + tx]; }\n";
    }
    o << "  }\n}\n";
  }

  void emit_elementwise() {
    o << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") " << kEntry
      << "(PwKernelArgs a) {\n  typedef " << ix_type() << " ix_t;\n";
    o << "  for (" << ix() << " s = " << ix() << "(blockIdx.x) * " << lit(kThreads) << " + " << ix()
      << "(threadIdx.x); s < " << lit(s.numel) << "; s += " << ix() << "(gridDim.x) * "
      << lit(kThreads) << ") {\n";
    for (size_t li = 0; li < s.loads.size(); ++li) {
      const Load& l = s.loads[li];
      const std::string off = id("o", li);
      offset(l.geo, "s", off);
      const std::string ld =
          std::string("ld_") + suffix(l.dtype) + "(" + id("a.in[", l.slot) + "], " + off + ")";
      o << "    const float l" << li << " = "
        << (l.round ? std::string("rd_") + suffix(l.round_to) + "(" + ld + ")" : ld) << ";\n";
    }
    for (size_t k = 0; k < s.steps.size(); ++k)
      o << "    const float v" << k << " = " << step_expr(s.steps[k], "") << ";\n";
    for (size_t si = 0; si < s.stores.size(); ++si) {
      const Store& st = s.stores[si];
      const std::string off = id("w", si);
      offset(st.geo, "s", off);
      o << "    st_" << suffix(st.dtype) << "(a.out[" << st.slot << "], " << off << ", v" << st.step
        << ");\n";
    }
    o << "  }\n}\n";
  }
};

// Largest offset a geometry reaches (elements).
int64_t span(const Geometry& g) {
  int64_t m = 0;
  for (size_t k = 0; k < g.size.size(); ++k) m += (g.size[k] - 1) * g.stride[k];
  return m;
}

void check(const KernelSpec& s) {
  auto bad = [](const std::string& w) { throw std::invalid_argument("pointwise codegen: " + w); };
  if (s.numel <= 0) bad("no elements");
  if (s.load_align.size() != s.loads.size() || s.store_align.size() != s.stores.size())
    bad("an alignment per load and store");
  auto geo_ok = [&](const Geometry& g) {
    if (g.size.empty() || g.size.size() != g.stride.size()) return false;
    int64_t n = 1;
    for (size_t k = 0; k < g.size.size(); ++k) {
      if (g.size[k] <= 0 || g.stride[k] < 0) return false;
      n *= g.size[k];
    }
    return n == s.numel;
  };
  for (const Load& l : s.loads) {
    suffix(l.dtype);
    if (l.round) suffix(l.round_to);
    if (l.slot < 0 || l.slot >= 16 || !geo_ok(l.geo)) bad("a load's slot or geometry");
  }
  for (size_t k = 0; k < s.steps.size(); ++k) {
    const Step& st = s.steps[k];
    suffix(st.dtype);
    fn_name(st.fn);
    if (st.args.empty() || st.args.size() > 3) bad("a step takes 1 to 3 operands");
    for (const Arg& a : st.args) {
      if (a.kind == Arg::kLoad && (a.index < 0 || a.index >= static_cast<int>(s.loads.size())))
        bad("an operand names no load");
      if (a.kind == Arg::kStep && (a.index < 0 || a.index >= static_cast<int>(k)))
        bad("an operand names a later step");
    }
  }
  for (const Store& st : s.stores) {
    suffix(st.dtype);
    if (st.slot < 0 || st.slot >= 16 || st.step < 0 ||
        st.step >= static_cast<int>(s.steps.size()) || !geo_ok(st.geo))
      bad("a store's slot, step or geometry");
  }
  if (s.sums.empty()) return;
  if (s.sums.size() > 4) bad("at most 4 column sums");
  if (s.sum_cols <= 0 || s.sum_cols % kChunk != 0 || s.numel % s.sum_cols != 0)
    bad("column sums need sum_cols a multiple of 8 that divides numel");
  if (!chunked(s)) bad("column sums need the chunked form (every innermost run a multiple of 8)");
  for (const ColSum& c : s.sums) {
    if (c.step < 0 || c.step >= static_cast<int>(s.steps.size())) bad("a column sum names no step");
    if (c.slot < 0 || c.slot >= 16) bad("a column sum's slot");
  }
}

}  // namespace

Geometry visit_geometry(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride,
                        const std::vector<int64_t>& order_shape,
                        const std::vector<int64_t>& order_stride) {
  const size_t r = order_shape.size();
  if (shape.size() > r || stride.size() != shape.size() || order_stride.size() != r)
    throw std::invalid_argument("visit_geometry: ranks");
  // the tensor's strides broadcast to the order's shape (right-aligned; size 1 -> stride 0)
  std::vector<int64_t> st(r, 0);
  const size_t lead = r - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && shape[d] != order_shape[lead + d])
      throw std::invalid_argument("visit_geometry: shape does not broadcast");
    st[lead + d] = shape[d] == 1 ? 0 : stride[d];
  }
  // dims in the storage order of the dense layout: decreasing stride, size-1 dims dropped
  std::vector<size_t> dims;
  for (size_t d = 0; d < r; ++d)
    if (order_shape[d] != 1) dims.push_back(d);
  std::stable_sort(dims.begin(), dims.end(),
                   [&](size_t a, size_t b) { return order_stride[a] > order_stride[b]; });
  Geometry g;
  for (size_t d : dims) {
    if (!g.size.empty()) {  // merge into the previous (outer) dim when the offsets continue
      const size_t k = g.size.size() - 1;
      if (g.stride[k] == st[d] * order_shape[d]) {
        g.size[k] *= order_shape[d];
        g.stride[k] = st[d];
        continue;
      }
    }
    g.size.push_back(order_shape[d]);
    g.stride.push_back(st[d]);
  }
  if (g.size.empty()) {  // one element
    g.size.push_back(1);
    g.stride.push_back(0);
  }
  return g;
}

bool chunked(const KernelSpec& s) {
  if (s.numel % kChunk != 0) return false;
  for (const Load& l : s.loads)
    if (l.geo.size.back() % kChunk != 0) return false;
  for (const Store& st : s.stores)
    if (st.geo.size.back() % kChunk != 0) return false;
  return true;
}

std::string generate(const KernelSpec& spec) {
  check(spec);
  Emitter em{spec, false, {}};
  int64_t reach = spec.numel;
  for (const Load& l : spec.loads) reach = std::max(reach, span(l.geo) + kChunk);
  for (const Store& st : spec.stores) reach = std::max(reach, span(st.geo) + kChunk);
  em.i32 = reach < (int64_t(1) << 31) - int64_t(kThreads) * 65536 * kChunk;
  em.o << "// generated by impls/fusions/pointwise/codegen.cpp: " << spec.steps.size()
       << " ops over " << spec.numel << " elements\n";
  em.o << kPwMathSource << kAccessors;
  if (!spec.sums.empty())
    em.emit_colsum();
  else if (chunked(spec))
    em.emit_chunked();
  else
    em.emit_elementwise();
  return em.o.str();
}

}  // namespace replay::pointwise
