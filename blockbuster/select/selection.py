"""Candidate selection: fuse a large program piece by piece (DESIGN §5).

Seeds: runs of consecutive kernels in the program's topological order, at most
``window`` long and connected along producer->consumer edges. Each is fused by the
rule engine — cached by structure, so identical layers cost one fusion — priced by
the cost model (roofline time on the backend's hardware; a fused piece that does not
fit the local tier is never chosen) and kept only when it is not worse than its
unfused form. A dynamic program over the kernel order picks the cover by
non-overlapping seeds of least total cost, in time linear in the number of kernels.

The window bounds the search, not the fusion: the chosen pieces then **grow** by
cost. Two neighbouring pieces that share data are fused as one candidate in two
ways — their fused forms side by side, so the engine only works across the seam,
and their original kernels in one run — and merged, in the cheaper way, when the
result is strictly cheaper than the two apart (and moves no more bytes per call); a
merged piece merges on with its next neighbour, so a piece can span any number of
kernels (LayerNorm -> matmul -> GELU, two LayerNorms in a row, ... become one).
Every piece priced on the way (seeds, and merges whether they paid or not) stays a
candidate: a last dynamic program over all of them picks the cheapest cover, so
growing never ends worse than a cover it passed through (two pieces merged early
may cost more than another split found later). Every piece is never worse than the
kernels it replaces.

The seed window is small (``DEFAULT_WINDOW``): seeds cost O(window² × kernels) rule
steps, growth by merging O(kernels) engine runs, and the long pieces come from
growth. Programs of at most ``WHOLE_PROGRAM_KERNELS`` kernels are first fused in one
engine run (``fuse_program``); selection takes over when that does not pay.
"""

from __future__ import annotations

import contextlib
import gc
import math
import sys
import time

import attrs

from ..cost.hardware import Hardware
from ..cost.model import cost
from ..dsl.ast import RuleSet
from ..ir.program import Program
from ..rewrite.engine import Budget, Engine, FusionResult, Limits, RuleError
from .extract import (Segments, canonical, canonical_key, connected_spans, feeds, rename,
                      sub_program)
from .pieces import (Part, assemble, declarations, fresh_names, names_of,
                     read_counts, report_piece, worst_stop)

# How many consecutive kernels a seed candidate may hold: a bound on the search (the
# seeds are O(window × kernels) engine runs of up to ``window`` kernels each), not on
# the pieces, which grow by cost. Measured on Llama, GPT-2 and BERT layers and stacks
# (``benchmarks/bench_fuse_speed.py``): 6 fuses them about as well as 14 did (an equal
# or lower cost-model objective on 18 of 26 layer/hardware pairs, at most 2.3 % higher
# on the rest), three times faster.
DEFAULT_WINDOW = 6
# How far growth tries to move the seam between two pieces: a piece takes a seed of
# up to this many kernels from its neighbour. Shifts up to the window found slightly
# cheaper covers on some layers, for 20 % more fusion time.
SEAM_SHIFT = 1
# Programs this short are fused by one engine run first (the whole program at once).
WHOLE_PROGRAM_KERNELS = 14
DEFAULT_MAX_KERNELS = WHOLE_PROGRAM_KERNELS     # the former name of the same bound


@attrs.frozen
class _Fused:
    """A candidate's fusion in canonical names, priced once (names do not change a
    price, so identical layers share it)."""

    program: Program          # canonical names
    rules: dict
    steps: tuple
    stop_reason: str
    price: float              # the fused form's cost-model objective
    per_call_bytes: int
    unfused_price: float      # the candidate's own objective, unfused
    keeps: bool               # not worse than unfused (objective and per-call bytes)


@attrs.frozen
class _Seed:
    """A seed candidate's fusion, priced, not yet renamed into a piece (only the
    seeds the cover chooses are)."""

    price: float
    info: _Fused                      # ``_UNFUSED``: the kernel as it is
    back: tuple                       # canonical names -> the program's


