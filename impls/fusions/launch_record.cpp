// Launch widths as the launchers chose them (launch_record.hpp).
#include "impls/fusions/launch_record.hpp"

#include <algorithm>

namespace replay {
namespace {
thread_local LaunchWidthLog* t_log = nullptr;
}

LaunchWidthLog::LaunchWidthLog() : prev_(t_log) {
  t_log = this;
}

LaunchWidthLog::~LaunchWidthLog() {
  t_log = prev_;
}

std::vector<LaunchWidth> LaunchWidthLog::take() {
  std::vector<LaunchWidth> out;
  out.swap(entries_);
  return out;
}

void record_launch_width(const char* kernel, const std::string& operand, int bytes) {
  if (t_log) t_log->entries_.push_back({kernel, operand, bytes});
}

bool launch_widths_recording() {
  return t_log != nullptr;
}

std::string width_range(const std::vector<LaunchWidth>& w) {
  if (w.empty()) return "";
  int lo = w[0].bytes, hi = w[0].bytes;
  for (const LaunchWidth& e : w) {
    lo = std::min(lo, e.bytes);
    hi = std::max(hi, e.bytes);
  }
  return lo == hi ? std::to_string(lo) + " B"
                  : std::to_string(lo) + "-" + std::to_string(hi) + " B";
}

}  // namespace replay
