"""How the Triton backend lowers each registered operator: its one table.

The registry (``blockbuster.ir.ops.OPS``, ``blockbuster.ir.combiners.COMBINERS``) says
what an operator is; this module says only what it becomes in Triton. Elementwise
operators are expression templates over whole blocks (``{0}``, ``{1}``, ``{2}`` are
the operands' Triton values, a scalar broadcasts; ``{shape}`` is the result's padded
shape). ``INF``/``NAN`` are defined by the generated module; ``max``/``min`` and the
max reductions propagate NaN, like ``np.maximum``/``np.max``. Everything is inline
(a call of a ``@triton.jit`` helper costs milliseconds under the interpreter). Block operators, leaves and
binders are lowered by ``codegen/expressions.py``; they are listed here with what
lowers them, so this one place says what the backend supports
(``Backend.lowered_ops``); combiners are folded by ``codegen/combiners.py``.
"""

from __future__ import annotations

from blockbuster.ir.ops import OPS

_SIGMOID = "tl.sigmoid({0})"

ELEMENTWISE_CODE = {
    "neg": "(-{0})",
    "exp": "tl.exp({0})",
    "log": "tl.log({0})",
    "recip": "(1.0 / {0})",
    "sqrt": "tl.sqrt_rn({0})",
    "rsqrt": "(1.0 / tl.sqrt_rn({0}))",
    "square": "({0} * {0})",
    "abs": "tl.abs({0})",
    "silu": "({0} * tl.sigmoid({0}))",
    "sigmoid": _SIGMOID,
    # tanh(x) = sign(x)(1 - e)/(1 + e), e = exp(-2|x|): no overflow for any x.
    "tanh": "tl.where({0} < 0.0, -1.0, 1.0) * (1.0 - tl.exp(-2.0 * tl.abs({0}))) "
            "/ (1.0 + tl.exp(-2.0 * tl.abs({0})))",
    "ones": "tl.full({shape}, 1.0, tl.float32)",
    "relu": "tl.maximum({0}, 0.0)",
    "erf": "tl.erf({0})",
    # x·½(1 + erf(x/√2))
    "gelu": "(0.5 * {0} * (1.0 + tl.erf({0} * 0.7071067811865476)))",
    # x / (1 + exp(-2u)), u = √(2/π)(x + 0.044715x³): the reference's form
    "gelu_tanh": "({0} / (1.0 + tl.exp(-1.5957691216057308 * ({0} + 0.044715 * {0} * {0} * {0}))))",
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

#: Block operators -> the function of ``codegen/expressions.py`` that lowers them.
BLOCK_CODE = {
    "dot": "emit_dot",
    "rowsum": "emit_inblock", "rowmax": "emit_inblock",
    "colsum": "emit_inblock", "colmax": "emit_inblock",
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

LOWERED_OPS = frozenset(ELEMENTWISE_CODE) | frozenset(BLOCK_CODE) | frozenset(STRUCTURAL_CODE)

#: A NaN-propagating max of ``{x}`` (a name) along ``axis``: tl.max drops NaN on GPUs.
#: (A tl.reduce with a custom combiner would not, but the interpreter runs it one
#: element at a time.)
MAX_ALONG = ("tl.where(tl.max(tl.where({{x}} != {{x}}, 1.0, 0.0), axis={axis}) > 0.0, NAN, "
             "tl.max({{x}}, axis={axis}))")

#: In-block reductions: (axis reduced, fill of masked elements, Triton reduction).
INBLOCK = {
    "rowsum": (1, "0.0", "tl.sum({x}, axis=1)"),
    "rowmax": (1, "-INF", MAX_ALONG.format(axis=1)),
    "colsum": (0, "0.0", "tl.sum({x}, axis=0)"),
    "colmax": (0, "-INF", MAX_ALONG.format(axis=0)),
}

#: Broadcasts of a vector across a block: the Triton expression.
BROADCAST = {
    "rowscale": "({0}[:, None] * {1})",
    "rowshift": "({1} + {0}[:, None])",
    "colscale": "({1} * {0}[None, :])",
    "colshift": "({1} + {0}[None, :])",
    "outer": "({0}[:, None] * {1}[None, :])",
}
