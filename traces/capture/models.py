"""The modules whose training graphs capture.py records, re-implemented as each model's own code
writes them, and the builders that set up one training capture each.

A builder takes (shape, seed, device) and returns a TrainCase: the function to capture (it takes
the inputs positionally and returns a tuple of tensors), the input tensors (values only; the caller
makes the requires_grad leaves), their ids and roles, and the provenance strings.

Sources (read for this file):
- nanoGPT: karpathy/nanoGPT model.py (LayerNorm with optional bias, F.layer_norm eps 1e-5; MLP =
  c_fc Linear(C, 4C) -> nn.GELU() -> c_proj Linear(4C, C) -> nn.Dropout(config.dropout)).
- Meta Llama reference: meta-llama/llama llama/model.py (RMSNorm: x * rsqrt(mean(x^2) + eps) on
  x.float(), .type_as(x), times weight; apply_rotary_emb with complex freqs_cis; FeedForward
  w2(F.silu(w1(x)) * w3(x))).
- litgpt: Lightning-AI/litgpt litgpt/model.py (RMSNorm, apply_rope, CausalSelfAttention.forward's
  qkv split/view/transpose and partial rotary on the first rope_n_elem of each head,
  build_rope_cache returning float32 cos/sin, GroupedTopkRouter's F.linear in float32).
- Hugging Face transformers: models/llama/modeling_llama.py LlamaRMSNorm (hidden_states.to(float32),
  variance = pow(2).mean(-1, keepdim=True), * rsqrt(variance + eps), self.weight * h.to(input_dtype)).
- PyTorch PR 165370 ("[inductor] generate fused rms/layer norm bwd"): its benchmark's [576000, 384]
  LayerNorm and RMSNorm, the RMSNorm written as ../shared/peers/anchors.py writes it.
- torchao float8 training: pytorch/ao torchao/float8/float8_utils.py (tensor_to_amax,
  amax_to_scale in float64, to_fp8_saturated), float8_linear.py / float8_ops.py
  (matmul_with_hp_or_float8_args, addmm_float8_unwrapped: _scaled_mm with reciprocal scales).
"""
import math
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

BF16 = torch.bfloat16
E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2


@dataclass
class TrainCase:
    fn: Callable
    inputs: List[torch.Tensor]
    names: List[str]
    roles: List[str]                 # "activation" | "param"
    requires_grad: List[bool]
    source: dict
    random: bool = False             # random ops: no golden tensors, no eager comparison
    notes: List[str] = field(default_factory=list)


# --- modules ----------------------------------------------------------------------------------------


