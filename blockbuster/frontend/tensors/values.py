"""Tensors of any rank as views of global arrays.

A :class:`Value` is what one PyTorch tensor became: its shape, the dimension class
of each axis (``None`` for an axis that is broadcast: size 1, or expanded from size
1) and a *loader*: given the block index of each axis, the expression of that
block. A loaded block has the value's *tiled* axes only (point axes index one
element; broadcast axes are not indexed); ``order`` says which axes, in the order
the loaded expression has them (a transposed view loads ``transpose(load(...))``
lazily by reporting the reversed order).

Views — permute, reshapes that split an axis into heads or merge heads back
(:mod:`.reshapes`), the key/value heads that several query heads share — are new
loaders over the same array: no kernel, no copy. The fusion rules see exactly what the kernels read.
"""

from __future__ import annotations

import math

from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from ...ir import expr as E
from ...ir.expr import Expr
from ...ir.index import IConst, Idx, IVar
from .errors import TensorError, UnalignedSlice


class Planner(Protocol):
    """Which program dimension each axis is (see the package docstring)."""

    planning: bool

    def dim(self, axis): ...
    def unify(self, a, b, what: str): ...
    def mark_tiled(self, axis) -> None: ...
    def mark_point(self, axis) -> None: ...
    def new(self, size: int, hint: str): ...


Index = tuple  # per axis: Idx (block index) or None (broadcast axis)
Loader = Callable[[Index], Expr]


@attrs.frozen
class Value:
    shape: tuple[int, ...]
    axes: tuple                      # per axis its planner's dimension; None: broadcast
    loader: Loader | None            # None for a Python scalar
    order: tuple[int, ...] = ()      # tiled axes (positions) in the loaded block's order
    scalar: float | None = None
    array: str | None = None         # the array it views (for messages and outputs)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def load(self, index: Index) -> Expr:
        if self.loader is None:
            return E.const(self.scalar)
        return self.loader(tuple(index))


def scalar(x: float) -> Value:
    return Value((), (), None, (), float(x))


def array_value(planner: Planner, name: str, shape: Sequence[int],
                axes: Sequence[int | None]) -> Value:
    """The value of global array ``name`` whose dims are the non-broadcast axes."""
    stored = [p for p, c in enumerate(axes) if c is not None]

    def loader(index: Index) -> Expr:
        return E.load(name, *[index[p] for p in stored])
    order = tuple(p for p in stored if not planner.dim(axes[p]).point)
    return Value(tuple(shape), tuple(axes), loader, order, array=name)


def tiled_positions(planner: Planner, v: Value) -> tuple[int, ...]:
    return tuple(p for p, c in enumerate(v.axes) if c is not None
                 and not planner.dim(c).point)


# --- views -----------------------------------------------------------------------------

def permute(v: Value, perm: Sequence[int]) -> Value:
    perm = [p % v.rank for p in perm] if v.rank else []
    inverse = {old: new for new, old in enumerate(perm)}

    def loader(index: Index) -> Expr:
        old = [None] * v.rank
        for new, p in enumerate(perm):
            old[p] = index[new]
        return v.load(tuple(old))
    return attrs.evolve(v, shape=tuple(v.shape[p] for p in perm),
                        axes=tuple(v.axes[p] for p in perm),
                        loader=loader if v.loader else None,
                        order=tuple(inverse[p] for p in v.order))


def expand(v: Value, shape: Sequence[int], planner: Planner | None = None) -> Value:
    """Broadcast to ``shape`` (new leading axes and size-1 axes become broadcast; a
    stored size-1 axis needs the ``planner``, see :func:`unstore_unit`)."""
    shape = tuple(v.shape[i - (len(shape) - v.rank)] if s == -1 else s
                  for i, s in enumerate(shape))
    lead = len(shape) - v.rank
    if lead < 0:
        raise TensorError(f"expand: {list(v.shape)} to fewer axes {list(shape)}")
    for p, (old, new) in enumerate(zip(v.shape, shape[lead:])):
        if old != new and old != 1:
            raise TensorError(f"expand: axis {p} of {old} cannot become {new}")
        if old != new and v.axes[p] is not None:
            if planner is None:
                raise TensorError(f"expand: axis {p} of size 1 is stored")
            v = unstore_unit(planner, v, p)
    return _pad(v, lead, shape)


