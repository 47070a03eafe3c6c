"""The cost model: bytes across tiers, local footprint, FLOPs, and a roofline time.

Execution model (what the counts assume, and what a code generator does):

* A kernel runs one independent instance per iteration of its parallel loops; nothing
  is shared between instances, so every instance loads what it needs.
* Inside an instance, a node runs inside the innermost ``reduce``/``map`` loop whose
  variable it uses, and no deeper (loop-invariant code motion): ``B[i]`` inside
  ``sum(k in K: ...)`` runs once per instance, not once per ``k``; this is the
  placement rule the code generators emit with (:mod:`blockbuster.ir.placement`).
  Hash-consing makes a node shared by several consumers one node: it runs once per
  iteration of the loops it is placed in. Two *different* ``reduce`` nodes are two
  different loops, even over the same range, so a load used in both runs in both
  (merging them is a fusion). A ``map`` stored with ``:`` beside a sibling ``reduce``
  over the same whole dimension (a multi-output kernel) runs in that reduce's loop
  (:func:`blockbuster.ir.placement.shared_loops`): a block both read moves once.
* A ``load`` moves the product of the block extents of its non-point dimensions (at
  the block indices its subscripts evaluate to; ragged blocks are smaller) each time
  it runs. A store writes each subscripted block once; a ``:`` subscript writes
  every block of that dimension.

Every figure is an exact sum over all those iterations (see :mod:`.counting`).

Time (a roofline over the hardware's three resources, per kernel): the slowest of
global bytes / global bandwidth, FLOPs / peak FLOP/s and local traffic / local
bandwidth. The local traffic is what crosses the local tier outside registers:
every loaded block written into it, every stored block read from it, and each
``dot``'s operand blocks read and its result written (elementwise operators are fused
into one pass by a code generator and stay in registers, so they add none). FLOPs and
local traffic run on the cores, and a kernel only uses as many cores as it has
parallel instances: with ``n`` instances on ``c`` cores they run in ``ceil(n / c)``
waves, so compute and local time are divided by the fraction ``n / (c · ceil(n / c))``
of the cores kept busy. The global bandwidth is the machine's, shared, and not scaled.

FLOPs per execution of a node (``n`` = elements of the result, actual extents); the
figures are the registry's (``OpSpec.flops``/``work_axes`` in :mod:`blockbuster.ir.ops`,
``Combiner.head_flops``/``passenger_flops`` in :mod:`blockbuster.ir.combiners`), and so
are the result shapes (``OpSpec.result_axes``, ``Combiner.head_axes``):

* elementwise ops (any arity: comparisons and ``where`` too), broadcasts, ``outer``,
  ``keep_ge``: ``n``; ``exp``/``log``/``gelu``... count 1 per element like ``add``;
* ``dot`` of ``R×K`` by ``K×C``: ``2·R·K·C``; ``transpose``, ``relabel``, ``proj``,
  ``map``, leaves: 0; ``rotate_half``: ``n / 2`` (the negated half);
* ``rowsum``/``rowmax``/``colsum``/``colmax``: the elements of the operand;
* ``reduce``, per step, on top of its bodies' own FLOPs:

  - a ``sum``/``max`` passenger: its elements; but a ``dot`` computed in that step
    (alone or as the element of a ``map``) accumulates into a sum for free — its
    ``2·R·K·C`` already counts one add per product — so a tiled matmul is exactly
    ``2·M·N·K``;
  - an ``online_softmax`` passenger: 2 per element (rescale by ``exp(m_old - m_new)``,
    then add; 1 for a per-step ``dot``); its head ``x`` (``R×C``): ``R·C + 3·R`` (row
    max, new running max, ``exp`` of the difference);
  - a ``meanvar`` head ``x``: ``4·R·C + 8·R`` (block row sums, squared deviations from
    the block mean and their sum; Chan's merge of count, mean and deviations).

Local-tier footprint (an approximation, a conservative upper bound on what one
instance keeps live; ``fits`` compares it with the *per-core* local capacity, since
one instance runs on one core): the sum over every distinct node of the kernel's expression DAG
of its value at *full* block size — ``block × block`` for a block, ``block`` for a
vector, scalars 0, a ``map`` array ``nblocks ×`` its element, a multi-output
reduction all its accumulators; a ``proj`` is a view of its reduction's accumulator
and is not counted again, and a ``map`` stored with ``:`` (one per map level, used
nowhere else) is written element by element into its destination, never held. It
ignores liveness (a value dead after its consumer is still counted), so it never
underestimates.
"""

from __future__ import annotations

import itertools
import math

import attrs

