"""Choosing block sizes: candidates from the cost model, then (optionally) a short
measurement, the result cached on disk.

A :class:`Tunable` says what may be tuned and how to get the program for an
assignment: ``derive(blocks)`` rebuilds the program from scratch for the tuned
dimensions' blocks (the unfused program with those blocks, fused again: blocks are
a property of the program before fusion, and fusion may decide differently at
other sizes). The steps:

1. **search** (cheap): the program derived at the initial blocks is re-blocked for
   each assignment considered and priced with :func:`.model.model`; a coordinate
   search (each dimension in turn over its :func:`.candidates.dim_choices`, two
   sweeps) visits a few dozen assignments instead of every combination;
2. **re-derive** the best few (``FINALISTS``) distinct assignments (fusing each, through
   the fusion cache) and price them again, beside the initial blocks; assignments
   that leave a core idle while another assignment keeps them all busy are dropped;
3. **measure** (mode ``measure``): :func:`.measure.measure` times the model's
   favourite, the initial (default) blocks, the wide assignments
   (:func:`.candidates.wide_assignments`: large blocks, derived too, which the
   model's re-blockings do not foresee), then the model's next ones, within its
   bound, and the fastest wins; mode ``model`` takes the model's best. Either keeps
   the initial blocks unless the winner beats them clearly (``MEASURE_MARGIN``,
   ``MODEL_MARGIN``).

When no assignment the search priced is finite (a hard local capacity the initial
program exceeds: its re-blockings inherit its structure), the assignments with every
dimension at its smallest, second and third smallest choice are derived and priced
instead.

The choice is cached under :func:`.cache.tuning_key`; a cached choice is used as is.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import attrs

from ..cost.model import cost
from ..ir.program import Program
from . import cache
from .candidates import dim_choices, wide_assignments
from .constraints import constraints_of
from .measure import measure
from .mode import budget_seconds
from .model import Modeled, model

#: Assignments re-derived (fused) and priced again, per mode: fusing is the costly
#: part of modeling; measuring wants a few to choose from.
FINALISTS = {"model": 2, "measure": 3}
SWEEPS = 2
#: Assignments whose modeled time is within this fraction of the best are ties; the
#: smaller working set (friendlier to the caches) goes first among them.
TIE = 0.03
#: Leave the initial (default) blocks only for a clear gain: modeled times are
#: rough, and measured ones on a shared machine are noisy by a few per cent.
MODEL_MARGIN = 1.2
MEASURE_MARGIN = 1.05
#: Measured times this close to the fastest are ties: repeated tunings on a shared
#: machine differ by a few per cent, and the model then says which to keep (where it
#: tells them apart by more than TIE: else the fastest measured).
MEASURED_TIE = 0.02
#: Unmeasured (mode ``model``), a finalist competes only if fusion's own objective
#: rates its fused program at most this much worse than the defaults'; it then has to
#: beat them by ``MODEL_MARGIN`` in modeled time. At exactly "no worse", a Llama
#: decoder under torch.compile kept 64-row blocks although 128-row ones (objective
#: 4.7 % worse: a few more kernels) ran 10-18 % faster at T=100..512, E=256..1024.
OBJECTIVE_SLACK = 0.05


@attrs.frozen
class Tunable:
    label: str
    structure: str                         # key text: the program at its initial blocks
    sizes: dict                            # tuned dimension -> size
    initial: dict                          # tuned dimension -> initial (default) block
    derive: Callable[[dict], Program]      # tuned blocks -> the program to compile
    rules: str = "default"                 # the rules' digest (part of the key)


@attrs.frozen
class Tuned:
    blocks: dict                 # the chosen block of every tuned dimension
    mode: str                    # measure, model or off
    source: str                  # cache, measure, model, initial (nothing to tune / off)
    seconds: float               # time spent tuning
    candidates: tuple = ()       # what was compared: blocks, modeled_s, measured_s
    program: Program | None = None   # derived for ``blocks`` (None: derive it)

    @property
    def from_cache(self) -> bool:
        return self.source == "cache"

    def as_dict(self) -> dict:
        return {"mode": self.mode, "source": self.source, "from_cache": self.from_cache,
                "blocks": dict(self.blocks), "seconds": self.seconds,
                "candidates": [dict(c) for c in self.candidates]}


def _key(blocks: dict) -> tuple:
    return tuple(sorted(blocks.items()))


def reblock(program: Program, blocks: dict) -> Program:
    """``program`` with other block sizes (no re-derivation: the search's proxy)."""
    return program.evolve(dims=tuple(
        attrs.evolve(d, block=min(blocks[d.name], d.size)) if d.name in blocks else d
        for d in program.dims))


def _order(scored: list[tuple[dict, Modeled]]) -> list[tuple[dict, Modeled]]:
    finite = [s for s in scored if math.isfinite(s[1].seconds)]
    if not finite:
        return []
    finite.sort(key=lambda s: s[1].seconds)
    best = finite[0][1].seconds
    ties = [s for s in finite if s[1].seconds <= best * (1 + TIE)]
    ties.sort(key=lambda s: (s[1].working_set_bytes, s[1].seconds))
    return ties + finite[len(ties):]


def _busy_enough(scored, cores: int):
    """Drop assignments with fewer parallel instances than cores when another one
    has enough (some sizes cannot: then all are kept)."""
    enough = [s for s in scored if s[1].instances >= cores]
    return enough or scored


def _pick(ranked, measured, timed, initial) -> int:
    """The fastest measured candidate, else the model's best, unless the initial
    blocks are within the margin of it. Measured times within ``MEASURED_TIE`` of the
    fastest are ties (the machine's noise), broken by the modeled time where the model
    tells them apart (by more than ``TIE``); where it does not either, the fastest."""
    if timed:
        fastest = min(timed, key=lambda i: measured[i])
        ties = [i for i in timed if measured[i] <= measured[fastest] * (1 + MEASURED_TIE)]
        best = min(ties, key=lambda i: (ranked[i][1].seconds, measured[i]))
        if ranked[fastest][1].seconds <= ranked[best][1].seconds * (1 + TIE):
            best = fastest
        score, margin = (lambda i: measured[i]), MEASURE_MARGIN
    else:
        best = 0
        score, margin = (lambda i: ranked[i][1].seconds), MODEL_MARGIN
        timed = range(len(ranked))
    for i in timed:
        if _key(ranked[i][0]) == _key(initial) and score(i) <= margin * score(best):
            return i
    return best


def _shared_inputs(make: Callable) -> Callable:
    """``make(program)``, made once per input signature: the candidates are the same
    program at other blocks, all alive at once while they are timed in turn."""
    made: dict = {}

    def inputs(program: Program) -> dict:
        key = tuple((n, tuple(program.shape(n))) for n in program.inputs)
        if key not in made:
            made[key] = make(program, seed=0)
        return made[key]
    return inputs


def reduced_dims(program: Program) -> frozenset:
    """Dimensions the per-call kernels only sum over: no kernel loops over them (in
    parallel) and no ``map`` holds a row along them."""
    from ..ir.prep import weight_derived_kernels
    prep = set(weight_derived_kernels(program))
    summed, other = set(), set()
    for k in program.kernels:
        if k.name in prep:
            continue
        other.update(d for _, d in k.loops)
        for store in k.stores:
            for n in store.value.walk():
                if n.op == "reduce":
                    summed.add(n.attr.dim)
                elif n.op == "map":
                    other.add(n.attr.dim)
    return frozenset(summed - other)


def search(base: Program, tunable: Tunable, hardware, constraints) -> list[tuple[dict, Modeled]]:
    """Coordinate search over the tuned dimensions; every assignment it priced."""
    choices = {d: dim_choices(n, hardware.cores, constraints) for d, n in tunable.sizes.items()}
    priced: dict[tuple, Modeled] = {}

    def price(blocks: dict) -> Modeled:
        key = _key(blocks)
        if key not in priced:
            priced[key] = model(reblock(base, blocks), hardware, constraints)
        return priced[key]

    current = {d: min(b, tunable.sizes[d]) for d, b in tunable.initial.items()}
    price(current)
    for _ in range(SWEEPS):
        for d in tunable.sizes:
            options = [{**current, d: b} for b in choices[d]]
            scored = _order(_busy_enough([(o, price(o)) for o in options], hardware.cores))
            if scored:
                current = scored[0][0]
    return [(dict(k), m) for k, m in priced.items()]


def tune(tunable: Tunable, backend, mode: str, timer=None, budget_s: float | None = None,
         use_cache: bool = True, clock=time.perf_counter) -> Tuned:
    """Choose the blocks of ``tunable``'s dimensions for ``backend`` (see the module doc)."""
    start = clock()
    initial = {d: min(b, tunable.sizes[d]) for d, b in tunable.initial.items()}
    if mode == "measure" and not getattr(backend, "timings_meaningful", True):
        # An emulation of the machine fused for (Triton's interpreter for a GPU): its
        # times would choose blocks for the emulator. The cost model decides alone.
        mode = "model"
    if mode == "off" or not tunable.sizes:
        return Tuned(initial, mode, "initial", 0.0)
    hardware = backend.hardware
    key = cache.tuning_key(tunable.structure, tunable.sizes, backend.name, hardware, mode,
                           tunable.rules)
    if use_cache:
        record = cache.load(key, tunable.sizes)
        if record is not None:
            return Tuned(record["blocks"], mode, "cache", clock() - start,
                         tuple(record.get("candidates") or ()))
    constraints = constraints_of(backend)
    derived: dict[tuple, Program] = {}

    def derive(blocks: dict) -> Program:
        k = _key(blocks)
        if k not in derived:
            derived[k] = tunable.derive(dict(blocks))
        return derived[k]

    base = derive(initial)

    def priced(blocks: dict):
        """(blocks, modeled, program) derived at ``blocks``, or None where fusion
        cannot take the assignment."""
        try:
            program = derive(blocks)
        except Exception:          # noqa: BLE001 - an assignment fusion cannot take
            return None
        return blocks, model(program, hardware, constraints), program

    ordered = [b for b, _ in _order(_busy_enough(search(base, tunable, hardware, constraints),
                                                 hardware.cores))]
    if not ordered:
        choices = {d: dim_choices(n, hardware.cores, constraints)
                   for d, n in tunable.sizes.items()}
        ordered = [{d: c[min(i, len(c) - 1)] for d, c in choices.items()} for i in range(3)]
    # The initial blocks compete too (derived already): a re-derived favourite of the
    # search may price worse than them.
    finalists = [(initial, model(base, hardware, constraints), base)]
    wanted = FINALISTS.get(mode, 2) + 1
    for blocks in ordered[:wanted + 3]:         # a few spare: fusion may refuse one
        if len(finalists) == wanted:
            break
        if _key(blocks) != _key(initial) and (found := priced(blocks)) is not None:
            finalists.append(found)
    if mode == "model":
        # Unmeasured, the cost model's own objective (what fusion optimises) is
        # trusted to compare fused programs: the step and spill terms above rank
        # block sizes, but a favourite that fuses clearly worse than the defaults
        # (e.g. larger blocks that no longer fit, left as many kernels) is not taken
        # on their word.
        limit = cost(base, hardware).objective * (1 + OBJECTIVE_SLACK)
        finalists = finalists[:1] + [f for f in finalists[1:]
                                     if cost(f[2], hardware).objective <= limit]
    wide = []
    if mode == "measure":
        taken = {_key(b) for b, _, _ in finalists}
        wide = [found for blocks in wide_assignments(tunable.sizes, hardware.cores, constraints,
                                                     reduced_dims(base))
                if _key(blocks) not in taken and (found := priced(blocks)) is not None]
    ranked = _order(_busy_enough([(b, m) for b, m, _ in finalists], hardware.cores))
    by_key = {_key(b): p for b, _, p in finalists + wide}
    if not ranked:                 # nothing priced finite: keep the initial blocks
        return Tuned(initial, mode, "initial", clock() - start, program=base)
    measured: list[float | None] = [None] * len(ranked)
    if mode == "measure":
        from ..validate import random_inputs
        # The defaults go second (always measured: never beaten unseen), the wide
        # assignments next, the one the model prices lowest first (the budget may
        # end before the last is measured).
        others = [r for r in ranked if _key(r[0]) != _key(initial)]
        wide.sort(key=lambda found: found[1].seconds)
        ranked = (others[:1] + [(initial, model(base, hardware, constraints))]
                  + [(b, m) for b, m, _ in wide] + others[1:])
        programs = [by_key[_key(b)] for b, _ in ranked]
        measured = measure(programs, backend.compile, _shared_inputs(random_inputs),
                           budget_seconds(budget_s), timer=timer, clock=clock)
    timed = [i for i, t in enumerate(measured) if t is not None]
    source = "measure" if timed else "model"
    pick = _pick(ranked, measured, timed, initial)
    candidates = tuple({"blocks": dict(b),
                        "modeled_s": m.seconds if math.isfinite(m.seconds) else None,
                        "measured_s": t} for (b, m), t in zip(ranked, measured))
    blocks = dict(ranked[pick][0])
    result = Tuned(blocks, mode, source, clock() - start, candidates, by_key[_key(blocks)])
    if use_cache:
        cache.store(key, {"blocks": blocks, "mode": mode, "source": source,
                          "label": tunable.label, "candidates": list(candidates)})
    return result
