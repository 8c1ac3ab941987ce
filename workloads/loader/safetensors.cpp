#include "workloads/loader/safetensors.hpp"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "workloads/ir/error.hpp"

namespace replay {

std::map<std::string, HostTensor> read_safetensors(const std::string& path) {
  if (!std::filesystem::is_regular_file(path))
    throw TraceError(path, "", "cannot open the golden safetensors file (missing or not a file)");
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
  } catch (const nlohmann::json::exception& e) {
    throw TraceError(path, "", std::string("malformed safetensors header: ") + e.what());
  }
  if (!header.is_object())
    throw TraceError(path, "", "expected the safetensors header to be an object");
  static const std::map<std::string, DType> kDt = {
      {"F32", DType::kFloat32},   {"F64", DType::kFloat64},        {"F16", DType::kFloat16},
      {"BF16", DType::kBFloat16}, {"I64", DType::kInt64},          {"I32", DType::kInt32},
      {"BOOL", DType::kBool},     {"F8_E4M3", DType::kFloat8E4M3}, {"F8_E5M2", DType::kFloat8E5M2}};
  std::map<std::string, HostTensor> out;
  const size_t base = 8 + hlen;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& e = it.value();
    auto bad = [&](const std::string& what) { return TraceError(path, it.key(), what); };
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      throw bad("expected {\"dtype\": str, \"shape\": [int], \"data_offsets\": [begin, end]}");
    auto dt = kDt.find(e["dtype"].get<std::string>());
    if (dt == kDt.end()) throw bad("unsupported safetensors dtype " + e["dtype"].dump());
    TensorMeta m;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t(1) << 40))
        throw bad("expected non-negative sizes in the shape " + e["shape"].dump());
      m.shape.push_back(d.get<int64_t>());
    }
    if (m.shape.size() > static_cast<size_t>(kMaxRank)) throw bad("more than 8 dims");
    const auto numel = checked_numel(m.shape);
    m.dtype = dt->second;
    std::vector<uint64_t> offs;
    for (const auto& o : e["data_offsets"]) {
      if (!o.is_number_unsigned()) throw bad("expected non-negative integer data_offsets");
      offs.push_back(o.get<uint64_t>());
    }
    if (!numel || offs[1] < offs[0] || offs[1] > all.size() - base ||
        offs[1] - offs[0] != static_cast<uint64_t>(*numel) * dtype_size(m.dtype))
      throw bad("data_offsets do not match the shape and dtype, or lie outside the file");
    m.stride = contiguous_strides(m.shape);
    std::vector<uint8_t> bytes(all.begin() + static_cast<long>(base + offs[0]),
                               all.begin() + static_cast<long>(base + offs[1]));
    out[it.key()] = unpack(bytes, m);
  }
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors) {
  static const std::map<DType, const char*> kName = {
      {DType::kFloat32, "F32"},   {DType::kFloat64, "F64"},        {DType::kFloat16, "F16"},
      {DType::kBFloat16, "BF16"}, {DType::kInt64, "I64"},          {DType::kInt32, "I32"},
      {DType::kBool, "BOOL"},     {DType::kFloat8E4M3, "F8_E4M3"}, {DType::kFloat8E5M2, "F8_E5M2"}};
  nlohmann::json header = nlohmann::json::object();
  std::vector<uint8_t> data;
  for (const auto& [name, t] : tensors) {
    const auto dt = kName.find(t.meta.dtype);
    if (dt == kName.end())
      throw std::runtime_error(path + ": tensor '" + name + "': dtype " +
                               std::string(dtype_name(t.meta.dtype)) + " has no safetensors name");
    TensorMeta layout{t.meta.shape, contiguous_strides(t.meta.shape), t.meta.dtype};
    const std::vector<uint8_t> bytes = pack(t, layout);
    header[name] = {{"dtype", dt->second},
                    {"shape", t.meta.shape},
                    {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data.insert(data.end(), bytes.begin(), bytes.end());
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the format pads the header to a multiple of 8
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open for writing");
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!f) throw std::runtime_error(path + ": write failed");
}

}  // namespace replay
