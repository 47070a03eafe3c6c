"""Block indices as code: IR index expressions, global offsets and masks of blocks.

A block index is an ``int`` when every variable it uses is bound to a known block
(the kernel's one-block loops, unrolled ``map``s), else Triton code over the
runtime variables (program-id digits, ``for`` loop counters). ``h // g`` (grouped
heads) is integer division of non-negative indices in both.
"""

from __future__ import annotations

from blockbuster.ir.index import IBin, IConst, IVar, Idx
from blockbuster.ir.types import Dim

from .values import Axis, Frame, arange


def index_value(ix: Idx, frame: Frame):
    """An IR block index seen from ``frame``: an int, or Triton code."""
    if isinstance(ix, IConst):
        return ix.value
    if isinstance(ix, IVar):
        return frame.resolve(ix.name).value
    if isinstance(ix, IBin):
        a, b = index_value(ix.a, frame), index_value(ix.b, frame)
        if isinstance(a, int) and isinstance(b, int):
            return {"+": a + b, "-": a - b, "*": a * b, "//": a // b}[ix.op]
        return f"({a} {ix.op} {b})"
    raise TypeError(f"not a block index: {ix!r}")


def block_access(dims: list[Dim], blocks: list, strides: list[int]):
    """``(offsets, mask, axes)`` of the block of an array at ``blocks`` (one index
    per dimension of the array): the element offsets as Triton code broadcast over
    the block's axes (the array's tiled dimensions, in order), the mask of its
    valid elements (None: all are) and its axes. A point dimension contributes one
    element and no axis."""
    axes = [Axis(d, b) for d, b in zip(dims, blocks) if not d.point]
    scalar_parts, vector_parts, masks = [], [], []
    position = 0
    for d, b, stride in zip(dims, blocks, strides):
        if d.point:
            if b != 0:
                scalar_parts.append(f"({b}) * {stride}" if stride != 1 else f"({b})")
            continue
        sel = _broadcast(position, len(axes))
        axis = axes[position]
        position += 1
        ar = f"{arange(d)}{sel}"
        start = axis.start()
        pos = ar if start == "0" else f"({start} + {ar})"
        vector_parts.append(pos if stride == 1 else f"{pos} * {stride}")
        m = axis.mask()
        if m is not None:
            masks.append(f"({m}){sel}")
    offsets = " + ".join(scalar_parts + vector_parts) or "0"
    mask = " & ".join(masks) if masks else None
    return offsets, mask, tuple(axes)


def _broadcast(position: int, rank: int) -> str:
    if rank <= 1:
        return ""
    return "[" + ", ".join(":" if i == position else "None" for i in range(rank)) + "]"


def axis_mask(axes: tuple, which: int) -> str | None:
    """The mask of axis ``which`` broadcast over ``axes``; None when it is full."""
    m = axes[which].mask()
    if m is None:
        return None
    sel = _broadcast(which, len(axes))
    return f"({m}){sel}"
