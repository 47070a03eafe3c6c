"""The builder's contractions and reductions: matmul, row and column reductions, and
the row-wise composites (softmax, norms) built on them (a mixin of
:class:`~blockbuster.frontend.builder.GraphBuilder`)."""

from __future__ import annotations

from ..errors import IRError, UsageError
from .builder_tensor import Tensor
from .tensors import composites
from .tensors import values as V
from .tensors.values import Value


class ReductionOps:
    """``matmul``/``linear``, ``row_*``/``col_*`` reductions and the composites."""

    # -- primitives --------------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor, *, transpose_a: bool = False,
               transpose_b: bool = False, name: str | None = None) -> Tensor:
        """``a @ b`` over the last two dimensions (``transpose_a``/``transpose_b``:
        ``aᵀ``, ``bᵀ``), a sum over blocks of the contracted dimension. Leading
        (batch) dimensions broadcast: those of the operand with fewer must end the
        other's (``X[B, T, E] @ W[E, F]`` is ``[B, T, F]``)."""
        va, vb = self._value(a), self._value(b)
        what = f"matmul {a.name} x {b.name}"
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
        if len(x.dims) >= 2 and len(w.dims) == 2 and w.dims[-1] != x.dims[-1]:
            raise IRError(f"linear {x.name}, {w.name}: the weight is [out, in] "
                          f"(torch.nn.Linear's layout), so it needs {x.dims[-1]} last; "
                          f"got {w.name}{list(w.dims)} (for {x.name} @ {w.name} with "
                          f"{w.name}[in, out], use matmul)")
        y = self.matmul(x, w, transpose_b=True, name=None if bias is not None else name)
        return self.add(y, bias, name) if bias is not None else y

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


def _swap_last(rank: int) -> list[int]:
    """The permutation that swaps the last two axes."""
    return list(range(rank - 2)) + [rank - 1, rank - 2]
