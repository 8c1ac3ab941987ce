// The Perfetto / Chrome trace writer: tracks, slices and their nesting on hand-built timelines.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "harness/report/perfetto.hpp"

using namespace replay;

namespace {

KernelEvent kernel(const std::string& name, double start, double dur, uint32_t stream) {
  KernelEvent k;
  k.name = name;
  k.start_us = start;
  k.dur_us = dur;
  k.stream = stream;
  k.grid[0] = 132;
  k.grid[1] = k.grid[2] = 1;
  k.block[0] = 256;
  k.block[1] = k.block[2] = 1;
  k.registers = 40;
  k.dynamic_smem = 49152;
  return k;
}

VariantResult variant(const std::string& name, std::vector<KernelEvent> timeline) {
  VariantResult v;
  v.variant.kind = VariantInfo::kFusion;
  v.variant.name = name;
  v.samples_us = {10, 11, 12};
  v.stats = summarize(v.samples_us);
  if (!timeline.empty()) {
    CuptiSummary c;
    c.timeline = std::move(timeline);
    c.span_us = 5;
    v.cupti = c;
  }
  return v;
}

RunResult sample_run() {
  RunResult run;
  run.environment = {{"device", "NVIDIA H100"}, {"git_revision", "abc"}};
  TraceResult t;
  t.name = "layernorm<bf16> & co";
  RegionResult whole;
  whole.label = "trace";
  whole.variants.push_back(
      variant("eager", {kernel("void k<float>(int)", 0, 2, 7), kernel("reduce", 2.5, 1.5, 7),
                        kernel("side", 1, 3, 9)}));
  whole.variants.push_back(variant("baseline", {kernel("a", 0, 4, 7)}));
  whole.variants.push_back(variant("optimized", {}));  // no CUPTI: adds nothing
  t.regions.push_back(whole);
  RegionResult r0;
  r0.label = "region 0: layernorm_fwd";
  r0.fusion = "layernorm_fwd";
  r0.variants.push_back(variant("baseline", {kernel("a", 0, 3, 7)}));
  t.regions.push_back(r0);
  run.traces.push_back(t);
  TraceResult t2;
  t2.name = "second";
  RegionResult w2;
  w2.label = "trace";
  w2.variants.push_back(variant("eager", {kernel("b", 0, 1, 7)}));
  t2.regions.push_back(w2);
  run.traces.push_back(t2);
  return run;
}

}  // namespace

TEST(Perfetto, EveryKernelIsASliceInsideItsRegionSlice) {
  const nlohmann::json doc = perfetto_trace(sample_run());
  ASSERT_TRUE(doc.contains("traceEvents"));
  EXPECT_EQ(doc["displayTimeUnit"], "ns");
  // Parses back from its text: what ui.perfetto.dev reads.
  const nlohmann::json events = nlohmann::json::parse(doc.dump())["traceEvents"];
  std::map<std::pair<int, int>, std::string> track_names;
  std::map<int, std::string> process_names;
  std::vector<nlohmann::json> regions, kernels;
  for (const auto& e : events) {
    if (e["ph"] == "M" && e["name"] == "thread_name")
      track_names[{e["pid"], e["tid"]}] = e["args"]["name"];
    else if (e["ph"] == "M" && e["name"] == "process_name")
      process_names[e["pid"]] = e["args"]["name"];
    else if (e["ph"] == "X")
      (e["cat"] == "region" ? regions : kernels).push_back(e);
  }
  EXPECT_EQ(process_names.at(1), "layernorm<bf16> & co");
  EXPECT_EQ(process_names.at(2), "second");
  EXPECT_EQ(kernels.size(), 6u);  // trace 1: eager 3 + baseline 1 + region 0 baseline 1; trace 2: 1
  EXPECT_EQ(regions.size(), 4u);  // the optimized variant had no timeline
  // Every event sits on a named track; kernels on "<variant> · stream N" tracks.
  for (const auto& k : kernels) {
    const std::string track = track_names.at({k["pid"], k["tid"]});
    EXPECT_NE(track.find(" · stream "), std::string::npos) << track;
    EXPECT_EQ(k["args"]["grid"][0], 132);
    EXPECT_EQ(k["args"]["dynamic_smem_bytes"], 49152);
  }
  // Each kernel lies inside exactly one region slice of its process and variant.
  for (const auto& k : kernels) {
    const std::string track = track_names.at({k["pid"], k["tid"]});
    const std::string var = track.substr(0, track.find(" · stream "));
    int inside = 0;
    for (const auto& r : regions) {
      if (r["pid"] != k["pid"] || track_names.at({r["pid"], r["tid"]}) != var) continue;
      const double rs = r["ts"], re = rs + r["dur"].get<double>();
      const double ks = k["ts"], ke = ks + k["dur"].get<double>();
      if (ks >= rs && ke <= re) ++inside;
    }
    EXPECT_EQ(inside, 1) << k.dump();
  }
  // Region slices of one process never overlap (each replay gets its own stretch of time).
  for (size_t i = 0; i < regions.size(); ++i)
    for (size_t j = i + 1; j < regions.size(); ++j) {
      if (regions[i]["pid"] != regions[j]["pid"]) continue;
      const double a0 = regions[i]["ts"], a1 = a0 + regions[i]["dur"].get<double>();
      const double b0 = regions[j]["ts"], b1 = b0 + regions[j]["dur"].get<double>();
      EXPECT_TRUE(a1 <= b0 || b1 <= a0) << regions[i].dump() << " / " << regions[j].dump();
    }
  // The eager region's slice spans its kernels: 0 .. max(end) = 4 µs (the side stream's 1 + 3).
  EXPECT_DOUBLE_EQ(regions[0]["dur"].get<double>(), 4.0);
  EXPECT_EQ(regions[0]["args"]["launches"], 3);
  EXPECT_DOUBLE_EQ(regions[0]["args"]["median_us"].get<double>(), 11.0);
}

TEST(Perfetto, StreamsGetTheirOwnTracks) {
  const nlohmann::json doc = perfetto_trace(sample_run());
  std::set<std::string> names;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == 1)
      names.insert(e["args"]["name"].get<std::string>());
  EXPECT_EQ(names, (std::set<std::string>{"eager", "eager · stream 7", "eager · stream 9",
                                          "baseline", "baseline · stream 7"}));
}

TEST(Perfetto, RunWithoutTimelinesHasOnlyProcessNames) {
  RunResult run;
  TraceResult t;
  t.name = "cpu only";
  RegionResult whole;
  whole.label = "trace";
  VariantResult v;
  v.variant.name = "eager";
  v.skipped = "no CUDA device";
  whole.variants.push_back(v);
  t.regions.push_back(whole);
  run.traces.push_back(t);
  const nlohmann::json doc = perfetto_trace(run);
  for (const auto& e : doc["traceEvents"]) EXPECT_EQ(e["ph"], "M");
  EXPECT_EQ(doc["traceEvents"].size(), 2u);
}
