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
                      creation_op_rows(), copy_op_rows(), matmul_op_rows(), random_op_rows(),
                      indexing_op_rows(), nn_op_rows(), collective_op_rows()})
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

bool is_addition(Op op) {
  return op == Op::kAdd || op == Op::kSub || op == Op::kAddScalar || op == Op::kSubScalar ||
         op == Op::kRsubScalar;
}

int carried_value(const Node& n) {
  const bool copies = n.op == Op::kClone || n.op == Op::kConvertElementType || n.op == Op::kToCopy;
  if (!copies && op_def(n.op).kind != OpKind::kView) return -1;
  int v = -1;
  for (const auto& o : n.operands)
    if (o.is_tensor()) {
      if (v >= 0) return -1;
      v = o.value;
    }
  return v;
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
