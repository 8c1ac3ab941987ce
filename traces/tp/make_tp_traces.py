#!/usr/bin/env python3
"""Writes the hand-written per-rank tensor-parallel traces of this folder (no PyTorch needed).

Each is one rank of an SPMD program, as torch.compile captures torchtitan-style tensor
parallelism with PyTorch's functional collectives (traces/SCHEMA.md, "Collectives and ranks"):
  colwise: all_gather_into_tensor (dim 0) -> wait_tensor -> [view] -> mm -> [view]
  rowwise: [view] -> mm -> [view] -> reduce_scatter_tensor (sum, dim 0) -> wait_tensor
bfloat16, small shapes; the weight is column-major (w.t() of nn.Linear's [out, in]).
World size 1 (a group of one rank: the multi-process path with an NCCL communicator of one rank,
`replay launch --nproc 1 -- run traces/tp/ws1/...`) goes to ws1/.
Run: python3 traces/tp/make_tp_traces.py (rewrites the .json files beside it and in ws1/).
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def contiguous(shape):
    s, acc = [], 1
    for d in reversed(shape):
        s.insert(0, acc)
        acc *= d
    return s


def meta(shape, stride=None, dtype="bfloat16"):
    return {"shape": list(shape), "stride": stride or contiguous(shape), "dtype": dtype}


class Trace:
    def __init__(self, name, world_size, what):
        self.t = {
            "schema": "replay-trace/1",
            "name": name,
            "source": {
                "model": what,
                "phase": "fwd",
                "method": "hand-written by traces/tp/make_tp_traces.py (not captured): the "
                "nodes as torch.compile writes torchtitan-style tensor parallelism",
            },
            "world_size": world_size,
            "inputs": [],
            "nodes": [],
            "outputs": [],
            "output_roles": {},
        }
        self.ws = world_size

    def input(self, id, shape, role, stride=None, std=1.0):
        lim = 5 * std
        self.t["inputs"].append(dict(id=id, **meta(shape, stride),
                                     stats={"mean": 0, "std": std, "min": -lim, "max": lim},
                                     role=role))

    def node(self, id, op, args, out_shape):
        self.t["nodes"].append({"id": id, "op": op, "args": args, "kwargs": {},
                                "outputs": [meta(out_shape)]})

    def all_gather(self, id, x, out_shape):
        self.node(id, "_c10d_functional.all_gather_into_tensor.default",
                  [{"ref": x}, self.ws, "0"], out_shape)

    def reduce_scatter(self, id, x, out_shape):
        self.node(id, "_c10d_functional.reduce_scatter_tensor.default",
                  [{"ref": x}, "sum", self.ws, "0"], out_shape)

    def wait(self, id, x, out_shape):
        self.node(id, "_c10d_functional.wait_tensor.default", [{"ref": x}], out_shape)

    def mm(self, id, a, b, out_shape):
        self.node(id, "aten.mm.default", [{"ref": a}, {"ref": b}], out_shape)

    def view(self, id, x, shape):
        self.node(id, "aten.view.default", [{"ref": x}, list(shape)], shape)

    def write(self, out):
        self.t["outputs"] = [out]
        self.t["output_roles"] = {out: "output"}
        # world size 1 beside the others, in ws1/ (`replay run traces/tp` takes the per-rank ones);
        # the shapes of issue 29's goals (and of ../shared/peers/tp_anchor.py) in large/
        m, k, n = (int(d) for d in self.t["name"].rsplit("_", 1)[1].split("x")[-3:])
        if self.ws == 1:
            folder = os.path.join(HERE, "ws1")
        elif m * k * n >= 1 << 32:
            folder = os.path.join(HERE, "large")
        else:
            folder = HERE
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, self.t["name"] + ".json"), "w") as f:
            json.dump(self.t, f, indent=1)
            f.write("\n")


def colwise(ws, m, k, n):
    """x [m/ws, k] sequence-sharded, all-gathered to [m, k], @ w [k, n/ws] -> [m, n/ws]."""
    name = f"tp_colwise_ag_mm_bf16_ws{ws}_{m}x{k}x{n}"
    t = Trace(name, ws, f"column-parallel linear, rank of {ws}: all_gather (dim 0) -> wait -> mm; "
              f"x [{m}, {k}] sharded by rows, weight [{n}, {k}] sharded by output features")
    t.input("x", [m // ws, k], "activation")
    t.input("w", [k, n // ws], "param", stride=[1, k], std=0.1)
    t.all_gather("all_gather", "x", [m, k])
    t.wait("wait", "all_gather", [m, k])
    t.mm("mm", "wait", "w", [m, n // ws])
    t.write("mm")


def rowwise(ws, m, k, n):
    """x [m, k/ws] @ w [k/ws, n] -> partial [m, n], reduce-scattered to [m/ws, n]."""
    name = f"tp_rowwise_mm_rs_bf16_ws{ws}_{m}x{k}x{n}"
    t = Trace(name, ws, f"row-parallel linear, rank of {ws}: mm -> reduce_scatter (sum, dim 0) -> "
              f"wait; x [{m}, {k}] sharded by input features, weight [{n}, {k}] likewise")
    t.input("x", [m, k // ws], "activation")
    t.input("w", [k // ws, n], "param", stride=[1, k // ws], std=0.1)
    t.mm("mm", "x", "w", [m, n])
    t.reduce_scatter("reduce_scatter", "mm", [m // ws, n])
    t.wait("wait", "reduce_scatter", [m // ws, n])
    t.write("wait")


def colwise_3d(ws, b, s, k, n):
    """x [b/ws, s, k] gathered on dim 0 to [b, s, k], viewed [b*s, k] @ w -> [b, s, n/ws]."""
    name = f"tp_colwise_ag_mm_3d_bf16_ws{ws}_{b}x{s}x{k}x{n}"
    t = Trace(name, ws, f"column-parallel linear on a 3-D activation, rank of {ws}: all_gather "
              f"(dim 0) -> wait -> view -> mm -> view; x [{b}, {s}, {k}], weight [{n}, {k}]")
    t.input("x", [b // ws, s, k], "activation")
    t.input("w", [k, n // ws], "param", stride=[1, k], std=0.1)
    t.all_gather("all_gather", "x", [b, s, k])
    t.wait("wait", "all_gather", [b, s, k])
    t.view("view", "wait", [b * s, k])
    t.mm("mm", "view", "w", [b * s, n // ws])
    t.view("view_1", "mm", [b, s, n // ws])
    t.write("view_1")


def rowwise_3d(ws, b, s, k, n):
    """x [b, s, k/ws] viewed [b*s, k/ws] @ w -> [b, s, n], reduce-scattered to [b/ws, s, n]."""
    name = f"tp_rowwise_mm_rs_3d_bf16_ws{ws}_{b}x{s}x{k}x{n}"
    t = Trace(name, ws, f"row-parallel linear on a 3-D activation, rank of {ws}: view -> mm -> "
              f"view -> reduce_scatter (sum, dim 0) -> wait; x [{b}, {s}, {k}], weight [{n}, {k}]")
    t.input("x", [b, s, k // ws], "activation")
    t.input("w", [k // ws, n], "param", stride=[1, k // ws], std=0.1)
    t.view("view", "x", [b * s, k // ws])
    t.mm("mm", "view", "w", [b * s, n])
    t.view("view_1", "mm", [b, s, n])
    t.reduce_scatter("reduce_scatter", "view_1", [b // ws, s, n])
    t.wait("wait", "reduce_scatter", [b // ws, s, n])
    t.write("wait")


if __name__ == "__main__":
    # world size 1: a group of one rank, for the multi-process path on one GPU (an NCCL
    # communicator of one rank: `replay launch --nproc 1 -- run ...`)
    colwise(1, 16, 32, 24)
    rowwise(1, 16, 32, 24)
    colwise(2, 16, 32, 24)
    colwise(4, 16, 32, 24)
    rowwise(2, 16, 32, 24)
    rowwise(4, 16, 32, 24)
    colwise_3d(4, 4, 3, 32, 16)
    rowwise_3d(2, 4, 3, 32, 16)
    # The shapes PyTorch's fused ops were measured at (../shared/peers/tp_anchor.py, PEERS.md):
    # Llama-3-8B's FFN up projection and a square 8192 one, at world sizes 2, 4 and 8. Replay
    # them one process per GPU; their float64 reference takes minutes (--reference-budget 0).
    for ws in (2, 4, 8):
        for m, k, n in ((16384, 4096, 14336), (8192, 8192, 7168)):
            colwise(ws, m, k, n)
            rowwise(ws, m, k, n)
