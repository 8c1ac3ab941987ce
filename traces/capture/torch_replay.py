#!/usr/bin/env python3
"""Run replay traces in PyTorch and time them: the PyTorch peers of the harness's variants, and a
reproducer building block (any trace's graph as a torch.fx.GraphModule).

    python3 traces/capture/torch_replay.py TRACE.json|DIR ... --out peers.json [--reps 200] [--compile]

For each replay-trace/1 file (or each case of a replay-opcorpus/1 file): build a torch.fx.Graph
with one call_function per trace node (target torch.ops.<ns>.<op>.<overload>, operator.getitem
for "getitem"), arguments decoded back from the JSON; inputs are the golden tensors when the trace
has a golden sidecar (laid out with the recorded strides), else generated on CUDA from each
input's "stats" (normal with mean/std, clamped to min/max, cast, laid out with the recorded
strides); then

- "pytorch_ops": the GraphModule run op by op (eager), timed;
- "torch_compile" (with --compile): torch.compile(gm), default mode, timed after a first
  (compiling) call;
- "golden_check": the GraphModule's outputs against the trace's golden outputs
  (torch.testing.assert_close, bf16 tolerances), "pass", "fail: ..." or "none";
  "golden_check_compile" likewise for the compiled module, for information only (Inductor fuses
  and keeps float32 intermediates, so a cancelling bf16 reduction such as a weight gradient can
  differ by more than the bf16 tolerance without being wrong).

Timing is the method of shared/peers/anchors.py `bench`: before every sample the L2 is flushed by
READING a buffer twice its size (buf.sum()), CUDA events around the call alone, 25 warm-up calls,
then samples in batches of 10 until the harness's own stopping rule stops (>= 10 samples and
>= 50 ms of GPU time with the 95 % CI of the median within 0.5 % of it, or 15 s; --reps N: exactly
N samples instead); the median, every sample and why sampling stopped are recorded (microseconds).
As the harness does (harness/measure/TIMING.md, "Power throttling"), a batch after which the SM
clock (NVML, through pynvml) is below 0.9 x its maximum is discarded and counted, the GPU idles
50 ms and the next batch is half as long: so a peer and the harness's variants are both timed at
the clock they run at unthrottled (without pynvml no clock is checked, and the peers file says so).
--results RESULTS.json also writes the peers in the harness's results schema (peer_results.py), so
`replay compare` and `replay merge` put them beside the harness's own variants.

One trace failing does not stop the others; peers.json is rewritten after every trace. Exit
status 1 if any trace failed (an error, or a failed golden_check of the GraphModule).

As a reproducer:  from torch_replay import load_graph;  gm, inputs, golden = load_graph("t.json")
"""
import argparse
import glob
import json
import keyword
import operator
import os
import re
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tracelib import NAME_TO_DTYPE, FLOAT8_DTYPES, read_safetensors  # noqa: E402
import peer_results  # noqa: E402

PEERS_SCHEMA = "replay-peers/1"


# --- trace -> GraphModule ------------------------------------------------------------------------------


def resolve_op(name):
    if name == "getitem":
        return operator.getitem
    parts = name.split(".")
    if len(parts) != 3:
        raise ValueError(f"op '{name}' is not <namespace>.<op>.<overload>")
    ns, packet, overload = parts
    return getattr(getattr(getattr(torch.ops, ns), packet), overload)


def decode_enum(s):
    """An {"enum": ...} argument: a memory format or layout, spelled with or without its "torch."
    prefix ("torch.contiguous_format", "contiguous_format", "torch.strided"), as the C++ loader
    accepts both; otherwise a device ("cuda:0", "cpu"). ValueError for anything else."""
    name = s[len("torch."):] if s.startswith("torch.") else s
    v = getattr(torch, name, None)
    if isinstance(v, (torch.memory_format, torch.layout)):
        return v
    if s.startswith("torch."):
        raise ValueError(f"unknown enum {s!r}: not a torch memory format or layout")
    try:
        return torch.device(s)  # "cuda:0", "cpu", "cuda"
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"unknown enum {s!r}: not a memory format, layout or device ({e})") from None


