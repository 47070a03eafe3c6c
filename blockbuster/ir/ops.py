"""The operator registry: one entry per operator of block programs.

An entry (:class:`OpSpec`) is the single source of an operator's name, arity, kind,
shape rule, cost and reference (NumPy) semantics. The parser and the rule language
check arities here, the verifier types with :meth:`OpSpec.result_type`, the cost
model counts shapes and FLOPs with :meth:`OpSpec.result_axes` and
:meth:`OpSpec.flops_of`, and the reference interpreter runs ``OpSpec.reference``.
A backend adds only its lowering, in one table of its own (for Numba:
``blockbuster_numba.lowering``); ``tests/conformance/test_lowering_coverage.py``
fails when an operator here has no lowering in some installed backend.

Adding an elementwise operator is one :func:`elementwise` call below (name, arity,
reference function) plus one template line per backend.

Shapes are generic: ``result_axes(arg_axes)`` maps the operands' axis tuples to the
result's, whatever an axis is (a dimension name in the verifier, a ``(Dim, block
index)`` extent in the cost model, an ``Axis`` in a code generator)::

    OPS["dot"].result_axes([("M", "K"), ("K", "N")])  ->  ("M", "N")

It does not validate: :meth:`OpSpec.result_type` (the verifier's entry) first runs
the operator's ``check`` on the operand types, then builds the type from
``result_axes``.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import attrs

from ..errors import BackendError
from .types import SCALAR, ArrayType, BlockType, TupleType

Axes = tuple        # a tuple of per-axis objects: () scalar, (R,) vector, (R, C) block


class OpTypeError(Exception):
    """Raised by a type rule; the verifier adds which node and where."""


# --- typing preconditions (on BlockTypes; the verifier's part) -------------------------

def _block(t, what: str) -> BlockType:
    if not isinstance(t, BlockType):
        raise OpTypeError(f"{what} must be a block, vector or scalar, got {t}")
    return t


def _rank(t, rank: int, what: str) -> BlockType:
    t = _block(t, what)
    if len(t.axes) != rank:
        kind = {0: "a scalar", 1: "a vector", 2: "a 2-D block"}[rank]
        raise OpTypeError(f"{what} must be {kind}, got {t}")
    return t


_OPERAND = {1: ("operand",), 2: ("left operand", "right operand")}


def _check_elementwise(ts, attr):
    """Operands of one type; a scalar operand broadcasts against anything."""
    names = _OPERAND.get(len(ts), [f"operand {i + 1}" for i in range(len(ts))])
    ts = [_block(t, what) for t, what in zip(ts, names)]
    shaped = [t for t in ts if t.axes]
    for t in shaped[1:]:
        if t != shaped[0]:
            raise OpTypeError(f"operand types differ: {shaped[0]} vs {t}")


def _check_row_broadcast(ts, attr):
    s, a = _rank(ts[0], 1, "row vector"), _rank(ts[1], 2, "block")
    if s.axes[0] != a.axes[0]:
        raise OpTypeError(f"row vector along {s.axes[0]} does not match rows of {a}")


def _check_col_broadcast(ts, attr):
    v, a = _rank(ts[0], 1, "column vector"), _rank(ts[1], 2, "block")
    if v.axes[0] != a.axes[1]:
        raise OpTypeError(f"column vector along {v.axes[0]} does not match columns of {a}")


def _check_outer(ts, attr):
    _rank(ts[0], 1, "left vector"), _rank(ts[1], 1, "right vector")


def _check_dot(ts, attr):
    a, b = _rank(ts[0], 2, "left operand"), _rank(ts[1], 2, "right operand")
    if a.axes[1] != b.axes[0]:
        raise OpTypeError(f"dot contracts {a.axes[1]} with {b.axes[0]}: {a} x {b}")


def _check_one_block(ts, attr):
    _rank(ts[0], 2, "operand")


def _check_vector(ts, attr):
    _rank(ts[0], 1, "operand")


def _check_relabel(ts, attr):
    _rank(ts[0], 1, "positions vector")
    if len(_block(ts[1], "block").axes) != 1:   # a vector (one row) relabels its axis
        _rank(ts[1], 2, "block")


def _check_keep_ge(ts, attr):
    p, q = _rank(ts[0], 1, "row positions"), _rank(ts[1], 1, "column positions")
    a = _rank(ts[2], 2, "block")
    if (p.axes[0], q.axes[0]) != a.axes:
        raise OpTypeError(f"positions along ({p.axes[0]}, {q.axes[0]}) do not match {a}")


def _proj_type(ts, attr):
    t = ts[0]
    if not isinstance(t, TupleType):
        raise OpTypeError(f"proj needs a multi-output reduction, got {t}")
    if not 0 <= attr < len(t.items):
        raise OpTypeError(f"proj index {attr} out of range for {len(t.items)} outputs")
    return t.items[attr]


# --- shape rules (generic over what an axis is) ----------------------------------------

def broadcast_axes(args: Sequence[Axes]) -> Axes:
    """Elementwise: the axes of the first operand that is not a scalar (a scalar
    operand broadcasts), or ``()`` when all are scalars."""
    return next((a for a in args if a), ())


def _second(args):
    return args[1]


def _third(args):
    return args[2]


def _outer_axes(args):
    return (args[0][0], args[1][0])


def _dot_axes(args):
    return (args[0][0], args[1][1])


def _dot_work(args):
    return (args[0][0], args[0][1], args[1][1])     # R×K×C multiply-adds


def _transpose_axes(args):
    return tuple(args[0][::-1])


def _relabel_axes(args):
    return tuple(args[1][:-1]) + (args[0][0],)


def _rows(args):
    return tuple(args[0][:1])


def _cols(args):
    return tuple(args[0][1:2])


def _scalar_axes(args):
    return ()


def _first(args):
    return args[0]


# --- reference semantics of the block operators (NumPy) ---------------------------------

class _NumPy:
    """NumPy, imported on first use: ``import blockbuster`` stays light (the cost model
    reads this registry; only running a program needs NumPy). Hence every reference
    below is a function that looks ``np.<name>`` up when called."""

    def __getattr__(self, name):
        import numpy
        return getattr(numpy, name)


np = _NumPy()


def _sigmoid(x):
    return np.exp(-np.logaddexp(0, -x))  # no overflow for large |x|


def _math_ufunc(fn: Callable[[float], float]):
    """A NumPy function of one array from a ``math`` function of one float (NumPy has
    no erf): evaluated in double precision, rounded to the operand's dtype."""
    def apply(x):
        x = np.asarray(x)
        return np.asarray(np.frompyfunc(fn, 1, 1)(x), dtype=x.dtype)

    return apply


