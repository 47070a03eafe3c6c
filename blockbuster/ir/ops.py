"""The operator vocabulary of block programs, and its typing rules.

Every operator has a name, an arity and a type rule. The rule language, the text
parser, the verifier, the interpreter and the code generators all consult this one
table, so adding an operator is one entry here plus its semantics in each backend.
"""

from __future__ import annotations

from typing import Callable

import attrs

from .types import SCALAR, ArrayType, BlockType, TupleType

#: Elementwise unary operators (type: same as the argument).
UNARY = ("neg", "exp", "log", "recip", "sqrt", "rsqrt", "square", "abs",
         "silu", "sigmoid", "tanh", "ones")   # ones(x): 1 everywhere, x's shape (counts)

#: Elementwise binary operators; a scalar broadcasts against anything.
BINARY = ("add", "sub", "mul", "div", "max", "min")


class OpTypeError(Exception):
    """Raised by a type rule; the verifier adds which node and where."""


def _block(t, what: str) -> BlockType:
    if not isinstance(t, BlockType):
        raise OpTypeError(f"{what} must be a block, vector or scalar, got {t}")
    return t


def _rank(t, rank: int, what: str) -> BlockType:
    t = _block(t, what)
    if len(t.axes) != rank:
        kind = {0: "a scalar", 1: "a vector", 2: "a 2-D block"}[rank]
        raise OpTypeError(f"{what} must be {kind}, got {t}")
    return t


def _unary(ts, attr):
    return _block(ts[0], "operand")


def _binary(ts, attr):
    a, b = _block(ts[0], "left operand"), _block(ts[1], "right operand")
    if not a.axes:
        return b
    if not b.axes or a == b:
        return a
    raise OpTypeError(f"operand types differ: {a} vs {b}")


def _row_broadcast(ts, attr):
    s, a = _rank(ts[0], 1, "row vector"), _rank(ts[1], 2, "block")
    if s.axes[0] != a.axes[0]:
        raise OpTypeError(f"row vector along {s.axes[0]} does not match rows of {a}")
    return a


def _col_broadcast(ts, attr):
    v, a = _rank(ts[0], 1, "column vector"), _rank(ts[1], 2, "block")
    if v.axes[0] != a.axes[1]:
        raise OpTypeError(f"column vector along {v.axes[0]} does not match columns of {a}")
    return a


def _outer(ts, attr):
    s, v = _rank(ts[0], 1, "left vector"), _rank(ts[1], 1, "right vector")
    return BlockType((s.axes[0], v.axes[0]))


def _dot(ts, attr):
    a, b = _rank(ts[0], 2, "left operand"), _rank(ts[1], 2, "right operand")
    if a.axes[1] != b.axes[0]:
        raise OpTypeError(f"dot contracts {a.axes[1]} with {b.axes[0]}: {a} x {b}")
    return BlockType((a.axes[0], b.axes[1]))


def _transpose(ts, attr):
    a = _rank(ts[0], 2, "operand")
    return BlockType((a.axes[1], a.axes[0]))


def _rotate_half(ts, attr):
    return _rank(ts[0], 2, "operand")


def _relabel(ts, attr):
    p, a = _rank(ts[0], 1, "positions vector"), _rank(ts[1], 2, "block")
    return BlockType((a.axes[0], p.axes[0]))


def _rowreduce(ts, attr):
    return BlockType((_rank(ts[0], 2, "operand").axes[0],))


def _colreduce(ts, attr):
    return BlockType((_rank(ts[0], 2, "operand").axes[1],))


def _keep_ge(ts, attr):
    p, q = _rank(ts[0], 1, "row positions"), _rank(ts[1], 1, "column positions")
    a = _rank(ts[2], 2, "block")
    if (p.axes[0], q.axes[0]) != a.axes:
        raise OpTypeError(f"positions along ({p.axes[0]}, {q.axes[0]}) do not match {a}")
    return a


