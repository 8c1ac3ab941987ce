#!/usr/bin/env python3
"""Rotary position embeddings of Hugging Face `transformers` model families, captured through
backend.py (the RoPE workloads of issue 28, as model code nobody on the team wrote them).

Each entry starts where the attention module has its projections' output and ends with the
rotated q and k (and v where the layout splits it out of a fused projection), as the attention
hands them to scaled_dot_product_attention: the family's own `apply_rotary_pos_emb` (and rotary
embedding module where the graph computes cos/sin from inv_freq), imported from
`transformers.models.<family>.modeling_<family>`. bf16 activations; one training step (forward,
backward with seeded random tangents) under torch.compile with the ReplayBackend, once per
partitioner, at a small shape with golden tensors (min-cut only) and a realistic one without.

    llama_rope_table      Llama: q [B,T,H,D], k [B,T,G,D] (GQA) transposed to [B,H,T,D], cos/sin
                          given (bf16, as LlamaModel passes position_embeddings), rotate-half
    llama_rope_inv_freq   Llama: cos/sin computed in the graph by LlamaRotaryEmbedding from its
                          inv_freq buffer and position_ids (float32 math, cast to bf16)
    gptj_rope             GPT-J: interleaved pairs (rotate_every_two), partial rotary (rotary_dim
                          64 of head 256), sin/cos gathered from embed_positions by position_ids
    gpt_neox_rope         GPT-NeoX / Pythia: fused qkv [B,T,H*3*D] viewed [B,T,H,3D] and split per
                          head, partial rotary (rotary_pct 0.25), cos/sin from the rotary module
    phi3_rope             Phi-3: fused qkv_proj output split along the last dim into q, k, v
                          (GQA), rotate-half
    cohere_rope           Cohere: interleaved rotate_half (repeat_interleave'd cos/sin), math in
                          float32, cast back

Writes <out>/<name>_{mincut,default}_train_{fwd,bwd}_<B>x<T>x<H>x<D>.json (+ .safetensors for the
small min-cut capture). Exit status 1 if any capture failed.

    python3 traces/capture/capture_hf_rope.py --out traces/byog/rope [--only gptj_rope] [--small]
"""
import argparse
import importlib
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backend import capture_module_step  # noqa: E402
from capture_jobs import run_capture_jobs  # noqa: E402
from capture_hf_norms import _tf_version  # noqa: E402

BF16 = torch.bfloat16


def family(name):
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


def config(cls_name, **kw):
    import transformers
    return getattr(transformers, cls_name)(**kw)


class LlamaRopeTable(nn.Module):
    """LlamaAttention.forward around apply_rotary_pos_emb, cos/sin given."""

    def __init__(self, head_dim):
        super().__init__()
        self.head_dim = head_dim
        self.rope_fn = family("llama").apply_rotary_pos_emb

    def forward(self, q, k, cos, sin):
        q = q.transpose(1, 2)
        k = k.transpose(1, 2)
        return self.rope_fn(q, k, cos, sin)


class LlamaRopeInvFreq(nn.Module):
    """LlamaRotaryEmbedding (inv_freq buffer, position_ids) then apply_rotary_pos_emb."""

    def __init__(self, cfg):
        super().__init__()
        m = family("llama")
        self.rotary = m.LlamaRotaryEmbedding(config=cfg)
        self.rope_fn = m.apply_rotary_pos_emb

    def forward(self, q, k, position_ids):
        cos, sin = self.rotary(q, position_ids)
        return self.rope_fn(q.transpose(1, 2), k.transpose(1, 2), cos, sin)


class GptjRope(nn.Module):
    """GPTJAttention.forward's rotary part: embed_positions[position_ids] split into sin, cos,
    rotary on the first rotary_dim of each head (interleaved pairs), the rest passed through."""

    def __init__(self, max_pos, rotary_dim):
        super().__init__()
        m = family("gptj")
        self.rotary_dim = rotary_dim
        self.register_buffer("embed_positions", m.create_sinusoidal_positions(max_pos, rotary_dim))
        self.rope_fn = m.apply_rotary_pos_emb

    def forward(self, q, k, position_ids):
        sincos = self.embed_positions[position_ids]
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        r = self.rotary_dim
        k_rot, k_pass = k[:, :, :, :r], k[:, :, :, r:]
        q_rot, q_pass = q[:, :, :, :r], q[:, :, :, r:]
        k = torch.cat([self.rope_fn(k_rot, sin, cos), k_pass], dim=-1)
        q = torch.cat([self.rope_fn(q_rot, sin, cos), q_pass], dim=-1)
        return q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3)


