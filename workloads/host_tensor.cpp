#include "workloads/host_tensor.hpp"

#include <algorithm>
#include <fstream>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "workloads/error.hpp"

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

std::map<std::string, HostTensor> read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw TraceError(path, "", "cannot open the golden safetensors file");
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (all.size() < 8) throw TraceError(path, "", "safetensors file shorter than its header");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | all[i];
  if (hlen > all.size() - 8) throw TraceError(path, "", "safetensors header length out of range");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(all.begin() + 8, all.begin() + 8 + static_cast<long>(hlen));
  } catch (const nlohmann::json::parse_error& e) {
    throw TraceError(path, "", std::string("malformed safetensors header: ") + e.what());
  }
  static const std::map<std::string, DType> kDt = {
      {"F32", DType::kFloat32},   {"F64", DType::kFloat64}, {"F16", DType::kFloat16},
      {"BF16", DType::kBFloat16}, {"I64", DType::kInt64},   {"I32", DType::kInt32},
      {"BOOL", DType::kBool}};
  std::map<std::string, HostTensor> out;
  const size_t base = 8 + hlen;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& e = it.value();
    auto dt = kDt.find(e.value("dtype", ""));
    if (dt == kDt.end()) throw TraceError(path, it.key(), "unsupported safetensors dtype");
    TensorMeta m;
    m.shape = e.at("shape").get<std::vector<int64_t>>();
    m.stride = contiguous_strides(m.shape);
    m.dtype = dt->second;
    auto offs = e.at("data_offsets").get<std::vector<size_t>>();
    if (offs.size() != 2 || offs[1] < offs[0] || base + offs[1] > all.size() ||
        offs[1] - offs[0] != m.nbytes())
      throw TraceError(path, it.key(), "data_offsets do not match the shape and dtype");
    std::vector<uint8_t> bytes(all.begin() + static_cast<long>(base + offs[0]),
                               all.begin() + static_cast<long>(base + offs[1]));
    out[it.key()] = unpack(bytes, m);
  }
  return out;
}

std::map<int, HostTensor> generate_inputs(const Graph& g, uint64_t seed) {
  std::map<int, HostTensor> out;
  for (int v : g.inputs) {
    const Value& val = g.values[v];
    HostTensor t = make_host_tensor(val.meta.shape, val.meta.dtype);
    ValueStats st = val.stats.value_or(ValueStats{0.0, 1.0, -1e30, 1e30});
    std::seed_seq sseq{seed, static_cast<uint64_t>(std::hash<std::string>{}(val.name))};
    std::mt19937_64 rng(sseq);
    std::normal_distribution<double> normal(st.mean, st.std > 0 ? st.std : 1.0);
    for (double& x : t.data) {
      double r = st.std > 0 ? std::clamp(normal(rng), st.min, st.max) : st.mean;
      x = round_to(val.meta.dtype, r);
    }
    out[v] = std::move(t);
  }
  return out;
}

}  // namespace replay
