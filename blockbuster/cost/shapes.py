"""The *actual* shapes of local values: types plus which block each axis comes from.

A value typed ``block[M, N]`` is ``extent_M(i) × extent_N(j)`` elements, where ``i``
and ``j`` are the block indices of the loads it was computed from; that is smaller
than ``block × block`` on the ragged edge. A shape records, per axis, the dimension
and the block-index expression (over the cost model's loop names); ``None`` means
"unknown here, assume a full block" — what an accumulator whose per-step blocks vary
with the reduction variable is sized as.
"""

from __future__ import annotations

from typing import Callable

import attrs

from ..ir.index import Idx, free_vars
from ..ir.types import Dim
from .counting import Extent, Loop, LoopSums


@attrs.frozen(cache_hash=True)
class BlockShape:
    """A scalar ``()``, a vector ``(R,)`` or a block ``(R, C)``."""

    axes: tuple[Extent, ...]


@attrs.frozen(cache_hash=True)
class TupleShape:
    """The accumulators of a multi-output reduction."""

    items: tuple


@attrs.frozen(cache_hash=True)
class ArrayShape:
    """A ``map`` array: ``elem`` for each block ``var`` of ``dim`` (``var`` is a loop
    name unique to this array, bound only inside ``elem``)."""

    var: str
    dim: Dim
    elem: object


SCALAR = BlockShape(())


def elements(shape, loops: tuple[Loop, ...], sums: LoopSums) -> int:
    """Elements of ``shape`` summed over every iteration of ``loops``."""
    if isinstance(shape, BlockShape):
        return sums.count(loops, shape.axes)
    if isinstance(shape, TupleShape):
        return sum(elements(s, loops, sums) for s in shape.items)
    return elements(shape.elem, loops + (Loop(shape.var, shape.dim),), sums)


def full_elements(shape) -> int:
    """Elements of ``shape`` at full block size: what a buffer for it must hold
    (scalars live in registers: 0)."""
    if isinstance(shape, BlockShape):
        if not shape.axes:
            return 0
        n = 1
        for dim, _ in shape.axes:
            n *= dim.block
        return n
    if isinstance(shape, TupleShape):
        return sum(full_elements(s) for s in shape.items)
    return shape.dim.nblocks * full_elements(shape.elem)


def map_axes(shape, fn: Callable[[Dim, Idx | None], Extent]):
    if isinstance(shape, BlockShape):
        return BlockShape(tuple(fn(d, ix) for d, ix in shape.axes))
    if isinstance(shape, TupleShape):
        return TupleShape(tuple(map_axes(s, fn) for s in shape.items))
    return ArrayShape(shape.var, shape.dim, map_axes(shape.elem, fn))


def forget(shape, name: str):
    """``shape`` outside the loop ``name``: axes that depended on it become full."""
    return map_axes(shape, lambda d, ix: (d, None) if ix is not None
                    and name in free_vars(ix) else (d, ix))


def rows(shape: BlockShape) -> BlockShape:
    return BlockShape(shape.axes[:1])
