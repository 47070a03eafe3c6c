"""Combiners of ``reduce``: how a sequential reduction folds its per-block terms.

A combiner may carry state beyond its outputs (a running max, a count). The IR only
needs each combiner's arity and output types; the semantics live in the backends
(see ``blockbuster.backends.reference`` for the definitive one).

``sum``            outputs ``Σ_j body_k(j)`` for each body (blocks or ``map`` arrays).
``max``            outputs the elementwise ``max_j body_k(j)``.
``online_softmax`` bodies ``(x, t_1, ..., t_n)`` with ``x`` an (R, C) block; outputs
                   ``(m, s_1, ..., s_n)`` with ``m = max_j rowmax(x_j)`` and
                   ``s_k = Σ_j t_k(j)`` where each term is evaluated with
                   ``runmax(j, R)`` bound to the running max and earlier partial sums
                   rescaled by ``exp(m_old - m_new)`` when the max grows. Exact when
                   every term is row-linear in ``exp(-runmax)``: then
                   ``s_k = exp(-m) · Σ_j t_k|runmax=0`` (Flash Attention 2).
``meanvar``        body ``x`` an (R, C) block; outputs ``(n, s, q)``: element count per
                   row (scalar), row sums, and row sums of squared deviations from the
                   row mean, combined with Chan's parallel update (no ``E[x²]-E[x]²``).
"""

from __future__ import annotations

from typing import Callable, Sequence

import attrs

from .ops import OpTypeError
from .types import SCALAR, ArrayType, BlockType


@attrs.frozen
class Combiner:
    name: str
    min_bodies: int
    max_bodies: int | None
    output_types: Callable[[Sequence], list]


def _sum_types(ts):
    for t in ts:
        if not isinstance(t, (BlockType, ArrayType)):
            raise OpTypeError(f"sum cannot accumulate {t}")
    return list(ts)


def _max_types(ts):
    for t in ts:
        if not isinstance(t, BlockType):
            raise OpTypeError(f"max cannot accumulate {t}")
    return list(ts)


def _row_block(t, what):
    if not (isinstance(t, BlockType) and len(t.axes) == 2):
        raise OpTypeError(f"{what} must be a 2-D block, got {t}")
    return t


def _online_softmax_types(ts):
    x = _row_block(ts[0], "online_softmax logits")
    return [BlockType((x.axes[0],))] + _sum_types(ts[1:])


def _meanvar_types(ts):
    x = _row_block(ts[0], "meanvar operand")
    row = BlockType((x.axes[0],))
    return [SCALAR, row, row]


COMBINERS: dict[str, Combiner] = {
    c.name: c for c in (
        Combiner("sum", 1, None, _sum_types),
        Combiner("max", 1, None, _max_types),
        Combiner("online_softmax", 2, None, _online_softmax_types),
        Combiner("meanvar", 1, 1, _meanvar_types),
    )
}
