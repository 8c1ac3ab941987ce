// CUDA error checking, the runtime-failure error type and an owning device buffer. Errors throw
// RuntimeFailure naming the call, file and line; library code never exits.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace replay {

/// A failure of the device runtime (CUDA, CUPTI, NCCL). The CLI maps it to exit code 4.
class RuntimeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw RuntimeFailure(std::string(call) + " failed: " + cudaGetErrorName(e) + " (" +
                       cudaGetErrorString(e) + ") at " + file + ":" + std::to_string(line));
}

#define REPLAY_CUDA(call)                                                           \
  do {                                                                              \
    cudaError_t err_ = (call);                                                      \
    if (err_ != cudaSuccess) ::replay::throw_cuda(err_, #call, __FILE__, __LINE__); \
  } while (0)

/// After a kernel launch: report a launch error with the kernel's name.
#define REPLAY_CUDA_LAUNCH(name) REPLAY_CUDA(cudaGetLastError())

/// Number of CUDA devices, 0 when there is none or no driver (never throws).
inline int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

/// Owning device allocation (cudaMalloc); move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) REPLAY_CUDA(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace replay
