"""The builder's elementwise operators and the broadcasting by dimension names they
share (a mixin of :class:`~blockbuster.frontend.builder.GraphBuilder`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import IRError, UsageError
from .builder_tensor import Tensor
from .tensors import values as V
from .tensors.values import Value, scalar


class ElementwiseOps:
    """Elementwise kernels: ``unary``/``binary`` by operator name, the named operators,
    ``where``, ``pow``, ``clamp``; operands broadcast by dimension name."""

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
            made = getattr(self._k.planner, "made", set())
            scalars = [t.name for t in tensors if t.dims and set(t.dims) <= made]
            hint = (f" ({', '.join(scalars)}: computed from 0-d inputs alone, stored along "
                    f"a unit dimension of its own; a 0-d input itself broadcasts, a value "
                    f"computed from it does not: pass that value as an input)"
                    if scalars else "")
            raise IRError(f"{what}: cannot broadcast " + " and ".join(
                f"{t.name}{list(t.dims)}" for t in tensors) + hint)
        values = [self._aligned(t, out, along if t.dims != out else None, what)
                  if isinstance(t, Tensor) else scalar(t) for t in operands]
        return self._array_out(self._k.elementwise(op, values, what, self._new_name(name)))


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

    def sin(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("sin", x, name)

    def cos(self, x: Tensor, name: str | None = None) -> Tensor:
        return self.unary("cos", x, name)

    def log1p(self, x: Tensor, name: str | None = None) -> Tensor:
        """``log(1 + x)``, accurate for tiny ``x``."""
        return self.unary("log1p", x, name)

    def expm1(self, x: Tensor, name: str | None = None) -> Tensor:
        """``exp(x) - 1``, accurate for tiny ``x``."""
        return self.unary("expm1", x, name)

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
        """``x ** exponent``: an integer from -8 to 8, or a non-integer (``exp(e·log x)``)."""
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
