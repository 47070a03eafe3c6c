"""The registry of ATen handlers (:data:`HANDLERS`, filled by ``@handles``) and what
the handler modules share: empty tensors and scalar operands."""

from __future__ import annotations

from ..tensors.values import Value, scalar
from .dims import ImportError_

HANDLERS: dict = {}


def handles(*targets):
    def register(fn):
        for t in targets:
            HANDLERS[f"aten.{t}"] = fn
        return fn
    return register


class Empty:
    """A tensor with no elements (an empty key/value cache, the pass-through part
    of a rotary embedding over the whole head): concatenation drops it; any other
    operator on it is an error."""

    def __init__(self, shape: tuple):
        self.shape = shape

    def __repr__(self) -> str:
        return f"an empty tensor of shape {list(self.shape)}"


#: Operators that accept :class:`Empty` operands.
TAKES_EMPTY = {"aten.cat.default"}


def is_call(node, name: str) -> bool:
    """Is the FX ``node`` a call of the ATen operator ``name`` (``aten.cat.default``)?"""
    return getattr(node, "op", None) == "call_function" and str(node.target) == name


def operand(x) -> Value:
    if isinstance(x, Value):
        return x
    if isinstance(x, (int, float, bool)):
        return scalar(float(x))
    raise ImportError_(f"unsupported argument {x!r}")
