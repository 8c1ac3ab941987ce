// Host tensors: logical values in float64, row-major, plus packing to/from a dtype's bytes in any
// strided layout. The reference executor works on these; the GPU executors upload and download
// them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "workloads/ir/graph.hpp"

namespace replay {

/// std::allocator, except that (1) a value-initialized element (`resize(n)`, `HostData(n)`) is
/// left uninitialized: the harness fills its buffers in parallel loops, and a serial zero-fill
/// first would touch every page of a gigabyte-sized tensor from one thread (the page faults then
/// dominated the float64 reference at the realistic shapes); explicit values still initialize;
/// (2) storage is aligned to kHostDataAlignment bytes: Eigen's vectorized sums start their packet
/// loop at the first aligned element, so with malloc's 16-byte alignment the order of a float64
/// reduction's additions, and its last bits, would depend on where the buffer landed.
inline constexpr size_t kHostDataAlignment = 64;
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kHostDataAlignment}));
  }
  void deallocate(T* p, size_t) noexcept {
    ::operator delete (p, std::align_val_t{kHostDataAlignment});
  }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

/// A tensor's float64 values (std::vector<double> whose resize leaves elements uninitialized).
using HostData = std::vector<double, DefaultInitAllocator<double>>;

/// Values of one tensor in row-major logical order, widened to double; `meta` has contiguous
/// strides and the tensor's dtype (values are already rounded to it).
struct HostTensor {
  TensorMeta meta;
  HostData data;
};

/// A contiguous HostTensor of `shape` and `dtype`, zero-filled.
HostTensor make_host_tensor(const std::vector<int64_t>& shape, DType dtype);
/// A contiguous HostTensor of `shape` and `dtype` whose values are left uninitialized, for a
/// caller that writes every element (in parallel: the pages are first touched by the writers).
HostTensor make_host_tensor_for_overwrite(const std::vector<int64_t>& shape, DType dtype);

/// Bytes of `t` in `layout` (layout.dtype, layout.stride; storage_elems() elements, a storage
/// element no logical element maps to stays 0). Strides must be >= 0. Where the layout maps
/// several logical elements to one storage element (stride 0, overlapping strides), they must
/// hold the same value (==, or both NaN), which is then stored once.
/// Throws std::invalid_argument if the shapes differ, or naming the first logical index (row-major)
/// whose value differs from an earlier one sharing its storage element.
std::vector<uint8_t> pack(const HostTensor& t, const TensorMeta& layout);
/// Values of a strided view over `storage`'s data (read as a flat array of elements):
/// element i of the result is storage.data[offset of i in layout]. Used for permute/expand and
/// broadcasting. `offset`: the storage element logical element 0 maps to.
HostTensor strided_view(const HostTensor& storage, const TensorMeta& layout, int64_t offset = 0);
/// Logical values of a strided buffer in `layout`.
HostTensor unpack(const std::vector<uint8_t>& bytes, const TensorMeta& layout);

}  // namespace replay
