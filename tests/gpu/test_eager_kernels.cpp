// The eager executor's kernels (impls/eager/kernels.cu) against a host float64 computation, on
// shapes and layouts that reach each path: pointwise vec (1-D with a tail, [R, C] with [R, 1] and
// [C] broadcasts, typed and run-time dtypes) and nd (misaligned pointers, transposes, padded
// rows, middle-dim broadcasts, 64-bit offsets); reductions inner (rows of 1..10^6 elements,
// misaligned and odd rows, split rows), outer (column reductions, few and many columns, split,
// two reduced dims) and generic; every PointwiseFn and ReduceFn; NaN propagation and index ties
// for amax / amin / max.dim; bit-identical results of the vec and nd paths; determinism; that
// outputs' padding is never written; and that the comparison itself catches a wrong result.
// The EagerKernelsBench tests print GB/s (cold L2) of the hot cases.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "eager_fn_table.hpp"
#include "gpu_test_util.hpp"
#include "harness/measure/timing.hpp"
#include "impls/cuda/cuda_check.hpp"
#include "impls/eager/kernels.hpp"
#include "workloads/ir/dtype.hpp"

using namespace replay;
using replay::test::Dom;
using replay::test::fn_table;
using replay::test::FnInfo;

namespace {

// ------------------------------------------------------------------------------------------------
// Host tensors on the device: any strides, a storage offset, storage poisoned with 0xFF bytes.

enum class Lay {
  kContig,      // row-major
  kOffset1,     // row-major, storage offset one element (misaligned for vectors)
  kTransposed,  // column-major (strides of the reversed dims)
  kPadOdd,      // rows (last dim) padded by 1 element: odd row stride
  kPad8,        // rows padded by 8 elements: aligned row stride
};

struct Layout {
  std::vector<int64_t> shape, stride;
  int64_t offset = 0;
};

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Layout make_layout(const std::vector<int64_t>& shape, Lay lay) {
  Layout l;
  l.shape = shape;
  const int n = static_cast<int>(shape.size());
  l.stride.assign(n, 1);
  if (lay == Lay::kTransposed) {
    int64_t s = 1;
    for (int d = 0; d < n; ++d) {
      l.stride[d] = s;
      s *= std::max<int64_t>(shape[d], 1);
    }
    return l;
  }
  int64_t s = 1;
  for (int d = n - 1; d >= 0; --d) {
    l.stride[d] = s;
    int64_t extent = std::max<int64_t>(shape[d], 1);
    if (d == n - 1 && lay == Lay::kPadOdd) extent += 1;
    if (d == n - 1 && lay == Lay::kPad8) extent += 8;
    s *= extent;
  }
  if (lay == Lay::kOffset1) l.offset = 1;
  return l;
}

int64_t storage_elems(const Layout& l) {
  if (numel_of(l.shape) == 0) return l.offset + 1;
  int64_t span = 1;
  for (size_t d = 0; d < l.shape.size(); ++d) span += (l.shape[d] - 1) * l.stride[d];
  return l.offset + span;
}

// Calls fn(linear index, storage offset) for every element, row-major.
void for_each(const Layout& l, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t n = numel_of(l.shape);
  const int nd = static_cast<int>(l.shape.size());
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = l.offset;
    for (int d = 0; d < nd; ++d) off += idx[d] * l.stride[d];
    fn(i, off);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[d] < l.shape[d]) break;
      idx[d] = 0;
    }
  }
}

struct DevTensor {
  DType dtype = DType::kFloat32;
  Layout lay;
  DeviceBuffer buf;
  size_t bytes = 0;

  DeviceTensor view() const {
    DeviceTensor t;
    t.ptr = static_cast<char*>(buf.get()) + lay.offset * static_cast<int64_t>(dtype_size(dtype));
    t.dtype = dtype;
    t.ndim = static_cast<int>(lay.shape.size());
    for (int d = 0; d < t.ndim; ++d) {
      t.shape[d] = lay.shape[d];
      t.stride[d] = lay.stride[d];
    }
    return t;
  }
};

// A device tensor with `vals` (row-major logical values) in layout `lay`; the rest of its storage
// holds 0xFF bytes (NaN for floats), so that reading a wrong element shows.
DevTensor upload(DType dt, const Layout& lay, const std::vector<double>& vals) {
  DevTensor t;
  t.dtype = dt;
  t.lay = lay;
  const size_t es = dtype_size(dt);
  t.bytes = static_cast<size_t>(storage_elems(lay)) * es;
  t.buf = DeviceBuffer(std::max<size_t>(t.bytes, 16));
  std::vector<uint8_t> host(t.bytes, 0xFF);
  for_each(lay, [&](int64_t i, int64_t off) { store_as(dt, vals.at(i), &host[off * es]); });
  REPLAY_CUDA(cudaMemcpy(t.buf.get(), host.data(), t.bytes, cudaMemcpyHostToDevice));
  return t;
}

// An output: storage all 0xFF.
DevTensor make_output(DType dt, const Layout& lay) {
  DevTensor t;
  t.dtype = dt;
  t.lay = lay;
  t.bytes = static_cast<size_t>(storage_elems(lay)) * dtype_size(dt);
  t.buf = DeviceBuffer(std::max<size_t>(t.bytes, 16));
  REPLAY_CUDA(cudaMemset(t.buf.get(), 0xFF, std::max<size_t>(t.bytes, 16)));
  return t;
}

struct Downloaded {
  std::vector<double> vals;       // logical, row-major
  std::vector<uint64_t> bits;     // the raw bits of each logical element
  bool padding_untouched = true;  // every storage byte that is not a logical element is 0xFF
};

Downloaded download(const DevTensor& t) {
  REPLAY_CUDA(cudaDeviceSynchronize());
  const size_t es = dtype_size(t.dtype);
  std::vector<uint8_t> host(t.bytes);
  if (t.bytes) REPLAY_CUDA(cudaMemcpy(host.data(), t.buf.get(), t.bytes, cudaMemcpyDeviceToHost));
  Downloaded d;
  const int64_t n = numel_of(t.lay.shape);
  d.vals.resize(n);
  d.bits.resize(n);
  std::vector<bool> logical(t.bytes / std::max<size_t>(es, 1), false);
  for_each(t.lay, [&](int64_t i, int64_t off) {
    d.vals[i] = load_as(t.dtype, &host[off * es]);
    uint64_t b = 0;
    std::memcpy(&b, &host[off * es], es);
    d.bits[i] = b;
    logical[off] = true;
  });
  for (size_t e = 0; e < logical.size(); ++e)
    if (!logical[e])
      for (size_t k = 0; k < es; ++k)
        if (host[e * es + k] != 0xFF) d.padding_untouched = false;
  return d;
}

// ------------------------------------------------------------------------------------------------
// Values

std::vector<double> gen(Dom dom, DType dt, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> nd(0.3, 1.0);
  std::vector<double> v(n);
  const bool integral = !is_floating(dt);
  for (int64_t i = 0; i < n; ++i) {
    double x = 0;
    switch (dom) {
      case Dom::kAny:
        x = -4 + 8 * u(rng);
        break;
      case Dom::kPos:
        x = 0.125 + 3.875 * u(rng);
        break;
      case Dom::kNonZero:
        x = (u(rng) < 0.5 ? -1 : 1) * (0.5 + 3.5 * u(rng));
        break;
      case Dom::kLog1p:
        x = -0.9 + 4.9 * u(rng);
        break;
      case Dom::kHalfTwo:
        x = 0.5 + 1.5 * u(rng);
        break;
      case Dom::kInt:
        x = std::floor(-8 + 17 * u(rng));
        break;
      case Dom::kSmallInt:
        x = std::floor(4 * u(rng));
        break;
      case Dom::kProb:
        x = u(rng);
        break;
      case Dom::kNormal:
        x = nd(rng);
        break;
      case Dom::kProd: {  // about 16 twos and 16 halves in all: exact, no overflow
        const double r = u(rng), p = std::min(0.002, 16.0 / static_cast<double>(n));
        x = r < p ? 2.0 : r < 2 * p ? 0.5 : (r < 0.5 ? -1.0 : 1.0);
        break;
      }
    }
    if (integral && dom != Dom::kSmallInt && dom != Dom::kProd) x = std::floor(x);
    if (integral && dom == Dom::kProd) x = x == 0.5 ? 1 : x;
    if (dt == DType::kBool) x = std::fmod(std::fabs(x), 2.0) >= 1 ? 1 : 0;
    v[i] = round_to(dt, x);
  }
  return v;
}

// ------------------------------------------------------------------------------------------------
// Comparison

// g matches r: both NaN, equal, or within |r| * rel + abs.
bool close(double g, double r, double rel, double abs) {
  if (std::isnan(r) || std::isnan(g)) return std::isnan(r) && std::isnan(g);
  if (std::isinf(r) || std::isinf(g)) return g == r;
  return std::fabs(g - r) <= std::fabs(r) * rel + abs;
}

