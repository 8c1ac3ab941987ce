#!/usr/bin/env python3
"""The bookend table (impls/fusions/bookend/TUNING.md) from a `replay run` results.json: per trace
row and variant, the cold median (CUDA events, L2 flushed), the CUPTI kernel sum of one replay,
the host enqueue median (behind the blocking kernel) and the bytes per access the launches
recorded (min-max over every operand of every launch).

    python3 scripts/bookend_table.py OUT/run/results.json [--variants optimized,segmented,host_alias]
"""
import argparse
import json


def width(v):
    w = [e["bytes"] for e in v.get("vector_widths", [])]
    if not w:
        return "–"
    return f"{min(w)} B" if min(w) == max(w) else f"{min(w)}-{max(w)} B"


def copies(v):
    n = sum(1 for e in v.get("vector_widths", []) if e["kernel"] == "bookend_copy") // 2
    return str(n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--variants", default="optimized,segmented,host_alias")
    a = ap.parse_args()
    want = a.variants.split(",")
    r = json.load(open(a.results))
    print("| trace | row | variant | cold median µs | CUPTI kernel sum µs | launches | host enqueue µs | "
          "copies | vector B | numerics |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|---|")
    for t in r["traces"]:
        name = t["name"].split("/")[-1].removesuffix(".json")
        for row in t.get("regions", []):
            for v in row["variants"]:
                if v["variant"] not in want:
                    continue
                if "samples_us" not in v:
                    print(f"| {name} | {row['label']} | {v['variant']} | – | – | – | – | – | – | "
                          f"{v.get('skipped', '')[:80]} |")
                    continue
                c = v.get("cupti", {})
                launches = sum(k["count"] for k in c.get("kernels", []))
                print(f"| {name} | {row['label']} | {v['variant']} | {v['stats']['median_us']:.2f} | "
                      f"{c.get('kernel_sum_us', float('nan')):.2f} | {launches} | "
                      f"{v['host_enqueue']['median_us']:.2f} | {copies(v)} | {width(v)} | "
                      f"{v.get('verdict', '?')} |")


if __name__ == "__main__":
    main()
