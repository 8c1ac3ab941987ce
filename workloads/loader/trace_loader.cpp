#include "workloads/loader/trace_loader.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include "workloads/ir/error.hpp"
#include "workloads/ops/op.hpp"

namespace replay {
namespace {

using nlohmann::json;

class Parser {
 public:
  Parser(const json& doc, std::string file, LoadOptions opt)
      : doc_(doc), file_(std::move(file)), opt_(opt) {}

  Graph parse() {
    if (!doc_.is_object()) fail("", "expected a JSON object at the top level");
    std::string schema = str_field(doc_, "schema", "");
    if (schema != kTraceSchema)
      fail("",
           "expected \"schema\": \"" + std::string(kTraceSchema) + "\", found \"" + schema + "\"");
    g_.file = file_;
    g_.name = str_field(doc_, "name", "");
    g_.source = doc_.value("source", json::object());
    if (doc_.contains("world_size")) {
      const json& ws = doc_["world_size"];
      if (!ws.is_number_integer() || ws.get<int64_t>() < 1 || ws.get<int64_t>() > 65536)
        fail("", "expected \"world_size\" to be an integer in [1, 65536], found " + ws.dump());
      g_.world_size = ws.get<int>();
    }
    for (const auto& in : array_field(doc_, "inputs", "")) parse_input(in);
    if (opt_.cut_unsupported) find_getitem_sources();
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
      if (auto l = lacked_.find(o.get<std::string>()); l != lacked_.end()) {
        if (!lacked_outputs_.insert(l->first).second)
          fail("", "graph output '" + l->first + "' is listed twice");
        g_.lacked.push_back({l->first, l->second, false});  // no replay produces it
        continue;
      }
      int v = lookup(o.get<std::string>(), "graph outputs");
      if (g_.values[v].graph_output)
        fail("", "graph output '" + o.get<std::string>() +
                     "' is listed twice (or aliases an earlier output through getitem)");
      g_.values[v].graph_output = true;
      g_.outputs.push_back(v);
    }
    if (g_.outputs.empty() && !lacked_outputs_.empty())
      fail("", "every graph output is of a dtype the harness lacks (" + *lacked_outputs_.begin() +
                   ": " + lacked_.at(*lacked_outputs_.begin()) +
                   "): nothing of the graph would be replayed");
    if (g_.outputs.empty()) fail("", "expected at least one graph output");
    if (!g_.cut.empty() && std::none_of(g_.outputs.begin(), g_.outputs.end(),
                                        [&](int v) { return g_.values[v].producer >= 0; })) {
      const CutNode& c = g_.cut[0];
      const std::string why =
          c.reason.rfind("unsupported op", 0) == 0
              ? "unknown op '" + c.op + "' (see `replay list` for the " + "supported ops)"
              : "cut (" + c.reason + ")";
      fail(c.id, why +
                     "; cutting the graph there leaves no graph output computed by a node the "
                     "harness runs, so nothing of it would be replayed");
    }
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
    if (!j.is_array()) fail(node, std::string("expected a list of integers for ") + what);
    std::vector<int64_t> v;
    for (const auto& e : j) {
      if (!e.is_number_integer() ||
          (e.is_number_unsigned() && e.get<uint64_t>() > uint64_t(INT64_MAX)))
        fail(node, std::string("expected 64-bit integers in ") + what);
      v.push_back(e.get<int64_t>());
    }
    return v;
  }

  DType dtype_of(const json& j, const std::string& node) const {
    auto dt = j.is_string() ? parse_dtype(j.get<std::string>()) : std::nullopt;
    if (!dt)
      fail(node, "unknown dtype '" + (j.is_string() ? j.get<std::string>() : j.dump()) + "' (" +
                     dtype_list() + ")");
    return *dt;
  }

  // A recorded shape: integers >= 0, at most kMaxRank of them.
  std::vector<int64_t> meta_shape(const json& j, const std::string& node) const {
    std::vector<int64_t> shape = int_list(j, node, "shape");
    if (shape.size() > static_cast<size_t>(kMaxRank))
      fail(node, "shape " + shape_str(shape) + " has more than " + std::to_string(kMaxRank) +
                     " dims (the most the harness supports)");
    for (auto d : shape)
      if (d < 0) fail(node, "negative size in shape " + shape_str(shape));
    return shape;
  }

