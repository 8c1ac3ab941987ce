#include "harness/replay/ceilings.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "impls/cuda/cuda_check.hpp"
#include "impls/eager/gemm.hpp"
#include "impls/eager/gemm_choice.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay {
namespace {

bool is_float8(const std::string& cls) {
  return cls.rfind("float8_", 0) == 0;
}

DType operand_dtype(const std::string& cls) {
  if (cls == "bf16") return DType::kBFloat16;
  if (cls == "fp16") return DType::kFloat16;
  if (cls == "fp32") return DType::kFloat32;
  if (cls == "fp64") return DType::kFloat64;
  if (is_float8(cls)) return DType::kFloat8E4M3;
  throw std::invalid_argument("unknown matmul class '" + cls +
                              "' (expected one of bf16, fp16, "
                              "fp32, fp64, float8_tensorwise, float8_rowwise)");
}

// A device buffer of `meta`'s storage filled with a tiled block of N(0, sd) values (scales: 1).
DeviceBuffer filled(const TensorMeta& meta, double sd, cudaStream_t s) {
  const size_t esize = dtype_size(meta.dtype);
  const size_t bytes = static_cast<size_t>(meta.storage_elems()) * esize;
  DeviceBuffer buf(std::max<size_t>(bytes, 16));
  constexpr size_t kBlock = size_t{1} << 20;  // bytes of distinct values, tiled over the buffer
  const size_t block = std::min(bytes, kBlock) / esize * esize;
  std::vector<unsigned char> host(block);
  std::mt19937_64 rng(1234 + bytes);
  std::normal_distribution<double> nd(0.0, sd);
  for (size_t i = 0; i < block / esize; ++i)
    store_as(meta.dtype, sd > 0 ? nd(rng) : 1.0, &host[i * esize]);
  for (size_t off = 0; off < bytes; off += block)
    REPLAY_CUDA(cudaMemcpyAsync(static_cast<char*>(buf.get()) + off, host.data(),
                                std::min(block, bytes - off), cudaMemcpyHostToDevice, s));
  REPLAY_CUDA(cudaStreamSynchronize(s));
  return buf;
}

}  // namespace

const std::vector<std::string>& matmul_peak_classes() {
  static const std::vector<std::string> k = {
      "bf16", "fp16", "fp32", "fp64", "float8_tensorwise", "float8_rowwise"};
  return k;
}

int64_t matmul_peak_size(const std::string& cls) {
  if (cls == "fp64") return 2048;
  if (cls == "fp32") return 4096;
  operand_dtype(cls);  // throws for an unknown class
  return 8192;
}

std::string matmul_peak_trace(const std::string& cls, int64_t size) {
  const std::string dt(dtype_name(operand_dtype(cls)));
  const int64_t n = size;
  auto tensor = [&](const char* id, std::vector<int64_t> shape, std::vector<int64_t> stride,
                    const std::string& dtype) {
    return nlohmann::json{
        {"id", id}, {"shape", shape}, {"stride", stride}, {"dtype", dtype}, {"role", "activation"}};
  };
  nlohmann::json inputs = nlohmann::json::array(
      {tensor("a", {n, n}, {n, 1}, dt), tensor("b", {n, n}, {1, n}, dt)});  // b column-major
  nlohmann::json node = {{"id", "out"}, {"kwargs", nlohmann::json::object()}};
  if (is_float8(cls)) {
    const bool rowwise = cls == "float8_rowwise";
    inputs.push_back(rowwise ? tensor("scale_a", {n, 1}, {1, 1}, "float32")
                             : tensor("scale_a", {}, {}, "float32"));
    inputs.push_back(rowwise ? tensor("scale_b", {1, n}, {n, 1}, "float32")
                             : tensor("scale_b", {}, {}, "float32"));
    node["op"] = "aten._scaled_mm.default";
    node["args"] = {{{"ref", "a"}}, {{"ref", "b"}}, {{"ref", "scale_a"}}, {{"ref", "scale_b"}}};
    node["kwargs"] = {{"out_dtype", {{"dtype", "bfloat16"}}}};
    node["outputs"] = {{{"shape", {n, n}}, {"stride", {n, 1}}, {"dtype", "bfloat16"}}};
  } else {
    node["op"] = "aten.mm.default";
    node["args"] = {{{"ref", "a"}}, {{"ref", "b"}}};
    node["outputs"] = {{{"shape", {n, n}}, {"stride", {n, 1}}, {"dtype", dt}}};
  }
  const nlohmann::json doc = {{"schema", "replay-trace/1"},
                              {"name", "matmul_peak_" + cls},
                              {"source", {{"model", "matmul ceiling"}, {"phase", "fwd"}}},
                              {"world_size", 1},
                              {"inputs", inputs},
                              {"nodes", {node}},
                              {"outputs", {"out"}}};
  return doc.dump();
}