class Selector:
    def __init__(self, rules: RuleSet, hardware: Hardware, limits: Limits | None = None,
                 window: int = DEFAULT_WINDOW, progress: bool | None = None,
                 grow: bool = True):
        self.rules = rules
        self.hardware = hardware
        self.limits = limits or Limits()
        self.window = window                 # the seed window
        self.shift = SEAM_SHIFT
        self.grow = grow
        self.progress = sys.stderr.isatty() if progress is None else progress
        self.cache: dict[Program, _Fused] = {}
        self.by_key: dict[tuple, _Fused] = {}   # the same, by ``canonical_key``
        self.fusions = 0
        self.merges = 0                      # merges that paid (last select)
        self.built = 0                       # pieces built by merging (unique names)
        self.refused = 0                     # merge candidates the engine could not take
        self.unpaid = 0                      # merges priced and refused: not cheaper
        self.budget: Budget | None = None   # --max-steps/--max-seconds for the whole fusion
        self.segment: Segments | None = None   # the program being selected, by spans

    def _fuse(self, candidate: Program, tolerant: bool = False) -> tuple[_Fused, tuple]:
        """The candidate's fusion (cached by structure) and the renaming back to the
        candidate's names. ``tolerant``: a candidate the engine fails on stays as it
        is (``refused`` counts them), and the failure is cached too."""
        key, arrays_back, kernels_back = canonical_key(candidate)
        hit = self.by_key.get(key)
        if hit is not None:        # met before (another layer): no renamed program built
            return hit, (arrays_back, kernels_back)
        canon = canonical(candidate)[0]
        hit = self.cache.get(canon)
        if hit is None and self.budget is not None and self.budget.check():
            # The whole fusion's steps or seconds are spent: the rest stays unfused.
            return self._priced(canon, canon, {}, (), self.budget.exhausted), (
                arrays_back, kernels_back)
        if hit is None:
            try:
                result = Engine(self.rules, self.limits, hardware=self.hardware,
                                budget=self.budget).run(canon)
            except (ValueError, RuleError):
                if not tolerant:
                    raise
                self.refused += 1
                self.cache[canon] = self.by_key[key] = self._priced(canon, canon, {}, (),
                                                                    "saturated")
                return self.cache[canon], (arrays_back, kernels_back)
            self.fusions += 1
            hit = self._priced(result.program, canon, result.rule_counts(), result.trace,
                               result.stop_reason)
            self.cache[canon] = hit
        self.by_key[key] = hit
        return hit, (arrays_back, kernels_back)

    def _priced(self, fused: Program, unfused: Program, rules, steps, stop) -> _Fused:
        """Priced by the cost model's objective (a piece that does not fit the local
        tier costs infinity and is never chosen)."""
        after, before = cost(fused, self.hardware), cost(unfused, self.hardware)
        keeps = (after.objective <= before.objective
                 and after.per_call_bytes <= before.per_call_bytes)
        return _Fused(fused, rules, steps, stop, after.objective, after.per_call_bytes,
                      before.objective, keeps)

    def select(self, program: Program, budget: Budget | None = None) -> FusionResult:
        start_time = time.perf_counter()
        self.budget = budget or Budget(self.limits)
        self.segment = Segments(program)
        options = self._seeds(program)
        parts = self._cover(program, options)
        if self.grow:
            self._grow(program, parts, options)
            parts = self._cover(program, options)
        fused = assemble(program, parts)
        counts = read_counts(fused.kernels)
        pieces = tuple(report_piece(program, fused, part, counts) for part in parts)
        return FusionResult(fused, tuple(s for part in parts for s in part.steps),
                            self.budget.exhausted
                            or worst_stop(part.stop_reason for part in parts),
                            time.perf_counter() - start_time, program, pieces)

    # -- seeds: every windowed candidate, fused and priced ------------------------
    def _seeds(self, program: Program) -> dict[tuple[int, int], _Seed]:
        """``(start, stop)`` -> the seed's fusion, for every connected run of at most
        ``window`` kernels whose fusion is not worse than its kernels, and every
        kernel alone (as it is, unless its fusion pays): a cover always exists, and
        the cover of single kernels is the unfused program."""
        n = len(program.kernels)
        joined = connected_spans(program, self.window)
        spans = [(i, j) for j in range(1, n + 1) for i in range(max(0, j - self.window), j)
                 if j - i == 1 or (i, j) in joined]
        segment = self.segment
        options: dict[tuple[int, int], _Seed] = {}
        bar = _progress(len(spans), self.progress)
        for i, j in spans:
            bar.update(1)
            if j - i > 1 and self.budget.check():
                # The whole fusion's steps or seconds are spent: the rest of the
                # program is covered by its kernels alone, without pricing (or even
                # naming) each remaining candidate, so the limits bound the wall time.
                continue
            key, *back = segment.key(i, j)
            info = self.by_key.get(key)      # met before: the segment is not built
            if info is None:
                info, back = self._fuse(segment(i, j))
            if info.keeps:
                options[(i, j)] = _Seed(info.price, info, tuple(back))
            elif j - i == 1:
                options[(i, j)] = _Seed(info.unfused_price, _UNFUSED, ())
            # else: the smaller candidates inside it cover it as well
        bar.close()
        return options

    def _cover(self, program: Program, options: dict) -> list[Part]:
        """The cheapest cover of the program by non-overlapping options (a dynamic
        program over the kernel order; of two covers of equal cost the one whose last
        piece starts first)."""
        n = len(program.kernels)
        best: list[float] = [0.0] + [math.inf] * n
        choice: list[tuple | None] = [None] * (n + 1)
        for i, j in sorted(options, key=lambda span: (span[1], span[0])):
            price = options[(i, j)].price
            # ``choice[j] is None``: when nothing fits the local tier every price is
            # infinite, and a cover must still be chosen (the first one is kept).
            if best[i] + price < best[j] or choice[j] is None:
                best[j] = best[i] + price
                choice[j] = i
        parts = []
        j = n
        while j > 0:
            i = choice[j]
            parts.append(self._piece_of(program, i, j, options[(i, j)]))
            j = i
        parts.reverse()
        return parts

    def _piece_of(self, program: Program, i: int, j: int, option) -> Part:
        if isinstance(option, Part):
            return option
        info = option.info
        fused = (self.segment(i, j) if info is _UNFUSED
                 else rename(info.program, *option.back))
        return self._part(i, j, fresh_names(fused, names_of(program), f"_{i}"),
                          info.rules, info.steps, info.stop_reason)

    def _part(self, start, stop, fused: Program, rules, steps, stop_reason) -> Part:
        c = cost(fused, self.hardware)
        prep = tuple(k for k, kc in zip(fused.kernels, c.per_kernel) if kc.weight_prep)
        call = tuple(k for k, kc in zip(fused.kernels, c.per_kernel) if not kc.weight_prep)
        return Part(start, stop, prep, call, fused.arrays, dict(rules), tuple(steps),
                     stop_reason, c.objective, c.per_call_bytes)

    # -- growth: merge neighbouring pieces while it pays ---------------------------
    def _grow(self, program: Program, parts: list[Part], options: dict) -> list[Part]:
        """Merge neighbours while it pays (greedily, left to right); every merged
        piece priced on the way is added to ``options``."""
        self.merges = self.refused = self.unpaid = 0
        tried: set = set()           # (spans of the two) merges that did not pay
        changed = True
        while changed:               # a merge can make an earlier refused one pay
            changed = False
            k = 0
            while k + 1 < len(parts):
                a, b = parts[k], parts[k + 1]
                key = (a.start, a.stop, b.stop)
                merged = None if key in tried else self._merge(program, parts, k, options)
                if merged is None:
                    tried.add(key)
                    k += 1
                else:                # stay at k: the merged piece tries its next neighbour
                    parts[k:k + 2] = [merged]
                    self.merges += 1
                    changed = True
        return parts

    def _merge(self, program: Program, parts: list[Part], k: int,
               options: dict) -> Part | None:
        """The cheaper of the two merges of ``parts[k]`` and its right neighbour when
        it is cheaper than the two apart, else None."""
        a, b = parts[k], parts[k + 1]
        if self.budget is not None and self.budget.check():
            return None              # the limits are spent: the pieces stay as they are
        if not feeds(a.call, b.call):
            return None
        merged = [m for m in (self._merge_fused(program, parts, k),
                              self._merge_original(program, parts, k)) if m is not None]
        for m in merged:             # a candidate of the last cover, paid or not
            self._add(options, m)
        self._shift_options(program, parts, k, options)
        paying = [m for m in merged
                  if m.price < (a.price + b.price) * (1 - 1e-9)
                  and m.per_call_bytes <= a.per_call_bytes + b.per_call_bytes]
        if not paying:
            self.unpaid += 1
            return None
        return min(paying, key=lambda m: m.price)

    def _merge_original(self, program: Program, parts: list[Part], k: int) -> Part | None:
        """The original kernels of both pieces fused in one run: the engine sees what
        the pieces' own fusions may have put out of reach (a producer already inlined
        one way, a weight already prepared)."""
        a, b = parts[k], parts[k + 1]
        info, back = self._fuse(self.segment(a.start, b.stop), tolerant=True)
        if not info.steps or not info.keeps:
            return None
        return self._part(a.start, b.stop, self._fresh(program, parts,
                                                       rename(info.program, *back)),
                          info.rules, info.steps, info.stop_reason)

    def _merge_fused(self, program: Program, parts: list[Part], k: int) -> Part | None:
        """The two pieces' fused forms side by side in one run: the engine only works
        across the seam."""
        a, b = parts[k], parts[k + 1]
        others = [kk for i, p in enumerate(parts) if i not in (k, k + 1)
                  for kk in p.prep + p.call]
        return self._side_by_side(program, parts, a, b, others)

    def _side_by_side(self, program: Program, parts: list[Part], a: Part, b: Part,
                      others: list) -> Part | None:
        """``a`` and ``b`` (neighbours) fused in one run of their fused forms;
        ``others``: the kernels outside them (what they must still write)."""
        decls = declarations(program, parts + [a, b])
        # Preparation outputs come in as plain inputs (only the program's own weights
        # are weights), so what the merge prepares reads the program's weights alone.
        candidate = sub_program(decls, a.call + b.call, others + list(a.prep + b.prep),
                                f"{program.name}[{a.start}:{b.stop}]")
        # Tolerant: the engine may fail on a fused form it does not handle (a held
        # accumulator looked up at ``h // 2``; a row store ``X[i, :] = sum(k:
        # map(n: ..))`` inlined as if it were ``map(n: ..)``, which the engine's own
        # check rejects). The two pieces then stay apart, as they were.
        info, back = self._fuse(candidate, tolerant=True)
        if not info.steps:
            return None              # nothing fused (or the budget is spent, or refused)
        fused = self._fresh(program, parts + [a, b], rename(info.program, *back))
        part = self._part(a.start, b.stop, fused, {}, info.steps, info.stop_reason)
        rules = dict(a.rules)
        for table in (b.rules, info.rules):
            for r, n in table.items():
                rules[r] = rules.get(r, 0) + n
        return attrs.evolve(part, prep=a.prep + b.prep + part.prep,
                            arrays=a.arrays + b.arrays + part.arrays, rules=rules,
                            steps=a.steps + b.steps + part.steps,
                            stop_reason=worst_stop([a.stop_reason, b.stop_reason,
                                                     part.stop_reason]))

    def _shift_options(self, program: Program, parts: list[Part], k: int,
                       options: dict) -> None:
        """Pieces that move the seam of ``parts[k]`` and ``parts[k+1]``: each piece
        with a seed taken from its neighbour's end next to the seam, added to
        ``options``. With the rest of the neighbour's seeds they let the last cover
        move a boundary the seeds placed a few kernels off."""
        a, b = parts[k], parts[k + 1]

        def rest(start, stop):
            return list(program.kernels[:start]) + list(program.kernels[stop:])

        for d in range(1, min(self.shift, b.stop - b.start - 1) + 1):
            seed = options.get((b.start, b.start + d))
            if seed is not None and (b.start + d, b.stop) in options:
                head = self._piece_of(program, b.start, b.start + d, seed)
                if feeds(a.call, head.call):
                    self._add(options, self._side_by_side(program, parts, a, head,
                                                          rest(a.start, b.start + d)))
        for d in range(1, min(self.shift, a.stop - a.start - 1) + 1):
            seed = options.get((a.stop - d, a.stop))
            if seed is not None and (a.start, a.stop - d) in options:
                tail = self._piece_of(program, a.stop - d, a.stop, seed)
                if feeds(tail.call, b.call):
                    self._add(options, self._side_by_side(program, parts, tail, b,
                                                          rest(a.stop - d, b.stop)))

    def _add(self, options: dict, part: Part | None) -> None:
        """``part`` as a candidate of the last cover when it is not worse than the
        kernels it replaces (objective and per-call bytes) and the cheapest of its
        span so far."""
        if part is None:
            return
        span = (part.start, part.stop)
        if span in options and options[span].price <= part.price:
            return
        unfused = cost(self.segment(*span), self.hardware)
        if part.price <= unfused.objective and part.per_call_bytes <= unfused.per_call_bytes:
            options[span] = part

    def _fresh(self, program: Program, parts: list[Part], fused: Program) -> Program:
        """``fused`` with what its fusion created named apart from every other piece
        (a suffix of its own: pieces built by merging may all end in the last cover)."""
        self.built += 1
        known = (names_of(program) | {d.name for p in parts for d in p.arrays}
                 | {kk.name for p in parts for kk in p.prep + p.call})
        return fresh_names(fused, known, f"_m{self.built}")


