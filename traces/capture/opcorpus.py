#!/usr/bin/env python3
"""Generate the op conformance corpus: for each ATen/prims op the harness supports, a handful of
tiny cases run through PyTorch on CUDA, each stored as a one-node replay-trace/1 graph with
PyTorch's inputs and outputs as golden tensors.

Writes, per op, <out>/<op with '.' replaced by '_'>.json (schema "replay-opcorpus/1", format in
traces/SCHEMA.md) and a matching .safetensors with keys "<case id>/<value id>", plus
<out>/INDEX.json listing the ops and their case counts.

Usage (CUDA host with PyTorch; deterministic, fixed seed):
    python3 traces/capture/opcorpus.py --out tests/data/opcorpus
    python3 traces/capture/opcorpus.py --out /tmp/oc --only aten.add.Tensor --only aten.mm.default
    python3 traces/capture/opcorpus.py --list

Inputs are created on CUDA with the declared layout (transposed, with gaps, or broadcast with
stride 0), all at storage offset 0; the safetensors hold their logical values (contiguous), the
trace input's "stride" the layout the op was called with. The arguments are recorded the way an FX
graph of torch 2.11 records them: positional up to the last non-default positional argument,
keyword-only arguments by keyword when not default (a few cases marked "non-canonical" pass
positional arguments by keyword on purpose). A case marked optional that PyTorch refuses (a
_scaled_mm variant this GPU or build lacks) is skipped with a note; any other failure makes the
exit status 1, the other cases and ops are still written.

Random ops (aten.rand, rand_like, bernoulli.p, native_dropout) get no corpus: their values cannot
be matched. Backward ops take what their forward gave (a softmax output, a layer norm's mean and
rstd, nll_loss's total_weight): those are computed on the device and recorded as inputs.
"""
import argparse
import datetime
import os
import sys
import traceback
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tracelib import (SCHEMA, OPCORPUS_SCHEMA, DTYPE_NAMES, tensor_meta, encode_arg,  # noqa: E402
                      value_stats, write_safetensors, write_json)

F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
I64, I32, BOOL = torch.int64, torch.int32, torch.bool
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
INT64_MAX = 9223372036854775807
INF, NINF = float("inf"), float("-inf")
SEED = 20261122

DEV = torch.device("cuda", 0)
STRIDED = torch.strided
PRESERVE = torch.preserve_format
CONTIG = torch.contiguous_format


# --- inputs -------------------------------------------------------------------------------------------

SPECIALS = [0.0, -0.0, INF, NINF, float("nan"), 1e-30, -1.5, 2.0, 100.0, -100.0]


class Ctx:
    """Creates a case's input tensors (registered as in0, in1, ... in creation order)."""

    def __init__(self, gen):
        self.gen = gen
        self.inputs = []   # (id, tensor, layout description)
        self.ids = {}      # id(tensor) -> value id

    def add(self, t, desc=""):
        iid = f"in{len(self.inputs)}"
        self.inputs.append((iid, t, desc))
        self.ids[id(t)] = iid
        return t

    def _values(self, shape, kind):
        """float64 CPU values of the given kind."""
        g = self.gen
        n = 1
        for d in shape:
            n *= d
        if kind == "normal":
            v = torch.randn(n, generator=g, dtype=F64)
        elif kind == "pos":          # (0.1, 3): log, sqrt, rsqrt
            v = torch.rand(n, generator=g, dtype=F64) * 2.9 + 0.1
        elif kind == "nonzero":      # |v| >= 0.25: reciprocal, divisors
            v = torch.randn(n, generator=g, dtype=F64).sign() * (0.25 + torch.rand(n, generator=g, dtype=F64) * 2)
            v[v == 0] = 1.0
        elif kind == "unit":         # (-0.9, 3): log1p
            v = torch.rand(n, generator=g, dtype=F64) * 3.9 - 0.9
        elif kind == "near1":        # [0.5, 1.5): products
            v = torch.rand(n, generator=g, dtype=F64) + 0.5
        elif kind == "halves":       # multiples of 0.5 in [-2, 2]: ties for comparisons
            v = torch.randint(-4, 5, (n,), generator=g).to(F64) * 0.5
        elif kind == "zeros_some":   # ~1/3 exact zeros
            v = torch.randn(n, generator=g, dtype=F64)
            v[torch.rand(n, generator=g) < 0.33] = 0.0
        elif kind == "distinct":     # distinct integers, exact in every float dtype: no ties for max.dim
            v = (torch.randperm(n, generator=g) - n // 2).to(F64)
        elif kind == "int":
            v = torch.randint(-5, 6, (n,), generator=g).to(F64)
        elif kind == "posint":
            v = torch.randint(1, 6, (n,), generator=g).to(F64)
        elif kind == "nzint":
            v = torch.randint(1, 6, (n,), generator=g).to(F64) * (torch.randint(0, 2, (n,), generator=g) * 2 - 1)
        elif kind == "nonneg":
            v = torch.randint(0, 4, (n,), generator=g).to(F64)
        elif kind == "small":        # -2..2 for integer products
            v = torch.randint(-2, 3, (n,), generator=g).to(F64)
        elif kind == "bool":
            v = (torch.rand(n, generator=g) < 0.5).to(F64)
        elif kind == "specials":
            v = torch.tensor([SPECIALS[i % len(SPECIALS)] for i in range(n)], dtype=F64)
        elif kind == "fp8e4m3":      # beyond 448 (NaN on cast), near max, normal, tiny and subnormal
            v = torch.randn(n, generator=g, dtype=F64) * 100
            extra = [500.0, -1000.0, 448.0, -448.0, 464.0, 1e-3, -2e-3, 1e-6, 0.0, 3.0e-3]
            for i, e in enumerate(extra[:n]):
                v[(i * 7) % n] = e
        elif kind == "fp8e5m2":      # beyond 57344 (inf on cast), near max, tiny and subnormal
            v = torch.randn(n, generator=g, dtype=F64) * 1e4
            extra = [60000.0, -1e5, 57344.0, -57344.0, 61440.0, 1e-5, -2e-6, 1e-9, 0.0, 1.5e-5]
            for i, e in enumerate(extra[:n]):
                v[(i * 7) % n] = e
        elif kind == "fp8vals":      # already within the e4m3 range, for float8 operands
            v = torch.randn(n, generator=g, dtype=F64) * 50
        elif kind == "scale":        # positive scales for _scaled_mm
            v = torch.rand(n, generator=g, dtype=F64) * 0.05 + 0.01
        elif kind == "masked":       # attention scores: ~1/4 -inf (never a whole row's first element)
            v = torch.randn(n, generator=g, dtype=F64) * 2
            m = torch.rand(n, generator=g) < 0.25
            m[0] = False
            v[m] = NINF
        else:
            raise ValueError(f"unknown value kind {kind}")
        return v.reshape(shape)

    def derived(self, t):
        """Register a tensor computed on the device from earlier values (a softmax output, a
        layer norm's mean and rstd) as the next input."""
        return self.add(t.detach().contiguous())

    def target(self, shape, classes, ignore=None, hits=0):
        """An int64 class-index input in [0, classes), `hits` of its elements (spread out) set to
        `ignore`."""
        n = 1
        for d in shape:
            n *= d
        v = torch.randint(0, classes, (n,), generator=self.gen)
        if ignore is not None and hits:  # `hits` elements spread over the tensor
            v[[i * n // hits for i in range(hits)]] = ignore
        return self.add(v.reshape(shape).to(DEV))

    def t(self, shape, dtype=F32, kind=None, layout="contig"):
        """A new input tensor. layout: "contig"; "t" (last two dims transposed in memory); "nc"
        (gaps: last-dim stride 2); "bcast:<dims>" (those dims broadcast, stride 0)."""
        shape = list(shape)
        if kind is None:
            kind = "bool" if dtype == BOOL else ("int" if not (dtype.is_floating_point) else "normal")
        v = self._values(shape, kind)
        if dtype == BOOL:
            vals = v != 0
        elif dtype.is_floating_point:
            vals = v.to(F32).to(dtype) if dtype in (E4M3, E5M2) else v.to(dtype)
        else:
            vals = v.to(dtype)
        vals = vals.to(DEV)
        desc = ""
        if layout == "contig":
            t = vals.contiguous()
        elif layout == "t":
            assert len(shape) >= 2
            t = vals.transpose(-1, -2).contiguous().transpose(-1, -2)
            desc = "transposed"
        elif layout == "nc":
            strides, s = [0] * len(shape), 2
            for d in reversed(range(len(shape))):
                strides[d] = s
                s *= max(shape[d], 1)
            span = 1 + sum((sz - 1) * st for sz, st in zip(shape, strides)) if all(shape) else 0
            base = torch.zeros(max(span, 1), dtype=vals.dtype, device=DEV)
            t = base.as_strided(shape, strides, 0)
            t.copy_(vals)
            desc = "non-contiguous (gaps)"
        elif layout.startswith("bcast:"):
            dims = [int(x) % len(shape) for x in layout[6:].split(",")]
            idx = tuple(slice(0, 1) if d in dims else slice(None) for d in range(len(shape)))
            t = vals[idx].contiguous().expand(shape)
            desc = f"broadcast dims {dims} (stride 0)"
        else:
            raise ValueError(layout)
        assert t.storage_offset() == 0
        return self.add(t, desc)

    def idx(self, shape, low, high, dtype=I64):
        """An index tensor: integers uniform in [low, high)."""
        v = torch.randint(low, high, tuple(shape), generator=self.gen).to(dtype).to(DEV)
        return self.add(v, "index")

    def perm_idx(self, shape, dim, size, dtype=I64, shift=0):
        """An index tensor whose entries along `dim` are distinct in [0, size) (scatter without
        duplicates: PyTorch leaves the winner of a duplicate undefined)."""
        full = list(shape)
        full[dim] = size
        v = torch.rand(full, generator=self.gen).argsort(dim=dim).narrow(dim, 0, shape[dim]) + shift
        return self.add(v.to(dtype).contiguous().to(DEV), "index, distinct along dim")


class Case:
    def __init__(self, label, build, optional=False, raw=False):
        self.label, self.build, self.optional, self.raw = label, build, optional, raw


def C(label, build, optional=False, raw=False):
    return Case(label, build, optional, raw)


# --- argument normalization as FX records it ------------------------------------------------------------


def _same(v, d):
    if v is None or d is None:
        return v is None and d is None
    if isinstance(v, torch.Tensor) or isinstance(d, torch.Tensor):
        return False
    if isinstance(v, bool) or isinstance(d, bool):
        return isinstance(v, bool) and isinstance(d, bool) and v == d
    if isinstance(v, (int, float)) and isinstance(d, (int, float)):
        return type(v) is type(d) and v == d
    if isinstance(v, (list, tuple)) and isinstance(d, (list, tuple)):
        return len(v) == len(d) and all(_same(a, b) for a, b in zip(v, d))
    try:
        return bool(v == d)
    except Exception:
        return False


def normalize_call(op, args, kwargs):
    """(args, kwargs) as torch dispatch hands them to FX: positional arguments up to the last one
    that differs from its default, keyword-only arguments by keyword unless default."""
    sargs = op._schema.arguments
    n_pos = sum(1 for a in sargs if not a.kwarg_only)
    if len(args) > n_pos:
        raise ValueError(f"{op}: {len(args)} positional arguments, the schema has {n_pos}")
    names = {a.name for a in sargs}
    for k in kwargs:
        if k not in names:
            raise ValueError(f"{op}: no argument named {k}")
    pos, kwo = [], []
    for i, a in enumerate(sargs):
        has_default = a.has_default_value()
        if not a.kwarg_only and i < len(args):
            v, given = args[i], True
        elif a.name in kwargs:
            v, given = kwargs[a.name], True
        elif has_default:
            v, given = a.default_value, False
        else:
            raise ValueError(f"{op}: argument {a.name} is missing")
        (kwo if a.kwarg_only else pos).append((a, v, given, has_default))
    while pos and pos[-1][3] and _same(pos[-1][1], pos[-1][0].default_value):
        pos.pop()
    new_args = [v for _, v, _, _ in pos]
    new_kwargs = {a.name: v for a, v, given, hd in kwo if given and not (hd and _same(v, a.default_value))}
    return new_args, new_kwargs


# --- the cases -------------------------------------------------------------------------------------------


def resolve(name):
    ns, packet, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), packet), overload)


def unary_float_cases(kind, int_kind):
    return [
        C("float32", lambda c: ([c.t([3, 5], F32, kind)], {})),
        C("bfloat16", lambda c: ([c.t([7, 1, 13], BF16, kind)], {})),
        C("float16 transposed", lambda c: ([c.t([6, 4], F16, kind, "t")], {})),
        C("size-1", lambda c: ([c.t([1], F32, kind)], {})),
        C("0-dim", lambda c: ([c.t([], F32, kind)], {})),
        C("bfloat16 with gaps", lambda c: ([c.t([2, 3, 5], BF16, kind, "nc")], {})),
        C("broadcast input", lambda c: ([c.t([4, 5], F32, kind, "bcast:0")], {})),
        C("special values (0, -0, +-inf, nan, tiny, out of domain)", lambda c: ([c.t([10], F32, "specials")], {})),
        C("int64 input (result float32)", lambda c: ([c.t([3, 5], I64, int_kind)], {}), optional=True),
    ]


