#!/usr/bin/env python3
"""Norm graphs of Hugging Face `transformers` model families, captured through backend.py.

Each norm class is imported from `transformers.models.<family>.modeling_<family>` (no network:
modules are built from their constructors, never from_pretrained), set to bf16 with perturbed
weights (1 + 0.1·N; (1 + w) families around 0; biases 0.1·N), and run for one training step
(forward, backward with seeded random tangents) under
`torch.compile(norm, backend=ReplayBackend(...), dynamic=False, fullgraph=True)`, once per
partitioner (Inductor's min-cut and the default one), at a small shape with golden tensors and a
realistic one without. The compiled step is compared with eager autograd (source.eager_check).

Writes <out>/<family>_<variant>_{mincut,default}_train_{fwd,bwd}_<shape>.json (+ .safetensors for
the small shape). A family whose class is missing from the installed transformers is reported and
skipped; the exit status is 1 if any capture failed or was skipped.

    python3 traces/capture/capture_hf_norms.py --out traces/byog [--only qwen3] [--small] [--list]
"""
import argparse
import importlib
import os
import sys
import time
import traceback

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backend import capture_module_step, sanitize  # noqa: E402

BF16 = torch.bfloat16
SMALL_ROW, BIG_ROW = (2, 8, 256), (2, 4096, 4096)
SMALL_HEAD, BIG_HEAD = (2, 8, 4, 64), (2, 4096, 32, 128)


def hf_class(family, cls_name):
    """transformers.models.<family>.modeling_<family>.<cls_name>; raises ImportError with a clear
    message when the installed transformers lacks it."""
    mod_name = f"transformers.models.{family}.modeling_{family}"
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:
        raise ImportError(f"{mod_name} cannot be imported ({type(e).__name__}: {e})") from e
    cls = getattr(mod, cls_name, None)
    if cls is None:
        raise ImportError(f"{mod_name} has no {cls_name} (transformers {_tf_version()})")
    return cls


def _tf_version():
    try:
        import transformers
        return transformers.__version__
    except Exception:
        return "not installed"


# --- the modules around a norm -------------------------------------------------------------------------


class HeadNorm(nn.Module):
    """Qwen3/Gemma3 attention's per-head norm as the attention writes it:
    `self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)`, starting at the
    projection's output [B, T, H*D] (the projection itself is a GEMM workload)."""

    def __init__(self, norm, num_heads, head_dim):
        super().__init__()
        self.q_norm = norm
        self.num_heads, self.head_dim = num_heads, head_dim

    def forward(self, q):
        hidden_shape = (*q.shape[:-1], -1, self.head_dim)
        return self.q_norm(q.view(hidden_shape)).transpose(1, 2)


class AddNorm(nn.Module):
    """The residual add before a decoder layer's norm, as HF decoder layers (and fused add-norm
    kernels) see it: `h = x + residual; return norm(h), h` (the sum is the next residual)."""

    def __init__(self, norm):
        super().__init__()
        self.norm = norm

    def forward(self, x, residual):
        h = x + residual
        return self.norm(h), h


def _buffer_eps(norm, eps):
    """The same norm with its eps attribute turned into a 0-dim float32 buffer (as some
    checkpoints/ports keep it), so the graph takes eps as an input."""
    attr = "variance_epsilon" if hasattr(norm, "variance_epsilon") else "eps"
    delattr(norm, attr)
    norm.register_buffer(attr, torch.tensor(eps, dtype=torch.float32, device=next(norm.parameters()).device))
    return norm


# --- the catalogue ----------------------------------------------------------------------------------------

