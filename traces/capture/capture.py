#!/usr/bin/env python3
"""Capture a PyTorch module's decomposed ATen graphs and write them in the replay trace format.

The graph is what Inductor sees: aot_autograd (functorch's aot_function) with Inductor's
decomposition table (torch._inductor.decomposition.select_decomp_table), so composite ops such as
F.layer_norm arrive as primitives (prims.convert_element_type, aten.var_mean.correction,
aten.rsqrt, aten.mul.Tensor, ...). The format is documented in traces/SCHEMA.md (schema
"replay-trace/1").

Two kinds of capture:
- inference (no_grad) forward graphs: <workload>_<shape>, e.g. nanogpt_layernorm_fwd_2x8x1600;
- training steps: the forward and backward graphs as Inductor partitions them
  (min_cut_rematerialization_partition), <workload>_train_fwd_<shape> and
  <workload>_train_bwd_<shape>; the backward runs with a seeded random tangent. The forward
  trace says which outputs are saved for the backward ("output_roles"), the backward trace which
  forward output each saved input is ("role", "from") and which forward input each gradient is
  for ("grad_of").

Usage (on a host with PyTorch >= 2.4 and a CUDA device; the GPU machine has 2.11):
    python3 traces/capture/capture.py --out traces/                 # every workload
    python3 traces/capture/capture.py --out /tmp/t --only nanogpt_layernorm_fwd
    python3 traces/capture/capture.py --out /tmp/t --only litgpt_rope --small
    python3 traces/capture/capture.py --list                        # the trace names, nothing run

--only takes a workload name (the key before the shape) or a prefix of trace names; repeatable.

Golden tensors: for the small shapes, the exact tensors the captured graph consumed and produced
are written to a safetensors sidecar next to the trace (forward: inputs and outputs; backward: the
saved tensors and tangents PyTorch passed to the backward graph, and the gradients). They are an
oracle that does not come from the replay harness's own code.

Every capture runs on its own: one that fails prints its error and the others still run; the exit
status is 1 if any failed.
"""
import argparse
import datetime
import os
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tracelib import (SCHEMA, DTYPE_NAMES, ST_DTYPES, tensor_meta, encode_arg, op_name,  # noqa: E402,F401
                      value_stats, graph_to_trace, build_trace, node_output_stats, placeholders, output_args,
                      write_safetensors, write_json)
import models  # noqa: E402


# --- the modules of the inference captures, as their model code writes them --------------------------


# nanoGPT's LayerNorm and the norm perturbation live in models.py (one definition for the
# inference and training captures).
NanoGPTLayerNorm = models.NanoGPTLayerNorm
perturb_ = models.perturb_norm_


# Hugging Face's LlamaRMSNorm lives in models.py too (the training capture hf_llama_rmsnorm uses it).
LlamaRMSNorm = models.LlamaRMSNorm


# --- inference capture ----------------------------------------------------------------------------------


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
        "module": "traces/capture/models.py:LlamaRMSNorm (huggingface/transformers LlamaRMSNorm)",
        "phase": "fwd",
    }


WORKLOADS = {
    # name: (builder, [(shape, golden?)])
    "nanogpt_layernorm_fwd": (nanogpt_layernorm_fwd, [((16, 128, 1600), False), ((16, 1024, 1600), False),
                                                      ((2, 8, 1600), True)]),
    "llama_rmsnorm_fwd": (llama_rmsnorm_fwd, [((2, 8, 4096), True)]),
}


