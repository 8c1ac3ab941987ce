// The eager executor against PyTorch, op by op: every case of the op corpus
// (tests/unit/opcorpus.hpp) on PyTorch's own inputs, outputs poisoned first, checked against
// PyTorch's outputs with the bounds a replay would use.
#include "gpu_test_util.hpp"
#include "tests/unit/opcorpus.hpp"

using namespace replay;
using namespace replay::test;

class EagerOpCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(EagerOpCorpus, EagerMatchesPyTorch) {
  REQUIRE_GPU();
  for (const auto& c : load_opcorpus(GetParam())) {
    SCOPED_TRACE(c.label());
    const ReplayInputs in = make_inputs(c.g, 1);
    const Plan plan = make_plan(c.g, fusion_registry());
    GpuProgram prog(c.g, plan, "eager", in.values, nullptr);
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    const auto bounds = default_value_bounds(c.g);
    for (int v : c.g.outputs) {
      const auto it = in.golden.find(c.g.values[v].name);
      ASSERT_NE(it, in.golden.end()) << "golden lacks output " << c.g.values[v].name;
      const auto res = check_numerics(c.g.values[v].name, prog.download(v, nullptr), it->second,
                                      pytorch_bounds(c, v, output_bounds(c.g, plan, bounds, v)));
      EXPECT_TRUE(res.pass()) << c.label() << ": output " << c.g.meta(v).str() << ": "
                              << res.failure()
                              << first_mismatch(res.first_bad, res.first_got, res.first_target);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, EagerOpCorpus, ::testing::ValuesIn(opcorpus_files()),
                         [](const auto& info) { return opcorpus_name(info.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(EagerOpCorpus);