// Units of the output dtype: relative precision and the smallest subnormal step.
double out_rel(DType t) {
  return is_floating(t) ? std::ldexp(1.0, -mantissa_bits(t)) : 0;
}
double out_abs(DType t) {
  return is_floating(t) ? std::ldexp(1.0, min_normal_exponent(t) - mantissa_bits(t)) : 0;
}

// The first mismatches of gpu against ref, or "" when every element is close.
std::string mismatches(const std::vector<double>& gpu, const std::vector<double>& ref, double rel,
                       double abs, const std::vector<double>* abs_each = nullptr) {
  if (gpu.size() != ref.size())
    return "size " + std::to_string(gpu.size()) + " vs " + std::to_string(ref.size());
  std::ostringstream os;
  int bad = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double a = abs + (abs_each ? (*abs_each)[i] : 0);
    if (!close(gpu[i], ref[i], rel, a)) {
      if (bad < 5) os << " [" << i << "] gpu " << gpu[i] << " ref " << ref[i] << ";";
      ++bad;
    }
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(gpu.size()) + " differ:" + os.str();
}

const char* red_name(ReduceFn f);

// ------------------------------------------------------------------------------------------------
// Pointwise: host reference

// Pw<F>::f of kernels.cu in double (the compute dtype's rounding is applied by the caller).
double ref_fn(PointwiseFn f, double x, double y, double z, double alpha, int64_t index,
              bool integral) {
  using P = PointwiseFn;
  auto nan = [](double v) { return std::isnan(v); };
  switch (f) {
    case P::kCopy:
    case P::kFill:
      return x;
    case P::kRsqrt:
      return 1 / std::sqrt(x);
    case P::kSqrt:
      return std::sqrt(x);
    case P::kNeg:
      return -x;
    case P::kAbs:
      return x < 0 ? -x : x;
    case P::kExp:
      return std::exp(x);
    case P::kLog:
      return std::log(x);
    case P::kLog1p:
      return std::log1p(x);
    case P::kExpm1:
      return std::expm1(x);
    case P::kReciprocal:
      return 1 / x;
    case P::kTanh:
      return std::tanh(x);
    case P::kSigmoid:
      return 1 / (1 + std::exp(-x));
    case P::kErf:
      return std::erf(x);
    case P::kSin:
      return std::sin(x);
    case P::kCos:
      return std::cos(x);
    case P::kSign:
      return nan(x) ? x : double((0 < x) - (x < 0));
    case P::kRelu:
      return nan(x) ? x : (x > 0 ? x : 0);
    case P::kLog2:
      return std::log2(x);
    case P::kExp2:
      return std::exp2(x);
    case P::kFloor:
      return std::floor(x);
    case P::kCeil:
      return std::ceil(x);
    case P::kTrunc:
      return std::trunc(x);
    case P::kRound:
      return std::nearbyint(x);
    case P::kPow:
      return y == 2 ? x * x : std::pow(x, y);
    case P::kAdd:
      return x + alpha * y;
    case P::kSub:
      return x - alpha * y;
    case P::kRsub:
      return y - alpha * x;
    case P::kMul:
      return x * y;
    case P::kDiv:
      return x / y;
    case P::kDivTrunc:
      return std::trunc(x / y);
    case P::kDivFloor:
      return std::floor(x / y);
    case P::kMaximum:
      return nan(x) || nan(y) ? (nan(x) ? x : y) : (x > y ? x : y);
    case P::kMinimum:
      return nan(x) || nan(y) ? (nan(x) ? x : y) : (x < y ? x : y);
    case P::kEq:
      return x == y;
    case P::kNe:
      return x != y;
    case P::kLt:
      return x < y;
    case P::kLe:
      return x <= y;
    case P::kGt:
      return x > y;
    case P::kGe:
      return x >= y;
    case P::kLogicalNot:
      return x == 0;
    case P::kLogicalAnd:
      return x != 0 && y != 0;
    case P::kLogicalOr:
      return x != 0 || y != 0;
    case P::kLogicalXor:
      return (x != 0) != (y != 0);
    case P::kWhere:
      return x != 0 ? y : z;
    case P::kClamp: {
      if (nan(x) || nan(y) || nan(z)) return nan(x) ? x : (nan(y) ? y : z);
      const double lo = x < y ? y : x;
      return lo > z ? z : lo;
    }
    case P::kIota:
      return integral ? double(int64_t(x) + int64_t(y) * index) : x + y * double(index);
    case P::kDropout:
      return y < z ? x * alpha : 0;
    case P::kCount:
      break;
  }
  return NAN;
}

// The float computation the kernel does, where the double result alone would not do: a float
// quotient before trunc / floor.
double ref_compute(PointwiseFn f, double x, double y, double z, double alpha, int64_t index,
                   DType compute) {
  const bool integral = !is_floating(compute);
  if (compute != DType::kFloat64 && !integral) {
    if (f == PointwiseFn::kDivTrunc) return std::trunc(double(float(x / y)));
    if (f == PointwiseFn::kDivFloor) return std::floor(double(float(x / y)));
    if (f == PointwiseFn::kIota) return double(float(x) + float(y) * float(index));
  }
  double r = ref_fn(f, x, y, z, alpha, index, integral);
  if (integral) return r;
  return compute == DType::kFloat64 ? r : double(float(r));
}

struct PwOperandSpec {
  bool tensor = true;
  std::vector<int64_t> shape;  // broadcasts to the output
  DType dtype = DType::kFloat32;
  Lay lay = Lay::kContig;
  Dom dom = Dom::kAny;
  double scalar = 0;
};

struct PwSpec {
  PointwiseFn fn = PointwiseFn::kCopy;
  std::vector<PwOperandSpec> ops;
  std::vector<int64_t> out_shape;
  DType out_dtype = DType::kFloat32;
  Lay out_lay = Lay::kContig;
  DType compute = DType::kFloat32;
  double alpha = 1;
  bool transcendental = false;
};

struct PwRun {
  Downloaded out;
  std::vector<double> ref;
  double rel = 0, abs = 0;
  // Per element: a few units of the compute type times the operands' magnitudes (x + alpha * y
  // may be one fused multiply-add on the device and two roundings on the host).
  std::vector<double> abs_each;
};

// Value of operand values `v` (row-major over `shape`) at output index i (broadcast).
double bcast_at(const std::vector<double>& v, const std::vector<int64_t>& shape,
                const std::vector<int64_t>& out_shape, int64_t i) {
  const int no = static_cast<int>(out_shape.size()), nt = static_cast<int>(shape.size());
  int64_t rem = i, off = 0, stride = 1;
  for (int d = no - 1; d >= 0; --d) {
    const int64_t c = rem % out_shape[d];
    rem /= out_shape[d];
    const int j = d - (no - nt);
    if (j >= 0) {
      if (shape[j] != 1) off += c * stride;
      stride *= shape[j];
    }
  }
  return v.at(off);
}

PwRun run_pw(const PwSpec& s, uint64_t seed) {
  std::vector<std::vector<double>> vals;
  std::vector<DevTensor> dev;
  std::vector<PwOperand> ops;
  dev.reserve(s.ops.size());
  for (size_t k = 0; k < s.ops.size(); ++k) {
    const PwOperandSpec& o = s.ops[k];
    if (!o.tensor) {
      vals.push_back({});
      ops.push_back({{}, false, o.scalar});
      continue;
    }
    vals.push_back(gen(o.dom, o.dtype, numel_of(o.shape), seed * 7 + k));
    dev.push_back(upload(o.dtype, make_layout(o.shape, o.lay), vals.back()));
    ops.push_back({dev.back().view(), true, 0});
  }
  DevTensor out = make_output(s.out_dtype, make_layout(s.out_shape, s.out_lay));
  if (s.fn == PointwiseFn::kCopy && s.ops.size() == 1 && s.ops[0].tensor)
    launch_copy(out.view(), ops[0].t, nullptr);
  else
    launch_pointwise(s.fn, out.view(), ops, s.alpha, s.compute, nullptr);
  REPLAY_CUDA(cudaGetLastError());
  PwRun r;
  r.out = download(out);
  const int64_t n = numel_of(s.out_shape);
  r.ref.resize(n);
  // Numbers (alpha, scalar operands) as the kernel sees them: converted to the compute type.
  const bool integral = !is_floating(s.compute), f32 = !integral && s.compute != DType::kFloat64;
  auto as_compute = [&](double v) { return integral ? std::trunc(v) : f32 ? double(float(v)) : v; };
  const double alpha = as_compute(s.alpha);
  for (int64_t i = 0; i < n; ++i) {
    double x[3] = {0, 0, 0};
    for (size_t k = 0; k < s.ops.size(); ++k) {
      const PwOperandSpec& o = s.ops[k];
      x[k] = o.tensor ? bcast_at(vals[k], o.shape, s.out_shape, i) : as_compute(o.scalar);
      if (integral) x[k] = std::trunc(x[k]);
    }
    r.ref[i] = round_to(s.out_dtype, ref_compute(s.fn, x[0], x[1], x[2], alpha, i, s.compute));
    const double mag = std::fabs(x[0]) + std::fabs(alpha * x[1]) + std::fabs(x[2]);
    r.abs_each.push_back(is_floating(s.out_dtype) && std::isfinite(mag)
                             ? mag * (s.compute == DType::kFloat64 ? 0x1p-51 : 0x1p-22)
                             : 0);
  }
  const bool f64 = s.compute == DType::kFloat64;
  r.rel = 2 * out_rel(s.out_dtype) +
          (s.transcendental ? (f64 ? 0x1p-48 : 0x1p-20) : (f64 ? 0x1p-51 : 0x1p-22));
  r.abs = out_abs(s.out_dtype) + (s.transcendental ? (f64 ? 1e-14 : 1e-6) : 0);
  if (!is_floating(s.out_dtype)) r.rel = r.abs = 0;
  return r;
}