from ..errors import IRError
from ..ir.combiners import COMBINERS
from ..ir.expr import Expr
from ..ir.index import IConst, IVar, Idx, free_vars as index_vars, substitute
from ..ir.ops import OPS
from ..ir.kernel_key import declarations_used, kernel_key
from ..ir.placement import Binder, binds_loop, place, shared_loops
from ..ir.program import Kernel, Program
from .counting import Loop, LoopSums
from .hardware import Hardware
from .shapes import (SCALAR, ArrayShape, BlockShape, TupleShape, elements, forget,
                     full_elements, map_axes, rows)


@attrs.frozen
class KernelCost:
    name: str
    loaded_bytes: int         # global -> local
    stored_bytes: int         # local -> global
    local_bytes: int          # footprint in the local tier (see the module doc)
    flops: int
    fits: bool                # local_bytes <= hardware.local_capacity_bytes (per core)
    time_estimate: float      # seconds, roofline
    weight_prep: bool = False  # reads only weights: done once, not on every call
    local_traffic_bytes: int = 0   # bytes crossing the local tier (see the module doc)
    instances: int = 1             # parallel instances (iterations of the kernel loops)

    @property
    def global_bytes(self) -> int:
        return self.loaded_bytes + self.stored_bytes

    def as_dict(self) -> dict:
        return attrs.asdict(self) | {"global_bytes": self.global_bytes}


TRAFFIC_WEIGHT = 0.25


@attrs.frozen(hash=False)
class Cost:
    program: str
    hardware: Hardware
    per_kernel: list[KernelCost]
    compulsory_bytes: int     # every input read once + every output written once

    @property
    def kernels(self) -> int:
        return len(self.per_kernel)

    @property
    def loaded_bytes(self) -> int:
        return sum(k.loaded_bytes for k in self.per_kernel)

    @property
    def stored_bytes(self) -> int:
        return sum(k.stored_bytes for k in self.per_kernel)

    @property
    def global_bytes(self) -> int:
        return self.loaded_bytes + self.stored_bytes

    @property
    def local_bytes(self) -> int:
        """The largest kernel footprint: kernels run one after another."""
        return max((k.local_bytes for k in self.per_kernel), default=0)

    @property
    def flops(self) -> int:
        return sum(k.flops for k in self.per_kernel)

    @property
    def time_estimate(self) -> float:
        return sum(k.time_estimate for k in self.per_kernel)

    @property
    def fits(self) -> bool:
        return all(k.fits for k in self.per_kernel)

    @property
    def weight_prep_bytes(self) -> int:
        """Global bytes of weight preparation (kernels that read only weights)."""
        return sum(k.global_bytes for k in self.per_kernel if k.weight_prep)

    @property
    def per_call_bytes(self) -> int:
        """Global bytes of every call, weight preparation (done once) excluded."""
        return self.global_bytes - self.weight_prep_bytes

    @property
    def objective(self) -> float:
        """What fusion decisions minimise, per call: the roofline seconds plus a
        quarter of the memory seconds again (traffic never overlaps compute
        perfectly, so of two versions with equal roofline time the one moving fewer
        bytes wins). Weight preparation is done once and left out. Infinite when a
        kernel does not fit the local tier."""
        return self.roofline_objective if self.fits else math.inf

    @property
    def roofline_objective(self) -> float:
        """The objective as if every kernel fitted the local tier."""
        calls = [k for k in self.per_kernel if not k.weight_prep]
        return sum(k.time_estimate + TRAFFIC_WEIGHT * k.global_bytes
                   / self.hardware.global_bandwidth_bytes_per_s for k in calls)

    @property
    def rank(self) -> tuple[float, float]:
        """What a pricing guard compares: the objective, then (both infinite: neither
        fits a local tier that is a cache, as at the large blocks measured tuning
        tries) the objective as if it fitted, so the rules still prefer the version
        with less work per call."""
        return self.objective, self.roofline_objective

    def as_dict(self) -> dict:
        """JSON-ready: plain ints, floats, bools, strings, lists and dicts."""
        return {
            "program": self.program,
            "hardware": self.hardware.as_dict(),
            "kernels": self.kernels,
            "loaded_bytes": self.loaded_bytes,
            "stored_bytes": self.stored_bytes,
            "global_bytes": self.global_bytes,
            "compulsory_bytes": self.compulsory_bytes,
            "local_bytes": self.local_bytes,
            "flops": self.flops,
            "time_estimate": self.time_estimate,
            "fits": self.fits,
            "objective": self.objective,
            "weight_prep_bytes": self.weight_prep_bytes,
            "per_call_bytes": self.per_call_bytes,
            "per_kernel": [k.as_dict() for k in self.per_kernel],
        }


