"""The ``prepare_weights`` action: an expression of weights only moves into a kernel
of its own, run once (weight preparation)."""

from __future__ import annotations

from typing import Iterator

from ..ir.combiners import COMBINERS
from ..ir.expr import Expr, LoadAttr, ReduceAttr
from ..ir.index import IVar
from ..ir.prep import weight_derived_kernels
from ..ir.program import Kernel, Program
from .action_base import Application, reduction_outputs
from .subst import replace_in_kernel


# --- prepare_weights (weight preparation) ------------------------------------------

def weight_derived_arrays(program: Program) -> set[str]:
    """The weights, and the arrays that weight-preparation kernels write."""
    prep = set(weight_derived_kernels(program))
    return set(program.weights).union(*(k.writes() for k in program.kernels if k.name in prep))


_NOT_PREPARED = ("reduce", "map", "get", "runmax", "pos", "proj", "pvar")


def find_prepare_weights(program: Program) -> Iterator[Application]:
    """Expressions of weights only (e.g. ``rowscale(gamma[k], W[k, n])``, a weight
    with its norm gain folded in) that a kernel recomputes: each may be precomputed
    once into an array of its own by a kernel of its own (weight preparation).

    First the passengers of a fused reduction that read weights only (the column sums
    ``colsum(rowscale(beta[k], W[k, n]))`` that LayerNorm·W accumulates beside its
    ``dot``): their sum over the reduction's range is prepared, and the reduction
    keeps its other bodies. Then single expressions.

    Arrays that preparation kernels compute count as weights: the column sums of a
    prepared ``gamma·W`` are prepared in turn, not summed again on every call."""
    inputs = weight_derived_arrays(program)
    for kernel in program.kernels:
        yield from _passenger_applications(program, kernel, inputs)
    for kernel in program.kernels:
        seen: set = set()
        for store in kernel.stores:
            for node in store.value.walk():
                if node in seen or node.op in ("load", "const"):
                    continue
                seen.add(node)
                layout = _prep_layout(program, node, inputs)
                if layout is not None:
                    yield Application(kernel.name, node, None, {},
                                      lambda k=kernel, n=node, l=layout: _prepare(program, k, n, l))


def _prep_layout(program: Program, node: Expr, inputs: set) -> list | None:
    """[(var, dim)] for the array the value of ``node`` can be stored in, or None."""
    from ..ir.verify import TypeChecker
    var_dim: dict[str, str] = {}
    # A sum over a whole dimension is prepared with it (the column sums of a weight,
    # ``sum(k in K: colsum(rowscale(beta[k], W[k, n])))``); its variable indexes no
    # axis of the prepared array.
    bound = {n.attr.var: n.attr.dim for n in node.walk() if n.op == "reduce"}
    if set(bound) & node.free_vars:
        return None
    for n in node.walk():
        if n.op == "reduce":
            if n.attr.lo is not None or n.attr.hi is not None:
                return None
        elif n.op in _NOT_PREPARED:
            return None
        if n.op == "load":
            if n.attr.array not in inputs:
                return None
            for ix, dim in zip(n.attr.index, program.array(n.attr.array).dims):
                if not isinstance(ix, IVar):
                    return None
                if ix.name in bound:
                    if bound[ix.name] != dim:
                        return None
                elif var_dim.setdefault(ix.name, dim) != dim:
                    return None
    if not any(n.op == "load" for n in node.walk()):
        return None
    try:
        t = TypeChecker(program).type_of(node, {v: (d, None) for v, d in var_dim.items()})
    except Exception:
        return None
    dims = program.dim_map
    axes = list(getattr(t, "axes", ()))
    if not axes or len(set(axes)) != len(axes) or any(dims[a].point for a in axes):
        return None
    by_dim = {d: v for v, d in var_dim.items()}
    if len(by_dim) != len(var_dim) or set(by_dim) != set(axes):
        return None                  # every variable must index one axis of the value
    return [(by_dim[a], a) for a in axes]


def _prep_kernel(program: Program, node: Expr, layout: list):
    """(a kernel storing ``node`` in a new array, the array, a load of it) with the
    first free name ``prepN``."""
    from ..ir.program import Store
    from ..ir.types import GlobalArray
    taken = {a.name for a in program.arrays} | {k.name for k in program.kernels}
    n = 1
    while f"prep{n}" in taken:
        n += 1
    name = f"prep{n}"
    index = tuple(IVar(v) for v, _ in layout)
    prep = Kernel(name, tuple(layout), (Store(name, index, node),))
    return (prep, GlobalArray(name, tuple(d for _, d in layout)),
            Expr("load", (), LoadAttr(name, index)))


def _insert_before(program: Program, consumer: str, prep: Kernel, array) -> Program:
    """``program`` with ``prep`` just before the kernel ``consumer``: after the
    kernels computing what it reads (other prepared arrays among them)."""
    at = [k.name for k in program.kernels].index(consumer)
    return program.evolve(kernels=program.kernels[:at] + (prep,) + program.kernels[at:],
                          arrays=program.arrays + (array,))


def _prepare(program: Program, kernel: Kernel, node: Expr, layout: list) -> Program:
    prep, array, load = _prep_kernel(program, node, layout)
    replaced = replace_in_kernel(program, kernel, {node: load})
    return _insert_before(replaced, kernel.name, prep, array)


def _passenger_applications(program: Program, kernel: Kernel,
                            inputs: set) -> Iterator[Application]:
    seen: set = set()
    for store in kernel.stores:
        for node in store.value.walk():
            if node.op != "reduce" or node in seen:
                continue
            seen.add(node)
            a = node.attr
            comb = COMBINERS[a.combiner]
            alone = comb.passengers_alone
            if alone is None or a.lo is not None or a.hi is not None or len(node.args) < 2:
                continue
            for i in range(comb.head, len(node.args)):
                total = Expr("reduce", (node.args[i],), ReduceAttr(alone, a.var, a.dim))
                layout = _prep_layout(program, total, inputs)
                if layout is not None:
                    yield Application(
                        kernel.name, node, None, {},
                        lambda k=kernel, r=node, i=i, t=total, l=layout:
                            _prepare_passenger(program, k, r, i, t, l))


def _prepare_passenger(program: Program, kernel: Kernel, node: Expr, i: int,
                       total: Expr, layout: list) -> Program:
    """``node`` without its passenger ``i``, whose ``total`` over the range a
    preparation kernel computes; the kernel's projections renumbered."""
    comb = COMBINERS[node.attr.combiner]
    out = comb.head_outputs + i - comb.head          # the passenger's output
    rest = Expr("reduce", node.args[:i] + node.args[i + 1:], node.attr)
    single = reduction_outputs(rest) == 1
    prep, array, load = _prep_kernel(program, total, layout)
    mapping = {}
    for store in kernel.stores:
        for n in store.value.walk():
            if n.op == "proj" and n.args[0] is node and n not in mapping:
                j = n.attr
                mapping[n] = (load if j == out else rest if single
                              else Expr("proj", (rest,), j - (j > out)))
    replaced = replace_in_kernel(program, kernel, mapping)
    return _insert_before(replaced, kernel.name, prep, array)
