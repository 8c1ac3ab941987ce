// pointwise JIT (jit.hpp): NVRTC through dlopen, a CUBIN per (source, compute capability), loaded
// with cudaLibraryLoadData (the runtime API: nothing links libcuda) and cached for the process.
#include "impls/fusions/pointwise/jit.hpp"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/device_sms.hpp"
#include "impls/fusions/pointwise/codegen.hpp"

namespace replay::pointwise {
namespace {

// The NVRTC entry points the JIT uses, resolved once.
struct Nvrtc {
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
  decltype(&nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&nvrtcGetPTX) ptx = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  decltype(&nvrtcGetErrorString) error = nullptr;
  std::string status;  // "" when usable
};

const Nvrtc& nvrtc() {
  static const Nvrtc n = [] {
    Nvrtc r;
    void* h = nullptr;
    // by soname (LD_LIBRARY_PATH, the loader's cache), then in the toolkit this was built with
    const std::string built = std::string(REPLAY_CUDA_LIB_DIR) + "/libnvrtc.so";
    for (const std::string& lib : {std::string("libnvrtc.so.13"), std::string("libnvrtc.so.12"),
                                   std::string("libnvrtc.so"), built + ".13", built})
      if ((h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      const char* e = dlerror();
      r.status = std::string("NVRTC is not available (dlopen libnvrtc.so.13 / libnvrtc.so: ") +
                 (e ? e : "not found") + "); put the CUDA toolkit's lib folder on LD_LIBRARY_PATH";
      return r;
    }
    auto sym = [&](auto& fp, const char* name) {
      fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(dlsym(h, name));
      if (!fp && r.status.empty()) r.status = std::string("NVRTC lacks ") + name;
    };
    sym(r.create, "nvrtcCreateProgram");
    sym(r.compile, "nvrtcCompileProgram");
    sym(r.log_size, "nvrtcGetProgramLogSize");
    sym(r.log, "nvrtcGetProgramLog");
    sym(r.cubin_size, "nvrtcGetCUBINSize");
    sym(r.cubin, "nvrtcGetCUBIN");
    sym(r.ptx_size, "nvrtcGetPTXSize");
    sym(r.ptx, "nvrtcGetPTX");
    sym(r.destroy, "nvrtcDestroyProgram");
    sym(r.error, "nvrtcGetErrorString");
    return r;
  }();
  return n;
}

struct Loaded {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
};

}  // namespace

std::string nvrtc_status() {
  return nvrtc().status;
}

namespace {

// Compiles `source` with the JIT's options (--fmad as `fmad`, the target `gpu`): the CUBIN, or
// with `ptx` the PTX text.
std::vector<char> compile(const std::string& source, const std::string& gpu, bool fmad, bool ptx) {
  const Nvrtc& n = nvrtc();
  if (!n.status.empty()) throw std::runtime_error(n.status);
  nvrtcProgram prog = nullptr;
  nvrtcResult rc = n.create(&prog, source.c_str(), "replay_pointwise.cu", 0, nullptr, nullptr);
  if (rc != NVRTC_SUCCESS)
    throw std::runtime_error(std::string("nvrtcCreateProgram: ") + n.error(rc));
  const std::string arch = "--gpu-architecture=" + gpu;
  const char* opts[] = {arch.c_str(), fmad ? "--fmad=true" : "--fmad=false", "--std=c++17",
                        "-default-device"};
  rc = n.compile(prog, static_cast<int>(std::size(opts)), opts);
  size_t log_size = 0;
  n.log_size(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size) n.log(prog, log.data());
  if (rc != NVRTC_SUCCESS) {
    n.destroy(&prog);
    throw std::runtime_error(std::string("NVRTC could not compile the generated kernel (") +
                             n.error(rc) + "): " + log);
  }
  size_t size = 0;
  std::vector<char> out;
  if (ptx) {
    n.ptx_size(prog, &size);
    out.resize(size);
    rc = n.ptx(prog, out.data());
  } else {
    n.cubin_size(prog, &size);
    out.resize(size);
    rc = n.cubin(prog, out.data());
  }
  n.destroy(&prog);
  if (rc != NVRTC_SUCCESS) throw std::runtime_error(std::string("NVRTC output: ") + n.error(rc));
  return out;
}

}  // namespace

std::vector<char> compile_cubin(const std::string& source, int arch) {
  if (const char* dir = std::getenv("REPLAY_POINTWISE_DUMP"); dir && *dir) {
    // Each generated kernel's text, named by its hash, for a reproducer or a look at its SASS
    // (nvcc -cubin -arch=sm_90 --fmad=false, then cuobjdump -sass).
    char name[32];
    std::snprintf(name, sizeof name, "/pw_%016zx.cu", std::hash<std::string>{}(source));
    std::ofstream f(std::string(dir) + name);
    f << source;
    if (!f)
      throw std::runtime_error(std::string("REPLAY_POINTWISE_DUMP: cannot write ") + dir + name);
  }
  return compile(source, "sm_" + std::to_string(arch), false, false);
}

std::string compile_ptx(const std::string& source, int arch, bool fmad) {
  const std::vector<char> p = compile(source, "compute_" + std::to_string(arch), fmad, true);
  return std::string(p.data(), p.size() && p.back() == '\0' ? p.size() - 1 : p.size());
}

const void* load_kernel(const std::string& source) {
  int dev = 0;
  REPLAY_CUDA(cudaGetDevice(&dev));
  int major = 0, minor = 0;
  REPLAY_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  REPLAY_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  const int arch = major * 10 + minor;
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, Loaded> cache;  // libraries live for the process
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({source, arch});
  if (it == cache.end()) {
    const std::vector<char> cubin = compile_cubin(source, arch);
    Loaded l;
    REPLAY_CUDA(
        cudaLibraryLoadData(&l.library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    REPLAY_CUDA(cudaLibraryGetKernel(&l.kernel, l.library, kEntry));
    it = cache.emplace(std::make_pair(source, arch), l).first;
  }
  return reinterpret_cast<const void*>(it->second.kernel);
}

void launch(const void* k, const KernelArgs& args, int64_t numel, int per_thread,
            cudaStream_t stream) {
  const int64_t units = (numel + per_thread - 1) / per_thread;
  const int64_t want = (units + kThreads - 1) / kThreads;
  const int64_t blocks = std::clamp<int64_t>(want, 1, int64_t(device_sms()) * 8);
  KernelArgs a = args;
  void* params[] = {&a};
  REPLAY_CUDA(
      cudaLaunchKernel(k, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), params, 0, stream));
}

int64_t colsum_row_blocks(const void* k, int64_t rows, int64_t strips) {
  int per_sm = 0;
  // A library kernel handle (cudaLibraryGetKernel) where a runtime older than 12.x took only a
  // function symbol: on an error, 4 blocks an SM (the kernel's 32 KiB of shared memory at most).
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kSumLanes * kSumRows, 0) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    per_sm = 4;
  }
  const int64_t wave = int64_t(device_sms()) * std::max(per_sm, 1);
  const int64_t most = (rows + kSumRows - 1) / kSumRows;
  return std::clamp<int64_t>(wave / std::max<int64_t>(strips, 1), 1, std::max<int64_t>(most, 1));
}

void launch_colsum(const void* k, const KernelArgs& args, int64_t strips, int64_t row_blocks,
                   cudaStream_t stream) {
  KernelArgs a = args;
  void* params[] = {&a};
  REPLAY_CUDA(
      cudaLaunchKernel(k, dim3(static_cast<unsigned>(strips), static_cast<unsigned>(row_blocks)),
                       dim3(kSumLanes * kSumRows), params, 0, stream));
}

}  // namespace replay::pointwise
