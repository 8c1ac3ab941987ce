// cp.async (sm_80+): 16-byte copies global -> shared that a thread issues and waits for by
// groups, so its next loads are in flight while it computes on the current ones (PTX ISA,
// "cp.async"). The norm_bwd and matmul_epilogue kernels keep per-thread rings of such slots.
#pragma once

namespace replay {

/// Copies 16 bytes from `src` (global, 16-byte aligned) to `dst` (shared), bypassing L1
/// (`.cg`); when !pred the 16 bytes are zero-filled and nothing is read, but `src` must still be
/// a valid global address.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool pred) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
               "r"(pred ? 16 : 0));
}

/// Closes this thread's current group of cp_async16 copies.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

/// Waits until at most N of this thread's groups are still in flight (its older groups landed).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  // "memory": the shared-memory reads after the wait must not move before it (a thread reads its
  // own slots with no barrier in between).
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace replay
