"""Candidate selection scales with the number of layers: fusing a stack of L Llama
decoder layers, time per layer for L = 1, 2, 4, 8, 16, 32 (identical layers hit the
fusion cache, so the time per layer falls).

    python benchmarks/bench_selection.py [--layers 1 2 4 8 16 32] [--size T=64 ...]
"""

from __future__ import annotations

import argparse
import time

import blockbuster as bb
from blockbuster.dsl.loader import default_rules
from blockbuster.report import format_bytes
from blockbuster.select.selection import Selector


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--size", action="append", default=[], metavar="DIM=INT")
    args = ap.parse_args()
    sizes = {k: int(v) for k, v in (s.split("=") for s in args.size)}
    rules = default_rules()
    print(f"{'layers':>6} {'kernels':>14} {'global bytes before -> after':>32} "
          f"{'fusions':>8} {'seconds':>8} {'s/layer':>8} {'vs L=1':>7}")
    first = None
    for layers in args.layers:
        program = bb.workload("llama_block", layers=layers, **sizes)
        selector = Selector(rules, bb.cost.DEFAULT_HARDWARE, progress=False)
        start = time.perf_counter()
        result = selector.select(program)
        seconds = time.perf_counter() - start
        per_layer = seconds / layers
        first = first or per_layer
        before, after = bb.cost(program).global_bytes, bb.cost(result.program).global_bytes
        print(f"{layers:>6} {len(program.kernels):>6} -> {len(result.program.kernels):<5} "
              f"{format_bytes(before):>14} -> {format_bytes(after):<14} {selector.fusions:>8} "
              f"{seconds:>8.2f} {per_layer:>8.2f} {per_layer / first:>6.2f}x")


if __name__ == "__main__":
    main()
