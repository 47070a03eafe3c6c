"""Reshapes of tensor values as views: an axis split into heads, heads merged back,
batch and rows merged and split again, size-1 axes kept or dropped (:func:`reshape`,
:func:`split_view`, :func:`merge_view`). Each is a new loader over the same array
(:mod:`.values`): no kernel, no copy."""

from __future__ import annotations

from collections.abc import Sequence

from ...ir.expr import Expr
from ...ir.index import IConst
from .errors import TensorError
from .values import (Index, Planner, Value, planning_loader, replace_axes, across, drop_axis,
                     insert_axis, relabel_side)


def reshape(planner: Planner, v: Value, shape: Sequence[int], what: str) -> Value:
    """A view with a new shape: size-1 axes come and go; an axis splits into
    (heads, head size) or merges back; point axes split and merge freely."""
    shape = _infer(list(shape), v.shape, what)
    if tuple(shape) == v.shape:
        return v
    # Work on the non-broadcast structure: drop every size-1 axis, regroup, re-add.
    # A stored size-1 axis (an input's one row: a single token) stays where the new
    # shape has a size-1 axis after the same elements ((B, 1, E) viewed as
    # (B, 1, H, D)): its block keeps its rows, as at any other length.
    v, shape = _rows_of_one(planner, v, list(shape), what)
    if tuple(shape) == v.shape:
        return v
    kept = _kept_units(v, shape)
    out = v
    for p in reversed(range(out.rank)):
        if out.shape[p] == 1 and p not in kept:
            out = drop_axis(out, p, planner)
    new_units = set(kept.values())
    core = [s for j, s in enumerate(shape) if s != 1 or j in new_units]
    out = _regroup(planner, out, core, what)
    for p, s in enumerate(shape):
        if s == 1 and p not in new_units:
            out = insert_axis(out, p)
    return out


def _starts(sh) -> list[int]:
    out, n = [], 1
    for s in sh:
        out.append(n)
        n *= s
    return out


def _rows_of_one(planner: Planner, v: Value, shape: list, what: str):
    """Sequences of one token flattened into rows and back: ``[B, 1, E]`` (the
    input's stored one-row axis) viewed as ``[B, E]`` merges the batch with that
    row axis, as ``[B, T, E] -> [B·T, E]`` does (a row block is one sequence);
    ``[B·1, N] -> [B, 1, N]`` splits such a merged axis back. Returns the value
    with those axes regrouped and the shape still to reach."""
    old_at, new_at = _starts(v.shape), _starts(shape)
    p = 1
    while p < v.rank:                 # stored unit after a stored axis, merged away
        if v.shape[p] == 1 and v.axes[p] is not None and v.axes[p - 1] is not None \
                and v.shape[p - 1] > 1 and not any(
                    new_at[j] == old_at[p] and shape[j] == 1 for j in range(len(shape))) \
                and any(new_at[j] == old_at[p - 1] and shape[j] == v.shape[p - 1]
                        for j in range(len(shape))):
            v = _merge(planner, v, p - 1, 2, what)
            old_at = _starts(v.shape)
        p += 1
    unit_merge = getattr(planner, "unit_merge", None)
    if unit_merge is None:
        return v, shape
    p = 0
    while p < v.rank:                 # such a merged axis split back into (B, 1)
        c = v.axes[p]
        js = [j for j in range(len(shape) - 1) if new_at[j] == old_at[p]
              and shape[j] == v.shape[p] and shape[j + 1] == 1]
        if c is not None and v.shape[p] > 1 and unit_merge(c) and js:
            v = _split(planner, v, p, [v.shape[p], 1], what)
            old_at = _starts(v.shape)
            p += 1
        p += 1
    return v, shape


