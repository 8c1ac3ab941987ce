// What each fused kernel launch chose at run time, as the launcher decided it: the bytes per
// access of each operand (16: one 128-bit load or store). The report shows these instead of the
// widths a kernel was written for, so a fallback to narrower accesses is visible (issue 28: the
// expanded weight that made nvFuser's kernels fall back). Recording is off unless a
// LaunchWidthLog is alive on the launching thread; then each launcher appends one entry per
// operand. Host only; costs one thread-local load per call when off.
#pragma once

#include <string>
#include <vector>

namespace replay {

struct LaunchWidth {
  std::string kernel;   ///< the launcher's name for the kernel, e.g. "rope_kernel<8>"
  std::string operand;  ///< e.g. "x[0]" (job 0's x), "w", "src"
  int bytes = 0;        ///< bytes per access the launch uses for this operand
};

/// While alive, launches on this thread append to it (nesting: the innermost log records).
class LaunchWidthLog {
 public:
  LaunchWidthLog();
  ~LaunchWidthLog();
  LaunchWidthLog(const LaunchWidthLog&) = delete;
  LaunchWidthLog& operator=(const LaunchWidthLog&) = delete;
  /// The entries recorded so far, in launch order; the log is emptied.
  std::vector<LaunchWidth> take();

 private:
  std::vector<LaunchWidth> entries_;
  LaunchWidthLog* prev_ = nullptr;
  friend void record_launch_width(const char*, const std::string&, int);
};

/// Appends {kernel, operand, bytes} to this thread's live LaunchWidthLog; nothing when none is.
void record_launch_width(const char* kernel, const std::string& operand, int bytes);

/// Whether a LaunchWidthLog is alive on this thread (launchers skip building names otherwise).
bool launch_widths_recording();

/// "16 B" when every entry has the same width, else "2-16 B"; "" for no entries.
std::string width_range(const std::vector<LaunchWidth>& w);

}  // namespace replay
