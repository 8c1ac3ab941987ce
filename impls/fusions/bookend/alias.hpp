// bookend: the meta ops at a fused region's input boundary as host-side aliases (issue 28, seed:
// nvFuser PRs 2639 / 2815). A region input that the graph made by view ops (view, reshape,
// permute, transpose, slice, split, select, expand, unsqueeze, squeeze, alias) from another value
// (its root: a graph input or a computed tensor) is an alias of the root's storage: the same
// bytes, other sizes, strides and storage offset. This header states that arithmetic as data
// (MetaOp) so that the host can run it per replay (the `host_alias` variant) and the tests can
// check it against hand-computed layouts; impls/fusions/bookend/TUNING.md has the method.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "workloads/ir/graph.hpp"

namespace replay::bookend {

/// A strided view of a storage: element i at offset + sum_k i_k * stride[k] (elements).
struct AliasLayout {
  std::vector<int64_t> shape, stride;
  int64_t offset = 0;
  bool operator==(const AliasLayout&) const = default;
  std::string str() const;  ///< "[2, 3]:[3, 1]+0"
};

/// One meta op, with ATen's semantics (all dims normalized to [0, rank)).
struct MetaOp {
  enum class Kind : uint8_t {
    kView,       ///< view / reshape / _unsafe_view / alias as `shape` (no copy: ATen's view rule)
    kPermute,    ///< result dim k is input dim dims[k] (permute, transpose, t)
    kSlice,      ///< dim `dim`: `size` elements from `start` by `step` (slice, split's chunks)
    kSelect,     ///< dim `dim` removed at index `start` (select)
    kExpand,     ///< broadcast to `shape` (right-aligned; size-1 and new leading dims: stride 0)
    kUnsqueeze,  ///< a size-1 dim inserted at `dim`
    kSqueeze,    ///< the size-1 dims `dims` removed
  };
  Kind kind = Kind::kView;
  std::vector<int64_t> shape;             ///< kView, kExpand
  std::vector<int64_t> dims;              ///< kPermute, kSqueeze
  int dim = 0;                            ///< kSlice, kSelect, kUnsqueeze
  int64_t start = 0, size = 0, step = 1;  ///< kSlice (start, size, step); kSelect (start)
  std::string str() const;                ///< e.g. "slice(dim 2, 128 from 256 by 1)"
};

/// The layout of `op` applied to `in`; std::nullopt where the op is not an alias of `in` (a view
/// of a non-viewable layout: reshape would copy) or its arguments do not fit `in`'s shape.
std::optional<AliasLayout> apply_meta_op(const AliasLayout& in, const MetaOp& op);

/// `ops` applied in order to `root`; std::nullopt where one of them is not an alias.
std::optional<AliasLayout> resolve(AliasLayout root, const std::vector<MetaOp>& ops);

/// How a value was made from its root by meta ops: ops[0] reads the root.
struct BoundaryChain {
  int root = -1;  ///< value index of the root (the value itself when `ops` is empty)
  std::vector<MetaOp> ops;
  std::vector<int> nodes;   ///< node index of each op
  std::vector<int> inputs;  ///< value index each op reads (inputs[0] == root)
};

/// The chain of meta ops that made `value`: walks producers while they are view ops of the kinds
/// above (as_strided and anything else ends the walk: that value is the root). Never throws.
BoundaryChain input_chain(const Graph& g, int value);

/// The MetaOp of view node `n` producing its output `k`, or std::nullopt for a view this header
/// does not model (as_strided).
std::optional<MetaOp> meta_op_of(const Graph& g, const Node& n, int k);

}  // namespace replay::bookend
