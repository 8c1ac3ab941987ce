// GEMM algorithm choices as gemm.cu made them (gemm_choice.hpp).
#include "impls/eager/gemm_choice.hpp"

#include <cstdio>

namespace replay {
namespace {
thread_local GemmChoiceLog* t_log = nullptr;

std::string us_str(double us) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f µs", us);
  return b;
}
}  // namespace

double GemmChoice::chosen_us() const {
  return chosen >= 0 && static_cast<size_t>(chosen) < candidate_us.size() ? candidate_us[chosen]
                                                                          : 0.0;
}

double GemmChoice::first_us() const {
  return candidate_us.empty() ? 0.0 : candidate_us[0];
}

GemmChoiceLog::GemmChoiceLog() : prev_(t_log) {
  t_log = this;
}

GemmChoiceLog::~GemmChoiceLog() {
  t_log = prev_;
}

std::vector<GemmChoice> GemmChoiceLog::take() {
  std::vector<GemmChoice> out;
  out.swap(entries_);
  return out;
}

void record_gemm_choice(GemmChoice c) {
  if (t_log) t_log->entries_.push_back(std::move(c));
}

std::string describe(const GemmChoice& c) {
  std::string s = "'" + c.name + "' " + c.problem + ": " + c.algo;
  if (!c.tuned || c.candidate_us.empty())
    return s + " (the heuristic's first of " + std::to_string(c.candidates) + ", not timed)";
  s += ", " + us_str(c.chosen_us());
  if (c.chosen != 0 && c.first_us() > 0)
    s += " (" + c.first_name + " " + us_str(c.first_us()) + ")";
  return s + " (" + std::to_string(c.candidate_us.size()) + " candidates timed)";
}

}  // namespace replay