class GptNeoxRope(nn.Module):
    """GPTNeoXAttention.forward from the fused qkv: view [B,T,H,3D], transpose, chunk into q, k, v,
    partial rotary through apply_rotary_pos_emb with the rotary module's cos/sin."""

    def __init__(self, cfg, heads, head_dim):
        super().__init__()
        m = family("gpt_neox")
        self.rotary = m.GPTNeoXRotaryEmbedding(config=cfg)
        self.rope_fn = m.apply_rotary_pos_emb
        self.heads, self.head_dim = heads, head_dim

    def forward(self, qkv, position_ids):
        B, T, _ = qkv.shape
        qkv = qkv.view(B, T, -1, 3 * self.head_dim).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
        cos, sin = self.rotary(qkv, position_ids)
        q, k = self.rope_fn(q, k, cos, sin)
        return q, k, v


class Phi3Rope(nn.Module):
    """Phi3Attention.forward from qkv_proj's output: slices along the last dim into q, k, v,
    view/transpose, rotary with cos/sin given."""

    def __init__(self, heads, kv_heads, head_dim):
        super().__init__()
        self.rope_fn = family("phi3").apply_rotary_pos_emb
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim

    def forward(self, qkv, cos, sin):
        B, T, _ = qkv.shape
        qp = self.heads * self.head_dim
        kp = self.kv_heads * self.head_dim
        q = qkv[..., :qp].view(B, T, -1, self.head_dim).transpose(1, 2)
        k = qkv[..., qp:qp + kp].view(B, T, -1, self.head_dim).transpose(1, 2)
        v = qkv[..., qp + kp:].view(B, T, -1, self.head_dim).transpose(1, 2)
        q, k = self.rope_fn(q, k, cos, sin)
        return q, k, v


class CohereRope(nn.Module):
    """CohereAttention.forward's rotary part with the rotary module's (interleaved) cos/sin."""

    def __init__(self, cfg):
        super().__init__()
        m = family("cohere")
        self.rotary = m.CohereRotaryEmbedding(config=cfg)
        self.rope_fn = m.apply_rotary_pos_emb

    def forward(self, q, k, position_ids):
        cos, sin = self.rotary(q, position_ids)
        return self.rope_fn(q.transpose(1, 2), k.transpose(1, 2), cos, sin)


# (name, note, small (B, T, H, G, D), realistic (B, T, H, G, D))
ROPES = [
    ("llama_rope_table", "Llama-3-8B rotary, cos/sin given in bf16 (LlamaModel's position_embeddings)",
     (2, 8, 4, 2, 64), (1, 8192, 32, 8, 128)),
    ("llama_rope_inv_freq", "Llama-3-8B rotary, cos/sin computed in the graph (LlamaRotaryEmbedding, rope_theta "
     "500000)", (2, 8, 4, 2, 64), (1, 8192, 32, 8, 128)),
    ("gptj_rope", "GPT-J-6B rotary: interleaved pairs, rotary_dim 64 of head_dim 256, sincos table indexed "
     "by position_ids", (2, 8, 2, 2, 256), (1, 2048, 16, 16, 256)),
    ("gpt_neox_rope", "Pythia-6.9B rotary: fused qkv per head, rotary_pct 0.25 (32 of 128)", (2, 8, 4, 4, 64),
     (2, 2048, 32, 32, 128)),
    ("phi3_rope", "Phi-3-medium rotary: qkv_proj split along the last dim, GQA 40/10, head_dim 128",
     (2, 8, 4, 2, 64), (1, 4096, 40, 10, 128)),
    ("cohere_rope", "Command-R rotary: interleaved rotate_half, float32 math", (2, 8, 4, 2, 64),
     (1, 8192, 64, 8, 128)),
]