def _kept_units(v: Value, shape: Sequence[int]) -> dict[int, int]:
    """Stored size-1 axes of ``v`` (old position -> new position) that the new shape
    keeps: a size-1 axis of ``shape`` preceded by as many elements; of several, the
    last (leading size-1 axes are batches; a block's rows sit next to its columns)."""
    def starts(sh):
        out, n = [], 1
        for s in sh:
            out.append(n)
            n *= s
        return out
    old_at, new_at = starts(v.shape), starts(shape)
    kept: dict[int, int] = {}
    for p, (s, c) in enumerate(zip(v.shape, v.axes)):
        if s != 1 or c is None:
            continue
        free = [j for j, t in enumerate(shape) if t == 1 and new_at[j] == old_at[p]
                and j not in kept.values()]
        if free:
            kept[p] = free[-1]
    return kept


def _infer(shape: list[int], old: tuple, what: str) -> list[int]:
    total = 1
    for s in old:
        total *= s
    if shape.count(-1) == 1:
        rest = 1
        for s in shape:
            if s != -1:
                rest *= s
        shape[shape.index(-1)] = total // max(rest, 1)
    n = 1
    for s in shape:
        n *= s
    if n != total:
        raise TensorError(f"{what}: cannot view {list(old)} as {shape}")
    return shape