class NanoGPTLayerNorm(nn.Module):
    """nanoGPT model.py LayerNorm: 'LayerNorm but with an optional bias'."""

    def __init__(self, ndim, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class MetaLlamaRMSNorm(nn.Module):
    """meta-llama/llama model.py RMSNorm."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


class LitGPTRMSNorm(nn.Module):
    """litgpt/model.py RMSNorm (current form: the weight is applied in float32, then the cast)."""

    def __init__(self, size, dim=-1, eps=1e-6, add_unit_offset=False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.dim = dim
        self.add_unit_offset = add_unit_offset

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        # NOTE: the original RMSNorm paper implementation is not equivalent
        norm_x = torch.mean(x * x, dim=self.dim, keepdim=True)
        x_normed = x * torch.rsqrt(norm_x + self.eps)
        weight = (1 + self.weight) if self.add_unit_offset else self.weight
        return (x_normed * weight.float()).to(dtype=dtype)


class LlamaRMSNorm(nn.Module):
    """Hugging Face transformers LlamaRMSNorm (models/llama/modeling_llama.py): float32 statistics,
    the weight applied after the cast back to the input dtype, weight as the first operand."""

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


class AnchorRMSNorm(nn.Module):
    """The RMSNorm of PyTorch PR 165370's norm-backward benchmark, as ../shared/peers/anchors.py
    writes it: xf = x.float(); (xf * rsqrt(mean(xf^2) + 1e-6) * w.float()).to(x.dtype)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


class TensorEpsRMSNorm(nn.Module):
    """RMSNorm whose eps is a 0-dim float32 tensor (a buffer, passed to the graph as an input, as a
    lifted or learned eps arrives) instead of a Python float: rsqrt(mean(x^2) + eps_t)."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.register_buffer("eps", torch.tensor(eps, dtype=torch.float32))

    def forward(self, x):
        xf = x.float()
        ms = xf.pow(2).mean(-1, keepdim=True)
        return (xf * torch.rsqrt(ms + self.eps) * self.weight.float()).to(x.dtype)


class NanoGPTMLP(nn.Module):
    """nanoGPT model.py MLP (bias=True as GPT-2). gelu_approximate='none' is nanoGPT's nn.GELU();
    'tanh' is GPT-2's original gelu (Hugging Face gelu_new)."""

    def __init__(self, n_embd, bias=True, dropout=0.0, gelu_approximate="none"):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU(approximate=gelu_approximate)
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x


class LlamaFeedForward(nn.Module):
    """meta-llama/llama model.py FeedForward (SwiGLU, no bias)."""

    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def litgpt_apply_rope(x, cos, sin):
    """litgpt/model.py apply_rope."""
    if cos.dim() != 3:
        raise ValueError(f"cos must be three-dimensional, but shape is {cos.shape}")
    if cos.shape != sin.shape:
        raise ValueError(f"cos, sin must have same shape, but cos.shape={cos.shape}, sin.shape={sin.shape}")
    head_size_half = x.size(-1) // 2
    x1 = x[..., :head_size_half]  # (B, ..., T, head_size/2)
    x2 = x[..., head_size_half:]  # (B, ..., T, head_size/2)
    rotated = torch.cat((-x2, x1), dim=-1)  # (B, ..., T, head_size)
    dims_diff = x.dim() - cos.dim()
    if dims_diff > 0:
        # Ensure that shapes of `x`, `cos`, `sin` align
        new_shape = cos.shape[0:1] + (1,) * dims_diff + cos.shape[1:]
        cos = cos.view(*new_shape)
        sin = sin.view(*new_shape)
    roped = (x * cos) + (rotated * sin)
    return roped.to(dtype=x.dtype)


def litgpt_qkv_rope(qkv, cos, sin, n_head, n_query_groups, head_size, rope_n_elem):
    """litgpt/model.py CausalSelfAttention.forward from the fused qkv projection's output to the
    roped q, k and v that go into scaled_dot_product_attention (GPT.forward passes
    cos = self.cos[:T].unsqueeze(0): the unsqueeze is done here, the cache rows [:T] are the input)."""
    B, T, _ = qkv.size()
    cos = cos.unsqueeze(0)
    sin = sin.unsqueeze(0)
    query_size = n_head * head_size
    key_size = value_size = n_query_groups * head_size
    q, k, v = qkv.split((query_size, key_size, value_size), dim=-1)  # 3x(B, T, C*)
    q = q.view(B, T, n_head, head_size)  # (B, T, nh_q, hs)
    k = k.view(B, T, n_query_groups, head_size)  # (B, T, n_query_groups, hs)
    v = v.view(B, T, n_query_groups, head_size)  # (B, T, n_query_groups, hs)
    q = q.transpose(1, 2)  # (B, nh_q, T, hs)
    k = k.transpose(1, 2)  # (B, nh_k, T, hs)
    v = v.transpose(1, 2)  # (B, nh_v, T, hs)
    q_roped = litgpt_apply_rope(q[..., :rope_n_elem], cos, sin)
    k_roped = litgpt_apply_rope(k[..., :rope_n_elem], cos, sin)
    q = torch.cat((q_roped, q[..., rope_n_elem:]), dim=-1)  # (B, nh_q, T, hs)
    k = torch.cat((k_roped, k[..., rope_n_elem:]), dim=-1)  # (B, nh_k, T, hs)
    return q, k, v


def litgpt_build_rope_cache(seq_len, n_elem, device, base=10000, condense_ratio=1):
    """litgpt/model.py build_rope_cache without extra_config (standard RoPE): float32 cos, sin
    of shape (seq_len, n_elem)."""
    theta = 1.0 / (base ** (torch.arange(0, n_elem, 2, device=device).float() / n_elem))
    seq_idx = torch.arange(seq_len, device=device).float() / condense_ratio
    idx_theta = torch.outer(seq_idx, theta).repeat(1, 2)
    if idx_theta.shape[-1] > n_elem > 1:
        idx_theta = idx_theta[..., :n_elem]
    return torch.cos(idx_theta), torch.sin(idx_theta)


def meta_llama_apply_rotary_emb_real(xq, xk, cos, sin):
    """meta-llama/llama model.py apply_rotary_emb, with the complex product written in real
    arithmetic on the interleaved pairs (x0, x1) = (x[..., 2i], x[..., 2i+1]), so no complex dtype
    appears:  view_as_complex(xq.float().reshape(*shape[:-1], -1, 2)) * freqs_cis  ==
    (x0*cos - x1*sin) + i (x0*sin + x1*cos),  view_as_real(...).flatten(3).type_as(xq).
    cos, sin: (T, head_dim // 2) float32 (freqs_cis = polar(1, freqs) gives cos + i sin),
    reshaped for broadcast as reshape_for_broadcast does: (1, T, 1, head_dim // 2)."""

    def rot(x):
        xr = x.float().reshape(*x.shape[:-1], -1, 2)
        x0 = xr[..., 0]
        x1 = xr[..., 1]
        shape = [d if i == 1 or i == xr.ndim - 2 else 1 for i, d in enumerate(xr.shape[:-1])]
        c = cos.view(*shape)
        s = sin.view(*shape)
        out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
        return out.flatten(3).type_as(x)

    return rot(xq), rot(xk)


# --- float8 linear as torchao's float8 training writes it ------------------------------------------

EPS = 1e-12  # torchao/float8/float8_utils.py


def _tensor_to_amax(x, axiswise_dim=None, torch_max=False):
    """torchao float8_utils.tensor_to_amax (TENSORWISE, or AXISWISE with keepdim). torchao writes
    the tensorwise amax as torch.max(torch.abs(x)) (aten.max.default, torch_max=True); torch.amax
    over all dims (aten.amax.default) is the other form model code writes."""
    if axiswise_dim is None:
        return torch.max(torch.abs(x)) if torch_max else torch.amax(torch.abs(x))
    if x.dtype == torch.bfloat16:  # "Fix for bfloat16 precision amplification in amax_to_scale()"
        x = torch.abs(x).to(torch.float32)
    return torch.amax(torch.abs(x), dim=axiswise_dim, keepdim=True)


def _amax_to_scale(amax, float8_dtype, pow2=False):
    """torchao float8_utils.amax_to_scale; pow2: round_scales_to_power_of_2=True (the default of
    torchao's rowwise recipes), float8_utils._round_scale_down_to_power_of_2."""
    amax = amax.to(torch.float64)
    res = torch.finfo(float8_dtype).max / torch.clamp(amax, min=EPS)
    res = res.to(torch.float32)
    if pow2:
        res = torch.exp2(torch.floor(torch.log2(res)))
    return res


def _to_float8(x, float8_dtype, axiswise_dim=None, torch_max=False, pow2=False):
    """hp_tensor_and_scale_to_float8 + to_fp8_saturated: (x.float() * scale).clamp(+-max).to(f8)."""
    scale = _amax_to_scale(_tensor_to_amax(x, axiswise_dim, torch_max), float8_dtype, pow2)
    x_scaled = x.to(torch.float32) * scale
    max_value = torch.finfo(float8_dtype).max
    return x_scaled.clamp(min=-max_value, max=max_value).to(float8_dtype), scale


def _col_major(t):
    """The layout _scaled_mm wants for its second operand (torchao: t.t().contiguous().t())."""
    return t.t().contiguous().t()


def _float8_linear_tensorwise(torch_max):
    class Float8LinearTensorwise(torch.autograd.Function):
        """out = x @ w.t() with dynamic tensorwise scaling, torchao's "tensorwise" recipe: input and
        weight float8_e4m3fn, grad_output float8_e5m2; the backward recasts from the saved
        high-precision x and w (torchao saves input_hp and weight_hp_t), output GEMMs in bfloat16.
        x: (M, K) bf16 row-major, w: (N, K) bf16."""

        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            x_fp8, x_scale = _to_float8(x, E4M3, torch_max=torch_max)
            w_fp8, w_scale = _to_float8(w, E4M3, torch_max=torch_max)
            return torch._scaled_mm(x_fp8, w_fp8.t(), scale_a=x_scale.reciprocal(), scale_b=w_scale.reciprocal(),
                                    out_dtype=torch.bfloat16)

        @staticmethod
        def backward(ctx, grad_out):
            x, w = ctx.saved_tensors
            go_fp8, go_scale = _to_float8(grad_out, E5M2, torch_max=torch_max)
            # grad_input (M, K) = grad_out (M, N) @ w (N, K)
            w_fp8, w_scale = _to_float8(w, E4M3, torch_max=torch_max)
            grad_x = torch._scaled_mm(go_fp8, _col_major(w_fp8), scale_a=go_scale.reciprocal(),
                                      scale_b=w_scale.reciprocal(), out_dtype=torch.bfloat16)
            # grad_weight (N, K) = grad_out.t() (N, M) @ x (M, K)
            x_fp8, x_scale = _to_float8(x, E4M3, torch_max=torch_max)
            grad_w = torch._scaled_mm(go_fp8.t().contiguous(), _col_major(x_fp8), scale_a=go_scale.reciprocal(),
                                      scale_b=x_scale.reciprocal(), out_dtype=torch.bfloat16)
            return grad_x, grad_w

    return Float8LinearTensorwise


Float8LinearTensorwise = _float8_linear_tensorwise(False)  # tensorwise amax as aten.amax.default
Float8LinearTensorwiseMax = _float8_linear_tensorwise(True)  # as torchao writes it: aten.max.default
Float8LinearTensorwiseMax.__name__ = "Float8LinearTensorwiseMax"


def _float8_linear_rowwise(pow2):
    class Float8LinearRowwise(torch.autograd.Function):
        """out = x @ w.t() with dynamic rowwise (axiswise) scaling, torchao's "rowwise" recipe: every
        operand float8_e4m3fn (grad_output too), each scaled along the GEMM's reduction dim; scales
        (M, 1) and (1, N) in float32. pow2: the scales rounded down to powers of two as torchao's
        recipe does by default (round_scales_to_power_of_2=True: log2 -> floor -> exp2); without it
        the form of Float8LinearConfig(round_scales_to_power_of_2=False). x: (M, K), w: (N, K)."""

        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            x_fp8, x_scale = _to_float8(x, E4M3, axiswise_dim=-1, pow2=pow2)  # (M, 1)
            w_fp8, w_scale = _to_float8(w, E4M3, axiswise_dim=-1, pow2=pow2)  # (N, 1)
            return torch._scaled_mm(x_fp8, w_fp8.t(), scale_a=x_scale.reciprocal(),
                                    scale_b=w_scale.t().reciprocal(), out_dtype=torch.bfloat16)

        @staticmethod
        def backward(ctx, grad_out):
            x, w = ctx.saved_tensors
            # grad_input (M, K) = grad_out (M, N) @ w (N, K): reduction over N
            go_fp8, go_scale = _to_float8(grad_out, E4M3, axiswise_dim=-1, pow2=pow2)  # (M, 1)
            w_fp8, w_scale = _to_float8(w, E4M3, axiswise_dim=0, pow2=pow2)  # (1, K)
            grad_x = torch._scaled_mm(go_fp8, _col_major(w_fp8), scale_a=go_scale.reciprocal(),
                                      scale_b=w_scale.reciprocal(), out_dtype=torch.bfloat16)
            # grad_weight (N, K) = grad_out.t() (N, M) @ x (M, K): reduction over M
            go_fp8_c, go_scale_c = _to_float8(grad_out, E4M3, axiswise_dim=0, pow2=pow2)  # (1, N)
            x_fp8_c, x_scale_c = _to_float8(x, E4M3, axiswise_dim=0, pow2=pow2)  # (1, K)
            grad_w = torch._scaled_mm(go_fp8_c.t().contiguous(), _col_major(x_fp8_c),
                                      scale_a=go_scale_c.t().reciprocal(), scale_b=x_scale_c.reciprocal(),
                                      out_dtype=torch.bfloat16)
            return grad_x, grad_w

    return Float8LinearRowwise


Float8LinearRowwise = _float8_linear_rowwise(False)
Float8LinearRowwisePow2 = _float8_linear_rowwise(True)  # torchao's default for the rowwise recipe
Float8LinearRowwisePow2.__name__ = "Float8LinearRowwisePow2"


class Float8LinearRowwiseGwHp(torch.autograd.Function):
    """out = x @ w.t(), torchao's "rowwise_with_gw_hp" recipe: x and w rowwise e4m3 for the output;
    grad_input from grad_output rowwise (dim -1, e4m3) and w TENSORWISE (torch.max of |w|, the
    scale expanded to the [1, K] vector _scaled_mm's rowwise mode takes); grad_weight in bf16
    (grad_output.t() @ x, no float8). x: (M, K), w: (N, K)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        x_fp8, x_scale = _to_float8(x, E4M3, axiswise_dim=-1)  # (M, 1)
        w_fp8, w_scale = _to_float8(w, E4M3, axiswise_dim=-1)  # (N, 1)
        return torch._scaled_mm(x_fp8, w_fp8.t(), scale_a=x_scale.reciprocal(), scale_b=w_scale.t().reciprocal(),
                                out_dtype=torch.bfloat16)

    @staticmethod
    def backward(ctx, grad_out):
        x, w = ctx.saved_tensors
        K = w.shape[1]
        go_fp8, go_scale = _to_float8(grad_out, E4M3, axiswise_dim=-1)  # (M, 1)
        w_fp8, w_scale = _to_float8(w, E4M3, torch_max=True)  # one value
        grad_x = torch._scaled_mm(go_fp8, _col_major(w_fp8), scale_a=go_scale.reciprocal(),
                                  scale_b=w_scale.reciprocal().reshape(1, 1).expand(1, K).contiguous(),
                                  out_dtype=torch.bfloat16)
        grad_w = torch.mm(grad_out.t(), x)
        return grad_x, grad_w


# --- input values ----------------------------------------------------------------------------------


def _randn(shape, gen, device, std=1.0, mean=0.0, dtype=BF16):
    t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return (t * std + mean).to(dtype)


def perturb_norm_(module, gen):
    """Freshly initialised norms have weight 1 and bias 0, which would hide a kernel that drops
    the affine step. Stand in for trained weights: weight ~ 1 + 0.1 N(0,1), bias ~ 0.1 N(0,1)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32) * 0.1
            p.copy_((1.0 + noise) if name.endswith("weight") else noise)