// A pointwise case: fn over operands of `in` dtype (the second `in2` if set), output `out`.
struct DtypeConfig {
  const char* name;
  DType in, in2, out, compute;
};

// Operands of fn with tensor shapes given per operand (scalars where the function takes them).
std::vector<PwOperandSpec> make_operands(const FnInfo& f, const DtypeConfig& c,
                                         const std::vector<std::vector<int64_t>>& shapes,
                                         const std::vector<Lay>& lays) {
  std::vector<PwOperandSpec> ops;
  const bool integral = !is_floating(c.compute);
  if (f.fn == PointwiseFn::kFill) return {{false, {}, c.in, Lay::kContig, Dom::kAny, 2.5}};
  if (f.fn == PointwiseFn::kIota)
    return {{false, {}, c.in, Lay::kContig, Dom::kAny, integral ? 3.0 : 0.5},
            {false, {}, c.in, Lay::kContig, Dom::kAny, integral ? 2.0 : 0.25}};
  for (int k = 0; k < f.tensors; ++k) {
    PwOperandSpec o;
    o.shape = shapes[std::min<size_t>(k, shapes.size() - 1)];
    o.dtype = (k == 1 && c.in2 != DType::kCount) ? c.in2 : c.in;
    o.lay = lays[std::min<size_t>(k, lays.size() - 1)];
    o.dom = f.dom[k];
    if (integral && (o.dom == Dom::kAny || o.dom == Dom::kNonZero)) o.dom = Dom::kInt;
    ops.push_back(o);
  }
  if (f.fn == PointwiseFn::kDropout) ops.push_back({false, {}, c.in, Lay::kContig, Dom::kAny, 0.7});
  return ops;
}

std::vector<DtypeConfig> configs_for(const FnInfo& f) {
  using D = DType;
  constexpr D none = D::kCount;
  const bool cmp = f.fn >= PointwiseFn::kEq && f.fn <= PointwiseFn::kGe;
  const bool logical = f.fn >= PointwiseFn::kLogicalNot && f.fn <= PointwiseFn::kLogicalXor;
  std::vector<DtypeConfig> c;
  if (cmp || logical) {
    c.push_back({"f32_bool", D::kFloat32, none, D::kBool, D::kFloat32});
    c.push_back({"bf16_bool", D::kBFloat16, none, D::kBool, D::kBFloat16});
    c.push_back({"f64_bool", D::kFloat64, none, D::kBool, D::kFloat64});
    c.push_back({"i64_bool", D::kInt64, none, D::kBool, D::kInt64});
    if (logical) c.push_back({"bool_bool", D::kBool, none, D::kBool, D::kBool});
    return c;
  }
  c.push_back({"f32", D::kFloat32, none, D::kFloat32, D::kFloat32});
  c.push_back({"bf16", D::kBFloat16, none, D::kBFloat16, D::kBFloat16});
  c.push_back({"f16", D::kFloat16, none, D::kFloat16, D::kFloat16});
  c.push_back({"f64", D::kFloat64, none, D::kFloat64, D::kFloat64});
  if (f.has_int) c.push_back({"i64", D::kInt64, none, D::kInt64, D::kInt64});
  if (f.tensors >= 2)
    c.push_back({"f32_bf16", D::kFloat32, D::kBFloat16, D::kFloat32, D::kFloat32});
  if (f.fn == PointwiseFn::kWhere)
    c.push_back({"boolcond_f32", D::kBool, D::kFloat32, D::kFloat32, D::kFloat32});
  if (f.fn == PointwiseFn::kCopy) {  // casts (launch_copy picks the compute dtype itself)
    c.push_back({"bf16_to_f32", D::kBFloat16, none, D::kFloat32, D::kFloat32});
    c.push_back({"f32_to_bf16", D::kFloat32, none, D::kBFloat16, D::kFloat32});
    c.push_back({"f16_to_f32", D::kFloat16, none, D::kFloat32, D::kFloat32});
    c.push_back({"f32_to_f16", D::kFloat32, none, D::kFloat16, D::kFloat32});
    c.push_back({"f32_to_e4m3", D::kFloat32, none, D::kFloat8E4M3, D::kFloat32});
    c.push_back({"bf16_to_e4m3", D::kBFloat16, none, D::kFloat8E4M3, D::kFloat32});
    c.push_back({"f32_to_e5m2", D::kFloat32, none, D::kFloat8E5M2, D::kFloat32});
    c.push_back({"e4m3_to_f32", D::kFloat8E4M3, none, D::kFloat32, D::kFloat32});
    c.push_back({"f64_to_bf16", D::kFloat64, none, D::kBFloat16, D::kFloat64});
    c.push_back({"i64_to_f32", D::kInt64, none, D::kFloat32, D::kFloat64});
    c.push_back({"f32_to_i64", D::kFloat32, none, D::kInt64, D::kFloat64});
    c.push_back({"bool_to_f32", D::kBool, none, D::kFloat32, D::kFloat32});
    c.push_back({"f32_to_bool", D::kFloat32, none, D::kBool, D::kFloat32});
    c.push_back({"i32_to_i64", D::kInt32, none, D::kInt64, D::kInt64});
    c.push_back({"e5m2_to_bf16", D::kFloat8E5M2, none, D::kBFloat16, D::kFloat32});
  }
  return c;
}

// Geometry of a pointwise case: output shape and layout, per-operand shapes and layouts.
struct Geo {
  const char* name;
  std::vector<int64_t> out;
  Lay out_lay;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<Lay> lays;
};

std::vector<Geo> geometries(bool big) {
  return {
      // vec 1-D, 8-element vectors and a 3-element tail
      {"1d_tail", {big ? 1000003 : 4099}, Lay::kContig, {{big ? 1000003 : 4099}}, {Lay::kContig}},
      {"3", {3}, Lay::kContig, {{3}}, {Lay::kContig}},
      {"1", {1}, Lay::kContig, {{1}}, {Lay::kContig}},
      {"0dim", {}, Lay::kContig, {{}}, {Lay::kContig}},
      // vec 2-D: [R, C] op [R, 1] op [C]
      {"bcast_rows_cols", {37, 1600}, Lay::kContig, {{37, 1600}, {37, 1}, {1600}}, {Lay::kContig}},
      {"bcast_cols_rows", {37, 1600}, Lay::kContig, {{1600}, {37, 1600}, {37, 1}}, {Lay::kContig}},
      // vec 2-D with padded (aligned) rows in every tensor
      {"pad8_rows", {21, 64}, Lay::kPad8, {{21, 64}, {21, 64}, {21, 64}}, {Lay::kPad8}},
      // a scalar-shaped tensor broadcast everywhere
      {"bcast_scalar_tensor", {5, 40}, Lay::kContig, {{5, 40}, {1}, {1, 1}}, {Lay::kContig}},
      // nd: misaligned pointers (offset by one element)
      {"misaligned", {37, 1600}, Lay::kOffset1, {{37, 1600}, {37, 1}, {1600}}, {Lay::kOffset1}},
      // nd: odd row stride in the output, transposed operands
      {"transposed", {33, 65}, Lay::kPadOdd, {{33, 65}, {33, 65}, {33, 65}}, {Lay::kTransposed}},
      // nd: 3-D with a middle-dim broadcast
      {"middle_bcast", {4, 6, 40}, Lay::kContig, {{4, 6, 40}, {6, 1}, {4, 1, 40}}, {Lay::kContig}},
      // nd: C % 8 != 0
      {"odd_cols", {9, 13}, Lay::kContig, {{9, 13}, {9, 1}, {13}}, {Lay::kContig}},
      // 0-size: nothing written
      {"empty", {0, 5}, Lay::kContig, {{0, 5}, {0, 1}, {5}}, {Lay::kContig}},
  };
}

class EagerPointwise : public ::testing::TestWithParam<size_t> {};

