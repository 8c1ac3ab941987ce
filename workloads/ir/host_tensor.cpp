#include "workloads/ir/host_tensor.hpp"

#include <algorithm>
#include <stdexcept>

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

}  // namespace

HostTensor make_host_tensor(const std::vector<int64_t>& shape, DType dtype) {
  HostTensor t;
  t.meta = TensorMeta{shape, contiguous_strides(shape), dtype};
  t.data.assign(static_cast<size_t>(t.meta.numel()), 0.0);
  return t;
}

std::vector<uint8_t> pack(const HostTensor& t, const TensorMeta& layout) {
  if (t.meta.shape != layout.shape) throw std::invalid_argument("pack: shape mismatch");
  const size_t es = dtype_size(layout.dtype);
  std::vector<uint8_t> out(static_cast<size_t>(layout.storage_elems()) * es, 0);
  for_each_offset(layout, [&](int64_t i, int64_t off) {
    store_as(layout.dtype, t.data[i], out.data() + off * es);
  });
  return out;
}

HostTensor strided_view(const HostTensor& storage, const TensorMeta& layout) {
  HostTensor t = make_host_tensor(layout.shape, layout.dtype);
  if (layout.numel() > 0 && layout.storage_elems() > static_cast<int64_t>(storage.data.size()))
    throw std::invalid_argument("strided_view: layout exceeds the storage");
  for_each_offset(layout, [&](int64_t i, int64_t off) { t.data[i] = storage.data[off]; });
  return t;
}

HostTensor unpack(const std::vector<uint8_t>& bytes, const TensorMeta& layout) {
  HostTensor t = make_host_tensor(layout.shape, layout.dtype);
  const size_t es = dtype_size(layout.dtype);
  if (bytes.size() < static_cast<size_t>(layout.storage_elems()) * es)
    throw std::invalid_argument("unpack: buffer smaller than the layout");
  for_each_offset(layout, [&](int64_t i, int64_t off) {
    t.data[i] = load_as(layout.dtype, bytes.data() + off * es);
  });
  return t;
}

}  // namespace replay