# (family, variant, class or None for nn.LayerNorm, eps, kind, note)
#   kind: "row" (x [B,T,C]), "head" (per-head on a [B,T,H,D] view), "add" (residual add + norm),
#         "buffer_eps"; unit_offset: the (1 + w) weight of the Gemma family
NORMS = [
    ("llama", "rmsnorm", "LlamaRMSNorm", 1e-5, "row", "Llama-3 rms_norm_eps 1e-5"),
    ("mistral", "rmsnorm", "MistralRMSNorm", 1e-5, "row", "Mistral-7B rms_norm_eps 1e-5"),
    ("qwen2", "rmsnorm", "Qwen2RMSNorm", 1e-6, "row", "Qwen2 rms_norm_eps 1e-6"),
    ("qwen3", "rmsnorm", "Qwen3RMSNorm", 1e-6, "row", "Qwen3 rms_norm_eps 1e-6"),
    ("qwen3", "qk_norm", "Qwen3RMSNorm", 1e-6, "head", "Qwen3Attention q_norm over head_dim of the [B,T,H,D] view, "
     "then transpose(1, 2)"),
    ("gemma", "rmsnorm", "GemmaRMSNorm", 1e-6, "row", "Gemma RMSNorm: float32 throughout, * (1 + weight)"),
    ("gemma2", "rmsnorm", "Gemma2RMSNorm", 1e-6, "row", "Gemma2 RMSNorm, * (1 + weight)"),
    ("gemma3", "rmsnorm", "Gemma3RMSNorm", 1e-6, "row", "Gemma3 RMSNorm, * (1 + weight)"),
    ("gemma3", "qk_norm", "Gemma3RMSNorm", 1e-6, "head", "Gemma3Attention q_norm over head_dim, * (1 + weight)"),
    ("phi3", "rmsnorm", "Phi3RMSNorm", 1e-5, "row", "Phi-3 rms_norm_eps 1e-5"),
    ("olmo", "layernorm", "OlmoLayerNorm", None, "row", "OLMo LayerNorm without affine (F.layer_norm on float32, "
     "eps 1e-5, cast back)"),
    ("olmo2", "rmsnorm", "Olmo2RMSNorm", 1e-6, "row", "OLMo2 RMSNorm: weight applied in float32, then the cast"),
    ("cohere", "layernorm", "CohereLayerNorm", 1e-5, "row", "Cohere LayerNorm: mean-subtracted, weight, no bias"),
    ("gpt2", "layernorm", None, 1e-5, "row", "GPT-2 ln_1/ln_2/ln_f: nn.LayerNorm(n_embd, eps=layer_norm_epsilon) "
     "with bias"),
    ("t5", "layernorm", "T5LayerNorm", 1e-6, "row", "T5LayerNorm: RMS norm without mean subtraction, cast to the "
     "weight's dtype before the weight"),
    ("stablelm", "layernorm", None, 1e-5, "row", "StableLM decoder input_layernorm: nn.LayerNorm(hidden, "
     "eps=layer_norm_eps) with bias"),
    ("deepseek_v3", "rmsnorm", "DeepseekV3RMSNorm", 1e-6, "row", "DeepSeek-V3 rms_norm_eps 1e-6"),
    ("llama", "add_rmsnorm", "LlamaRMSNorm", 1e-5, "add", "residual add then LlamaRMSNorm; returns (norm(h), h)"),
    ("gpt2", "add_layernorm", None, 1e-5, "add", "residual add then nn.LayerNorm; returns (norm(h), h)"),
    ("llama", "rmsnorm_eps_buffer", "LlamaRMSNorm", 1e-6, "buffer_eps", "LlamaRMSNorm whose variance_epsilon is a "
     "0-dim float32 buffer (a graph input, role param, no gradient)"),
]

UNIT_OFFSET = {"gemma", "gemma2", "gemma3"}


def _shape_str(shape):
    return "x".join(map(str, shape))


