#!/usr/bin/env python3
"""A Hugging Face `transformers` decoder layer's training step, captured through backend.py.

Qwen3DecoderLayer and LlamaDecoderLayer at a small config (hidden 256, 4 heads, 2 kv heads, head
dim 64, intermediate 512, seq 64, batch 2, bf16, attention implementation "sdpa" set
explicitly), built from the config (no network, no from_pretrained), norm weights perturbed. The
rotary embedding (cos, sin) is computed outside the compiled region, as the model does once per
forward, and passed in. One step: loss = output.float().pow(2).mean(), loss.backward(); once per
partitioner. The graphs hold attention (`aten._scaled_dot_product_*`), which the harness cuts
around.

Writes <out>/<model>_decoder_layer_{mincut,default}_train_{fwd,bwd}_2x64x256.json (golden
safetensors for the min-cut pair; --golden-all for both).

    python3 traces/capture/capture_hf_decoder.py --out traces/byog/decoder
"""
import argparse
import os
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backend import capture_module_step  # noqa: E402
from capture_hf_norms import hf_class, _tf_version  # noqa: E402

BF16 = torch.bfloat16
B, T, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 2, 64, 256, 4, 2, 64, 512


class DecoderStep(torch.nn.Module):
    """decoder_layer(hidden_states, position_embeddings=(cos, sin), causal, no cache) -> hidden_states."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, hidden_states, cos, sin):
        out = self.layer(hidden_states, attention_mask=None, position_embeddings=(cos, sin), use_cache=False)
        return out[0] if isinstance(out, tuple) else out


def build(model, device, seed):
    fam = {"qwen3": ("Qwen3Config", "Qwen3DecoderLayer", "Qwen3RotaryEmbedding"),
           "llama": ("LlamaConfig", "LlamaDecoderLayer", "LlamaRotaryEmbedding")}[model]
    import transformers
    cfg_cls = getattr(transformers, fam[0])
    cfg = cfg_cls(hidden_size=HIDDEN, intermediate_size=INTER, num_attention_heads=HEADS,
                  num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, num_hidden_layers=1, vocab_size=128,
                  max_position_embeddings=T, attn_implementation="sdpa")
    cfg._attn_implementation = "sdpa"
    if getattr(cfg, "_attn_implementation", None) != "sdpa":
        raise RuntimeError(f"could not set the attention implementation to sdpa ({cfg._attn_implementation})")
    layer = hf_class(model, fam[1])(cfg, layer_idx=0)
    rotary = hf_class(model, fam[2])(config=cfg)
    gen = torch.Generator(device=device).manual_seed(seed)
    layer = layer.to(device=device, dtype=BF16).train()
    rotary = rotary.to(device=device)
    with torch.no_grad():
        for n, p in layer.named_parameters():
            noise = torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32)
            if "norm" in n:
                p.copy_(1.0 + 0.1 * noise)
            else:
                p.copy_(0.02 * noise)
    x = torch.randn(B, T, HIDDEN, generator=gen, device=device, dtype=torch.float32).to(BF16)
    pos = torch.arange(T, device=device).unsqueeze(0).expand(B, T)
    with torch.no_grad():
        cos, sin = rotary(x, pos)
    source = {
        "model": (f"{model}: {fam[1]} (transformers {_tf_version()}), hidden {HIDDEN}, {HEADS} heads, {KV_HEADS} kv "
                  f"heads, head_dim {HEAD_DIM}, intermediate {INTER}, [B, T] = [{B}, {T}], bf16, attention "
                  "implementation sdpa (causal, no mask), weights 0.02·N, norm weights 1 + 0.1·N; training step "
                  "loss = out.float().pow(2).mean()"),
        "module": f"transformers.models.{model}.modeling_{model}.{fam[1]} inside capture_hf_decoder.py:DecoderStep",
        "capture_seed": seed,
    }
    return DecoderStep(layer), [x, cos.to(BF16), sin.to(BF16)], ["hidden_states", "cos", "sin"], source


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="qwen3,llama")
    ap.add_argument("--golden", default="qwen3", help="models whose min-cut capture gets golden tensors "
                    "(comma-separated; about 6 MB each)")
    ap.add_argument("--golden-all", action="store_true", help="golden tensors for the default partitioner too")
    ap.add_argument("--flash", default="", help="models also captured with sdpa restricted to flash attention "
                    "(comma-separated); fails on PyTorch 2.11: flash attention saves a uint64 RNG state for the "
                    "backward, a dtype the format lacks")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    failed = []
    from torch.nn.attention import SDPBackend, sdpa_kernel
    runs = [(m, None) for m in args.models.split(",")] + [(m, "flash") for m in args.flash.split(",") if m]
    for model, sdpa in runs:
        for part in ("min_cut", "default"):
            pn = "mincut" if part == "min_cut" else "default"
            tag = "_flash" if sdpa else ""
            base = f"{model}_decoder_layer{tag}_{pn}_train_{{phase}}_{B}x{T}x{HIDDEN}"
            print(f"{base.format(phase='*')}", flush=True)
            t0 = time.time()
            try:
                mod, inputs, names, source = build(model, args.device, args.seed)
                source["capture_command"] = " ".join(["python3", "traces/capture/capture_hf_decoder.py"] + sys.argv[1:])
                if sdpa:
                    source["model"] += "; sdpa restricted to SDPBackend.FLASH_ATTENTION (torch.nn.attention.sdpa_kernel)"
                else:
                    source["model"] += "; sdpa backend as PyTorch picks it on this GPU"
                golden = not sdpa and model in args.golden.split(",") and (part == "min_cut" or args.golden_all)
                ctx = (lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])) if sdpa else None
                got, ok, _ = capture_module_step(
                    mod, inputs, names, args.out, part, golden, base, source=source, context=ctx,
                    loss_fn=lambda outs: outs[0].float().pow(2).mean(), fullgraph=False,
                    requires_grad=[True, False, False])
                print(f"  wrote {got} ({time.time() - t0:.1f} s)", flush=True)
                if not ok:
                    failed.append((base, "eager mismatch"))
            except Exception as e:
                traceback.print_exc()
                failed.append((base, f"{type(e).__name__}: {e}"))
    for b, m in failed:
        print(f"FAILED {b}: {m[:500]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
