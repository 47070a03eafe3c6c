"""The ``merge_reductions`` action: two reductions over the same range in one kernel
become one multi-output reduction."""

from __future__ import annotations

from typing import Iterator

from ..ir.combiners import COMBINERS
from ..ir.expr import Expr, proj
from ..ir.program import Kernel, Program
from ..ir.walk import binder_of, walk_scoped
from .action_base import MEMO_LIMIT, Application, reduction_outputs
from .subst import replace_in_kernel


# --- merge_reductions -----------------------------------------------------------

# Memoised (see action_base): the scopes each node of a kernel occurs in.
_SCOPES: dict = {}


def _occurrence_scopes(kernel: Kernel) -> dict[Expr, set]:
    """For each node, the scopes (var -> binding site) it occurs in (memoised; the
    caller must not change the answer)."""
    hit = _SCOPES.get(kernel)
    if hit is None:
        if len(_SCOPES) >= MEMO_LIMIT:
            _SCOPES.clear()
        hit = _SCOPES[kernel] = _find_occurrence_scopes(kernel)
    return hit


def _find_occurrence_scopes(kernel: Kernel) -> dict[Expr, set]:
    scopes: dict[Expr, set] = {}

    def visit(n: Expr, scope: tuple):
        scopes.setdefault(n, set()).add(scope)

    def enter(scope: tuple, binder, n: Expr) -> tuple:   # an inner binder hides an outer one
        return tuple((v, b) for v, b in scope if v != binder.var) + ((binder.var, id(n)),)

    walk_scoped((s.value for s in kernel.stores),
                tuple((v, "kernel") for v in kernel.loop_vars), visit, enter)
    return scopes


def _merge(a: Expr, b: Expr) -> tuple[Expr, dict] | None:
    """The merged reduction and how the old outputs map onto it, or None."""
    ca, cb = COMBINERS[a.attr.combiner], COMBINERS[b.attr.combiner]
    if a.attr.combiner == b.attr.combiner and a.args[: ca.head] == b.args[: cb.head]:
        host, guest, gcomb = a, b, cb
    elif b.attr.combiner == "sum" and ca.passenger == "sum":
        host, guest, gcomb = a, b, cb
    elif a.attr.combiner == "sum" and cb.passenger == "sum":
        host, guest, gcomb = b, a, ca
    else:
        return None
    # meanvar already sums its head's rows: sum(k: rowsum(x)) is its output 1.
    if (host.attr.combiner == "meanvar" and guest.attr.combiner == "sum"
            and len(guest.args) == 1 and guest.args[0] == Expr("rowsum", (host.args[0],))):
        return host, {(guest, None): proj(host, 1)}
    guest_passengers = guest.args[gcomb.head:]
    merged = Expr("reduce", host.args + guest_passengers, host.attr)
    mapping = {}
    for node, offset, head_map in ((host, 0, True), (guest, None, False)):
        n_out = reduction_outputs(node)
        comb = COMBINERS[node.attr.combiner]
        for i in range(n_out):
            if node is host:
                j = i
            elif i < comb.head_outputs:
                j = i                   # same head, same head outputs
            else:
                j = reduction_outputs(host) + (i - comb.head_outputs)
            mapping[(node, i if n_out > 1 else None)] = proj(merged, j)
    return merged, mapping


def find_merge_reductions(program: Program) -> Iterator[Application]:
    for kernel in program.kernels:
        reduces = [n for s in kernel.stores for n in s.value.walk() if n.op == "reduce"]
        reduces = list(dict.fromkeys(reduces))
        if len(reduces) < 2:
            continue
        scopes = _occurrence_scopes(kernel)
        for i, a in enumerate(reduces):
            for b in reduces[i + 1:]:
                app = _merge_application(program, kernel, a, b, scopes)
                if app is not None:
                    yield app


def _merge_application(program, kernel, a, b, scopes):
    if binder_of(a) != binder_of(b):     # the same variable over the same range
        return None
    if a in set(b.walk()) or b in set(a.walk()):
        return None                      # one feeds the other: not siblings
    free = a.free_vars | b.free_vars
    contexts = {tuple((v, site) for v, site in scope if v in free)
                for node in (a, b) for scope in scopes[node]}
    if len(contexts) != 1:
        return None                      # the two are not evaluated in the same scope
    merged = _merge(a, b)
    if merged is None:
        return None
    new, outs = merged
    mapping = {}
    for (old, k), target in outs.items():
        mapping[old if k is None else proj(old, k)] = target
    if new is a or new is b:             # subsumption: only the guest goes
        mapping = {k: v for k, v in mapping.items() if k is not new}

    def build():
        return replace_in_kernel(program, kernel, mapping)
    return Application(kernel.name, a, new, {}, build)
