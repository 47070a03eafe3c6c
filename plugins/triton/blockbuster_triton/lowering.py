"""How the Triton backend lowers each registered operator: its one table.

The registry (``blockbuster.ir.ops.OPS``, ``blockbuster.ir.combiners.COMBINERS``) says
what an operator is; this module says only what it becomes in Triton. Elementwise
operators are expression templates over whole blocks (``{0}``, ``{1}``, ``{2}`` are
the operands' Triton values, a scalar broadcasts; ``{shape}`` is the result's padded
shape). ``INF``/``NAN`` and the reductions' ``sum_combine``/``max_combine`` are defined
by the generated module; ``max``/``min`` and the
max reductions propagate NaN, like ``np.maximum``/``np.max``. Everything is inline
(a call of a ``@triton.jit`` helper costs milliseconds under the interpreter). Block operators, leaves and
binders are lowered by ``codegen/expressions.py``; they are listed here with what
lowers them, so this one place says what the backend supports
(``Backend.lowered_ops``); combiners are folded by ``codegen/combiners.py``.
"""

from __future__ import annotations


#: Inline (tl.sigmoid is a @triton.jit helper: a call costs milliseconds in the
#: interpreter). exp(-x) = inf for x < -88 gives 0, the limit.
_SIGMOID = "(1.0 / (1.0 + tl.exp(-{0})))"

ELEMENTWISE_CODE = {
    "neg": "(-{0})",
    "exp": "tl.exp({0})",
    "log": "tl.log({0})",
    "recip": "(1.0 / {0})",
    "sqrt": "tl.sqrt_rn({0})",
    "rsqrt": "(1.0 / tl.sqrt_rn({0}))",
    "square": "({0} * {0})",
    "abs": "tl.abs({0})",
    "silu": "({0} / (1.0 + tl.exp(-{0})))",
    "sigmoid": _SIGMOID,
    "ones": "tl.full({shape}, 1.0, tl.float32)",
    "relu": "tl.maximum({0}, 0.0)",
    "erf": "tl.erf({0})",
    # x / (1 + exp(-2u)), u = √(2/π)(x + 0.044715x³): the reference's form
    "gelu_tanh": "({0} / (1.0 + tl.exp(-1.5957691216057308 * ({0} + 0.044715 * {0} * {0} * {0}))))",
    "sin": "tl.sin({0})",
    "cos": "tl.cos({0})",
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "max": "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "min": "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "lt": "tl.where({0} < {1}, 1.0, 0.0)",
    "le": "tl.where({0} <= {1}, 1.0, 0.0)",
    "gt": "tl.where({0} > {1}, 1.0, 0.0)",
    "ge": "tl.where({0} >= {1}, 1.0, 0.0)",
    "eq": "tl.where({0} == {1}, 1.0, 0.0)",
    "ne": "tl.where({0} != {1}, 1.0, 0.0)",
    "where": "tl.where({0} != 0.0, {1}, {2})",
}



def _tanh_lines(x: str, fresh) -> tuple[list[str], str]:
    # sign(x)(1 - e)/(1 + e), e = exp(-2|x|), overflows nowhere; below |x| = 1/8 its
    # cancellation would cost digits, and the Taylor series to x^7 is exact to 4e-10.
    a, e, x2, r = fresh("a"), fresh("e"), fresh("x2"), fresh("tanh")
    return [f"{a} = tl.abs({x})",
            f"{e} = tl.exp(-2.0 * {a})",
            f"{x2} = {x} * {x}",
            f"{r} = tl.where({a} < 0.125, {x} * (1.0 + {x2} * (-0.3333333333333333 + {x2} * "
            f"(0.13333333333333333 - 0.05396825396825397 * {x2}))), "
            f"tl.where({x} < 0.0, -1.0, 1.0) * (1.0 - {e}) / (1.0 + {e}))"], r


def _gelu_lines(x: str, fresh) -> tuple[list[str], str]:
    # x·½·erfc(-x/√2) in float64 (as the reference: -x/√2 must not round to float32,
    # and 1 + erf(x/√2) cancels in the left tail). erfc(z) for z > 4 is Numerical
    # Recipes' erfcc (relative error < 1.2e-7, the float32 result's half ulp); below,
    # 1 - erf(z) loses under 1e-8.
    w, z, t, r = fresh("w"), fresh("z"), fresh("t"), fresh("gelu")
    poly = "0.17087277"
    for c in ("-0.82215223", "1.48851587", "-1.13520398", "0.27886807", "-0.18628806",
              "0.09678418", "0.37409196", "1.00002368"):
        poly = f"({c} + {t} * {poly})"
    return [f"{w} = {x}.to(tl.float64)",
            f"{z} = -{w} * 0.7071067811865476",
            f"{t} = 1.0 / (1.0 + 0.5 * tl.abs({z}))",
            f"{r} = (0.5 * {w} * tl.where({z} > 4.0, "
            f"{t} * tl.exp(-{z} * {z} - 1.26551223 + {t} * {poly}), "
            f"1.0 - tl.erf({z}))).to(tl.float32)"], r


