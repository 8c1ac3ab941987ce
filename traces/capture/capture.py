#!/usr/bin/env python3
"""Capture a PyTorch module's decomposed ATen graph and write it in the replay trace format.

The graph is what Inductor sees: aot_autograd (functorch's aot_function) with Inductor's
decomposition table (torch._inductor.decomposition.select_decomp_table), so composite ops such as
F.layer_norm arrive as primitives (prims.convert_element_type, aten.var_mean.correction,
aten.rsqrt, aten.mul.Tensor, ...). The format is documented in traces/SCHEMA.md (schema
"replay-trace/1").

Usage (on a host with PyTorch >= 2.4 and a CUDA device; the GPU machine has 2.11):
    python3 traces/capture/capture.py --out traces/                 # every bundled workload
    python3 traces/capture/capture.py --out /tmp/t --only nanogpt_layernorm_fwd

Golden tensors: for the small shapes (--golden), the exact inputs and PyTorch's outputs are written
to a safetensors sidecar next to the trace. They are an oracle that does not come from the replay
harness's own code.
"""
import argparse
import datetime
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

SCHEMA = "replay-trace/1"

DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.bool: "bool",
    torch.float8_e4m3fn: "float8_e4m3fn",
    torch.float8_e5m2: "float8_e5m2",
}


# --- the modules, as their model code writes them ---------------------------------------------


class NanoGPTLayerNorm(nn.Module):
    """LayerNorm from karpathy/nanoGPT model.py (optional bias; F.layer_norm with eps 1e-5)."""

    def __init__(self, ndim, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class LlamaRMSNorm(nn.Module):
    """RMSNorm as Hugging Face's LlamaRMSNorm writes it (fp32 statistics, weight applied after the
    cast back to the input dtype)."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def perturb_(module, gen):
    """Freshly initialised norms have weight 1 and bias 0, which would hide a kernel that drops
    the affine step. Stand in for trained weights: weight ~ 1 + 0.1 N(0,1), bias ~ 0.1 N(0,1)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32) * 0.1
            p.copy_((1.0 + noise) if name.endswith("weight") else noise)


# --- graph -> JSON -------------------------------------------------------------------------------


def tensor_meta(val):
    return {"shape": list(val.shape), "stride": list(val.stride()), "dtype": DTYPE_NAMES[val.dtype]}


def encode_arg(a):
    if isinstance(a, torch.fx.Node):
        return {"ref": a.name}
    if isinstance(a, torch.dtype):
        return {"dtype": DTYPE_NAMES[a]}
    if isinstance(a, (list, tuple)):
        return [encode_arg(x) for x in a]
    if isinstance(a, bool) or a is None or isinstance(a, int):
        return a
    if isinstance(a, float):
        if math.isinf(a) or math.isnan(a):
            return {"float": repr(a)}
        return a
    if isinstance(a, (torch.device, torch.memory_format, torch.layout)):
        return {"enum": str(a)}
    raise TypeError(f"cannot encode argument {a!r} of type {type(a)}")


def op_name(target):
    if getattr(target, "__module__", None) == "_operator" and target.__name__ == "getitem":
        return "getitem"
    return str(target)  # e.g. aten.var_mean.correction, prims.convert_element_type.default


def value_stats(t):
    f = t.detach().double()
    return {
        "mean": f.mean().item(),
        "std": f.std(unbiased=False).item() if f.numel() > 1 else 0.0,
        "min": f.min().item(),
        "max": f.max().item(),
    }


def graph_to_trace(gm, inputs, input_names, name, source, world_size=1):
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(inputs), (len(placeholders), len(inputs))
    rename = {p.name: nm for p, nm in zip(placeholders, input_names)}

    def fix(enc):
        if isinstance(enc, dict) and "ref" in enc:
            return {"ref": rename.get(enc["ref"], enc["ref"])}
        if isinstance(enc, list):
            return [fix(e) for e in enc]
        return enc

    trace = {
        "schema": SCHEMA,
        "name": name,
        "source": source,
        "world_size": world_size,
        "inputs": [],
        "nodes": [],
        "outputs": [],
    }
    for p, t, nm in zip(placeholders, inputs, input_names):
        trace["inputs"].append({"id": nm, **tensor_meta(t), "stats": value_stats(t)})
    for n in gm.graph.nodes:
        if n.op == "call_function":
            val = n.meta.get("val")
            outs = [tensor_meta(v) for v in val] if isinstance(val, (list, tuple)) else (
                [tensor_meta(val)] if isinstance(val, torch.Tensor) else [])
            trace["nodes"].append({
                "id": n.name,
                "op": op_name(n.target),
                "args": fix([encode_arg(a) for a in n.args]),
                "kwargs": {k: fix(encode_arg(v)) for k, v in n.kwargs.items()},
                "outputs": outs,
            })
        elif n.op == "output":
            outs = n.args[0]
            trace["outputs"] = [rename.get(o.name, o.name) for o in outs]
        elif n.op != "placeholder":
            raise RuntimeError(f"unsupported FX node kind {n.op} ({n.name})")
    return trace