def unary_same_cases():
    return [
        C("float32", lambda c: ([c.t([3, 5], F32)], {})),
        C("bfloat16", lambda c: ([c.t([7, 1, 13], BF16)], {})),
        C("float16 transposed", lambda c: ([c.t([6, 4], F16, None, "t")], {})),
        C("0-dim", lambda c: ([c.t([], F32)], {})),
        C("bfloat16 with gaps", lambda c: ([c.t([2, 3, 5], BF16, None, "nc")], {})),
        C("broadcast input", lambda c: ([c.t([4, 5], F32, None, "bcast:0")], {})),
        C("special values", lambda c: ([c.t([10], F32, "specials")], {})),
        C("int64", lambda c: ([c.t([3, 5], I64)], {})),
        C("int32", lambda c: ([c.t([7], I32)], {})),
    ]


def binary_cases(op, den="normal", den_int="int"):
    """add/sub/mul/div/maximum/minimum .Tensor-style cases; den: kind of the second operand."""
    cases = [
        C("float32 same shape", lambda c: ([c.t([3, 5]), c.t([3, 5], F32, den)], {})),
        C("bfloat16 [3,1,5] (gaps) with float32 [4,5]: broadcast, promotion",
          lambda c: ([c.t([3, 1, 5], BF16, None, "nc"), c.t([4, 5], F32, den)], {})),
        C("bfloat16 [7,1,13] with bfloat16 [13]", lambda c: ([c.t([7, 1, 13], BF16), c.t([13], BF16, den)], {})),
        C("float16 transposed with float16 with gaps",
          lambda c: ([c.t([6, 4], F16, None, "t"), c.t([6, 4], F16, den, "nc")], {})),
        C("float32 with 0-dim float32", lambda c: ([c.t([4, 5]), c.t([], F32, den)], {})),
        C("bfloat16 with 0-dim float32 (result bfloat16)", lambda c: ([c.t([2, 3], BF16), c.t([], F32, den)], {})),
        C("int64 with int32 [5]", lambda c: ([c.t([3, 5], I64), c.t([5], I32, den_int)], {})),
        C("size-1 float32 with [3,5]", lambda c: ([c.t([1]), c.t([3, 5], F32, den)], {})),
        C("int64 with float32 (promotion)", lambda c: ([c.t([3, 5], I64), c.t([3, 5], F32, den)], {})),
    ]
    if op in ("aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor", "aten.maximum.default",
              "aten.minimum.default"):
        def same_twice(c):
            x = c.t([4, 5], F32, None, "bcast:0")
            return [x, x], {}
        cases.append(C("broadcast input with itself", same_twice))
    if op in ("aten.add.Tensor", "aten.sub.Tensor"):
        cases.append(C("alpha=2.5", lambda c: ([c.t([3, 5]), c.t([3, 5])], {"alpha": 2.5})))
        if op == "aten.add.Tensor":
            cases.append(C("int64, alpha=3", lambda c: ([c.t([3, 5], I64), c.t([3, 5], I64)], {"alpha": 3})))
    if op in ("aten.sub.Tensor", "aten.div.Tensor"):  # decomposed backward graphs hold sub.Tensor(1, x)
        cases.append(C("Python scalar as self (FX writes 1 - x as sub.Tensor(1, x))",
                       lambda c: ([1, c.t([3, 5], BF16, "nonzero")], {})))
    if op == "aten.mul.Tensor":
        cases.append(C("bool * bool", lambda c: ([c.t([3, 5], BOOL), c.t([3, 5], BOOL)], {})))
    if op in ("aten.maximum.default", "aten.minimum.default"):
        cases.append(C("special values (nan propagates)", lambda c: ([c.t([10], F32, "specials"), c.t([10])], {})))
    if op == "aten.div.Tensor":
        cases.append(C("special values / normal", lambda c: ([c.t([10], F32, "specials"), c.t([10], F32, "nonzero")], {})))
    return cases


def scalar_binary_cases(op):
    cases = [
        C("float32 op 2.5", lambda c: ([c.t([3, 5]), 2.5], {})),
        C("bfloat16 op int 3", lambda c: ([c.t([7, 1, 13], BF16), 3], {})),
        C("int64 op int 3", lambda c: ([c.t([3, 5], I64), 3], {})),
        C("int64 op 2.5 (promotion to float32)", lambda c: ([c.t([3, 5], I64), 2.5], {})),
        C("float16 transposed op -0.5", lambda c: ([c.t([6, 4], F16, None, "t"), -0.5], {})),
        C("0-dim op 1e-5", lambda c: ([c.t([]), 1e-5], {})),
        C("broadcast input op inf", lambda c: ([c.t([4, 5], F32, "zeros_some", "bcast:0"), INF], {})),
    ]
    if op in ("aten.add.Scalar", "aten.sub.Scalar"):
        cases.append(C("alpha 3", lambda c: ([c.t([3, 5]), 2.0, 3], {})))
    if op in ("aten.add.Scalar", "aten.mul.Scalar"):
        cases.append(C("bool op int 2 (result int64)", lambda c: ([c.t([3, 5], BOOL), 2], {})))
    return cases


def compare_tensor_cases():
    return [
        C("float32 with ties", lambda c: ([c.t([3, 5], F32, "halves"), c.t([3, 5], F32, "halves")], {})),
        C("bfloat16 [3,1,5] vs float32 [4,5]",
          lambda c: ([c.t([3, 1, 5], BF16, "halves"), c.t([4, 5], F32, "halves")], {})),
        C("int64 vs int32", lambda c: ([c.t([7], I64, "small"), c.t([7], I32, "small")], {})),
        C("float32 vs 0-dim", lambda c: ([c.t([4, 5], F32, "halves"), c.t([], F32, "halves")], {})),
        C("bool vs bool", lambda c: ([c.t([3, 5], BOOL), c.t([3, 5], BOOL)], {})),
        C("float16 transposed vs with gaps",
          lambda c: ([c.t([6, 4], F16, "halves", "t"), c.t([6, 4], F16, "halves", "nc")], {})),
        C("special values", lambda c: ([c.t([10], F32, "specials"), c.t([10], F32, "halves")], {})),
        C("int64 vs float32 [5]", lambda c: ([c.t([3, 5], I64, "small"), c.t([5], F32, "halves")], {})),
    ]


def compare_scalar_cases():
    return [
        C("float32 vs 0.0", lambda c: ([c.t([3, 5], F32, "zeros_some"), 0.0], {})),
        C("bfloat16 vs 0.5", lambda c: ([c.t([7, 1, 13], BF16, "halves"), 0.5], {})),
        C("int64 vs 2", lambda c: ([c.t([3, 5], I64, "small"), 2], {})),
        C("int64 vs 1.5", lambda c: ([c.t([3, 5], I64, "small"), 1.5], {})),
        C("0-dim vs 1", lambda c: ([c.t([], F32, "halves"), 1], {})),
        C("bool vs True", lambda c: ([c.t([3, 5], BOOL), True], {})),
        C("special values vs inf", lambda c: ([c.t([10], F32, "specials"), INF], {})),
        C("float16 transposed vs -1.0", lambda c: ([c.t([6, 4], F16, "halves", "t"), -1.0], {})),
    ]


def logical_binary_cases():
    return [
        C("bool, bool", lambda c: ([c.t([3, 5], BOOL), c.t([3, 5], BOOL)], {})),
        C("float32 with zeros", lambda c: ([c.t([3, 5], F32, "zeros_some"), c.t([3, 5], F32, "zeros_some")], {})),
        C("int64 [3,5], bool [5]", lambda c: ([c.t([3, 5], I64, "small"), c.t([5], BOOL)], {})),
        C("bfloat16 [3,1,5], float32 [4,5]",
          lambda c: ([c.t([3, 1, 5], BF16, "zeros_some"), c.t([4, 5], F32, "zeros_some")], {})),
        C("bool, 0-dim bool", lambda c: ([c.t([4, 5], BOOL), c.t([], BOOL)], {})),
        C("float16 transposed, bool with gaps",
          lambda c: ([c.t([6, 4], F16, "zeros_some", "t"), c.t([6, 4], BOOL, None, "nc")], {})),
    ]


def var_cases():
    return [
        C("float32 [2,8,16] dim [2] correction 0 keepdim (LayerNorm)",
          lambda c: ([c.t([2, 8, 16]), [2]], {"correction": 0, "keepdim": True})),
        C("float32 [7,13] dim [0] correction 1", lambda c: ([c.t([7, 13]), [0]], {"correction": 1})),
        C("bfloat16 [3,5] dim [1] correction 0 keepdim",
          lambda c: ([c.t([3, 5], BF16), [1]], {"correction": 0, "keepdim": True})),
        C("float32 [3,5] all dims (dim None) correction 0", lambda c: ([c.t([3, 5])], {"correction": 0})),
        C("float32 [2,3,4] dims [0,2] keepdim, default correction",
          lambda c: ([c.t([2, 3, 4]), [0, 2]], {"keepdim": True})),
        C("float32 transposed dim [1] correction 0", lambda c: ([c.t([6, 4], F32, None, "t"), [1]], {"correction": 0})),
        C("float16 [5] dim [0] correction 0", lambda c: ([c.t([5], F16), [0]], {"correction": 0})),
        C("broadcast input dim [-1] correction 0 keepdim",
          lambda c: ([c.t([4, 5], F32, None, "bcast:0"), [-1]], {"correction": 0, "keepdim": True})),
    ]


def amax_cases():
    return [
        C("float32 [3,5] dim [1] keepdim", lambda c: ([c.t([3, 5]), [1], True], {})),
        C("bfloat16 [7,1,13] dim [-1]", lambda c: ([c.t([7, 1, 13], BF16), [-1]], {})),
        C("float32 [4,48] dim [1] keepdim (rowwise float8 amax)", lambda c: ([c.t([4, 48]), [1], True], {})),
        C("int64 dim [0]", lambda c: ([c.t([3, 5], I64), [0]], {})),
        C("float32 all dims (dim default [])", lambda c: ([c.t([3, 5])], {})),
        C("special values dim [0] (nan propagates)", lambda c: ([c.t([10], F32, "specials"), [0]], {})),
        C("float16 transposed dims [0,1]", lambda c: ([c.t([6, 4], F16, None, "t"), [0, 1]], {})),
        C("bfloat16 broadcast dim [1]", lambda c: ([c.t([2, 3, 4], BF16, None, "bcast:1"), [1]], {})),
        C("0-dim", lambda c: ([c.t([])], {})),
    ]


def max_all_cases():
    """torch.max(t) / torch.min(t) without a dim: every dim, a 0-dim result (torchao writes the
    tensorwise float8 amax as torch.max(torch.abs(x)))."""
    return [
        C("float32 [3,5]", lambda c: ([c.t([3, 5])], {})),
        C("bfloat16 [7,1,13]", lambda c: ([c.t([7, 1, 13], BF16)], {})),
        C("int64", lambda c: ([c.t([3, 5], I64)], {})),
        C("special values (nan propagates)", lambda c: ([c.t([10], F32, "specials")], {})),
        C("float16 transposed", lambda c: ([c.t([6, 4], F16, None, "t")], {})),
        C("bfloat16 broadcast", lambda c: ([c.t([2, 3, 4], BF16, None, "bcast:1")], {})),
        C("0-dim", lambda c: ([c.t([])], {})),
    ]


def creation_like_cases():
    return [
        C("float32", lambda c: ([c.t([3, 5])], {})),
        C("bfloat16 -> dtype float32, FX-style kwargs",
          lambda c: ([c.t([7, 1, 13], BF16)], {"dtype": F32, "layout": STRIDED, "device": DEV,
                                                "pin_memory": False, "memory_format": PRESERVE})),
        C("transposed, memory_format preserve (keeps the strides)",
          lambda c: ([c.t([6, 4], F32, None, "t")], {"memory_format": PRESERVE})),
        C("transposed, memory_format contiguous",
          lambda c: ([c.t([6, 4], F32, None, "t")], {"memory_format": CONTIG})),
        C("int64", lambda c: ([c.t([3, 5], I64)], {})),
        C("0-dim", lambda c: ([c.t([])], {})),
        C("broadcast input", lambda c: ([c.t([4, 5], F32, None, "bcast:0")], {})),
    ]


def creation_cases():
    fx = lambda dt: {"dtype": dt, "layout": STRIDED, "device": DEV, "pin_memory": False}  # noqa: E731
    return [
        C("[3,5] float32", lambda c: ([[3, 5]], fx(F32))),
        C("[2,8,1] bfloat16", lambda c: ([[2, 8, 1]], fx(BF16))),
        C("[7] int64", lambda c: ([[7]], fx(I64))),
        C("[] float32", lambda c: ([[]], fx(F32))),
        C("[2,3] bool", lambda c: ([[2, 3]], fx(BOOL))),
        C("[4], device only (default dtype)", lambda c: ([[4]], {"device": DEV})),
    ]


def scaled_mm_case(label, M, K, N, a_dt=E4M3, b_dt=E4M3, rowwise=False, out_dtype=BF16, bias=False,
                   fast_accum=False, optional=False):
    def build(c):
        a = c.t([M, K], a_dt, "fp8vals")
        b = c.t([K, N], b_dt, "fp8vals", "t")  # column-major
        sa = c.t([M, 1] if rowwise else [], F32, "scale")
        sb = c.t([1, N] if rowwise else [], F32, "scale")
        args = [a, b, sa, sb]
        kwargs = {"out_dtype": out_dtype}
        if bias:
            kwargs["bias"] = c.t([N], out_dtype)
        if fast_accum:
            kwargs["use_fast_accum"] = True
        return args, kwargs
    return C(label, build, optional=optional)


