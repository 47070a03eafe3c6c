"""Every block operator on every backend against NumPy written from the math.

Sizes are deliberately not multiples of the block sizes, so every test also runs
ragged last blocks. Expected values are computed in float64 from the same inputs.
"""

import numpy as np
import pytest

from blockbuster.ir.ops import BINARY, UNARY

ELEMENTWISE = """
program u
dim M = 7 block 3
dim N = 5 block 2
input X[M, N]
input Z[M, N]
output Y[M, N]
kernel k for i in M, j in N:
  Y[i, j] = {expr}
"""

# op -> (float64 semantics, whether the input must be positive)
UNARY_MATH = {
    "neg": (lambda x: -x, False),
    "exp": (np.exp, False),
    "log": (np.log, True),
    "recip": (lambda x: 1.0 / x, True),
    "sqrt": (np.sqrt, True),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), True),
    "square": (lambda x: x * x, False),
    "abs": (np.abs, False),
    "silu": (lambda x: x / (1.0 + np.exp(-x)), False),
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), False),
    "tanh": (np.tanh, False),
    "ones": (np.ones_like, False),
}

BINARY_MATH = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum,
}


def f32(a):
    """The float32 inputs, widened back: expected values use exactly what was run."""
    return np.asarray(a, np.float32).astype(np.float64)


def test_every_operator_of_the_ir_is_covered_here():
    assert set(UNARY_MATH) == set(UNARY)
    assert set(BINARY_MATH) == set(BINARY)


@pytest.mark.parametrize("op", sorted(UNARY_MATH))
def test_unary(run, rng, op):
    math, positive = UNARY_MATH[op]
    x = rng.uniform(0.5, 3.0, (7, 5)) if positive else rng.normal(0, 2, (7, 5))
    x = f32(x)
    out = run(ELEMENTWISE.format(expr=f"{op}(X[i, j])"), X=x, Z=x)["Y"]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, math(x), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["sigmoid", "silu"])
def test_sigmoid_and_silu_are_finite_and_accurate_far_from_zero(run, op):
    x = f32(np.array([-80.0, -30.0, -5.0, 0.0, 5.0, 30.0, 80.0] * 5).reshape(7, 5))
    out = run(ELEMENTWISE.format(expr=f"{op}(X[i, j])"), X=x, Z=x)["Y"]
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, UNARY_MATH[op][0](x), rtol=1e-5, atol=0)


@pytest.mark.parametrize("op", sorted(BINARY_MATH))
def test_binary_on_blocks(run, rng, op):
    x, z = f32(rng.uniform(0.5, 3, (7, 5))), f32(rng.uniform(-3, 3, (7, 5)))
    out = run(ELEMENTWISE.format(expr=f"{op}(X[i, j], Z[i, j])"), X=x, Z=z)["Y"]
    np.testing.assert_allclose(out, BINARY_MATH[op](x, z), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("op", sorted(BINARY_MATH))
def test_binary_broadcasts_a_scalar_on_either_side(run, rng, op):
    x = f32(rng.uniform(0.5, 3, (7, 5)))
    left = run(ELEMENTWISE.format(expr=f"{op}(X[i, j], 1.75)"), X=x, Z=x)["Y"]
    right = run(ELEMENTWISE.format(expr=f"{op}(1.75, X[i, j])"), X=x, Z=x)["Y"]
    np.testing.assert_allclose(left, BINARY_MATH[op](x, 1.75), rtol=2e-6)
    np.testing.assert_allclose(right, BINARY_MATH[op](1.75, x), rtol=2e-6)
    assert left.dtype == right.dtype == np.float32


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
    out = run(ELEMENTWISE.format(expr="max(min(mul(X[i, j], -0.5), inf), -inf)"), X=x, Z=x)["Y"]
    np.testing.assert_allclose(out, -0.5 * x, rtol=1e-7)