  // Tensor metadata, checked so that no later size or offset computation can overflow: rank at
  // most kMaxRank, sizes >= 0, strides >= 0 (PyTorch tensors have no negative strides), numel,
  // bytes and the strided span at most kMaxTensorBytes.
  TensorMeta meta_of(const json& j, const std::string& node) const {
    if (!j.is_object()) fail(node, "expected tensor metadata {shape, stride, dtype}");
    TensorMeta m;
    if (!j.contains("shape")) fail(node, "expected \"shape\" in tensor metadata");
    m.shape = meta_shape(j["shape"], node);
    if (!j.contains("dtype")) fail(node, "expected \"dtype\" in tensor metadata");
    m.dtype = dtype_of(j["dtype"], node);
    const auto numel = checked_numel(m.shape);
    const auto limit = kMaxTensorBytes / static_cast<int64_t>(dtype_size(m.dtype));
    if (!numel || *numel > limit)
      fail(node, "shape " + shape_str(m.shape) + " of " + std::string(dtype_name(m.dtype)) +
                     " is larger than the " + std::to_string(kMaxTensorBytes >> 40) +
                     " TiB the harness accepts per tensor");
    m.stride =
        j.contains("stride") ? int_list(j["stride"], node, "stride") : contiguous_strides(m.shape);
    if (m.stride.size() != m.shape.size())
      fail(node, "stride " + shape_str(m.stride) + " has a different rank than shape " +
                     shape_str(m.shape));
    int64_t span = 1;
    for (size_t i = 0; i < m.shape.size(); ++i) {
      if (m.stride[i] < 0)
        fail(node, "negative stride in " + shape_str(m.stride) +
                       " (PyTorch tensors have none; flips are copies)");
      int64_t extent = 0;
      if (m.shape[i] > 0 && (__builtin_mul_overflow(m.shape[i] - 1, m.stride[i], &extent) ||
                             __builtin_add_overflow(span, extent, &span) || span > limit))
        fail(node, "strides " + shape_str(m.stride) + " of shape " + shape_str(m.shape) +
                       " span more than the " + std::to_string(kMaxTensorBytes >> 40) +
                       " TiB the harness accepts per tensor");
    }
    return m;
  }

  ValueStats stats_of(const json& s, const std::string& node) const {
    if (!s.is_object()) fail(node, "expected \"stats\" to be {mean, std, min, max}");
    ValueStats st;
    for (auto [key, dst] :
         {std::pair{"mean", &st.mean}, {"std", &st.std}, {"min", &st.min}, {"max", &st.max}}) {
      if (!s.contains(key) || !s[key].is_number())
        fail(node, std::string("expected a number \"") + key + "\" in \"stats\"");
      *dst = s[key].get<double>();
    }
    if (st.std < 0 || st.min > st.max) fail(node, "inconsistent \"stats\" (std < 0 or min > max)");
    return st;
  }

  int lookup(const std::string& name, const std::string& node) const {
    if (auto c = cut_tuples_.find(name); c != cut_tuples_.end())
      fail(node, "uses '" + name + "', a tuple of " + std::to_string(cut_outs_[c->second].size()) +
                     " outputs of " + g_.cut[c->second].op +
                     " (cut: unsupported op), as a tensor; select one "
                     "with getitem");
    if (auto o = opaque_.find(name); o != opaque_.end()) fail(node, o->second);
    if (auto l = lacked_.find(name); l != lacked_.end())
      fail(node, "uses '" + name + "', " + l->second +
                     ": a dtype the harness lacks (replay run, plan and repro cut the nodes that "
                     "read it)");
    if (auto t = tuples_.find(name); t != tuples_.end())
      fail(node, "uses '" + name + "', a tuple of " +
                     std::to_string(g_.nodes[t->second].outputs.size()) + " outputs of " +
                     std::string(op_name(g_.nodes[t->second].op)) +
                     ", as a tensor; select one with getitem");
    auto it = names_.find(name);
    if (it == names_.end())
      fail(node, "references '" + name + "', which is neither a graph input nor an earlier node");
    if (g_.values[it->second].none) fail(node, none_use(it->second));
    return it->second;
  }

  // "uses 'x', output k of 'node', which op returned as None (output_mask false)".
  std::string none_use(int v) const {
    const Value& val = g_.values[v];
    const Node& p = g_.nodes[val.producer];
    return "uses '" + val.name + "', output " + std::to_string(val.output_index) + " of '" + p.id +
           "', which " + std::string(op_name(p.op)) + " returned as None (output_mask false)";
  }

