"""Candidate selection: fuse a large program piece by piece (DESIGN §5).

Candidates are runs of consecutive kernels in the program's topological order, at
most ``max_kernels`` long and connected along producer->consumer edges. Each is
fused by the rule engine — cached by structure, so identical layers cost one fusion
— and priced by the cost model (roofline time on the backend's hardware; a fused
piece that does not fit the local tier is never chosen). A dynamic program over the
kernel order then picks the cover by non-overlapping candidates of least total
cost, in time linear in the number of kernels.
"""

from __future__ import annotations

import math
import sys
import time

import attrs

from ..cost.hardware import Hardware
from ..cost.model import cost
from ..dsl.ast import RuleSet
from ..ir.program import Program
from ..rewrite.engine import Budget, Engine, FusionResult, Limits
from .extract import canonical, connected, rename, segment_program

DEFAULT_MAX_KERNELS = 14


@attrs.frozen
class Piece:
    """One chosen candidate: kernels ``[start, stop)`` of the input program."""

    start: int
    stop: int
    kernels: tuple[str, ...]          # the original kernels it covers
    program: Program                  # its fused form, in the program's own names
    rules: dict                       # rule -> applications that built it
    cost: float                       # modeled seconds

    def describe(self) -> str:
        fused = ", ".join(k.name for k in self.program.kernels)
        rules = ", ".join(f"{r}×{n}" for r, n in self.rules.items()) or "no rules"
        return (f"kernels {self.start}..{self.stop - 1} ({len(self.kernels)}) -> "
                f"{fused}: {rules}")


@attrs.frozen
class _Fused:
    program: Program          # canonical names
    rules: dict
    steps: tuple
    stop_reason: str


class Selector:
    def __init__(self, rules: RuleSet, hardware: Hardware, limits: Limits | None = None,
                 max_kernels: int = DEFAULT_MAX_KERNELS, progress: bool | None = None):
        self.rules = rules
        self.hardware = hardware
        self.limits = limits or Limits()
        self.max_kernels = max_kernels
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.cache: dict[Program, _Fused] = {}
        self.fusions = 0
        self.budget: Budget | None = None   # --max-steps/--max-seconds for the whole fusion
        self.prices: dict[Program, float] = {}
        self.not_worse: dict[Program, bool] = {}

    def _fuse(self, candidate: Program) -> tuple[_Renamed | Program, _Fused, Program]:
        """The candidate's fusion in canonical names (renamed back only if chosen: the
        prices do not depend on names), its record, and the candidate canonically."""
        canon, arrays_back, kernels_back = canonical(candidate)
        hit = self.cache.get(canon)
        if hit is None and self.budget is not None and self.budget.check():
            # The whole fusion's steps or seconds are spent: the rest stays unfused.
            return candidate, _Fused(canon, {}, (), self.budget.exhausted), canon
        if hit is None:
            result = Engine(self.rules, self.limits, hardware=self.hardware,
                            budget=self.budget).run(canon)
            self.fusions += 1
            hit = _Fused(result.program, result.rule_counts(), result.trace, result.stop_reason)
            self.cache[canon] = hit
        return _Renamed(hit.program, arrays_back, kernels_back), hit, canon

    def _price(self, program: Program) -> float:
        """The cost model's objective (a piece that does not fit is never chosen);
        memoised by canonical program: identical layers price once."""
        price = self.prices.get(program)
        if price is None:
            price = self.prices[program] = cost(program, self.hardware).objective
        return price

    def select(self, program: Program, budget: Budget | None = None) -> FusionResult:
        start_time = time.perf_counter()
        self.budget = budget or Budget(self.limits)
        n = len(program.kernels)
        spans = [(i, j) for j in range(1, n + 1) for i in range(max(0, j - self.max_kernels), j)
                 if j - i == 1 or connected(program, i, j)]
        best: list[float] = [0.0] + [math.inf] * n
        choice: list[tuple | None] = [None] * (n + 1)
        bar = _progress(len(spans), self.progress)
        for i, j in spans:           # ordered by j: best[i] is final when j is reached
            segment = segment_program(program, i, j)
            fused, info, canon = self._fuse(segment)
            fused_canon = fused.program if isinstance(fused, _Renamed) else canon
            price = self._price(fused_canon)
            if j - i == 1 and not self._not_worse(fused_canon, canon):
                # A kernel alone is kept as it is unless its fusion pays, so the
                # cover of single kernels is the unfused program: the chosen cover
                # is never worse than it.
                fused, info, price = segment, _UNFUSED, self._price(canon)
            bar.update(1)
            if best[i] + price < best[j]:
                best[j] = best[i] + price
                choice[j] = (i, fused, info, price)
        bar.close()
        pieces = []
        j = n
        while j > 0:
            i, fused, info, price = choice[j]
            if isinstance(fused, _Renamed):
                fused = rename(fused.program, fused.arrays, fused.kernels)
            fused = _fresh_names(fused, program, f"_{i}")
            pieces.append((Piece(i, j, tuple(k.name for k in program.kernels[i:j]), fused,
                                 info.rules, price), info))
            j = i
        pieces.reverse()
        return FusionResult(_assemble(program, [p for p, _ in pieces]),
                            tuple(s for _, info in pieces for s in info.steps),
                            self.budget.exhausted
                            or _worst_stop(info.stop_reason for _, info in pieces),
                            time.perf_counter() - start_time, program,
                            tuple(p for p, _ in pieces))


    def _not_worse(self, fused: Program, original: Program) -> bool:
        key = (fused, original)
        hit = self.not_worse.get(key)
        if hit is None:
            hit = self.not_worse[key] = _not_worse(fused, original, self.hardware)
        return hit


