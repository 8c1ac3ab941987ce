"""The capture loop the catalogue scripts share (capture_hf_linears.py, capture_hf_rope.py): each
job builds its module and captures one training step through backend.capture_module_step; a
failing job is reported and the others go on. No torch import here (the callers pass what needs
it), so the loop's bookkeeping can be checked without PyTorch.
"""
import sys
import time
import traceback


def run_capture_jobs(jobs, out_dir, script, seed, capture, empty_cache=None, max_msg=600):
    """Capture every job; returns the exit status (1 if any failed or mismatched eager).

    jobs: (base, partitioner, golden, build) with base the trace name format ("..._{phase}_..."),
    build() -> (module, inputs, arg names, requires_grad per input or None, source dict).
    capture: backend.capture_module_step. empty_cache: called after each job (CUDA), or None.
    """
    failed, written = [], []
    for k, (base, part, golden, build) in enumerate(jobs):
        print(f"[{k + 1}/{len(jobs)}] {base.format(phase='*')}", flush=True)
        t0 = time.time()
        try:
            mod, inputs, names, rg, source = build()
            source["capture_command"] = " ".join(["python3", script] + sys.argv[1:])
            got, ok, _ = capture(mod, inputs, names, out_dir, part, golden, base, source=source,
                                 fullgraph=True, tangent_seed=seed + 1, requires_grad=rg)
            written += got
            if not ok:
                failed.append((base, "eager mismatch"))
            print(f"  wrote {got} ({time.time() - t0:.1f} s)", flush=True)
        except Exception as e:
            traceback.print_exc()
            failed.append((base, f"{type(e).__name__}: {e}"))
        finally:
            if empty_cache:
                empty_cache()
    print(f"\n{len(jobs) - len(failed)}/{len(jobs)} captures succeeded, {len(written)} traces in {out_dir}")
    for b, m in failed:
        print(f"  FAILED {b}: {m[:max_msg]}")
    return 1 if failed else 0
