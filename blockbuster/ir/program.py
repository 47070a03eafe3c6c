"""Kernels and programs.

A :class:`Kernel` is a parallel map over block indices (``for i in M, j in N``) whose
body stores output blocks. A store is the only way a value reaches global memory and
a ``load`` the only way one comes back: data movement between tiers is explicit.
"""

from __future__ import annotations

from typing import Iterator

import attrs

from .expr import Expr
from .index import Idx
from .types import Dim, GlobalArray


@attrs.frozen(cache_hash=True)
class Store:
    """``array[index] = value``. A ``None`` subscript (printed ``:``) stores every
    block along that dimension from a ``map`` value, outermost map first."""

    array: str
    index: tuple[Idx | None, ...]
    value: Expr


# Kernel.reads() is asked for constantly while rewriting (dataflow, dead code,
# verification); kernels are immutable, so the answer is cached per kernel.
_READS: dict = {}


@attrs.frozen(cache_hash=True)
class Kernel:
    name: str
    loops: tuple[tuple[str, str], ...]     # (variable, dimension), outermost first
    stores: tuple[Store, ...]

    @property
    def loop_vars(self) -> tuple[str, ...]:
        return tuple(v for v, _ in self.loops)

    def reads(self) -> frozenset[str]:
        """Global arrays this kernel loads."""
        hit = _READS.get(self)
        if hit is None:
            if len(_READS) > 50_000:
                _READS.clear()
            hit = _READS[self] = frozenset(n.attr.array for s in self.stores
                                           for n in s.value.walk() if n.op == "load")
        return hit

    def writes(self) -> tuple[str, ...]:
        return tuple(s.array for s in self.stores)


# Declaration tuple -> (the tuple, name -> its last declaration, name -> its first).
# Rewriting builds thousands of programs that share their dims and arrays tuples
# (``Program.evolve``), and each asks for these maps again and again. (A name declared
# twice is an error ``verify`` reports; until then the maps answer as before: the
# last declaration, and ``array`` the first.)
_BY_NAME: dict[int, tuple[tuple, dict, dict]] = {}


def _by_name(decls: tuple, first: bool = False) -> dict:
    hit = _BY_NAME.get(id(decls))
    if hit is None or hit[0] is not decls:
        if len(_BY_NAME) >= 4096:
            _BY_NAME.clear()
        last = {d.name: d for d in decls}
        firsts = last
        if len(last) != len(decls):
            firsts = {}
            for d in decls:
                firsts.setdefault(d.name, d)
        hit = _BY_NAME[id(decls)] = (decls, last, firsts)
    return hit[2] if first else hit[1]


def dims_named_by(kernels) -> set[str]:
    """Dimensions the kernels name themselves: their loops, reductions, maps and
    positions (a head-size dimension may appear in no array at all)."""
    out = set()
    for k in kernels:
        out |= {d for _, d in k.loops}
        for store in k.stores:
            for n in store.value.walk():
                if n.op in ("reduce", "map", "pos"):
                    out.add(n.attr.dim)
    return out


@attrs.frozen(cache_hash=True)
class Program:
    name: str
    dims: tuple[Dim, ...]
    arrays: tuple[GlobalArray, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    kernels: tuple[Kernel, ...]
    #: Inputs that are model parameters, the same on every call (norm gains, weight
    #: matrices): what depends only on them is weight preparation, done once.
    weights: tuple[str, ...] = ()
    #: Values of the weights, when the program came with them (an imported model's
    #: parameters): used for any weight a caller does not pass. Not part of the
    #: program's identity (equality, hashing) or of its text form.
    params: dict | None = attrs.field(default=None, eq=False, repr=False)

    # -- lookups ---------------------------------------------------------------
    def dim(self, name: str) -> Dim:
        for d in self.dims:
            if d.name == name:
                return d
        raise KeyError(name)

    @property
    def dim_map(self) -> dict[str, Dim]:
        """Name -> dimension (memoised per declaration tuple: do not change it)."""
        return _by_name(self.dims)

    def array(self, name: str) -> GlobalArray:
        hit = _by_name(self.arrays, first=True).get(name)
        if hit is None:
            raise KeyError(name)
        return hit

    @property
    def array_map(self) -> dict[str, GlobalArray]:
        """Name -> declaration (memoised per declaration tuple: do not change it)."""
        return _by_name(self.arrays)

    @property
    def intermediates(self) -> tuple[str, ...]:
        """Global arrays that are neither inputs nor outputs."""
        io = set(self.inputs) | set(self.outputs)
        return tuple(a.name for a in self.arrays if a.name not in io)

    def is_intermediate(self, array: str) -> bool:
        """``array in self.intermediates``, without building the tuple (a guard asks
        it for every load an inlining step could take)."""
        return (array not in self.inputs and array not in self.outputs
                and any(a.name == array for a in self.arrays))

    def producer(self, array: str) -> Kernel | None:
        for k in self.kernels:
            if array in k.writes():
                return k
        return None

    def consumers(self, array: str) -> list[Kernel]:
        return [k for k in self.kernels if array in k.reads()]

    def shape(self, array: str) -> tuple[int, ...]:
        dims = self.dim_map
        return tuple(dims[d].size for d in self.array(array).dims)

    def exprs(self) -> Iterator[Expr]:
        for k in self.kernels:
            for s in k.stores:
                yield s.value

    def evolve(self, **changes) -> "Program":
        return attrs.evolve(self, **changes)

    def __str__(self) -> str:
        from .printer import format_program
        return format_program(self)
