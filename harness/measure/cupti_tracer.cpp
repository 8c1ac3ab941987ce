#include "harness/measure/cupti_tracer.hpp"

#include "harness/measure/timeline_overlap.hpp"
#include "harness/measure/timing.hpp"

#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace replay {
namespace {

struct RawKernel {
  std::string name;
  uint64_t start, end;
  uint32_t stream;
  int grid[3], block[3];
  int registers, static_smem, dynamic_smem;
  bool memcpy = false;
  std::string copy_kind;
  uint64_t bytes = 0;
};

const char* copy_kind_name(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
      return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
      return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
      return "DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "PtoP";
    default:
      return "unknown";
  }
}

RawKernel raw_copy(uint8_t copy_kind, uint64_t bytes, uint64_t start, uint64_t end,
                   uint32_t stream) {
  RawKernel r{};
  r.copy_kind = copy_kind_name(copy_kind);
  r.name = "memcpy " + r.copy_kind;
  r.start = start;
  r.end = end;
  r.stream = stream;
  r.memcpy = true;
  r.bytes = bytes;
  return r;
}

std::mutex g_mu;
std::vector<RawKernel> g_records;

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
      g_records.push_back(raw_copy(m->copyKind, m->bytes, m->start, m->end, m->streamId));
      continue;
    }
    if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY2) {
      auto* m = reinterpret_cast<CUpti_ActivityMemcpyPtoP4*>(rec);
      g_records.push_back(raw_copy(m->copyKind, m->bytes, m->start, m->end, m->streamId));
      continue;
    }
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
    g_records.push_back({k->name ? k->name : "?",
                         k->start,
                         k->end,
                         k->streamId,
                         {k->gridX, k->gridY, k->gridZ},
                         {k->blockX, k->blockY, k->blockZ},
                         k->registersPerThread,
                         k->staticSharedMemory,
                         k->dynamicSharedMemory,
                         false,
                         {},
                         0});
  }
  std::free(buffer);
}

std::string demangle(const std::string& name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : name;
  std::free(d);
  return out;
}

std::string cupti_error(CUptiResult r, const char* call) {
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  return std::string(call) + ": " + (msg ? msg : "unknown CUPTI error");
}

}  // namespace

CuptiSummary trace_kernels(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t stream,
                           const std::function<void(cudaStream_t)>& align) {
  auto fn = [&] {
    enqueue_spin(stream, 2000);  // the replay's launches queue up behind 2 ms of spinning
    if (align) align(stream);
    enqueue(stream);
    cudaStreamSynchronize(stream);
  };
  CuptiSummary s;
  // CUPTI attaches here and is detached (cuptiFinalize) at the end of every pass, so work timed
  // after it runs without the profiler; the callbacks are registered again at each attach.
  CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) {
    s.error = cupti_error(r, "cuptiActivityRegisterCallbacks");
    fn();  // as often as the traced path: the ranks of a multi-process run enqueue alike
    fn();
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records.clear();
  }
  r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    s.error = cupti_error(r, "cuptiActivityEnable");
    fn();
    fn();
    return s;
  }
  // Copies (same-device, peer, and CUDA IPC copies between processes) for the overlap figures; a
  // CUPTI that cannot record them leaves the kernels' timeline as it was, and says so.
  std::string copies_error;
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2})
    if (CUptiResult rc = cuptiActivityEnable(kind); rc != CUPTI_SUCCESS && copies_error.empty())
      copies_error = cupti_error(rc, "cuptiActivityEnable(memcpy)");
  // The first run after enabling pays CUPTI's one-time instrumentation per kernel (launch gaps of
  // hundreds of µs); its records are dropped and the second, steady-state run is summarized.
  fn();
  cudaDeviceSynchronize();
  cuptiActivityFlushAll(1);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_records.clear();
  }
  fn();
  cudaDeviceSynchronize();
  cuptiActivityFlushAll(1);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY2);
  // Detach: the device is idle and the buffers are flushed, which is what cuptiFinalize asks of a
  // caller outside a callback; this process uses CUDA from this thread only.
  r = cuptiFinalize();
  if (r != CUPTI_SUCCESS) s.error = cupti_error(r, "cuptiFinalize");
  if (s.error.empty() && !copies_error.empty())
    s.error = copies_error + " (kernels recorded, copies not)";
  std::lock_guard<std::mutex> lock(g_mu);
  auto skipped = [](const auto& k) {
    return k.name.find("replay_spin_kernel") != std::string::npos;
  };
  if (align) {  // the alignment's kernel: the first to start after the spin
    auto first_rec = g_records.end();
    for (auto it = g_records.begin(); it != g_records.end(); ++it)
      if (!skipped(*it) && !it->memcpy && it->name.find("nccl") != std::string::npos &&
          (first_rec == g_records.end() || it->start < first_rec->start))
        first_rec = it;
    if (first_rec != g_records.end()) g_records.erase(first_rec);
  }
  std::map<std::string, KernelRecord> by_name;
  uint64_t first = UINT64_MAX, last = 0, first_any = UINT64_MAX;
  for (const auto& k : g_records) {
    if (skipped(k)) continue;
    first_any = std::min(first_any, k.start);
    if (k.memcpy) continue;
    auto& rec = by_name[k.name];
    rec.name = demangle(k.name);
    rec.count += 1;
    rec.total_us += static_cast<double>(k.end - k.start) * 1e-3;
    s.kernel_sum_us += static_cast<double>(k.end - k.start) * 1e-3;
    first = std::min(first, k.start);
    last = std::max(last, k.end);
  }
  if (last > 0) s.span_us = static_cast<double>(last - first) * 1e-3;
  for (const auto& k : g_records) {
    if (skipped(k)) continue;
    KernelEvent e;
    e.kind = k.memcpy ? KernelEvent::Kind::kMemcpy : KernelEvent::Kind::kKernel;
    e.name = k.memcpy ? k.name : demangle(k.name);
    e.copy_kind = k.copy_kind;
    e.bytes = k.bytes;
    e.start_us = static_cast<double>(k.start - first_any) * 1e-3;
    e.dur_us = static_cast<double>(k.end - k.start) * 1e-3;
    e.stream = k.stream;
    std::copy(k.grid, k.grid + 3, e.grid);
    std::copy(k.block, k.block + 3, e.block);
    e.registers = k.registers;
    e.static_smem = k.static_smem;
    e.dynamic_smem = k.dynamic_smem;
    s.timeline.push_back(std::move(e));
  }
  std::sort(s.timeline.begin(), s.timeline.end(),
            [](const auto& a, const auto& b) { return a.start_us < b.start_us; });
  try {
    s.kernel_busy_us = timeline_kernel_busy_us(s.timeline);
  } catch (const std::invalid_argument& e) {  // a malformed record: reported, never thrown
    s.error = e.what();
  }
  for (auto& [_, rec] : by_name) s.kernels.push_back(rec);
  std::sort(s.kernels.begin(), s.kernels.end(),
            [](const auto& a, const auto& b) { return a.total_us > b.total_us; });
  if (s.kernels.empty() && s.error.empty()) s.error = "CUPTI recorded no kernels";
  return s;
}

}  // namespace replay
