// Saved-for-backward inputs from the forward (impls/reference/saved_inputs.hpp): a backward
// trace's saved mean and rstd are what its forward computes from the same generated x; without
// its forward, the saved inputs stay independent draws and the input source says so; a link to an
// output the forward lacks, or of another shape, is bad input naming the file and the input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "harness/replay/runner.hpp"
#include "impls/reference/reference.hpp"
#include "impls/reference/saved_inputs.hpp"
#include "test_util.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

const std::string kFwd = "nanogpt_layernorm_train_fwd_2x8x1600";
const std::string kBwd = "nanogpt_layernorm_train_bwd_2x8x1600";

// A training step's traces copied, without their golden tensors (as a realistic capture has
// none), into a folder of their own under the test temp dir: the backward (after `edit`), and the
// forward when `with_forward`. Returns the backward's path.
std::string step_without_golden(const std::string& folder, const std::string& fwd,
                                const std::string& bwd, bool with_forward,
                                const std::function<void(json&)>& edit = {}) {
  const auto dir = std::filesystem::temp_directory_path() / "replay_tests" / folder;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const std::string& name : {fwd, bwd}) {
    if (name == fwd && !with_forward) continue;
    json t = read_json(trace_path(name));
    t.erase("golden");
    if (name == bwd && edit) edit(t);
    std::ofstream(dir / (name + ".json")) << t.dump();
  }
  return (dir / (bwd + ".json")).string();
}

json& input_of(json& trace, const std::string& id) {
  for (auto& in : trace["inputs"])
    if (in["id"] == id) return in;
  throw std::logic_error("no input " + id);
}

RunOptions reference_only() {
  RunOptions opt;
  opt.variants = {"reference"};
  opt.reference_budget_s = 0;
  opt.seed = 7;
  return opt;
}

}  // namespace

TEST(SavedInputs, StatisticsAreWhatTheForwardComputesFromTheGeneratedX) {
  const std::string path = step_without_golden("saved_found", kFwd, kBwd, true);
  Graph g = load_trace(path);
  ReplayInputs in = make_replay_inputs(g, 7);
  EXPECT_NE(in.source.find("saved inputs x, weight, getitem_1, rsqrt from the float64 reference "
                           "of forward trace " +
                           kFwd),
            std::string::npos)
      << in.source;
  // x and weight are the forward's generated tensors, bit for bit.
  Graph f = load_trace((std::filesystem::path(path).parent_path() / (kFwd + ".json")).string());
  const auto fin = generate_inputs(f, 7);
  for (const char* shared : {"x", "weight"})
    EXPECT_EQ(in.values.at(g.find_value(shared)).data, fin.at(f.find_value(shared)).data) << shared;
  // mean and rstd of each row of that x (float64 here), rounded to float32 as the saved tensors.
  const auto& x = in.values.at(g.find_value("x")).data;
  const auto& mean = in.values.at(g.find_value("getitem_1"));
  const auto& rstd = in.values.at(g.find_value("rsqrt"));
  ASSERT_EQ(mean.meta.dtype, DType::kFloat32);
  ASSERT_EQ(rstd.meta.shape, (std::vector<int64_t>{2, 8, 1}));
  const int64_t cols = 1600;
  for (int64_t r = 0; r < 16; ++r) {
    double s = 0, s2 = 0;
    for (int64_t c = 0; c < cols; ++c) s += x[r * cols + c];
    const double mu = s / cols;
    for (int64_t c = 0; c < cols; ++c) s2 += (x[r * cols + c] - mu) * (x[r * cols + c] - mu);
    const double rs = 1 / std::sqrt(s2 / cols + 1e-5);
    EXPECT_EQ(mean.data[r], static_cast<float>(mean.data[r])) << "rounded to float32";
    EXPECT_EQ(rstd.data[r], static_cast<float>(rstd.data[r])) << "rounded to float32";
    EXPECT_NEAR(mean.data[r], mu, 1e-7 * std::max(std::fabs(mu), 1e-3)) << "row " << r;
    EXPECT_NEAR(rstd.data[r], rs, 1.2e-7 * rs) << "row " << r;
  }
  // The tangent is the backward's own draw.
  const int t = g.find_value("tangents_1");
  EXPECT_EQ(in.values.at(t).data, generate_inputs(g, 7).at(t).data);
  // The runner replays with these inputs and says where they came from.
  TraceResult tr = run_trace(path, reference_only(), nullptr);
  EXPECT_EQ(tr.error, "");
  EXPECT_NE(tr.input_source.find("from the float64 reference of forward trace " + kFwd),
            std::string::npos)
      << tr.input_source;
}

