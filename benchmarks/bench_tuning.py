"""What automatic block sizes give on the Numba backend: default blocks, the cost
model's choice, the measured choice and the hand-set blocks of ``bench_numba.py``,
timed in one process, interleaved, best of ``--rounds`` rounds.

    python benchmarks/bench_tuning.py            # the full sizes (slow on 2 cores)
    python benchmarks/bench_tuning.py --quick    # small sizes

Choices come from the tuning cache (``$BLOCKBUSTER_CACHE/tuning``) when present:
run ``python -m blockbuster run WORKLOAD --size ... --backend numba`` first to see
what tuning costs; the time it took is printed beside each choice (``cached`` when
the cache answered here). Every variant is checked against the float64 oracle.
"""

from __future__ import annotations

import argparse
import os
import time

from blockbuster_numba import backend

import blockbuster as bb
from blockbuster.oracles import oracle
from blockbuster.tuning import tune
from blockbuster.tuning.targets import fuser, workload_tunable
from blockbuster.validate import compare, random_inputs

CASES = {
    "full": [
        ("attention", {"N": 4096, "D": 64}, {"N": 64, "S": 64, "D": 64}),
        ("layernorm_matmul", {"M": 2048, "K": 2048, "N": 2048}, {"M": 1024, "K": 2048, "N": 256}),
        ("rmsnorm_ffn_swiglu", {"M": 2048, "D": 1024, "H": 2816},
         {"M": 1024, "D": 1024, "H": 256}),
    ],
    "quick": [
        ("attention", {"N": 1024, "D": 64}, {"N": 64, "S": 64, "D": 64}),
        ("layernorm_matmul", {"M": 512, "K": 512, "N": 512}, {"M": 256, "K": 512, "N": 128}),
        ("rmsnorm_ffn_swiglu", {"M": 512, "D": 256, "H": 704}, {"M": 256, "D": 256, "H": 128}),
    ],
}


def variants(name, sizes, hand):
    fuse = fuser(None, backend.hardware)
    tunable = workload_tunable(name, sizes, {}, fuse)
    out = {"default": (tunable.initial, "")}
    for mode in ("model", "measure"):
        t = tune(tunable, backend, mode)
        out[mode] = (t.blocks, "cached" if t.from_cache else f"tuned in {t.seconds:.1f} s")
    out["hand"] = (hand, "")
    return {label: (blocks, note, fuse(bb.workload(name, blocks=blocks, **sizes)))
            for label, (blocks, note) in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}, {backend.hardware.summary()}")
    for name, sizes, hand in CASES["quick" if args.quick else "full"]:
        programs = variants(name, sizes, hand)
        inputs = random_inputs(next(iter(programs.values()))[2], seed=0)
        want = oracle(name, inputs)
        compiled = {}
        for label, (_, _, program) in programs.items():
            compiled[label] = backend.compile(program)
            assert compare(compiled[label](**inputs), want).passed, label
        best = {label: float("inf") for label in compiled}
        for _ in range(args.rounds):
            for label, run in compiled.items():
                start = time.perf_counter()
                run(**inputs)
                best[label] = min(best[label], time.perf_counter() - start)
        size = " ".join(f"{d}={n}" for d, n in sizes.items())
        print(f"\n{name} {size}")
        for label, (blocks, note, _) in programs.items():
            text = " ".join(f"{d}={b}" for d, b in sorted(blocks.items()))
            print(f"  {label:<8} {best[label] * 1e3:9.1f} ms  {best['default'] / best[label]:5.2f}x"
                  f" default  ({text}{'; ' + note if note else ''})")


if __name__ == "__main__":
    main()
