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

import math

import attrs

from ..ir.kernel_key import declarations_used, kernel_key
from ..ir.prep import weight_derived_kernels
from ..ir.program import Kernel, Program
from .counter import KernelCounter
from .counting import LoopSums
from .hardware import Hardware


@attrs.frozen
class KernelCost:
    name: str
    loaded_bytes: int         # global -> local
    stored_bytes: int         # local -> global
    local_bytes: int          # footprint in the local tier (see the module doc)
    flops: int
    fits: bool                # local_bytes <= hardware.local_capacity_bytes (per core)
    time_estimate: float      # seconds, roofline
    weight_prep: bool = False  # reads only weights and what other prep kernels compute: done once
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
    def spilled_objective(self) -> float:
        """The objective with each kernel that does not fit the local tier priced as
        if all its local traffic crossed the global tier as well: the most that
        overflowing a local tier that is a cache can cost (its blocks spill to the
        next level, which is at worst the global tier). Finite where the objective
        is infinite."""
        bw = self.hardware.global_bandwidth_bytes_per_s
        return sum(k.time_estimate + (TRAFFIC_WEIGHT * k.global_bytes
                                      + (0 if k.fits else k.local_traffic_bytes)) / bw
                   for k in self.per_kernel if not k.weight_prep)

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
        prep = set(weight_derived_kernels(program))
        per_kernel = [attrs.evolve(c, weight_prep=True) if k.name in prep else c
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


def kernel_cost(kernel: Kernel, program: Program, hardware: Hardware,
                sums: LoopSums | None = None) -> KernelCost:
    hw = _required(hardware)
    counts = KernelCounter(kernel, program, sums or LoopSums())
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
