"""Fusion never makes a program worse than the unfused one (cost-model objective and
per-call global bytes): a producer with several consumers is not inlined into each
of them when that recomputes it and reads its operands twice."""

import numpy as np
import pytest

import blockbuster as bb
from blockbuster.frontend.builder import GraphBuilder


def _shared_matmul(M, K, N, column_sums=False):
    """A product with two consumers; with ``column_sums`` the second reduces over the
    rows (another loop nest: no multi-output kernel can hold both)."""
    g = GraphBuilder("shared_matmul")
    g.dim("M", M, 16)
    g.dim("K", K, 32)
    g.dim("N", N, 16)
    a, b = g.input("A", "M", "K"), g.input("B", "K", "N")
    p = g.matmul(a, b)
    t = g.unary("tanh", p, name=None if column_sums else "t")
    second = g.col_sum(t, name="t") if column_sums else t
    return g.build(g.binary("mul", p, 1 / 2.891, name="scaled"), second)


@pytest.mark.parametrize("sizes", [(7, 6, 5), (37, 150, 5), (20, 150, 40)])
def test_a_shared_matmul_is_not_recomputed_per_consumer(sizes):
    program = _shared_matmul(*sizes)
    result = bb.fuse(program)
    before, after = bb.cost(program), bb.cost(result.program)
    assert after.per_call_bytes <= before.per_call_bytes
    assert after.objective <= before.objective
    rng = np.random.default_rng(0)
    A = rng.standard_normal(program.shape("A")).astype(np.float32)
    B = rng.standard_normal(program.shape("B")).astype(np.float32)
    p = A.astype(np.float64) @ B.astype(np.float64)
    out = bb.compile(result.program)(A=A, B=B)
    np.testing.assert_allclose(out["scaled"], p / 2.891, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out["t"], np.tanh(p), rtol=1e-5, atol=1e-5)


def test_the_whole_program_fusion_would_have_been_worse():
    """The engine alone inlines the product into both consumers; fuse() notices."""
    from blockbuster.dsl.loader import default_rules
    from blockbuster.rewrite.engine import Engine
    program = _shared_matmul(37, 150, 5, column_sums=True)
    whole = Engine(default_rules(), hardware=bb.cost.DEFAULT_HARDWARE).run(program).program
    assert bb.cost(whole).per_call_bytes > bb.cost(program).per_call_bytes
    result = bb.fuse(program)
    assert result.fallback
    assert "did not pay" in result.derivation(programs=False)


def test_consumers_over_one_loop_nest_share_the_product_in_one_kernel():
    """Inlined into both consumers, the product is one node of one multi-output
    kernel (merge_siblings): computed once, A and B read once."""
    program = _shared_matmul(37, 150, 5)
    result = bb.fuse(program)
    assert not result.fallback
    (kernel,) = result.program.kernels
    assert sorted(kernel.writes()) == ["scaled", "t"]
    assert bb.cost(result.program).per_call_bytes < bb.cost(program).per_call_bytes


def test_fusion_that_pays_is_kept_whole():
    result = bb.fuse(bb.workload("attention", N=100, S=70, D=16))
    assert not result.fallback
    assert len(result.program.kernels) == 1


def test_over_a_cache_s_capacity_fusion_is_priced_with_its_spill():
    """Flash attention at 256-wide blocks: its kernel's footprint bound (1.8 MB) is
    over the 1 MiB local tier, so its objective is infinite, while every unfused
    kernel fits. On a CPU, whose local tier is a cache, an overflowing kernel is
    slower, not impossible: priced as if all its local traffic also crossed the
    global tier, it is still far cheaper than moving the 817 MiB of scores, and
    fuse() keeps it whole (it fell back to the unfused pieces). On hardware whose
    local tier is a hard limit (a GPU's shared memory) it does not."""
    import attrs
    from blockbuster.cost import DEFAULT_HARDWARE, Hardware
    program = bb.workload("attention", N=4096, S=4096, D=64,
                          blocks={"N": 256, "S": 256, "D": 64})
    result = bb.fuse(program)
    assert not result.fallback and len(result.program.kernels) == 1
    after, before = bb.cost(result.program), bb.cost(program)
    assert not after.fits and before.fits
    assert after.spilled_objective < before.objective
    assert after.per_call_bytes * 20 < before.per_call_bytes

    @attrs.frozen
    class SharedMemory(Hardware):
        @property
        def local_tier_is_cache(self) -> bool:
            return False

    hard = SharedMemory(**attrs.asdict(DEFAULT_HARDWARE))
    kept = bb.fuse(program, hardware=hard)
    assert kept.fallback and len(kept.program.kernels) > 1