TEST(SavedInputs, RandomOpsOfTheForwardDrawTheSameMask) {
  // nanoGPT MLP with dropout: the backward's saved mask is the forward's draw from the seed.
  const std::string fwd = "nanogpt_mlp_dropout_train_fwd_2x8x64",
                    bwd = "nanogpt_mlp_dropout_train_bwd_2x8x64";
  const std::string path = step_without_golden("saved_dropout", fwd, bwd, true);
  Graph g = load_trace(path);
  ReplayInputs in = make_replay_inputs(g, 3);
  Graph f = load_trace((std::filesystem::path(path).parent_path() / (fwd + ".json")).string());
  const auto fref = run_reference(f, generate_inputs(f, 3));
  int linked = 0;
  for (int v : g.inputs) {
    if (!g.values[v].from) continue;
    ++linked;
    EXPECT_EQ(in.values.at(v).data, fref.at(f.find_value(g.values[v].from->output)).data)
        << g.values[v].name;
  }
  EXPECT_GT(linked, 0);
  EXPECT_NO_THROW(run_reference(g, in.values));
}

TEST(SavedInputs, WithoutItsForwardTheSavedInputsStayIndependentDraws) {
  const std::string path = step_without_golden("saved_missing", kFwd, kBwd, false);
  Graph g = load_trace(path);
  ReplayInputs in = make_replay_inputs(g, 7);
  EXPECT_NE(in.source.find("generated independently"), std::string::npos) << in.source;
  EXPECT_NE(in.source.find(kFwd + ".json not found"), std::string::npos) << in.source;
  const auto drawn = generate_inputs(g, 7);
  for (int v : g.inputs) EXPECT_EQ(in.values.at(v).data, drawn.at(v).data) << g.values[v].name;
}

TEST(SavedInputs, LinkToAnOutputTheForwardLacksIsBadInput) {
  const std::string path = step_without_golden("saved_bad_output", kFwd, kBwd, true, [](json& t) {
    input_of(t, "rsqrt")["from"]["output"] = "rsqrt_2";
  });
  Graph g = load_trace(path);
  try {
    forwards_of_saved_inputs(g);
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path + ": node 'rsqrt'"), std::string::npos) << what;
    EXPECT_NE(what.find("'rsqrt_2'"), std::string::npos) << what;
    EXPECT_NE(what.find("its outputs: convert_element_type_1, x, weight, getitem_1, rsqrt"),
              std::string::npos)
        << what;
  }
  TraceResult tr = run_trace(path, reference_only(), nullptr);
  EXPECT_EQ(tr.error_kind, TraceResult::Error::kBadInput) << tr.error;
  EXPECT_NE(tr.error.find(path), std::string::npos) << tr.error;
}

TEST(SavedInputs, LinkToAnOutputOfAnotherShapeIsBadInput) {
  const std::string path = step_without_golden("saved_bad_shape", kFwd, kBwd, true, [](json& t) {
    input_of(t, "getitem_1")["from"]["output"] = "convert_element_type_1";
  });
  Graph g = load_trace(path);
  try {
    forwards_of_saved_inputs(g);
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path + ": node 'getitem_1'"), std::string::npos) << what;
    EXPECT_NE(what.find("is bfloat16[2, 8, 1600]"), std::string::npos) << what;
  }
}

TEST(SavedInputs, MalformedLinksAreBadInput) {
  for (json from : {json("rsqrt"), json{{"trace", kFwd}}, json{{"trace", "../x"}, {"output", "y"}},
                    json{{"trace", kFwd}, {"output", 3}}}) {
    json t = read_json(trace_path(kBwd));
    t.erase("golden");
    input_of(t, "rsqrt")["from"] = from;
    try {
      parse_trace(t, "bwd.json");
      FAIL() << "accepted \"from\": " << from.dump();
    } catch (const TraceError& e) {
      EXPECT_NE(std::string(e.what()).find("bwd.json: node 'rsqrt': "), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("\"from\""), std::string::npos) << e.what();
    }
  }
}

TEST(SavedInputs, GoldenTracesKeepPyTorchsSavedTensors) {
  Graph g = load_trace(trace_path(kBwd));
  ReplayInputs in = make_replay_inputs(g, 7);
  EXPECT_EQ(in.source.rfind("golden (", 0), 0u) << in.source;
  EXPECT_EQ(in.source.find("forward"), std::string::npos) << in.source;
}

// Every bundled backward's links name outputs of its forward, found beside it, with the input's
// shape and dtype; every saved input has one.
TEST(SavedInputs, EveryBundledBackwardLinksToItsForward) {
  int traces = 0;
  for (const auto& e : std::filesystem::directory_iterator(REPLAY_TRACES_DIR)) {
    const std::string name = e.path().stem().string();
    if (e.path().extension() != ".json" || name.find("_train_bwd_") == std::string::npos) continue;
    ++traces;
    Graph g = load_trace(e.path().string());
    std::vector<ForwardOfSaved> fwds = forwards_of_saved_inputs(g);
    ASSERT_EQ(fwds.size(), 1u) << name;
    EXPECT_TRUE(fwds[0].graph.has_value()) << name << ": " << fwds[0].path;
    EXPECT_EQ(fwds[0].trace, g.source.value("forward_trace", "")) << name;
    for (int v : g.inputs)
      if (g.values[v].role == "saved") {
        EXPECT_TRUE(g.values[v].from) << name << " " << g.values[v].name;
      }
  }
  EXPECT_GE(traces, 27);  // 14 workloads, the dropout one at its small shape only
}
