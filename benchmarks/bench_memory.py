"""Peak memory of one call: the fused program against NumPy and PyTorch eager.

    python benchmarks/bench_memory.py                       # attention N=S=16384, D=64
    python benchmarks/bench_memory.py --workload attention --size N=4096
    python benchmarks/bench_memory.py --workload rmsnorm_ffn_swiglu --size M=2048 \\
        --size D=1024 --size H=2816

Each variant runs in a process of its own (so that nothing another variant freed,
cached or compiled is counted), on the same float32 inputs: the inputs are made, the
variant is called once untimed (the fused program is compiled and its kernels run
once; free heap pages are then handed back to the system, so memory it reuses
counts again), then a thread samples the resident set size (``/proc/self/statm``, every
0.5 ms) during a second call. Reported: the peak during that call above the
resident size just before it -- what the call itself allocates and touches (its
intermediates, its output, per-thread blocks) -- and the ratio to the fused
program's. Inputs, weights and the interpreter are in the baseline of every variant.

Variants: ``numpy`` (``bench_numba``'s NumPy as a user writes it), ``torch`` (PyTorch
eager; attention is ``scaled_dot_product_attention``) and ``fused`` (the workload
fused for this CPU and compiled by the Numba backend at its default blocks, or
``--tune``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

VARIANTS = ("numpy", "torch", "fused")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _trim_heap() -> None:
    """Free heap pages back to the system (glibc), so that memory the untimed call
    freed and this call reuses is counted again."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def peak_during(call) -> int:
    """Peak resident bytes above the current resident size while ``call()`` runs."""
    import gc
    gc.collect()
    _trim_heap()
    base = rss_bytes()
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.0005)
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        call()
    finally:
        done.set()
        t.join()
    peak[0] = max(peak[0], rss_bytes())
    return peak[0] - base


def child(variant: str, workload: str, sizes: dict, tune: str, threads: int) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_numba as bn       # the peers as bench_numba writes them
    import blockbuster
    from blockbuster.validate import random_inputs
    from blockbuster_numba import backend as numba_backend

    unfused = blockbuster.workload(workload, **sizes)
    inputs = random_inputs(unfused, seed=0)
    if variant == "numpy":
        run = lambda: bn.NUMPY[workload](**inputs)                       # noqa: E731
    elif variant == "torch":
        import torch
        torch.set_num_threads(threads)
        tv = bn.torch_variant(workload)
        run = lambda: tv(**inputs)                                        # noqa: E731
    else:
        fused = blockbuster.fuse(unfused, hardware=numba_backend.hardware).program
        compiled = blockbuster.compile(fused, backend=numba_backend, tune=tune)
        run = lambda: compiled(inputs)                                    # noqa: E731
    run()
    return {"variant": variant, "peak_bytes": peak_during(run)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="attention")
    ap.add_argument("--size", action="append", default=[], metavar="DIM=INT")
    ap.add_argument("--tune", choices=("measure", "model", "off"), default="off")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sizes = {}
    for item in args.size:
        d, _, v = item.partition("=")
        if not v.isdigit() or int(v) < 1:
            raise SystemExit(f"--size {item}: expected DIM=positive integer")
        sizes[d] = int(v)
    if args.workload == "attention" and not sizes:
        sizes = {"N": 16384, "D": 64}
    if args.child:
        print(json.dumps(child(args.child, args.workload, sizes, args.tune, args.threads)))
        return
    env = {**os.environ, "NUMBA_NUM_THREADS": str(args.threads)}
    results = {}
    for v in VARIANTS:
        cmd = [sys.executable, __file__, "--child", v, "--workload", args.workload,
               "--tune", args.tune, "--threads", str(args.threads)]
        cmd += [f"--size={d}={n}" for d, n in sizes.items()]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            raise SystemExit(f"{v}: failed: {out.stderr.strip().splitlines()[-1:]}")
        results[v] = json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"]
    label = " ".join(f"{d}={n}" for d, n in sizes.items())
    print(f"{args.workload} {label}: peak resident memory of one call above its baseline")
    fused = max(results["fused"], 1)
    for v in VARIANTS:
        print(f"  {v:<6} {results[v] / 2**20:>10.1f} MiB   {results[v] / fused:>7.1f}x fused")


if __name__ == "__main__":
    main()
