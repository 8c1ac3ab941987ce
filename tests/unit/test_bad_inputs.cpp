// The malformed traces of tests/data/bad (tests/data/make_cases.py made them): each is bad input,
// reported with the file and the node named, without a crash; the edge cases of tests/data/edge
// load and run; the reference and the upload agree on stride-0 inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "harness/cli/exit_codes.hpp"
#include "harness/replay/runner.hpp"
#include "impls/reference/reference.hpp"
#include "test_util.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;

namespace {

std::string data(const std::string& rel) {
  return std::string(REPLAY_TRACES_DIR) + "/../tests/data/" + rel;
}

// No time budget: these traces are checked for what is wrong with them, not for their size.
RunOptions reference_only() {
  RunOptions opt;
  opt.variants = {"reference"};
  opt.reference_budget_s = 0;
  return opt;
}

struct BadCase {
  const char* file;
  const char* node;  ///< the node (or input) the error must name; "" for a file-level error
  const char* says;  ///< a phrase the error must contain
};

class BadTrace : public ::testing::TestWithParam<BadCase> {};

}  // namespace

TEST_P(BadTrace, IsBadInputNamingFileAndNode) {
  const BadCase& c = GetParam();
  const std::string path = data(std::string("bad/") + c.file + ".json");
  TraceResult tr = run_trace(path, reference_only(), nullptr);
  EXPECT_EQ(tr.error_kind, TraceResult::Error::kBadInput) << tr.error;
  EXPECT_NE(tr.error.find(path), std::string::npos) << tr.error;
  if (*c.node) {
    EXPECT_NE(tr.error.find(std::string("node '") + c.node + "'"), std::string::npos) << tr.error;
  }
  EXPECT_NE(tr.error.find(c.says), std::string::npos) << tr.error;
}

INSTANTIATE_TEST_SUITE_P(
    Files, BadTrace,
    ::testing::Values(
        BadCase{"amax_zero_size_dim", "amax", "a max of no elements"},
        BadCase{"deep_nesting", "", "nested deeper than 64"},
        BadCase{"duplicated_output", "", "listed twice"},
        BadCase{"float_abc", "add", "\"inf\" | \"-inf\" | \"nan\""},
        BadCase{"getitem_index_2_32", "mean", "out of range [0, 1]"},
        BadCase{"negative_stride", "x", "negative stride"},
        BadCase{"numel_overflow", "x", "larger than the 64 TiB"},
        BadCase{"overlapping_output", "y", "overlap or leave gaps"},
        BadCase{"rsqrt_three_args", "rsqrt", "at most 1 positional argument"},
        BadCase{"shape_overflow_in_view", "y", "overflows int64"},
        BadCase{"too_many_dims", "x", "more than 8 dims"},
        BadCase{"unknown_keyword", "y", "unexpected keyword argument 'approximate'"},
        // Cut out (replay run cuts unsupported ops), it would leave nothing to replay.
        BadCase{"unknown_op", "y", "unknown op 'aten.fancy_rsqrt.default'"},
        BadCase{"cut_output_without_metadata", "max_q",
                "records no tensor metadata for that output ({\"opaque\":\"int\"})"},
        BadCase{"cut_without_outputs", "flash", "records no \"outputs\" for it"},
        BadCase{"world_size_not_integer", "", "world_size"},
        BadCase{"tuple_used_as_tensor", "y", "select one with getitem"},
        BadCase{"getitem_of_getitem", "again", "not a multi-output node"},
        BadCase{"getitem_wrong_outputs", "var", "differs from output 0 of 'vm'"},
        BadCase{"getitem_wrong_strides", "right",
                "strides [4, 1] differ from those of output 1 of 'sp', [8, 1]"},
        BadCase{"getitem_unknown_keyword", "var", "unexpected keyword argument 'bogus'"},
        BadCase{"view_of_non_viewable", "y", "view of a non-viewable layout"},
        BadCase{"argument_given_twice", "y", "given both by position and by keyword"}),
    [](const auto& info) { return std::string(info.param.file); });

TEST(BadTrace, EveryFileInTheFolderIsCovered) {
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(data("bad")))
    files += e.path().extension() == ".json";
  EXPECT_EQ(files, 23u) << "a new file in tests/data/bad needs its row in BadTrace's table";
}

