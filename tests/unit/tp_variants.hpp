// The check the tensor-parallel fusions' unit tests share (impls/fusions/{ag_matmul,matmul_rs}/
// tests/unit_match.cpp): on a bundled per-rank trace without a multi-process run, every variant of
// the fusion's region says why it cannot run, and with ranks sharing a GPU (a DistContext without
// a communicator) the NCCL baseline names the missing communicator and why.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "impls/cuda/dist_context.hpp"
#include "impls/fusions/binding.hpp"
#include "impls/fusions/registry.hpp"
#include "tests/unit/fake_buffers.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

namespace replay::test {

/// `trace`: a name for trace_path(); `fusion`: the one region's fusion in it.
inline void expect_every_tp_variant_says_why(const std::string& trace, const std::string& fusion) {
  const Graph g = load_trace(trace_path(trace));
  const Plan p = make_plan(g, fusion_registry());
  const Region* r = only_region(p, fusion);
  ASSERT_NE(r, nullptr);
  FakeBuffers buffers(g);  // a single process: no DistContext
  for (const VariantSpec& v : r->fusion->variants) {
    const Binding b = r->fusion->bind(g, *r, v, buffers);
    EXPECT_FALSE(b.launch) << v.name;
    EXPECT_FALSE(b.unsupported.empty()) << v.name;
    if (v.name == "baseline")
      EXPECT_NE(b.unsupported.find("the NCCL baseline needs one process per rank"),
                std::string::npos)
          << b.unsupported;
    if (v.role != Role::kBaseline)  // bind_pipeline.cpp: the chunked pipelines
      EXPECT_NE(b.unsupported.find("needs a multi-process run"), std::string::npos)
          << v.name << ": " << b.unsupported;
  }
  // Ranks sharing a GPU: a DistContext without a communicator; the baseline says why.
  struct NoComm : FakeBuffers {
    using FakeBuffers::FakeBuffers;
    DistContext d;
    const DistContext* dist() const override { return &d; }
  } shared(g);
  shared.d.world_size = 2;
  shared.d.shared_device = true;
  shared.d.no_nccl_why = "NCCL cannot place two ranks on one GPU (ranks 0 and 1 share device X)";
  const Binding b = r->fusion->bind(g, *r, *r->fusion->find_variant("baseline"), shared);
  EXPECT_FALSE(b.launch);
  EXPECT_EQ(b.unsupported, "no NCCL communicator: " + shared.d.no_nccl_why);
}

}  // namespace replay::test
