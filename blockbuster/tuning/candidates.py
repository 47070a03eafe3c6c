"""Candidate block sizes: per dimension, then every combination of them.

Per dimension of ``size`` (see :class:`~.constraints.BlockConstraints`): powers of
two from ``min_block`` up to ``max_block``, the whole dimension when it is not
larger, and balanced splits into 1, 2 and 4 blocks per core (so some candidate
keeps every core busy). Ragged edges: blocks that give the same number of blocks
do the same work with more padding in the last one, so of each such group only the
smallest block is kept (rounded up to ``multiple``): 2000 in two blocks is
2 × 1000, not 1024 + 976.
"""

from __future__ import annotations

import itertools
import math

from .constraints import BlockConstraints

#: Widest block of a "wide" candidate (4 KiB rows of float32): past it, blocks stop
#: paying for themselves on a CPU and start costing parallelism.
WIDE_BLOCK = 1024

#: Combinations beyond this are not enumerated (per dimension choices are few; this
#: bounds programs with many tunable dimensions).
MAX_COMBINATIONS = 4096


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def dim_choices(size: int, cores: int, c: BlockConstraints) -> tuple[int, ...]:
    """The block sizes tried for one dimension of ``size`` elements, ascending."""
    if size <= c.min_block:
        return (size,)
    raw = set()
    b = c.min_block
    while b < size and b <= c.max_block:
        raw.add(b)
        b *= 2
    if size <= c.max_block:
        raw.add(size)
    if not c.powers_of_two:
        for per_core in (1, 2, 4):
            split = -(-size // (cores * per_core))
            if c.min_block <= split <= c.max_block:
                raw.add(split)
    if c.powers_of_two:
        return tuple(sorted(raw))
    by_count: dict[int, int] = {}
    for b in raw:
        n = -(-size // b)
        tight = min(size, _round_up(-(-size // n), c.multiple))
        n = -(-size // tight)
        by_count[n] = min(by_count.get(n, tight), tight)
    return tuple(sorted(set(by_count.values())))


def combinations(sizes: dict[str, int], cores: int, c: BlockConstraints) -> list[dict]:
    """Every combination of the dimensions' choices (at most MAX_COMBINATIONS: the
    largest blocks of each dimension are kept first when it must be cut)."""
    names = list(sizes)
    choices = [dim_choices(sizes[d], cores, c) for d in names]
    while math.prod(len(x) for x in choices) > MAX_COMBINATIONS:
        widest = max(range(len(choices)), key=lambda i: len(choices[i]))
        choices[widest] = choices[widest][1:]          # drop its smallest block
    return [dict(zip(names, combo)) for combo in itertools.product(*choices)]


def wide_assignments(sizes: dict[str, int], cores: int, c: BlockConstraints,
                     reduced: frozenset = frozenset()) -> list[dict]:
    """Large blocks, as candidates beside the cost model's: per dimension the largest
    of its choices at most ``WIDE_BLOCK`` wide and, for a dimension wider than that,
    splitting it into at least ``cores`` blocks (then ``2 * cores``). Why: the cost
    model ranks re-blockings of the program fused at the default blocks, but at
    large blocks fusion may build another program altogether (one mega-kernel whose
    block matmuls run at the micro-kernel's full speed), which only a measurement
    sees. None where the local capacity is hard (shared memory).

    ``reduced``: dimensions that no per-call kernel runs in parallel (only summed
    over). Splitting them keeps no core busy, and a block matmul is fastest with the
    whole depth in one call (its driver blocks the depth for the caches itself, and
    every extra block streams the product through the caches once more), so one
    more candidate takes each of them at its largest choice."""
    if c.hard_capacity:
        return []
    out = []
    for per_core in (1, 2):
        blocks = {}
        for d, n in sizes.items():
            choices = dim_choices(n, cores, c)
            fitting = [b for b in choices
                       if b <= WIDE_BLOCK and (n <= WIDE_BLOCK or -(-n // b) >= cores * per_core)]
            blocks[d] = max(fitting) if fitting else choices[0]
        if blocks not in out:
            out.append(blocks)
    deep = {**out[0], **{d: max(dim_choices(n, cores, c)) for d, n in sizes.items()
                         if d in reduced}}
    if deep not in out:
        out.append(deep)
    return out
