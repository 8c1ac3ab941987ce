#!/usr/bin/env python3
"""Mark a backward trace's saved inputs that are the same tensor ("same_as", traces/SCHEMA.md).

The capture (tracelib.training_traces) records "same_as" from the tensors PyTorch passed to the
backward: two saved inputs with the same storage, offset, shape, strides and dtype. For traces
captured before it did, this derives the same facts from the forward trace beside each backward:
two saved inputs whose "from" outputs are the same forward value through `aten.alias.default`
chains (aot_autograd's default partitioner returns `rsqrt` and `aten.alias(rsqrt)` and saves both)
are the same tensor. Needs no PyTorch.

Usage: python3 traces/capture/mark_same_as.py TRACE_DIR [--check]
  --check: change nothing; exit 1 if a trace lacks a mark this would add.
"""
import argparse
import glob
import json
import os
import sys


def alias_base(fwd):
    """{forward value id: the value it aliases through aten.alias chains (itself if none)}."""
    base = {}
    for n in fwd.get("nodes", []):
        args = n.get("args", [])
        if n.get("op") == "aten.alias.default" and args and isinstance(args[0], dict) and "ref" in args[0]:
            src = args[0]["ref"]
            base[n["id"]] = base.get(src, src)
    return lambda v: base.get(v, v)


def meta_key(t):
    return (tuple(t.get("shape", [])), tuple(t.get("stride", [])), t.get("dtype"))


def mark(bwd, fwd):
    """Adds "same_as" to `bwd`'s inputs in place; returns the ids marked."""
    resolve = alias_base(fwd)
    first = {}
    marked = []
    for inp in bwd.get("inputs", []):
        f = inp.get("from")
        if not f or f.get("trace") != fwd.get("name"):
            continue
        key = (resolve(f["output"]), meta_key(inp))
        if key in first:
            if inp.get("same_as") != first[key]:
                inp["same_as"] = first[key]
                marked.append(inp["id"])
        else:
            first[key] = inp["id"]
    return marked


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    missing = 0
    for path in sorted(glob.glob(os.path.join(a.dir, "*.json"))):
        with open(path) as fh:
            bwd = json.load(fh)
        fname = (bwd.get("source") or {}).get("forward_trace")
        if not fname or not isinstance(bwd.get("inputs"), list):
            continue
        fpath = os.path.join(os.path.dirname(path), fname + ".json")
        if not os.path.exists(fpath):
            continue
        with open(fpath) as fh:
            fwd = json.load(fh)
        marked = mark(bwd, fwd)
        if not marked:
            continue
        missing += 1
        print(f"{os.path.basename(path)}: same_as on {', '.join(marked)}")
        if not a.check:
            with open(path, "w") as fh:  # as tracelib.write_json writes traces
                fh.write(json.dumps(bwd, indent=1, allow_nan=False))
    if a.check and missing:
        sys.exit(1)


if __name__ == "__main__":
    main()
