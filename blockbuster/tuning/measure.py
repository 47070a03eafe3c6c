"""The measured part of tuning: compile the best few candidates and time them.

Like Triton's autotune: each candidate is compiled and timed on the same random
inputs; its time is the best of its timed calls (so the first call's first touch of
memory does not count against it when it is repeated). The calls are interleaved:
every candidate is compiled and called once, then the candidates are called in
turn, round after round. A shared machine's speed drifts by 10-30 % over seconds;
timed one after another, the candidate measured in a slow spell lost to one measured
in a fast spell (LayerNorm·W: 120 vs 125 ms in the tuner, 107 vs 99 ms interleaved).

The bound on the time it takes:

* at most ``max_candidates`` candidates, in the order given (the tuner puts the
  model's favourite first and the default blocks second);
* the first ``always`` of them are always compiled and called; a later one is
  started only while less than ``budget_s`` seconds have passed since the first
  started;
* a candidate is not called again when its first call is more than ``SLOWER`` times
  the best first call so far and not shorter than ``CHEAP_S``; otherwise it is
  called up to ``repeats`` times in all, and no more once its calls add up to
  ``ENOUGH_S`` (a call of a second or more is timed twice, not five times: its time
  is steady).

So tuning takes at most the budget, plus one compile and one call for each candidate
always measured and for the one running when the budget ends, plus the repeats:
at most ``repeats - 1`` calls of each candidate measured, and no more than about
``ENOUGH_S`` seconds of them per candidate.

A program with weight preparation is timed as a user runs it: its weights bound once
(``CompiledProgram.bind``: the preparation runs then, not in the timed calls).

``timer(compiled, inputs) -> seconds`` times one call (default: the wall clock);
tests inject a fake one, and ``clock`` (default ``time.perf_counter``) measures the
budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable

MAX_CANDIDATES = 5
ALWAYS = 2
#: Calls per candidate (best of): on a shared machine three interleaved calls still
#: left LayerNorm·W's candidates within 5 % of each other in an order that the next
#: run reversed; short calls are cheap (a 0.1 s call: 0.4 s more per candidate).
REPEATS = 5
#: A first call this much slower than the best so far is not repeated: first calls
#: run at most some 10-20 % slower than later ones (first touch of the outputs).
SLOWER = 1.3
#: ... unless it took less than this: retaking a short call costs little, and on a
#: shared machine one call in a few runs slow (another process's burst). Measured:
#: a 95 ms LayerNorm·W candidate timed once at 179 ms lost to a 99 ms one.
CHEAP_S = 0.25
#: Timed calls stop once they add up to this many seconds (two calls at least).
ENOUGH_S = 2.0


def wall_timer(compiled, inputs) -> float:
    start = time.perf_counter()
    compiled(**inputs)
    return time.perf_counter() - start


def per_call(compiled, inputs: dict) -> tuple:
    """``(callable, inputs)`` of one call as a user makes it: with the weights bound
    once when the program prepares them, else the compiled program itself."""
    from ..ir.prep import weight_derived_kernels
    program = getattr(compiled, "program", None)
    if program is None or not weight_derived_kernels(program):
        return compiled, inputs
    bound = compiled.bind({w: inputs[w] for w in program.weights})
    return bound, {n: v for n, v in inputs.items() if n not in program.weights}


def measure(programs: list, compile_fn: Callable, make_inputs: Callable,
            budget_s: float, timer: Callable | None = None,
            max_candidates: int = MAX_CANDIDATES, always: int = ALWAYS,
            repeats: int = REPEATS,
            clock: Callable[[], float] = time.perf_counter) -> list[float | None]:
    """Seconds per program of ``programs`` (best of its timed calls), None for those
    not measured (over the budget or beyond ``max_candidates``) or that failed."""
    timer = timer or wall_timer
    results: list[float | None] = [None] * len(programs)
    start = clock()
    calls: dict[int, tuple] = {}          # measured candidate -> (callable, inputs)
    times: dict[int, list[float]] = {}

    def first_best() -> float | None:
        return min((t[0] for t in times.values()), default=None)

    # Compile each candidate and call it once, while the budget lasts.
    for i, program in enumerate(programs[:max_candidates]):
        if i >= always and clock() - start >= budget_s:
            break
        try:
            compiled, inputs = per_call(compile_fn(program), make_inputs(program))
            best = first_best()
            first = timer(compiled, inputs)
        except Exception:          # noqa: BLE001 - a candidate that fails is not chosen
            continue
        times[i] = [first]
        if best is None or first <= SLOWER * best or first < CHEAP_S:
            calls[i] = (compiled, inputs)
    # Then the repeats, in turn: one call of every candidate per round.
    for _ in range(repeats - 1):
        for i, (compiled, inputs) in list(calls.items()):
            if len(times[i]) >= 2 and sum(times[i]) >= ENOUGH_S:
                del calls[i]
                continue
            try:
                times[i].append(timer(compiled, inputs))
            except Exception:      # noqa: BLE001
                del calls[i], times[i]
    for i, ts in times.items():
        results[i] = min(ts)
    return results
