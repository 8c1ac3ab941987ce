// Which cuBLASLt algorithm a fusion's matmul runs, and what choosing it measured (issue 26: "the
// heuristic's candidates timed once per problem and the winner cached, the choice and its time
// recorded in results.json"). gemm.cu fills one GemmChoice per prepared fusion matmul
// (prepare_matmul with `tune`, prepare_scaled_matmul); recording is off unless a GemmChoiceLog is
// alive on the preparing thread (the GPU program keeps one per fused region while it binds).
// Plain host data: no CUDA header, so the report layers can hold it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace replay {

/// One prepared cuBLASLt matmul's algorithm and the timings behind the choice.
struct GemmChoice {
  std::string name;  ///< the call's name (the GEMM node's id)
  std::string
      problem;  ///< e.g. "bfloat16 [8192, 4096] @ [4096, 14336] (b column-major) -> bfloat16, bias"
  std::string
      algo;  ///< the algorithm kept: "id 66 tile 20 stages 8 splitK 1 reduction 0 swizzle 0"
  bool tuned = false;  ///< the candidates were timed (else: the heuristic's first, untimed)
  int candidates = 0;  ///< deterministic heuristic candidates considered
  /// µs per launch of each candidate in the heuristic's order, warm L2, mean of the timed
  /// launches; -1 for a candidate cuBLASLt refused at launch. Empty when not tuned.
  std::vector<double> candidate_us;
  int chosen = 0;  ///< index of the kept candidate in that order
  /// What candidate 0 is, in describe(): the heuristic's first, or another form a fusion timed
  /// (matmul_epilogue's bias gradient: "the epilogue in the GEMM").
  std::string first_name = "heuristic's first";
  uint64_t workspace_bytes = 0;  ///< the workspace the kept algorithm asks for (what it is given)
  /// µs of the kept candidate, and of the heuristic's first (0 when not timed).
  double chosen_us() const;
  double first_us() const;
};

/// While alive, prepared matmuls on this thread append their choice to it (nesting: the innermost
/// log records). Not copyable.
class GemmChoiceLog {
 public:
  GemmChoiceLog();
  ~GemmChoiceLog();
  GemmChoiceLog(const GemmChoiceLog&) = delete;
  GemmChoiceLog& operator=(const GemmChoiceLog&) = delete;
  /// The choices recorded so far, in preparation order; the log is emptied.
  std::vector<GemmChoice> take();

 private:
  std::vector<GemmChoice> entries_;
  GemmChoiceLog* prev_ = nullptr;
  friend void record_gemm_choice(GemmChoice c);
};

/// Appends `c` to this thread's live GemmChoiceLog; nothing when none is.
void record_gemm_choice(GemmChoice c);

/// One line for the reports: "'mm': id 66 tile 20 ... 1312.4 µs, heuristic's first 1350.2 µs
/// (8 candidates timed)", or "... (heuristic's first, not timed)".
std::string describe(const GemmChoice& c);

}  // namespace replay