def capture_forward(fn, inputs):
    """Run fn through aot_autograd with Inductor's decompositions; return the forward GraphModule."""
    from functorch.compile import aot_function, make_boxed_func
    from torch._inductor.decomposition import select_decomp_table

    graphs = []

    def fw_compiler(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    compiled = aot_function(fn, fw_compiler=fw_compiler, decompositions=select_decomp_table())
    with torch.no_grad():
        out = compiled(*inputs)
    assert len(graphs) == 1, f"expected one forward graph, got {len(graphs)}"
    return graphs[0], out


# --- safetensors sidecar (written by hand so that the format stays what SCHEMA.md says) -----------

ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
             torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL"}


def write_safetensors(path, tensors):
    try:
        from safetensors.torch import save_file
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, path)
    except ImportError:  # the format is simple enough to write directly
        header, blobs, off = {}, [], 0
        for k, v in tensors.items():
            b = v.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()
            header[k] = {"dtype": ST_DTYPES[v.dtype], "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
        h = json.dumps(header).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        with open(path, "wb") as f:
            f.write(len(h).to_bytes(8, "little"))
            f.write(h)
            for b in blobs:
                f.write(b)


# --- workloads -----------------------------------------------------------------------------------


def nanogpt_layernorm_fwd(B, T, C, seed, device):
    gen = torch.Generator(device=device).manual_seed(seed)
    mod = NanoGPTLayerNorm(C).to(device=device, dtype=torch.bfloat16)
    perturb_(mod, gen)
    x = torch.randn(B, T, C, generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
    from torch.func import functional_call

    def fn(x, weight, bias):
        return (functional_call(mod, {"weight": weight, "bias": bias}, (x,)),)

    inputs = [x, mod.weight.detach().clone(), mod.bias.detach().clone()]
    return fn, inputs, ["x", "weight", "bias"], {
        "model": "GPT-2 XL (nanoGPT, n_embd=1600): LayerNorm module, bf16 parameters and activations",
        "module": "traces/capture/capture.py:NanoGPTLayerNorm (copied semantics of nanoGPT model.py LayerNorm)",
        "phase": "fwd",
    }


def llama_rmsnorm_fwd(B, T, C, seed, device):
    gen = torch.Generator(device=device).manual_seed(seed)
    mod = LlamaRMSNorm(C).to(device=device, dtype=torch.bfloat16)
    perturb_(mod, gen)
    x = torch.randn(B, T, C, generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
    from torch.func import functional_call

    def fn(x, weight):
        return (functional_call(mod, {"weight": weight}, (x,)),)

    return fn, [x, mod.weight.detach().clone()], ["x", "weight"], {
        "model": "Llama-2-7B (hidden 4096): LlamaRMSNorm as Hugging Face writes it, bf16",
        "module": "traces/capture/capture.py:LlamaRMSNorm",
        "phase": "fwd",
    }


WORKLOADS = {
    # name: (builder, [(shape, golden?)])
    "nanogpt_layernorm_fwd": (nanogpt_layernorm_fwd, [((16, 128, 1600), False), ((16, 1024, 1600), False),
                                                      ((2, 8, 1600), True)]),
    "llama_rmsnorm_fwd": (llama_rmsnorm_fwd, [((2, 8, 4096), True)]),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for <name>.json (+ <name>.safetensors)")
    ap.add_argument("--only", action="append", help="workload name (repeatable); default: all")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for wl, (builder, shapes) in WORKLOADS.items():
        if args.only and wl not in args.only:
            continue
        for shape, golden in shapes:
            name = f"{wl}_{'x'.join(map(str, shape))}"
            fn, inputs, input_names, source = builder(*shape, args.seed, args.device)
            gm, outs = capture_forward(fn, inputs)
            with torch.no_grad():
                eager = fn(*inputs)
            for o, e in zip(outs, eager):  # the captured graph must compute what the module computes
                torch.testing.assert_close(o, e, rtol=1.6e-2, atol=1e-2)
            source.update({
                "torch_version": torch.__version__,
                "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
                "capture_command": " ".join(["python3", "traces/capture/capture.py"] + sys.argv[1:]),
                "capture_seed": args.seed,
                "captured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "method": "functorch.compile.aot_function + torch._inductor.decomposition.select_decomp_table, no_grad",
            })
            trace = graph_to_trace(gm, inputs, input_names, name, source)
            if golden:
                st = {nm: t for nm, t in zip(input_names, inputs)}
                st.update({oid: o for oid, o in zip(trace["outputs"], outs)})
                write_safetensors(os.path.join(args.out, name + ".safetensors"), st)
                trace["golden"] = {"file": name + ".safetensors", "tensors": sorted(st.keys()),
                                   "note": "exact inputs and PyTorch outputs of the captured graph"}
            with open(os.path.join(args.out, name + ".json"), "w") as f:
                json.dump(trace, f, indent=1)
            print(f"wrote {name}: {len(trace['nodes'])} nodes, ops "
                  f"{sorted(set(n['op'] for n in trace['nodes']))}", flush=True)


if __name__ == "__main__":
    main()
