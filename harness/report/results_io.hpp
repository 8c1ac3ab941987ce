// Reading results.json back (the inverse of to_json in results.hpp), sharding a suite and merging
// the shards' results: what `replay run --shard`, `replay merge` and the peers need.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/report/results.hpp"

namespace replay {

/// A results.json that cannot be read: the message names the file, the JSON path of the field
/// (e.g. "/traces/3/regions/0/variants/2/stats/median_us") and what was expected there.
struct ResultsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The RunResult that `j` (a parsed results.json of schema replay-results/1 or /2, the current
/// one) describes; `file` is only named in errors. Every field to_json writes is read back;
/// derived ones (verdicts, sol_us, sol_pct, "pass") are recomputed from the rest; a non-finite
/// number that to_json wrote as null reads as +infinity (the numerics' error measures, the only
/// fields that can be non-finite, are magnitudes: an infinite error is what null stands for). A
/// variant's kind comes from its name
/// ("reference", "eager"), its "kind" ("peer") or else it is a fusion variant with its "role".
/// Throws ResultsError for another schema, a missing field or a field of the wrong type.
RunResult results_from_json(const nlohmann::json& j, const std::string& file);

/// Parse and read `path` (results_from_json). Throws ResultsError when the file cannot be opened
/// or is not JSON, naming it.
RunResult read_results(const std::string& path);

/// "I/N" -> {I, N} with 0 <= I < N; throws std::invalid_argument naming the spec otherwise.
std::pair<size_t, size_t> parse_shard(const std::string& spec);

/// The deterministic share I of N of `files`: sorted by path, every N-th starting at I. Over
/// I = 0 .. N-1 every file lands in exactly one shard, whatever the input order.
std::vector<std::string> shard_files(std::vector<std::string> files, size_t index, size_t count);

/// The runs `parts` (shards of one suite, and peers' results) as one run, ours in the order given
/// and then the peers. Environment, run info (without "peers") and ceilings come from the first
/// of our parts that ran on a device (else the first of ours, else the first part), with
/// "merged_from" listing `names` and every part's device; the seeds of our parts must agree
/// (parts of peers, whose run info says "peers", are exempt). A trace name present in two of our
/// parts is an error (rows are keyed on trace names, so two files of one name clash too). A
/// peers part's whole-graph variants join the row "trace" of the same trace name in our parts; a
/// peer trace that failed as a whole joins it as a skipped "pytorch_ops" variant; peers of a trace
/// whose own replay failed (no row) are dropped. A gpu_note of any part is kept. Throws
/// std::invalid_argument naming the parts that clash.
RunResult merge_runs(const std::vector<RunResult>& parts, const std::vector<std::string>& names);

}  // namespace replay
