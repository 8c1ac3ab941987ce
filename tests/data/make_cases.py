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

# --- cut: traces with ops the harness cannot run (traces/SCHEMA.md, "Cut nodes") ----------------
# attention_after_layernorm: the bundled nanoGPT LayerNorm forward (PyTorch's golden tensors),
# then a flash attention over its output as the CUDA capture records it: a tuple of 9 outputs, 5 of
# them no tensor the format holds ({"opaque": ...}), read through getitem 0 (the attention output,
# stats recorded on the tuple) and 1 (logsumexp, stats on the getitem), followed by ops the
# harness runs; and an assert with no outputs. The golden file holds the LayerNorm's tensors,
# logsumexp (a graph output: the cut output then takes PyTorch's value), lse_sum computed from it
# (compared), and attn_residual, downstream of the attention output drawn from its stats (not
# compared; its golden value is deliberately wrong, so comparing it would fail).
import struct

ln = json.load(open(os.path.join(HERE, "..", "..", "traces", "nanogpt_layernorm_fwd_2x8x1600.json")))
B, T, H, D = 2, 8, 25, 64
bf = lambda shape, stride=None: t(shape, "bfloat16", stride)
sdpa_outs = [
    dict(bf([B, H, T, D], [T * H * D, D, H * D, 1]), stats={"mean": 0.0, "std": 0.5, "min": -3.0, "max": 3.0}),
    t([B, H, T], "float32", [H * T, T, 1]),
    {"opaque": "None"}, {"opaque": "None"}, {"opaque": "int"}, {"opaque": "int"},
    {"opaque": "torch.uint64[2]"}, {"opaque": "torch.uint64[]"},
    bf([0], [1]),
]
cut_nodes = ln["nodes"] + [
    node("q", "aten.view.default", [ref("convert_element_type_1"), [B, T, H, D]], [bf([B, T, H, D])]),
    node("qt", "aten.permute.default", [ref("q"), [0, 2, 1, 3]], [bf([B, H, T, D], [T * H * D, D, H * D, 1])]),
    node("_assert", "aten._assert_tensor_metadata.default", [ref("qt")], [], {"dtype": {"dtype": "bfloat16"}}),
    node("sdpa", "aten._scaled_dot_product_flash_attention.default",
         [ref("qt"), ref("qt"), ref("qt"), 0.0, True], sdpa_outs, {"scale": 0.125}),
    {"id": "getitem_2", "op": "getitem", "args": [ref("sdpa"), 0],
     "outputs": [bf([B, H, T, D], [T * H * D, D, H * D, 1])]},
    {"id": "getitem_3", "op": "getitem", "args": [ref("sdpa"), 1],
     "outputs": [dict(t([B, H, T], "float32", [H * T, T, 1]),
                      stats={"mean": 2.0, "std": 0.25, "min": 1.0, "max": 3.0})]},
    node("attn", "aten.permute.default", [ref("getitem_2"), [0, 2, 1, 3]], [bf([B, T, H, D])]),
    node("attn_flat", "aten.view.default", [ref("attn"), [B, T, H * D]], [bf([B, T, H * D])]),
    node("attn_residual", "aten.add.Tensor", [ref("attn_flat"), ref("convert_element_type_1")],
         [bf([B, T, H * D])]),
    node("lse_sum", "aten.sum.dim_IntList", [ref("getitem_3"), [2]], [t([B, H])]),
]


def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in hdr.items() if k != "__metadata__"}


def write_st(path, tensors):
    hdr, blobs, off = {}, [], 0
    for k in sorted(tensors):
        dt, shape, data = tensors[k]
        hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


st = read_st(os.path.join(HERE, "..", "..", "traces", "nanogpt_layernorm_fwd_2x8x1600.safetensors"))
st["getitem_3"] = ("F32", [B, H, T], struct.pack("<f", 0.5) * (B * H * T))  # logsumexp, PyTorch's
st["lse_sum"] = ("F32", [B, H], struct.pack("<f", 4.0) * (B * H))  # its sum over T = 8: exact
st["attn_residual"] = ("BF16", [B, T, H * D], b"\x00\x00" * (B * T * H * D))  # wrong on purpose
os.makedirs(os.path.join(HERE, "cut"), exist_ok=True)
write_st(os.path.join(HERE, "cut", "attention_after_layernorm.safetensors"), st)
write("cut", "attention_after_layernorm", trace(
    "attention_after_layernorm", ln["inputs"], cut_nodes,
    ["convert_element_type_1", "attn_residual", "lse_sum", "getitem_3"],
    golden={"file": "attention_after_layernorm.safetensors", "tensors": sorted(st)}))

