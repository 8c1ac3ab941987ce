#!/usr/bin/env python3
"""Linear layers and MLPs of Hugging Face `transformers` model families, captured through backend.py.

The GEMM workloads of issue 26 as model code nobody on the team wrote them: each module is built
from its constructor and a config (no network, no from_pretrained), set to bf16 with weights
0.02·N and biases 0.1·N, and run for one training step (forward, backward with seeded random
tangents) under `torch.compile(module, backend=ReplayBackend(...), fullgraph=True)`, once per
partitioner (Inductor's min-cut and the default one), at a small shape with golden tensors and a
realistic one (the model's own sizes) without. The compiled step is compared with eager autograd
(source.eager_check). Dropout is set to 0 (a training graph with dropout is another workload).

    gpt2_mlp         GPT2MLP: Conv1D c_fc ([in, out] weight, addmm) -> gelu_new (tanh) -> Conv1D c_proj
    gpt2_c_attn      GPT2Attention.c_attn alone: Conv1D hidden -> 3 * hidden with bias
    llama_mlp        LlamaMLP: down(silu(gate(x)) * up(x)), no bias
    gemma_mlp        GemmaMLP: down(gelu_tanh(gate(x)) * up(x)), no bias
    phi3_mlp         Phi3MLP: gate_up_proj (one GEMM over the concatenated weights), chunk, silu * up
    bert_intermediate  BertIntermediate: Linear + GELU (erf)
    qwen2_q_proj     Qwen2Attention.q_proj alone: nn.Linear with bias

Writes <out>/<name>_{mincut,default}_train_{fwd,bwd}_<tokens shape>x<hidden>.json (+ .safetensors for
the small shape of the min-cut capture; --golden-default for the default partitioner's too). A
module missing from the installed transformers is reported and skipped; the exit status is 1 if
any capture failed.

    python3 traces/capture/capture_hf_linears.py --out traces/byog/linear [--only llama_mlp] [--small]
"""
import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from backend import capture_module_step  # noqa: E402
from capture_jobs import run_capture_jobs  # noqa: E402
from capture_hf_norms import hf_class, _tf_version  # noqa: E402

BF16 = torch.bfloat16


class Projection(nn.Module):
    """One attention projection, as the attention module calls it on hidden_states [B, T, C]."""

    def __init__(self, proj):
        super().__init__()
        self.proj = proj

    def forward(self, x):
        return self.proj(x)


def _config(cls_name, **kw):
    import transformers
    return getattr(transformers, cls_name)(**kw)


def build_module(name, hidden, inter):
    """(module, where) of one catalogue entry for hidden size `hidden`, intermediate `inter`."""
    if name == "gpt2_mlp":
        cfg = _config("GPT2Config", n_embd=hidden, n_inner=inter, resid_pdrop=0.0, activation_function="gelu_new")
        return hf_class("gpt2", "GPT2MLP")(inter, cfg), "transformers.models.gpt2.modeling_gpt2.GPT2MLP"
    if name == "gpt2_c_attn":
        from transformers.pytorch_utils import Conv1D
        return Projection(Conv1D(3 * hidden, hidden)), "transformers.pytorch_utils.Conv1D (GPT2Attention.c_attn)"
    if name == "llama_mlp":
        cfg = _config("LlamaConfig", hidden_size=hidden, intermediate_size=inter, hidden_act="silu", mlp_bias=False)
        return hf_class("llama", "LlamaMLP")(cfg), "transformers.models.llama.modeling_llama.LlamaMLP"
    if name == "gemma_mlp":
        cfg = _config("GemmaConfig", hidden_size=hidden, intermediate_size=inter, hidden_activation="gelu_pytorch_tanh")
        return hf_class("gemma", "GemmaMLP")(cfg), "transformers.models.gemma.modeling_gemma.GemmaMLP"
    if name == "phi3_mlp":
        cfg = _config("Phi3Config", hidden_size=hidden, intermediate_size=inter, hidden_act="silu")
        return hf_class("phi3", "Phi3MLP")(cfg), "transformers.models.phi3.modeling_phi3.Phi3MLP"
    if name == "bert_intermediate":
        cfg = _config("BertConfig", hidden_size=hidden, intermediate_size=inter, hidden_act="gelu")
        return hf_class("bert", "BertIntermediate")(cfg), "transformers.models.bert.modeling_bert.BertIntermediate"
    if name == "qwen2_q_proj":
        return Projection(nn.Linear(hidden, hidden, bias=True)), "torch.nn.Linear(bias=True) (Qwen2Attention.q_proj)"
    raise KeyError(name)