def build_ops():
    ops = {}
    ops["prims.convert_element_type.default"] = [
        C("float32 -> bfloat16", lambda c: ([c.t([3, 5]), BF16], {})),
        C("bfloat16 -> float32", lambda c: ([c.t([7, 1, 13], BF16), F32], {})),
        C("float32 transposed -> float16", lambda c: ([c.t([6, 4], F32, None, "t"), F16], {})),
        C("float32 -> float8_e4m3fn (beyond max: nan; tiny, subnormal)", lambda c: ([c.t([64], F32, "fp8e4m3"), E4M3], {})),
        C("float32 -> float8_e5m2 (beyond max: inf; tiny, subnormal)", lambda c: ([c.t([40], F32, "fp8e5m2"), E5M2], {})),
        C("float8_e4m3fn -> float32", lambda c: ([c.t([5, 7], E4M3, "fp8vals"), F32], {})),
        C("float8_e5m2 -> bfloat16", lambda c: ([c.t([3, 5], E5M2, "fp8vals"), BF16], {})),
        C("0-dim float32 -> int64 (truncation)", lambda c: ([c.t([], F32), I64], {})),
        C("int64 -> float32", lambda c: ([c.t([3, 5], I64), F32], {})),
        C("float32 with zeros -> bool", lambda c: ([c.t([3, 5], F32, "zeros_some"), BOOL], {})),
        C("bool -> float32", lambda c: ([c.t([2, 3], BOOL), F32], {})),
        C("float32 -> float64", lambda c: ([c.t([4], F32), F64], {})),
    ]
    ops["aten.clone.default"] = [
        C("float32", lambda c: ([c.t([3, 5])], {})),
        C("bfloat16 transposed (preserve_format keeps the strides)", lambda c: ([c.t([6, 4], BF16, None, "t")], {})),
        C("transposed, memory_format contiguous", lambda c: ([c.t([6, 4], F32, None, "t")], {"memory_format": CONTIG})),
        C("int64", lambda c: ([c.t([7], I64)], {})),
        C("bool", lambda c: ([c.t([2, 3], BOOL)], {})),
        C("broadcast input (result contiguous)", lambda c: ([c.t([4, 5], F32, None, "bcast:0")], {})),
        C("with gaps (result contiguous)", lambda c: ([c.t([2, 3, 5], F32, None, "nc")], {})),
        C("0-dim", lambda c: ([c.t([])], {})),
        C("float8_e4m3fn", lambda c: ([c.t([4, 8], E4M3, "fp8vals")], {})),
    ]
    ops["aten._to_copy.default"] = [
        C("float32 -> bfloat16", lambda c: ([c.t([3, 5])], {"dtype": BF16})),
        C("bfloat16 -> float32", lambda c: ([c.t([7, 1, 13], BF16)], {"dtype": F32})),
        C("float32 -> float8_e4m3fn (beyond max: nan)", lambda c: ([c.t([64], F32, "fp8e4m3")], {"dtype": E4M3})),
        C("float8_e5m2 -> float32", lambda c: ([c.t([5, 7], E5M2, "fp8vals")], {"dtype": F32})),
        C("int32 -> float32", lambda c: ([c.t([7], I32)], {"dtype": F32})),
        C("float32 transposed -> float16 (strides kept)", lambda c: ([c.t([6, 4], F32, None, "t")], {"dtype": F16})),
        C("FX-style dtype, layout, device", lambda c: ([c.t([3, 5])], {"dtype": F16, "layout": STRIDED, "device": DEV})),
        C("transposed -> memory_format contiguous",
          lambda c: ([c.t([6, 4], BF16, None, "t")], {"dtype": F32, "memory_format": CONTIG})),
        C("float32 -> float8_e5m2 (beyond max: inf)", lambda c: ([c.t([40], F32, "fp8e5m2")], {"dtype": E5M2})),
    ]
    for name, kind, int_kind in (("rsqrt", "pos", "posint"), ("sqrt", "pos", "posint"), ("log", "pos", "posint"),
                                 ("exp", "normal", "int"), ("log1p", "unit", "nonneg"), ("expm1", "normal", "int"),
                                 ("reciprocal", "nonzero", "nzint"), ("tanh", "normal", "int"),
                                 ("sigmoid", "normal", "int"), ("erf", "normal", "int"), ("sin", "normal", "int"),
                                 ("cos", "normal", "int"), ("log2", "pos", "posint"), ("exp2", "normal", "int")):
        ops[f"aten.{name}.default"] = unary_float_cases(kind, int_kind)
    for name in ("neg", "abs", "sign", "relu", "floor", "ceil", "trunc", "round"):
        ops[f"aten.{name}.default"] = unary_same_cases()
    ops["aten.pow.Tensor_Scalar"] = [
        C("float32 ^ 2", lambda c: ([c.t([3, 5]), 2], {})),
        C("bfloat16 ^ 0.5", lambda c: ([c.t([7, 1, 13], BF16, "pos"), 0.5], {})),
        C("float32 ^ -1", lambda c: ([c.t([4, 6], F32, "nonzero"), -1], {})),
        C("float16 transposed ^ 3", lambda c: ([c.t([6, 4], F16, None, "t"), 3], {})),
        C("0-dim ^ 2.5", lambda c: ([c.t([], F32, "pos"), 2.5], {})),
        C("int64 ^ 2 (int64)", lambda c: ([c.t([3, 5], I64), 2], {})),
        C("float32 ^ 0", lambda c: ([c.t([3, 5]), 0], {})),
        C("bfloat16 broadcast ^ 2", lambda c: ([c.t([4, 5], BF16, None, "bcast:0"), 2], {})),
        C("int64 ^ 0.5 (float32)", lambda c: ([c.t([3, 5], I64, "posint"), 0.5], {})),
        C("special values ^ -0.5", lambda c: ([c.t([10], F32, "specials"), -0.5], {})),
    ]
    ops["aten.pow.Tensor_Tensor"] = [
        C("float32 ^ float32", lambda c: ([c.t([3, 5], F32, "pos"), c.t([3, 5])], {})),
        C("bfloat16 [3,1,5] ^ float32 [4,5]", lambda c: ([c.t([3, 1, 5], BF16, "pos"), c.t([4, 5])], {})),
        C("float32 [7,1,13] ^ bfloat16 [13]", lambda c: ([c.t([7, 1, 13], F32, "pos"), c.t([13], BF16)], {})),
        C("int64 ^ int64 (int64)", lambda c: ([c.t([3, 5], I64, "posint"), c.t([3, 5], I64, "nonneg")], {})),
        C("float32 ^ 0-dim", lambda c: ([c.t([4, 5], F32, "pos"), c.t([], F32)], {})),
        C("float16 transposed ^ float16", lambda c: ([c.t([6, 4], F16, "pos", "t"), c.t([6, 4], F16)], {})),
    ]
    ops["aten.pow.Scalar"] = [
        C("2.0 ^ float32", lambda c: ([2.0, c.t([3, 5])], {})),
        C("2 ^ int64 (int64)", lambda c: ([2, c.t([3, 5], I64, "nonneg")], {})),
        C("0.5 ^ bfloat16", lambda c: ([0.5, c.t([7, 1, 13], BF16)], {})),
        C("10.0 ^ 0-dim float16", lambda c: ([10.0, c.t([], F16)], {})),
        C("2.0 ^ float32 transposed", lambda c: ([2.0, c.t([6, 4], F32, None, "t")], {})),
        C("2 ^ float32", lambda c: ([2, c.t([4, 5])], {})),
    ]
    for name in ("add", "sub", "mul", "div"):
        ops[f"aten.{name}.Tensor"] = binary_cases(f"aten.{name}.Tensor", "nonzero" if name == "div" else "normal",
                                                  "nzint" if name == "div" else "int")
        ops[f"aten.{name}.Scalar"] = scalar_binary_cases(f"aten.{name}.Scalar")
    ops["aten.rsub.Scalar"] = [
        C("1.0 - float32", lambda c: ([c.t([3, 5]), 1.0], {})),
        C("1 - bfloat16", lambda c: ([c.t([7, 1, 13], BF16), 1], {})),
        C("5 - int64", lambda c: ([c.t([3, 5], I64), 5], {})),
        C("2.0 - 0.5 * float32 transposed (alpha)", lambda c: ([c.t([6, 4], F32, None, "t"), 2.0, 0.5], {})),
        C("1.0 - 0-dim", lambda c: ([c.t([]), 1.0], {})),
        C("2.5 - int64 (float32)", lambda c: ([c.t([3, 5], I64), 2.5], {})),
    ]
    ops["aten.div.Tensor_mode"] = [
        C("float32 floor", lambda c: ([c.t([3, 5]), c.t([3, 5], F32, "nonzero")], {"rounding_mode": "floor"})),
        C("float32 trunc", lambda c: ([c.t([3, 5]), c.t([3, 5], F32, "nonzero")], {"rounding_mode": "trunc"})),
        C("int64 floor (negative values)", lambda c: ([c.t([3, 5], I64), c.t([3, 5], I64, "nzint")], {"rounding_mode": "floor"})),
        C("int64 trunc", lambda c: ([c.t([3, 5], I64), c.t([3, 5], I64, "nzint")], {"rounding_mode": "trunc"})),
        C("bfloat16 [7,1,13] / [13] floor",
          lambda c: ([c.t([7, 1, 13], BF16), c.t([13], BF16, "nonzero")], {"rounding_mode": "floor"})),
        C("int32 / 0-dim int64 floor", lambda c: ([c.t([7], I32), c.t([], I64, "nzint")], {"rounding_mode": "floor"})),
        C("rounding_mode None (true division)", lambda c: ([c.t([3, 5]), c.t([3, 5], F32, "nonzero")], {"rounding_mode": None})),
        C("float16 transposed trunc",
          lambda c: ([c.t([6, 4], F16, None, "t"), c.t([6, 4], F16, "nonzero")], {"rounding_mode": "trunc"})),
    ]
    for name in ("maximum", "minimum"):
        ops[f"aten.{name}.default"] = binary_cases(f"aten.{name}.default")
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        ops[f"aten.{name}.Tensor"] = compare_tensor_cases()
        ops[f"aten.{name}.Scalar"] = compare_scalar_cases()
    ops["aten.logical_not.default"] = [
        C("bool", lambda c: ([c.t([3, 5], BOOL)], {})),
        C("float32 with zeros", lambda c: ([c.t([3, 5], F32, "zeros_some")], {})),
        C("int64", lambda c: ([c.t([7], I64, "small")], {})),
        C("bfloat16 with zeros", lambda c: ([c.t([7, 1, 13], BF16, "zeros_some")], {})),
        C("0-dim bool", lambda c: ([c.t([], BOOL)], {})),
        C("float32 transposed", lambda c: ([c.t([6, 4], F32, "zeros_some", "t")], {})),
        C("special values (nan is true)", lambda c: ([c.t([10], F32, "specials")], {})),
    ]
    for name in ("logical_and", "logical_or", "logical_xor"):
        ops[f"aten.{name}.default"] = logical_binary_cases()
    ops["aten.where.self"] = [
        C("bool, float32, float32", lambda c: ([c.t([3, 5], BOOL), c.t([3, 5]), c.t([3, 5])], {})),
        C("cond [3,1], [3,5], [5]", lambda c: ([c.t([3, 1], BOOL), c.t([3, 5]), c.t([5])], {})),
        C("bfloat16 and float32 (promotion)", lambda c: ([c.t([3, 5], BOOL), c.t([3, 5], BF16), c.t([3, 5])], {})),
        C("int64", lambda c: ([c.t([4, 5], BOOL), c.t([4, 5], I64), c.t([4, 5], I64)], {})),
        C("float32 and 0-dim", lambda c: ([c.t([3, 5], BOOL), c.t([3, 5]), c.t([])], {})),
        C("transposed cond, float16 with gaps and transposed",
          lambda c: ([c.t([6, 4], BOOL, None, "t"), c.t([6, 4], F16, None, "nc"), c.t([6, 4], F16, None, "t")], {})),
        C("broadcast cond, bfloat16, bfloat16 [4]",
          lambda c: ([c.t([2, 3, 4], BOOL, None, "bcast:1"), c.t([2, 3, 4], BF16), c.t([4], BF16)], {})),
        C("0-dim cond", lambda c: ([c.t([], BOOL), c.t([3, 5]), c.t([3, 5])], {})),
    ]
    ops["aten.clamp.default"] = [
        C("float32 [-0.5, 0.5]", lambda c: ([c.t([3, 5]), -0.5, 0.5], {})),
        C("bfloat16 min 0.0 only", lambda c: ([c.t([7, 1, 13], BF16), 0.0], {})),
        C("float32 transposed max 1.0 only", lambda c: ([c.t([6, 4], F32, None, "t"), None, 1.0], {})),
        C("int64 [-2, 3]", lambda c: ([c.t([3, 5], I64), -2, 3], {})),
        C("min > max (gives max)", lambda c: ([c.t([3, 5]), 1.0, -1.0], {})),
        C("special values [-1, 1] (nan stays nan)", lambda c: ([c.t([10], F32, "specials"), -1.0, 1.0], {})),
        C("non-canonical: min= max= as keywords", lambda c: ([c.t([3, 5])], {"min": -0.5, "max": 0.5}), raw=True),
        C("0-dim [0, 1]", lambda c: ([c.t([]), 0.0, 1.0], {})),
        C("float8 saturation pattern [-448, 448]", lambda c: ([c.t([8, 16], F32, "fp8e4m3"), -448.0, 448.0], {})),
        C("int64 with float bounds (float32 result)", lambda c: ([c.t([3, 5], I64), -1.5, 2.5], {}), optional=True),
    ]
    ops["aten.clamp.Tensor"] = [
        C("float32, min [5], max [3,1]", lambda c: ([c.t([3, 5]), c.t([5], F32, "pos").neg_(), c.t([3, 1], F32, "pos")], {})),
        C("bfloat16 with float32 min (promotion)", lambda c: ([c.t([3, 5], BF16), c.t([3, 5])], {})),
        C("min 0-dim, max None", lambda c: ([c.t([3, 5]), c.t([])], {})),
        C("min None, max [5]", lambda c: ([c.t([3, 5]), None, c.t([5])], {})),
        C("int64", lambda c: ([c.t([3, 5], I64), c.t([5], I64, "small"), c.t([3, 1], I64, "posint")], {})),
        C("float16 transposed", lambda c: ([c.t([6, 4], F16, None, "t"), c.t([6, 4], F16), c.t([6, 4], F16, "pos")], {})),
    ]
    for name, val in (("clamp_min", 0.0), ("clamp_max", 0.0)):
        ops[f"aten.{name}.default"] = [
            C(f"float32 {val}", lambda c, v=val: ([c.t([3, 5]), v], {})),
            C("bfloat16 1e-12", lambda c: ([c.t([7, 1, 13], BF16, "zeros_some"), 1e-12], {})),
            C("int64 1", lambda c: ([c.t([3, 5], I64), 1], {})),
            C("0-dim -0.5", lambda c: ([c.t([]), -0.5], {})),
            C("float16 transposed 0.25", lambda c: ([c.t([6, 4], F16, None, "t"), 0.25], {})),
            C("special values 0.0", lambda c: ([c.t([10], F32, "specials"), 0.0], {})),
            C("broadcast input -inf", lambda c: ([c.t([4, 5], F32, None, "bcast:0"), NINF], {})),
        ]
    ops["aten.var_mean.correction"] = var_cases()
    ops["aten.var.correction"] = var_cases()
    ops["aten.mean.dim"] = [
        C("float32 dim [-1] keepdim", lambda c: ([c.t([3, 5]), [-1], True], {})),
        C("bfloat16 dims [0,2]", lambda c: ([c.t([7, 1, 13], BF16), [0, 2]], {})),
        C("bfloat16 dim [2] keepdim dtype float32", lambda c: ([c.t([2, 8, 16], BF16), [2], True], {"dtype": F32})),
        C("float32 transposed dim [0]", lambda c: ([c.t([6, 4], F32, None, "t"), [0]], {})),
        C("size-1 dim [0]", lambda c: ([c.t([1]), [0]], {})),
        C("float16 with gaps dims [1,2] keepdim", lambda c: ([c.t([2, 3, 5], F16, None, "nc"), [1, 2], True], {})),
        C("broadcast input dim [0]", lambda c: ([c.t([4, 5], F32, None, "bcast:0"), [0]], {})),
    ]
    ops["aten.mean.default"] = [
        C("float32", lambda c: ([c.t([3, 5])], {})),
        C("bfloat16", lambda c: ([c.t([7, 1, 13], BF16)], {})),
        C("bfloat16 dtype float32", lambda c: ([c.t([7, 13], BF16)], {"dtype": F32})),
        C("0-dim", lambda c: ([c.t([])], {})),
        C("float32 transposed", lambda c: ([c.t([6, 4], F32, None, "t")], {})),
    ]
    ops["aten.sum.dim_IntList"] = [
        C("float32 dim [1]", lambda c: ([c.t([3, 5]), [1]], {})),
        C("bfloat16 dims [0,2] keepdim", lambda c: ([c.t([7, 1, 13], BF16), [0, 2], True], {})),
        C("int32 (int64 result)", lambda c: ([c.t([3, 5], I32), [1]], {})),
        C("bool (int64 result)", lambda c: ([c.t([3, 5], BOOL), [0]], {})),
        C("bfloat16 dim [2] dtype float32", lambda c: ([c.t([2, 8, 16], BF16), [2]], {"dtype": F32})),
        C("broadcast input dim [0]", lambda c: ([c.t([4, 5], F32, None, "bcast:0"), [0]], {})),
        C("float32 transposed dim [-1] keepdim", lambda c: ([c.t([6, 4], F32, None, "t"), [-1], True], {})),
        C("int64 [7] dim [0]", lambda c: ([c.t([7], I64), [0]], {})),
        C("dim [] (every dim)", lambda c: ([c.t([3, 5]), []], {})),
    ]
    ops["aten.sum.default"] = [
        C("float32", lambda c: ([c.t([3, 5])], {})),
        C("bfloat16", lambda c: ([c.t([7, 1, 13], BF16)], {})),
        C("int32 (int64 result)", lambda c: ([c.t([7], I32)], {})),
        C("bool (int64 result)", lambda c: ([c.t([3, 5], BOOL)], {})),
        C("broadcast input", lambda c: ([c.t([4, 5], F32, None, "bcast:0")], {})),
        C("bfloat16 dtype float32", lambda c: ([c.t([7, 13], BF16)], {"dtype": F32})),
        C("0-dim", lambda c: ([c.t([])], {})),
    ]
    ops["aten.amax.default"] = amax_cases()
    ops["aten.amin.default"] = amax_cases()
    ops["aten.max.default"] = max_all_cases()
    ops["aten.min.default"] = max_all_cases()
    ops["aten.max.dim"] = [
        C("float32 dim 1", lambda c: ([c.t([3, 5], F32, "distinct"), 1], {})),
        C("bfloat16 dim -1 keepdim", lambda c: ([c.t([7, 1, 13], BF16, "distinct"), -1, True], {})),
        C("int64 dim 0", lambda c: ([c.t([3, 5], I64, "distinct"), 0], {})),
        C("float32 transposed dim 0", lambda c: ([c.t([6, 4], F32, "distinct", "t"), 0], {})),
        C("float32 [7] dim 0", lambda c: ([c.t([7], F32, "distinct"), 0], {})),
        C("float16 with gaps dim 2 keepdim", lambda c: ([c.t([2, 3, 5], F16, "distinct", "nc"), 2, True], {})),
    ]
    ops["aten.prod.dim_int"] = [
        C("float32 dim 1", lambda c: ([c.t([3, 5], F32, "near1"), 1], {})),
        C("bfloat16 dim 0 keepdim", lambda c: ([c.t([7, 1, 13], BF16, "near1"), 0, True], {})),
        C("int64 dim 1", lambda c: ([c.t([3, 5], I64, "small"), 1], {})),
        C("int32 (int64 result)", lambda c: ([c.t([3, 5], I32, "small"), 0], {})),
        C("float32 transposed dim 0", lambda c: ([c.t([6, 4], F32, "near1", "t"), 0], {})),
        C("bool (int64 result)", lambda c: ([c.t([3, 5], BOOL), 1], {})),
        C("bfloat16 dtype float32", lambda c: ([c.t([4, 6], BF16, "near1"), 1], {"dtype": F32})),
    ]
    ops["aten.prod.default"] = [
        C("float32", lambda c: ([c.t([3, 5], F32, "near1")], {})),
        C("bfloat16", lambda c: ([c.t([7, 3], BF16, "near1")], {})),
        C("int64", lambda c: ([c.t([6], I64, "small")], {})),
        C("0-dim", lambda c: ([c.t([])], {})),
        C("int32 (int64 result)", lambda c: ([c.t([5], I32, "small")], {})),
        C("bfloat16 dtype float32", lambda c: ([c.t([4, 6], BF16, "near1")], {"dtype": F32})),
    ]
    # views
    ops["aten.view.default"] = [
        C("[3,5] -> [15]", lambda c: ([c.t([3, 5]), [15]], {})),
        C("bfloat16 [2,3,4] -> [6,4]", lambda c: ([c.t([2, 3, 4], BF16), [6, 4]], {})),
        C("[2,3,4] -> [-1,4]", lambda c: ([c.t([2, 3, 4]), [-1, 4]], {})),
        C("[3,5] -> [3,1,5]", lambda c: ([c.t([3, 5]), [3, 1, 5]], {})),
        C("transposed [6,4] -> [2,3,4]", lambda c: ([c.t([6, 4], F32, None, "t"), [2, 3, 4]], {})),
        C("0-dim -> [1]", lambda c: ([c.t([], BF16), [1]], {})),
        C("[1] -> []", lambda c: ([c.t([1]), []], {})),
        C("broadcast [4,5] -> [2,2,5]", lambda c: ([c.t([4, 5], F32, None, "bcast:0"), [2, 2, 5]], {})),
        C("int64 [3,5] -> [5,3]", lambda c: ([c.t([3, 5], I64), [5, 3]], {})),
        C("bool [2,6] -> [12]", lambda c: ([c.t([2, 6], BOOL), [12]], {})),
    ]
    ops["aten._unsafe_view.default"] = [
        C("[3,5] -> [15]", lambda c: ([c.t([3, 5]), [15]], {})),
        C("bfloat16 [2,3,4] -> [6,4]", lambda c: ([c.t([2, 3, 4], BF16), [6, 4]], {})),
        C("int64 [6] -> [2,3]", lambda c: ([c.t([6], I64), [2, 3]], {})),
        C("0-dim -> [1,1]", lambda c: ([c.t([]), [1, 1]], {})),
        C("[3,5] -> [-1]", lambda c: ([c.t([3, 5]), [-1]], {})),
    ]
    ops["aten.reshape.default"] = [
        C("[3,5] -> [5,3] (a view)", lambda c: ([c.t([3, 5]), [5, 3]], {})),
        C("transposed [6,4] -> [24] (a copy)", lambda c: ([c.t([6, 4], F32, None, "t"), [24]], {})),
        C("bfloat16 [2,3,4] -> [-1]", lambda c: ([c.t([2, 3, 4], BF16), [-1]], {})),
        C("broadcast [4,5] -> [20] (a copy)", lambda c: ([c.t([4, 5], F32, None, "bcast:0"), [20]], {})),
        C("int64 0-dim -> [1]", lambda c: ([c.t([], I64), [1]], {})),
        C("float16 with gaps [2,3,5] -> [6,5]", lambda c: ([c.t([2, 3, 5], F16, None, "nc"), [6, 5]], {})),
    ]
    ops["aten.permute.default"] = [
        C("[2,3,4] (2,0,1)", lambda c: ([c.t([2, 3, 4]), [2, 0, 1]], {})),
        C("bfloat16 [3,5] (1,0)", lambda c: ([c.t([3, 5], BF16), [1, 0]], {})),
        C("negative dims (-1,0,1)", lambda c: ([c.t([2, 3, 4]), [-1, 0, 1]], {})),
        C("transposed (1,0)", lambda c: ([c.t([6, 4], F32, None, "t"), [1, 0]], {})),
        C("int64 [2,1,3] (1,2,0)", lambda c: ([c.t([2, 1, 3], I64), [1, 2, 0]], {})),
        C("0-dim ()", lambda c: ([c.t([]), []], {})),
    ]
    ops["aten.unsqueeze.default"] = [
        C("dim 0", lambda c: ([c.t([3, 5]), 0], {})),
        C("bfloat16 dim -1", lambda c: ([c.t([3, 5], BF16), -1], {})),
        C("0-dim dim 0", lambda c: ([c.t([]), 0], {})),
        C("transposed dim 1", lambda c: ([c.t([6, 4], F32, None, "t"), 1], {})),
        C("int64 [7] dim 1", lambda c: ([c.t([7], I64), 1], {})),
        C("broadcast dim 1", lambda c: ([c.t([4, 5], F32, None, "bcast:0"), 1], {})),
    ]
    ops["aten.expand.default"] = [
        C("[3,1] -> [3,5]", lambda c: ([c.t([3, 1]), [3, 5]], {})),
        C("bfloat16 [5] -> [4,5]", lambda c: ([c.t([5], BF16), [4, 5]], {})),
        C("[1] -> [2,3,4]", lambda c: ([c.t([1]), [2, 3, 4]], {})),
        C("[3,1] -> [-1,5]", lambda c: ([c.t([3, 1]), [-1, 5]], {})),
        C("int64 0-dim -> [3,2]", lambda c: ([c.t([], I64), [3, 2]], {})),
        C("[6,1] -> [2,6,4]", lambda c: ([c.t([6, 1]), [2, 6, 4]], {})),
        C("transposed [1,4] -> [3,4]", lambda c: ([c.t([1, 4], F32, None, "t"), [3, 4]], {})),
        C("bool [3,1] -> [3,5]", lambda c: ([c.t([3, 1], BOOL), [3, 5]], {})),
    ]
    ops["aten.alias.default"] = [
        C("float32", lambda c: ([c.t([3, 5])], {})),
        C("bfloat16 transposed", lambda c: ([c.t([6, 4], BF16, None, "t")], {})),
        C("int64 0-dim", lambda c: ([c.t([], I64)], {})),
        C("broadcast", lambda c: ([c.t([4, 5], F32, None, "bcast:0")], {})),
    ]
    ops["aten.slice.Tensor"] = [
        C("dim 1 [2:9]", lambda c: ([c.t([7, 13]), 1, 2, 9], {})),
        C("dim 0 [1:] (end INT64_MAX as FX writes x[1:])", lambda c: ([c.t([7, 13]), 0, 1, INT64_MAX], {})),
        C("bfloat16 dim 1 [0:13:2]", lambda c: ([c.t([7, 13], BF16), 1, 0, 13, 2], {})),
        C("dim -1 [-5:-1]", lambda c: ([c.t([7, 13]), -1, -5, -1], {})),
        C("empty [3:3]", lambda c: ([c.t([7, 13]), 0, 3, 3], {})),
        C("transposed dim 1 [1:3]", lambda c: ([c.t([6, 4], F32, None, "t"), 1, 1, 3], {})),
        C("int64 all defaults", lambda c: ([c.t([10], I64)], {})),
        C("end beyond size [1:100]", lambda c: ([c.t([7, 13]), 1, 5, 100], {})),
    ]
    ops["aten.select.int"] = [
        C("dim 0 index 2", lambda c: ([c.t([7, 13]), 0, 2], {})),
        C("bfloat16 dim 1 index -1", lambda c: ([c.t([7, 13], BF16), 1, -1], {})),
        C("dim 2 index 0", lambda c: ([c.t([2, 3, 4]), 2, 0], {})),
        C("[5] -> 0-dim", lambda c: ([c.t([5]), 0, 3], {})),
        C("transposed dim 1 index 1", lambda c: ([c.t([6, 4], F32, None, "t"), 1, 1], {})),
        C("int64 dim -1 index 4", lambda c: ([c.t([3, 5], I64), -1, 4], {})),
    ]
    ops["aten.split.Tensor"] = [
        C("[7,13] size 3 dim 0 (3,3,1)", lambda c: ([c.t([7, 13]), 3], {})),
        C("bfloat16 size 5 dim -1", lambda c: ([c.t([7, 13], BF16), 5, -1], {})),
        C("size 10 > dim: one chunk", lambda c: ([c.t([7, 13]), 10], {})),
        C("transposed size 2 dim 1", lambda c: ([c.t([6, 4], F32, None, "t"), 2, 1], {})),
        C("int64 [9] size 3", lambda c: ([c.t([9], I64), 3], {})),
    ]
    ops["aten.split_with_sizes.default"] = [
        C("[2,5] dim 0", lambda c: ([c.t([7, 13]), [2, 5]], {})),
        C("bfloat16 [4,4,5] dim -1", lambda c: ([c.t([7, 13], BF16), [4, 4, 5], -1], {})),
        C("with an empty chunk [0,7]", lambda c: ([c.t([7, 13]), [0, 7]], {})),
        C("transposed [1,3] dim 1", lambda c: ([c.t([6, 4], F32, None, "t"), [1, 3], 1], {})),
        C("fused qkv [2,96] -> 3x32 dim 1", lambda c: ([c.t([2, 96], BF16), [32, 32, 32], 1], {})),
    ]
    ops["aten.squeeze.default"] = [
        C("[3,1,5,1]", lambda c: ([c.t([3, 1, 5, 1])], {})),
        C("bfloat16 [1] -> []", lambda c: ([c.t([1], BF16)], {})),
        C("[3,5] no-op", lambda c: ([c.t([3, 5])], {})),
        C("[1,1] -> []", lambda c: ([c.t([1, 1])], {})),
    ]
    ops["aten.squeeze.dim"] = [
        C("[3,1,5] dim 1", lambda c: ([c.t([3, 1, 5]), 1], {})),
        C("[3,1,5] dim 0 no-op", lambda c: ([c.t([3, 1, 5]), 0], {})),
        C("bfloat16 [1] dim 0", lambda c: ([c.t([1], BF16), 0], {})),
        C("[3,5,1] dim -1", lambda c: ([c.t([3, 5, 1]), -1], {})),
    ]
    ops["aten.squeeze.dims"] = [
        C("[1,3,1,5] dims [0,2]", lambda c: ([c.t([1, 3, 1, 5]), [0, 2]], {})),
        C("[1,3,1,5] dims [1] no-op", lambda c: ([c.t([1, 3, 1, 5]), [1]], {})),
        C("bfloat16 [3,1,5,1] dims [-1,1]", lambda c: ([c.t([3, 1, 5, 1], BF16), [-1, 1]], {})),
        C("[1] dims [0]", lambda c: ([c.t([1]), [0]], {})),
    ]
    ops["aten.t.default"] = [
        C("[3,5]", lambda c: ([c.t([3, 5])], {})),
        C("bfloat16 [7] (1-D: unchanged)", lambda c: ([c.t([7], BF16)], {})),
        C("transposed", lambda c: ([c.t([6, 4], F32, None, "t")], {})),
        C("int64 0-dim", lambda c: ([c.t([], I64)], {})),
    ]
    ops["aten.transpose.int"] = [
        C("[2,3,4] (0,2)", lambda c: ([c.t([2, 3, 4]), 0, 2], {})),
        C("bfloat16 (-1,-2)", lambda c: ([c.t([3, 5], BF16), -1, -2], {})),
        C("(0,0) no-op", lambda c: ([c.t([3, 5]), 0, 0], {})),
        C("transposed (0,1)", lambda c: ([c.t([6, 4], F32, None, "t"), 0, 1], {})),
        C("int64 (1,2)", lambda c: ([c.t([2, 3, 4], I64), 1, 2], {})),
    ]
    ops["aten.as_strided.default"] = [
        C("[20] -> [3,4] (4,1)", lambda c: ([c.t([20]), [3, 4], [4, 1]], {})),
        C("overlapping [3,4] (2,1)", lambda c: ([c.t([20]), [3, 4], [2, 1]], {})),
        C("[2,3] (1,2) storage_offset 3", lambda c: ([c.t([20]), [2, 3], [1, 2], 3], {})),
        C("bfloat16 [4,6] -> [6,4] (1,6)", lambda c: ([c.t([4, 6], BF16), [6, 4], [1, 6]], {})),
        C("of a transposed input (reads its storage)", lambda c: ([c.t([6, 4], F32, None, "t"), [3, 2], [1, 4], 1], {})),
        C("stride 0 [4,5] (0,1)", lambda c: ([c.t([20]), [4, 5], [0, 1]], {})),
    ]
    # creation
    fx = lambda dt: {"dtype": dt, "layout": STRIDED, "device": DEV, "pin_memory": False}  # noqa: E731
    ops["aten.full.default"] = [
        C("[3,5] 1.5 float32", lambda c: ([[3, 5], 1.5], fx(F32))),
        C("[2,8,1] 0 float32", lambda c: ([[2, 8, 1], 0], fx(F32))),
        C("[7] -inf bfloat16", lambda c: ([[7], NINF], fx(BF16))),
        C("[3,5] 7 int64", lambda c: ([[3, 5], 7], fx(I64))),
        C("[2,2] True bool", lambda c: ([[2, 2], True], fx(BOOL))),
        C("[] 2.5 float32", lambda c: ([[], 2.5], fx(F32))),
        C("[1] 3, no dtype (int64)", lambda c: ([[1], 3], {"device": DEV})),
        C("[2,3] 0.5, no dtype (float32)", lambda c: ([[2, 3], 0.5], {"device": DEV})),
    ]
    ops["aten.full_like.default"] = [
        C("float32 2.0", lambda c: ([c.t([3, 5]), 2.0], {})),
        C("bfloat16 0.0 -> dtype float32, FX-style kwargs",
          lambda c: ([c.t([7, 1, 13], BF16), 0.0], {"dtype": F32, "layout": STRIDED, "device": DEV,
                                                    "pin_memory": False, "memory_format": PRESERVE})),
        C("transposed 1.0 preserve_format", lambda c: ([c.t([6, 4], F32, None, "t"), 1.0], {"memory_format": PRESERVE})),
        C("int64 3", lambda c: ([c.t([3, 5], I64), 3], {})),
        C("float32 -inf", lambda c: ([c.t([3, 5]), NINF], {})),
        C("broadcast input 1.0", lambda c: ([c.t([4, 5], F32, None, "bcast:0"), 1.0], {})),
        C("bfloat16 1 dtype int64", lambda c: ([c.t([3, 5], BF16), 1], {"dtype": I64})),
    ]
    ops["aten.zeros.default"] = creation_cases()
    ops["aten.ones.default"] = creation_cases()
    ops["aten.zeros_like.default"] = creation_like_cases()
    ops["aten.ones_like.default"] = creation_like_cases()
    ops["aten.scalar_tensor.default"] = [
        C("2.5 float32", lambda c: ([2.5], fx(F32))),
        C("-inf bfloat16", lambda c: ([NINF], fx(BF16))),
        C("3 int64", lambda c: ([3], fx(I64))),
        C("True bool", lambda c: ([True], fx(BOOL))),
        C("1e-5 no dtype (float32)", lambda c: ([1e-5], {"device": DEV})),
        C("0 float16", lambda c: ([0], fx(F16))),
    ]
    ops["aten.arange.default"] = [
        C("8 int64", lambda c: ([8], fx(I64))),
        C("5 float32", lambda c: ([5], fx(F32))),
        C("7 no dtype (int64)", lambda c: ([7], {"device": DEV})),
        C("6 bfloat16", lambda c: ([6], fx(BF16))),
        C("1 int32", lambda c: ([1], fx(I32))),
        C("2.5 no dtype (float32)", lambda c: ([2.5], {"device": DEV})),
    ]
    ops["aten.arange.start"] = [
        C("2..9 int64", lambda c: ([2, 9], fx(I64))),
        C("-3..4 float32", lambda c: ([-3, 4], fx(F32))),
        C("0.5..3.0 no dtype (float32)", lambda c: ([0.5, 3.0], {"device": DEV})),
        C("5..5 empty", lambda c: ([5, 5], fx(I64))),
    ]
    ops["aten.arange.start_step"] = [
        C("0..10 step 3 int64", lambda c: ([0, 10, 3], fx(I64))),
        C("1.0..2.0 step 0.25 float32", lambda c: ([1.0, 2.0, 0.25], fx(F32))),
        C("10..0 step -2 int64", lambda c: ([10, 0, -2], fx(I64))),
        C("0..12 step 1 float32", lambda c: ([0, 12], fx(F32))),
        C("-1.0..1.0 step 0.3 (float32)", lambda c: ([-1.0, 1.0, 0.3], {"device": DEV})),
        C("0..8 step 2 int32", lambda c: ([0, 8, 2], fx(I32))),
    ]
    iota_kw = lambda s, st, dt: {"start": s, "step": st, "dtype": dt, "device": DEV, "requires_grad": False}  # noqa: E731
    ops["prims.iota.default"] = [
        C("8 from 0 step 1 int64", lambda c: ([8], iota_kw(0, 1, I64))),
        C("5 from 3 step 2 int32", lambda c: ([5], iota_kw(3, 2, I32))),
        C("4 from 10 step -3 int64", lambda c: ([4], iota_kw(10, -3, I64))),
        C("1 from 0 step 1 int64", lambda c: ([1], iota_kw(0, 1, I64))),
    ]
    # cat / scatter / copy

    def cat_twice(c):
        x = c.t([2, 2])
        return [[x, x], 1], {}

    ops["aten.cat.default"] = [
        C("[3,5] + [2,5] dim 0", lambda c: ([[c.t([3, 5]), c.t([2, 5])]], {})),
        C("three inputs dim -1", lambda c: ([[c.t([3, 2]), c.t([3, 4]), c.t([3, 1])], -1], {})),
        C("bfloat16 + float32 (promotion)", lambda c: ([[c.t([2, 3], BF16), c.t([2, 3])]], {})),
        C("transposed + contiguous dim 1", lambda c: ([[c.t([6, 4], F32, None, "t"), c.t([6, 4])], 1], {})),
        C("int64 [3] + [4]", lambda c: ([[c.t([3], I64), c.t([4], I64)]], {})),
        C("with an empty [0,5]", lambda c: ([[c.t([0, 5]), c.t([3, 5])]], {})),
        C("bfloat16 broadcast + contiguous dim 2",
          lambda c: ([[c.t([2, 3, 4], BF16, None, "bcast:1"), c.t([2, 3, 4], BF16)], 2], {})),
        C("a single tensor", lambda c: ([[c.t([3, 5])]], {})),
        C("the same tensor twice dim 1", cat_twice),
    ]
    ops["aten.slice_scatter.default"] = [
        C("[7,13] <- [7,4] dim 1 [2:6]", lambda c: ([c.t([7, 13]), c.t([7, 4]), 1, 2, 6], {})),
        C("[7,13] <- [4,13] dim 0 [0::2]", lambda c: ([c.t([7, 13]), c.t([4, 13]), 0, 0, INT64_MAX, 2], {})),
        C("bfloat16 [8,6] <- [8,3] dim 1 [3:]", lambda c: ([c.t([8, 6], BF16), c.t([8, 3], BF16), 1, 3, INT64_MAX], {})),
        C("transposed [6,4] <- [2,4] dim 0 [1:3]", lambda c: ([c.t([6, 4], F32, None, "t"), c.t([2, 4]), 0, 1, 3], {})),
        C("[10] <- [10] all defaults", lambda c: ([c.t([10]), c.t([10])], {})),
        C("int64 [5,4] <- [5,2] dim -1 [-2:]", lambda c: ([c.t([5, 4], I64), c.t([5, 2], I64), -1, -2, INT64_MAX], {})),
    ]
    ops["aten.select_scatter.default"] = [
        C("[7,13] <- [13] dim 0 index 2", lambda c: ([c.t([7, 13]), c.t([13]), 0, 2], {})),
        C("[7,13] <- [7] dim 1 index -1", lambda c: ([c.t([7, 13]), c.t([7]), 1, -1], {})),
        C("bfloat16 [2,3,4] <- [2,3] dim 2 index 0", lambda c: ([c.t([2, 3, 4], BF16), c.t([2, 3], BF16), 2, 0], {})),
        C("transposed [6,4] <- [6] dim 1 index 3", lambda c: ([c.t([6, 4], F32, None, "t"), c.t([6]), 1, 3], {})),
        C("[5] <- 0-dim dim 0 index 1", lambda c: ([c.t([5]), c.t([]), 0, 1], {})),
    ]
    ops["aten.copy.default"] = [
        C("same shape", lambda c: ([c.t([3, 5]), c.t([3, 5])], {})),
        C("broadcast src [5]", lambda c: ([c.t([3, 5]), c.t([5])], {})),
        C("bfloat16 <- float32 (self's dtype)", lambda c: ([c.t([3, 5], BF16), c.t([3, 5])], {})),
        C("transposed self", lambda c: ([c.t([6, 4], F32, None, "t"), c.t([6, 4])], {})),
        C("float32 <- bfloat16 transposed", lambda c: ([c.t([3, 5]), c.t([3, 5], BF16, None, "t")], {})),
        C("int64 <- float32 (truncation)", lambda c: ([c.t([4], I64), c.t([4])], {})),
        C("0-dim", lambda c: ([c.t([]), c.t([])], {})),
    ]
    # matmul
    ops["aten.mm.default"] = [
        C("float32 [32,48] x [48,16]", lambda c: ([c.t([32, 48]), c.t([48, 16])], {})),
        C("bfloat16 [7,13] x [13,5]", lambda c: ([c.t([7, 13], BF16), c.t([13, 5], BF16)], {})),
        C("float16, second operand column-major", lambda c: ([c.t([8, 16], F16), c.t([16, 8], F16, None, "t")], {})),
        C("[1,8] x [8,1]", lambda c: ([c.t([1, 8]), c.t([8, 1])], {})),
        C("bfloat16 x w.t() (linear: second operand column-major)",
          lambda c: ([c.t([16, 32], BF16), c.t([32, 24], BF16, None, "t")], {})),
        C("float32 first operand transposed", lambda c: ([c.t([5, 3], F32, None, "t"), c.t([3, 4])], {})),
    ]
    ops["aten.addmm.default"] = [
        C("float32 bias [16], [32,48] x [48,16]", lambda c: ([c.t([16]), c.t([32, 48]), c.t([48, 16])], {})),
        C("bfloat16 bias [24], x w.t() (linear)",
          lambda c: ([c.t([24], BF16), c.t([16, 32], BF16), c.t([32, 24], BF16, None, "t")], {})),
        C("bias [8,6], beta 0.5, alpha 2.0",
          lambda c: ([c.t([8, 6]), c.t([8, 5]), c.t([5, 6])], {"beta": 0.5, "alpha": 2.0})),
        C("bias [1,6]", lambda c: ([c.t([1, 6]), c.t([8, 5]), c.t([5, 6])], {})),
        C("float16, mat1 transposed", lambda c: ([c.t([6], F16), c.t([8, 5], F16, None, "t"), c.t([5, 6], F16)], {})),
    ]
    ops["aten.bmm.default"] = [
        C("float32 [4,7,13] x [4,13,5]", lambda c: ([c.t([4, 7, 13]), c.t([4, 13, 5])], {})),
        C("bfloat16 [2,8,16] x [2,16,8]", lambda c: ([c.t([2, 8, 16], BF16), c.t([2, 16, 8], BF16)], {})),
        C("second operand transposed", lambda c: ([c.t([3, 5, 6]), c.t([3, 6, 4], F32, None, "t")], {})),
        C("float16 batch 1", lambda c: ([c.t([1, 8, 8], F16), c.t([1, 8, 8], F16)], {})),
        C("broadcast batch (stride 0)", lambda c: ([c.t([4, 3, 5], F32, None, "bcast:0"), c.t([4, 5, 2])], {})),
    ]
    ops["aten.baddbmm.default"] = [
        C("self [4,7,5]", lambda c: ([c.t([4, 7, 5]), c.t([4, 7, 13]), c.t([4, 13, 5])], {})),
        C("self [7,5] broadcast", lambda c: ([c.t([7, 5]), c.t([4, 7, 13]), c.t([4, 13, 5])], {})),
        C("beta 0.5, alpha 2.0",
          lambda c: ([c.t([2, 3, 4]), c.t([2, 3, 6]), c.t([2, 6, 4])], {"beta": 0.5, "alpha": 2.0})),
        C("bfloat16", lambda c: ([c.t([2, 8, 8], BF16), c.t([2, 8, 16], BF16), c.t([2, 16, 8], BF16)], {})),
        C("self [1,1,5]", lambda c: ([c.t([1, 1, 5]), c.t([3, 4, 6]), c.t([3, 6, 5])], {})),
    ]
    ops["aten._scaled_mm.default"] = [
        scaled_mm_case("tensorwise e4m3 [16,32] x [32,16] out bfloat16", 16, 32, 16),
        scaled_mm_case("tensorwise out float32", 16, 32, 16, out_dtype=F32),
        scaled_mm_case("tensorwise with bias bfloat16", 16, 32, 16, bias=True),
        scaled_mm_case("rowwise [32,48] x [48,16] out bfloat16", 32, 48, 16, rowwise=True),
        scaled_mm_case("rowwise with bias bfloat16", 32, 48, 16, rowwise=True, bias=True, optional=True),
        scaled_mm_case("rowwise out float32", 32, 48, 16, rowwise=True, out_dtype=F32, optional=True),
        scaled_mm_case("tensorwise e4m3 x e5m2 (grad GEMM)", 16, 32, 16, b_dt=E5M2),
        scaled_mm_case("tensorwise e5m2 x e4m3 (grad GEMM)", 16, 32, 16, a_dt=E5M2),
        scaled_mm_case("tensorwise use_fast_accum", 32, 48, 32, fast_accum=True, optional=True),
    ]

    # indexing (workloads/ops/indexing.cpp)
    ops["aten.index.Tensor"] = [
        C("float32 [5,4] rows by int64 [3]", lambda c: ([c.t([5, 4]), [c.idx([3], 0, 5)]], {})),
        C("bfloat16 [4,6,3] (None, int64 [2,3]): in place", lambda c: ([c.t([4, 6, 3], BF16), [None, c.idx([2, 3], 0, 6)]], {})),
        C("adjacent int64 [3] and [2,1] broadcast, replace in place",
          lambda c: ([c.t([2, 5, 6, 3]), [None, c.idx([3], 0, 5), c.idx([2, 1], 0, 6)]], {})),
        C("separated by None: advanced dims go first",
          lambda c: ([c.t([4, 3, 5]), [c.idx([2, 2], 0, 4), None, c.idx([2], 0, 5)]], {})),
        C("negative int64 indices", lambda c: ([c.t([6, 4]), [c.idx([5], -6, 6)]], {})),
        C("int32 indices, transposed self", lambda c: ([c.t([6, 4], F32, None, "t"), [None, c.idx([3], 0, 4, I32)]], {})),
        C("int64 self, 0-dim index", lambda c: ([c.t([5, 3], I64), [c.idx([], 0, 5)]], {})),
        C("bfloat16 gather of rows (embedding-like), index [2,3]", lambda c: ([c.t([7, 8], BF16), [c.idx([2, 3], 0, 7)]], {})),
    ]
    ops["aten.index_put.default"] = [
        C("float32 rows, distinct indices", lambda c: ([c.t([6, 4]), [c.perm_idx([3], 0, 6)], c.t([3, 4])], {})),
        C("accumulate duplicates float32", lambda c: ([c.t([5, 4]), [c.idx([9], 0, 5)], c.t([9, 4])], {"accumulate": True})),
        C("bfloat16 (None, int64), values broadcast [1]",
          lambda c: ([c.t([3, 6], BF16), [None, c.perm_idx([4], 0, 6)], c.t([1], BF16)], {})),
        C("two index tensors, accumulate, values [5]",
          lambda c: ([c.t([4, 5]), [c.idx([5], 0, 4), c.idx([5], 0, 5)], c.t([5])], {"accumulate": True})),
        C("int32 negative indices, distinct", lambda c: ([c.t([6, 3]), [c.perm_idx([4], 0, 6, I32, -6)], c.t([4, 3])], {})),
        C("int64 self accumulate", lambda c: ([c.t([4, 3], I64), [c.idx([6], 0, 4)], c.t([6, 3], I64)], {"accumulate": True})),
    ]
    ops["aten.gather.default"] = [
        C("float32 dim 1", lambda c: ([c.t([3, 5]), 1, c.idx([3, 4], 0, 5)], {})),
        C("bfloat16 dim 0, index smaller than self", lambda c: ([c.t([6, 4], BF16), 0, c.idx([3, 2], 0, 6)], {})),
        C("dim -1, [2,3,7] index [2,3,2]", lambda c: ([c.t([2, 3, 7]), -1, c.idx([2, 3, 2], 0, 7)], {})),
        C("transposed self dim 0", lambda c: ([c.t([5, 4], F32, None, "t"), 0, c.idx([5, 4], 0, 5)], {})),
        C("int64 self", lambda c: ([c.t([4, 6], I64), 1, c.idx([4, 6], 0, 6)], {})),
        C("1-d", lambda c: ([c.t([8]), 0, c.idx([5], 0, 8)], {})),
    ]
    ops["aten.scatter.src"] = [
        C("float32 dim 0, distinct", lambda c: ([c.t([5, 4]), 0, c.perm_idx([3, 4], 0, 5), c.t([3, 4])], {})),
        C("bfloat16 dim -1, src larger than index", lambda c: ([c.t([3, 6], BF16), -1, c.perm_idx([3, 2], 1, 6), c.t([4, 5], BF16)], {})),
        C("3-d dim 1", lambda c: ([c.t([2, 5, 3]), 1, c.perm_idx([2, 4, 3], 1, 5), c.t([2, 4, 3])], {})),
        C("int64", lambda c: ([c.t([4, 5], I64), 1, c.perm_idx([4, 5], 1, 5), c.t([4, 5], I64)], {})),
        C("transposed self", lambda c: ([c.t([5, 4], F32, None, "t"), 0, c.perm_idx([2, 4], 0, 5), c.t([2, 4])], {})),
    ]
    ops["aten.scatter.value"] = [
        C("float32 dim 1, value 0.5 (duplicates write the same value)", lambda c: ([c.t([3, 5]), 1, c.idx([3, 4], 0, 5), 0.5], {})),
        C("bfloat16 dim 0, value -inf", lambda c: ([c.t([5, 4], BF16), 0, c.idx([2, 4], 0, 5), NINF], {})),
        C("int64 value 7", lambda c: ([c.t([4, 5], I64), -1, c.idx([4, 2], 0, 5), 7], {})),
        C("3-d dim 2", lambda c: ([c.t([2, 3, 6]), 2, c.idx([2, 3, 3], 0, 6), 1.0], {})),
    ]
    ops["aten.scatter_add.default"] = [
        C("float32 dim 0 with duplicates", lambda c: ([c.t([4, 5]), 0, c.idx([9, 5], 0, 4), c.t([9, 5])], {})),
        C("float32 dim -1 with duplicates", lambda c: ([c.t([3, 4]), -1, c.idx([3, 10], 0, 4), c.t([3, 10])], {})),
        C("bfloat16 dim 1, distinct", lambda c: ([c.t([3, 6], BF16), 1, c.perm_idx([3, 4], 1, 6), c.t([3, 4], BF16)], {})),
        C("int64 duplicates", lambda c: ([c.t([3, 4], I64), 0, c.idx([6, 4], 0, 3), c.t([6, 4], I64)], {})),
        C("src larger than index, 3-d dim 1",
          lambda c: ([c.t([2, 3, 4]), 1, c.idx([2, 5, 3], 0, 3), c.t([2, 6, 4])], {})),
    ]
    ops["aten.embedding.default"] = [
        C("float32 [10,8], indices [2,5]", lambda c: ([c.t([10, 8]), c.idx([2, 5], 0, 10)], {})),
        C("bfloat16 [16,4], indices [7]", lambda c: ([c.t([16, 4], BF16), c.idx([7], 0, 16)], {})),
        C("int32 indices", lambda c: ([c.t([6, 3]), c.idx([4], 0, 6, I32)], {})),
        C("padding_idx 0 (forward unchanged)", lambda c: ([c.t([6, 3]), c.idx([2, 3], 0, 6), 0], {})),
        C("transposed weight", lambda c: ([c.t([5, 6], F32, None, "t"), c.idx([3, 2], 0, 5)], {})),
        C("0-dim index", lambda c: ([c.t([5, 4]), c.idx([], 0, 5)], {})),
    ]
    ops["aten.embedding_dense_backward.default"] = [
        C("float32 grad [2,5,8], 10 weights, no padding", lambda c: ([c.t([2, 5, 8]), c.idx([2, 5], 0, 10), 10, -1, False], {})),
        C("duplicates, padding_idx 1", lambda c: ([c.t([12, 4]), c.idx([12], 0, 4), 4, 1, False], {})),
        C("scale_grad_by_freq", lambda c: ([c.t([3, 4, 6]), c.idx([3, 4], 0, 5), 5, -1, True], {})),
        C("bfloat16 grad, distinct indices", lambda c: ([c.t([4, 8], BF16), c.perm_idx([4], 0, 6), 6, -1, False], {})),
        C("int32 indices, scale_grad_by_freq and padding_idx 0",
          lambda c: ([c.t([8, 3]), c.idx([8], 0, 3, I32), 3, 0, True], {})),
    ]
    ops["aten.constant_pad_nd.default"] = [
        C("float32 last dim (1, 2)", lambda c: ([c.t([3, 5]), [1, 2]], {})),
        C("bfloat16 two dims value -inf", lambda c: ([c.t([2, 3, 4], BF16), [1, 0, 2, 1], NINF], {})),
        C("negative pads crop", lambda c: ([c.t([4, 6]), [-1, -2, 1, -1]], {})),
        C("mixed crop and pad, value 1.5", lambda c: ([c.t([3, 5]), [-2, 3], 1.5], {})),
        C("transposed input", lambda c: ([c.t([6, 4], F32, None, "t"), [0, 1, 2, 0]], {})),
        C("int64 value 7", lambda c: ([c.t([3, 4], I64), [2, 2], 7], {})),
        C("three dims", lambda c: ([c.t([2, 2, 3]), [1, 1, 0, 1, 1, 0]], {})),
    ]
    ops["aten.cumsum.default"] = [
        C("float32 dim 1", lambda c: ([c.t([3, 7]), 1], {})),
        C("bfloat16 dim -1", lambda c: ([c.t([4, 9], BF16), -1], {})),
        C("dim 0, transposed", lambda c: ([c.t([6, 4], F32, None, "t"), 0], {})),
        C("int64 (int64 result)", lambda c: ([c.t([3, 5], I64), 1], {})),
        C("int32 (int64 result)", lambda c: ([c.t([8], I32), 0], {})),
        C("bool (int64 result)", lambda c: ([c.t([2, 6], BOOL), 1], {})),
        C("bfloat16 dtype float32", lambda c: ([c.t([3, 5], BF16), 1], {"dtype": F32})),
        C("3-d dim 1 long row", lambda c: ([c.t([2, 300, 3]), 1], {})),
    ]
    for name in ("argmax", "argmin"):
        ops[f"aten.{name}.default"] = [
            C("float32 dim 1", lambda c: ([c.t([3, 7]), 1], {})),
            C("ties: first index", lambda c: ([c.t([4, 9], F32, "halves"), -1], {})),
            C("bfloat16 dim 0 keepdim", lambda c: ([c.t([5, 4], BF16), 0, True], {})),
            C("dim None (flattened)", lambda c: ([c.t([3, 5])], {})),
            C("dim None, transposed", lambda c: ([c.t([6, 4], F32, "halves", "t")], {})),
            C("int64", lambda c: ([c.t([3, 5], I64), 1], {})),
            C("special values (nan wins)", lambda c: ([c.t([10], F32, "specials"), 0], {})),
        ]
    ops["aten.topk.default"] = [
        C("float32 k 3", lambda c: ([c.t([4, 9], F32, "distinct"), 3], {})),
        C("bfloat16 k 2 dim 0 smallest", lambda c: ([c.t([7, 3], BF16, "distinct"), 2, 0, False], {})),
        C("k = full dim", lambda c: ([c.t([3, 6], F32, "distinct"), 6], {})),
        C("3-d dim 1", lambda c: ([c.t([2, 8, 3], F32, "distinct"), 4, 1], {})),
        C("int64", lambda c: ([c.t([3, 7], I64, "distinct"), 2], {})),
        C("transposed, k 1", lambda c: ([c.t([6, 4], F32, "distinct", "t"), 1], {})),
        C("long row k 5", lambda c: ([c.t([2, 200], F32, "distinct"), 5], {})),
    ]
    ops["aten.sort.default"] = [
        C("float32 distinct", lambda c: ([c.t([4, 9], F32, "distinct")], {})),
        C("bfloat16 descending dim 0", lambda c: ([c.t([7, 3], BF16, "distinct"), 0, True], {})),
        C("int64", lambda c: ([c.t([3, 6], I64, "distinct")], {})),
        C("transposed dim -1", lambda c: ([c.t([6, 4], F32, "distinct", "t")], {})),
        C("long row", lambda c: ([c.t([2, 300], F32, "distinct")], {})),
    ]
    ops["aten.sort.stable"] = [
        C("ties, stable ascending", lambda c: ([c.t([4, 9], F32, "halves")], {"stable": True})),
        C("ties, stable descending dim 0", lambda c: ([c.t([9, 3], F32, "halves")], {"stable": True, "dim": 0, "descending": True})),
        C("bfloat16 ties", lambda c: ([c.t([3, 12], BF16, "halves")], {"stable": True, "dim": -1})),
        C("int64 ties", lambda c: ([c.t([3, 10], I64, "small")], {"stable": True})),
        C("special values (nan last)", lambda c: ([c.t([10], F32, "specials")], {"stable": True})),
        C("special values descending (nan first)", lambda c: ([c.t([10], F32, "specials")], {"stable": True, "descending": True})),
    ]
    add_nn_ops(ops)
    return ops


