// matmul_epilogue binder: typed params (match.cpp) -> cuBLASLt matmuls (impls/eager/gemm.hpp's
// prepare_matmul) and the epilogue kernel (kernels.hpp).
//
//   optimized: GEMM (CUBLASLT_EPILOGUE_BIAS for addmm, the graph's dtype direct) [+ the up GEMM]
//              [+ one fused kernel: bias of mm + add, activation, gating, casts, residual]
//   baseline:  GEMM without epilogue (float32 output when addmm's bias follows) [+ the up GEMM]
//              + one kernel per step: bias, activation, gating
// Both compute what the graph computes with its roundings (the GEMM output rounded to its dtype,
// each cast a rounding); TUNING.md says why cuBLASLt's GELU epilogues are not used.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "impls/cuda/cuda_check.hpp"
#include "impls/eager/gemm.hpp"
#include "impls/eager/gemm_choice.hpp"
#include "impls/eager/lower.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/matmul_epilogue/params.hpp"

namespace replay::matmul_epilogue {
namespace {

// A row-major [M, N] view of a bound tensor of M * N elements with a unit last stride and rows
// N apart (a contiguous [.., N]), or of a 2-D one with any row stride; ptr null when neither.
EpiMat as_rows(const BoundTensor& t, int64_t M, int64_t N) {
  EpiMat m;
  const TensorMeta& l = t.layout;
  if (l.numel() != M * N) return m;
  const size_t d = l.shape.size();
  bool rows = d >= 2 && l.shape.back() == N && (l.stride.back() == 1 || N == 1) &&
              (l.stride[d - 2] >= N || M == 1);
  for (size_t i = 0; rows && i + 2 < d; ++i)  // leading dims collapse into one row index
    rows = l.shape[i] == 1 || l.stride[i] == l.stride[i + 1] * l.shape[i + 1];
  if (rows) {
    m.ld = M == 1 ? N : l.stride[d - 2];
  } else if (l.is_contiguous()) {
    m.ld = N;
  } else {
    return m;
  }
  m.ptr = t.ptr;
  m.dtype = l.dtype;
  return m;
}

// The Act::kTable table: the chain's nodes (p.act_values' producers, graph order) run by the
// eager executor's own launches (lower_node) over every 16-bit pattern of the chain's source
// dtype, as [65536] tensors, on the current device now; the last node's results, indexed by the
// source's bits, are the table (in the program's workspace). So each entry is what eager computes
// for that value, roundings between ops included. nullptr (and `why`) when an op cannot be
// lowered that way.
const uint16_t* make_table(const Graph& g, const Params& p, BindContext& ctx, std::string& why) {
  const DType src_t = g.meta(p.act_src).dtype;
  auto tensor = [&](DType t) {
    DeviceTensor d;
    d.ptr = ctx.workspace(static_cast<size_t>(kTableEntries) * dtype_size(t));
    d.dtype = t;
    d.ndim = 1;
    d.shape[0] = kTableEntries;
    d.stride[0] = 1;
    return d;
  };
  std::map<int, DeviceTensor> val;
  val[p.act_src] = tensor(src_t);
  std::vector<uint16_t> bits(static_cast<size_t>(kTableEntries));
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i);
  REPLAY_CUDA(cudaMemcpy(val[p.act_src].ptr, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  try {
    for (int v : p.act_values) {
      const Node& n = g.nodes[g.values[v].producer];
      std::vector<DeviceTensor> in;
      for (const Operand& o : n.operands) {
        if (!o.is_tensor()) {
          in.emplace_back();
          continue;
        }
        auto it = val.find(o.value);
        if (it == val.end()) {
          why = "node '" + n.id + "' of the chain reads '" + g.values[o.value].name +
                "', which the chain does not compute";
          return nullptr;
        }
        in.push_back(it->second);
      }
      val[v] = tensor(g.meta(v).dtype);
      lower_node(g, n, in, {val[v]})(nullptr);
    }
  } catch (const std::invalid_argument& e) {
    why = std::string("the chain cannot be tabulated: ") + e.what();
    return nullptr;
  }
  REPLAY_CUDA(cudaStreamSynchronize(nullptr));
  return static_cast<const uint16_t*>(val.at(p.act_values.back()).ptr);
}

DeviceTensor dev2(const EpiMat& m, int64_t M, int64_t N) {
  DeviceTensor t;
  t.ptr = m.ptr;
  t.dtype = m.dtype;
  t.ndim = 2;
  t.shape[0] = M;
  t.shape[1] = N;
  t.stride[0] = m.ld;
  t.stride[1] = 1;
  return t;
}

}  // namespace

namespace {

// The backward epilogue (params.hpp, Backward): the GEMM writes g in the graph's dtype; then
//   optimized: one kernel (launch_backward) writing every result, the bias gradient's column
//              partials on the way (plus the tiny kernel adding them);
//   baseline:  one kernel per step: plain: act'(x), g * act'(x), the column sum; gated: act(gate),
//              g * act, g * up, act'(gate), h * act'(gate).
// Both compute the same float32 values with the same roundings (bit-identical results).
Binding bind_backward(const Graph& g, const Params& p, bool optimized, BindContext& ctx,
                      const EpiMat& z, EagerLaunch gemm) {
  Binding b;
  const Backward& w = p.bwd;
  const int64_t M = p.M, N = p.N;
  BackwardArgs a;
  a.M = M;
  a.N = N;
  a.act = w.act;
  a.gated = w.gated;
  a.g = z;
  a.act_round = w.act_round;
  a.h_round = w.h_round;
  auto rows = [&](int v, EpiMat& m) {
    m = as_rows(ctx.tensor(v), M, N);
    if (!m.ptr) b.unsupported = "'" + g.values[v].name + "' is not a row-major [M, N]";
    return m.ptr != nullptr;
  };
  if (!rows(w.x, a.x) || !rows(w.dx, a.dx)) return b;
  if (w.gated && (!rows(w.up, a.up) || !rows(w.dup, a.dup))) return b;
  if (w.act_saved >= 0 && !rows(w.act_saved, a.act_in)) return b;
  if (w.dbias >= 0) {
    BoundTensor t = ctx.tensor(w.dbias);
    if (t.layout.numel() != N || (N > 1 && t.layout.stride.back() != 1)) {
      b.unsupported = "bias gradient '" + g.values[w.dbias].name + "' is not a unit-stride [N]";
      return b;
    }
    a.dbias = t.ptr;
    a.dbias_dtype = t.layout.dtype;
    a.partial = static_cast<float*>(
        ctx.workspace(static_cast<size_t>(backward_partial_floats(M, N)) * sizeof(float)));
  }
  if (!backward_vectorized(a)) {
    b.unsupported = "the backward epilogue needs N (" + std::to_string(N) +
                    ") and every row stride multiples of 8 elements and 16-byte aligned tensors";
    return b;
  }
  const size_t mn = static_cast<size_t>(M * N);
  auto buffer = [&](DType t) { return EpiMat{ctx.workspace(mn * dtype_size(t)), t, N}; };
  struct Step {
    BackwardArgs bwd;
    EpilogueArgs epi;
    bool is_bwd = false;
    bool column_sum = false;
  };
  std::vector<Step> steps;
  if (optimized) {
    steps.push_back({a, {}, true});
  } else {
    auto pointwise = [&](const EpiMat& x, const EpiMat& y, const EpiMat& out) {
      EpilogueArgs e;
      e.M = M;
      e.N = N;
      e.z = x;
      e.up = y;
      e.y = out;
      steps.push_back({{}, e, false});
    };
    const EpiMat grad = buffer(DType::kFloat32);  // act'(x), float32 (exact)
    BackwardArgs d = a;
    d.g = {};
    d.gated = false;
    d.dx = grad;
    d.dbias = nullptr;
    if (w.gated) {
      EpilogueArgs act;  // act(gate), rounded as the graph rounds it (or as the forward saved it)
      act.M = M;
      act.N = N;
      act.z = a.x;
      act.act_step = true;
      act.act = w.act;
      act.act_round = w.act_round;
      act.y = a.act_in;
      if (!a.act_in.ptr) {
        act.y = buffer(w.act_round);
        steps.push_back({{}, act, false});
      }
      pointwise(z, act.y, a.dup);  // d_up = g * act
      const EpiMat h = buffer(w.h_round);
      pointwise(z, a.up, h);  // h = g * up
      steps.push_back({d, {}, true});
      pointwise(h, grad, a.dx);  // d_gate = h * act'(gate)
    } else {
      steps.push_back({d, {}, true});
      pointwise(z, grad, a.dx);  // d_pre = g * act'(x)
    }
    if (a.dbias) {
      Step s;
      s.bwd = a;
      s.column_sum = true;
      steps.push_back(s);
    }
  }
  b.launch = [steps, gemm](const LaunchContext& c) {
    gemm(c.stream);
    for (const Step& s : steps) {
      if (s.column_sum)
        launch_column_sum(s.bwd.dx, s.bwd.M, s.bwd.N, s.bwd.dbias, s.bwd.dbias_dtype, s.bwd.partial,
                          c.stream);
      else if (s.is_bwd)
        launch_backward(s.bwd, c.stream);
      else
        launch_epilogue(s.epi, c.stream);
    }
  };
  return b;
}

// µs per launch of `run` on a stream of its own: one warm-up, then 5 launches between events
// (warm L2, as prepare_matmul times its candidates).
double time_launch(const EagerLaunch& run) {
  cudaStream_t s = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  REPLAY_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  REPLAY_CUDA(cudaEventCreate(&start));
  REPLAY_CUDA(cudaEventCreate(&stop));
  constexpr int kReps = 5;
  float ms = 0;
  try {
    run(s);
    REPLAY_CUDA(cudaEventRecord(start, s));
    for (int r = 0; r < kReps; ++r) run(s);
    REPLAY_CUDA(cudaEventRecord(stop, s));
    REPLAY_CUDA(cudaEventSynchronize(stop));
    REPLAY_CUDA(cudaEventElapsedTime(&ms, start, stop));
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(s);
    throw;
  }
  REPLAY_CUDA(cudaEventDestroy(start));
  REPLAY_CUDA(cudaEventDestroy(stop));
  REPLAY_CUDA(cudaStreamDestroy(s));
  return 1e3 * ms / kReps;
}

// REPLAY_MATMUL_BGRAD: "1", the bias gradient in the GEMM (the region falls back with cuBLASLt's
// reason when it has no such algorithm); "0", never; unset or empty, timed. Anything else throws
// std::invalid_argument naming the variable.
enum class BgradForce { kTimed, kFused, kSplit };
BgradForce bgrad_force() {
  const char* e = std::getenv("REPLAY_MATMUL_BGRAD");
  if (!e || !*e) return BgradForce::kTimed;
  const std::string v = e;
  if (v == "1") return BgradForce::kFused;
  if (v == "0") return BgradForce::kSplit;
  throw std::invalid_argument("REPLAY_MATMUL_BGRAD='" + v +
                              "': expected 1 (the bias gradient in the GEMM), 0 (the GEMM, then "
                              "the column-sum kernel) or unset (the faster of the two, timed)");
}

// The epilogue in the GEMM must be this much faster than the two steps (the GEMM, then the
// column sum) to be kept over them (as gemm.cu's kTuneMargin among algorithms): a choice between
// near-equal forms does not flip on noise.
constexpr double kFusedMargin = 0.97;

// The fused-or-split decision per problem for the process (device and the key bind_weight_grad
// builds), so every program bound in it runs the same form and gives the same bits.
struct BgradDecision {
  bool fused = false;                 ///< the epilogue in the GEMM is kept
  double fused_us = 0, split_us = 0;  ///< µs per launch, warm L2; fused_us -1: refused at launch
};
std::map<std::string, BgradDecision>& bgrad_decisions() {
  static std::map<std::string, BgradDecision> m;
  return m;
}

// The pointer's alignment in bytes, up to 256 (cuBLASLt picks algorithms by it, as gemm.cu's
// cache key does): a decision timed on aligned buffers is not reused for less aligned ones.
std::string align_key(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  return std::to_string(v ? std::min<uintptr_t>(v & (~v + 1), 256) : 256);
}

std::string layout_key(const TensorMeta& l) {
  std::string s = std::string(dtype_name(l.dtype)) + "[";
  for (size_t i = 0; i < l.shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(l.shape[i]) + ":" + std::to_string(l.stride[i]);
  return s + "]";
}

// A dW GEMM with its bias gradient (params.hpp, WeightGradBias): the GEMM writes dW; then
//   baseline:  the GEMM, then the column-sum kernel over the tangent T [K, F] (a second read);
//   optimized: the faster of the same cuBLASLt call summing the bias gradient over K (BGRADB /
//              BGRADA: no second read of T) and the baseline's two steps (cuBLASLt's bias
//              gradient kernels are not free: TUNING.md), timed once per problem for the process,
//              the epilogue kept only when it is 3 % faster. The decision and both times are
//              recorded with the GEMM choices (results.json), with the choice of the GEMM that
//              runs (not of the form left aside).
Binding bind_weight_grad(const Graph& g, const Params& p, bool optimized, BindContext& ctx) {
  Binding b;
  const WeightGradBias& w = p.wgrad;
  const int64_t M = p.M, N = p.N, K = p.K, F = w.of_a ? M : N;
  const EpiMat z = as_rows(ctx.tensor(p.gemm.out), M, N);
  if (!z.ptr) {
    b.unsupported = "GEMM output '" + g.values[p.gemm.out].name + "' is not a row-major [M, N]";
    return b;
  }
  BoundTensor db = ctx.tensor(w.dbias);
  if (db.layout.numel() != F || (F > 1 && db.layout.stride.back() != 1) ||
      db.layout.dtype != p.gemm_dtype) {
    b.unsupported = "bias gradient '" + g.values[w.dbias].name + "' is not a unit-stride [" +
                    std::to_string(F) + "] " + std::string(dtype_name(p.gemm_dtype)) + " vector";
    return b;
  }
  const BgradForce force = optimized ? bgrad_force() : BgradForce::kSplit;
  MatmulOperands mo;
  mo.tune = true;
  BoundTensor ta = ctx.tensor(p.gemm.a), tb = ctx.tensor(p.gemm.b);
  mo.a = device_tensor(ta.ptr, ta.layout);
  mo.b = device_tensor(tb.ptr, tb.layout);
  mo.d = dev2(z, M, N);
  const std::string name = g.nodes[g.values[p.gemm.out].producer].id;
  // The two steps: the GEMM, then the column sum over T.
  const EpiMat t = as_rows(ctx.tensor(w.summed), K, F);
  EagerLaunch split;
  std::vector<GemmChoice> split_choices, fused_choices;
  std::string split_why;
  if (force == BgradForce::kFused) {
    split_why = "REPLAY_MATMUL_BGRAD=1 asks for the bias gradient in the GEMM";
  } else if (!column_sum_vectorized(t, F)) {
    split_why = "the column sum over '" + g.values[w.summed].name +
                "' needs a row-major [K, F] with F and its row stride multiples of 8 elements, "
                "16-byte aligned";
  } else {
    try {
      GemmChoiceLog log;  // recorded in the region's log only if this form runs
      const EagerLaunch gemm = prepare_matmul(name, mo);
      split_choices = log.take();
      auto* partial = static_cast<float*>(
          ctx.workspace(static_cast<size_t>(backward_partial_floats(K, F)) * sizeof(float)));
      const DType dt = db.layout.dtype;
      void* out = db.ptr;
      split = [=](cudaStream_t s) {
        gemm(s);
        launch_column_sum(t, K, F, out, dt, partial, s);
      };
    } catch (const std::exception& e) {
      split_why = e.what();
    }
  }
  EagerLaunch fused;
  std::string fused_why;
  if (force == BgradForce::kSplit && optimized) {
    fused_why = "REPLAY_MATMUL_BGRAD=0 asks for the GEMM, then the column-sum kernel";
  } else if (optimized) {
    MatmulOperands mf = mo;
    mf.bias_grad_of = w.of_a ? BiasGrad::kRowsOfA : BiasGrad::kColsOfB;
    mf.bias_grad = db.ptr;
    try {
      GemmChoiceLog log;
      fused = prepare_matmul(name, mf);
      fused_choices = log.take();
    } catch (const std::exception& e) {  // cuBLASLt has no such algorithm, or refused it
      fused_why = e.what();
    }
  }
  bool keep_fused = fused && !split;
  if (fused && split) {  // both can run: the decision for this problem, timed once
    int device = 0;
    REPLAY_CUDA(cudaGetDevice(&device));
    const std::string key =
        std::to_string(device) + "|" + (w.of_a ? "a" : "b") + "|" + std::to_string(M) + "x" +
        std::to_string(N) + "x" + std::to_string(K) + "|" + layout_key(ta.layout) + "|" +
        layout_key(tb.layout) + "|ld" + std::to_string(z.ld) + "|t" + std::to_string(t.ld) + "|" +
        std::string(dtype_name(t.dtype)) + "|al" + align_key(ta.ptr) + "," + align_key(tb.ptr) +
        "," + align_key(z.ptr) + "," + align_key(t.ptr) + "," + align_key(db.ptr);
    auto it = bgrad_decisions().find(key);
    if (it == bgrad_decisions().end()) {
      BgradDecision d;
      try {
        d.fused_us = time_launch(fused);
      } catch (const std::exception& e) {  // refused at launch: the two steps
        d.fused_us = -1;
        fused_why = e.what();
        (void)cudaGetLastError();  // a launch error left set must not fail the split's timing
      }
      d.split_us = time_launch(split);
      d.fused = d.fused_us >= 0 && d.fused_us < d.split_us * kFusedMargin;
      it = bgrad_decisions().emplace(key, d).first;
    }
    keep_fused = it->second.fused;
    GemmChoice rec;
    rec.name = name + " bias gradient";
    rec.problem = std::string("bias gradient of ") + (w.of_a ? "a" : "b") +
                  " over K = " + std::to_string(K) + ": [0] the GEMM with " +
                  (w.of_a ? "CUBLASLT_EPILOGUE_BGRADB" : "CUBLASLT_EPILOGUE_BGRADA") +
                  ", [1] the GEMM then the column-sum kernel (kept unless [0] is 3 % faster)";
    rec.tuned = true;
    rec.first_name = "the epilogue in the GEMM";
    rec.candidates = 2;
    rec.candidate_us = {it->second.fused_us, it->second.split_us};
    rec.chosen = keep_fused ? 0 : 1;
    rec.algo = keep_fused ? "bias gradient in the GEMM" : "GEMM, then the column sum";
    record_gemm_choice(rec);
  }
  const EagerLaunch run = keep_fused ? fused : split;
  if (!run) {
    if (!optimized)
      b.unsupported = split_why;
    else if (force == BgradForce::kFused)
      b.unsupported = fused_why;
    else
      b.unsupported = fused_why.empty() ? split_why : fused_why + "; and " + split_why;
    return b;
  }
  for (GemmChoice& c : keep_fused ? fused_choices : split_choices) record_gemm_choice(c);
  b.launch = [run](const LaunchContext& c) { run(c.stream); };
  return b;
}

}  // namespace

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  const auto& p = std::any_cast<const Params&>(r.params);
  Binding b;
  if (v.role == Role::kAlternative) {
    b.unsupported = "matmul_epilogue has no variant '" + std::string(v.name) + "'";
    return b;
  }
  const bool optimized = v.role == Role::kOptimized;
  const int64_t M = p.M, N = p.N;
  const DType dt = p.gemm_dtype;
  const size_t mn = static_cast<size_t>(M * N);

