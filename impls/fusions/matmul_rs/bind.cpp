// matmul_rs binder: no variant runs yet. The baseline (the GEMM, then NCCL reduce-scatter) and the
// optimized chunked pipeline (per-chunk GEMMs, partials sent on the copy engines, fp32
// accumulation) both need one process per GPU with a communicator (issue 31's multi-process path),
// which does not exist: the region runs eagerly, and on more than one rank only the CPU reference
// evaluates it.
#include "impls/fusions/binding.hpp"
#include "impls/fusions/matmul_rs/params.hpp"

namespace replay::matmul_rs {

Binding bind(const Graph& g, const Region& r, const VariantSpec& v, BindContext& ctx) {
  if (v.name != "baseline") return bind_pipeline(g, r, v, ctx);
  return {{},
          "variant '" + std::string(v.name) +
              "' needs the multi-process NCCL path (one process per rank with a communicator), "
              "not built yet"};
}

}  // namespace replay::matmul_rs
