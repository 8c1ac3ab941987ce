#include "harness/measure/timing.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "harness/measure/gpu_state.hpp"

namespace replay {
namespace {

// Owning pair of CUDA events.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    REPLAY_CUDA(cudaEventCreate(&start));
    REPLAY_CUDA(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  double elapsed_us() const {
    float ms = 0;
    REPLAY_CUDA(cudaEventElapsedTime(&ms, start, stop));
    return ms * 1e3;
  }
};

size_t l2_bytes() {
  int dev = 0, l2 = 0;
  REPLAY_CUDA(cudaGetDevice(&dev));
  REPLAY_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  return static_cast<size_t>(std::max(l2, 1 << 20));
}

}  // namespace

L2Flush::L2Flush() : buf_(2 * l2_bytes()), sink_(sizeof(unsigned)) {
  REPLAY_CUDA(cudaMemset(buf_.get(), 0, buf_.bytes()));
  REPLAY_CUDA(cudaDeviceSynchronize());
}

void L2Flush::flush(cudaStream_t s) {
  l2_flush_read(buf_.get(), buf_.bytes() / 16 * 16, static_cast<unsigned*>(sink_.get()), s);
}

std::vector<double> sample_batch(const std::function<void(cudaStream_t)>& fn, cudaStream_t s,
                                 L2Flush* l2, size_t n, std::vector<double>* host_us,
                                 std::vector<double>* sm_mhz, const SampleAlign& align) {
  std::vector<EventPair> ev(n);
  std::optional<DeviceBuffer> probes;
  if (sm_mhz) probes.emplace(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) {
    if (l2) l2->flush(s);
    if (align) align(s);
    REPLAY_CUDA(cudaEventRecord(ev[i].start, s));
    const auto h0 = std::chrono::steady_clock::now();
    fn(s);
    if (host_us)
      host_us->push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count());
    REPLAY_CUDA(cudaEventRecord(ev[i].stop, s));
    if (probes) enqueue_clock_probe(static_cast<float*>(probes->get()) + i, s);
  }
  REPLAY_CUDA(cudaStreamSynchronize(s));
  std::vector<double> us;
  for (auto& e : ev) us.push_back(e.elapsed_us());
  if (probes) {
    std::vector<float> mhz(n);
    REPLAY_CUDA(cudaMemcpy(mhz.data(), probes->get(), n * sizeof(float), cudaMemcpyDeviceToHost));
    sm_mhz->insert(sm_mhz->end(), mhz.begin(), mhz.end());
  }
  return us;
}

HostEnqueue time_host_enqueue(const std::function<void(cudaStream_t)>& fn, cudaStream_t s,
                              size_t n) {
  constexpr double kTimeoutUs = 100000;
  StreamBlocker blocker;
  HostEnqueue out;
  out.us.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    REPLAY_CUDA(cudaStreamSynchronize(s));
    blocker.block(s, kTimeoutUs);
    const auto h0 = std::chrono::steady_clock::now();
    fn(s);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
    blocker.release();
    REPLAY_CUDA(cudaStreamSynchronize(s));
    if (blocker.timed_out())
      ++out.waited;  // it includes the wait for the GPU: not launch overhead
    else
      out.us.push_back(us);
  }
  return out;
}

double max_sm_clock_mhz() {
  int dev = 0;
  REPLAY_CUDA(cudaGetDevice(&dev));
  const nlohmann::json st = gpu_state(dev);
  return st.contains("sm_clock_max_mhz") && st["sm_clock_max_mhz"].is_number()
             ? st["sm_clock_max_mhz"].get<double>()
             : 0.0;
}

