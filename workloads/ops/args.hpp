// Typed access to a node's FX arguments (positional `args`, keyword `kwargs`) for the op rows'
// parsers. Every accessor checks the JSON type and range and throws TraceError naming the file,
// the node and the argument; finish() rejects arguments no parser read (wrong arity).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workloads/ir/graph.hpp"

namespace replay {

class ArgReader {
 public:
  /// Position of a keyword-only argument (var_mean's `correction`, `keepdim`).
  static constexpr size_t kKwOnly = static_cast<size_t>(-1);
  /// Resolves a value id to its value index; throws TraceError for an unknown id.
  using Lookup = std::function<int(const std::string& id)>;

  ArgReader(const nlohmann::json& args, const nlohmann::json& kwargs, std::string file,
            std::string node, Lookup lookup);

  /// A tensor operand `{"ref": id}` at position i or keyword kw (required).
  int tensor(size_t i, const char* kw);
  /// A list of tensor references (required), e.g. cat's `tensors`.
  std::vector<int> tensor_list(size_t i, const char* kw);
  /// A list of optional tensor references (required), e.g. index's `indices`: -1 for a null entry.
  std::vector<int> opt_tensor_list(size_t i, const char* kw);
  /// A tensor or a Python number (required); a number keeps its Python type (int, float, bool)
  /// for type promotion.
  Operand operand(size_t i, const char* kw);
  /// Like operand(), an Operand with `none` set when absent or null.
  Operand opt_operand(size_t i, const char* kw);
  /// A Python number as an Operand (keeping its type), required.
  Operand scalar_operand(size_t i, const char* kw);
  /// A Python number: JSON number, bool, or {"float": "inf" | "-inf" | "nan"} (required).
  double scalar(size_t i, const char* kw);
  /// Like scalar(), std::nullopt when absent or null.
  std::optional<double> opt_scalar(size_t i, const char* kw);
  /// An integer in [lo, hi] (required).
  int64_t integer(size_t i, const char* kw, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);
  /// A list of integers, or one integer standing for a list of one (required).
  std::vector<int64_t> int_list(size_t i, const char* kw);
  /// Like int_list(), std::nullopt when absent or null.
  std::optional<std::vector<int64_t>> opt_int_list(size_t i, const char* kw);
  /// A bool; `dflt` when absent or null.
  bool boolean(size_t i, const char* kw, bool dflt);
  /// A string; std::nullopt when absent or null.
  std::optional<std::string> opt_string(size_t i, const char* kw);
  /// A dtype `{"dtype": "float32"}` (or its bare name), required.
  DType dtype(size_t i, const char* kw);

  /// Whether argument i / keyword kw is given and not null (marks it read).
  bool present(size_t i, const char* kw);
  /// Marks keyword `kw` as understood without reading it (e.g. clone's memory_format: the
  /// recorded output strides already say what it did).
  void ignore(const char* kw) { kwargs_read_.insert(kw); }

  /// Throws when a positional argument beyond those read, or a non-null keyword argument no
  /// accessor asked for, is present: the op was called with a signature the row does not know.
  void finish() const;
  [[noreturn]] void fail(const std::string& what) const;
  const std::string& node() const { return node_; }

 private:
  const nlohmann::json* find(size_t i, const char* kw);
  const nlohmann::json& require(size_t i, const char* kw);
  std::string describe(size_t i, const char* kw) const;
  int64_t to_int(const nlohmann::json& j, const std::string& what) const;

  const nlohmann::json& args_;
  const nlohmann::json& kwargs_;
  std::string file_, node_;
  Lookup lookup_;
  size_t positional_read_ = 0;  // 1 + the largest position asked for
  std::set<std::string> kwargs_read_;
};

}  // namespace replay
