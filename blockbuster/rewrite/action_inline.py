"""The ``inline`` action (store->load elimination: a load becomes the producer's
stored expression) and ``drop_dead`` (a kernel nobody reads is deleted)."""

from __future__ import annotations

from typing import Iterator

from ..ir.expr import Expr
from ..ir.index import IVar
from ..ir.program import Program
from ..ir.walk import binder_of
from .action_base import Application
from .subst import replace_in_kernel, substitute_index


# --- inline ---------------------------------------------------------------------

def _peeled(program: Program, load: Expr) -> tuple[dict, Expr]:
    """(the producer's loop and map variables -> the load's subscripts, the stored
    value under the maps that ':' subscripts peel off)."""
    array = load.attr.array
    kernel = program.producer(array)
    store = next(s for s in kernel.stores if s.array == array)
    mapping = {}
    value = store.value
    for sub, ix in zip(store.index, load.attr.index):
        if sub is None:                  # ':' -> pick the map element
            mapping[binder_of(value).var] = ix
            value = value.args[0]
        else:
            mapping[sub.name] = ix
    return mapping, value


def producer_value_at(program: Program, load: Expr) -> Expr:
    """What ``load`` reads, computed instead: the producer's stored expression with
    its loop variables (and map variables for ':' subscripts) set to the load's
    subscripts."""
    mapping, value = _peeled(program, load)
    # The map variables were peeled off above; substitute loops and maps together.
    return substitute_index(value, mapping)


_LOADS: dict = {}      # kernel -> its distinct load nodes, in walk order (kernels are immutable)


def _loads(kernel) -> tuple:
    hit = _LOADS.get(kernel)
    if hit is None:
        if len(_LOADS) > 50_000:
            _LOADS.clear()
        seen: dict = {}
        for store in kernel.stores:
            for node in store.value.walk():
                if node.op == "load":
                    seen.setdefault(node, None)
        hit = _LOADS[kernel] = tuple(seen)
    return hit


def _peelable(program: Program, array: str) -> bool:
    """Whether each ':' subscript of ``array``'s store has its ``map`` at the top of
    the value, in order (a held row ``sum(k: map(n: ...))`` does not: its elements
    are not an expression of the load's subscripts)."""
    kernel = program.producer(array)
    store = next(s for s in kernel.stores if s.array == array)
    value = store.value
    for sub in store.index:
        if sub is None:
            if value.op != "map":
                return False
            value = value.args[0]
    return True


def _reindexable(program: Program, load: Expr) -> bool:
    """Whether the producer's value can take the load's subscripts: ``get`` and
    ``runmax`` name a loop or map variable, so one read at a computed index (a
    key/value head ``h // 2`` of a program fused once already) cannot be inlined."""
    mapping, value = _peeled(program, load)
    computed = {v for v, ix in mapping.items() if not isinstance(ix, IVar)}
    return not computed or not any(n.op in ("get", "runmax") and n.attr in computed
                                   for n in value.walk())


def find_inline(program: Program) -> Iterator[Application]:
    produced = {a for k in program.kernels for a in k.writes()}
    for kernel in program.kernels:
        for node in _loads(kernel):
            if node.attr.array in produced and _peelable(program, node.attr.array) \
                    and _reindexable(program, node):
                yield _inline_application(program, kernel, node)


def _inline_application(program, kernel, load) -> Application:
    def build():
        return replace_in_kernel(program, kernel, {load: producer_value_at(program, load)})
    return Application(kernel.name, load, None, {"X": load.attr.array}, build)


def inline_everywhere(program: Program, array: str) -> Program:
    """``program`` with every load of ``array`` inlined (used by ``fits_local``)."""
    for kernel in program.kernels:
        loads = {n for s in kernel.stores for n in s.value.walk()
                 if n.op == "load" and n.attr.array == array}
        if loads:
            current = next(k for k in program.kernels if k.name == kernel.name)
            program = replace_in_kernel(program, current,
                                         {n: producer_value_at(program, n) for n in loads})
    return program


# --- drop_dead ------------------------------------------------------------------

def find_drop_dead(program: Program) -> Iterator[Application]:
    read = set().union(*(k.reads() for k in program.kernels)) if program.kernels else set()
    keep = set(program.outputs) | read
    for kernel in program.kernels:
        if any(s.array in keep for s in kernel.stores):
            continue

        def build(kernel=kernel):
            dead = set(kernel.writes())
            return program.evolve(
                kernels=tuple(k for k in program.kernels if k is not kernel),
                arrays=tuple(a for a in program.arrays if a.name not in dead))
        yield Application(kernel.name, None, None, {}, build)
