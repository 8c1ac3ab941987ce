// The run pipeline for one trace: load, plan, inputs (golden or seeded), reference, then per GPU
// variant: poisoned run + numerics, cold timing, CUPTI kernel summary. Produces plain results.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/measure/stats.hpp"
#include "harness/report/results.hpp"
#include "impls/cuda/dist_context.hpp"
#include "impls/cuda/launch_context.hpp"

namespace replay {

struct RunOptions {
  /// Variant names to run; empty: every variant of the trace (plan_variants).
  std::vector<std::string> variants;
  uint64_t seed = 0;
  StopRule rule;
  bool cupti = true;
  /// Besides the cold timing (always): hot timing (back to back, L2 warm) and CUDA-graph timing
  /// (the replay captured into one graph, launched per cold sample), each with the same rule.
  bool hot = true;
  bool graph = true;
  /// `replay run --shard I/N`: this run takes share I (0-based) of N of the traces
  /// (shard_files, harness/report/results_io.hpp); 1 shard: all of them.
  size_t shard_index = 0, shard_count = 1;
  /// Where a reproducer bundle (harness/replay/repro.hpp) is written for every (row, variant)
  /// that fails its numerics: <repro_dir>/<trace>-r<region>-<variant>/ (up to 64 MiB of tensors;
  /// larger ones say why not); empty: none.
  std::string repro_dir;
  /// Test only: a spin kernel of this many µs added to every timed replay of the named variant,
  /// to prove that `replay compare` catches a slower variant. Recorded in results.json.
  std::map<std::string, double> test_slowdown_us;
  /// A trace whose float64 reference is estimated (ReferenceFootprint::seconds) to take longer
  /// than this on this machine is not replayed (the report says why, with the estimate); 0: no
  /// limit. Seconds.
  double reference_budget_s = 60;
  /// Measure the matmul ceilings (harness/replay/ceilings.hpp) at the start of the run, so GEMM
  /// work enters SOL (a few seconds); false: SOL has no matmul term.
  bool matmul_ceilings = true;
};

class L2Flush;

/// GPU state shared by all traces of a run: its device (0, or a rank's in a multi-process run), a
/// main and a side stream (non-blocking), the L2 flush buffer, the measured copy bandwidth.
/// Construct only when a CUDA device is present.
class GpuSession {
 public:
  explicit GpuSession(int device = 0);
  ~GpuSession();
  GpuSession(const GpuSession&) = delete;
  GpuSession& operator=(const GpuSession&) = delete;
  /// Streams and rank of this process (rank 0 of 1: multi-rank runs come with the collectives).
  const LaunchContext& launch_context() const { return ctx_; }
  L2Flush& l2() { return *l2_; }
  double bandwidth_gbps() const { return bandwidth_gbps_; }
  /// Device name, SMs, memory, L2, driver and runtime versions.
  nlohmann::json environment() const;
  /// Median µs of a cold device-to-device copy moving `bytes` (half read, half written), timed
  /// like the variants; cached per size.
  double copy_us(double bytes, const StopRule& rule);
  /// Empty while the CUDA context is usable; after a sticky error (e.g. an illegal address), the
  /// error, and every later GPU call of this process would fail.
  std::string broken() const;

 private:
  LaunchContext ctx_;
  int device_ = 0;
  std::unique_ptr<L2Flush> l2_;
  double bandwidth_gbps_ = 0;
  std::map<size_t, double> copy_cache_;
};

/// The rows of a trace's results: the whole trace (cost = graph inputs and outputs, or the
/// fusion's cost model when one region is the whole trace), then each region (cost = its
/// fusion's cost model) unless a single region is the whole trace.
std::vector<RegionResult> result_rows(const Graph& g, const Plan& plan);

/// Replay one trace file. Nothing escapes: bad input (TraceError) and runtime failures (CUDA,
/// CUPTI) are reported in TraceResult::error with their kind, so a suite goes on with its next
/// trace. A reference this machine cannot afford (over opt.reference_budget_s, more than 80 % of
/// the available host memory, or out of memory while it runs) is no error: TraceResult::
/// not_replayed says why, naming the file and node. `gpu` is null on a
/// machine without a usable CUDA device: GPU variants are then marked skipped with `no_gpu_why`.
///
/// `dist`: this process is rank dist->rank of a multi-process run (harness/dist/rank_session.hpp;
/// every rank calls run_trace on the same traces in the same order). The trace's world_size must
/// be the run's (else bad input); the reference simulates every rank and this rank replays its own
/// inputs (rank_seed) and checks its own outputs; eager collectives run through NCCL
/// (dist->comm), and without a communicator (ranks sharing a GPU) the variants that need one are
/// skipped with dist->no_nccl_why while the others run; every timing starts behind a barrier and
/// the ranks agree on its number of samples (CUDA-graph timing is not run). Null: a single
/// process; a trace of world_size > 1 then runs the reference only, and with a GPU it is bad
/// input saying to start one process per rank (torchrun / mpirun / srun / `replay launch`).
TraceResult run_trace(const std::string& path, const RunOptions& opt, GpuSession* gpu,
                      const std::string& no_gpu_why = "no CUDA device (GPU replay needs one)",
                      const DistContext* dist = nullptr);

/// What the float64 reference of `g` costs. Host bytes at its peak, estimated high: every value
/// as doubles, each input's generated storage and the executor's copy of it, and twice the largest
/// value for an op's temporaries; the value that needs the most. Its work: the matmuls' FLOPs
/// (Eigen's threaded GEMM) and the elements every other op writes (one thread, strided loops).
struct ReferenceFootprint {
  double bytes = 0;
  int largest_value = -1;
  double gemm_flops = 0;  ///< FLOP
  /// Elements written by every other op (views too: the reference materializes them) and by the
  /// input generator (a draw per storage element and the logical copy).
  double elements = 0;
  /// Estimated seconds on this machine at `gemm_gflops` (reference_gemm_gflops()) and
  /// reference_elements_per_second() for the rest.
  double seconds(double gemm_gflops) const;
};
/// The reference's rate on everything but its GEMMs, per hardware thread, elements written per
/// second (ReferenceFootprint::elements): its elementwise loops, reductions and views are split
/// over threads (workloads/ir/strided_loop.hpp), and page faults of fresh buffers and memory
/// bandwidth bound them. Measured 41-100 M/s per thread on two AMD EPYC cores (x86-64-v3 build)
/// over realistic traces: litgpt RoPE forward [2, 4096, 40·128] the slowest (cat and slices with
/// a short inner dim), Meta RoPE backward and nanoGPT LayerNorm backward the fastest; the slowest
/// is taken, so the estimate errs high.
inline constexpr double kReferenceElementsPerSecondPerThread = 40e6;
/// Threads the reference runs on: host_threads() (workloads/ir/strided_loop.hpp), which Eigen's
/// GEMM also uses (1 without OpenMP).
int reference_threads();
/// kReferenceElementsPerSecondPerThread x reference_threads().
double reference_elements_per_second();
ReferenceFootprint reference_footprint(const Graph& g);

/// Host memory available to this process in bytes: Linux MemAvailable, or less when a cgroup
/// (container) limit leaves less; 0 when unknown.
double available_host_bytes();

}  // namespace replay
