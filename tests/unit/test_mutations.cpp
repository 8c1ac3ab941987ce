// The numerics check has teeth (CPU): graphs mutated the way a wrong kernel would compute
// (eps off, biased variance, a dropped affine term, a scaled output, rsqrt taken as sqrt) give
// references that FAIL against the original's, and every output mutation of tests/unit/
// mutations.hpp FAILs; the unmutated graph PASSES on fresh seeds.
#include <gtest/gtest.h>

#include "harness/report/numerics.hpp"
#include "impls/reference/reference.hpp"
#include "mutations.hpp"
#include "test_util.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

json& node(json& t, const std::string& id) {
  for (auto& n : t["nodes"])
    if (n["id"] == id) return n;
  throw std::runtime_error("no node " + id);
}

// The mutated trace computes `final`'s input scaled by `s` before the last conversion.
void scale_before(json& t, const std::string& final_convert, double s) {
  json& conv = node(t, final_convert);
  json scaled = {{"id", "mutant_scale"},
                 {"op", "aten.mul.Tensor"},
                 {"args", {conv["args"][0], s}},
                 {"outputs", json::array({node(t, conv["args"][0]["ref"])["outputs"][0]})}};
  conv["args"][0] = ref("mutant_scale");
  auto& nodes = t["nodes"];
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i]["id"] == final_convert) {
      nodes.insert(nodes.begin() + static_cast<long>(i), scaled);
      break;
    }
}

struct GraphMutation {
  std::string trace, name;
  std::function<void(json&)> mutate;
};

std::vector<GraphMutation> graph_mutations() {
  const std::string ln = "nanogpt_layernorm_fwd_16x128x1600", rms = "llama_rmsnorm_fwd_2x8x4096";
  return {
      {ln, "eps_1e-3", [](json& t) { node(t, "add")["args"][1] = 1e-3; }},
      {ln, "eps_1e-2", [](json& t) { node(t, "add")["args"][1] = 1e-2; }},
      {ln, "biased_variance", [](json& t) { node(t, "var_mean")["kwargs"]["correction"] = 1; }},
      {ln, "dropped_bias", [](json& t) { node(t, "add_1")["args"][1] = 0.0; }},
      {ln, "dropped_weight", [](json& t) { node(t, "mul_1")["args"][1] = 1.0; }},
      {ln, "scaled_x1.012", [](json& t) { scale_before(t, "convert_element_type_1", 1.012); }},
      {ln, "rsqrt_as_sqrt", [](json& t) { node(t, "rsqrt")["op"] = "aten.sqrt.default"; }},
      {rms, "eps_1e-3", [](json& t) { node(t, "add")["args"][1] = 1e-3; }},
      {rms, "eps_x100", [](json& t) { node(t, "add")["args"][1] = 1e-4; }},
      {rms, "dropped_weight",
       [](json& t) {
         node(t, "mul_1")["args"] = {ref("convert_element_type_1"), 1.0};
       }},
      {rms, "mean_as_sum", [](json& t) { node(t, "mean")["op"] = "aten.sum.dim_IntList"; }},
  };
}

class MutatedGraph : public ::testing::TestWithParam<GraphMutation> {};

json without_golden(const std::string& trace) {
  json t = read_json(trace_path(trace));
  t.erase("golden");  // generated inputs: fresh seeds
  return t;
}

}  // namespace

TEST_P(MutatedGraph, ReferenceFailsAgainstTheOriginal) {
  const GraphMutation& m = GetParam();
  json t = without_golden(m.trace);
  Graph good = parse_trace(t, "<good>");
  m.mutate(t);
  Graph bad = parse_trace(t, "<" + m.name + ">");
  const auto in = generate_inputs(good, 17);
  const auto want = run_reference(good, in);
  const auto got = run_reference(bad, generate_inputs(bad, 17));
  const int out = good.outputs[0];
  const auto bounds = default_value_bounds(good);
  auto r = check_numerics("y", got.at(bad.outputs[0]), want.at(out), bounds[out]);
  EXPECT_FALSE(r.pass()) << m.trace << " " << m.name << ": rel_l2 " << r.rel_l2 << " (bound "
                         << r.bounds.max_rel_l2 << "), beyond 1 ulp " << r.beyond_1ulp_share;
}

INSTANTIATE_TEST_SUITE_P(Norms, MutatedGraph, ::testing::ValuesIn(graph_mutations()),
                         [](const auto& info) {
                           return test_name(info.param.trace.substr(0, 5) + "_" + info.param.name);
                         });

TEST(MutatedOutput, EveryOutputMutationFailsAndTheTruthPasses) {
  for (const char* trace : {"nanogpt_layernorm_fwd_16x128x1600", "llama_rmsnorm_fwd_2x8x4096"}) {
    Graph g = parse_trace(without_golden(trace), trace);
    const int out = g.outputs[0];
    const auto bounds = default_value_bounds(g);
    const HostTensor y = run_reference(g, generate_inputs(g, 1)).at(out);
    const HostTensor stale = run_reference(g, generate_inputs(g, 2)).at(out);
    EXPECT_TRUE(check_numerics("y", y, y, bounds[out]).pass());
    for (const auto& m : output_mutations()) {
      if (!m.applies(y)) continue;
      auto r = check_numerics("y", m.apply(y, stale), y, bounds[out]);
      EXPECT_FALSE(r.pass()) << trace << " " << m.name << ": rel_l2 " << r.rel_l2;
    }
  }
}

TEST(MutatedOutput, FreshSeedsOfTheSameGraphAgreeWithThemselves) {
  // The reference is deterministic: the same seed twice gives identical outputs (0 ulp).
  Graph g = parse_trace(without_golden("llama_rmsnorm_fwd_2x8x4096"), "rms");
  for (uint64_t seed : {3u, 4u, 5u}) {
    auto a = run_reference(g, generate_inputs(g, seed)).at(g.outputs[0]);
    auto b = run_reference(g, generate_inputs(g, seed)).at(g.outputs[0]);
    auto r = check_numerics("y", a, b, default_value_bounds(g)[g.outputs[0]]);
    EXPECT_TRUE(r.pass());
    EXPECT_EQ(r.max_ulp_err, 0);
  }
}
