// The canonical form (workloads/plan/canonical.hpp): each rule removes or reorders what it says,
// and the reference gives bit-identical graph outputs before and after, on synthetic graphs of
// each rule and on every small bundled trace. Regions found on it map back to the captured nodes
// (absorbed aliases, tails) and a fusion's declines carry a reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/canonical.hpp"
#include "workloads/plan/plan.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace replay::fusions {
extern const FusionSpec layernorm_fwd;
}

namespace {

json node(const std::string& id, const std::string& op, json args, json outs,
          json kwargs = json::object()) {
  return {{"id", id}, {"op", op}, {"args", args}, {"kwargs", kwargs}, {"outputs", outs}};
}

json input(const std::string& id, std::vector<int64_t> shape, const std::string& dtype,
           double mean = 0.3, double std = 1.5) {
  json t = tensor(shape, dtype);
  t["id"] = id;
  t["stats"] = {{"mean", mean}, {"std", std}, {"min", mean - 6 * std}, {"max", mean + 6 * std}};
  return t;
}

json trace(const std::string& name, json inputs, json nodes, json outputs) {
  return {{"schema", "replay-trace/1"}, {"name", name},   {"world_size", 1},
          {"inputs", inputs},           {"nodes", nodes}, {"outputs", outputs}};
}

bool same_bits(const HostTensor& a, const HostTensor& b) {
  return a.meta.shape == b.meta.shape && a.meta.dtype == b.meta.dtype &&
         a.data.size() == b.data.size() &&
         std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(double)) == 0;
}

// The reference on `g` and on its canonical form, same inputs: every graph output bit-identical.
void expect_reference_unchanged(const Graph& g, const CanonicalGraph& c) {
  const auto inputs = generate_inputs(g, 7);
  const auto before = run_reference(g, inputs);
  const auto after = run_reference(c.graph, inputs);
  for (int v : g.outputs) {
    const int w = c.replaced_by[v];
    ASSERT_TRUE(after.count(w)) << g.name << ": output " << g.values[v].name;
    EXPECT_TRUE(same_bits(before.at(v), after.at(w)))
        << g.name << ": output " << g.values[v].name << " differs after canonicalization";
  }
}

int count_op(const Graph& g, const std::string& name) {
  int n = 0;
  for (const Node& nd : g.nodes) n += op_name(nd.op) == name;
  return n;
}

}  // namespace

TEST(Canonical, IdentityNodesAreFoldedAndTheirReadersRewired) {
  const std::vector<int64_t> x{4, 6, 6};
  json nodes = json::array({
      node("a", "aten.alias.default", {ref("x")}, {tensor(x, "float32")}),
      node("c", "aten.clone.default", {ref("a")}, {tensor(x, "float32")},
           {{"memory_format", "torch.contiguous_format"}}),
      node("cv", "prims.convert_element_type.default", {ref("c"), {{"dtype", "float32"}}},
           {tensor(x, "float32")}),
      node("v", "aten.view.default", {ref("cv"), x}, {tensor(x, "float32")}),
      node("e", "aten.expand.default", {ref("v"), x}, {tensor(x, "float32")}),
      node("p", "aten.permute.default", {ref("e"), {0, 1, 2}}, {tensor(x, "float32")}),
      node("tr", "aten.transpose.int", {ref("p"), 1, 1}, {tensor(x, "float32")}),
      node("sl", "aten.slice.Tensor", {ref("tr"), 1, 0, 9223372036854775807LL},
           {tensor(x, "float32")}),
      node("sq", "aten.squeeze.dim", {ref("sl"), 0}, {tensor(x, "float32")}),
      node("y", "aten.neg.default", {ref("sq")}, {tensor(x, "float32")}),
      // Not identities: a real transpose of a square [6, 6] pair, a partial slice.
      node("t2", "aten.transpose.int", {ref("y"), 1, 2}, {tensor(x, "float32")}),
      node("z", "aten.add.Tensor", {ref("t2"), ref("y")}, {tensor(x, "float32")}),
  });
  Graph g =
      parse_trace(trace("identity", {input("x", x, "float32")}, nodes, {"z", "a"}), "<identity>");
  const CanonicalGraph c = canonicalize(g);
  EXPECT_EQ(c.graph.nodes.size(), 3u);  // y, t2, z
  EXPECT_EQ(c.removed.size(), 9u);
  for (int k : c.removed) EXPECT_EQ(c.rule[k], CanonRule::kIdentity) << g.nodes[k].id;
  const Node& y = c.graph.nodes[0];
  EXPECT_EQ(y.id, "y");
  EXPECT_EQ(c.graph.values[y.operands[0].value].name, "x");  // read through the whole chain
  EXPECT_EQ(count_op(c.graph, "aten.transpose.int"), 1);
  // The alias returned as an output is the input itself now.
  EXPECT_EQ(c.graph.outputs.size(), 2u);
  EXPECT_TRUE(c.graph.values[g.find_value("x")].graph_output);
  expect_reference_unchanged(g, c);
}

