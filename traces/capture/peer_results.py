#!/usr/bin/env python3
"""PyTorch peers in the harness's own results schema (replay-results/2), so that `replay compare`,
`replay merge` and the reports treat them like any other variant.

    python3 traces/capture/peer_results.py PEERS.json --out RESULTS.json

PEERS.json is what torch_replay.py writes (replay-peers/1: per trace the raw cold samples of
"pytorch_ops" and, with --compile, "torch_compile"); torch_replay.py --results writes the same
document directly. Each trace becomes one trace of the results with its whole-graph row
("trace", region -1) holding one variant per peer ("pytorch_ops", "torch_compile"), "kind":
"peer", the raw samples, the statistics computed exactly as harness/measure/stats.cpp computes
them (numpy's linear percentile, the order-statistic 95 % CI of the median), and the stopping
record torch_replay.py kept. Numerics are not compared ("not compared": the peers are timed, the
harness checks its own variants). A trace with an error or no timing is a trace with that error.

No torch import: this module runs anywhere (the unit tests run it on a machine without a GPU).
"""
import argparse
import json
import math
import sys

RESULTS_SCHEMA = "replay-results/2"
PEER_VARIANTS = ("pytorch_ops", "torch_compile")


def percentile(sorted_s, p):
    """numpy's default (linear) percentile of an ascending, non-empty list."""
    pos = p / 100.0 * (len(sorted_s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_s) - 1)
    return sorted_s[lo] + (sorted_s[hi] - sorted_s[lo]) * (pos - lo)


def summarize(samples):
    """The SampleStats of harness/measure/stats.cpp, as its to_json writes them."""
    s = sorted(samples)
    n = len(s)
    keys = ("median_us", "q1_us", "q3_us", "iqr_us", "min_us", "max_us", "mean_us", "stdev_us",
            "rel_noise", "median_ci_lo_us", "median_ci_hi_us", "rel_ci")
    r = {"n": n, **{k: 0.0 for k in keys}}
    if not n:
        return r
    r["min_us"], r["max_us"] = s[0], s[-1]
    r["median_us"] = percentile(s, 50)
    r["q1_us"], r["q3_us"] = percentile(s, 25), percentile(s, 75)
    r["iqr_us"] = r["q3_us"] - r["q1_us"]
    r["mean_us"] = sum(s) / n
    if n > 1:
        r["stdev_us"] = math.sqrt(sum((v - r["mean_us"]) ** 2 for v in s) / (n - 1))
    r["rel_noise"] = r["stdev_us"] / r["mean_us"] if r["mean_us"] > 0 else 0.0
    if n < 6:
        r["median_ci_lo_us"], r["median_ci_hi_us"] = s[0], s[-1]
    else:
        half = 1.959964 * math.sqrt(n) / 2
        j = int(max(1.0, math.floor(n / 2.0 - half)))
        k = int(min(float(n), math.ceil(n / 2.0 + half + 1)))
        r["median_ci_lo_us"], r["median_ci_hi_us"] = s[j - 1], s[k - 1]
    med = r["median_us"]
    r["rel_ci"] = (r["median_ci_hi_us"] - r["median_ci_lo_us"]) / 2 / med if med > 0 else 0.0
    return r


def stop_reason(samples, wall_s, rule):
    """harness/measure/stats.cpp stop_reason: None while sampling must go on."""
    if len(samples) >= rule["max_samples"]:
        return "max_samples"
    if wall_s >= rule["timeout_s"]:
        return "timeout"
    if len(samples) < rule["min_samples"] or sum(samples) * 1e-6 < rule["min_time_s"]:
        return None
    return "converged" if summarize(samples)["rel_ci"] <= rule["max_noise"] else None


# The harness's default StopRule (harness/measure/stats.hpp); the clock check is torch_replay.py's
# (NVML after each batch, where pynvml is there).
DEFAULT_RULE = {"min_samples": 10, "max_samples": 1000000, "min_time_s": 0.05, "max_noise": 0.005,
                "timeout_s": 15.0, "min_clock_ratio": 0.9, "throttle_recovery_s": 0.05}


def variant_json(name, m):
    """One peer measurement ({"samples_us": [...], "stop_reason", "wall_s"} or {"error"})."""
    v = {"variant": name, "kind": "peer", "numerics": [], "verdict": "not compared"}
    if "error" in m:
        v["skipped"] = "peer failed: " + m["error"]
        return v
    samples = [float(x) for x in m["samples_us"]]
    v["samples_us"] = samples
    v["stats"] = summarize(samples)
    v["host_enqueue"] = summarize([])
    clocks = sorted(float(x) for x in m.get("sm_clock_mhz", []))
    v["timing"] = {"stop_reason": m.get("stop_reason", "max_samples"), "wall_s": m.get("wall_s", 0.0),
                   "sm_clock_mhz": {"n": len(clocks), "median": clocks[len(clocks) // 2] if clocks else 0.0,
                                    "min": clocks[0] if clocks else 0.0,
                                    "max": clocks[-1] if clocks else 0.0},
                   "clock_floor_mhz": float(m.get("clock_floor_mhz", 0.0)),
                   "discarded_slow_clock": int(m.get("discarded_slow_clock", 0))}
    v["sol_pct"] = 0.0
    return v


def to_results(peers, files=None):
    """The replay-results/2 document of a replay-peers/1 document. `files`: {trace name: path}."""
    files = files or {}
    traces = []
    for name, r in peers.get("traces", {}).items():
        t = {"name": name, "file": files.get(name, r.get("file", "")),
             "input_source": "PyTorch peer: inputs " + r.get("inputs_from", "?"),
             "golden_check": [], "dropped_matches": [], "verdict": "not compared"}
        variants = [variant_json(p, r[p]) for p in PEER_VARIANTS if isinstance(r.get(p), dict)]
        if "error" in r:
            t["error"], t["error_kind"] = "peer: " + r["error"], "runtime"
        t["regions"] = [] if "error" in r else [{
            "label": "trace", "fusion": "", "region": -1, "nodes": r.get("node_ids", []),
            "sol_bytes": 0.0, "cost": {"bytes": 0.0, "flops": 0.0, "comm_bytes": 0.0},
            "sol_us": 0.0, "copy_us": 0.0, "variants": variants}]
        traces.append(t)
    env = {"device": peers.get("device", "?"), "torch_version": peers.get("torch_version", "?"),
           "peer_tool": "traces/capture/torch_replay.py"}
    return {"schema": RESULTS_SCHEMA, "environment": env,
            "run": {"command_line": peers.get("command", ""), "method": peers.get("method", ""),
                    "stop_rule": peers.get("stop_rule", DEFAULT_RULE), "peers": True},
            "seed": peers.get("seed", 0), "copy_bandwidth_GBps": 0.0,
            "ceilings": {"copy_GBps": 0.0, "matmul_TFLOPs": 0.0, "bus_GBps": 0.0},
            "gpu_note": "", "verdict": "not compared", "traces": traces}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("peers", help="replay-peers/1 JSON (torch_replay.py --out)")
    ap.add_argument("--out", required=True, help="replay-results/2 JSON to write")
    args = ap.parse_args()
    try:
        with open(args.peers) as f:
            peers = json.load(f)
    except (OSError, ValueError) as e:
        print(f"error: {args.peers}: {e}", file=sys.stderr)
        return 2
    if peers.get("schema") != "replay-peers/1":
        print(f"error: {args.peers}: schema {peers.get('schema')!r}, expected 'replay-peers/1'",
              file=sys.stderr)
        return 2
    with open(args.out, "w") as f:
        json.dump(to_results(peers), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