_erf = _math_ufunc(math.erf)
_erfc = _math_ufunc(math.erfc)
_SQRT_HALF = math.sqrt(0.5)
_GELU_TANH_2K = 2 * math.sqrt(2 / math.pi)    # 2·√(2/π)


def _gelu(x):
    # x·½(1 + erf(x/√2)) written ½x·erfc(-x/√2): no cancellation in 1 + erf for x < 0.
    # x/√2 in double: in the tail, erfc's relative error is ~z² times its argument's.
    x = np.asarray(x)
    wide = x.astype(np.float64) if x.dtype.itemsize < 8 else x
    return (0.5 * wide * _erfc(-wide * _SQRT_HALF)).astype(x.dtype)


def _gelu_tanh(x):
    # ½x(1 + tanh(u)), u = √(2/π)(x + 0.044715x³), is x·sigmoid(2u) = x / (1 + exp(-2u)):
    # the same function without the cancellation of 1 + tanh(u) for x < 0.
    dt = x.dtype
    u2 = np.asarray(_GELU_TANH_2K, dt) * (x + np.asarray(0.044715, dt) * x * x * x)
    return x / (np.asarray(1, dt) + np.exp(-u2))


def _compare(name):
    return lambda a, b: getattr(np, name)(a, b).astype(np.result_type(a, b))  # 0/1 mask