# --- neural-network ops (workloads/ops/nn.cpp) -------------------------------------------------------------


def softmax_cases():
    return [
        C("float32 [4,10] dim -1", lambda c: ([c.t([4, 10]), -1, False], {})),
        C("bfloat16 [3,7,33] dim -1", lambda c: ([c.t([3, 7, 33], BF16), -1, False], {})),
        C("float16 [5,12] dim 0", lambda c: ([c.t([5, 12], F16), 0, False], {})),
        C("float32 [2,5,6] dim 1 (inner stride 6)", lambda c: ([c.t([2, 5, 6]), 1, False], {})),
        C("float16 half_to_float (float32 out)", lambda c: ([c.t([4, 9], F16), -1, True], {})),
        C("bfloat16 half_to_float", lambda c: ([c.t([4, 9], BF16), -1, True], {}), optional=True),
        C("float32 attention scores with -inf", lambda c: ([c.t([6, 16], F32, "masked"), -1, False], {})),
        C("float32 0-dim dim 0", lambda c: ([c.t([]), 0, False], {})),
        C("float32 [3,1000] dim -1 (long rows)", lambda c: ([c.t([3, 1000], F32), -1, False], {})),
        C("bfloat16 [2,2050] dim 1 (odd long rows)", lambda c: ([c.t([2, 2050], BF16), 1, False], {})),
        C("float32 transposed [6,4] dim -1", lambda c: ([c.t([6, 4], F32, None, "t"), -1, False], {})),
    ]