def _proj(ts, attr):
    t = ts[0]
    if not isinstance(t, TupleType):
        raise OpTypeError(f"proj needs a multi-output reduction, got {t}")
    if not 0 <= attr < len(t.items):
        raise OpTypeError(f"proj index {attr} out of range for {len(t.items)} outputs")
    return t.items[attr]


@attrs.frozen
class OpSpec:
    name: str
    arity: int | None            # None: variadic (reduce)
    kind: str                    # unary, binary, broadcast, dot, ..., leaf, structural
    rule: Callable | None        # (arg types, attr) -> type; None: typed by the verifier


OPS: dict[str, OpSpec] = {}


def _add(name, arity, kind, rule):
    OPS[name] = OpSpec(name, arity, kind, rule)


for _n in UNARY:
    _add(_n, 1, "unary", _unary)
for _n in BINARY:
    _add(_n, 2, "binary", _binary)
_add("rowscale", 2, "broadcast", _row_broadcast)   # s[:, None] * a
_add("rowshift", 2, "broadcast", _row_broadcast)   # a + s[:, None]
_add("colscale", 2, "broadcast", _col_broadcast)   # a * v[None, :]
_add("colshift", 2, "broadcast", _col_broadcast)   # a + v[None, :]
_add("outer", 2, "broadcast", _outer)              # s[:, None] * v[None, :]
_add("dot", 2, "dot", _dot)
_add("transpose", 1, "layout", _transpose)
# Rotary embeddings (rotate-half convention): concat(-x2, x1) of the two halves of
# the block's columns (an even number of them). Not elementwise: a signed column
# permutation (linear; commutes with rowscale, not with column broadcasts).
_add("rotate_half", 1, "permute", _rotate_half)
# relabel(p, a): the block ``a`` with its columns renamed to the dimension of the
# position vector ``p`` (e.g. ``pos(HD, d)``); the values are ``a`` unchanged, and
# the column extents must agree. It views one head-sized column block of a
# projection (dim QD or KD) as a head (dim HD) and back; ``p`` only names the type.
_add("relabel", 2, "relabel", _relabel)
_add("rowsum", 1, "rowreduce", _rowreduce)
_add("rowmax", 1, "rowreduce", _rowreduce)
_add("colsum", 1, "colreduce", _colreduce)
_add("colmax", 1, "colreduce", _colreduce)
_add("keep_ge", 3, "mask", _keep_ge)               # a where p[r] >= q[c], else -inf
_add("proj", 1, "structural", _proj)
# Leaves and binders: typed by the verifier, which knows arrays, dims and scopes.
_add("load", 0, "leaf", None)
_add("const", 0, "leaf", None)
_add("pos", 0, "leaf", None)
_add("runmax", 0, "leaf", None)
_add("get", 1, "structural", None)                 # get(a, d): block d of a map array
_add("pvar", 0, "pattern", None)                  # a rule's pattern variable
_add("reduce", None, "structural", None)
_add("map", 1, "structural", None)

#: Operators a user may write as ``name(args...)`` in a program or rule file.
CALLABLE = frozenset(n for n, s in OPS.items()
                     if s.kind not in ("leaf", "structural", "pattern")) | {"proj"}


def check_arity(name: str, nargs: int) -> str | None:
    """An error message if ``name`` is unknown or given the wrong number of arguments."""
    spec = OPS.get(name)
    if spec is None or name not in CALLABLE:
        return f"unknown operator '{name}'"
    if spec.arity is not None and spec.arity != nargs:
        plural = "s" if spec.arity != 1 else ""
        return f"operator '{name}' takes {spec.arity} argument{plural}, got {nargs}"
    return None


__all__ = ["OPS", "UNARY", "BINARY", "CALLABLE", "OpSpec", "OpTypeError", "check_arity",
           "SCALAR", "ArrayType", "BlockType", "TupleType"]
