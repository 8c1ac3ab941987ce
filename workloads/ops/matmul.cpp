// Matmuls: one row each (see op.hpp). aten.mm, addmm, bmm, baddbmm on float32, float64, bfloat16
// and float16 (every operand of one dtype, as ATen requires; the output has it too), and
// aten._scaled_mm on float8 operands with float32 tensorwise or rowwise scales.
//
// The reference multiplies in float64 with Eigen's GEMM (row-major double matrices), threaded
// through OpenMP when the build has it (Eigen::setNbThreads(hardware_concurrency) once): a
// [8192, 4096] x [4096, 14336] product (0.96 TFLOP) took 11 s on the 16 cores of an H100 host
// (86 GFLOP/s) when the build targeted baseline x86-64; built for x86-64-v3 (AVX2 + FMA, the
// default where the build machine has it, CMakeLists.txt) Eigen's GEMM is ~3x faster (measured on
// 2 cores: 25 -> 75 GFLOP/s). Operands are the dtype-rounded values
// (RefArgs), so the only error of the reference is float64's.
// The eager lowering is cuBLASLt (impls/eager/gemm.hpp).
#include "workloads/ops/matmul.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>

#include "workloads/ops/eigen_ref.hpp"

namespace replay {
namespace {

using MatRM = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Eigen's GEMM uses the threads the other reference loops use (host_threads(); a no-op without
// OpenMP); set once per process.
void use_all_threads() {
  static std::once_flag once;
  std::call_once(once, [] { Eigen::setNbThreads(host_threads()); });
}

// --- parsers -----------------------------------------------------------------------------------

// An optional tensor argument (Tensor? in the schema): Operand{.none = true} when absent or null.
Operand opt_tensor(ArgReader& a, size_t i, const char* kw) {
  if (!a.present(i, kw)) return Operand{.none = true};
  return Operand{.value = a.tensor(i, kw)};
}

// mm(self, mat2) / bmm(self, mat2)
void parse_mm(ArgReader& a, const Graph&, Node& n) {
  n.operands = {{a.tensor(0, "self")}, {a.tensor(1, "mat2")}};
}

// addmm(self, mat1, mat2, *, beta=1, alpha=1) / baddbmm(self, batch1, batch2, *, beta=1,
// alpha=1). beta and alpha are keyword-only in ATen; accepted by position too.
void parse_addmm(ArgReader& a, const Graph&, Node& n) {
  const bool batched = n.op == Op::kBaddbmm;
  n.operands = {{a.tensor(0, "self")},
                {a.tensor(1, batched ? "batch1" : "mat1")},
                {a.tensor(2, batched ? "batch2" : "mat2")}};
  n.beta = a.opt_scalar(3, "beta").value_or(1.0);
  n.alpha = a.opt_scalar(4, "alpha").value_or(1.0);
}

// _scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
// use_fast_accum=False). Operands: self, mat2, scale_a, scale_b, bias, scale_result (the last two
// possibly None); n.dtype = out_dtype (default: self's dtype); n.flag = use_fast_accum.
void parse_scaled_mm(ArgReader& a, const Graph& g, Node& n) {
  n.operands = {{a.tensor(0, "self")},    {a.tensor(1, "mat2")},
                {a.tensor(2, "scale_a")}, {a.tensor(3, "scale_b")},
                opt_tensor(a, 4, "bias"), opt_tensor(a, 5, "scale_result")};
  if (!n.operands[5].none)
    a.fail(
        "_scaled_mm with a scale_result is not supported (only scale_result=None: a float8 "
        "output scale is not replayed)");
  const DType self_dt = g.meta(n.operands[0].value).dtype;
  n.dtype = a.present(6, "out_dtype") ? a.dtype(6, "out_dtype") : self_dt;
  n.flag = a.boolean(7, "use_fast_accum", false);
  if (self_dt == DType::kFloat8E5M2 && g.meta(n.operands[1].value).dtype == DType::kFloat8E5M2)
    a.fail(
        "_scaled_mm of two float8_e5m2 matrices is not supported (cuBLASLt has no e5m2 x e5m2 "
        "kernel; PyTorch refuses it too)");
}

// --- shape and dtype rules ---------------------------------------------------------------------

const TensorMeta& meta(const Graph& g, const Node& n, size_t i) {
  return g.meta(n.operands[i].value);
}

std::string describe(const char* name, const TensorMeta& t) {
  return std::string(name) + " " + std::string(dtype_name(t.dtype)) + shape_str(t.shape);
}

[[noreturn]] void bad(const Node& n, const std::string& what) {
  throw std::invalid_argument(std::string(op_name(n.op)) + ": " + what);
}

void expect_rank(const Node& n, const char* name, const TensorMeta& t, size_t rank) {
  if (t.shape.size() != rank)
    bad(n, "expected " + std::string(name) + " to be " + std::to_string(rank) + "-D (" +
               (rank == 2 ? "a matrix" : "a batch of matrices") + "), found " + describe(name, t));
}

bool is_gemm_dtype(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 ||
         t == DType::kFloat16;
}

// Every operand of one supported floating dtype (ATen: "expected m1 and m2 to have the same
// dtype"); returns it.
DType same_gemm_dtype(const Node& n,
                      std::initializer_list<std::pair<const char*, const TensorMeta*>> ops) {
  const DType dt = ops.begin()->second->dtype;
  for (const auto& [name, t] : ops)
    if (t->dtype != dt)
      bad(n, "expected every operand to have the same dtype, found " +
                 describe(ops.begin()->first, *ops.begin()->second) + " and " + describe(name, *t));
  if (!is_gemm_dtype(dt))
    bad(n, "matmuls of " + std::string(dtype_name(dt)) +
               " tensors are not supported (float32, float64, bfloat16 or float16)");
  return dt;
}

// [.., M, K] @ [.., K, N] -> [.., M, N], with the batch dims equal (bmm does not broadcast).
Shape product_shape(const Node& n, const char* an, const TensorMeta& a, const char* bn,
                    const TensorMeta& b, size_t rank) {
  expect_rank(n, an, a, rank);
  expect_rank(n, bn, b, rank);
  if (rank == 3 && a.shape[0] != b.shape[0])
    bad(n, "expected " + std::string(an) + " and " + std::string(bn) +
               " to have the same number of matrices, found " + describe(an, a) + " and " +
               describe(bn, b));
  const int64_t ka = a.shape[rank - 1], kb = b.shape[rank - 2];
  if (ka != kb)
    bad(n, describe(an, a) + " and " + describe(bn, b) + " cannot be multiplied (inner dims " +
               std::to_string(ka) + " != " + std::to_string(kb) + ")");
  Shape s = a.shape;
  s[rank - 1] = b.shape[rank - 1];
  return s;
}

std::vector<OutSpec> infer_mm(const Graph& g, const Node& n) {
  const size_t rank = n.op == Op::kBmm ? 3 : 2;
  const TensorMeta &a = meta(g, n, 0), &b = meta(g, n, 1);
  Shape s = product_shape(n, "self", a, "mat2", b, rank);
  return {{s, same_gemm_dtype(n, {{"self", &a}, {"mat2", &b}})}};
}

std::vector<OutSpec> infer_addmm(const Graph& g, const Node& n) {
  const bool batched = n.op == Op::kBaddbmm;
  const size_t rank = batched ? 3 : 2;
  const char* an = batched ? "batch1" : "mat1";
  const char* bn = batched ? "batch2" : "mat2";
  const TensorMeta &c = meta(g, n, 0), &a = meta(g, n, 1), &b = meta(g, n, 2);
  Shape s = product_shape(n, an, a, bn, b, rank);
  bool ok = c.shape.size() <= rank;
  if (ok) {
    try {
      ok = broadcast_shapes(c.shape, s) == s;
    } catch (const std::invalid_argument&) {
      ok = false;
    }
  }
  if (!ok)
    bad(n, "expected self to broadcast to the product's shape " + shape_str(s) + ", found " +
               describe("self", c));
  return {{s, same_gemm_dtype(n, {{"self", &c}, {an, &a}, {bn, &b}})}};
}

bool is_float8(DType t) {
  return t == DType::kFloat8E4M3 || t == DType::kFloat8E5M2;
}

std::vector<OutSpec> infer_scaled_mm(const Graph& g, const Node& n) {
  const TensorMeta &a = meta(g, n, 0), &b = meta(g, n, 1);
  const TensorMeta &sa = meta(g, n, 2), &sb = meta(g, n, 3);
  Shape s = product_shape(n, "self", a, "mat2", b, 2);
  const int64_t M = s[0], K = a.shape[1], N = s[1];
  if (!is_float8(a.dtype) || !is_float8(b.dtype))
    bad(n, "expected float8 matrices (float8_e4m3fn or float8_e5m2), found " + describe("self", a) +
               " and " + describe("mat2", b));
  if (K % 16 != 0 || N % 16 != 0)
    bad(n,
        "K and N must be multiples of 16 (cuBLASLt float8 kernels; PyTorch checks it too), "
        "found " +
            describe("self", a) + " and " + describe("mat2", b));
  if (sa.dtype != DType::kFloat32 || sb.dtype != DType::kFloat32)
    bad(n, "expected float32 scales, found " + describe("scale_a", sa) + " and " +
               describe("scale_b", sb));
  const bool tensorwise = sa.numel() == 1 && sb.numel() == 1;
  const bool rowwise = sa.shape == Shape{M, 1} && sb.shape == Shape{1, N};
  if (!tensorwise && !rowwise)
    bad(n, "expected tensorwise scales (one element each) or rowwise scales (scale_a [" +
               std::to_string(M) + ", 1] and scale_b [1, " + std::to_string(N) + "]), found " +
               describe("scale_a", sa) + " and " + describe("scale_b", sb));
  if (n.operands[4].is_tensor()) {
    const TensorMeta& bias = meta(g, n, 4);
    if (bias.shape != Shape{N} || (bias.dtype != DType::kBFloat16 &&
                                   bias.dtype != DType::kFloat16 && bias.dtype != DType::kFloat32))
      bad(n, "expected bias to be a bfloat16, float16 or float32 vector [" + std::to_string(N) +
                 "], found " + describe("bias", bias));
  }
  if (!is_floating(n.dtype) || n.dtype == DType::kFloat64)
    bad(n, "out_dtype " + std::string(dtype_name(n.dtype)) +
               " is not supported (bfloat16, float16, float32 or a float8 dtype)");
  return {{s, n.dtype}};
}

// --- references --------------------------------------------------------------------------------

// out[b] = A[b] @ B[b] for `batch` row-major matrices in contiguous storage. `out` need not be
// initialized: it is zeroed here by all threads (first touch of its pages spread over them), then
// accumulated into, which is what Eigen's `C = A * B` does after a one-thread setZero.
void batched_product(const double* a, const double* b, double* out, int64_t batch, int64_t M,
                     int64_t K, int64_t N) {
  use_all_threads();
  parallel_for(batch * M * N, [out](int64_t i) { out[i] = 0; });
  for (int64_t i = 0; i < batch; ++i) {
    Eigen::Map<const MatRM> A(a + i * M * K, M, K);
    Eigen::Map<const MatRM> B(b + i * K * N, K, N);
    Eigen::Map<MatRM> C(out + i * M * N, M, N);
    C.noalias() += A * B;
  }
}

// mm / bmm / addmm / baddbmm: beta * self + alpha * (a @ b); self is ignored when beta == 0 (its
// NaN/Inf do not propagate), as ATen documents.
std::vector<HostTensor> ref_matmul(const RefArgs& r) {
  const bool has_self = r.node.op == Op::kAddmm || r.node.op == Op::kBaddbmm;
  const HostTensor& a = *r.in.at(has_self ? 1 : 0);
  const HostTensor& b = *r.in.at(has_self ? 2 : 1);
  const size_t rank = a.meta.shape.size();
  const int64_t batch = rank == 3 ? a.meta.shape[0] : 1;
  const int64_t M = a.meta.shape[rank - 2], K = a.meta.shape[rank - 1], N = b.meta.shape[rank - 1];
  HostTensor out = make_host_tensor_for_overwrite(r.out[0].shape, r.out[0].dtype);
  batched_product(a.data.data(), b.data.data(), out.data.data(), batch, M, K, N);
  if (has_self) {
    double* o = out.data.data();
    const double alpha = r.node.alpha, beta = r.node.beta;
    const auto n = static_cast<int64_t>(out.data.size());
    if (beta == 0) {
      parallel_for(n, [=](int64_t i) { o[i] *= alpha; });
    } else {
      const ref::ArrayXd self = ref::broadcast_to(*r.in[0], out.meta.shape);
      parallel_for(n, [&](int64_t i) { o[i] = beta * self[i] + alpha * o[i]; });
    }
  }
  return ref_outputs(std::move(out));
}

// _scaled_mm: (self * scale_a) @ (mat2 * scale_b) + bias = (self @ mat2)[m, n] * sa[m] * sb[n]
// + bias[n], in float64 on the float8 values (sa, sb one element each when tensorwise).
std::vector<HostTensor> ref_scaled_mm(const RefArgs& r) {
  const HostTensor &a = *r.in.at(0), &b = *r.in.at(1), &sa = *r.in.at(2), &sb = *r.in.at(3);
  const HostTensor* bias = r.in.size() > 4 ? r.in[4] : nullptr;
  const int64_t M = a.meta.shape[0], K = a.meta.shape[1], N = b.meta.shape[1];
  HostTensor out = make_host_tensor_for_overwrite(r.out[0].shape, r.out[0].dtype);
  batched_product(a.data.data(), b.data.data(), out.data.data(), 1, M, K, N);
  const bool row_a = sa.data.size() > 1, row_b = sb.data.size() > 1;
  parallel_for(M, [&](int64_t m) {
    for (int64_t j = 0; j < N; ++j) {
      double& v = out.data[m * N + j];
      v *= sa.data[row_a ? m : 0] * sb.data[row_b ? j : 0];
      if (bias) v += bias->data[j];
    }
  });
  return ref_outputs(std::move(out));
}

// --- the rows ----------------------------------------------------------------------------------

#define MM(op, name, parse, infer, ref, fn, example) \
  { op, name, OpKind::kMatmul, 1, parse, infer, ref, eager_gemm(GemmFn::fn), nullptr, example }

constexpr OpDef kRows[] = {
    MM(Op::kMm, "aten.mm.default", parse_mm, infer_mm, ref_matmul, kMm,
       R"({"inputs": [{"shape": [7, 13], "dtype": "float32"}, {"shape": [13, 5], "dtype": "float32"}],
           "args": [{"ref": "in0"}, {"ref": "in1"}]})"),
    // nn.Linear: bias [N], weight.t() (column-major mat2); cuBLASLt's bias epilogue.
    MM(Op::kAddmm, "aten.addmm.default", parse_addmm, infer_addmm, ref_matmul, kAddmm,
       R"({"inputs": [{"shape": [24], "dtype": "bfloat16"}, {"shape": [6, 16], "dtype": "bfloat16"},
                      {"shape": [16, 24], "stride": [1, 16], "dtype": "bfloat16"}],
           "args": [{"ref": "in0"}, {"ref": "in1"}, {"ref": "in2"}], "kwargs": {"alpha": 0.5}})"),
    MM(Op::kBmm, "aten.bmm.default", parse_mm, infer_mm, ref_matmul, kBmm,
       R"({"inputs": [{"shape": [3, 4, 8], "dtype": "float16"}, {"shape": [3, 8, 5], "dtype": "float16"}],
           "args": [{"ref": "in0"}, {"ref": "in1"}]})"),
    MM(Op::kBaddbmm, "aten.baddbmm.default", parse_addmm, infer_addmm, ref_matmul, kBaddbmm,
       R"({"inputs": [{"shape": [4, 5], "dtype": "float32"}, {"shape": [2, 4, 6], "dtype": "float32"},
                      {"shape": [2, 6, 5], "dtype": "float32"}],
           "args": [{"ref": "in0"}, {"ref": "in1"}, {"ref": "in2"}],
           "kwargs": {"beta": 0.5, "alpha": 2}})"),
    // Rowwise scales, bias, bfloat16 out; mat2 column-major (w.t()), as float8 linears call it.
    MM(Op::kScaledMm, "aten._scaled_mm.default", parse_scaled_mm, infer_scaled_mm, ref_scaled_mm,
       kScaledMm,
       R"({"inputs": [{"shape": [8, 32], "dtype": "float8_e4m3fn"},
                      {"shape": [32, 16], "stride": [1, 32], "dtype": "float8_e4m3fn"},
                      {"shape": [8, 1], "dtype": "float32", "stats": {"mean": 1, "std": 0.25, "min": 0.25, "max": 2}},
                      {"shape": [1, 16], "dtype": "float32", "stats": {"mean": 1, "std": 0.25, "min": 0.25, "max": 2}},
                      {"shape": [16], "dtype": "bfloat16"}],
           "args": [{"ref": "in0"}, {"ref": "in1"}, {"ref": "in2"}, {"ref": "in3"}],
           "kwargs": {"bias": {"ref": "in4"}, "out_dtype": {"dtype": "bfloat16"}}})"),
};
#undef MM
static_assert(rows_cover(kRows, kMatmulOps), "one row per matmul, in enum order");

}  // namespace

