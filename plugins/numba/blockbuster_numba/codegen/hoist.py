"""Stage 1b, hoist: the loop-invariant bodies of a fused reduction, computed once.

Fusion merges sibling reductions over the same range into one multi-output
``reduce`` (``merge_sibling_reductions``): LayerNorm's row statistics and the
``dot`` of the normalised rows with a column block of ``W`` become one loop over
``K``, so each block of ``X`` is loaded once. Inside a kernel instance the generator
runs the kernel's loops after the parallel ones as plain ``for`` loops (here: over
the column blocks ``n``), and the merged reduction depends on ``n`` through its
``dot``, so the statistics — which do not — would be recomputed for every ``n``.

This stage splits such a reduction in two: the head and bodies that do not use the
innermost serial loop the reduction uses, and the rest. Each is a reduction of its own over the same
range, so placement (:mod:`.place`) hoists the invariant one out of the serial loops:
computed once per instance, at the price of loading its blocks in a loop of their
own. Only combiners whose passengers accumulate independently of the head's state
are split (``sum``, ``max``, ``meanvar``; not ``online_softmax``, whose passengers are
rescaled by the running max); bounds that use a serial variable keep the reduction
whole. Values are unchanged: each output is computed by the same fold as before.
"""

from __future__ import annotations

from blockbuster.ir.combiners import COMBINERS
from blockbuster.ir.expr import Expr, ReduceAttr
from blockbuster.ir.index import free_vars
from blockbuster.ir.program import Store


def hoist_invariant_bodies(stores, serial) -> list[Store]:
    """``stores`` with every splittable reduction split into the bodies that use its
    innermost serial loop and the others (again on the split-off part, which may
    not use the next loop out either). ``serial``: the serial loops' variables,
    outermost first. The same stores when nothing splits."""
    order = {v: i for i, v in enumerate(serial)}
    stores = list(stores)
    for _ in range(len(order)):
        split = _hoist_once(stores, order)
        if all(a.value is b.value for a, b in zip(split, stores)):
            break
        stores = split
    return stores


def _hoist_once(stores, order: dict[str, int]) -> list[Store]:
    memo: dict[Expr, Expr] = {}
    splits: dict[Expr, list] = {}        # old reduce -> [(new reduce, its outputs)]

    def go(n: Expr) -> Expr:
        hit = memo.get(n)
        if hit is not None:
            return hit
        if n.op == "proj" and n.args[0] in splits:
            out = _project(splits[n.args[0]], n.attr)
        else:
            args = tuple(go(a) for a in n.args)
            out = n if all(x is y for x, y in zip(args, n.args)) else Expr(n.op, args, n.attr)
            if out.op == "reduce":
                parts = _split(out, order)
                if parts is not None:
                    splits[n] = parts
        memo[n] = out
        return out

    out = []
    for store in stores:
        for node in store.value.walk():      # children first: a split reduce's projs
            go(node)                         # are met after it
        out.append(Store(store.array, store.index, memo[store.value]))
    return out


def _depth(variables, order: dict[str, int]) -> int:
    """The innermost serial loop among ``variables`` (-1: none)."""
    return max((order[v] for v in variables if v in order), default=-1)


def _split(node: Expr, order: dict[str, int]):
    """``[(reduce, output indices of node it computes), ...]`` for a split of
    ``node`` (first the bodies its innermost serial loop does not change), or None
    when it stays whole."""
    a = node.attr
    comb = COMBINERS.get(a.combiner)
    alone = comb.passengers_alone if comb is not None else None
    if alone is None or len(node.args) < 2:
        return None
    depths = [_depth(body.free_vars, order) for body in node.args]
    inner = max(depths)
    bounds = set().union(*(free_vars(b) for b in (a.lo, a.hi) if b is not None))
    if inner < 0 or _depth(bounds, order) >= inner:
        return None
    invariant = [d < inner for d in depths]
    if not any(invariant):
        return None
    head, outs = comb.head, comb.head_outputs
    groups = {True: [], False: []}           # invariant? -> [(body index, outputs)]
    for i in range(head, len(node.args)):
        groups[invariant[i]].append((i, [outs + i - head]))
    if head:
        if len(set(invariant[:head])) > 1:
            return None                       # a head split across both sides
        groups[invariant[0]].insert(0, (None, list(range(outs))))
    parts = []
    for side in (True, False):
        members = groups[side]
        if not members:
            return None
        with_head = members[0][0] is None
        passengers = [node.args[i] for i, _ in members if i is not None]
        combiner = a.combiner if with_head else alone
        if len(passengers) < COMBINERS[combiner].min_passengers:
            return None
        bodies = (list(node.args[:head]) if with_head else []) + passengers
        reduce = Expr("reduce", tuple(bodies), ReduceAttr(combiner, a.var, a.dim, a.lo, a.hi))
        parts.append((reduce, [o for _, outputs in members for o in outputs]))
    return parts


def _project(parts, index: int) -> Expr:
    """Output ``index`` of the split reduction: a ``proj`` of the part computing it
    (or the part itself when that is its only output)."""
    for reduce, outputs in parts:
        if index in outputs:
            if len(outputs) == 1:
                return reduce
            return Expr("proj", (reduce,), outputs.index(index))
    raise AssertionError(f"output {index} of a split reduction")