_UNFUSED = _Fused(None, {}, (), "saturated", math.inf, 0, math.inf, True)


def _not_worse(fused: Program, original: Program, hardware: Hardware) -> bool:
    """Neither the cost-model objective nor the per-call global bytes grew. Where the
    local tier is a cache, a fused program over its capacity (an infinite
    objective) is not worse if it costs no more even with its spill priced at the
    most (``Cost.spilled_objective``): flash attention at 256-wide blocks moved 35
    instead of 857 MB, and was kept unfused because its kernel's footprint bound
    (1.8 MB) is over a 1 MiB L2."""
    after, before = cost(fused, hardware), cost(original, hardware)
    if after.per_call_bytes > before.per_call_bytes:
        return False
    if after.objective <= before.objective:
        return True
    return (hardware.local_tier_is_cache and not after.fits
            and after.spilled_objective <= before.objective)


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


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off for the duration (as it was before,
    after). Fusion allocates millions of small containers (hash-consed nodes, memo
    entries, programs of every step), and most of them live on in the memos: each
    automatic collection scans them again, some 12 % of a fusion's time, to find
    little garbage (a few MB per fusion, collected after it). Reference counting
    still frees everything else at once; what is fused does not change."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def fuse_program(program: Program, rules: RuleSet, limits: Limits | None = None,
                 *, hardware: Hardware, step_check=None, max_kernels: int = DEFAULT_MAX_KERNELS,
                 progress: bool | None = None, window: int = DEFAULT_WINDOW) -> FusionResult:
    """Fuse ``program``: in one engine run when it fits one seed window, else by
    candidate selection (seeds that grow by cost, so a piece may span any number of
    kernels). ``max_kernels``: the longest program fused in one run first;
    ``window``: the seed window. Never worse than the program it started from: when the whole-program
    fusion costs more (e.g. a producer inlined into several consumers recomputes it),
    selection keeps only the pieces whose fusion pays. The fused
    program keeps ``program.params`` (an imported model's parameter values)."""
    with collector_paused():
        result = _fuse_program(program, rules, limits, hardware, step_check, max_kernels,
                               progress, window)
    if program.params is not None:
        result = attrs.evolve(result, program=result.program.evolve(params=program.params))
    return result


