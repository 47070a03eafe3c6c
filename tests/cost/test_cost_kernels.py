"""Stateful combiners, multi-kernel programs, local capacity, hardware descriptions."""

import pytest

from blockbuster.cost import DEFAULT_HARDWARE, Hardware, cost
from blockbuster.errors import UsageError

from helpers_cost import cdiv, ext, program

S, BS, D, BD = 90, 16, 40, 32

FLASH = f"""
program flash
dim S = {S} block {BS}
dim D = {D} block {BD}
input Q[S, D]
input K[S, D]
input V[S, D]
output O[S, D]
kernel attn for i in S, e in D:
  let x = dot(Q[i, e], transpose(K[j, e]))
  let p = exp(rowshift(neg(runmax(j)), x))
  let r = online_softmax(j in S[ : i + 1]: x, dot(p, V[j, e]), rowsum(p))
  O[i, e] = rowscale(recip(r.2), r.1)
"""


def test_causal_online_softmax_matches_enumeration():
    c = cost(program(FLASH))
    loaded = flops = 0
    for i in range(cdiv(S, BS)):
        for e in range(cdiv(D, BD)):
            ei, ee = ext(S, BS, i), ext(D, BD, e)
            loaded += ei * ee                               # Q[i, e], once per instance
            flops += ei + ei * ee                           # recip, rowscale
            for j in range(i + 1):
                ej = ext(S, BS, j)
                loaded += 2 * ej * ee                       # K[j, e], V[j, e]
                flops += 2 * ei * ee * ej                   # x = Q K^T
                flops += ei + ei * ej + ei * ej             # neg(runmax), rowshift, exp
                flops += 2 * ei * ej * ee + ei * ej         # dot(p, V), rowsum(p)
                flops += ei * ej + 3 * ei                   # head: row max, new max, exp
                flops += 1 * ei * ee + 2 * ei               # rescale (+ add unless a dot)
    assert c.loaded_bytes == 4 * loaded
    assert c.flops == flops
    assert c.stored_bytes == 4 * S * D
    # Distinct nodes at full block size (proj is a view and is not counted):
    # Q, K, V blocks; K^T; x, rowshift, exp (S x S); runmax, neg, rowsum, recip
    # (vectors); dot(p, V), rowscale (S x D); accumulators m, acc, l.
    blk, sq, vec = BS * BD, BS * BS, BS
    assert c.local_bytes == 4 * (4 * blk + 3 * sq + 4 * vec + 2 * blk + (vec + blk + vec))


def test_meanvar_head_flops():
    m, bm, k, bk = 100, 32, 70, 32
    c = cost(program(f"""
program stats
dim M = {m} block {bm}
dim K = {k} block {bk}
input X[M, K]
output Y[M]
output Z[M]
kernel stats for i in M:
  let r = meanvar(k in K: X[i, k])
  Y[i] = r.1
  Z[i] = r.2
"""))
    assert c.loaded_bytes == 4 * m * k
    assert c.stored_bytes == 2 * 4 * m
    assert c.flops == 4 * m * k + 8 * m * cdiv(k, bk)
    assert c.local_bytes == 4 * (bm * bk + 2 * bm)     # X block; row sums and squares


TWO_KERNELS = """
program unfused
dim M = 100 block 32
dim K = 70 block 32
dim N = 50 block 16
input A[M, K]
input B[K, N]
array C[M, N]
output Y[M, N]
kernel mm for i in M, j in N:
  C[i, j] = sum(k in K: dot(A[i, k], B[k, j]))
kernel act for i in M, j in N:
  Y[i, j] = exp(C[i, j])
"""


