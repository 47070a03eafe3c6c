"""Binders and scopes: the one place that knows how expressions bind block indices.

``reduce`` and ``map`` bind a block-index variable over their bodies (a reduction's
bounds are read outside it, in the enclosing scope); ``load``, ``pos``, ``runmax``
and ``get`` read variables through their attributes. Every visitor that needs to
know which variables are bound where (free variables, the printer's let bindings,
shadowing checks, substitution, guards, actions, the rule checker) asks this module
instead of switching on operators itself:

- :func:`binder_of` / :func:`bound_var`: what a node binds, if anything;
- :func:`own_vars` / :func:`reindex`: the variables a node reads itself, and the node
  with them substituted;
- :func:`walk_scoped`: every (node, scope) occurrence of a DAG, once each;
- :func:`map_expr` / :func:`with_args`: structural rebuilding that keeps unchanged
  sub-terms (hash-consing makes them the same objects);
- :func:`rebind`, :func:`binders_in`, :func:`fresh_name`, :func:`find_shadowing`.

It imports no IR module at run time (``expr.py`` uses it for ``free_vars``): new nodes
are made with ``Expr.replace``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Mapping, NamedTuple, TypeVar

import attrs

from .index import IVar, free_vars as index_vars, substitute as index_subst

if TYPE_CHECKING:
    from .expr import Expr
    from .index import Idx

#: Operators that bind a block-index variable over all of their arguments.
BINDER_OPS = ("reduce", "map")


class Binder(NamedTuple):
    """What a binder binds: ``var`` over ``dim`` from ``lo`` to ``hi`` (``None``: the
    dimension's start / end; always ``None`` for a ``map``)."""

    var: str
    dim: str
    lo: "Idx | None" = None
    hi: "Idx | None" = None


def binder_of(node: "Expr") -> Binder | None:
    """The variable and range ``node`` binds over its arguments, or None."""
    op = node.op
    if op == "reduce":
        a = node.attr
        return Binder(a.var, a.dim, a.lo, a.hi)
    if op == "map":
        return Binder(node.attr.var, node.attr.dim)
    return None


def bound_var(node: "Expr") -> str | None:
    """The variable ``node`` binds over its arguments, or None (cheap: no tuple)."""
    return node.attr.var if node.op in BINDER_OPS else None


def own_vars(node: "Expr") -> frozenset[str]:
    """Variables ``node`` reads through its attribute, in the scope around it: load
    subscripts, a position's index, a reduction's bounds, ``runmax``/``get``."""
    op, attr = node.op, node.attr
    if op == "load":
        out: frozenset[str] = frozenset()
        for ix in attr.index:
            out |= index_vars(ix)
        return out
    if op == "pos":
        return index_vars(attr.index)
    if op in ("runmax", "get"):
        return frozenset((attr,))
    if op == "reduce":
        out = frozenset()
        for bound in (attr.lo, attr.hi):
            if bound is not None:
                out |= index_vars(bound)
        return out
    return frozenset()


def free_vars_of(node: "Expr", arg_free: Iterable[frozenset[str]]) -> frozenset[str]:
    """The free variables of ``node`` from those of its arguments (``arg_free``)."""
    out: set[str] = set()
    for f in arg_free:
        out |= f
    var = bound_var(node)
    if var is not None:
        out.discard(var)
    out |= own_vars(node)
    return frozenset(out)


def reindex(node: "Expr", mapping: Mapping[str, "Idx"]) -> "Expr":
    """``node`` with the variables it reads itself (:func:`own_vars`) replaced by index
    expressions; its arguments are left alone. ``runmax`` and ``get`` name a variable,
    so they take only a plain variable (``ValueError`` otherwise)."""
    op, attr = node.op, node.attr
    if op == "load":
        return node.replace(attr=attrs.evolve(
            attr, index=tuple(index_subst(i, mapping) for i in attr.index)))
    if op == "pos":
        return node.replace(attr=attrs.evolve(attr, index=index_subst(attr.index, mapping)))
    if op == "reduce":
        return node.replace(attr=attrs.evolve(attr, **{
            f: None if getattr(attr, f) is None else index_subst(getattr(attr, f), mapping)
            for f in ("lo", "hi")}))
    if op in ("runmax", "get") and attr in mapping:
        target = mapping[attr]
        if not isinstance(target, IVar):
            what = f"runmax({attr})" if op == "runmax" else f"get(.., {attr})"
            raise ValueError(f"{what} cannot be re-indexed by {target}")
        return node.replace(attr=target.name)
    return node


def rebind(node: "Expr", var: str) -> "Expr":
    """The binder ``node`` binding ``var`` instead (its bodies unchanged: rename the
    old variable in them first)."""
    return node.replace(attr=attrs.evolve(node.attr, var=var))


def binders_in(e: "Expr") -> set[str]:
    """Every variable some binder in ``e`` binds."""
    return {n.attr.var for n in e.walk() if n.op in BINDER_OPS}


def fresh_name(base: str, avoid: set[str]) -> str:
    """``base1``, ``base2``, ...: the first not in ``avoid``."""
    n = 1
    while f"{base}{n}" in avoid:
        n += 1
    return f"{base}{n}"


# --- walking with scopes ----------------------------------------------------------

S = TypeVar("S")


def enter_names(scope: frozenset, binder: Binder, node: "Expr") -> frozenset:
    """The default scope: the set of bound variable names."""
    return scope | {binder.var}


def walk_scoped(roots: Iterable["Expr"], scope: S,
                visit: Callable[["Expr", S], bool | None],
                enter: Callable[[S, Binder, "Expr"], S] = enter_names) -> None:
    """Call ``visit(node, scope)`` once for each distinct (node, scope) occurrence in
    the DAGs ``roots``, parents before children, left to right (depth-first, as a
    recursive visitor would). ``scope`` is what is bound around a node (not counting
    its own binder); inside a binder it is ``enter(scope, binder, node)``. A visit that
    returns ``False`` skips the node's arguments. Scopes must be hashable."""
    seen: set = set()
    for root in roots:
        stack = [(root, scope)]
        while stack:
            node, sc = stack.pop()
            key = (node, sc)
            if key in seen:
                continue
            seen.add(key)
            if visit(node, sc) is False or not node.args:
                continue
            b = binder_of(node)
            inner = sc if b is None else enter(sc, b, node)
            for child in reversed(node.args):
                if (child, inner) not in seen:
                    stack.append((child, inner))


def find_shadowing(e: "Expr", enclosing: Iterable[str]) -> "Expr | None":
    """The first binder in ``e`` (evaluated where ``enclosing`` is bound) that binds a
    name already bound around it, or None."""
    found: list = []

    def visit(node, bound):
        if found:
            return False
        var = bound_var(node)
        if var is not None and var in bound:
            found.append(node)
            return False
        return None

    walk_scoped([e], frozenset(enclosing), visit)
    return found[0] if found else None


# --- rebuilding ---------------------------------------------------------------------

def with_args(node: "Expr", args: tuple) -> "Expr":
    """``node`` with new arguments; ``node`` itself when they are the same objects."""
    old = node.args
    if len(args) != len(old):
        return node.replace(args=args)
    for a, b in zip(args, old):     # a plain loop: this runs for every node rebuilt
        if a is not b:
            return node.replace(args=args)
    return node


def map_expr(root: "Expr", fn: Callable[["Expr"], "Expr | None"],
             memo: dict | None = None) -> "Expr":
    """``root`` rebuilt top-down: where ``fn(node)`` gives an expression it replaces
    the node (and is not descended into); where it gives None the node is kept, with
    its arguments mapped. Unchanged sub-terms stay the same objects. ``fn`` must not
    depend on scope (use :func:`walk_scoped` or a scoped rebuild for that). ``memo``
    (node -> result) may be shared between calls with the same ``fn``."""
    memo = {} if memo is None else memo

    def go(n: "Expr") -> "Expr":
        hit = memo.get(n)
        if hit is None:
            hit = fn(n)
            if hit is None:
                hit = with_args(n, tuple([go(a) for a in n.args])) if n.args else n
            memo[n] = hit
        return hit

    return go(root)
