#!/usr/bin/env python3
"""Float8 training graphs (issue 27) captured through backend.py: torchao's float8 linear recipes as
a user's model calls them, and the amax reductions the float8 recipes compute of one tensor.

torchao is not installed on the GPU host, so the recipes are written out in
traces/capture/models.py after torchao's float8 code (float8_utils.py, float8_linear.py,
float8_ops.py): abs -> amax -> float64 -> clamp -> reciprocal scale -> mul -> clamp -> cast.

    tensorwise        torchao "tensorwise": x, w e4m3, grad_output e5m2, every scale one value;
                      the tensorwise amax written torch.max(torch.abs(x)) as torchao writes it
                      (aten.max.default)
    rowwise           torchao "rowwise": every operand e4m3, scaled along the GEMM's reduction dim
                      (scales [M, 1] and [1, N]); the backward's columnwise copies; scales as
                      Float8LinearConfig(round_scales_to_power_of_2=False) computes them
    rowwise_pow2      the same with the scales rounded down to powers of two (log2 -> floor ->
                      exp2), as torchao's "rowwise" recipe does by default
    rowwise_gw_hp     torchao "rowwise_with_gw_hp": x, w rowwise for the output; grad_input from a
                      rowwise grad_output and a TENSORWISE w (one abs(w) feeding a rowwise and a
                      tensorwise amax); grad_weight in bf16 (no float8)

Each recipe is captured as `Float8Linear` does it, x [B, T, K] reshaped to [B*T, K] around the
float8 GEMM (the reshape -> _scaled_mm -> reshape form), and the tensorwise and rowwise recipes
also on a 2-D x [M, K] (`_2d`). Shapes: a small golden one, and Llama-3-8B's projections at 8192
tokens (K 4096 -> N 14336, the MLP's w1/w3, and 14336 -> 4096, its w2). One training step
(forward, backward with seeded random tangents), once per partitioner.

    amax_row_tensor       x.abs() -> rowwise amax (dim -1, keepdim) and tensorwise amax (the seed
                          of PyTorch's "PT2 should leverage partial reductions"), x bf16 [M, N]
    amax_row_col_tensor   the same |x| reduced rowwise, columnwise and tensorwise (three
                          reductions of one abs: Inductor's reuse pass was wrong there until its
                          fix for PyTorch issue 178883)

The amax graphs are inference graphs (no grad): x [16384, 8192] as in the issue, and a small one.

Writes <out>/<name>_{mincut,default}_train_{fwd,bwd}_<shape>.json (float8 linears) and
<out>/<name>_{fwd}_<M>x<N>.json (amax graphs), + .safetensors for the small min-cut captures.
Exit status 1 if any capture failed.

    python3 traces/capture/capture_float8.py --out traces/byog/float8 [--only rowwise] [--small]
"""
import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backend import capture_module_step  # noqa: E402
from capture_jobs import run_capture_jobs  # noqa: E402
import models  # noqa: E402

BF16 = torch.bfloat16


class Float8Linear(nn.Module):
    """torchao Float8Linear.forward: the activation flattened to 2-D around the float8 matmul
    function, the output viewed back to the activation's leading dims. weight [N, K] bf16."""

    def __init__(self, fn, in_features, out_features):
        super().__init__()
        self.fn = fn
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=BF16))

    def forward(self, x):
        lead = x.shape[:-1]
        out = self.fn.apply(x.reshape(-1, x.shape[-1]), self.weight)
        return out.reshape(*lead, out.shape[-1])


class AmaxRowTensor(nn.Module):
    """The reductions of issue 27's seed: one |x|, its rowwise and tensorwise amax."""

    def forward(self, x):
        a = x.abs()
        return torch.amax(a, dim=-1, keepdim=True), torch.amax(a)


class AmaxRowColTensor(nn.Module):
    """One |x| reduced rowwise, columnwise and tensorwise (torch.max, as torchao writes it)."""

    def forward(self, x):
        a = x.abs()
        return torch.amax(a, dim=-1, keepdim=True), torch.amax(a, dim=0, keepdim=True), torch.max(a)


RECIPES = {
    "tensorwise": models.Float8LinearTensorwiseMax,
    "rowwise": models.Float8LinearRowwise,
    "rowwise_pow2": models.Float8LinearRowwisePow2,
    "rowwise_gw_hp": models.Float8LinearRowwiseGwHp,
}

