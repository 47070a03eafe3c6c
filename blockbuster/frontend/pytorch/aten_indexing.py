"""ATen handlers that pick elements: slices and ``select`` (one position of a tiled
axis too), indexing with tensors, and lookups by index values (``embedding``,
``gather``: a one-hot of the indices times the table)."""

from __future__ import annotations

import math

import numpy as np

from ...ir import expr as E
from ..tensors import values as V
from ..tensors.errors import UnalignedSlice
from ..tensors.values import Value
from . import strided
from .aten_registry import handles, is_call as _is
from .dims import MIN_BLOCK_PER_HEAD, ImportError_


@handles("slice.Tensor")
def _slice(low, node, x, dim=0, start=None, end=None, step=1):
    if step != 1:
        return strided.strided_slice(low, node, x, dim % x.rank, start, end, step)
    axis, n = dim % x.rank, x.shape[dim % x.rank]
    first, stop, _ = slice(start, end, 1).indices(n)
    return cut(low, node, x, axis, first, stop)


def cut(low, node, x: Value, axis: int, start: int, stop: int) -> Value:
    """``x[..., start:stop, ...]`` along ``axis`` (bounds normalised, ``start <
    stop``): a view where the cut falls on block edges, a masked pick of one element
    of a tiled axis, else a selection matrix (``narrow_cut``)."""
    if narrow_cut(low, node, x, axis, start, stop):
        return unaligned_slice(low, node, x, axis, start, stop)
    if stop - start == 1 and _tiled_now(low, x, axis):
        return _pick_tiled(low, node, x, axis, start)
    return V.slice_axis(low.planner, x, axis, start, stop, 1, node.name)


def narrow_cut(low, node, x: Value, axis: int, start: int, stop: int) -> bool:
    """Is the slice (of ``node``) of ``axis`` of ``x`` taken through a selection
    matrix: on the last axis where only blocks narrower than ``MIN_BLOCK_PER_HEAD``
    columns would fall on its edges (the 4 rotated columns of a 16-wide head, a
    question-answering head's two logits split in ones: blocks that narrow would slow
    every kernel that reads the axis), on any stored axis where a first lowering found
    it off the blocks?"""
    n = x.shape[axis]
    if x.axes[axis] is None or (start, stop) == (0, n):
        return False
    if node.name in low.by_selection:     # any stored axis (permuted to the last)
        return True
    return axis == x.rank - 1 and math.gcd(start, stop if stop != n else 0) < MIN_BLOCK_PER_HEAD


def unaligned_slice(low, node, x: Value, axis: int, start: int, stop: int) -> Value:
    """``x[..., start:stop, ...]`` along ``axis`` (a ``narrow_cut``): a product with
    a constant 0/1 selection matrix, exact, as a strided slice is."""
    select = np.zeros((x.shape[axis], stop - start))
    select[np.arange(start, stop), np.arange(stop - start)] = 1.0
    return strided.along_last_axis(low, node, x, axis, select, "select")


def _tiled_now(low, x: Value, axis: int) -> bool:
    """Is ``axis`` of ``x`` tiled in blocks (known in the emitting pass only: the
    planning pass takes a one-element slice for a view, as of a point axis, and
    notes that a kernel may read ``x`` whole, so that at most two of its axes are
    tiled)?"""
    c = x.axes[axis]
    if low.planner.planning:
        if c is not None:
            low.planner.note_tensor(x.axes)
        return False
    return c is not None and not low.planner.dim(c).point


def _pick_tiled(low, node, x: Value, axis: int, at: int) -> Value:
    """``x[..., at:at+1, ...]`` of a tiled axis (BERT's first token ``h[:, 0]``, the
    last position's logits ``h[:, -1:]``): the blocks with every other element of
    the axis masked to 0, summed over the axis (exact: one term plus zeros; a
    select, not a product, so an infinity elsewhere does not become NaN)."""
    k = low.k
    tiled = k.tiled(x)
    if len(tiled) != 2:      # no second axis to mask along: through a selection
        raise UnalignedSlice(f"{node.name}: a single element [{at}] of an axis tiled in "
                             f"blocks", node=node.name)
    other = tiled[1] if tiled[0] == axis else tiled[0]
    dim, odim = (low.planner.dim(x.axes[a]).name for a in (axis, other))

    def value(index):
        hit = E.call("eq", E.pos(dim, index[axis]), E.const(float(at)))
        ones = E.call("ones", E.pos(odim, index[other]))
        mask = E.call("outer", hit, ones) if axis == tiled[0] else E.call("outer", ones, hit)
        return E.call("where", mask, k.block(x, index), E.const(0.0))
    masked = k.emit("pick", x.shape, x.axes, value)
    return k.reduce("sum", masked, axis, node.name, keepdim=True)