@attrs.frozen
class _Renamed:
    """A fused candidate in canonical names and the renaming back to the program's."""

    program: Program
    arrays: dict
    kernels: dict


_UNFUSED = _Fused(None, {}, (), "saturated")


def _not_worse(fused: Program, original: Program, hardware: Hardware) -> bool:
    """Neither the cost-model objective nor the per-call global bytes grew."""
    after, before = cost(fused, hardware), cost(original, hardware)
    return after.objective <= before.objective and after.per_call_bytes <= before.per_call_bytes


def _fresh_names(piece: Program, program: Program, suffix: str) -> Program:
    """Arrays and kernels a fusion created (weight preparation) get names unique to
    their piece: two pieces may each have made a ``prep1``."""
    known = {a.name for a in program.arrays} | {k.name for k in program.kernels}
    arrays = {a.name: a.name + suffix for a in piece.arrays if a.name not in known}
    kernels = {k.name: k.name + suffix for k in piece.kernels if k.name not in known}
    return rename(piece, arrays, kernels) if arrays or kernels else piece


def _worst_stop(reasons) -> str:
    reasons = list(reasons)
    return next((r for r in reasons if r != "saturated"), "saturated")


def _assemble(program: Program, pieces: list[Piece]) -> Program:
    kernels = tuple(k for p in pieces for k in p.program.kernels)
    live = {a for k in kernels for a in k.writes()} | set(program.inputs) | set(program.outputs)
    known = {a.name for a in program.arrays}
    created = tuple(a for p in pieces for a in p.program.arrays if a.name not in known)
    return program.evolve(kernels=kernels,
                          arrays=tuple(a for a in program.arrays if a.name in live) + created)


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc="fusing candidates", unit="cand", leave=False,
                file=sys.stderr)


def fuse_program(program: Program, rules: RuleSet, limits: Limits | None = None,
                 *, hardware: Hardware, step_check=None, max_kernels: int = DEFAULT_MAX_KERNELS,
                 progress: bool | None = None) -> FusionResult:
    """Fuse ``program``: whole when it is small enough to be one candidate, else by
    candidate selection. Never worse than the program it started from: when the
    whole-program fusion costs more (e.g. a producer inlined into several consumers
    recomputes it), selection keeps only the pieces whose fusion pays. The fused
    program keeps ``program.params`` (an imported model's parameter values)."""
    result = _fuse_program(program, rules, limits, hardware, step_check, max_kernels,
                           progress)
    if program.params is not None:
        result = attrs.evolve(result, program=result.program.evolve(params=program.params))
    return result


def _fuse_program(program, rules, limits, hardware, step_check, max_kernels, progress):
    if len(program.kernels) <= max_kernels or step_check is not None:
        budget = Budget(limits or Limits())     # shared: limits bound the whole fusion
        whole = Engine(rules, limits, hardware=hardware, step_check=step_check,
                       budget=budget).run(program)
        if step_check is not None or _not_worse(whole.program, program, hardware):
            return whole
        selected = Selector(rules, hardware, limits, max_kernels, progress).select(
            program, budget)
        return _never_worse(attrs.evolve(selected, fallback=(
            "fusing the whole program did not pay (cost-model objective or per-call bytes "
            "grew): kept only the pieces whose fusion pays")), program, hardware)
    selected = Selector(rules, hardware, limits, max_kernels, progress).select(program)
    return _never_worse(selected, program, hardware)


def _never_worse(result: FusionResult, program: Program, hardware: Hardware) -> FusionResult:
    """``result``, or the unfused program when the chosen cover is worse than it (the
    cover minimises the objective piece by piece; per-call bytes may still grow)."""
    if _not_worse(result.program, program, hardware):
        return result
    return attrs.evolve(result, program=program, pieces=(), fallback=(
        "no fusion paid (cost-model objective or per-call bytes grew): the program is "
        "kept unfused"))
