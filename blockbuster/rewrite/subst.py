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

from ..ir.expr import Expr, LoadAttr, PosAttr
from ..ir.index import Idx, IVar, free_vars as idx_free_vars, substitute as idx_subst
import attrs


def _fresh(base: str, avoid: set[str]) -> str:
    n = 1
    while f"{base}{n}" in avoid:
        n += 1
    return f"{base}{n}"


def substitute_index(e: Expr, mapping: Mapping[str, Idx]) -> Expr:
    """``e`` with free block-index variables replaced by index expressions."""
    memo: dict[tuple, Expr] = {}

    def go(n: Expr, m: Mapping[str, Idx]) -> Expr:
        live = {v: ix for v, ix in m.items() if v in n.free_vars}
        if not live:
            return n
        key = (n, tuple(sorted((v, ix) for v, ix in live.items())))
        hit = memo.get(key)
        if hit is not None:
            return hit
        op, attr = n.op, n.attr
        if op == "load":
            out = Expr("load", (), LoadAttr(attr.array,
                                            tuple(idx_subst(i, live) for i in attr.index)))
        elif op == "pos":
            out = Expr("pos", (), PosAttr(attr.dim, idx_subst(attr.index, live)))
        elif op == "runmax":
            target = live[attr]
            if not isinstance(target, IVar):
                raise ValueError(f"runmax({attr}) cannot be re-indexed by {target}")
            out = Expr("runmax", (), target.name)
        elif op == "get":
            target = live.get(attr, IVar(attr))
            if not isinstance(target, IVar):
                raise ValueError(f"get(.., {attr}) cannot be re-indexed by {target}")
            out = Expr("get", (go(n.args[0], live),), target.name)
        elif op in ("reduce", "map"):
            var = attr.var
            inner = {v: ix for v, ix in live.items() if v != var}
            if op == "reduce":
                bounds = {f: (None if getattr(attr, f) is None
                              else idx_subst(getattr(attr, f), live)) for f in ("lo", "hi")}
                attr = attrs.evolve(attr, **bounds)
            captured = set().union(*(idx_free_vars(ix) for ix in inner.values())) if inner else set()
            if var in captured:
                new_var = _fresh(var, captured | set(n.free_vars) | {var})
                inner[var] = IVar(new_var)
                attr = attrs.evolve(attr, var=new_var)
            out = Expr(op, tuple(go(a, inner) for a in n.args), attr)
        else:
            out = Expr(op, tuple(go(a, live) for a in n.args), attr)
        memo[key] = out
        return out

    return go(e, dict(mapping))


def replace_nodes(root: Expr, mapping: Mapping[Expr, Expr]) -> Expr:
    """``root`` with every occurrence of each key node replaced by its value."""
    memo: dict[Expr, Expr] = {}

    def go(n: Expr) -> Expr:
        if n in mapping:
            return mapping[n]
        hit = memo.get(n)
        if hit is not None:
            return hit
        args = tuple(go(a) for a in n.args)
        out = n if all(a is b for a, b in zip(args, n.args)) else Expr(n.op, args, n.attr)
        memo[n] = out
        return out

    return go(root)




def replace_in_kernel(program, kernel, mapping: Mapping[Expr, Expr]):
    """``program`` with ``replace_nodes`` applied to every store of ``kernel``."""
    stores = tuple(attrs.evolve(s, value=replace_nodes(s.value, mapping)) for s in kernel.stores)
    new = attrs.evolve(kernel, stores=stores)
    return program.evolve(kernels=tuple(new if k is kernel else k for k in program.kernels))


def unshadow(e: Expr, bound: frozenset[str]) -> Expr:
    """``e`` (evaluated where ``bound`` variables are in scope) with every binder that
    reuses a name bound around it renamed to a fresh one: same meaning, no shadowing."""
    memo: dict[tuple, Expr] = {}

    def go(n: Expr, outer: frozenset) -> Expr:
        if not n.args:
            return n
        key = (n, outer)
        hit = memo.get(key)
        if hit is not None:
            return hit
        attr, args = n.attr, n.args
        if n.op in ("reduce", "map"):
            var = attr.var
            if var in outer:
                new_var = _fresh(var.rstrip("0123456789") or var,
                                 set(outer) | _binders(n) | set(n.free_vars))
                args = tuple(substitute_index(a, {var: IVar(new_var)}) for a in args)
                attr = attrs.evolve(attr, var=new_var)
                var = new_var
            inner = outer | {var}
        else:
            inner = outer
        new_args = tuple(go(a, inner) for a in args)
        out = (n if new_args == n.args and attr is n.attr
               else Expr(n.op, new_args, attr))
        memo[key] = out
        return out

    return go(e, frozenset(bound))


def _binders(e: Expr) -> set[str]:
    return {n.attr.var for n in e.walk() if n.op in ("reduce", "map")}


def unshadow_program(program):
    """``program`` with the shadowing binders of every kernel renamed (``unshadow``)."""
    kernels = []
    for k in program.kernels:
        stores = tuple(attrs.evolve(s, value=unshadow(s.value, frozenset(k.loop_vars)))
                       for s in k.stores)
        changed = any(a.value is not b.value for a, b in zip(stores, k.stores))
        kernels.append(attrs.evolve(k, stores=stores) if changed else k)
    if all(a is b for a, b in zip(kernels, program.kernels)):
        return program
    return program.evolve(kernels=tuple(kernels))