@handles("select.int")
def _select(low, node, x, dim, index):
    """``x[i]``: one element of an axis (a view of a point or size-1 axis; of a
    tiled one, a kernel that picks it), the axis dropped."""
    dim %= x.rank
    index %= x.shape[dim]
    return V.drop_axis(cut(low, node, x, dim, index, index + 1), dim, low.planner)


@handles("index.Tensor")
def _index(low, node, x, indices):
    """``x[i0, i1, ...]`` with constant index tensors, each counting up by one along
    at most one axis of their broadcast shape (and constant along the others):
    slices of ``x`` arranged into that shape, a view. Covers a multi-query
    attention picking its key and value head out of a fused projection
    (``qkv[..., [-2], :]``) and the padding masks Hugging Face builds with
    ``mask[batch_idx, kv_idx]`` over ``arange`` indices. Other advanced indexing
    (indices that depend on the inputs, a diagonal ``x[i, i]``, a permutation) is
    left out."""
    used = [(axis, a) for axis, a in enumerate(node.args[1]) if a is not None]
    if used and any(getattr(a, "name", None) in low.dynamic for _, a in used):
        return _index_by_values(low, node, x, indices, used)
    if not used:
        raise ImportError_("indexing with tensors: only constant indices are supported")
    arrays = []
    for axis, a in used:
        t = low.recorded.get(a.name)
        if t is None or t.dtype.is_floating_point or t.numel() == 0:
            raise ImportError_("indexing with tensors: only constant integer indices "
                               "are supported")
        arrays.append(t.detach().cpu().numpy().astype(np.int64) % x.shape[axis])
    shape = np.broadcast_shapes(*(t.shape for t in arrays))
    plans = [_index_plan(np.broadcast_to(t, shape)) for t in arrays]
    along = [p for p, _ in plans if p is not None]
    if len(along) != len(set(along)):
        raise ImportError_("indexing with tensors: two indices count along one axis "
                           "(a diagonal)")
    # Each indexed axis becomes its slice (one element where its index is constant).
    for (axis, _), (p, start) in zip(used, plans):
        n = 1 if p is None else shape[p]
        if (start, n) != (0, x.shape[axis]):
            x = cut(low, node, x, axis, start, start + n)
    # PyTorch puts the index shape where the indexed axes were when they are
    # adjacent, else first; the other axes keep their order around it.
    axes = [axis for axis, _ in used]
    at = axes[0] if axes == list(range(axes[0], axes[0] + len(axes))) else 0
    rest = [d for d in range(x.rank) if d not in axes]
    pre, post = [d for d in rest if d < at] if at else [], [d for d in rest if d >= at]
    by_p = {p: axis for (axis, _), (p, _) in zip(used, plans) if p is not None}
    # Constant indices: their axes (now one element) are dropped, last first.
    for axis in sorted((axis for (axis, _), (p, _) in zip(used, plans) if p is None),
                       reverse=True):
        x = V.drop_axis(x, axis, low.planner)
        pre = [d - (d > axis) for d in pre]
        post = [d - (d > axis) for d in post]
        by_p = {p: a - (a > axis) for p, a in by_p.items()}
    order = pre + [by_p[p] for p in sorted(by_p)] + post
    x = V.permute(x, order) if order != list(range(x.rank)) else x
    for p in range(len(shape)):              # index axes no index counts along
        if p not in by_p:
            x = V.insert_axis(x, len(pre) + p)
    full = tuple(x.shape[:len(pre)]) + tuple(shape) + tuple(x.shape[len(pre) + len(shape):])
    return V.expand(x, list(full), low.planner) if tuple(x.shape) != full else x


def _index_by_values(low, node, x: Value, indices, used) -> Value:
    """``x[arange(B), i]`` with ``i`` computed from the inputs (``[B]``): row
    ``i[b]`` of each ``x[b]`` — a decoder's classifier picking each sequence's last
    token that is not padding. The rows where a one-hot of ``i`` is 1, summed over
    the axis (a select, not a product: an infinite logit elsewhere stays out)."""
    if [axis for axis, _ in used] != [0, 1] or x.rank < 2:
        raise ImportError_("indexing with tensors computed from the inputs: only "
                           "x[arange(B), i] (one row of each batch element) is supported")
    batch = low.recorded.get(used[0][1].name)
    picked = indices[1]
    if used[0][1].name in low.dynamic or batch is None or \
            batch.detach().cpu().numpy().astype(np.int64).tolist() != \
            list(range(x.shape[0])) or not isinstance(picked, Value) or picked.rank != 1:
        raise ImportError_("indexing with tensors computed from the inputs: only "
                           "x[arange(B), i] with i of shape [B] is supported")
    k, n = low.k, x.shape[1]
    if x.axes[1] is None:                    # one row (or a broadcast): every i picks it
        return V.drop_axis(x, 1, low.planner)
    # negative indices count from the end, as in PyTorch
    wrapped = k.elementwise("where", [k.elementwise("lt", [picked, V.scalar(0.0)],
                                                    node.name),
                                      k.elementwise("add", [picked, V.scalar(float(n))],
                                                    node.name), picked], node.name)
    hot = _one_hot(low, wrapped, x.axes[1])                  # [B, T]
    for _ in range(x.rank - 2):
        hot = V.insert_axis(hot, hot.rank)
    rows = k.elementwise("where", [hot, x, V.scalar(0.0)], node.name)
    return k.reduce("sum", rows, 1, node.name)


