"""The loop-sum engine against brute-force enumeration of every iteration."""

from hypothesis import given, settings, strategies as st

from blockbuster.cost.counting import Loop, LoopSums, block_extent
from blockbuster.ir.index import IConst, IVar, evaluate
from blockbuster.ir.types import Dim

DIMS = [Dim("A", 37, 8), Dim("B", 20, 20), Dim("C", 50, 7), Dim("P", 3, 1, point=True)]


def brute(loops, extents):
    total = 0

    def go(depth, env):
        nonlocal total
        if depth == len(loops):
            term = 1
            for dim, ix in extents:
                term *= dim.block if ix is None else block_extent(dim, evaluate(ix, env))
            total += term
            return
        loop = loops[depth]
        lo = 0 if loop.lo is None else max(0, evaluate(loop.lo, env))
        hi = loop.dim.nblocks if loop.hi is None else min(loop.dim.nblocks,
                                                          evaluate(loop.hi, env))
        for b in range(lo, hi):
            go(depth + 1, {**env, loop.name: b})

    go(0, {})
    return total


@st.composite
def nests(draw):
    """Up to four loops whose bounds and subscripts use the enclosing loops."""
    loops = []
    for depth in range(draw(st.integers(1, 4))):
        names = [l.name for l in loops]

        def index():
            if not names:
                return IConst(draw(st.integers(0, 3)))
            v = IVar(draw(st.sampled_from(names)))
            return draw(st.sampled_from([v, v + 1, v // 2, v * 2, v - 1, v + v]))

        dim = draw(st.sampled_from(DIMS))
        lo = index() if draw(st.booleans()) else None
        hi = index() if draw(st.booleans()) else None
        loops.append(Loop(f"v{depth}", dim, lo, hi))
    names = [l.name for l in loops]
    extents = []
    for _ in range(draw(st.integers(0, 3))):
        dim = draw(st.sampled_from(DIMS))
        kind = draw(st.sampled_from(["var", "div", "none"]))
        v = IVar(draw(st.sampled_from(names)))
        extents.append((dim, {"var": v, "div": v // 2, "none": None}[kind]))
    return loops, extents


@settings(max_examples=300, deadline=None)
@given(nests())
def test_loop_sums_match_enumeration(nest):
    loops, extents = nest
    assert LoopSums().count(loops, extents) == brute(loops, extents)


def test_independent_loops_are_not_enumerated():
    # 20,000 blocks per loop, three loops (8·10^12 iterations): only feasible if each
    # loop is summed on its own.
    n = 20_000
    big = [Dim(name, 3 * n - 1, 3) for name in "XYZ"]
    loops = [Loop(f"v{k}", d) for k, d in enumerate(big)]
    extents = [(d, IVar(f"v{k}")) for k, d in enumerate(big)]
    assert LoopSums().count(loops, extents) == (3 * n - 1) ** 3
    assert LoopSums().count(loops) == n ** 3
