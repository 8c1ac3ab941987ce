// PyTorch's type promotion for op operands (c10's ResultTypeState, at::native::result_type):
// tensors with dims, zero-dim tensors and Python numbers form three priority classes; a lower
// class only raises the result when it is of a higher category (bool < integer < floating), and
// a Python float then gives the default dtype (float32).
#pragma once

#include <optional>
#include <vector>

#include "workloads/ir/graph.hpp"

namespace replay {

/// One operand as type promotion sees it.
struct PromoteOperand {
  DType dtype;
  bool zero_dim = false;  ///< a tensor of shape []
  bool wrapped = false;   ///< a Python number (dtype: float64, int64 or bool by its Python type)
};

/// torch.result_type over `ops`. Throws std::invalid_argument when no operand is given or two
/// dtypes do not promote (float8 mixes).
DType result_type(const std::vector<PromoteOperand>& ops);

/// The promotion view of node operands (None operands skipped).
std::vector<PromoteOperand> promote_operands(const Graph& g, const std::vector<Operand>& ops);

/// float32 for integer and bool dtypes, the dtype itself for floating ones: what unary float
/// functions (exp, sqrt, ...) and true division give for integer inputs.
DType int_to_float(DType t);

}  // namespace replay
