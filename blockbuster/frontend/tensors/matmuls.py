"""Matrix products of tensor values: ``a @ b`` over the last two axes with
broadcast batch axes (:class:`MatmulEmitter`, a part of
:class:`.kernels.KernelEmitter`), and the cases where an axis of the product turned
out to be iterated one index at a time (a batch as the rows, heads as the columns, a
size-1 axis), which become broadcast products summed over the contracted axis."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ...ir import expr as E
from ...ir.expr import Expr
from ...ir.index import IVar
from .errors import TensorError
from .values import (Index, Value, drop_axis, expand, insert_axis, permute,
                     unstore_unit)


class MatmulEmitter:
    """The matmul methods of :class:`.kernels.KernelEmitter` (which supplies
    ``planner``, ``emit``, ``block``, ``broadcast``, ``elementwise`` and ``reduce``)."""

    def matmul(self, a: Value, b: Value, what: str, name: str | None = None,
               hi_of: Callable | None = None) -> Value:
        """``a @ b`` over the last two axes, broadcasting the leading ones (a 1-D
        operand is a row or column, as in ``torch.matmul``)."""
        if a.rank < 1 or b.rank < 1:
            raise TensorError(f"{what}: a product with a scalar is not a matmul")
        if a.rank == 1 and b.rank == 1:
            raise TensorError(f"{what}: the dot product of two vectors (a 0-d result) "
                              f"is not supported")
        if a.rank == 1 or b.rank == 1:
            a2 = insert_axis(a, 0) if a.rank == 1 else a
            b2 = insert_axis(b, 1) if b.rank == 1 else b
            out = self.matmul(a2, b2, what, name, hi_of)
            if b.rank == 1:
                out = drop_axis(out, out.rank - 1)
            if a.rank == 1:
                out = drop_axis(out, out.rank - 2)
            return out
        if b.rank == 2 and a.rank >= 3 and a.shape[-2] == 1 and a.axes[-2] is None \
                and a.axes[-3] is not None and b.axes[-1] is not None:
            # ``[.., T, 1, K] @ W``: a linear layer applied to a sequence-first
            # ``[T, B, E]`` tensor of one sample: the rows are T, not the size-1 axis
            out = self.matmul(drop_axis(a, a.rank - 2), b, what, name, hi_of)
            return insert_axis(out, out.rank - 1)
        ka, kb = a.axes[-1], b.axes[-2]
        if a.shape[-1] != b.shape[-2]:
            raise TensorError(f"{what}: contracts {a.shape[-1]} with {b.shape[-2]}")
        if b.axes[-1] is None and b.shape[-1] > 1:
            # ``b``'s columns expanded (all alike): the product of one, expanded
            out = self.matmul(a, _unexpand(b, b.rank - 1), what, name, hi_of)
            return expand(out, out.shape[:-1] + (b.shape[-1],), self.planner)
        if a.axes[-2] is None and a.shape[-2] > 1:
            # ``a``'s rows expanded: the product of one row, expanded
            out = self.matmul(_unexpand(a, a.rank - 2), b, what, name, hi_of)
            return expand(out, out.shape[:-2] + (a.shape[-2], out.shape[-1]), self.planner)
        if ka is None and a.shape[-1] > 1 and hi_of is None:
            # ``a`` expanded along K (the same at every k): a's one column times the
            # sum of b's rows, an outer product
            b_sum = self.reduce("sum", b, b.rank - 2, what, keepdim=True)
            return self._thin_matmul(_unexpand(a, a.rank - 1), b_sum, what, name, hi_of)
        if kb is None and b.shape[-2] > 1 and hi_of is None:
            # ``b`` expanded along K: the sum of a's columns times b's one row
            a_sum = self.reduce("sum", a, a.rank - 1, what, keepdim=True)
            return self._thin_matmul(a_sum, _unexpand(b, b.rank - 2), what, name, hi_of)
        if ka is None or kb is None or a.axes[-2] is None or b.axes[-1] is None:
            # a size-1 axis is not stored, so there is no 2-D block to ``dot``:
            # multiply with broadcasting, then sum over the contracted axis
            return self._thin_matmul(a, b, what, name, hi_of)
        k = self.planner.unify(ka, kb, what)
        rows = self._tiled_rows(a, b)
        if rows is not None:
            # a weight applied along the last axis: any leading axis can be the rows.
            # ``[T, B, E] @ W`` (a sequence-first layout) where the batch is iterated
            # one index at a time and T is tiled: T is the rows.
            order = [p for p in range(a.rank - 1) if p != rows] + [rows, a.rank - 1]
            out = self.matmul(permute(a, order), b, what, name, hi_of)
            back = [0] * out.rank
            for q, p in enumerate(order):
                back[p] = q
            return permute(out, back)
        if self._rows_are_a_batch(a, b) and hi_of is None:
            # ``[B, E] @ W`` where B is a batch iterated one index at a time (BERT's
            # pooler on the first token of each sequence): a row per instance, the
            # product summed over K (a broadcast multiply, then a column reduction)
            prod = self.elementwise("mul", [insert_axis(a, a.rank), b], what)
            return self.reduce("sum", prod, prod.rank - 2, what, name=name)
        if self._cols_are_a_batch(a, b) and hi_of is None:
            # ``x @ W`` whose columns turned out to be heads iterated one index at a
            # time (a per-head bias computed by a Linear, Doge's dynamic mask): per
            # head, the rows of ``x`` times that head's column, summed over K
            n = a.rank
            prod = self.elementwise("mul", [insert_axis(a, n - 2),
                                            insert_axis(permute(b, [1, 0]), 1)], what)
            per_head = self.reduce("sum", prod, prod.rank - 1, what)     # [.., H, T]
            return permute(per_head, list(range(n - 2)) + [n - 1, n - 2])
        if not self.planner.planning:
            # a stored size-1 matrix axis that is iterated one index at a time (one
            # query against one key: a decoding step of batch 1, where the planner
            # met the two lengths as one axis): indexed at 0, it is the thin product
            a1, b1 = self._unstore_point_units(a), self._unstore_point_units(b)
            if a1 is not a or b1 is not b:
                return self.matmul(a1, b1, what, name, hi_of)
        for c in (a.axes[-2], a.axes[-1], b.axes[-1]):
            if c is not None:
                self.planner.mark_tiled(c)
                if not self.planner.planning and self.planner.dim(c).point:
                    raise TensorError(
                        f"{what}: a matrix axis of {self.planner.dim(c).size} is also a batch "
                        f"axis iterated one index at a time (a tensor keeps at most two axes "
                        f"in blocks, and this one is not among them where it is stored: e.g. "
                        f"the channels of a channels-first [B, C, H, W] tensor permuted to "
                        f"the last axis); not supported")
        lead_shape, lead_axes, (la, lb) = self.broadcast(
            [_lead(a), _lead(b)], what)
        shape = lead_shape + (a.shape[-2], b.shape[-1])
        axes = lead_axes + (a.axes[-2], b.axes[-1])
        kdim = self.planner.dim(k).name
        n = len(lead_shape)

        def value(index: Index) -> Expr:
            taken = {str(i) for i in index if i is not None}
            var = binder_name(kdim, taken)
            lead = tuple(index[:n])
            ia = _align(lead, a.rank - 2) + (index[n], IVar(var))
            ib = _align(lead, b.rank - 2) + (IVar(var), index[n + 1])
            bounds = hi_of(index) if hi_of else {}
            return E.reduce("sum", var, kdim, E.call("dot", self.block(a, ia),
                                                     self.block(b, ib)), **bounds)
        return self.emit("matmul", shape, axes, value, name)

    def _unstore_point_units(self, v: Value) -> Value:
        """``v`` with its stored size-1 matrix axes that are point dimensions made
        broadcast axes (emitting pass; the same value where there is none)."""
        for at in (v.rank - 2, v.rank - 1):
            c = v.axes[at]
            if c is not None and v.shape[at] == 1 and self.planner.dim(c).point:
                v = unstore_unit(self.planner, v, at)
        return v

    def _rows_are_a_batch(self, a: Value, b: Value) -> bool:
        """``a``'s rows turned out to be a point axis (emitting pass), ``b`` a 2-D
        matrix whose columns are tiled."""
        if self.planner.planning or b.rank != 2:
            return False
        dims = [self.planner.dim(c) for c in (a.axes[-2], a.axes[-1], b.axes[-1])]
        return dims[0].point and not dims[1].point and not dims[2].point

    def _cols_are_a_batch(self, a: Value, b: Value) -> bool:
        """``b`` a 2-D matrix whose columns turned out to be a point axis (emitting
        pass), ``a``'s rows and the contracted axis tiled."""
        if self.planner.planning or b.rank != 2:
            return False
        dims = [self.planner.dim(c) for c in (a.axes[-2], a.axes[-1], b.axes[-1])]
        return dims[2].point and not dims[0].point and not dims[1].point

    def _tiled_rows(self, a: Value, b: Value) -> int | None:
        """For ``a @ W`` with a 2-D ``W`` (a linear layer), the leading axis of ``a``
        to use as the rows when its second-to-last axis turned out to be iterated one
        index at a time (emitting pass only; the last such tiled axis), else None."""
        if self.planner.planning or b.rank != 2 or a.rank < 3 or a.axes[-2] is None:
            return None
        if not self.planner.dim(a.axes[-2]).point:
            return None
        tiled = [p for p in range(a.rank - 2) if a.axes[p] is not None
                 and not self.planner.dim(a.axes[p]).point]
        return tiled[-1] if tiled else None

    def _thin_matmul(self, a: Value, b: Value, what: str, name: str | None,
                     hi_of: Callable | None) -> Value:
        """``a @ b`` where the contracted axis (``K = 1``: an outer product), the rows
        of ``a`` (one row) or the columns of ``b`` (one column) have size 1 (not
        stored): a broadcast product summed over the contracted axis."""
        if hi_of is not None:
            raise TensorError(f"{what}: a bounded (causal) product over a size-1 axis "
                              f"is not supported")
        swap = list(range(a.rank - 2)) + [a.rank - 1, a.rank - 2]
        if a.shape[-1] == 1:                           # (.., M, 1) · (.., 1, N)
            return self.elementwise("mul", [a, b], what, name)
        if b.axes[-1] is None:                         # one column: sum over a's rows
            bt = permute(b, list(range(b.rank - 2)) + [b.rank - 1, b.rank - 2])
            prod = self.elementwise("mul", [a, bt], what)
            return self.reduce("sum", prod, prod.rank - 1, what, keepdim=True, name=name)
        prod = self.elementwise("mul", [permute(a, swap), b], what)    # one row
        return self.reduce("sum", prod, prod.rank - 2, what, keepdim=True, name=name)


def _unexpand(v: Value, axis: int) -> Value:
    """``v`` with its broadcast (not stored) ``axis`` back to size 1: its elements do
    not depend on that index."""
    return attrs.evolve(v, shape=v.shape[:axis] + (1,) + v.shape[axis + 1:])


def _lead(v: Value) -> Value:
    """The leading (batch) axes of a matrix operand, as a value to broadcast."""
    return Value(v.shape[:-2], v.axes[:-2], lambda index: E.const(0.0))


def _align(lead: tuple, rank: int) -> tuple:
    return tuple(lead[len(lead) - rank:]) if rank else ()


def binder_name(dim: str, taken=()) -> str:
    """A binder name for ``dim`` (its lower-case name) not in ``taken``: a kernel's
    loops and the binders inside it never share a name, so no binder shadows another
    (``X[N, M] @ W[M, M]`` sums over ``m2``, not over the loop's ``m``)."""
    base = "".join(ch for ch in dim.lower() if ch.isalnum()) or "v"
    if base[0].isdigit():
        base = "v" + base
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}{n}"
    return name
