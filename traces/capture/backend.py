"""A torch.compile backend that writes the graphs Inductor would receive as replay traces.

    from backend import replay_backend
    rb = replay_backend(out_dir="my_traces", partitioner="min_cut", golden=True, name_prefix="mymodel")
    model = torch.compile(model, backend=rb, dynamic=False)
    ...train as usual...
    rb.flush()          # optional: also writes forwards whose backward never ran (done at exit too)

What it does, per graph dynamo hands it (one per compiled region; a graph break gives several):
the same as PyTorch's `aot_eager_decomp_partition` backend, i.e. aot_autograd with Inductor's
decomposition table (`torch._inductor.decomposition.select_decomp_table()`) and Inductor's
partitioner (`min_cut_rematerialization_partition(compiler="inductor")`, or
`functorch.compile.default_partition` with partitioner="default"); the compiled forward and
backward run the GraphModules as they are (boxed), so the script computes what it computed before
(Inductor's fusion is not applied). The first call of each graph is recorded (for a training graph:
the backward's first call and the forward call whose saved tensors it got) and written as
replay-trace/1 (traces/SCHEMA.md) through tracelib.training_traces, exactly as capture.py writes its
training captures: forward outputs "output"/"saved", backward inputs "saved" (with "from") or
"tangent", gradients with "grad_of". An inference graph (no input requires grad) gives one
forward trace.

Names: `<prefix>_<Module>_g<k>_fwd` / `_bwd` (`_g<k>` counts the graphs this backend received
for that module, in order; `name_format` overrides), sanitized to [A-Za-z0-9_]. Input ids come
from dynamo's placeholders: `x` for an argument `x`, `q_norm_weight` for the parameter
`q_norm.weight`.

Graphs with symbolic shapes (dynamic=True, or automatic dynamic after a recompile) cannot be
written (the format has concrete shapes): they run uncaptured with a warning. Pass dynamic=False
to torch.compile (capture_script.py does).
"""
import atexit
import datetime
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tracelib import (Snap, build_trace, placeholders, meta_or_opaque, training_traces,  # noqa: E402
                      attach_golden, write_json, ops_summary, is_tensor_val, node_output_stats)

PARTITIONERS = ("min_cut", "default")


def sanitize(s):
    """A name part in [A-Za-z0-9_], no runs of '_', no leading/trailing '_'."""
    s = re.sub(r"[^A-Za-z0-9_]+", "_", str(s))
    s = re.sub(r"_+", "_", s).strip("_")
    return s or "x"


def input_id_from_placeholder(name):
    """dynamo placeholder name -> trace input id: L_x_ -> x, L_self_modules_q_norm_parameters_weight_ ->
    q_norm_weight, L_self_buffers_eps_ -> eps."""
    s = re.sub(r"^[lLgG]_", "", name).rstrip("_")
    s = re.sub(r"^(self|fn|mod|model|module)_(modules|parameters|buffers)_", r"\2_", s)
    s = re.sub(r"(^|_)(modules|parameters|buffers)_", r"\1", s)
    return sanitize(s)


def _placeholder_source(p):
    """The dynamo source name of a placeholder (e.g. "L['self']._modules['norm']._parameters['weight']"),
    or its FX name."""
    ga = p.meta.get("grapharg")
    src = getattr(ga, "source", None)
    if src is None:
        return p.name
    try:
        nm = src.name
        return str(nm() if callable(nm) else nm)
    except Exception:
        return p.name


def module_of(gm):
    """(class name, module path) of the outermost module dynamo recorded in gm's nn_module_stack,
    or (None, None) for a graph of plain functions."""
    best = None
    for n in gm.graph.nodes:
        stack = n.meta.get("nn_module_stack")
        if not stack:
            continue
        for _key, val in stack.items():
            try:
                path, cls = val
            except Exception:
                continue
            name = cls.__name__ if isinstance(cls, type) else str(cls).split(".")[-1].strip("'>")
            depth = str(path).count(".") + str(path).count("[")
            if best is None or depth < best[0]:
                best = (depth, name, str(path))
            break  # the first entry of a stack is its outermost module
    return (best[1], best[2]) if best else (None, None)