TEST(Canonical, RoundTripsFold) {
  const std::vector<int64_t> x{2, 8, 16};
  json nodes = json::array({
      node("up", "prims.convert_element_type.default", {ref("x"), {{"dtype", "float32"}}},
           {tensor(x, "float32")}),
      node("down", "prims.convert_element_type.default", {ref("up"), {{"dtype", "bfloat16"}}},
           {tensor(x, "bfloat16")}),
      node("flat", "aten.view.default", {ref("down"), {16, 16}}, {tensor({16, 16}, "bfloat16")}),
      node("back", "aten.view.default", {ref("flat"), x}, {tensor(x, "bfloat16")}),
      node("y", "aten.mul.Tensor", {ref("back"), ref("up")}, {tensor(x, "float32")}),
      // A narrowing first convert is no round trip: fp32 -> bf16 -> fp32 rounds.
      node("n1", "prims.convert_element_type.default", {ref("y"), {{"dtype", "bfloat16"}}},
           {tensor(x, "bfloat16")}),
      node("n2", "prims.convert_element_type.default", {ref("n1"), {{"dtype", "float32"}}},
           {tensor(x, "float32")}),
  });
  Graph g = parse_trace(trace("roundtrip", {input("x", x, "bfloat16")}, nodes, {"n2", "flat"}),
                        "<roundtrip>");
  const CanonicalGraph c = canonicalize(g);
  std::vector<std::string> removed;
  for (int k : c.removed) removed.push_back(g.nodes[k].id);
  EXPECT_EQ(removed, (std::vector<std::string>{"down", "back"}));
  for (int k : c.removed) EXPECT_EQ(c.rule[k], CanonRule::kRoundTrip);
  EXPECT_EQ(count_op(c.graph, "prims.convert_element_type.default"), 3);  // up, n1, n2
  expect_reference_unchanged(g, c);
}

TEST(Canonical, CommutativeOperandsOrderedAndDeadNodesDropped) {
  json nodes = json::array({
      node("wh", "aten.mul.Tensor", {ref("w"), ref("h")}, {tensor({4, 8}, "float32")}),
      node("hw", "aten.mul.Tensor", {ref("h"), ref("w")}, {tensor({4, 8}, "float32")}),
      node("s", "aten.add.Tensor", {ref("wh"), ref("hw")}, {tensor({4, 8}, "float32")}),
      node("sub", "aten.sub.Tensor", {ref("w"), ref("h")}, {tensor({4, 8}, "float32")}),
      node("dead", "aten.exp.default", {ref("sub")}, {tensor({4, 8}, "float32")}),
  });
  Graph g = parse_trace(
      trace("order", {input("h", {4, 8}, "float32"), input("w", {8}, "float32")}, nodes, {"s"}),
      "<order>");
  const CanonicalGraph c = canonicalize(g);
  ASSERT_EQ(c.graph.nodes.size(), 3u);
  for (const Node& n : c.graph.nodes)  // the larger operand first; sub is not commutative
    if (n.op == Op::kMul) {
      EXPECT_EQ(c.graph.values[n.operands[0].value].name, "h") << n.id;
    }
  // add of two same-size values: the later value first.
  EXPECT_EQ(c.graph.values[c.graph.nodes[2].operands[0].value].name, "hw");
  EXPECT_EQ(c.reordered, 2);
  ASSERT_EQ(c.removed.size(), 2u);  // dead, then sub (dead once dead was gone)
  for (int k : c.removed) EXPECT_EQ(c.rule[k], CanonRule::kDead) << g.nodes[k].id;
  expect_reference_unchanged(g, c);
}

