// A trace with ops the harness cannot run (tests/data/cut/, made by tests/data/make_cases.py): the
// loader cuts the graph around them (LoadOptions::cut_unsupported; traces/SCHEMA.md "Cut nodes"),
// the rest replays on the reference with the fusion regions found, golden outputs downstream of a
// cut are not compared (and say why), and every report names the cut nodes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "harness/replay/repro.hpp"
#include "harness/replay/runner.hpp"
#include "harness/report/html.hpp"
#include "harness/report/markdown.hpp"
#include "harness/report/results.hpp"
#include "harness/report/results_io.hpp"
#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "impls/reference/saved_inputs.hpp"
#include "test_util.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/safetensors.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;

namespace {

std::string data(const std::string& rel) {
  return std::string(REPLAY_TRACES_DIR) + "/../tests/data/" + rel;
}

const std::string kAttention = data("cut/attention_after_layernorm.json");
const std::string kSynthetic = data("cut/synthetic_stats.json");

RunOptions reference_only() {
  RunOptions opt;
  opt.variants = {"reference"};
  opt.reference_budget_s = 0;
  return opt;
}

const CutNode* find_cut(const Graph& g, const std::string& id) {
  for (const CutNode& c : g.cut)
    if (c.id == id) return &c;
  return nullptr;
}

const NumericsResult* find_check(const TraceResult& tr, const std::string& value) {
  for (const auto& n : tr.golden_check)
    if (n.value == value) return &n;
  return nullptr;
}

}  // namespace

TEST(CutGraph, UnknownOpsAreCutAndTheirReadOutputsBecomeInputs) {
  const Graph g = load_trace(kAttention, cut_options());
  ASSERT_EQ(g.cut.size(), 2u);
  const CutNode* assert_node = find_cut(g, "_assert");
  ASSERT_NE(assert_node, nullptr);
  EXPECT_EQ(assert_node->op, "aten._assert_tensor_metadata.default");
  EXPECT_TRUE(assert_node->outputs.empty());
  const CutNode* sdpa = find_cut(g, "sdpa");
  ASSERT_NE(sdpa, nullptr);
  EXPECT_EQ(sdpa->reason, "unsupported op 'aten._scaled_dot_product_flash_attention.default'");
  // Only the outputs the graph reads (through getitem 0 and 1), named by their getitems; the
  // other seven (None, ints, uint64 RNG state, the empty debug mask) are not inputs.
  ASSERT_EQ(sdpa->outputs.size(), 2u);
  EXPECT_EQ(sdpa->outputs[0].value, "getitem_2");
  EXPECT_EQ(sdpa->outputs[0].index, 0);
  EXPECT_TRUE(sdpa->outputs[0].recorded);  // stats on the tuple's output entry
  EXPECT_DOUBLE_EQ(sdpa->outputs[0].stats.std, 0.5);
  EXPECT_EQ(sdpa->outputs[1].value, "getitem_3");
  EXPECT_TRUE(sdpa->outputs[1].recorded);  // stats on the getitem's own record
  EXPECT_DOUBLE_EQ(sdpa->outputs[1].stats.mean, 2.0);
  for (const Node& n : g.nodes) EXPECT_TRUE(n.id != "sdpa" && n.id != "_assert") << n.id;
  const int v = g.find_value("getitem_2");
  ASSERT_GE(v, 0);
  EXPECT_TRUE(g.values[v].graph_input);
  EXPECT_EQ(g.values[v].producer, -1);
  EXPECT_EQ(g.cut[g.values[v].cut].id, "sdpa");
  EXPECT_EQ(g.meta(v).str(), "bfloat16[2, 25, 8, 64]");
  EXPECT_EQ(g.meta(v).stride, (std::vector<int64_t>{12800, 64, 1600, 1}));
  EXPECT_NE(std::find(g.inputs.begin(), g.inputs.end(), v), g.inputs.end());
  // The nodes that read the cut outputs validated as any node does (shapes, views, dtypes).
  EXPECT_GE(g.find_value("attn_residual"), 0);
  EXPECT_EQ(g.meta(g.find_value("lse_sum")).str(), "float32[2, 25]");
  EXPECT_NE(sdpa->describe().find("outputs getitem_2, getitem_3 drawn from recorded stats"),
            std::string::npos)
      << sdpa->describe();
}

