"""Shared helpers of the capture tools (capture.py, opcorpus.py, torch_replay.py).

- the replay-trace/1 encoding of FX graphs (tensor metadata, arguments, nodes, outputs);
- the safetensors sidecar (written through safetensors.torch when it can, else by hand), and a
  reader with the same fallback;
- value statistics of a tensor (the "stats" of a trace input and, through NodeStats, of every
  node output).

The format is documented in traces/SCHEMA.md.
"""
import json
import math

import torch

SCHEMA = "replay-trace/1"
OPCORPUS_SCHEMA = "replay-opcorpus/1"

DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.bool: "bool",
    torch.float8_e4m3fn: "float8_e4m3fn",
    torch.float8_e5m2: "float8_e5m2",
}
NAME_TO_DTYPE = {v: k for k, v in DTYPE_NAMES.items()}
FLOAT8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


# --- tensor metadata and arguments ------------------------------------------------------------------


def tensor_meta(val):
    """{"shape", "stride", "dtype"} of a tensor (real or fake), plus "storage_offset" when it is
    nonzero (views into another tensor's storage)."""
    if val.dtype not in DTYPE_NAMES:
        raise TypeError(f"dtype {val.dtype} is not one the replay format has (shape {list(val.shape)})")
    m = {"shape": [int(d) for d in val.shape], "stride": [int(s) for s in val.stride()],
         "dtype": DTYPE_NAMES[val.dtype]}
    try:
        off = int(val.storage_offset())
    except Exception:  # a tensor without storage: nothing to say
        off = 0
    if off:
        m["storage_offset"] = off
    return m


def meta_or_opaque(val):
    """tensor_meta of a tensor of a dtype the format has; else {"opaque": "torch.complex64[8, 8]"}
    (a complex RoPE table, a uint8 mask, flash attention's uint64 RNG state): the loader keeps such
    a value out of the graph and cuts the nodes that read it (traces/SCHEMA.md, "Cut nodes")."""
    return tensor_meta(val) if val.dtype in DTYPE_NAMES else _opaque(val)


def encode_arg(a):
    """An FX argument as replay-trace/1 JSON: {"ref": node name} for a node, {"dtype": name} for a
    dtype, {"enum": str} for a device/layout/memory format, {"float": "inf"} for a non-finite
    float, lists as lists, other numbers, bools, None and strings as themselves."""
    if isinstance(a, torch.fx.Node):
        return {"ref": a.name}
    if isinstance(a, torch.dtype):  # one the format lacks keeps its PyTorch name (a cut node's argument)
        return {"dtype": DTYPE_NAMES.get(a, str(a).replace("torch.", ""))}
    if isinstance(a, (list, tuple)):
        return [encode_arg(x) for x in a]
    if isinstance(a, bool) or a is None or isinstance(a, int):
        return a
    if isinstance(a, float):
        if math.isinf(a) or math.isnan(a):
            return {"float": repr(a)}
        return a
    if isinstance(a, (torch.device, torch.memory_format, torch.layout)):
        return {"enum": str(a)}
    if isinstance(a, str):  # e.g. rounding_mode="floor", approximate="tanh"
        return a
    raise TypeError(f"cannot encode argument {a!r} of type {type(a)}")


def op_name(target):
    if getattr(target, "__module__", None) == "_operator" and getattr(target, "__name__", "") == "getitem":
        return "getitem"
    return str(target)  # e.g. aten.var_mean.correction, prims.convert_element_type.default


def value_stats(t):
    """mean, std, min, max of the values (float64), over the finite values only (so that the JSON
    stays finite); all zero for an empty tensor or one without finite values."""
    f = t.detach()
    if f.dtype in FLOAT8_DTYPES or f.dtype == torch.bool:
        f = f.float()
    f = f.double()
    if f.numel() > 0 and not bool(torch.isfinite(f).all()):
        f = f[torch.isfinite(f)]
    if f.numel() == 0:
        return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0}
    return {
        "mean": f.mean().item(),
        "std": f.std(unbiased=False).item() if f.numel() > 1 else 0.0,
        "min": f.min().item(),
        "max": f.max().item(),
    }