def _index_plan(t: np.ndarray) -> tuple:
    """(the axis ``t`` counts up by one along, or None where it is constant; its
    first value), or an import error."""
    first = int(t.flat[0])
    if (t == first).all():
        return None, first
    varying = [p for p in range(t.ndim) if t.shape[p] > 1 and (np.diff(t, axis=p) != 0).any()]
    if len(varying) == 1:
        p = varying[0]
        step = np.arange(t.shape[p]).reshape([-1 if q == p else 1 for q in range(t.ndim)])
        if (t == first + step).all():
            return p, first
    raise ImportError_(f"indexing with tensors: indices {t.reshape(-1)[:8].tolist()} do "
                       f"not count up by one along one axis")


def index_nodes(graph, dynamic) -> set:
    """The constant index tensors of ``aten.index`` (read structurally, no weight)."""
    out = set()
    for node in graph.nodes:
        if _is(node, "aten.index.Tensor") and node.name in dynamic:
            for a in node.args[1]:
                if a is not None and a.name not in dynamic and \
                        all(_is(u, "aten.index.Tensor") for u in a.users):
                    out.add(a.name)
    return out


def _one_hot(low, ids: Value, table_axis) -> Value:
    """``ids[..., t] == v`` as 0/1 for every ``v`` of ``table_axis``: ``ids``'s shape
    plus that axis (tiled), its leading axes iterated one index at a time."""
    k = low.k
    low.planner.mark_tiled(table_axis)
    for c in ids.axes[:-1]:         # [B, T] ids: the rows of the one-hot block are T's
        if c is not None:
            low.planner.mark_point(c)

    def one_hot(index):
        row = k.block(ids, index[:-1])
        col = E.pos(low.planner.dim(table_axis).name, index[-1])
        if not low.planner.planning and not k.tiled(ids):
            return E.call("eq", col, row)         # one index per point: a vector
        return E.call("eq", E.call("outer", row, E.call("ones", col)),
                      E.call("outer", E.call("ones", row), col))
    return k.emit("one_hot", ids.shape + (low.planner.size(table_axis),),
                  ids.axes + (table_axis,), one_hot)


@handles("embedding.default")
def _embedding(low, node, weight, ids, padding_idx=-1, *rest):
    """Rows of ``weight`` picked by ``ids``: a one-hot block times the table, summed
    over the vocabulary's blocks. Exact (one product of 1 with the row, the rest 0)
    and priced honestly by the cost model (T·V·E multiply-adds), with no operator a
    backend lacks; ids are carried as floats (exact below 2^24)."""
    if weight.rank != 2 or weight.axes[0] is None:
        raise ImportError_("embedding: the table must be a 2-D weight")
    if ids.loader is None:
        raise ImportError_("embedding: constant ids")
    return low.k.matmul(_one_hot(low, ids, weight.axes[0]), weight, node.name)


@handles("gather.default")
def _gather(low, node, x, dim, index, sparse_grad=False):
    """``out[..., t] = x[..., index[..., t]]`` along ``dim``: the one-hot of the
    index times ``x`` as a column (the embedding lookup's product, one per row of
    the leading axes), e.g. RoBERTa's token-type buffer picked by position ids."""
    if not isinstance(index, Value) or index.loader is None:
        raise ImportError_("gather by a scalar index")
    if x.rank != index.rank or x.rank < 1:
        raise ImportError_(f"gather of a {x.rank}-D tensor by a {index.rank}-D index")
    axis = dim % x.rank
    last = x.rank - 1
    perm = list(range(x.rank))
    perm[axis], perm[last] = perm[last], perm[axis]
    if axis != last:
        x, index = V.permute(x, perm), V.permute(index, perm)
    if tuple(x.shape[:-1]) != tuple(index.shape[:-1]):
        raise ImportError_(f"gather: index of shape {list(index.shape)} from a tensor of "
                           f"shape {list(x.shape)} (only the gathered axis may differ)")
    if x.axes[-1] is None:
        raise ImportError_("gather along a broadcast axis")
    hot = _one_hot(low, index, x.axes[-1])
    out = low.k.matmul(hot, V.insert_axis(x, x.rank), node.name)
    out = V.drop_axis(out, out.rank - 1, low.planner)
    return V.permute(out, perm) if axis != last else out
