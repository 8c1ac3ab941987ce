// A BindContext without a device, for unit tests of fusion binders: every value at its own
// 16-byte aligned fake address, laid out as the graph records it, as the GPU program would.
// Nothing is launched; a Binding's `unsupported` says whether the kernels take the region.
#pragma once

#include <cstdint>

#include "impls/fusions/binding.hpp"
#include "workloads/ir/graph.hpp"

namespace replay::test {

class FakeBuffers : public BindContext {
 public:
  explicit FakeBuffers(const Graph& g) : g_(g) {}
  BoundTensor tensor(int v) override {
    return {reinterpret_cast<void*>(uintptr_t(0x10000) * uintptr_t(v + 1)), g_.meta(v)};
  }
  void* workspace(size_t) override { return reinterpret_cast<void*>(uintptr_t(0x10000000)); }

 private:
  const Graph& g_;
};

}  // namespace replay::test