# --- FX graph -> replay-trace/1 -----------------------------------------------------------------------


def placeholders(gm):
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def output_args(gm):
    """The list the graph returns (FX keeps it as the output node's first argument)."""
    for n in gm.graph.nodes:
        if n.op == "output":
            outs = n.args[0]
            if isinstance(outs, (list, tuple)):
                return list(outs)
            return [outs]
    raise RuntimeError("graph has no output node")


def _opaque(v):
    """{"opaque": what it was} for a result that is no tensor the format holds: None, an int (flash
    attention's max_q), a tensor of a dtype the format lacks (its uint64 RNG state). The loader
    rejects it on an op the harness runs, and on a cut node's output that the graph reads
    (traces/SCHEMA.md, "Cut nodes")."""
    if isinstance(v, torch.Tensor):
        return {"opaque": f"{v.dtype}{list(v.shape)}"}
    return {"opaque": "None" if v is None else type(v).__name__}


def _val_meta(node):
    """Metadata of the value(s) a call_function node produces, from FX's meta['val']."""
    val = node.meta.get("val")
    if isinstance(val, (list, tuple)):
        # None (a norm backward's output_mask) is recorded as null; any other result the format
        # cannot hold (an int, a uint64 RNG state) as {"opaque": ...}.
        return [None if v is None else
                tensor_meta(v) if isinstance(v, torch.Tensor) and v.dtype in DTYPE_NAMES else _opaque(v)
                for v in val]
    if isinstance(val, torch.Tensor):
        return [tensor_meta(val) if val.dtype in DTYPE_NAMES else _opaque(val)]
    if node.op == "call_function" and op_name(node.target) == "getitem":  # no meta: take it from the source
        src, idx = node.args[0], node.args[1]
        sval = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
        if isinstance(sval, (list, tuple)) and isinstance(sval[idx], torch.Tensor):
            return [tensor_meta(sval[idx])]
    return []


class NodeStats(torch.fx.Interpreter):
    """Runs a GraphModule node by node, as its own forward does, and keeps value_stats of every
    call_function result that is a tensor of a dtype the format has (per output for a tuple):
    `stats[node name]` = [stats or None per output]. build_trace writes them on the nodes'
    outputs, so that a node the harness cannot run can be cut out of the graph with its outputs
    drawn from what PyTorch computed (traces/SCHEMA.md, "Cut nodes")."""

    def __init__(self, gm):
        super().__init__(gm)
        self.stats = {}

    def run_node(self, n):
        r = super().run_node(n)
        if n.op == "call_function":
            vals = r if isinstance(r, (list, tuple)) else [r]
            self.stats[n.name] = [value_stats(v) if isinstance(v, torch.Tensor) and v.dtype in DTYPE_NAMES
                                  else None for v in vals]
        return r


def node_output_stats(gm, args):
    """(results, stats) of running `gm` on `args` through NodeStats: what gm(*args) returns, and
    the stats of every node's outputs."""
    rec = NodeStats(gm)
    with torch.no_grad():
        out = rec.run(*args)
    return out, rec.stats


