"""A small tensor-level builder that lowers to *unfused* block programs.

Every primitive operation becomes one kernel and every intermediate tensor a global
array: the starting point the fusion rules work from. Tensors are 1-D (a vector per
row) or 2-D; broadcasting a vector against a matrix follows the named dimensions
(``x - mean(x)`` subtracts a per-row vector, ``x * gamma`` scales columns).
"""

from __future__ import annotations

import attrs

from ..errors import IRError, UsageError
from ..ir import expr as E
from ..ir.expr import Expr
from ..ir.index import Idx, IVar
from ..ir.program import Kernel, Program, Store
from ..ir.types import Dim, GlobalArray
from ..ir.verify import verify

DEFAULT_BLOCK = 64


@attrs.frozen
class Tensor:
    """A global array produced by the builder (or declared as an input)."""

    name: str
    dims: tuple[str, ...]


# Elementwise binary op -> how it broadcasts a per-row / per-column vector operand.
_ROW = {"add": lambda v, a: E.call("rowshift", v, a),
        "sub": lambda v, a: E.call("rowshift", E.call("neg", v), a),
        "mul": lambda v, a: E.call("rowscale", v, a),
        "div": lambda v, a: E.call("rowscale", E.call("recip", v), a)}
_COL = {"add": lambda v, a: E.call("colshift", v, a),
        "sub": lambda v, a: E.call("colshift", E.call("neg", v), a),
        "mul": lambda v, a: E.call("colscale", v, a),
        "div": lambda v, a: E.call("colscale", E.call("recip", v), a)}