TEST(CutGraph, WithoutTheOptionAnUnknownOpIsStillBadInput) {
  try {
    load_trace(kAttention);
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("node '_assert'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unknown op 'aten._assert_tensor_metadata.default'"), std::string::npos)
        << msg;
  }
}

// Values of a dtype the harness lacks (tests/data/cut/complex_rope.json: torchtitan's complex
// RoPE, a uint8 mask): kept out of the graph, every node reading one is cut whatever its op (a
// view and a mul the harness would run), the first real value after them (view_as_real's output)
// is an input drawn from its recorded stats, the rest replays, and the complex graph output is
// named as not replayed.
TEST(CutGraph, ValuesOfADtypeTheHarnessLacksCutTheirReaders) {
  const std::string file = data("cut/complex_rope.json");
  const Graph g = load_trace(file, cut_options());
  std::vector<std::string> ids;
  for (const CutNode& c : g.cut) ids.push_back(c.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"view_as_complex", "view_1", "mul", "view_as_real"}));
  const CutNode* vc = find_cut(g, "view_as_complex");
  ASSERT_NE(vc, nullptr);
  EXPECT_EQ(vc->reason, "unsupported op 'aten.view_as_complex.default'");
  EXPECT_EQ(vc->lacked_outputs,
            std::vector<std::string>{"view_as_complex: complex64 [1, 8, 4, 8]"});
  EXPECT_NE(vc->describe().find("a dtype the harness lacks: its readers are cut"),
            std::string::npos)
      << vc->describe();
  EXPECT_EQ(find_cut(g, "view_1")->reason,
            "reads 'freqs_cis', complex64 [8, 8]: a dtype the harness lacks");
  EXPECT_EQ(find_cut(g, "mul")->reason,
            "reads 'view_as_complex', complex64 [1, 8, 4, 8]: a dtype the harness lacks");
  const CutNode* vr = find_cut(g, "view_as_real");
  ASSERT_NE(vr, nullptr);
  ASSERT_EQ(vr->outputs.size(), 1u);
  EXPECT_TRUE(vr->outputs[0].recorded);
  EXPECT_DOUBLE_EQ(vr->outputs[0].stats.max, 3.5);
  // xq and the cut output are the inputs; the complex table and the uint8 mask are not
  std::vector<std::string> in;
  for (int v : g.inputs) in.push_back(g.values[v].name);
  EXPECT_EQ(in, (std::vector<std::string>{"xq", "view_as_real"}));
  ASSERT_EQ(g.lacked.size(), 3u);
  EXPECT_EQ(g.lacked[0].name, "freqs_cis");
  EXPECT_TRUE(g.lacked[0].input);
  EXPECT_EQ(g.lacked[1].name, "mask");
  EXPECT_EQ(g.lacked[1].what, "uint8 [8, 8]");
  EXPECT_EQ(g.lacked[2].name, "view_1");  // returned for the backward: not replayed
  EXPECT_FALSE(g.lacked[2].input);
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.values[g.outputs[0]].name, "convert_element_type_1");
  const TraceResult tr = run_trace(file, reference_only(), nullptr);
  EXPECT_EQ(tr.error_kind, TraceResult::Error::kNone) << tr.error;
  EXPECT_EQ(tr.cut_nodes.size(), 4u);
}

// Without cutting (LoadOptions::cut_unsupported off), such an input is bad input naming it and its
// dtype; `replay validate` cuts, then calls the trace invalid unless --allow-cut (the CLI test
// cli_validate_lacked_dtype).
TEST(CutGraph, WithoutTheOptionALackedDtypeIsBadInput) {
  try {
    load_trace(data("cut/complex_rope.json"));
    FAIL() << "expected a TraceError";
  } catch (const TraceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("freqs_cis"), std::string::npos) << msg;
    EXPECT_NE(msg.find("input is complex64 [8, 8], a dtype the harness lacks"), std::string::npos)
        << msg;
  }
}

