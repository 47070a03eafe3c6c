"""Fusion quality: kernels and modeled global traffic before -> after fusion, against
the compulsory lower bound, for the built-in workloads; plus fusion time.

    python benchmarks/fusion_quality.py [--rules FILE]
"""

from __future__ import annotations

import argparse
import math
import time

import blockbuster
from blockbuster.report import format_bytes

CASES = [
    ("attention", dict(N=4096, D=64)),
    ("layernorm_matmul", dict(M=2048, K=2048, N=2048)),
    ("rmsnorm_ffn_swiglu", dict(M=2048, D=1024, H=2816)),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", nargs="*", default=None, help="rule files (default rules)")
    args = ap.parse_args()
    rules = blockbuster.load_rules(*args.rules) if args.rules else None
    print(f"{'workload':<20} {'sizes':<22} {'kernels':>8} {'global bytes before':>20} "
          f"{'after':>12} {'compulsory':>12} {'after/compulsory':>17} {'fuse s':>7}")
    for name, sizes in CASES:
        program = blockbuster.workload(name, **sizes)
        start = time.perf_counter()
        fused = blockbuster.fuse(program, rules).program
        seconds = time.perf_counter() - start
        before, after = blockbuster.cost(program), blockbuster.cost(fused)
        size_text = ",".join(f"{k}={v}" for k, v in sizes.items())
        print(f"{name:<20} {size_text:<22} {len(program.kernels):>3} -> {len(fused.kernels):<2} "
              f"{format_bytes(before.global_bytes):>20} {format_bytes(after.global_bytes):>12} "
              f"{format_bytes(after.compulsory_bytes):>12} "
              f"{after.global_bytes / after.compulsory_bytes:>16.1f}x {seconds:>7.2f}")
    n, d = CASES[0][1]["N"], CASES[0][1]["D"]
    bound = 4 * (2 * n * d + math.ceil(n / 64) * 2 * n * d)
    print(f"Flash Attention data movement for N={n}, D={d}, 64-row blocks: {format_bytes(bound)}")


if __name__ == "__main__":
    main()
