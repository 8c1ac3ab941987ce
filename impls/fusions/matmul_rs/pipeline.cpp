// matmul_rs's chunked pipeline: CUDA IPC + copy engines, or NCCL send/recv (pipeline.hpp).
#include "impls/fusions/matmul_rs/pipeline.hpp"

#include <stdexcept>

#include "impls/fusions/matmul_rs/kernels.hpp"

namespace replay::matmul_rs {

std::string Pipeline::unsupported(const DistContext* dist, tp::Transport t,
                                  const PipelineOperands& op) {
  if (std::string why = tp::dist_unsupported(dist, dist ? dist->world_size : 0, t); !why.empty())
    return why;
  const int n = dist->world_size;
  if (n < 2 || n > kMaxRanks)
    return "a chunked reduce-scatter takes 2.." + std::to_string(kMaxRanks) + " ranks, not " +
           std::to_string(n);
  if (op.lead < 1 || op.M % (n * op.lead) != 0)
    return "the partial product's rows " + std::to_string(op.M) +
           " are not a multiple of the world size " + std::to_string(n) +
           " times the blocks per rank " + std::to_string(op.lead);
  const DType o = op.gemm.out_dtype;
  if (o != DType::kBFloat16 && o != DType::kFloat16 && o != DType::kFloat32)
    return "the partials' sum writes bfloat16, float16 or float32, not " +
           std::string(dtype_name(o));
  return tp::chunk_gemm_unsupported(op.gemm, op.M / n / op.lead);
}

Pipeline::Pipeline(const DistContext& dist, tp::Transport t, const PipelineOperands& op,
                   tp::PipelineFault fault)
    : rank_(dist.rank), n_(dist.world_size), transport_(t), fault_(fault), op_(op) {
  if (std::string why = unsupported(&dist, t, op); !why.empty()) throw std::invalid_argument(why);
  m_ = op.M / n_;
  chunk_bytes_ = static_cast<size_t>(m_ * op.gemm.N) * dtype_size(op.gemm.out_dtype);
  // Pieces help only the IPC pulls (each piece announced); NCCL sends a whole chunk.
  pieces_ = t == tp::Transport::kIpc ? pieces(m_, op.lead) : static_cast<int>(op.lead);
  if (t == tp::Transport::kIpc) {
    ex_ = std::make_unique<ipc::PeerExchange>(dist, n_ * chunk_bytes_, "matmul_rs", fault, pieces_);
  } else {
    dist_ = dist;
    partials_ = DeviceBuffer(n_ * chunk_bytes_);
    REPLAY_CUDA(cudaStreamCreateWithFlags(&nccl_stream_, cudaStreamNonBlocking));
  }
  recv_ = DeviceBuffer(n_ * chunk_bytes_);
  REPLAY_CUDA(cudaMemset(recv_.get(), 0, recv_.bytes()));
  const size_t a_row_bytes = op.gemm.K * dtype_size(op.gemm.a_dtype);
  const size_t d_row_bytes = op.gemm.N * dtype_size(op.gemm.out_dtype);
  const int64_t rows = m_ / op.lead;        // rows per block
  const int64_t split = pieces_ / op.lead;  // pieces per block (lead 1: pieces_, else 1)
  const int64_t piece_rows = rows / split;
  computed_.reserve(n_);
  for (int j = 0; j < n_; ++j) {
    computed_.emplace_back();
    gemm_.emplace_back();
    for (int64_t l = 0; l < op.lead; ++l)
      for (int64_t k = 0; k < split; ++k) {
        const int64_t row0 = (l * n_ + j) * rows + k * piece_rows;  // block l of rank j's rows
        const void* a = static_cast<const char*>(op.a) + row0 * a_row_bytes;
        gemm_[j].push_back(tp::prepare_chunk_gemm(
            "matmul_rs chunk " + std::to_string(j) +
                (op.lead > 1 ? " block " + std::to_string(l) : "") +
                (split > 1 ? " piece " + std::to_string(k) : ""),
            op.gemm, a, partial(j) + (l * rows + k * piece_rows) * d_row_bytes, row0, piece_rows));
      }
  }
}

int Pipeline::pieces(int64_t m, int64_t lead) {
  if (lead > 1) return static_cast<int>(lead);
  for (int k : {4, 2})
    if (m % k == 0 && m / k >= 32 && (m / k) % 16 == 0) return k;
  return 1;
}

Pipeline::~Pipeline() {
  if (nccl_stream_) cudaStreamDestroy(nccl_stream_);
}

char* Pipeline::partial(int chunk) const {
  char* base = static_cast<char*>(ex_ ? ex_->data(rank_) : partials_.get());
  return base + chunk * chunk_bytes_;
}

void Pipeline::launch(cudaStream_t stream) {
  const bool ipc = transport_ == tp::Transport::kIpc;
  if (ipc) ex_->begin(stream);
  cudaStream_t cs = ipc ? ex_->copy_stream() : nccl_stream_;
  fork_.join(stream, cs);
  auto recv_slot = [&](int p) { return static_cast<char*>(recv_.get()) + p * chunk_bytes_; };
  auto chunk_name = [&](int j) {
    return "chunk " + std::to_string(j) + " (rows " + std::to_string(j * m_) + ".." +
           std::to_string((j + 1) * m_ - 1) + ")";
  };
  for (int s = 1; s < n_; ++s) {
    const int j = (rank_ + s) % n_;
    if (ipc) ex_->wait_done_previous(stream, j, chunk_name(j));
    for (int k = 0; k < pieces_; ++k) {
      gemm_[j][k](stream);
      if (ipc) ex_->signal_ready(stream, j, k);
    }
    if (!ipc) {
      const int p = (rank_ - s + n_) % n_;
      computed_[j].join(stream, cs);
      tp::nccl_send_recv(dist_, cs, partial(j), chunk_bytes_, j, recv_slot(p), chunk_bytes_, p,
                         "matmul_rs nccl_chunked step " + std::to_string(s));
    }
  }
  for (EagerLaunch& g : gemm_[rank_]) g(stream);
  if (ipc) {
    // kWrongPeer: the peer's partial of the next rank's rows (a chunk delivered to the wrong rank).
    const int wanted = fault_ == tp::PipelineFault::kWrongPeer ? (rank_ + 1) % n_ : rank_;
    for (int s = 1; s < n_; ++s) {
      const int p = (rank_ - s + n_) % n_;
      const size_t piece_bytes = chunk_bytes_ / pieces_;
      for (int k = 0; k < pieces_; ++k) {
        ex_->wait_ready(
            cs, p,
            chunk_name(rank_) + "'s partial" + (pieces_ > 1 ? ", piece " + std::to_string(k) : ""),
            k);
        if (!(fault_ == tp::PipelineFault::kDropChunk && s == 1))
          REPLAY_CUDA(cudaMemcpyAsync(
              recv_slot(p) + k * piece_bytes,
              static_cast<const char*>(ex_->data(p)) + wanted * chunk_bytes_ + k * piece_bytes,
              piece_bytes, cudaMemcpyDeviceToDevice, cs));
      }
      ex_->signal_done(cs, p);
    }
  }
  join_.join(cs, stream);
  SumPartials sum;
  sum.n = n_;
  for (int p = 0; p < n_; ++p) sum.src[p] = p == rank_ ? partial(rank_) : recv_slot(p);
  sum.out = op_.out;
  sum.count = m_ * op_.gemm.N;
  sum.dtype = op_.gemm.out_dtype;
  sum.avg = op_.avg;
  launch_sum_partials(sum, stream);
}

void Pipeline::synchronize(cudaStream_t stream) {
  if (ex_) {
    ex_->synchronize(stream);
  } else {
    REPLAY_CUDA(cudaStreamSynchronize(stream));
  }
}

}  // namespace replay::matmul_rs