std::span<const OpDef> matmul_op_rows() {
  return kRows;
}

double matmul_flops(const Graph& g, const Node& n) {
  if (n.op < kMatmulOps.first || n.op > kMatmulOps.last) return 0;
  // The first matrix operand: self for mm / bmm / _scaled_mm, mat1 / batch1 after the added term.
  const size_t a = n.op == Op::kAddmm || n.op == Op::kBaddbmm ? 1 : 0;
  const Shape& sa = g.meta(n.operands.at(a).value).shape;
  const double K = sa.empty() ? 0 : static_cast<double>(sa.back());
  return 2.0 * static_cast<double>(g.meta(n.outputs.at(0)).numel()) * K;
}

std::string matmul_class(const Graph& g, const Node& n) {
  if (n.op < kMatmulOps.first || n.op > kMatmulOps.last) return "";
  if (n.op == Op::kScaledMm) {
    const int64_t scale_a = g.meta(n.operands.at(2).value).numel();
    return scale_a > 1 ? "float8_rowwise" : "float8_tensorwise";
  }
  const size_t a = n.op == Op::kAddmm || n.op == Op::kBaddbmm ? 1 : 0;
  switch (g.meta(n.operands.at(a).value).dtype) {
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "fp16";
    case DType::kFloat32:
      return "fp32";
    case DType::kFloat64:
      return "fp64";
    default:
      return "";
  }
}

double reference_gemm_gflops() {
  static const double rate = [] {
    use_all_threads();
    constexpr int kN = 768;
    const MatRM a = MatRM::Constant(kN, kN, 0.5), b = MatRM::Constant(kN, kN, 0.25);
    MatRM c(kN, kN);
    double best = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      c.noalias() = a * b;
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return 2.0 * kN * kN * kN / std::max(best, 1e-9) / 1e9;
  }();
  return rate;
}

}  // namespace replay