def _regroup(planner: Planner, v: Value, shape: list[int], what: str) -> Value:
    """Reshape between two shapes without size-1 axes: both are cut at the union of
    their axes' boundaries (``[2, 72]`` viewed as ``[8, 18]``: the 72 splits into
    (4, 18), then the 2 merges with the 4); old axes split into their pieces, then
    pieces merge into the new axes."""
    def bounds(sh):
        out, n = [], 1
        for s in sh:
            n *= s
            out.append(n)
        return out
    old_b, new_b = bounds(v.shape), bounds(shape)
    if (old_b[-1] if old_b else 1) != (new_b[-1] if new_b else 1):
        raise TensorError(f"{what}: cannot view {list(v.shape)} as {shape}")
    cuts = sorted(set(old_b) | set(new_b))
    prev = 1
    for c in cuts:
        if c % prev:
            raise TensorError(f"{what}: cannot view {list(v.shape)} as {shape}")
        prev = c

    def pieces(sh_bounds):         # per axis: the sizes of the pieces it is cut into
        out, lo = [], 1
        for hi in sh_bounds:
            inside = [c for c in cuts if lo < c <= hi]
            sizes, at = [], lo
            for c in inside:
                sizes.append(c // at)
                at = c
            out.append(sizes)
            lo = hi
        return out
    out = v
    for p, sizes in reversed(list(enumerate(pieces(old_b)))):
        if len(sizes) > 1:
            out = _split(planner, out, p, sizes, what)
    pos = 0
    for sizes in pieces(new_b):
        if len(sizes) > 1:
            out = _merge(planner, out, pos, len(sizes), what)
        pos += 1
    return out


def _split(planner: Planner, v: Value, at: int, parts: list[int], what: str) -> Value:
    cls = v.axes[at]
    if cls is None:                                  # an expanded axis: stays broadcast
        return replace_axes(v, at, 1, tuple(parts), (None,) * len(parts), None)
    if len(parts) > 2:               # (groups, heads, head size): split twice
        rest = 1
        for s in parts[1:]:
            rest *= s
        out = _split(planner, v, at, [parts[0], rest], what)
        return _split(planner, out, at + 1, parts[1:], what)
    heads, size = parts
    outer, inner = planner.new(heads, "H"), planner.new(size, "HD")
    planner.link_split(cls, outer, inner, what)
    if planner.planning:
        return replace_axes(v, at, 1, (heads, size), (outer, inner), planning_loader)
    return split_view(planner, v, at, outer, inner, what)


def split_view(planner: Planner, v: Value, at: int, heads, inner, what: str) -> Value:
    """Axis ``at`` viewed as (``heads``, ``inner``) axes. A point axis splits by index
    arithmetic; on a tiled axis head h is column block h (the block is one head) or,
    when ``inner`` has several blocks, the blocks ``h·n .. h·n + n - 1``."""
    size = planner.dim(inner).size
    sizes, axes = (planner.dim(heads).size, size), (heads, inner)
    if planner.dim(v.axes[at]).point:                # a point axis: index arithmetic
        def loader(index: Index) -> Expr:
            o, i = index[at], index[at + 1]
            return v.load(tuple(index[:at]) + (o * size + i,) + tuple(index[at + 2:]))
        return replace_axes(v, at, 1, sizes, axes, loader)
    side = v.order.index(at)                         # the block's columns or rows
    inner_dim = planner.dim(inner).name
    per_head = planner.dim(inner).nblocks            # blocks per head

    def loader(index: Index) -> Expr:                # head h = the blocks of h
        h, d = index[at], index[at + 1]
        col = across(h) if per_head == 1 else h * per_head + d
        old = tuple(index[:at]) + (col,) + tuple(index[at + 2:])
        return relabel_side(v.load(old), side, len(v.order), inner_dim, index[at + 1])
    return replace_axes(v, at, 1, sizes, axes, loader)


def _merge(planner: Planner, v: Value, at: int, count: int, what: str) -> Value:
    if count != 2:
        raise TensorError(f"{what}: merging {count} axes into one is not supported")
    c1, c2 = v.axes[at], v.axes[at + 1]
    n1, n2 = v.shape[at], v.shape[at + 1]
    if c1 is None and c2 is None:
        return replace_axes(v, at, 2, (n1 * n2,), (None,), None)
    if c1 is None:
        raise TensorError(f"{what}: tiling an axis by repetition is not supported")
    merged = planner.new(n1 * n2, "H" if c2 is None else "E")
    planner.link_merge(c1, c2, merged, what)
    if planner.planning:
        return replace_axes(v, at, 2, (n1 * n2,), (merged,), planning_loader)
    return merge_view(planner, v, at, merged, what)


def merge_view(planner: Planner, v: Value, at: int, merged, what: str) -> Value:
    """Axes ``at`` and ``at + 1`` viewed as one axis ``merged``: (key/value heads,
    shared copies) -> heads reads head ``h // copies``; two point axes (batch ×
    heads) split a point index back; (heads, tiled head columns) -> column block m is
    head m."""
    c1, c2 = v.axes[at], v.axes[at + 1]
    n2 = v.shape[at + 1]
    size = (v.shape[at] * n2,)
    d1, dm = planner.dim(c1), planner.dim(merged)
    if c2 is None:                    # (kv heads, shared copies) -> heads: h // copies
        def loader(index: Index) -> Expr:
            h = index[at]
            return v.load(tuple(index[:at]) + (h // n2, None) + tuple(index[at + 1:]))
        return replace_axes(v, at, 2, size, (merged,), loader)
    d2 = planner.dim(c2)
    if d1.point and d2.point:         # batch × heads: a point index splits back
        def loader(index: Index) -> Expr:
            m = index[at]
            return v.load(tuple(index[:at]) + (m // n2, m - (m // n2) * n2)
                          + tuple(index[at + 1:]))
        return replace_axes(v, at, 2, size, (merged,), loader)
    if not d1.point:
        raise TensorError(f"{what}: merging two tiled axes ({d1.name} × {d2.name}) is "
                          f"not supported (only heads × head columns, or point axes)")
    # Heads × head columns, or batch × rows (``x.view(-1, E)`` of a [B, T, E]
    # tensor): block m of the merged axis is block m of the point index m.
    side = v.order.index(at + 1)
    per_head = d2.nblocks                            # blocks per head

    def loader(index: Index) -> Expr:                # block m = head m
        m = index[at]
        head, blk = (across(m), IConst(0)) if per_head == 1 else \
            (m // per_head, m - (m // per_head) * per_head)
        inner = v.load(tuple(index[:at]) + (head, blk) + tuple(index[at + 1:]))
        return relabel_side(inner, side, len(v.order), dm.name, m)
    return replace_axes(v, at, 2, size, (merged,), loader)