TEST(Canonical, EveryBundledSmallTraceKeepsItsReferenceOutputs) {
  int checked = 0;
  for (const std::string& name : bundled_trace_names()) {
    Graph g = load_trace(trace_path(name), cut_options());
    if (!g.golden) continue;  // the small shapes (the realistic ones take minutes on 2 cores)
    expect_reference_unchanged(g, canonicalize(g));
    ++checked;
  }
  EXPECT_GE(checked, 70);  // the small bundled traces and the byog captures with golden tensors
}

namespace {

// Hugging Face's LlamaRMSNorm forward as aot_autograd's default partitioner returns it: the
// input cloned, `aten.alias(rsqrt)` returned beside rsqrt, x32 and x returned too.
json hf_default_partition_rmsnorm() {
  const std::vector<int64_t> x{2, 8, 64}, s{2, 8, 1};
  json nodes = json::array({
      node("xc", "aten.clone.default", {ref("x")}, {tensor(x, "bfloat16")}),
      node("x32", "prims.convert_element_type.default", {ref("xc"), {{"dtype", "float32"}}},
           {tensor(x, "float32")}),
      node("sq", "aten.pow.Tensor_Scalar", {ref("x32"), 2}, {tensor(x, "float32")}),
      node("ms", "aten.mean.dim", {ref("sq"), {-1}, true}, {tensor(s, "float32")}),
      node("add", "aten.add.Tensor", {ref("ms"), 1e-6}, {tensor(s, "float32")}),
      node("rsqrt", "aten.rsqrt.default", {ref("add")}, {tensor(s, "float32")}),
      node("rsqrt_alias", "aten.alias.default", {ref("rsqrt")}, {tensor(s, "float32")}),
      node("norm", "aten.mul.Tensor", {ref("x32"), ref("rsqrt")}, {tensor(x, "float32")}),
      node("low", "prims.convert_element_type.default", {ref("norm"), {{"dtype", "bfloat16"}}},
           {tensor(x, "bfloat16")}),
      node("y", "aten.mul.Tensor", {ref("w"), ref("low")}, {tensor(x, "bfloat16")}),
  });
  return trace("hf_rmsnorm_default_partition",
               {input("x", x, "bfloat16"), input("w", {64}, "bfloat16", 1.0, 0.1)}, nodes,
               {"y", "rsqrt", "rsqrt_alias", "x32", "x"});
}

Plan layernorm_plan(const Graph& g) {
  const FusionSpec* only[] = {&fusions::layernorm_fwd};
  return make_plan(g, only);
}

}  // namespace

