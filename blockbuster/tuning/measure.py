"""The measured part of tuning: compile the best few candidates and time them.

Like Triton's autotune: each candidate is compiled, then timed up to ``repeats``
times on the same random inputs; its time is the best of those (so the first call's
first touch of memory does not count against it when it is repeated). The bound on
the time it takes:

* at most ``max_candidates`` candidates, in the order given (the tuner puts the
  model's favourite first and the default blocks second);
* the first ``always`` of them are always measured (so the choice is never one the
  defaults beat); a later one is started only while less than ``budget_s`` seconds
  have passed since the first started;
* a candidate stops after one timed call when that call is more than ``SLOWER``
  times the best time so far and not shorter than ``CHEAP_S``; its repeats stop once its timed calls add up to
  ``ENOUGH_S`` (a call of a second or more is timed twice, not three times: its
  time is steady, and the next candidate's compile is what the budget is for), and
  once the budget is spent.

So tuning takes at most the budget plus, for the candidates always measured and the
one running when the budget ends, one compile and two calls each.

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
REPEATS = 3
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

    def within_budget() -> bool:
        return clock() - start < budget_s

    for i, program in enumerate(programs[:max_candidates]):
        if i >= always and not within_budget():
            break
        try:
            compiled, inputs = per_call(compile_fn(program), make_inputs(program))
            times = [timer(compiled, inputs)]
            best = min((t for t in results if t is not None), default=None)
            clearly_slower = (best is not None and times[0] > SLOWER * best
                              and times[0] >= CHEAP_S)
            while (not clearly_slower and len(times) < repeats and within_budget()
                   and (len(times) < 2 or sum(times) < ENOUGH_S)):
                times.append(timer(compiled, inputs))
            results[i] = min(times)
        except Exception:          # noqa: BLE001 - a candidate that fails is not chosen
            results[i] = None
    return results
