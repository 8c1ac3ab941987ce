// pointwise JIT: the generated source (codegen.hpp) compiled by NVRTC to a CUBIN for the device,
// loaded as a CUDA library, launched. NVRTC is opened at run time (dlopen of libnvrtc.so.13, then
// libnvrtc.so): a machine without it still runs everything else, and the fusion's optimized
// variant says why it cannot run. Compiling needs no GPU (the unit tests compile every generated
// kernel on the build machine); loading and launching do.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace replay::pointwise {

/// The generated kernel's one parameter (codegen.cpp's PwKernelArgs, byte for byte).
struct KernelArgs {
  const void* in[16] = {};
  void* out[16] = {};
};

/// "" when NVRTC can be used, else why not (the library is missing, a symbol is).
std::string nvrtc_status();

/// `source` compiled for sm_<arch> (90 for Hopper) into a CUBIN, with the options every generated
/// kernel takes: --fmad=false (each op rounds as its eager kernel stores it, no contraction
/// across ops), C++17, unannotated functions as device code. With REPLAY_POINTWISE_DUMP=DIR set,
/// the source is first written to DIR/pw_<hash>.cu (a reproducer; std::runtime_error when it
/// cannot be). Throws std::runtime_error with NVRTC's log on a compile error, or when NVRTC is
/// unavailable.
std::vector<char> compile_cubin(const std::string& source, int arch);

/// `source` compiled to PTX for compute_<arch> with compile_cubin's options, but --fmad as `fmad`
/// (the unit test that every elementwise row computes the same with and without contraction:
/// nvcc builds the eager kernels with its default, --fmad=true). Throws as compile_cubin.
std::string compile_ptx(const std::string& source, int arch, bool fmad);

/// The entry point of `source` on the current device: compiled for its compute capability and
/// loaded once per source text and device (a process-wide cache; thread-safe), then returned as
/// the handle cudaLaunchKernel takes. Throws std::runtime_error on a compile or load failure.
const void* load_kernel(const std::string& source);

/// Launches kernel `k` (load_kernel) over `numel` elements (`per_thread` consecutive elements per
/// thread and round: codegen's kChunk, or 1) on `stream`: at most 8 blocks of kThreads per SM, the
/// grid-stride loop taking the rest. Throws RuntimeFailure on a launch error.
void launch(const void* k, const KernelArgs& args, int64_t numel, int per_thread,
            cudaStream_t stream);

/// Row blocks (gridDim.y) of a column-sum kernel (codegen.hpp, the column-sum form) over `rows`
/// rows in `strips` column strips: as many as fill one wave of the blocks of `k` resident per SM
/// (cudaOccupancyMaxActiveBlocksPerMultiprocessor), no more, and at most one per 8 rows (each row
/// lane then has a row). Where the occupancy query fails, 4 blocks an SM.
int64_t colsum_row_blocks(const void* k, int64_t rows, int64_t strips);

/// Launches the column-sum kernel `k` on grid (strips, row_blocks) of kSumLanes * kSumRows
/// threads. Throws RuntimeFailure on a launch error.
void launch_colsum(const void* k, const KernelArgs& args, int64_t strips, int64_t row_blocks,
                   cudaStream_t stream);

}  // namespace replay::pointwise
