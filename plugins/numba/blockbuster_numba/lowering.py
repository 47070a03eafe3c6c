"""How the Numba backend lowers each registered operator: one table entry per op.

Elementwise operators become scalar expression templates (``{0}``, ``{1}`` are the
operands' element expressions) that the generator inlines into its loops; helper
names (``exp_``, ``silu_``, ...) resolve per dtype through :data:`.runtime.HELPERS`.
Block operators with a loop structure of their own (``dot``, in-block reductions,
broadcasts, layout) are lowered by the generator's methods; they are listed here so
that one place says which operators this backend supports.
"""

from __future__ import annotations

#: In-block reductions: computed in the loop that materialises their operand.
INBLOCK = ("rowsum", "rowmax", "colsum", "colmax")

#: Elementwise operators cheap enough to recompute rather than store when a value
#: is used twice: one arithmetic operation on values already in registers or memory.
CHEAP = frozenset({"neg", "add", "sub", "mul", "max", "min", "rowscale", "rowshift",
                   "colscale", "colshift", "outer", "transpose", "pos"})

UNARY_CODE = {
    "neg": "(-{0})",
    "exp": "exp_({0})",
    "log": "math.log({0})",
    "recip": "(ONE / {0})",
    "sqrt": "math.sqrt({0})",
    "rsqrt": "(ONE / math.sqrt({0}))",
    "square": "square_({0})",
    "abs": "abs({0})",
    "silu": "silu_({0})",
    "sigmoid": "sigmoid_({0})",
    "tanh": "math.tanh({0})",
    "ones": "ONE",
}
BINARY_CODE = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "max": "maximum_({0}, {1})",
    "min": "minimum_({0}, {1})",
}

#: Names the generated module defines or imports; never used for locals.
MODULE_NAMES = {"np", "math", "njit", "prange", "DT", "ONE", "ZERO", "NEG_INF", "exp_",
                "sigmoid_", "silu_", "square_", "maximum_", "minimum_", "opaque_", "FASTMATH", "run", "KERNELS", "r", "c",
                 "range", "min", "max", "abs", "len", "print", "inputs", "it"}


