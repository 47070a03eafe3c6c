"""What every structural action shares: the :class:`Application` record an action's
search yields, the size limit of the searches' memos, and the output count of a
reduction."""

from __future__ import annotations

from typing import Callable

import attrs

from ..ir.combiners import COMBINERS
from ..ir.expr import Expr
from ..ir.program import Program


@attrs.frozen
class Application:
    """One way to apply an action: where, and the program it produces."""

    kernel: str
    before: Expr | None
    after: Expr | None
    bindings: dict
    build: Callable[[], Program]


# Action searches run after every step on every kernel, and a step changes one
# kernel: what they find in a kernel (or below a node) is memoised. Pure functions of
# immutable kernels and hash-consed nodes (the memos keep them, and so the ids of
# binding sites, alive).
MEMO_LIMIT = 20_000


def reduction_outputs(r: Expr) -> int:
    comb = COMBINERS[r.attr.combiner]
    return comb.head_outputs + len(r.args) - comb.head
