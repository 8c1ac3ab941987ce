// Device-side helpers of the timing layer.
// L2 flush by reading: streams a buffer of twice the L2 size through the cache. Unlike a memset,
// this leaves clean lines behind, so the timed kernel that follows does not pay for writing back
// tens of MB of the flush's own dirty data.
// Spin: keeps the GPU busy so that launches queue up behind it (CUPTI sees device-side gaps).
#include "harness/measure/timing.hpp"
#include "impls/cuda/cuda_check.hpp"

namespace replay {
namespace {

__global__ void l2_flush_read_kernel(const uint4* buf, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint4 v = buf[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads alive; never true for a zeroed buffer
}

__global__ void replay_spin_kernel(long long ns) {
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (static_cast<long long>(t - t0) >= ns) break;
  }
}

// Holds its stream until the host writes a nonzero `release` (pinned, mapped host memory) or
// `timeout_ns` of %globaltimer pass; then sets *timed_out. nvbench's blocking kernel.
__global__ void replay_block_kernel(const volatile int* release, volatile int* timed_out,
                                    long long timeout_ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (*release == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (static_cast<long long>(t - t0) >= timeout_ns) {
      *timed_out = 1;
      return;
    }
  }
}

// SM clock in MHz: clock64 cycles counted over at least `ns` of %globaltimer (cycles per ns x 1e3).
__global__ void replay_clock_probe_kernel(float* out, long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (static_cast<long long>(t - t0) < ns);
  const long long c1 = clock64();
  *out = static_cast<float>(static_cast<double>(c1 - c0) * 1e3 / static_cast<double>(t - t0));
}

}  // namespace

void enqueue_clock_probe(float* out_mhz, cudaStream_t s, long long ns) {
  replay_clock_probe_kernel<<<1, 1, 0, s>>>(out_mhz, ns);
  REPLAY_CUDA_LAUNCH("replay_clock_probe_kernel");
}

void enqueue_spin(cudaStream_t s, double us) {
  replay_spin_kernel<<<1, 1, 0, s>>>(static_cast<long long>(us * 1e3));
  REPLAY_CUDA_LAUNCH("replay_spin_kernel");
}

StreamBlocker::StreamBlocker() {
  REPLAY_CUDA(cudaHostAlloc(&flags_, 2 * sizeof(int), cudaHostAllocMapped));
  flags_[0] = flags_[1] = 0;
  const cudaError_t e =
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_flags_), flags_, 0);
  if (e != cudaSuccess) {
    (void)cudaFreeHost(flags_);
    flags_ = nullptr;
    REPLAY_CUDA(e);
  }
}

StreamBlocker::~StreamBlocker() {
  if (!flags_) return;
  release();
  if (blocked_) (void)cudaStreamSynchronize(stream_);  // the kernel may still read the flags
  (void)cudaFreeHost(flags_);
}

void StreamBlocker::block(cudaStream_t s, double timeout_us) {
  volatile int* f = flags_;
  f[0] = 0;
  f[1] = 0;
  replay_block_kernel<<<1, 1, 0, s>>>(device_flags_, device_flags_ + 1,
                                      static_cast<long long>(timeout_us * 1e3));
  REPLAY_CUDA_LAUNCH("replay_block_kernel");
  stream_ = s;
  blocked_ = true;
}

void StreamBlocker::release() {
  static_cast<volatile int*>(flags_)[0] = 1;
}

bool StreamBlocker::timed_out() const {
  return static_cast<volatile int*>(flags_)[1] != 0;
}

void l2_flush_read(const void* buf, size_t bytes, unsigned* sink, cudaStream_t s) {
  int dev = 0, sms = 0;
  REPLAY_CUDA(cudaGetDevice(&dev));
  REPLAY_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  l2_flush_read_kernel<<<sms * 4, 512, 0, s>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  REPLAY_CUDA_LAUNCH("l2_flush_read_kernel");
}

}  // namespace replay
