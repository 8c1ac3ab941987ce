// The matmul_epilogue row of the fusion registry.
#include "impls/fusions/matmul_epilogue/params.hpp"

namespace replay::fusions {
namespace {

constexpr VariantSpec kVariants[] = {
    {"baseline", Role::kBaseline,
     "cuBLASLt GEMM without epilogue (float32 output when a bias follows), then one pointwise "
     "kernel per epilogue step (bias, activation, gating; backward: act', products, column sum; a "
     "dW "
     "GEMM's bias gradient: the column-sum kernel over the tangent)"},
    {"optimized", Role::kOptimized,
     "cuBLASLt GEMM with CUBLASLT_EPILOGUE_BIAS and the output dtype direct; what the graph "
     "rounds in between (GELU, SiLU gating, a 16-bit activation looked up in its table; "
     "backward: the activation's derivative, d_gate and d_up, the bias gradient's column "
     "partials) in one fused kernel reading each tensor once; a dW GEMM's bias gradient summed "
     "by the GEMM itself (CUBLASLT_EPILOGUE_BGRADB / BGRADA)"},
};

}  // namespace

extern const FusionSpec matmul_epilogue = {
    "matmul_epilogue",
    "GEMM + epilogue: bias, GELU (erf, tanh), SiLU/GELU gating, any pointwise chain of one 16-bit "
    "value (tabulated), casts (nn.Linear, GPT-2 Conv1D, Llama/Gemma MLPs) through cuBLASLt, the "
    "algorithm timed among the heuristic's candidates; backward: the activation's derivative "
    "after dY @ W, d_gate/d_up, the bias gradient (with that kernel, or on the dW GEMM)",
    kVariants,
    matmul_epilogue::match,
    matmul_epilogue::cost,
    matmul_epilogue::describe,
    matmul_epilogue::bind,
    /*tolerance=*/nullptr,
    /*min_world_size=*/1,
    /*match_rest=*/nullptr,
    /*strided_outputs=*/true,  // every output through as_rows: its row stride from the layout
};

}  // namespace replay::fusions
