"""Stage 2, place: which loop of the generated code computes each node.

**Placement (CSE and hoisting).** Expression nodes are hash-consed, so a node is
emitted once per *binding* of its free variables: the memo key is the node plus the
identity of the loop that binds each of its variables. A node is computed in the
innermost loop that binds one of its variables; everything else is hoisted. The rule
is the core one (:func:`blockbuster.ir.placement.place`), which the cost model counts
with; the generator's loops are its frames, outermost (the function's top level)
first.
"""

from __future__ import annotations

from blockbuster.ir.expr import Expr
from blockbuster.ir.placement import Binder, place

from .values import Frame


def memo_key(node: Expr, frame: Frame) -> tuple:
    """``node`` and the binding of each of its free variables seen from ``frame``
    (a :class:`BackendError` names a variable nothing binds)."""
    return (node, tuple(id(frame.resolve(v)[1]) for v in sorted(node.free_vars)))


def target_frame(node: Expr, frame: Frame) -> Frame:
    """The frame of ``frame``'s chain that computes ``node``."""
    frames = frame.chain()
    binders: list[Binder] = []
    owners = [frames[0]]           # owners[d]: the frame inside the first d binders
    for f in frames:
        for var in f.binds:
            binders.append(Binder(var))
            owners.append(f)
    return owners[place(node.free_vars, binders)]


def computed_here(node: Expr, frame: Frame) -> bool:
    """Whether ``node`` is computed at this point of ``frame``'s code: in ``frame``
    itself, or in an enclosing frame whose lines it shares (only loops of a single
    trip, which emit no loop, lie between them)."""
    target, f = target_frame(node, frame), frame
    while f is not target:
        if f.parent is None or f.lines is not f.parent.lines:
            return False
        f = f.parent
    return True
