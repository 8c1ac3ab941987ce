#!/usr/bin/env python3
"""Writes the malformed and edge-case traces under tests/data/ (run from the repo root; the
outputs are committed, this script documents how they were made).

bad/*.json: each must make `replay run --variants reference FILE` exit 2 with the file (and the
node, where there is one) named; edge/*.json: valid corner cases that must load and run (or, for
a reference larger than the machine's memory, load and be skipped with the reason).
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def t(shape, dtype="float32", stride=None):
    d = {"shape": shape, "dtype": dtype}
    if stride is not None:
        d["stride"] = stride
    return d


def trace(name, inputs, nodes, outputs, **extra):
    doc = {"schema": "replay-trace/1", "name": name,
           "source": {"model": "tests/data/make_cases.py", "phase": "fwd"}, "world_size": 1,
           "inputs": inputs, "nodes": nodes, "outputs": outputs}
    doc.update(extra)
    return doc


def inp(id, shape, dtype="float32", stride=None):
    d = t(shape, dtype, stride)
    d["id"] = id
    return d


def node(id, op, args, outputs, kwargs=None):
    return {"id": id, "op": op, "args": args, "kwargs": kwargs or {}, "outputs": outputs}


def ref(v):
    return {"ref": v}


def write(folder, name, doc, raw=None):
    with open(os.path.join(HERE, folder, name + ".json"), "w") as f:
        f.write(raw if raw is not None else json.dumps(doc, indent=1) + "\n")


x = [inp("x", [4, 8])]
neg = lambda out="y": node(out, "aten.neg.default", [ref("x")], [t([4, 8])])

# --- bad: exit 2 ---------------------------------------------------------------------------------
write("bad", "amax_zero_size_dim", trace("amax_zero_size_dim", [inp("x", [4, 0])],
      [node("amax", "aten.amax.default", [ref("x"), [1]], [t([4])])], ["amax"]))
write("bad", "float_abc", trace("float_abc", x,
      [node("add", "aten.add.Tensor", [ref("x"), {"float": "abc"}], [t([4, 8])])], ["add"]))
deep = "[" * 1000 + "]" * 1000
write("bad", "deep_nesting", None,
      raw='{"schema": "replay-trace/1", "name": "deep", "source": ' + deep +
          ', "inputs": [], "nodes": [], "outputs": []}\n')
write("edge", "huge_consistent_shape", trace("huge_consistent_shape", [inp("x", [1000000, 100000])],
      [node("y", "aten.neg.default", [ref("x")], [t([1000000, 100000])])], ["y"]))
write("bad", "numel_overflow", trace("numel_overflow", [inp("x", [4294967296, 4294967296])],
      [node("y", "aten.neg.default", [ref("x")], [t([4294967296, 4294967296])])], ["y"]))
write("bad", "negative_stride", trace("negative_stride", [inp("x", [4, 8], stride=[8, -1])],
      [neg()], ["y"]))
write("bad", "getitem_index_2_32", trace("getitem_index_2_32", x, [
    node("vm", "aten.var_mean.correction", [ref("x"), [1]], [t([4]), t([4])], {"correction": 0}),
    {"id": "mean", "op": "getitem", "args": [ref("vm"), 4294967296]},
    node("y", "aten.neg.default", [ref("mean")], [t([4])])], ["y"]))
write("bad", "rsqrt_three_args", trace("rsqrt_three_args", x,
      [node("rsqrt", "aten.rsqrt.default", [ref("x"), 1, 2], [t([4, 8])])], ["rsqrt"]))
write("bad", "duplicated_output", trace("duplicated_output", x, [neg()], ["y", "y"]))
write("bad", "overlapping_output", trace("overlapping_output", x,
      [node("y", "aten.neg.default", [ref("x")], [t([4, 8], stride=[0, 1])])], ["y"]))
write("bad", "too_many_dims", trace("too_many_dims", [inp("x", [1] * 9)],
      [node("y", "aten.neg.default", [ref("x")], [t([1] * 9)])], ["y"]))
write("bad", "unknown_keyword", trace("unknown_keyword", x,
      [node("y", "aten.neg.default", [ref("x")], [t([4, 8])], {"approximate": "tanh"})], ["y"]))
write("bad", "world_size_not_integer", trace("world_size_not_integer", x, [neg()], ["y"],
                                             world_size=2.5))
write("bad", "unknown_op", trace("unknown_op", x,
      [node("y", "aten.fancy_rsqrt.default", [ref("x")], [t([4, 8])])], ["y"]))
write("bad", "shape_overflow_in_view", trace("shape_overflow_in_view", x,
      [node("y", "aten.view.default", [ref("x"), [4294967296, 4294967296, -1]], [t([32])])],
      ["y"]))

vm = node("vm", "aten.var_mean.correction", [ref("x"), [1]], [t([4]), t([4])], {"correction": 0})
write("bad", "tuple_used_as_tensor", trace("tuple_used_as_tensor", x,
      [vm, node("y", "aten.neg.default", [ref("vm")], [t([4])])], ["y"]))
write("bad", "getitem_of_getitem", trace("getitem_of_getitem", x,
      [vm, {"id": "var", "op": "getitem", "args": [ref("vm"), 0]},
       {"id": "again", "op": "getitem", "args": [ref("var"), 1]}], ["again"]))
write("bad", "getitem_wrong_outputs", trace("getitem_wrong_outputs", x,
      [vm, {"id": "var", "op": "getitem", "args": [ref("vm"), 0], "outputs": [t([4, 1])]}],
      ["var"]))
write("bad", "getitem_wrong_strides", trace("getitem_wrong_strides", x,
      [node("sp", "aten.split.Tensor", [ref("x"), 4, 1], [t([4, 4], stride=[8, 1])] * 2),
       {"id": "right", "op": "getitem", "args": [ref("sp"), 1], "outputs": [t([4, 4], stride=[4, 1])]}],
      ["right"]))
write("bad", "getitem_unknown_keyword", trace("getitem_unknown_keyword", x,
      [vm, {"id": "var", "op": "getitem", "args": [ref("vm"), 0], "kwargs": {"bogus": 1}}],
      ["var"]))
write("bad", "view_of_non_viewable", trace("view_of_non_viewable", [inp("x", [3, 2], stride=[1, 3])],
      [node("y", "aten.view.default", [ref("x"), [6]], [t([6])])], ["y"]))
write("bad", "argument_given_twice", trace("argument_given_twice", x,
      [node("y", "aten.sub.Tensor", [ref("x"), 1.0], [t([4, 8])], {"other": 2.0})], ["y"]))

# --- edge: valid, must load and run ------------------------------------------------------------
write("edge", "sum_0d_dim0", trace("sum_0d_dim0", [inp("x", [])],
      [node("y", "aten.sum.dim_IntList", [ref("x"), [0]], [t([])])], ["y"]))
write("edge", "stride0_input", trace("stride0_input", [inp("x", [2, 3], stride=[0, 1])],
      [node("y", "aten.neg.default", [ref("x")], [t([2, 3])])], ["y"]))
write("edge", "zero_size", trace("zero_size", [inp("x", [0, 8])],
      [node("s", "aten.sum.dim_IntList", [ref("x"), [0]], [t([8])]),
       node("y", "aten.neg.default", [ref("x")], [t([0, 8])])], ["s", "y"]))

# --- a trace whose reference disagrees with PyTorch's golden outputs (eps 1e-2, not 1e-5): the
# numerics failure (exit 1) must not be hidden by bad input beside it (exit 2) -------------------
with open(os.path.join(HERE, "..", "..", "traces", "nanogpt_layernorm_fwd_2x8x1600.json")) as f:
    ln = json.load(f)
ln["name"] = "golden_mismatch"
for n in ln["nodes"]:
    if n["id"] == "add":
        n["args"][1] = 1e-2
ln["golden"]["file"] = "../../../traces/nanogpt_layernorm_fwd_2x8x1600.safetensors"
os.makedirs(os.path.join(HERE, "numerics"), exist_ok=True)
write("numerics", "golden_mismatch", ln)
