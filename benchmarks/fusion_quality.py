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
    ("paper_figure", dict(M=4096, N=4096)),
    ("attention", dict(N=4096, D=64)),
    ("layernorm_matmul", dict(M=2048, K=2048, N=2048)),
    ("layernorm_matmul", dict(M=2048, K=1024, N=512)),
    ("rmsnorm_ffn_swiglu", dict(M=2048, D=1024, H=2816)),
    ("llama_block", dict(T=2048, E=4096, F=11008, NH=32, KVH=8)),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", nargs="*", default=None, help="rule files (default rules)")
    args = ap.parse_args()
    rules = blockbuster.load_rules(*args.rules) if args.rules else None
    print(f"{'workload':<20} {'sizes':<36} {'kernels':>10} {'global bytes before':>20} "
          f"{'after':>12} {'compulsory':>12} {'weight prep':>12} {'fuse s':>7}")
    for name, sizes in CASES:
        program = blockbuster.workload(name, **sizes)
        start = time.perf_counter()
        fused = blockbuster.fuse(program, rules, progress=False).program
        seconds = time.perf_counter() - start
        before, after = blockbuster.cost(program), blockbuster.cost(fused)
        prep = sum(k.weight_prep for k in after.per_kernel)
        size_text = ",".join(f"{k}={v}" for k, v in sizes.items())
        kernels = f"{len(fused.kernels) - prep}" + (f"+{prep}p" if prep else "")
        print(f"{name:<20} {size_text:<36} {len(program.kernels):>3} -> {kernels:<5} "
              f"{format_bytes(before.global_bytes):>20} {format_bytes(after.per_call_bytes):>12} "
              f"{format_bytes(after.compulsory_bytes):>12} "
              f"{format_bytes(after.weight_prep_bytes):>12} {seconds:>7.2f}")
    attention = next(sizes for name, sizes in CASES if name == "attention")
    n, d = attention["N"], attention["D"]
    bound = 4 * (2 * n * d + math.ceil(n / 64) * 2 * n * d)
    print(f"Flash Attention data movement for N={n}, D={d}, 64-row blocks: {format_bytes(bound)}")
    print("after = per call (weight preparation, kernels that read only weights, is done "
          "once and shown apart; Np = N such kernels)")


if __name__ == "__main__":
    main()
