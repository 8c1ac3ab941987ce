// matmul_rs binder for the chunked pipelines ("optimized": CUDA IPC peer copies on the copy engines
// with a signal per chunk; "nccl_chunked": NCCL send/recv per chunk): not built yet.
#include "impls/fusions/binding.hpp"
#include "impls/fusions/matmul_rs/params.hpp"

namespace replay::matmul_rs {

Binding bind_pipeline(const Graph&, const Region&, const VariantSpec& v, BindContext&) {
  return {{}, "variant '" + std::string(v.name) + "': the chunked pipeline is not built yet"};
}

}  // namespace replay::matmul_rs