def softmax_backward_cases(log):
    fwd = torch.ops.aten._log_softmax.default if log else torch.ops.aten._softmax.default

    def case(shape, dt, dim, grad_dt=None, kind="normal"):
        def build(c):
            x = c._values(shape, kind).to(dt).to(DEV)
            g = c.t(shape, grad_dt or dt)
            y = c.derived(fwd(x, dim, grad_dt is not None))
            return [g, y, dim, dt], {}
        return build

    return [
        C("float32 [4,10] dim -1", case([4, 10], F32, -1)),
        C("bfloat16 [3,7,33] dim -1", case([3, 7, 33], BF16, -1)),
        C("float16 [5,12] dim 0", case([5, 12], F16, 0)),
        C("float32 [2,5,6] dim 1", case([2, 5, 6], F32, 1)),
        C("float32 grad of a float16 half_to_float softmax (input_dtype float16)", case([4, 9], F16, -1, F32)),
        C("float32 grad, input_dtype bfloat16", case([4, 9], BF16, -1, F32), optional=True),
        C("float32 [3,1000] dim -1", case([3, 1000], F32, -1)),
        C("float32 attention scores with -inf", case([6, 16], F32, -1, kind="masked")),
        C("float32 0-dim", case([], F32, 0)),
    ]


def log_probs(c, shape, dt):
    return c.derived(torch.log_softmax(c._values(shape, "normal").to(DEV), -1).to(dt))


