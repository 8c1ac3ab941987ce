#include "workloads/ops/core_aten.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

namespace replay {

CoreAtenCoverage core_aten_coverage(std::string_view text, std::span<const OpDef* const> ops) {
  std::set<std::string_view> rows;
  for (const OpDef* d : ops) rows.insert(d->name);
  CoreAtenCoverage c;
  std::set<std::string> seen;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (c.source.empty()) c.source = line.substr(line.find_first_not_of("# "));
      continue;
    }
    if (std::count(line.begin(), line.end(), '.') != 2 || line.front() == '.' ||
        line.back() == '.' || line.find("..") != std::string::npos ||
        line.find(' ') != std::string::npos)
      throw std::invalid_argument("Core ATen list: '" + line +
                                  "' is not an overload name (namespace.op.overload)");
    if (!seen.insert(line).second)
      throw std::invalid_argument("Core ATen list: '" + line + "' is listed twice");
    ++c.total;
    if (rows.count(line))
      ++c.covered;
    else
      c.missing.push_back(line);
  }
  return c;
}

CoreAtenCoverage core_aten_coverage() {
  static constexpr std::string_view kList =
#include "core_aten_list.inc"
      ;
  return core_aten_coverage(kList, all_ops());
}

}  // namespace replay
