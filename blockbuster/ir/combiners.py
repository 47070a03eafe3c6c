"""Combiners of ``reduce``: how a sequential reduction folds its per-block terms.

A combiner has a *head* (a fixed number of bodies with state of its own, e.g. the
logits whose running max it tracks) followed by any number of *passenger* bodies,
each accumulated into one output. Outputs are the head's outputs, then one per
passenger. Because passengers are uniform, two reductions over the same range merge
by concatenating passengers (``merge_reductions``), whatever the combiner.

``sum``            no head; passengers summed (blocks, or ``map`` arrays blockwise).
``max``            no head; passengers combined by elementwise max.
``online_softmax`` head ``x`` (an (R, C) block of logits) -> output ``m``, the row max
                   of all ``x_j``. Passengers ``t`` are sums evaluated with
                   ``runmax(j)`` bound to the running max; when the max grows, earlier
                   partial sums are rescaled by ``exp(m_old - m_new)`` row-wise. Exact
                   when each term is row-linear in ``exp(-runmax(j))``: then each output
                   is ``exp(-m) · Σ_j t|runmax=0`` (the Flash Attention 2 recurrence).
``meanvar``        head ``x`` (an (R, C) block) -> outputs ``(n, s, q)``: the element count
                   per row (scalar), the row sums, and the row sums of squared deviations
                   from the row mean, merged block by block with Chan's update (never
                   ``E[x²] - E[x]²``). Passengers are plain sums.

The semantics live in the backends; ``blockbuster.backends.reference`` is definitive.
"""

from __future__ import annotations

from typing import Callable, Sequence

import attrs

from .ops import OpTypeError
from .types import SCALAR, ArrayType, BlockType


@attrs.frozen
class Combiner:
    name: str
    head: int                               # bodies with combiner-specific state
    head_types: Callable[[Sequence], list]  # head body types -> head output types
    passenger: str                          # how passengers accumulate: sum, max, scaled_sum
    min_passengers: int

    def output_types(self, types: Sequence) -> list:
        outs = self.head_types(types[: self.head])
        for t in types[self.head:]:
            if self.passenger == "max" and not isinstance(t, BlockType):
                raise OpTypeError(f"max cannot accumulate {t}")
            if not isinstance(t, (BlockType, ArrayType)):
                raise OpTypeError(f"{self.name} cannot accumulate {t}")
            outs.append(t)
        return outs

    @property
    def head_outputs(self) -> int:
        return {"sum": 0, "max": 0, "online_softmax": 1, "meanvar": 3}[self.name]

    def arity_ok(self, nbodies: int) -> bool:
        return nbodies >= self.head + self.min_passengers


def _row_block(t, what):
    if not (isinstance(t, BlockType) and len(t.axes) == 2):
        raise OpTypeError(f"{what} must be a 2-D block, got {t}")
    return t


def _online_softmax_head(ts):
    return [BlockType((_row_block(ts[0], "online_softmax logits").axes[0],))]


def _meanvar_head(ts):
    row = BlockType((_row_block(ts[0], "meanvar operand").axes[0],))
    return [SCALAR, row, row]


COMBINERS: dict[str, Combiner] = {
    c.name: c for c in (
        Combiner("sum", 0, lambda ts: [], "sum", 1),
        Combiner("max", 0, lambda ts: [], "max", 1),
        Combiner("online_softmax", 1, _online_softmax_head, "scaled_sum", 1),
        Combiner("meanvar", 1, _meanvar_head, "sum", 0),
    )
}