def _pad(v: Value, lead: int, shape: tuple) -> Value:
    def loader(index: Index) -> Expr:
        return v.load(tuple(index[lead:]))
    return attrs.evolve(v, shape=shape, axes=(None,) * lead + v.axes,
                        loader=loader if v.loader else None,
                        order=tuple(p + lead for p in v.order))


def insert_axis(v: Value, at: int) -> Value:
    """``unsqueeze``: a broadcast axis of size 1 at position ``at``."""
    def loader(index: Index) -> Expr:
        return v.load(tuple(index[:at]) + tuple(index[at + 1:]))
    return attrs.evolve(v, shape=v.shape[:at] + (1,) + v.shape[at:],
                        axes=v.axes[:at] + (None,) + v.axes[at:],
                        loader=loader if v.loader else None,
                        order=tuple(p + (p >= at) for p in v.order))


def drop_axis(v: Value, at: int, planner: Planner | None = None) -> Value:
    """``squeeze``/``select`` of a broadcast axis (size 1 or expanded; a stored
    size-1 axis with the ``planner``, see :func:`unstore_unit`)."""
    if v.axes[at] is not None and v.shape[at] == 1 and planner is not None:
        v = unstore_unit(planner, v, at)
    if v.axes[at] is not None:
        raise TensorError(f"cannot drop axis {at} of size {v.shape[at]}")

    def loader(index: Index) -> Expr:
        return v.load(tuple(index[:at]) + (None,) + tuple(index[at:]))
    return attrs.evolve(v, shape=v.shape[:at] + v.shape[at + 1:],
                        axes=v.axes[:at] + v.axes[at + 1:],
                        loader=loader if v.loader else None,
                        order=tuple(p - (p > at) for p in v.order))


def unstore_unit(planner: Planner, v: Value, at: int) -> Value:
    """The stored size-1 axis ``at`` (one row ``[1, E]`` of an input) as a broadcast
    axis, to broadcast against a longer one: a tiled unit axis is summed out of the
    block (``colsum`` of a one-row block is that row: exact), a point one is
    indexed at 0."""
    c = v.axes[at]
    if c is None or v.shape[at] != 1:
        raise TensorError(f"axis {at} of size {v.shape[at]} is not a stored unit axis")
    tiled = at in v.order and not planner.planning
    side = v.order.index(at) if tiled else None

    def loader(index: Index) -> Expr:
        e = v.load(tuple(index[:at]) + (IConst(0),) + tuple(index[at + 1:]))
        if side is None:
            return e
        if len(v.order) == 1:
            raise TensorError("a single stored unit axis cannot broadcast")
        return E.call("colsum" if side == 0 else "rowsum", e)
    return attrs.evolve(v, axes=v.axes[:at] + (None,) + v.axes[at + 1:],
                        loader=loader, order=tuple(p for p in v.order if p != at))


def planning_loader(index: Index) -> Expr:
    """Planning-pass loader: the planning pass only learns dimensions."""
    return E.const(0.0)


def replace_axes(v: Value, at: int, count: int, sizes: tuple, axes: tuple,
                  loader: Loader | None) -> Value:
    delta = len(sizes) - count

    def default(index: Index) -> Expr:
        return v.load(tuple(index[:at]) + (None,) * count + tuple(index[at + len(sizes):]))
    order = []
    for p in v.order:
        if p < at:
            order.append(p)
        elif p >= at + count:
            order.append(p + delta)
        else:
            order.append(at + len(sizes) - 1 if delta >= 0 else at)
    return attrs.evolve(v, shape=v.shape[:at] + sizes + v.shape[at + count:],
                        axes=v.axes[:at] + axes + v.axes[at + count:],
                        loader=(loader or default) if v.loader else None,
                        order=tuple(dict.fromkeys(order)))


def across(ix: Idx) -> Idx:
    """A block index used for another dimension than its variable runs over (a head
    as a column block): written ``h // 1``, the IR's form for such an index."""
    return ix // 1 if isinstance(ix, IVar) else ix


