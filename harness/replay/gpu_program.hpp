// GPU replay engine: binds a graph, its plan and one trace-level variant (variants.hpp) to device
// buffers as a list of steps (one per eager op, one per fused region), runs all steps or one
// region's, and downloads values.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "impls/cuda/cuda_check.hpp"
#include "impls/cuda/dist_context.hpp"
#include "impls/cuda/launch_context.hpp"
#include "impls/eager/gemm_choice.hpp"
#include "workloads/ir/host_tensor.hpp"
#include "workloads/plan/plan.hpp"

namespace replay {

class GpuProgram {
 public:
  /// Allocates buffers, uploads `inputs` (graph-input value index -> data) in their recorded
  /// layouts on `stream` and waits for the uploads, and builds the steps for `variant`: "eager"
  /// runs every op as its own launch; a fusion variant name runs each region through its fusion's
  /// variant of that name, or eagerly when the fusion lacks it or the variant cannot run the region
  /// (fallback_reason says why); a fusion variant also passes the operand's buffer on as the output
  /// of each node of plan.elided_clones instead of copying it (when the layouts agree), and
  /// places each cat of plan.placed_cats: its output allocated before its operands' regions run,
  /// each operand's region writing into its slice, no copy (placed_cats() lists those). `dist`:
  /// this rank's multi-process context (one process per rank, harness/dist/rank_session.hpp), given
  /// to binders (BindContext::dist) and used by the eager collectives (NCCL on dist->comm,
  /// impls/eager/collective.hpp); it must outlive the program. Null: a single process, where a
  /// collective passes its operand on (a group of one) and one over more ranks is refused. Throws
  /// RuntimeFailure on CUDA errors, std::invalid_argument for a graph the GPU executors cannot run
  /// (an eager collective without a communicator included: its message names the node and
  /// dist->no_nccl_why).
  GpuProgram(const Graph& g, const Plan& plan, std::string variant,
             const std::map<int, HostTensor>& inputs, cudaStream_t stream,
             const DistContext* dist = nullptr);
  ~GpuProgram();
  GpuProgram(const GpuProgram&) = delete;
  GpuProgram& operator=(const GpuProgram&) = delete;

  const std::string& variant() const { return variant_; }
  /// Enqueue every step, in order.
  void run_all(const LaunchContext& ctx) const;
  /// Enqueue the steps that compute region `r` (its fused step, or its nodes' eager steps).
  void run_region(int r, const LaunchContext& ctx) const;
  /// Fill every buffer the steps write with NaN (0xFF bytes).
  void poison_outputs(cudaStream_t s) const;
  /// Copy a value back as logical float64 values: the copy is ordered on `stream` after the work
  /// enqueued there, and waited for.
  HostTensor download(int value, cudaStream_t stream) const;
  /// Why region r runs eagerly inside this variant (empty if it runs fused or variant is eager).
  std::string fallback_reason(int r) const;
  /// The cuBLASLt algorithms region r's fused step chose while it was bound, with the timings
  /// behind each choice (impls/eager/gemm_choice.hpp); empty for a region without tuned GEMMs.
  const std::vector<GemmChoice>& gemm_choices(int r) const;
  /// Number of steps (launch sites) of the whole program.
  size_t num_steps() const { return steps_.size(); }
  /// Enqueue step `i` alone (for timing one step's host enqueue; its inputs are whatever the
  /// buffers hold).
  void run_step(size_t i, const LaunchContext& ctx) const { steps_.at(i).launch(ctx); }
  /// Step `i`'s label: the node id of an eager step ("<id> (copy)" for a view that had to copy,
  /// "<id> (copy <k>)" for its output k when it has several),
  /// "region <r>: <fusion>" for a fused one.
  const std::string& step_label(size_t i) const { return steps_.at(i).label; }
  /// The region step `i` belongs to (-1: none).
  int step_region(size_t i) const { return steps_.at(i).region; }
  /// The nodes of Plan::placed_cats this program runs as a placement (no step): every operand's
  /// region ran fused into its slice. A cat whose operand fell back to eager is copied instead.
  const std::vector<int>& placed_cats() const { return placed_done_; }

 private:
  struct Slot {  // where a value lives
    std::shared_ptr<DeviceBuffer> storage;
    int64_t offset = 0;  // elements
    TensorMeta layout;
    void* ptr() const;
  };
  struct Step {
    int region = -1;  // region index for fused steps, else the node's region (or -1)
    std::function<void(const LaunchContext&)> launch;
    std::vector<int> writes;  // value indices written
    std::string label;        // step_label
  };
  class Binder;

  Slot& alloc(int value, const TensorMeta& m);
  const Slot& slot(int value, const std::string& node) const;
  void add_eager_step(int node);
  void add_view(int node);
  bool add_fused_step(int region);
  /// A node of Plan::elided_clones whose operand's buffer has the output's recorded dense layout:
  /// its output becomes an alias of that buffer (true), no step. Else false (it runs eagerly).
  bool alias_clone(int node);
  /// Before region `r`'s view node `view` is made: an absorbed identity (a clone the canonical
  /// form removed) between what the fused step wrote (or an earlier view of the region) and the
  /// view gets the slot of its operand, when the layouts agree (nanoGPT's dropout backward:
  /// view(clone(mul)) summed by the chain's column sum). Else nothing: add_view then says which
  /// operand is missing.
  void alias_absorbed_source(const Region& r, int view);
  /// Plan::placed_cats: each cat's output buffer, and each operand's slice of it (placement_).
  void place_cats();
  /// A node of Plan::placed_cats whose operands all live in their slices (their regions ran
  /// fused): its output is the placed buffer (true), no step. Else false (it copies eagerly).
  bool placed_cat(int node);

  const Graph& g_;
  const Plan& plan_;
  std::string variant_;
  std::map<int, Slot> slots_;
  std::map<int, Slot> placement_;  // Plan::placed_cats: a cat's output, and each operand's slice
  std::vector<int> placed_done_;
  std::vector<Step> steps_;
  std::map<int, std::string> fallback_;
  std::map<int, std::vector<GemmChoice>> gemm_choices_;
  std::vector<std::shared_ptr<DeviceBuffer>> workspaces_;
  const DistContext* dist_ = nullptr;
};

}  // namespace replay
