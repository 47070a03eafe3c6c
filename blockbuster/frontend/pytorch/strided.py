"""Every other column: strided slices (``x[..., ::2]``) and interleaving
(``torch.stack([a, b], -1).flatten(-2)``), as an interleaved rotary embedding
(GPT-J, Cohere) writes its rotation.

A block holds consecutive columns, so neither is a view of a tiled axis. Both are
linear maps of the last axis by constant 0/1 matrices — a selection ``S`` (one 1
per column) and placements ``P_j`` (piece ``j`` to columns ``n·i + j``) — imported
as matmuls with those matrices as weights: exact (each output is one product by 1
plus zeros; an infinite or NaN input spreads NaN along its row), and kernels the
fusion rules know. A strided slice of another axis is a view, that axis iterated
one index at a time (a batch, heads).
"""

from __future__ import annotations

import numpy as np

from ...ir.index import IConst
from ..tensors import values as V
from ..tensors.values import Value
from .dims import ImportError_


def strided_slice(low, node, x: Value, axis: int, start, end, step: int) -> Value:
    """``x[..., start:end:step, ...]`` along ``axis`` (``step`` > 1)."""
    n = x.shape[axis]
    start, end, _ = slice(start, end, step).indices(n)
    picked = list(range(start, end, step))
    if not picked:
        raise ImportError_(f"a strided slice [{start}:{end}:{step}] with no element")
    if x.axes[axis] is None:                    # broadcast: every index the same
        return V.replace_axes(x, axis, 1, (len(picked),), (None,), None)
    if axis != x.rank - 1:
        # a batch, head or sequence axis: iterated one index at a time (decided in
        # the planning pass already, so that both passes make the same dimensions)
        return _point_view(low, x, axis, start, step, len(picked))
    select = np.zeros((n, len(picked)))
    select[picked, np.arange(len(picked))] = 1.0
    return along_last_axis(low, node, x, axis, select, "select")


def _point_view(low, x: Value, axis: int, start: int, step: int, length: int) -> Value:
    low.planner.mark_point(x.axes[axis])
    part = low.planner.new(length, "")
    low.planner.mark_point(part)

    def loader(index):
        i = index[axis]
        at = i * step + start if not isinstance(i, IConst) else IConst(i.value * step + start)
        return x.load(tuple(index[:axis]) + (at,) + tuple(index[axis + 1:]))
    return V.replace_axes(x, axis, 1, (length,), (part,), loader)


def along_last_axis(low, node, x: Value, axis: int, matrix: np.ndarray, hint: str) -> Value:
    """``x`` with ``axis`` mapped through ``matrix`` (``[old, new]``), as a matmul."""
    last = x.rank - 1
    perm = list(range(x.rank))
    perm[axis], perm[last] = perm[last], perm[axis]
    moved = V.permute(x, perm) if axis != last else x
    weight = low.constant(node, f"{hint}_{node.name}", matrix)
    out = low.k.matmul(moved, weight, node.name)
    return V.permute(out, perm) if axis != last else out


def interleave_pieces(cat):
    """The pieces ``[a, b, ...]`` (FX nodes, each ``[..., m]``) if ``cat`` is
    ``cat([a[..., None], b[..., None], ...], -1)`` read only by a view that merges
    its last two axes (``torch.stack(..., -1).flatten(-2)``), else None."""
    if getattr(cat, "op", None) != "call_function" or \
            str(cat.target) != "aten.cat.default" or len(cat.users) != 1:
        return None
    val = cat.meta.get("val")
    rank = len(val.shape) if val is not None else 0
    dim = (cat.args[1] if len(cat.args) > 1 else 0) % max(rank, 1)
    (view,) = cat.users
    if rank < 2 or dim != rank - 1 or str(view.target) not in (
            "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default"):
        return None
    shape = tuple(int(s) for s in val.shape)
    out = tuple(int(s) for s in view.args[1])
    if out != shape[:-2] + (shape[-2] * shape[-1],):
        return None
    pieces = []
    for p in cat.args[0]:
        if str(getattr(p, "target", "")) != "aten.unsqueeze.default" or \
                p.args[1] % rank != rank - 1:
            return None
        pieces.append(p)
    return pieces


def interleave(low, node, pieces: list) -> Value:
    """``out[..., n·i + j] = pieces[j][..., i]``: the sum of each piece mapped
    through its placement matrix (the view ``node`` of the absorbed ``cat``)."""
    values = [low.values[p.args[0].name] if p.args[0].name in low.values
              else low.value(p.args[0]) for p in pieces]
    if any(v.loader is None for v in values):
        raise ImportError_("interleaving a scalar")
    n, m = len(values), values[0].shape[-1]
    total = None
    for j, v in enumerate(values):
        place = np.zeros((m, n * m))
        place[np.arange(m), n * np.arange(m) + j] = 1.0
        mapped = along_last_axis(low, node, v, v.rank - 1, place, f"place{j}")
        total = mapped if total is None else low.k.elementwise("add", [total, mapped],
                                                                node.name)
    return total