def nll_forward_cases():
    def case(N, C_, dt, weight, reduction, ignore=-100, hits=0):
        def build(c):
            x = log_probs(c, [N, C_] if N is not None else [C_], dt)
            t = c.target([N] if N is not None else [], C_, ignore, hits)
            w = c.t([C_], dt, "pos") if weight else None
            return [x, t, w, reduction, ignore], {}
        return build

    return [
        C("float32 [8,5] mean, no weight", case(8, 5, F32, False, 1)),
        C("float32 [8,5] mean with weight", case(8, 5, F32, True, 1)),
        C("float32 [12,6] mean with weight, ignore_index 2 hit", case(12, 6, F32, True, 1, 2, 3)),
        C("float32 [12,6] sum with weight, ignore_index -100 hit", case(12, 6, F32, True, 2, -100, 2)),
        C("bfloat16 [16,10] mean, ignore_index -100 hit", case(16, 10, BF16, False, 1, -100, 3)),
        C("float16 [7,4] none with weight, ignore hit", case(7, 4, F16, True, 0, 1, 2)),
        C("float32 [9,3] none", case(9, 3, F32, False, 0)),
        C("float32 [5] (no batch) mean with weight", case(None, 5, F32, True, 1)),
        C("float32 [5] (no batch) none", case(None, 5, F32, False, 0)),
        C("float32 [4,3] mean, every target ignored (0/0 = nan)", case(4, 3, F32, False, 1, 0, 4)),
        C("float32 [64,100] sum", case(64, 100, F32, False, 2)),
    ]


