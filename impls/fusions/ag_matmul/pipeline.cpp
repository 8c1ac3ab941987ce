// ag_matmul's chunked pipeline: CUDA IPC + copy engines, or NCCL send/recv (pipeline.hpp).
#include "impls/fusions/ag_matmul/pipeline.hpp"

#include <stdexcept>

namespace replay::ag_matmul {

std::string Pipeline::unsupported(const DistContext* dist, tp::Transport t,
                                  const PipelineOperands& op) {
  if (std::string why = tp::dist_unsupported(dist, dist ? dist->world_size : 0, t); !why.empty())
    return why;
  if (dist->world_size < 2) return "a chunked all-gather needs 2 ranks or more";
  if (op.lead < 1 || op.M % (dist->world_size * op.lead) != 0)
    return "the gathered rows " + std::to_string(op.M) + " are not a multiple of the world size " +
           std::to_string(dist->world_size) + " times the blocks per shard " +
           std::to_string(op.lead);
  const int64_t rows = op.M / dist->world_size / op.lead;
  if (std::string why = tp::chunk_gemm_unsupported(op.gemm, rows); !why.empty()) return why;
  for (const ExtraGemm& e : op.more) {
    if (e.gemm.K != op.gemm.K || e.gemm.a_dtype != op.gemm.a_dtype)
      return "the GEMMs of one gathered activation differ in K or in the activation's dtype";
    if (std::string why = tp::chunk_gemm_unsupported(e.gemm, rows); !why.empty()) return why;
  }
  return "";
}

Pipeline::Pipeline(const DistContext& dist, tp::Transport t, const PipelineOperands& op,
                   tp::PipelineFault fault)
    : rank_(dist.rank), n_(dist.world_size), transport_(t), fault_(fault), op_(op) {
  if (std::string why = unsupported(&dist, t, op); !why.empty()) throw std::invalid_argument(why);
  m_ = op.M / n_;
  const int64_t rows = m_ / op.lead;  // rows per block
  const size_t es = dtype_size(op.gemm.a_dtype);
  chunk_bytes_ = static_cast<size_t>(m_ * op.gemm.K) * es;
  block_bytes_ = static_cast<size_t>(rows * op.gemm.K) * es;
  if (t == tp::Transport::kIpc) {
    ex_ = std::make_unique<ipc::PeerExchange>(dist, n_ * chunk_bytes_, "ag_matmul", fault);
  } else {
    dist_ = dist;
    if (op.lead > 1) staging_ = DeviceBuffer(n_ * chunk_bytes_);
    REPLAY_CUDA(cudaStreamCreateWithFlags(&nccl_stream_, cudaStreamNonBlocking));
  }
  if (op.gathered.empty() && !ex_) recv_ = DeviceBuffer(n_ * chunk_bytes_);
  dst_ = static_cast<char*>(op.gathered.empty() ? recv_.get() : op.gathered[0]);
  std::vector<std::pair<const tp::ChunkGemm*, void*>> gemms{{&op.gemm, op.out}};
  for (const ExtraGemm& e : op.more) gemms.emplace_back(&e.gemm, e.out);
  arrived_.reserve(n_);
  for (int c = 0; c < n_; ++c) {
    arrived_.emplace_back();
    gemm_.emplace_back();
    for (size_t j = 0; j < gemms.size(); ++j)
      for (int64_t l = 0; l < op.lead; ++l) {
        // Block l of rank c: rows (l n + c) rows .. of the gathered activation; the own shard's
        // straight from x, a peer's where it lands (kIpc: its slot, the shard as it is).
        const int64_t row0 = (l * n_ + c) * rows;
        const void* a = c == rank_ ? static_cast<const char*>(op.x) + l * block_bytes_
                        : ex_      ? ipc_slot(c) + l * block_bytes_
                                   : dst_ + row0 * op.gemm.K * es;
        const tp::ChunkGemm& g = *gemms[j].first;
        void* d = static_cast<char*>(gemms[j].second) + row0 * g.N * dtype_size(g.out_dtype);
        gemm_[c].push_back(
            tp::prepare_chunk_gemm("ag_matmul chunk " + std::to_string(c) +
                                       (gemms.size() > 1 ? " GEMM " + std::to_string(j) : "") +
                                       (op.lead > 1 ? " block " + std::to_string(l) : ""),
                                   g, a, d, row0, rows));
      }
  }
}

Pipeline::~Pipeline() {
  if (nccl_stream_) cudaStreamDestroy(nccl_stream_);
}

const char* Pipeline::ipc_slot(int p) const {
  // kWrongPeer: rank p's rows read from the next rank's slot (never written when that is this
  // rank: zeros).
  const int q = fault_ == tp::PipelineFault::kWrongPeer ? (p + 1) % n_ : p;
  return static_cast<const char*>(ex_->data(rank_)) + q * chunk_bytes_;
}

void Pipeline::place_chunk(cudaStream_t s, void* dst_block0, const void* src) const {
  if (op_.lead == 1) {
    REPLAY_CUDA(cudaMemcpyAsync(dst_block0, src, chunk_bytes_, cudaMemcpyDeviceToDevice, s));
  } else {
    REPLAY_CUDA(cudaMemcpy2DAsync(dst_block0, n_ * block_bytes_, src, block_bytes_, block_bytes_,
                                  op_.lead, cudaMemcpyDeviceToDevice, s));
  }
}

void Pipeline::launch(cudaStream_t stream) {
  const bool ipc = transport_ == tp::Transport::kIpc;
  if (ipc) ex_->begin(stream);
  cudaStream_t cs = ipc ? ex_->copy_stream() : nccl_stream_;
  fork_.join(stream, cs);
  for (EagerLaunch& g : gemm_[rank_]) g(stream);  // the own rows need no communication
  auto rows_of = [&](int p) { return dst_ + p * block_bytes_; };  // block 0 of rank p
  auto chunk_name = [&](int p) {
    return "chunk " + std::to_string(p) + " (rows " + std::to_string(p * m_) + ".." +
           std::to_string((p + 1) * m_ - 1) + ", rank " + std::to_string(p) + "'s shard)";
  };
  if (ipc) {
    // Push x_r into slot r of each peer's buffer, in the order the peers need it (q = r - 1
    // first), once q has read the previous launch's.
    for (int s = 1; s < n_; ++s) {
      const int q = (rank_ - s + n_) % n_;
      ex_->wait_done_previous(cs, q, "rank " + std::to_string(rank_) + "'s shard");
      if (!(fault_ == tp::PipelineFault::kDropChunk && s == 1))
        REPLAY_CUDA(cudaMemcpyAsync(static_cast<char*>(ex_->data(q)) + rank_ * chunk_bytes_, op_.x,
                                    chunk_bytes_, cudaMemcpyDeviceToDevice, cs));
      ex_->signal_ready(cs, q);
    }
  }
  if (!op_.gathered.empty()) place_chunk(cs, rows_of(rank_), op_.x);  // the graph reads it all
  for (int s = 1; s < n_; ++s) {
    const int p = (rank_ + s) % n_;
    if (ipc) {
      ex_->wait_ready(stream, p, chunk_name(p));
      for (EagerLaunch& g : gemm_[p]) g(stream);
      if (!op_.gathered.empty()) place_chunk(stream, rows_of(p), ipc_slot(p));
      ex_->signal_done(stream, p);
      continue;
    }
    void* recv = op_.lead == 1 ? static_cast<void*>(rows_of(p))
                               : static_cast<char*>(staging_.get()) + p * chunk_bytes_;
    tp::nccl_send_recv(dist_, cs, op_.x, chunk_bytes_, (rank_ - s + n_) % n_, recv, chunk_bytes_, p,
                       "ag_matmul nccl_chunked step " + std::to_string(s));
    if (op_.lead > 1) place_chunk(cs, rows_of(p), recv);
    arrived_[p].join(cs, stream);
    for (EagerLaunch& g : gemm_[p]) g(stream);
  }
  join_.join(cs, stream);
  for (size_t i = 1; i < op_.gathered.size(); ++i)  // further readers' copies of it, once whole
    REPLAY_CUDA(cudaMemcpyAsync(op_.gathered[i], dst_, n_ * chunk_bytes_, cudaMemcpyDeviceToDevice,
                                stream));
}

void Pipeline::synchronize(cudaStream_t stream) {
  if (ex_) {
    ex_->synchronize(stream);
  } else {
    REPLAY_CUDA(cudaStreamSynchronize(stream));
  }
}

}  // namespace replay::ag_matmul