  int add_value(const std::string& name, TensorMeta meta, int producer, int out_idx,
                const std::string& node) {
    if (taken(name)) fail(node, "duplicate id '" + name + "'");
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

  // {"trace": forward trace name, "output": its output id}: a backward's saved input.
  ForwardOutputRef forward_ref(const json& f, const std::string& id) const {
    if (!f.is_object() || !f.contains("trace") || !f["trace"].is_string() ||
        !f.contains("output") || !f["output"].is_string() ||
        f["trace"].get<std::string>().empty() || f["output"].get<std::string>().empty())
      fail(id,
           "expected \"from\" to be {\"trace\": \"<forward trace>\", \"output\": "
           "\"<its output id>\"}, found " +
               f.dump());
    const std::string trace = f["trace"].get<std::string>();
    if (trace.find('/') != std::string::npos || trace.find('\\') != std::string::npos ||
        trace == "." || trace == "..")
      fail(id, "\"from\" names trace '" + trace +
                   "': a trace name, not a path (the forward is <name>.json beside this file)");
    return ForwardOutputRef{trace, f["output"].get<std::string>()};
  }

  void parse_input(const json& in) {
    if (!in.is_object()) fail("", "expected each input to be an object");
    std::string id = str_field(in, "id", "");
    if (auto lt = lacked_tensor(in)) {  // a complex64 table, a uint64 RNG state saved for a bwd
      if (!opt_.cut_unsupported)
        fail(id, "input is " + *lt +
                     ", a dtype the harness lacks (replay run, plan and repro cut the nodes that "
                     "read it)");
      if (taken(id)) fail(id, "duplicate id '" + id + "'");
      if (in.contains("shape")) meta_shape(in["shape"], id);  // well-formed even when unused
      if (in.contains("same_as") || in.contains("widened_from"))
        fail(id, "an input of a dtype the harness lacks (" + *lt +
                     ") cannot be \"same_as\" or \"widened_from\" another");
      if (in.contains("from")) forward_ref(in["from"], id);
      lacked_[id] = *lt;
      g_.lacked.push_back({id, *lt, true});
      return;
    }
    int v = add_value(id, meta_of(in, id), -1, 0, id);
    g_.values[v].graph_input = true;
    if (in.contains("stats")) g_.values[v].stats = stats_of(in["stats"], id);
    if (in.contains("role")) {
      if (!in["role"].is_string()) fail(id, "expected \"role\" to be a string");
      g_.values[v].role = in["role"].get<std::string>();
    }
    if (in.contains("from")) g_.values[v].from = forward_ref(in["from"], id);
    if (in.contains("same_as")) {  // the same tensor as an earlier input
      if (!in["same_as"].is_string()) fail(id, "expected \"same_as\" to be an input id");
      const std::string other = in["same_as"].get<std::string>();
      const int o = g_.find_value(other);
      if (o < 0 || !g_.values[o].graph_input || o == v)
        fail(id, "\"same_as\" names '" + other + "', which is not an earlier input");
      const TensorMeta& a = g_.values[o].meta;
      const TensorMeta& b = g_.values[v].meta;
      if (a.shape != b.shape || a.stride != b.stride || a.dtype != b.dtype)
        fail(id, "\"same_as\" input '" + other + "' is " + a.str() + " with strides " +
                     shape_str(a.stride) + "; this input is " + b.str() + " with strides " +
                     shape_str(b.stride));
      g_.values[v].same_as = g_.values[o].same_as >= 0 ? g_.values[o].same_as : o;
    }
    if (in.contains("widened_from")) {  // exactly an earlier input, widened to this dtype
      if (!in["widened_from"].is_string()) fail(id, "expected \"widened_from\" to be an input id");
      if (g_.values[v].same_as >= 0)
        fail(id, "an input has \"same_as\" or \"widened_from\", not both");
      const std::string other = in["widened_from"].get<std::string>();
      const int o = g_.find_value(other);
      if (o < 0 || !g_.values[o].graph_input || o == v)
        fail(id, "\"widened_from\" names '" + other + "', which is not an earlier input");
      const TensorMeta& a = g_.values[o].meta;
      const TensorMeta& b = g_.values[v].meta;
      if (a.shape != b.shape || a.stride != b.stride || !exact_widening(a.dtype, b.dtype))
        fail(id, "\"widened_from\" input '" + other + "' is " + a.str() + " with strides " +
                     shape_str(a.stride) + "; this input is " + b.str() + " with strides " +
                     shape_str(b.stride) +
                     ": expected the same shape and strides and an exact widening "
                     "(bfloat16/float16 to float32/float64, float32 to float64)");
      if (g_.values[o].widened_from >= 0)
        fail(id, "\"widened_from\" input '" + other + "' is itself widened from another input");
      g_.values[v].widened_from = g_.values[o].same_as >= 0 ? g_.values[o].same_as : o;
    }
    g_.inputs.push_back(v);
  }

  // FX's operator.getitem(tuple, k) on a multi-output node: an alias of its k-th output. The
  // tuple is the node's id; its outputs have no other name.
  void parse_getitem(const std::string& id, const json& j, const json& args, const json& kwargs) {
    int node = -1, cut = -1;
    ArgReader r(args, kwargs, file_, id, [&](const std::string& name) -> int {
      if (auto c = cut_tuples_.find(name); c != cut_tuples_.end()) {
        cut = c->second;
        return -1;
      }
      auto t = tuples_.find(name);
      if (t == tuples_.end()) {
        lookup(name, id);  // fails for an unknown name
        fail(id, "getitem of '" + name + "', which is not a multi-output node");
      }
      node = t->second;
      return -1;
    });
    r.tensor(0, nullptr);
    const int nout =
        static_cast<int>(cut >= 0 ? cut_outs_[cut].size() : g_.nodes[node].outputs.size());
    const auto k = r.integer(1, nullptr, 0, nout - 1);
    r.finish();
    if (taken(id)) fail(id, "duplicate id '" + id + "'");
    if (cut >= 0) return getitem_of_cut(id, j, cut, static_cast<int>(k));
    const int v = g_.nodes[node].outputs[static_cast<size_t>(k)];
    if (g_.values[v].none) fail(id, none_use(v));
    // `outputs` is optional on a getitem (the selected output's metadata is the tuple node's);
    // when given it must describe the selected output: shape, dtype and, where recorded, the
    // strides of every dim longer than 1 (a size-1 dim's stride is arbitrary in PyTorch).
    check_getitem_outputs(id, j, v,
                          "output " + std::to_string(k) + " of '" + g_.nodes[node].id + "'");
    names_[id] = v;
    // The selected output takes the getitem's id as its name (FX's name for it, the one golden
    // files and reports use), unless an earlier getitem named it already.
    if (g_.values[v].name == g_.nodes[node].id + "." + std::to_string(k)) g_.values[v].name = id;
  }

  void check_getitem_outputs(const std::string& id, const json& j, int v,
                             const std::string& which) {
    if (!j.contains("outputs")) return;
    const json& outs = j["outputs"];
    if (!outs.is_array() || outs.size() != 1)
      fail(id, "expected \"outputs\" of a getitem to hold one tensor");
    const TensorMeta m = meta_of(outs[0], id);
    const TensorMeta& sel = g_.meta(v);
    if (m.shape != sel.shape || m.dtype != sel.dtype)
      fail(id, "recorded output " + m.str() + " differs from " + which + ", " + sel.str());
    if (outs[0].contains("stride"))
      for (size_t d = 0; d < m.shape.size(); ++d)
        if (m.shape[d] != 1 && m.stride[d] != sel.stride[d])
          fail(id, "recorded output strides " + shape_str(m.stride) + " differ from those of " +
                       which + ", " + shape_str(sel.stride));
  }

  bool taken(const std::string& id) const {
    return names_.count(id) || tuples_.count(id) || cut_tuples_.count(id) || opaque_.count(id) ||
           lacked_.count(id);
  }

  // --- cutting unsupported ops (LoadOptions::cut_unsupported; traces/SCHEMA.md, "Cut nodes") ---

  // Ids of the nodes some getitem reads: an unknown op with one recorded output is a tuple of one
  // when a getitem selects from it, else a tensor.
  void find_getitem_sources() {
    if (!doc_.contains("nodes") || !doc_["nodes"].is_array()) return;
    for (const auto& n : doc_["nodes"])
      if (n.is_object() && n.value("op", json()) == "getitem" && n.contains("args") &&
          n["args"].is_array() && !n["args"].empty() && n["args"][0].is_object() &&
          n["args"][0].contains("ref") && n["args"][0]["ref"].is_string())
        getitem_sources_.insert(n["args"][0]["ref"].get<std::string>());
  }

  // Tensor metadata is recorded for this output: an object with a shape (not the capture's
  // {"opaque": ...} for a None, an int or a tensor of a dtype the format lacks).
  static bool has_meta(const json& o) { return o.is_object() && o.contains("shape"); }

  // PyTorch dtypes the format lacks (workloads/ir/dtype.hpp holds the others): complex, the
  // small and unsigned integers, the fnuz / e8m0 / float4 formats, the quantized ones.
  static bool lacked_dtype(const std::string& d) {
    static const std::set<std::string> k = {"complex32",
                                            "complex64",
                                            "complex128",
                                            "uint8",
                                            "int8",
                                            "int16",
                                            "uint16",
                                            "uint32",
                                            "uint64",
                                            "float8_e4m3fnuz",
                                            "float8_e5m2fnuz",
                                            "float8_e8m0fnu",
                                            "float4_e2m1fn_x2",
                                            "qint8",
                                            "quint8",
                                            "qint32",
                                            "quint4x2",
                                            "quint2x4",
                                            "bits8",
                                            "bits16",
                                            "bits1x8",
                                            "bits2x4",
                                            "bits4x2",
                                            "uint1",
                                            "uint2",
                                            "uint3",
                                            "uint4",
                                            "uint5",
                                            "uint6",
                                            "uint7",
                                            "int1",
                                            "int2",
                                            "int3",
                                            "int4",
                                            "int5",
                                            "int6",
                                            "int7"};
    return k.count(d) > 0;
  }

  // "complex64 [1, 8, 4, 8]" for a recorded tensor of a dtype the format lacks: {"shape": ...,
  // "dtype": "complex64"}, or the capture's {"opaque": "torch.complex64[1, 8, 4, 8]"}; nullopt for
  // anything else (tensor metadata the format holds, a None, an int, an unknown dtype name).
  static std::optional<std::string> lacked_tensor(const json& o) {
    if (!o.is_object()) return std::nullopt;
    if (o.contains("shape") && o.contains("dtype") && o["dtype"].is_string()) {
      const std::string d = o["dtype"].get<std::string>();
      if (!lacked_dtype(d) || !o["shape"].is_array()) return std::nullopt;
      std::string sh;
      for (const auto& e : o["shape"]) sh += (sh.empty() ? "" : ", ") + e.dump();
      return d + " [" + sh + "]";
    }
    if (!o.contains("opaque") || !o["opaque"].is_string()) return std::nullopt;
    std::string t = o["opaque"].get<std::string>();
    if (t.rfind("torch.", 0) == 0) t = t.substr(6);
    const size_t b = t.find('[');
    if (b == std::string::npos || t.back() != ']' || !lacked_dtype(t.substr(0, b)))
      return std::nullopt;
    return t.substr(0, b) + " " + t.substr(b);
  }

  // Why a node of a known op is cut for a dtype the format lacks: it reads such a value, or the
  // trace records such an output for it; "" otherwise.
  std::string lacked_use(const json& j, const json& args, const json& kwargs) const {
    std::string why;
    std::function<void(const json&)> scan = [&](const json& a) {
      if (!why.empty()) return;
      if (a.is_object() && a.contains("ref") && a["ref"].is_string()) {
        if (auto l = lacked_.find(a["ref"].get<std::string>()); l != lacked_.end())
          why = "reads '" + l->first + "', " + l->second + ": a dtype the harness lacks";
        return;
      }
      if (a.is_array() || a.is_object())
        for (const auto& e : a) scan(e);
    };
    scan(args);
    scan(kwargs);
    if (!why.empty() || !j.contains("outputs") || !j["outputs"].is_array()) return why;
    for (size_t k = 0; k < j["outputs"].size(); ++k)
      if (auto lt = lacked_tensor(j["outputs"][k]))
        return "output " + std::to_string(k) + " is " + *lt + ": a dtype the harness lacks";
    return "";
  }

  // Output `name` of cut node ci is a tensor of a dtype the format lacks (`what`): kept out of the
  // graph, its readers cut too.
  void add_lacked(int ci, const std::string& name, const std::string& what) {
    lacked_[name] = what;
    g_.cut[ci].lacked_outputs.push_back(name + ": " + what);
  }

  // Every {"ref": name} in a cut node's arguments must name an earlier value, as for any node.
  void check_refs(const json& a, const std::string& id) const {
    if (a.is_object() && a.contains("ref")) {
      if (!a["ref"].is_string()) fail(id, "expected \"ref\" to be a value id (a string)");
      const std::string name = a["ref"].get<std::string>();
      if (!names_.count(name) && !tuples_.count(name) && !cut_tuples_.count(name) &&
          !opaque_.count(name) && !lacked_.count(name))
        fail(id, "references '" + name + "', which is neither a graph input nor an earlier node");
      return;
    }
    if (a.is_array() || a.is_object())
      for (const auto& e : a) check_refs(e, id);
  }

  // A node whose op the harness does not know: cut out of the graph. Its outputs become graph
  // inputs when the graph reads them (at once for a single tensor, at the getitem for a tuple).
  // `reason`: why a known op is cut ("reads 'x', complex64 [..]: a dtype the harness lacks");
  // empty for an unknown op.
  void parse_cut(const std::string& id, const std::string& opname, const json& j, const json& args,
                 const json& kwargs, const std::string& reason = "") {
    const std::string unknown =
        "unknown op '" + opname + "' (see `replay list` for the supported ops)";
    check_refs(args, id);
    check_refs(kwargs, id);
    if (!j.contains("outputs") || !j["outputs"].is_array())
      fail(id, (reason.empty() ? unknown : "cut (" + reason + ")") +
                   ": the trace records no \"outputs\" for it, so the graph cannot be cut "
                   "there (its outputs' shapes and dtypes are unknown)");
    if (taken(id)) fail(id, "duplicate id '" + id + "'");
    const json& outs = j["outputs"];
    CutNode c;
    c.id = id;
    c.op = opname;
    c.reason = reason.empty() ? "unsupported op '" + opname + "'" : reason;
    const int ci = static_cast<int>(g_.cut.size());
    g_.cut.push_back(std::move(c));
    cut_outs_.push_back(outs);
    if (outs.size() != 1 || getitem_sources_.count(id)) {
      cut_tuples_[id] = ci;
    } else if (auto lt = lacked_tensor(outs[0])) {
      add_lacked(ci, id, *lt);
    } else if (has_meta(outs[0])) {
      add_cut_value(ci, 0, id, outs[0], nullptr);
    } else {
      opaque_[id] = no_meta(ci, 0, id);
    }
  }

  std::string no_meta(int ci, int k, const std::string& reader) const {
    const CutNode& c = g_.cut[ci];
    return "'" + reader + "' reads output " + std::to_string(k) + " of '" + c.id +
           "', a node cut out of the graph (unknown op '" + c.op +
           "'), and the trace records no tensor metadata for that output (" +
           cut_outs_[ci][static_cast<size_t>(k)].dump() +
           "), so the graph cannot be cut there: record the output's shape, stride and dtype "
           "(traces/SCHEMA.md, \"Cut nodes\")";
  }

  // Output k of cut node ci, read as `name`: a graph input with the recorded metadata `entry`,
  // drawn from its recorded stats (from `entry`, else from `alt`, the getitem's own record).
  int add_cut_value(int ci, int k, const std::string& name, const json& entry, const json* alt) {
    const TensorMeta m = meta_of(entry, name);
    const int v = add_value(name, m, -1, k, name);
    Value& val = g_.values[v];
    val.graph_input = true;
    val.cut = ci;
    CutNode::Output o;
    o.value = name;
    o.index = k;
    const json* st = entry.contains("stats")                             ? &entry["stats"]
                     : alt && alt->is_object() && alt->contains("stats") ? &(*alt)["stats"]
                                                                         : nullptr;
    if (st) {
      o.stats = stats_of(*st, name);
      o.recorded = true;
    } else if (!is_floating(m.dtype)) {
      o.stats = ValueStats{0, 0, 0, 0};  // integers and bool: all zero (valid as any index)
    }
    val.stats = o.stats;
    g_.cut[ci].outputs.push_back(o);
    g_.inputs.push_back(v);
    cut_values_[{ci, k}] = v;
    return v;
  }

  void getitem_of_cut(const std::string& id, const json& j, int ci, int k) {
    int v;
    if (auto it = cut_values_.find({ci, k}); it != cut_values_.end()) {
      v = it->second;  // a second getitem of the same output: an alias, as for any tuple
    } else {
      const json& entry = cut_outs_[ci][static_cast<size_t>(k)];
      const json* own = j.contains("outputs") && j["outputs"].is_array() && j["outputs"].size() == 1
                            ? &j["outputs"][0]
                            : nullptr;
      auto lt = lacked_tensor(entry);
      if (!lt && !has_meta(entry) && own) lt = lacked_tensor(*own);
      if (lt) return add_lacked(ci, id, *lt);  // not a value: its readers are cut
      if (has_meta(entry))
        v = add_cut_value(ci, k, id, entry, own);
      else if (own && has_meta(*own))  // the getitem recorded what the tuple did not
        v = add_cut_value(ci, k, id, *own, nullptr);
      else
        fail(id, no_meta(ci, k, id));
    }
    check_getitem_outputs(id, j, v, "output " + std::to_string(k) + " of '" + g_.cut[ci].id + "'");
    names_[id] = v;
  }

  void parse_node(const json& j) {
    if (!j.is_object()) fail("", "expected each node to be an object");
    std::string id = str_field(j, "id", "");
    std::string opname = str_field(j, "op", id);
    const json args = j.value("args", json::array());
    const json kwargs = j.value("kwargs", json::object());
    if (!args.is_array() || !kwargs.is_object())
      fail(id, "expected \"args\" to be a list and \"kwargs\" an object");
    if (opname == "getitem") return parse_getitem(id, j, args, kwargs);
    auto op = parse_op(opname);
    if (!op) {
      if (!opt_.cut_unsupported)
        fail(id, "unknown op '" + opname + "' (see `replay list` for the supported ops)");
      return parse_cut(id, opname, j, args, kwargs);
    }
    if (opt_.cut_unsupported)  // complex64 values (Meta's and torchtitan's RoPE), uint8 masks
      if (std::string why = lacked_use(j, args, kwargs); !why.empty())
        return parse_cut(id, opname, j, args, kwargs, why);
    const OpDef& def = op_def(*op);
    const json& outs = array_field(j, "outputs", id);

    Node n;
    n.id = id;
    n.op = *op;
    n.raw = j;
    ArgReader reader(args, kwargs, file_, id,
                     [&](const std::string& name) { return lookup(name, id); });
    def.parse(reader, g_, n);
    reader.finish();

    // Recorded outputs vs the op's shape rule.
    std::vector<OutSpec> expect;
    try {
      expect = def.infer(g_, n);
    } catch (const std::invalid_argument& e) {
      fail(id, e.what());
    }
    if (outs.size() != expect.size())
      fail(id, "expected " + std::to_string(expect.size()) + " recorded output(s), found " +
                   std::to_string(outs.size()));
    int node_idx = static_cast<int>(g_.nodes.size());
    for (size_t k = 0; k < outs.size(); ++k) {
      std::string vname = def.num_outputs == 1 ? id : id + "." + std::to_string(k);
      if (expect[k].none || outs[k].is_null()) {  // a None output (OutSpec::none)
        if (!expect[k].none)
          fail(id, "recorded output " + std::to_string(k) + " is null (None), but " +
                       std::string(def.name) + " computes it here");
        if (!outs[k].is_null())
          fail(id, "expected recorded output " + std::to_string(k) + " to be null: " +
                       std::string(def.name) + " returns None there (its output_mask is false)");
        TensorMeta m{{0}, {1}, expect[k].dtype.value_or(DType::kFloat32)};
        n.outputs.push_back(add_value(vname, m, node_idx, static_cast<int>(k), id));
        g_.values[n.outputs.back()].none = true;
        continue;
      }
      TensorMeta m = meta_of(outs[k], id);
      if (m.shape != expect[k].shape)
        fail(id, "recorded output shape " + shape_str(m.shape) +
                     " disagrees with the inputs: " + std::string(def.name) + " of " +
                     describe_inputs(n) + " gives " + shape_str(expect[k].shape));
      if (expect[k].dtype && m.dtype != *expect[k].dtype)
        fail(id, "recorded output dtype " + std::string(dtype_name(m.dtype)) + " disagrees with " +
                     std::string(def.name) + ", which gives " +
                     std::string(dtype_name(*expect[k].dtype)));
      if (def.kind != OpKind::kView && !m.non_overlapping_and_dense())
        fail(id, "recorded output strides " + shape_str(m.stride) + " of shape " +
                     shape_str(m.shape) +
                     " overlap or leave gaps; a computed (non-view) tensor is dense");
      n.outputs.push_back(add_value(vname, m, node_idx, static_cast<int>(k), id));
    }
    if (def.kind == OpKind::kView) {  // a view must be expressible on its input's layout
      try {
        for (size_t k = 0; k < n.outputs.size(); ++k)
          def.alias(n, g_.meta(n.operands[0].value), g_.meta(n.outputs[k]).shape,
                    static_cast<int>(k));
      } catch (const std::invalid_argument& e) {
        fail(id, e.what());
      }
    }
    if (def.kind == OpKind::kRandom) add_uniform_input(n, expect[0].shape);
    if (def.num_outputs !=
        1) {  // a tuple (even of one, for split): outputs are selected with getitem
      if (tuples_.count(id)) fail(id, "duplicate id '" + id + "'");
      tuples_[id] = node_idx;
    }
    for (const auto& o : n.operands)
      if (o.is_tensor()) g_.values[o.value].users.push_back(node_idx);
    g_.nodes.push_back(std::move(n));
  }

  // A random node's draw: a hidden float32 input "<id>#uniform" of its output's shape, appended
  // to its operands (workloads/ops/random.cpp).
  void add_uniform_input(Node& n, const Shape& shape) {
    TensorMeta m{shape, contiguous_strides(shape), DType::kFloat32};
    const int v = add_value(n.id + "#uniform", m, -1, 0, n.id);
    g_.values[v].graph_input = true;
    g_.values[v].uniform = true;
    g_.inputs.push_back(v);
    Operand o;
    o.value = v;
    n.operands.push_back(o);
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
    if (j.contains("prefix")) {
      if (!j["prefix"].is_string()) fail("", "expected \"prefix\" of \"golden\" to be a string");
      ref.prefix = j["prefix"].get<std::string>();
    }
    for (const auto& t : j.value("tensors", json::array())) {
      std::string name = t.get<std::string>();
      if (lacked_.count(name)) continue;  // a dtype the harness lacks: never compared
      if (!names_.count(name)) fail("", "golden tensor '" + name + "' is not a value of the graph");
      ref.names.push_back(name);
    }
    g_.golden = ref;
  }

  const json& doc_;
  std::string file_;
  LoadOptions opt_;
  Graph g_;
  std::map<std::string, int> names_;   // id -> value index (getitem ids alias their source)
  std::map<std::string, int> tuples_;  // id of a multi-output node -> node index
  // Cut nodes (unsupported ops): the recorded "outputs" of each (index in g_.cut), the tuples
  // among them, the graph input made for each output read so far, and ids that name an output
  // without tensor metadata (-> why reading it is an error).
  std::vector<json> cut_outs_;
  std::map<std::string, int> cut_tuples_;
  std::map<std::pair<int, int>, int> cut_values_;
  std::map<std::string, std::string> opaque_;
  // Values of a dtype the format lacks (graph inputs, outputs of cut nodes) -> "complex64 [..]".
  std::map<std::string, std::string> lacked_;
  std::set<std::string> lacked_outputs_;  // graph outputs among them
  std::set<std::string> getitem_sources_;
};

}  // namespace

Graph parse_trace(const json& doc, const std::string& file, const LoadOptions& opt) {
  return Parser(doc, file, opt).parse();
}

namespace {

// Rejects JSON nested deeper than kMaxJsonDepth before the recursive parser sees it (a 100k-deep
// document would overflow the stack there).
void check_depth(std::string_view text, const std::string& file) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw TraceError(file, "",
                         "JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                             " levels (a trace needs about 6)");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace

Graph parse_trace_text(std::string_view text, const std::string& file, const LoadOptions& opt) {
  check_depth(text, file);
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw TraceError(file, "", std::string("malformed JSON: ") + e.what());
  }
  try {
    return parse_trace(doc, file, opt);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    throw TraceError(file, "", std::string("unexpected JSON type: ") + e.what());
  }
}

Graph load_trace(const std::string& path, const LoadOptions& opt) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw TraceError(path, "", "not a regular file (a directory?)");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw TraceError(path, "", "cannot open the trace file (missing or unreadable)");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw TraceError(path, "", "read error");
  return parse_trace_text(text, path, opt);
}

}  // namespace replay