TEST_P(EagerPointwise, MatchesHostReferenceOnEveryPath) {
  REQUIRE_GPU();
  const FnInfo& f = fn_table().at(GetParam());
  uint64_t seed = 100 + GetParam() * 1000;
  for (const DtypeConfig& c : configs_for(f)) {
    const bool big = c.in == DType::kFloat32 || c.in == DType::kBFloat16;
    for (const Geo& g : geometries(big)) {
      PwSpec s;
      s.fn = f.fn;
      s.out_shape = g.out;
      s.out_lay = g.out_lay;
      s.out_dtype = c.out;
      s.compute = c.compute;
      s.alpha = f.fn == PointwiseFn::kDropout ? 1 / 0.7 : 1;
      s.transcendental = f.transcendental;
      s.ops = make_operands(f, c, g.shapes, g.lays);
      std::vector<double> alphas = {s.alpha};
      if (f.fn == PointwiseFn::kAdd || f.fn == PointwiseFn::kSub || f.fn == PointwiseFn::kRsub)
        alphas.push_back(2.5);
      for (double alpha : alphas) {
        s.alpha = alpha;
        const PwRun r = run_pw(s, ++seed);
        const std::string what =
            std::string(f.name) + " " + c.name + " " + g.name + " alpha " + std::to_string(alpha);
        EXPECT_EQ(mismatches(r.out.vals, r.ref, r.rel, r.abs, &r.abs_each), "") << what;
        EXPECT_TRUE(r.out.padding_untouched) << what << ": wrote outside the output's elements";
      }
    }
  }
}

// The vec path (aligned, contiguous) and the nd path (misaligned operands, odd output row
// stride) give the same bits for the same values: both widen with load_elem, compute Pw<F>::f in
// the same opmath and round with store_elem.
TEST_P(EagerPointwise, VecAndNdPathsAreBitIdentical) {
  REQUIRE_GPU();
  const FnInfo& f = fn_table().at(GetParam());
  for (const DtypeConfig& c : configs_for(f)) {
    for (bool bcast : {false, true}) {
      PwSpec a;
      a.fn = f.fn;
      a.out_shape = {48, 1600};
      a.out_dtype = c.out;
      a.compute = c.compute;
      a.alpha = f.fn == PointwiseFn::kDropout ? 1 / 0.7 : 0.75;
      const std::vector<std::vector<int64_t>> shapes =
          bcast ? std::vector<std::vector<int64_t>>{{48, 1600}, {48, 1}, {1600}}
                : std::vector<std::vector<int64_t>>{{48, 1600}};
      a.ops = make_operands(f, c, shapes, {Lay::kContig});
      PwSpec b = a;
      b.out_lay = Lay::kPadOdd;
      for (auto& o : b.ops) o.lay = Lay::kOffset1;
      const PwRun ra = run_pw(a, 77), rb = run_pw(b, 77);
      ASSERT_EQ(ra.out.bits.size(), rb.out.bits.size());
      int diff = 0;
      for (size_t i = 0; i < ra.out.bits.size(); ++i) diff += ra.out.bits[i] != rb.out.bits[i];
      EXPECT_EQ(diff, 0) << f.name << " " << c.name << (bcast ? " broadcast" : "")
                         << ": vec and nd paths differ in " << diff << " elements";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFunctions, EagerPointwise,
                         ::testing::Range<size_t>(0, static_cast<size_t>(PointwiseFn::kCount)),
                         [](const auto& info) { return std::string(fn_table()[info.param].name); });

// Offsets beyond 32 bits: a bool operand with a 2^31-element row stride takes the 64-bit nd path.
TEST(EagerPointwiseLarge, SixtyFourBitOffsets) {
  REQUIRE_GPU();
  size_t free_b = 0, total_b = 0;
  REPLAY_CUDA(cudaMemGetInfo(&free_b, &total_b));
  if (free_b < (size_t(5) << 30)) GTEST_SKIP() << "needs 5 GiB of free device memory";
  Layout l;
  l.shape = {2, 3};
  l.stride = {int64_t(1) << 31, 1};
  const std::vector<double> v = {1, 0, 1, 0, 0, 1};
  DevTensor in = upload(DType::kBool, l, v);
  DevTensor out = make_output(DType::kFloat32, make_layout({2, 3}, Lay::kContig));
  launch_copy(out.view(), in.view(), nullptr);
  const Downloaded d = download(out);
  EXPECT_EQ(d.vals, v);
}

// Same-dtype copies that transpose take the tiled kernel (transpose_copy in kernels.cu): every
// element width, 4-byte words and single elements (aligned and odd strides), partial tiles, a
// batch dim; bit-exact against the source's
// elements and against the pointwise kernel's copy of the same tensor, nothing written outside
// the output's elements. The check has teeth: the source read without its transpose differs.
TEST(EagerTransposeCopy, BitExactOnEveryWidthAndLayout) {
  REQUIRE_GPU();
  struct Case {
    DType dt;
    std::vector<int64_t> shape;
    Lay src;
  };
  const std::vector<Case> cases = {
      {DType::kFloat8E4M3, {4096, 4096}, Lay::kTransposed},  // a float8 weight's .t().contiguous()
      {DType::kFloat8E5M2, {33, 70}, Lay::kTransposed},      // odd strides: element accesses
      {DType::kFloat8E4M3, {36, 200}, Lay::kTransposed},     // 4-byte words, partial tiles
      {DType::kFloat8E4M3, {12, 68, 72}, Lay::kTransposed},  // words and a batch dim
      {DType::kBFloat16, {64, 96}, Lay::kTransposed},        // words of two elements
      {DType::kBFloat16, {65, 31}, Lay::kTransposed},
      {DType::kBFloat16, {9, 40, 65}, Lay::kTransposed},     // a batch dim between the two
      {DType::kFloat32, {1, 37, 1, 129}, Lay::kTransposed},  // size-1 dims dropped
      {DType::kInt64, {70, 33}, Lay::kTransposed},
  };
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    const int64_t n = numel_of(c.shape);
    std::vector<double> v(n);
    std::uniform_real_distribution<double> u(-3, 3);
    for (auto& x : v) x = c.dt == DType::kInt64 ? std::round(u(rng) * 1000) : u(rng);
    DevTensor in = upload(c.dt, make_layout(c.shape, c.src), v);
    const Downloaded want = download(in);
    DevTensor fast = make_output(c.dt, make_layout(c.shape, Lay::kContig));
    EXPECT_TRUE(copy_takes_tiles(fast.view(), in.view()));  // else the pointwise kernel twice
    launch_copy(fast.view(), in.view(), nullptr);
    REPLAY_CUDA(cudaGetLastError());
    DevTensor generic = make_output(c.dt, make_layout(c.shape, Lay::kContig));
    const PwOperand op{in.view(), true, 0};
    launch_pointwise(PointwiseFn::kCopy, generic.view(), {op}, 1,
                     c.dt == DType::kInt64 ? DType::kInt64 : DType::kFloat32, nullptr);
    const Downloaded got = download(fast), gen = download(generic);
    std::ostringstream what;
    what << dtype_name(c.dt) << " [";
    for (int64_t d : c.shape) what << d << ",";
    what << "]";
    EXPECT_EQ(got.bits, want.bits) << what.str();
    EXPECT_EQ(got.bits, gen.bits) << what.str() << ": differs from the pointwise copy";
    EXPECT_TRUE(got.padding_untouched) << what.str();
    // Teeth: the same storage read as if it were row-major is another tensor.
    if (c.shape.size() >= 2 && c.shape[0] > 1) {
      DevTensor wrong = make_output(c.dt, make_layout(c.shape, Lay::kContig));
      DeviceTensor as_rows = in.view();
      const Layout rows = make_layout(c.shape, Lay::kContig);
      for (int d = 0; d < as_rows.ndim; ++d) as_rows.stride[d] = rows.stride[d];
      launch_copy(wrong.view(), as_rows, nullptr);
      EXPECT_NE(download(wrong).bits, want.bits) << what.str();
    }
  }
}

TEST(EagerPointwiseErrors, NoIntegerFormThrows) {
  REQUIRE_GPU();
  DevTensor out = make_output(DType::kInt64, make_layout({4}, Lay::kContig));
  DevTensor in = upload(DType::kInt64, make_layout({4}, Lay::kContig), {1, 2, 3, 4});
  EXPECT_THROW(launch_pointwise(PointwiseFn::kExp, out.view(), {{in.view(), true, 0}}, 1,
                                DType::kInt64, nullptr),
               std::invalid_argument);
  EXPECT_THROW(
      launch_pointwise(
          PointwiseFn::kAdd, out.view(),
          {{in.view(), true, 0}, {in.view(), true, 0}, {in.view(), true, 0}, {in.view(), true, 0}},
          1, DType::kInt64, nullptr),
      std::invalid_argument);
}

// ------------------------------------------------------------------------------------------------
// Reductions: host reference

struct RedSpec {
  ReduceFn op = ReduceFn::kSum;
  std::vector<int64_t> shape;
  Lay lay = Lay::kContig;
  std::vector<int64_t> dims;
  bool keepdim = false;
  DType in = DType::kFloat32, out0 = DType::kFloat32, out1 = DType::kFloat32;
  Lay out_lay = Lay::kContig;
  double correction = 0;
  Dom dom = Dom::kNormal;
  // Elements (row-major input index) set to NaN.
  std::vector<int64_t> nans;
};

struct RedRun {
  Downloaded out0, out1;
  std::vector<double> ref0, ref1;
  std::vector<double> abs0;  // per-output absolute tolerance of out0 (accumulated rounding)
  double rel0 = 0, rel1 = 0, abs1 = 0;
  std::vector<double> input;
};

bool has_out1(ReduceFn op) {
  return op == ReduceFn::kVarMean || op == ReduceFn::kMaxDim;
}

std::vector<int64_t> out_shape(const RedSpec& s) {
  std::vector<int64_t> o;
  for (size_t d = 0; d < s.shape.size(); ++d) {
    const bool red = std::find(s.dims.begin(), s.dims.end(), int64_t(d)) != s.dims.end();
    if (red && s.keepdim) o.push_back(1);
    if (!red) o.push_back(s.shape[d]);
  }
  return o;
}

// Reference: per output (row-major over the kept dims), the reduced elements in row-major order.
void reference(const RedSpec& s, const std::vector<double>& x, RedRun& r) {
  const int nd = static_cast<int>(s.shape.size());
  std::vector<int> kept, red;
  for (int d = 0; d < nd; ++d)
    (std::find(s.dims.begin(), s.dims.end(), int64_t(d)) != s.dims.end() ? red : kept).push_back(d);
  std::vector<int64_t> cstride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) cstride[d] = cstride[d + 1] * s.shape[d + 1];
  int64_t nout = 1, nred = 1;
  for (int d : kept) nout *= s.shape[d];
  for (int d : red) nred *= s.shape[d];
  const bool wide = s.in == DType::kFloat64 || !is_floating(s.in) || s.out0 == DType::kFloat64;
  const double u = wide ? 0x1p-53 : 0x1p-24;
  r.ref0.assign(nout, 0);
  r.ref1.assign(has_out1(s.op) ? nout : 0, 0);
  r.abs0.assign(nout, 0);
  std::vector<double> vals(nred);
  for (int64_t o = 0; o < nout; ++o) {
    int64_t base = 0, rem = o;
    for (int k = static_cast<int>(kept.size()) - 1; k >= 0; --k) {
      base += (rem % s.shape[kept[k]]) * cstride[kept[k]];
      rem /= s.shape[kept[k]];
    }
    // Compensated (Neumaier) sums: the reference's own rounding stays near one unit, far below
    // the kernels' tolerance.
    double sum = 0, comp = 0, sabs = 0, prod = 1, mn = INFINITY;
    bool mn_nan = false;
    for (int64_t q = 0; q < nred; ++q) {
      int64_t off = base, rr = q;
      for (int k = static_cast<int>(red.size()) - 1; k >= 0; --k) {
        off += (rr % s.shape[red[k]]) * cstride[red[k]];
        rr /= s.shape[red[k]];
      }
      const double v = x[off];
      vals[q] = v;
      const double t = sum + v;
      comp += std::fabs(sum) >= std::fabs(v) ? (sum - t) + v : (v - t) + sum;
      sum = t;
      sabs += std::fabs(v);
      prod *= v;
      if (!mn_nan) {
        if (std::isnan(v)) {
          mn_nan = true;
          mn = v;
        } else if (v < mn) {
          mn = v;
        }
      }
    }
    // max and its first index; the first NaN wins
    double mx = -INFINITY;
    int64_t arg = 0;
    bool seen = false;
    for (int64_t q = 0; q < nred; ++q) {
      const double v = vals[q];
      if (std::isnan(v)) {
        mx = v;
        arg = q;
        break;
      }
      if (!seen || v > mx) {
        mx = v;
        arg = q;
        seen = true;
      }
    }
    sum += comp;
    const double n = static_cast<double>(nred);
    const double mean = sum / n;
    double m2 = 0, m2c = 0;
    for (int64_t q = 0; q < nred; ++q) {
      const double d2 = (vals[q] - mean) * (vals[q] - mean), t = m2 + d2;
      m2c += m2 >= d2 ? (m2 - t) + d2 : (d2 - t) + m2;
      m2 = t;
    }
    m2 += m2c;
    const double denom = std::max(n - s.correction, 0.0);
    double v0 = 0, v1 = 0;
    switch (s.op) {
      case ReduceFn::kSum:
        v0 = sum;
        r.abs0[o] = 32 * u * sabs;
        break;
      case ReduceFn::kMean:
        v0 = mean;
        r.abs0[o] = 32 * u * sabs / std::max(n, 1.0);
        break;
      case ReduceFn::kAmax:
        v0 = mx;
        break;
      case ReduceFn::kAmin:
        v0 = mn;
        break;
      case ReduceFn::kProd:
        v0 = prod;
        break;
      case ReduceFn::kVar:
      case ReduceFn::kVarMean:
        v0 = m2 / denom;
        v1 = mean;
        r.abs0[o] = 64 * u * (m2 + sabs * sabs / std::max(n, 1.0)) / std::max(denom, 1.0);
        break;
      case ReduceFn::kMaxDim:
        v0 = mx;
        v1 = static_cast<double>(arg);
        break;
      case ReduceFn::kCount:
        break;
    }
    r.ref0[o] = round_to(s.out0, v0);
    if (has_out1(s.op)) r.ref1[o] = round_to(s.out1, v1);
    if (s.op == ReduceFn::kVarMean) r.abs1 = std::max(r.abs1, 32 * u * sabs / std::max(n, 1.0));
  }
  r.rel0 = 2 * out_rel(s.out0) + (wide ? 0x1p-50 : 0x1p-21);
  r.rel1 = s.op == ReduceFn::kMaxDim ? 0 : 2 * out_rel(s.out1) + (wide ? 0x1p-50 : 0x1p-21);
  for (double& a : r.abs0) a += out_abs(s.out0);
  if (s.op == ReduceFn::kVarMean) r.abs1 += out_abs(s.out1);
}

