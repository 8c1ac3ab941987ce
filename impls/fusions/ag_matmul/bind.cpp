// ag_matmul binder: no variant runs yet. The baseline (NCCL all-gather, then the GEMM) and the
// optimized chunked pipeline (peer copies on the copy engines, per-chunk GEMMs) both need one
// process per GPU with a communicator (issue 31's multi-process path), which does not exist: the
// region runs eagerly, and on more than one rank only the CPU reference evaluates it.
#include "impls/fusions/ag_matmul/params.hpp"
#include "impls/fusions/binding.hpp"

namespace replay::ag_matmul {

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  if (v.name != "baseline") return bind_pipeline(g, r, v, ctx);
  return {{},
          "variant '" + std::string(v.name) +
              "' needs the multi-process NCCL path (one process per rank with a communicator), "
              "not built yet"};
}

}  // namespace replay::ag_matmul
