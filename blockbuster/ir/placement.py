"""Where a value is computed: the placement rule the cost model and code generators share.

Nodes are hash-consed, so a node is computed once per *binding* of its free
variables, in the innermost enclosing loop that binds one of them; everything else is
hoisted out of the loops it does not use (loop-invariant code motion). A ``reduce`` or
``map`` over every block of a one-block dimension is no loop (its variable is always
block 0), so it does not keep a node inside it, except an ``online_softmax``, whose
``runmax`` needs the binding.

The cost model counts with this rule (each load moves its block once per iteration of
the loops it is placed in) and the Numba generator emits code with it, so what the
model counts is what the generated code does.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import attrs

from .expr import Expr
from .index import IConst
from .types import Dim


@attrs.frozen
class Binder:
    """One enclosing binder of a block-index variable, outermost first in a chain.
    ``loop``: it iterates (False: it binds its variable to one block, so it does not
    keep a node inside it)."""

    var: str
    loop: bool = True


def binds_loop(node: Expr, dim: Dim) -> bool:
    """Whether the ``reduce``/``map`` ``node`` over ``dim`` is a loop for placement:
    not one over the whole of a one-block dimension (except ``online_softmax``)."""
    if dim.nblocks != 1:
        return True
    if node.op == "reduce":
        a = node.attr
        if a.combiner == "online_softmax":
            return True
        return not (_at_most(a.lo, 0) and _at_least(a.hi, 1))
    return False


def _at_most(ix, value: int) -> bool:
    return ix is None or (isinstance(ix, IConst) and ix.value <= value)


def _at_least(ix, value: int) -> bool:
    return ix is None or (isinstance(ix, IConst) and ix.value >= value)


def place(free_vars: Iterable[str], chain: Sequence[Binder], floor: int = 0) -> int:
    """How many binders of ``chain`` (outermost first) a node with ``free_vars``
    is computed inside: down to the innermost loop binding one of its variables, and
    at least ``floor`` (the binders every node stays inside, e.g. a kernel's parallel
    loops). A variable bound twice is bound by its innermost binder; a variable the
    chain does not bind (one-block loops left behind) does not move the node."""
    innermost = {b.var: d for d, b in enumerate(chain)}
    depth = floor
    for v in free_vars:
        d = innermost.get(v)
        if d is not None and chain[d].loop:
            depth = max(depth, d + 1)
    return depth


def shared_loops(kernel) -> dict:
    """``{map node: reduce node}``: the ``map``s stored with ``:`` whose loop is the
    loop of a sibling ``reduce`` of the same kernel (a multi-output kernel: the
    paper's ``C[i, :] = map(j: A + B)`` beside ``d[i] = sum(j: rowsum(B))``), so that
    what they both read (a block of ``B``) is loaded once per index.

    A map shares the loop of a reduce when: the map is a store's whole value, one
    level deep, stored with one ``:`` and used nowhere else; the reduce runs over the
    whole of the same dimension with the same variable; both are computed at the
    kernel's level (their free variables are exactly the kernel's loop variables) and
    the reduce sits in another store's value outside every ``reduce``/``map``;
    neither contains the other; and the map reads no kernel-level reduction (whose
    value is only final after its own loop). The cost model counts with this rule and the Numba
    generator emits with it (the map's elements inside the reduce's loop)."""
    loop_vars = frozenset(kernel.loop_vars)
    candidates = []              # (store position, reduce) at kernel level
    for pos, store in enumerate(kernel.stores):
        stack, seen = [store.value], set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op == "reduce":
                if (n.attr.lo is None and n.attr.hi is None
                        and n.free_vars == loop_vars):
                    candidates.append((pos, n))
                continue
            if n.op == "map":
                continue
            stack.extend(n.args)
    if not candidates:
        return {}
    uses: dict = {}
    for store in kernel.stores:
        for n in store.value.walk():
            for a in n.args:
                uses[a] = uses.get(a, 0) + 1
    out = {}
    for pos, store in enumerate(kernel.stores):
        m = store.value
        if (m.op != "map" or m.args[0].op == "map" or uses.get(m, 0)
                or sum(s.value is m for s in kernel.stores) != 1
                or sum(ix is None for ix in store.index) != 1 or m.free_vars != loop_vars):
            continue
        inside = set(m.walk())
        if any(n.op == "reduce" and n.free_vars <= loop_vars for n in inside):
            # The map needs a kernel-level reduction's final value: its elements
            # cannot be written inside another reduction's loop (they would run
            # before that value exists; found by tests/fuzz/test_nonfinite.py).
            continue
        for rpos, r in candidates:
            if (rpos != pos and r.attr.var == m.attr.var and r.attr.dim == m.attr.dim
                    and r not in inside and m not in set(r.walk())):
                out[m] = r
                break
    return out
