"""Every block operator on every backend against NumPy written from the math.

Sizes are deliberately not multiples of the block sizes, so every test also runs
ragged last blocks. Expected values are computed in float64 from the same inputs.
"""

import math

import numpy as np
import pytest

from blockbuster.backends.reference import backend as reference
from blockbuster.ir.ops import BINARY, ELEMENTWISE, OPS, UNARY

ELEMENTWISE_PROGRAM = """
program u
dim M = 7 block 3
dim N = 5 block 2
input X[M, N]
input Z[M, N]
input W[M, N]
output Y[M, N]
kernel k for i in M, j in N:
  Y[i, j] = {expr}
"""

_erf = np.vectorize(math.erf, otypes=[float])


def _mask(f):
    return lambda a, b: f(a, b).astype(float)


# op -> its float64 semantics, written from the math (not from the code under test).
MATH = {
    "neg": lambda x: -x,
    "exp": np.exp,
    "log": np.log,
    "recip": lambda x: 1.0 / x,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "square": lambda x: x * x,
    "abs": np.abs,
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "ones": np.ones_like,
    "relu": lambda x: np.where(x > 0, x, 0.0),
    "erf": _erf,
    "gelu": lambda x: x * 0.5 * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                     * (x + 0.044715 * x ** 3))),
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum,
    "lt": _mask(np.less), "le": _mask(np.less_equal), "gt": _mask(np.greater),
    "ge": _mask(np.greater_equal), "eq": _mask(np.equal), "ne": _mask(np.not_equal),
    "where": lambda c, a, b: np.where(c != 0, a, b),
}
# float32 relative tolerance where the backend's formula differs from the oracle's
# (gelu_tanh: exp of a float32 cubic, ~|u| ulps).
RTOL32 = {"gelu_tanh": 1e-5}
COMPARISONS = ["lt", "le", "gt", "ge", "eq", "ne"]
OPERANDS = "XZW"


def f32(a):
    """The float32 inputs, widened back: expected values use exactly what was run."""
    return np.asarray(a, np.float32).astype(np.float64)


def call(op, *operands):
    return f"{op}({', '.join(operands)})"


def inputs(rng, op, shape=(7, 5)):
    """Operands for ``op``: positive for a positive-domain operator, integral-valued
    (so that ties occur) for a comparison, else normal."""
    if OPS[op].domain == "positive":
        return [f32(rng.uniform(0.5, 3.0, shape)) for _ in range(OPS[op].arity)]
    if op in COMPARISONS or op == "where":
        return [f32(rng.integers(-2, 3, shape)) for _ in range(OPS[op].arity)]
    return [f32(rng.normal(0, 2, shape)) for _ in range(OPS[op].arity)]


def run_op(run, op, args, dtype=np.float32):
    names = OPERANDS[: len(args)]
    given = dict(zip(OPERANDS, args + [args[0]] * (3 - len(args))))
    return run(ELEMENTWISE_PROGRAM.format(expr=call(op, *(f"{n}[i, j]" for n in names))),
               dtype=dtype, **given)["Y"]


def test_every_elementwise_operator_of_the_registry_has_an_oracle_here():
    assert set(MATH) == set(ELEMENTWISE)
    assert set(UNARY) | set(BINARY) <= set(ELEMENTWISE)


@pytest.mark.parametrize("op", ELEMENTWISE)
def test_elementwise_float32(run, rng, op):
    args = inputs(rng, op)
    out = run_op(run, op, args)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, MATH[op](*args), rtol=RTOL32.get(op, 2e-6), atol=1e-6)


@pytest.mark.parametrize("op", ELEMENTWISE)
def test_elementwise_float64(run, rng, op):
    """The float64 helpers of a backend (a separate code path for some)."""
    args = [rng.normal(0, 2, a.shape) if OPS[op].domain == "real" and op not in COMPARISONS
            and op != "where" else a for a in inputs(rng, op)]
    out = run_op(run, op, args, dtype=np.float64)
    np.testing.assert_allclose(out, MATH[op](*args), rtol=1e-9, atol=1e-10)


# Large magnitudes and the edges of overflow; what overflows must overflow as in the
# reference (to the same infinity, or the same NaN).
LARGE = np.array([-1e4, -1e3, -103.0, -89.0, -88.0, -20.0, -6.0, -1e-3, 0.0, 1e-30,
                  1e-3, 6.0, 20.0, 88.0, 88.8, 89.0, 103.0, 1e3, 5e3, 1e4])
LARGE_POSITIVE = np.array([1e-30, 1e-20, 1e-6, 1e-3, 0.5, 1.0, 3.0, 1e2, 1e3, 1e4,
                           3e4, 1e6, 1e10, 1e20, 1e30, 0.0, 2.0, 7.0, 5e3, 1e-10])