# synthetic_stats: unknown ops whose outputs carry no stats: a float output drawn with mean 0,
# std 1, an int64 output all zeros (so idx_plus is all ones).
write("cut", "synthetic_stats", trace("synthetic_stats", x, [
    node("mystery", "aten.mystery_op.default", [ref("x")], [t([4, 8])]),
    node("y", "aten.neg.default", [ref("mystery")], [t([4, 8])]),
    node("idx", "aten.mystery_index.default", [ref("x")], [t([4], "int64")]),
    node("idx_plus", "aten.add.Tensor", [ref("idx"), 1], [t([4], "int64")])], ["y", "idx_plus"]))

# complex_rope: torchtitan's (and Meta's reference) apply_rotary_emb, q of [1, 8, 4, 16] bf16 and
# freqs_cis [8, 8] complex64, as the capture records values of a dtype the format lacks
# ({"opaque": "torch.complex64[...]"}): view_as_complex -> mul by the complex table ->
# view_as_real. The complex values stay out of the graph, every node reading one is cut (aten.view
# and aten.mul are ops the harness runs), view_as_real's float32 output becomes an input drawn
# from its recorded stats, the rest (the reshape and the cast back) replays; the forward also
# returns the complex table view for its backward (a graph output no replay produces), and a
# uint8 mask input nothing reads.
B, T, H, D = 1, 8, 4, 16
cx = lambda shape: {"opaque": "torch.complex64[" + ", ".join(str(d) for d in shape) + "]"}
write("cut", "complex_rope", trace("complex_rope", [
    inp("xq", [B, T, H, D], "bfloat16"),
    {"id": "freqs_cis", **cx([T, D // 2])},
    inp("mask", [T, T], "uint8"),
], [
    node("convert_element_type", "prims.convert_element_type.default", [ref("xq"), {"dtype": "float32"}],
         [t([B, T, H, D])]),
    node("view", "aten.view.default", [ref("convert_element_type"), [B, T, H, -1, 2]], [t([B, T, H, D // 2, 2])]),
    node("view_as_complex", "aten.view_as_complex.default", [ref("view")], [cx([B, T, H, D // 2])]),
    node("view_1", "aten.view.default", [ref("freqs_cis"), [1, T, 1, D // 2]], [cx([1, T, 1, D // 2])]),
    node("mul", "aten.mul.Tensor", [ref("view_as_complex"), ref("view_1")], [cx([B, T, H, D // 2])]),
    node("view_as_real", "aten.view_as_real.default", [ref("mul")],
         [dict(t([B, T, H, D // 2, 2]), stats={"mean": 0.0, "std": 1.0, "min": -3.5, "max": 3.5})]),
    node("view_2", "aten.view.default", [ref("view_as_real"), [B, T, H, D]], [t([B, T, H, D])]),
    node("convert_element_type_1", "prims.convert_element_type.default", [ref("view_2"), {"dtype": "bfloat16"}],
         [t([B, T, H, D], "bfloat16")]),
], ["convert_element_type_1", "view_1"]))

# bad: a cut that cannot be made (an output the graph reads has no metadata; no "outputs" at all)
write("bad", "cut_output_without_metadata", trace("cut_output_without_metadata", x, [
    node("flash", "aten._scaled_dot_product_flash_attention.default", [ref("x"), ref("x"), ref("x")],
         [t([4, 8]), {"opaque": "int"}]),
    {"id": "max_q", "op": "getitem", "args": [ref("flash"), 1]},
    node("y", "aten.add.Tensor", [ref("x"), ref("max_q")], [t([4, 8])])], ["y"]))
write("bad", "cut_without_outputs", trace("cut_without_outputs", x, [
    {"id": "flash", "op": "aten._scaled_dot_product_flash_attention.default",
     "args": [ref("x"), ref("x"), ref("x")], "kwargs": {}},
    node("y", "aten.neg.default", [ref("x")], [t([4, 8])])], ["y"]))
