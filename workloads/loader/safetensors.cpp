#include "workloads/loader/safetensors.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "workloads/ir/error.hpp"

namespace replay {

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

}  // namespace replay