def build(entry, dims, device, seed):
    name, note, _, _ = entry
    B, T, H, G, D = dims
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(BF16)

    pos = torch.arange(T, device=device).unsqueeze(0).expand(B, T).contiguous()
    if name == "llama_rope_table":
        cfg = config("LlamaConfig", hidden_size=H * D, num_attention_heads=H, num_key_value_heads=G, head_dim=D,
                     rope_theta=500000.0, max_position_embeddings=T)
        rot = family("llama").LlamaRotaryEmbedding(config=cfg).to(device)
        with torch.no_grad():
            cos, sin = rot(randn(B, T, H * D), pos)
        mod, inputs, names = LlamaRopeTable(D), [randn(B, T, H, D), randn(B, T, G, D), cos.to(BF16), sin.to(BF16)], \
            ["q", "k", "cos", "sin"]
        rg = [True, True, False, False]
    elif name == "llama_rope_inv_freq":
        cfg = config("LlamaConfig", hidden_size=H * D, num_attention_heads=H, num_key_value_heads=G, head_dim=D,
                     rope_theta=500000.0, max_position_embeddings=T)
        mod, inputs, names = LlamaRopeInvFreq(cfg), [randn(B, T, H, D), randn(B, T, G, D), pos], ["q", "k", "position_ids"]
        rg = [True, True, False]
    elif name == "gptj_rope":
        mod, inputs, names = GptjRope(T, 64 if D >= 128 else D // 4), [randn(B, T, H, D), randn(B, T, G, D), pos], \
            ["q", "k", "position_ids"]
        rg = [True, True, False]
    elif name == "gpt_neox_rope":
        cfg = config("GPTNeoXConfig", hidden_size=H * D, num_attention_heads=H, rotary_pct=0.25,
                     max_position_embeddings=T)
        mod, inputs, names = GptNeoxRope(cfg, H, D), [randn(B, T, 3 * H * D), pos], ["qkv", "position_ids"]
        rg = [True, False]
    elif name == "phi3_rope":
        cfg = config("Phi3Config", hidden_size=H * D, num_attention_heads=H, num_key_value_heads=G,
                     max_position_embeddings=T)
        rot = family("phi3").Phi3RotaryEmbedding(config=cfg).to(device)
        with torch.no_grad():
            cos, sin = rot(randn(B, T, H * D), pos)
        mod, inputs, names = Phi3Rope(H, G, D), [randn(B, T, (H + 2 * G) * D), cos.to(BF16), sin.to(BF16)], \
            ["qkv", "cos", "sin"]
        rg = [True, False, False]
    elif name == "cohere_rope":
        cfg = config("CohereConfig", hidden_size=H * D, num_attention_heads=H, num_key_value_heads=G,
                     max_position_embeddings=T)
        mod, inputs, names = CohereRope(cfg), [randn(B, T, H, D), randn(B, T, G, D), pos], ["q", "k", "position_ids"]
        rg = [True, True, False]
    else:
        raise KeyError(name)
    mod = mod.to(device)
    source = {
        "model": f"{name}: {note}; bf16 activations, [B, T, H, G, D] = [{B}, {T}, {H}, {G}, {D}], training step",
        "module": f"{type(mod).__name__} in capture_hf_rope.py around transformers (transformers {_tf_version()})",
        "capture_seed": seed,
    }
    return mod, inputs, names, rg, source


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
    todo = []
    for entry in ROPES:
        if args.only and entry[0] not in args.only:
            continue
        for part in ("min_cut", "default"):
            for dims, small in ((entry[2], True), (entry[3], False)):
                if args.small and not small:
                    continue
                todo.append((entry, part, dims, small and part == "min_cut"))
    print(f"torch {torch.__version__}, transformers {_tf_version()}, device {args.device}; {len(todo)} captures",
          flush=True)
    jobs = []
    for entry, part, dims, golden in todo:
        B, T, H, G, D = dims
        pn = "mincut" if part == "min_cut" else "default"

        def make(entry=entry, dims=dims):
            return build(entry, dims, args.device, args.seed)

        jobs.append((f"{entry[0]}_{pn}_train_{{phase}}_{B}x{T}x{H}x{D}", part, golden, make))
    return run_capture_jobs(jobs, args.out, "traces/capture/capture_hf_rope.py", args.seed, capture_module_step,
                            torch.cuda.empty_cache if args.device == "cuda" else None)


if __name__ == "__main__":
    sys.exit(main())
