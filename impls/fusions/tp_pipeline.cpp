// Shared parts of the chunked tensor-parallel pipelines (tp_pipeline.hpp).
#include "impls/fusions/tp_pipeline.hpp"

#include <nccl.h>

#include "impls/cuda/cuda_check.hpp"
#include "impls/eager/collective.hpp"
#include "impls/eager/gemm.hpp"

namespace replay::tp {
namespace {

DeviceTensor matrix(const void* p, int64_t rows, int64_t cols, DType t) {
  return device_tensor(const_cast<void*>(p), TensorMeta{{rows, cols}, {cols, 1}, t});
}

ScaledMatmulOperands scaled_operands(const ChunkGemm& g, const void* a, void* d, int64_t row0,
                                     int64_t rows) {
  ScaledMatmulOperands m;
  m.a = matrix(a, rows, g.K, g.a_dtype);
  m.b = g.b;
  m.d = matrix(d, rows, g.N, g.out_dtype);
  m.scale_a = g.rowwise ? g.scale_a + row0 : g.scale_a;
  m.scale_b = g.scale_b;
  m.rowwise = g.rowwise;
  m.fast_accum = g.fast_accum;
  return m;
}

}  // namespace

std::string chunk_gemm_unsupported(const ChunkGemm& g, int64_t rows) {
  if (g.scaled) {
    // Layout checks only: any 16-byte-aligned address stands in for the buffers.
    static const float kScale = 1;
    alignas(256) static const char kDummy[256] = {};
    ScaledMatmulOperands m = scaled_operands(g, kDummy, const_cast<char*>(kDummy), 0, rows);
    m.scale_a = m.scale_b = &kScale;
    if (g.rowwise && rows % 4 != 0)
      return "rowwise scales of chunks of " + std::to_string(rows) +
             " rows would start off a 16-byte boundary (a multiple of 4 rows keeps them aligned)";
    return scaled_matmul_unsupported(m);
  }
  if (g.a_dtype != DType::kBFloat16 && g.a_dtype != DType::kFloat16)
    return "the chunked GEMM takes bfloat16 or float16 operands, not " +
           std::string(dtype_name(g.a_dtype));
  if (g.out_dtype != g.a_dtype)
    return "the chunked GEMM writes its operands' dtype, not " +
           std::string(dtype_name(g.out_dtype));
  if (g.b.dtype != g.a_dtype) return "the weight's dtype differs from the activation's";
  return "";
}

EagerLaunch prepare_chunk_gemm(const std::string& name, const ChunkGemm& g, const void* a, void* d,
                               int64_t row0, int64_t rows) {
  if (g.scaled) {
    PreparedMatmul pm = prepare_scaled_matmul(name, scaled_operands(g, a, d, row0, rows));
    if (!pm.launch) throw RuntimeFailure(name + ": " + pm.unsupported);
    return pm.launch;
  }
  MatmulOperands m;
  m.a = matrix(a, rows, g.K, g.a_dtype);
  m.b = g.b;
  m.d = matrix(d, rows, g.N, g.out_dtype);
  return prepare_matmul(name, m);
}

std::string contiguous_ptr(const Graph& graph, BindContext& ctx, int value, int64_t numel,
                           void*& ptr) {
  const BoundTensor t = ctx.tensor(value);
  if (!t.layout.is_contiguous() || t.layout.numel() != numel)
    return "'" + graph.values[value].name + "' " + t.layout.str() +
           " is not a contiguous tensor of " + std::to_string(numel) + " elements";
  ptr = t.ptr;
  return "";
}

std::string nccl_baseline_unsupported(const DistContext* dist, int64_t world_size,
                                      const std::string& collective) {
  if (!dist) return "the NCCL baseline needs one process per rank (a multi-process run)";
  if (!dist->comm) return "no NCCL communicator: " + dist->no_nccl_why;
  if (dist->world_size != world_size)
    return "the " + collective + " spans " + std::to_string(world_size) + " ranks, the run " +
           std::to_string(dist->world_size);
  return "";
}

BoundTensor bound_weight(BindContext& ctx, int b, int transpose_of) {
  BoundTensor w = ctx.tensor(transpose_of >= 0 ? transpose_of : b);
  if (transpose_of >= 0 && w.layout.shape.size() == 2) {
    std::swap(w.layout.shape[0], w.layout.shape[1]);
    std::swap(w.layout.stride[0], w.layout.stride[1]);
  }
  return w;
}

std::string bind_chunk_gemm(const Graph& graph, BindContext& ctx, const GemmValues& v,
                            DType a_dtype, ChunkGemm& g) {
  g.a_dtype = a_dtype;
  const BoundTensor b = bound_weight(ctx, v.b, v.b_transpose_of);
  if (b.layout.shape.size() != 2) return "the weight '" + graph.values[v.b].name + "' is not 2-D";
  g.b = device_tensor(b.ptr, b.layout);
  g.out_dtype = graph.meta(v.out).dtype;
  g.K = v.K;
  g.N = v.N;
  g.scaled = v.scaled;
  if (!v.scaled) return "";
  g.fast_accum = graph.nodes[v.mm].flag;
  // One float32 element (tensorwise), or a unit-stride vector of `n` (rowwise).
  auto scale = [&](int value, int64_t n, const float*& ptr, bool& rowwise) -> std::string {
    const BoundTensor t = ctx.tensor(value);
    const int64_t k = t.layout.numel();
    bool unit = true;
    for (size_t d = 0; d < t.layout.shape.size(); ++d)
      if (t.layout.shape[d] > 1 && t.layout.stride[d] != 1) unit = false;
    if (t.layout.dtype != DType::kFloat32 || !(k == 1 || (k == n && unit)))
      return "scale '" + graph.values[value].name + "' " + t.layout.str() +
             " is neither one float32 element nor a unit-stride vector of " + std::to_string(n);
    ptr = static_cast<const float*>(t.ptr);
    rowwise = k == n && n > 1;
    return "";
  };
  bool row_a = false, row_b = false;
  if (std::string why = scale(v.scale_a, v.M, g.scale_a, row_a); !why.empty()) return why;
  if (std::string why = scale(v.scale_b, v.N, g.scale_b, row_b); !why.empty()) return why;
  if (row_a != row_b) return "tensorwise and rowwise scales mixed in one _scaled_mm";
  g.rowwise = row_a;
  return "";
}

std::optional<Transport> pipeline_transport(std::string_view variant) {
  if (variant == "optimized") return Transport::kIpc;
  if (variant == "nccl_chunked") return Transport::kNccl;
  return std::nullopt;
}

std::string dist_unsupported(const DistContext* dist, int64_t world_size, Transport transport) {
  if (!dist)
    return "needs a multi-process run, one process per rank (torchrun, mpirun, srun or `replay "
           "launch`): this run is a single process";
  if (dist->world_size != world_size)
    return "the region's group has " + std::to_string(world_size) + " ranks, the run " +
           std::to_string(dist->world_size);
  if (transport == Transport::kNccl && !dist->comm)
    return "needs an NCCL communicator, and this run has none: " +
           (dist->no_nccl_why.empty() ? std::string("(no reason given)") : dist->no_nccl_why);
  if (transport == Transport::kIpc && !dist->all_gather)
    return "needs the rendezvous's all_gather to exchange CUDA IPC handles";
  return "";
}

void nccl_send_recv(const DistContext& d, cudaStream_t s, const void* send, size_t send_bytes,
                    int to, void* recv, size_t recv_bytes, int from, const std::string& what) {
  ncclResult_t first = ncclGroupStart();
  if (first == ncclSuccess && to >= 0) first = ncclSend(send, send_bytes, ncclUint8, to, d.comm, s);
  if (first == ncclSuccess && from >= 0)
    first = ncclRecv(recv, recv_bytes, ncclUint8, from, d.comm, s);
  const ncclResult_t end = ncclGroupEnd();
  nccl_check(d, first != ncclSuccess ? first : end, s, what);
}

Event::Event() {
  REPLAY_CUDA(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming));
}

Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}

void Event::join(cudaStream_t from, cudaStream_t to) {
  REPLAY_CUDA(cudaEventRecord(e_, from));
  REPLAY_CUDA(cudaStreamWaitEvent(to, e_, 0));
}

}  // namespace replay::tp
