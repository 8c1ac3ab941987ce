// ag_matmul's chunked pipeline: CUDA IPC + copy engines, or NCCL send/recv (pipeline.hpp).
#include "impls/fusions/ag_matmul/pipeline.hpp"

#include <stdexcept>

namespace replay::ag_matmul {

std::string Pipeline::unsupported(const DistContext* dist, tp::Transport t,
                                  const PipelineOperands& op) {
  if (std::string why = tp::dist_unsupported(dist, dist ? dist->world_size : 0, t); !why.empty())
    return why;
  if (dist->world_size < 2) return "a chunked all-gather needs 2 ranks or more";
  if (op.M % dist->world_size != 0)
    return "the gathered rows " + std::to_string(op.M) + " are not a multiple of the world size " +
           std::to_string(dist->world_size);
  return tp::chunk_gemm_unsupported(op.gemm, op.M / dist->world_size);
}

Pipeline::Pipeline(const DistContext& dist, tp::Transport t, const PipelineOperands& op,
                   tp::PipelineFault fault)
    : rank_(dist.rank), n_(dist.world_size), transport_(t), fault_(fault), op_(op) {
  if (std::string why = unsupported(&dist, t, op); !why.empty()) throw std::invalid_argument(why);
  m_ = op.M / n_;
  chunk_bytes_ = static_cast<size_t>(m_ * op.gemm.K) * dtype_size(op.gemm.a_dtype);
  char* gathered = nullptr;
  if (t == tp::Transport::kIpc) {
    ex_ = std::make_unique<ipc::PeerExchange>(dist, n_ * chunk_bytes_, "ag_matmul", fault);
    gathered = static_cast<char*>(ex_->data(rank_));
  } else {
    dist_ = dist;
    gathered_ = DeviceBuffer(n_ * chunk_bytes_);
    gathered = static_cast<char*>(gathered_.get());
    REPLAY_CUDA(cudaStreamCreateWithFlags(&nccl_stream_, cudaStreamNonBlocking));
  }
  const size_t out_row_bytes = op.gemm.N * dtype_size(op.gemm.out_dtype);
  arrived_.reserve(n_);
  for (int c = 0; c < n_; ++c) {
    arrived_.emplace_back();
    const void* a = c == rank_ ? op.x : gathered + c * chunk_bytes_;
    void* d = static_cast<char*>(op.out) + c * m_ * out_row_bytes;
    gemm_.push_back(
        tp::prepare_chunk_gemm("ag_matmul chunk " + std::to_string(c), op.gemm, a, d, c * m_, m_));
  }
}

Pipeline::~Pipeline() {
  if (nccl_stream_) cudaStreamDestroy(nccl_stream_);
}

const void* Pipeline::chunk_src(int p) const {
  // kWrongPeer: rank p's rows copied from the next rank's shard (this rank's own, read locally,
  // when that is the next).
  const int q = fault_ == tp::PipelineFault::kWrongPeer ? (p + 1) % n_ : p;
  return static_cast<const char*>(ex_->data(q)) + q * chunk_bytes_;
}

void Pipeline::launch(cudaStream_t stream) {
  const bool ipc = transport_ == tp::Transport::kIpc;
  if (ipc) ex_->begin(stream);
  cudaStream_t cs = ipc ? ex_->copy_stream() : nccl_stream_;
  fork_.join(stream, cs);
  gemm_[rank_](stream);  // the own rows need no communication
  char* gathered = ipc ? static_cast<char*>(ex_->data(rank_)) : static_cast<char*>(gathered_.get());
  const std::string own = "rank " + std::to_string(rank_) + "'s shard";
  if (ipc) {
    // Publish the own shard in this rank's IPC buffer once every peer has read the previous one.
    for (int p = 0; p < n_; ++p)
      if (p != rank_) ex_->wait_done_previous(cs, p, own);
    REPLAY_CUDA(cudaMemcpyAsync(gathered + rank_ * chunk_bytes_, op_.x, chunk_bytes_,
                                cudaMemcpyDeviceToDevice, cs));
    for (int p = 0; p < n_; ++p)
      if (p != rank_) ex_->signal_ready(cs, p);
  }
  for (int s = 1; s < n_; ++s) {
    const int p = (rank_ + s) % n_;
    void* dst = gathered + p * chunk_bytes_;
    if (ipc) {
      ex_->wait_ready(cs, p,
                      "chunk " + std::to_string(p) + " (rows " + std::to_string(p * m_) + ".." +
                          std::to_string((p + 1) * m_ - 1) + ", rank " + std::to_string(p) +
                          "'s shard)");
      if (!(fault_ == tp::PipelineFault::kDropChunk && s == 1))
        REPLAY_CUDA(cudaMemcpyAsync(dst, chunk_src(p), chunk_bytes_, cudaMemcpyDeviceToDevice, cs));
      ex_->signal_done(cs, p);
    } else {
      tp::nccl_send_recv(dist_, cs, op_.x, chunk_bytes_, (rank_ - s + n_) % n_, dst, chunk_bytes_,
                         p, "ag_matmul nccl_chunked step " + std::to_string(s));
    }
    arrived_[p].join(cs, stream);
    gemm_[p](stream);
  }
  join_.join(cs, stream);
}

void Pipeline::synchronize(cudaStream_t stream) {
  if (ex_) {
    ex_->synchronize(stream);
  } else {
    REPLAY_CUDA(cudaStreamSynchronize(stream));
  }
}

}  // namespace replay::ag_matmul