def _where(c, a, b):
    return np.where(c != 0, a, b).astype(np.result_type(a, b))


def _keep_ge(p, q, a):
    return np.where(p[:, None] >= q[None, :], a, np.asarray(-math.inf, a.dtype))


def _rotate_half(x):
    c = x.shape[1]
    if c % 2:
        raise BackendError(f"rotate_half needs an even number of columns, got {c}")
    return np.concatenate([-x[:, c // 2:], x[:, : c // 2]], axis=1)


def _relabel(p, a):
    if p.shape[0] != a.shape[-1]:
        raise BackendError(f"relabel: a block with {a.shape[-1]} columns cannot take "
                           f"{p.shape[0]} positions")
    return a


# --- the registry ------------------------------------------------------------------------

@attrs.frozen
class OpSpec:
    """One operator.

    ``kind``: ``elementwise`` (any arity; scalar operands broadcast), ``broadcast``
    (a row/column vector across a block), ``dot``, ``layout``, ``permute``,
    ``relabel``, ``rowreduce``/``colreduce`` (in-block), ``vecreduce`` (a vector to
    a number), ``mask``; ``leaf``,
    ``structural`` and ``pattern`` entries are typed and run by the verifier and the
    backends themselves (they know arrays, dims and scopes).

    ``flops`` counts per element of ``work_axes(arg_axes)`` (default: the result's
    axes); ``cheap``: one arithmetic operation on values at hand, so a code generator
    may recompute it at each use rather than store it. ``domain``: ``real`` when the
    operator is defined on every real operand (random tests may feed it anything),
    ``positive`` when tests should feed it positive values (log, sqrt, recip...).
    """

    name: str
    arity: int | None                                  # None: variadic (reduce)
    kind: str
    result_axes: Callable[[Sequence[Axes]], Axes] | None = None
    check: Callable | None = None                      # (arg types, attr) -> None | raise
    flops: float = 0
    work_axes: Callable[[Sequence[Axes]], Axes] | None = None
    cheap: bool = False
    reference: Callable | None = None                  # NumPy function of the arg values
    domain: str = "real"
    typing: Callable | None = None                     # a whole type rule (proj)

    def result_type(self, arg_types, attr=None):
        """The verifier's type rule: operand checks, then :attr:`result_axes`."""
        if self.typing is not None:
            return self.typing(arg_types, attr)
        if self.check is not None:
            self.check(arg_types, attr)
        else:
            for t in arg_types:
                _block(t, "operand")
        return BlockType(tuple(self.result_axes([t.axes for t in arg_types])))

    def flops_of(self, arg_axes: Sequence[Axes], count: Callable[[Axes], int]) -> int:
        """FLOPs of one execution; ``count(axes)`` gives the elements of an axis tuple
        (summed over whatever iterations the caller counts)."""
        if not self.flops:
            return 0
        work = (self.work_axes or self.result_axes)(arg_axes)
        n = count(tuple(work))
        return n * self.flops if isinstance(self.flops, int) else int(n * self.flops)


OPS: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    if spec.name in OPS:
        raise ValueError(f"operator '{spec.name}' is registered twice")
    OPS[spec.name] = spec
    return spec


def elementwise(name: str, arity: int, reference: Callable, *, cheap: bool = False,
                domain: str = "real", flops: int = 1) -> OpSpec:
    """Register an elementwise operator: one result element per operand element,
    scalar operands broadcast. Transcendental functions count one FLOP per element
    like ``add`` (the roofline is memory-bound for them)."""
    return register(OpSpec(name, arity, "elementwise", broadcast_axes, _check_elementwise,
                           flops, cheap=cheap, reference=reference, domain=domain))


# Elementwise, one operand.
elementwise("neg", 1, lambda x: np.negative(x), cheap=True)
elementwise("exp", 1, lambda x: np.exp(x))
elementwise("log", 1, lambda x: np.log(x), domain="positive")
elementwise("recip", 1, lambda x: 1 / x, domain="positive")
elementwise("sqrt", 1, lambda x: np.sqrt(x), domain="positive")
elementwise("rsqrt", 1, lambda x: 1 / np.sqrt(x), domain="positive")
elementwise("square", 1, lambda x: np.square(x))
elementwise("abs", 1, lambda x: np.abs(x))
elementwise("silu", 1, lambda x: x * _sigmoid(x))
elementwise("sigmoid", 1, _sigmoid)
elementwise("tanh", 1, lambda x: np.tanh(x))
elementwise("ones", 1, lambda x: np.ones_like(x))              # ones(x): 1 everywhere, x's shape (counts)
elementwise("relu", 1, lambda x: np.maximum(x, np.asarray(0, x.dtype)), cheap=True)
elementwise("erf", 1, _erf)
elementwise("gelu", 1, _gelu)                      # x·½(1 + erf(x/√2))
elementwise("gelu_tanh", 1, _gelu_tanh)            # ½x(1 + tanh(√(2/π)(x + 0.044715x³)))
elementwise("sin", 1, lambda x: np.sin(x))          # sinusoidal / rotary tables of runtime positions
elementwise("cos", 1, lambda x: np.cos(x))
# log(1 + x) and exp(x) - 1 without the cancellation of 1 + x / exp(x) - 1 at tiny x
# (softplus, log-sigmoid and mish tails; ELU's negative side).
elementwise("log1p", 1, lambda x: np.log1p(x), domain="positive")
elementwise("expm1", 1, lambda x: np.expm1(x))
# Elementwise, two operands (``max``/``min`` are NaN-propagating, as np.maximum).
elementwise("add", 2, lambda a, b: np.add(a, b), cheap=True)
elementwise("sub", 2, lambda a, b: np.subtract(a, b), cheap=True)
elementwise("mul", 2, lambda a, b: np.multiply(a, b), cheap=True)
elementwise("div", 2, lambda a, b: np.divide(a, b))
elementwise("max", 2, lambda a, b: np.maximum(a, b), cheap=True)
elementwise("min", 2, lambda a, b: np.minimum(a, b), cheap=True)
# Comparisons: a 0/1 mask of the operands' type (NaN compares false, except ne).
elementwise("lt", 2, _compare("less"), cheap=True)
elementwise("le", 2, _compare("less_equal"), cheap=True)
elementwise("gt", 2, _compare("greater"), cheap=True)
elementwise("ge", 2, _compare("greater_equal"), cheap=True)
elementwise("eq", 2, _compare("equal"), cheap=True)
elementwise("ne", 2, _compare("not_equal"), cheap=True)
# where(c, a, b): a where c != 0, else b (a NaN condition selects a).
elementwise("where", 3, _where, cheap=True)

register(OpSpec("rowscale", 2, "broadcast", _second, _check_row_broadcast, 1, cheap=True,
                reference=lambda s, a: s[:, None] * a))
register(OpSpec("rowshift", 2, "broadcast", _second, _check_row_broadcast, 1, cheap=True,
                reference=lambda s, a: a + s[:, None]))
register(OpSpec("colscale", 2, "broadcast", _second, _check_col_broadcast, 1, cheap=True,
                reference=lambda v, a: a * v[None, :]))
register(OpSpec("colshift", 2, "broadcast", _second, _check_col_broadcast, 1, cheap=True,
                reference=lambda v, a: a + v[None, :]))
register(OpSpec("outer", 2, "broadcast", _outer_axes, _check_outer, 1, cheap=True,
                reference=lambda s, v: s[:, None] * v[None, :]))
register(OpSpec("dot", 2, "dot", _dot_axes, _check_dot, 2, _dot_work, reference=lambda a, b: np.matmul(a, b)))
register(OpSpec("transpose", 1, "layout", _transpose_axes, _check_one_block, cheap=True,
                reference=lambda a: a.T))
# Rotary embeddings (rotate-half convention): concat(-x2, x1) of the two halves of
# the block's columns (an even number of them). Not elementwise: a signed column
# permutation (linear; commutes with rowscale, not with column broadcasts).
register(OpSpec("rotate_half", 1, "permute", _first, _check_one_block, 0.5,
                reference=_rotate_half))
# relabel(p, a): the block ``a`` with its columns renamed to the dimension of the
# position vector ``p`` (e.g. ``pos(HD, d)``); the values are ``a`` unchanged, and
# the column extents must agree. It views one head-sized column block of a
# projection (dim QD or KD) as a head (dim HD) and back; ``p`` only names the type.
register(OpSpec("relabel", 2, "relabel", _relabel_axes, _check_relabel, reference=_relabel))
# In-block reductions: one FLOP per element of the operand.
for _name, _axes, _fn in (("rowsum", _rows, lambda a: a.sum(axis=1)),
                          ("rowmax", _rows, lambda a: a.max(axis=1)),
                          ("colsum", _cols, lambda a: a.sum(axis=0)),
                          ("colmax", _cols, lambda a: a.max(axis=0))):
    register(OpSpec(_name, 1, _name[:3] + "reduce", _axes, _check_one_block, 1, _first,
                    reference=_fn))
# A vector block reduced to one number: a reduction over a tensor's only tiled axis
# (the classes of a batch of pooled vectors, a softmax over them), its other axes
# iterated one index at a time.
for _name, _fn in (("vecsum", lambda a: a.sum(axis=-1)),
                   ("vecmax", lambda a: a.max(axis=-1))):
    register(OpSpec(_name, 1, "vecreduce", _scalar_axes, _check_vector, 1, _first,
                    reference=_fn))
register(OpSpec("keep_ge", 3, "mask", _third, _check_keep_ge, 1,   # a where p[r] >= q[c]
                reference=_keep_ge))                                # else -inf
register(OpSpec("proj", 1, "structural", typing=_proj_type))
# Leaves and binders: typed by the verifier and run by each backend itself, which
# know arrays, dims and scopes.
register(OpSpec("load", 0, "leaf"))
register(OpSpec("const", 0, "leaf"))
register(OpSpec("pos", 0, "leaf", cheap=True))
register(OpSpec("runmax", 0, "leaf"))
register(OpSpec("get", 1, "structural"))           # get(a, d): block d of a map array
register(OpSpec("pvar", 0, "pattern"))              # a rule's pattern variable
register(OpSpec("reduce", None, "structural"))
register(OpSpec("map", 1, "structural"))

#: Elementwise operators by arity (derived; the registry is the source).
UNARY = tuple(n for n, s in OPS.items() if s.kind == "elementwise" and s.arity == 1)
BINARY = tuple(n for n, s in OPS.items() if s.kind == "elementwise" and s.arity == 2)
ELEMENTWISE = tuple(n for n, s in OPS.items() if s.kind == "elementwise")

#: Operators every backend must lower (everything but a rule's pattern variables).
LOWERED = frozenset(n for n, s in OPS.items() if s.kind != "pattern")

#: Operators a user may write as ``name(args...)`` in a program or rule file.
CALLABLE = frozenset(n for n, s in OPS.items()
                     if s.kind not in ("leaf", "structural", "pattern")) | {"proj"}


def check_arity(name: str, nargs: int) -> str | None:
    """An error message if ``name`` is unknown or given the wrong number of arguments."""
    spec = OPS.get(name)
    if spec is None or (spec.kind in ("leaf", "structural", "pattern") and name != "proj"):
        import difflib
        close = difflib.get_close_matches(name, sorted(CALLABLE), n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        return (f"unknown operator '{name}' ({hint}the operators are listed in "
                f"rulesets/README.md)")
    if spec.arity is not None and spec.arity != nargs:
        plural = "s" if spec.arity != 1 else ""
        return f"operator '{name}' takes {spec.arity} argument{plural}, got {nargs}"
    return None


__all__ = ["OPS", "UNARY", "BINARY", "ELEMENTWISE", "LOWERED", "CALLABLE", "OpSpec",
           "OpTypeError", "broadcast_axes", "check_arity", "elementwise", "register",
           "SCALAR", "ArrayType", "BlockType", "TupleType"]
