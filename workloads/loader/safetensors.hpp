// Golden tensors beside a trace: the safetensors format
// (https://github.com/huggingface/safetensors: u64 header length, JSON header, raw little-endian
// data).
#pragma once

#include <map>
#include <string>

#include "workloads/ir/host_tensor.hpp"

namespace replay {

/// Read every tensor of a safetensors file, keyed by name. Throws TraceError(path, name, ...) on a
/// missing file, a bad header, an unknown dtype or out-of-range offsets.
std::map<std::string, HostTensor> read_safetensors(const std::string& path);

/// Write `tensors` (name -> values, each stored contiguous in its meta's dtype, which must be one
/// read_safetensors reads) as a safetensors file at `path`, names in sorted order. Throws
/// std::runtime_error naming the path when it cannot be written.
void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors);

}  // namespace replay