def init_linear_(module, gen):
    """Linear weights ~ N(0, 0.02) (GPT-2 / nanoGPT _init_weights); biases ~ 0.02 N(0,1) instead of
    nanoGPT's zeros, so that a dropped bias shows."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen, device=p.device, dtype=torch.float32) * 0.02)


def _module_case(mod, x, source, param_filter=None):
    """fn(x, *params) = (mod(x),) through functional_call; params in named_parameters order."""
    pnames = [n for n, _ in mod.named_parameters()]
    params = [p.detach().clone() for _, p in mod.named_parameters()]

    def fn(x, *ps):
        return (functional_call(mod, dict(zip(pnames, ps)), (x,)),)

    names = ["x"] + [n.replace(".", "_") for n in pnames]
    return TrainCase(fn=fn, inputs=[x] + params, names=names, roles=["activation"] + ["param"] * len(params),
                     requires_grad=[True] * (1 + len(params)), source=source)


# --- builders ----------------------------------------------------------------------------------------


def nanogpt_layernorm(shape, seed, device, bias=True):
    B, T, C = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    mod = NanoGPTLayerNorm(C, bias=bias).to(device=device, dtype=BF16)
    perturb_norm_(mod, gen)
    x = _randn((B, T, C), gen, device)
    return _module_case(mod, x, {
        "model": f"GPT-2 XL (nanoGPT, n_embd={C}): LayerNorm module{'' if bias else ' without bias'}, bf16 "
                 "parameters and activations, training step",
        "module": "traces/capture/models.py:NanoGPTLayerNorm (karpathy/nanoGPT model.py LayerNorm, "
                  "F.layer_norm eps 1e-5)",
    })


def nanogpt_layernorm_nobias(shape, seed, device):
    return nanogpt_layernorm(shape, seed, device, bias=False)


def meta_llama_rmsnorm(shape, seed, device):
    B, T, C = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    mod = MetaLlamaRMSNorm(C, eps=1e-5).to(device=device, dtype=BF16)
    perturb_norm_(mod, gen)
    x = _randn((B, T, C), gen, device)
    return _module_case(mod, x, {
        "model": f"Llama-3-8B (dim {C}): Meta Llama reference RMSNorm, eps 1e-5, bf16, training step",
        "module": "traces/capture/models.py:MetaLlamaRMSNorm (meta-llama/llama llama/model.py RMSNorm)",
    })


def litgpt_rmsnorm(shape, seed, device, add_unit_offset=False):
    B, T, C = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    mod = LitGPTRMSNorm(C, eps=1e-5 if not add_unit_offset else 1e-6,
                        add_unit_offset=add_unit_offset).to(device=device, dtype=BF16)
    perturb_norm_(mod, gen)
    if add_unit_offset:  # the effective weight is 1 + weight: perturb around 0
        with torch.no_grad():
            mod.weight.sub_(1.0)
    x = _randn((B, T, C), gen, device)
    return _module_case(mod, x, {
        "model": (f"litgpt RMSNorm (dim {C}), add_unit_offset={add_unit_offset} "
                  f"({'Gemma-style, eps 1e-6' if add_unit_offset else 'Llama-3 config, norm_eps 1e-5'}), "
                  "bf16, training step"),
        "module": "traces/capture/models.py:LitGPTRMSNorm (Lightning-AI/litgpt litgpt/model.py RMSNorm: "
                  "(x_normed * weight.float()).to(dtype))",
    })


def litgpt_rmsnorm_unit_offset(shape, seed, device):
    return litgpt_rmsnorm(shape, seed, device, add_unit_offset=True)


def pr165370_layernorm(shape, seed, device):
    M, N = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    mod = NanoGPTLayerNorm(N, bias=True).to(device=device, dtype=BF16)
    perturb_norm_(mod, gen)
    x = _randn((M, N), gen, device)
    return _module_case(mod, x, {
        "model": (f"LayerNorm [M, N] = [{M}, {N}] with weight and bias, eps 1e-5, bf16, training step: the "
                  "shape of PyTorch PR 165370 ('[inductor] generate fused rms/layer norm bwd') and of "
                  "../shared/peers/anchors.py normbwd"),
        "module": "traces/capture/models.py:NanoGPTLayerNorm (F.layer_norm(x, (N,), weight, bias, 1e-5))",
    })


def pr165370_rmsnorm(shape, seed, device):
    M, N = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    mod = AnchorRMSNorm(N, eps=1e-6).to(device=device, dtype=BF16)
    perturb_norm_(mod, gen)
    x = _randn((M, N), gen, device)
    return _module_case(mod, x, {
        "model": (f"RMSNorm [M, N] = [{M}, {N}], eps 1e-6, bf16, training step: the shape and the RMSNorm of "
                  "PyTorch PR 165370's benchmark as ../shared/peers/anchors.py normbwd writes it "
                  "(xf = x.float(); (xf * rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype))"),
        "module": "traces/capture/models.py:AnchorRMSNorm",
    })


def hf_llama_rmsnorm(shape, seed, device):
    B, T, C = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    mod = LlamaRMSNorm(C, eps=1e-5).to(device=device, dtype=BF16)
    perturb_norm_(mod, gen)
    x = _randn((B, T, C), gen, device)
    return _module_case(mod, x, {
        "model": (f"Llama-3-8B (hidden {C}, rms_norm_eps 1e-5): Hugging Face LlamaRMSNorm, bf16, training step "
                  "(float32 statistics, self.weight * hidden_states.to(input_dtype))"),
        "module": "traces/capture/models.py:LlamaRMSNorm (huggingface/transformers "
                  "models/llama/modeling_llama.py LlamaRMSNorm)",
    })


def rmsnorm_eps_tensor(shape, seed, device):
    B, T, C = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    mod = TensorEpsRMSNorm(C, eps=1e-6).to(device=device, dtype=BF16)
    mod.eps = torch.tensor(1e-6, dtype=torch.float32, device=device)  # .to(BF16) cast the buffer
    perturb_norm_(mod, gen)
    x = _randn((B, T, C), gen, device)
    weight = mod.weight.detach().clone()
    eps = mod.eps.detach().clone()

    def fn(x, weight, eps):
        return (functional_call(mod, {"weight": weight, "eps": eps}, (x,)),)

    return TrainCase(fn=fn, inputs=[x, weight, eps], names=["x", "weight", "eps"],
                     roles=["activation", "param", "param"], requires_grad=[True, True, False],
                     source={
                         "model": (f"RMSNorm (dim {C}) whose eps is a 0-dim float32 tensor input of the graph "
                                   "(a module buffer, requires_grad False), eps 1e-6, bf16, training step"),
                         "module": "traces/capture/models.py:TensorEpsRMSNorm",
                     },
                     notes=["eps is the graph input 'eps' (0-dim float32, role param, a buffer): rsqrt(ms + eps)"])


def litgpt_rope(shape, seed, device):
    B, T, n_head, n_query_groups, head_size = shape
    # small shape: partial rotary as Pythia (rotary_percentage 0.25); realistic Llama: full head
    rotary_percentage = 0.25 if T <= 64 else 1.0
    rope_n_elem = int(rotary_percentage * head_size)
    gen = torch.Generator(device=device).manual_seed(seed)
    qkv = _randn((B, T, (n_head + 2 * n_query_groups) * head_size), gen, device)
    cos, sin = litgpt_build_rope_cache(T, rope_n_elem, device)

    def fn(qkv, cos, sin):
        return litgpt_qkv_rope(qkv, cos, sin, n_head, n_query_groups, head_size, rope_n_elem)

    return TrainCase(fn=fn, inputs=[qkv, cos, sin], names=["qkv", "cos", "sin"],
                     roles=["activation", "activation", "activation"], requires_grad=[True, False, False],
                     source={
                         "model": (f"litgpt CausalSelfAttention qkv split + RoPE: B={B} T={T} n_head={n_head} "
                                   f"n_query_groups={n_query_groups} head_size={head_size} "
                                   f"rope_n_elem={rope_n_elem} (rotary_percentage {rotary_percentage}); "
                                   "qkv bf16, cos/sin float32 (build_rope_cache), training step"),
                         "module": "traces/capture/models.py:litgpt_qkv_rope + litgpt_apply_rope "
                                   "(Lightning-AI/litgpt litgpt/model.py)",
                     },
                     notes=["outputs (q, k, v) as they go into scaled_dot_product_attention; v is a view of "
                            "the input qkv (nonzero storage_offset)"])


def meta_llama_rope(shape, seed, device):
    B, T, n_heads, n_kv_heads, head_dim = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    xq = _randn((B, T, n_heads, head_dim), gen, device)
    xk = _randn((B, T, n_kv_heads, head_dim), gen, device)
    # precompute_freqs_cis(head_dim, T, theta=500000.0) as Llama 3: freqs_cis = polar(1, outer(t, freqs))
    theta = 500000.0
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device)[: head_dim // 2].float() / head_dim))
    t = torch.arange(T, device=device, dtype=torch.float32)
    angles = torch.outer(t, freqs).float()
    cos, sin = torch.cos(angles), torch.sin(angles)

    def fn(xq, xk, cos, sin):
        return meta_llama_apply_rotary_emb_real(xq, xk, cos, sin)

    return TrainCase(fn=fn, inputs=[xq, xk, cos, sin], names=["xq", "xk", "cos", "sin"],
                     roles=["activation"] * 4, requires_grad=[True, True, False, False],
                     source={
                         "model": (f"Meta Llama apply_rotary_emb (real arithmetic on interleaved pairs): B={B} "
                                   f"T={T} n_heads={n_heads} n_kv_heads={n_kv_heads} head_dim={head_dim}, "
                                   "xq/xk bf16, cos/sin float32 (T, head_dim/2), rope_theta 500000, training step"),
                         "module": "traces/capture/models.py:meta_llama_apply_rotary_emb_real "
                                   "(meta-llama/llama llama/model.py apply_rotary_emb)",
                     })


def _nanogpt_mlp(shape, seed, device, gelu_approximate="none", dropout=0.0):
    B, T, C = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    mod = NanoGPTMLP(C, bias=True, dropout=dropout, gelu_approximate=gelu_approximate).to(device=device, dtype=BF16)
    mod.train()
    init_linear_(mod, gen)
    x = _randn((B, T, C), gen, device)
    gelu = "nn.GELU() (exact, erf) as nanoGPT" if gelu_approximate == "none" else "GELU(approximate='tanh') as GPT-2"
    case = _module_case(mod, x, {
        "model": (f"GPT-2 (nanoGPT MLP, n_embd={C}, hidden {4 * C}, bias): c_fc -> {gelu} -> c_proj -> "
                  f"Dropout(p={dropout}) in training mode, bf16, training step"),
        "module": "traces/capture/models.py:NanoGPTMLP (karpathy/nanoGPT model.py MLP)",
    })
    case.random = dropout > 0
    return case


def nanogpt_mlp(shape, seed, device):
    return _nanogpt_mlp(shape, seed, device, "none")


def nanogpt_mlp_gelu_tanh(shape, seed, device):
    return _nanogpt_mlp(shape, seed, device, "tanh")


def nanogpt_mlp_dropout(shape, seed, device):
    return _nanogpt_mlp(shape, seed, device, "none", dropout=0.1)


def llama_swiglu_mlp(shape, seed, device):
    B, T, C, H = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    mod = LlamaFeedForward(C, H).to(device=device, dtype=BF16)
    init_linear_(mod, gen)
    x = _randn((B, T, C), gen, device)
    return _module_case(mod, x, {
        "model": f"Llama SwiGLU FeedForward dim {C}, hidden {H}, no bias, bf16, training step",
        "module": "traces/capture/models.py:LlamaFeedForward (meta-llama/llama llama/model.py FeedForward: "
                  "w2(F.silu(w1(x)) * w3(x)))",
    })


def linear_fp32(shape, seed, device):
    B, T, K, N = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    x = _randn((B, T, K), gen, device)
    w = _randn((N, K), gen, device, std=0.02)

    def fn(x, w):
        return (F.linear(x.float(), w.float()).to(torch.bfloat16),)

    return TrainCase(fn=fn, inputs=[x, w], names=["x", "weight"], roles=["activation", "param"],
                     requires_grad=[True, True], source={
                         "model": (f"Linear {K} -> {N}, no bias, computed in float32 and cast back to bf16: "
                                   "F.linear(x.float(), w.float()).to(torch.bfloat16) (the float32 linear of "
                                   "litgpt/model.py GroupedTopkRouter.forward, "
                                   "F.linear(x.type(torch.float32), self.weight.type(torch.float32)), with the "
                                   "result cast back to the bf16 activation dtype), training step"),
                         "module": "traces/capture/models.py:linear_fp32",
                     })


def _float8_linear(shape, seed, device, rowwise):
    B, T, K, N = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    x = _randn((B, T, K), gen, device)
    w = _randn((N, K), gen, device, std=0.02)
    func = Float8LinearRowwise if rowwise else Float8LinearTensorwise

    def fn(x, w):
        x2 = x.reshape(-1, x.shape[-1])
        out = func.apply(x2, w)
        return (out.reshape(*x.shape[:-1], out.shape[-1]),)

    recipe = ("rowwise: all operands float8_e4m3fn, scales per row of each GEMM operand along its reduction dim "
              "(scale_a (M,1), scale_b (1,N)); power-of-2 scale rounding omitted") if rowwise else \
             "tensorwise: input/weight float8_e4m3fn, grad_output float8_e5m2, one scale per tensor"
    return TrainCase(fn=fn, inputs=[x, w], names=["x", "weight"], roles=["activation", "param"],
                     requires_grad=[True, True], source={
                         "model": (f"torchao-style float8 linear {K} -> {N} on x [{B},{T},{K}] (reshape -> "
                                   f"_scaled_mm -> reshape), dynamic {recipe}; amax -> float64 -> "
                                   "finfo.max / clamp(amax, 1e-12) -> float32 scale; "
                                   "(x.float() * scale).clamp(+-max).to(float8); _scaled_mm with reciprocal "
                                   "scales, out bf16, no fast accumulation; backward GEMMs in float8 as "
                                   "torchao's Float8Linear (custom autograd.Function), training step"),
                         "module": "traces/capture/models.py:" + func.__name__ +
                                   " (pytorch/ao torchao/float8 float8_utils.py, float8_linear.py, float8_ops.py)",
                     })


def float8_linear_tensorwise(shape, seed, device):
    return _float8_linear(shape, seed, device, rowwise=False)


def float8_linear_rowwise(shape, seed, device):
    return _float8_linear(shape, seed, device, rowwise=True)


# name -> (builder, [(shape, golden?)]); trace names <name>_train_{fwd,bwd}_<shape joined by 'x'>
TRAIN_WORKLOADS = {
    "nanogpt_layernorm": (nanogpt_layernorm, [((2, 8, 1600), True), ((16, 1024, 1600), False)]),
    "nanogpt_layernorm_nobias": (nanogpt_layernorm_nobias, [((2, 8, 1600), True), ((16, 1024, 1600), False)]),
    "meta_llama_rmsnorm": (meta_llama_rmsnorm, [((2, 8, 4096), True), ((2, 4096, 4096), False)]),
    "litgpt_rmsnorm": (litgpt_rmsnorm, [((2, 8, 4096), True), ((2, 4096, 4096), False)]),
    "litgpt_rmsnorm_unit_offset": (litgpt_rmsnorm_unit_offset, [((2, 8, 4096), True), ((2, 4096, 4096), False)]),
    # (M, N): PyTorch PR 165370's norm-backward shape (1152 * 500 rows of 384)
    "pr165370_layernorm": (pr165370_layernorm, [((32, 384), True), ((576000, 384), False)]),
    "pr165370_rmsnorm": (pr165370_rmsnorm, [((32, 384), True), ((576000, 384), False)]),
    "hf_llama_rmsnorm": (hf_llama_rmsnorm, [((2, 8, 4096), True), ((2, 4096, 4096), False)]),
    "rmsnorm_eps_tensor": (rmsnorm_eps_tensor, [((2, 8, 4096), True), ((2, 4096, 4096), False)]),
    # (B, T, n_head, n_query_groups, head_size)
    "litgpt_rope": (litgpt_rope, [((1, 8, 4, 2, 16), True), ((2, 4096, 40, 40, 128), False)]),
    # (B, T, n_heads, n_kv_heads, head_dim)
    "meta_llama_rope": (meta_llama_rope, [((1, 8, 4, 2, 16), True), ((2, 4096, 32, 8, 128), False)]),
    # (B, T, C); hidden 4C
    "nanogpt_mlp": (nanogpt_mlp, [((2, 8, 64), True), ((8, 1024, 1600), False)]),
    "nanogpt_mlp_gelu_tanh": (nanogpt_mlp_gelu_tanh, [((2, 8, 64), True), ((8, 1024, 1600), False)]),
    "nanogpt_mlp_dropout": (nanogpt_mlp_dropout, [((2, 8, 64), False)]),
    # (B, T, C, hidden)
    "llama_swiglu_mlp": (llama_swiglu_mlp, [((2, 8, 64, 176), True), ((2, 4096, 4096, 14336), False)]),
    # (B, T, K, N)
    "linear_fp32": (linear_fp32, [((2, 8, 64, 32), True), ((2, 4096, 4096, 14336), False)]),
    "float8_linear_tensorwise": (float8_linear_tensorwise, [((2, 8, 64, 32), True), ((2, 4096, 4096, 4096), False)]),
    "float8_linear_rowwise": (float8_linear_rowwise, [((2, 8, 64, 32), True), ((2, 4096, 4096, 4096), False)]),
}
