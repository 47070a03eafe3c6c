"""Block indices as code: IR index expressions, global offsets and masks of blocks.

A block index is an ``int`` when every variable it uses is bound to a known block
(the kernel's one-block loops, unrolled ``map``s), else Triton code over the
runtime variables (program-id digits, ``for`` loop counters). ``h // g`` (grouped
heads) is integer division of non-negative indices in both.
"""

from __future__ import annotations

from blockbuster.ir.expr import Expr
from blockbuster.ir.index import IBin, IConst, IVar, Idx
from blockbuster.ir.walk import bound_var, reindex
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


def named(g, frame: Frame, key: tuple, code: str, stem: str = "v") -> str:
    """``code`` computed once per scope: the name a scope or one around it gave it,
    else a fresh one assigned in ``frame`` (every Triton operation costs the
    interpreter about a millisecond; masks and positions recur in every access)."""
    f = frame
    while f is not None:
        hit = f.memo.get(key)
        if hit is not None:
            return hit
        f = f.parent
    name = g.names.fresh(stem)
    frame.lines.append(f"{name} = {code}")
    frame.memo[key] = name
    return name


def positions(g, frame: Frame, axis: Axis) -> str:
    """Code of the axis's element positions along its dimension."""
    start = axis.start()
    if start == "0":
        return arange(axis.dim)
    return named(g, frame, ("pos", axis.dim.name, axis.block),
                 f"{start} + {arange(axis.dim)}", stem="pos")


def valid(g, frame: Frame, axis: Axis) -> str | None:
    """The name of the axis's mask of valid elements; None when all are valid."""
    m = axis.mask()
    if m is None:
        return None
    return named(g, frame, ("mask", axis.dim.name, axis.block), m, stem="mask")


def block_access(g, frame: Frame, dims: list[Dim], blocks: list, strides: list[int]):
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
        pos = positions(g, frame, axis) + sel
        vector_parts.append(pos if stride == 1 else f"{pos} * {stride}")
        m = valid(g, frame, axis)
        if m is not None:
            masks.append(f"{m}{sel}")
    offsets = " + ".join(scalar_parts + vector_parts) or "0"
    mask = " & ".join(masks) if masks else None
    return offsets, mask, tuple(axes)


def _broadcast(position: int, rank: int) -> str:
    if rank <= 1:
        return ""
    return "[" + ", ".join(":" if i == position else "None" for i in range(rank)) + "]"


def axis_mask(g, frame: Frame, axes: tuple, which: int) -> str | None:
    """The mask of axis ``which`` broadcast over ``axes``; None when it is full."""
    m = valid(g, frame, axes[which])
    if m is None:
        return None
    return m + _broadcast(which, len(axes))


def substitute_var(node: Expr, var: str, value: int, memo: dict) -> Expr:
    """``node`` with the block index ``var`` replaced by the constant ``value`` in its
    loads, positions and reduction bounds (below a binder of ``var``, only in that
    binder's bounds). ``get``/``runmax`` keep naming ``var``: the scope still binds it.
    A body evaluated for one known block then depends on nothing it does not read,
    so placement hoists a load that is the same for every trip out of the loops."""
    mapping = {var: IConst(value)}

    def go(n: Expr) -> Expr:
        if var not in n.free_vars:
            return n
        hit = memo.get(n)
        if hit is None:
            args = n.args if bound_var(n) == var else tuple(go(a) for a in n.args)
            hit = Expr(n.op, args, n.attr)
            if n.op not in ("runmax", "get"):
                hit = reindex(hit, mapping)
            memo[n] = hit
        return hit

    return go(node)
