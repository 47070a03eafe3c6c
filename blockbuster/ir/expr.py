"""Hash-consed expression nodes: the bodies of kernels.

An :class:`Expr` is ``(op, args, attr)``: an operator name from :mod:`.ops`, child
expressions, and an op-specific immutable attribute (a load's array and block index,
a constant's value, a reduction's combiner and range, ...). Nodes are interned:
building the same structure twice returns the same object, so structural equality
is identity, common sub-expressions are shared for free, and rewriting can memoise
on nodes.
"""

from __future__ import annotations

import math
import weakref
from typing import Iterable, Iterator

import attrs

from .index import Idx, as_idx
from .walk import free_vars_of


@attrs.frozen(cache_hash=True)
class ReduceAttr:
    """A sequential reduction ``combiner(var in dim[lo:hi]: bodies...)``.

    ``lo``/``hi`` are block-index expressions (``None``: the whole dimension); they
    may use enclosing loop variables, e.g. ``hi = i + 1`` for causal attention.
    """

    combiner: str
    var: str
    dim: str
    lo: Idx | None = None
    hi: Idx | None = None


@attrs.frozen(cache_hash=True)
class LoadAttr:
    array: str
    index: tuple[Idx, ...]


@attrs.frozen(cache_hash=True)
class BindAttr:
    """A block-index variable bound over a dimension (``map``)."""

    var: str
    dim: str


@attrs.frozen(cache_hash=True)
class PosAttr:
    """Global element positions along ``dim`` of the block at index ``index``."""

    dim: str
    index: Idx


def attr_key(attr):
    """``attr`` as a key that tells equal nodes: 0.0 == -0.0 and nan != nan, so
    floats key by their exact bits."""
    if isinstance(attr, float):
        return ("float", attr.hex())
    return attr



class Expr:
    """An immutable, interned expression node. Build with the helpers below."""

    __slots__ = ("op", "args", "attr", "_hash", "_free", "__weakref__")
    _table: "weakref.WeakValueDictionary[tuple, Expr]" = weakref.WeakValueDictionary()

    def __new__(cls, op: str, args: Iterable["Expr"] = (), attr=None):
        args = tuple(args)
        key = (op, args, attr_key(attr))
        node = cls._table.get(key)
        if node is not None:
            return node
        node = object.__new__(cls)
        object.__setattr__(node, "op", op)
        object.__setattr__(node, "args", args)
        object.__setattr__(node, "attr", attr)
        object.__setattr__(node, "_hash", hash(key))
        object.__setattr__(node, "_free", None)
        cls._table[key] = node
        return node

    def __setattr__(self, name, value):
        raise AttributeError("Expr nodes are immutable")

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other

    def __reduce__(self):
        return (Expr, (self.op, self.args, self.attr))

    def __repr__(self) -> str:
        from .printer import format_expr
        return f"Expr<{format_expr(self)}>"

    def replace(self, args=None, attr=...) -> "Expr":
        return Expr(self.op, self.args if args is None else args,
                    self.attr if attr is ... else attr)

    @property
    def free_vars(self) -> frozenset[str]:
        """Block-index variables this value depends on (bound ones excluded)."""
        if self._free is None:
            # Children first, without recursion (expressions can be very deep), and
            # only below nodes not known yet: a rewrite's new node mostly sits on
            # old subtrees whose answers are cached.
            stack = [self]
            while stack:
                node = stack[-1]
                missing = [a for a in node.args if a._free is None]
                if missing:
                    stack.extend(missing)
                    continue
                stack.pop()
                if node._free is None:
                    object.__setattr__(node, "_free",
                                       free_vars_of(node, (a._free for a in node.args)))
        return self._free

    def walk(self) -> Iterator["Expr"]:
        """Every distinct node of the DAG, children before parents."""
        return iter(self.postorder())

    def postorder(self) -> tuple["Expr", ...]:
        """``walk``'s nodes as a tuple (memoised: do not rely on its identity)."""
        order = _WALKS.get(self)
        if order is None:
            order = _postorder(self)
            if len(_WALKS) >= _WALKS_LIMIT:
                _WALKS.clear()
            _WALKS[self] = order
        return order


# Fusion walks the same kernel bodies over and over (matching, dataflow, limits,
# verification, pricing): each distinct root's node order is computed once.
_WALKS: dict = {}
_WALKS_LIMIT = 32768


def _postorder(root: Expr) -> tuple:
    out = []
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            out.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for child in reversed(node.args):
            if id(child) not in seen:
                stack.append((child, False))
    return tuple(out)


# ---------------------------------------------------------------------------
# Builders. They do no type checking: the verifier does (it knows the program).
# ---------------------------------------------------------------------------

def load(array: str, *index) -> Expr:
    return Expr("load", (), LoadAttr(array, tuple(as_idx(i) for i in index)))


def const(value: float) -> Expr:
    return Expr("const", (), float(value))


def call(op: str, *args: Expr) -> Expr:
    return Expr(op, args)


def reduce(combiner: str, var: str, dim: str, *bodies: Expr, lo=None, hi=None) -> Expr:
    return Expr("reduce", bodies, ReduceAttr(combiner, var, dim,
                                             None if lo is None else as_idx(lo),
                                             None if hi is None else as_idx(hi)))


def proj(value: Expr, k: int) -> Expr:
    return Expr("proj", (value,), int(k))


def map_(var: str, dim: str, body: Expr) -> Expr:
    return Expr("map", (body,), BindAttr(var, dim))


def runmax(var: str) -> Expr:
    """The running max of the enclosing ``online_softmax`` over ``var`` (its rows are
    those of that reduction's logits)."""
    return Expr("runmax", (), str(var))


def get(array: Expr, var: str) -> Expr:
    """Block ``var`` of a local ``map`` array (``var`` runs over the array's dimension):
    reading a held accumulator back."""
    return Expr("get", (array,), str(var))


def pos(dim: str, index) -> Expr:
    return Expr("pos", (), PosAttr(dim, as_idx(index)))


NEG_INF = -math.inf