def build_trace(gm, name, source, input_ids, input_metas, input_stats, input_extra=None, world_size=1,
                node_stats=None):
    """Encode GraphModule `gm` as a replay-trace/1 object.

    input_ids: the wanted id of each placeholder, in order (an id that would collide with a node
    name keeps the placeholder's own FX name instead); input_metas / input_stats: per placeholder;
    input_extra: per placeholder, a dict of extra fields ("role", "from", ...) or None;
    node_stats: {node name: [stats or None per output]} (node_output_stats), written as "stats" on
    the nodes' outputs, or None.

    Returns (trace, out_ids, ph_ids): out_ids[i] is the trace value id of the graph's i-th output
    (None where the graph returns None); ph_ids[i] the id given to placeholder i. A value the graph
    returns twice gets an aten.alias.default node for its second occurrence (the loader rejects a
    value listed twice among the outputs), so out_ids are distinct.
    """
    phs = placeholders(gm)
    if len(phs) != len(input_ids):
        raise RuntimeError(f"{name}: graph has {len(phs)} placeholders, {len(input_ids)} input ids given")
    node_names = {n.name for n in gm.graph.nodes if n.op != "placeholder"}
    rename, taken = {}, set()
    ph_ids = []
    for p, want in zip(phs, input_ids):
        iid = want if want not in node_names and want not in taken else p.name
        k = 1
        while iid in node_names or iid in taken:
            iid = f"{p.name}_in{k}"
            k += 1
        if iid != want:
            print(f"  note: {name}: input '{want}' is named '{iid}' (the name is taken by a node)", flush=True)
        rename[p.name] = iid
        taken.add(iid)
        ph_ids.append(iid)

    def fix(enc):
        if isinstance(enc, dict) and "ref" in enc:
            return {"ref": rename.get(enc["ref"], enc["ref"])}
        if isinstance(enc, list):
            return [fix(e) for e in enc]
        return enc

    trace = {
        "schema": SCHEMA,
        "name": name,
        "source": source,
        "world_size": world_size,
        "inputs": [],
        "nodes": [],
        "outputs": [],
    }
    value_meta = {}
    for i, (iid, meta, stats) in enumerate(zip(ph_ids, input_metas, input_stats)):
        entry = {"id": iid, **meta}
        if stats is not None:
            entry["stats"] = stats
        if input_extra is not None and input_extra[i]:
            entry.update(input_extra[i])
        trace["inputs"].append(entry)
        value_meta[iid] = meta
    getitem_src = {}
    for n in gm.graph.nodes:
        if n.op == "call_function":
            outs = _val_meta(n)
            for k, st in enumerate((node_stats or {}).get(n.name, [])):
                if st is not None and k < len(outs) and "shape" in outs[k]:
                    outs[k]["stats"] = st
            opn = op_name(n.target)
            trace["nodes"].append({
                "id": n.name,
                "op": opn,
                "args": fix([encode_arg(a) for a in n.args]),
                "kwargs": {k: fix(encode_arg(v)) for k, v in n.kwargs.items()},
                "outputs": outs,
            })
            if len(outs) == 1:
                value_meta[n.name] = outs[0]
            if opn == "getitem" and isinstance(n.args[0], torch.fx.Node):
                getitem_src[n.name] = (n.args[0].name, n.args[1])
        elif n.op not in ("placeholder", "output"):
            raise RuntimeError(f"unsupported FX node kind {n.op} ({n.name})")

    out_ids, seen = [], set()
    taken_ids = set(node_names) | set(ph_ids)
    for pos, o in enumerate(output_args(gm)):
        if o is None:
            out_ids.append(None)
            continue
        if not isinstance(o, torch.fx.Node):
            raise RuntimeError(f"{name}: graph output {pos} is {o!r}, not a tensor node")
        vid = rename.get(o.name, o.name)
        key = getitem_src.get(vid, vid)
        if key in seen:  # returned twice: a distinct alias for this occurrence
            alias_id = f"{vid}_out{pos}"
            while alias_id in taken_ids:
                alias_id += "_"
            taken_ids.add(alias_id)
            if vid not in value_meta:
                raise RuntimeError(f"{name}: no metadata for duplicated output '{vid}'")
            alias_meta = {k: v for k, v in value_meta[vid].items() if k != "stats"}
            trace["nodes"].append({"id": alias_id, "op": "aten.alias.default", "args": [{"ref": vid}],
                                   "kwargs": {}, "outputs": [alias_meta]})
            value_meta[alias_id] = value_meta[vid]
            vid = alias_id
            key = alias_id
        seen.add(key)
        trace["outputs"].append(vid)
        out_ids.append(vid)
    return trace, out_ids, ph_ids