def _has_symbolic(example_inputs):
    for t in example_inputs:
        if isinstance(t, torch.SymInt) or isinstance(t, torch.SymFloat):
            return True
        if isinstance(t, torch.Tensor):
            if any(not isinstance(d, int) for d in t.shape) or any(not isinstance(s, int) for s in t.stride()):
                return True
    return False


class _GraphCapture:
    """One dynamo graph: its fw/bw/inference compilers and the recording of their first calls."""

    def __init__(self, rb, k, module, path, dgm, example_inputs):
        self.rb, self.k, self.module, self.path = rb, k, module, path
        self.dgm = dgm
        self.example_inputs = list(example_inputs)
        self.dyn_ph = placeholders(dgm)
        self.fw_gm = self.bw_gm = self.inf_gm = None
        self.fw_args = self.fw_results = self.bw_args = self.bw_results = None
        self.inf_args = self.inf_results = None
        self.fw_example_inputs = None
        self.done = False
        self.fw_calls = self.bw_calls = 0
        self.node_stats = {}

    # names and roles of the aot graph's inputs ------------------------------------------------------

    def _input_info(self, n_primals):
        """(ids, extras, notes) of the aot forward graph's n_primals placeholders: aot_module_simplified
        prepends the GraphModule's own parameters and buffers (when dynamo did not lift them) to
        dynamo's placeholders."""
        dgm = self.dgm
        lifted = list(dict(dgm.named_parameters(remove_duplicate=False)).items()) + \
            list(dict(dgm.named_buffers(remove_duplicate=False)).items())
        ids, extra, notes = [], [], []
        n_extra = n_primals - len(self.dyn_ph)
        if n_extra == len(lifted) and n_extra >= 0:
            for nm, t in lifted:
                ids.append(sanitize(nm.replace(".", "_")))
                is_param = isinstance(t, torch.nn.Parameter)
                extra.append({"role": "param", "requires_grad": bool(t.requires_grad) and is_param})
            for p, ex in zip(self.dyn_ph, self.example_inputs):
                src = _placeholder_source(p)
                iid = input_id_from_placeholder(p.target if isinstance(p.target, str) else p.name)
                m = re.fullmatch(r"(?:self_)?args_(\d+)", iid)
                if m and self.rb.arg_names and int(m.group(1)) < len(self.rb.arg_names):
                    iid = sanitize(self.rb.arg_names[int(m.group(1))])
                ids.append(iid)
                is_param = "_parameters" in src or "_buffers" in src or isinstance(ex, torch.nn.Parameter)
                rg = bool(getattr(ex, "requires_grad", False))
                extra.append({"role": "param" if is_param else "activation", "requires_grad": rg})
        else:
            notes.append(f"the forward graph has {n_primals} inputs, dynamo's graph {len(self.dyn_ph)} "
                         f"(+{len(lifted)} lifted): input ids are aot_autograd's, roles unknown")
            ids = [None] * n_primals
            extra = [None] * n_primals
        seen, out = set(), []
        for i, iid in enumerate(ids):
            base = iid or f"primals_{i + 1}"
            cand, j = base, 1
            while cand in seen:
                cand = f"{base}_{j}"
                j += 1
            seen.add(cand)
            out.append(cand)
        return out, extra, notes

    # compilers -------------------------------------------------------------------------------------

    def _wrap(self, gm, which):
        rb = self.rb

        def run(args):
            record = not self.done and (which == "fw" and self.bw_args is None or
                                        which == "bw" and self.bw_args is None or
                                        which == "inf" and self.inf_args is None)
            if not record:
                return gm(*args)
            args = list(args)
            snaps_in = [Snap(a, rb.golden) for a in args]
            # node by node, keeping every node output's stats (a cut node's outputs are drawn from them)
            out, node_stats = node_output_stats(gm, args)
            self.node_stats[which] = node_stats
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            snaps_out = [Snap(o, rb.golden) for o in outs]
            if which == "fw":
                self.fw_calls += 1
                self.fw_args, self.fw_results = snaps_in, snaps_out
            elif which == "bw":
                self.bw_calls += 1
                self.bw_args, self.bw_results = snaps_in, snaps_out
                if rb.auto_write:
                    rb._write(self)
            else:
                self.inf_args, self.inf_results = snaps_in, snaps_out
                if rb.auto_write:
                    rb._write(self)
            return out

        run._boxed_call = True
        return run

    def fw_compiler(self, gm, example_inputs):
        self.fw_gm = gm
        self.fw_example_inputs = example_inputs
        return self._wrap(gm, "fw")

    def bw_compiler(self, gm, example_inputs):
        self.bw_gm = gm
        return self._wrap(gm, "bw")

    def inference_compiler(self, gm, example_inputs):
        self.inf_gm = gm
        return self._wrap(gm, "inf")


