"""Stage 1, analyse: what the kernel's stores compute, before any code is placed.

* **One-block loops are no loops.** A ``reduce``/``map`` over every block of a
  dimension with a single block runs once: its variable is replaced by the constant
  0 in its bodies (except an ``online_softmax``'s: its ``runmax`` needs the binding),
  so what the bodies compute is placed (hoisted) by their other variables alone. The
  predicate is the core placement rule's (:func:`blockbuster.ir.placement.binds_loop`),
  the one the cost model counts with.
* **Uses.** Every node's distinct parents (and stores) are counted: a lazy
  elementwise value used once is inlined into its consumer, one used more often is
  materialised; the parents of a block are the in-block reductions that may be
  accumulated in the loop that materialises it.
"""

from __future__ import annotations

from collections import Counter

from blockbuster.errors import BackendError
from blockbuster.ir.expr import Expr, LoadAttr, PosAttr, ReduceAttr
from blockbuster.ir.index import IConst, substitute
from blockbuster.ir.placement import binds_loop
from blockbuster.ir.program import Store


class Analysis:
    """The kernel's stores with one-block loops removed, and the uses of each node."""

    def __init__(self, stores, dims):
        self.dims = dims
        self.uses: Counter = Counter()       # distinct parents (and stores) of a node
        self.parents: dict[Expr, list[Expr]] = {}
        self._seen: set = set()
        self.stores = single_blocks(stores, dims)
        self.register([s.value for s in self.stores])

    def register(self, roots) -> None:
        """Count the uses of the nodes below ``roots`` (each root used once more)."""
        for root in roots:
            self.uses[root] += 1
            for node in root.walk():
                if node in self._seen:
                    continue
                self._seen.add(node)
                for child in set(node.args):
                    self.uses[child] += 1
                    self.parents.setdefault(child, []).append(node)


def single_blocks(stores, dims) -> list[Store]:
    """The stores with the variable of every reduce/map over a single block replaced
    by the constant 0 in its bodies (except an online_softmax's)."""
    memo: dict = {}
    sub: dict = {}
    for store in stores:
        for n in store.value.walk():       # children first
            if n in memo:
                continue
            args = tuple(memo[a] for a in n.args)
            new = n if all(x is y for x, y in zip(args, n.args)) else Expr(n.op, args, n.attr)
            if new.op in ("reduce", "map") and not binds_loop(new, dims[new.attr.dim]):
                a = new.attr
                memo_var = sub.setdefault(a.var, {})
                new = Expr(new.op, tuple(substitute_var(b, a.var, 0, memo_var)
                                         for b in new.args), a)
            memo[n] = new
    return [Store(s.array, s.index, memo[s.value]) for s in stores]


def substitute_var(node: Expr, var: str, value: int, memo: dict | None = None) -> Expr:
    """``node`` with the block-index variable ``var`` replaced by the constant ``value``
    (loads, positions and reduce bounds; a binder of ``var`` shadows it below)."""
    memo = {} if memo is None else memo
    mapping = {var: IConst(value)}

    def go(n: Expr) -> Expr:
        if var not in n.free_vars:
            return n
        hit = memo.get(n)
        if hit is not None:
            return hit
        op, attr = n.op, n.attr
        if op == "load":
            out = Expr(op, (), LoadAttr(attr.array, tuple(substitute(i, mapping)
                                                            for i in attr.index)))
        elif op == "pos":
            out = Expr(op, (), PosAttr(attr.dim, substitute(attr.index, mapping)))
        elif op == "runmax":
            raise BackendError(f"numba: cannot substitute runmax({var})")
        elif op == "reduce":
            lo = None if attr.lo is None else substitute(attr.lo, mapping)
            hi = None if attr.hi is None else substitute(attr.hi, mapping)
            args = n.args if attr.var == var else tuple(go(a) for a in n.args)
            out = Expr(op, args, ReduceAttr(attr.combiner, attr.var, attr.dim, lo, hi))
        else:   # map (of another variable) and every operator
            out = Expr(op, tuple(go(a) for a in n.args), attr)
        memo[n] = out
        return out

    return go(node)