def graph_to_trace(gm, inputs, input_names, name, source, world_size=1, node_stats=None):
    """The forward-inference encoding (real input tensors, their metadata and stats; node_stats as
    build_trace takes it)."""
    trace, _, _ = build_trace(gm, name, source, list(input_names), [meta_or_opaque(t) for t in inputs],
                              [value_stats(t) if t.dtype in DTYPE_NAMES else None for t in inputs],
                              world_size=world_size, node_stats=node_stats)
    return trace


def _finite_json(obj):
    """Replace non-finite floats (which JSON cannot hold) by {"float": "..."}."""
    if isinstance(obj, float) and (math.isinf(obj) or math.isnan(obj)):
        return {"float": repr(obj)}
    if isinstance(obj, dict):
        return {k: _finite_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite_json(v) for v in obj]
    return obj


def write_json(path, obj, indent=1):
    try:
        text = json.dumps(obj, indent=indent, allow_nan=False)
    except ValueError:
        print(f"  warning: {path}: non-finite floats replaced by {{\"float\": ...}}", flush=True)
        text = json.dumps(_finite_json(obj), indent=indent, allow_nan=False)
    with open(path, "w") as f:
        f.write(text)


# --- safetensors sidecar --------------------------------------------------------------------------

ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
             torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL",
             torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2", torch.uint8: "U8"}
ST_NAME_TO_DTYPE = {v: k for k, v in ST_DTYPES.items()}


def _tensor_bytes(v):
    flat = v.reshape(-1)
    if flat.numel() == 0:
        return b""
    u8 = flat.view(torch.uint8)  # same-size or byte view of a 1-D contiguous tensor
    try:
        return u8.numpy().tobytes()
    except Exception:  # no numpy
        return bytes(u8.tolist())


