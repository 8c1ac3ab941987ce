#!/usr/bin/env python3
"""Per timed measurement of a results.json: samples, median, the noise (rel_ci: half-width of the
95% CI of the median / median; rel_noise: stdev / mean), why the loop stopped, its wall time, the
SM clock probed after each sample and the samples dropped for a slow clock. Then totals.
Usage: python3 scripts/timing_summary.py RESULTS.json   (takes about a second)"""
import collections
import json
import sys

r = json.load(open(sys.argv[1]))
print(f"{'trace / region / variant':70s} {'n':>6s} {'median':>9s} {'rel_ci%':>8s} "
      f"{'stdev/mean%':>11s} {'stop':>10s} {'wall s':>7s} {'SM MHz':>7s} {'dropped':>7s}")
reasons = collections.Counter()
wall = 0.0
for t in r["traces"]:
    for reg in t.get("regions", []):
        for v in reg["variants"]:
            if "stats" not in v:
                continue
            s, tm = v["stats"], v.get("timing", {})
            reasons[tm.get("stop_reason", "?")] += 1
            wall += tm.get("wall_s", 0)
            name = f"{t['name'][:40]} / {reg['label'][:14]} / {v['variant']}"
            print(f"{name:70s} {s['n']:6d} {s['median_us']:9.2f} {100 * s.get('rel_ci', 0):8.3f} "
                  f"{100 * s['rel_noise']:11.2f} {tm.get('stop_reason', '?'):>10s} "
                  f"{tm.get('wall_s', 0):7.2f} {tm.get('sm_clock_mhz', {}).get('median', 0):7.0f} "
                  f"{tm.get('discarded_slow_clock', 0):7d}")
print("stop reasons:", dict(reasons), f"; timing wall time {wall:.1f} s")
