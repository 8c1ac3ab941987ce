// Loader and its bad inputs: each error names the file, the node id and what was expected.
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

json small_trace() {
  return read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
}

json& node(json& t, const std::string& id) {
  for (auto& n : t["nodes"])
    if (n["id"] == id) return n;
  throw std::runtime_error("no node " + id);
}

// Loads `doc` from a file and returns the TraceError message (fails the test if none).
std::string load_error(const std::string& file, const std::string& text) {
  std::string path = write_temp(file, text);
  try {
    load_trace(path);
  } catch (const TraceError& e) {
    EXPECT_EQ(e.file(), path);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a TraceError for " << file;
  return "";
}

}  // namespace

TEST(Loader, LoadsBundledTraces) {
  for (const char* name :
       {"nanogpt_layernorm_fwd_16x128x1600", "nanogpt_layernorm_fwd_16x1024x1600",
        "nanogpt_layernorm_fwd_2x8x1600", "llama_rmsnorm_fwd_2x8x4096"}) {
    Graph g = load_trace(trace_path(name));
    EXPECT_EQ(g.name, name);
    EXPECT_FALSE(g.nodes.empty());
    EXPECT_EQ(g.outputs.size(), 1u);
  }
}

TEST(Loader, GraphStructure) {
  Graph g = load_trace(trace_path("nanogpt_layernorm_fwd_16x1024x1600"));
  ASSERT_EQ(g.inputs.size(), 3u);
  EXPECT_EQ(g.meta(g.inputs[0]).str(), "bfloat16[16, 1024, 1600]");
  EXPECT_EQ(g.nodes.size(), 9u);  // 11 FX nodes less the two getitems, resolved to aliases
  const Node& vm = g.nodes[1];
  EXPECT_EQ(vm.op, Op::kVarMean);
  EXPECT_EQ(vm.dims, (std::vector<int64_t>{2}));
  EXPECT_TRUE(vm.keepdim);
  EXPECT_EQ(vm.correction, 0);
  ASSERT_TRUE(g.values[g.inputs[0]].stats.has_value());
  EXPECT_NEAR(g.values[g.inputs[0]].stats->std, 1.0, 0.05);
  // `add` reads getitem (= var_mean's output 0) and the scalar eps.
  const Node& add = g.nodes[2];
  EXPECT_EQ(add.operands[0].value, vm.outputs[0]);
  EXPECT_FALSE(add.operands[1].is_tensor());
  EXPECT_DOUBLE_EQ(add.operands[1].scalar, 1e-5);
}

TEST(LoaderBadInput, MissingFile) {
  try {
    load_trace("/nonexistent/dir/trace.json");
    FAIL() << "expected TraceError";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/trace.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
}

TEST(LoaderBadInput, MalformedJson) {
  std::string msg = load_error("malformed.json", "{\"schema\": \"replay-trace/1\", \"nodes\": [");
  EXPECT_NE(msg.find("malformed JSON"), std::string::npos) << msg;
}

TEST(LoaderBadInput, WrongSchema) {
  json t = small_trace();
  t["schema"] = "replay-trace/99";
  std::string msg = load_error("schema.json", t.dump());
  EXPECT_NE(msg.find("replay-trace/1"), std::string::npos) << msg;
}

TEST(LoaderBadInput, UnknownOp) {
  json t = small_trace();
  node(t, "rsqrt")["op"] = "aten.fancy_rsqrt.default";
  std::string msg = load_error("unknown_op.json", t.dump());
  EXPECT_NE(msg.find("node 'rsqrt'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown op 'aten.fancy_rsqrt.default'"), std::string::npos) << msg;
}

TEST(LoaderBadInput, UnknownDtype) {
  json t = small_trace();
  t["inputs"][0]["dtype"] = "bfloat17";
  std::string msg = load_error("unknown_dtype.json", t.dump());
  EXPECT_NE(msg.find("node 'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown dtype 'bfloat17'"), std::string::npos) << msg;
}

TEST(LoaderBadInput, ShapeDisagreesWithInputs) {
  json t = small_trace();
  node(t, "sub")["outputs"][0]["shape"] = {2, 8, 1599};
  std::string msg = load_error("bad_shape.json", t.dump());
  EXPECT_NE(msg.find("node 'sub'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 8, 1599]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gives [2, 8, 1600]"), std::string::npos) << msg;
}

TEST(LoaderBadInput, IncompatibleBroadcast) {
  json t = small_trace();
  t["inputs"][1]["shape"] = {1599};
  t["inputs"][1]["stride"] = {1};
  std::string msg = load_error("bad_broadcast.json", t.dump());
  EXPECT_NE(msg.find("node 'mul_1'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("do not broadcast"), std::string::npos) << msg;
}

TEST(LoaderBadInput, MissingInput) {
  json t = small_trace();
  t["inputs"].erase(2);  // bias
  t.erase("golden");
  std::string msg = load_error("missing_input.json", t.dump());
  EXPECT_NE(msg.find("node 'add_1'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("references 'bias'"), std::string::npos) << msg;
}

TEST(LoaderBadInput, WrongArgumentType) {
  json t = small_trace();
  node(t, "var_mean")["kwargs"]["keepdim"] = "yes";
  std::string msg = load_error("bad_arg.json", t.dump());
  EXPECT_NE(msg.find("node 'var_mean'"), std::string::npos) << msg;
}

TEST(LoaderBadInput, UndefinedGraphOutput) {
  json t = small_trace();
  t["outputs"] = {"nope"};
  std::string msg = load_error("bad_output.json", t.dump());
  EXPECT_NE(msg.find("references 'nope'"), std::string::npos) << msg;
}

TEST(LoaderBadInput, BundledBadShapeFile) {
  try {
    load_trace(std::string(REPLAY_TRACES_DIR) + "/../tests/data/bad_shape.json");
    FAIL() << "expected TraceError";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.node(), "sub");
  }
}
