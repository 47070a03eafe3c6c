"""Counting one kernel: a walk over its expression DAG, once per (node, placement),
that sums the elements loaded and stored, the FLOPs, the local-tier traffic and the
footprint the cost model (:mod:`.model`, whose docstring states the execution model
and the figures) turns into bytes and time."""

from __future__ import annotations

import itertools

import attrs

from ..errors import IRError
from ..ir.combiners import COMBINERS
from ..ir.expr import Expr
from ..ir.index import IConst, IVar, Idx, free_vars as index_vars, substitute
from ..ir.ops import OPS
from ..ir.placement import Binder, binds_loop, place, shared_loops
from ..ir.program import Kernel, Program
from .counting import Loop, LoopSums
from .shapes import (SCALAR, ArrayShape, BlockShape, TupleShape, elements, forget,
                     full_elements, map_axes, rows)


def _direct_maps(kernel: Kernel) -> set:
    """The ``map`` nodes (nested ones too) of stores with one ``:`` per map level
    whose map is used nowhere else: each element is written straight into its
    destination block, so the array is never held in the local tier (its elements
    are counted as the nodes of the map's body)."""
    used = {a for s in kernel.stores for n in s.value.walk() for a in n.args}
    values = [s.value for s in kernel.stores]
    out = set()
    for store in kernel.stores:
        chain, node = [], store.value
        while node.op == "map":
            chain.append(node)
            node = node.args[0]
        if (chain and len(chain) == sum(ix is None for ix in store.index)
                and store.value not in used and values.count(store.value) == 1):
            out.update(chain)
    return out


@attrs.frozen(cache_hash=True)
class _Frame:
    """One enclosing loop: a kernel loop (``binder`` None), a ``reduce`` or a ``map``.

    ``loop.name`` is ``_<depth>``, unique along a chain, so index expressions can be
    renamed into it even where a source variable is shadowed. ``binder`` is part of
    the identity: two different reductions over the same range are two loops. A
    ``map`` frame has no binder: sibling maps over the same dimension in one place
    (the held passengers of one reduction step) are one loop, as a code generator
    emits them, so a block they all use is loaded once.
    """

    var: str
    loop: Loop
    binder: Expr | None = None
    iterates: bool = True     # False: a one-block reduce/map (see ir.placement)


Chain = tuple[_Frame, ...]


class _InternedChain(tuple):
    """A chain (or its loops) interned by a counter, its hash computed once: memos are
    keyed by chains, and hashing a plain tuple hashes every frame again."""

    def __new__(cls, frames):
        self = super().__new__(cls, frames)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self):
        return self._hash

    __eq__ = tuple.__eq__


# One object per distinct loop, shared by every counter: ``LoopSums`` memo keys then
# compare loops by identity, not field by field.
_LOOPS: dict[Loop, Loop] = {}


def _loop(name: str, dim, lo=None, hi=None) -> Loop:
    loop = Loop(name, dim, lo, hi)
    hit = _LOOPS.get(loop)
    if hit is None:
        if len(_LOOPS) >= 50_000:
            _LOOPS.clear()
        hit = _LOOPS[loop] = loop
    return hit


