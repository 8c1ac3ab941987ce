// Reproducer bundles (harness/replay/repro): the cut of a region, and the round trip: a bundle
// loads as a valid trace and its float64 reference on the bundled inputs gives the original run's
// reference outputs (exactly for a whole-graph bundle, whose inputs are the run's own; within the
// output's numerics bounds for a region, whose float32 inputs the bundle holds as float32).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/replay/repro.hpp"
#include "harness/report/numerics.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "impls/reference/saved_inputs.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/safetensors.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;

namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / "replay_repro_tests" / name;
  fs::remove_all(d);
  return d;
}

// The nanoGPT LayerNorm forward with an op before it (x = x_in * x_in) and one after it
// (tail = y + y): the layernorm_fwd region then reads a computed value and feeds a later node.
std::string layernorm_in_the_middle() {
  nlohmann::json d = read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  d.erase("golden");
  d["name"] = "layernorm_in_the_middle";
  for (auto& in : d["inputs"])
    if (in["id"] == "x") in["id"] = "x_in";
  const nlohmann::json meta = {
      {"shape", {2, 8, 1600}}, {"stride", {12800, 1600, 1}}, {"dtype", "bfloat16"}};
  nlohmann::json head = {{"id", "x"},
                         {"op", "aten.mul.Tensor"},
                         {"args", {{{"ref", "x_in"}}, {{"ref", "x_in"}}}},
                         {"kwargs", nlohmann::json::object()},
                         {"outputs", {meta}}};
  nlohmann::json tail = {
      {"id", "tail"},
      {"op", "aten.add.Tensor"},
      {"args", {{{"ref", "convert_element_type_1"}}, {{"ref", "convert_element_type_1"}}}},
      {"kwargs", nlohmann::json::object()},
      {"outputs", {meta}}};
  d["nodes"].insert(d["nodes"].begin(), head);
  d["nodes"].push_back(tail);
  d["outputs"] = {"tail"};
  return write_temp("layernorm_in_the_middle.json", d.dump());
}

// The original run's reference and the bundle's reference on its golden inputs, output by output.
void expect_round_trip(const std::string& path, int region, uint64_t seed, bool exact) {
  ReproRequest req;
  req.trace_path = path;
  req.region = region;
  req.seed = seed;
  req.variant = "optimized";
  req.out_dir = fresh_dir(fs::path(path).stem().string() + "_" + std::to_string(region)).string();
  const std::string bundle = make_repro(req);

  const Graph g = load_trace(path);
  const Plan plan = make_plan(g, fusion_registry());
  const auto ref =
      run_reference(g, make_replay_inputs(g, seed, forwards_of_saved_inputs(g)).values);
  const Cut cut = region_cut(g, plan, region);

  const Graph b = load_trace(bundle);  // validates
  ASSERT_TRUE(b.golden);
  const auto golden = read_safetensors(b.golden->path);
  // The bundled inputs, and any random node's draw from the seed (not stored in the bundle).
  const auto sub = run_reference(b, make_inputs(b, seed).values);
  const auto defaults = default_value_bounds(g);
  ASSERT_EQ(b.outputs.size(), cut.outputs.size());
  for (size_t i = 0; i < cut.outputs.size(); ++i) {
    const int o = cut.outputs[i], bo = b.outputs[i];
    ASSERT_EQ(b.values[bo].name, g.values[o].name);  // names as in the original
    const HostTensor& want = ref.at(o);
    const HostTensor& got = sub.at(bo);
    if (exact) {
      EXPECT_EQ(got.data, want.data) << g.values[o].name;
    } else {
      const auto r =
          check_numerics(g.values[o].name, got, want, output_bounds(g, plan, defaults, o));
      EXPECT_TRUE(r.pass()) << g.values[o].name << ": " << r.failure();
    }
    // The expected outputs stored in the bundle are its own reference, rounded to the dtype.
    const auto stored = check_numerics(g.values[o].name, golden.at(g.values[o].name), got,
                                       output_bounds(g, plan, defaults, o));
    EXPECT_TRUE(stored.pass()) << stored.failure();
  }
  // The commands and bounds a bug report needs.
  const nlohmann::json info = read_json((fs::path(req.out_dir) / "repro.json").string());
  EXPECT_EQ(info["seed"], seed);
  EXPECT_NE(info["command"].get<std::string>().find("--variants optimized"), std::string::npos);
  for (int o : cut.outputs) EXPECT_TRUE(info["bounds"].contains(g.values[o].name));
  for (const char* f :
       {"repro.py", "torch_replay.py", "tracelib.py", "peer_results.py", "README.md"})
    EXPECT_TRUE(fs::exists(fs::path(req.out_dir) / f)) << f;
}

}  // namespace

