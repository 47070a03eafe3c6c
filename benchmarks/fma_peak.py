"""The machine's float32 FMA peak, measured: fused multiply-adds on registers only.

    python benchmarks/fma_peak.py [--threads N]

A BLAS GEMM is a practical peak but not the ceiling (OpenBLAS reaches ~90 % of the
cores' arithmetic). This probe is the ceiling: a loop of ``CHAINS`` independent vector
FMAs on loop-carried registers (emitted as LLVM IR, so nothing is loaded, stored or
reassociated away), as wide as the micro-kernel's vectors, timed on each thread at
once. Enough chains to cover the FMA latency on every current x86 core (4 cycles x 2
pipes needs 8; 16 leaves a margin and fits AVX-512's and AVX2's register files).

``bench_numba.py`` prints each case's fraction of this peak beside the BLAS one.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from blockbuster_numba.microkernel import VW

CHAINS = 12


@intrinsic
def _fma_chains(typingctx, n, seed):
    """``n`` rounds of ``CHAINS`` independent ``acc = acc * m + a`` vector FMAs; returns
    a lane of their sum (so that the loop is live)."""
    sig = types.float32(types.int64, types.float32)

    def codegen(context, builder, signature, args):
        n_v, seed_v = args
        f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
        vty = ir.VectorType(f32, VW)
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vty, [vty, vty, vty]), f"llvm.fma.v{VW}f32")
        splat = builder.shuffle_vector(
            builder.insert_element(ir.Constant(vty, ir.Undefined), seed_v, ir.Constant(i32, 0)),
            ir.Constant(vty, ir.Undefined), ir.Constant(ir.VectorType(i32, VW), [0] * VW))
        mul = ir.Constant(vty, [0.999999] * VW)
        inits = [builder.fadd(splat, ir.Constant(vty, [float(c)] * VW)) for c in range(CHAINS)]
        pre = builder.block
        loop = builder.append_basic_block("fma.loop")
        done = builder.append_basic_block("fma.done")
        builder.cbranch(builder.icmp_signed(">", n_v, ir.Constant(i64, 0)), loop, done)
        builder.position_at_end(loop)
        k = builder.phi(i64)
        k.add_incoming(ir.Constant(i64, 0), pre)
        accs = []
        for init in inits:
            p = builder.phi(vty)
            p.add_incoming(init, pre)
            accs.append(p)
        new = [builder.call(fma, [a, mul, splat]) for a in accs]
        k_next = builder.add(k, ir.Constant(i64, 1))
        k.add_incoming(k_next, loop)
        for p, v in zip(accs, new):
            p.add_incoming(v, loop)
        builder.cbranch(builder.icmp_signed("<", k_next, n_v), loop, done)
        builder.position_at_end(done)
        outs = []
        for init, v in zip(inits, new):
            phi = builder.phi(vty)
            phi.add_incoming(init, pre)
            phi.add_incoming(v, loop)
            outs.append(phi)
        total = outs[0]
        for v in outs[1:]:
            total = builder.fadd(total, v)
        return builder.extract_element(total, ir.Constant(i32, 0))

    return sig, codegen


@njit(nogil=True)
def _run(n, seed):
    return _fma_chains(n, seed)


def fma_peak(threads: int, rounds: int = 5, seconds: float = 0.2) -> float:
    """Float32 GFLOP/s of ``threads`` threads each running FMA chains at once (best of
    ``rounds`` runs of about ``seconds`` each)."""
    _run(1000, np.float32(1.0))
    n = 1 << 20
    while True:                                   # size one run to about `seconds`
        t = time.perf_counter()
        _run(n, np.float32(1.0))
        if time.perf_counter() - t >= seconds / 4:
            break
        n *= 2
    n = int(n * 4)
    best = float("inf")
    for _ in range(rounds):
        barrier = threading.Barrier(threads + 1)

        def work():
            barrier.wait()
            _run(n, np.float32(1.0))
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for th in pool:
            th.start()
        barrier.wait()
        t = time.perf_counter()
        for th in pool:
            th.join()
        best = min(best, time.perf_counter() - t)
    return threads * n * CHAINS * VW * 2 / best / 1e9


def main() -> None:
    import os
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    for t in sorted({1, args.threads}):
        print(f"FMA peak, {t} thread(s): {fma_peak(t):.1f} GFLOP/s float32 "
              f"({VW}-lane vectors, {CHAINS} chains)")


if __name__ == "__main__":
    main()
