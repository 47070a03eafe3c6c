"""The loop-sum engine against brute-force enumeration of every iteration.

The enumeration is written independently of the code it checks: it evaluates
subscripts and block extents itself (from a plain description of each subscript),
importing only the IR constructors needed to pose the question."""

import math

from hypothesis import given, settings, strategies as st

from blockbuster.cost.counting import Loop, LoopSums
from blockbuster.ir.index import IConst, IVar
from blockbuster.ir.types import Dim

DIMS = [Dim("A", 37, 8), Dim("B", 20, 20), Dim("C", 50, 7), Dim("P", 3, 1, point=True)]

# A subscript is ("const", c) or (form, loop variable): its IR term and its value.
FORMS = {
    "v": (lambda v: v, lambda x: x),
    "v+1": (lambda v: v + 1, lambda x: x + 1),
    "v//2": (lambda v: v // 2, lambda x: x // 2),
    "v*2": (lambda v: v * 2, lambda x: x * 2),
    "v-1": (lambda v: v - 1, lambda x: x - 1),
    "v+v": (lambda v: v + v, lambda x: x + x),
}


def ir_index(spec):
    if spec[0] == "const":
        return IConst(spec[1])
    return FORMS[spec[0]][0](IVar(spec[1]))


def value(spec, env) -> int:
    return spec[1] if spec[0] == "const" else FORMS[spec[0]][1](env[spec[1]])


def blocks(size: int, block: int) -> int:
    return math.ceil(size / block)


def extent(size: int, block: int, b: int) -> int:
    """Elements in block ``b``: a full block, the ragged remainder, 0 outside."""
    if not 0 <= b < blocks(size, block):
        return 0
    return min(block, size - b * block)


def brute(loops, extents):
    """``loops``: (name, (size, block), lo spec or None, hi spec or None);
    ``extents``: ((size, block), spec or None for a full block)."""
    total = 0

    def go(depth, env):
        nonlocal total
        if depth == len(loops):
            term = 1
            for (size, block), spec in extents:
                term *= block if spec is None else extent(size, block, value(spec, env))
            total += term
            return
        name, (size, block), lo, hi = loops[depth]
        first = 0 if lo is None else max(0, value(lo, env))
        last = blocks(size, block) if hi is None else min(blocks(size, block), value(hi, env))
        for b in range(first, last):
            go(depth + 1, {**env, name: b})

    go(0, {})
    return total


@st.composite
def nests(draw):
    """Up to four loops whose bounds and subscripts use the enclosing loops:
    (Loop objects, extents for LoopSums, the same nest described for ``brute``)."""
    loops, plain = [], []
    for depth in range(draw(st.integers(1, 4))):
        names = [l.name for l in loops]

        def index():
            if not names:
                return ("const", draw(st.integers(0, 3)))
            return (draw(st.sampled_from(sorted(FORMS))), draw(st.sampled_from(names)))

        dim = draw(st.sampled_from(DIMS))
        lo = index() if draw(st.booleans()) else None
        hi = index() if draw(st.booleans()) else None
        loops.append(Loop(f"v{depth}", dim, None if lo is None else ir_index(lo),
                          None if hi is None else ir_index(hi)))
        plain.append((f"v{depth}", (dim.size, dim.block), lo, hi))
    names = [l.name for l in loops]
    extents, plain_extents = [], []
    for _ in range(draw(st.integers(0, 3))):
        dim = draw(st.sampled_from(DIMS))
        kind = draw(st.sampled_from(["v", "v//2", "none"]))
        spec = None if kind == "none" else (kind, draw(st.sampled_from(names)))
        extents.append((dim, None if spec is None else ir_index(spec)))
        plain_extents.append(((dim.size, dim.block), spec))
    return loops, extents, (plain, plain_extents)


@settings(max_examples=300, deadline=None)
@given(nests())
def test_loop_sums_match_enumeration(nest):
    loops, extents, plain = nest
    assert LoopSums().count(loops, extents) == brute(*plain)


def test_independent_loops_are_not_enumerated():
    # 20,000 blocks per loop, three loops (8·10^12 iterations): only feasible if each
    # loop is summed on its own.
    n = 20_000
    big = [Dim(name, 3 * n - 1, 3) for name in "XYZ"]
    loops = [Loop(f"v{k}", d) for k, d in enumerate(big)]
    extents = [(d, IVar(f"v{k}")) for k, d in enumerate(big)]
    assert LoopSums().count(loops, extents) == (3 * n - 1) ** 3
    assert LoopSums().count(loops) == n ** 3