TEST(CutGraph, TheFusionRegionsOfTheRestAreFound) {
  const Graph g = load_trace(kAttention, cut_options());
  const Plan p = make_plan(g, fusion_registry());
  ASSERT_EQ(p.regions.size(), 1u);
  EXPECT_EQ(p.regions[0].fusion->name, "layernorm_fwd");
}

// The reference runs the rest of the graph. Golden: the LayerNorm output (upstream of the cut)
// and lse_sum (from logsumexp, a cut output the golden file holds, so PyTorch's value is used)
// are compared; attn_residual (downstream of the attention output, drawn from its stats) is not,
// and says why: its golden value is wrong on purpose, so comparing it would fail.
TEST(CutGraph, ReferenceRunsTheRestAndGoldenDownstreamOfTheCutIsNotCompared) {
  const TraceResult tr = run_trace(kAttention, reference_only(), nullptr);
  ASSERT_EQ(tr.error_kind, TraceResult::Error::kNone) << tr.error;
  ASSERT_EQ(tr.cut_nodes.size(), 2u);
  for (const char* v : {"convert_element_type_1", "lse_sum", "getitem_3"}) {
    const NumericsResult* n = find_check(tr, v);
    ASSERT_NE(n, nullptr) << v;
    EXPECT_TRUE(n->pass()) << v << ": " << n->failure();
  }
  EXPECT_EQ(find_check(tr, "attn_residual"), nullptr);
  ASSERT_EQ(tr.golden_not_compared.size(), 1u);
  EXPECT_NE(tr.golden_not_compared[0].find("attn_residual: depends on cut node(s) 'sdpa'"),
            std::string::npos)
      << tr.golden_not_compared[0];
  EXPECT_EQ(tr.verdict(), Verdict::kPass);
  EXPECT_NE(tr.input_source.find("outputs getitem_2 of cut nodes drawn from their stats"),
            std::string::npos)
      << tr.input_source;
}

// The wrong variant: the same trace with lse_sum's golden value off by 0.5 fails, so the golden
// value of the cut output is really used and lse_sum really compared.
TEST(CutGraph, AWrongGoldenValueDownstreamOfAGoldenCutOutputFails) {
  const auto dir = std::filesystem::temp_directory_path() / "replay_tests" / "cut_wrong";
  std::filesystem::create_directories(dir);
  auto tensors = read_safetensors(data("cut/attention_after_layernorm.safetensors"));
  for (double& x : tensors.at("lse_sum").data) x += 0.5;
  write_safetensors((dir / "attention_after_layernorm.safetensors").string(), tensors);
  std::filesystem::copy_file(kAttention, dir / "attention_after_layernorm.json",
                             std::filesystem::copy_options::overwrite_existing);
  const TraceResult tr =
      run_trace((dir / "attention_after_layernorm.json").string(), reference_only(), nullptr);
  ASSERT_EQ(tr.error_kind, TraceResult::Error::kNone) << tr.error;
  const NumericsResult* n = find_check(tr, "lse_sum");
  ASSERT_NE(n, nullptr);
  EXPECT_FALSE(n->pass());
  EXPECT_EQ(tr.verdict(), Verdict::kFail);
}