class ReplayBackend:
    """The backend object: call it as torch.compile's backend. See the module docstring.

    out_dir: where traces go (created). partitioner: "min_cut" (Inductor's) or "default".
    golden: write a safetensors sidecar of the tensors each graph was called with and returned
    (small shapes only: they are copied on the device). name_prefix: first part of every name.
    module_filter: a regex; graphs whose module (class name or path) does not match run through
    the same decompositions but are not written. name_format: a str.format pattern with {prefix},
    {module}, {k}, {phase} ("fwd"/"bwd"); without {k}, graphs after the first get "_g<k>".
    source: extra fields for every trace's "source". arg_names: ids for the positional
    arguments where dynamo names them args_<i> (a compiled nn.Module's *args). auto_write: write a graph's traces as soon
    as its backward (or inference forward) first ran; False: only at flush().
    """

    def __init__(self, out_dir, partitioner="min_cut", golden=False, name_prefix="byog", module_filter=None,
                 name_format=None, source=None, auto_write=True, verbose=True, module_name=None, arg_names=None):
        if partitioner not in PARTITIONERS:
            raise ValueError(f"partitioner must be one of {PARTITIONERS}, not {partitioner!r}")
        self.out_dir = out_dir
        self.partitioner = partitioner
        self.golden = golden
        self.name_prefix = sanitize(name_prefix) if name_prefix else ""
        self.module_filter = re.compile(module_filter) if module_filter else None
        self.name_format = name_format
        self.source = dict(source or {})
        self.auto_write = auto_write
        self.verbose = verbose
        self.module_name = module_name
        self.arg_names = list(arg_names) if arg_names else None
        self.captures = []          # every _GraphCapture, in order
        self.written = []           # [(trace name, path)]
        self.skipped = []           # [(module, reason)]
        self.failed = []            # [(name, message)]
        self._k = {}
        self._names = set()
        os.makedirs(out_dir, exist_ok=True)
        atexit.register(self.flush)

    def log(self, msg):
        if self.verbose:
            print(msg, flush=True)

    def for_module(self, module_name):
        """A backend callable sharing this one's state whose graphs are named after module_name
        (what capture_script.py passes when it knows which module torch.compile got)."""
        def backend(gm, example_inputs, **kwargs):
            return self._compile(gm, example_inputs, module_name)
        return backend

    def __call__(self, gm, example_inputs, **kwargs):
        return self._compile(gm, example_inputs, self.module_name)

    # compile ----------------------------------------------------------------------------------------

    def _partition_fn(self):
        import functools
        from functorch.compile import default_partition, min_cut_rematerialization_partition
        if self.partitioner == "default":
            return default_partition
        return functools.partial(min_cut_rematerialization_partition, compiler="inductor")

    def _compile(self, gm, example_inputs, module_hint):
        from torch._dynamo.backends.common import aot_autograd
        from torch._inductor.decomposition import select_decomp_table
        import torch._functorch.config as functorch_config

        cls, path = module_of(gm)
        module = sanitize(module_hint or cls or getattr(gm, "_dynamo_name", None) or "graph")
        kk = self._k.get(module, 0)
        self._k[module] = kk + 1
        if self.module_filter is not None and not (self.module_filter.search(module) or
                                                   (cls and self.module_filter.search(cls)) or
                                                   (path and self.module_filter.search(path))):
            self.skipped.append((module, f"graph {kk}: module filter does not match ({cls}, {path})"))
            cap = None
        elif _has_symbolic(example_inputs):
            self.log(f"replay backend: {module} graph {kk} has symbolic shapes (dynamic); it runs uncaptured "
                     "(compile with dynamic=False)")
            self.skipped.append((module, f"graph {kk}: symbolic shapes"))
            cap = None
        else:
            cap = _GraphCapture(self, kk, module, path or cls, gm, example_inputs)
            self.captures.append(cap)
            self.log(f"replay backend: {module} graph {kk} ({cls}, {path}): inputs "
                     + ", ".join(f"{p.name}={_placeholder_source(p)}" for p in cap.dyn_ph))

        if cap is None:
            from functorch.compile import make_boxed_func

            def nop(g, _ex):
                return make_boxed_func(g.forward)
            compilers = dict(fw_compiler=nop, bw_compiler=nop)
        else:
            compilers = dict(fw_compiler=cap.fw_compiler, bw_compiler=cap.bw_compiler,
                             inference_compiler=cap.inference_compiler)
        with functorch_config.patch(unlift_effect_tokens=True):
            return aot_autograd(decompositions=select_decomp_table(), partition_fn=self._partition_fn(),
                                **compilers)(gm, example_inputs)

    # writing ----------------------------------------------------------------------------------------

    def _name(self, cap, phase):
        fmt = self.name_format or ("{prefix}_{module}_g{k}_{phase}" if self.name_prefix else "{module}_g{k}_{phase}")
        name = fmt.format(prefix=self.name_prefix, module=cap.module, k=cap.k, phase=phase)
        if "{k}" not in fmt and cap.k > 0:
            name += f"_g{cap.k}"
        return sanitize(name)

    def _source(self, cap, phase):
        src = {
            "model": f"{cap.module} (torch.compile graph {cap.k}" + (f", module {cap.path}" if cap.path else "") + ")",
            "module": cap.path or cap.module,
            "phase": phase,
            "torch_version": torch.__version__,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "capture_command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "captured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "method": ("torch.compile backend traces/capture/backend.py (as aot_eager_decomp_partition): dynamo graph "
                       f"{cap.k} -> aot_autograd + torch._inductor.decomposition.select_decomp_table + "
                       + ("functorch.compile.min_cut_rematerialization_partition(compiler='inductor')"
                          if self.partitioner == "min_cut" else "functorch.compile.default_partition")
                       + "; the graphs' first calls as the script ran them"),
            "partitioner": self.partitioner,
        }
        src.update(self.source)
        return src

    def _write(self, cap, extra_source=None, final=False):
        """Write cap's traces if it has what they need; returns the names written."""
        if cap.done:
            return []
        names = []
        try:
            if cap.inf_args is not None and cap.inf_gm is not None:
                names = self._write_inference(cap, extra_source)
            elif cap.fw_args is not None and cap.bw_args is not None:
                names = self._write_training(cap, extra_source)
            elif final and cap.fw_args is not None:
                names = self._write_forward_only(cap, extra_source)
            else:
                return []
        except Exception as e:  # a capture that cannot be written must not stop the user's script
            import traceback
            traceback.print_exc()
            msg = f"{type(e).__name__}: {e}"
            self.failed.append((f"{cap.module} graph {cap.k}", msg))
            self.log(f"replay backend: FAILED to write {cap.module} graph {cap.k}: {msg}")
        cap.done = True
        return names

    def _emit(self, trace):
        path = os.path.join(self.out_dir, trace["name"] + ".json")
        if trace["name"] in self._names:
            raise RuntimeError(f"trace name {trace['name']} written twice (set name_format with {{k}})")
        self._names.add(trace["name"])
        write_json(path, trace)
        self.written.append((trace["name"], path))
        self.log(f"wrote {trace['name']}: {len(trace['inputs'])} inputs, {len(trace['nodes'])} nodes, "
                 f"{len(trace['outputs'])} outputs, ops {ops_summary(trace)}")

    def _write_training(self, cap, extra_source):
        fwd_name, bwd_name = self._name(cap, "fwd"), self._name(cap, "bwd")
        n_primals = len(placeholders(cap.fw_gm))
        ids, extra, notes = cap._input_info(n_primals)
        fsrc, bsrc = self._source(cap, "fwd"), self._source(cap, "bwd")
        if extra_source:
            fsrc.update(extra_source)
            bsrc.update(extra_source)
        fwd, bwd, goldens = training_traces(cap.fw_gm, cap.bw_gm, cap.fw_args, cap.fw_results, cap.bw_args,
                                            cap.bw_results, fwd_name, bwd_name, ids, extra, fsrc, bsrc,
                                            notes=notes, golden=self.golden, log=self.log,
                                            fw_node_stats=cap.node_stats.get("fw"),
                                            bw_node_stats=cap.node_stats.get("bw"))
        if self.golden:
            attach_golden(fwd, goldens[fwd_name], self.out_dir,
                          "the tensors the captured forward graph was called with and returned (its first call)")
            attach_golden(bwd, goldens[bwd_name], self.out_dir,
                          "the tensors the captured backward graph was called with and returned (its first call: "
                          "saved tensors and tangents in, gradients out)")
        self._emit(fwd)
        self._emit(bwd)
        return [fwd_name, bwd_name]

    def _forward_trace(self, cap, gm, args, results, name, src, notes, node_stats=None):
        n = len(placeholders(gm))
        ids, extra, more = cap._input_info(n)
        notes = notes + more
        if len(args) != n or any(not s.is_tensor for s in args):
            raise RuntimeError(f"the graph was called with {len(args)} arguments for {n} placeholders "
                               f"(non-tensors: {[s.raw for s in args if not s.is_tensor]})")
        metas = [meta_or_opaque(p.meta["val"]) if is_tensor_val(p) else (s.meta or {"opaque": s.raw}) for p, s in zip(placeholders(gm), args)]
        if notes:
            src["notes"] = notes
        trace, out_ids, ph_ids = build_trace(gm, name, src, ids, metas, [s.stats for s in args], extra,
                                             node_stats=node_stats)
        if self.golden:
            st = {iid: s.value for iid, s in zip(ph_ids, args) if s.value is not None}
            for oid, s in zip(out_ids, results):
                if oid is not None and s.value is not None and oid not in st:
                    st[oid] = s.value
            attach_golden(trace, st, self.out_dir, "the tensors the captured graph was called with and returned")
        return trace

    def _write_inference(self, cap, extra_source):
        name = self._name(cap, "fwd")
        src = self._source(cap, "fwd")
        src["method"] += "; inference graph (no input requires grad)"
        src.update(extra_source or {})
        trace = self._forward_trace(cap, cap.inf_gm, cap.inf_args, cap.inf_results, name, src, [],
                                    cap.node_stats.get("inf"))
        self._emit(trace)
        return [name]

    def _write_forward_only(self, cap, extra_source):
        name = self._name(cap, "fwd")
        src = self._source(cap, "fwd")
        src.update(extra_source or {})
        trace = self._forward_trace(cap, cap.fw_gm, cap.fw_args, cap.fw_results, name, src,
                                    ["the backward never ran: forward only; its saved outputs are listed as outputs"],
                                    cap.node_stats.get("fw"))
        self._emit(trace)
        return [name]

    def flush(self, extra_source=None):
        """Write every graph not yet written: training graphs whose backward ran, inference graphs,
        and forwards whose backward never ran (forward trace only). extra_source: fields added to
        each trace's source (e.g. an eager check). Returns the names written."""
        names = []
        for cap in self.captures:
            names += self._write(cap, extra_source, final=True)
        return names

    def summary(self):
        lines = [f"replay backend: {len(self.written)} traces in {self.out_dir}"]
        lines += [f"  {n}" for n, _ in self.written]
        if self.skipped:
            lines.append(f"  not captured: {len(self.skipped)} graph(s): " +
                         "; ".join(f"{m}: {r}" for m, r in self.skipped[:20]))
        for n, msg in self.failed:
            lines.append(f"  FAILED {n}: {msg[:400]}")
        return "\n".join(lines)