def test_multi_kernel_totals():
    c = cost(program(TWO_KERNELS))
    mm, act = c.per_kernel
    assert c.kernels == 2 and (mm.name, act.name) == ("mm", "act")
    assert act.loaded_bytes == act.stored_bytes == 4 * 100 * 50
    assert act.flops == 100 * 50                        # one exp per (ragged) element
    assert act.local_bytes == 4 * 2 * 32 * 16           # C block and exp(C)
    assert c.loaded_bytes == mm.loaded_bytes + act.loaded_bytes
    assert c.stored_bytes == mm.stored_bytes + act.stored_bytes == 2 * 4 * 100 * 50
    assert c.global_bytes == c.loaded_bytes + c.stored_bytes
    assert c.flops == mm.flops + act.flops == 2 * 100 * 50 * 70 + 100 * 50
    assert c.local_bytes == max(mm.local_bytes, act.local_bytes) == mm.local_bytes
    assert c.time_estimate == pytest.approx(mm.time_estimate + act.time_estimate)
    # The intermediate C is not compulsory traffic: only A, B read and Y written.
    assert c.compulsory_bytes == 4 * (100 * 70 + 70 * 50 + 100 * 50)
    assert c.global_bytes - c.compulsory_bytes == 4 * (100 * 70 * 3 + 70 * 50 * 3 + 2 * 100 * 50)


def tiny(capacity: int) -> Hardware:
    return Hardware("tiny", cores=1, local_capacity_bytes=capacity,
                    global_bandwidth_bytes_per_s=1e9, local_bandwidth_bytes_per_s=1e10,
                    peak_flops=1e9)


def test_fits_against_local_capacity():
    p = program(TWO_KERNELS)
    need = cost(p).per_kernel[0].local_bytes
    exact = cost(p, tiny(need))
    assert exact.fits and all(k.fits for k in exact.per_kernel)
    short = cost(p, tiny(need - 1))
    assert not short.fits
    assert [k.fits for k in short.per_kernel] == [False, True]
    assert not short.as_dict()["fits"]


def test_rank_orders_programs_that_do_not_fit_by_their_roofline():
    # Pricing guards compare ``rank``: the objective, then (both infinite) the
    # objective as if the local tier were large enough.
    p = program(TWO_KERNELS)
    need = cost(p).per_kernel[0].local_bytes
    roomy, short = cost(p, tiny(need)), cost(p, tiny(need - 1))
    assert short.objective == float("inf") and roomy.objective < float("inf")
    assert short.rank == (float("inf"), pytest.approx(roomy.objective))
    assert roomy.rank == (roomy.objective, roomy.objective)
    assert roomy.rank < short.rank


def test_roofline_takes_the_slowest_of_memory_compute_and_local_traffic():
    p = program(TWO_KERNELS)
    slow_memory = Hardware("mem", 1, 1 << 20, 1.0, 1e30, 1e30)
    slow_compute = Hardware("cpu", 1, 1 << 20, 1e30, 1e30, 1.0)
    slow_local = Hardware("l2", 1, 1 << 20, 1e30, 1.0, 1e30)
    c = cost(p, slow_memory)
    assert c.time_estimate == pytest.approx(c.global_bytes)
    c = cost(p, slow_compute)
    assert c.time_estimate == pytest.approx(c.flops)
    c = cost(p, slow_local)
    assert c.time_estimate == pytest.approx(sum(k.local_traffic_bytes for k in c.per_kernel))


def test_local_traffic_is_loads_stores_and_dot_operands():
    mm, act = cost(program(TWO_KERNELS)).per_kernel
    # Every (i, j, k) step: dot reads A[i, k] and B[k, j] (what it loaded) and writes
    # an i x j partial product: 100 x 50 elements per k block, 3 k blocks.
    assert mm.local_traffic_bytes == 2 * mm.loaded_bytes + mm.stored_bytes + 4 * 100 * 50 * 3
    # exp stays in registers: only the block loaded and the block stored.
    assert act.local_traffic_bytes == act.loaded_bytes + act.stored_bytes


