"""Shared helpers of the capture tools (capture.py, opcorpus.py, torch_replay.py).

- the replay-trace/1 encoding of FX graphs (tensor metadata, arguments, nodes, outputs);
- the safetensors sidecar (written through safetensors.torch when it can, else by hand), and a
  reader with the same fallback;
- value statistics of a tensor (the "stats" of a trace input).

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


def encode_arg(a):
    """An FX argument as replay-trace/1 JSON: {"ref": node name} for a node, {"dtype": name} for a
    dtype, {"enum": str} for a device/layout/memory format, {"float": "inf"} for a non-finite
    float, lists as lists, other numbers, bools, None and strings as themselves."""
    if isinstance(a, torch.fx.Node):
        return {"ref": a.name}
    if isinstance(a, torch.dtype):
        return {"dtype": DTYPE_NAMES[a]}
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


def _val_meta(node):
    """Metadata of the value(s) a call_function node produces, from FX's meta['val']."""
    val = node.meta.get("val")
    if isinstance(val, (list, tuple)):
        metas = []
        for k, v in enumerate(val):
            if v is None:  # an output the op returns as None (a norm backward's output_mask)
                metas.append(None)
                continue
            if not isinstance(v, torch.Tensor):
                raise RuntimeError(f"node {node.name}: output {k} is {type(v).__name__}, not a tensor")
            metas.append(tensor_meta(v))
        return metas
    if isinstance(val, torch.Tensor):
        return [tensor_meta(val)]
    if node.op == "call_function" and op_name(node.target) == "getitem":  # no meta: take it from the source
        src, idx = node.args[0], node.args[1]
        sval = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
        if isinstance(sval, (list, tuple)) and isinstance(sval[idx], torch.Tensor):
            return [tensor_meta(sval[idx])]
    return []


def build_trace(gm, name, source, input_ids, input_metas, input_stats, input_extra=None, world_size=1):
    """Encode GraphModule `gm` as a replay-trace/1 object.

    input_ids: the wanted id of each placeholder, in order (an id that would collide with a node
    name keeps the placeholder's own FX name instead); input_metas / input_stats: per placeholder;
    input_extra: per placeholder, a dict of extra fields ("role", "from", ...) or None.

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
            trace["nodes"].append({"id": alias_id, "op": "aten.alias.default", "args": [{"ref": vid}],
                                   "kwargs": {}, "outputs": [dict(value_meta[vid])]})
            value_meta[alias_id] = value_meta[vid]
            vid = alias_id
            key = alias_id
        seen.add(key)
        trace["outputs"].append(vid)
        out_ids.append(vid)
    return trace, out_ids, ph_ids


def graph_to_trace(gm, inputs, input_names, name, source, world_size=1):
    """The forward-inference encoding (real input tensors, their metadata and stats)."""
    trace, _, _ = build_trace(gm, name, source, list(input_names), [tensor_meta(t) for t in inputs],
                              [value_stats(t) for t in inputs], world_size=world_size)
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