def _log1p_lines(x: str, fresh) -> tuple[list[str], str]:
    # Goldberg's log(u)·x/(u - 1), u = 1 + x rounded: the rounding of 1 + x cancels
    # out (libdevice's log1p is not available under the interpreter).
    u, d, r = fresh("u"), fresh("d"), fresh("log1p")
    return [f"{u} = 1.0 + {x}",
            f"{d} = {u} - 1.0",
            f"{r} = tl.where({d} == 0.0, {x}, tl.where({u} == {d}, tl.log({u}), "   # x ≥ 2^24, inf
            f"tl.log({u}) * ({x} / tl.where({d} == 0.0, 1.0, {d}))))"], r


def _expm1_lines(x: str, fresh) -> tuple[list[str], str]:
    # Kahan's (u - 1)·x/log(u), u = exp(x), where exp(x) - 1 would cancel (|x| < ½);
    # beyond, exp(x) - 1 loses nothing (and overflows as exp does).
    u, k, r = fresh("u"), fresh("k"), fresh("expm1")
    return [f"{u} = tl.exp({x})",
            f"{k} = tl.where(tl.abs({x}) < 0.5, {u}, 2.0)",
            f"{r} = tl.where({k} == 1.0, {x}, tl.where(tl.abs({x}) < 0.5, "
            f"({k} - 1.0) * ({x} / tl.log({k})), {u} - 1.0))"], r


#: Elementwise operators of several statements: ``(operand, fresh) -> (lines,
#: result)``, ``fresh(stem)`` naming each local.
ELEMENTWISE_LINES = {"tanh": _tanh_lines, "gelu": _gelu_lines, "log1p": _log1p_lines,
                     "expm1": _expm1_lines}

#: Block operators -> the function of ``codegen/expressions.py`` that lowers them.
BLOCK_CODE = {
    "dot": "emit_dot",
    "rowsum": "emit_inblock", "rowmax": "emit_inblock",
    "colsum": "emit_inblock", "colmax": "emit_inblock",
    "vecsum": "emit_inblock", "vecmax": "emit_inblock",
    "rowscale": "emit_broadcast", "rowshift": "emit_broadcast",
    "colscale": "emit_broadcast", "colshift": "emit_broadcast", "outer": "emit_broadcast",
    "keep_ge": "emit_keep_ge", "transpose": "emit_transpose", "relabel": "emit_relabel",
    "rotate_half": "emit_rotate_half",
}

#: Leaves and binders -> what lowers them.
STRUCTURAL_CODE = {
    "load": "emit_load", "const": "emit_const", "pos": "emit_pos", "runmax": "emit_runmax",
    "proj": "emit_proj", "get": "emit_get", "map": "emit_map", "reduce": "emit_reduce",
}

LOWERED_OPS = frozenset(ELEMENTWISE_CODE) | frozenset(ELEMENTWISE_LINES) | frozenset(BLOCK_CODE) | frozenset(STRUCTURAL_CODE)

#: A NaN-propagating max of ``{x}`` (a name) along ``axis``: tl.max drops NaN on GPUs.
#: (A tl.reduce with a custom combiner would not, but the interpreter runs it one
#: element at a time.)
MAX_ALONG = ("tl.where(tl.reduce(tl.where({{x}} != {{x}}, 1.0, 0.0), {axis}, sum_combine) > 0.0, "
             "NAN, tl.reduce({{x}}, {axis}, max_combine))")


def row_sum(x: str, axis: int = 1) -> str:
    """The sum of ``x`` along ``axis``. ``tl.reduce`` with Triton's own combiner (the
    module's ``sum_combine``) rather than ``tl.sum``: the interpreter runs both as one
    NumPy sum, but a call of the ``@triton.jit`` ``tl.sum`` costs it ~3 ms more."""
    return f"tl.reduce({x}, {axis}, sum_combine)"

#: In-block reductions: (axis reduced, fill of masked elements, Triton reduction).
INBLOCK = {
    "rowsum": (1, "0.0", row_sum("{x}", 1)),
    "rowmax": (1, "-INF", MAX_ALONG.format(axis=1)),
    "colsum": (0, "0.0", row_sum("{x}", 0)),
    "colmax": (0, "-INF", MAX_ALONG.format(axis=0)),
    "vecsum": (0, "0.0", row_sum("{x}", 0)),          # a vector to a number
    "vecmax": (0, "-INF", MAX_ALONG.format(axis=0)),
}

#: Broadcasts of a vector across a block: the Triton expression.
BROADCAST = {
    "rowscale": "({0}[:, None] * {1})",
    "rowshift": "({1} + {0}[:, None])",
    "colscale": "({1} * {0}[None, :])",
    "colshift": "({1} + {0}[None, :])",
    "outer": "({0}[:, None] * {1}[None, :])",
}
