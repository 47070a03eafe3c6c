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

from ..ir.expr import Expr, ReduceAttr

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

    if op == "reduce":
        pa = p.attr
        comb, var, rng = pa.combiner, pa.var, pa.dim

        def match_reduce(n, b):
            if n.op != "reduce" or len(n.args) != arity or n.attr.combiner != comb:
                return False
            a = n.attr
            if not (_bind(b, var, a.var) and _bind(b, rng, (a.dim, a.lo, a.hi))):
                return False
            return all(m(c, b) for m, c in zip(children, n.args))
        return match_reduce

    if op == "map":
        var, rng = p.attr.var, p.attr.dim

        def match_map(n, b):
            if n.op != "map" or not (_bind(b, var, n.attr.var) and _bind(b, rng, (n.attr.dim, None, None))):
                return False
            return children[0](n.args[0], b)
        return match_map

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
        elif t.op == "reduce":
            dim, lo, hi = b[t.attr.dim]
            if t.attr.lo is not None or t.attr.hi is not None:
                # ``k in R[: c]``: constant bounds of a whole range (guard ``whole(R)``)
                if lo is not None or hi is not None:
                    raise ValueError(f"sub-range of {t.attr.dim}, which is not a whole range")
                lo, hi = t.attr.lo, t.attr.hi
            out = Expr("reduce", tuple(go(a) for a in t.args),
                       ReduceAttr(t.attr.combiner, b[t.attr.var], dim, lo, hi))
        elif t.op == "map":
            dim, _, _ = b[t.attr.dim]
            out = Expr("map", (go(t.args[0]),), attrs.evolve(t.attr, var=b[t.attr.var], dim=dim))
        else:
            out = Expr(t.op, tuple(go(a) for a in t.args), t.attr)
        memo[t] = out
        return out

    return go(template)