// The values: the cut output the golden file holds is PyTorch's, the other follows its recorded
// stats, and the ops after the cut compute on them.
TEST(CutGraph, CutOutputsAreDrawnFromTheirStatsAndTheRestComputesOnThem) {
  const Graph g = load_trace(kAttention, cut_options());
  const ReplayInputs in = make_replay_inputs(g, 7);
  const int lse = g.find_value("getitem_3"), attn = g.find_value("getitem_2");
  for (double x : in.values.at(lse).data) ASSERT_EQ(x, 0.5);  // golden
  const HostData& a = in.values.at(attn).data;
  double sum = 0, sq = 0;
  for (double x : a) sum += x, sq += x * x;
  const double mean = sum / a.size(), std = std::sqrt(sq / a.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std, 0.5, 0.02);
  const auto ref = run_reference(g, in.values);
  const HostTensor& res = ref.at(g.find_value("attn_residual"));
  const HostTensor& ln = ref.at(g.find_value("convert_element_type_1"));
  const HostTensor& at = in.values.at(attn);                       // logical [2, 25, 8, 64]
  for (int64_t i : {int64_t(0), int64_t(1601), int64_t(25599)}) {  // [b, t, h*64 + d]
    const int64_t b = i / 12800, t = i / 1600 % 8, h = i % 1600 / 64, d = i % 64;
    const double x = at.data[((b * 25 + h) * 8 + t) * 64 + d];
    EXPECT_EQ(res.data[i], round_to(DType::kBFloat16, x + ln.data[i])) << i;
  }
  EXPECT_DOUBLE_EQ(ref.at(g.find_value("lse_sum")).data[0], 4.0);
}

// No stats recorded: floats mean 0, std 1; integers all zero; the description says synthetic.
TEST(CutGraph, OutputsWithoutStatsGetTheSyntheticDefault) {
  const Graph g = load_trace(kSynthetic, cut_options());
  ASSERT_EQ(g.cut.size(), 2u);
  EXPECT_FALSE(g.cut[0].outputs.at(0).recorded);
  EXPECT_DOUBLE_EQ(g.cut[0].outputs[0].stats.std, 1.0);
  EXPECT_DOUBLE_EQ(g.cut[1].outputs.at(0).stats.std, 0.0);
  EXPECT_NE(g.cut[0].describe().find("mystery (mean 0, std 1) drawn from synthetic stats"),
            std::string::npos)
      << g.cut[0].describe();
  const ReplayInputs in = make_replay_inputs(g, 3);
  const auto ref = run_reference(g, in.values);
  for (double x : ref.at(g.find_value("idx_plus")).data) ASSERT_EQ(x, 1.0);
  const HostData& m = in.values.at(g.find_value("mystery")).data;
  const HostData& y = ref.at(g.find_value("y")).data;
  double sq = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(y[i], -m[i]);
    sq += m[i] * m[i];
  }
  EXPECT_GT(sq, 0.0);  // drawn, not zeros
}

// A backward's saved input that its forward computes downstream of a cut: the forward's
// reference runs on its cut graph (the cut output drawn from its stats: 3, std 0), so the saved
// input is -3 everywhere.
TEST(CutGraph, SavedInputsComeFromTheReferenceOfACutForward) {
  const nlohmann::json fwd = {
      {"schema", "replay-trace/1"},
      {"name", "cut_fwd"},
      {"inputs", {{{"id", "x"}, {"shape", {4}}, {"dtype", "float32"}}}},
      {"nodes",
       {{{"id", "mystery"},
         {"op", "aten.mystery_op.default"},
         {"args", {{{"ref", "x"}}}},
         {"outputs",
          {{{"shape", {4}},
            {"dtype", "float32"},
            {"stats", {{"mean", 3.0}, {"std", 0.0}, {"min", 3.0}, {"max", 3.0}}}}}}},
        {{"id", "y"},
         {"op", "aten.neg.default"},
         {"args", {{{"ref", "mystery"}}}},
         {"outputs", {tensor({4}, "float32")}}}}},
      {"outputs", {"y"}}};
  const nlohmann::json bwd = {
      {"schema", "replay-trace/1"},
      {"name", "cut_bwd"},
      {"inputs",
       {{{"id", "y"},
         {"shape", {4}},
         {"dtype", "float32"},
         {"role", "saved"},
         {"from", {{"trace", "cut_fwd"}, {"output", "y"}}}},
        {{"id", "tangents_1"}, {"shape", {4}}, {"dtype", "float32"}, {"role", "tangent"}}}},
      {"nodes",
       {{{"id", "mul"},
         {"op", "aten.mul.Tensor"},
         {"args", {{{"ref", "y"}}, {{"ref", "tangents_1"}}}},
         {"outputs", {tensor({4}, "float32")}}}}},
      {"outputs", {"mul"}}};
  write_temp("cut_fwd.json", fwd.dump());
  const Graph g = load_trace(write_temp("cut_bwd.json", bwd.dump()), cut_options());
  const ReplayInputs in = make_replay_inputs(g, 1);
  for (double x : in.values.at(g.find_value("y")).data) EXPECT_EQ(x, -3.0);
  EXPECT_NE(in.source.find("from the float64 reference of forward trace cut_fwd"),
            std::string::npos)
      << in.source;
}

