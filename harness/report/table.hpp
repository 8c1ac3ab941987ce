// Markdown tables from a column list declared once: the header and every row come from the same
// columns, so a row cannot have more or fewer cells than its header.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace replay {

template <typename Row>
struct Column {
  std::string header;
  bool right_aligned = false;
  std::function<std::string(const Row&)> cell;
};

/// A cell's text made safe for a Markdown table: '|' escaped, newlines flattened.
inline std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

template <typename Row>
std::string markdown_table(const std::vector<Column<Row>>& cols, const std::vector<Row>& rows) {
  std::string head = "|", rule = "|";
  auto add_cell = [](std::string& line, const std::string& text) {
    line += ' ';
    line += md_cell(text);
    line += " |";
  };
  for (const auto& c : cols) {
    add_cell(head, c.header);
    rule += c.right_aligned ? "---:|" : "---|";
  }
  std::string md = head + "\n" + rule + "\n";
  for (const Row& r : rows) {
    md += '|';
    for (const auto& c : cols) add_cell(md, c.cell(r));
    md += '\n';
  }
  return md;
}

}  // namespace replay