std::vector<MatmulPeak> measure_matmul_peaks(cudaStream_t s, L2Flush& l2, const StopRule& rule) {
  std::vector<MatmulPeak> out;
  for (const std::string& cls : matmul_peak_classes()) {
    MatmulPeak p;
    p.cls = cls;
    p.m = p.n = p.k = matmul_peak_size(cls);
    try {
      const Graph g = parse_trace_text(matmul_peak_trace(cls, p.m), "<matmul ceiling " + cls + ">");
      const Node& node = g.nodes.at(0);
      std::vector<DeviceBuffer> bufs;
      std::vector<DeviceTensor> in;
      for (const Operand& op : node.operands) {
        if (op.none) {
          in.emplace_back();
          continue;
        }
        const TensorMeta& meta = g.meta(op.value);
        const bool scale = meta.numel() != p.m * p.k;
        bufs.push_back(filled(meta, scale ? 0.0 : 1.0, s));
        in.push_back(device_tensor(bufs.back().get(), meta));
      }
      const TensorMeta& om = g.meta(node.outputs.at(0));
      DeviceBuffer obuf(static_cast<size_t>(om.storage_elems()) * dtype_size(om.dtype));
      const DeviceTensor out = device_tensor(obuf.get(), om);
      // The fusions' path: the algorithm timed among the heuristic's candidates, as their GEMMs
      // choose it (a ceiling below what a tuned region reaches would put it above 100 % of SOL);
      // float64 through the eager path (no fusion runs float64 GEMMs).
      EagerLaunch launch;
      if (is_float8(cls)) {
        ScaledMatmulOperands m;
        m.a = in.at(0);
        m.b = in.at(1);
        m.d = out;
        m.scale_a = in.at(2).ptr;
        m.scale_b = in.at(3).ptr;
        m.rowwise = cls == "float8_rowwise";
        m.tune = true;
        PreparedMatmul pm = prepare_scaled_matmul("matmul ceiling " + cls, m);
        if (!pm.launch) throw std::runtime_error(pm.unsupported);
        launch = std::move(pm.launch);
        p.algo = pm.algo;
      } else if (cls != "fp64") {
        MatmulOperands m;
        m.a = in.at(0);
        m.b = in.at(1);
        m.d = out;
        m.tune = true;
        GemmChoiceLog log;
        launch = prepare_matmul("matmul ceiling " + cls, m);
        for (const GemmChoice& c : log.take()) p.algo = c.algo;
      } else {
        launch = lower_gemm(node, in, {out});
      }
      launch(s);  // the algorithm query and cuBLASLt's first-launch work, outside the timing
      REPLAY_CUDA(cudaStreamSynchronize(s));
      Timing t = time_cold(launch, s, l2, rule);
      if (t.samples_us.empty()) {
        // Every sample ran below the clock floor (an 8192^3 float8 GEMM can hold the H200 at its
        // power limit for its whole duration): what the GPU sustains is that class's ceiling, so
        // it is timed again without the floor, and the ceiling says so.
        // (A floor of ~0 rather than 0 keeps the clock probed, so the note can say at what clock.)
        StopRule unfiltered = rule;
        unfiltered.min_clock_ratio = 1e-9;
        p.note = "every sample below " + std::to_string(static_cast<int>(t.clock_floor_mhz)) +
                 " MHz (" + std::to_string(t.discarded_slow_clock) +
                 " dropped): timed without the clock floor";
        t = time_cold(launch, s, l2, unfiltered);
        if (!t.sm_mhz.empty())
          p.note += ", at a median SM clock of " +
                    std::to_string(static_cast<int>(summarize(t.sm_mhz).median)) +
                    " MHz (regions timed at the floor's clocks can exceed 100 % of this SOL)";
      }
      if (t.samples_us.empty()) throw std::runtime_error("no sample kept");
      const SampleStats sm = summarize(t.samples_us);
      p.median_us = sm.median;
      p.best_us = sm.min;
      p.tflops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) *
                 static_cast<double>(p.k) / (p.best_us * 1e6);
    } catch (const std::exception& e) {
      // A non-sticky error (cudaMalloc out of memory) must not stay pending for the next launch
      // check to blame on an unrelated kernel; a sticky one (the context is broken) ends the run.
      (void)cudaGetLastError();
      if (cudaDeviceSynchronize() != cudaSuccess && cudaDeviceSynchronize() != cudaSuccess) throw;
      p.error = e.what();
      p.median_us = p.best_us = p.tflops = 0;
    }
    out.push_back(std::move(p));
  }
  return out;
}

void set_matmul_ceilings(const std::vector<MatmulPeak>& peaks, Ceilings& c) {
  std::string measured, failed;
  for (const MatmulPeak& p : peaks) {
    if (p.tflops > 0) {
      c.matmul_tflops[p.cls] = p.tflops;
      measured += (measured.empty() ? "" : ", ") + p.cls + " " + std::to_string(p.m) + "^3" +
                  (p.algo.empty() ? "" : " [" + p.algo + "]") +
                  (p.note.empty() ? "" : " (" + p.note + ")");
    } else {
      failed += "; " + p.cls + " not measured: " + p.error;
    }
  }
  c.matmul_problem =
      "square GEMMs through cuBLASLt (" + measured +
      "; mat2 column-major, float8 with a bfloat16 output; the algorithm timed among the "
      "heuristic's candidates as the fusions' GEMMs choose it, float64 the heuristic's first), "
      "cold L2, fastest sample" +
      failed;
}

}  // namespace replay