def slice_axis(planner: Planner, v: Value, axis: int, start, end, step, what: str) -> Value:
    """``v[..., start:end, ...]`` along ``axis``: free on a broadcast or point axis;
    on a tiled axis only whole blocks (a block-aligned start; the end aligned or the
    axis's end), so the slice is a view with shifted block indices."""
    n = v.shape[axis]
    start = 0 if start is None else (start + n if start < 0 else start)
    end = n if end is None else (end + n if end < 0 else min(end, n))
    if step != 1:
        raise TensorError(f"{what}: slicing with a step of {step} is not supported")
    if (start, end) == (0, n):
        return v
    length = end - start
    cls = v.axes[axis]
    if cls is None:
        return replace_axes(v, axis, 1, (length,), (None,), None)
    if length == 1:
        return _pick(planner, v, axis, start, what)
    part = planner.new(length, "")
    planner.link_slice(cls, part, what, math.gcd(start, end if end != n else 0))
    if planner.planning:
        return replace_axes(v, axis, 1, (length,), (part,), planning_loader)
    return slice_view(planner, v, axis, start, end, part, what)


def _pick(planner: Planner, v: Value, axis: int, at: int, what: str) -> Value:
    """``v[..., at:at+1, ...]`` of a point axis: a size-1 (broadcast) axis, like any
    other size-1 axis (a multi-query attention's one key head broadcasts)."""
    if planner.planning:
        return replace_axes(v, axis, 1, (1,), (None,), planning_loader)
    if not planner.dim(v.axes[axis]).point:
        raise UnalignedSlice(f"{what}: a single element [{at}] of an axis tiled in "
                             f"blocks (only whole blocks can be sliced)", node=what)

    def loader(index: Index) -> Expr:
        return v.load(tuple(index[:axis]) + (IConst(at),) + tuple(index[axis + 1:]))
    return replace_axes(v, axis, 1, (1,), (None,), loader)


def slice_view(planner: Planner, v: Value, axis: int, start: int, end: int, part,
               what: str) -> Value:
    """``v[..., start:end, ...]`` along ``axis`` as the axis ``part``: any range of a
    point axis; whole blocks of a tiled one (shifted block indices)."""
    n, length = v.shape[axis], end - start
    d = planner.dim(v.axes[axis])
    if d.point:
        def loader(index: Index) -> Expr:
            return v.load(tuple(index[:axis]) + (index[axis] + start,)
                          + tuple(index[axis + 1:]))
        return replace_axes(v, axis, 1, (length,), (part,), loader)
    if start % d.block or (end % d.block and end != n):
        raise UnalignedSlice(f"{what}: slicing [{start}:{end}] of an axis tiled in blocks "
                             f"of {d.block} (only whole blocks can be sliced)", node=what)
    offset = start // d.block
    label = planner.dim(part).name
    at = v.order.index(axis) if axis in v.order else None

    def loader(index: Index) -> Expr:
        i = index[axis]
        e = v.load(tuple(index[:axis]) + (i + offset if offset else across(i),)
                   + tuple(index[axis + 1:]))
        # the block's axis is the part now (a vector's only axis too: a slice of a
        # projection whose rows are iterated one index at a time)
        return e if at is None else relabel_side(e, at, len(v.order), label, i)
    return replace_axes(v, axis, 1, (length,), (part,), loader)


def relabel_at(e: Expr, at: int, dim: str, index) -> Expr:
    """Block ``e`` with its axis ``at`` (0: rows, 1: columns) labelled ``dim`` (the
    dimension of a slice or a concatenation, whose blocks are those of another)."""
    if at == 1:
        return E.call("relabel", E.pos(dim, index), _unlabelled(e))
    return E.call("transpose", E.call("relabel", E.pos(dim, index), E.call("transpose", e)))


def relabel_side(e: Expr, side: int, tiled: int, dim: str, index) -> Expr:
    """Block ``e`` (of ``tiled`` axes) with its axis ``side`` labelled ``dim``; a
    vector's only axis is relabelled as a block's columns are."""
    if tiled == 2 and side == 0:
        return relabel_at(e, 0, dim, index)
    return E.call("relabel", E.pos(dim, index), _unlabelled(e))


def _unlabelled(e: Expr) -> Expr:
    """``e`` without a column relabelling (another one replaces it)."""
    return e.args[1] if e.op == "relabel" else e
