#include "workloads/ops/args.hpp"

#include <cmath>
#include <limits>

#include "workloads/ir/error.hpp"

namespace replay {

using nlohmann::json;

ArgReader::ArgReader(const json& args, const json& kwargs, std::string file, std::string node,
                     Lookup lookup)
    : args_(args),
      kwargs_(kwargs),
      file_(std::move(file)),
      node_(std::move(node)),
      lookup_(std::move(lookup)) {}

void ArgReader::fail(const std::string& what) const {
  throw TraceError(file_, node_, what);
}

std::string ArgReader::describe(size_t i, const char* kw) const {
  if (i == kKwOnly) return std::string("keyword argument '") + kw + "'";
  return "argument " + std::to_string(i) + (kw ? std::string(" ('") + kw + "')" : "");
}

const json* ArgReader::find(size_t i, const char* kw) {
  if (i != kKwOnly) positional_read_ = std::max(positional_read_, i + 1);
  if (kw) kwargs_read_.insert(kw);
  if (kw && i != kKwOnly && i < args_.size() && !args_[i].is_null() && kwargs_.contains(kw))
    fail(describe(i, kw) + " is given both by position and by keyword");
  if (i != kKwOnly && i < args_.size()) return &args_[i];
  if (kw && kwargs_.contains(kw)) return &kwargs_[kw];
  return nullptr;
}

const json& ArgReader::require(size_t i, const char* kw) {
  const json* p = find(i, kw);
  if (!p || p->is_null()) fail("expected " + describe(i, kw));
  return *p;
}

int64_t ArgReader::to_int(const json& j, const std::string& what) const {
  if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX))
    fail("expected " + what + " to fit in a 64-bit integer, found " + j.dump());
  if (!j.is_number_integer()) fail("expected an integer for " + what + ", found " + j.dump());
  return j.get<int64_t>();
}

bool ArgReader::present(size_t i, const char* kw) {
  const json* p = find(i, kw);
  return p && !p->is_null();
}

int ArgReader::tensor(size_t i, const char* kw) {
  const json& a = require(i, kw);
  if (!a.is_object() || !a.contains("ref") || !a["ref"].is_string())
    fail("expected a tensor reference {\"ref\": id} for " + describe(i, kw) + ", found " +
         a.dump());
  return lookup_(a["ref"].get<std::string>());
}

double ArgReader::scalar(size_t i, const char* kw) {
  const json& a = require(i, kw);
  if (a.is_boolean()) return a.get<bool>() ? 1 : 0;
  if (a.is_number()) return a.get<double>();
  if (a.is_object() && a.size() == 1 && a.contains("float") && a["float"].is_string()) {
    const std::string s = a["float"].get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    fail("expected {\"float\": \"inf\" | \"-inf\" | \"nan\"} for " + describe(i, kw) + ", found " +
         a.dump());
  }
  fail("expected a number for " + describe(i, kw) + ", found " + a.dump());
}

std::optional<double> ArgReader::opt_scalar(size_t i, const char* kw) {
  const json* p = find(i, kw);
  if (!p || p->is_null()) return std::nullopt;
  return scalar(i, kw);
}

Operand ArgReader::operand(size_t i, const char* kw) {
  const json& a = require(i, kw);
  if (a.is_object() && a.contains("ref")) {
    Operand o;
    o.value = tensor(i, kw);
    return o;
  }
  return scalar_operand(i, kw);
}

std::vector<int> ArgReader::tensor_list(size_t i, const char* kw) {
  const json& a = require(i, kw);
  if (!a.is_array())
    fail("expected a list of tensors for " + describe(i, kw) + ", found " + a.dump());
  std::vector<int> out;
  for (const json& e : a) {
    if (!e.is_object() || !e.contains("ref") || !e["ref"].is_string())
      fail("expected tensor references {\"ref\": id} in " + describe(i, kw) + ", found " +
           e.dump());
    out.push_back(lookup_(e["ref"].get<std::string>()));
  }
  return out;
}

