"""Hash-consing: structurally equal expressions are one object."""

from __future__ import annotations

import math
import pickle

import pytest

from blockbuster.ir import expr as E
from blockbuster.ir.index import as_idx


def _softmax_numerator():
    x = E.load("X", "i", "j")
    return E.call("exp", E.call("rowshift", E.call("neg", E.reduce(
        "max", "j", "N", E.call("rowmax", x))), x))


def test_same_structure_same_object():
    a, b = _softmax_numerator(), _softmax_numerator()
    assert a is b
    assert hash(a) == hash(b)


def test_shared_subexpressions_are_shared():
    e = _softmax_numerator()
    loads = [n for n in e.walk() if n.op == "load"]
    assert len(loads) == 1          # X[i, j] appears twice but is one node
    assert len(list(e.walk())) == len(set(map(id, e.walk())))


def test_different_structure_different_object():
    assert E.load("X", "i", "j") is not E.load("X", "j", "i")
    assert E.call("add", E.const(1), E.const(2)) is not E.call("add", E.const(2), E.const(1))
    assert E.reduce("sum", "k", "K", E.const(1)) is not E.reduce("max", "k", "K", E.const(1))
    assert E.reduce("sum", "k", "K", E.const(1)) is not E.reduce("sum", "k", "K", E.const(1), hi=3)


def test_index_forms_are_normalised():
    # A string, an ivar and an int all build the same subscripts.
    assert E.load("X", "i", 0) is E.load("X", as_idx("i"), as_idx(0))


def test_signed_zero_is_two_constants():
    assert E.const(0.0) is not E.const(-0.0)
    assert E.const(0.0) is E.const(0)            # int and float 0 are the same value
    assert math.copysign(1.0, E.const(-0.0).attr) == -1.0


def test_nan_constant_is_interned_once():
    assert E.const(math.nan) is E.const(float("nan"))


def test_nodes_are_immutable():
    e = E.const(1.0)
    with pytest.raises(AttributeError):
        e.op = "neg"


def test_pickle_preserves_identity():
    e = _softmax_numerator()
    assert pickle.loads(pickle.dumps(e)) is e