  // A GEMM output's buffer: the graph's value when the region exports it, else a workspace.
  auto gemm_out = [&](const Gemm& gm, EpiMat& z) -> bool {
    if (gm.exported || gm.out == p.out) {
      z = as_rows(ctx.tensor(gm.out), M, N);
      if (!z.ptr) {
        b.unsupported = "GEMM output '" + g.values[gm.out].name + "' is not a row-major [M, N]";
        return false;
      }
    } else {
      z.ptr = ctx.workspace(mn * dtype_size(dt));
      z.dtype = dt;
      z.ld = N;
    }
    return true;
  };
  auto vector_of = [&](int value, const void*& ptr, DType& dtype) -> bool {
    BoundTensor t = ctx.tensor(value);
    if (t.layout.numel() != N || (N > 1 && t.layout.stride.back() != 1)) {
      b.unsupported = "bias '" + g.values[value].name + "' is not a unit-stride [N]";
      return false;
    }
    ptr = t.ptr;
    dtype = t.layout.dtype;
    return true;
  };

  struct Step {
    EagerLaunch gemm;
    EpilogueArgs epi;
    bool is_gemm = false;
  };
  std::vector<Step> steps;
  // One GEMM and, for addmm, its bias: fused (optimized) or through a float32 buffer (baseline).
  auto add_gemm = [&](const Gemm& gm, const EpiMat& z) -> bool {
    MatmulOperands mo;
    mo.tune = true;  // both variants: the same GEMM algorithm, so they differ by the epilogue
    BoundTensor ta = ctx.tensor(gm.a), tb = ctx.tensor(gm.b);
    mo.a = device_tensor(ta.ptr, ta.layout);
    mo.b = device_tensor(tb.ptr, tb.layout);
    const void* bias = nullptr;
    DType bias_dtype = dt;
    if (gm.bias >= 0 && !vector_of(gm.bias, bias, bias_dtype)) return false;
    if (!bias || optimized) {
      mo.d = dev2(z, M, N);
      mo.bias = bias;
      mo.bias_dtype = bias_dtype;
      steps.push_back({prepare_matmul(g.nodes[g.values[gm.out].producer].id, mo), {}, true});
      return true;
    }
    EpiMat acc{ctx.workspace(mn * sizeof(float)), DType::kFloat32, N};
    mo.d = dev2(acc, M, N);
    steps.push_back({prepare_matmul(g.nodes[g.values[gm.out].producer].id, mo), {}, true});
    EpilogueArgs e;
    e.M = M;
    e.N = N;
    e.z = acc;
    e.bias = bias;
    e.bias_dtype = bias_dtype;
    e.bias_round = dt;
    e.y = z;
    steps.push_back({{}, e, false});
    return true;
  };

