#!/usr/bin/env python3
"""Join a `replay run` results.json with a torch_replay.py peers.json (same traces, same GPU, same
job) into one Markdown table: per trace, the whole graph replayed by our eager executor and by our
fusions (`optimized`), PyTorch running the same decomposed graph op by op, and torch.compile.

    python3 scripts/eager_vs_pytorch.py RESULTS.json... --peers PEERS.json [--all] [--goal 1.25] [--out F.md]

(several results.json: the shards of one suite, run one after another in the same job)

Times are the medians of cold samples (L2 flushed by reading before each), in µs. `eager/PyTorch`
is our eager time over PyTorch's op-by-op time (the goal: <= 1.25, --goal). By default only the
traces without golden tensors (the realistic shapes) are listed; --all lists every trace.
Exit status: 0, or 1 when a listed trace is over the goal or lacks a number (said in the table).
Takes about a second. The inputs come from `bash scripts/device.sh OUT pair=I/N` on a GPU host.
"""
import argparse
import json
import sys


def whole_graph_medians(trace):
    """{variant name: median µs} of the trace's whole-graph row (region -1), timed variants only."""
    regs = trace.get("regions", [])
    if not regs:  # regions[0] is the whole trace (a fusion claiming every node shares that row)
        return {}
    return {v["variant"]: v["stats"]["median_us"] for v in regs[0].get("variants", [])
            if "stats" in v and "skipped" not in v}


def fmt(us):
    return "-" if us is None else f"{us:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--peers", required=True)
    ap.add_argument("--all", action="store_true", help="also the small traces with golden tensors")
    ap.add_argument("--goal", type=float, default=1.25, help="eager / PyTorch op-by-op goal (default 1.25)")
    ap.add_argument("--out", help="also write the table to this file")
    args = ap.parse_args()
    res = {"traces": []}
    for path in args.results:
        with open(path) as f:
            part = json.load(f)
        res.setdefault("environment", part.get("environment", {}))
        res["traces"] += part.get("traces", [])
    with open(args.peers) as f:
        peers = json.load(f)
    env = res.get("environment", {})
    lines = [f"GPU: {env.get('device', 'none')}; PyTorch {peers.get('torch_version', '?')} "
             f"on {peers.get('device', '?')}. Medians of cold samples, µs.", "",
             "| trace | eager | optimized | PyTorch op by op | torch.compile | eager / PyTorch | reference s | verdict |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    bad = 0
    for t in res.get("traces", []):
        if not args.all and "golden" in t.get("input_source", ""):
            continue
        name = t["name"]
        med = whole_graph_medians(t)
        p = peers.get("traces", {}).get(name, {})
        ops = p.get("pytorch_ops", {}).get("median_us")
        tc = p.get("torch_compile", {})
        comp = tc.get("median_us")
        eager = med.get("eager")
        ratio = eager / ops if eager and ops else None
        if ratio is None:
            note = "no number: " + (t.get("error") or p.get("error") or "not timed")[:80]
            bad += 1
        elif ratio > args.goal:
            note = f"over the {args.goal:.2f}x goal"
            bad += 1
        else:
            note = "ok"
        if t.get("not_replayed"):
            note += "; " + t["not_replayed"][:60]
        if t.get("verdict") not in (None, "PASS"):
            note += f"; numerics {t.get('verdict')}"
        lines.append(f"| {name} | {fmt(eager)} | {fmt(med.get('optimized'))} | {fmt(ops)} | "
                     f"{fmt(comp) if comp is not None else tc.get('error', '-')[:40]} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}x'} | {t.get('reference_s', 0):.0f} | {note} |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