TEST(Canonical, RegionMapsBackWithTheAliasAsATailAndTheCloneAbsorbed) {
  Graph g = parse_trace(hf_default_partition_rmsnorm(), "<hf-default>");
  const Plan p = layernorm_plan(g);
  ASSERT_EQ(p.regions.size(), 1u) << plan_to_json(g, p).dump(1);
  const Region& r = p.regions[0];
  // Every captured node is claimed: the clone (its one reader is in the region) and the alias.
  EXPECT_EQ(r.nodes.size(), g.nodes.size());
  std::vector<std::string> absorbed, tail;
  for (int n : r.absorbed) absorbed.push_back(g.nodes[n].id);
  for (const TailAlias& t : r.tail) {
    tail.push_back(g.nodes[t.node].id);
    EXPECT_EQ(g.values[t.source].name, "rsqrt");
  }
  EXPECT_EQ(absorbed, (std::vector<std::string>{"xc", "rsqrt_alias"}));
  EXPECT_EQ(tail, (std::vector<std::string>{"rsqrt_alias"}));
  EXPECT_EQ(g.nodes[r.anchor].id, "y");
  // The fused step reads x itself (the clone is skipped) and writes y, rstd and x32.
  std::vector<std::string> ins, outs;
  for (int v : r.inputs) ins.push_back(g.values[v].name);
  for (int v : r.outputs) outs.push_back(g.values[v].name);
  EXPECT_EQ(ins, (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(outs, (std::vector<std::string>{"x32", "rsqrt", "y"}));
  const json j = plan_to_json(g, p);
  EXPECT_EQ(j["canonical"]["removed"].size(), 2u);
  EXPECT_EQ(j["regions"][0]["tail"], json::array({"rsqrt_alias"}));
  EXPECT_TRUE(j["declined"].empty());
}

TEST(Canonical, DeclinesSayWhy) {
  // var + eps read outside: the structure the kernel computes is not there.
  json t = hf_default_partition_rmsnorm();
  t["nodes"].push_back(
      node("add2", "aten.mul.Tensor", {ref("add"), 2.0}, {tensor({2, 8, 1}, "float32")}));
  t["outputs"].push_back("add2");
  Graph g = parse_trace(t, "<escape>");
  Plan p = layernorm_plan(g);
  EXPECT_TRUE(p.regions.empty());
  ASSERT_EQ(p.declined.size(), 1u);
  EXPECT_EQ(p.declined[0].fusion, "layernorm_fwd");
  EXPECT_EQ(g.nodes[p.declined[0].node].id, "ms");
  EXPECT_EQ(p.declined[0].reason, "the mean square is not read only by `+ eps` then rsqrt");
  json j = plan_to_json(g, p);
  ASSERT_EQ(j["declined"].size(), 1u);
  EXPECT_EQ(j["declined"][0],
            json({{"fusion", "layernorm_fwd"}, {"node", "ms"}, {"reason", p.declined[0].reason}}));

  // rstd read by a node before the region's last one: the fused step would not have written it.
  t = hf_default_partition_rmsnorm();
  auto& nodes = t["nodes"];
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i]["id"] == "rsqrt") {
      nodes.insert(
          nodes.begin() + static_cast<long>(i) + 1,
          node("early", "aten.mul.Tensor", {ref("rsqrt"), 2.0}, {tensor({2, 8, 1}, "float32")}));
      break;
    }
  t["outputs"].push_back("early");
  g = parse_trace(t, "<early>");
  p = layernorm_plan(g);
  EXPECT_TRUE(p.regions.empty());
  ASSERT_EQ(p.declined.size(), 1u);
  EXPECT_EQ(p.declined[0].reason,
            "exported value 'rsqrt' (aten.rsqrt.default) is read before the region's last node");

  // A norm over a dim other than the last.
  Graph other = load_trace(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  json tj = read_json(trace_path("nanogpt_layernorm_fwd_2x8x1600"));
  tj.erase("golden");
  for (auto& n : tj["nodes"])
    if (n["id"] == "var_mean") n["args"][1] = {1};
  for (auto& n : tj["nodes"])
    if (n["id"] == "var_mean" || n["id"] == "getitem" || n["id"] == "getitem_1" ||
        n["id"] == "add" || n["id"] == "rsqrt")
      for (auto& o : n["outputs"]) o["shape"] = {2, 1, 1600}, o["stride"] = {1600, 1600, 1};
  g = parse_trace(tj, "<dim1>");
  p = layernorm_plan(g);
  EXPECT_TRUE(p.regions.empty());
  ASSERT_EQ(p.declined.size(), 1u);
  EXPECT_EQ(p.declined[0].reason,
            "aten.var_mean.correction is not a keepdim float32 reduction over the last dim only");
  EXPECT_EQ(layernorm_plan(other).declined.size(), 0u);
}

TEST(Canonical, SameTensorInputsAreOneValue) {
  // aot_autograd's default partitioner saves rsqrt and aten.alias(rsqrt) for the backward; the
  // trace marks the second `same_as` the first (traces/capture/mark_same_as.py).
  Graph g = load_trace(std::string(REPLAY_TRACES_DIR) +
                       "/byog/llama_rmsnorm_default_train_bwd_2x8x256.json");
  const int alias = g.find_value("alias"), rsqrt = g.find_value("rsqrt");
  ASSERT_GE(alias, 0);
  EXPECT_EQ(g.values[alias].same_as, rsqrt);
  const auto in = generate_inputs(g, 3);
  EXPECT_TRUE(same_bits(in.at(alias), in.at(rsqrt)));
  const CanonicalGraph c = canonicalize(g);
  for (const Node& n : c.graph.nodes)
    for (const Operand& o : n.operands) EXPECT_NE(o.value, alias) << n.id << " reads the alias";
  expect_reference_unchanged(g, c);
}

TEST(Canonical, SameAsMustNameAnEarlierInputOfTheSameLayout) {
  json t = trace("same_as", {input("a", {4, 8}, "float32"), input("b", {4, 8}, "float32")},
                 json::array({node("y", "aten.add.Tensor", {ref("a"), ref("b")},
                                   {tensor({4, 8}, "float32")})}),
                 {"y"});
  t["inputs"][1]["same_as"] = "a";
  EXPECT_EQ(parse_trace(t, "<ok>").values[1].same_as, 0);
  json later = t;
  later["inputs"][1].erase("same_as");
  later["inputs"][0]["same_as"] = "b";
  EXPECT_THROW(parse_trace(later, "<later>"), TraceError);
  json shape = t;
  shape["inputs"][1] = input("b", {8, 4}, "float32");
  shape["inputs"][1]["same_as"] = "a";
  try {
    parse_trace(shape, "<shape>");
    FAIL() << "a same_as input of another shape loaded";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("\"same_as\" input 'a' is float32[4, 8]"),
              std::string::npos)
        << e.what();
  }
}