def cost(program: Program, hardware: Hardware) -> Cost:
    """Price a (verified) program on ``hardware`` (the public door with a default is
    ``blockbuster.cost``)."""
    hw = _required(hardware)
    key = (program, hw)
    hit = _PROGRAM_COSTS.get(key)
    if hit is None:
        sums = _shared_sums()   # kernels (of one program, of every step) share loop nests
        per_kernel = [_cached_kernel_cost(k, program, hw, sums)
                      for k in program.kernels]
        per_kernel = [attrs.evolve(c, weight_prep=True) if _is_weight_prep(k, program) else c
                      for k, c in zip(program.kernels, per_kernel)]
        compulsory = sum(math.prod(program.shape(a))
                         for a in program.inputs + program.outputs) * hw.element_bytes
        if len(_PROGRAM_COSTS) >= _PROGRAM_COSTS_LIMIT:
            _PROGRAM_COSTS.clear()
        hit = _PROGRAM_COSTS[key] = (tuple(per_kernel), compulsory)
    return Cost(program.name, hw, list(hit[0]), hit[1])


# The pricing guards ask for the same program's cost again and again (every action
# application a phase tries is compared with the program as it stands).
_PROGRAM_COSTS: dict = {}
_PROGRAM_COSTS_LIMIT = 1024


# Fusion prices many programs that share most kernels (every rewrite step changes one
# kernel, candidates and identical layers hold the same kernels under other names): a
# kernel's cost depends only on its structure, the declarations it uses and the
# hardware (``ir.kernel_key``), not on any name.
_KERNEL_COSTS: dict = {}
_KERNEL_COSTS_LIMIT = 20_000


# LoopSums is a pure memo of sums over loop nests (keyed by the loops' dimensions and
# bounds): one instance serves every program fusion prices.
_SUMS = LoopSums()


def _shared_sums() -> LoopSums:
    if len(_SUMS._memo) > 100_000:
        _SUMS._memo.clear()
    return _SUMS


def _cached_kernel_cost(kernel: Kernel, program: Program, hw: Hardware,
                        sums: LoopSums) -> KernelCost:
    exact = (kernel, declarations_used(kernel, program), hw)     # cheap: no renaming
    hit = _KERNEL_COSTS.get(exact)
    if hit is not None:
        return hit
    if len(_KERNEL_COSTS) >= _KERNEL_COSTS_LIMIT:
        _KERNEL_COSTS.clear()
    key = (kernel_key(kernel, program), hw)
    hit = _KERNEL_COSTS.get(key)
    if hit is None:
        hit = _KERNEL_COSTS[key] = kernel_cost(kernel, program, hw, sums)
    if hit.name != kernel.name:
        hit = attrs.evolve(hit, name=kernel.name)
    _KERNEL_COSTS[exact] = hit
    return hit


def _is_weight_prep(kernel: Kernel, program: Program) -> bool:
    reads = kernel.reads()
    return (bool(reads) and reads <= set(program.weights)
            and not set(kernel.writes()) & set(program.outputs))


def kernel_cost(kernel: Kernel, program: Program, hardware: Hardware,
                sums: LoopSums | None = None) -> KernelCost:
    hw = _required(hardware)
    counts = _KernelCounter(kernel, program, sums or LoopSums())
    eb = hw.element_bytes
    loaded, stored, local = counts.loaded * eb, counts.stored * eb, counts.footprint * eb
    traffic = counts.local_traffic * eb
    instances = math.prod(program.dim_map[d].nblocks for _v, d in kernel.loops)
    busy = busy_fraction(instances, hw.cores)
    time = max((loaded + stored) / hw.global_bandwidth_bytes_per_s,
               counts.flops / (hw.peak_flops * busy),
               traffic / (hw.local_bandwidth_bytes_per_s * busy))
    return KernelCost(kernel.name, loaded, stored, local, counts.flops,
                      local <= hw.local_capacity_bytes, time,
                      local_traffic_bytes=traffic, instances=instances)


def busy_fraction(instances: int, cores: int) -> float:
    """The fraction of ``cores`` kept busy by ``instances`` equal parallel instances,
    run in waves of ``cores``: 3 instances on 2 cores take two waves, 3/4 busy."""
    waves = -(-max(1, instances) // cores)
    return max(1, instances) / (waves * cores)


def _required(hardware) -> Hardware:
    if not isinstance(hardware, Hardware):
        raise TypeError(f"cost model: hardware must be a Hardware description, "
                        f"got {type(hardware).__name__}")
    return hardware


# ---------------------------------------------------------------------------
# Counting one kernel
# ---------------------------------------------------------------------------

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


class _KernelCounter:
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