def coerce_by_schema(target, args, kwargs):
    """Strings where the op's schema wants a dtype or a memory format/layout: a bare dtype name
    ("float32", which the C++ loader accepts for a dtype argument) becomes the torch.dtype, a bare
    memory format ("contiguous_format") the torch.memory_format. Other arguments are unchanged."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return args, kwargs

    def fix(arg, v):
        if not isinstance(v, str):
            return v
        # TorchScript types a dtype/memory format/layout as int; real_type keeps the name
        ty = str(getattr(arg, "real_type", arg.type)).rstrip("?")
        if ty == "int" and arg.name == "dtype":
            ty = "ScalarType"
        elif ty == "int" and arg.name in ("memory_format", "layout"):
            ty = "MemoryFormat"
        if ty == "ScalarType":
            try:
                return torch_dtype(v)
            except ValueError:
                raise ValueError(f"argument {arg.name}: unknown dtype {v!r}") from None
        if ty in ("MemoryFormat", "Layout", "Device"):
            return decode_enum(v)
        return v

    sargs = list(schema.arguments)
    pos = [a for a in sargs if not a.kwarg_only]
    args = tuple(fix(pos[i], v) if i < len(pos) else v for i, v in enumerate(args))
    by_name = {a.name: a for a in sargs}
    kwargs = {k: fix(by_name[k], v) if k in by_name else v for k, v in kwargs.items()}
    return args, kwargs


def torch_dtype(name):
    """The torch dtype a trace names: one of the format's, or one it lacks (a cut node's argument,
    an input written opaque: "complex64", "uint8")."""
    if name in NAME_TO_DTYPE:
        return NAME_TO_DTYPE[name]
    dt = getattr(torch, str(name).replace("torch.", ""), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


def opaque_tensor_meta(desc):
    """(dtype, shape) of the capture's {"opaque": "torch.complex64[8, 8]"} for a tensor of a dtype the
    format lacks, or None for a non-tensor ("int", "None")."""
    m = re.fullmatch(r"(?:torch\.)?(\w+)\[([\d, ]*)\]", str(desc))
    if not m:
        return None
    try:
        dt = torch_dtype(m.group(1))
    except ValueError:
        return None
    return dt, [int(d) for d in m.group(2).replace(" ", "").split(",") if d]


def decode_arg(a, env):
    if isinstance(a, dict):
        if "ref" in a:
            if a["ref"] not in env:
                raise KeyError(f"reference to unknown value '{a['ref']}'")
            return env[a["ref"]]
        if "dtype" in a:
            return torch_dtype(a["dtype"])
        if "enum" in a:
            return decode_enum(a["enum"])
        if "float" in a:
            return float(a["float"])
        raise ValueError(f"cannot decode argument {a}")
    if isinstance(a, list):
        return [decode_arg(x, env) for x in a]
    return a


def _py_name(s, used):
    n = re.sub(r"\W", "_", s)
    if not n or n[0].isdigit() or keyword.iskeyword(n):
        n = "v_" + n
    base, k = n, 1
    while n in used:
        n = f"{base}_{k}"
        k += 1
    used.add(n)
    return n


def build_graph_module(trace):
    g = torch.fx.Graph()
    env, used = {}, set()
    for inp in trace["inputs"]:
        env[inp["id"]] = g.placeholder(_py_name(inp["id"], used))
    for node in trace["nodes"]:
        target = resolve_op(node["op"])
        try:
            args = tuple(decode_arg(a, env) for a in node.get("args", []))
            kwargs = {k: decode_arg(v, env) for k, v in node.get("kwargs", {}).items()}
            args, kwargs = coerce_by_schema(target, args, kwargs)
        except ValueError as e:
            raise ValueError(f"node {node['id']} ({node['op']}): {e}") from None
        env[node["id"]] = g.call_function(target, args, kwargs)
    g.output(tuple(env[o] for o in trace["outputs"]))
    g.lint()
    return torch.fx.GraphModule(torch.nn.Module(), g)


# --- inputs ------------------------------------------------------------------------------------------


def _contig_strides(shape):
    st, s = [], 1
    for d in reversed(shape):
        st.append(s)
        s *= max(d, 1)
    return list(reversed(st))


def _storage_numel(shape, stride):
    if any(d == 0 for d in shape):
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(shape, stride))


_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def materialize(values, shape, stride, dtype, device):
    """A tensor of the given layout (storage offset 0) holding `values` (its logical values); the
    storage is written element by element, so stride-0 and overlapping layouts work too."""
    values = values.to(device)
    if values.dtype != dtype:
        values = values.to(dtype)
    n = _storage_numel(shape, stride)
    itype = _SAME_SIZE_INT[torch.empty(0, dtype=dtype).element_size()]
    flat = torch.zeros(max(n, 1), dtype=itype, device=device)
    if n:
        idx = torch.zeros(shape, dtype=torch.int64, device=device)
        for d, (sz, st) in enumerate(zip(shape, stride)):
            view = [1] * len(shape)
            view[d] = sz
            idx = idx + (torch.arange(sz, device=device, dtype=torch.int64) * st).view(view)
        flat[idx.reshape(-1)] = values.contiguous().reshape(-1).view(itype)
    return flat.view(dtype).as_strided(shape, stride, 0)


def generate(inp, shape, stride, dtype, device, gen):
    st = inp.get("stats") or {}
    mean, std = float(st.get("mean", 0.0)), float(st.get("std", 1.0))
    lo, hi = float(st.get("min", -1e30)), float(st.get("max", 1e30))
    n = max(_storage_numel(shape, stride), 1)
    if std > 0:
        x = torch.randn(n, generator=gen, device=device, dtype=torch.float64) * std + mean
    else:
        x = torch.full((n,), mean, device=device, dtype=torch.float64)
    x = x.clamp(lo, hi)
    if dtype == torch.bool:
        x = x != 0
    elif dtype.is_floating_point:
        if dtype in FLOAT8_DTYPES:
            m = torch.finfo(dtype).max
            x = x.clamp(-m, m).to(torch.float32)
        x = x.to(dtype)
    else:
        info = torch.iinfo(dtype)
        x = x.clamp(info.min, info.max).trunc().to(dtype)
    return x.as_strided(shape, stride, 0)


def make_inputs(trace, golden, device, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    inputs, sources = [], []
    for inp in trace["inputs"]:
        if "shape" not in inp:  # a dtype the format lacks, written opaque (a complex64 table)
            meta = opaque_tensor_meta(inp.get("opaque"))
            if meta is None:
                raise ValueError(f"input {inp['id']}: {inp.get('opaque')!r} is no tensor")
            dt, shape = meta
            if dt.is_complex or dt.is_floating_point:
                x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dt)
            else:  # integers: zeros, as the harness draws a cut integer output
                x = torch.zeros(shape, device=device, dtype=dt)
            inputs.append(x)
            sources.append("opaque (drawn: N(0, 1), integers 0)")
            continue
        shape = list(inp["shape"])
        stride = list(inp.get("stride") or _contig_strides(shape))
        dtype = torch_dtype(inp["dtype"])
        if dtype not in NAME_TO_DTYPE.values():  # e.g. a uint8 mask: zeros
            inputs.append(torch.zeros(shape, device=device, dtype=dtype).as_strided(shape, stride, 0))
            sources.append("zeros (a dtype the format lacks)")
            continue
        if inp["id"] in golden:
            inputs.append(materialize(golden[inp["id"]], shape, stride, dtype, device))
            sources.append("golden")
        else:
            inputs.append(generate(inp, shape, stride, dtype, device, gen))
            sources.append("stats")
    return inputs, sources


def load_golden(trace, trace_dir):
    """{value id: CPU tensor} of the trace's golden sidecar (prefix stripped), or {}."""
    gd = trace.get("golden")
    if not gd:
        return {}
    path = gd["file"] if os.path.isabs(gd["file"]) else os.path.join(trace_dir, gd["file"])
    tensors = read_safetensors(path)
    prefix = gd.get("prefix", "")
    out = {}
    for vid in gd.get("tensors", []):
        key = prefix + vid
        if key not in tensors:
            raise KeyError(f"golden file {path} has no tensor '{key}'")
        out[vid] = tensors[key]
    return out