def test_compute_and_local_time_use_only_the_cores_a_kernel_keeps_busy():
    from blockbuster.cost.model import busy_fraction
    assert busy_fraction(1, 4) == 0.25 and busy_fraction(16, 4) == 1.0
    assert busy_fraction(3, 2) == 0.75          # two waves, the second half empty
    p = program(TWO_KERNELS)                    # mm: 4 x 4 = 16 parallel instances

    def compute_bound(cores):                   # same machine totals, more cores
        return cost(p, Hardware("cpu", cores, 1 << 20, 1e30, 1e30, 1.0)).per_kernel[0]

    assert compute_bound(16).instances == 16
    assert compute_bound(16).time_estimate == pytest.approx(compute_bound(16).flops)
    assert compute_bound(32).time_estimate == pytest.approx(2 * compute_bound(16).flops)
    assert compute_bound(24).time_estimate == pytest.approx(1.5 * compute_bound(16).flops)
    # The shared global bandwidth is not scaled by the busy cores.
    wide = Hardware("mem", 64, 1 << 20, 1.0, 1e30, 1e30)
    assert cost(p, wide).time_estimate == pytest.approx(cost(p, wide).global_bytes)


def test_element_bytes_scales_bytes_only():
    p = program(TWO_KERNELS)
    half = Hardware("fp16", 1, 1 << 20, 1e9, 1e9, 1e9, element_bytes=2)
    c2, c4 = cost(p, half), cost(p)
    assert 2 * c2.global_bytes == c4.global_bytes
    assert 2 * c2.compulsory_bytes == c4.compulsory_bytes
    assert 2 * c2.local_bytes == c4.local_bytes
    assert c2.flops == c4.flops


def test_hardware_descriptions():
    hw = DEFAULT_HARDWARE
    assert hw.cores == 2 and hw.local_capacity_bytes == 1 << 20 and hw.element_bytes == 4
    assert hw.global_bandwidth_bytes_per_s < hw.local_bandwidth_bytes_per_s
    assert cost(program(TWO_KERNELS)).hardware is hw
    with pytest.raises(UsageError, match="local_capacity_bytes"):
        Hardware("bad", 1, 0, 1e9, 1e9, 1e9)
    with pytest.raises(UsageError, match="peak_flops"):
        Hardware("bad", 1, 1024, 1e9, 1e9, -1.0)


def test_causal_mask_and_positions():
    s, bs, d, bd = 70, 16, 24, 8
    c = cost(program(f"""
program masked
dim S = {s} block {bs}
dim D = {d} block {bd}
input Q[S, D]
input K[S, D]
output O[S, S]
kernel scores for i in S, j in S:
  O[i, j] = keep_ge(pos(S, i), pos(S, j), sum(e in D: dot(Q[i, e], transpose(K[j, e]))))
"""))
    ns = -(-s // bs)
    assert c.loaded_bytes == 4 * 2 * s * ns * d
    assert c.flops == 2 * s * s * d + s * s           # dots, then one select per element
    # pos vectors; Q, K, K^T blocks; dot, sum, keep_ge (S x S).
    assert c.local_bytes == 4 * (2 * bs + 3 * bs * bd + 3 * bs * bs)


def test_deep_expressions_do_not_hit_the_recursion_limit():
    from blockbuster.ir import expr as E
    from blockbuster.ir.index import IVar
    from blockbuster.ir.program import Kernel, Program, Store
    from blockbuster.ir.types import Dim, GlobalArray

    # Twice Python's default recursion limit (1000); the cost of pricing grows
    # about quadratically with depth, so not much deeper.
    depth = 2000
    x = E.load("X", "i")
    for _ in range(depth):
        x = E.call("exp", x)
    body = E.reduce("sum", "k", "M", x)               # invariant in k: computed once
    p = Program("deep", (Dim("M", 100, 32),),
                (GlobalArray("X", ("M",)), GlobalArray("Y", ("M",))), ("X",), ("Y",),
                (Kernel("k", (("i", "M"),), (Store("Y", (IVar("i"),), body),)),))
    c = cost(p)
    assert c.loaded_bytes == 4 * 100
    assert c.flops == depth * 100 + 100 * 4
