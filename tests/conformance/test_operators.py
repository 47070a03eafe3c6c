"""Every block operator on every backend against NumPy written from the math.

Sizes are deliberately not multiples of the block sizes, so every test also runs
ragged last blocks. Expected values are computed in float64 from the same inputs.
The elementwise operators (every one the registry has) are stored by one kernel per
program, so that a backend compiles a few programs, not one per operator.
"""

import math

import numpy as np
import pytest

from blockbuster.backends.reference import backend as reference
from blockbuster.ir.ops import BINARY, ELEMENTWISE, OPS, UNARY

from helpers_conformance import program

SHAPE = (7, 5)

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
    "sin": np.sin,
    "cos": np.cos,
    "log1p": np.log1p,       # NumPy's own log1p/expm1: libm's, not the code under test
    "expm1": np.expm1,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum,
    "lt": _mask(np.less), "le": _mask(np.less_equal), "gt": _mask(np.greater),
    "ge": _mask(np.greater_equal), "eq": _mask(np.equal), "ne": _mask(np.not_equal),
    "where": lambda c, a, b: np.where(c != 0, a, b),
}
# float32 relative tolerance where the backend's formula differs from the oracle's
# (gelu_tanh: exp of a float32 cubic, ~|u| ulps).
RTOL32 = {"gelu_tanh": 1e-5}
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")

# Large magnitudes and the edges of overflow; what overflows must overflow as in the
# reference (to the same infinity, or the same NaN).
LARGE = np.array([-1e4, -1e3, -103.0, -89.0, -88.0, -20.0, -6.0, -1e-3, 0.0, 1e-30,
                  1e-3, 6.0, 20.0, 88.0, 88.8, 89.0, 103.0, 1e3, 5e3, 1e4])
LARGE_POSITIVE = np.array([1e-30, 1e-20, 1e-6, 1e-3, 0.5, 1.0, 3.0, 1e2, 1e3, 1e4,
                           3e4, 1e6, 1e10, 1e20, 1e30, 0.0, 2.0, 7.0, 5e3, 1e-10])


def f32(a):
    """The float32 inputs, widened back: expected values use exactly what was run."""
    return np.asarray(a, np.float32).astype(np.float64)


def operands(op):
    """Input arrays of ``op`` on ordinary values: positive ones for a positive-domain
    operator, integral ones (ties) for comparisons and where, else normal ones."""
    if OPS[op].domain == "positive":
        return ["P"]
    if op in COMPARISONS or op == "where":
        return ["A", "B", "C"][: OPS[op].arity]
    return ["X", "Z"][: OPS[op].arity]


def call(op, *names):
    return f"{op}({', '.join(f'{n}[i, j]' if n.isalpha() else n for n in names)})"


# output -> (expression, operand arrays, op): one kernel stores all of them; the
# large-magnitude outputs (L_) are run in float32 only (float64 overflows elsewhere).
OUTPUTS = {f"E_{op}": (call(op, *operands(op)), operands(op), op) for op in ELEMENTWISE}
LARGE_OUTPUTS = {f"L_{op}": (call(op, "LP" if OPS[op].domain == "positive" else "L"),
                             ["LP" if OPS[op].domain == "positive" else "L"], op)
                 for op in UNARY}


def _inputs(dtype):
    rng = np.random.default_rng(20240607)
    cast = f32 if dtype == np.float32 else np.asarray
    ints = lambda: f32(rng.integers(-2, 3, SHAPE))            # noqa: E731
    return {"X": cast(rng.normal(0, 2, SHAPE)), "Z": cast(rng.normal(0, 2, SHAPE)),
            "P": cast(rng.uniform(0.5, 3.0, SHAPE)), "A": ints(), "B": ints(), "C": ints(),
            "L": f32(np.resize(LARGE, SHAPE)), "LP": f32(np.resize(LARGE_POSITIVE, SHAPE))}


