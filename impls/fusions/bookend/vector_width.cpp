// bookend: the vector width chooser (vector_width.hpp).
#include "impls/fusions/bookend/vector_width.hpp"

namespace replay::bookend {

int vector_bytes(uintptr_t base, int elem_bytes, const int64_t* outer_stride, int n_outer,
                 int64_t inner_stride, int64_t inner_size, int max_bytes) {
  if (inner_stride != 1 && inner_size != 1) return elem_bytes;
  for (int w = max_bytes; w > elem_bytes; w /= 2) {
    bool ok = base % static_cast<uintptr_t>(w) == 0 && (inner_size * elem_bytes) % w == 0;
    for (int k = 0; ok && k < n_outer; ++k) ok = (outer_stride[k] * elem_bytes) % w == 0;
    if (ok) return w;
  }
  return elem_bytes;
}

}  // namespace replay::bookend
