#include "impls/eager/lower.hpp"

#include <stdexcept>
#include <string>

#include "workloads/ops/op.hpp"

namespace replay {

EagerLaunch lower_node(const Node& n, const std::vector<DeviceTensor>& in,
                       const std::vector<DeviceTensor>& out) {
  const EagerLowering low = op_def(n.op).eager;
  if (!n.operands.at(0).is_tensor())
    throw std::invalid_argument("node " + n.id + ": scalar first operand is not supported");
  switch (low.kernel) {
    case EagerLowering::kPointwise: {
      const auto fn = static_cast<PointwiseFn>(low.fn);
      const DeviceTensor a = in.at(0);
      const bool has_b = n.operands.size() > 1 && n.operands[1].is_tensor();
      const DeviceTensor b = has_b ? in.at(1) : DeviceTensor{};
      const double scalar = n.operands.size() > 1 && !has_b ? n.operands[1].scalar : 0.0;
      const double alpha = n.alpha;
      return [fn, o = out.at(0), a, b, has_b, scalar, alpha](cudaStream_t s) {
        launch_pointwise(fn, o, a, has_b ? &b : nullptr, scalar, alpha, s);
      };
    }
    case EagerLowering::kReduction: {
      const auto fn = static_cast<ReduceFn>(low.fn);
      return [fn, x = in.at(0), dims = n.dims, out, corr = n.correction](cudaStream_t s) {
        launch_reduction(fn, x, dims, out[0], out.size() > 1 ? &out[1] : nullptr, corr, s);
      };
    }
    case EagerLowering::kAlias:
      break;
  }
  throw std::invalid_argument("node " + n.id + ": " + std::string(op_name(n.op)) +
                              " has no kernel lowering (views are aliased, not lowered)");
}

EagerLaunch lower_copy(const DeviceTensor& dst, const DeviceTensor& src) {
  return [dst, src](cudaStream_t s) {
    launch_pointwise(PointwiseFn::kCopy, dst, src, nullptr, 0, 1, s);
  };
}

}  // namespace replay