RedRun run_red(const RedSpec& s, uint64_t seed) {
  RedRun r;
  r.input = gen(s.dom, s.in, numel_of(s.shape), seed);
  for (int64_t i : s.nans) r.input.at(i) = NAN;
  DevTensor in = upload(s.in, make_layout(s.shape, s.lay), r.input);
  const std::vector<int64_t> os = out_shape(s);
  DevTensor o0 = make_output(s.out0, make_layout(os, s.out_lay));
  DevTensor o1 = make_output(has_out1(s.op) ? s.out1 : DType::kFloat32, make_layout(os, s.out_lay));
  const DeviceTensor v1 = o1.view();
  launch_reduction(s.op, in.view(), s.dims, o0.view(), has_out1(s.op) ? &v1 : nullptr, s.correction,
                   nullptr);
  REPLAY_CUDA(cudaGetLastError());
  r.out0 = download(o0);
  if (has_out1(s.op)) r.out1 = download(o1);
  reference(s, r.input, r);
  return r;
}

std::string describe(const RedSpec& s) {
  std::ostringstream os;
  os << red_name(s.op) << " " << dtype_name(s.in) << "->" << dtype_name(s.out0) << " shape [";
  for (size_t i = 0; i < s.shape.size(); ++i) os << (i ? "," : "") << s.shape[i];
  os << "] dims [";
  for (size_t i = 0; i < s.dims.size(); ++i) os << (i ? "," : "") << s.dims[i];
  os << "] lay " << static_cast<int>(s.lay) << " keepdim " << s.keepdim << " out_lay "
     << static_cast<int>(s.out_lay) << " corr " << s.correction;
  return os.str();
}

void expect_red(const RedSpec& s, uint64_t seed) {
  const RedRun r = run_red(s, seed);
  const std::string what = describe(s);
  EXPECT_EQ(mismatches(r.out0.vals, r.ref0, r.rel0, 0, &r.abs0), "") << what << " (out0)";
  EXPECT_TRUE(r.out0.padding_untouched) << what << ": wrote outside out0's elements";
  if (has_out1(s.op)) {
    EXPECT_EQ(mismatches(r.out1.vals, r.ref1, r.rel1, r.abs1), "") << what << " (out1)";
    EXPECT_TRUE(r.out1.padding_untouched) << what << ": wrote outside out1's elements";
  }
}

const char* red_name(ReduceFn f) {
  switch (f) {
    case ReduceFn::kSum:
      return "sum";
    case ReduceFn::kMean:
      return "mean";
    case ReduceFn::kAmax:
      return "amax";
    case ReduceFn::kAmin:
      return "amin";
    case ReduceFn::kProd:
      return "prod";
    case ReduceFn::kVar:
      return "var";
    case ReduceFn::kVarMean:
      return "var_mean";
    case ReduceFn::kMaxDim:
      return "max_dim";
    default:
      return "?";
  }
}

// Reduction geometries: every path, with the sizes the brief asks for.
struct RedGeo {
  const char* name;
  std::vector<int64_t> shape;
  std::vector<int64_t> dims;
  Lay lay = Lay::kContig;
  Lay out_lay = Lay::kContig;
  bool big = false;  // only for the cheaper dtype/op combinations
};

