"""Reductions over several axes, and the layer and RMS norms: the handlers of
``layer_norm``, ``native_layer_norm`` and ``rms_norm`` (the composites of
:mod:`..tensors.composites`, over the last axis or several trailing ones)."""

from __future__ import annotations

from ..tensors.composites import layer_norm, rms_norm
from ..tensors.values import Value
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


def _norm_axes(x: Value, shape, what: str):
    """The axes of a norm over the trailing ``shape`` of ``x``: the last one, or
    several (``LayerNorm((H, W))``: the statistics over all of them)."""
    shape = [int(s) for s in shape]
    if len(shape) <= 1:
        return _last_axis(x, shape, what)
    if len(shape) > x.rank or list(x.shape[x.rank - len(shape):]) != shape:
        raise ImportError_(f"{what} over {shape}: not the trailing axes of {list(x.shape)}")
    return list(range(x.rank - len(shape), x.rank))


@handles("layer_norm.default")
def _layer_norm(low, node, x, shape, weight=None, bias=None, eps=1e-5, *rest):
    axes = _norm_axes(x, shape, "layer_norm")
    return layer_norm(low.k, x, axes, weight, bias, eps, node.name)


@handles("native_layer_norm.default")
def _native_layer_norm(low, node, x, shape, weight, bias, eps):
    return (_layer_norm(low, node, x, shape, weight, bias, eps), None, None)


@handles("rms_norm.default")
def _rms_norm(low, node, x, shape, weight=None, eps=None):
    axes = _norm_axes(x, shape, "rms_norm")
    if eps is None:
        eps = 1.1920928955078125e-07          # torch: finfo(float32).eps
    return rms_norm(low.k, x, axes, weight, eps, node.name)
