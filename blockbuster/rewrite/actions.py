"""Built-in structural actions: rewrites of the program, not of one expression.

``inline``            a consumer's ``load X[e...]`` becomes the expression X's producer
                      stores, re-indexed at ``e...`` (store->load elimination);
``drop_dead``         a kernel whose intermediate arrays nobody loads is deleted;
``merge_reductions``  two reductions over the same range in one kernel become one
                      multi-output reduction (one loop, shared loads);
``hold``              a kernel's inner parallel loop becomes a local ``map`` (a row of
                      output blocks held in the local tier);
``hold_accumulators`` a sum inside such a map becomes one sum of map arrays (a held
                      row of accumulators, one pass), read back with ``get``;
``merge_siblings``    two independent kernels that load the same array become one
                      multi-output kernel over their common loops (the extra loops
                      of one held as maps stored with ':');
``prepare_weights``   an expression of weights only moves into a kernel of its own,
                      run once (weight preparation).

The vocabulary (``dsl/vocabulary.py``) names them; each name is also the rule's that
applies it in the shipped rule sets, except where a rule says more (``inline`` by
``inline_intermediate``, ...).

Each action enumerates its applications in a deterministic order; the engine
applies the first one whose guards hold, one application per step.
"""

from __future__ import annotations

from typing import Callable, Iterator

import attrs

from ..dsl.vocabulary import ACTIONS
from ..ir.combiners import COMBINERS
from ..ir.expr import BindAttr, Expr, LoadAttr, proj
from ..ir.index import IVar, free_vars as index_vars
from ..ir.program import Kernel, Program
from ..ir.walk import binder_of, walk_scoped
from .subst import replace_in_kernel, replace_nodes, substitute_index


@attrs.frozen
class Application:
    """One way to apply an action: where, and the program it produces."""

    kernel: str
    before: Expr | None
    after: Expr | None
    bindings: dict
    build: Callable[[], Program]


# --- inline ---------------------------------------------------------------------

def producer_value_at(program: Program, load: Expr) -> Expr:
    """What ``load`` reads, computed instead: the producer's stored expression with
    its loop variables (and map variables for ':' subscripts) set to the load's
    subscripts."""
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


def find_inline(program: Program) -> Iterator[Application]:
    produced = {a for k in program.kernels for a in k.writes()}
    for kernel in program.kernels:
        for node in _loads(kernel):
            if node.attr.array in produced and _peelable(program, node.attr.array):
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


# --- merge_reductions -----------------------------------------------------------

# Action searches run after every step on every kernel, and a step changes one
# kernel: what they find in a kernel (or below a node) is memoised. Pure functions of
# immutable kernels and hash-consed nodes (the memos keep them, and so the ids of
# binding sites, alive).
_SCOPES: dict = {}
_HELD: dict = {}
_MEMO_LIMIT = 20_000


def _occurrence_scopes(kernel: Kernel) -> dict[Expr, set]:
    """For each node, the scopes (var -> binding site) it occurs in (memoised; the
    caller must not change the answer)."""
    hit = _SCOPES.get(kernel)
    if hit is None:
        if len(_SCOPES) >= _MEMO_LIMIT:
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


def _outputs(r: Expr) -> int:
    comb = COMBINERS[r.attr.combiner]
    return comb.head_outputs + len(r.args) - comb.head


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
        n_out = _outputs(node)
        comb = COMBINERS[node.attr.combiner]
        for i in range(n_out):
            if node is host:
                j = i
            elif i < comb.head_outputs:
                j = i                   # same head, same head outputs
            else:
                j = _outputs(host) + (i - comb.head_outputs)
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


# --- hold ---------------------------------------------------------------------------

def find_hold(program: Program) -> Iterator[Application]:
    """Every (kernel, inner parallel loop) that could become a local map."""
    for kernel in program.kernels:
        for var, dim in kernel.loops[1:]:          # keep at least one parallel loop
            # ':' subscripts peel maps outermost first: the new map goes outside, so
            # its subscript must come before any existing ':'.
            if all(_held_first(s.index, var) for s in kernel.stores):
                yield _hold_application(program, kernel, var, dim)


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
        if len(_HELD) >= _MEMO_LIMIT:
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
    if _outputs(r) == 1:
        mapping = {r: Expr("get", (new_r,), d)}
    else:
        mapping = {}
        for i in range(_outputs(r)):
            k = i - comb.head_outputs
            out = proj(new_r, i)
            mapping[proj(r, i)] = Expr("get", (out,), d) if k >= 0 and held[k] else out
    new_m = Expr("map", (replace_nodes(m.args[0], mapping),), m.attr)
    return replace_in_kernel(program, kernel, {m: new_m})


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


def _accumulator_var(kernel: Kernel, d: str, passengers) -> str:
    """The variable of held accumulators for map(d: ...): ``d + "a"``, the same for
    every reduction held from one map (sibling maps over one variable are one loop),
    unless that name is taken by a kernel loop or free in a passenger."""
    name = d + "a"
    if name in kernel.loop_vars or any(name in p.free_vars for p in passengers):
        from ..ir.walk import fresh_name
        name = fresh_name(name, set(kernel.loop_vars).union(*(p.free_vars for p in passengers)))
    return name


# --- prepare_weights (weight preparation) ------------------------------------------

_NOT_PREPARED = ("reduce", "map", "get", "runmax", "pos", "proj", "pvar")


def find_prepare_weights(program: Program) -> Iterator[Application]:
    """Expressions of weights only (e.g. ``rowscale(gamma[k], W[k, n])``, a weight
    with its norm gain folded in) that a kernel recomputes: each may be precomputed
    once into an array of its own by a kernel of its own (weight preparation)."""
    inputs = set(program.weights)
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


def _prepare(program: Program, kernel: Kernel, node: Expr, layout: list) -> Program:
    from ..ir.program import Store
    from ..ir.types import GlobalArray
    taken = {a.name for a in program.arrays} | {k.name for k in program.kernels}
    n = 1
    while f"prep{n}" in taken:
        n += 1
    name = f"prep{n}"
    prep = Kernel(name, tuple(layout), (Store(name, tuple(IVar(v) for v, _ in layout), node),))
    load = Expr("load", (), LoadAttr(name, tuple(IVar(v) for v, _ in layout)))
    replaced = replace_in_kernel(program, kernel, {node: load})
    return replaced.evolve(kernels=(prep,) + replaced.kernels,
                           arrays=replaced.arrays + (GlobalArray(name, tuple(d for _, d in layout)),))


ACTION_IMPLS: dict[str, Callable[[Program], Iterator[Application]]] = {
    "prepare_weights": find_prepare_weights,
    "hold_accumulators": find_hold_accumulators,
    "hold": find_hold,
    "inline": find_inline,
    "drop_dead": find_drop_dead,
    "merge_reductions": find_merge_reductions,
    "merge_siblings": find_merge_siblings,
}

assert set(ACTION_IMPLS) == set(ACTIONS), "every action in the vocabulary is implemented"
