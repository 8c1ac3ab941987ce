// Eager kernels of the neural-network ops (workloads/ops/nn.cpp): softmax, log_softmax and their
// backwards, nll_loss forward and backward, layer and group norm forward and backward, dropout's
// backward. Row-wise kernels with float32 accumulation (float64 for float64 tensors), as PyTorch's
// (ATen/native/cuda/SoftMax.cu, Loss.cu, layer_norm_kernel.cu, group_norm_kernel.cu).
#pragma once

#include <vector>

#include "impls/eager/kernels.hpp"

namespace replay {

/// The launch of nn node `n` of `g` (its row's NnFn `fn`): `in` one DeviceTensor per operand
/// (empty for None and numbers), `out` one per output (a None output, Value::none, is empty and
/// not written). Operands that are not contiguous are first copied into contiguous temporaries,
/// and outputs that are not contiguous are written through one; the step owns them. Throws
/// std::invalid_argument for an operand beyond kMaxDims dims or a bad function, CudaError.
EagerLaunch prepare_nn(const Graph& g, const Node& n, NnFn fn, const std::vector<DeviceTensor>& in,
                       const std::vector<DeviceTensor>& out);

}  // namespace replay
