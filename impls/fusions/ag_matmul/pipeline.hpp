// ag_matmul's chunked pipeline (issue 31): all-gather of the row shards overlapped with the GEMM,
// one chunk per rank's shard (PyTorch's fused_all_gather_matmul, Flux's AG+GEMM).
//
// Rank r of n, shard x_r [m, K], weight shard b [K, N], gathered [M = n m, K], out [M, N] (and
// more weights beside b, each with its out; shards of `lead` row blocks placed block by block):
//   ctx.stream:   GEMM of chunk r (straight from x_r)            then, for p = r+1, r+2, ...
//                 (mod n: ring order starting after the own shard): [kIpc] wait ready from p;
//                 GEMM of chunk p (read where it landed: slot p of this rank's IPC buffer);
//                 [gathered written: its rows of p <- slot p]; done to p.  [kNccl] wait for
//                 chunk p's arrival (event); GEMM of chunk p (rows p m .. of the gathered buffer)
//   copy stream:  [kIpc]  push: for q = r-1, r-2, ... (the order in which the peers need it):
//                 wait done from q (previous epoch); x_r -> slot r of q's IPC buffer (the copy
//                 engines, through CUDA IPC, straight from x_r: a local staging copy would wait
//                 for the SMs the GEMM holds); ready to q
//                 [kNccl] for step s = 1 .. n-1: one group {send x_r to r - s, recv the shard of
//                 p = r + s into gathered[p]}; event -> ctx.stream
// The copy stream forks from ctx.stream at the start and joins it at the end, so events around
// the launch on ctx.stream time all of it. Output rows are written in place, chunk by chunk.
// Bytes per chunk: m K elements of the activation's dtype (4096 x 4096 bf16: 32 MiB); each rank
// copies (n - 1) of them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "impls/cuda/cuda_check.hpp"
#include "impls/fusions/tp_pipeline.hpp"

namespace replay::ag_matmul {

/// One more GEMM of the same gathered activation (same K and activation dtype): Llama's w3 beside
/// w1.
struct ExtraGemm {
  tp::ChunkGemm gemm;
  void* out = nullptr;  ///< [M, gemm.N] row-major, gemm.out_dtype
};

/// Device buffers of one rank's region.
struct PipelineOperands {
  const void* x = nullptr;  ///< [m, K] this rank's shard, row-major, gemm.a_dtype
  tp::ChunkGemm gemm;       ///< the weight, scales and sizes (K, N)
  void* out = nullptr;      ///< [M, N] row-major, gemm.out_dtype
  int64_t M = 0;            ///< gathered rows: world_size * m
  /// Blocks per shard (tp_match.hpp): the shard is `lead` blocks of m / lead rows, and block l of
  /// rank p is rows (l n + p) m / lead of the gathered [M, K] (the split/cat form of a gather
  /// along dim d > 0; 1 for a gather along dim 0).
  int64_t lead = 1;
  std::vector<ExtraGemm> more;  ///< further GEMMs of the gathered activation
  /// [M, K] row-major buffers that receive the gathered activation (the graph reads it outside
  /// the region), or none.
  std::vector<void*> gathered;
};
class Pipeline {
 public:
  /// Why the pipeline cannot run (""): dist_unsupported, M not a multiple of the world size, or
  /// what cuBLASLt says of the chunk GEMM. Needs no collective call.
  static std::string unsupported(const DistContext* dist, tp::Transport t,
                                 const PipelineOperands& op);
  /// Collective (kIpc: the IPC handles are exchanged): every rank constructs its pipeline in the
  /// same order. Prepares the chunk GEMMs (cuBLASLt algorithms chosen now). Throws what
  /// unsupported() would say as std::invalid_argument, RuntimeFailure on CUDA errors.
  Pipeline(const DistContext& dist, tp::Transport t, const PipelineOperands& op,
           tp::PipelineFault fault = tp::PipelineFault::kNone);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;
  /// Enqueues one all-gather matmul on `stream` (see the file comment). Throws RuntimeFailure
  /// when an earlier launch timed out (the error names the rank and the chunk).
  void launch(cudaStream_t stream);
  /// Host: waits for the launches on `stream`; throws the watchdog's timeout error (kIpc).
  void synchronize(cudaStream_t stream);

 private:
  /// kIpc: where rank p's shard lands in this rank's IPC buffer (kWrongPeer: the next rank's).
  const char* ipc_slot(int p) const;
  /// The n-1 row blocks of rank p's chunk into dst_ (lead blocks, pitch n blocks), on `s`.
  void place_chunk(cudaStream_t s, void* dst_block0, const void* src) const;

  int rank_ = 0, n_ = 0;
  tp::Transport transport_;
  tp::PipelineFault fault_;
  DistContext dist_;  // kNccl: the communicator, its watch and timeout
  PipelineOperands op_;
  int64_t m_ = 0;
  size_t chunk_bytes_ = 0, block_bytes_ = 0;
  std::unique_ptr<ipc::PeerExchange> ex_;  // kIpc: slot p of its data area receives x_p
  DeviceBuffer recv_;                      // kNccl: [M, K] when no gathered buffer is given
  char* dst_ = nullptr;                    // the gathered [M, K]: op.gathered[0], recv_ or none
  DeviceBuffer staging_;                   // kNccl with lead > 1: the shards as received
  cudaStream_t nccl_stream_ = nullptr;     // kNccl (owned)
  std::vector<std::vector<EagerLaunch>> gemm_;  // by chunk (= source rank): every GEMM, block
  std::vector<tp::Event> arrived_;              // by chunk
  tp::Event fork_, join_;
};

}  // namespace replay::ag_matmul
