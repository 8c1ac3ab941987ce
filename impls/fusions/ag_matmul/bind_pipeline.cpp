// ag_matmul binder for the chunked pipelines ("optimized": CUDA IPC peer copies on the copy engines
// with a signal per chunk; "nccl_chunked": NCCL send/recv per chunk): not built yet.
#include "impls/fusions/ag_matmul/params.hpp"
#include "impls/fusions/binding.hpp"

namespace replay::ag_matmul {

Binding bind_pipeline(const Graph&, const Region&, const VariantSpec& v, BindContext&) {
  return {{}, "variant '" + std::string(v.name) + "': the chunked pipeline is not built yet"};
}

}  // namespace replay::ag_matmul
