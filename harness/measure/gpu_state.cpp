#include "harness/measure/gpu_state.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>

namespace replay {
namespace {

// The few NVML entry points used, declared by their documented C signatures (nvml.h is not part
// of the CUDA toolkit wheels on the build machines). nvmlReturn_t 0 is NVML_SUCCESS.
using nvmlDevice_t = struct nvmlDevice_st*;
using InitFn = int (*)();
using HandleFn = int (*)(const char*, nvmlDevice_t*);
using ClockFn = int (*)(nvmlDevice_t, int, unsigned*);  // nvmlClockType_t: 1 SM, 2 memory
using UintFn = int (*)(nvmlDevice_t, unsigned*);
using TempFn = int (*)(nvmlDevice_t, int, unsigned*);  // sensor 0: GPU die
using ReasonsFn = int (*)(nvmlDevice_t, unsigned long long*);
using DriverFn = int (*)(char*, unsigned);
constexpr int kClockSm = 1, kClockMem = 2, kTempGpu = 0;

struct Nvml {
  void* lib = nullptr;
  InitFn init = nullptr;
  HandleFn handle = nullptr;
  ClockFn clock = nullptr, max_clock = nullptr;
  UintFn power_limit = nullptr, power_usage = nullptr;
  TempFn temperature = nullptr;
  ReasonsFn reasons = nullptr;
  DriverFn driver = nullptr;
  std::string error;

  Nvml() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      error = "NVML not available (libnvidia-ml.so.1 not found)";
      return;
    }
    auto sym = [&](const char* name) { return dlsym(lib, name); };
    init = reinterpret_cast<InitFn>(sym("nvmlInit_v2"));
    handle = reinterpret_cast<HandleFn>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    clock = reinterpret_cast<ClockFn>(sym("nvmlDeviceGetClockInfo"));
    max_clock = reinterpret_cast<ClockFn>(sym("nvmlDeviceGetMaxClockInfo"));
    power_limit = reinterpret_cast<UintFn>(sym("nvmlDeviceGetPowerManagementLimit"));
    power_usage = reinterpret_cast<UintFn>(sym("nvmlDeviceGetPowerUsage"));
    temperature = reinterpret_cast<TempFn>(sym("nvmlDeviceGetTemperature"));
    reasons = reinterpret_cast<ReasonsFn>(sym("nvmlDeviceGetCurrentClocksEventReasons"));
    driver = reinterpret_cast<DriverFn>(sym("nvmlSystemGetDriverVersion"));
    if (!reasons)
      reasons = reinterpret_cast<ReasonsFn>(sym("nvmlDeviceGetCurrentClocksThrottleReasons"));
    if (!init || !handle || !clock) {
      error = "NVML lacks nvmlInit_v2 / nvmlDeviceGetHandleByPciBusId_v2 / nvmlDeviceGetClockInfo";
      return;
    }
    if (int rc = init(); rc != 0) error = "nvmlInit_v2 failed with " + std::to_string(rc);
  }
};

const Nvml& nvml() {
  static const Nvml n;  // initialized once; NVML stays loaded for the process
  return n;
}

}  // namespace

nlohmann::json gpu_state(int device) {
  const Nvml& n = nvml();
  if (!n.error.empty()) return {{"error", n.error}};
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return {{"error", "cudaDeviceGetPCIBusId failed"}};
  }
  nvmlDevice_t dev = nullptr;
  if (int rc = n.handle(bus, &dev); rc != 0)
    return {{"error", "nvmlDeviceGetHandleByPciBusId_v2(" + std::string(bus) + ") failed with " +
                          std::to_string(rc)}};
  nlohmann::json j = {{"pci_bus_id", bus}};
  char version[96] = {};
  if (n.driver && n.driver(version, sizeof version) == 0) j["driver_version"] = version;
  unsigned v = 0;
  if (n.clock(dev, kClockSm, &v) == 0) j["sm_clock_mhz"] = v;
  if (n.max_clock && n.max_clock(dev, kClockSm, &v) == 0) j["sm_clock_max_mhz"] = v;
  if (n.clock(dev, kClockMem, &v) == 0) j["mem_clock_mhz"] = v;
  if (n.max_clock && n.max_clock(dev, kClockMem, &v) == 0) j["mem_clock_max_mhz"] = v;
  if (n.power_usage && n.power_usage(dev, &v) == 0) j["power_draw_w"] = v / 1000.0;
  if (n.power_limit && n.power_limit(dev, &v) == 0) j["power_limit_w"] = v / 1000.0;
  if (n.temperature && n.temperature(dev, kTempGpu, &v) == 0) j["temperature_c"] = v;
  unsigned long long r = 0;
  if (n.reasons && n.reasons(dev, &r) == 0) j["clock_event_reasons"] = r;
  return j;
}

}  // namespace replay
