"""Substitution on expressions: replacing block-index variables (inlining a producer
at the consumer's subscripts) and replacing sub-expressions (applying a rewrite).

Binders (``reduce``, ``map``) may shadow outer variables while the engine rewrites
(rules match reductions over one range by one binder name); substitution is
capture-avoiding: a binder whose variable occurs in a replacement is renamed first.
``unshadow_program`` renames the shadowing binders of a finished fusion, so what
leaves the engine has one name per variable in scope (the verifier's strict rule).
"""

from __future__ import annotations

from typing import Mapping

import attrs

from ..ir.expr import Expr
from ..ir.index import Idx, IVar, free_vars as idx_free_vars
from ..ir.walk import binders_in, bound_var, fresh_name, map_expr, rebind, reindex, with_args


# Substitution and unshadowing are pure functions of (node, what is substituted or
# bound around it): their memos are kept across calls, as fusion inlines and renames
# the same sub-terms again and again (every step, every lookahead, every candidate).
_SUBST_MEMO: dict = {}
_UNSHADOW_MEMO: dict = {}
_MEMO_LIMIT = 200_000


def _bounded(memo: dict) -> dict:
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    return memo


def substitute_index(e: Expr, mapping: Mapping[str, Idx]) -> Expr:
    """``e`` with free block-index variables replaced by index expressions."""
    memo = _bounded(_SUBST_MEMO)

    def go(n: Expr, m: Mapping[str, Idx]) -> Expr:
        live = {v: ix for v, ix in m.items() if v in n.free_vars}
        if not live:
            return n
        key = (n, tuple(sorted((v, ix) for v, ix in live.items())))
        hit = memo.get(key)
        if hit is not None:
            return hit
        node = reindex(n, live)          # what n reads itself, in the scope around it
        var = bound_var(n)
        inner = live
        if var is not None:
            inner = {v: ix for v, ix in live.items() if v != var}
            captured = set().union(*(idx_free_vars(ix) for ix in inner.values())) if inner else set()
            if var in captured:          # rename the binder: the replacement uses its name
                new_var = fresh_name(var, captured | set(n.free_vars) | {var})
                inner[var] = IVar(new_var)
                node = rebind(node, new_var)
        out = with_args(node, tuple(go(a, inner) for a in n.args))
        memo[key] = out
        return out

    return go(e, dict(mapping))


def replace_nodes(root: Expr, mapping: Mapping[Expr, Expr]) -> Expr:
    """``root`` with every occurrence of each key node replaced by its value."""
    return map_expr(root, mapping.get)


def replace_in_kernel(program, kernel, mapping: Mapping[Expr, Expr]):
    """``program`` with ``replace_nodes`` applied to every store of ``kernel``."""
    stores = tuple(attrs.evolve(s, value=replace_nodes(s.value, mapping)) for s in kernel.stores)
    new = attrs.evolve(kernel, stores=stores)
    return program.evolve(kernels=tuple(new if k is kernel else k for k in program.kernels))


def unshadow(e: Expr, bound: frozenset[str]) -> Expr:
    """``e`` (evaluated where ``bound`` variables are in scope) with every binder that
    reuses a name bound around it renamed to a fresh one: same meaning, no shadowing."""
    memo = _bounded(_UNSHADOW_MEMO)

    def go(n: Expr, outer: frozenset) -> Expr:
        if not n.args:
            return n
        key = (n, outer)
        hit = memo.get(key)
        if hit is not None:
            return hit
        node, var = n, bound_var(n)
        if var is not None and var in outer:
            new_var = fresh_name(var.rstrip("0123456789") or var,
                                 set(outer) | binders_in(n) | set(n.free_vars))
            node = rebind(n, new_var).replace(
                args=tuple(substitute_index(a, {var: IVar(new_var)}) for a in n.args))
            var = new_var
        inner = outer if var is None else outer | {var}
        out = with_args(node, tuple(go(a, inner) for a in node.args))
        memo[key] = out
        return out

    return go(e, frozenset(bound))


def unshadow_kernel(k):
    """Kernel ``k`` with its shadowing binders renamed (``unshadow``); ``k`` itself
    when none shadows."""
    stores = tuple(attrs.evolve(s, value=unshadow(s.value, frozenset(k.loop_vars)))
                   for s in k.stores)
    changed = any(a.value is not b.value for a, b in zip(stores, k.stores))
    return attrs.evolve(k, stores=stores) if changed else k


def unshadow_program(program):
    """``program`` with the shadowing binders of every kernel renamed (``unshadow``)."""
    kernels = [unshadow_kernel(k) for k in program.kernels]
    if all(a is b for a, b in zip(kernels, program.kernels)):
        return program
    return program.evolve(kernels=tuple(kernels))
