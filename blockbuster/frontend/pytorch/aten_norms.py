"""Reductions over several axes, and the layer and RMS norms: the handlers of
``layer_norm``, ``native_layer_norm`` and ``rms_norm`` (over the last axis, the
composite of :mod:`..tensors.composites`; over several trailing axes, means over
all of them)."""

from __future__ import annotations

import math

from ..tensors.composites import layer_norm, rms_norm
from ..tensors.values import Value, scalar
from .aten_registry import handles
from .dims import ImportError_


def named_axes(x: Value, dims) -> list[int]:
    """The axes ``dims`` names (all of them for none), last first: reducing one at a
    time, the earlier ones keep their positions."""
    dims = [dims] if isinstance(dims, int) else list(dims or range(x.rank))
    return sorted({d % x.rank for d in dims}, reverse=True)


def reduce_axes(low, node, combiner: str, x: Value, dims, keepdim: bool,
                 scale: float | None = None) -> Value:
    """``combiner`` over every axis of ``dims``, one after another (``scale`` once)."""
    axes = named_axes(x, dims)
    for i, axis in enumerate(axes):
        x = low.k.reduce(combiner, x, axis, node.name, keepdim,
                         scale=scale if i == 0 else None)
    return x


def _last_axis(x: Value, shape, what: str) -> int:
    if len(shape) != 1 or shape[0] != x.shape[-1]:
        raise ImportError_(f"{what} over {list(shape)}: only the last axis is supported")
    return x.rank - 1


def _trailing_axes(x: Value, shape, what: str) -> list[int] | None:
    """The axes of a norm over the trailing ``shape`` of ``x``: None for one axis
    (the composite's case), the list for several (``LayerNorm((H, W))``)."""
    shape = [int(s) for s in shape]
    if len(shape) <= 1:
        _last_axis(x, shape, what)
        return None
    if len(shape) > x.rank or list(x.shape[x.rank - len(shape):]) != shape:
        raise ImportError_(f"{what} over {shape}: not the trailing axes of {list(x.shape)}")
    return list(range(x.rank - len(shape), x.rank))


def _norm_over_axes(low, node, x, axes, weight, bias, eps, centre: bool):
    """LayerNorm (``centre``) or RMSNorm over several trailing axes: the statistics
    are means over all of them, the weight and bias broadcast over them."""
    k = low.k
    n = math.prod(x.shape[a] for a in axes)
    if centre:
        mean = reduce_axes(low, node, "sum", x, axes, True, scale=1.0 / n)
        x = k.elementwise("sub", [x, mean], node.name)
    var = reduce_axes(low, node, "sum", k.elementwise("square", [x], node.name), axes, True,
                       scale=1.0 / n)
    rstd = k.elementwise("rsqrt", [k.elementwise("add", [var, scalar(eps)], node.name)],
                         node.name)
    out = k.elementwise("mul", [x, rstd], node.name)
    if weight is not None:
        out = k.elementwise("mul", [out, weight], node.name)
    if bias is not None:
        out = k.elementwise("add", [out, bias], node.name)
    return out


@handles("layer_norm.default")
def _layer_norm(low, node, x, shape, weight=None, bias=None, eps=1e-5, *rest):
    axes = _trailing_axes(x, shape, "layer_norm")
    if axes is not None:
        return _norm_over_axes(low, node, x, axes, weight, bias, eps, centre=True)
    return layer_norm(low.k, x, x.rank - 1, weight, bias, eps, node.name)


@handles("native_layer_norm.default")
def _native_layer_norm(low, node, x, shape, weight, bias, eps):
    return (_layer_norm(low, node, x, shape, weight, bias, eps), None, None)


@handles("rms_norm.default")
def _rms_norm(low, node, x, shape, weight=None, eps=None):
    axes = _trailing_axes(x, shape, "rms_norm")
    if eps is None:
        eps = 1.1920928955078125e-07          # torch: finfo(float32).eps
    if axes is not None:
        return _norm_over_axes(low, node, x, axes, weight, None, eps, centre=False)
    return rms_norm(low.k, x, x.rank - 1, weight, eps, node.name)
