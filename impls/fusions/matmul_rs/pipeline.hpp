// matmul_rs's chunked pipeline (issue 31): the GEMM's partial product scattered by rows and summed
// across the ranks while the GEMM still runs (PyTorch's fused_matmul_reduce_scatter, Flux's
// GEMM+RS), one chunk of m = M / n rows per destination rank.
//
// Rank r of n, activation a [M, K] (K sharded), weight shard b [K, N], partials P [M, N] (the
// output dtype), out [m, N] = the rows r m .. r m + m - 1 of the sum over ranks:
//   ctx.stream:   for j = r+1, r+2, ... (mod n), then r: [kIpc: wait done from j (previous
//                 epoch)] GEMM of rows j m .. into P[j], piece by piece (pieces(): row blocks of
//                 the chunk), [kIpc: ready to j after each piece | kNccl: event -> the NCCL stream
//                 after the chunk]; own chunk last (it travels nowhere); after the join, one
//                 kernel sums the n partials of chunk r in float32 in rank order and rounds once
//                 (avg: / n)
//   copy stream:  [kIpc]  for p = r-1, r-2, ... (the order the peers compute chunk r), piece by
//                 piece: wait ready from p; recv[p] <- p's P[r] (the copy engines, CUDA IPC);
//                 done to p after the chunk. Pieces start the copies one piece's GEMM after the
//                 chunk's GEMM starts, instead of after all of it.
//                 [kNccl] for step s: one group {send P[r+s] to r+s, recv from r-s into recv[r-s]}
// Deterministic: every chunk's partials are summed in the same order whatever arrives first.
// Bytes per chunk: m N elements of the output dtype; each rank copies n - 1 of them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "impls/cuda/cuda_check.hpp"
#include "impls/fusions/tp_pipeline.hpp"

namespace replay::matmul_rs {

/// Device buffers of one rank's region.
struct PipelineOperands {
  const void* a = nullptr;  ///< [M, K] the activation, row-major, gemm.a_dtype
  tp::ChunkGemm gemm;       ///< the weight, scales and sizes (K, N)
  void* out = nullptr;      ///< [M / world_size, N] row-major, gemm.out_dtype
  int64_t M = 0;            ///< rows of the partial product
  bool avg = false;         ///< reduce op "avg" (else "sum")
  /// Blocks per destination (tp_match.hpp): rank p's rows are, for l < lead, the block of
  /// M / (n lead) rows at row (l n + p) M / (n lead) of the partial product (the split/cat form
  /// of a scatter along dim d > 0; 1 for dim 0). Its result holds them in l order.
  int64_t lead = 1;
};

class Pipeline {
 public:
  /// Why the pipeline cannot run (""): dist_unsupported, M not a multiple of the world size, an
  /// output dtype the sum kernel does not take, what cuBLASLt says of the chunk GEMM.
  static std::string unsupported(const DistContext* dist, tp::Transport t,
                                 const PipelineOperands& op);
  /// Collective for kIpc (see ag_matmul::Pipeline). Throws std::invalid_argument with what
  /// unsupported() says, RuntimeFailure on CUDA errors.
  Pipeline(const DistContext& dist, tp::Transport t, const PipelineOperands& op,
           tp::PipelineFault fault = tp::PipelineFault::kNone);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  /// Enqueues one matmul + reduce-scatter on `stream`. Throws RuntimeFailure when an earlier
  /// launch timed out (the error names the rank and the chunk).
  void launch(cudaStream_t stream);
  /// Host: waits for the launches on `stream`; throws the watchdog's timeout error (kIpc).
  void synchronize(cudaStream_t stream);

  /// Pieces of one chunk, each its own GEMM and its own ready signal: the `lead` row blocks, or
  /// (lead 1) the largest of 4, 2, 1 whose pieces keep >= 32 rows, a multiple of 16 (the tests' m =
  /// 64 chunks go in 2 pieces, 8192 rows in 4).
  static int pieces(int64_t m, int64_t lead);

 private:
  char* partial(int chunk) const;

  int rank_ = 0, n_ = 0;
  tp::Transport transport_;
  tp::PipelineFault fault_;
  DistContext dist_;  // kNccl: the communicator, its watch and timeout
  PipelineOperands op_;
  int64_t m_ = 0;
  size_t chunk_bytes_ = 0;
  int pieces_ = 1;                         // per chunk
  std::unique_ptr<ipc::PeerExchange> ex_;  // kIpc: the partials are its data area
  DeviceBuffer partials_;                  // kNccl
  DeviceBuffer recv_;                      // [n, m, N]: the peers' partials of this rank's chunk
  cudaStream_t nccl_stream_ = nullptr;     // kNccl (owned)
  std::vector<std::vector<EagerLaunch>> gemm_;  // by chunk (= destination rank), block
  std::vector<tp::Event> computed_;             // by chunk (kNccl)
  tp::Event fork_, join_;
};

}  // namespace replay::matmul_rs
