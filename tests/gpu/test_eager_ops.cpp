// Every op row's example (workloads/ops) through the eager executor against the reference, on
// fresh inputs with outputs poisoned: an op whose eager lowering is missing or wrong fails here.
#include "gpu_test_util.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/op.hpp"

using namespace replay;
using namespace replay::test;

class EagerOp : public ::testing::TestWithParam<size_t> {};

TEST_P(EagerOp, MatchesReference) {
  REQUIRE_GPU();
  const OpDef& d = *all_ops()[GetParam()];
  Graph g = parse_trace(example_trace(std::string(d.name), nlohmann::json::parse(d.example)),
                        "<example>");
  for (uint64_t seed : {1u, 2u}) expect_variant_matches(g, "eager", seed);
}

INSTANTIATE_TEST_SUITE_P(AllOps, EagerOp, ::testing::Range<size_t>(0, kOpCount),
                         [](const auto& info) {
                           return test_name(std::string(all_ops()[info.param]->name));
                         });