def common_source(args):
    return {
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "capture_command": " ".join(["python3", "traces/capture/capture.py"] + sys.argv[1:]),
        "capture_seed": args.seed,
        "captured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def run_inference(args, wl, builder, shape, golden):
    name = f"{wl}_{'x'.join(map(str, shape))}"
    fn, inputs, input_names, source = builder(*shape, args.seed, args.device)
    gm, outs = capture_forward(fn, inputs)
    with torch.no_grad():
        eager = fn(*inputs)
    for o, e in zip(outs, eager):  # the captured graph must compute what the module computes
        torch.testing.assert_close(o, e, rtol=1.6e-2, atol=1e-2)
    source.update(common_source(args))
    source["method"] = "functorch.compile.aot_function + torch._inductor.decomposition.select_decomp_table, no_grad"
    _, node_stats = node_output_stats(gm, inputs)  # every node output's stats (SCHEMA.md, Cut nodes)
    trace = graph_to_trace(gm, inputs, input_names, name, source, node_stats=node_stats)
    if golden:
        st = {nm: t for nm, t in zip(input_names, inputs)}
        st.update({oid: o for oid, o in zip(trace["outputs"], outs)})
        write_safetensors(os.path.join(args.out, name + ".safetensors"), st)
        trace["golden"] = {"file": name + ".safetensors", "tensors": sorted(st.keys()),
                           "note": "exact inputs and PyTorch outputs of the captured graph"}
    write_json(os.path.join(args.out, name + ".json"), trace)
    print(f"wrote {name}: {len(trace['nodes'])} nodes, ops "
          f"{sorted(set(n['op'] for n in trace['nodes']))}", flush=True)
    return [name]


# --- training capture -----------------------------------------------------------------------------------


def _is_tensor_val(node):
    return isinstance(node.meta.get("val"), torch.Tensor)


def _key(t):
    """What identifies a tensor's data: storage, offset, shape, strides, dtype."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except Exception:
        ptr = t.data_ptr()
    return (ptr, int(t.storage_offset()), tuple(t.shape), tuple(t.stride()), t.dtype)


class Snap:
    """One argument or result of a compiled graph as it ran: identity, metadata, statistics and
    (for golden captures) a copy of the values."""

    def __init__(self, t, keep):
        self.is_tensor = isinstance(t, torch.Tensor)
        self.raw = None if self.is_tensor else t
        self.key = self.meta = self.stats = self.value = None
        if self.is_tensor:
            t = t.detach()
            self.key = _key(t)
            self.meta = tensor_meta(t)
            self.stats = value_stats(t)
            self.value = t.clone() if keep else None


class GraphRecorder:
    """fw_compiler / bw_compiler for aot_function: keep the GraphModules and run them eagerly
    (boxed calling convention), recording what PyTorch passed in and what came out."""

    def __init__(self, keep_values):
        self.keep = keep_values
        self.fw_gm = self.bw_gm = None
        self.fw_args = self.fw_results = self.bw_args = self.bw_results = None
        self.fw_calls = self.bw_calls = 0
        self.fw_node_stats = self.bw_node_stats = None

    def _wrap(self, gm, which):
        def run(args):
            args = list(args)
            snaps_in = [Snap(a, self.keep) for a in args]
            # Node by node, as gm's forward runs, keeping every node output's stats.
            out, node_stats = node_output_stats(gm, args)
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            snaps_out = [Snap(o, self.keep) for o in outs]
            if which == "fw":
                self.fw_calls += 1
                self.fw_args, self.fw_results, self.fw_node_stats = snaps_in, snaps_out, node_stats
            else:
                self.bw_calls += 1
                self.bw_args, self.bw_results, self.bw_node_stats = snaps_in, snaps_out, node_stats
            return out

        run._boxed_call = True
        return run

    def fw_compiler(self, gm, example_inputs):
        if self.fw_gm is not None:
            raise RuntimeError("aot_function compiled a second forward graph")
        self.fw_gm = gm
        return self._wrap(gm, "fw")

    def bw_compiler(self, gm, example_inputs):
        if self.bw_gm is not None:
            raise RuntimeError("aot_function compiled a second backward graph")
        self.bw_gm = gm
        return self._wrap(gm, "bw")


def _compare(what, got, exp):
    """Loose bf16-level comparison of the captured graph's result with eager autograd's. Returns
    (ok, message)."""
    if got is None and exp is None:
        return True, f"{what}: none (no gradient)"
    if got is None or exp is None:
        return False, f"{what}: {'missing' if got is None else 'unexpected'} (eager {'has' if exp is not None else 'has none'})"
    if got.shape != exp.shape or got.dtype != exp.dtype:
        return False, f"{what}: {got.dtype}{list(got.shape)} vs eager {exp.dtype}{list(exp.shape)}"
    if not (got.is_floating_point()):
        ok = torch.equal(got, exp)
        return ok, f"{what}: exact {'match' if ok else 'MISMATCH'}"
    g, e = got.detach().float(), exp.detach().float()
    finite = torch.isfinite(e)
    if not torch.equal(torch.isfinite(g), finite):
        return False, f"{what}: non-finite values differ"
    g0, e0 = torch.where(finite, g, 0.0), torch.where(finite, e, 0.0)
    scale = e0.abs().max().item() if e0.numel() else 0.0
    err = (g0 - e0)
    rel = (err.norm() / e0.norm().clamp_min(1e-30)).item() if e0.numel() else 0.0
    try:
        torch.testing.assert_close(g0, e0, rtol=1.6e-2, atol=0.02 * scale + 1e-6)
        ok = rel <= 1e-2 or scale == 0.0
    except AssertionError:
        ok = False
    return ok, f"{what}: rel_l2 {rel:.2e}, max|err| {err.abs().max().item() if err.numel() else 0:.3e} (max|ref| {scale:.3e})"


def _make_leaves(case):
    return [t.detach().clone().requires_grad_(rg) for t, rg in zip(case.inputs, case.requires_grad)]


def _run_step(fn, leaves, tangent_seed):
    """Forward, then backward with seeded random tangents for every output that requires grad.
    Returns (outputs, tangents, grads)."""
    with torch.enable_grad():
        outs = fn(*leaves)
        if isinstance(outs, torch.Tensor):
            outs = (outs,)
        outs = tuple(outs)
        gen = torch.Generator(device=outs[0].device).manual_seed(tangent_seed)
        diff, tangents = [], []
        for o in outs:
            if o.requires_grad:
                t = torch.randn(o.shape, generator=gen, device=o.device, dtype=torch.float32).to(o.dtype)
                diff.append(o)
                tangents.append(t)
        if not diff:
            raise RuntimeError("no output requires grad")
        torch.autograd.backward(diff, tangents)
    grads = [leaf.grad for leaf in leaves]
    return outs, tangents, grads


def _shape_str(shape):
    return "x".join(map(str, shape))


def run_training(args, wl, builder, shape, golden):
    from functorch.compile import aot_function, min_cut_rematerialization_partition
    from torch._inductor.decomposition import select_decomp_table

    sh = _shape_str(shape)
    fwd_name, bwd_name = f"{wl}_train_fwd_{sh}", f"{wl}_train_bwd_{sh}"
    case = builder(shape, args.seed, args.device)
    golden = golden and not case.random
    t0 = time.time()

    # 1. the captured step
    rec = GraphRecorder(keep_values=golden)
    compiled = aot_function(case.fn, fw_compiler=rec.fw_compiler, bw_compiler=rec.bw_compiler,
                            partition_fn=min_cut_rematerialization_partition,
                            decompositions=select_decomp_table())
    leaves = _make_leaves(case)
    tangent_seed = args.seed + 1
    outs, tangents, grads = _run_step(compiled, leaves, tangent_seed)
    torch.cuda.synchronize() if args.device == "cuda" else None
    if rec.fw_gm is None or rec.bw_gm is None or rec.fw_results is None or rec.bw_results is None:
        raise RuntimeError(f"aot_function did not produce/run both graphs (forward compiled: {rec.fw_gm is not None},"
                           f" ran {rec.fw_calls}x; backward compiled: {rec.bw_gm is not None}, ran {rec.bw_calls}x)")

    # 2. the same step in eager autograd
    if case.random:
        check_msgs, check_ok = ["skipped: the graph has random ops"], True
    else:
        leaves_e = _make_leaves(case)
        outs_e, _, grads_e = _run_step(case.fn, leaves_e, tangent_seed)
        check_ok, check_msgs = True, []
        for i, (o, e) in enumerate(zip(outs, outs_e)):
            ok, msg = _compare(f"output {i}", o, e)
            check_ok &= ok
            check_msgs.append(msg)
        for nm, g, e in zip(case.names, grads, grads_e):
            ok, msg = _compare(f"grad {nm}", g, e)
            check_ok &= ok
            check_msgs.append(msg)
        del leaves_e, outs_e, grads_e
    check = ("pass" if check_ok else "FAIL") + ": " + "; ".join(check_msgs)
    print(f"  eager check {fwd_name}/bwd: {check}", flush=True)

    fw_gm, bw_gm = rec.fw_gm, rec.bw_gm
    fw_ph, bw_ph = placeholders(fw_gm), placeholders(bw_gm)
    fw_outs, bw_outs = output_args(fw_gm), output_args(bw_gm)
    if len(fw_ph) != len(case.inputs):
        raise RuntimeError(f"forward graph has {len(fw_ph)} inputs, the function {len(case.inputs)}")
    if len(rec.fw_args) != len(fw_ph) or len(rec.bw_args) != len(bw_ph):
        raise RuntimeError("the compiled graphs were called with a different number of arguments than they have "
                           f"placeholders (fw {len(rec.fw_args)}/{len(fw_ph)}, bw {len(rec.bw_args)}/{len(bw_ph)})")
    if any(not s.is_tensor for s in rec.bw_args):
        raise RuntimeError("the backward graph takes non-tensor inputs (symbolic sizes?): "
                           + str([s.raw for s in rec.bw_args if not s.is_tensor]))

    # 3. which backward inputs are saved tensors and which are tangents; which forward output each
    #    saved tensor is. aot_autograd's forward returns (user outputs, saved tensors, saved symints)
    #    and the backward takes (saved symints, saved tensors, tangents); verified on the tensors.
    is_tangent = ["tangents" in p.name for p in bw_ph]
    saved_pos = [i for i, t in enumerate(is_tangent) if not t]
    saved_tensor_pos = [i for i in saved_pos if _is_tensor_val(bw_ph[i]) or rec.bw_args[i].is_tensor]
    n_sym = len(saved_pos) - len(saved_tensor_pos)
    n_user = len(fw_outs) - len(saved_tensor_pos) - n_sym
    notes = list(case.notes)
    if n_user < 0:
        notes.append(f"could not split the forward outputs (n_user {n_user}); 'from' by tensor identity only")
    fw_keys = [s.key if s.is_tensor else None for s in rec.fw_results]
    from_pos = {}  # backward placeholder index -> forward output position
    for j, bi in enumerate(saved_tensor_pos):
        want = rec.bw_args[bi].key
        cand = [p for p, k in enumerate(fw_keys) if k == want]
        guess = n_user + j if n_user >= 0 else None
        if guess is not None and guess in cand:
            from_pos[bi] = guess
        elif len(cand) == 1:
            from_pos[bi] = cand[0]
            notes.append(f"saved input {bw_ph[bi].name}: forward output {cand[0]} by identity (position guess {guess})")
        elif golden and guess is not None and 0 <= guess < len(rec.fw_results) and rec.fw_results[guess].is_tensor \
                and rec.fw_results[guess].meta == rec.bw_args[bi].meta \
                and torch.equal(rec.fw_results[guess].value, rec.bw_args[bi].value):
            from_pos[bi] = guess
            notes.append(f"saved input {bw_ph[bi].name}: forward output {guess} by position and equal values")
        else:
            notes.append(f"saved input {bw_ph[bi].name}: no forward output identified "
                         f"({len(cand)} candidates by identity); 'from' omitted")
            print(f"  warning: {bwd_name}: saved input {bw_ph[bi].name}: forward output not identified", flush=True)

    # 4. the forward trace
    src = dict(case.source)
    src.update({"phase": "fwd"})
    src.update(common_source(args))
    method = ("functorch.compile.aot_function + torch._inductor.decomposition.select_decomp_table + "
              "functorch.compile.min_cut_rematerialization_partition; training step (requires_grad inputs), "
              f"backward with seeded random tangents (seed {tangent_seed})")
    src.update({"method": method, "backward_trace": bwd_name, "eager_check": check})
    if notes:
        src["notes"] = notes
    fw_metas = [tensor_meta(p.meta["val"]) if _is_tensor_val(p) else s.meta for p, s in zip(fw_ph, rec.fw_args)]
    fw_extra = [{"role": role, "requires_grad": bool(rg)} for role, rg in zip(case.roles, case.requires_grad)]
    fwd, fw_out_ids, fw_ph_ids = build_trace(fw_gm, fwd_name, src, list(case.names), fw_metas,
                                             [s.stats for s in rec.fw_args], fw_extra,
                                             node_stats=rec.fw_node_stats)
    roles = {}
    saved_fw_pos = set(from_pos.values())
    for pos, oid in enumerate(fw_out_ids):
        if oid is None:
            continue
        if pos in saved_fw_pos or (n_user >= 0 and pos >= n_user):
            roles[oid] = "saved"
        else:
            roles[oid] = "output"
    fwd["output_roles"] = roles

    # 5. the backward trace: saved primals keep the forward input's id, other saved tensors the
    #    forward node's name, tangents tangents_<k>
    fw_ph_to_id = {p.name: iid for p, iid in zip(fw_ph, fw_ph_ids)}
    bw_ids = [fw_ph_to_id.get(p.name, p.name) if not is_tangent[i] else p.name for i, p in enumerate(bw_ph)]
    bw_metas = [tensor_meta(p.meta["val"]) if _is_tensor_val(p) else s.meta for p, s in zip(bw_ph, rec.bw_args)]
    for i, (p, s) in enumerate(zip(bw_ph, rec.bw_args)):
        traced = bw_metas[i]
        if traced["shape"] != s.meta["shape"] or traced["dtype"] != s.meta["dtype"]:
            print(f"  warning: {bwd_name}: input {p.name}: traced as {traced}, called with {s.meta}", flush=True)
            notes.append(f"input {p.name}: traced as {traced}, PyTorch passed {s.meta}")
        elif traced.get("stride") != s.meta.get("stride"):
            notes.append(f"input {p.name}: traced strides {traced.get('stride')}, PyTorch passed "
                         f"{s.meta.get('stride')} (the trace keeps the traced ones)")
    bw_extra = []
    for i in range(len(bw_ph)):
        if is_tangent[i]:
            bw_extra.append({"role": "tangent"})
        else:
            e = {"role": "saved"}
            if i in from_pos and fw_out_ids[from_pos[i]] is not None:
                e["from"] = {"trace": fwd_name, "output": fw_out_ids[from_pos[i]]}
            bw_extra.append(e)
    bsrc = dict(case.source)
    bsrc.update({"phase": "bwd"})
    bsrc.update(common_source(args))
    bsrc.update({"method": method, "forward_trace": fwd_name, "eager_check": check})
    if notes:
        bsrc["notes"] = notes
    bwd, bw_out_ids, bw_ph_ids = build_trace(bw_gm, bwd_name, bsrc, bw_ids, bw_metas,
                                             [s.stats for s in rec.bw_args], bw_extra,
                                             node_stats=rec.bw_node_stats)
    bwd["output_roles"] = {oid: "grad" for oid in bw_out_ids if oid is not None}
    if len(bw_outs) == len(fw_ph):  # one gradient per forward input, None where none
        bwd["grad_of"] = {oid: {"trace": fwd_name, "input": fw_ph_ids[i]}
                          for i, oid in enumerate(bw_out_ids) if oid is not None}
        for i, oid in enumerate(bw_out_ids):
            if oid is not None and rec.bw_results[i].is_tensor and \
                    rec.bw_results[i].meta["shape"] != fw_metas[i]["shape"]:
                print(f"  warning: {bwd_name}: gradient {oid} has shape {rec.bw_results[i].meta['shape']}, "
                      f"input {fw_ph_ids[i]} {fw_metas[i]['shape']}", flush=True)
    else:
        notes.append(f"backward returns {len(bw_outs)} values for {len(fw_ph)} forward inputs: grad_of omitted")

    # 6. golden tensors: exactly what the graphs consumed and produced
    if golden:
        for trace, ids, arg_snaps, out_ids, res_snaps in (
                (fwd, fw_ph_ids, rec.fw_args, fw_out_ids, rec.fw_results),
                (bwd, bw_ph_ids, rec.bw_args, bw_out_ids, rec.bw_results)):
            st = {}
            for iid, s in zip(ids, arg_snaps):
                st[iid] = s.value
            for oid, s in zip(out_ids, res_snaps):
                if oid is not None and s.is_tensor and oid not in st:
                    st[oid] = s.value
            fname = trace["name"] + ".safetensors"
            write_safetensors(os.path.join(args.out, fname), st)
            trace["golden"] = {"file": fname, "tensors": sorted(st.keys()),
                               "note": ("the tensors the captured graph was called with and returned, as "
                                        "PyTorch ran the training step" +
                                        (" (saved tensors and tangents in, gradients out)" if trace is bwd else ""))}

    for trace in (fwd, bwd):
        write_json(os.path.join(args.out, trace["name"] + ".json"), trace)
        print(f"wrote {trace['name']}: {len(trace['inputs'])} inputs, {len(trace['nodes'])} nodes, "
              f"{len(trace['outputs'])} outputs, ops {sorted(set(n['op'] for n in trace['nodes']))}", flush=True)
    print(f"  ({time.time() - t0:.1f} s)", flush=True)
    del rec, compiled, leaves, outs, tangents, grads
    if not check_ok:
        raise RuntimeError(f"the captured graphs disagree with eager autograd ({check}); the traces were written "
                           "with source.eager_check saying so")
    return [fwd_name, bwd_name]


# --- self test (CPU) ------------------------------------------------------------------------------------


def self_test():
    """Checks of the encoding that need no GPU: a graph that returns a node twice, a getitem twice,
    an input and a None; the safetensors writers and readers on float8, bool and 0-dim tensors."""
    import operator
    import tempfile
    import types
    from tracelib import _write_safetensors_by_hand, _read_safetensors_by_hand, read_safetensors, _val_meta

    g = torch.fx.Graph()
    x, w = g.placeholder("primals_1"), g.placeholder("primals_2")
    m = g.call_function(torch.ops.aten.mul.Tensor, (x, w))
    vm = g.call_function(torch.ops.aten.var_mean.correction, (m, [1]), {"correction": 0, "keepdim": True})
    gi = g.call_function(operator.getitem, (vm, 1))
    g.output((m, m, x, gi, gi, None))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)

    class Rec(torch.fx.Interpreter):
        def run_node(self, n):
            r = super().run_node(n)
            n.meta["val"] = r
            return r

    xs = [torch.randn(2, 3), torch.randn(2, 3)]
    Rec(gm).run(*xs)
    _, node_stats = node_output_stats(gm, xs)
    trace, out_ids, ph_ids = build_trace(gm, "selftest", {}, ["x", m.name], [tensor_meta(t) for t in xs],
                                         [value_stats(t) for t in xs], [{"role": "activation"}, None],
                                         node_stats=node_stats)
    assert ph_ids == ["x", "primals_2"], ph_ids  # the wanted id is a node's name: the placeholder keeps its own
    assert out_ids[-1] is None and len(out_ids) == 6, out_ids
    outs = trace["outputs"]
    assert len(outs) == 5 and len(set(outs)) == 5, outs
    assert outs[0] == m.name and outs[2] == "x" and outs[3] == gi.name, outs
    aliases = [n for n in trace["nodes"] if n["op"] == "aten.alias.default"]
    assert len(aliases) == 2 and aliases[0]["args"] == [{"ref": m.name}] and \
        aliases[1]["args"] == [{"ref": gi.name}], aliases
    assert all(n.get("outputs") for n in trace["nodes"]), "every node carries outputs"
    assert trace["inputs"][0]["role"] == "activation"
    vm_rec = next(n for n in trace["nodes"] if n["id"] == vm.name)  # stats on every node output
    assert len(vm_rec["outputs"]) == 2 and all("stats" in o for o in vm_rec["outputs"]), vm_rec
    # A result the format cannot hold (flash attention's None, max_q, uint64 RNG state) is opaque.
    fake = types.SimpleNamespace(name="f", op="call_function", target=None, meta={
        "val": (torch.zeros(2), None, 3, torch.zeros(2, dtype=torch.uint64))})
    assert _val_meta(fake)[1:] == [{"opaque": "None"}, {"opaque": "int"}, {"opaque": "torch.uint64[2]"}], \
        _val_meta(fake)
    print("build_trace: duplicate outputs, input outputs, None outputs, renamed inputs, node output stats, "
          "opaque results: ok")

    tensors = {"f8": torch.tensor([1.0, -2.0, 448.0]).to(torch.float8_e4m3fn),
               "f8b": torch.tensor([[1.0, 0.5]]).to(torch.float8_e5m2),
               "b": torch.tensor([True, False, True]), "s": torch.tensor(2.5, dtype=torch.bfloat16),
               "e": torch.zeros(0, 3), "i": torch.arange(5)}
    with tempfile.TemporaryDirectory() as d:
        for writer in ("save_file", "by hand"):
            p = os.path.join(d, "t.safetensors")
            if writer == "by hand":
                _write_safetensors_by_hand(p, tensors)
            else:
                write_safetensors(p, tensors)
            for reader in (read_safetensors, _read_safetensors_by_hand):
                back = reader(p)
                for k, v in tensors.items():
                    b = back[k]
                    assert b.dtype == v.dtype and list(b.shape) == list(v.shape), (writer, k, b.dtype, b.shape)
                    assert torch.equal(b.reshape(-1).view(torch.uint8), v.reshape(-1).view(torch.uint8)), (writer, k)
            print(f"safetensors (written {writer}, read both ways): float8, bool, 0-dim, empty, int64: ok")
    return 0


# --- driver ----------------------------------------------------------------------------------------------


def all_jobs():
    """(kind, workload, builder, shape, golden, [trace names]) for every capture."""
    jobs = []
    for wl, (builder, shapes) in WORKLOADS.items():
        for shape, golden in shapes:
            jobs.append(("inference", wl, builder, shape, golden, [f"{wl}_{_shape_str(shape)}"]))
    for wl, (builder, shapes) in models.TRAIN_WORKLOADS.items():
        for shape, golden in shapes:
            sh = _shape_str(shape)
            jobs.append(("training", wl, builder, shape, golden, [f"{wl}_train_fwd_{sh}", f"{wl}_train_bwd_{sh}"]))
    return jobs


def selected(job, only, small):
    kind, wl, _, _, golden, names = job
    if small and not golden and not (kind == "training" and wl == "nanogpt_mlp_dropout"):
        return False
    if not only:
        return True
    return any(o == wl or any(n == o or n.startswith(o) for n in names) for o in only)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="folder for <name>.json (+ <name>.safetensors)")
    ap.add_argument("--only", action="append", help="workload name or trace-name prefix (repeatable); default: all")
    ap.add_argument("--small", action="store_true", help="only the small (golden) shapes")
    ap.add_argument("--list", action="store_true", help="print the trace names that would be written, and exit")
    ap.add_argument("--self-test", action="store_true", help="check the encoding and the safetensors I/O (CPU), and exit")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    if args.self_test:
        return self_test()
    jobs = [j for j in all_jobs() if selected(j, args.only, args.small)]
    if args.list:
        for j in jobs:
            for n in j[5]:
                print(n)
        return 0
    if not args.out:
        ap.error("--out is required")
    if not jobs:
        print(f"no workload matches --only {args.only}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    try:  # as Inductor's users set it for retain_graph-free replays; harmless here
        import torch._functorch.config as functorch_config
        functorch_config.donated_buffer = False
    except Exception:
        pass
    print(f"torch {torch.__version__}, device {args.device}"
          f"{' (' + torch.cuda.get_device_name(0) + ')' if args.device == 'cuda' else ''}; {len(jobs)} captures",
          flush=True)

    written, failed = [], []
    for k, (kind, wl, builder, shape, golden, names) in enumerate(jobs):
        label = f"{wl} {_shape_str(shape)}"
        print(f"[{k + 1}/{len(jobs)}] {kind} {label} -> {', '.join(names)}", flush=True)
        try:
            if kind == "inference":
                written += run_inference(args, wl, builder, shape, golden)
            else:
                written += run_training(args, wl, builder, shape, golden)
        except Exception as e:  # one failure must not stop the others
            traceback.print_exc()
            print(f"FAILED {label}: {type(e).__name__}: {e}", flush=True)
            failed.append((label, f"{type(e).__name__}: {e}"))
        finally:
            if args.device == "cuda":
                torch.cuda.empty_cache()

    print(f"\n{len(jobs) - len(failed)}/{len(jobs)} captures succeeded; traces written to {args.out}:", flush=True)
    for n in written:
        print(f"  {n}")
    if failed:
        print(f"{len(failed)} FAILED:")
        for label, msg in failed:
            print(f"  {label}: {msg[:500]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
