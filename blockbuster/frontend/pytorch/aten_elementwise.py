"""ATen handlers of elementwise operators: arithmetic, activations, boolean masks,
clamps (each emits one elementwise kernel of the unfused program)."""

from __future__ import annotations

import math

from ..tensors.values import Value, scalar
from .aten_registry import handles, operand
from .dims import ImportError_


# --- elementwise -----------------------------------------------------------------------

def _ew(op):
    def handler(low, node, *args, **kwargs):
        return low.k.elementwise(op, [operand(a) for a in args[:_ARITY[op]]], node.name)
    return handler


_ARITY = {"neg": 1, "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "erf": 1,
          "sigmoid": 1, "relu": 1, "abs": 1, "recip": 1, "silu": 1, "square": 1,
          "sin": 1, "cos": 1, "log1p": 1, "expm1": 1,
          "add": 2, "sub": 2, "mul": 2, "div": 2, "max": 2, "min": 2,
          "lt": 2, "le": 2, "gt": 2, "ge": 2, "eq": 2, "ne": 2, "where": 3}

for _name, _op in [("neg", "neg"), ("exp", "exp"), ("log", "log"), ("sqrt", "sqrt"),
                   ("rsqrt", "rsqrt"), ("tanh", "tanh"), ("erf", "erf"),
                   ("sigmoid", "sigmoid"), ("relu", "relu"), ("abs", "abs"),
                   ("reciprocal", "recip"), ("silu", "silu"), ("sin", "sin"),
                   ("cos", "cos"), ("log1p", "log1p"), ("expm1", "expm1"),
                   ("maximum", "max"), ("minimum", "min")]:
    handles(f"{_name}.default")(_ew(_op))
for _cmp in ("lt", "le", "gt", "ge", "eq", "ne"):
    handles(f"{_cmp}.Tensor", f"{_cmp}.Scalar")(_ew(_cmp))
handles("where.self")(_ew("where"))
handles("mul.Tensor", "mul.Scalar")(_ew("mul"))


def _bool_operands(node, what: str) -> None:
    for a in node.args:
        dtype = getattr(getattr(a, "meta", {}).get("val"), "dtype", None)
        if dtype is not None and str(dtype) != "torch.bool":
            raise ImportError_(f"{what} of a {str(dtype).replace('torch.', '')} tensor "
                               f"(only boolean masks)")


@handles("bitwise_not.default", "logical_not.default")
def _not(low, node, x):
    """``~mask``: 1 where the mask is 0 (boolean masks, held as 0/1)."""
    if "bitwise" in str(node.target):
        _bool_operands(node, "bitwise_not")
    return low.k.elementwise("eq", [operand(x), scalar(0.0)], node.name)


@handles("bitwise_and.Tensor", "logical_and.default", "bitwise_or.Tensor",
         "logical_or.default")
def _and_or(low, node, a, b):
    """``m1 & m2`` and ``m1 | m2`` of masks: the product / the max of 0/1 values
    (``logical_*`` first turns any non-zero value into 1)."""
    target = str(node.target)
    if "bitwise" in target:
        _bool_operands(node, target.split(".")[1])
    k = low.k
    a, b = (k.elementwise("ne", [operand(x), scalar(0.0)], node.name) for x in (a, b))
    return k.elementwise("mul" if "and" in target else "max", [a, b], node.name)


@handles("add.Tensor", "add.Scalar", "sub.Tensor", "sub.Scalar")
def _add_sub(low, node, a, b, alpha=1):
    op = "add" if "add" in str(node.target) else "sub"
    b = operand(b)
    if alpha != 1:
        b = scalar(b.scalar * alpha) if b.loader is None else \
            low.k.elementwise("mul", [b, scalar(alpha)], node.name)
    return low.k.elementwise(op, [operand(a), b], node.name)


@handles("rsub.Scalar", "rsub.Tensor")
def _rsub(low, node, a, b, alpha=1):
    if alpha != 1:
        a = low.k.elementwise("mul", [operand(a), scalar(alpha)], node.name)
    return low.k.elementwise("sub", [operand(b), operand(a)], node.name)


