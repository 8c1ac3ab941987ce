#include "workloads/trace_loader.hpp"

#include <filesystem>
#include <fstream>
#include <map>

#include "workloads/error.hpp"
#include "workloads/shapes.hpp"

namespace replay {
namespace {

using nlohmann::json;

class Parser {
 public:
  Parser(const json& doc, std::string file) : doc_(doc), file_(std::move(file)) {}

  Graph parse() {
    if (!doc_.is_object()) fail("", "expected a JSON object at the top level");
    std::string schema = str_field(doc_, "schema", "");
    if (schema != kTraceSchema)
      fail("",
           "expected \"schema\": \"" + std::string(kTraceSchema) + "\", found \"" + schema + "\"");
    g_.file = file_;
    g_.name = str_field(doc_, "name", "");
    g_.source = doc_.value("source", json::object());
    g_.world_size = doc_.value("world_size", 1);
    if (g_.world_size < 1) fail("", "expected \"world_size\" >= 1");
    for (const auto& in : array_field(doc_, "inputs", "")) parse_input(in);
    for (const auto& n : array_field(doc_, "nodes", "")) {
      try {
        parse_node(n);
      } catch (const json::exception& e) {  // an argument of the wrong JSON type
        bool has_id = n.is_object() && n.contains("id") && n["id"].is_string();
        fail(has_id ? n["id"].get<std::string>() : "",
             std::string("unexpected JSON type: ") + e.what());
      }
    }
    for (const auto& o : array_field(doc_, "outputs", "")) {
      if (!o.is_string()) fail("", "expected graph outputs to be value names (strings)");
      int v = lookup(o.get<std::string>(), "graph outputs");
      g_.values[v].graph_output = true;
      g_.outputs.push_back(v);
    }
    if (g_.outputs.empty()) fail("", "expected at least one graph output");
    if (doc_.contains("golden")) parse_golden(doc_["golden"]);
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(const std::string& node, const std::string& what) const {
    throw TraceError(file_, node, what);
  }

  std::string str_field(const json& j, const char* key, const std::string& node) const {
    if (!j.contains(key) || !j[key].is_string())
      fail(node, std::string("expected a string field \"") + key + "\"");
    return j[key].get<std::string>();
  }

  const json& array_field(const json& j, const char* key, const std::string& node) const {
    if (!j.contains(key) || !j[key].is_array())
      fail(node, std::string("expected an array field \"") + key + "\"");
    return j[key];
  }

  std::vector<int64_t> int_list(const json& j, const std::string& node, const char* what) const {
    if (j.is_number_integer()) return {j.get<int64_t>()};
    if (!j.is_array()) fail(node, std::string("expected a list of integers for ") + what);
    std::vector<int64_t> v;
    for (const auto& e : j) {
      if (!e.is_number_integer()) fail(node, std::string("expected integers in ") + what);
      v.push_back(e.get<int64_t>());
    }
    return v;
  }

  DType dtype_of(const json& j, const std::string& node) const {
    std::string name = j.is_string() ? j.get<std::string>()
                       : (j.is_object() && j.contains("dtype") && j["dtype"].is_string())
                           ? j["dtype"].get<std::string>()
                           : "";
    auto dt = parse_dtype(name);
    if (!dt)
      fail(node, "unknown dtype '" + (name.empty() ? j.dump() : name) +
                     "' (expected one of float32, float64, float16, bfloat16, float8_e4m3fn, "
                     "float8_e5m2, int64, int32, bool)");
    return *dt;
  }

  TensorMeta meta_of(const json& j, const std::string& node) const {
    if (!j.is_object()) fail(node, "expected tensor metadata {shape, stride, dtype}");
    TensorMeta m;
    if (!j.contains("shape")) fail(node, "expected \"shape\" in tensor metadata");
    m.shape = int_list(j["shape"], node, "shape");
    for (auto d : m.shape)
      if (d < 0) fail(node, "negative size in shape " + shape_str(m.shape));
    m.stride =
        j.contains("stride") ? int_list(j["stride"], node, "stride") : contiguous_strides(m.shape);
    if (m.stride.size() != m.shape.size())
      fail(node, "stride " + shape_str(m.stride) + " has a different rank than shape " +
                     shape_str(m.shape));
    if (!j.contains("dtype")) fail(node, "expected \"dtype\" in tensor metadata");
    m.dtype = dtype_of(j["dtype"], node);
    return m;
  }

  int lookup(const std::string& name, const std::string& node) const {
    auto it = names_.find(name);
    if (it == names_.end())
      fail(node, "references '" + name + "', which is neither a graph input nor an earlier node");
    return it->second;
  }

  int add_value(const std::string& name, TensorMeta meta, int producer, int out_idx,
                const std::string& node) {
    if (names_.count(name)) fail(node, "duplicate id '" + name + "'");
    Value v;
    v.name = name;
    v.meta = std::move(meta);
    v.producer = producer;
    v.output_index = out_idx;
    g_.values.push_back(std::move(v));
    int idx = static_cast<int>(g_.values.size()) - 1;
    names_[name] = idx;
    return idx;
  }

  void parse_input(const json& in) {
    if (!in.is_object()) fail("", "expected each input to be an object");
    std::string id = str_field(in, "id", "");
    int v = add_value(id, meta_of(in, id), -1, 0, id);
    g_.values[v].graph_input = true;
    if (in.contains("stats")) {
      const auto& s = in["stats"];
      ValueStats st;
      for (auto [key, dst] :
           {std::pair{"mean", &st.mean}, {"std", &st.std}, {"min", &st.min}, {"max", &st.max}}) {
        if (!s.contains(key) || !s[key].is_number())
          fail(id, std::string("expected a number \"") + key + "\" in \"stats\"");
        *dst = s[key].get<double>();
      }
      if (st.std < 0 || st.min > st.max) fail(id, "inconsistent \"stats\" (std < 0 or min > max)");
      g_.values[v].stats = st;
    }
    g_.inputs.push_back(v);
  }

  // Positional argument i, else keyword `kw`, else nullptr.
  static const json* arg(const json& args, const json& kwargs, size_t i, const char* kw) {
    if (i < args.size()) return &args[i];
    if (kw && kwargs.contains(kw)) return &kwargs[kw];
    return nullptr;
  }

  Operand operand(const json& a, const std::string& node) const {
    Operand o;
    if (a.is_object() && a.contains("ref")) {
      o.value = lookup(a["ref"].get<std::string>(), node);
    } else if (a.is_number()) {
      o.scalar = a.get<double>();
    } else if (a.is_boolean()) {
      o.scalar = a.get<bool>() ? 1 : 0;
    } else if (a.is_object() && a.contains("float")) {
      o.scalar = std::stod(a["float"].get<std::string>());
    } else {
      fail(node, "expected a tensor reference or a number, found " + a.dump());
    }
    return o;
  }

  void parse_node(const json& j) {
    if (!j.is_object()) fail("", "expected each node to be an object");
    std::string id = str_field(j, "id", "");
    std::string opname = str_field(j, "op", id);
    auto op = parse_op(opname);
    if (!op) fail(id, "unknown op '" + opname + "' (see `replay list` for the supported ops)");
    const json args = j.value("args", json::array());
    const json kwargs = j.value("kwargs", json::object());
    if (!args.is_array() || !kwargs.is_object())
      fail(id, "expected \"args\" to be a list and \"kwargs\" an object");
    if (args.empty() || !args[0].is_object() || !args[0].contains("ref"))
      fail(id, "expected the first argument to be a tensor reference");
    const json& outs = array_field(j, "outputs", id);

    if (*op == Op::kGetItem) {  // FX's tuple indexing: alias the producer's k-th output
      int src = lookup(args[0]["ref"].get<std::string>(), id);
      const Value& sv = g_.values[src];
      if (args.size() < 2 || !args[1].is_number_integer()) fail(id, "expected getitem(ref, index)");
      int k = args[1].get<int>();
      if (sv.producer < 0 || sv.output_index != 0 || k < 0 ||
          k >= static_cast<int>(g_.nodes[sv.producer].outputs.size()))
        fail(id, "getitem index " + std::to_string(k) + " out of range for '" + sv.name + "'");
      names_[id] = g_.nodes[sv.producer].outputs[k];
      return;
    }

    Node n;
    n.id = id;
    n.op = *op;
    n.raw = j;
    const OpKind kind = op_info(*op).kind;
    n.operands.push_back(operand(args[0], id));
    auto require = [&](const json* p, const char* what) -> const json& {
      if (!p) fail(id, std::string("expected argument '") + what + "'");
      return *p;
    };
    switch (kind) {
      case OpKind::kUnary:
        if (*op == Op::kConvertElementType)
          n.dtype = dtype_of(require(arg(args, kwargs, 1, "dtype"), "dtype"), id);
        if (*op == Op::kPowTensorScalar) {
          Operand e = operand(require(arg(args, kwargs, 1, "exponent"), "exponent"), id);
          if (e.is_tensor()) fail(id, "expected a scalar exponent for pow.Tensor_Scalar");
          n.operands.push_back(e);
        }
        break;
      case OpKind::kBinary:
        n.operands.push_back(operand(require(arg(args, kwargs, 1, "other"), "other"), id));
        if (const json* a = arg(args, kwargs, 2, "alpha")) n.alpha = a->get<double>();
        break;
      case OpKind::kReduction: {
        const json* d = arg(args, kwargs, 1, "dim");
        std::vector<int64_t> dims =
            (d && !d->is_null()) ? int_list(*d, id, "dim") : std::vector<int64_t>{};
        const json* kd = *op == Op::kVarMean ? arg(json::array(), kwargs, 0, "keepdim")
                                             : arg(args, kwargs, 2, "keepdim");
        n.keepdim = kd && kd->get<bool>();
        if (*op == Op::kVarMean) {
          const json* c = arg(json::array(), kwargs, 0, "correction");
          n.correction = (c && !c->is_null()) ? c->get<double>() : 1.0;
        }
        try {
          n.dims = normalize_dims(dims, g_.meta(n.operands[0].value).shape.size());
        } catch (const std::invalid_argument& e) {
          fail(id, e.what());
        }
        break;
      }
      case OpKind::kView:
        if (*op == Op::kUnsqueeze) {
          n.dim = require(arg(args, kwargs, 1, "dim"), "dim").get<int64_t>();
          auto nd = static_cast<int64_t>(g_.meta(n.operands[0].value).shape.size()) + 1;
          if (n.dim < 0) n.dim += nd;
          if (n.dim < 0 || n.dim >= nd) fail(id, "unsqueeze dim out of range");
        } else {
          n.dims = int_list(require(arg(args, kwargs, 1, "size"), "size/dims"), id, "size");
        }
        if (*op == Op::kPermute) {
          auto nd = g_.meta(n.operands[0].value).shape.size();
          for (auto& d : n.dims) d = d < 0 ? d + static_cast<int64_t>(nd) : d;
          std::vector<int64_t> sorted = n.dims;
          std::sort(sorted.begin(), sorted.end());
          for (size_t i = 0; i < sorted.size(); ++i)
            if (sorted.size() != nd || sorted[i] != static_cast<int64_t>(i))
              fail(id, "permute dims " + shape_str(n.dims) + " are not a permutation of " +
                           std::to_string(nd) + " dims");
        }
        break;
      case OpKind::kGetItem:
        break;
    }
    for (const auto& o : n.operands)
      if (o.is_tensor() && !is_floating(g_.meta(o.value).dtype) && kind != OpKind::kView)
        fail(id, "operand '" + g_.values[o.value].name + "' has dtype " +
                     std::string(dtype_name(g_.meta(o.value).dtype)) +
                     "; expected a floating dtype (integer math is not supported yet)");

    // Recorded outputs vs the op's shape rule.
    std::vector<Shape> expect;
    try {
      expect = infer_output_shapes(g_, n);
    } catch (const std::invalid_argument& e) {
      fail(id, e.what());
    }
    if (outs.size() != expect.size())
      fail(id, "expected " + std::to_string(expect.size()) + " recorded output(s), found " +
                   std::to_string(outs.size()));
    int node_idx = static_cast<int>(g_.nodes.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      TensorMeta m = meta_of(outs[k], id);
      if (m.shape != expect[k])
        fail(id, "recorded output shape " + shape_str(m.shape) +
                     " disagrees with the inputs: " + std::string(op_name(n.op)) + " of " +
                     describe_inputs(n) + " gives " + shape_str(expect[k]));
      if (*op == Op::kConvertElementType && m.dtype != n.dtype)
        fail(id, "recorded output dtype " + std::string(dtype_name(m.dtype)) +
                     " disagrees with the conversion target " + std::string(dtype_name(n.dtype)));
      if (kind == OpKind::kView && m.dtype != g_.meta(n.operands[0].value).dtype)
        fail(id, "a view must keep its input's dtype");
      std::string vname = outs.size() == 1 ? id : id + "." + std::to_string(k);
      n.outputs.push_back(add_value(vname, m, node_idx, static_cast<int>(k), id));
    }
    if (outs.size() > 1) names_[id] = n.outputs[0];  // getitem resolves through output 0
    for (const auto& o : n.operands)
      if (o.is_tensor()) g_.values[o.value].users.push_back(node_idx);
    g_.nodes.push_back(std::move(n));
  }

  std::string describe_inputs(const Node& n) const {
    std::string s;
    for (const auto& o : n.operands) {
      if (!s.empty()) s += ", ";
      s += o.is_tensor() ? g_.values[o.value].name + " " + shape_str(g_.meta(o.value).shape)
                         : std::to_string(o.scalar);
    }
    return s;
  }

  void parse_golden(const json& j) {
    if (!j.is_object() || !j.contains("file") || !j["file"].is_string())
      fail("", "expected \"golden\": {\"file\": ..., \"tensors\": [...]}");
    GoldenRef ref;
    std::filesystem::path p = j["file"].get<std::string>();
    if (p.is_relative()) p = std::filesystem::path(file_).parent_path() / p;
    ref.path = p.string();
    for (const auto& t : j.value("tensors", json::array())) {
      std::string name = t.get<std::string>();
      if (!names_.count(name)) fail("", "golden tensor '" + name + "' is not a value of the graph");
      ref.names.push_back(name);
    }
    g_.golden = ref;
  }

  const json& doc_;
  std::string file_;
  Graph g_;
  std::map<std::string, int> names_;  // id -> value index (getitem ids alias their source)
};

}  // namespace

Graph parse_trace(const json& doc, const std::string& file) {
  return Parser(doc, file).parse();
}

Graph load_trace(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw TraceError(path, "", "cannot open the trace file (missing or unreadable)");
  json doc;
  try {
    doc = json::parse(f);
  } catch (const json::parse_error& e) {
    throw TraceError(path, "", std::string("malformed JSON: ") + e.what());
  }
  try {
    return parse_trace(doc, path);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    throw TraceError(path, "", std::string("unexpected JSON type: ") + e.what());
  }
}

}  // namespace replay