std::vector<int> ArgReader::opt_tensor_list(size_t i, const char* kw) {
  const json& a = require(i, kw);
  if (!a.is_array())
    fail("expected a list of optional tensors for " + describe(i, kw) + ", found " + a.dump());
  std::vector<int> out;
  for (const json& e : a) {
    if (e.is_null()) {
      out.push_back(-1);
      continue;
    }
    if (!e.is_object() || !e.contains("ref") || !e["ref"].is_string())
      fail("expected tensor references {\"ref\": id} or null in " + describe(i, kw) + ", found " +
           e.dump());
    out.push_back(lookup_(e["ref"].get<std::string>()));
  }
  return out;
}

std::optional<std::string> ArgReader::opt_string(size_t i, const char* kw) {
  const json* p = find(i, kw);
  if (!p || p->is_null()) return std::nullopt;
  if (!p->is_string()) fail("expected a string for " + describe(i, kw) + ", found " + p->dump());
  return p->get<std::string>();
}

Operand ArgReader::opt_operand(size_t i, const char* kw) {
  const json* p = find(i, kw);
  if (!p || p->is_null()) {
    Operand o;
    o.none = true;
    return o;
  }
  return operand(i, kw);
}

Operand ArgReader::scalar_operand(size_t i, const char* kw) {
  const json& a = require(i, kw);
  Operand o;
  o.scalar = scalar(i, kw);
  o.scalar_type = a.is_boolean()                                    ? DType::kBool
                  : a.is_number_integer() || a.is_number_unsigned() ? DType::kInt64
                                                                    : DType::kFloat64;
  return o;
}

int64_t ArgReader::integer(size_t i, const char* kw, int64_t lo, int64_t hi) {
  const int64_t v = to_int(require(i, kw), describe(i, kw));
  if (v < lo || v > hi)
    fail(describe(i, kw) + " = " + std::to_string(v) + " is out of range [" + std::to_string(lo) +
         ", " + std::to_string(hi) + "]");
  return v;
}

std::vector<int64_t> ArgReader::int_list(size_t i, const char* kw) {
  const json& a = require(i, kw);
  if (a.is_number()) return {to_int(a, describe(i, kw))};
  if (!a.is_array()) fail("expected a list of integers for " + describe(i, kw));
  std::vector<int64_t> v;
  for (const auto& e : a) v.push_back(to_int(e, "an element of " + describe(i, kw)));
  return v;
}

std::optional<std::vector<int64_t>> ArgReader::opt_int_list(size_t i, const char* kw) {
  const json* p = find(i, kw);
  if (!p || p->is_null()) return std::nullopt;
  return int_list(i, kw);
}

bool ArgReader::boolean(size_t i, const char* kw, bool dflt) {
  const json* p = find(i, kw);
  if (!p || p->is_null()) return dflt;
  if (!p->is_boolean())
    fail("expected true or false for " + describe(i, kw) + ", found " + p->dump());
  return p->get<bool>();
}

DType ArgReader::dtype(size_t i, const char* kw) {
  const json& a = require(i, kw);
  std::string name = a.is_string() ? a.get<std::string>()
                     : (a.is_object() && a.contains("dtype") && a["dtype"].is_string())
                         ? a["dtype"].get<std::string>()
                         : "";
  auto dt = parse_dtype(name);
  if (!dt) fail("unknown dtype '" + (name.empty() ? a.dump() : name) + "' (" + dtype_list() + ")");
  return *dt;
}

void ArgReader::finish() const {
  size_t given = args_.size();
  while (given > positional_read_ && args_[given - 1].is_null()) --given;  // trailing Nones
  if (given > positional_read_)
    fail("expected at most " + std::to_string(positional_read_) +
         " positional argument(s), found " + std::to_string(given));
  for (auto it = kwargs_.begin(); it != kwargs_.end(); ++it)
    if (!kwargs_read_.count(it.key()) && !it.value().is_null())
      fail("unexpected keyword argument '" + it.key() + "'");
}

}  // namespace replay