TEST(Repro, CutOfARegionInTheMiddle) {
  const Graph g = load_trace(layernorm_in_the_middle());
  const Plan plan = make_plan(g, fusion_registry());
  ASSERT_EQ(plan.regions.size(), 1u);
  const Cut c = region_cut(g, plan, 0);
  EXPECT_EQ(c.node_ids.count("x"), 0u);  // the op before and the op after are not cut
  EXPECT_EQ(c.node_ids.count("tail"), 0u);
  EXPECT_EQ(c.node_ids.count("var_mean"), 1u);
  std::set<std::string> ins;
  for (int v : c.inputs) ins.insert(g.values[v].name);
  EXPECT_EQ(ins, (std::set<std::string>{"x", "weight", "bias"}));  // x is computed, not an input
  ASSERT_EQ(c.outputs.size(), 1u);
  EXPECT_EQ(g.values[c.outputs[0]].name, "convert_element_type_1");  // read by `tail`
  EXPECT_THROW(region_cut(g, plan, 1), ReproError);
}

TEST(Repro, RegionBundleRoundTrip) {
  expect_round_trip(layernorm_in_the_middle(), 0, 11, /*exact=*/false);
}

TEST(Repro, NormBackwardRegionRoundTrip) {  // saved inputs from the forward trace's reference
  expect_round_trip(trace_path("nanogpt_layernorm_train_bwd_2x8x1600"), 0, 3, false);
}

TEST(Repro, WholeGraphBundleIsExact) {
  expect_round_trip(trace_path("litgpt_rope_train_fwd_1x8x4x2x16"), -1, 5, /*exact=*/true);
  expect_round_trip(layernorm_in_the_middle(), -1, 11, /*exact=*/true);
}

// A graph with a random op (native_dropout): the hidden "<id>#uniform" input is drawn again
// from the seed when the bundle loads, not listed twice (which the loader would reject).
TEST(Repro, BundleOfAGraphWithRandomOps) {
  const std::string path = trace_path("nanogpt_mlp_dropout_train_fwd_2x8x64");
  expect_round_trip(path, -1, 9, /*exact=*/true);
  const Graph g = load_trace(path);
  for (size_t r = 0; r < make_plan(g, fusion_registry()).regions.size(); ++r)
    expect_round_trip(path, static_cast<int>(r), 9, /*exact=*/false);
  std::ifstream f(fs::temp_directory_path() / "replay_repro_tests" /
                  "nanogpt_mlp_dropout_train_fwd_2x8x64_-1" / "README.md");
  const std::string readme((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(readme.find("Random ops"), std::string::npos) << readme;
}

TEST(Repro, BadRequestsSayWhy) {
  ReproRequest req;
  req.trace_path = trace_path("nanogpt_layernorm_fwd_2x8x1600");
  req.region = 3;
  req.out_dir = fresh_dir("bad").string();
  try {
    make_repro(req);
    ADD_FAILURE() << "region 3 of a one-region plan was bundled";
  } catch (const ReproError& e) {
    EXPECT_NE(std::string(e.what()).find("region 3 does not exist"), std::string::npos) << e.what();
  }
  req.region = 0;
  req.max_bytes = 1000;
  try {
    make_repro(req);
    ADD_FAILURE() << "a bundle over the size limit was written";
  } catch (const ReproError& e) {
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
}

// The embedded Python files are the repository's, byte for byte.
TEST(Repro, BundledPythonIsTheRepositorys) {
  ReproRequest req;
  req.trace_path = trace_path("nanogpt_layernorm_fwd_2x8x1600");
  req.region = 0;
  req.out_dir = fresh_dir("python").string();
  make_repro(req);
  for (const char* f : {"torch_replay.py", "tracelib.py", "peer_results.py"}) {
    std::ifstream a(fs::path(req.out_dir) / f), b(fs::path(REPLAY_TRACES_DIR) / "capture" / f);
    const std::string sa((std::istreambuf_iterator<char>(a)), {}),
        sb((std::istreambuf_iterator<char>(b)), {});
    EXPECT_FALSE(sb.empty()) << f;
    EXPECT_EQ(sa, sb) << f;
  }
}
