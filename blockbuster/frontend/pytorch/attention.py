"""``scaled_dot_product_attention``: scores, scale, mask, softmax, and ``P·V``.

The kernels are those of the builder's causal attention, for any number of leading
(batch, head) axes: key/value heads shared by several query heads (GQA) are a view
(query head ``h`` reads key head ``h // group``), not a copy. Causal attention
reduces over the key range ``[: i + 1]`` only, so blocks above the diagonal are never
read; an additive mask that is exactly causal (0 on and below the diagonal, -inf or
a huge negative number above) is recognised from its values and treated the same.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir import expr as E
from . import values as V
from .dims import ImportError_
from .kernels import softmax
from .values import Value, scalar


def attention(low, node, q: Value, k: Value, v: Value, mask, is_causal: bool, scale):
    km, what = low.k, node.name
    if q.rank < 2 or k.rank != q.rank or v.rank != q.rank:
        raise ImportError_(f"{what}: query, key and value must have the same rank")
    k, v = _share_heads(low, q, k, what), _share_heads(low, q, v, what)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if mask is not None and _is_causal_mask(low, node, mask, q.shape[-2], k.shape[-2]):
        mask, is_causal = None, True
    hi_rows = hi_cols = None
    if is_causal:
        if q.shape[-2] != k.shape[-2]:
            raise ImportError_(f"{what}: causal attention needs as many keys as queries")
        low.planner.unify(q.axes[-2], k.axes[-2], what)
        hi_rows = lambda index: {"hi": index[-1] + 1}      # reduce over keys of row i
        hi_cols = lambda index: {"hi": index[-2] + 1}      # P·V: out[..., i, e]
    scores = km.matmul(q, V.permute(k, list(range(k.rank - 2)) + [k.rank - 1, k.rank - 2]),
                       what)
    scores = km.elementwise("mul", [scores, scalar(scale)], what)
    if is_causal:
        t = low.planner.dim(q.axes[-2]).name
        s = scores
        scores = km.emit("mask", s.shape, s.axes, lambda index: E.call(
            "keep_ge", E.pos(t, index[-2]), E.pos(t, index[-1]), km.block(s, index)))
    if mask is not None:
        if mask.loader is None:
            raise ImportError_(f"{what}: a scalar attention mask")
        scores = km.elementwise("add", [scores, _additive(low, mask, what)], what)
    probs = softmax(km, scores, scores.rank - 1, what, hi_of=hi_rows)
    return km.matmul(probs, v, what, hi_of=hi_cols)


def _share_heads(low, q: Value, kv: Value, what: str) -> Value:
    """Key/value heads shared by groups of query heads: a view, no copy."""
    if q.rank < 3 or kv.shape[-3] == q.shape[-3]:
        return kv
    hq, hk = q.shape[-3], kv.shape[-3]
    if hq % hk:
        raise ImportError_(f"{what}: {hq} query heads cannot share {hk} key/value heads")
    at = kv.rank - 2
    x = V.insert_axis(kv, at)
    x = V.expand(x, x.shape[:at] + (hq // hk,) + x.shape[at + 1:])
    return V.reshape(low.planner, x, list(kv.shape[:-3]) + [hq] + list(kv.shape[-2:]), what)


def _additive(low, mask: Value, what: str) -> Value:
    return mask


def _is_causal_mask(low, node, mask: Value, tq: int, tk: int) -> bool:
    """Is the (constant) mask exactly causal? Then no mask array is read at all."""
    src = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    t = low.recorded.get(getattr(src, "name", None))
    if t is None or getattr(src, "name", None) in low.dynamic or tq != tk:
        return False
    m = t.detach().to("cpu")
    m = m.reshape(-1, tq, tk) if m.numel() % (tq * tk) == 0 and m.shape[-2:] == (tq, tk) \
        else None
    if m is None:
        return False
    below = np.tril(np.ones((tq, tk), dtype=bool))
    arr = m.numpy()
    if arr.dtype == bool:
        return bool((arr == below).all())
    arr = arr.astype(np.float64)
    return bool((arr[:, below] == 0).all() and (arr[:, ~below] <= -1e9).all())
