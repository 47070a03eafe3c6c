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
from ..ir.index import IVar
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

    # -- plumbing ----------------------------------------------------------------
    def _fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    @staticmethod
    def _var(dim: str) -> str:
        return dim.lower()

    def _load(self, t: Tensor, *vars_: str) -> Expr:
        return E.load(t.name, *vars_)

    def _emit(self, op: str, dims: tuple[str, ...], value_of, name: str | None) -> Tensor:
        """One kernel over ``dims`` storing ``value_of(loop vars...)`` into a new array."""
        out = Tensor(name or self._fresh(op), dims)
        if out.name in self.arrays:
            raise IRError(f"array {out.name} is defined twice")
        vars_ = tuple(self._var(d) for d in dims)
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
        kv = self._var(k)

        def value(i, j):
            rhs = (E.call("transpose", self._load(b, j, kv)) if transpose_b
                   else self._load(b, kv, j))
            return E.reduce("sum", kv, k, E.call("dot", self._load(a, i, kv), rhs))
        return self._emit("matmul", (m, n), value, name)

    def unary(self, op: str, a: Tensor, name: str | None = None) -> Tensor:
        return self._emit(op, a.dims, lambda *v: E.call(op, self._load(a, *v)), name)

    def binary(self, op: str, a: Tensor, b: Tensor | float, name: str | None = None) -> Tensor:
        """Elementwise ``op`` with broadcasting of a scalar or per-row/column vector."""
        if not isinstance(b, Tensor):
            return self._emit(op, a.dims, lambda *v: E.call(op, self._load(a, *v),
                                                            E.const(b)), name)
        if a.dims == b.dims:
            return self._emit(op, a.dims, lambda *v: E.call(op, self._load(a, *v),
                                                            self._load(b, *v)), name)
        if len(a.dims) == 2 and len(b.dims) == 1 and op in _ROW:
            if b.dims[0] == a.dims[0]:
                return self._emit(op, a.dims, lambda i, j: _ROW[op](self._load(b, i),
                                                                   self._load(a, i, j)), name)
            if b.dims[0] == a.dims[1]:
                return self._emit(op, a.dims, lambda i, j: _COL[op](self._load(b, j),
                                                                   self._load(a, i, j)), name)
        raise IRError(f"{op}: cannot broadcast {b.name}{list(b.dims)} against "
                      f"{a.name}{list(a.dims)}")

    def row_reduce(self, combiner: str, a: Tensor, *, mean: bool = False,
                   name: str | None = None) -> Tensor:
        """Reduce each row over the last dimension: ``sum``/``max`` (optionally a mean)."""
        rows, cols = a.dims
        cv = self._var(cols)
        block_op = {"sum": "rowsum", "max": "rowmax"}[combiner]

        def value(i):
            total = E.reduce(combiner, cv, cols, E.call(block_op, self._load(a, i, cv)))
            return E.call("mul", total, E.const(1.0 / self.dims[cols].size)) if mean else total
        return self._emit("mean" if mean else f"row{combiner}", (rows,), value, name)

    # -- composites (several kernels each) -------------------------------------
    def softmax(self, x: Tensor) -> Tensor:
        m = self.row_reduce("max", x)
        e = self.unary("exp", self.binary("sub", x, m))
        return self.binary("div", e, self.row_reduce("sum", e))

    def layer_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> Tensor:
        centred = self.binary("sub", x, self.row_reduce("sum", x, mean=True))
        var = self.row_reduce("sum", self.unary("square", centred), mean=True)
        rstd = self.unary("rsqrt", self.binary("add", var, eps))
        normed = self.binary("mul", centred, rstd)
        return self.binary("add", self.binary("mul", normed, gamma), beta)

    def rms_norm(self, x: Tensor, g: Tensor, eps: float) -> Tensor:
        ms = self.row_reduce("sum", self.unary("square", x), mean=True)
        rinv = self.unary("rsqrt", self.binary("add", ms, eps))
        return self.binary("mul", self.binary("mul", x, rinv), g)

    # -- result ----------------------------------------------------------------
    def build(self, *outputs: Tensor) -> Program:
        out_names = tuple(t.name for t in outputs)
        in_names = tuple(t.name for t in self.inputs)
        rest = tuple(n for n in self.arrays if n not in in_names and n not in out_names)
        order = in_names + out_names + rest   # the canonical order the printer writes
        arrays = tuple(GlobalArray(n, self.arrays[n].dims) for n in order)
        program = Program(self.name, tuple(self.dims.values()), arrays, in_names, out_names,
                          tuple(self.kernels))
        return verify(program)
