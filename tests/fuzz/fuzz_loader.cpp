// libFuzzer target over the trace loader (REPLAY_FUZZ=ON, scripts/fuzz.sh). The bytes are a trace
// file's text. A TraceError is the loader's answer to bad input and is swallowed; any other
// exception escapes to libFuzzer, which reports it as a crash: the loader let something through
// that it should have rejected or named. A small trace that loads is also planned and run on the
// float64 reference, where loader gaps showed up before (a reduction over a 0-size dim, a 0-d
// tensor reduced over dim 0).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "impls/fusions/registry.hpp"
#include "impls/reference/reference.hpp"
#include "workloads/ir/error.hpp"
#include "workloads/loader/inputs.hpp"
#include "workloads/loader/trace_loader.hpp"
#include "workloads/plan/plan.hpp"

namespace {

// A directory that does not exist: a trace-relative golden path resolves into it, so even a
// golden field that slipped past has_golden_key() names no real file.
const std::string kFile = "/nonexistent/replay-fuzz/input.json";

// Above this many elements (reference_elems) planning and the reference are skipped: they would
// cost seconds per input (and memory), and big shapes reach no code that small ones do not.
constexpr long double kMaxReferenceElems = 1e5;

// SAX handler that accepts everything and stops at an object key named "golden" (the nlohmann SAX
// parser is iterative, so deep nesting cannot overflow the stack here).
struct GoldenKeyFinder : nlohmann::json_sax<nlohmann::json> {
  bool found = false;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t& k) override {
    found = found || k == "golden";
    return !found;
  }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
};

// Whether the text has an object key "golden" anywhere: such a trace names a sidecar file, and
// the fuzzer must not read files (make_inputs would read it; a future loader may stat or open it).
// The key may be spelled with \u escapes, hence a real parse when the plain bytes do not decide.
bool has_golden_key(std::string_view text) {
  if (text.find("golden") == std::string_view::npos && text.find("\\u") == std::string_view::npos)
    return false;
  GoldenKeyFinder finder;
  nlohmann::json::sax_parse(text.begin(), text.end(), &finder);
  return finder.found;
}

// Elements the reference allocates: every value's elements, and for a graph input the storage its
// strided layout spans (generate_inputs fills one value per storage element). In long double, so
// that a huge shape cannot overflow here (the loader must reject those; its int64 arithmetic is
// what is under test). |d| and |s| keep a negative size or stride that got past the loader in the
// small class, so the reference trips over it.
long double reference_elems(const replay::Graph& g) {
  long double total = 0;
  for (const auto& v : g.values) {
    long double n = 1, span = 1;
    for (size_t i = 0; i < v.meta.shape.size(); ++i) {
      const long double d = std::fabs(static_cast<long double>(v.meta.shape[i]));
      n *= d;
      if (v.graph_input && i < v.meta.stride.size() && d > 0)
        span += (d - 1) * std::fabs(static_cast<long double>(v.meta.stride[i]));
    }
    total += v.graph_input && n > 0 ? std::max(n, span) : n;
  }
  return total;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (has_golden_key(text)) return -1;  // -1: libFuzzer does not add it to the corpus
  try {
    // As `replay run` loads it: unknown ops are cut out (workloads/loader/trace_loader.hpp).
    const replay::Graph g = replay::parse_trace_text(text, kFile, replay::cut_options());
    if (g.golden || reference_elems(g) >= kMaxReferenceElems) return 0;
    const replay::Plan plan = replay::make_plan(g, replay::fusion_registry());
    (void)replay::plan_to_json(g, plan);  // each region's cost and params, as `replay plan` prints
    (void)replay::run_reference(g, replay::generate_inputs(g, 0));
  } catch (const replay::TraceError&) {
    // Bad input, rejected with a message: the expected outcome.
  }
  return 0;
}
