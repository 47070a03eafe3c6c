"""The combiner registry: how a sequential ``reduce`` folds its per-block terms.

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

One entry (:class:`Combiner`) holds what the verifier, the rewrite actions and the
cost model need: head size, head output shapes (generic over axes, like
:meth:`.ops.OpSpec.result_axes`), how passengers accumulate, FLOPs per step and the
identity (the outputs of an empty range). The fold itself is backend code: the
reference interpreter's ``Evaluator._combine_<name>`` is definitive; a backend lists
the combiners it lowers (``Backend.lowered_combiners``) and the conformance suite
checks that it lowers every one registered here.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import attrs

from .ops import OpTypeError
from .types import ArrayType, BlockType

#: How a passenger accumulates -> (FLOPs per element per step, identity element).
PASSENGERS = {"sum": (1, 0.0), "max": (1, -math.inf), "scaled_sum": (2, 0.0)}


@attrs.frozen
class Combiner:
    name: str
    head: int                                # bodies with combiner-specific state
    head_axes: Callable[[Sequence[tuple]], list]   # head bodies' axes -> outputs' axes
    passenger: str                           # how passengers accumulate: see PASSENGERS
    min_passengers: int
    head_outputs: int = 0
    head_identity: tuple = ()                # each head output's value on an empty range
    # FLOPs per step of the head, per element of the head body and per row of it.
    head_flops: tuple[int, int] = (0, 0)
    check_head: Callable[[Sequence], None] | None = None   # types -> None | raise

    def output_types(self, types: Sequence) -> list:
        head = types[: self.head]
        if self.check_head is not None:
            self.check_head(head)
        outs = [BlockType(tuple(a)) for a in self.head_axes([t.axes for t in head])]
        for t in types[self.head:]:
            if self.passenger == "max" and not isinstance(t, BlockType):
                raise OpTypeError(f"max cannot accumulate {t}")
            if not isinstance(t, (BlockType, ArrayType)):
                raise OpTypeError(f"{self.name} cannot accumulate {t}")
            outs.append(t)
        return outs

    @property
    def passenger_flops(self) -> int:
        """FLOPs per element of a passenger, per step."""
        return PASSENGERS[self.passenger][0]

    def identity(self, outputs: int) -> list[float]:
        """The fill value of each of ``outputs`` outputs of an empty reduction."""
        fill = PASSENGERS[self.passenger][1]
        return list(self.head_identity) + [fill] * (outputs - self.head_outputs)

    def arity_ok(self, nbodies: int) -> bool:
        return nbodies >= self.head + self.min_passengers

    @property
    def passengers_alone(self) -> str | None:
        """The combiner that folds this one's passengers on their own, the same way
        (``sum``, ``max``); None when they depend on the head's state (an online
        softmax rescales them by its running max): then they cannot leave it."""
        return {"sum": "sum", "max": "max"}.get(self.passenger)


def _row_block(what):
    def check(ts):
        t = ts[0]
        if not (isinstance(t, BlockType) and len(t.axes) == 2):
            raise OpTypeError(f"{what} must be a 2-D block, got {t}")
    return check


def _no_head(axes):
    return []


COMBINERS: dict[str, Combiner] = {
    c.name: c for c in (
        Combiner("sum", 0, _no_head, "sum", 1),
        Combiner("max", 0, _no_head, "max", 1),
        # head x (R×C): row max, new running max, exp of the difference.
        Combiner("online_softmax", 1, lambda ax: [tuple(ax[0][:1])], "scaled_sum", 1,
                 head_outputs=1, head_identity=(-math.inf,), head_flops=(1, 3),
                 check_head=_row_block("online_softmax logits")),
        # head x: block row sums, squared deviations from the block mean and their sum;
        # Chan's merge of count, mean and deviations.
        Combiner("meanvar", 1, lambda ax: [(), tuple(ax[0][:1]), tuple(ax[0][:1])], "sum", 0,
                 head_outputs=3, head_identity=(0.0, 0.0, 0.0), head_flops=(4, 8),
                 check_head=_row_block("meanvar operand")),
    )
}