class GraphBuilder:
    def __init__(self, name: str):
        self.name = name
        self.dims: dict[str, Dim] = {}
        self.inputs: list[Tensor] = []
        self.weights: list[str] = []
        self.outputs: list[str] = []
        self.arrays: dict[str, Tensor] = {}
        self.kernels: list[Kernel] = []
        self._counter = 0

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

    @staticmethod
    def _var(dim: str, taken=()) -> str:
        """A binder name for ``dim`` (its lower-case name) not in ``taken``: a kernel's
        loops and the binders inside it never share a name, so no binder shadows
        another (``X[N, M] @ W[M, M]`` sums over ``m2``, not over the loop's ``m``)."""
        base = dim.lower()
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}{n}"
        return name

    @classmethod
    def _distinct(cls, *bases: str) -> tuple[str, ...]:
        """One binder name per base, all different (see ``_var``)."""
        names: list[str] = []
        for b in bases:
            names.append(cls._var(b, names))
        return tuple(names)

    def _load(self, t: Tensor, *vars_: str) -> Expr:
        return E.load(t.name, *vars_)

    def _emit(self, op: str, dims: tuple[str, ...], value_of, name: str | None) -> Tensor:
        """One kernel over ``dims`` storing ``value_of(loop vars...)`` into a new array."""
        out = Tensor(name or self._fresh(op), dims)
        if out.name in self.arrays:
            raise IRError(f"array {out.name} is defined twice")
        vars_ = self._distinct(*dims)
        value = value_of(*vars_)
        self.kernels.append(Kernel(out.name, tuple(zip(vars_, dims)),
                                   (Store(out.name, tuple(IVar(v) for v in vars_), value),)))
        self.arrays[out.name] = out
        return out

    # -- primitives --------------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor, *, transpose_b: bool = False,
               name: str | None = None) -> Tensor:
        """``a @ b`` (or ``a @ b.T``), a sum over blocks of the contracted dimension."""
        (m, k), (kb, n) = a.dims, (b.dims[::-1] if transpose_b else b.dims)
        if k != kb:
            raise IRError(f"matmul {a.name} x {b.name}: contracts {k} with {kb}")
        def value(i, j):
            kv = self._var(k, (i, j))
            rhs = (E.call("transpose", self._load(b, j, kv)) if transpose_b
                   else self._load(b, kv, j))
            return E.reduce("sum", kv, k, E.call("dot", self._load(a, i, kv), rhs))
        return self._emit("matmul", (m, n), value, name)

    def unary(self, op: str, a: Tensor, name: str | None = None) -> Tensor:
        return self._emit(op, a.dims, lambda *v: E.call(op, self._load(a, *v)), name)

    def binary(self, op: str, a: Tensor, b: Tensor | float, name: str | None = None,
               along: str | None = None) -> Tensor:
        """Elementwise ``op`` with broadcasting of a scalar or per-row/column vector.

        A vector over a dimension that both rows and columns of ``a`` run over (a square
        ``X[M, M]``) is ambiguous: ``along="rows"`` (one value per row, the default) or
        ``along="cols"`` (one value per column, e.g. a norm's gain) says which."""
        if not isinstance(b, Tensor):
            return self._emit(op, a.dims, lambda *v: E.call(op, self._load(a, *v),
                                                            E.const(b)), name)
        if a.dims == b.dims:
            return self._emit(op, a.dims, lambda *v: E.call(op, self._load(a, *v),
                                                            self._load(b, *v)), name)
        if along not in (None, "rows", "cols"):
            raise UsageError(f"{op}: along must be 'rows' or 'cols', got {along!r}")
        if len(a.dims) == 2 and len(b.dims) == 1 and op in _ROW:
            if b.dims[0] == a.dims[0] and along != "cols":
                return self._emit(op, a.dims, lambda i, j: _ROW[op](self._load(b, i),
                                                                   self._load(a, i, j)), name)
            if b.dims[0] == a.dims[1] and along != "rows":
                return self._emit(op, a.dims, lambda i, j: _COL[op](self._load(b, j),
                                                                   self._load(a, i, j)), name)
        raise IRError(f"{op}: cannot broadcast {b.name}{list(b.dims)} against "
                      f"{a.name}{list(a.dims)}")

    def row_reduce(self, combiner: str, a: Tensor, *, mean: bool = False,
                   name: str | None = None) -> Tensor:
        """Reduce each row over the last dimension: ``sum``/``max`` (optionally a mean)."""
        rows, cols = a.dims
        block_op = {"sum": "rowsum", "max": "rowmax"}[combiner]

        def value(i):
            cv = self._var(cols, (i,))
            total = E.reduce(combiner, cv, cols, E.call(block_op, self._load(a, i, cv)))
            return E.call("mul", total, E.const(1.0 / self.dims[cols].size)) if mean else total
        return self._emit("mean" if mean else f"row{combiner}", (rows,), value, name)

    def col_reduce(self, combiner: str, a: Tensor, *, mean: bool = False,
                   name: str | None = None) -> Tensor:
        """Reduce each column over the first dimension: ``sum``/``max`` (or a mean)."""
        rows, cols = a.dims
        block_op = {"sum": "colsum", "max": "colmax"}[combiner]

        def value(j):
            rv = self._var(rows, (j,))
            total = E.reduce(combiner, rv, rows, E.call(block_op, self._load(a, rv, j)))
            return E.call("mul", total, E.const(1.0 / self.dims[rows].size)) if mean else total
        return self._emit("colmean" if mean else f"col{combiner}", (cols,), value, name)

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
        """``a`` where ``cond`` is not 0, else ``b``; ``a`` or ``b`` may be a number.
        Tensors must have ``cond``'s dimensions."""
        if not isinstance(cond, Tensor):
            raise UsageError("where: the condition must be a tensor")
        for t in (a, b):
            if isinstance(t, Tensor) and t.dims != cond.dims:
                raise IRError(f"where: {t.name}{list(t.dims)} does not match the "
                              f"condition {cond.name}{list(cond.dims)}")
            if not isinstance(t, (Tensor, int, float)):
                raise UsageError(f"where: operands must be tensors or numbers, got {t!r}")

        def operand(t, vars_):
            return self._load(t, *vars_) if isinstance(t, Tensor) else E.const(float(t))

        return self._emit("where", cond.dims, lambda *v: E.call(
            "where", self._load(cond, *v), operand(a, v), operand(b, v)), name)

    # -- composites (several kernels each) -------------------------------------
    def softmax(self, x: Tensor) -> Tensor:
        m = self.row_reduce("max", x)
        e = self.unary("exp", self.binary("sub", x, m))
        return self.binary("div", e, self.row_reduce("sum", e))

    def log_softmax(self, x: Tensor) -> Tensor:
        """``x - max - log(sum(exp(x - max)))`` per row."""
        shifted = self.binary("sub", x, self.row_reduce("max", x))
        total = self.row_reduce("sum", self.unary("exp", shifted))
        return self.binary("sub", shifted, self.unary("log", total))

    def layer_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> Tensor:
        centred = self.binary("sub", x, self.row_reduce("sum", x, mean=True))
        var = self.row_reduce("sum", self.unary("square", centred), mean=True)
        rstd = self.unary("rsqrt", self.binary("add", var, eps))
        normed = self.binary("mul", centred, rstd)
        # gamma and beta are per column (also when X is square: along="cols")
        return self.binary("add", self.binary("mul", normed, gamma, along="cols"), beta,
                           along="cols")

    def rms_norm(self, x: Tensor, g: Tensor, eps: float) -> Tensor:
        ms = self.row_reduce("sum", self.unary("square", x), mean=True)
        rinv = self.unary("rsqrt", self.binary("add", ms, eps))
        return self.binary("mul", self.binary("mul", x, rinv), g, along="cols")

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

    @staticmethod
    def _head_block(var: str, group: int) -> Idx:
        """The column block of the projection read by head ``var``: ``var // group``."""
        return IVar(var) // group

    def rope_heads(self, x: Tensor, cos: Tensor, sin: Tensor, heads: str,
                   name: str | None = None) -> Tensor:
        """Split ``x[T, C]`` into heads and apply rotary embeddings (rotate-half):
        ``out[h] = xh·cos + rotate_half(xh)·sin`` with ``xh`` column block h of x;
        ``cos``/``sin`` are ``[T, HD]`` tables. Result ``[heads, T, HD]``; one kernel."""
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
        heads, rows, hd = o.dims
        cols, n = w.dims
        self._head_dims(f"matmul {o.name} x {w.name}", cols, heads, hd)
        t, c, h = self._distinct(rows, n, heads)
        blk = self._head_block(h, 1)
        value = E.reduce("sum", h, heads, E.call(
            "dot", E.call("relabel", E.pos(cols, blk), E.load(o.name, h, t, 0)),
            E.load(w.name, blk, c)))
        return self._emit_loops("matmul", ((t, rows), (c, n)), value, name)

    # -- result ----------------------------------------------------------------
    def build(self, *outputs: Tensor) -> Program:
        out_names = tuple(t.name for t in outputs)
        in_names = tuple(t.name for t in self.inputs)
        rest = tuple(n for n in self.arrays if n not in in_names and n not in out_names)
        order = in_names + out_names + rest   # the canonical order the printer writes
        arrays = tuple(GlobalArray(n, self.arrays[n].dims) for n in order)
        program = Program(self.name, tuple(self.dims.values()), arrays, in_names, out_names,
                          tuple(self.kernels), tuple(self.weights))
        return verify(program)
