// The numerics check has teeth (GPU): what a correct variant wrote, mutated as a wrong kernel
// would have written it (tests/unit/mutations.hpp), FAILs for every bundled trace and variant;
// ops swapped for other ops on the eager executor FAIL against the original op's reference.
#include <filesystem>
#include <optional>

#include "gpu_test_util.hpp"
#include "harness/replay/variants.hpp"
#include "tests/unit/mutations.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/ir/strided_loop.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/op.hpp"

using namespace replay;
using namespace replay::test;

namespace {

struct Case {
  std::string trace, variant;
};

std::vector<Case> bundled_cases() {
  std::vector<Case> out;
  for (const std::string& name : bundled_trace_names()) {
    try {
      Graph g = load_trace(trace_path(name), cut_options());
      for (const auto& v : plan_variants(make_plan(g, fusion_registry())))
        if (v.is_gpu()) out.push_back({name, v.name});
    } catch (const TraceError&) {  // an invalid bundled trace fails its own test, not discovery
      out.push_back({name, "eager"});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Case& a, const Case& b) { return a.trace + a.variant < b.trace + b.variant; });
  return out;
}

// Output `out` of `variant` on `inputs` (outputs poisoned first).
HostTensor gpu_output(const Graph& g, const std::string& variant,
                      const std::map<int, HostTensor>& inputs, int out) {
  Plan plan = make_plan(g, fusion_registry());
  GpuProgram prog(g, plan, variant, inputs, nullptr);
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  return prog.download(out, nullptr);
}

// The reference on seed 21 (its map holds the inputs too) and the inputs of seed 22, of the last
// trace asked for: the variants of one trace run one after the other (cases are sorted), and a
// realistic trace's reference takes seconds to a minute.
struct TraceData {
  std::string trace;
  std::map<int, HostTensor> ref, other_inputs;
};
const TraceData& trace_data(const Graph& g, const std::string& trace) {
  static TraceData cache;
  if (cache.trace != trace) {
    cache = TraceData{};  // free the previous trace's tensors first
    cache.ref = run_reference(g, generate_inputs(g, 21));
    cache.other_inputs = generate_inputs(g, 22);
    cache.trace = trace;
  }
  return cache;
}

class MutatedGpuOutput : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(MutatedGpuOutput, EveryMutationFails) {
  REQUIRE_GPU();
  Graph g = load_trace(trace_path(GetParam().trace), cut_options());
  const int out = g.outputs[0];
  const NumericsBounds b = default_value_bounds(g)[out];
  const TraceData& d = trace_data(g, GetParam().trace);
  const auto& ref = d.ref;
  const HostTensor y = gpu_output(g, GetParam().variant, ref, out);
  // What a kernel that skipped its work would leave: this variant's output on other inputs.
  const HostTensor stale = gpu_output(g, GetParam().variant, d.other_inputs, out);
  // check_value's addend magnitudes, computed once for every mutation
  const std::optional<HostTensor> magnitude =
      b.addend_ulps ? addend_magnitude(g, ref, out) : std::nullopt;
  auto check = [&](const HostTensor& got) {
    return check_numerics(g.values[out].name, got, ref.at(out), b,
                          magnitude ? &*magnitude : nullptr);
  };
  ASSERT_TRUE(check(y).pass()) << "the unmutated result must pass";
  // One buffer for the mutated copies, refilled from y before each mutation (a fresh copy of a
  // 221M-element output per mutation costs more than the check itself).
  HostTensor work = y;
  for (const auto& m : output_mutations()) {
    if (!m.applies(y)) continue;
    if (work.data.size() != y.data.size()) work = y;  // "stale_output" replaced the buffer
    parallel_copy(work.data.data(), y.data.data(), static_cast<int64_t>(y.data.size()));
    work = m.apply(std::move(work), stale);
    auto r = check(work);
    EXPECT_FALSE(r.pass()) << GetParam().trace << " " << GetParam().variant << " " << m.name
                           << " passed: rel_l2 " << r.rel_l2;
  }
}

INSTANTIATE_TEST_SUITE_P(AllVariants, MutatedGpuOutput, ::testing::ValuesIn(bundled_cases()),
                         [](const auto& info) {
                           return test_name(info.param.trace + "_" + info.param.variant);
                         });

// An op's eager kernel computing another op's function: the example of `op` run with `as`.
struct OpSwap {
  const char *op, *as;
};

class SwappedOp : public ::testing::TestWithParam<OpSwap> {};

TEST_P(SwappedOp, FailsAgainstTheOriginalReference) {
  REQUIRE_GPU();
  const OpDef& d = op_def(parse_op(GetParam().op).value());
  nlohmann::json t = example_trace(d.name.data(), nlohmann::json::parse(d.example));
  Graph good = parse_trace(t, "<good>");
  t["nodes"][0]["op"] = GetParam().as;
  Graph bad = parse_trace(t, "<swapped>");
  auto in = generate_inputs(good, 31);
  auto want = run_reference(good, in);
  GpuProgram prog(bad, make_plan(bad, fusion_registry()), "eager", in, nullptr);
  prog.poison_outputs(nullptr);
  prog.run_all(LaunchContext{});
  const int out = good.outputs[0];
  auto r = check_numerics("y", prog.download(bad.outputs[0], nullptr), want.at(out),
                          default_value_bounds(good)[out]);
  EXPECT_FALSE(r.pass()) << GetParam().op << " as " << GetParam().as;
}

INSTANTIATE_TEST_SUITE_P(Ops, SwappedOp,
                         ::testing::Values(OpSwap{"aten.rsqrt.default", "aten.sqrt.default"},
                                           OpSwap{"aten.sqrt.default", "aten.reciprocal.default"},
                                           OpSwap{"aten.neg.default", "aten.abs.default"},
                                           OpSwap{"aten.exp.default", "aten.abs.default"},
                                           OpSwap{"aten.add.Tensor", "aten.sub.Tensor"},
                                           OpSwap{"aten.mul.Tensor", "aten.div.Tensor"},
                                           OpSwap{"aten.mean.dim", "aten.sum.dim_IntList"},
                                           OpSwap{"aten.amax.default", "aten.sum.dim_IntList"},
                                           OpSwap{"aten._softmax.default",
                                                  "aten._log_softmax.default"},
                                           OpSwap{"aten._log_softmax_backward_data.default",
                                                  "aten._softmax_backward_data.default"}),
                         [](const auto& info) {
                           return test_name(std::string(info.param.op) + "_as_" + info.param.as);
                         });
