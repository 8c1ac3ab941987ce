#!/usr/bin/env python3
"""A small training script, as a user would write it, to try capture_script.py on:

    python3 traces/capture/capture_script.py --out /tmp/t --golden -- \
        traces/capture/examples/train_tiny.py --graph-break
    python3 traces/capture/capture_script.py --out /tmp/t2 --compile-modules Block -- \
        traces/capture/examples/train_tiny.py --no-compile

Pre-norm blocks (LayerNorm -> Linear -> GELU -> Linear, residual) on [2, 8, 64] bf16, AdamW,
a few steps; --graph-break puts torch._dynamo.graph_break() between the blocks (two graphs).
"""
import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.proj(torch.nn.functional.gelu(self.fc(self.ln(x))))


class Tiny(nn.Module):
    def __init__(self, dim, n_blocks, graph_break):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(n_blocks))
        self.graph_break = graph_break

    def forward(self, x):
        for i, b in enumerate(self.blocks):
            if self.graph_break and i > 0:
                torch._dynamo.graph_break()
            x = b(x)
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--graph-break", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = Tiny(64, 2, args.graph_break).to(device=device, dtype=torch.bfloat16)
    if not args.no_compile:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        x = torch.randn(2, 8, 64, device=device, dtype=torch.bfloat16)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}: loss {loss.item():.4f}")
    with torch.no_grad():
        print("eval loss", model(torch.randn(2, 8, 64, device=device, dtype=torch.bfloat16)).float().pow(2).mean().item())


if __name__ == "__main__":
    main()