def load_graph(path, device="cuda", seed=0, case=None):
    """(GraphModule, inputs, golden) of a trace file (case: the case id of an opcorpus file)."""
    with open(path) as f:
        doc = json.load(f)
    if doc.get("schema") == "replay-opcorpus/1":
        doc = next(c["trace"] for c in doc["cases"] if case is None or c["id"] == case)
    golden = load_golden(doc, os.path.dirname(os.path.abspath(path)))
    gm = build_graph_module(doc)
    inputs, _ = make_inputs(doc, golden, device, seed)
    return gm, inputs, golden


# --- timing and checks --------------------------------------------------------------------------------

_L2_READ = None


_NVML = None  # (pynvml, handle) of device 0; False without pynvml


def sm_clock_mhz():
    """(current, maximum) SM clock of the current CUDA device in MHz from NVML, or None without
    pynvml or when NVML fails (no clock check then). The device is found by its UUID, which is the
    same in CUDA and NVML whatever CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER say."""
    global _NVML
    if _NVML is None:
        try:
            import pynvml
            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
            _NVML = (pynvml, pynvml.nvmlDeviceGetHandleByUUID(
                uuid if uuid.startswith(("GPU-", "MIG-")) else "GPU-" + uuid))
        except Exception:  # noqa: BLE001 (no pynvml, no NVML, an unknown UUID: no clock check)
            _NVML = False
    if not _NVML:
        return None
    nv, h = _NVML
    try:
        return (nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 (a failed query: this batch is not checked)
        return None


MIN_CLOCK_RATIO = 0.9       # harness/measure/stats.hpp StopRule::min_clock_ratio
THROTTLE_RECOVERY_S = 0.05  # StopRule::throttle_recovery_s


def bench(fn, rep=0, warmup=25):
    """Cold samples in µs (shared/peers/anchors.py bench): the L2 flushed by READING a buffer of
    twice its size before every sample, CUDA events around `fn` alone, `warmup` calls first.
    rep > 0: exactly `rep` samples (anchors.py); rep == 0: the harness's stopping rule
    (peer_results.DEFAULT_RULE: batches of 10 until >= 10 samples and >= 50 ms of GPU time have a
    95 % CI of the median within 0.5 % of it, or 15 s). Returns {"median_us", "samples_us",
    "stop_reason", "wall_s"}."""
    global _L2_READ
    if _L2_READ is None:
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        _L2_READ = torch.ones(2 * l2 // 4, dtype=torch.float32, device="cuda")
    for _ in range(warmup):
        fn()
    samples, clocks, discarded, t0 = [], [], 0, time.time()
    full = min(rep, 10) if rep > 0 else 10
    batch, floor = full, 0.0
    while True:
        if rep > 0:
            batch = min(batch, rep - len(samples))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
        for i in range(batch):
            _L2_READ.sum()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        clock = sm_clock_mhz()
        if clock is not None:
            floor = MIN_CLOCK_RATIO * clock[1]
        if clock is not None and clock[0] < floor:  # throttled: discard, idle, shorter bursts
            discarded += batch
            batch = max(1, batch // 2)
            time.sleep(THROTTLE_RECOVERY_S)
        else:
            samples += [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
            clocks += [clock[0]] * batch if clock is not None else []
            batch = min(full, 2 * batch)
        wall = time.time() - t0
        if rep > 0:
            why = "fixed_count" if len(samples) >= rep else (
                "timeout" if wall >= peer_results.DEFAULT_RULE["timeout_s"] else None)
        else:
            why = peer_results.stop_reason(samples, wall, peer_results.DEFAULT_RULE)
        if why:
            break
    if not samples:  # the peer is reported as not timed, the trace's other peers still are
        return {"error": f"every sample ran with the SM clock below {floor:.0f} MHz "
                         f"({discarded} discarded) until the timeout"}
    return {"median_us": round(peer_results.summarize(samples)["median_us"], 3),
            "samples_us": [round(x, 3) for x in samples], "stop_reason": why, "wall_s": round(wall, 3),
            "sm_clock_mhz": clocks, "clock_floor_mhz": round(floor, 1),
            "discarded_slow_clock": discarded, "clock_check": "nvml" if floor > 0 else "none"}


def check_golden(outs, trace, golden):
    """'pass', 'fail: ...' or 'none' (no golden output)."""
    checked, fails = 0, []
    for oid, o in zip(trace["outputs"], outs):
        if oid not in golden:
            continue
        g = golden[oid].to(o.device)
        checked += 1
        try:
            if list(o.shape) != list(g.shape) or o.dtype != g.dtype:
                raise AssertionError(f"{o.dtype}{list(o.shape)} vs golden {g.dtype}{list(g.shape)}")
            if o.dtype in FLOAT8_DTYPES:
                o, g = o.float(), g.float()
            torch.testing.assert_close(o, g, rtol=1.6e-2, atol=1e-2, equal_nan=True, check_stride=False)
        except AssertionError as e:
            fails.append(f"{oid}: {' '.join(str(e).split())[:300]}")
    if not checked:
        return "none"
    return "pass" if not fails else "fail: " + "; ".join(fails)


def _as_list(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def replay_one(name, trace, trace_dir, args):
    res = {}
    golden = load_golden(trace, trace_dir)
    gm = build_graph_module(trace)
    inputs, sources = make_inputs(trace, golden, "cuda", args.seed)
    res["inputs_from"] = "golden" if sources and all(s == "golden" for s in sources) else \
        ("stats" if all(s == "stats" for s in sources) else "golden+stats")
    res["nodes"] = len(trace["nodes"])
    res["node_ids"] = [n["id"] for n in trace["nodes"]]
    with torch.no_grad():
        outs = _as_list(gm(*inputs))
        torch.cuda.synchronize()
        res["golden_check"] = check_golden(outs, trace, golden)
        del outs
        if not args.no_time:
            res["pytorch_ops"] = bench(lambda: gm(*inputs), rep=args.reps, warmup=args.warmup)
        if args.compile:
            try:
                torch._dynamo.reset()
                cgm = torch.compile(gm)
                t0 = time.time()
                outs = _as_list(cgm(*inputs))
                torch.cuda.synchronize()
                res["compile_s"] = round(time.time() - t0, 2)
                res["golden_check_compile"] = check_golden(outs, trace, golden)
                del outs
                if not args.no_time:
                    res["torch_compile"] = bench(lambda: cgm(*inputs), rep=args.reps, warmup=args.warmup)
            except Exception as e:
                traceback.print_exc()
                res["torch_compile"] = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"}
            finally:
                torch._dynamo.reset()
    return res


def expand_paths(paths):
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(glob.glob(os.path.join(p, "*.json")))
        else:
            out.append(p)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+", help="trace files or folders (their *.json)")
    ap.add_argument("--out", required=True, help="peers JSON to write")
    ap.add_argument("--reps", type=int, default=0,
                    help="timed samples per measurement; 0 (default): the harness's stopping rule")
    ap.add_argument("--results", help="also write the peers as a replay-results/2 document "
                    "(peer_results.py), for replay compare / merge and the reports")
    ap.add_argument("--warmup", type=int, default=25)
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(gm)")
    ap.add_argument("--no-time", action="store_true", help="golden checks only")
    ap.add_argument("--seed", type=int, default=0, help="seed of the inputs generated from stats")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_replay.py needs a CUDA device", file=sys.stderr)
        return 2

    method = ("pytorch_ops: torch.fx.GraphModule with one call_function per trace node, run eagerly; "
              "torch_compile: torch.compile(gm) in the default mode, timed after a first compiling call. "
              f"Each: {args.warmup} warm-up calls, then "
              f"{args.reps if args.reps > 0 else 'batches of 10 until the harness stopping rule stops'} samples, each after flushing the L2 by "
              "reading a float32 buffer of twice its size (buf.sum()), CUDA events around the call alone; "
              "median of the samples, in µs (shared/peers/anchors.py bench). Inputs: golden tensors where "
              "the trace has them, else normal(mean, std) clamped to [min, max] from the trace's stats "
              f"(seed {args.seed}), laid out with the recorded strides. Under torch.no_grad.")
    doc = {"schema": PEERS_SCHEMA, "torch_version": torch.__version__,
           "device": torch.cuda.get_device_name(0), "method": method,
           "command": " ".join(["python3", "traces/capture/torch_replay.py"] + sys.argv[1:]), "seed": args.seed,
           "stop_rule": peer_results.DEFAULT_RULE if args.reps == 0 else {"fixed_count": args.reps},
           "traces": {}}
    files = {}

    def write():
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        if args.results:
            with open(args.results, "w") as f:
                json.dump(peer_results.to_results(doc, files), f, indent=1)
    items = []
    for path in expand_paths(args.traces):
        try:
            with open(path) as f:
                d = json.load(f)
        except Exception as e:
            doc["traces"][os.path.basename(path)] = {"error": f"cannot read: {e}"}
            continue
        tdir = os.path.dirname(os.path.abspath(path))
        if d.get("schema") == "replay-opcorpus/1":
            items += [(c["trace"]["name"], c["trace"], tdir) for c in d.get("cases", [])]
        elif d.get("schema") == "replay-trace/1":
            items.append((d.get("name", os.path.basename(path)), d, tdir))
            files[items[-1][0]] = path
        else:
            print(f"skipping {path}: schema {d.get('schema')!r}", flush=True)
    failed = [k for k, v in doc["traces"].items() if "error" in v]
    for k, (name, trace, tdir) in enumerate(items):
        print(f"[{k + 1}/{len(items)}] {name}", flush=True)
        try:
            r = replay_one(name, trace, tdir, args)
        except Exception as e:
            traceback.print_exc()
            r = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"}
        doc["traces"][name] = r
        # golden_check_compile is information only: Inductor's fused float32 reductions legitimately
        # differ from the decomposed graph's by more than bf16 tolerances on cancelling sums
        bad = "error" in r or r.get("golden_check", "").startswith("fail")
        if bad:
            failed.append(name)
        line = f"  golden {r.get('golden_check', '-')}"
        if "golden_check_compile" in r:
            line += f" (compiled: {r['golden_check_compile'][:80]})"
        if "pytorch_ops" in r:
            po = r["pytorch_ops"]
            line += f", eager {po['median_us']:.1f} µs" if "median_us" in po else f", eager not timed: {po.get('error')}"
        if isinstance(r.get("torch_compile"), dict):
            tc = r["torch_compile"]
            line += f", compiled {tc['median_us']:.1f} µs" if "median_us" in tc else f", compile error {tc.get('error')}"
        if "error" in r:
            line = f"  ERROR {r['error']}"
        print(line[:600], flush=True)
        write()
        torch.cuda.empty_cache()
    write()
    print(f"\n{len(items) - len(failed)}/{len(items)} traces ok; wrote {args.out}", flush=True)
    if failed:
        print(f"failed: {failed}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