TEST(Canonical, WidenedInputsAreComputedFromTheirSource) {
  // T5's default partitioner saves x (bf16) and x.float() for the backward; the trace marks the
  // second `widened_from` the first (traces/capture/mark_same_as.py). The canonical graph computes
  // it by a convert node (no captured node), as the min-cut backward recomputes it.
  Graph g = load_trace(std::string(REPLAY_TRACES_DIR) +
                       "/byog/t5_layernorm_default_train_bwd_2x8x256.json");
  const int wide = g.find_value("convert_element_type"), x = g.find_value("hidden_states");
  ASSERT_GE(wide, 0);
  EXPECT_EQ(g.values[wide].widened_from, x);
  const auto in = generate_inputs(g, 5);
  ASSERT_EQ(in.at(wide).meta.dtype, DType::kFloat32);
  EXPECT_EQ(in.at(wide).data, in.at(x).data);  // the same numbers, exactly
  const CanonicalGraph c = canonicalize(g);
  EXPECT_EQ(std::count(c.graph.inputs.begin(), c.graph.inputs.end(), wide), 0);
  const int p = c.graph.values[wide].producer;
  ASSERT_GE(p, 0);
  EXPECT_EQ(c.orig_node[p], -1);
  EXPECT_EQ(op_name(c.graph.nodes[p].op), "prims.convert_element_type.default");
  EXPECT_EQ(c.graph.nodes[p].operands[0].value, x);
  EXPECT_GE(captured_node(c, p), 0);  // declines there are reported at its first reader
  expect_reference_unchanged(g, c);
}