std::vector<RedGeo> red_geometries() {
  return {
      {"rows_7", {5, 7}, {1}},
      {"rows_1600", {64, 1600}, {1}},
      {"rows_4096", {8, 4096}, {1}},
      {"rows_100000_split", {4, 100000}, {1}},
      {"row_1000003_split", {1, 1000003}, {1}},
      {"all_1000003", {1000003}, {0}},
      {"rows_misaligned", {33, 1600}, {1}, Lay::kOffset1},
      {"rows_odd_1001", {7, 1001}, {1}},
      {"rows_2", {300, 2}, {1}},
      {"rows_of_1", {3, 1}, {1}},
      {"rows_strided_out", {64, 1600}, {1}, Lay::kContig, Lay::kPadOdd},
      {"rows_padded_in", {20, 1600}, {1}, Lay::kPadOdd},
      {"cols_16384x1600", {16384, 1600}, {0}, Lay::kContig, Lay::kContig, true},
      {"cols_7x5", {7, 5}, {0}},
      {"cols_1000x3", {1000, 3}, {0}},
      {"cols_2x100003", {2, 100003}, {0}},
      {"cols_300x17", {300, 17}, {0}},
      {"cols_4096x40_split", {4096, 40}, {0}},
      {"cols_padded_odd", {2048, 1600}, {0}, Lay::kPadOdd},
      {"cols_misaligned", {999, 64}, {0}, Lay::kOffset1},
      {"dims01", {16, 64, 40}, {0, 1}},
      {"dim1_3d", {16, 64, 40}, {1}},
      {"dims02_generic", {16, 64, 40}, {0, 2}},
      {"dims012_all", {16, 64, 40}, {0, 1, 2}},
      {"dims02_of_4d", {4, 5, 6, 8}, {0, 2}},
      {"dim2_of_4d", {4, 5, 6, 8}, {2}},
      {"transposed", {6, 10, 12}, {1}, Lay::kTransposed},
      {"transposed_last", {60, 70}, {1}, Lay::kTransposed},
  };
}

struct RedDtype {
  DType in, out0, out1;
};

std::vector<RedDtype> red_dtypes(ReduceFn op) {
  using D = DType;
  switch (op) {
    case ReduceFn::kSum:
      return {
          {D::kFloat32, D::kFloat32, D::kFloat32},    {D::kBFloat16, D::kBFloat16, D::kFloat32},
          {D::kFloat16, D::kFloat32, D::kFloat32},    {D::kFloat64, D::kFloat64, D::kFloat64},
          {D::kInt64, D::kInt64, D::kInt64},          {D::kBool, D::kInt64, D::kInt64},
          {D::kInt32, D::kInt64, D::kInt64},          {D::kFloat8E4M3, D::kFloat32, D::kFloat32},
          {D::kFloat8E5M2, D::kFloat32, D::kFloat32}, {D::kBFloat16, D::kFloat64, D::kFloat64}};
    case ReduceFn::kMean:
      return {{D::kFloat32, D::kFloat32, D::kFloat32},
              {D::kBFloat16, D::kBFloat16, D::kFloat32},
              {D::kFloat64, D::kFloat64, D::kFloat64}};
    case ReduceFn::kAmax:
    case ReduceFn::kAmin:
      return {
          {D::kFloat32, D::kFloat32, D::kFloat32}, {D::kBFloat16, D::kBFloat16, D::kFloat32},
          {D::kFloat16, D::kFloat16, D::kFloat32}, {D::kFloat64, D::kFloat64, D::kFloat64},
          {D::kInt64, D::kInt64, D::kInt64},       {D::kFloat8E4M3, D::kFloat8E4M3, D::kFloat32},
          {D::kInt32, D::kInt32, D::kInt32}};
    case ReduceFn::kProd:
      return {{D::kFloat32, D::kFloat32, D::kFloat32},
              {D::kFloat64, D::kFloat64, D::kFloat64},
              {D::kInt64, D::kInt64, D::kInt64}};
    case ReduceFn::kVar:
    case ReduceFn::kVarMean:
      return {{D::kFloat32, D::kFloat32, D::kFloat32},
              {D::kBFloat16, D::kFloat32, D::kFloat32},
              {D::kFloat64, D::kFloat64, D::kFloat64}};
    case ReduceFn::kMaxDim:
      return {{D::kFloat32, D::kFloat32, D::kInt64},
              {D::kBFloat16, D::kBFloat16, D::kInt64},
              {D::kFloat64, D::kFloat64, D::kInt64},
              {D::kInt64, D::kInt64, D::kInt64}};
    default:
      return {};
  }
}

class EagerReduction : public ::testing::TestWithParam<size_t> {};

TEST_P(EagerReduction, MatchesHostReferenceOnEveryPath) {
  REQUIRE_GPU();
  const auto op = static_cast<ReduceFn>(GetParam());
  uint64_t seed = 5000 + GetParam() * 1000;
  for (const RedGeo& g : red_geometries()) {
    if (op == ReduceFn::kMaxDim && g.dims.size() != 1) continue;  // max.dim takes one dim
    const auto dts = red_dtypes(op);
    for (size_t k = 0; k < dts.size(); ++k) {
      if (g.big && k > 1) continue;
      for (bool keepdim : {false, true}) {
        if (g.big && keepdim) continue;
        for (double corr : {0.0, 1.0}) {
          if (corr != 0 && op != ReduceFn::kVar && op != ReduceFn::kVarMean) continue;
          RedSpec s;
          s.op = op;
          s.shape = g.shape;
          s.dims = g.dims;
          s.lay = g.lay;
          s.out_lay = g.out_lay;
          s.keepdim = keepdim;
          s.in = dts[k].in;
          s.out0 = dts[k].out0;
          s.out1 = dts[k].out1;
          s.correction = corr;
          // Integer-valued inputs make sums, extrema and indices exact whatever the order;
          // normal inputs check the accumulated rounding.
          s.dom = op == ReduceFn::kProd                              ? Dom::kProd
                  : op == ReduceFn::kMaxDim || !is_floating(s.in)    ? Dom::kSmallInt
                  : op == ReduceFn::kVar || op == ReduceFn::kVarMean ? Dom::kNormal
                  : keepdim                                          ? Dom::kInt
                                                                     : Dom::kNormal;
          if (s.in == DType::kBool) s.dom = Dom::kSmallInt;
          expect_red(s, ++seed);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFunctions, EagerReduction,
                         ::testing::Range<size_t>(0, static_cast<size_t>(ReduceFn::kCount)),
                         [](const auto& info) {
                           return std::string(red_name(static_cast<ReduceFn>(info.param)));
                         });

TEST(EagerReductionEdges, EmptyReductionAndEmptyOutput) {
  REQUIRE_GPU();
  for (ReduceFn op : {ReduceFn::kSum, ReduceFn::kMean}) {
    RedSpec s;
    s.op = op;
    s.shape = {0, 5};
    s.dims = {0};
    const RedRun r = run_red(s, 1);
    for (double v : r.out0.vals) {
      if (op == ReduceFn::kSum)
        EXPECT_EQ(v, 0) << "sum over an empty dim";
      else
        EXPECT_TRUE(std::isnan(v)) << "mean over an empty dim";
    }
  }
  RedSpec s;
  s.shape = {5, 0};
  s.dims = {0};
  const RedRun r = run_red(s, 2);
  EXPECT_TRUE(r.out0.vals.empty());
  EXPECT_TRUE(r.out0.padding_untouched);
}

// amax / amin / max.dim propagate NaN on every path; max.dim returns the first NaN's index.
TEST(EagerReductionNaN, PropagatesOnEveryPath) {
  REQUIRE_GPU();
  struct C {
    std::vector<int64_t> shape, dims;
    Lay lay;
    std::vector<int64_t> nans;
  };
  const std::vector<C> cases = {
      // inner: first, last, head (misaligned), several in a row, none in the last row
      {{8, 1600},
       {1},
       Lay::kContig,
       {0, 1599 + 1600, 2 * 1600 + 800, 3 * 1600 + 5, 3 * 1600 + 9, 4 * 1600 + 1597}},
      {{8, 1600}, {1}, Lay::kOffset1, {0, 1 + 1600, 2 * 1600 + 3, 5 * 1600 + 1599}},
      // inner split: one NaN deep in a long row, two in another
      {{2, 1000003}, {1}, Lay::kContig, {777777, 1000003 + 900000, 1000003 + 900001}},
      // outer: NaNs in different rows of different columns, split
      {{4096, 40}, {0}, Lay::kContig, {5 * 40 + 3, 4095 * 40 + 7, 2000 * 40 + 7, 100 * 40 + 39}},
      {{1000, 3}, {0}, Lay::kContig, {999 * 3 + 2, 500 * 3}},
      // generic
      {{16, 64, 40}, {0, 2}, Lay::kContig, {3 * 2560 + 10 * 40 + 5}},
  };
  for (const C& c : cases) {
    for (ReduceFn op : {ReduceFn::kAmax, ReduceFn::kAmin, ReduceFn::kMaxDim}) {
      for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
        RedSpec s;
        s.op = op;
        s.shape = c.shape;
        s.dims = c.dims;
        s.lay = c.lay;
        s.in = s.out0 = dt;
        s.out1 = DType::kInt64;
        s.dom = Dom::kSmallInt;
        s.nans = c.nans;
        const RedRun r = run_red(s, 3);
        const std::string what = describe(s);
        EXPECT_EQ(mismatches(r.out0.vals, r.ref0, 0, 0), "") << what;
        int nan_outputs = 0;
        for (double v : r.ref0) nan_outputs += std::isnan(v);
        EXPECT_GT(nan_outputs, 0) << what << ": the case has no NaN output";
        if (op == ReduceFn::kMaxDim) {
          EXPECT_EQ(mismatches(r.out1.vals, r.ref1, 0, 0), "") << what;
        }
      }
    }
  }
}

// max.dim: among equal maxima the first index wins, on every path (values 0..3: many ties).
TEST(EagerReductionTies, MaxDimFirstIndex) {
  REQUIRE_GPU();
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> cases = {
      {{64, 1600}, 1},  {{3, 100000}, 1},  {{1, 1000003}, 1}, {{4096, 40}, 0},
      {{2, 100003}, 0}, {{16, 64, 40}, 1}, {{16, 64, 40}, 0}, {{7, 1001}, 1}};
  for (const auto& [shape, dim] : cases) {
    for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
      RedSpec s;
      s.op = ReduceFn::kMaxDim;
      s.shape = shape;
      s.dims = {dim};
      s.in = s.out0 = dt;
      s.out1 = DType::kInt64;
      s.dom = Dom::kSmallInt;
      const RedRun r = run_red(s, 11);
      EXPECT_EQ(mismatches(r.out1.vals, r.ref1, 0, 0), "") << describe(s) << " (indices)";
      EXPECT_EQ(mismatches(r.out0.vals, r.ref0, 0, 0), "") << describe(s) << " (values)";
    }
  }
}

// Split reductions combine partials in a fixed order: the same input gives the same bits.
TEST(EagerReductionDeterminism, SameBitsTwice) {
  REQUIRE_GPU();
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{16384, 1600}, {0}}, {{1, 1000003}, {1}}, {{16, 1024, 160}, {0, 1}}, {{4, 100000}, {1}}};
  for (const auto& [shape, dims] : cases) {
    for (ReduceFn op : {ReduceFn::kSum, ReduceFn::kVarMean}) {
      RedSpec s;
      s.op = op;
      s.shape = shape;
      s.dims = dims;
      const RedRun a = run_red(s, 21), b = run_red(s, 21);
      EXPECT_EQ(a.out0.bits, b.out0.bits) << describe(s);
      EXPECT_EQ(a.out1.bits, b.out1.bits) << describe(s);
    }
  }
}

