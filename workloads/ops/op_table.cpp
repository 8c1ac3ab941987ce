// The op table: the family files' rows, indexed by Op. Each family file static_asserts that its
// rows cover its enum range in order (op.hpp rows_cover), so this index cannot miss an op.
#include <array>

#include "workloads/ops/op.hpp"

namespace replay {
namespace {

const std::array<const OpDef*, kOpCount>& table() {
  static const std::array<const OpDef*, kOpCount> t = [] {
    std::array<const OpDef*, kOpCount> out{};
    for (auto rows : {pointwise_op_rows(), compare_op_rows(), reduction_op_rows(), view_op_rows(),
                      creation_op_rows(), copy_op_rows(), matmul_op_rows(), random_op_rows()})
      for (const OpDef& r : rows) out.at(static_cast<size_t>(r.op)) = &r;
    return out;
  }();
  return t;
}

}  // namespace

const OpDef& op_def(Op op) {
  return *table().at(static_cast<size_t>(op));
}

std::span<const OpDef* const> all_ops() {
  return table();
}

std::string_view op_name(Op op) {
  return op_def(op).name;
}

std::optional<Op> parse_op(std::string_view name) {
  for (const OpDef* r : table())
    if (r->name == name) return r->op;
  return std::nullopt;
}

}  // namespace replay
