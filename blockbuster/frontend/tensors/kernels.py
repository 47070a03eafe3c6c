"""Unfused kernels over tensors of any rank: one kernel per primitive operation.

The PyTorch importer runs its lowering twice (see
:mod:`blockbuster.frontend.pytorch.dims`): while planning, expressions are
placeholders and only the dimension classes matter; while emitting (and always for
the builder), each call adds one kernel to the program (a softmax is max, shift, exp,
sum and divide kernels: :mod:`.composites`), so the fusion rules see the structure
they know. Broadcasting follows PyTorch: leading and size-1 axes broadcast for free (they
are not indexed); a per-row or per-column vector against a block uses the block
broadcast operators (``rowshift``, ``colscale``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ...ir import expr as E
from ...ir.expr import Expr
from ...ir.index import IConst, IVar
from ...ir.program import Kernel, Store
from ...ir.types import GlobalArray
from .errors import TensorError
from .matmuls import MatmulEmitter, binder_name
from .values import (Index, Planner, Value, array_value, drop_axis, expand, insert_axis,
                     relabel_at, unstore_unit)
from .values import scalar as scalar_value

_ROW = {"add": lambda v, a: E.call("rowshift", v, a),
        "mul": lambda v, a: E.call("rowscale", v, a)}
_COL = {"add": lambda v, a: E.call("colshift", v, a),
        "mul": lambda v, a: E.call("colscale", v, a)}


class KernelEmitter(MatmulEmitter):
    """Kernels and arrays of one lowering pass."""

    def __init__(self, planner: Planner, fresh: Callable[[str], str] | None = None):
        self.planner = planner
        self.kernels: list[Kernel] = []
        self.arrays: dict[str, GlobalArray] = {}
        self._taken: set[str] = set()
        if fresh is not None:         # the caller's naming scheme for new arrays
            self.fresh = fresh

    # -- arrays and loops ------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        base = "".join(ch if ch.isalnum() else "_" for ch in hint).strip("_") or "t"
        if base[0].isdigit():
            base = "t" + base
        name, n = base, 1
        while name in self._taken:
            n += 1
            name = f"{base}_{n}"
        self._taken.add(name)
        return name

    def declare(self, name: str, shape: Sequence[int], axes: Sequence[int | None]) -> Value:
        """A global array (an input, weight or kernel output) viewed as a tensor."""
        dims = tuple(self.planner.dim(c).name for c in axes if c is not None)
        self.arrays[name] = GlobalArray(name, dims)
        return array_value(self.planner, name, shape, axes)

    def mark_block_axes(self, axes: Sequence[int | None]) -> None:
        """A tensor from outside (an input, a weight): its last two axes are what its
        blocks run over; the leading ones (batch, heads) are iterated one by one."""
        for c in axes[-2:]:
            if c is not None:
                self.planner.mark_tiled(c)
        note = getattr(self.planner, "note_tensor", None)
        if note is not None and self.planner.planning:
            note(axes)       # a batch that a later matmul tiles must stay a point axis

    def emit(self, hint: str, shape: Sequence[int], axes: Sequence[int | None],
             value: Callable[[Index], Expr], name: str | None = None) -> Value:
        """One kernel looping over the stored axes of a new array, storing ``value``."""
        if not shape:                # a 0-d result: stored along one unit axis
            one = self.emit(hint, (1,), (None,), lambda index: value(tuple(index[1:])), name)
            return drop_axis(one, 0, self.planner)
        name = name or self.fresh(hint)
        axes = self._unit_axis_to_store(shape, axes)
        loops, index, taken = [], [], set()
        for c in axes:
            if c is None:
                index.append(None)
                continue
            dim = self.planner.dim(c).name
            var = binder_name(dim, taken)
            taken.add(var)
            loops.append((var, dim))
            index.append(IVar(var))
        note = getattr(self.planner, "note_tensor", None)
        if note is not None and self.planner.planning:
            note(axes)
        if not loops:
            raise TensorError(f"a result with no axis to store (shape {list(shape)}, as "
                              f"reducing a 1-D tensor makes): give the input a leading axis")
        out = self.declare(name, shape, axes)
        if not self.planner.planning:
            tiled = [c for c in axes if c is not None and not self.planner.dim(c).point]
            if len(tiled) > 2:
                raise TensorError(f"{name}: a tensor of shape {list(shape)} would need "
                                   f"blocks over {len(tiled)} axes (at most 2)")
        self.kernels.append(Kernel(name, tuple(loops),
                                   (Store(name, tuple(i for i in index if i is not None),
                                          value(tuple(index))),)))
        return out

    def _unit_axis_to_store(self, shape, axes) -> tuple:
        """``axes`` with the last size-1 axis stored (a point dimension of one index)
        when none is: the statistics of one row (a LayerNorm over the pooled features
        of a batch of one, an RMSNorm of a 1-D vector) have no other axis to store
        them along."""
        if any(c is not None for c in axes) or 1 not in shape:
            return tuple(axes)
        p = len(shape) - 1 - list(reversed(shape)).index(1)
        unit = self.planner.new(1, "U")
        self.planner.mark_point(unit)
        return tuple(axes[:p]) + (unit,) + tuple(axes[p + 1:])

    # -- blocks --------------------------------------------------------------------------
    def tiled(self, v: Value) -> tuple[int, ...]:
        return tuple(p for p, c in enumerate(v.axes) if c is not None
                     and not self.planner.dim(c).point)

    def block(self, v: Value, index: Index) -> Expr:
        """``v``'s block at ``index`` with its tiled axes in axis order."""
        e = v.load(index)
        if self.planner.planning or v.loader is None:
            return e
        want = self.tiled(v)
        if tuple(v.order) == want:
            return e
        if tuple(reversed(v.order)) == want and len(want) == 2:
            return E.call("transpose", e)
        raise TensorError(f"{v.array or 'a tensor'}: cannot arrange axes {v.order} as {want}")

    # -- elementwise -------------------------------------------------------------------------
    def broadcast(self, values: Sequence[Value], what: str) -> tuple[tuple, tuple, list]:
        """The broadcast shape and axes of ``values`` and each one expanded to it."""
        tensors = [v for v in values if v.loader is not None]
        rank = max((v.rank for v in tensors), default=0)
        longest = [max((v.shape[p - rank + v.rank] for v in tensors
                        if p - rank + v.rank >= 0), default=1) for p in range(rank)]
        values = [_broadcast_units(self.planner, v, longest) for v in values]
        shape, axes = [1] * rank, [None] * rank
        out = []
        for v in values:
            if v.loader is None:
                out.append(v)
                continue
            v = expand(v, (1,) * (rank - v.rank) + v.shape) if v.rank < rank else v
            for p, (s, c) in enumerate(zip(v.shape, v.axes)):
                if s != 1 and shape[p] not in (1, s):
                    raise TensorError(f"{what}: shapes {[list(t.shape) for t in tensors]} "
                                       f"do not broadcast")
                shape[p] = max(shape[p], s)
                if c is not None:
                    axes[p] = c if axes[p] is None else self.planner.unify(axes[p], c, what)
            out.append(v)
        # an expanded axis that no operand stores stays broadcast in the result
        return tuple(shape), tuple(axes), out

    def elementwise(self, op: str, values: Sequence[Value], what: str,
                    name: str | None = None) -> Value:
        shape, axes, operands = self.broadcast(values, what)
        if all(v.loader is None for v in operands):
            raise TensorError(f"{what}: an operation on constants only")

        def value(index: Index) -> Expr:
            return self._combine(op, operands, axes, index, what)
        return self.emit(op, shape, axes, value, name)

    def _combine(self, op: str, operands: list[Value], axes: tuple, index: Index,
                 what: str) -> Expr:
        args = [self.block(v, index) for v in operands]
        if self.planner.planning:
            return E.call(op, *args)
        full = tuple(p for p, c in enumerate(axes) if c is not None
                     and not self.planner.dim(c).point)
        kinds = [_kind(self.tiled(v) if v.loader else (), full) for v in operands]
        if all(k in ("full", "scalar") for k in kinds):
            return E.call(op, *args)
        if len(args) == 2 and op in ("add", "mul", "sub", "div") and "full" in kinds:
            return _vector_op(op, args, kinds)
        # generic: bring every vector operand to the full block first
        row = next((a for a, k in zip(args, kinds) if k == "row"), None)
        col = next((a for a, k in zip(args, kinds) if k == "col"), None)
        shape_of = next((a for a, k in zip(args, kinds) if k == "full"), None)
        if shape_of is None:
            shape_of = E.call("outer", row, col)
        zero = E.call("mul", E.call("ones", shape_of), E.const(0.0))
        fulls = []
        for a, k in zip(args, kinds):
            if k == "row":
                a = E.call("rowshift", a, zero)
            elif k == "col":
                a = E.call("colshift", a, zero)
            fulls.append(a)
        return E.call(op, *fulls)

    # -- reductions ---------------------------------------------------------------------------
    def reduce(self, combiner: str, v: Value, axis: int, what: str, keepdim: bool = False,
               scale: float | None = None, hi_of: Callable | None = None,
               hint: str | None = None, name: str | None = None) -> Value:
        """Reduce ``v`` over one axis with ``sum`` or ``max`` (times ``scale``)."""
        if combiner not in ("sum", "max"):
            raise TensorError(f"{what}: reduce with sum or max, not {combiner!r}")
        axis %= v.rank
        cls = v.axes[axis]
        if cls is None:            # size 1 (or expanded): every element along it is v's
            factor = (1 if combiner == "max" else v.shape[axis]) * \
                (1.0 if scale is None else scale)
            out = v if factor == 1 else self.elementwise(
                "mul", [v, scalar_value(float(factor))], what, None if keepdim else name)
            return out if keepdim else drop_axis(out, axis)
        if axis >= v.rank - 2:
            # a row or column reduction; a leading axis (batch, heads) stays a point
            # dimension unless something else tiles it: a reduction of whole blocks
            self.planner.mark_tiled(cls)
        out_axes = v.axes[:axis] + v.axes[axis + 1:]
        out_shape = v.shape[:axis] + v.shape[axis + 1:]
        dim = self.planner.dim(cls).name

        def value(index: Index) -> Expr:
            taken = {str(i) for i in index if i is not None}
            var = binder_name(dim, taken)
            full = tuple(index[:axis]) + (IVar(var),) + tuple(index[axis:])
            blk = self.block(v, full)
            t = self.tiled(v)
            if not self.planner.planning and axis not in t:
                # over a point dimension, one index at a time: blocks combined
                # elementwise (the sum over heads of attention weights)
                total = E.reduce(combiner, var, dim, blk)
                return E.call("mul", total, E.const(scale)) if scale is not None else total
            if not self.planner.planning and len(t) > 2:
                raise TensorError(f"{what}: reducing a tensor with blocks over {len(t)} axes")
            # one tiled axis (pooled features): a vector to one number; two: rows or columns
            block_op = ("vec" if not self.planner.planning and len(t) == 1 else
                        "row" if self.planner.planning or t[-1] == axis else "col") + combiner
            bounds = hi_of(index) if hi_of else {}
            total = E.reduce(combiner, var, dim, E.call(block_op, blk), **bounds)
            return E.call("mul", total, E.const(scale)) if scale is not None else total
        hint = hint or ("row" + combiner if scale is None else "mean")
        out = self.emit(hint, out_shape, out_axes, value, name)
        return insert_axis(out, axis) if keepdim else out

    def concat(self, pieces: Sequence[Value], axis: int, out_axis, what: str,
               name: str | None = None) -> Value:
        """``cat(pieces)`` along the tiled ``axis`` as the dimension ``out_axis``: one
        kernel. Every piece is a whole number of blocks of the same size there (piece
        ``j`` starts at block ``o_j`` and has ``n_j`` blocks), so output block ``c``
        is block ``c - o_j`` of the piece ``j`` whose range holds ``c``. Each piece's
        block ``(c - o_j) mod n_j`` (always in range) is read and the right one chosen
        per element by its global position (the wrong ones are discarded)."""
        first = pieces[0]
        if self.planner.planning:
            self.planner.mark_tiled(out_axis)
            shape = first.shape[:axis] + (sum(p.shape[axis] for p in pieces),) + \
                first.shape[axis + 1:]
            axes = first.axes[:axis] + (out_axis,) + first.axes[axis + 1:]
            return self.emit("concat", shape, axes, lambda index: E.const(0.0), name)
        dims = [self.planner.dim(p.axes[axis]) for p in pieces]
        d, out = dims[0], self.planner.dim(out_axis)
        if any(x.point for x in dims) or any(x.block != d.block for x in dims) or \
                (len(pieces) > 1 and any(x.size % x.block for x in dims)) or \
                out.block != d.block or out.size != sum(x.size for x in dims):
            raise TensorError(f"{what}: only pieces of whole numbers of blocks of one "
                              f"size along a tiled axis concatenate (got "
                              f"{[(x.name, x.size, x.block) for x in dims]})")
        tiled = self.tiled(first)
        if axis not in tiled:
            raise TensorError(f"{what}: axis {axis} is not tiled")
        at = tiled.index(axis)
        if len(tiled) != 2:
            raise TensorError(f"{what}: concatenation needs blocks over two axes")
        side = "colshift" if at == 1 else "rowshift"
        axes = first.axes[:axis] + (out_axis,) + first.axes[axis + 1:]
        starts = [sum(x.size for x in dims[:j]) for j in range(len(dims))]

        def inner(c, j):
            n, shift = dims[j].nblocks, (-(starts[j] // d.block)) % dims[j].nblocks
            if n == 1:
                return IConst(0)
            i = c + shift if shift else c
            return i - (i // n) * n

        def value(index: Index) -> Expr:
            c = index[axis]
            blocks = [relabel_at(self.block(p, tuple(index[:axis]) + (inner(c, j),)
                                            + tuple(index[axis + 1:])), at, out.name, c)
                      for j, p in enumerate(pieces)]
            zero = E.call("mul", E.call("ones", blocks[0]), E.const(0.0))
            acc = blocks[0]
            for j, b in enumerate(blocks[1:], 1):
                after = E.call("ge", E.pos(out.name, c), E.const(float(starts[j])))
                acc = E.call("where", E.call(side, after, zero), b, acc)
            return acc
        shape = first.shape[:axis] + (out.size,) + first.shape[axis + 1:]
        return self.emit("concat", shape, axes, value, name)

    def power(self, x: Value, exponent: float, what: str, name: str | None = None) -> Value:
        """``x ** exponent`` for 2, ±0.5, -1 (one operator each), 1 (``x`` itself), 0
        (ones), small integers up to 8 (a product of loads in one kernel), their
        reciprocals down to -8, and non-integers (``exp(e·log x)``)."""
        simple = {2: "square", 0.5: "sqrt", -0.5: "rsqrt", -1: "recip"}
        if exponent in simple:
            return self.elementwise(simple[exponent], [x], what, name)
        if exponent == 1 and name is None:
            return x
        if float(exponent).is_integer() and 1 <= exponent <= 8:
            n = int(exponent)

            def power(index):
                b = self.block(x, index)
                out = b
                for _ in range(n - 1):
                    out = E.call("mul", out, b)
                return out
            return self.emit("pow", x.shape, x.axes, power, name)
        if exponent == 0:                        # 1 everywhere, NaN too (as torch)
            return self.elementwise("ones", [x], what, name)
        if float(exponent).is_integer() and -8 <= exponent <= -2:
            return self.elementwise("recip", [self.power(x, -exponent, what)], what, name)
        if not float(exponent).is_integer():     # exp(e·log x): NaN for x < 0, as torch
            log = self.elementwise("log", [x], what)
            return self.elementwise("exp", [self.elementwise("mul", [log, scalar_value(
                float(exponent))], what)], what, name)
        raise TensorError(f"{what}: x ** {exponent} is not supported (only integer "
                          f"powers from -8 to 8 and non-integer ones)")

    def rotate_half(self, v: Value, what: str, name: str | None = None) -> Value:
        """``cat(-x2, x1)`` of the halves of each row (rotary embeddings): one kernel."""
        if not self.planner.planning and len(self.tiled(v)) != 2:    # rows are a batch
            raise TensorError(f"{what}: rotate-half needs blocks of rows and columns")
        return self.emit("rotate_half", v.shape, v.axes,
                         lambda index: E.call("rotate_half", self.block(v, index)), name)


def _broadcast_units(planner: Planner, v: Value, longest: list) -> Value:
    """``v`` with each stored size-1 axis that broadcasts against a longer one
    turned into a broadcast axis (see :func:`.values.unstore_unit`)."""
    if v.loader is None:
        return v
    lead = len(longest) - v.rank
    for p, (s, c) in enumerate(zip(v.shape, v.axes)):
        if s == 1 and c is not None and longest[lead + p] > 1:
            v = unstore_unit(planner, v, p)
    return v


def _kind(tiled: tuple, full: tuple) -> str:
    if tiled == full:
        return "full"
    if not tiled:
        return "scalar"
    if len(tiled) == 1 and len(full) == 2:
        return "row" if tiled[0] == full[0] else "col"
    raise TensorError(f"cannot broadcast blocks over axes {tiled} against {full}")


_BY_INVERSE = {"sub": ("add", "neg"), "div": ("mul", "recip")}


def _vector_op(op: str, args: list, kinds: list) -> Expr:
    """``op`` of a block and a per-row/per-column vector via the broadcast operators."""
    (a, ka), (b, kb) = zip(args, kinds)
    if ka == "full" and kb == "full":
        return E.call(op, a, b)
    vec_first = ka != "full"
    vec, vk, blk = (a, ka, b) if vec_first else (b, kb, a)
    if op in _BY_INVERSE:      # a - b = a + (-b), a / b = a · (1/b): negate the right side
        op, inverse = _BY_INVERSE[op]
        if vec_first:
            blk = E.call(inverse, blk)
        else:
            vec = E.call(inverse, vec)
    if vk == "scalar":
        return E.call(op, vec, blk)
    table = _ROW if vk == "row" else _COL
    return table[op](vec, blk)


def inf() -> float:
    return math.inf