TEST(CutGraph, ResultsAndReportsNameTheCut) {
  RunResult run;
  run.environment = {{"git_revision", "test"}};
  run.traces.push_back(run_trace(kAttention, reference_only(), nullptr));
  const nlohmann::json j = to_json(run);
  const auto& cut = j.at("traces").at(0).at("cut_nodes");
  ASSERT_EQ(cut.size(), 2u);
  EXPECT_EQ(cut[1].at("node"), "sdpa");
  EXPECT_EQ(cut[1].at("op"), "aten._scaled_dot_product_flash_attention.default");
  EXPECT_EQ(cut[1].at("outputs").at(0).at("stats_source"), "recorded");
  EXPECT_EQ(cut[1].at("outputs").at(1).at("stats_source"), "golden");  // logsumexp: PyTorch's
  EXPECT_EQ(j.at("traces").at(0).at("golden_not_compared").size(), 1u);
  // Round trip (merge and compare read results.json back).
  const RunResult back = results_from_json(j, "<results>");
  ASSERT_EQ(back.traces.at(0).cut_nodes.size(), 2u);
  EXPECT_EQ(back.traces[0].cut_nodes[1].describe(), run.traces[0].cut_nodes[1].describe());
  EXPECT_EQ(back.traces[0].golden_not_compared, run.traces[0].golden_not_compared);
  const std::string md = render_markdown(run);
  EXPECT_NE(md.find("graph cut at 2 node(s)"), std::string::npos);
  EXPECT_NE(md.find("**graph cut**: node 'sdpa': unsupported op "
                    "'aten._scaled_dot_product_flash_attention.default'"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("not compared: attn_residual"), std::string::npos);
  EXPECT_NE(md.find("outputs getitem_2 drawn from recorded stats; outputs getitem_3 taken from "
                    "the golden file"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("1 trace(s) replayed with their graph cut"), std::string::npos);
  const std::string html = render_html(run);
  EXPECT_NE(html.find("<b>graph cut:</b> node &#39;sdpa&#39;"), std::string::npos)
      << html.substr(0, 2000);
}

// `replay repro` of a cut trace: the bundle holds the cut outputs as ordinary inputs and no
// unknown op, so it loads without cutting, and its reference gives the original's outputs.
TEST(CutGraph, AReproducerBundleHoldsTheCutOutputsAsInputs) {
  ReproRequest req;
  req.trace_path = kAttention;
  req.out_dir = (std::filesystem::temp_directory_path() / "replay_tests" / "cut_repro").string();
  const Graph b = load_trace(make_repro(req));  // strict: throws on an unknown op
  EXPECT_TRUE(b.cut.empty());
  const int v = b.find_value("getitem_2");
  ASSERT_GE(v, 0);
  EXPECT_TRUE(b.values[v].graph_input);
  const Graph g = load_trace(kAttention, cut_options());
  const auto ref = run_reference(g, make_replay_inputs(g, 0).values);
  const auto got = run_reference(b, make_inputs(b, 0).values);
  for (const char* out : {"attn_residual", "lse_sum"})
    EXPECT_TRUE(got.at(b.find_value(out)).data == ref.at(g.find_value(out)).data) << out;
}
