// PyTorch peers in the results schema (traces/capture/peer_results.py): its statistics are the
// harness's own (harness/measure/stats.cpp), so a peer's median and CI mean what ours mean. The
// ctest `peer_results_schema` converts tests/data/peers/peers.json with the Python tool, feeds the
// output to `replay compare` and runs this test on it (PEER_RESULTS); run alone, the test
// converts the fixture itself.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "harness/measure/stats.hpp"
#include "harness/report/results.hpp"

using namespace replay;

TEST(PeerResults, StatisticsAreTheHarnessOwn) {
  std::string path = std::getenv("PEER_RESULTS") ? std::getenv("PEER_RESULTS") : "";
  if (path.empty()) {  // run alone: convert the fixture here
    if (std::system("command -v python3 > /dev/null 2>&1") != 0)
      GTEST_SKIP() << "skipped: python3 not installed";
    path = (std::filesystem::temp_directory_path() / "replay_peer_results.json").string();
    const std::string root = std::string(REPLAY_TRACES_DIR) + "/..";
    const std::string cmd = "python3 " + root + "/traces/capture/peer_results.py " + root +
                            "/tests/data/peers/peers.json --out " + path;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  std::ifstream f(path);
  ASSERT_TRUE(f) << path;
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["schema"], kResultsSchema);
  int checked = 0, errors = 0;
  for (const auto& t : j["traces"]) {
    if (t.contains("error")) ++errors;
    for (const auto& r : t["regions"])
      for (const auto& v : r["variants"]) {
        EXPECT_EQ(v["kind"], "peer");
        if (!v.contains("samples_us")) {
          EXPECT_TRUE(v.contains("skipped")) << v.dump();
          continue;
        }
        const nlohmann::json want = to_json(summarize(v["samples_us"].get<std::vector<double>>()));
        for (const auto& [key, val] : want.items()) {
          const double a = v["stats"][key].get<double>(), b = val.get<double>();
          EXPECT_NEAR(a, b, 1e-12 * std::max(1.0, std::abs(b))) << t["name"] << " " << key;
        }
        ++checked;
      }
  }
  EXPECT_EQ(checked, 3);  // the fixture: two timed peers of one trace, one of another
  EXPECT_EQ(errors, 1);   // and a trace whose peer run failed
}
