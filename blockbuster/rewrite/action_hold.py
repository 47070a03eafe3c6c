"""The ``hold`` action (an inner parallel loop becomes a local ``map``) and
``hold_accumulators`` (a sum inside such a map becomes one sum of map arrays)."""

from __future__ import annotations

from typing import Iterator

import attrs

from ..ir.combiners import COMBINERS
from ..ir.expr import BindAttr, Expr, proj
from ..ir.index import IVar, free_vars as index_vars
from ..ir.program import Kernel, Program
from ..ir.walk import binder_of, walk_scoped
from .action_base import MEMO_LIMIT, Application, reduction_outputs
from .subst import replace_in_kernel, replace_nodes, substitute_index


# --- hold ---------------------------------------------------------------------------

def find_hold(program: Program) -> Iterator[Application]:
    """Every (kernel, inner parallel loop) that could become a local map."""
    for kernel in program.kernels:
        if len(kernel.loops) < 2:                  # keep at least one parallel loop
            continue
        # Inner loops first; the outermost one only where the kernel recomputes, for
        # every one of its indices, a reduction over that loop's whole dimension (a
        # softmax or a norm over columns: the mirror of a row's, held the same way).
        outer = [kernel.loops[0]] if _recomputes_whole_reduction(kernel, *kernel.loops[0]) else []
        for var, dim in [*kernel.loops[1:], *outer]:
            # ':' subscripts peel maps outermost first: the new map goes outside, so
            # its subscript must come before any existing ':'.
            if all(_held_first(s.index, var) for s in kernel.stores):
                yield _hold_application(program, kernel, var, dim)


def _recomputes_whole_reduction(kernel: Kernel, var: str, dim: str) -> bool:
    """A reduction over all of ``dim`` that does not depend on the loop ``var`` over
    ``dim``: computed again for every index of ``var`` unless the loop is held."""
    seen: set = set()
    stack = [s.value for s in kernel.stores]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if (n.op == "reduce" and n.attr.dim == dim and n.attr.lo is None
                and n.attr.hi is None and var not in n.free_vars):
            return True
        stack.extend(n.args)
    return False


def _held_first(index, var) -> bool:
    for ix in index:
        if ix is None:
            return False
        if ix == IVar(var):
            return True
    return False


def _hold_application(program, kernel, var, dim) -> Application:
    def build():
        stores = []
        for s in kernel.stores:
            index = tuple(None if (ix is not None and ix == IVar(var)) else ix
                          for ix in s.index)
            stores.append(attrs.evolve(s, index=index,
                                       value=Expr("map", (s.value,), BindAttr(var, dim))))
        loops = tuple(loop for loop in kernel.loops if loop[0] != var)
        new = attrs.evolve(kernel, loops=loops, stores=tuple(stores))
        return program.evolve(kernels=tuple(new if k is kernel else k
                                            for k in program.kernels))
    return Application(kernel.name, None, None, {"loop": var}, build)


# --- hold_accumulators --------------------------------------------------------------

# Memoised (see action_base): the holdable reductions below a map.
_HELD: dict = {}


def find_hold_accumulators(program: Program) -> Iterator[Application]:
    """Reductions inside a ``map(d in Q: ...)`` that depend on ``d`` only through
    their summed terms: they become one reduction over map arrays (a held row of
    accumulators, one pass), read back with ``get`` inside the map."""
    for kernel in program.kernels:
        maps = list(dict.fromkeys(n for s in kernel.stores for n in s.value.walk()
                                  if n.op == "map"))
        for m in maps:
            for r in _held_reductions(m):
                yield Application(kernel.name, r, None, {},
                                  lambda kernel=kernel, m=m, r=r: _hold_accumulators(program, kernel, m, r))


def _held_reductions(m: Expr) -> tuple[Expr, ...]:
    hit = _HELD.get(m)
    if hit is None:
        if len(_HELD) >= MEMO_LIMIT:
            _HELD.clear()
        hit = _HELD[m] = tuple(_find_held_reductions(m))
    return hit


def _find_held_reductions(m: Expr) -> list[Expr]:
    d = binder_of(m).var
    found: list[Expr] = []

    def visit(n: Expr, bound: frozenset):
        if n.op == "reduce" and n is not m.args[0] and _can_hold(n, d, bound):
            found.append(n)
            return False                 # held whole: nothing inside it on its own
        return None

    walk_scoped([m.args[0]], frozenset(), visit)
    return list(dict.fromkeys(found))


def _can_hold(r: Expr, d: str, bound_between: frozenset) -> bool:
    comb = COMBINERS[r.attr.combiner]
    if comb.passenger != "sum" or d not in r.free_vars or r.free_vars & bound_between:
        return False
    if any(b is not None and d in index_vars(b) for b in (r.attr.lo, r.attr.hi)):
        return False
    return all(d not in h.free_vars for h in r.args[: comb.head])


def _hold_accumulators(program: Program, kernel: Kernel, m: Expr, r: Expr) -> Program:
    d, dim = binder_of(m)[:2]
    comb = COMBINERS[r.attr.combiner]
    head, passengers = r.args[: comb.head], r.args[comb.head:]
    held = [d in p.free_vars for p in passengers]
    # The accumulators' map does not reuse d: it sits inside map(d: ...), and a
    # shadowing binder is renamed per context at the end (unshadow), which would
    # split a reduction two stores share into two.
    acc = _accumulator_var(kernel, d, passengers)
    new_r = Expr("reduce", head + tuple(
        Expr("map", (substitute_index(p, {d: IVar(acc)}),), BindAttr(acc, dim)) if h else p
        for p, h in zip(passengers, held)), r.attr)
    if reduction_outputs(r) == 1:
        mapping = {r: Expr("get", (new_r,), d)}
    else:
        mapping = {}
        for i in range(reduction_outputs(r)):
            k = i - comb.head_outputs
            out = proj(new_r, i)
            mapping[proj(r, i)] = Expr("get", (out,), d) if k >= 0 and held[k] else out
    new_m = Expr("map", (replace_nodes(m.args[0], mapping),), m.attr)
    return replace_in_kernel(program, kernel, {m: new_m})


def _accumulator_var(kernel: Kernel, d: str, passengers) -> str:
    """The variable of held accumulators for map(d: ...): ``d + "a"``, the same for
    every reduction held from one map (sibling maps over one variable are one loop),
    unless that name is taken by a kernel loop or free in a passenger."""
    name = d + "a"
    if name in kernel.loop_vars or any(name in p.free_vars for p in passengers):
        from ..ir.walk import fresh_name
        name = fresh_name(name, set(kernel.loop_vars).union(*(p.free_vars for p in passengers)))
    return name
