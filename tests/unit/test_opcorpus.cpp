// The reference executor against PyTorch, op by op: every case of the op corpus
// (tests/unit/opcorpus.hpp), with the bounds a replay would use. A failure names the op, the
// case, its dtype and shape, and the first mismatching element.
#include <gtest/gtest.h>

#include <iostream>
#include <set>

#include "harness/report/numerics.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "opcorpus.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/ops/op.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;

// Ops whose corpus cases are written in traces/capture/opcorpus.py but not yet generated (that
// needs PyTorch, which the build machines do not have): added 2026-12-01 for torchao's
// power-of-two scales. Until a host with PyTorch regenerates the corpus they are checked by hand
// (tests/unit/test_reference.cpp Reference.Log2Exp2AndRounding; the eager kernels by
// tests/gpu/test_eager_kernels.cpp). Once generated, CoversEveryOp fails until this list is
// emptied, so it cannot outlive the corpus.
constexpr const char* kCorpusPending[] = {
    "aten.log2.default", "aten.exp2.default",  "aten.floor.default",
    "aten.ceil.default", "aten.trunc.default", "aten.round.default",
};

// Every op but the random ones (whose values cannot match PyTorch's draw) and the collectives
// (a single-process capture sees one rank; tests/unit/test_collective.cpp checks them against
// hand-computed results over 2, 4 and 8 ranks) has corpus cases, but the pending ones above.
TEST(OpCorpus, CoversEveryOp) {
  std::set<std::string> covered;
  for (const auto& f : opcorpus_files())
    for (const auto& c : load_opcorpus(f)) covered.insert(c.op);
  const std::set<std::string> pending(std::begin(kCorpusPending), std::end(kCorpusPending));
  for (const OpDef* d : all_ops()) {
    if (d->kind == OpKind::kRandom || d->kind == OpKind::kCollective) continue;
    const std::string name(d->name);
    if (pending.count(name)) {
      EXPECT_FALSE(covered.count(name))
          << name << " now has corpus cases: remove it from kCorpusPending";
      std::cout << "note: " << name
                << " has no corpus case yet (pending: generate with traces/capture/opcorpus.py "
                   "on a host with PyTorch)\n";
      continue;
    }
    EXPECT_TRUE(covered.count(name))
        << name << " has no case in " << opcorpus_dir()
        << " (generate with traces/capture/opcorpus.py on a host with PyTorch)";
  }
}

class OpCorpusFile : public ::testing::TestWithParam<std::string> {};

TEST_P(OpCorpusFile, ReferenceMatchesPyTorch) {
  for (const auto& c : load_opcorpus(GetParam())) {
    SCOPED_TRACE(c.label());
    const ReplayInputs in = make_inputs(c.g, 1);
    const auto vals = run_reference(c.g, in.values);
    const Plan plan = make_plan(c.g, fusion_registry());
    const auto bounds = default_value_bounds(c.g);
    for (int v : c.g.outputs) {
      const auto it = in.golden.find(c.g.values[v].name);
      ASSERT_NE(it, in.golden.end()) << "golden lacks output " << c.g.values[v].name;
      const auto res = check_numerics(c.g.values[v].name, vals.at(v), it->second,
                                      pytorch_bounds(c, v, output_bounds(c.g, plan, bounds, v)));
      EXPECT_TRUE(res.pass()) << c.label() << ": output " << c.g.meta(v).str() << ": "
                              << res.failure()
                              << first_mismatch(res.first_bad, res.first_got, res.first_target);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpCorpusFile, ::testing::ValuesIn(opcorpus_files()),
                         [](const auto& info) { return opcorpus_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OpCorpusFile);