def nll_backward_cases():
    def case(N, C_, dt, weight, reduction, ignore=-100, hits=0):
        def build(c):
            shape = [N, C_] if N is not None else [C_]
            xv = torch.log_softmax(c._values(shape, "normal").to(DEV), -1).to(dt)
            tv = torch.randint(0, C_, ([N] if N is not None else []), generator=c.gen)
            if hits:
                flat = tv.reshape(-1)
                flat[[i * flat.numel() // hits for i in range(hits)]] = ignore
            tv = tv.to(DEV)
            wv = (c._values([C_], "pos").to(dt).to(DEV)) if weight else None
            _, tw = torch.ops.aten.nll_loss_forward.default(xv, tv, wv, reduction, ignore)
            g = c.t([N] if (reduction == 0 and N is not None) else [], dt)
            x = c.derived(xv)
            t = c.derived(tv)
            w = c.derived(wv) if weight else None
            return [g, x, t, w, reduction, ignore, c.derived(tw)], {}
        return build

    return [
        C("float32 [8,5] mean, no weight", case(8, 5, F32, False, 1)),
        C("float32 [12,6] mean with weight, ignore_index 2 hit", case(12, 6, F32, True, 1, 2, 3)),
        C("float32 [12,6] sum with weight", case(12, 6, F32, True, 2)),
        C("bfloat16 [16,10] mean, ignore hit", case(16, 10, BF16, False, 1, -100, 3)),
        C("float16 [7,4] none with weight, ignore hit", case(7, 4, F16, True, 0, 1, 2)),
        C("float32 [5] (no batch) mean with weight", case(None, 5, F32, True, 1)),
        C("float32 [9,3] none", case(9, 3, F32, False, 0)),
    ]


def layer_norm_cases():
    def case(shape, ns, dt, w, b, eps=1e-5, wdt=None):
        def build(c):
            x = c.t(shape, dt)
            wt = c.t(ns, wdt or dt, "near1") if w else None
            bt = c.t(ns, wdt or dt) if b else None
            return [x, ns, wt, bt, eps], {}
        return build

    return [
        C("float32 [4,16] over [16], weight and bias", case([4, 16], [16], F32, True, True)),
        C("bfloat16 [2,3,32] over [32]", case([2, 3, 32], [32], BF16, True, True)),
        C("float16 [3,20] no weight, no bias", case([3, 20], [20], F16, False, False)),
        C("float32 [2,3,4] over [3,4]", case([2, 3, 4], [3, 4], F32, True, True)),
        C("float32 [5,7] weight only, eps 1e-3", case([5, 7], [7], F32, True, False, 1e-3)),
        C("float32 [3,1] over [1]", case([3, 1], [1], F32, True, True)),
        C("bfloat16 [4,1600] over [1600] (nanoGPT rows)", case([4, 1600], [1600], BF16, True, True)),
        C("bfloat16 input, float32 weight and bias (mixed)", case([3, 24], [24], BF16, True, True, 1e-5, F32),
          optional=True),
    ]


def layer_norm_backward_cases():
    def case(shape, ns, dt, w, b, mask):
        def build(c):
            xv = c._values(shape, "normal").to(dt).to(DEV)
            wv = c._values(ns, "near1").to(dt).to(DEV) if w else None
            bv = c._values(ns, "normal").to(dt).to(DEV) if b else None
            _, mean, rstd = torch.ops.aten.native_layer_norm.default(xv, ns, wv, bv, 1e-5)
            g = c.t(shape, dt)
            x = c.derived(xv)
            m, r = c.derived(mean), c.derived(rstd)
            wt = c.derived(wv) if w else None
            bt = c.derived(bv) if b else None
            return [g, x, ns, m, r, wt, bt, mask], {}
        return build

    return [
        C("float32 [4,16] all three grads", case([4, 16], [16], F32, True, True, [True, True, True])),
        C("bfloat16 [2,3,32] all three grads", case([2, 3, 32], [32], BF16, True, True, [True, True, True])),
        C("float32 [4,16] grad_input only (None dw, db)", case([4, 16], [16], F32, True, True, [True, False, False])),
        C("float32 [4,16] no weight, no bias: grad_input only", case([4, 16], [16], F32, False, False, [True, False, False])),
        C("float32 [5,12] dw and db only (None dx)", case([5, 12], [12], F32, True, True, [False, True, True])),
        C("float16 [2,3,4] over [3,4]", case([2, 3, 4], [3, 4], F16, True, True, [True, True, True])),
        C("bfloat16 [8,1600] over [1600], no bias", case([8, 1600], [1600], BF16, True, False, [True, True, False])),
    ]


def group_norm_cases():
    def case(shape, group, dt, w, b, eps=1e-5, wdt=None):
        def build(c):
            x = c.t(shape, dt)
            C_ = shape[1]
            hxw = 1
            for d in shape[2:]:
                hxw *= d
            wt = c.t([C_], wdt or dt, "near1") if w else None
            bt = c.t([C_], wdt or dt) if b else None
            return [x, wt, bt, shape[0], C_, hxw, group, eps], {}
        return build

    return [
        C("float32 [2,6,4,4] 3 groups", case([2, 6, 4, 4], 3, F32, True, True)),
        C("bfloat16 [2,8,5] 2 groups", case([2, 8, 5], 2, BF16, True, True)),
        C("float32 [3,4,7] 4 groups, no weight, no bias", case([3, 4, 7], 4, F32, False, False)),
        C("float32 [2,6] (HxW 1) 2 groups", case([2, 6], 2, F32, True, True)),
        C("float32 [2,4,5] weight only", case([2, 4, 5], 2, F32, True, False)),
        C("float16 [1,4,3,3] 1 group, eps 1e-3", case([1, 4, 3, 3], 1, F16, True, True, 1e-3)),
        C("float32 [2,32,8,8] 8 groups", case([2, 32, 8, 8], 8, F32, True, True)),
    ]


def group_norm_backward_cases():
    def case(shape, group, dt, w, mask, wdt=None):
        def build(c):
            C_ = shape[1]
            hxw = 1
            for d in shape[2:]:
                hxw *= d
            xv = c._values(shape, "normal").to(dt).to(DEV)
            wv = c._values([C_], "near1").to(wdt or dt).to(DEV) if w else None
            bv = c._values([C_], "normal").to(wdt or dt).to(DEV) if w else None
            _, mean, rstd = torch.ops.aten.native_group_norm.default(xv, wv, bv, shape[0], C_, hxw, group, 1e-5)
            g = c.t(shape, dt)
            x = c.derived(xv)
            m, r = c.derived(mean), c.derived(rstd)
            wt = c.derived(wv) if w else None
            return [g, x, m, r, wt, shape[0], C_, hxw, group, mask], {}
        return build

    return [
        C("float32 [2,6,4,4] 3 groups, all grads", case([2, 6, 4, 4], 3, F32, True, [True, True, True])),
        C("bfloat16 [2,8,5] 2 groups, all grads", case([2, 8, 5], 2, BF16, True, [True, True, True])),
        C("float32 [3,4,7] 4 groups, no weight: grad_input only", case([3, 4, 7], 4, F32, False, [True, False, False])),
        C("float32 [2,6,4,4] dw, db only (None dx)", case([2, 6, 4, 4], 3, F32, True, [False, True, True])),
        C("float32 [2,6] (HxW 1) grad_input only", case([2, 6], 2, F32, True, [True, False, False])),
        C("float16 [2,4,3,3] 2 groups, all grads", case([2, 4, 3, 3], 2, F16, True, [True, True, True])),
    ]


def dropout_backward_cases():
    return [
        C("float32 [4,10] scale 1/0.9", lambda c: ([c.t([4, 10]), c.t([4, 10], BOOL), 1 / 0.9], {})),
        C("bfloat16 [3,7,13] scale 2", lambda c: ([c.t([3, 7, 13], BF16), c.t([3, 7, 13], BOOL), 2.0], {})),
        C("float16 [5,6] scale 1.25", lambda c: ([c.t([5, 6], F16), c.t([5, 6], BOOL), 1.25], {})),
        C("float32 transposed grad", lambda c: ([c.t([6, 4], F32, None, "t"), c.t([6, 4], BOOL), 1.5], {})),
        C("0-dim", lambda c: ([c.t([]), c.t([], BOOL), 3.0], {})),
        C("bfloat16 scale 1/0.9 (inexact)", lambda c: ([c.t([8, 16], BF16), c.t([8, 16], BOOL), 1 / 0.9], {})),
    ]


def add_nn_ops(ops):
    ops["aten._softmax.default"] = softmax_cases()
    ops["aten._log_softmax.default"] = softmax_cases()
    ops["aten._softmax_backward_data.default"] = softmax_backward_cases(False)
    ops["aten._log_softmax_backward_data.default"] = softmax_backward_cases(True)
    ops["aten.nll_loss_forward.default"] = nll_forward_cases()
    ops["aten.nll_loss_backward.default"] = nll_backward_cases()
    ops["aten.native_layer_norm.default"] = layer_norm_cases()
    ops["aten.native_layer_norm_backward.default"] = layer_norm_backward_cases()
    ops["aten.native_group_norm.default"] = group_norm_cases()
    ops["aten.native_group_norm_backward.default"] = group_norm_backward_cases()
    ops["aten.native_dropout_backward.default"] = dropout_backward_cases()


# --- running a case ---------------------------------------------------------------------------------------


def encode_value(a, ids):
    if isinstance(a, torch.Tensor):
        if id(a) not in ids:
            raise ValueError("a tensor argument that is not a registered input")
        return {"ref": ids[id(a)]}
    if isinstance(a, (list, tuple)):
        return [encode_value(x, ids) for x in a]
    return encode_arg(a)


def describe(ctx, args, kwargs, label):
    parts = []
    for iid, t, desc in ctx.inputs:
        s = f"{iid} {DTYPE_NAMES[t.dtype]} {list(t.shape)}"
        if desc:
            s += f" {desc}"
        parts.append(s)
    scal = [repr(a) for a in args if not isinstance(a, (torch.Tensor, list, tuple))]
    extra = (", scalars " + ", ".join(scal)) if scal else ""
    kw = [f"{k}={v}" for k, v in kwargs.items() if not isinstance(v, torch.Tensor)]
    return f"{label}: " + "; ".join(parts) + extra + ((", " + ", ".join(kw)) if kw else "")


def run_case(opname, op, case, cid, gen, file_name, source):
    ctx = Ctx(gen)
    args, kwargs = case.build(ctx)
    args = list(args)
    if not case.raw:
        args, kwargs = normalize_call(op, args, kwargs)
    result = op(*args, **kwargs)
    torch.cuda.synchronize()
    multi = isinstance(result, (tuple, list))
    outs = list(result) if multi else [result]
    for o in outs:  # None: an output a norm backward's output_mask turned off
        if not isinstance(o, torch.Tensor) and not (multi and o is None):
            raise TypeError(f"{opname} returned {type(o).__name__}, not a tensor")
    inputs = [{"id": iid, **tensor_meta(t), "stats": value_stats(t)} for iid, t, _ in ctx.inputs]
    node = {"id": "out", "op": opname, "args": encode_value(args, ctx.ids),
            "kwargs": {k: encode_value(v, ctx.ids) for k, v in kwargs.items()},
            "outputs": [None if o is None else tensor_meta(o) for o in outs]}
    nodes = [node]
    if multi:  # a getitem per output that is not None
        sel = [k for k, o in enumerate(outs) if o is not None]
        out_ids = [f"out{k}" for k in sel]
        for k, oid in zip(sel, out_ids):
            nodes.append({"id": oid, "op": "getitem", "args": [{"ref": "out"}, k], "kwargs": {},
                          "outputs": [tensor_meta(outs[k])]})
        outs = [outs[k] for k in sel]
    else:
        out_ids = ["out"]
    golden = {f"{cid}/{iid}": t for iid, t, _ in ctx.inputs}
    golden.update({f"{cid}/{oid}": o for oid, o in zip(out_ids, outs)})
    trace = {
        "schema": SCHEMA,
        "name": f"{opname}_{cid}",
        "source": source,
        "world_size": 1,
        "inputs": inputs,
        "nodes": nodes,
        "outputs": out_ids,
        "golden": {"file": file_name, "prefix": f"{cid}/",
                   "tensors": [iid for iid, _, _ in ctx.inputs] + out_ids},
    }
    note = describe(ctx, [a for a in args], kwargs, case.label) + ("" if not case.raw else " (arguments as given)")
    return {"id": cid, "note": note, "trace": trace}, golden


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/data/opcorpus", help="output folder (default tests/data/opcorpus)")
    ap.add_argument("--only", action="append", help="op name, e.g. aten.add.Tensor (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the ops and their case counts, and exit")
    args = ap.parse_args()

    ops = build_ops()
    if args.only:
        unknown = [o for o in args.only if o not in ops]
        if unknown:
            print(f"unknown op(s) {unknown}; known: {sorted(ops)}", file=sys.stderr)
            return 2
        ops = {k: v for k, v in ops.items() if k in args.only}
    if args.list:
        for k, v in ops.items():
            print(f"{k} {len(v)}")
        return 0
    if not torch.cuda.is_available():
        print("opcorpus.py needs a CUDA device", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    device_name = torch.cuda.get_device_name(0)
    command = " ".join(["python3", "traces/capture/opcorpus.py"] + sys.argv[1:])
    print(f"torch {torch.__version__}, {device_name}; {len(ops)} ops -> {args.out}", flush=True)

    index_path = os.path.join(args.out, "INDEX.json")
    index = {"schema": "replay-opcorpus-index/1", "torch_version": torch.__version__, "device": device_name,
             "generated_by": command, "ops": {}}
    if args.only and os.path.exists(index_path):  # keep the other ops' entries
        try:
            import json
            with open(index_path) as f:
                old = json.load(f)
            index["ops"].update(old.get("ops", {}))
        except Exception:
            pass
    failed_ops, total_cases = [], 0
    for opname, cases in ops.items():
        base = opname.replace(".", "_")
        file_name = base + ".safetensors"
        source = {"model": "op conformance corpus", "module": "traces/capture/opcorpus.py", "phase": "op",
                  "torch_version": torch.__version__, "device": device_name, "capture_command": command,
                  "capture_seed": SEED, "method": f"torch.ops.{opname} called once on CUDA; golden = its result"}
        entry = {"file": base + ".json", "cases": 0, "failed": [], "skipped": []}
        try:
            op = resolve(opname)
        except Exception as e:
            print(f"FAILED {opname}: cannot resolve: {e}", flush=True)
            entry["failed"].append(f"resolve: {e}")
            index["ops"][opname] = entry
            failed_ops.append(opname)
            continue
        gen = torch.Generator().manual_seed(SEED ^ zlib.crc32(opname.encode()))
        doc = {"schema": OPCORPUS_SCHEMA, "op": opname, "torch_version": torch.__version__, "device": device_name,
               "generated_by": command, "cases": []}
        golden = {}
        for k, case in enumerate(cases):
            cid = f"c{k}"
            try:
                c, g = run_case(opname, op, case, cid, gen, file_name, source)
                doc["cases"].append(c)
                golden.update(g)
            except Exception as e:
                msg = f"{cid} ({case.label}): {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                if case.optional:
                    print(f"  {opname} {msg} -- optional case skipped", flush=True)
                    entry["skipped"].append(msg)
                else:
                    traceback.print_exc()
                    print(f"  FAILED {opname} {msg}", flush=True)
                    entry["failed"].append(msg)
        entry["cases"] = len(doc["cases"])
        total_cases += entry["cases"]
        if doc["cases"]:
            write_safetensors(os.path.join(args.out, file_name), golden)
            write_json(os.path.join(args.out, base + ".json"), doc)
        if entry["failed"]:
            failed_ops.append(opname)
        index["ops"][opname] = entry
        print(f"{opname}: {entry['cases']} cases"
              + (f", {len(entry['skipped'])} skipped" if entry["skipped"] else "")
              + (f", {len(entry['failed'])} FAILED" if entry["failed"] else ""), flush=True)

    write_json(index_path, index)
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"\n{len(ops)} ops, {total_cases} cases, {size / 1e6:.2f} MB in {args.out}", flush=True)
    if failed_ops:
        print(f"{len(failed_ops)} op(s) with failed cases: {failed_ops}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
