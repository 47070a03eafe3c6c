"""ATen handlers that join tensors along an axis: ``cat`` (and the rotate-half
pattern ``cat([-x[..., h:], x[..., :h]], -1)``, one operator of its own) and
constant padding, a ``cat`` with constant blocks."""

from __future__ import annotations

import math

import numpy as np

from ..tensors import values as V
from ..tensors.values import Value, scalar
from .aten_registry import HANDLERS, Empty, handles
from .aten_registry import is_call as _is
from . import strided
from .dims import ImportError_


@handles("cat.default")
def _cat(low, node, xs, dim=0):
    pieces = [x for x in xs if not isinstance(x, Empty)]
    if len(pieces) == 1:
        return pieces[0]
    if not pieces:
        raise ImportError_("concatenation of empty tensors only")
    source = rotate_half_source(node)
    if source is not None:
        x = low.values[source.name] if source.name in low.values else low.value(source)
        if x.rank < 2 or x.shape[-2] == 1:        # one row: a decoding step's token
            return _rotate_half_of_a_row(low, node, x)
        return low.k.rotate_half(_one_block_rows(low, x, node.name), node.name)
    return _concat(low, node, pieces, dim % pieces[0].rank)


@handles("constant_pad_nd.default")
def _pad(low, node, x, pad, value=0.0):
    """``F.pad(x, pad, value=v)`` (constant mode): per axis, last first as ``pad``
    lists them, a negative amount is a slice and a positive one a constant block of
    ``v`` concatenated on that side (the axis's blocks then divide the pieces'
    lengths, as for any ``cat``)."""
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.rank:
        raise ImportError_(f"pad {pad}: two amounts per axis, for at most {x.rank} axes")
    for i in range(len(pad) // 2):
        axis = x.rank - 1 - i
        before, after = pad[2 * i], pad[2 * i + 1]
        if before < 0 or after < 0:           # a slice, as ``x[..., a:n-b]`` is
            n = x.shape[axis]
            x = HANDLERS["aten.slice.Tensor"](low, node, x, axis, max(-before, 0),
                                              n - max(-after, 0))
        pieces = [x]
        for amount, at in ((before, 0), (after, 1)):
            if amount > 0:
                shape = list(x.shape)
                shape[axis] = amount
                fill = np.full(shape, float(value))
                pieces.insert(0 if at == 0 else len(pieces),
                              low.constant(node, f"pad_{node.name}", fill))
        if len(pieces) > 1:
            x = _concat(low, node, pieces, axis)
    return x


def _rotate_half_of_a_row(low, node, x: Value) -> Value:
    """``cat(-x2, x1)`` of a tensor with no rows to tile (``[B, H, 1, D]``, one token
    of a decoding step; the rotate-half operator needs blocks of rows):
    ``out[j] = Σ_i where(P[i, j], s_i·x[i], 0)`` with ``P`` the halves' swap and
    ``s`` -1 on the second half, exact (one term per ``j``, no ``0·inf``)."""
    n = x.shape[-1]
    if n % 2:
        raise ImportError_(f"rotate-half of {n} columns (an odd number)")
    h = n // 2
    sign = np.where(np.arange(n) >= h, -1.0, 1.0)
    place = np.zeros((n, n))
    place[np.arange(h, n), np.arange(h)] = 1.0      # out[j] = -x[j + h], j < h
    place[np.arange(h), np.arange(h, n)] = 1.0      # out[j] = x[j - h], j >= h
    signed = low.k.elementwise("mul", [x, low.constant(node, f"rot_sign_{node.name}", sign)],
                               node.name)
    picked = low.k.elementwise("where", [low.constant(node, f"rot_{node.name}", place),
                                         V.insert_axis(signed, x.rank), scalar(0.0)],
                               node.name)
    return low.k.reduce("sum", picked, x.rank - 1, node.name)


def _one_block_rows(low, x: Value, what: str) -> Value:
    """``x`` whose last axis (the rotated columns) is one block: the rotate-half
    operator swaps the halves of each block, so a head cut into several blocks
    (a partial rotary embedding over more than one block) is an import error."""
    c = x.axes[-1] if x.rank else None
    if c is None:
        raise ImportError_("rotate-half of a broadcast axis")
    if low.planner.planning:
        low.planner.mark_tiled(c)
        low.planner.require_block(c, x.shape[-1], what)
    else:
        d = low.planner.dim(c)
        if d.point or d.nblocks != 1:
            raise ImportError_(f"rotate-half of {d.size} columns in blocks of {d.block} "
                               f"(the rotated columns must be one block)")
    return x


def _concat(low, node, pieces, axis: int) -> Value:
    """``cat(pieces, axis)`` of stored axes (a head's rotary columns and the columns
    that pass through): each piece is a block-aligned slice of the result's axis,
    the other axes are the pieces' own (one kernel, :meth:`KernelEmitter.concat`).
    Pieces with a broadcast axis (a class token ``[1, 1, E]`` expanded over the
    batch before the patches, a padding of one element), or cut where the axis's
    blocks cannot fall (retried, as slices are), are placed instead."""
    first, planner, what = pieces[0], low.planner, node.name
    if any(p.rank != first.rank for p in pieces) or any(
            p.shape[:axis] + p.shape[axis + 1:] != first.shape[:axis] + first.shape[axis + 1:]
            for p in pieces):
        raise ImportError_(f"cat of shapes {[list(p.shape) for p in pieces]} along axis "
                           f"{axis}: the other axes differ")
    broadcast_here = any(p.axes[axis] is None for p in pieces)
    broadcast_elsewhere = any((p.axes[q] is None) != (first.axes[q] is None)
                              for p in pieces for q in range(first.rank) if q != axis)
    if what in low.by_selection or broadcast_here or broadcast_elsewhere:
        # A broadcast piece, or pieces whose edges no block falls on (a first
        # lowering found them so: 4 + 4 rotary columns of an 8-wide block).
        return _placed(low, node, pieces, axis)
    for p in pieces:          # (the other axes stored in every piece, or in none)
        for q, (a, b) in enumerate(zip(first.axes, p.axes)):
            if q != axis and a is not None:
                planner.unify(a, b, what)
    total = sum(p.shape[axis] for p in pieces)
    out = planner.new(total, "")
    start = 0
    for p in pieces:
        end = start + p.shape[axis]
        planner.link_slice(out, p.axes[axis], what, math.gcd(start, end))
        start = end
    return low.k.concat(pieces, axis, out, what)


def _placed(low, node, pieces, axis: int) -> Value:
    """``cat(pieces, axis)`` as a sum of the pieces, each put in its place: a piece
    of one broadcast element by a 0/1 mask of its position (a ``where``), any other
    through a constant 0/1 placement matrix along ``axis`` (a matmul, as
    :mod:`.strided` slices: an infinite element spreads NaN along its row). The
    pieces' other axes broadcast as in any elementwise sum. Chosen only where the
    block-aligned concatenation cannot be."""
    total = sum(p.shape[axis] for p in pieces)
    k, out, start = low.k, None, 0
    for j, p in enumerate(pieces):
        n = p.shape[axis]
        if p.axes[axis] is None:      # not stored: one element, or expanded (all equal)
            at = np.zeros([total] + [1] * (p.rank - 1 - axis))
            at[start:start + n] = 1.0
            mask = low.constant(node, f"place{j}_{node.name}", at)
            placed = k.elementwise("where", [mask, p, scalar(0.0)], node.name)
        else:
            matrix = np.zeros((n, total))
            matrix[np.arange(n), start + np.arange(n)] = 1.0
            placed = strided.along_last_axis(low, node, p, axis, matrix, f"place{j}")
        out = placed if out is None else k.elementwise("add", [out, placed], node.name)
        start += n
    return out


def retiled(low, node, v: Value, axis: int) -> Value:
    """``v`` with ``axis`` (iterated one index at a time: patches split off an
    image's columns) copied into an axis of its own that can be tiled: the sum over
    ``i`` of ``where(I[i, t], v[.., i], 0)``, exact."""
    n, last = v.shape[axis], v.rank - 1
    perm = list(range(v.rank))
    perm[axis], perm[last] = perm[last], perm[axis]
    moved = V.insert_axis(V.permute(v, perm), v.rank)          # [.., n, 1]
    eye = low.constant(node, f"tiles_{node.name}", np.eye(n))
    picked = low.k.elementwise("where", [eye, moved, scalar(0.0)], node.name)
    return V.permute(low.k.reduce("sum", picked, v.rank - 1, node.name), perm)


def _slice_of(node):
    """(source, dim, start, end) of an ``aten.slice`` node."""
    args = list(node.args) + [None] * 5
    return args[0], args[1] or 0, args[2] or 0, args[3]


def rotate_half_source(cat):
    """``x`` if ``cat`` is ``cat([-x[..., h:], x[..., :h]], -1)``, else None."""
    if not _is(cat, "aten.cat.default") or len(cat.args[0]) != 2:
        return None
    rank = len(cat.meta["val"].shape)
    dim = (cat.args[1] if len(cat.args) > 1 else 0) % rank
    neg, lo = cat.args[0]
    if not (_is(neg, "aten.neg.default") and _is(neg.args[0], "aten.slice.Tensor")
            and _is(lo, "aten.slice.Tensor")):
        return None
    src_hi, d_hi, start_hi, end_hi = _slice_of(neg.args[0])
    src_lo, d_lo, start_lo, end_lo = _slice_of(lo)
    n = src_hi.meta["val"].shape[-1]
    if src_hi is not src_lo or dim != rank - 1 or d_hi % rank != dim or \
            d_lo % rank != dim or n % 2:
        return None
    if start_hi != n // 2 or min(end_hi, n) != n or start_lo != 0 or end_lo != n // 2:
        return None
    return src_hi