TEST(BadTrace, HundredThousandDeepNestingDoesNotOverflowTheStack) {
  std::string text = "{\"schema\": \"replay-trace/1\", \"source\": ";
  text += std::string(100000, '[') + std::string(100000, ']') + "}";
  try {
    parse_trace_text(text, "<deep>");
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper"), std::string::npos);
  }
}

// A valid trace whose float64 reference needs more memory than this machine has (745 GB here) is
// a limit of the machine, not bad input: skipped with the reason, naming the value, like a trace
// over the reference time budget; the run goes on and exits 0.
TEST(EdgeTrace, ReferenceLargerThanThisMachineIsNotReplayed) {
  TraceResult tr = run_trace(data("edge/huge_consistent_shape.json"), reference_only(), nullptr);
  EXPECT_EQ(tr.error_kind, TraceResult::Error::kNone) << tr.error;
  EXPECT_NE(tr.not_replayed.find("of host memory"), std::string::npos) << tr.not_replayed;
  EXPECT_NE(tr.not_replayed.find("node 'x'"), std::string::npos) << tr.not_replayed;
  ASSERT_FALSE(tr.regions.empty());
  for (const auto& row : tr.regions)
    for (const auto& v : row.variants) EXPECT_EQ(v.skipped, tr.not_replayed);
  RunResult run;
  run.traces.push_back(tr);
  EXPECT_EQ(exit_code(run, false, false), kExitOk);
}

TEST(EdgeTrace, ZeroDimReducedOverDimZeroIsTheValueItself) {
  Graph g = load_trace(data("edge/sum_0d_dim0.json"));
  auto in = generate_inputs(g, 3);
  auto vals = run_reference(g, in);
  ASSERT_EQ(vals.at(g.outputs[0]).data.size(), 1u);
  EXPECT_EQ(vals.at(g.outputs[0]).data[0], in.at(g.inputs[0]).data[0]);
}

TEST(EdgeTrace, ZeroSizeTensorsRun) {
  Graph g = load_trace(data("edge/zero_size.json"));
  auto vals = run_reference(g, generate_inputs(g, 3));
  const HostTensor& s = vals.at(g.outputs[0]);  // a sum over a 0-size dim is 0
  ASSERT_EQ(s.data.size(), 8u);
  for (double v : s.data) EXPECT_EQ(v, 0.0);
  EXPECT_TRUE(vals.at(g.outputs[1]).data.empty());
}

TEST(EdgeTrace, StrideZeroInputIsGeneratedAndPackedConsistently) {
  Graph g = load_trace(data("edge/stride0_input.json"));
  const auto inputs = generate_inputs(g, 5);
  const HostTensor& x = inputs.at(g.inputs[0]);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(x.data[c], x.data[3 + c]);  // rows alias one storage row
  auto bytes = pack(x, g.meta(g.inputs[0]));
  EXPECT_EQ(bytes.size(), 3 * sizeof(float));  // what the GPU gets
  EXPECT_EQ(unpack(bytes, g.meta(g.inputs[0])).data, x.data);
  HostTensor bad = x;
  bad.data[4] += 1;  // values a stride-0 layout cannot hold
  EXPECT_THROW(pack(bad, g.meta(g.inputs[0])), std::invalid_argument);
}

TEST(EdgeTrace, EveryEdgeFileRunsOnTheReference) {
  for (const auto& e : std::filesystem::directory_iterator(data("edge"))) {
    TraceResult tr = run_trace(e.path().string(), reference_only(), nullptr);
    EXPECT_EQ(tr.error_kind, TraceResult::Error::kNone) << e.path() << ": " << tr.error;
  }
}

namespace {

// A copy of the small golden trace whose sidecar is `sidecar` (bytes written beside it).
std::string trace_with_sidecar(const std::string& name, const std::string& sidecar) {
  nlohmann::json t = read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  t["golden"]["file"] = name + ".safetensors";
  write_temp(name + ".safetensors", sidecar);
  return write_temp(name + ".json", t.dump());
}

std::string safetensors(const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return s + header + std::string(data_bytes, '\0');
}

}  // namespace

