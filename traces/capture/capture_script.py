#!/usr/bin/env python3
"""Run an unchanged training script with its torch.compile graphs captured as replay traces.

    python3 traces/capture/capture_script.py --out DIR [--partitioner min_cut|default] [--golden]
        [--module-filter REGEX] [--compile-modules CLASS,...] [--prefix NAME] -- script.py args...

How: before the script runs (as __main__, through runpy, with sys.argv = [script.py, args...]),
`torch.compile` is replaced by a wrapper that calls the real torch.compile with
backend=<the replay backend> (backend.py) and dynamic=False, whatever backend/mode/options the
script asked for (those are Inductor's; the replay backend runs the captured graphs as they are,
without Inductor's code generation, so the script computes the same values, slower).
`nn.Module.compile()` goes through torch.compile too. Each compiled module's graphs are named
`<prefix>_<ModuleClass>_g<k>_{fwd,bwd}` (k counts that module's graphs: graph breaks and
recompiles give more).

Scripts that do not call torch.compile: --compile-modules LlamaDecoderLayer,MyNorm compiles every
module of those classes (by class name) the first time it is called, through nn.Module.compile()
with the replay backend, so its graphs are captured too. A module inside a module that is
already being compiled is left to the outer compile.

--module-filter REGEX: only graphs whose module class or path matches are written (the others
still run, uncaptured). Traces are written as soon as a graph's backward first ran (inference
graphs: their first run); at exit the forwards whose backward never ran are written on their own.
Exit status: the script's (a SystemExit code), else 1 if a capture failed, else 0.
"""
import argparse
import os
import runpy
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _target_name(obj):
    """The class name of the module torch.compile got (a module, a module's bound method such as
    _call_impl or forward, or a function's name)."""
    import torch.nn as nn
    if isinstance(obj, nn.Module):
        return type(obj).__name__
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, nn.Module):
        return type(owner).__name__
    return getattr(obj, "__name__", None) or type(obj).__name__


def install(rb, compile_modules=()):
    """Route torch.compile (and nn.Module.compile) to the replay backend rb; with compile_modules,
    also compile modules of those class names on their first call. Returns an undo function."""
    import torch
    import torch.nn as nn

    real_compile = torch.compile
    dropped = set()

    def replay_compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,
                       disable=False, **kwargs):
        if model is None:  # used as @torch.compile(...) with arguments
            def deco(fn):
                return replay_compile(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                      options=options, disable=disable, **kwargs)
            return deco
        asked = {k: v for k, v in (("backend", backend if backend != "inductor" else None), ("mode", mode),
                                   ("options", options), ("dynamic", dynamic)) if v is not None}
        key = tuple(sorted((k, repr(v)) for k, v in asked.items()))
        if asked and key not in dropped:
            dropped.add(key)
            print(f"capture_script: torch.compile({_target_name(model)}, {asked}): using the replay backend, "
                  "dynamic=False instead", flush=True)
        return real_compile(model, fullgraph=fullgraph, dynamic=False, backend=rb.for_module(_target_name(model)),
                            disable=disable, **kwargs)

    torch.compile = replay_compile
    undo = [lambda: setattr(torch, "compile", real_compile)]

    names = {c.strip() for c in compile_modules if c.strip()}
    if names:
        real_call = nn.Module.__call__
        seen = set()

        def call(self, *args, **kwargs):
            if type(self).__name__ in names and getattr(self, "_compiled_call_impl", None) is None \
                    and not torch.compiler.is_compiling() and id(self) not in seen:
                seen.add(id(self))  # what nn.Module.compile() does, with the replay backend
                self._compiled_call_impl = real_compile(self._call_impl, backend=rb.for_module(type(self).__name__),
                                                        dynamic=False)
            return real_call(self, *args, **kwargs)

        nn.Module.__call__ = call
        undo.append(lambda: setattr(nn.Module, "__call__", real_call))

    def restore():
        for u in reversed(undo):
            u()
    return restore


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        i = argv.index("--")
        ours, script_argv = argv[:i], argv[i + 1:]
    else:
        ours, script_argv = argv, []
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for the traces")
    ap.add_argument("--partitioner", choices=["min_cut", "default"], default="min_cut")
    ap.add_argument("--golden", action="store_true", help="write the graphs' tensors (small shapes only)")
    ap.add_argument("--module-filter", help="regex on module class/path: only matching graphs are written")
    ap.add_argument("--compile-modules", default="", help="comma-separated class names to compile (and capture) "
                    "when the script does not call torch.compile itself")
    ap.add_argument("--prefix", default=None, help="name prefix (default: the script's file name)")
    args = ap.parse_args(ours)
    if not script_argv:
        ap.error("give the script after '--': capture_script.py --out DIR -- script.py args...")
    script = script_argv[0]
    if not os.path.isfile(script):
        ap.error(f"{script}: no such file")

    from backend import ReplayBackend
    prefix = args.prefix if args.prefix is not None else os.path.splitext(os.path.basename(script))[0]
    rb = ReplayBackend(args.out, partitioner=args.partitioner, golden=args.golden, name_prefix=prefix,
                       module_filter=args.module_filter,
                       source={"script": " ".join(script_argv),
                               "capture_command": " ".join(["python3", "traces/capture/capture_script.py"] + argv)})
    restore = install(rb, args.compile_modules.split(","))
    sys.argv = list(script_argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        restore()
        rb.flush()
        print(rb.summary(), flush=True)
    if code == 0 and rb.failed:
        code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
