"""Candidate selection scales with the number of layers: fusing a stack of L Llama
decoder layers, time per layer for L = 1, 2, 4, 8, 16, 32 (identical layers hit the
fusion cache, so the time per layer falls). Each stack is fused in a fresh process:
the engine's memos (kernel prices, verified kernels) live as long as the process, and
a warm process would make the later rows look faster than a user's first ``fuse``.

    python benchmarks/bench_selection.py [--layers 1 2 4 8 16 32] [--size T=64 ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import blockbuster as bb
from blockbuster.dsl.loader import default_rules
from blockbuster.report import format_bytes
from blockbuster.select.selection import Selector


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--size", action="append", default=[], metavar="DIM=INT")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)   # a child process's stack
    args = ap.parse_args()
    sizes = {k: int(v) for k, v in (s.split("=") for s in args.size)}
    if args.one is not None:
        one(args.one, sizes)
        return
    print(f"{'layers':>6} {'kernels':>14} {'global bytes before -> after':>32} "
          f"{'fusions':>8} {'seconds':>8} {'s/layer':>8} {'vs L=1':>7}")
    first = None
    for layers in args.layers:
        row = subprocess.run([sys.executable, __file__, "--one", str(layers)]
                             + [f"--size={s}" for s in args.size],
                             capture_output=True, text=True, check=True).stdout.split("\t")
        seconds = float(row[-1])
        per_layer = seconds / layers
        first = first or per_layer
        print(f"{layers:>6} {row[0]:>14} {row[1]:>32} {row[2]:>8} "
              f"{seconds:>8.2f} {per_layer:>8.2f} {per_layer / first:>6.2f}x", flush=True)


def one(layers: int, sizes: dict) -> None:
    """Fuse one stack (rules loaded before the clock starts); print a tab-separated row."""
    rules = default_rules()
    program = bb.workload("llama_block", layers=layers, **sizes)
    selector = Selector(rules, bb.cost.DEFAULT_HARDWARE, progress=False)
    start = time.perf_counter()
    result = selector.select(program)
    seconds = time.perf_counter() - start
    before, after = bb.cost(program).global_bytes, bb.cost(result.program).global_bytes
    print(f"{len(program.kernels)} -> {len(result.program.kernels)}\t"
          f"{format_bytes(before)} -> {format_bytes(after)}\t{selector.fusions}\t{seconds:.3f}")


if __name__ == "__main__":
    main()