@pytest.mark.parametrize("op", UNARY)
def test_unary_at_large_magnitudes_overflows_like_the_reference(run, op):
    x = f32((LARGE_POSITIVE if OPS[op].domain == "positive" else LARGE).reshape(4, 5))
    x = np.resize(x, (7, 5))
    out = run_op(run, op, [x])
    ref = reference.compile(_program(op), dtype=np.float32)(X=x, Z=x, W=x)["Y"]
    np.testing.assert_array_equal(np.isfinite(out), np.isfinite(ref))
    np.testing.assert_array_equal(out[~np.isfinite(out)], ref[~np.isfinite(ref)])
    with np.errstate(all="ignore"):
        expected = MATH[op](x).astype(np.float32)      # float32 overflow, as run
    np.testing.assert_allclose(out, expected, rtol=RTOL32.get(op, 2e-6), atol=1e-30)


def _program(op):
    from helpers_conformance import program
    return program(ELEMENTWISE_PROGRAM.format(expr=call(op, "X[i, j]")))


def test_log_of_zero_and_of_negatives(run):
    x = np.resize(f32([0.0, -1.0, 1.0, np.inf, 1e-30]), (7, 5))
    out = run_op(run, "log", [x])
    with np.errstate(all="ignore"):
        expected = np.log(x)
    np.testing.assert_allclose(out, expected, rtol=2e-6)     # -inf and NaN where they belong


@pytest.mark.parametrize("op", ["sigmoid", "silu"])
def test_sigmoid_and_silu_are_finite_and_accurate_far_from_zero(run, op):
    x = f32(np.array([-80.0, -30.0, -5.0, 0.0, 5.0, 30.0, 80.0] * 5).reshape(7, 5))
    out = run_op(run, op, [x])
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, MATH[op](x), rtol=1e-5, atol=0)


@pytest.mark.parametrize("op", BINARY)
def test_binary_broadcasts_a_scalar_on_either_side(run, rng, op):
    x = f32(rng.uniform(0.5, 3, (7, 5)))
    x[0, :2] = 1.75                                    # ties, for the comparisons
    left = run(ELEMENTWISE_PROGRAM.format(expr=f"{op}(X[i, j], 1.75)"), X=x, Z=x, W=x)["Y"]
    right = run(ELEMENTWISE_PROGRAM.format(expr=f"{op}(1.75, X[i, j])"), X=x, Z=x, W=x)["Y"]
    np.testing.assert_allclose(left, MATH[op](x, 1.75), rtol=2e-6)
    np.testing.assert_allclose(right, MATH[op](1.75, x), rtol=2e-6)
    assert left.dtype == right.dtype == np.float32


@pytest.mark.parametrize("expr, math_", [
    ("where(X[i, j], 1.5, Z[i, j])", lambda x, z, w: np.where(x != 0, 1.5, z)),
    ("where(X[i, j], Z[i, j], -2.5)", lambda x, z, w: np.where(x != 0, z, -2.5)),
    ("where(X[i, j], 1.5, -2.5)", lambda x, z, w: np.where(x != 0, 1.5, -2.5)),
    ("where(0.0, Z[i, j], W[i, j])", lambda x, z, w: w),
    ("where(2.0, Z[i, j], W[i, j])", lambda x, z, w: z),
    ("where(gt(Z[i, j], W[i, j]), Z[i, j], W[i, j])", lambda x, z, w: np.maximum(z, w)),
    ("where(le(Z[i, j], 0.0), 0.0, Z[i, j])", lambda x, z, w: np.maximum(z, 0.0)),
    ("mul(X[i, j], where(ne(X[i, j], X[i, j]), 0.0, 1.0))", lambda x, z, w: x),
])
def test_where_broadcasts_scalars_and_selects_with_comparisons(run, rng, expr, math_):
    x = f32(rng.integers(-1, 2, (7, 5)))
    z, w = f32(rng.normal(size=(7, 5))), f32(rng.normal(size=(7, 5)))
    out = run(ELEMENTWISE_PROGRAM.format(expr=expr), X=x, Z=z, W=w)["Y"]
    np.testing.assert_array_equal(out, math_(x, z, w).astype(np.float32))


def test_comparisons_and_where_on_nan(run):
    x = np.resize(f32([np.nan, 1.0, -np.inf, np.inf, 0.0]), (7, 5))
    z = np.resize(f32([np.nan, np.nan, -np.inf, 1.0, -0.0]), (7, 5))
    for op in COMPARISONS:
        out = run(ELEMENTWISE_PROGRAM.format(expr=f"{op}(X[i, j], Z[i, j])"), X=x, Z=z, W=z)["Y"]
        np.testing.assert_array_equal(out, MATH[op](x, z), err_msg=op)
    out = run(ELEMENTWISE_PROGRAM.format(expr="where(X[i, j], 1.0, 2.0)"), X=x, Z=z, W=z)["Y"]
    np.testing.assert_array_equal(out, np.where(x != 0, 1.0, 2.0))   # NaN selects a


