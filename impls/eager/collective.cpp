#include "impls/eager/collective.hpp"

#include <nccl.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>

#include "impls/cuda/cuda_check.hpp"
#include "workloads/ops/op.hpp"

namespace replay {
namespace {

// A contiguous stand-in for `t`: `t` itself, or a temporary (owned by `temps`).
DeviceTensor staged(const DeviceTensor& t, std::vector<std::shared_ptr<DeviceBuffer>>& temps) {
  if (is_contiguous(t)) return t;
  temps.push_back(std::make_shared<DeviceBuffer>(
      std::max<size_t>(static_cast<size_t>(numel(t)) * dtype_size(t.dtype), 16)));
  return with_contiguous_strides(t, temps.back()->get());
}

ncclDataType_t reduce_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    default:
      throw std::invalid_argument(nccl_reduce_unsupported(t, "sum"));
  }
}

ncclRedOp_t reduce_op(const std::string& op) {
  if (op == "sum") return ncclSum;
  if (op == "avg") return ncclAvg;
  if (op == "max") return ncclMax;
  if (op == "min") return ncclMin;
  throw std::invalid_argument(nccl_reduce_unsupported(DType::kFloat32, op));
}

std::string rank_text(const DistContext& d) {
  return "rank " + std::to_string(d.rank);
}

}  // namespace

std::string nccl_reduce_unsupported(DType dtype, const std::string& op) {
  if (op != "sum" && op != "avg" && op != "max" && op != "min")
    return "reduce op '" + op + "' is not run through NCCL (sum, avg, max and min are)";
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBFloat16:
      return "";
    default:
      return "NCCL reduction of " + std::string(dtype_name(dtype)) +
             " is not supported (float32, float64, bfloat16 and float16 are; PyTorch's process "
             "group reduces no float8)";
  }
}

void nccl_check(const DistContext& d, int result, cudaStream_t stream, const std::string& what) {
  auto r = static_cast<ncclResult_t>(result);
  if (r == ncclInProgress && d.comm) {  // a non-blocking communicator still enqueueing
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(d.timeout_s));
    while (r == ncclInProgress) {
      if (ncclCommGetAsyncError(d.comm, &r) != ncclSuccess) break;
      if (r != ncclInProgress) break;
      if (std::chrono::steady_clock::now() > deadline)
        throw RuntimeFailure(rank_text(d) + ": " + what + " did not complete within " +
                             std::to_string(static_cast<int>(d.timeout_s)) +
                             " s (still being enqueued: a peer rank hung or died?)");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  if (r != ncclSuccess) {
    const char* last = ncclGetLastError(d.comm);
    throw RuntimeFailure(rank_text(d) + ": " + what + " failed: " + ncclGetErrorString(r) +
                         (last && *last ? std::string(" (") + last + ")" : std::string()));
  }
  if (d.watch) d.watch(stream, what);
}

void nccl_all_gather_bytes(const DistContext& d, const void* send, void* recv, size_t bytes,
                           cudaStream_t stream, const std::string& what) {
  nccl_check(d, ncclAllGather(send, recv, bytes, ncclUint8, d.comm, stream), stream, what);
}

void nccl_align_ranks(const DistContext& d, float* word, cudaStream_t stream) {
  nccl_check(d, ncclAllReduce(word, word, 1, ncclFloat, ncclSum, d.comm, stream), stream,
             "the ranks' alignment before a timed sample (ncclAllReduce of one float)");
}

void nccl_reduce_scatter(const DistContext& d, const void* send, void* recv, size_t count,
                         DType dtype, const std::string& op, cudaStream_t stream,
                         const std::string& what) {
  nccl_check(
      d, ncclReduceScatter(send, recv, count, reduce_type(dtype), reduce_op(op), d.comm, stream),
      stream, what);
}

EagerLaunch lower_collective(const Node& n, const std::vector<DeviceTensor>& in,
                             const std::vector<DeviceTensor>& out, const DistContext& d) {
  const std::string name(op_name(n.op));
  if (!d.comm && ipc_collectives(d) && n.group_size == d.world_size) {
    std::vector<std::shared_ptr<DeviceBuffer>> temps;
    const DeviceTensor x = in.at(0), y = out.at(0);
    const DeviceTensor xs = staged(x, temps), ys = staged(y, temps);
    const EagerLaunch copy_in = xs.ptr != x.ptr ? prepare_copy(xs, x) : EagerLaunch{};
    const EagerLaunch copy_out = ys.ptr != y.ptr ? prepare_copy(y, ys) : EagerLaunch{};
    const EagerLaunch run = lower_collective_ipc(n, xs, ys, d);
    return [=](cudaStream_t s) {
      (void)temps;
      if (copy_in) copy_in(s);
      run(s);
      if (copy_out) copy_out(s);
    };
  }
  if (!d.comm)
    throw NoCommunicator("node " + n.id + ": " + name +
                         " needs an NCCL communicator: " + d.no_nccl_why);
  if (n.group_size != d.world_size)
    throw std::invalid_argument("node " + n.id + ": " + name + " over " +
                                std::to_string(n.group_size) + " ranks in a run of " +
                                std::to_string(d.world_size) + " rank(s)");
  const DeviceTensor x = in.at(0), y = out.at(0);
  if (n.op != Op::kAllGatherIntoTensor) {
    if (std::string why = nccl_reduce_unsupported(x.dtype, n.mode); !why.empty())
      throw std::invalid_argument("node " + n.id + ": " + name + ": " + why);
  }
  std::vector<std::shared_ptr<DeviceBuffer>> temps;
  const DeviceTensor xs = staged(x, temps), ys = staged(y, temps);
  const EagerLaunch copy_in = xs.ptr != x.ptr ? prepare_copy(xs, x) : EagerLaunch{};
  const EagerLaunch copy_out = ys.ptr != y.ptr ? prepare_copy(y, ys) : EagerLaunch{};
  const DistContext* dc = &d;  // owned by the run, outlives the program
  const size_t count = static_cast<size_t>(numel(x));
  const Op op = n.op;
  const std::string mode = n.mode;
  const std::string what = std::string(op == Op::kAllGatherIntoTensor   ? "ncclAllGather"
                                       : op == Op::kReduceScatterTensor ? "ncclReduceScatter"
                                                                        : "ncclAllReduce") +
                           " of node '" + n.id + "'";
  const size_t elem = dtype_size(x.dtype);
  const DType dtype = x.dtype;
  return [=](cudaStream_t s) {
    (void)temps;  // kept alive with the launch
    if (copy_in) copy_in(s);
    switch (op) {
      case Op::kAllGatherIntoTensor:
        nccl_all_gather_bytes(*dc, xs.ptr, ys.ptr, count * elem, s, what);
        break;
      case Op::kReduceScatterTensor:
        nccl_reduce_scatter(*dc, xs.ptr, ys.ptr, count / static_cast<size_t>(dc->world_size), dtype,
                            mode, s, what);
        break;
      default:
        nccl_check(
            *dc,
            ncclAllReduce(xs.ptr, ys.ptr, count, reduce_type(dtype), reduce_op(mode), dc->comm, s),
            s, what);
        break;
    }
    if (copy_out) copy_out(s);
  };
}

}  // namespace replay
