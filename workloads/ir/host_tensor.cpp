#include "workloads/ir/host_tensor.hpp"

#include "workloads/ir/strided_loop.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace replay {
namespace {

// Calls f(linear logical index, storage offset) for every element of `layout`, row-major.
template <typename F>
void for_each_offset(const TensorMeta& layout, F&& f) {
  const size_t nd = layout.shape.size();
  const int64_t n = layout.numel();
  std::vector<int64_t> idx(nd, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (size_t d = nd; d-- > 0;) {  // odometer increment
      if (++idx[d] < layout.shape[d]) {
        off += layout.stride[d];
        break;
      }
      off -= (layout.shape[d] - 1) * layout.stride[d];
      idx[d] = 0;
    }
  }
}

// "[i0, i1, ...]": the multi-index of row-major linear index `i` in `shape`.
std::string index_str(const std::vector<int64_t>& shape, int64_t i) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return shape_str(idx);
}

std::string num_str(double v) {
  std::ostringstream os;
  os << std::setprecision(17) << v;
  return os.str();
}

bool has_distinct_offsets(const TensorMeta& layout) {
  // Sort the dims that have more than one index by stride; if each stride exceeds the largest
  // offset the smaller-stride dims reach, every index has its own offset (the mixed-radix
  // argument). Contiguous, permuted and sliced layouts pass; stride 0 and other overlaps fail.
  // The test is sufficient, not necessary (strides [2, 3] on shape [3, 2] have distinct offsets
  // and fail it): such layouts only take pack's slower checked path, which is exact.
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (size_t d = 0; d < layout.shape.size(); ++d)
    if (layout.shape[d] > 1) dims.emplace_back(layout.stride[d], layout.shape[d]);
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // largest offset of the dims seen so far
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return false;
    reach += (size - 1) * stride;
  }
  return true;
}

}  // namespace

int host_threads() {
#ifdef _OPENMP
  return std::max(1, omp_get_max_threads());
#else
  return 1;
#endif
}

HostTensor make_host_tensor(const std::vector<int64_t>& shape, DType dtype) {
  HostTensor t = make_host_tensor_for_overwrite(shape, dtype);
  std::fill(t.data.begin(), t.data.end(), 0.0);
  return t;
}

HostTensor make_host_tensor_for_overwrite(const std::vector<int64_t>& shape, DType dtype) {
  HostTensor t;
  t.meta = TensorMeta{shape, contiguous_strides(shape), dtype};
  t.data.resize(static_cast<size_t>(t.meta.numel()));
  return t;
}

std::vector<uint8_t> pack(const HostTensor& t, const TensorMeta& layout) {
  if (t.meta.shape != layout.shape) throw std::invalid_argument("pack: shape mismatch");
  const size_t es = dtype_size(layout.dtype);
  std::vector<uint8_t> out(static_cast<size_t>(layout.storage_elems()) * es, 0);
  if (layout.numel() == 0 || has_distinct_offsets(layout)) {  // no two threads share an offset
    uint8_t* dst = out.data();
    parallel_strided_loop(layout.shape, {&layout.stride}, [&](int64_t i, const auto& off) {
      store_as(layout.dtype, t.data[i], dst + off[0] * es);
    });
    return out;
  }
  // Several logical elements share a storage element: they must agree, or the buffer would hold
  // whichever was written last while the reference computes with all of them.
  std::vector<int64_t> first(static_cast<size_t>(layout.storage_elems()), -1);
  for_each_offset(layout, [&](int64_t i, int64_t off) {
    int64_t& f = first[off];
    if (f < 0) {
      f = i;
      store_as(layout.dtype, t.data[i], out.data() + off * es);
      return;
    }
    const double a = t.data[f], b = t.data[i];
    if (a == b || (std::isnan(a) && std::isnan(b))) return;
    throw std::invalid_argument(
        "pack: logical elements " + index_str(layout.shape, i) + " and " +
        index_str(layout.shape, f) + " of " + layout.str() + " with stride " +
        shape_str(layout.stride) + " share storage element " + std::to_string(off) +
        " but hold different values (" + num_str(b) + " vs " + num_str(a) + ")");
  });
  return out;
}

HostTensor strided_view(const HostTensor& storage, const TensorMeta& layout, int64_t offset) {
  HostTensor t = make_host_tensor_for_overwrite(layout.shape, layout.dtype);
  if (layout.numel() > 0 &&
      (offset < 0 || offset + layout.storage_elems() > static_cast<int64_t>(storage.data.size())))
    throw std::invalid_argument("strided_view: layout exceeds the storage");
  const double* src = storage.data.data() + offset;
  parallel_strided_loop(layout.shape, {&layout.stride},
                        [&](int64_t i, const auto& off) { t.data[i] = src[off[0]]; });
  return t;
}

HostTensor unpack(const std::vector<uint8_t>& bytes, const TensorMeta& layout) {
  HostTensor t = make_host_tensor_for_overwrite(layout.shape, layout.dtype);
  const size_t es = dtype_size(layout.dtype);
  if (bytes.size() < static_cast<size_t>(layout.storage_elems()) * es)
    throw std::invalid_argument("unpack: buffer smaller than the layout");
  const uint8_t* src = bytes.data();
  parallel_strided_loop(layout.shape, {&layout.stride}, [&](int64_t i, const auto& off) {
    t.data[i] = load_as(layout.dtype, src + off[0] * es);
  });
  return t;
}

}  // namespace replay