def _program_text(outputs: dict, inputs) -> str:
    lines = ["program ew", "dim M = 7 block 3", "dim N = 5 block 2"]
    lines += [f"input {n}[M, N]" for n in inputs]
    lines += [f"output {n}[M, N]" for n in outputs]
    lines += ["kernel k for i in M, j in N:"]
    lines += [f"  {n}[i, j] = {expr}" for n, expr in outputs.items()]
    return "\n".join(lines) + "\n"


_RUNS: dict = {}


def run_all(backend, dtype):
    """Every output of :data:`OUTPUTS` (and in float32 :data:`LARGE_OUTPUTS`) on
    ``backend``, compiled and run once."""
    key = (backend.name, np.dtype(dtype).name)
    if key not in _RUNS:
        inputs = _inputs(dtype)
        outputs = OUTPUTS | (LARGE_OUTPUTS if dtype == np.float32 else {})
        text = _program_text({n: e for n, (e, _, _) in outputs.items()}, inputs)
        out = backend.compile(program(text), dtype=dtype)(**inputs)
        assert all(v.dtype == np.dtype(dtype) for v in out.values())
        _RUNS[key] = inputs, out
    return _RUNS[key]


def expected(name, inputs, dtype):
    _, args, op = (OUTPUTS | LARGE_OUTPUTS)[name]
    with np.errstate(all="ignore"):
        return MATH[op](*(inputs[a] for a in args)).astype(dtype)   # overflow as run


def test_every_elementwise_operator_of_the_registry_has_an_oracle_here():
    assert set(MATH) == set(ELEMENTWISE)
    assert set(UNARY) | set(BINARY) <= set(ELEMENTWISE)


@pytest.mark.parametrize("op", ELEMENTWISE)
def test_elementwise_float32(backend, op):
    inputs, out = run_all(backend, np.float32)
    np.testing.assert_allclose(out[f"E_{op}"], expected(f"E_{op}", inputs, np.float64),
                               rtol=RTOL32.get(op, 2e-6), atol=1e-6)


@pytest.mark.parametrize("op", ELEMENTWISE)
def test_elementwise_float64(backend, op):
    """The float64 helpers of a backend (a separate code path for some)."""
    inputs, out = run_all(backend, np.float64)
    np.testing.assert_allclose(out[f"E_{op}"], expected(f"E_{op}", inputs, np.float64),
                               rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("op", UNARY)
def test_unary_at_large_magnitudes_overflows_like_the_reference(backend, op):
    dtype = np.float32
    inputs, out = run_all(backend, dtype)
    _, ref = run_all(reference, dtype)
    got, want = out[f"L_{op}"], ref[f"L_{op}"]
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
    np.testing.assert_array_equal(got[~np.isfinite(got)], want[~np.isfinite(want)])
    if op in ("sigmoid", "silu", "tanh", "erf", "gelu", "gelu_tanh", "relu"):
        assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected(f"L_{op}", inputs, dtype),
                               rtol=RTOL32.get(op, 2e-6), atol=1e-30)


EDGES = {   # output -> (expression, float64 math of x, z)
    "LOG": ("log(X[i, j])", lambda x, z: np.log(x)),
    "W1": ("where(X[i, j], 1.0, 2.0)", lambda x, z: np.where(x != 0, 1.0, 2.0)),  # NaN: a
    **{f"C_{op}": (f"{op}(X[i, j], Z[i, j])", lambda x, z, op=op: MATH[op](x, z))
       for op in COMPARISONS},
}


def test_log_comparisons_and_where_at_zero_nan_and_infinities(backend):
    x = np.resize(f32([0.0, -1.0, 1.0, np.inf, 1e-30, np.nan, -np.inf]), SHAPE)
    z = np.resize(f32([0.0, np.nan, 1.0, 1.0, -0.0, np.nan, -np.inf, 2.0]), SHAPE)
    out = backend.compile(program(_program_text(
        {n: e for n, (e, _) in EDGES.items()}, "XZ")), dtype=np.float32)(X=x, Z=z)
    for name, (_, math_) in EDGES.items():
        with np.errstate(all="ignore"):
            want = math_(x, z)
        np.testing.assert_allclose(out[name], want, rtol=2e-6, err_msg=name)  # NaN == NaN