@handles("div.Tensor", "div.Scalar")
def _div(low, node, a, b, rounding_mode=None):
    if rounding_mode is not None:
        raise ImportError_(f"division with rounding_mode={rounding_mode!r}")
    return low.k.elementwise("div", [operand(a), operand(b)], node.name)


@handles("isnan.default", "isinf.default", "isposinf.default", "isneginf.default",
         "isfinite.default")
def _isnan(low, node, x):
    """Non-finite tests as 0/1 masks with comparisons alone: NaN is the one value
    not equal to itself; ``|x| < inf`` is false for both infinities and NaN."""
    k, test = low.k, str(node.target).split(".")[1]
    if test == "isnan":
        return k.elementwise("ne", [x, x], node.name)
    if test == "isfinite":
        return k.elementwise("lt", [k.elementwise("abs", [x], node.name),
                                    scalar(math.inf)], node.name)
    if test == "isinf":
        return k.elementwise("eq", [k.elementwise("abs", [x], node.name), scalar(math.inf)],
                             node.name)
    return k.elementwise("eq", [x, scalar(math.inf if test == "isposinf" else -math.inf)],
                         node.name)


@handles("nan_to_num.default")
def _nan_to_num(low, node, x, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced (by default 0 and the dtype's largest finite
    numbers, as PyTorch)."""
    import numpy as np
    val = node.meta.get("val")
    dtype = np.float64 if str(getattr(val, "dtype", "")) == "torch.float64" else np.float32
    big = float(np.finfo(dtype).max)
    k = low.k
    pos = scalar(big if posinf is None else posinf)
    neg = scalar(-big if neginf is None else neginf)
    out = k.elementwise("where", [k.elementwise("eq", [x, scalar(math.inf)], node.name),
                                  pos, x], node.name)
    out = k.elementwise("where", [k.elementwise("eq", [x, scalar(-math.inf)], node.name),
                                  neg, out], node.name)
    return k.elementwise("where", [k.elementwise("ne", [x, x], node.name),
                                   scalar(0.0 if nan is None else nan), out], node.name)


@handles("pow.Tensor_Scalar")
def _pow(low, node, x, exponent):
    return low.k.power(x, exponent, node.name)


@handles("gelu.default")
def _gelu(low, node, x, approximate="none"):
    op = {"none": "gelu", "tanh": "gelu_tanh"}.get(approximate)
    if op is None:
        raise ImportError_(f"gelu(approximate={approximate!r})")
    return low.k.elementwise(op, [x], node.name)


def _positive_else(low, node, x, negative: Value) -> Value:
    """``x`` where ``x > 0``, else ``negative`` (leaky ReLU, ELU)."""
    k = low.k
    return k.elementwise("where", [k.elementwise("gt", [x, scalar(0.0)], node.name), x,
                                   negative], node.name)


@handles("leaky_relu.default")
def _leaky_relu(low, node, x, negative_slope=0.01):
    return _positive_else(low, node, x,
                          low.k.elementwise("mul", [x, scalar(negative_slope)], node.name))


@handles("elu.default")
def _elu(low, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    k = low.k
    inner = x if input_scale == 1 else k.elementwise("mul", [x, scalar(input_scale)],
                                                    node.name)
    neg = k.elementwise("mul", [k.elementwise("expm1", [inner], node.name), scalar(alpha)],
                        node.name)
    out = _positive_else(low, node, x, neg)
    return out if scale == 1 else k.elementwise("mul", [out, scalar(scale)], node.name)


@handles("softplus.default")
def _softplus(low, node, x, beta=1.0, threshold=20.0):
    """``(max(z, 0) + log1p(exp(-|z|)))/beta``, ``z = beta·x``: no overflow, and the
    left tail (``exp(z)``, down to float32's subnormals) keeps its relative accuracy;
    where ``z > threshold`` PyTorch returns ``x`` (the two differ by < exp(-threshold))."""
    k = low.k
    z = x if beta == 1 else k.elementwise("mul", [x, scalar(beta)], node.name)
    tail = k.elementwise("exp", [k.elementwise("neg", [k.elementwise("abs", [z],
                                                                      node.name)],
                                               node.name)], node.name)
    soft = k.elementwise("add", [k.elementwise("relu", [z], node.name),
                                 k.elementwise("log1p", [tail], node.name)], node.name)
    if beta != 1:
        soft = k.elementwise("mul", [soft, scalar(1.0 / beta)], node.name)
    over = k.elementwise("gt", [z, scalar(threshold)], node.name)
    return k.elementwise("where", [over, x, soft], node.name)


@handles("sign.default")
def _sign(low, node, x):
    """``(x > 0) - (x < 0)``; NaN stays NaN (as ``torch.sign``)."""
    k = low.k
    x = operand(x)
    step = k.elementwise("sub", [k.elementwise("gt", [x, scalar(0.0)], node.name),
                                 k.elementwise("lt", [x, scalar(0.0)], node.name)],
                         node.name)
    return k.elementwise("where", [k.elementwise("ne", [x, x], node.name), x, step],
                         node.name)


@handles("pow.Tensor_Tensor")
def _pow_tensor(low, node, base, exponent):
    """``base ** exponent`` as ``exp(exponent·log(base))`` (1 where the exponent is 0,
    0 or inf at a zero base as PyTorch). A negative base gives NaN, also for an
    integral exponent (PyTorch gives a real power there)."""
    k = low.k
    base, exponent = operand(base), operand(exponent)
    power = k.elementwise("exp", [k.elementwise("mul", [exponent, k.elementwise(
        "log", [base], node.name)], node.name)], node.name)
    return k.elementwise("where", [k.elementwise("eq", [exponent, scalar(0.0)], node.name),
                                   scalar(1.0), power], node.name)


@handles("pow.Scalar")
def _pow_scalar_base(low, node, base, exponent):
    """``base ** x`` for a number ``base > 0`` (``10000 ** (2i/d)`` of sinusoidal
    embeddings): ``exp(x·ln base)``."""
    if base <= 0:
        raise ImportError_(f"{base} ** tensor (only a positive base)")
    k = low.k
    if base == 1:
        return k.elementwise("ones", [operand(exponent)], node.name)
    return k.elementwise("exp", [k.elementwise("mul", [operand(exponent),
                                                      scalar(math.log(base))], node.name)],
                         node.name)


@handles("hardtanh.default")
def _hardtanh(low, node, x, min_val=-1.0, max_val=1.0):
    return _clamp(low, node, x, min_val, max_val)


@handles("clamp_min.default")
def _clamp_min(low, node, x, lo):
    return low.k.elementwise("max", [x, operand(lo)], node.name)


@handles("clamp_max.default")
def _clamp_max(low, node, x, hi):
    return low.k.elementwise("min", [x, operand(hi)], node.name)


@handles("clamp.default", "clamp.Tensor")
def _clamp(low, node, x, lo=None, hi=None):
    if lo is not None:
        x = low.k.elementwise("max", [x, operand(lo)], node.name)
    if hi is not None:
        x = low.k.elementwise("min", [x, operand(hi)], node.name)
    return x


@handles("log2.default", "log10.default")
def _log_base(low, node, x):
    """``log2 x``, ``log10 x`` as ``log(x) · (1 / ln b)``: one more rounding than
    ``log`` (a relative error of ~1e-7), the same zeros, infinities and NaNs."""
    base = 2.0 if "log2" in str(node.target) else 10.0
    k = low.k
    return k.elementwise("mul", [k.elementwise("log", [operand(x)], node.name),
                                 scalar(1.0 / math.log(base))], node.name)


@handles("exp2.default")
def _exp2(low, node, x):
    """``2 ** x`` as ``exp(x · ln 2)``: the rounding of ``x · ln 2`` adds a relative
    error of ``|x · ln 2|`` float32 epsilons, what rounding ``x`` itself to float32
    already implies (exp2's condition number is ``|x · ln 2|``)."""
    return _pow_scalar_base(low, node, 2.0, x)


@handles("tan.default")
def _tan(low, node, x):
    """``tan x = sin x / cos x`` (both accurate to an ulp over float32's range)."""
    k = low.k
    x = operand(x)
    return k.elementwise("div", [k.elementwise("sin", [x], node.name),
                                 k.elementwise("cos", [x], node.name)], node.name)