def build(spec, shape, device, seed):
    """(module, inputs, arg names, source dict) of one catalogue entry at one shape."""
    family, variant, cls_name, eps, kind, note = spec
    gen = torch.Generator(device=device).manual_seed(seed)
    C = shape[-1] if kind != "head" else shape[-1]
    if cls_name is None:
        norm = nn.LayerNorm(C, eps=eps)
        where = "torch.nn.LayerNorm"
    else:
        cls = hf_class(family, cls_name)
        norm = cls(C) if eps is None else cls(C, eps)
        where = f"transformers.models.{family}.modeling_{family}.{cls_name}"
    norm = norm.to(device=device, dtype=BF16)
    with torch.no_grad():  # stand in for trained weights (a kernel dropping the affine step must show)
        for n, p in norm.named_parameters():
            noise = torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32) * 0.1
            if n.endswith("bias") or family in UNIT_OFFSET:
                p.copy_(noise)
            else:
                p.copy_(1.0 + noise)
    if kind == "buffer_eps":
        norm = _buffer_eps(norm, eps)
    if kind == "head":
        B, T, H, D = shape
        mod = HeadNorm(norm, H, D)
        inputs = [torch.randn(B, T, H * D, generator=gen, device=device, dtype=torch.float32).to(BF16)]
        names = ["q"]
    elif kind == "add":
        mod = AddNorm(norm)
        inputs = [torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(BF16),
                  torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(BF16)]
        names = ["x", "residual"]
    else:
        mod = norm
        inputs = [torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(BF16)]
        names = ["x"]
    source = {
        "model": f"{family}: {note}; bf16 parameters and activations, {_shape_str(shape)}, training step",
        "module": f"{where} (transformers {_tf_version()})" + (f" inside capture_hf_norms.py:{type(mod).__name__}"
                                                               if mod is not norm else ""),
        "capture_seed": seed,
    }
    return mod, inputs, names, source


def jobs(only, small):
    out = []
    for spec in NORMS:
        family, variant, _, _, kind, _ = spec
        shapes = [(SMALL_HEAD, True), (BIG_HEAD, False)] if kind == "head" else [(SMALL_ROW, True), (BIG_ROW, False)]
        for part in ("min_cut", "default"):
            for shape, golden in shapes:
                if small and not golden:
                    continue
                pn = "mincut" if part == "min_cut" else "default"
                base = f"{family}_{variant}_{pn}_train_{{phase}}_{_shape_str(shape)}"
                if only and not any(o == family or base.startswith(o) or f"{family}_{variant}".startswith(o)
                                    for o in only):
                    continue
                out.append((spec, part, shape, golden, base))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output folder")
    ap.add_argument("--only", action="append", help="family or <family>_<variant> prefix (repeatable)")
    ap.add_argument("--small", action="store_true", help="only the small (golden) shapes")
    ap.add_argument("--list", action="store_true", help="print the trace names and exit")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    todo = jobs(args.only, args.small)
    if args.list:
        for j in todo:
            print(j[4].format(phase="fwd"))
            print(j[4].format(phase="bwd"))
        return 0
    if not args.out:
        ap.error("--out is required")
    os.makedirs(args.out, exist_ok=True)
    try:
        import torch._functorch.config as functorch_config
        functorch_config.donated_buffer = False
    except Exception:
        pass
    print(f"torch {torch.__version__}, transformers {_tf_version()}, device {args.device}; {len(todo)} captures",
          flush=True)
    written, failed, mismatched = [], [], []
    for k, (spec, part, shape, golden, base) in enumerate(todo):
        label = base.format(phase="*")
        print(f"[{k + 1}/{len(todo)}] {label}", flush=True)
        t0 = time.time()
        try:
            mod, inputs, names, source = build(spec, shape, args.device, args.seed)
            source["capture_command"] = " ".join(["python3", "traces/capture/capture_hf_norms.py"] + sys.argv[1:])
            got, ok, check = capture_module_step(mod, inputs, names, args.out, part, golden, base, source=source,
                                                 fullgraph=True, tangent_seed=args.seed + 1)
            want = {base.format(phase="fwd"), base.format(phase="bwd")}
            if set(got) != want:
                raise RuntimeError(f"expected traces {sorted(want)}, the backend wrote {got}")
            written += got
            if not ok:
                mismatched.append(label)
            print(f"  ({time.time() - t0:.1f} s)", flush=True)
        except Exception as e:
            traceback.print_exc()
            print(f"FAILED {label}: {type(e).__name__}: {e}", flush=True)
            failed.append((label, f"{type(e).__name__}: {e}"))
        finally:
            if args.device == "cuda":
                torch.cuda.empty_cache()
    print(f"\n{len(todo) - len(failed)}/{len(todo)} captures succeeded, {len(written)} traces in {args.out}")
    for label in mismatched:
        print(f"  EAGER MISMATCH {label}")
    for label, msg in failed:
        print(f"  FAILED {label}: {msg[:400]}")
    return 1 if failed or mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