TEST(BadGolden, MalformedSidecarsAreBadInputNamingFileAndTensor) {
  struct Case {
    std::string name, sidecar, says;
  };
  const std::vector<Case> cases = {
      {"golden_array", safetensors("[1, 2]", 0), "header to be an object"},
      {"golden_number", safetensors("1e400", 0), "malformed safetensors header"},
      {"golden_entry", safetensors(R"({"x": 5})", 0), "node 'x'"},
      {"golden_negative",
       safetensors(R"({"x": {"dtype": "BF16", "shape": [-2, 8, 1600],
          "data_offsets": [0, 0]}})",
                   0),
       "non-negative sizes"},
      // float32 data for a bfloat16 input: the reference would compute on unrounded values
      {"golden_dtype",
       safetensors(R"({"x": {"dtype": "F32", "shape": [2, 8, 1600],
          "data_offsets": [0, 102400]}})",
                   102400),
       "differs from the trace's bfloat16"},
  };
  for (const auto& c : cases) {
    TraceResult tr = run_trace(trace_with_sidecar(c.name, c.sidecar), reference_only(), nullptr);
    EXPECT_EQ(tr.error_kind, TraceResult::Error::kBadInput) << c.name << ": " << tr.error;
    EXPECT_NE(tr.error.find(c.name + ".safetensors"), std::string::npos) << tr.error;
    EXPECT_NE(tr.error.find(c.says), std::string::npos) << c.name << ": " << tr.error;
  }
}

TEST(BadTrace, ADirectoryNamedLikeATraceIsBadInput) {
  auto dir = std::filesystem::temp_directory_path() / "replay_tests" / "dir_trace.json";
  std::filesystem::create_directories(dir);
  TraceResult tr = run_trace(dir.string(), reference_only(), nullptr);
  EXPECT_EQ(tr.error_kind, TraceResult::Error::kBadInput);
  EXPECT_NE(tr.error.find("not a regular file"), std::string::npos) << tr.error;
}

// A trace whose reference is over the time budget is not replayed, and says why with the estimate;
// it is not an error. The budget is what decides: lifted, the same trace runs.
TEST(ReferenceBudget, OverBudgetTraceIsNotReplayedAndSaysWhy) {
  const std::string path = std::string(REPLAY_TRACES_DIR) + "/nanogpt_layernorm_fwd_2x8x1600.json";
  RunOptions opt = reference_only();
  opt.reference_budget_s = 1e-9;  // every trace is over it
  TraceResult tr = run_trace(path, opt, nullptr);
  EXPECT_EQ(tr.error_kind, TraceResult::Error::kNone) << tr.error;
  EXPECT_NE(tr.not_replayed.find("--reference-budget"), std::string::npos) << tr.not_replayed;
  EXPECT_TRUE(tr.golden_check.empty());
  ASSERT_FALSE(tr.regions.empty());
  for (const auto& r : tr.regions)
    for (const auto& v : r.variants) EXPECT_EQ(v.skipped, tr.not_replayed);
  EXPECT_EQ(tr.verdict(), Verdict::kNotCompared);
  opt.reference_budget_s = 60;
  tr = run_trace(path, opt, nullptr);
  EXPECT_TRUE(tr.not_replayed.empty()) << tr.not_replayed;
  EXPECT_FALSE(tr.golden_check.empty());
}

// The estimate counts the matmuls' FLOPs (2·M·N·K each), the elements the other ops write (views
// too: the reference materializes them) and the generated inputs (a draw per storage element and
// the logical copy).
TEST(ReferenceBudget, FootprintCountsMatmulFlopsAndElements) {
  const Graph g =
      load_trace(std::string(REPLAY_TRACES_DIR) + "/linear_fp32_train_fwd_2x8x64x32.json");
  const ReferenceFootprint f = reference_footprint(g);
  EXPECT_DOUBLE_EQ(f.gemm_flops, 2.0 * 16 * 32 * 64);  // x [16, 64] @ w.t() [64, 32]
  const double converts = 2 * 8 * 64 + 32 * 64 + 2 * 8 * 32;
  const double views =
      64 * 32 + 16 * 64 + 2 * 8 * 32 + 32 * 64;  // permute, view, view_1, permute_3
  const double inputs = 2 * (2 * 8 * 64 + 32 * 64);
  EXPECT_DOUBLE_EQ(f.elements, converts + views + inputs);
  EXPECT_GT(f.seconds(1.0), f.seconds(1000.0));
}
