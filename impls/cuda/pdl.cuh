// Programmatic dependent launch (sm_90+; CUDA Programming Guide, "Programmatic Dependent Launch
// and Synchronization"; PTX ISA "griddepcontrol"). A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may start before the kernel ahead of it in
// the stream has finished: once every block of that primary has executed
// pdl_launch_dependents() (or exited). The dependent issues the loads that do not depend on the
// primary (its input tensor), then pdl_wait() blocks until the primary grid has completed and its
// writes are visible. Both are no-ops for a plain launch. Used where one pass of a fusion feeds
// the next (fp8_quantize's amax pass and cast; norm_bwd's row kernel and finalize).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace replay {

/// Lets this grid's programmatic dependent launch (call it early, from every block).
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

/// Waits until the grid this one depends on has completed and its memory is visible.
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

/// Launches kernel<<<grid, block, smem, s>>>(args...) (smem: dynamic shared memory, bytes), as a
/// programmatic dependent of the previous work in `s` when `pdl` (the kernel must pdl_wait() before
/// it reads anything the previous kernel writes, or writes anything it reads). Returns
/// cudaLaunchKernelEx's status.
template <typename... KArgs, typename... Args>
cudaError_t launch_maybe_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                             cudaStream_t s, bool pdl, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace replay
