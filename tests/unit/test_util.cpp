#include "tests/unit/test_util.hpp"

#include "workloads/loader/trace_loader.hpp"
#include "workloads/ops/op.hpp"

namespace replay::test {

nlohmann::json example_trace(const std::string& op_name, const nlohmann::json& ex) {
  using nlohmann::json;
  json t = {{"schema", "replay-trace/1"},
            {"name", "example_" + op_name},
            {"source", {{"model", "op example"}, {"phase", "fwd"}}},
            {"world_size", 1},
            {"inputs", json::array()},
            {"nodes", json::array()},
            {"outputs", {"in0"}}};
  for (size_t i = 0; i < ex.at("inputs").size(); ++i) {
    json in = ex["inputs"][i];
    in["id"] = "in" + std::to_string(i);
    t["inputs"].push_back(in);
  }
  // The inputs alone load; the node's outputs follow from its row's parser and shape rule.
  // (A creation op's example has no inputs: an empty graph then.)
  Graph g = t["inputs"].empty() ? Graph{} : parse_trace(t, "<example " + op_name + ">");
  const OpDef& def = op_def(parse_op(op_name).value());
  const json args = ex.value("args", json::array());
  const json kwargs = ex.value("kwargs", json::object());
  Node n;
  n.op = def.op;
  ArgReader r(args, kwargs, "<example>", "y", [&](const std::string& id) {
    int v = g.find_value(id);
    if (v < 0) throw std::invalid_argument("example references unknown input " + id);
    return v;
  });
  def.parse(r, g, n);
  json outs = json::array();
  for (const OutSpec& o : def.infer(g, n)) {
    if (o.none) {  // a None output (a norm backward's output_mask): recorded as null
      outs.push_back(nullptr);
      continue;
    }
    DType dt = o.dtype ? *o.dtype : g.meta(n.operands[0].value).dtype;
    outs.push_back(tensor(o.shape, std::string(dtype_name(dt))));
  }
  t["nodes"].push_back(
      {{"id", "y"}, {"op", op_name}, {"args", args}, {"kwargs", kwargs}, {"outputs", outs}});
  t["outputs"] = json::array();
  if (def.num_outputs == 1) {
    t["outputs"].push_back("y");
  } else {
    for (size_t k = 0; k < outs.size(); ++k) {
      if (outs[k].is_null()) continue;
      std::string id = "y_" + std::to_string(k);
      t["nodes"].push_back({{"id", id}, {"op", "getitem"}, {"args", {ref("y"), k}}});
      t["outputs"].push_back(id);
    }
  }
  return t;
}

}  // namespace replay::test
