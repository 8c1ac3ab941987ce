#!/usr/bin/env python3
"""Mark a backward trace's saved inputs that are the same tensor or the same value ("same_as"), or
an exact widening of another ("widened_from"), from the forward trace beside it (traces/SCHEMA.md).

The capture (tracelib.training_traces) records "same_as" from the tensors PyTorch passed to the
backward: two saved inputs with the same storage, offset, shape, strides and dtype. This derives
more from the forward trace, for traces captured before and (called by tracelib) at capture:
- same_as: two saved inputs whose "from" outputs are the same forward value through
  `aten.alias.default` chains (aot_autograd's default partitioner returns `rsqrt` and
  `aten.alias(rsqrt)` and saves both), or values the forward computes by the same ops from the
  same values (Cohere's default partition saves `x - mean` computed twice): equal bit for bit,
  since the ops are deterministic (random ops never match);
- widened_from: a saved input whose forward value is `prims.convert_element_type` (or
  `aten._to_copy` with only a dtype) of the value another saved input is, to a wider floating
  dtype that holds it exactly (T5's default partition saves x and x.float()).
Needs no PyTorch.

Usage: python3 traces/capture/mark_same_as.py TRACE_DIR [--check]
  --check: change nothing; exit 1 if a trace lacks a mark this would add.
"""
import argparse
import glob
import json
import os
import sys


# Ops whose recomputation may differ or whose value is undefined: random draws, uninitialized
# memory, atomics-based accumulation on the GPU, attention kernels (dropout). A substring of the op
# name; their outputs never share a key.
NONDETERMINISTIC = ("rand", "bernoulli", "dropout", "normal", "uniform", "multinomial", "randperm", "poisson",
                    "binomial", "gamma", "seed", "empty", "scatter", "index_put", "index_add", "index_reduce",
                    "put", "histc", "bincount", "embedding_dense_backward", "attention")
WIDER = {("bfloat16", "float32"), ("bfloat16", "float64"), ("float16", "float32"), ("float16", "float64"),
         ("float32", "float64")}


def value_keys(fwd):
    """A function giving each forward value id a structural key (a small int): equal keys are equal
    values. Inputs key by id, aliases by what they alias, a deterministic node's outputs by (op,
    argument keys, kwargs). Computed once, in graph order, with the tuples interned to ints (keys
    of nested tuples would hash every path through the graph: exponential in its depth)."""
    nodes = {n["id"]: n for n in fwd.get("nodes", [])}
    ids, key_of = {}, {}

    def intern(t):
        return ids.setdefault(t, len(ids))

    def value_key(v):
        if v not in key_of:  # a forward input, or an id the trace does not define
            key_of[v] = intern(("input", v))
        return key_of[v]

    def arg_key(a):
        if isinstance(a, dict) and "ref" in a:
            rest = tuple(sorted((k, repr(x)) for k, x in a.items() if k != "ref"))
            return intern(("ref", value_key(a["ref"]), rest))
        if isinstance(a, list):
            return intern(("list", tuple(arg_key(x) for x in a)))
        return intern(("lit", repr(a)))

    for n in fwd.get("nodes", []):  # a trace lists its nodes in topological order
        v, op, args = n["id"], n.get("op", ""), n.get("args", [])
        if op == "aten.alias.default" and args and isinstance(args[0], dict) and "ref" in args[0]:
            key_of[v] = value_key(args[0]["ref"])
        elif any(r in op for r in NONDETERMINISTIC):
            key_of[v] = intern(("node", v))
        else:
            kw = tuple(sorted((k, arg_key(x)) for k, x in (n.get("kwargs") or {}).items()))
            key_of[v] = intern((op, tuple(arg_key(a) for a in args), kw))
    return value_key, nodes


def meta_key(t):
    return (tuple(t.get("shape", [])), tuple(t.get("stride", [])), t.get("dtype"))


def widening_source(n):
    """The value id `n` converts exactly to a wider float dtype, or None."""
    op, args, kw = n.get("op"), n.get("args", []), n.get("kwargs") or {}
    if not args or not isinstance(args[0], dict) or "ref" not in args[0]:
        return None
    if op == "prims.convert_element_type.default" and len(args) == 2:
        return args[0]["ref"]
    if op == "aten._to_copy.default" and len(args) == 1 and set(kw) <= {"dtype"}:
        return args[0]["ref"]
    return None


def mark(bwd, fwd):
    """Adds "same_as" and "widened_from" to `bwd`'s inputs in place; returns the ids marked."""
    key, nodes = value_keys(fwd)
    out_meta = {}
    for n in fwd.get("nodes", []):
        for k, o in enumerate(n.get("outputs", []) or []):
            if isinstance(o, dict) and k == 0:
                out_meta[n["id"]] = o
    first = {}
    marked = []
    saved = []
    for inp in bwd.get("inputs", []):
        f = inp.get("from")
        if not f or f.get("trace") != fwd.get("name"):
            continue
        saved.append(inp)
        k = (key(f["output"]), meta_key(inp))
        if k in first:
            if "same_as" not in inp and "widened_from" not in inp:
                inp["same_as"] = first[k]
                marked.append(inp["id"])
        else:
            first[k] = inp["id"]
    for pos, inp in enumerate(saved):
        if "same_as" in inp or "widened_from" in inp:
            continue
        n = nodes.get(inp["from"]["output"])
        src = widening_source(n) if n else None
        if src is None:
            continue
        for other in saved[:pos]:
            if other.get("widened_from") or key(other["from"]["output"]) != key(src):
                continue
            if (other.get("shape") == inp.get("shape") and other.get("stride") == inp.get("stride")
                    and (other.get("dtype"), inp.get("dtype")) in WIDER):
                inp["widened_from"] = other.get("same_as", other["id"])
                marked.append(inp["id"])
                break
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
        print(f"{os.path.basename(path)}: same_as/widened_from on {', '.join(marked)}")
        if not a.check:
            with open(path, "w") as fh:  # as tracelib.write_json writes traces
                fh.write(json.dumps(bwd, indent=1, allow_nan=False))
    if a.check and missing:
        sys.exit(1)


if __name__ == "__main__":
    main()