def _fuse_program(program, rules, limits, hardware, step_check, max_kernels, progress,
                  window=DEFAULT_WINDOW):
    if len(program.kernels) <= max_kernels or step_check is not None:
        budget = Budget(limits or Limits())     # shared: limits bound the whole fusion
        whole = Engine(rules, limits, hardware=hardware, step_check=step_check,
                       budget=budget).run(program)
        if step_check is not None or _not_worse(whole.program, program, hardware):
            return whole
        selected = Selector(rules, hardware, limits, window, progress).select(
            program, budget)
        # A limit that stopped the whole-program run explains a lot (a rule that grows
        # terms): the selection's own trace would hide it.
        n = len(whole.trace)
        steps = f"{n} step{'' if n == 1 else 's'}"
        why = ("fusing the whole program did not pay (cost-model objective or per-call "
               "bytes grew)" if whole.stop_reason == "saturated" else
               f"the whole-program run stopped ({whole.stop_reason}) after {steps}, "
               f"short of a fusion that pays")
        return _never_worse(attrs.evolve(selected, fallback=(
            f"{why}: kept only the pieces whose fusion pays")), program, hardware)
    selected = Selector(rules, hardware, limits, window, progress).select(program)
    return _never_worse(selected, program, hardware)


def _never_worse(result: FusionResult, program: Program, hardware: Hardware) -> FusionResult:
    """``result``, or the unfused program when the chosen cover is worse than it (the
    cover minimises the objective piece by piece; per-call bytes may still grow)."""
    if _not_worse(result.program, program, hardware):
        return result
    return attrs.evolve(result, program=program, pieces=(), fallback=(
        "no fusion paid (cost-model objective or per-call bytes grew): the program is "
        "kept unfused"))
