"""The measured part of tuning: compile the best few candidates and time them.

Like Triton's autotune: each candidate is compiled, run once untimed (warm-up: lazy
compilation, first-touch of memory), then timed ``repeats`` times on the same random
inputs; its time is the best of those. Bounded: at most ``max_candidates``
candidates, in the model's order, and no new candidate is started once ``budget_s``
seconds have passed since the first one started (the one running is finished). The
model's favourite is always measured, so the worst case is the budget plus one
candidate's compile and ``1 + repeats`` runs.

``timer(compiled, inputs) -> seconds`` times one call (default: the wall clock);
tests inject a fake one, and ``clock`` (default ``time.perf_counter``) measures the
budget.
"""

from __future__ import annotations

import time
from typing import Callable

MAX_CANDIDATES = 3
REPEATS = 3


def wall_timer(compiled, inputs) -> float:
    start = time.perf_counter()
    compiled(**inputs)
    return time.perf_counter() - start


def measure(programs: list, compile_fn: Callable, make_inputs: Callable,
            budget_s: float, timer: Callable | None = None,
            max_candidates: int = MAX_CANDIDATES, repeats: int = REPEATS,
            clock: Callable[[], float] = time.perf_counter) -> list[float | None]:
    """Seconds per program of ``programs`` (best of ``repeats``), None for those not
    measured (over the budget or beyond ``max_candidates``) or that failed."""
    timer = timer or wall_timer
    results: list[float | None] = [None] * len(programs)
    start = clock()
    for i, program in enumerate(programs[:max_candidates]):
        if i > 0 and clock() - start >= budget_s:
            break
        try:
            compiled = compile_fn(program)
            inputs = make_inputs(program)
            compiled(**inputs)                       # warm-up, untimed
            results[i] = min(timer(compiled, inputs) for _ in range(repeats))
        except Exception:          # noqa: BLE001 - a candidate that fails is not chosen
            results[i] = None
    return results