  if (p.wgrad.on) return bind_weight_grad(g, p, optimized, ctx);
  EpiMat z, up, y;
  EpiMat res;
  if (p.residual >= 0) {
    res = as_rows(ctx.tensor(p.residual), M, N);
    if (!res.ptr) {
      b.unsupported = "residual '" + g.values[p.residual].name + "' is not a contiguous [.., N]";
      return b;
    }
  }
  if (!gemm_out(p.gemm, z) || !add_gemm(p.gemm, z)) return b;
  if (p.bwd.on) return bind_backward(g, p, optimized, ctx, z, steps[0].gemm);
  if (p.up.node >= 0 && (!gemm_out(p.up, up) || !add_gemm(p.up, up))) return b;
  const int64_t EN = p.split_halves ? N / 2 : N;  // the epilogue's columns
  if (p.out != p.gemm.out) {
    y = as_rows(ctx.tensor(p.out), M, EN);
    if (!y.ptr) {
      b.unsupported = "result '" + g.values[p.out].name + "' is not a contiguous [.., N]";
      return b;
    }
    EpilogueArgs e;
    e.M = M;
    e.N = EN;
    e.z = z;
    if (p.split_halves) {  // gate and up: the two halves of the one GEMM output
      auto half = [&](int h) {
        EpiMat m = z;
        m.ptr = static_cast<char*>(z.ptr) + static_cast<size_t>(h * EN) * dtype_size(z.dtype);
        return m;
      };
      e.z = half(p.gate_half);
      up = half(1 - p.gate_half);
    }
    const void* add_bias = nullptr;
    DType add_dtype = dt;
    if (p.add_bias >= 0 && !vector_of(p.add_bias, add_bias, add_dtype)) return b;
    // Act::kTable: the graph's chain, tabulated (both variants). Optimized, a fixed activation
    // from and to a 16-bit dtype: looked up too, from a table of the kernel's own act (the same
    // bits, no erf / tanh / exp per element).
    const uint16_t* table = nullptr;
    const DType table_in = p.act_src >= 0 ? g.meta(p.act_src).dtype : DType::kBFloat16;
    if (p.has_act_step && p.act == Act::kTable && !(table = make_table(g, p, ctx, b.unsupported)))
      return b;
    if (optimized && p.has_act_step && act_tabulable(p.act, table_in, p.act_round)) {
      auto* t = static_cast<uint16_t*>(ctx.workspace(kTableEntries * sizeof(uint16_t)));
      build_act_table(p.act, table_in, p.act_round, t, nullptr);
      REPLAY_CUDA(cudaStreamSynchronize(nullptr));
      table = t;
    }
    e.res = res;
    if (p.residual >= 0) {  // GEMM output, then one kernel adding the residual (both variants)
      e.y = y;
      steps.push_back({{}, e, false});
    } else if (optimized) {  // one kernel, every step
      if (p.act_out >= 0 && !(e.mid = as_rows(ctx.tensor(p.act_out), M, EN)).ptr) {
        b.unsupported = "activation '" + g.values[p.act_out].name + "' is not a contiguous [.., N]";
        return b;
      }
      e.bias = add_bias;
      e.bias_dtype = add_dtype;
      e.bias_round = p.add_round;
      e.act_step = p.has_act_step;
      e.act = p.act;
      e.act_round = p.act_round;
      e.table = table;
      e.table_in = table_in;
      if (p.up.node >= 0 || p.split_halves) e.up = up;
      e.y = y;
      steps.push_back({{}, e, false});
    } else {  // one kernel per step, each result through memory
      EpiMat cur = e.z;
      auto step_out = [&](DType t, bool last) {
        return last ? y : EpiMat{ctx.workspace(static_cast<size_t>(M * EN) * dtype_size(t)), t, EN};
      };
      if (add_bias) {
        EpilogueArgs s;
        s.M = M;
        s.N = EN;
        s.z = cur;
        s.bias = add_bias;
        s.bias_dtype = add_dtype;
        s.bias_round = p.add_round;
        s.y = step_out(p.add_round, !p.has_act_step && p.up.node < 0);
        cur = s.y;
        steps.push_back({{}, s, false});
      }
      if (p.has_act_step) {
        EpilogueArgs s;
        s.M = M;
        s.N = EN;
        s.z = cur;
        s.act_step = true;
        s.act = p.act;
        s.act_round = p.act_round;
        s.table = table;
        s.table_in = table_in;
        s.y = p.act_out >= 0 ? as_rows(ctx.tensor(p.act_out), M, EN)
                             : step_out(p.act_round, p.up.node < 0 && !p.split_halves);
        if (!s.y.ptr) {
          b.unsupported =
              "activation '" + g.values[p.act_out].name + "' is not a contiguous [.., N]";
          return b;
        }
        cur = s.y;
        steps.push_back({{}, s, false});
      }
      if (p.up.node >= 0 || p.split_halves) {
        EpilogueArgs s;
        s.M = M;
        s.N = EN;
        s.z = cur;
        s.up = up;
        s.y = y;
        steps.push_back({{}, s, false});
      }
    }
  }
  b.launch = [steps](const LaunchContext& c) {
    for (const Step& s : steps) {
      if (s.is_gemm)
        s.gemm(c.stream);
      else
        launch_epilogue(s.epi, c.stream);
    }
  };
  return b;
}

}  // namespace replay::matmul_epilogue
