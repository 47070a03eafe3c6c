"""The ``merge_siblings`` action: two independent kernels that load the same array
become one multi-output kernel, the extra loops of either held as maps."""

from __future__ import annotations

from typing import Iterator

import attrs

from ..ir.expr import BindAttr, Expr
from ..ir.index import IVar
from ..ir.program import Kernel, Program
from .action_base import Application
from .subst import substitute_index


# --- merge_siblings (multi-output kernels) -----------------------------------------

def find_merge_siblings(program: Program) -> Iterator[Application]:
    """Pairs of kernels that load a common array and do not depend on each other
    (neither reads what the other, or a kernel between them, writes): one becomes a
    store of the other. Their loops must agree on a common prefix of dimensions; the
    longer kernel's extra loops are held (``hold``: maps stored with ':'), so that a
    map over a dimension the other kernel reduces over can share that loop."""
    kernels = program.kernels
    for a_pos, a in enumerate(kernels):
        for b_pos in range(a_pos + 1, len(kernels)):
            b = kernels[b_pos]
            if not a.reads() & b.reads():
                continue
            between = set().union(*(set(k.writes()) for k in kernels[a_pos:b_pos]))
            if b.reads() & between:
                continue                 # b needs a, or something after a
            merged = _merge_kernels(a, b)
            if merged is not None:
                yield Application(a.name, None, None, {"with": b.name},
                                  lambda a=a, b=b, m=merged: _replace_pair(program, a, b, m))


def _replace_pair(program: Program, a: Kernel, b: Kernel, merged: Kernel) -> Program:
    return program.evolve(kernels=tuple(merged if k is a else k
                                        for k in program.kernels if k is not b))


def _merge_kernels(a: Kernel, b: Kernel) -> Kernel | None:
    """``a`` and ``b`` as one kernel named ``a``'s (``a``'s stores first), or None.
    The merged kernel runs over the dimensions both loop over (parallel loops are
    independent: their order is free), in ``a``'s order; every other loop of either
    kernel is held (a map stored with ':'), innermost first."""
    dims_a, dims_b = [d for _, d in a.loops], [d for _, d in b.loops]
    if len(set(dims_a)) != len(dims_a) or len(set(dims_b)) != len(dims_b):
        return None
    common = [d for d in dims_a if d in dims_b]
    if not common:
        return None
    names = {d: v for v, d in a.loops if d in common}
    # b's loop variables over common dimensions take a's names (capture-avoiding).
    rename = {v: IVar(names[d]) for v, d in b.loops if d in common and v != names[d]}
    b_stores = b.stores
    if rename:
        if set(names.values()) & {v for v, d in b.loops if d not in common}:
            return None
        b_stores = tuple(attrs.evolve(s, index=tuple(None if ix is None else
                                                     _subst_idx(ix, rename) for ix in s.index),
                                      value=substitute_index(s.value, rename))
                         for s in b.stores)
    b_loops = tuple((names.get(d, v), d) for v, d in b.loops)
    taken = set(names.values())
    a_held = _hold_all(a.stores, a.loops, common, _reduced(b_stores), taken)
    b_held = _hold_all(b_stores, b_loops, common, _reduced(a.stores), taken)
    if a_held is None or b_held is None:
        return None
    return Kernel(a.name, tuple((names[d], d) for d in common), a_held + b_held)


def _reduced(stores) -> dict:
    """dim -> the variable of a whole-range reduction over it in ``stores``."""
    out: dict = {}
    for s in stores:
        for node in s.value.walk():
            if node.op == "reduce" and node.attr.lo is None and node.attr.hi is None:
                out.setdefault(node.attr.dim, node.attr.var)
    return out


def _hold_all(stores, loops, common, reduced, taken):
    """``stores`` with every loop over a dimension not in ``common`` held, innermost
    first; a held loop takes the name of a reduction over its dimension in the other
    kernel (so that the two can share one loop and its loads). None if a loop cannot
    be held (a ':' subscript before it)."""
    own = {v for v, _ in loops}
    for var, dim in reversed(loops):
        if dim in common:
            continue
        name = reduced.get(dim, var)
        if name != var and (name in taken or name in own):
            name = var
        held = []
        for st in stores:
            st = _hold_store(st, var, name, dim)
            if st is None:
                return None
            held.append(st)
        stores = tuple(held)
    return stores


def _hold_store(st, var: str, name: str, dim: str):
    """The store with its subscript ``var`` held as ``map(name in dim: ...)``, nested
    at the depth of the ':' subscripts before it (they peel maps outermost first);
    None if ``var`` is not a plain subscript of the store."""
    positions = [k for k, ix in enumerate(st.index) if ix is not None and ix == IVar(var)]
    if len(positions) != 1:
        return None
    depth = sum(ix is None for ix in st.index[:positions[0]])
    chain, value = [], st.value
    for _ in range(depth):
        if value.op != "map":
            return None
        chain.append(value)
        value = value.args[0]
    if name != var:
        value = substitute_index(value, {var: IVar(name)})
    value = Expr("map", (value,), BindAttr(name, dim))
    for outer in reversed(chain):
        value = Expr("map", (value,), outer.attr)
    index = tuple(None if k == positions[0] else ix for k, ix in enumerate(st.index))
    return attrs.evolve(st, index=index, value=value)


def _subst_idx(ix, mapping):
    from ..ir.index import substitute
    return substitute(ix, mapping)
