"""Block-index expressions: the subscripts of loads and stores, and reduction bounds.

A block index is an integer expression of the enclosing loop variables, e.g. ``i``,
``h // 4`` (grouped heads) or ``i + 1`` (the exclusive end of a causal range).
"""

from __future__ import annotations

from typing import Mapping

import attrs

_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
}


@attrs.frozen(cache_hash=True)
class Idx:
    """Base class; use :func:`ivar`, :func:`iconst` and the arithmetic operators."""

    def __add__(self, other): return IBin("+", self, as_idx(other))
    def __sub__(self, other): return IBin("-", self, as_idx(other))
    def __mul__(self, other): return IBin("*", self, as_idx(other))
    def __floordiv__(self, other): return IBin("//", self, as_idx(other))


@attrs.frozen(cache_hash=True)
class IVar(Idx):
    name: str

    def __str__(self) -> str:
        return self.name


@attrs.frozen(cache_hash=True)
class IConst(Idx):
    value: int

    def __str__(self) -> str:
        return str(self.value)


@attrs.frozen(cache_hash=True)
class IBin(Idx):
    op: str
    a: Idx
    b: Idx

    def __attrs_post_init__(self):
        if self.op not in _OPS:
            raise ValueError(f"unknown index operator {self.op!r}")

    def __str__(self) -> str:
        def side(x: Idx) -> str:
            return f"({x})" if isinstance(x, IBin) else str(x)
        return f"{side(self.a)} {self.op} {side(self.b)}"


def ivar(name: str) -> IVar:
    return IVar(name)


def iconst(value: int) -> IConst:
    return IConst(int(value))


def as_idx(x) -> Idx:
    if isinstance(x, Idx):
        return x
    if isinstance(x, int):
        return IConst(x)
    if isinstance(x, str):
        return IVar(x)
    raise TypeError(f"not a block index: {x!r}")


def free_vars(x: Idx) -> frozenset[str]:
    if isinstance(x, IVar):
        return frozenset([x.name])
    if isinstance(x, IBin):
        return free_vars(x.a) | free_vars(x.b)
    return frozenset()


def evaluate(x: Idx, env: Mapping[str, int]) -> int:
    if isinstance(x, IVar):
        return env[x.name]
    if isinstance(x, IConst):
        return x.value
    return _OPS[x.op](evaluate(x.a, env), evaluate(x.b, env))


def substitute(x: Idx, mapping: Mapping[str, Idx]) -> Idx:
    """Replace variables by index expressions."""
    if isinstance(x, IVar):
        return mapping.get(x.name, x)
    if isinstance(x, IBin):
        return IBin(x.op, substitute(x.a, mapping), substitute(x.b, mapping))
    return x