BROADCAST = """
program b
dim M = 7 block 3
dim N = 5 block 2
input X[M, N]
input R[M]
input C[N]
output Y[M, N]
kernel k for i in M, j in N:
  Y[i, j] = {expr}
"""


@pytest.mark.parametrize("expr, math", [
    ("rowscale(R[i], X[i, j])", lambda x, r, c: r[:, None] * x),
    ("rowshift(R[i], X[i, j])", lambda x, r, c: x + r[:, None]),
    ("colscale(C[j], X[i, j])", lambda x, r, c: x * c[None, :]),
    ("colshift(C[j], X[i, j])", lambda x, r, c: x + c[None, :]),
    ("outer(R[i], C[j])", lambda x, r, c: np.outer(r, c)),
    ("transpose(transpose(X[i, j]))", lambda x, r, c: x),
    ("sub(X[i, j], outer(R[i], C[j]))", lambda x, r, c: x - np.outer(r, c)),
    ("mul(-2.0, rowshift(neg(R[i]), X[i, j]))", lambda x, r, c: -2.0 * (x - r[:, None])),
])
def test_row_and_column_broadcasts(run, rng, expr, math):
    x, r, c = f32(rng.normal(size=(7, 5))), f32(rng.normal(size=7)), f32(rng.normal(size=5))
    out = run(BROADCAST.format(expr=expr), X=x, R=r, C=c)["Y"]
    np.testing.assert_allclose(out, math(x, r, c), rtol=2e-6, atol=1e-6)


def test_dot_and_dot_with_transpose(run, rng):
    a, b = f32(rng.normal(size=(7, 10))), f32(rng.normal(size=(10, 5)))
    out = run("""
        program mm
        dim M = 7 block 3
        dim K = 10 block 4
        dim N = 5 block 2
        input A[M, K]
        input B[K, N]
        input BT[N, K]
        output C[M, N]
        output CT[M, N]
        kernel k for i in M, j in N:
          C[i, j] = sum(k in K: dot(A[i, k], B[k, j]))
          CT[i, j] = sum(k in K: dot(A[i, k], transpose(BT[j, k])))
        """, A=a, B=b, BT=b.T.copy())
    np.testing.assert_allclose(out["C"], a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["CT"], a @ b, rtol=1e-5, atol=1e-5)


def test_transpose_store(run, rng):
    x = f32(rng.normal(size=(7, 5)))
    out = run("""
        program t
        dim M = 7 block 3
        dim N = 5 block 2
        input X[M, N]
        output Y[N, M]
        kernel k for j in N, i in M:
          Y[j, i] = transpose(X[i, j])
        """, X=x)["Y"]
    np.testing.assert_array_equal(out, x.T)


def test_row_and_column_reductions(run, rng):
    x = f32(rng.normal(size=(7, 5)))
    out = run("""
        program r
        dim M = 7 block 3
        dim N = 5 block 2
        input X[M, N]
        output RS[M]
        output RM[M]
        output CS[N]
        output CM[N]
        kernel rows for i in M:
          RS[i] = sum(j in N: rowsum(X[i, j]))
          RM[i] = max(j in N: rowmax(X[i, j]))
        kernel cols for j in N:
          CS[j] = sum(i in M: colsum(X[i, j]))
          CM[j] = max(i in M: colmax(X[i, j]))
        """, X=x)
    np.testing.assert_allclose(out["RS"], x.sum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["RM"], x.max(axis=1))
    np.testing.assert_allclose(out["CS"], x.sum(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["CM"], x.max(axis=0))


def test_pos_and_keep_ge_build_a_causal_mask(run, rng):
    x = f32(rng.normal(size=(7, 9)))
    out = run("""
        program mask
        dim S = 7 block 3
        dim T = 9 block 4
        input X[S, T]
        output Y[S, T]
        output P[S]
        output Q[T]
        kernel k for i in S, j in T:
          Y[i, j] = keep_ge(pos(S, i), pos(T, j), X[i, j])
        kernel p for i in S:
          P[i] = pos(S, i)
        kernel q for j in T:
          Q[j] = pos(T, j)
        """, X=x)
    rows, cols = np.arange(7)[:, None], np.arange(9)[None, :]
    np.testing.assert_array_equal(out["Y"], np.where(rows >= cols, x, -np.inf))
    np.testing.assert_array_equal(out["P"], np.arange(7))
    np.testing.assert_array_equal(out["Q"], np.arange(9))


def test_constants_including_infinities(run, rng):
    x = f32(rng.normal(size=(7, 5)))
    out = run(ELEMENTWISE_PROGRAM.format(expr="max(min(mul(X[i, j], -0.5), inf), -inf)"),
              X=x, Z=x, W=x)["Y"]
    np.testing.assert_allclose(out, -0.5 * x, rtol=1e-7)
