"""The text form of block programs (the parser in :mod:`.parser` reads it back).

Shared sub-expressions whose variables are all kernel loop variables are printed
once, as ``let`` bindings before the stores; everything else is printed inline
(hash-consing makes the parser rebuild the same DAG either way).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from .walk import binder_of, walk_scoped

if TYPE_CHECKING:   # annotations only: Expr and Program print themselves through here
    from .expr import Expr
    from .index import Idx
    from .program import Kernel, Program, Store

_LEAVES = ("load", "const", "pos", "runmax")


def format_float(value: float) -> str:
    text = repr(float(value))
    return text


def format_index(ix: Idx | None) -> str:
    return ":" if ix is None else str(ix)


def _format_range(b) -> str:
    """``dim`` or ``dim[lo : hi]`` of a binder (:class:`.walk.Binder`)."""
    if b.lo is None and b.hi is None:
        return b.dim
    lo = "" if b.lo is None else str(b.lo)
    hi = "" if b.hi is None else str(b.hi)
    return f"{b.dim}[{lo} : {hi}]"


def format_expr(e: Expr, names: dict[Expr, str] | None = None) -> str:
    """One expression; nodes in ``names`` print as their let name."""
    names = names or {}
    memo: dict[Expr, str] = {}

    def go(n: Expr, top: bool = False) -> str:
        if not top and n in names:
            return names[n]
        hit = memo.get(n)
        if hit is not None:
            return hit
        op, b = n.op, binder_of(n)
        if op == "load":
            text = f"{n.attr.array}[{', '.join(map(str, n.attr.index))}]"
        elif op == "const":
            text = format_float(n.attr)
        elif op == "pos":
            text = f"pos({n.attr.dim}, {n.attr.index})"
        elif op == "pvar":
            text = n.attr
        elif op == "get":
            text = f"get({go(n.args[0])}, {n.attr})"
        elif op == "runmax":
            text = f"runmax({n.attr})"
        elif op == "proj":
            text = f"{go(n.args[0])}.{n.attr}"
        elif b is not None:     # combiner(k in R[lo : hi]: ...), map(d in Q: ...)
            head = n.attr.combiner if op == "reduce" else op
            bodies = ", ".join(go(a) for a in n.args)
            text = f"{head}({b.var} in {_format_range(b)}: {bodies})"
        else:
            text = f"{op}({', '.join(go(a) for a in n.args)})"
        memo[n] = text
        return text

    return go(e, top=True)


def _captured(kernel: Kernel) -> set[Expr]:
    """Nodes that occur somewhere below a binder (reduce/map) of one of their free
    variables: their variables may not mean the kernel's loop variables there."""
    captured: set[Expr] = set()

    def visit(node: Expr, bound: frozenset):
        if node.free_vars & bound:
            captured.add(node)

    walk_scoped((s.value for s in kernel.stores), frozenset(), visit)
    return captured


def let_bindings(kernel: Kernel) -> list[Expr]:
    """Nodes worth naming: shared, not leaves, and defined at the kernel's level."""
    uses: Counter = Counter()
    loop_vars = set(kernel.loop_vars)
    captured = _captured(kernel)
    for store in kernel.stores:
        seen = set()
        for node in store.value.walk():
            for child in node.args:
                uses[child] += 1
            seen.add(node)
        uses[store.value] += 1
    order = []
    seen_all: set = set()
    for store in kernel.stores:
        for node in store.value.walk():
            if node in seen_all:
                continue
            seen_all.add(node)
            if (uses[node] > 1 and node.op not in _LEAVES
                    and node.free_vars <= loop_vars and node not in captured):
                order.append(node)
    return order


def format_store(store: Store, names: dict[Expr, str]) -> str:
    index = ", ".join(format_index(i) for i in store.index)
    return f"{store.array}[{index}] = {format_expr(store.value, names) if store.value not in names else names[store.value]}"


def format_kernel(kernel: Kernel) -> list[str]:
    loops = ", ".join(f"{v} in {d}" for v, d in kernel.loops)
    lines = [f"kernel {kernel.name} for {loops}:"]
    names: dict[Expr, str] = {}
    for node in let_bindings(kernel):
        text = format_expr(node, names)
        names[node] = f"t{len(names)}"
        lines.append(f"  let {names[node]} = {text}")
    for store in kernel.stores:
        lines.append("  " + format_store(store, names))
    return lines


def format_program(p: Program) -> str:
    lines = [f"program {p.name}"]
    for d in p.dims:
        lines.append(f"dim {d.name} = {d.size} point" if d.point
                     else f"dim {d.name} = {d.size} block {d.block}")
    role = {n: "weight" if n in p.weights else "input" for n in p.inputs}
    role.update({n: "output" for n in p.outputs})
    for a in p.arrays:
        lines.append(f"{role.get(a.name, 'array')} {a.name}[{', '.join(a.dims)}]")
    for k in p.kernels:
        lines.extend(format_kernel(k))
    return "\n".join(lines) + "\n"
