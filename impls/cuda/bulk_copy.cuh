// Bulk copies global -> shared through the async proxy, completed on an mbarrier (sm_90+; PTX
// ISA "cp.async.bulk", "mbarrier"; CUDA Programming Guide, "Asynchronous Data Copies using the
// Tensor Memory Accelerator"). One thread issues a copy of a whole contiguous span (a row) and
// arms the slot's barrier with the bytes it expects; the threads that read the slot wait on the
// barrier's phase. The bytes in flight cost shared memory, not registers. Used by fp8_quantize's
// rowwise ring kernel.
#pragma once

#include <cstdint>

namespace replay {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Initializes the mbarrier at `bar` (shared, 8-byte aligned) for `count` arrivals per phase.
/// Call mbar_fence_init() after the last init and before any thread (or the async proxy) uses it.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}

/// Makes the preceding mbar_init()s visible to the async proxy (the bulk copies' completion).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/// One arrival on `bar` that also expects `bytes` more of transaction (the bulk copy's size) in
/// this phase: the phase completes when both the arrivals and the bytes are in.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

/// Spins until the phase of `bar` with the given parity (0 for its first phase, then 1, 0, ...)
/// has completed. The "memory" clobber keeps the slot's reads after the wait.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

/// Orders this thread's earlier generic-proxy accesses of shared memory (the reads of a slot)
/// before its later async-proxy ones (the bulk copy that refills the slot).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/// Copies `bytes` (a multiple of 16) from `src` (global, 16-byte aligned) to `dst` (shared,
/// 16-byte aligned) and completes them as transaction bytes on `bar` (armed by
/// mbar_arrive_expect_tx with the same count). Issued by one thread.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

}  // namespace replay