class KernelCounter:
    """Walks a kernel's DAG once per (node, placement) and accumulates element counts."""

    def __init__(self, kernel: Kernel, program: Program, sums: LoopSums):
        self.dims = program.dim_map
        self.arrays = program.array_map
        self.sums = sums
        self.loaded = self.flops = self.local_traffic = 0
        self._shapes: dict[tuple[Expr, Chain], object] = {}
        self._first_shape: dict[Expr, object] = {}        # for the footprint
        self._scopes: dict[Chain, dict[str, int]] = {}
        self._binders: dict[Chain, tuple[Binder, ...]] = {}
        # One object per distinct chain (and memoised placements and loop entries):
        # the memos above are keyed by chains, and a key that is the very object
        # stored compares by identity instead of frame by frame.
        self._chains: dict[Chain, Chain] = {}
        self._placed: dict[tuple, Chain] = {}
        self._entered: dict[tuple, Chain] = {}
        self._chain_loops: dict[Chain, tuple] = {}
        self._renamed: dict[tuple, Idx] = {}
        self._array_names = itertools.count()
        self._shared = shared_loops(kernel)    # map -> the reduce whose loop it shares

        top = self._intern(tuple(_Frame(v, _loop(f"_{d}", self.dims[dim]))
                                 for d, (v, dim) in enumerate(kernel.loops)))
        self.nk = len(top)
        for store in kernel.stores:
            for node in store.value.walk():   # children first: keeps free_vars shallow
                node.free_vars
            self.visit(store.value, top)
        self.stored = sum(self._store_elements(s, top) for s in kernel.stores)
        self.local_traffic += self.loaded + self.stored
        direct = _direct_maps(kernel)
        self.footprint = sum(full_elements(shape) for node, shape in
                             self._first_shape.items()
                             if node.op not in ("proj", "get") and node not in direct)

    # -- scopes and placement ---------------------------------------------------
    def _scope(self, chain: Chain) -> dict[str, int]:
        """Source variable -> depth of its innermost binding in ``chain``."""
        scope = self._scopes.get(chain)
        if scope is None:
            scope = self._scopes[chain] = {f.var: d for d, f in enumerate(chain)}
        return scope

    def _intern(self, chain: Chain) -> Chain:
        hit = self._chains.get(chain)
        if hit is None:
            hit = _InternedChain(chain)
            self._chains[hit] = hit
        return hit

    def _place(self, node: Expr, ctx: Chain) -> Chain:
        """The prefix of ``ctx`` a node runs in (the shared placement rule): down to
        the innermost loop it uses, and never outside its kernel instance."""
        free = node.free_vars
        key = (ctx, free)
        hit = self._placed.get(key)
        if hit is None:
            if not free:
                hit = ctx[:self.nk]
            else:
                binders = self._binders.get(ctx)
                if binders is None:
                    binders = self._binders[ctx] = tuple(Binder(f.var, f.iterates)
                                                         for f in ctx)
                hit = ctx[:place(free, binders, floor=self.nk)]
            hit = self._placed[key] = self._intern(hit)
        return hit

    def _rename(self, ix: Idx | None, chain: Chain) -> Idx | None:
        if ix is None:
            return None
        key = (ix, chain)
        hit = self._renamed.get(key)
        if hit is None:
            hit = self._renamed[key] = self._rename_uncached(ix, chain)
        return hit

    def _rename_uncached(self, ix: Idx, chain: Chain) -> Idx:
        scope = self._scope(chain)
        mapping = {v: IVar(chain[d].loop.name) for v, d in scope.items()}
        # Variables of one-block loops the node was hoisted out of are block 0.
        mapping.update({v: IConst(0) for v in index_vars(ix) if v not in scope})
        return substitute(ix, mapping)

    def _loops(self, chain: Chain) -> tuple:
        loops = self._chain_loops.get(chain)
        if loops is None:
            loops = self._chain_loops[chain] = _InternedChain(f.loop for f in chain)
        return loops

    def _elements(self, shape, chain: Chain) -> int:
        return elements(shape, self._loops(chain), self.sums)

    # -- the walk -----------------------------------------------------------------
    def visit(self, node: Expr, ctx: Chain):
        """The shape of ``node`` in ``ctx``; counts its cost the first time it is seen
        at its placement. Children are done first with an explicit stack, so deep
        expressions do not hit Python's recursion limit (``_count``'s own ``visit``
        calls are then memo hits)."""
        shapes = self._shapes
        key = (node, self._place(node, ctx))
        hit = shapes.get(key)
        if hit is not None:
            return hit
        stack = [(key, False)]
        while stack:
            key_n, ready = stack.pop()
            if key_n in shapes:
                continue
            n, at = key_n
            if ready:
                shape = shapes[key_n] = self._count(n, at)
                self._first_shape.setdefault(n, shape)
                if n.op == "dot":
                    self._dot_traffic(n, shape, at)
                continue
            stack.append((key_n, True))
            if n.args:
                inner = self._binder_context(n, at)
                for child in reversed(n.args):
                    child_key = (child, self._place(child, inner))
                    if child_key not in shapes:
                        stack.append((child_key, False))
        return shapes[key]

    def _dot_traffic(self, node: Expr, shape, at: Chain) -> None:
        """A ``dot`` reads its operand blocks from the local tier and writes its
        result there, every time it runs (its operands may be placed further out)."""
        operands = [self._shapes[(a, self._place(a, at))] for a in node.args]
        self.local_traffic += sum(self._elements(s, at) for s in operands + [shape])

    def _binder_context(self, node: Expr, at: Chain) -> Chain:
        """The chain ``node``'s arguments are evaluated in."""
        if node.op == "reduce":
            return self._enter(node, at, node.attr.dim, node.attr.lo, node.attr.hi)
        if node.op == "map":
            return self._enter(node, at, node.attr.dim)
        return at

    def _count(self, node: Expr, at: Chain):
        op = node.op
        if op == "load":
            shape = BlockShape(tuple(
                (self.dims[d], self._rename(ix, at))
                for d, ix in zip(self.arrays[node.attr.array].dims, node.attr.index)
                if not self.dims[d].point))
            self.loaded += self._elements(shape, at)
            return shape
        if op == "const":
            return SCALAR
        if op == "pos":
            return BlockShape(((self.dims[node.attr.dim], self._rename(node.attr.index, at)),))
        if op == "runmax":      # the rows of its online_softmax's logits (the head)
            softmax = at[self._scope(at)[node.attr]].binder
            return rows(self.visit(softmax.args[0], at))
        if op == "proj":
            return self.visit(node.args[0], at).items[node.attr]
        if op == "get":         # a view of one block of a held map array
            array = self.visit(node.args[0], at)
            depth = self._scope(at).get(node.attr)
            target = IConst(0) if depth is None else IVar(at[depth].loop.name)
            return map_axes(array.elem, lambda d, ix: (d, None if ix is None
                                                       else substitute(ix, {array.var: target})))
        if op == "map":
            return self._map(node, at)
        if op == "reduce":
            return self._reduce(node, at)
        return self._operator(node, [self.visit(a, at) for a in node.args], at)

    def _operator(self, node: Expr, args: list, at: Chain):
        """Shape and FLOPs of a block operator, both from its registry entry."""
        spec = OPS[node.op]
        if spec.result_axes is None:
            raise IRError(f"cost model: no shape rule for operator '{node.op}'")
        axes = [a.axes for a in args]
        loops = self._loops(at)
        self.flops += spec.flops_of(axes, lambda work: self.sums.count(loops, work))
        return BlockShape(tuple(spec.result_axes(axes)))

    def _enter(self, node: Expr, at: Chain, dim: str, lo=None, hi=None) -> Chain:
        """``at`` plus the loop that ``node`` (a reduce or map) binds."""
        key = (node, at, dim, lo, hi)
        hit = self._entered.get(key)
        if hit is not None:
            return hit
        partner = self._shared.get(node) if node.op == "map" else None
        if partner is not None:          # one loop with that reduce: the same frame
            hit = self._enter(partner, at, dim)
        else:
            loop = _loop(f"_{len(at)}", self.dims[dim], self._rename(lo, at),
                         self._rename(hi, at))
            hit = self._intern(at + (_Frame(node.attr.var, loop,
                                            node if node.op == "reduce" else None,
                                            binds_loop(node, self.dims[dim])),))
        self._entered[key] = hit
        return hit

    def _map(self, node: Expr, at: Chain):
        inner = self._binder_context(node, at)
        body = self.visit(node.args[0], inner)
        # The array's own loop name must not clash with any chain it is used in.
        name, mine = f"@{next(self._array_names)}", inner[-1].loop.name
        elem = map_axes(body, lambda d, ix: (d, None if ix is None
                                             else substitute(ix, {mine: IVar(name)})))
        return ArrayShape(name, self.dims[node.attr.dim], elem)

    def _reduce(self, node: Expr, at: Chain):
        a = node.attr
        comb = COMBINERS[a.combiner]
        inner = self._binder_context(node, at)
        bodies = [self.visit(b, inner) for b in node.args]
        self.flops += self._combine_flops(node, comb, bodies, inner)
        outs = [BlockShape(tuple(ax))
                for ax in comb.head_axes([b.axes for b in bodies[: comb.head]])]
        outs = [forget(s, inner[-1].loop.name) for s in outs + bodies[comb.head:]]
        return outs[0] if len(outs) == 1 else TupleShape(tuple(outs))

    def _combine_flops(self, node: Expr, comb, bodies: list, inner: Chain) -> int:
        """FLOPs of folding one step's bodies into the accumulators, over all steps."""
        count = lambda s: self._elements(s, inner)     # noqa: E731
        flops = 0
        if comb.head:
            per_element, per_row = comb.head_flops
            flops += per_element * count(bodies[0]) + per_row * count(rows(bodies[0]))
        var = node.attr.var
        for body, shape in zip(node.args[comb.head:], bodies[comb.head:]):
            # A dot computed in this step (alone or as each element of a map) already
            # counts the adds of its products: it accumulates in place.
            while body.op == "map":
                body = body.args[0]
            fused = (comb.passenger != "max" and body.op == "dot"
                     and var in body.free_vars)
            per_element = comb.passenger_flops - fused
            flops += per_element * count(shape)
        return flops

    def _store_elements(self, store, top: Chain) -> int:
        axes, whole = [], 1
        for ix, d in zip(store.index, self.arrays[store.array].dims):
            dim = self.dims[d]
            if ix is None:
                whole *= dim.size                          # ':' writes every block
            elif not dim.point:
                axes.append((dim, self._rename(ix, top)))
        return whole * self.sums.count(tuple(f.loop for f in top), axes)