# (name, recipe, two_d, small shape, realistic shapes); linear shapes (B, T, K, N) or 2-D (M, K, N)
LINEARS = [
    ("tensorwise", "tensorwise", False, (2, 8, 64, 32), [(1, 8192, 4096, 14336), (1, 8192, 14336, 4096)]),
    ("rowwise", "rowwise", False, (2, 8, 64, 32), [(1, 8192, 4096, 14336), (1, 8192, 14336, 4096)]),
    ("rowwise_pow2", "rowwise_pow2", False, (2, 8, 64, 32), [(1, 8192, 4096, 14336)]),
    ("rowwise_gw_hp", "rowwise_gw_hp", False, (2, 8, 64, 32), [(1, 8192, 4096, 14336), (1, 8192, 14336, 4096)]),
    ("tensorwise_2d", "tensorwise", True, (16, 64, 32), [(8192, 4096, 4096)]),
    ("rowwise_2d", "rowwise", True, (16, 64, 32), [(8192, 4096, 4096)]),
]
AMAX = [
    ("amax_row_tensor", AmaxRowTensor, (64, 96), (16384, 8192)),
    ("amax_row_col_tensor", AmaxRowColTensor, (64, 96), (16384, 8192)),
]


def build_linear(recipe, two_d, dims, device, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    *lead, K, N = dims
    mod = Float8Linear(RECIPES[recipe], K, N).to(device)
    with torch.no_grad():
        mod.weight.copy_((torch.randn(N, K, generator=gen, device=device) * 0.02).to(BF16))
    x = torch.randn(*lead, K, generator=gen, device=device).to(BF16)
    shape = "x".join(str(d) for d in dims)
    source = {
        "model": f"float8 linear, torchao recipe \"{recipe}\" (written out in traces/capture/models.py), "
                 f"x [{', '.join(str(d) for d in lead)}, {K}] bf16, weight [{N}, {K}] bf16 ~ 0.02 N(0, 1), "
                 f"{'2-D activation' if two_d else 'reshape -> _scaled_mm -> reshape (Float8Linear)'}, training step",
        "module": f"traces/capture/capture_float8.py:Float8Linear + models.py:{RECIPES[recipe].__name__}",
        "capture_seed": seed,
    }
    return mod, [x], ["x"], None, source, shape


def build_amax(cls, dims, device, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(*dims, generator=gen, device=device).to(BF16)
    source = {
        "model": f"{cls.__name__}: amax reductions of one |x|, x {list(dims)} bf16, inference",
        "module": f"traces/capture/capture_float8.py:{cls.__name__} (PyTorch issue \"PT2 should leverage "
                  "partial reductions\")",
        "capture_seed": seed,
    }
    return cls().to(device), [x], ["x"], [False], source


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--only", action="append", help="catalogue name (repeatable)")
    ap.add_argument("--small", action="store_true", help="only the small (golden) shapes")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    try:
        import torch._functorch.config as functorch_config
        functorch_config.donated_buffer = False
    except Exception:
        pass
    jobs = []
    for name, recipe, two_d, small, realistic in LINEARS:
        if args.only and name not in args.only:
            continue
        for part in ("min_cut", "default"):
            pn = "mincut" if part == "min_cut" else "default"
            for dims in [small] + ([] if args.small else realistic):
                golden = dims is small and part == "min_cut"

                def make(recipe=recipe, two_d=two_d, dims=dims):
                    mod, inputs, names, rg, source, _ = build_linear(recipe, two_d, dims, args.device, args.seed)
                    return mod, inputs, names, rg, source

                shape = "x".join(str(d) for d in dims)
                jobs.append((f"float8_{name}_{pn}_train_{{phase}}_{shape}", part, golden, make))
    for name, cls, small, realistic in AMAX:
        if args.only and name not in args.only:
            continue
        for dims in [small] + ([] if args.small else [realistic]):
            def make(cls=cls, dims=dims):
                return build_amax(cls, dims, args.device, args.seed)

            jobs.append((f"{name}_{{phase}}_{dims[0]}x{dims[1]}", "min_cut", dims is small, make))
    print(f"torch {torch.__version__}, device {args.device}; {len(jobs)} captures", flush=True)
    return run_capture_jobs(jobs, args.out, "traces/capture/capture_float8.py", args.seed, capture_module_step,
                            torch.cuda.empty_cache if args.device == "cuda" else None, max_msg=400)


if __name__ == "__main__":
    sys.exit(main())