BROADCASTS = {f"{op}_{side}": (f"{op}(X[i, j], 1.75)" if side == "l" else f"{op}(1.75, X[i, j])",
                               op, side) for op in BINARY for side in "lr"}


def test_binary_operators_broadcast_a_scalar_on_either_side(backend, rng):
    x = f32(rng.uniform(0.5, 3, SHAPE))
    x[0, :2] = 1.75                                     # ties, for the comparisons
    out = backend.compile(program(_program_text(
        {n: e for n, (e, _, _) in BROADCASTS.items()}, "X")), dtype=np.float32)(X=x)
    for name, (_, op, side) in BROADCASTS.items():
        want = MATH[op](x, 1.75) if side == "l" else MATH[op](1.75, x)
        assert out[name].dtype == np.float32
        np.testing.assert_allclose(out[name], want, rtol=2e-6, err_msg=name)


WHERE = {   # output -> (expression, math of x, z, w)
    "W1": ("where(X[i, j], 1.5, Z[i, j])", lambda x, z, w: np.where(x != 0, 1.5, z)),
    "W2": ("where(X[i, j], Z[i, j], -2.5)", lambda x, z, w: np.where(x != 0, z, -2.5)),
    "W3": ("where(X[i, j], 1.5, -2.5)", lambda x, z, w: np.where(x != 0, 1.5, -2.5)),
    "W4": ("where(0.0, Z[i, j], W[i, j])", lambda x, z, w: w),
    "W5": ("where(2.0, Z[i, j], W[i, j])", lambda x, z, w: z),
    "W6": ("where(gt(Z[i, j], W[i, j]), Z[i, j], W[i, j])", lambda x, z, w: np.maximum(z, w)),
    "W7": ("where(le(Z[i, j], 0.0), 0.0, Z[i, j])", lambda x, z, w: np.maximum(z, 0.0)),
    "W8": ("mul(X[i, j], where(ne(X[i, j], X[i, j]), 0.0, 1.0))", lambda x, z, w: x),
}


def test_where_broadcasts_scalars_and_selects_with_comparisons(backend, rng):
    x = f32(rng.integers(-1, 2, SHAPE))
    z, w = f32(rng.normal(size=SHAPE)), f32(rng.normal(size=SHAPE))
    out = backend.compile(program(_program_text(
        {n: e for n, (e, _) in WHERE.items()}, "XZW")), dtype=np.float32)(X=x, Z=z, W=w)
    for name, (_, math_) in WHERE.items():
        np.testing.assert_array_equal(out[name], math_(x, z, w).astype(np.float32),
                                      err_msg=name)


ELEMENTWISE_PROGRAM = """
program u
dim M = 7 block 3
dim N = 5 block 2
input X[M, N]
input Z[M, N]
output Y[M, N]
kernel k for i in M, j in N:
  Y[i, j] = {expr}
"""


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


def test_vector_reductions_to_one_number(run, rng):
    """``vecsum``/``vecmax``: each vector block of a batch iterated one index at a
    time reduced to one number (ragged blocks, magnitudes 1e3; NaN propagates)."""
    x = f32(rng.normal(size=(3, 11)) * 1e3)
    x[2, 9] = np.nan
    out = run("""
        program v
        dim B = 3 point
        dim N = 11 block 4
        input X[B, N]
        output S[B]
        output M[B]
        kernel k for b in B:
          S[b] = sum(j in N: vecsum(X[b, j]))
          M[b] = max(j in N: vecmax(X[b, j]))
        """, X=x)
    want = x.astype(np.float64)
    np.testing.assert_allclose(out["S"][:2], want[:2].sum(axis=1), rtol=1e-5, atol=1e-2)
    np.testing.assert_array_equal(out["M"][:2], x[:2].max(axis=1))
    assert np.isnan(out["S"][2]) and np.isnan(out["M"][2])


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
              X=x, Z=x)["Y"]
    np.testing.assert_allclose(out, -0.5 * x, rtol=1e-7)