// Many one-shot launches back to back on one stream (each with its stream-ordered workspace),
// then on a second stream.
TEST(EagerReductionWorkspace, BackToBackLaunchesOnStreams) {
  REQUIRE_GPU();
  const std::vector<int64_t> shape = {4096, 40};
  std::vector<double> x = gen(Dom::kInt, DType::kFloat32, numel_of(shape), 5);
  DevTensor in = upload(DType::kFloat32, make_layout(shape, Lay::kContig), x);
  RedSpec s;
  s.shape = shape;
  s.dims = {0};
  RedRun ref;
  reference(s, x, ref);
  for (int pass = 0; pass < 2; ++pass) {
    cudaStream_t st = nullptr;
    if (pass == 1) REPLAY_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    std::vector<DevTensor> outs;
    for (int i = 0; i < 50; ++i) {
      outs.push_back(make_output(DType::kFloat32, make_layout({40}, Lay::kContig)));
      launch_reduction(ReduceFn::kSum, in.view(), {0}, outs.back().view(), nullptr, 0, st);
    }
    REPLAY_CUDA(cudaStreamSynchronize(st));
    for (const DevTensor& o : outs) EXPECT_EQ(download(o).vals, ref.ref0) << "pass " << pass;
    if (st) REPLAY_CUDA(cudaStreamDestroy(st));
  }
}

// A prepared split reduction reuses the workspace it owns: its kernels reset their counters, so
// every launch, alternating the legacy and a second stream, then a CUDA graph captured from it,
// writes the bits the one-shot launch writes (outputs poisoned before each run). The shapes take
// the split paths: columns over 4096 rows (outer, split rows), rows of 65536 elements (inner,
// split rows), a two-pass variance with and without splits, and max.dim's indices.
TEST(EagerReductionWorkspace, PreparedSplitLaunchRepeatsOnStreamsAndInAGraph) {
  REQUIRE_GPU();
  struct Case {
    ReduceFn op;
    std::vector<int64_t> shape, dims;
  };
  const Case cases[] = {
      {ReduceFn::kSum, {4096, 40}, {0}},     {ReduceFn::kVar, {4096, 40}, {0}},
      {ReduceFn::kVarMean, {4096, 40}, {0}}, {ReduceFn::kVar, {8, 40}, {0}},
      {ReduceFn::kSum, {4, 65536}, {1}},     {ReduceFn::kVarMean, {4, 65536}, {1}},
      {ReduceFn::kMaxDim, {4, 65536}, {1}}};
  cudaStream_t st = nullptr;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (const Case& c : cases) {
    RedSpec s;
    s.op = c.op;
    s.shape = c.shape;
    s.dims = c.dims;
    s.out1 = c.op == ReduceFn::kMaxDim ? DType::kInt64 : DType::kFloat32;
    const std::string what = describe(s);
    DevTensor in = upload(DType::kFloat32, make_layout(s.shape, Lay::kContig),
                          gen(Dom::kNormal, DType::kFloat32, numel_of(s.shape), 9));
    const Layout ol = make_layout(out_shape(s), Lay::kContig);
    DevTensor w0 = make_output(DType::kFloat32, ol), w1 = make_output(s.out1, ol);
    DevTensor o0 = make_output(DType::kFloat32, ol), o1 = make_output(s.out1, ol);
    const DeviceTensor wv1 = w1.view(), ov1 = o1.view();
    const bool two = has_out1(c.op);
    launch_reduction(c.op, in.view(), c.dims, w0.view(), two ? &wv1 : nullptr, 1, st);
    REPLAY_CUDA(cudaStreamSynchronize(st));
    const Downloaded want0 = download(w0), want1 = download(w1);
    const EagerLaunch launch =
        prepare_reduction(c.op, in.view(), c.dims, o0.view(), two ? &ov1 : nullptr, 1);
    auto check = [&](const std::string& run) {
      REPLAY_CUDA(cudaDeviceSynchronize());
      EXPECT_EQ(download(o0).bits, want0.bits) << what << ": " << run;
      if (two) {
        EXPECT_EQ(download(o1).bits, want1.bits) << what << ": " << run;
      }
    };
    auto poison_outputs = [&] {
      REPLAY_CUDA(cudaMemset(o0.buf.get(), 0xFF, o0.bytes));
      REPLAY_CUDA(cudaMemset(o1.buf.get(), 0xFF, o1.bytes));
    };
    for (int i = 0; i < 20; ++i) {
      poison_outputs();
      launch(i % 2 ? st : nullptr);
      check("launch " + std::to_string(i));
    }
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    REPLAY_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    launch(st);
    REPLAY_CUDA(cudaStreamEndCapture(st, &graph));
    REPLAY_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 5; ++i) {
      poison_outputs();
      REPLAY_CUDA(cudaGraphLaunch(exec, st));
      check("graph launch " + std::to_string(i));
    }
    REPLAY_CUDA(cudaGraphExecDestroy(exec));
    REPLAY_CUDA(cudaGraphDestroy(graph));
  }
  REPLAY_CUDA(cudaStreamDestroy(st));
}

// The comparison has teeth: a result shifted by one row (an off-by-one in the row index) fails
// against the reference, on the inner and the outer path.
TEST(EagerReductionTeeth, ShiftedRowsFail) {
  REQUIRE_GPU();
  for (const auto& [shape, dim] :
       std::vector<std::pair<std::vector<int64_t>, int64_t>>{{{64, 1600}, 1}, {{1600, 64}, 0}}) {
    RedSpec s;
    s.shape = shape;
    s.dims = {dim};
    const RedRun r = run_red(s, 31);
    ASSERT_EQ(mismatches(r.out0.vals, r.ref0, r.rel0, 0, &r.abs0), "");
    std::vector<double> shifted(r.ref0.size());
    for (size_t i = 0; i < shifted.size(); ++i) shifted[i] = r.ref0[(i + 1) % shifted.size()];
    EXPECT_NE(mismatches(r.out0.vals, shifted, r.rel0, 0, &r.abs0), "")
        << "a row-shifted reference passed the comparison";
    // and a single wrong element
    std::vector<double> one = r.ref0;
    one[one.size() / 2] += 1;
    EXPECT_NE(mismatches(r.out0.vals, one, r.rel0, 0, &r.abs0), "");
  }
  // the pointwise comparison: a broadcast along the wrong dim fails
  PwSpec p;
  p.fn = PointwiseFn::kMul;
  p.out_shape = {37, 1600};
  p.ops = {{true, {37, 1600}, DType::kFloat32}, {true, {37, 1}, DType::kFloat32}};
  const PwRun r = run_pw(p, 3);
  ASSERT_EQ(mismatches(r.out.vals, r.ref, r.rel, r.abs), "");
  std::vector<double> shifted(r.ref.begin() + 1600, r.ref.end());
  shifted.insert(shifted.end(), r.ref.begin(), r.ref.begin() + 1600);
  EXPECT_NE(mismatches(r.out.vals, shifted, r.rel, r.abs), "");
}

