"""A small tensor-level builder that lowers to *unfused* block programs.

Every primitive operation becomes one kernel and every intermediate tensor a global
array: the starting point the fusion rules work from. Tensors have named dimensions:
the last one or two are tiled into blocks, leading ones (batch, heads) are *point*
dimensions iterated one index at a time (``g.point_dim("B", 4)``; a ``[B, T, E]``
tensor has ``[T, E]`` blocks). Broadcasting follows the names: an operand whose
dimensions are a subsequence of the other's is repeated over the missing ones
(``x - mean(x)`` subtracts a per-row vector, ``x * gamma`` scales columns).

Heads, slices and key/value heads shared by several query heads are *views*
(:meth:`split_heads`, :meth:`merge_heads`, :meth:`slice`): no kernel, no copy; the
kernels that use them read the underlying array. The tensor layer that lowers all
of this, :mod:`blockbuster.frontend.tensors`, is the PyTorch importer's too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from ..errors import IRError, UsageError
from ..ir import expr as E
from ..ir.expr import Expr
from ..ir.index import Idx, IVar
from ..ir.program import Kernel, Program, Store
from ..ir.types import Dim, GlobalArray
from ..ir.verify import verify
from .tensors import DEFAULT_BLOCK, composites
from .tensors import values as V
from .tensors.attention import attend
from .tensors.kernels import KernelEmitter, binder_name
from .tensors.values import Value, scalar


@attrs.frozen
class Tensor:
    """A global array produced by the builder (or declared as an input), or a view of
    one (``view``: heads split or merged, a slice; ``name`` is the viewed array)."""

    name: str
    dims: tuple[str, ...]
    view: Value | None = attrs.field(default=None, eq=False, repr=False)


class _NamedDims:
    """The tensor layer's planner for the builder: an axis is the name of a dimension
    the user declared (nothing is left to decide)."""

    planning = False

    def __init__(self, dims: dict[str, Dim]):
        self._dims = dims

    def dim(self, name: str) -> Dim:
        return self._dims[name]

    def unify(self, a: str, b: str, what: str) -> str:
        if a != b:
            raise IRError(f"{what}: dimensions {a} and {b} differ")
        return a

    def mark_tiled(self, axis: str) -> None:
        pass


class GraphBuilder:
    def __init__(self, name: str):
        self.name = name
        self.dims: dict[str, Dim] = {}
        self.inputs: list[Tensor] = []
        self.weights: list[str] = []
        self.outputs: list[str] = []
        self.arrays: dict[str, Tensor] = {}
        self._counter = 0
        self._registered = 0                 # tensor-layer arrays already in self.arrays
        self._k = KernelEmitter(_NamedDims(self.dims), fresh=self._fresh)
        self.kernels: list[Kernel] = self._k.kernels

    # -- declarations ----------------------------------------------------------
    def dim(self, name: str, size: int, block: int | None = None) -> str:
        if not isinstance(size, int) or size < 1:
            raise UsageError(f"dimension {name}: size must be a positive integer, got {size!r}")
        if block is None:
            block = min(size, DEFAULT_BLOCK)
        if not isinstance(block, int) or block < 1:
            raise UsageError(f"dimension {name}: block size must be a positive integer, "
                             f"got {block!r}")
        self.dims[name] = Dim(name, size, min(block, size))
        return name

    def input(self, name: str, *dims: str) -> Tensor:
        for d in dims:
            if d not in self.dims:
                raise IRError(f"input {name}: unknown dimension '{d}'")
        t = Tensor(name, tuple(dims))
        self.inputs.append(t)
        self.arrays[name] = t
        return t

    def weight(self, name: str, *dims: str) -> Tensor:
        """An input that is a model parameter (the same on every call)."""
        t = self.input(name, *dims)
        self.weights.append(name)
        return t

    # -- plumbing ----------------------------------------------------------------
    def _fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    _var = staticmethod(binder_name)     # the tensor layer's binder names

    @classmethod
    def _distinct(cls, *bases: str) -> tuple[str, ...]:
        """One binder name per base, all different (see ``_var``)."""
        names: list[str] = []
        for b in bases:
            names.append(cls._var(b, names))
        return tuple(names)

    # -- tensors as views of arrays (the shared tensor layer) --------------------------
    def _value(self, t: Tensor) -> Value:
        if not isinstance(t, Tensor):
            raise UsageError(f"expected a tensor, got {t!r}")
        if t.view is not None:
            return t.view
        shape = tuple(self.dims[d].size for d in t.dims)
        return V.array_value(self._k.planner, t.name, shape, t.dims)

    def _view(self, v: Value, of: Tensor) -> Tensor:
        return Tensor(of.name, tuple(a for a in v.axes if a is not None), v)

    def _array_out(self, v: Value) -> Tensor:
        """The tensor of the last kernel's output array (registering every array the
        tensor layer made on the way, in order)."""
        made = list(self._k.arrays.values())
        for a in made[self._registered:]:
            self.arrays[a.name] = Tensor(a.name, a.dims)
        self._registered = len(made)
        return self.arrays[v.array]

    def _new_name(self, name: str | None) -> str | None:
        if name is not None and name in self.arrays:
            raise IRError(f"array {name} is defined twice")
        return name

    def _aligned(self, t: Tensor, dims: tuple[str, ...], along: str | None,
                 what: str) -> Value:
        """``t`` as an operand of a result over ``dims``: its dimensions in place, a
        broadcast axis for each one it lacks. A dimension that occurs twice in
        ``dims`` (a square ``X[M, M]``) is ambiguous for a vector over it:
        ``along="rows"`` (the default) or ``"cols"`` picks the second-to-last or the
        last axis."""
        places = _embeddings(t.dims, dims)
        if along is not None:
            want = len(dims) - (2 if along == "rows" else 1)
            places = [p for p in places if p and p[-1] == want]
        if not places:
            side = f" along {along}" if along else ""
            raise IRError(f"{what}: cannot broadcast {t.name}{list(t.dims)}{side} to "
                          f"{list(dims)}")
        v = self._value(t)
        for q in range(len(dims)):
            if q not in places[0]:
                v = V.insert_axis(v, q)
        return v

    @staticmethod
    def _check_along(along: str | None, what: str) -> None:
        if along not in (None, "rows", "cols"):
            raise UsageError(f"{what}: along must be 'rows' or 'cols', got {along!r}")

    def _elementwise(self, op: str, operands: Sequence, name: str | None,
                     along: str | None = None) -> Tensor:
        """One kernel applying ``op`` to tensors and numbers, broadcast by name to
        the dimensions of the operand that every other one fits in."""
        tensors = [t for t in operands if isinstance(t, Tensor)]
        what = f"{op} " + ", ".join(t.name for t in tensors)
        self._check_along(along, what)
        for t in operands:
            if not isinstance(t, (Tensor, int, float)):
                raise UsageError(f"{what}: operands must be tensors or numbers, got {t!r}")
        if not tensors:
            raise UsageError(f"{op}: needs at least one tensor operand")
        out = next((t.dims for t in tensors
                    if all(_embeddings(u.dims, t.dims) for u in tensors)), None)
        if out is None:
            raise IRError(f"{what}: cannot broadcast " + " and ".join(
                f"{t.name}{list(t.dims)}" for t in tensors))
        values = [self._aligned(t, out, along if t.dims != out else None, what)
                  if isinstance(t, Tensor) else scalar(t) for t in operands]
        return self._array_out(self._k.elementwise(op, values, what, self._new_name(name)))

    # -- primitives --------------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor, *, transpose_a: bool = False,
               transpose_b: bool = False, name: str | None = None) -> Tensor:
        """``a @ b`` over the last two dimensions (``transpose_a``/``transpose_b``:
        ``aᵀ``, ``bᵀ``), a sum over blocks of the contracted dimension. Leading
        (batch) dimensions broadcast: those of the operand with fewer must end the
        other's (``X[B, T, E] @ W[E, F]`` is ``[B, T, F]``)."""
        what = f"matmul {a.name} x {b.name}"
        va, vb = self._value(a), self._value(b)
        if len(a.dims) < 2 or len(b.dims) < 2:
            raise IRError(f"{what}: both operands need two dimensions, got "
                          f"{list(a.dims)} and {list(b.dims)}")
        da, db = list(a.dims), list(b.dims)
        if transpose_a:
            va, da = V.permute(va, _swap_last(len(da))), da[:-2] + da[-2:][::-1]
        if transpose_b:
            vb, db = V.permute(vb, _swap_last(len(db))), db[:-2] + db[-2:][::-1]
        if da[-1] != db[-2]:
            raise IRError(f"{what}: contracts {da[-1]} with {db[-2]}")
        la, lb = da[:-2], db[:-2]
        short, long_ = sorted((la, lb), key=len)
        if long_[len(long_) - len(short):] != short:
            raise IRError(f"{what}: leading dimensions {la} and {lb} do not broadcast")
        return self._array_out(self._k.matmul(va, vb, what, self._new_name(name)))

    def linear(self, x: Tensor, w: Tensor, bias: Tensor | None = None,
               name: str | None = None) -> Tensor:
        """``x @ wᵀ (+ bias)`` for ``w[out, in]`` (``torch.nn.Linear``'s layout)."""
        y = self.matmul(x, w, transpose_b=True, name=None if bias is not None else name)
        return self.add(y, bias, name) if bias is not None else y

    def unary(self, op: str, a: Tensor, name: str | None = None) -> Tensor:
        return self._elementwise(op, [a], name)

    def binary(self, op: str, a: Tensor, b: Tensor | float, name: str | None = None,
               along: str | None = None) -> Tensor:
        """Elementwise ``op`` with broadcasting of a number or a tensor over fewer
        dimensions (a per-row or per-column vector, a ``[T, E]`` table against
        ``[B, T, E]``).

        A vector over a dimension that both rows and columns of ``a`` run over (a square
        ``X[M, M]``) is ambiguous: ``along="rows"`` (one value per row, the default) or
        ``along="cols"`` (one value per column, e.g. a norm's gain) says which."""
        return self._elementwise(op, [a, b], name, along)

    def _reduce(self, combiner: str, a: Tensor, axis: int, mean: bool, hint: str,
                name: str | None) -> Tensor:
        what = f"{hint} {a.name}"
        if combiner not in ("sum", "max"):
            raise UsageError(f"{what}: combiner must be 'sum' or 'max', got {combiner!r}")
        if len(a.dims) < 2:
            raise IRError(f"{what}: needs rows and columns, got {list(a.dims)}")
        d = self.dims[a.dims[axis]]
        if d.point:
            raise IRError(f"{what}: reducing over the point dimension {d.name}")
        out = self._k.reduce(combiner, self._value(a), axis, what,
                             scale=1.0 / d.size if mean else None, hint=hint,
                             name=self._new_name(name))
        return self._array_out(out)

    def row_reduce(self, combiner: str, a: Tensor, *, mean: bool = False,
                   name: str | None = None) -> Tensor:
        """Reduce each row over the last dimension: ``sum``/``max`` (optionally a mean)."""
        return self._reduce(combiner, a, len(a.dims) - 1, mean,
                            "mean" if mean else f"row{combiner}", name)

    def col_reduce(self, combiner: str, a: Tensor, *, mean: bool = False,
                   name: str | None = None) -> Tensor:
        """Reduce each column over the second-to-last dimension (the rows): ``sum``/
        ``max`` (or a mean)."""
        return self._reduce(combiner, a, len(a.dims) - 2, mean,
                            "colmean" if mean else f"col{combiner}", name)

    def row_sum(self, a: Tensor, name: str | None = None) -> Tensor:
        return self.row_reduce("sum", a, name=name)

    def row_max(self, a: Tensor, name: str | None = None) -> Tensor:
        return self.row_reduce("max", a, name=name)

    def row_mean(self, a: Tensor, name: str | None = None) -> Tensor:
        return self.row_reduce("sum", a, mean=True, name=name)

    def col_sum(self, a: Tensor, name: str | None = None) -> Tensor:
        """The sum of each column over the rows of ``a[R, C]``: a vector over C."""
        return self.col_reduce("sum", a, name=name)

    def col_max(self, a: Tensor, name: str | None = None) -> Tensor:
        return self.col_reduce("max", a, name=name)

    def col_mean(self, a: Tensor, name: str | None = None) -> Tensor:
        return self.col_reduce("sum", a, mean=True, name=name)

    # -- elementwise operators -------------------------------------------------------
    # Any registered elementwise operator also works as ``unary(op, x)`` or
    # ``binary(op, a, b)``; these name the common ones.
    def relu(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("relu", x, name)

    def gelu(self, x: Tensor, name: str | None = None) -> Tensor:
        """``x·½(1 + erf(x/√2))``."""
        return self.unary("gelu", x, name)

    def gelu_tanh(self, x: Tensor, name: str | None = None) -> Tensor:
        """``½x(1 + tanh(√(2/π)(x + 0.044715x³)))``."""
        return self.unary("gelu_tanh", x, name)

    def erf(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("erf", x, name)

    def tanh(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("tanh", x, name)

    def sigmoid(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("sigmoid", x, name)

    def log(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("log", x, name)

    def maximum(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        """Elementwise max (a NaN operand gives NaN, as ``np.maximum``)."""
        return self.binary("max", a, b, name)

    def minimum(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        return self.binary("min", a, b, name)

    # Comparisons: a 0/1 mask of the operands' type, for ``where``.
    def lt(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        return self.binary("lt", a, b, name)

    def le(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        return self.binary("le", a, b, name)

    def gt(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        return self.binary("gt", a, b, name)

    def ge(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        return self.binary("ge", a, b, name)

    def eq(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        return self.binary("eq", a, b, name)

    def ne(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        return self.binary("ne", a, b, name)

    def where(self, cond: Tensor, a: Tensor | float, b: Tensor | float,
              name: str | None = None) -> Tensor:
        """``a`` where ``cond`` is not 0, else ``b``; ``a`` or ``b`` may be a number,
        and any operand may have fewer dimensions (broadcast by name)."""
        if not isinstance(cond, Tensor):
            raise UsageError("where: the condition must be a tensor")
        return self._elementwise("where", [cond, a, b], name)

    # Arithmetic and the other operators the PyTorch importer knows, by name.
    def add(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        return self.binary("add", a, b, name)

    def sub(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        return self.binary("sub", a, b, name)

    def mul(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        return self.binary("mul", a, b, name)

    def div(self, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        return self.binary("div", a, b, name)

    def neg(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("neg", x, name)

    def exp(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("exp", x, name)

    def sqrt(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("sqrt", x, name)

    def rsqrt(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("rsqrt", x, name)

    def reciprocal(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("recip", x, name)

    def square(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("square", x, name)

    def abs(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("abs", x, name)

    def pow(self, x: Tensor, exponent: float, name: str | None = None) -> Tensor:
        """``x ** exponent``: 2, ±0.5, -1 or an integer up to 8 (one kernel)."""
        return self._array_out(self._k.power(self._value(x), exponent, f"pow {x.name}",
                                             self._new_name(name)))

    def silu(self, x: Tensor, name: str | None = None) -> Tensor:
        """``x·sigmoid(x)``."""
        return self.unary("silu", x, name)

    def clamp(self, x: Tensor, lo: float | None = None, hi: float | None = None,
              name: str | None = None) -> Tensor:
        """``min(max(x, lo), hi)`` (either bound may be absent; one kernel each)."""
        if lo is None and hi is None:
            raise UsageError(f"clamp {x.name}: give lo, hi or both")
        if lo is not None:
            x = self.maximum(x, lo, name if hi is None else None)
        return self.minimum(x, hi, name) if hi is not None else x

    # -- composites (several kernels each; ``name`` names the result) -----------------
    # Over the last dimension, any leading ones (kernels: tensors.composites).
    def softmax(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._composite(composites.softmax, x, name)

    def log_softmax(self, x: Tensor, name: str | None = None) -> Tensor:
        """``x - max - log(sum(exp(x - max)))`` per row."""
        return self._composite(composites.softmax, x, name, log=True)

    def logsumexp(self, x: Tensor, name: str | None = None) -> Tensor:
        """``log(sum(exp(x)))`` of each row, computed as ``max + log(sum(exp(x -
        max)))``: a vector over the rows."""
        return self._composite(composites.logsumexp, x, name)

    def layer_norm(self, x: Tensor, gamma: Tensor | None, beta: Tensor | None, eps: float,
                   name: str | None = None) -> Tensor:
        """``(x - mean)·rsqrt(var + eps)·gamma + beta`` per row; ``gamma`` and ``beta``
        are per column (also when X is square), either may be None."""
        what = f"layer_norm {x.name}"
        return self._composite(composites.layer_norm, x, name, weight=self._gain(gamma, x, what),
                               bias=self._gain(beta, x, what), eps=eps)

    def rms_norm(self, x: Tensor, g: Tensor | None, eps: float,
                 name: str | None = None) -> Tensor:
        """``x·rsqrt(mean(x²) + eps)·g`` per row; ``g`` per column (or None)."""
        return self._composite(composites.rms_norm, x, name,
                               weight=self._gain(g, x, f"rms_norm {x.name}"), eps=eps)

    def _gain(self, t: Tensor | None, x: Tensor, what: str) -> Value | None:
        return None if t is None else self._aligned(t, x.dims, "cols", what)

    def _composite(self, fn, x: Tensor, name: str | None, **kwargs) -> Tensor:
        what = f"{fn.__name__} {x.name}"
        if len(x.dims) < 2 or self.dims[x.dims[-1]].point:
            raise IRError(f"{what}: needs rows and tiled columns, got {list(x.dims)}")
        out = fn(self._k, self._value(x), len(x.dims) - 1, what=what,
                 name=self._new_name(name), **kwargs)
        return self._array_out(out)

    # -- heads (multi-head attention) -------------------------------------------
    # A projection's columns are tiled by a dimension whose *block* is the head size
    # (``QD`` for the query heads, ``KD`` for the key/value heads), so column block h
    # is head h. Per-head tensors (scores, probabilities, rotated q/k, the attention
    # output) carry the head as a *point* dimension (``H`` queries, ``G`` key/value
    # heads), so their blocks are 2-D, and a ``HD`` dimension (size = block = head
    # size) for their columns. A head variable reaches the column blocks of a
    # projection through an index expression ``h // group`` (``group`` query heads
    # share one key/value head; 1 for the query heads themselves), and ``relabel``
    # renames a head-sized column block between the projection's dimension and
    # ``HD``.

    def point_dim(self, name: str, size: int) -> str:
        """A dimension iterated one index at a time (heads): absent from block types."""
        if not isinstance(size, int) or size < 1:
            raise UsageError(f"dimension {name}: size must be a positive integer, got {size!r}")
        self.dims[name] = Dim(name, size, 1, point=True)
        return name

    def _emit_loops(self, op: str, loops: tuple[tuple[str, str], ...], value,
                    name: str | None) -> Tensor:
        """One kernel with explicit ``(variable, dimension)`` loops (a dimension may
        occur twice, e.g. query and key blocks of T) storing ``value`` (an Expr over
        those variables) into a new array over the loops' dimensions."""
        dims = tuple(d for _, d in loops)
        out = Tensor(name or self._fresh(op), dims)
        if out.name in self.arrays:
            raise IRError(f"array {out.name} is defined twice")
        self.kernels.append(Kernel(out.name, tuple(loops),
                                   (Store(out.name, tuple(IVar(v) for v, _ in loops), value),)))
        self.arrays[out.name] = out
        return out

    def _head_dims(self, what: str, cols: str, heads: str, hd: str) -> None:
        """Check that the column blocks of ``cols`` are the heads of point dim ``heads``
        and that ``hd`` is one head (a single block)."""
        c, h, d = self.dims[cols], self.dims[heads], self.dims[hd]
        if not h.point or h.size != c.nblocks or c.block * c.nblocks != c.size:
            raise IRError(f"{what}: {cols} ({c.size} in blocks of {c.block}) is not "
                          f"{heads} heads of a whole block each")
        if d.point or d.size != c.block or d.block != d.size:
            raise IRError(f"{what}: {hd} must be one block of the head size {c.block}")

    def _heads_of(self, what: str, cols: str, heads: str, hd: str) -> None:
        """As :meth:`_head_dims`, or a head of several whole blocks (``hd`` tiled like
        ``cols``: rotary halves sliced by hand)."""
        c, h, d = self.dims[cols], self.dims[heads], self.dims[hd]
        if d.point or d.block != c.block or d.size % d.block:
            self._head_dims(what, cols, heads, hd)
        elif not h.point or h.size * d.size != c.size:
            raise IRError(f"{what}: {cols} ({c.size}) is not {heads} ({h.size}) heads "
                          f"of {hd} ({d.size})")

    @staticmethod
    def _plain(what: str, *tensors: tuple[Tensor, int]) -> None:
        """The per-head methods read arrays of a fixed rank directly (not views)."""
        for t, rank in tensors:
            if not isinstance(t, Tensor) or t.view is not None or len(t.dims) != rank:
                got = list(t.dims) if isinstance(t, Tensor) else repr(t)
                raise IRError(f"{what}: needs {getattr(t, 'name', t)} to be an array "
                              f"over {rank} dimensions, got {got}"
                              + (" (a view)" if getattr(t, "view", None) else ""))

    @staticmethod
    def _head_block(var: str, group: int) -> Idx:
        """The column block of the projection read by head ``var``: ``var // group``."""
        return IVar(var) // group

    def rope_heads(self, x: Tensor, cos: Tensor, sin: Tensor, heads: str,
                   name: str | None = None) -> Tensor:
        """Split ``x[T, C]`` into heads and apply rotary embeddings (rotate-half):
        ``out[h] = xh·cos + rotate_half(xh)·sin`` with ``xh`` column block h of x;
        ``cos``/``sin`` are ``[T, HD]`` tables. Result ``[heads, T, HD]``; one kernel."""
        self._plain(f"rope {x.name}", (x, 2), (cos, 2), (sin, 2))
        (rows, cols), (crow, hd) = x.dims, cos.dims
        if sin.dims != cos.dims or crow != rows:
            raise IRError(f"rope {x.name}: tables {cos.name}{list(cos.dims)} and "
                          f"{sin.name}{list(sin.dims)} do not match {list(x.dims)}")
        self._head_dims(f"rope {x.name}", cols, heads, hd)
        h, t, d = self._distinct(heads, rows, hd)
        xh = E.call("relabel", E.pos(hd, d), E.load(x.name, t, self._head_block(h, 1)))
        value = E.call("add", E.call("mul", xh, E.load(cos.name, t, d)),
                       E.call("mul", E.call("rotate_half", xh), E.load(sin.name, t, d)))
        return self._emit_loops("rope", ((h, heads), (t, rows), (d, hd)), value, name)

    def causal_attention(self, q: Tensor, k: Tensor, v: Tensor, scale: float,
                         name: str | None = None) -> Tensor:
        """Causal softmax attention per head: ``q[H, T, HD]``, ``k[G, T, HD]`` (head h
        uses key head ``h // (H/G)``), ``v[T, C]`` whose column blocks are the G value
        heads. Result ``[H, T, HD]``. Kernels: scores, scale, causal mask (``keep_ge``
        on global positions), row max, shift, exp, row sum, normalise, ``P·V``. The
        row max, row sum and ``P·V`` reduce over the causal key range ``T[: i + 1]``
        (blocks above the diagonal are never read); the element-wise kernels cover
        every block (above the diagonal the probabilities are 0)."""
        self._plain(f"attention {q.name}", (q, 3), (k, 3), (v, 2))
        heads, rows, hd = q.dims
        kv_heads, krows, khd = k.dims
        vrows, vcols = v.dims
        if (krows, khd, vrows) != (rows, hd, rows):
            raise IRError(f"attention: {q.name}{list(q.dims)}, {k.name}{list(k.dims)} and "
                          f"{v.name}{list(v.dims)} do not match")
        self._head_dims(f"attention {v.name}", vcols, kv_heads, hd)
        nh, nkv = self.dims[heads].size, self.dims[kv_heads].size
        if not self.dims[heads].point or nh % nkv:
            raise IRError(f"attention: {nh} query heads cannot share {nkv} key/value heads")
        group = nh // nkv
        h, i, j, e = self._distinct(heads, "i", "j", hd)
        hij = ((h, heads), (i, rows), (j, rows))
        hi = ((h, heads), (i, rows))
        kv = self._head_block(h, group)
        causal = dict(hi=IVar(i) + 1)

        def ld(t: Tensor, *index) -> Expr:
            return E.load(t.name, *index)

        scores = self._emit_loops("scores", hij, E.reduce(
            "sum", e, hd, E.call("dot", ld(q, h, i, e),
                                 E.call("transpose", ld(k, kv, j, e)))), None)
        scaled = self._emit_loops("mul", hij, E.call("mul", ld(scores, h, i, j),
                                                     E.const(scale)), None)
        masked = self._emit_loops("mask", hij, E.call(
            "keep_ge", E.pos(rows, i), E.pos(rows, j), ld(scaled, h, i, j)), None)
        rmax = self._emit_loops("rowmax", hi, E.reduce(
            "max", j, rows, E.call("rowmax", ld(masked, h, i, j)), **causal), None)
        shifted = self._emit_loops("sub", hij, E.call(
            "rowshift", E.call("neg", ld(rmax, h, i)), ld(masked, h, i, j)), None)
        expd = self._emit_loops("exp", hij, E.call("exp", ld(shifted, h, i, j)), None)
        rsum = self._emit_loops("rowsum", hi, E.reduce(
            "sum", j, rows, E.call("rowsum", ld(expd, h, i, j)), **causal), None)
        probs = self._emit_loops("div", hij, E.call(
            "rowscale", E.call("recip", ld(rsum, h, i)), ld(expd, h, i, j)), None)
        vh = E.call("relabel", E.pos(hd, e), ld(v, j, kv))
        return self._emit_loops("attend", ((h, heads), (i, rows), (e, hd)), E.reduce(
            "sum", j, rows, E.call("dot", ld(probs, h, i, j), vh), **causal), name)

    def merge_heads_matmul(self, o: Tensor, w: Tensor, name: str | None = None) -> Tensor:
        """``concat(heads of o) @ w`` for ``o[H, T, HD]`` and ``w[C, N]`` whose row blocks
        are the heads: a sum over heads ``h`` of ``o[h] @ w[h-th row block]``."""
        self._plain(f"matmul {o.name} x {w.name}", (o, 3), (w, 2))
        heads, rows, hd = o.dims
        cols, n = w.dims
        self._head_dims(f"matmul {o.name} x {w.name}", cols, heads, hd)
        t, c, h = self._distinct(rows, n, heads)
        blk = self._head_block(h, 1)
        value = E.reduce("sum", h, heads, E.call(
            "dot", E.call("relabel", E.pos(cols, blk), E.load(o.name, h, t, 0)),
            E.load(w.name, blk, c)))
        return self._emit_loops("matmul", ((t, rows), (c, n)), value, name)

    # -- heads, attention and slices on views (any leading dimensions) ------------------
    # ``split_heads`` views a projection ``x[..., T, C]`` whose column blocks are heads
    # as ``[..., H, T, HD]`` (H a point dimension, HD one block of the head size);
    # ``merge_heads`` views it back. No kernel: the consumers read ``x`` itself.

    def _known(self, what: str, *dims: str) -> None:
        for d in dims:
            if d not in self.dims:
                raise IRError(f"{what}: unknown dimension '{d}'")

    def split_heads(self, x: Tensor, heads: str, head_dim: str) -> Tensor:
        """``x[..., T, C]`` as ``[..., heads, T, head_dim]``: head h is column block h
        of x (C's block is the head size), or blocks ``h·n ..`` when ``head_dim`` has
        n blocks of C's block size. A view: no kernel, no name."""
        what = f"split_heads {x.name}"
        self._known(what, heads, head_dim)
        if len(x.dims) < 2:
            raise IRError(f"{what}: needs rows and columns, got {list(x.dims)}")
        self._heads_of(what, x.dims[-1], heads, head_dim)
        r = len(x.dims)
        v = V.split_view(self._k.planner, self._value(x), r - 1, heads, head_dim, what)
        return self._view(V.permute(v, list(range(r - 2)) + [r - 1, r - 2, r]), x)

    def merge_heads(self, o: Tensor, cols: str) -> Tensor:
        """``o[..., H, T, HD]`` as ``[..., T, cols]`` whose column block h is head h
        (the concatenated heads). A view: no kernel, no name."""
        what = f"merge_heads {o.name}"
        self._known(what, cols)
        if len(o.dims) < 3:
            raise IRError(f"{what}: needs heads, rows and columns, got {list(o.dims)}")
        heads, hd = o.dims[-3], o.dims[-1]
        self._heads_of(what, cols, heads, hd)
        r = len(o.dims)
        v = V.permute(self._value(o), list(range(r - 3)) + [r - 2, r - 3, r - 1])
        return self._view(V.merge_view(self._k.planner, v, r - 2, cols, what), o)

    def _shared_heads(self, kv: Tensor, heads: str, what: str) -> Value:
        """``kv[..., G, S, D]`` read by ``heads`` query heads, ``heads/G`` per key/value
        head: head h reads ``h // (heads/G)``. A view (GQA), as the importer's."""
        v, r = self._value(kv), len(kv.dims)
        g, h = self.dims[kv.dims[-3]], self.dims[heads]
        if not g.point or h.size % g.size:
            raise IRError(f"{what}: {h.size} query heads ({heads}) cannot share the "
                          f"{g.size} heads ({g.name}) of {kv.name}")
        copies = V.expand(V.insert_axis(v, r - 2),
                          v.shape[:r - 2] + (h.size // g.size,) + v.shape[r - 2:])
        return V.merge_view(self._k.planner, copies, r - 3, heads, what)

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
                  scale: float | None = None, mask: Tensor | None = None,
                  name: str | None = None) -> Tensor:
        """``softmax(q·kᵀ·scale [+ mask]) · v`` over the last two dimensions:
        ``q[..., T, D]``, ``k[..., S, D]``, ``v[..., S, Dv]``; result ``[..., T, Dv]``.
        With heads (``q[..., H, T, HD]`` from :meth:`split_heads`), key/value tensors
        over fewer heads ``G`` are shared (GQA: head h reads ``h // (H/G)``).
        ``causal`` masks keys after the query (needs S = T) and reduces over the
        keys ``[: i + 1]`` only; ``scale`` defaults to ``1/√D``; ``mask`` is added to
        the scores (broadcast by name). Kernels: scores, scale, mask, softmax (5),
        ``P·V``."""
        what = f"attention {q.name}, {k.name}, {v.name}"
        r = len(q.dims)
        if r < 2 or len(k.dims) != r or len(v.dims) != r:
            raise IRError(f"{what}: query, key and value need the same rank (at least "
                          f"2), got {list(q.dims)}, {list(k.dims)} and {list(v.dims)}")
        vq, vk, vv = self._value(q), self._value(k), self._value(v)
        kd, vd = list(k.dims), list(v.dims)
        if r >= 3 and k.dims[-3] != q.dims[-3]:
            vk, kd[-3] = self._shared_heads(k, q.dims[-3], what), q.dims[-3]
        if r >= 3 and v.dims[-3] != q.dims[-3]:
            vv, vd[-3] = self._shared_heads(v, q.dims[-3], what), q.dims[-3]
        if kd[:-2] != list(q.dims[:-2]) or vd[:-2] != list(q.dims[:-2]) or \
                kd[-1] != q.dims[-1] or kd[-2] != vd[-2]:
            raise IRError(f"{what}: {q.name}{list(q.dims)}, {k.name}{list(k.dims)} and "
                          f"{v.name}{list(v.dims)} do not match")
        if causal and kd[-2] != q.dims[-2]:
            raise IRError(f"{what}: causal attention needs the keys over the queries' "
                          f"dimension {q.dims[-2]}, got {kd[-2]}")
        if scale is None:
            scale = 1.0 / math.sqrt(self.dims[q.dims[-1]].size)
        vm = None
        if mask is not None:
            vm = self._aligned(mask, tuple(q.dims[:-1]) + (kd[-2],), None, what)
        out = attend(self._k, vq, vk, vv, scale, causal, vm, what, self._new_name(name))
        return self._array_out(out)

    def slice(self, x: Tensor, along: str, start: int, end: int,
              dim: str | None = None) -> Tensor:
        """``x[..., start:end, ...]`` along dimension ``along``, a view over a new
        dimension ``dim`` (declared here if new; default ``{along}_{start}``). Any
        range of a point dimension; whole blocks of a tiled one (``start`` a multiple
        of the block, ``end`` too or the end). No kernel, no name."""
        what = f"slice {x.name}"
        if x.dims.count(along) != 1:
            raise UsageError(f"{what}: along must name one of its dimensions "
                             f"{list(x.dims)} once, got {along!r}")
        d = self.dims[along]
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= d.size):
            raise UsageError(f"{what}: [{start}:{end}] is not a range of {along} "
                             f"(size {d.size})")
        if (start, end) == (0, d.size):
            return x
        if not d.point and (start % d.block or (end % d.block and end != d.size)):
            raise UsageError(f"{what}: [{start}:{end}] of {along} is not whole blocks of "
                             f"{d.block}")
        dim = dim or f"{along}_{start}"
        length = end - start
        if dim not in self.dims:
            if d.point:
                self.point_dim(dim, length)
            else:
                self.dim(dim, length, d.block)
        p = self.dims[dim]
        if p.size != length or p.point != d.point or \
                (not d.point and p.block != min(d.block, length)):
            raise IRError(f"{what}: dimension {dim} ({p.size} in blocks of {p.block}) "
                          f"is not {along}[{start}:{end}] in blocks of {d.block}")
        axis = x.dims.index(along)
        return self._view(V.slice_view(self._k.planner, self._value(x), axis, start, end,
                                       dim, what), x)

    def split(self, x: Tensor, along: str, sizes: Sequence[int],
              dims: Sequence[str] | None = None) -> list[Tensor]:
        """Consecutive slices of ``sizes`` along ``along`` (a fused q/k/v projection
        split into q, k and v): views over the dimensions ``dims``."""
        if sum(sizes) != self.dims.get(along, Dim(along, 1, 1)).size:
            raise UsageError(f"split {x.name}: sizes {list(sizes)} do not add up to "
                             f"{along}")
        names = list(dims) if dims is not None else [None] * len(sizes)
        if len(names) != len(sizes):
            raise UsageError(f"split {x.name}: {len(sizes)} sizes but {len(names)} dims")
        out, start = [], 0
        for size, dim in zip(sizes, names):
            out.append(self.slice(x, along, start, start + size, dim))
            start += size
        return out

    def concat(self, pieces: Sequence[Tensor], dim: str, axis: int = -1,
               name: str | None = None) -> Tensor:
        """``cat(pieces)`` along position ``axis`` as the dimension ``dim`` (declared
        here if new): the pieces agree on every other dimension and each has the same
        whole number of blocks along ``axis`` (the halves of a rotary head, q/k/v
        columns). One kernel."""
        pieces = list(pieces)
        what = "concat " + ", ".join(getattr(t, "name", repr(t)) for t in pieces)
        if not pieces or not all(isinstance(t, Tensor) for t in pieces):
            raise UsageError(f"{what}: needs a list of tensors")
        rank = len(pieces[0].dims)
        if not -rank <= axis < rank:
            raise UsageError(f"{what}: axis {axis} out of range for rank {rank}")
        axis %= rank
        rest = [t.dims[:axis] + t.dims[axis + 1:] for t in pieces]
        if any(len(t.dims) != rank for t in pieces) or len(set(rest)) != 1:
            raise IRError(f"{what}: the pieces differ beyond axis {axis}: "
                          + ", ".join(f"{t.name}{list(t.dims)}" for t in pieces))
        d = self.dims[pieces[0].dims[axis]]
        sizes = {(self.dims[t.dims[axis]].size, self.dims[t.dims[axis]].block) for t in pieces}
        if len(sizes) != 1 or d.point or (len(pieces) > 1 and d.size % d.block):
            raise UsageError(f"{what}: the pieces need the same whole number of blocks "
                             f"along axis {axis}: " + ", ".join(
                                 f"{t.name}{list(t.dims)}" for t in pieces))
        if dim not in self.dims:
            self.dim(dim, d.size * len(pieces), d.block)
        return self._array_out(self._k.concat([self._value(t) for t in pieces], axis, dim,
                                              what, self._new_name(name)))

    def rotate_half(self, x: Tensor, name: str | None = None) -> Tensor:
        """``cat(-x2, x1)`` of the two halves of each row of every column block (the
        rotary embeddings' rotation when a block is one head): one kernel."""
        return self._array_out(self._k.rotate_half(self._value(x), f"rotate_half {x.name}",
                                                   self._new_name(name)))

    def copy(self, x: Tensor, name: str | None = None) -> Tensor:
        """A new array holding ``x`` (a view materialised): one kernel."""
        v = self._value(x)
        return self._array_out(self._k.emit("copy", v.shape, v.axes,
                                            lambda index: self._k.block(v, index),
                                            self._new_name(name)))

    # -- result ----------------------------------------------------------------
    def build(self, *outputs: Tensor) -> Program:
        """The program computing ``outputs`` (a view becomes a copy kernel's array)."""
        outputs = tuple(self.copy(t) if isinstance(t, Tensor) and t.view is not None
                        else t for t in outputs)
        out_names = tuple(t.name for t in outputs)
        in_names = tuple(t.name for t in self.inputs)
        rest = tuple(n for n in self.arrays if n not in in_names and n not in out_names)
        order = in_names + out_names + rest   # the canonical order the printer writes
        arrays = tuple(GlobalArray(n, self.arrays[n].dims) for n in order)
        program = Program(self.name, tuple(self.dims.values()), arrays, in_names, out_names,
                          tuple(self.kernels), tuple(self.weights))
        return verify(program)


def _swap_last(rank: int) -> list[int]:
    """The permutation that swaps the last two axes."""
    return list(range(rank - 2)) + [rank - 1, rank - 2]


def _embeddings(small: tuple[str, ...], big: tuple[str, ...]) -> list[tuple[int, ...]]:
    """Every way to place ``small``'s dimensions, in order, among ``big``'s: the
    positions in ``big`` of each one (the first, leftmost placement first)."""
    if not small:
        return [()]
    out = []
    for p, d in enumerate(big):
        if d == small[0]:
            out += [(p,) + tuple(p + 1 + q for q in rest)
                    for rest in _embeddings(small[1:], big[p + 1:])]
    return out
