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

from ..dsl.vocabulary import ACTIONS
from ..ir.program import Program
from .action_base import Application
from .action_hold import find_hold, find_hold_accumulators
from .action_inline import find_drop_dead, find_inline, inline_everywhere, producer_value_at
from .action_merge import find_merge_reductions
from .action_prepare import find_prepare_weights
from .action_siblings import find_merge_siblings

# Re-exported: what the engine, the guards, the checks and the tests import from here.
__all__ = ["ACTION_IMPLS", "Application", "find_drop_dead", "find_hold",
           "find_hold_accumulators", "find_inline", "find_merge_reductions",
           "find_merge_siblings", "find_prepare_weights", "inline_everywhere",
           "producer_value_at"]


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