Timing time_samples(const std::function<void(cudaStream_t)>& fn, cudaStream_t s, L2Flush* l2,
                    const StopRule& rule, int warmup, const StopAgreement& agree,
                    const SampleAlign& align) {
  for (int i = 0; i < warmup; ++i) fn(s);
  REPLAY_CUDA(cudaStreamSynchronize(s));
  constexpr size_t kBatch = 10;
  Timing t;
  const bool check = rule.min_clock_ratio > 0;
  static const double kMaxMhz = max_sm_clock_mhz();
  double fastest = kMaxMhz;
  const auto t0 = std::chrono::steady_clock::now();
  size_t batch = kBatch;
  for (;;) {
    std::vector<double> host, mhz;
    const std::vector<double> us =
        sample_batch(fn, s, l2, batch, &host, check ? &mhz : nullptr, align);
    size_t kept = 0;
    for (size_t i = 0; i < us.size(); ++i) {
      if (check) {
        fastest = std::max(fastest, mhz[i]);
        t.clock_floor_mhz = rule.min_clock_ratio * fastest;
        if (mhz[i] < t.clock_floor_mhz) {
          ++t.discarded_slow_clock;
          continue;
        }
        t.sm_mhz.push_back(mhz[i]);
      }
      ++kept;
      t.samples_us.push_back(us[i]);
      t.host_us.push_back(host[i]);
    }
    // Throttled (power or heat): idle so the clock recovers, then sample only as many as this
    // batch kept (StopRule::throttle_recovery_s). Ranks that agree on when to stop keep the batch
    // length: each replay may hold a collective, so every rank must run as many of them between
    // two agreements.
    if (kept < us.size()) {
      if (!agree) batch = std::max<size_t>(1, kept);
      if (rule.throttle_recovery_s > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(rule.throttle_recovery_s));
    } else {
      batch = std::min(kBatch, 2 * batch);
    }
    t.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t.stop = stop_reason(t.samples_us, t.wall_s, rule);
    if (agree) t.stop = agree(t.stop);
    if (t.stop != StopReason::kNone) return t;
  }
}

CapturedGraph::CapturedGraph(const std::function<void(cudaStream_t)>& fn, cudaStream_t capture_on) {
  cudaStream_t cap = capture_on;
  cudaError_t err = cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal);
  std::string what;
  if (err == cudaSuccess) {
    try {
      fn(cap);
    } catch (const std::exception& e) {
      what = e.what();
    }
    cudaGraph_t g = nullptr;
    const cudaError_t end = cudaStreamEndCapture(cap, &g);
    graph_ = g;
    if (what.empty() && end != cudaSuccess)
      what = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
    if (what.empty()) {
      err = cudaGraphInstantiate(&exec_, graph_, 0);
      if (err != cudaSuccess)
        what = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(err);
    }
  } else {
    what = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(err);
  }
  cudaGetLastError();  // a failed capture leaves its error behind; it is reported below
  if (!what.empty()) {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    throw std::runtime_error("the replay cannot be captured into a CUDA graph: " + what);
  }
}

CapturedGraph::~CapturedGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void CapturedGraph::launch(cudaStream_t s) const {
  REPLAY_CUDA(cudaGraphLaunch(exec_, s));
}

double measure_copy_bandwidth_gbps(cudaStream_t s, size_t bytes) {
  DeviceBuffer a(bytes), b(bytes);
  REPLAY_CUDA(cudaMemsetAsync(a.get(), 1, bytes, s));
  constexpr int kSamples = 20;
  std::vector<double> us;
  EventPair e;
  for (int i = 0; i < 3; ++i)
    REPLAY_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
  for (int i = 0; i < kSamples; ++i) {
    REPLAY_CUDA(cudaEventRecord(e.start, s));
    REPLAY_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
    REPLAY_CUDA(cudaEventRecord(e.stop, s));
    REPLAY_CUDA(cudaEventSynchronize(e.stop));
    us.push_back(e.elapsed_us());
  }
  double med = summarize(us).median;
  return 2.0 * static_cast<double>(bytes) / (med * 1e3);  // bytes/µs -> GB/s is /1e3
}

}  // namespace replay