def _write_safetensors_by_hand(path, tensors):
    header, blobs, off = {}, [], 0
    for k, v in tensors.items():
        b = _tensor_bytes(v)
        header[k] = {"dtype": ST_DTYPES[v.dtype], "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_safetensors(path, tensors):
    """Write {key: tensor} as safetensors, each tensor contiguous on the CPU (its logical values).
    safetensors.torch first; if it is missing or refuses (an old version without float8), by hand
    (float8 stored as its bytes under "F8_E4M3"/"F8_E5M2")."""
    cpu = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    try:
        from safetensors.torch import save_file
        save_file(cpu, path)
        return
    except ImportError:
        pass
    except Exception as e:  # e.g. an old safetensors without float8
        print(f"  note: safetensors.torch.save_file failed ({e}); writing {path} directly", flush=True)
    _write_safetensors_by_hand(path, {k: v.clone() for k, v in cpu.items()})


def read_safetensors(path):
    """{key: CPU tensor}; safetensors.torch when it can read the file, else a direct reader."""
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except Exception:
        pass
    return _read_safetensors_by_hand(path)


def _read_safetensors_by_hand(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, info in header.items():
        if k == "__metadata__":
            continue
        dt = ST_NAME_TO_DTYPE[info["dtype"]]
        a, b = info["data_offsets"]
        raw = bytearray(data[a:b])
        u8 = torch.frombuffer(raw, dtype=torch.uint8) if len(raw) else torch.empty(0, dtype=torch.uint8)
        out[k] = u8.view(dt).reshape(info["shape"])
    return out


# --- training steps: recorded calls of a forward/backward graph pair -> two traces ----------------------


def is_tensor_val(node):
    """Whether an FX node's meta['val'] is one tensor."""
    return isinstance(node.meta.get("val"), torch.Tensor)


def tensor_key(t):
    """What identifies a tensor's data: storage, offset, shape, strides, dtype."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except Exception:
        ptr = t.data_ptr()
    return (ptr, int(t.storage_offset()), tuple(t.shape), tuple(t.stride()), t.dtype)


class Snap:
    """One argument or result of a compiled graph as it ran: identity, metadata, statistics and
    (keep=True, for golden captures) a copy of the values."""

    def __init__(self, t, keep):
        self.is_tensor = isinstance(t, torch.Tensor)
        self.raw = None if self.is_tensor else t
        self.key = self.meta = self.stats = self.value = None
        if self.is_tensor:
            t = t.detach()
            self.key = tensor_key(t)
            if t.dtype not in DTYPE_NAMES:  # e.g. flash attention's uint64 RNG state: no metadata
                self.raw = f"{t.dtype}{list(t.shape)}"
                return
            self.meta = tensor_meta(t)
            self.stats = value_stats(t)
            self.value = t.clone() if keep else None


def compare_tensors(what, got, exp):
    """Loose bf16-level comparison of a captured graph's result with eager autograd's. Returns
    (ok, message)."""
    if got is None and exp is None:
        return True, f"{what}: none (no gradient)"
    if got is None or exp is None:
        return False, f"{what}: {'missing' if got is None else 'unexpected'} (eager {'has' if exp is not None else 'has none'})"
    if got.shape != exp.shape or got.dtype != exp.dtype:
        return False, f"{what}: {got.dtype}{list(got.shape)} vs eager {exp.dtype}{list(exp.shape)}"
    if not got.is_floating_point():
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


def training_traces(fw_gm, bw_gm, fw_args, fw_results, bw_args, bw_results, fwd_name, bwd_name, input_ids,
                    fw_extra, fwd_source, bwd_source, notes=None, golden=False, log=print, fw_node_stats=None,
                    bw_node_stats=None):
    """The forward and backward traces of one training step, from aot_autograd's two GraphModules
    and Snaps of what PyTorch passed to and got from them (one call each, the backward's call being
    the backward of that forward call).

    input_ids: wanted ids of the forward's placeholders; fw_extra: per forward placeholder, the
    extra input fields ({"role", "requires_grad"}) or None. The forward's outputs get
    output_roles "output"/"saved"; the backward's inputs role "saved" (with "from" where the
    pairing is established on the tensors) or "tangent"; its outputs "grad" and grad_of.
    aot_autograd's forward returns (user outputs, saved tensors, saved symints) and the backward
    takes (saved symints, saved tensors, tangents); each pairing is checked on the tensors.

    fw_node_stats / bw_node_stats: node_output_stats' stats of the two calls (written on the nodes'
    outputs, for cut nodes), or None.

    Returns (fwd, bwd, goldens): goldens maps a trace name to {value id: tensor} (empty unless
    golden, which needs Snaps made with keep=True). Raises RuntimeError where the graphs and the
    recorded calls do not fit together.
    """
    notes = list(notes or [])
    fw_ph, bw_ph = placeholders(fw_gm), placeholders(bw_gm)
    fw_outs, bw_outs = output_args(fw_gm), output_args(bw_gm)
    if len(fw_args) != len(fw_ph) or len(bw_args) != len(bw_ph):
        raise RuntimeError("the compiled graphs were called with a different number of arguments than they have "
                           f"placeholders (fw {len(fw_args)}/{len(fw_ph)}, bw {len(bw_args)}/{len(bw_ph)})")
    if len(input_ids) != len(fw_ph):
        raise RuntimeError(f"forward graph has {len(fw_ph)} inputs, {len(input_ids)} input ids given")
    if any(not s.is_tensor for s in bw_args):
        raise RuntimeError("the backward graph takes non-tensor inputs (symbolic sizes?): "
                           + str([s.raw for s in bw_args if not s.is_tensor]))
    if any(not s.is_tensor for s in fw_args):
        raise RuntimeError("the forward graph takes non-tensor inputs (symbolic sizes?): "
                           + str([s.raw for s in fw_args if not s.is_tensor]))
    # A graph input of a dtype the format lacks (a complex64 RoPE table, flash attention's uint64 RNG
    # state saved for the backward) is written {"opaque": ...}: the loader cuts the nodes reading it.
    for what, ph, snaps in (("forward", fw_ph, fw_args), ("backward", bw_ph, bw_args)):
        for p, s in zip(ph, snaps):
            if s.meta is None:
                notes.append(f"{what} graph input {p.name} is {s.raw}, a dtype the replay format does not have "
                             "(written opaque: the nodes reading it are cut)")

    is_tangent = ["tangents" in p.name for p in bw_ph]
    saved_pos = [i for i, t in enumerate(is_tangent) if not t]
    saved_tensor_pos = [i for i in saved_pos if is_tensor_val(bw_ph[i]) or bw_args[i].is_tensor]
    n_sym = len(saved_pos) - len(saved_tensor_pos)
    n_user = len(fw_outs) - len(saved_tensor_pos) - n_sym
    if n_user < 0:
        notes.append(f"could not split the forward outputs (n_user {n_user}); 'from' by tensor identity only")
    fw_keys = [s.key if s.is_tensor else None for s in fw_results]
    from_pos = {}  # backward placeholder index -> forward output position
    for j, bi in enumerate(saved_tensor_pos):
        want = bw_args[bi].key
        cand = [p for p, k in enumerate(fw_keys) if k == want]
        guess = n_user + j if n_user >= 0 else None
        if guess is not None and guess in cand:
            from_pos[bi] = guess
        elif len(cand) == 1:
            from_pos[bi] = cand[0]
            notes.append(f"saved input {bw_ph[bi].name}: forward output {cand[0]} by identity (position guess {guess})")
        elif golden and guess is not None and 0 <= guess < len(fw_results) and fw_results[guess].is_tensor \
                and fw_results[guess].value is not None and bw_args[bi].value is not None \
                and fw_results[guess].meta == bw_args[bi].meta \
                and torch.equal(fw_results[guess].value, bw_args[bi].value):
            from_pos[bi] = guess
            notes.append(f"saved input {bw_ph[bi].name}: forward output {guess} by position and equal values")
        else:
            notes.append(f"saved input {bw_ph[bi].name}: no forward output identified "
                         f"({len(cand)} candidates by identity); 'from' omitted")
            log(f"  warning: {bwd_name}: saved input {bw_ph[bi].name}: forward output not identified")

    # the forward trace
    fsrc = dict(fwd_source)
    fsrc["backward_trace"] = bwd_name
    fw_metas = [meta_or_opaque(p.meta["val"]) if is_tensor_val(p) else (s.meta or {"opaque": s.raw}) for p, s in zip(fw_ph, fw_args)]
    fwd, fw_out_ids, fw_ph_ids = build_trace(fw_gm, fwd_name, fsrc, list(input_ids), fw_metas,
                                             [s.stats for s in fw_args], fw_extra, node_stats=fw_node_stats)
    roles = {}
    saved_fw_pos = set(from_pos.values())
    for pos, oid in enumerate(fw_out_ids):
        if oid is None:
            continue
        roles[oid] = "saved" if (pos in saved_fw_pos or (n_user >= 0 and pos >= n_user)) else "output"
    fwd["output_roles"] = roles

    # the backward trace: saved primals keep the forward input's id, other saved tensors the forward
    # node's name, tangents tangents_<k>
    fw_ph_to_id = {p.name: iid for p, iid in zip(fw_ph, fw_ph_ids)}
    bw_ids = [fw_ph_to_id.get(p.name, p.name) if not is_tangent[i] else p.name for i, p in enumerate(bw_ph)]
    bw_metas = [meta_or_opaque(p.meta["val"]) if is_tensor_val(p) else (s.meta or {"opaque": s.raw}) for p, s in zip(bw_ph, bw_args)]
    for i, (p, s) in enumerate(zip(bw_ph, bw_args)):
        traced = bw_metas[i]
        if s.meta is None or "shape" not in traced:  # a dtype the format lacks: written opaque
            continue
        if traced["shape"] != s.meta["shape"] or traced["dtype"] != s.meta["dtype"]:
            log(f"  warning: {bwd_name}: input {p.name}: traced as {traced}, called with {s.meta}")
            notes.append(f"input {p.name}: traced as {traced}, PyTorch passed {s.meta}")
        elif traced.get("stride") != s.meta.get("stride"):
            notes.append(f"input {p.name}: traced strides {traced.get('stride')}, PyTorch passed "
                         f"{s.meta.get('stride')} (the trace keeps the traced ones)")
    bw_extra = []
    first_of_key = {}  # storage key -> the first saved input PyTorch passed that tensor as
    for i in range(len(bw_ph)):
        if is_tangent[i]:
            bw_extra.append({"role": "tangent"})
        else:
            e = {"role": "saved"}
            if i in from_pos and fw_out_ids[from_pos[i]] is not None:
                e["from"] = {"trace": fwd_name, "output": fw_out_ids[from_pos[i]]}
            key = bw_args[i].key if bw_args[i].is_tensor else None
            if key is not None and key in first_of_key:  # the same tensor twice (rsqrt, alias(rsqrt))
                e["same_as"] = bw_ids[first_of_key[key]]
            elif key is not None:
                first_of_key[key] = i
            bw_extra.append(e)
    bsrc = dict(bwd_source)
    bsrc["forward_trace"] = fwd_name
    bwd, bw_out_ids, bw_ph_ids = build_trace(bw_gm, bwd_name, bsrc, bw_ids, bw_metas,
                                             [s.stats for s in bw_args], bw_extra, node_stats=bw_node_stats)
    bwd["output_roles"] = {oid: "grad" for oid in bw_out_ids if oid is not None}
    if len(bw_outs) == len(fw_ph):  # one gradient per forward input, None where none
        bwd["grad_of"] = {oid: {"trace": fwd_name, "input": fw_ph_ids[i]}
                          for i, oid in enumerate(bw_out_ids) if oid is not None}
        for i, oid in enumerate(bw_out_ids):
            if oid is not None and bw_results[i].meta is not None and "shape" in fw_metas[i] \
                    and bw_results[i].meta["shape"] != fw_metas[i]["shape"]:
                log(f"  warning: {bwd_name}: gradient {oid} has shape {bw_results[i].meta['shape']}, "
                    f"input {fw_ph_ids[i]} {fw_metas[i]['shape']}")
    else:
        notes.append(f"backward returns {len(bw_outs)} values for {len(fw_ph)} forward inputs: grad_of omitted")
    # Saved inputs equal by construction (the same value computed twice) or widened copies of
    # another: derived from the forward trace (mark_same_as.py; traces/SCHEMA.md).
    from mark_same_as import mark as mark_equal_inputs
    marked = mark_equal_inputs(bwd, fwd)
    if marked:
        notes.append("same_as/widened_from derived from the forward for " + ", ".join(marked))
    if notes:
        fwd["source"]["notes"] = list(notes)
        bwd["source"]["notes"] = list(notes)

    goldens = {}
    if golden:
        for trace, ids, arg_snaps, out_ids, res_snaps in (
                (fwd, fw_ph_ids, fw_args, fw_out_ids, fw_results),
                (bwd, bw_ph_ids, bw_args, bw_out_ids, bw_results)):
            st = {}
            for iid, s in zip(ids, arg_snaps):
                if s.value is not None:  # none for a dtype the format lacks
                    st[iid] = s.value
            for oid, s in zip(out_ids, res_snaps):
                if oid is not None and s.value is not None and oid not in st:
                    st[oid] = s.value
            goldens[trace["name"]] = st
    return fwd, bwd, goldens


def attach_golden(trace, tensors, out_dir, note):
    """Write {value id: tensor} as <out_dir>/<trace name>.safetensors and point trace["golden"] at it."""
    import os
    fname = trace["name"] + ".safetensors"
    write_safetensors(os.path.join(out_dir, fname), tensors)
    trace["golden"] = {"file": fname, "tensors": sorted(tensors.keys()), "note": note}


def ops_summary(trace):
    return sorted(set(n["op"] for n in trace["nodes"]))
