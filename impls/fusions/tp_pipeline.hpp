// What the chunked tensor-parallel pipelines of ag_matmul and matmul_rs share (issue 31): the GEMM
// of one chunk of rows (bf16 / f16 mm, or float8 _scaled_mm with tensorwise or rowwise scales,
// through cuBLASLt: impls/eager/gemm.hpp), the check that a run can host a pipeline at all, and
// NCCL's byte-wise send/recv of one chunk. The peer layer (CUDA IPC, signals, watchdog) is
// impls/cuda/ipc/peer_exchange.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "impls/cuda/dist_context.hpp"
#include "impls/cuda/ipc/peer_exchange.hpp"
#include "impls/eager/kernels.hpp"
#include "impls/fusions/binding.hpp"

namespace replay::tp {

using ipc::PipelineFault;
using ipc::Transport;

/// The GEMM both pipelines run per chunk: d[rows, N] = a[rows, K] @ b[K, N] (mm), or
/// (a * scale_a) @ (b * scale_b) (_scaled_mm), float32 accumulation, rounded once to out_dtype.
struct ChunkGemm {
  DType a_dtype = DType::kBFloat16;  ///< a's dtype: bfloat16 / float16 (mm) or float8 (scaled)
  DeviceTensor b;                    ///< [K, N]: 16-bit any row/column-major; float8 column-major
  DType out_dtype = DType::kBFloat16;
  int64_t K = 0, N = 0;
  bool scaled = false;             ///< _scaled_mm
  const float* scale_a = nullptr;  ///< float32: one element (tensorwise) or [M] (rowwise)
  const float* scale_b = nullptr;  ///< float32: one element or [N]
  bool rowwise = false;            ///< scale_a [M] and scale_b [N] (cuBLASLt's outer-vector mode)
  bool fast_accum = false;         ///< _scaled_mm's use_fast_accum
};

/// Why cuBLASLt cannot run `g` on chunks of `rows` rows ("" when it can): for float8, what
/// scaled_matmul_unsupported says of the layout (b not column-major, K or N not a multiple of 16,
/// ...); for mm, a dtype other than bfloat16 / float16 or d not of a's dtype.
/// Rowwise scales of chunks of `rows` rows start at row0 * 4 bytes into scale_a: unless rows is a
/// multiple of 4 some would not be 16-byte aligned, which cuBLASLt's outer-vector scales are not
/// known to accept (only aligned ones were run): refused then.
std::string chunk_gemm_unsupported(const ChunkGemm& g, int64_t rows);

/// The launch of the GEMM of one chunk: rows [row0, row0 + rows) of the [M, K] activation whose
/// chunk starts at `a` (row-major, row stride K), into the row-major [rows, N] at `d`. A rowwise
/// scale_a is read from row0 on. `name` names it in errors. The algorithm is chosen now (once per
/// problem and process). Throws RuntimeFailure when cuBLASLt has no algorithm for it.
EagerLaunch prepare_chunk_gemm(const std::string& name, const ChunkGemm& g, const void* a, void* d,
                               int64_t row0, int64_t rows);

/// Why a run cannot host a chunked pipeline of `world_size` ranks over `transport` ("" when it
/// can): a single-process run (dist null), a run of another world size, no NCCL communicator for
/// kNccl (ranks sharing a GPU: DistContext::no_nccl_why).
std::string dist_unsupported(const DistContext* dist, int64_t world_size, Transport transport);

/// Why the NCCL `baseline` of a region whose `collective` ("all-gather") spans `world_size` ranks
/// cannot bind ("" when it can): a single process, no NCCL communicator (DistContext::no_nccl_why),
/// a run of another world size.
std::string nccl_baseline_unsupported(const DistContext* dist, int64_t world_size,
                                      const std::string& collective);

/// The weight [K, N] of a region's GEMM as bound: value `b`, or, where the region claims the
/// weight's transposes, the 2-D graph input `transpose_of` read with its strides swapped (-1:
/// none).
BoundTensor bound_weight(BindContext& ctx, int b, int transpose_of);

/// The transport of a chunked-pipeline variant: "optimized" CUDA IPC, "nccl_chunked" NCCL send /
/// recv; nullopt for any other name.
std::optional<Transport> pipeline_transport(std::string_view variant);

/// NCCL, on `s`, as one group on d.comm: send `send_bytes` bytes at `send` to rank `to` and
/// receive `recv_bytes` at `recv` from rank `from` (either skipped when its peer is < 0); checked
/// and handed to d.watch by nccl_check (impls/eager/collective.hpp) as `what`. Throws
/// RuntimeFailure naming the rank, `what` and the NCCL error.
void nccl_send_recv(const DistContext& d, cudaStream_t s, const void* send, size_t send_bytes,
                    int to, void* recv, size_t recv_bytes, int from, const std::string& what);

/// The values of a region's GEMM (mm or _scaled_mm node `mm`): b [K, N], the scales (or -1), the
/// output value (its dtype is the GEMM's), the sizes.
struct GemmValues {
  int mm = -1, b = -1, scale_a = -1, scale_b = -1, out = -1;
  bool scaled = false;
  int64_t M = 0, K = 0, N = 0;
  /// The 2-D graph input that b is the transpose of, when the region claims the permute (b is
  /// then not bound: the input is read with its strides swapped), or -1.
  int b_transpose_of = -1;
};
/// Fills `g` from the bound tensors of `v` (ctx.tensor), with `a_dtype` the activation's dtype.
/// Returns why it cannot ("" when it can): scales that are neither one float32 element nor a
/// unit-stride vector of M (scale_a) / N (scale_b) elements, mixed tensorwise and rowwise scales.
std::string bind_chunk_gemm(const Graph& graph, BindContext& ctx, const GemmValues& v,
                            DType a_dtype, ChunkGemm& g);
/// The contiguous tensor of `value` as a pointer: "" or why not (not contiguous, not `numel`
/// elements).
std::string contiguous_ptr(const Graph& graph, BindContext& ctx, int value, int64_t numel,
                           void*& ptr);

/// An owned CUDA event without timing (move-only).
class Event {
 public:
  Event();
  ~Event();
  Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  /// Records on `from` and makes `to` wait for it.
  void join(cudaStream_t from, cudaStream_t to);
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace replay::tp
