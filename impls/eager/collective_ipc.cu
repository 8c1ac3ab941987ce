// Eager collectives over CUDA IPC for ranks that share a GPU (collective.hpp
// lower_collective_ipc). Each collective node owns a PeerExchange (impls/cuda/ipc): at every
// launch, on the launch stream, the rank waits until every peer has read its previous input,
// publishes its input in its IPC buffer and signals ready; then for each peer in ring order it
// waits for that peer's input, copies what it needs (the whole input for all_gather and
// all_reduce, this rank's chunk for reduce_scatter) and signals done. Reductions then run one
// kernel over the n copies in rank order 0 .. n-1, in float32 (float64 for float64), rounded
// once: the same bits on every rank that reduces the same values. Correctness only: NCCL's
// algorithms and bandwidth are not modelled (timings of ranks sharing a GPU mean nothing).
#include <cmath>
#include <memory>
#include <stdexcept>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/dtype_device.cuh"
#include "impls/cuda/ipc/peer_exchange.hpp"
#include "impls/eager/collective.hpp"
#include "workloads/ir/graph.hpp"

namespace replay {
namespace {

constexpr int kMaxRanks = 16;

struct ReduceArgs {
  const void* src[kMaxRanks] = {};
  int n = 0;
  void* out = nullptr;
  int64_t count = 0;
  DType dtype = DType::kBFloat16;
  int mode = 0;  // 0 sum, 1 avg, 2 max, 3 min
};

template <typename acc_t>
__global__ void reduce_ranks_kernel(ReduceArgs a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.count;
       i += stride) {
    acc_t acc = load_elem<acc_t>(a.src[0], i, a.dtype);
    for (int p = 1; p < a.n; ++p) {
      const acc_t v = load_elem<acc_t>(a.src[p], i, a.dtype);
      if (a.mode <= 1)
        acc += v;
      else if (isnan(v) || isnan(acc))
        acc = v + acc;  // NaN propagates, as NCCL's max / min do
      else
        acc = a.mode == 2 ? (v > acc ? v : acc) : (v < acc ? v : acc);
    }
    if (a.mode == 1) acc /= static_cast<acc_t>(a.n);
    store_elem<acc_t>(a.out, i, a.dtype, acc);
  }
}

void launch_reduce(const ReduceArgs& a, cudaStream_t s) {
  if (a.count == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((a.count + kThreads - 1) / kThreads, 132 * 16);
  if (a.dtype == DType::kFloat64)
    reduce_ranks_kernel<double><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(a);
  else
    reduce_ranks_kernel<float><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(a);
  REPLAY_CUDA_LAUNCH("reduce_ranks_kernel");
}

int mode_of(const std::string& m) {
  return m == "sum" ? 0 : m == "avg" ? 1 : m == "max" ? 2 : 3;
}

}  // namespace

bool ipc_collectives(const DistContext& d) {
  return !d.comm && d.shared_device && d.all_gather && d.world_size >= 2 &&
         d.world_size <= kMaxRanks;
}

EagerLaunch lower_collective_ipc(const Node& n, const DeviceTensor& x, const DeviceTensor& y,
                                 const DistContext& d) {
  const int ws = d.world_size, rank = d.rank;
  const size_t es = dtype_size(x.dtype);
  const size_t in_bytes = static_cast<size_t>(numel(x)) * es;
  const size_t out_count = static_cast<size_t>(numel(y));
  const Op op = n.op;
  if (op != Op::kAllGatherIntoTensor) {
    if (x.dtype != DType::kFloat32 && x.dtype != DType::kFloat64 && x.dtype != DType::kBFloat16 &&
        x.dtype != DType::kFloat16)
      throw std::invalid_argument("node " + n.id + ": a " + std::string(dtype_name(x.dtype)) +
                                  " reduction (float32, float64, bfloat16 and float16 are)");
  }
  auto ex = std::make_shared<ipc::PeerExchange>(d, in_bytes, "node " + n.id + " (over CUDA IPC)");
  // Reductions: every rank's part as this rank needs it, then one kernel into y.
  const size_t part = op == Op::kReduceScatterTensor ? in_bytes / ws : in_bytes;
  auto recv = op == Op::kAllGatherIntoTensor
                  ? std::shared_ptr<DeviceBuffer>()
                  : std::make_shared<DeviceBuffer>(std::max<size_t>(part * ws, 1));
  const std::string id = n.id;
  const int mode = mode_of(n.mode);
  return [=](cudaStream_t s) {
    ex->begin(s);
    for (int p = 0; p < ws; ++p)
      if (p != rank) ex->wait_done_previous(s, p, "rank " + std::to_string(rank) + "'s input");
    char* mine = static_cast<char*>(ex->data(rank));
    REPLAY_CUDA(cudaMemcpyAsync(mine, x.ptr, in_bytes, cudaMemcpyDeviceToDevice, s));
    for (int p = 0; p < ws; ++p)
      if (p != rank) ex->signal_ready(s, p);
    // Where rank q's part lands: y's q-th chunk (all_gather), else recv's q-th slot.
    auto dst = [&](int q) {
      return op == Op::kAllGatherIntoTensor ? static_cast<char*>(y.ptr) + q * in_bytes
                                            : static_cast<char*>(recv->get()) + q * part;
    };
    const size_t offset = op == Op::kReduceScatterTensor ? rank * part : 0;
    REPLAY_CUDA(cudaMemcpyAsync(dst(rank), static_cast<const char*>(x.ptr) + offset, part,
                                cudaMemcpyDeviceToDevice, s));
    for (int k = 1; k < ws; ++k) {
      const int q = (rank + k) % ws;
      ex->wait_ready(s, q, "rank " + std::to_string(q) + "'s input to node " + id);
      REPLAY_CUDA(cudaMemcpyAsync(dst(q), static_cast<const char*>(ex->data(q)) + offset, part,
                                  cudaMemcpyDeviceToDevice, s));
      ex->signal_done(s, q);
    }
    if (op == Op::kAllGatherIntoTensor) return;
    ReduceArgs a;
    a.n = ws;
    for (int q = 0; q < ws; ++q) a.src[q] = dst(q);
    a.out = y.ptr;
    a.count = static_cast<int64_t>(out_count);
    a.dtype = x.dtype;
    a.mode = mode;
    launch_reduce(a, s);
  };
}

}  // namespace replay
