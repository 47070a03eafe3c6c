"""Softmax and the norms: the kernel sequences every frontend emits for them.

One kernel per primitive step, in the order the fusion rules know (a softmax is max,
shift, exp, sum and divide). ``name`` names the last kernel's output array.
"""

from __future__ import annotations

from collections.abc import Callable

from .kernels import KernelEmitter
from .values import Value, scalar


def softmax(k: KernelEmitter, x: Value, axis: int, what: str, log: bool = False,
            hi_of: Callable | None = None, name: str | None = None) -> Value:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (``log``: ``x - max -
    log(sum(exp(x - max)))``); ``hi_of`` bounds the reductions (causal attention)."""
    m = k.reduce("max", x, axis, what, keepdim=True, hi_of=hi_of)
    shifted = k.elementwise("sub", [x, m], what)
    e = k.elementwise("exp", [shifted], what)
    s = k.reduce("sum", e, axis, what, keepdim=True, hi_of=hi_of)
    if log:
        return k.elementwise("sub", [shifted, k.elementwise("log", [s], what)], what, name)
    return k.elementwise("div", [e, s], what, name)


def logsumexp(k: KernelEmitter, x: Value, axis: int, what: str,
              name: str | None = None) -> Value:
    """``max + log(sum(exp(x - max)))`` along ``axis`` (kept as a size-1 axis)."""
    m = k.reduce("max", x, axis, what, keepdim=True)
    e = k.elementwise("exp", [k.elementwise("sub", [x, m], what)], what)
    s = k.reduce("sum", e, axis, what, keepdim=True)
    return k.elementwise("add", [k.elementwise("log", [s], what), m], what, name)


def _mean(k: KernelEmitter, x: Value, axis, what: str) -> Value:
    """The mean over ``axis`` (an int, or several axes: summed one after another, last
    first, the scale applied once), kept as size-1 axes."""
    axes = sorted({axis} if isinstance(axis, int) else set(axis), reverse=True)
    count = 1
    for a in axes:
        count *= x.shape[a]
    for i, a in enumerate(axes):
        x = k.reduce("sum", x, a, what, True, scale=1.0 / count if i == 0 else None)
    return x


def _scaled(k: KernelEmitter, out: Value, weight: Value | None, bias: Value | None,
            what: str, name: str | None) -> Value:
    """``out · weight + bias`` (either may be absent); ``name`` on the last kernel."""
    if weight is not None:
        out = k.elementwise("mul", [out, weight], what, None if bias is not None else name)
    if bias is not None:
        out = k.elementwise("add", [out, bias], what, name)
    return out


def layer_norm(k: KernelEmitter, x: Value, axis: int, weight: Value | None,
               bias: Value | None, eps: float, what: str, name: str | None = None) -> Value:
    """``(x - mean) · rsqrt(var + eps) · weight + bias`` along ``axis`` (or several)."""
    centred = k.elementwise("sub", [x, _mean(k, x, axis, what)], what)
    var = _mean(k, k.elementwise("square", [centred], what), axis, what)
    rstd = k.elementwise("rsqrt", [k.elementwise("add", [var, scalar(eps)], what)], what)
    last = weight is None and bias is None
    out = k.elementwise("mul", [centred, rstd], what, name if last else None)
    return _scaled(k, out, weight, bias, what, name)


def rms_norm(k: KernelEmitter, x: Value, axis: int, weight: Value | None, eps: float,
             what: str, name: str | None = None) -> Value:
    """``x · rsqrt(mean(x²) + eps) · weight`` along ``axis`` (or several)."""
    ms = _mean(k, k.elementwise("square", [x], what), axis, what)
    rinv = k.elementwise("rsqrt", [k.elementwise("add", [ms, scalar(eps)], what)], what)
    out = k.elementwise("mul", [x, rinv], what, name if weight is None else None)
    return _scaled(k, out, weight, None, what, name)
