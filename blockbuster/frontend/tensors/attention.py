"""Attention's kernels: scores, scale, causal mask, softmax, and ``P·V``.

For any number of leading (batch, head) axes; ``q[..., T, D]``, ``k[..., S, D]`` and
``v[..., S, Dv]`` already have the same heads (key/value heads shared by several
query heads are a view: :func:`.reshapes.merge_view`). Causal attention reduces over
the key range ``[: i + 1]`` only, so blocks above the diagonal are never read, and
masks the diagonal blocks with ``keep_ge`` on global positions.
"""

from __future__ import annotations

from ...ir import expr as E
from . import values as V
from .composites import softmax
from .kernels import KernelEmitter
from .values import Value, scalar


def attend(k: KernelEmitter, q: Value, key: Value, v: Value, scale: float, causal: bool,
           mask: Value | None, what: str, name: str | None = None) -> Value:
    """``softmax(q·keyᵀ·scale [+ mask], causal) · v``; ``name`` names the output."""
    hi_rows = hi_cols = None
    if causal and q.shape[-2] == 1 and key.shape[-2] == 1:
        causal = False          # one query, one key: the query sees it, nothing to mask
    if causal:
        hi_rows = lambda index: {"hi": index[-1] + 1}      # reduce over keys of row i
        hi_cols = lambda index: {"hi": index[-2] + 1}      # P·V: out[..., i, e]
    swap = list(range(key.rank - 2)) + [key.rank - 1, key.rank - 2]
    scores = k.matmul(q, V.permute(key, swap), what)
    scores = k.elementwise("mul", [scores, scalar(scale)], what)
    if causal:
        t = k.planner.dim(q.axes[-2]).name
        s = scores
        scores = k.emit("mask", s.shape, s.axes, lambda index: E.call(
            "keep_ge", E.pos(t, index[-2]), E.pos(t, index[-1]), k.block(s, index)))
    if mask is not None:
        scores = k.elementwise("add", [scores, mask], what)
    probs = softmax(k, scores, scores.rank - 1, what, hi_of=hi_rows)
    return k.matmul(probs, v, what, name, hi_of=hi_cols)
