"""Exact sums over nested block loops, without enumerating independent loops.

Every figure of the cost model is a sum, over all iterations of the loops enclosing
a node, of a product of block extents: a load ``X[i, k]`` moves
``extent_M(i) * extent_K(k)`` elements each time it runs. Enumerating the iterations
costs ``nblocks ** depth``. Instead we sum the loops out innermost first (variable
elimination on a sum of products): summing out loop ``v`` only touches the factors
that mention ``v``, and yields a new factor over the variables those factors and
``v``'s bounds mention, memoised on their values. So an independent loop costs
``O(nblocks)`` once (``Σ_k extent(k)`` is just the dimension's size), and only loops
coupled by bounds (``j in S[: i + 1]``) or index expressions (``h // 2``) are
enumerated together.
"""

from __future__ import annotations

from typing import Sequence

import attrs

from ..ir.index import IVar, Idx, evaluate, free_vars
from ..ir.types import Dim


@attrs.frozen(cache_hash=True)
class Loop:
    """One loop: ``name`` runs over the blocks ``[lo, hi)`` of ``dim``.

    ``lo``/``hi`` (``None``: the whole dimension) may use the names of enclosing
    loops. They are clamped to ``[0, nblocks)``.
    """

    name: str
    dim: Dim
    lo: Idx | None = None
    hi: Idx | None = None


def block_extent(dim: Dim, b: int) -> int:
    """Elements in block ``b`` of ``dim``; 0 outside the dimension (nothing moves)."""
    return dim.extent(b) if 0 <= b < dim.nblocks else 0


#: An extent factor: ``(dim, index)`` is the extent of ``dim`` at block ``index``;
#: ``(dim, None)`` is a full block (``dim.block``), for when the index is unknown.
Extent = tuple[Dim, "Idx | None"]


class _Factor:
    """A non-negative integer function of some loop variables, memoised on them."""

    __slots__ = ("vars", "memo")

    def __init__(self, variables):
        self.vars = tuple(sorted(variables))
        self.memo: dict[tuple, int] = {}

    def value(self, env: dict[str, int]) -> int:
        key = tuple(env[v] for v in self.vars)
        hit = self.memo.get(key)
        if hit is None:
            hit = self.memo[key] = self.compute(env)
        return hit

    def compute(self, env) -> int:  # pragma: no cover - abstract
        raise NotImplementedError


class _ExtentFactor(_Factor):
    __slots__ = ("dim", "index")

    def __init__(self, dim: Dim, index: Idx | None):
        super().__init__(() if index is None else free_vars(index))
        self.dim, self.index = dim, index

    def compute(self, env) -> int:
        if self.index is None:
            return self.dim.block
        return block_extent(self.dim, evaluate(self.index, env))


class _SumFactor(_Factor):
    """``Σ_{v in loop} Π parts``: what is left of ``parts`` once ``loop`` is summed out."""

    __slots__ = ("loop", "parts")

    def __init__(self, loop: Loop, parts: list[_Factor]):
        variables = {v for p in parts for v in p.vars} - {loop.name}
        for bound in (loop.lo, loop.hi):
            if bound is not None:
                variables |= free_vars(bound)
        super().__init__(variables)
        self.loop, self.parts = loop, parts

    def compute(self, env) -> int:
        loop = self.loop
        lo = 0 if loop.lo is None else max(0, evaluate(loop.lo, env))
        hi = loop.dim.nblocks if loop.hi is None else min(loop.dim.nblocks,
                                                          evaluate(loop.hi, env))
        if not self.parts:
            return max(0, hi - lo)
        inner = {v: env[v] for v in self.vars}
        total = 0
        for b in range(lo, hi):
            inner[loop.name] = b
            term = 1
            for part in self.parts:
                term *= part.value(inner)
                if not term:
                    break
            total += term
        return total


class LoopSums:
    """Computes (and memoises) ``Σ over the iterations of loops of Π extents``."""

    def __init__(self):
        self._memo: dict[tuple, int] = {}

    def count(self, loops: Sequence[Loop], extents: Sequence[Extent] = ()) -> int:
        """Sum over every iteration of ``loops`` (outermost first) of the product of
        ``extents``; with no extents, the number of iterations."""
        # The arguments as given key the memo too (normalising them is most of the
        # cost of a hit); the normalised key below is a fixed point of normalising.
        raw = (loops if isinstance(loops, tuple) else tuple(loops),
               extents if type(extents) is tuple else tuple(extents))
        hit = self._memo.get(raw)
        if hit is not None:
            return hit
        total = self._count(raw[0], raw[1])
        self._memo[raw] = total
        return total

    def _count(self, loops: tuple, extents: tuple) -> int:
        # A block of a dimension with no ragged block, indexed by a loop over that
        # same dimension, is always a full block: no need to enumerate the loop.
        by_name = {loop.name: loop for loop in loops}
        extents = [(d, None) if (isinstance(ix, IVar) and d.size % d.block == 0
                                 and ix.name in by_name
                                 and (by_name[ix.name].dim is d or by_name[ix.name].dim == d))
                   else (d, ix) for d, ix in extents]
        key = (tuple(loops), tuple(sorted(extents, key=_extent_key)))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        factors: list[_Factor] = [_ExtentFactor(d, ix) for d, ix in key[1]]
        for loop in reversed(key[0]):
            inside = [f for f in factors if loop.name in f.vars]
            factors = [f for f in factors if loop.name not in f.vars]
            factors.append(_SumFactor(loop, inside))
        total = 1
        for f in factors:
            if f.vars:
                raise KeyError(f"index variables {f.vars} are not bound by any loop")
            total *= f.value({})
        self._memo[key] = total
        return total


def _extent_key(e: Extent):
    return (e[0].name, str(e[1]))
