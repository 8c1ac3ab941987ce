// The op conformance corpus (tests/data/opcorpus, written by traces/capture/opcorpus.py on a GPU
// host with PyTorch): per op, cases over dtypes, shapes and strides, each a one-node trace whose
// golden sidecar holds PyTorch's inputs and outputs. The unit tests check the reference executor
// against every case, the GPU tests the eager executor (the harness's test-backend-ops).
#pragma once

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/unit/test_util.hpp"
#include "workloads/ir/tolerance.hpp"
#include "workloads/loader/trace_loader.hpp"

namespace replay::test {

inline std::string opcorpus_dir() {
  return std::string(REPLAY_TRACES_DIR) + "/../tests/data/opcorpus";
}

/// The corpus files (one per op), sorted; empty when the corpus has not been generated.
inline std::vector<std::string> opcorpus_files() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(opcorpus_dir(), ec))
    if (e.path().extension() == ".json" && e.path().filename() != "INDEX.json")
      out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

struct CorpusCase {
  std::string op, id, note;
  Graph g;
  std::string label() const { return op + " case " + id + " (" + note + ")"; }
};

/// Every case of one corpus file, loaded (a case that fails to load throws TraceError).
inline std::vector<CorpusCase> load_opcorpus(const std::string& file) {
  const nlohmann::json doc = read_json(file);
  std::vector<CorpusCase> out;
  for (const auto& c : doc.at("cases")) {
    CorpusCase cc;
    cc.op = doc.at("op").get<std::string>();
    cc.id = c.at("id").get<std::string>();
    cc.note = c.value("note", "");
    cc.g = parse_trace(c.at("trace"), file + "#" + cc.id);
    out.push_back(std::move(cc));
  }
  return out;
}

/// The bounds for comparing with PyTorch's output of a corpus case: the replay's own, except
/// where PyTorch is known to round once more than the reference. cuBLAS(Lt) on Hopper rounds
/// alpha * (a @ b) to a 16-bit output dtype before adding beta * C when beta == 1 (measured on an
/// H100 with cuBLAS 13.1: rel_l2 ~3e-3 for bfloat16, with beta 0.5 or 2 exact): PyTorch's
/// addmm/baddbmm then carry one extra rounding of the output, an error of up to one unit roundoff.
inline NumericsBounds pytorch_bounds(const CorpusCase& c, int v, NumericsBounds b) {
  const DType t = c.g.meta(v).dtype;
  const bool sixteen = t == DType::kBFloat16 || t == DType::kFloat16;
  if (sixteen && (c.op == "aten.addmm.default" || c.op == "aten.baddbmm.default")) {
    b.max_rel_l2 = std::max(b.max_rel_l2, unit_roundoff(t));
    b.max_row_rel_l2 = std::max(b.max_row_rel_l2, 2 * unit_roundoff(t));
    b.max_beyond_1ulp = 1;
    b.why += "; PyTorch's 16-bit addmm/baddbmm rounds twice (cuBLAS, beta == 1)";
  }
  // ATen's CUDA cumsum scans a 16-bit tensor in its own dtype (scan_dim with scalar_t's plus):
  // every partial sum is rounded, so an element carries up to `len` roundings of the running sum
  // (measured on an H200: rel_l2 2.2e-3 for bfloat16 rows of 9), where the reference rounds once.
  if (sixteen && c.op == "aten.cumsum.default") {
    const Node& n = c.g.nodes.at(0);
    const auto& s = c.g.meta(n.operands.at(0).value).shape;
    const double len = s.empty() ? 1.0 : static_cast<double>(s.at(n.dim));
    const double u = unit_roundoff(t);
    b.max_rel_l2 = std::max(b.max_rel_l2, 2 * std::sqrt(len) * u);
    b.max_row_rel_l2 = std::max(b.max_row_rel_l2, 4 * std::sqrt(len) * u);
    b.elem_ulps = std::max(b.elem_ulps, 2 * len);
    b.max_beyond_1ulp = 1;
    b.why += "; PyTorch's 16-bit cumsum rounds every partial sum";
  }
  return b;
}

/// The first mismatching element of a failed check: "first mismatch at [i, j]: got x, PyTorch y".
inline std::string first_mismatch(const std::vector<int64_t>& at, double got, double want) {
  if (at.empty()) return "";
  return "; first mismatch at " + shape_str(at) + ": got " + std::to_string(got) + ", PyTorch " +
         std::to_string(want);
}

/// "name" of a corpus file path, for test names.
inline std::string opcorpus_name(const std::string& file) {
  return test_name(std::filesystem::path(file).stem().string());
}

}  // namespace replay::test