// ------------------------------------------------------------------------------------------------
// Benchmarks: GB/s of the hot cases, L2 flushed by reading before each sample (the harness's
// cold_samples). Bytes: each input read once, each output written once.

void bench(const std::string& name, double bytes, const std::function<void(cudaStream_t)>& fn) {
  cudaStream_t s = nullptr;
  L2Flush l2;
  for (int i = 0; i < 3; ++i) fn(s);
  std::vector<double> us = cold_samples(fn, s, l2, 30);
  std::sort(us.begin(), us.end());
  const double med = us[us.size() / 2];
  std::printf("[ bench    ] %-44s %9.1f us  %7.1f GB/s  (%.1f MB)\n", name.c_str(), med,
              bytes / med * 1e-3, bytes * 1e-6);
  ::testing::Test::RecordProperty(name + "_us", std::to_string(med));
}

TEST(EagerKernelsBench, HotCases) {
  REQUIRE_GPU();
  const int64_t R = 16384, C = 1600;
  auto buf = [](DType dt, std::vector<int64_t> shape) {
    DevTensor t;
    t.dtype = dt;
    t.lay = make_layout(shape, Lay::kContig);
    t.bytes = static_cast<size_t>(numel_of(shape)) * dtype_size(dt);
    t.buf = DeviceBuffer(t.bytes);
    REPLAY_CUDA(cudaMemset(t.buf.get(), 0, t.bytes));  // zeros: finite in every dtype
    return t;
  };
  const double n = double(R) * C;
  {
    DevTensor a = buf(DType::kBFloat16, {R, C}), b = buf(DType::kBFloat16, {R, C}),
              o = buf(DType::kBFloat16, {R, C});
    bench("add bf16 [16384,1600]", 3 * n * 2, [&](cudaStream_t s) {
      launch_pointwise(PointwiseFn::kAdd, o.view(), {{a.view(), true, 0}, {b.view(), true, 0}}, 1,
                       DType::kBFloat16, s);
    });
  }
  {
    DevTensor a = buf(DType::kFloat32, {R, C}), b = buf(DType::kFloat32, {R, 1}),
              o = buf(DType::kFloat32, {R, C});
    bench("mul f32 [16384,1600] x [16384,1]", 2 * n * 4 + R * 4, [&](cudaStream_t s) {
      launch_pointwise(PointwiseFn::kMul, o.view(), {{a.view(), true, 0}, {b.view(), true, 0}}, 1,
                       DType::kFloat32, s);
    });
    DevTensor w = buf(DType::kBFloat16, {C});
    bench("mul f32 [16384,1600] x bf16 [1600]", 2 * n * 4 + C * 2, [&](cudaStream_t s) {
      launch_pointwise(PointwiseFn::kMul, o.view(), {{a.view(), true, 0}, {w.view(), true, 0}}, 1,
                       DType::kFloat32, s);
    });
    DevTensor h = buf(DType::kBFloat16, {R, C});
    bench("convert f32->bf16 [16384,1600]", n * 6,
          [&](cudaStream_t s) { launch_copy(h.view(), a.view(), s); });
    bench("convert bf16->f32 [16384,1600]", n * 6,
          [&](cudaStream_t s) { launch_copy(o.view(), h.view(), s); });
  }
  {
    DevTensor x = buf(DType::kBFloat16, {R, C}), v = buf(DType::kFloat32, {R, 1}),
              m = buf(DType::kFloat32, {R, 1});
    const DeviceTensor mv = m.view();
    // Reductions prepared once, as the eager executor lowers them (a split reduction's workspace
    // allocated then, not per launch as the one-shot launch_reduction does).
    const EagerLaunch vm16 = prepare_reduction(ReduceFn::kVarMean, x.view(), {1}, v.view(), &mv, 0);
    bench("var_mean bf16->f32 over dim 1 [16384,1600]", n * 2 + R * 8, vm16);
    DevTensor xf = buf(DType::kFloat32, {R, C});
    bench("var_mean f32 over dim 1 [16384,1600]", n * 4 + R * 8,
          prepare_reduction(ReduceFn::kVarMean, xf.view(), {1}, v.view(), &mv, 0));
  }
  {
    DevTensor x = buf(DType::kFloat32, {R, C}), o = buf(DType::kFloat32, {C});
    bench("sum f32 over dim 0 [16384,1600]", n * 4 + C * 4,
          prepare_reduction(ReduceFn::kSum, x.view(), {0}, o.view(), nullptr, 0));
    DevTensor x3 = buf(DType::kFloat32, {16, 1024, C});
    bench("sum f32 over dims [0,1] [16,1024,1600]", n * 4 + C * 4,
          prepare_reduction(ReduceFn::kSum, x3.view(), {0, 1}, o.view(), nullptr, 0));
    DevTensor r = buf(DType::kFloat32, {R, 1});
    bench("sum f32 over dim 1 [16384,1600]", n * 4 + R * 4,
          prepare_reduction(ReduceFn::kSum, x.view(), {1}, r.view(), nullptr, 0));
  }
  // Bias gradients of the linear backwards (sum of a bfloat16 [tokens, N] over the tokens): the
  // outer path's split grid at the bundled shapes (GPT-2 MLP: 8192 x 1024 and 8192 x 4096; BERT:
  // 16384 x 4096).
  for (const std::vector<int64_t>& sh : std::vector<std::vector<int64_t>>{
           {8192, 1024}, {8192, 4096}, {16384, 1024}, {16384, 4096}}) {
    DevTensor x = buf(DType::kBFloat16, sh), o = buf(DType::kBFloat16, {sh[1]});
    bench("sum bf16 over dim 0 [" + std::to_string(sh[0]) + "," + std::to_string(sh[1]) + "]",
          double(sh[0]) * sh[1] * 2 + sh[1] * 2,
          prepare_reduction(ReduceFn::kSum, x.view(), {0}, o.view(), nullptr, 0));
  }
  {
    DevTensor x = buf(DType::kBFloat16, {R, 8192}), o = buf(DType::kBFloat16, {});
    bench("amax bf16 over all [16384,8192]", double(R) * 8192 * 2,
          prepare_reduction(ReduceFn::kAmax, x.view(), {0, 1}, o.view(), nullptr, 0));
  }
  {
    DevTensor a = buf(DType::kFloat32, {R, C}), o = buf(DType::kFloat32, {R, C});
    bench("copy f32 [16384,1600] (launch_copy)", n * 8,
          [&](cudaStream_t s) { launch_copy(o.view(), a.view(), s); });
    bench("cudaMemcpyAsync f32 [16384,1600]", n * 8, [&](cudaStream_t s) {
      REPLAY_CUDA(cudaMemcpyAsync(o.buf.get(), a.buf.get(), a.bytes, cudaMemcpyDeviceToDevice, s));
    });
  }
}

// Host enqueue cost per launch (the brief: at most ~5 us per op).
TEST(EagerKernelsBench, HostEnqueueCost) {
  REQUIRE_GPU();
  DevTensor a = make_output(DType::kFloat32, make_layout({64, 1600}, Lay::kContig));
  DevTensor b = make_output(DType::kFloat32, make_layout({64, 1}, Lay::kContig));
  DevTensor o = make_output(DType::kFloat32, make_layout({64, 1600}, Lay::kContig));
  DevTensor c = make_output(DType::kFloat32, make_layout({1600}, Lay::kContig));
  cudaStream_t s = nullptr;
  const std::vector<PwOperand> ops = {{a.view(), true, 0}, {b.view(), true, 0}};
  auto time_it = [&](const char* name, const std::function<void()>& fn) {
    for (int i = 0; i < 100; ++i) fn();
    REPLAY_CUDA(cudaDeviceSynchronize());
    const int n = 2000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) fn();
    const auto t1 = std::chrono::steady_clock::now();
    REPLAY_CUDA(cudaDeviceSynchronize());
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
    std::printf("[ bench    ] host enqueue %-30s %6.2f us\n", name, us);
  };
  time_it("launch_pointwise mul",
          [&] { launch_pointwise(PointwiseFn::kMul, o.view(), ops, 1, DType::kFloat32, s); });
  // Reductions as the eager executor enqueues them: prepared once.
  const EagerLaunch sum0 = prepare_reduction(ReduceFn::kSum, a.view(), {0}, c.view(), nullptr, 0);
  const EagerLaunch sum1 = prepare_reduction(ReduceFn::kSum, a.view(), {1}, b.view(), nullptr, 0);
  time_it("prepared sum dim 0 (split)", [&] { sum0(s); });
  time_it("prepared sum dim 1", [&] { sum1(s); });
}

}  // namespace
