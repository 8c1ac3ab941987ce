// The GPU's state as NVML reports it: SM and memory clocks (current and maximum), power draw and
// limit, temperature, and the reasons the clocks are held down. NVML (libnvidia-ml.so.1, part of
// the driver) is loaded at run time, so binaries also run where no driver is installed.
#pragma once

#include <nlohmann/json.hpp>

namespace replay {

/// {driver_version, sm_clock_mhz, sm_clock_max_mhz, mem_clock_mhz, mem_clock_max_mhz,
/// power_draw_w, power_limit_w, temperature_c, clock_event_reasons} of CUDA device `device`
/// (matched to NVML by PCI bus id); {"error": "..."} when NVML is missing or fails. Never throws.
nlohmann::json gpu_state(int device);

}  // namespace replay