TEST(Canonical, WidenedFromMustNameAnEarlierNarrowerInputOfTheSameLayout) {
  json t = trace("widened", {input("a", {4, 8}, "bfloat16"), input("b", {4, 8}, "float32")},
                 json::array({node("y", "aten.add.Tensor", {ref("a"), ref("b")},
                                   {tensor({4, 8}, "float32")})}),
                 {"y"});
  t["inputs"][1]["widened_from"] = "a";
  EXPECT_EQ(parse_trace(t, "<ok>").values[1].widened_from, 0);
  auto rejected = [](const json& doc, const std::string& what) {
    try {
      parse_trace(doc, "<bad>");
      ADD_FAILURE() << "loaded: " << what;
    } catch (const TraceError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  json later = t;
  later["inputs"][1].erase("widened_from");
  later["inputs"][0]["widened_from"] = "b";
  rejected(later, "which is not an earlier input");
  json narrowing = t;  // float32 -> bfloat16 rounds: no widening
  narrowing["inputs"][0] = input("a", {4, 8}, "float32");
  narrowing["inputs"][1] = input("b", {4, 8}, "bfloat16");
  narrowing["inputs"][1]["widened_from"] = "a";
  rejected(narrowing, "an exact widening");
  json shape = t;
  shape["inputs"][1] = input("b", {8, 4}, "float32");
  shape["inputs"][1]["widened_from"] = "a";
  rejected(shape, "\"widened_from\" input 'a' is bfloat16[4, 8]");
  json both = t;  // a third input, the same tensor as b and widened from a
  both["inputs"].push_back(input("c", {4, 8}, "float32"));
  both["inputs"][2]["same_as"] = "b";
  both["inputs"][2]["widened_from"] = "a";
  rejected(both, "not both");
}

// Plan::elided_clones (elidable_clones): a clone laid out as its operand, whose storage nothing
// else returns, runs as an alias in the fused variants; one that would share storage PyTorch keeps
// apart (its source returned too, an input's, another clone's, through views, wait_tensor or a
// chain of clones) or lay the values out anew is copied.
TEST(Canonical, TrailingClonesWithPrivateStorageAreElided) {
  const std::vector<int64_t> x{4, 8}, x3{2, 2, 8};
  auto plan_of = [&](json nodes, json outputs) {
    const Graph g =
        parse_trace(trace("clones", {input("x", x, "bfloat16")}, nodes, outputs), "<clones>");
    std::vector<std::string> ids;
    for (int k : make_plan(g, fusion_registry()).elided_clones) ids.push_back(g.nodes[k].id);
    return ids;
  };
  auto clone_of = [](const std::string& id, const std::string& src, std::vector<int64_t> shape) {
    return node(id, "aten.clone.default", {ref(src)}, {tensor(shape, "bfloat16")});
  };
  const json mul = node("m", "aten.mul.Tensor", {ref("x"), 2.0}, {tensor(x, "bfloat16")});
  const json view = node("v", "aten.view.default", {ref("m"), x3}, {tensor(x3, "bfloat16")});
  // GPT-2's MLP output: view of a computed value, then the clone the graph returns.
  EXPECT_EQ(plan_of({mul, view, clone_of("c", "v", x3)}, {"c"}), (std::vector<std::string>{"c"}));
  // The viewed value returned as well: the clone must be its own storage.
  EXPECT_TRUE(plan_of({mul, view, clone_of("c", "v", x3)}, {"c", "m"}).empty());
  EXPECT_TRUE(plan_of({mul, view, clone_of("c", "v", x3)}, {"c", "v"}).empty());
  // A clone of a graph input.
  EXPECT_TRUE(plan_of({mul, clone_of("c", "x", x)}, {"c", "m"}).empty());
  // Two clones of one value.
  EXPECT_TRUE(plan_of({mul, clone_of("c1", "m", x), clone_of("c2", "m", x)}, {"c1", "c2"}).empty());
  // A chain of clones: both would share m's storage.
  EXPECT_TRUE(
      plan_of({mul, clone_of("c1", "m", x), clone_of("c2", "c1", x)}, {"c1", "c2"}).empty());
  // A contiguous() of a transposed view is a real copy (another layout).
  const json tr = node("t", "aten.permute.default", {ref("m"), {1, 0}},
                       {{{"shape", {8, 4}}, {"stride", {1, 8}}, {"dtype", "bfloat16"}}});
  EXPECT_TRUE(plan_of({mul, tr, clone_of("c", "t", {8, 4})}, {"c"}).empty());
  // A same-dtype _to_copy of a private value is an identity: elided.
  EXPECT_EQ(plan_of({mul, node("tc", "aten._to_copy.default", {ref("m")}, {tensor(x, "bfloat16")},
                               {{"dtype", {{"dtype", "bfloat16"}}}})},
                    {"tc"}),
            (std::vector<std::string>{"tc"}));
  // A dtype-changing convert is no identity, so no alias.
  EXPECT_TRUE(plan_of({mul, node("f", "prims.convert_element_type.default",
                                 {ref("m"), {{"dtype", "float32"}}}, {tensor(x, "float32")})},
                      {"f"})
                  .empty());
  // A clone of a wait_tensor (an alias in the GPU program) of a graph input: the input's storage.
  {
    json wnodes = json::array(
        {node("w", "_c10d_functional.wait_tensor.default", {ref("x")}, {tensor(x, "bfloat16")}),
         clone_of("c", "w", x)});
    json t = trace("wait", {input("x", x, "bfloat16")}, wnodes, {"c"});
    t["world_size"] = 2;
    const Graph g = parse_trace(t, "<wait>");
    EXPECT_TRUE(make_plan(g, fusion_registry()).elided_clones.empty());
  }
  // The bundled GPT-2 MLP forward (HF Conv1D, dropout at p = 0 as a clone).
  const Graph gpt2 = load_trace(trace_path("byog/linear/gpt2_mlp_mincut_train_fwd_2x8x128"));
  const Plan p = make_plan(gpt2, fusion_registry());
  ASSERT_EQ(p.elided_clones.size(), 1u);
  EXPECT_EQ(gpt2.nodes[p.elided_clones[0]].id, "clone");
  EXPECT_EQ(plan_to_json(gpt2, p)["elided_clones"], json::array({"clone"}));
}

// Plan::placed_cats (placeable_cats): Phi-3's fused gate_up backward writes d_up and d_gate, and
// the graph cats them into d_gate_up for the dX / dW GEMMs: both are matmul_epilogue outputs (a
// fusion that writes through strides), so the cat is placed. Not when an operand is a graph output
// too, is no region's own output, or comes from a fusion that writes dense outputs only.
TEST(Canonical, CatsOfStridedRegionOutputsArePlaced) {
  const Graph g = load_trace(trace_path("byog/linear/phi3_mlp_default_train_bwd_2x8x128"));
  const Plan p = make_plan(g, fusion_registry());
  ASSERT_EQ(p.placed_cats.size(), 1u);
  const Node& cat = g.nodes[p.placed_cats[0]];
  EXPECT_EQ(cat.op, Op::kCat);
  EXPECT_EQ(plan_to_json(g, p)["placed_cats"], json::array({cat.id}));
  const int v = cat.operands[0].value;
  const int r = p.node_region[g.values[v].producer];
  ASSERT_GE(r, 0);
  EXPECT_EQ(p.regions[r].fusion->name, "matmul_epilogue");
  Graph returned = g;  // the operand also returned
  returned.outputs.push_back(v);
  EXPECT_TRUE(placeable_cats(returned, p).empty());
  Plan not_output = p;  // the operand no output of its region
  auto& outs = not_output.regions[r].outputs;
  outs.erase(std::remove(outs.begin(), outs.end(), v), outs.end());
  EXPECT_TRUE(placeable_cats(g, not_output).empty());
  Graph two_readers = g;  // a second node reads the operand (a view, a clone, another cat)
  for (Node& n : two_readers.nodes)
    if (n.op == Op::kMm) {
      n.operands.push_back({v});
      break;
    }
  EXPECT_TRUE(placeable_cats(two_readers, p).empty());
  Graph twice = g;  // cat([a, a, ...])
  twice.nodes[p.placed_cats[0]].operands.push_back({v});
  EXPECT_TRUE(placeable_cats(twice, p).empty());
  Graph middle = g;  // not along the last dim
  middle.nodes[p.placed_cats[0]].dim = 0;
  EXPECT_TRUE(placeable_cats(middle, p).empty());
  FusionSpec dense_only = *p.regions[r].fusion;
  dense_only.strided_outputs = false;
  Plan dense = p;
  dense.regions[r].fusion = &dense_only;
  EXPECT_TRUE(placeable_cats(g, dense).empty());
  // a trace without such a cat places nothing
  const Graph gpt2 = load_trace(trace_path("byog/linear/gpt2_mlp_default_train_bwd_2x8x128"));
  EXPECT_TRUE(make_plan(gpt2, fusion_registry()).placed_cats.empty());
}
