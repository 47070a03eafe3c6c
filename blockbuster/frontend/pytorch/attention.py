"""``scaled_dot_product_attention``: scores, scale, mask, softmax, and ``P·V``.

The kernels are :func:`..tensors.attention.attend`'s, for any number of leading
(batch, head) axes: key/value heads shared by several query heads (GQA) are a view
(query head ``h`` reads key head ``h // group``), not a copy. An additive mask that
is exactly causal (0 on and below the diagonal, -inf or a huge negative number
above) is recognised from its values and treated as ``is_causal``.
"""

from __future__ import annotations

import math

import numpy as np

from ..tensors import values as V
from ..tensors import reshapes as R
from ..tensors.attention import attend
from ..tensors.values import Value
from .dims import ImportError_


def attention(low, node, q: Value, k: Value, v: Value, mask, is_causal: bool, scale):
    km, what = low.k, node.name
    if q.rank < 2 or k.rank != q.rank or v.rank != q.rank:
        raise ImportError_(f"{what}: query, key and value must have the same rank")
    k, v = _share_heads(low, q, k, what), _share_heads(low, q, v, what)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if mask is not None and _is_causal_mask(low, node, mask, q.shape[-2], k.shape[-2]):
        mask, is_causal = None, True
    if is_causal and q.shape[-2] != k.shape[-2]:
        if mask is not None:
            raise ImportError_(f"{what}: is_causal with a mask and {q.shape[-2]} queries "
                               f"of {k.shape[-2]} keys")
        # PyTorch's causal mask for fewer or more queries than keys is aligned to the
        # top left (query i sees keys 0..i): a constant additive mask, not the
        # causal loop ranges, which need the rows and keys in one dimension.
        tq, tk = q.shape[-2], k.shape[-2]
        below = np.tril(np.ones((tq, tk), dtype=bool))
        mask = low.constant(node, f"causal_{what}", np.where(below, 0.0, -np.inf))
        is_causal = False
    if is_causal:
        low.planner.unify(q.axes[-2], k.axes[-2], what)
    if mask is not None and mask.loader is None:
        raise ImportError_(f"{what}: a scalar attention mask")
    if mask is not None and _mask_dtype(node) == "bool":
        # a boolean mask says which keys to attend (True), not what to add
        mask = km.elementwise("where", [mask, V.scalar(0.0), V.scalar(-math.inf)], what)
    out = attend(km, q, k, v, scale, is_causal, mask, what)
    if mask is not None and _may_mask_whole_rows(low, node):
        # PyTorch gives 0 for a query that may attend no key (its softmax of only
        # -inf would be 0/0): a padded query under a causal and padding mask, or
        # every query of a sequence that is all padding (a mask of one row per
        # sequence). A NaN there would reach every row of the next layer (0 · NaN
        # in P·V).
        best = km.reduce("max", mask, mask.rank - 1, what, keepdim=True)
        live = km.elementwise("gt", [best, V.scalar(-math.inf)], what)
        out = km.elementwise("where", [live, out, V.scalar(0.0)], what)
    return out


def _may_mask_whole_rows(low, node) -> bool:
    """Can a row of the mask be all -inf (all False)? Computed masks can; a
    constant one is looked at."""
    src = _mask_node(node)
    t = low.recorded.get(getattr(src, "name", None))
    if t is None or getattr(src, "name", None) in low.dynamic:
        return True
    arr = t.detach().to("cpu").numpy()
    if arr.ndim == 0:
        return False
    masked = ~arr if arr.dtype == bool else np.isneginf(arr.astype(np.float64))
    return bool(masked.all(axis=-1).any())


def _mask_node(node):
    return node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")


def _mask_dtype(node) -> str:
    val = getattr(_mask_node(node), "meta", {}).get("val")
    return str(getattr(val, "dtype", "")).replace("torch.", "")


def _share_heads(low, q: Value, kv: Value, what: str) -> Value:
    """Key/value heads shared by groups of query heads: a view, no copy."""
    if q.rank < 3 or kv.shape[-3] == q.shape[-3]:
        return kv
    hq, hk = q.shape[-3], kv.shape[-3]
    if hk == 1:                     # one key/value head (multi-query): a broadcast
        return V.expand(kv, kv.shape[:-3] + (hq,) + kv.shape[-2:])
    if hq % hk:
        raise ImportError_(f"{what}: {hq} query heads cannot share {hk} key/value heads")
    at = kv.rank - 2
    x = V.insert_axis(kv, at)
    x = V.expand(x, x.shape[:at] + (hq // hk,) + x.shape[at + 1:])
    return R.reshape(low.planner, x, list(kv.shape[:-3]) + [hq] + list(kv.shape[-2:]), what)


def _is_causal_mask(low, node, mask: Value, tq: int, tk: int) -> bool:
    """Is the (constant) mask exactly causal? Then no mask array is read at all."""
    src = _mask_node(node)
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