def test_gelu_and_erf_are_accurate_in_their_tails(backend):
    """Down to gelu's float32 underflow (x ≈ -13): relative accuracy, not just 0.
    The oracle writes 1 + erf(z) as erfc(-z) (the same number; no cancellation)."""
    x = f32(np.linspace(-13.0, 13.0, 35).reshape(SHAPE))
    text = _program_text({"G": "gelu(X[i, j])", "E": "erf(X[i, j])"}, "X")
    out = backend.compile(program(text), dtype=np.float32)(X=x)
    erfc = np.vectorize(math.erfc, otypes=[float])
    np.testing.assert_allclose(out["G"], 0.5 * x * erfc(-x / math.sqrt(2.0)),
                               rtol=2e-6, atol=1e-37)
    np.testing.assert_allclose(out["E"], MATH["erf"](x), rtol=2e-6, atol=0)


def test_where_and_comparisons_on_row_vectors(run, rng):
    x = f32(rng.normal(size=SHAPE))
    out = run("""
        program v
        dim M = 7 block 3
        dim N = 5 block 2
        input X[M, N]
        output R[M]
        output Y[M, N]
        kernel k for i in M:
          R[i] = where(gt(sum(j in N: rowsum(X[i, j])), 0.0), sum(j in N: rowsum(X[i, j])),
                       neg(max(j in N: rowmax(X[i, j]))))
        kernel y for i in M, j in N:
          Y[i, j] = rowscale(where(ge(R[i], 1.0), R[i], 0.5), relu(X[i, j]))
        """, X=x)
    s = x.sum(axis=1)
    r = np.where(s > 0, s, -x.max(axis=1))
    np.testing.assert_allclose(out["R"], r, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["Y"], np.where(r >= 1, r, 0.5)[:, None] * np.maximum(x, 0),
                               rtol=1e-5, atol=1e-6)


def test_log1p_and_expm1_are_accurate_for_tiny_and_huge_operands(backend):
    """Relative accuracy where 1 + x and exp(x) - 1 would cancel (|x| down to 1e-30),
    and the limits: log1p(-1) = -inf, log1p(inf) = inf, expm1 → -1 and overflow."""
    tiny = [1e-30, -1e-30, 1e-20, 1e-12, -1e-12, 3e-8, -3e-8, 1e-6, -1e-6, 1e-4, -1e-4,
            0.3, -0.3, 0.49, -0.49, 0.51, -0.51, 2.0, -2.0, 30.0, -30.0, -1e4, 1e4, 0.0]
    x = f32(np.resize(tiny, SHAPE))
    p = np.abs(x)
    p.flat[-3:] = [np.inf, 1e30, 0.0]
    l = x.copy()
    l.flat[-4:] = [-1.0, -0.999, -0.5, 1e30]
    l, p = f32(l), f32(p)
    text = _program_text({"L": "log1p(X[i, j])", "E": "expm1(Z[i, j])",
                          "Q": "log1p(P[i, j])"}, "XZP")
    with np.errstate(all="ignore"):
        out = backend.compile(program(text), dtype=np.float32)(X=l, Z=x, P=p)
        want_l, want_e, want_p = np.log1p(l), np.expm1(x), np.log1p(p)
    for name, want in (("L", want_l), ("E", want_e), ("Q", want_p)):
        got = out[name]
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want.astype(np.float32)),
                                      err_msg=name)
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=4e-7, atol=0,
                                   err_msg=name)


def test_sin_and_cos_of_large_positions(backend):
    """Sinusoidal / rotary angles of runtime positions: arguments up to 1e4 radians,
    where float32 sin/cos must still be the rounding of the true value."""
    x = f32(np.resize(np.linspace(-1e4, 1e4, 35) + 0.37, SHAPE))
    out = backend.compile(program(_program_text({"S": "sin(X[i, j])", "C": "cos(X[i, j])"},
                                                "X")), dtype=np.float32)(X=x)
    np.testing.assert_allclose(out["S"], np.sin(x), rtol=0, atol=2e-7)
    np.testing.assert_allclose(out["C"], np.cos(x), rtol=0, atol=2e-7)