# (name, note, small (B, T, hidden, inter), realistic (B, T, hidden, inter))
LINEARS = [
    ("gpt2_mlp", "GPT-2 medium MLP (n_embd 1024, n_inner 4096), Conv1D weights [in, out], gelu_new",
     (2, 8, 128, 256), (8, 1024, 1024, 4096)),
    ("gpt2_c_attn", "GPT-2 medium c_attn: Conv1D 1024 -> 3072 with bias", (2, 8, 128, 384), (8, 1024, 1024, 3072)),
    ("llama_mlp", "Llama-3-8B MLP (hidden 4096, intermediate 14336), SiLU gating", (2, 8, 128, 256),
     (1, 8192, 4096, 14336)),
    ("gemma_mlp", "Gemma-2B MLP (hidden 2048, intermediate 16384), gelu_pytorch_tanh gating", (2, 8, 128, 256),
     (1, 8192, 2048, 16384)),
    ("phi3_mlp", "Phi-3-mini MLP (hidden 3072, intermediate 8192), gate_up_proj fused, SiLU gating",
     (2, 8, 128, 256), (1, 8192, 3072, 8192)),
    ("bert_intermediate", "BERT-large intermediate (hidden 1024, intermediate 4096), GELU erf",
     (2, 8, 128, 256), (32, 512, 1024, 4096)),
    ("qwen2_q_proj", "Qwen2-7B q_proj (hidden 3584, bias)", (2, 8, 128, 128), (1, 8192, 3584, 3584)),
]


def build(entry, dims, device, seed):
    name, note, _, _ = entry
    B, T, hidden, inter = dims
    mod, where = build_module(name, hidden, inter)
    mod = mod.to(device=device, dtype=BF16).train()
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for n, p in mod.named_parameters():
            noise = torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32)
            p.copy_(0.1 * noise if n.endswith("bias") else 0.02 * noise)
    x = torch.randn(B, T, hidden, generator=gen, device=device, dtype=torch.float32).to(BF16)
    source = {
        "model": f"{name}: {note}; bf16, [B, T, C] = [{B}, {T}, {hidden}], intermediate {inter}, training step",
        "module": f"{where} (transformers {_tf_version()})",
        "capture_seed": seed,
    }
    return mod, [x], ["hidden_states"], source


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output folder")
    ap.add_argument("--only", action="append", help="catalogue name (repeatable)")
    ap.add_argument("--small", action="store_true", help="only the small (golden) shapes")
    ap.add_argument("--golden-default", action="store_true", help="golden tensors for the default partitioner's "
                    "small captures too (about 0.4 MB each)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    if not args.out:
        ap.error("--out is required")
    os.makedirs(args.out, exist_ok=True)
    try:
        import torch._functorch.config as functorch_config
        functorch_config.donated_buffer = False
    except Exception:
        pass
    todo = []
    for entry in LINEARS:
        if args.only and entry[0] not in args.only:
            continue
        for part in ("min_cut", "default"):
            for dims, small in ((entry[2], True), (entry[3], False)):
                golden = small
                if args.small and not small:
                    continue
                todo.append((entry, part, dims, golden and (part == "min_cut" or args.golden_default)))
    print(f"torch {torch.__version__}, transformers {_tf_version()}, device {args.device}; {len(todo)} captures",
          flush=True)
    jobs = []
    for entry, part, dims, golden in todo:
        B, T, hidden, _ = dims
        pn = "mincut" if part == "min_cut" else "default"

        def make(entry=entry, dims=dims):
            mod, inputs, names, source = build(entry, dims, args.device, args.seed)
            return mod, inputs, names, None, source

        jobs.append((f"{entry[0]}_{pn}_train_{{phase}}_{B}x{T}x{hidden}", part, golden, make))
    return run_capture_jobs(jobs, args.out, "traces/capture/capture_hf_linears.py", args.seed, capture_module_step,
                            torch.cuda.empty_cache if args.device == "cuda" else None, max_msg=400)


if __name__ == "__main__":
    sys.exit(main())
