// The indexing family's eager kernels (impls/eager/indexing.cu) beyond the rows' small examples:
// rows longer than a block (cumsum's chunked scan, argmax's block reduction, CUB's segmented
// sort), many duplicates for the atomic adds, strided inputs; and an index outside its dim, which
// the kernels must neither read nor write past (a gather writes 0, a scatter skips it).
#include "gpu_test_util.hpp"
#include "tests/unit/test_util.hpp"
#include "workloads/loader/trace_loader.hpp"

using namespace replay;
using namespace replay::test;
using nlohmann::json;

namespace {

Graph make(const std::string& op, const json& example) {
  return parse_trace(example_trace(op, example), "<" + op + ">");
}

json index_stats(int64_t lo, int64_t hi) {
  return {{"mean", (lo + hi) / 2.0}, {"std", (hi - lo) / 2.0 + 1}, {"min", lo}, {"max", hi}};
}

}  // namespace

TEST(EagerIndexing, LongRowsAndManyDuplicates) {
  const json in0 = {{"ref", "in0"}}, in1 = {{"ref", "in1"}}, in2 = {{"ref", "in2"}};
  const std::vector<std::pair<std::string, json>> cases = {
      {"aten.sort.default",
       {{"inputs", {example_input({3, 5000}, "float32")}}, {"args", {in0, -1, true}}}},
      {"aten.sort.stable",
       {{"inputs", {example_input({300, 4}, "bfloat16", {1, 300})}},
        {"args", {in0}},
        {"kwargs", {{"stable", true}, {"dim", 0}}}}},
      {"aten.topk.default",
       {{"inputs", {example_input({4, 3000}, "float32")}}, {"args", {in0, 50}}}},
      {"aten.topk.default",
       {{"inputs", {example_input({6, 40, 3}, "int64", {}, index_stats(-9, 9))}},
        {"args", {in0, 7, 1, false}}}},
      {"aten.cumsum.default",
       {{"inputs", {example_input({2, 1000}, "float32")}}, {"args", {in0, 1}}}},
      {"aten.cumsum.default",
       {{"inputs", {example_input({700, 5}, "int32", {}, index_stats(-5, 5))}},
        {"args", {in0, 0}}}},
      {"aten.argmax.default",
       {{"inputs", {example_input({37, 91}, "float32", {1, 37})}}, {"args", {in0}}}},
      {"aten.argmin.default",
       {{"inputs", {example_input({5, 600}, "bfloat16")}}, {"args", {in0, -1}}}},
      {"aten.index_put.default",
       {{"inputs",
         {example_input({64, 16}, "float32"),
          example_input({2000}, "int64", {}, index_stats(0, 63)),
          example_input({2000, 16}, "float32")}},
        {"args", {in0, json::array({in1}), in2, true}}}},
      {"aten.scatter_add.default",
       {{"inputs",
         {example_input({100, 8}, "float32"),
          example_input({5000, 8}, "int64", {}, index_stats(0, 99)),
          example_input({5000, 8}, "float32")}},
        {"args", {in0, 0, in1, in2}}}},
      {"aten.embedding_dense_backward.default",
       {{"inputs",
         {example_input({4, 1024, 64}, "bfloat16"),
          example_input({4, 1024}, "int64", {}, index_stats(0, 49))}},
        {"args", {in0, in1, 50, 3, false}}}},
      {"aten.embedding.default",
       {{"inputs",
         {example_input({500, 96}, "bfloat16"),
          example_input({8, 128}, "int32", {}, index_stats(0, 499))}},
        {"args", {in0, in1}}}},
      {"aten.index.Tensor",
       {{"inputs",
         {example_input({6, 7, 8, 9}, "float32", {1, 6, 42, 336}),
          example_input({4, 1}, "int64", {}, index_stats(-6, 5)),
          example_input({5}, "int64", {}, index_stats(-8, 7))}},
        {"args", {in0, {in1, nullptr, in2}}}}},
      {"aten.constant_pad_nd.default",
       {{"inputs", {example_input({2, 30, 50}, "float32", {1, 100, 2})}},
        {"args", {in0, {3, -7, -2, 4, 1, 1}, -1.5}}}},
  };
  std::vector<Graph> graphs;  // loaded before the device check: a bad case fails on any host
  for (const auto& [op, ex] : cases) graphs.push_back(make(op, ex));
  REQUIRE_GPU();
  for (const Graph& g : graphs) {
    SCOPED_TRACE(g.nodes.at(0).raw.dump());
    for (uint64_t seed : {3u, 4u}) expect_variant_matches(g, "eager", seed);
  }
}

// gather with an index past its dim: the eager kernel writes 0 there and reads nothing outside
// the tensor; scatter_add skips the element. (The reference rejects such inputs, naming the node.)
TEST(EagerIndexing, OutOfRangeIndexNeitherReadsNorWritesOutside) {
  REQUIRE_GPU();
  const json in0 = {{"ref", "in0"}}, in1 = {{"ref", "in1"}}, in2 = {{"ref", "in2"}};
  auto run = [](const Graph& g, std::map<int, HostTensor> in) {
    const Plan plan = make_plan(g, fusion_registry());
    GpuProgram prog(g, plan, "eager", in, nullptr);
    prog.poison_outputs(nullptr);
    prog.run_all(LaunchContext{});
    REPLAY_CUDA(cudaDeviceSynchronize());
    return prog.download(g.outputs.at(0), nullptr);
  };
  auto tensor = [](std::vector<int64_t> shape, DType dt, std::vector<double> v) {
    HostTensor t = make_host_tensor(shape, dt);
    std::copy(v.begin(), v.end(), t.data.begin());
    return t;
  };
  const Graph gather =
      make("aten.gather.default",
           {{"inputs", {example_input({2, 3}, "float32"), example_input({2, 2}, "int64")}},
            {"args", {in0, 1, in1}}});
  const auto got =
      run(gather, {{gather.inputs[0], tensor({2, 3}, DType::kFloat32, {1, 2, 3, 4, 5, 6})},
                   {gather.inputs[1], tensor({2, 2}, DType::kInt64, {2, 3, -1, 0})}});
  EXPECT_EQ(std::vector<double>(got.data.begin(), got.data.end()),
            (std::vector<double>{3, 0, 0, 4}));
  const Graph sa = make("aten.scatter_add.default",
                        {{"inputs",
                          {example_input({3}, "float32"), example_input({3}, "int64"),
                           example_input({3}, "float32")}},
                         {"args", {in0, 0, in1, in2}}});
  const auto added = run(sa, {{sa.inputs[0], tensor({3}, DType::kFloat32, {1, 1, 1})},
                              {sa.inputs[1], tensor({3}, DType::kInt64, {0, 1000000, 2})},
                              {sa.inputs[2], tensor({3}, DType::kFloat32, {5, 6, 7})}});
  EXPECT_EQ(std::vector<double>(added.data.begin(), added.data.end()),
            (std::vector<double>{6, 1, 8}));
}
