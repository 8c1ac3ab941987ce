#!/usr/bin/env python3
"""Per trace: which regions fused, our best variant's time and % of speed of light, against
torch.compile of the same graph timed the same way in the same job. Markdown on stdout.

    python3 scripts/fusion_vs_compile.py RESULTS.json --peers PEERS.json [--out F.md]

RESULTS.json from `replay run` (`bash scripts/device.sh OUT run`), PEERS.json from
traces/capture/torch_replay.py --compile (`bash scripts/device.sh OUT peers`) on the same traces.
Columns: the fused regions (`fusion µs %` per region that ran fused: its optimized median and %
of the region's own SOL; `fusion (eager: why)` where its variant fell back, `-` where no fusion
matched); `ours` is the whole graph's `optimized` median
(`eager` where the trace has no fusion), µs, cold; `% SOL` its share of the speed of light the run
measured and `bound` the term that bounds it (memory, matmul: the run's ceilings); `eager` and
`baseline` our eager executor's and the fusions' baseline variant's medians (`-` where not run), and
`PyTorch ops` PyTorch's op by op replay of the same graph, µs;
`torch.compile` the peer's median, µs; `ours / compile` below 1 means faster. Takes a second.
Exit status 0.
"""
import argparse
import json
import sys


def best_row(trace):
    """(variant name, variant dict) of the whole-graph row: optimized where timed, else eager."""
    regs = trace.get("regions", [])
    if not regs:
        return None, None
    timed = {v["variant"]: v for v in regs[0].get("variants", []) if "stats" in v and "skipped" not in v}
    for name in ("optimized", "eager"):
        if name in timed:
            return name, timed[name]
    return None, None


def fused_regions(trace):
    """Per fused region: its fusion, and its optimized median (µs) and % of its own SOL where
    timed (issue goals are stated on the region, the graph's row also holds the eager rest)."""
    out = []
    for row in trace.get("regions", []):
        if not row.get("fusion"):
            continue
        opt = next((v for v in row.get("variants", []) if v.get("variant") == "optimized"), None)
        why = (opt or {}).get("skipped", "")
        timed = ""
        if opt and "stats" in opt and not why:
            pct = opt.get("sol_pct")
            timed = f" {opt['stats']['median_us']:.1f} µs" + ("" if pct is None else f" {pct:.0f} %")
        out.append(row["fusion"] + timed + (f" (eager: {why[:60]})" if why else ""))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--peers", required=True)
    ap.add_argument("--out")
    a = ap.parse_args()
    traces, env = [], {}
    for path in a.results:
        with open(path) as f:
            part = json.load(f)
        env = env or part.get("environment", {})
        traces += part.get("traces", [])
    with open(a.peers) as f:
        peers = json.load(f)
    lines = [f"GPU: {env.get('device', 'none')}; PyTorch {peers.get('torch_version', '?')}. "
             "Medians of cold samples (L2 flushed), µs.", "",
             "| trace | regions | ours | µs | % SOL | bound | eager µs | baseline µs | PyTorch ops µs "
             "| torch.compile µs | ours / compile | numerics |",
             "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for t in sorted(traces, key=lambda t: t["name"]):
        name, v = best_row(t)
        peer = peers.get("traces", {}).get(t["name"], {})
        comp = peer.get("torch_compile", {}).get("median_us")
        ops = peer.get("pytorch_ops", {}).get("median_us")
        whole = (t.get("regions") or [{}])[0]
        bound = whole.get("sol_terms_us", {}).get("bound") or "-"
        def median_of(variant):
            return next((x["stats"]["median_us"] for x in whole.get("variants", [])
                         if x.get("variant") == variant and "stats" in x and "skipped" not in x), None)
        eager, base = median_of("eager"), median_of("baseline")
        ours = v["stats"]["median_us"] if v else None
        sol = v.get("sol_pct") if v else None
        ratio = f"{ours / comp:.2f}x" if ours and comp else "-"
        regions = ", ".join(fused_regions(t)) or "-"
        lines.append(f"| {t['name']} | {regions} | {name or '-'} | "
                     f"{'-' if ours is None else f'{ours:.1f}'} | "
                     f"{'-' if sol is None else f'{sol:.0f}'} | {bound} | "
                     f"{'-' if eager is None else f'{eager:.1f}'} | {'-' if base is None else f'{base:.1f}'} | "
                     f"{'-' if ops is None else f'{ops:.1f}'} | "
                     f"{'-' if comp is None else f'{comp:.1f}'} | {ratio} | "
                     f"{t.get('verdict', '-')}{' ' + t['error'][:60] if t.get('error') else ''} |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
