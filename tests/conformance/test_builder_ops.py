"""The builder's activation, comparison/selection and column-reduction functions on
every backend, unfused and fused, against float64 NumPy written from the math:
ragged sizes (37×29 in blocks of 8), large magnitudes (±1e4) and overflow."""

import functools
import math

import numpy as np
import pytest

import blockbuster as bb
from blockbuster.frontend.builder import GraphBuilder

ERF = np.vectorize(math.erf, otypes=[float])


def gelu(x):
    return x * 0.5 * (1.0 + ERF(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# output -> (builder call storing it under name n, float64 oracle of (x, z))
FUNCTIONS = {
    "GELU": (lambda g, x, z, n: g.gelu(x, n), lambda x, z: gelu(x)),
    "GELUT": (lambda g, x, z, n: g.gelu_tanh(x, n), lambda x, z: gelu_tanh(x)),
    "ERF": (lambda g, x, z, n: g.erf(x, n), lambda x, z: ERF(x)),
    "TANH": (lambda g, x, z, n: g.tanh(x, n), lambda x, z: np.tanh(x)),
    "SIN": (lambda g, x, z, n: g.sin(x, n), lambda x, z: np.sin(x)),
    "COS": (lambda g, x, z, n: g.cos(x, n), lambda x, z: np.cos(x)),
    "LOG1P": (lambda g, x, z, n: g.log1p(g.unary("abs", x), n),
              lambda x, z: np.log1p(np.abs(x))),
    "EXPM1": (lambda g, x, z, n: g.expm1(x, n), lambda x, z: np.expm1(x)),
    "SIG": (lambda g, x, z, n: g.sigmoid(x, n), lambda x, z: sigmoid(x)),
    "RELU": (lambda g, x, z, n: g.relu(x, n), lambda x, z: np.maximum(x, 0.0)),
    "LOG": (lambda g, x, z, n: g.log(g.unary("abs", x), n), lambda x, z: np.log(np.abs(x))),
    "EXP": (lambda g, x, z, n: g.unary("exp", x, n), lambda x, z: np.exp(x)),
    "MAX": (lambda g, x, z, n: g.maximum(x, z, n), lambda x, z: np.maximum(x, z)),
    "MIN": (lambda g, x, z, n: g.minimum(x, 0.5, n), lambda x, z: np.minimum(x, 0.5)),
    "WHERE": (lambda g, x, z, n: g.where(g.gt(x, z), x, -1.0, n),
              lambda x, z: np.where(x > z, x, -1.0)),
    "MASK": (lambda g, x, z, n: g.where(g.le(x, 0.0), 0.0, g.gelu(z), n),
             lambda x, z: np.where(x <= 0, 0.0, gelu(z))),
    "EQ": (lambda g, x, z, n: g.binary("add", g.eq(x, z), g.ne(x, x), n),
           lambda x, z: (x == z) * 1.0),
    "CSUM": (lambda g, x, z, n: g.col_sum(x, n), lambda x, z: x.sum(axis=0)),
    "CMAX": (lambda g, x, z, n: g.col_max(x, n), lambda x, z: x.max(axis=0)),
    "CMEAN": (lambda g, x, z, n: g.col_mean(g.relu(x), n),
              lambda x, z: np.maximum(x, 0).mean(axis=0)),
}


@functools.lru_cache(maxsize=None)
def programs():
    """(unfused, fused) once, shared by every backend."""
    g = GraphBuilder("ops")
    g.dim("M", 37, 8)
    g.dim("N", 29, 8)
    x, z = g.input("X", "M", "N"), g.input("Z", "M", "N")
    unfused = g.build(*(call(g, x, z, name) for name, (call, _) in FUNCTIONS.items()))
    return unfused, bb.fuse(unfused).program


def _inputs(scale):
    rng = np.random.default_rng(11)
    x = rng.normal(0, scale, (37, 29))
    z = rng.normal(0, scale, (37, 29))
    x[0, :8] = [1e4, -1e4, 89.0, -89.0, 0.0, 1e-3, -6.0, 6.0]
    z[0, :8] = [1e4, 0.0, 88.0, -90.0, 0.0, 1e-3, -5.0, 6.0]    # ties for eq
    z[3, :] = x[3, :]
    return np.float32(x).astype(np.float64), np.float32(z).astype(np.float64)


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("scale", [2.0, 1e3])
def test_builder_functions_against_float64_math(backend, fused, scale):
    program = programs()[fused]
    x, z = _inputs(scale)
    out = backend.compile(program, dtype=np.float32)(X=x, Z=z)
    for name, (_, math_) in FUNCTIONS.items():
        with np.errstate(all="ignore"):
            exact32 = math_(x, z).astype(np.float32)     # overflow as float32 does
        got = out[name]
        assert got.dtype == np.float32
        np.testing.assert_array_equal(np.isfinite(got), np.isfinite(exact32), err_msg=name)
        sums = name in ("CSUM", "CMEAN")
        atol = 1e-6 * (np.abs(x).sum(axis=0).max() if sums else 1.0)
        np.testing.assert_allclose(got, exact32, rtol=1e-5, atol=atol, err_msg=name)


def test_elementwise_chains_of_the_new_operators_fuse_into_their_consumer():
    unfused, fused = programs()
    assert len(unfused.kernels) == len(FUNCTIONS) + 8      # 8 intermediates (abs, gt, ...)
    # every intermediate was inlined into its consumer: only the outputs are stored
    assert len(fused.kernels) <= len(FUNCTIONS)
    produced = {s.array for k in fused.kernels for s in k.stores}
    assert produced == set(FUNCTIONS)