def replay_backend(out_dir, partitioner="min_cut", golden=False, name_prefix="byog", **kwargs):
    """torch.compile(model, backend=replay_backend(out_dir=...), dynamic=False). See ReplayBackend."""
    return ReplayBackend(out_dir, partitioner=partitioner, golden=golden, name_prefix=name_prefix, **kwargs)


def annotate(paths, **fields):
    """Add fields to the source of already written traces (e.g. an eager check done afterwards)."""
    for p in paths:
        with open(p) as f:
            t = json.load(f)
        t["source"].update(fields)
        write_json(p, t)


# --- one training step of a module through the backend, checked against eager ------------------------


def capture_module_step(mod, inputs, arg_names, out_dir, partitioner, golden, name_format, source=None,
                        loss_fn=None, fullgraph=True, tangent_seed=1235, log=print, requires_grad=None,
                        context=None):
    """Run one training step of `mod` on `inputs` through torch.compile with a ReplayBackend,
    then the same step in eager autograd, compare outputs and gradients (tracelib.compare_tensors)
    and write the traces with source.eager_check saying how it went.

    inputs: tensors; requires_grad: per input (default: those of a floating dtype). loss_fn: None for
    seeded random tangents of every output that requires grad (as capture.py does), or a function
    of the outputs giving a scalar loss. context: a function returning a context manager both steps
    run in (e.g. an sdpa_kernel choice, which decides the attention op in the graph). Returns
    (names written, check ok, check message).
    """
    import contextlib
    import torch._dynamo

    torch._dynamo.reset()
    context = context or contextlib.nullcontext
    rb = ReplayBackend(out_dir, partitioner=partitioner, golden=golden, name_prefix="", name_format=name_format,
                       source=source, auto_write=False, arg_names=arg_names, module_name=type(mod).__name__)
    params = [p for p in mod.parameters() if p.requires_grad]
    rgs = list(requires_grad) if requires_grad is not None else [t.is_floating_point() for t in inputs]

    def step(fn):
        for p in params:
            p.grad = None
        leaves = [t.detach().clone().requires_grad_(bool(rg)) for t, rg in zip(inputs, rgs)]
        with torch.enable_grad(), context():
            outs = fn(*leaves)
            outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(o for o in outs if isinstance(o, torch.Tensor))
            if loss_fn is not None:
                loss_fn(outs).backward()
            else:
                gen = torch.Generator(device=outs[0].device).manual_seed(tangent_seed)
                diff = [o for o in outs if o.requires_grad]
                tans = [torch.randn(o.shape, generator=gen, device=o.device, dtype=torch.float32).to(o.dtype)
                        for o in diff]
                if diff:  # an inference step (no input requires grad) has no backward
                    torch.autograd.backward(diff, tans)
        grads = [l.grad if l.requires_grad else None for l in leaves] + [p.grad for p in params]
        res = [o.detach().clone() for o in outs], [None if g is None else g.detach().clone() for g in grads]
        for p in params:
            p.grad = None
        return res

    compiled = torch.compile(mod, backend=rb, dynamic=False, fullgraph=fullgraph)
    outs_c, grads_c = step(compiled)
    outs_e, grads_e = step(mod)
    pnames = [n for n, p in mod.named_parameters() if p.requires_grad]
    labels = [f"grad {n}" for n in list(arg_names)[:len(inputs)]] + [f"grad {n}" for n in pnames]
    ok_all, msgs = True, []
    for i, (o, e) in enumerate(zip(outs_c, outs_e)):
        ok, m = compare_tensors_(f"output {i}", o, e)
        ok_all &= ok
        msgs.append(m)
    for lab, g, e in zip(labels, grads_c, grads_e):
        ok, m = compare_tensors_(lab, g, e)
        ok_all &= ok
        msgs.append(m)
    check = ("pass" if ok_all else "FAIL") + ": compiled (captured graphs) vs eager step: " + "; ".join(msgs)
    log(f"  eager check: {check[:600]}")
    how = ("seeded random tangents (seed %d)" % tangent_seed) if loss_fn is None else "loss.backward()"
    names = rb.flush(extra_source={"eager_check": check, "step": f"one training step, backward with {how}"})
    if rb.failed:
        raise RuntimeError("; ".join(f"{n}: {m}" for n, m in rb.failed))
    if rb.skipped:
        log(f"  note: graphs not captured: {rb.skipped}")
    return names, ok_all, check


def compare_tensors_(what, got, exp):
    from tracelib import compare_tensors
    return compare_tensors(what, got, exp)
