#!/usr/bin/env python3
"""Tensor-parallel graphs (issue 31) captured through backend.py with PyTorch's fake process group,
one rank's (SPMD) graph per world size, as torch.compile sees torchtitan-style tensor parallelism.

Run on one GPU (no second process: the fake process group moves no data, so there are no golden
tensors and no eager check; `replay run` simulates every rank from the seed instead):
    python3 traces/capture/capture_tp.py --out traces/tp/captured [--small] [--only NAME]

Workloads (DTensor ones through torch.distributed.tensor.parallel.parallelize_module; the float8
ones written with torch.distributed._functional_collectives, as torchao's float8 tensor-parallel
styles compute, since torchao is not installed on the GPU host):
    llama_mlp_sp            torchtitan's Llama FFN block plan: ffn_norm SequenceParallel, the FFN
                            input Shard(1) -> Replicate, w1/w3 ColwiseParallel, w2
                            RowwiseParallel(output_layouts=Shard(1)), the residual add; 3-D h
                            (all-gather and reduce-scatter along dim 1: the split/cat forms)
    colwise_seq / rowwise_seq   one Linear, input Shard(1) / output Shard(1) of a 3-D activation
    colwise_2d / rowwise_2d     one Linear, input Shard(0) / output Shard(0) of a 2-D activation
    rowwise_replicate       RowwiseParallel with a replicated output (an all_reduce)
    f8_rowwise_colwise      bf16 x gathered along the sequence, then torchao's rowwise recipe
                            (scales of the gathered x: replicated), training
    f8_tensorwise_colwise   the same with the tensorwise recipe (torch.max amax), training
    f8_rowwise_rowwise      rowwise recipe, then the reduce-scatter along the sequence, training
    f8_rowwise_gather_fp8   x quantized rowwise on its rank, float8 rows and their scales gathered
                            (sharded scales), _scaled_mm, inference
    f8_tensorwise_gather_fp8  tensorwise amax all-reduced (max) over the ranks, x quantized on its
                            rank, float8 gathered, _scaled_mm (torchao Float8ColwiseParallel's
                            float8 all-gather), inference
Shapes: small [B, T, D, H] = [2, 16, 64, 176] ([2, 32, 64, 256] for float8: _scaled_mm wants
multiples of 16); Llama-3-8B [1, 8192, 4096, 14336] and 70B
[1, 8192, 8192, 28672] (realistic, no tensors). World sizes 2, 4, 8.
"""
import argparse
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backend import ReplayBackend  # noqa: E402
from tracelib import write_json  # noqa: E402
import json  # noqa: E402
import models  # noqa: E402

BF16 = torch.bfloat16
E4M3 = torch.float8_e4m3fn
SMALL = (2, 16, 64, 176)
SMALL_F8 = (2, 32, 64, 256)  # _scaled_mm wants K and N (per rank) multiples of 16
LLAMA8B = (1, 8192, 4096, 14336)
LLAMA70B = (1, 8192, 8192, 28672)


def init_world(ws):
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.distributed.device_mesh import init_device_mesh
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=ws)
    return init_device_mesh("cuda", (ws,), mesh_dim_names=("tp",))


