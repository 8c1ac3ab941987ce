// A BindContext without a device, for unit tests of fusion binders: every value at its own
// 16-byte aligned fake address, laid out as the graph records it, as the GPU program would. The
// addresses are 64 GiB apart, so that no two values overlap (kernels that read through the
// read-only path refuse an output overlapping an input).
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
    return {reinterpret_cast<void*>((uintptr_t(1) << 36) * uintptr_t(v + 1)), g_.meta(v)};
  }
  void* workspace(size_t) override { return reinterpret_cast<void*>(uintptr_t(1) << 60); }

 private:
  const Graph& g_;
};

}  // namespace replay::test
