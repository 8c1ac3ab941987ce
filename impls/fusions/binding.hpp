// How the replay engine hands a matched region to one variant of its fusion: the binder (each
// fusion's bind.cpp, the only file that knows both its params and its kernels) asks the context
// for the device buffers of the region's values and returns a launch, or the reason the variant
// cannot run the region.
#pragma once

#include <functional>
#include <string>

#include "impls/cuda/dist_context.hpp"
#include "impls/cuda/launch_context.hpp"
#include "workloads/plan/fusion_spec.hpp"

namespace replay {

struct BoundTensor {
  void* ptr = nullptr;
  TensorMeta layout;  ///< actual strides of the device buffer
};

class BindContext {
 public:
  virtual ~BindContext() = default;
  /// Device pointer and layout of value `value` (inputs are bound, outputs allocated). Throws
  /// std::logic_error for a value that has no buffer.
  virtual BoundTensor tensor(int value) = 0;
  /// A device workspace of `bytes`, owned by the program, valid for every launch.
  virtual void* workspace(size_t bytes) = 0;
  /// The multi-process context of this rank (impls/cuda/dist_context.hpp), or nullptr in a
  /// single-process run.
  virtual const DistContext* dist() const { return nullptr; }
};

struct Binding {
  std::function<void(const LaunchContext&)> launch;  ///< empty when unsupported
  std::string unsupported;                           ///< why the variant cannot run this region
};

}  // namespace replay
