#!/usr/bin/env python3
"""Side by side: median µs and numerics verdict per (trace, row, variant) of several results.json.

Usage: scripts/medians.py RESULTS.json... (columns in the order given; a quick before/after view,
not the noise-aware compare of the CI gate). Takes about a second.
"""
import json
import sys

runs = [json.load(open(p)) for p in sys.argv[1:]]
keys = []
cells = {}
for i, run in enumerate(runs):
    for t in run["traces"]:
        for r in t.get("regions", []):
            for v in r["variants"]:
                k = (t["name"], r["label"], v["variant"])
                if k not in keys:
                    keys.append(k)
                med = v.get("stats", {}).get("median_us")
                checks = v.get("numerics") or []  # one entry per checked output
                if checks:
                    verdict = "PASS" if all(c.get("pass") for c in checks) else "FAIL"
                else:
                    verdict = "n/c"  # not compared
                if v.get("skipped"):
                    verdict = "skip"
                cells[(k, i)] = ("%9.2f" % med if med is not None else "        –") + " " + verdict
print("%-62s %s" % ("trace / row / variant", "  ".join("%14s" % ("run %d" % (i + 1)) for i in range(len(runs)))))
for k in keys:
    name = "%s / %s / %s" % (k[0][:36], k[1][:12], k[2])
    print("%-62s %s" % (name, "  ".join("%14s" % cells.get((k, i), "") for i in range(len(runs)))))
