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
                      write_safetensors, write_json, Snap, compare_tensors, training_traces,
                      attach_golden)
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


_compare = compare_tensors


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

    if len(placeholders(rec.fw_gm)) != len(case.inputs):
        raise RuntimeError(f"forward graph has {len(placeholders(rec.fw_gm))} inputs, the function {len(case.inputs)}")

    # 3. the two traces (tracelib.training_traces: roles, saved/tangent pairing, grad_of, golden)
    method = ("functorch.compile.aot_function + torch._inductor.decomposition.select_decomp_table + "
              "functorch.compile.min_cut_rematerialization_partition; training step (requires_grad inputs), "
              f"backward with seeded random tangents (seed {tangent_seed})")
    src = dict(case.source)
    src.update(common_source(args))
    src.update({"method": method, "eager_check": check})
    fw_extra = [{"role": role, "requires_grad": bool(rg)} for role, rg in zip(case.roles, case.requires_grad)]
    fwd, bwd, goldens = training_traces(
        rec.fw_gm, rec.bw_gm, rec.fw_args, rec.fw_results, rec.bw_args, rec.bw_results, fwd_name, bwd_name,
        list(case.names), fw_extra, {**src, "phase": "fwd"}, {**src, "phase": "bwd"}, notes=case.notes,
        golden=golden, log=lambda m: print(m, flush=True), fw_node_stats=rec.fw_node_stats,
        bw_node_stats=rec.bw_node_stats)

    # 4. golden tensors: exactly what the graphs consumed and produced
    if golden:
        attach_golden(fwd, goldens[fwd_name], args.out,
                      "the tensors the captured graph was called with and returned, as PyTorch ran the training step")
        attach_golden(bwd, goldens[bwd_name], args.out,
                      "the tensors the captured graph was called with and returned, as PyTorch ran the training "
                      "step (saved tensors and tangents in, gradients out)")

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

    # torch_replay reads enum and dtype spellings as the C++ loader does: a memory format with or
    # without "torch.", a dtype as {"dtype": name} or a bare name where the schema wants a dtype
    import torch_replay
    x = torch.randn(2, 3)
    for fmt in ("torch.contiguous_format", "contiguous_format", "preserve_format"):
        for dt in ({"dtype": "bfloat16"}, "bfloat16"):
            tr = {"inputs": [{"id": "x", "shape": [2, 3], "dtype": "float32"}],
                  "nodes": [{"id": "c", "op": "aten.clone.default", "args": [{"ref": "x"}],
                             "kwargs": {"memory_format": {"enum": fmt}}},
                            {"id": "t", "op": "prims.convert_element_type.default", "args": [{"ref": "c"}, dt],
                             "kwargs": {}}],
                  "outputs": ["t"]}
            (out,) = torch_replay.build_graph_module(tr)(x)
            assert out.dtype == torch.bfloat16 and torch.equal(out, x.to(torch.bfloat16)), (fmt, dt)
    assert torch_replay.decode_enum("torch.strided") is torch.strided
    assert torch_replay.decode_enum("channels_last") is torch.channels_last
    assert torch_replay.decode_enum("cuda:0") == torch.device("cuda:0")
    for bad in ("contiguous_formatt", "torch.cuda", "torch.float32", "strided_"):  # must be rejected
        try:
            torch_replay.decode_enum(bad)
        except ValueError:
            continue
        raise AssertionError(f"decode_enum accepted {bad!r}")
    tr["nodes"][0]["kwargs"]["memory_format"] = {"enum": "contiguous_formatt"}
    try:
        torch_replay.build_graph_module(tr)
        raise AssertionError("a misspelled memory format was accepted")
    except ValueError as e:
        assert "node c" in str(e), e
    print("torch_replay enum/dtype spellings (torch.contiguous_format, contiguous_format, bare dtype; "
          "misspellings rejected): ok")

    # backend.py's names: dynamo placeholder -> input id, sanitized trace names
    from backend import input_id_from_placeholder, sanitize
    for ph, want in (("L_x_", "x"), ("L_self_modules_q_norm_parameters_weight_", "q_norm_weight"),
                     ("L_self_buffers_variance_epsilon_", "variance_epsilon"), ("L_hidden_states_", "hidden_states"),
                     ("L_self_parameters_weight_", "weight")):
        got = input_id_from_placeholder(ph)
        assert got == want, (ph, got, want)
    assert sanitize("a.b/c--d__") == "a_b_c_d" and sanitize("LlamaRMSNorm") == "LlamaRMSNorm"
    print("backend input ids and names: ok")

    # backend.py end to end on the CPU: a LayerNorm training step through torch.compile
    import json
    import torch._dynamo as dynamo  # a plain `import torch._dynamo` would make `torch` local to this function
    from backend import ReplayBackend
    with tempfile.TemporaryDirectory() as d:
        dynamo.reset()
        # a compiled torch.nn module's positional arguments reach the backend as args_<i> (dynamo traces its
        # _call_impl(*args)); arg_names names them
        rb = ReplayBackend(d, golden=True, name_prefix="t", verbose=False, arg_names=["x"])
        mod = torch.nn.LayerNorm(8)
        with torch.no_grad():
            mod.weight.add_(0.1 * torch.randn(8))
            mod.bias.add_(0.1 * torch.randn(8))
        x = torch.randn(2, 3, 8, requires_grad=True)
        out = torch.compile(mod, backend=rb, dynamic=False)(x)
        out.sum().backward()
        names = [n for n, _ in rb.written]
        assert names == ["t_LayerNorm_g0_fwd", "t_LayerNorm_g0_bwd"], names
        fwd = json.load(open(os.path.join(d, names[0] + ".json")))
        bwd = json.load(open(os.path.join(d, names[1] + ".json")))
        roles = {i["id"]: i["role"] for i in fwd["inputs"]}
        assert roles == {"x": "activation", "weight": "param", "bias": "param"}, roles
        outs = [o for o, r in fwd["output_roles"].items() if r == "output"]
        assert len(outs) == 1 and "saved" in fwd["output_roles"].values(), fwd["output_roles"]
        saved = [i for i in bwd["inputs"] if i["role"] == "saved"]
        assert saved and all(i["from"]["output"] in fwd["outputs"] and i["from"]["trace"] == names[0] for i in saved)
        assert sorted(g["input"] for g in bwd["grad_of"].values()) == ["bias", "weight", "x"], bwd["grad_of"]
        gold = read_safetensors(os.path.join(d, fwd["golden"]["file"]))
        assert torch.equal(gold[outs[0]], out.detach()) and torch.equal(gold["x"], x.detach())
        gold_b = read_safetensors(os.path.join(d, bwd["golden"]["file"]))
        gw = [o for o, g in bwd["grad_of"].items() if g["input"] == "weight"][0]
        assert torch.equal(gold_b[gw], mod.weight.grad), "the golden weight gradient is what autograd produced"
        # a dynamic (symbolic-shape) graph cannot be written: it runs uncaptured and is reported
        dynamo.reset()
        rb2 = ReplayBackend(d, name_prefix="dyn", verbose=False)
        y = torch.compile(mod, backend=rb2, dynamic=True)(torch.randn(5, 8))
        assert y.shape == (5, 8) and not rb2.written and rb2.skipped and "symbolic" in rb2.skipped[0][1], rb2.skipped
    print("backend: LayerNorm training step on the CPU (roles, from, grad_of, golden), dynamic graph skipped: ok")
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
