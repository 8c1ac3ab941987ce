// How the replay engine hands a matched region to a fusion's GPU variants: the fusion decodes the
// region's params, looks up device pointers and layouts of the values it names, and returns a
// launch closure, or the reason it cannot run that region.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "workloads/graph.hpp"

namespace replay {

struct BoundValue {
  void* ptr = nullptr;
  TensorMeta layout;  ///< actual strides of the device buffer
};

struct FusionContext {
  /// Device pointer and layout of a value, by name (inputs are bound, outputs allocated).
  std::function<BoundValue(const std::string& name)> value;
  /// A device workspace of `bytes`, owned by the program.
  std::function<void*(size_t bytes)> workspace;
};

struct FusionBinding {
  std::function<void(cudaStream_t)> launch;  ///< empty when unsupported
  std::string unsupported;                   ///< why the variant cannot run this region
};

/// Bind variant "baseline" or "optimized" of layernorm_fwd to a region (params from the matcher).
FusionBinding bind_layernorm_fwd(const nlohmann::json& params, const std::string& variant,
                                 const FusionContext& ctx);

}  // namespace replay
