#include "workloads/ops/promote.hpp"

#include <stdexcept>
#include <string>

namespace replay {
namespace {

enum Category { kNone, kBoolCat, kIntCat, kFloatCat };

Category category(std::optional<DType> t) {
  if (!t) return kNone;
  if (*t == DType::kBool) return kBoolCat;
  return is_floating(*t) ? kFloatCat : kIntCat;
}

std::optional<DType> promote(std::optional<DType> a, std::optional<DType> b) {
  if (!a) return b;
  if (!b) return a;
  auto r = promote_types(*a, *b);
  if (!r)
    throw std::invalid_argument("dtypes " + std::string(dtype_name(*a)) + " and " +
                                std::string(dtype_name(*b)) +
                                " do not promote (PyTorch refuses float8 mixes)");
  return r;
}

// c10 combine_categories(higher, lower).
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (category(higher) == kFloatCat) return higher;
  if (category(higher) == kBoolCat || category(lower) == kFloatCat) return promote(higher, lower);
  return higher ? higher : lower;
}

}  // namespace

DType result_type(const std::vector<PromoteOperand>& ops) {
  std::optional<DType> dim, zero, wrapped;
  for (const auto& o : ops) {
    if (o.wrapped) {
      // A Python float becomes the default dtype; ints int64, bools bool.
      const DType t = is_floating(o.dtype) ? DType::kFloat32 : o.dtype;
      wrapped = promote(wrapped, t);
    } else if (o.zero_dim) {
      zero = promote(zero, o.dtype);
    } else {
      dim = promote(dim, o.dtype);
    }
  }
  auto r = combine(dim, combine(zero, wrapped));
  if (!r) throw std::invalid_argument("type promotion of no operands");
  return *r;
}

std::vector<PromoteOperand> promote_operands(const Graph& g, const std::vector<Operand>& ops) {
  std::vector<PromoteOperand> out;
  for (const auto& o : ops) {
    if (o.none) continue;
    if (o.is_tensor())
      out.push_back({g.meta(o.value).dtype, g.meta(o.value).shape.empty(), false});
    else
      out.push_back({o.scalar_type, false, true});
  }
  return out;
}

DType int_to_float(DType t) {
  return is_floating(t) ? t : DType::kFloat32;
}

}  // namespace replay
