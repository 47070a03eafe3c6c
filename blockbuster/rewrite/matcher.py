"""Compiling rule patterns into matchers, and instantiating replacements.

A pattern is an expression whose leaves may be pattern variables (``pvar``); in a
binder ``sum(k in R: ...)`` the loop variable ``k`` and the range ``R`` are pattern
variables too. Matching is syntactic on the hash-consed DAG (no AC search), so a
match is a single dictionary of bindings and failure needs no backtracking.
Compiled matchers check the cheap things first (operator, arity, attribute) and
only then descend: most candidate nodes are rejected at the root.
"""

from __future__ import annotations

from typing import Callable

import attrs

from ..ir.expr import Expr
from ..ir.walk import binder_of, with_args

Bindings = dict
Matcher = Callable[[Expr, Bindings], bool]


def _bind(b: Bindings, name: str, value) -> bool:
    old = b.get(name, b)
    if old is b:
        b[name] = value
        return True
    return old == value


def compile_pattern(p: Expr) -> Matcher:
    """A function ``match(node, bindings) -> bool`` that extends ``bindings``."""
    op = p.op
    if op == "pvar":
        name = p.attr
        return lambda n, b: _bind(b, name, n)
    if op == "runmax":
        var = p.attr
        return lambda n, b: n.op == "runmax" and _bind(b, var, n.attr)
    children = [compile_pattern(a) for a in p.args]
    arity = len(children)

    binder = binder_of(p)
    if binder is not None:
        # ``k in R``: the loop variable k binds the node's variable, the range R its
        # (dimension, lo, hi); a reduction's combiner must match too.
        var, rng = binder.var, binder.dim
        comb = p.attr.combiner if op == "reduce" else None

        def match_binder(n, b):
            if n.op != op or len(n.args) != arity or (comb is not None and n.attr.combiner != comb):
                return False
            nb = binder_of(n)
            if not (_bind(b, var, nb.var) and _bind(b, rng, (nb.dim, nb.lo, nb.hi))):
                return False
            return all(m(c, b) for m, c in zip(children, n.args))
        return match_binder

    attr = p.attr   # const value, proj index, or None

    def match_op(n, b):
        if n.op != op or len(n.args) != arity or n.attr != attr:
            return False
        for m, c in zip(children, n.args):
            if not m(c, b):
                return False
        return True
    return match_op


def instantiate(template: Expr, b: Bindings) -> Expr:
    """Build a replacement from its template and a match's bindings."""
    memo: dict[Expr, Expr] = {}

    def go(t: Expr) -> Expr:
        hit = memo.get(t)
        if hit is not None:
            return hit
        if t.op == "pvar":
            out = b[t.attr]
        elif t.op == "runmax":
            out = Expr("runmax", (), b[t.attr])
        elif binder_of(t) is not None:
            out = Expr(t.op, tuple(go(a) for a in t.args), _binder_attr(t, b))
        else:
            out = with_args(t, tuple(go(a) for a in t.args))
        memo[t] = out
        return out

    return go(template)


def _binder_attr(t: Expr, b: Bindings):
    """The attribute of template binder ``t`` with its loop variable and range bound."""
    tb = binder_of(t)
    dim, lo, hi = b[tb.dim]
    if t.op == "map":
        return attrs.evolve(t.attr, var=b[tb.var], dim=dim)
    if tb.lo is not None or tb.hi is not None:
        # ``k in R[: c]``: constant bounds of a whole range (guard ``whole(R)``)
        if lo is not None or hi is not None:
            raise ValueError(f"sub-range of {tb.dim}, which is not a whole range")
        lo, hi = tb.lo, tb.hi
    return attrs.evolve(t.attr, var=b[tb.var], dim=dim, lo=lo, hi=hi)
