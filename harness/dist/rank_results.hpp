// The pure logic of a multi-process replay (harness/dist/README.md): which ranks share a GPU (from
// the devices the ranks all-gathered), how the ranks' results of one trace merge into the one
// results.json rank 0 writes, and the messages a hung collective ends with. No CUDA, no NCCL:
// unit-tested on the CPU.
#pragma once

#include <string>
#include <vector>

#include "harness/measure/stats.hpp"
#include "harness/report/results.hpp"

namespace replay::dist {

/// The device a rank uses, as it tells the others at the rendezvous.
struct RankDevice {
  int rank = 0;
  std::string host;  ///< gethostname()
  std::string uuid;  ///< cudaDeviceProp::uuid as "GPU-xxxxxxxx-xxxx-...", unique per physical GPU
  int device = 0;    ///< the CUDA ordinal in that process (local_rank % device count)
};

/// RankDevice as the all-gathered blob (JSON), and back. parse_rank_device throws
/// std::invalid_argument naming the rank on a malformed blob.
std::string rank_device_blob(const RankDevice& d);
RankDevice parse_rank_device(const std::string& blob, int rank);

/// "" when every rank has a GPU of its own; else why NCCL cannot run here, naming the first pair
/// of ranks on one device: "NCCL cannot place two ranks on one GPU (ranks 0 and 1 share device
/// GPU-8f2e... on host h200-1)". A UUID is unique per physical GPU, so two hosts never collide;
/// the host is named for the reader.
std::string shared_device_why(const std::vector<RankDevice>& ranks);

/// The line every timing of a run whose ranks share a GPU carries (VariantResult::timing_note).
inline constexpr const char* kSharedDeviceTimingNote =
    "ranks share one GPU: timings mean nothing (correctness only)";

/// One rank's result of one trace as the blob it all-gathers (a results.json of one trace), and
/// back (results_from_json). parse_trace_blob throws std::runtime_error naming the rank when the
/// blob is not such a file.
std::string trace_blob(const TraceResult& t);
TraceResult parse_trace_blob(const std::string& blob, int rank);

/// Merges the results of one trace from every rank (ranks[r] from rank r; all replayed the same
/// trace with the same variants, so their rows and variants line up) into the result rank 0
/// writes:
///  - numerics: every rank's checks, each output named "rank r: <value>" (world size > 1), so the
///    verdict passes only if every rank passes;
///  - time: max over ranks of the median (the slowest rank's samples and statistics, cold, hot
///    and CUDA-graph each), noted in timing_note "max over N ranks of the median (slowest: rank
///    r)"; with `shared_device` the note is kSharedDeviceTimingNote instead;
///  - a variant skipped on any rank is skipped ("rank r: <why>" when rank 0 ran it);
///  - an error on any rank is the trace's error ("rank r: <error>"), the worse kind winning
///    (runtime over bad input).
/// Throws std::invalid_argument when `ranks` is empty. Ranks whose rows or variants differ in
/// number make the merged trace a runtime error saying so.
TraceResult merge_rank_results(const std::vector<TraceResult>& ranks, bool shared_device);

/// "rank 1: ncclAllGather of node 'ag' did not complete within 30 s (a peer rank hung or died;
/// the communicator was aborted)".
std::string collective_timeout_message(int rank, const std::string& what, double timeout_s);

/// The error of a trace of world_size `trace_ws` replayed by a run of `run_ws` ranks, or "" when
/// they agree. Without a launcher (`launched` false) a trace of world_size > 1 needs one: the
/// message says to start it with torchrun / mpirun / srun / `replay launch --nproc N`.
std::string world_size_mismatch(int trace_ws, int run_ws, bool launched);

/// The stop decision of a timing loop all ranks run in lockstep (every sample enqueues the same
/// collectives on every rank, so all must take the same number): given every rank's own reason
/// after a batch, stop when any rank hit a hard limit (kTimeout, kMaxSamples: that reason), or
/// when every rank's rule is met (kConverged, or the first rank's reason); else kNone (go on).
StopReason agreed_stop(const std::vector<StopReason>& ranks);

/// `blob` tagged with the step of the run it belongs to ("results of traces/a.json"), for an
/// all-gather at which every rank must be at the same step: the rendezvous pairs all-gathers in
/// order, so a rank that skipped one (it failed to load a trace the others loaded) would pair its
/// next with the others' current one. A newline in `step` becomes a space.
std::string step_blob(const std::string& step, const std::string& blob);

/// The blobs of an all-gather of step_blob()s, untagged, each checked to be at `step`. Throws
/// std::runtime_error naming the first rank at another step and both steps ("rank 1 is at step
/// 'results of b.json' while rank 0 is at 'whether to replay b.json': the ranks fell out of
/// step").
std::vector<std::string> step_blobs(const std::vector<std::string>& all, const std::string& step,
                                    int my_rank);

}  // namespace replay::dist
