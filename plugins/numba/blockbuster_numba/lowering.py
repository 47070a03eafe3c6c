"""How the Numba backend lowers each registered operator: its one table.

The registry (``blockbuster.ir.ops.OPS``, ``blockbuster.ir.combiners.COMBINERS``) says
what an operator is; this module says only what it becomes here. Adding an
elementwise operator to this backend is one line of :data:`ELEMENTWISE_CODE`.

* Elementwise operators are scalar expression templates (``{0}``, ``{1}``, ``{2}``
  are the operands' element expressions; a scalar operand broadcasts) that the
  generator inlines into its loops. Helper names (``exp_``, ``silu_``, ...) resolve
  per dtype through :data:`.runtime.HELPERS`; ``ONE``, ``ZERO``, ``NEG_INF`` are
  constants of the generated module's dtype.
* Block operators with a loop structure of their own, leaves and binders are lowered
  by the generator; they are listed with the name of what lowers them, so that this
  one place says which operators the backend supports (``Backend.lowered_ops``; the
  conformance suite fails when a registered operator is missing here). Combiners
  are folded by ``codegen/reductions.py`` (its table ``COMBINE``).
"""

from __future__ import annotations

from blockbuster.ir.ops import OPS

from .runtime import HELPERS

ELEMENTWISE_CODE = {
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
    "tanh": "tanh_({0})",
    "ones": "ONE",
    "relu": "maximum_({0}, ZERO)",
    "erf": "math.erf({0})",
    "gelu": "gelu_({0})",
    "gelu_tanh": "gelu_tanh_({0})",
    "sin": "math.sin({0})",
    "cos": "math.cos({0})",
    "log1p": "math.log1p({0})",
    "expm1": "math.expm1({0})",
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "max": "maximum_({0}, {1})",
    "min": "minimum_({0}, {1})",
    "lt": "(ONE if {0} < {1} else ZERO)",
    "le": "(ONE if {0} <= {1} else ZERO)",
    "gt": "(ONE if {0} > {1} else ZERO)",
    "ge": "(ONE if {0} >= {1} else ZERO)",
    "eq": "(ONE if {0} == {1} else ZERO)",
    "ne": "(ONE if {0} != {1} else ZERO)",
    "where": "({1} if {0} != ZERO else {2})",
}

#: Block operators -> the generator code that lowers them.
BLOCK_CODE = {
    "dot": "emit_dot",
    "rowsum": "emit_inblock_reduce", "rowmax": "emit_inblock_reduce",
    "colsum": "emit_inblock_reduce", "colmax": "emit_inblock_reduce",
    "vecsum": "emit_vector_reduce", "vecmax": "emit_vector_reduce",
    "rowscale": "ew_op", "rowshift": "ew_op", "colscale": "ew_op", "colshift": "ew_op",
    "outer": "ew_op", "keep_ge": "ew_op", "transpose": "ew_op", "relabel": "ew_op",
    "rotate_half": "ew_op",
}

#: Leaves and binders -> the generator code that lowers them.
STRUCTURAL_CODE = {
    "load": "emit_load", "const": "const", "pos": "value", "runmax": "value",
    "proj": "value", "get": "emit_get", "map": "emit_map", "reduce": "emit_reduce",
}

LOWERED_OPS = frozenset(ELEMENTWISE_CODE) | frozenset(BLOCK_CODE) | frozenset(STRUCTURAL_CODE)

# Views of the tables by arity, as the generator reads them.
UNARY_CODE = {n: c for n, c in ELEMENTWISE_CODE.items() if OPS[n].arity == 1}
BINARY_CODE = {n: c for n, c in ELEMENTWISE_CODE.items() if OPS[n].arity == 2}
#: Elementwise operators of two or more operands (scalar operands broadcast).
NARY_CODE = {n: c for n, c in ELEMENTWISE_CODE.items() if OPS[n].arity >= 2}

#: In-block reductions: computed in the loop that materialises their operand.
INBLOCK = tuple(n for n, s in OPS.items() if s.kind in ("rowreduce", "colreduce"))

#: Operators cheap enough to recompute rather than store when a value is used twice
#: (the registry's ``cheap``: one arithmetic operation on values at hand).
CHEAP = frozenset(n for n, s in OPS.items() if s.cheap)

#: Names the generated module defines or imports; never used for locals.
MODULE_NAMES = {"np", "math", "njit", "prange", "DT", "ONE", "ZERO", "NEG_INF", "square_",
                "FASTMATH", "run", "KERNELS", "r", "c", "range", "min", "max", "abs", "len",
                "print", "inputs", "it",
                "THREADS", "parallel_for_", "numpy"} | set(HELPERS["float32"]) | set(HELPERS["float64"])