class FFNBlock(nn.Module):
    """The FFN half of torchtitan's TransformerBlock: h + feed_forward(ffn_norm(h))."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-5)
        self.feed_forward = models.LlamaFeedForward(dim, hidden)  # torchtitan's llama3 FeedForward too

    def forward(self, h):
        return h + self.feed_forward(self.ffn_norm(h))


def _init(mod, gen, device):
    """Norm weights 1 + 0.1 N(0, 1), the others 0.02 N(0, 1). On a DTensor parameter each rank's
    local shard is written: parallelize_module distributes the weights through collectives, which
    the fake process group does not run, so the shards would otherwise hold uninitialized memory
    (and the traces its statistics)."""
    with torch.no_grad():
        for n, p in mod.named_parameters():
            t = p.to_local() if hasattr(p, "to_local") else p
            if "norm" in n:
                t.copy_(1 + 0.1 * torch.randn(t.shape, generator=gen, device=device))
            else:
                t.copy_(0.02 * torch.randn(t.shape, generator=gen, device=device))
    return mod


def dtensor_case(kind, ws, dims, mesh, device, gen):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    B, T, D, H = dims
    if kind == "llama_mlp_sp":
        mod = FFNBlock(D, H).to(device, BF16)
        parallelize_module(mod, mesh, {
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        })
        _init(mod, gen, device)
        x = torch.randn(B, T // ws, D, generator=gen, device=device).to(BF16)
        return mod, x, "torchtitan Llama FFN block plan (SequenceParallel norm, Colwise w1/w3, Rowwise w2 " \
                       "to Shard(1)), h [B, T/ws, D] sharded along the sequence"
    lin = {"colwise_seq": (D, H), "colwise_2d": (D, H), "rowwise_seq": (H, D), "rowwise_2d": (H, D),
           "rowwise_replicate": (H, D)}[kind]
    mod = nn.Linear(*lin, bias=False).to(device, BF16)
    if kind == "colwise_seq":
        style, x = ColwiseParallel(input_layouts=Shard(1)), torch.randn(B, T // ws, D, generator=gen, device=device)
    elif kind == "colwise_2d":
        style, x = ColwiseParallel(input_layouts=Shard(0)), torch.randn(B * T // ws, D, generator=gen, device=device)
    elif kind == "rowwise_seq":
        style, x = RowwiseParallel(output_layouts=Shard(1)), torch.randn(B, T, H // ws, generator=gen, device=device)
    elif kind == "rowwise_2d":
        style, x = RowwiseParallel(output_layouts=Shard(0)), torch.randn(B * T, H // ws, generator=gen, device=device)
    else:
        style, x = RowwiseParallel(), torch.randn(B, T, H // ws, generator=gen, device=device)
    parallelize_module(mod, mesh, style)
    _init(mod, gen, device)
    return mod, x.to(BF16), f"nn.Linear({lin[0]}, {lin[1]}) under {type(style).__name__} " \
                            f"(input {getattr(style, 'input_layouts', None)}, output {getattr(style, 'output_layouts', None)})"


class F8Colwise(nn.Module):
    """Sequence-parallel column-parallel float8 linear: bf16 x [B, T/ws, K] gathered along dim 1
    (all_gather_tensor_autograd), then a torchao recipe on the gathered x (scales replicated)."""

    def __init__(self, fn, K, N_local, group):
        super().__init__()
        self.fn, self.group = fn, group
        self.weight = nn.Parameter(torch.empty(N_local, K, dtype=BF16))

    def forward(self, x):
        from torch.distributed import _functional_collectives as funcol
        xg = funcol.all_gather_tensor_autograd(x, 1, self.group)
        out = self.fn.apply(xg.reshape(-1, xg.shape[-1]), self.weight)
        return out.reshape(*xg.shape[:-1], out.shape[-1])


class F8Rowwise(nn.Module):
    """Row-parallel float8 linear: x [B, T, K/ws], a torchao recipe, the partial [B, T, N]
    reduce-scattered along the sequence (reduce_scatter_tensor_autograd, dim 1)."""

    def __init__(self, fn, K_local, N, group):
        super().__init__()
        self.fn, self.group = fn, group
        self.weight = nn.Parameter(torch.empty(N, K_local, dtype=BF16))

    def forward(self, x):
        from torch.distributed import _functional_collectives as funcol
        out = self.fn.apply(x.reshape(-1, x.shape[-1]), self.weight).reshape(*x.shape[:-1], -1)
        return funcol.reduce_scatter_tensor_autograd(out, "sum", 1, self.group)


class F8GatherFloat8(nn.Module):
    """Column-parallel float8 linear that gathers float8 (inference): x [M/ws, K] quantized on its
    rank, rowwise (scales [M/ws, 1], gathered with the rows: sharded scales) or tensorwise (the
    amax all-reduced with max over the ranks first, as torchao's Float8ColwiseParallel does);
    w [N_local, K] quantized the same way; _scaled_mm to bf16 [M, N_local]."""

    def __init__(self, rowwise, K, N_local, group, ws):
        super().__init__()
        self.rowwise, self.group, self.ws = rowwise, group, ws
        self.weight = nn.Parameter(torch.empty(N_local, K, dtype=BF16), requires_grad=False)

    def forward(self, x):
        from torch.distributed import _functional_collectives as funcol
        if self.rowwise:
            xq, sx = models._to_float8(x, E4M3, axiswise_dim=-1)
            wq, sw = models._to_float8(self.weight, E4M3, axiswise_dim=-1)
            xg = funcol.all_gather_tensor(xq, 0, self.group)
            sg = funcol.all_gather_tensor(sx.reciprocal(), 0, self.group)
            return torch._scaled_mm(xg, wq.t(), scale_a=sg, scale_b=sw.t().reciprocal(), out_dtype=BF16)
        amax = funcol.all_reduce(torch.max(torch.abs(x)).float(), "max", self.group)
        scale = models._amax_to_scale(amax, E4M3)
        m = torch.finfo(E4M3).max
        xq = (x.to(torch.float32) * scale).clamp(min=-m, max=m).to(E4M3)
        wq, sw = models._to_float8(self.weight, E4M3, torch_max=True)
        xg = funcol.all_gather_tensor(xq, 0, self.group)
        return torch._scaled_mm(xg, wq.t(), scale_a=scale.reciprocal(), scale_b=sw.reciprocal(), out_dtype=BF16)


def float8_case(kind, ws, dims, device, gen):
    B, T, D, H = dims
    group = dist.group.WORLD
    if kind in ("f8_rowwise_colwise", "f8_tensorwise_colwise"):
        fn = models.Float8LinearRowwise if "rowwise" in kind else models.Float8LinearTensorwiseMax
        mod = F8Colwise(fn, D, H // ws, group)
        x = torch.randn(B, T // ws, D, generator=gen, device=device)
        what = f"bf16 x gathered along dim 1, then {fn.__name__} (traces/capture/models.py)"
    elif kind == "f8_rowwise_rowwise":
        mod = F8Rowwise(models.Float8LinearRowwise, H // ws, D, group)
        x = torch.randn(B, T, H // ws, generator=gen, device=device)
        what = "Float8LinearRowwise on the K shard, reduce-scatter along dim 1"
    else:
        mod = F8GatherFloat8(kind == "f8_rowwise_gather_fp8", D, H // ws, group, ws)
        x = torch.randn(B * T // ws, D, generator=gen, device=device)
        what = "x quantized on its rank, float8 gathered, _scaled_mm (" + \
               ("rowwise, scales gathered with the rows" if mod.rowwise else "tensorwise, amax all-reduced (max)") + ")"
    mod = _init(mod.to(device), gen, device)
    return mod, x.to(BF16), what


WORKLOADS = ["llama_mlp_sp", "colwise_seq", "rowwise_seq", "colwise_2d", "rowwise_2d", "rowwise_replicate",
             "f8_rowwise_colwise", "f8_tensorwise_colwise", "f8_rowwise_rowwise", "f8_rowwise_gather_fp8",
             "f8_tensorwise_gather_fp8"]
REALISTIC = {"llama_mlp_sp": [(LLAMA8B, (2, 4, 8)), (LLAMA70B, (4, 8))],
             "f8_rowwise_colwise": [(LLAMA8B, (8,))], "f8_tensorwise_colwise": [(LLAMA8B, (8,))],
             "f8_rowwise_rowwise": [(LLAMA8B, (8,))]}
INFERENCE = ("f8_rowwise_gather_fp8", "f8_tensorwise_gather_fp8")


def capture(kind, ws, dims, out_dir, seed, device):
    """One training step (or an inference call) of one rank's module through the backend; returns
    the trace names written. The fake process group moves no data: no golden tensors, no eager
    check; each trace's world_size is set from its collectives' group size."""
    import torch._dynamo
    torch._dynamo.reset()
    mesh = init_world(ws)
    gen = torch.Generator(device=device).manual_seed(seed)
    if kind.startswith("f8_"):
        mod, x, what = float8_case(kind, ws, dims, device, gen)
    else:
        mod, x, what = dtensor_case(kind, ws, dims, mesh, device, gen)
    shape = "x".join(str(d) for d in dims)
    train = kind not in INFERENCE
    source = {"model": f"tensor parallel, world size {ws}: {what}; x {list(x.shape)} on this rank",
              "module": f"traces/capture/capture_tp.py:{kind}", "capture_seed": seed,
              "capture_command": " ".join(["python3", "traces/capture/capture_tp.py"] + sys.argv[1:]),
              "process_group": "torch.testing._internal.distributed.fake_pg (rank 0 of the world size)"}
    rb = ReplayBackend(out_dir, partitioner="min_cut", golden=False, name_prefix="",
                       name_format=f"tp_{kind}_ws{ws}_{{phase}}_{shape}", source=source, auto_write=False,
                       arg_names=["x"], module_name=type(mod).__name__, verbose=False)
    compiled = torch.compile(mod, backend=rb, dynamic=False, fullgraph=True)
    if train:
        leaf = x.detach().clone().requires_grad_(True)
        out = compiled(leaf)
        tan = torch.randn(out.shape, generator=gen, device=device).to(out.dtype)
        out.backward(tan)
    else:
        with torch.no_grad():
            compiled(x)
    names = rb.flush(extra_source={
        "eager_check": "not done: the fake process group moves no data (replay's reference simulates every rank)",
        "step": "one training step, backward with seeded random tangents" if train else "inference"})
    if rb.failed:
        raise RuntimeError("; ".join(f"{n}: {m}" for n, m in rb.failed))
    for name, path in rb.written:
        with open(path) as f:
            t = json.load(f)
        sizes = set()
        for n in t["nodes"]:
            if n["op"].startswith("_c10d_functional.") and "wait_tensor" not in n["op"] and "all_reduce" not in n["op"]:
                sizes.add(n["args"][2] if "reduce_scatter" in n["op"] else n["args"][1])
        if len(sizes) > 1:
            raise RuntimeError(f"{name}: collectives over groups of sizes {sorted(sizes)}")
        t["world_size"] = ws
        for i in t["inputs"]:  # a shard left uninitialized (no collective ran) shows here
            st = i.get("stats") or {}
            if not all(abs(st.get(k, 0)) < 1e4 for k in ("mean", "std", "min", "max")):
                raise RuntimeError(f"{name}: input {i['id']} has statistics {st}: uninitialized memory?")
        write_json(path, t)
        ops = sorted({n["op"] for n in t["nodes"]})
        print(f"  {name}: {len(t['nodes'])} nodes; ops {ops}", flush=True)
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", action="append")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    try:
        import torch._functorch.config as functorch_config
        functorch_config.donated_buffer = False
    except Exception:
        pass
    jobs = []
    for kind in WORKLOADS:
        if args.only and kind not in args.only:
            continue
        for ws in (2, 4, 8):
            jobs.append((kind, ws, SMALL_F8 if kind.startswith("f8_") else SMALL))
        if not args.small:
            for dims, wss in REALISTIC.get(kind, []):
                jobs += [(kind, ws, dims) for ws in wss]
    print(f"torch {torch.__version__}; {len(jobs)} captures", flush=True)
    failed, written = [], []
    for k, (kind, ws, dims) in enumerate(jobs):
        t0 = time.time()
        print(f"[{k + 1}/{len(jobs)}] {kind} ws {ws} {dims}", flush=True)
        try:
            written += capture(kind, ws, dims, args.out, args.seed, "cuda")
            print(f"  ({time.time() - t0:.1f} s)", flush=True)
        except Exception as e:
            traceback.print_exc()
            failed.append((kind, ws, dims, f"{type(e).__name__}: {e}"))
        torch.cuda.empty_cache()
    if dist.is_initialized():
        dist.destroy_process_group()
    print(f"\n{len(jobs) - len(failed)}/{len(jobs)} captures succeeded, {len(written)} traces in {args.out}")
    for f in failed:
        print(f"  FAILED {f[0]} ws {f[1]} {f[2]}: {f[3][:600]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
