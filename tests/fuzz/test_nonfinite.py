"""Non-finite inputs: every backend computes what NumPy's IEEE float math of the same
formulas computes (issue 15, item 5; README "Non-finite values").

RMSNorm of the row ``[inf, 1]``: mean square inf, ``rsqrt(inf + eps) = 0``, so the
row is ``[inf*0, 1*0] = [nan, 0]`` -- the reference backend's answer; Numba returned
``[nan, nan]`` (its fast-math ``arcp`` turned ``1/sqrt`` into an estimate whose
Newton step computes ``inf*0``).
"""

import numpy as np
import pytest

import blockbuster as bb
from blockbuster.frontend.builder import GraphBuilder

from helpers_fuzz import BACKENDS

INF, NAN = np.inf, np.nan


def _x(rows, cols, seed=4):
    """Random rows with inf, -inf, nan planted (and one clean row)."""
    x = np.random.default_rng(seed).standard_normal((rows, cols))
    x[0, 0] = INF
    x[1, 1] = -INF
    x[2, 2] = NAN
    x[3, 0], x[3, 3] = INF, -INF
    x[4, :] = INF
    return x.astype(np.float32)


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e * (1.0 / e.sum(axis=1, keepdims=True))


def _rms(x, g, eps=1e-6):
    return x * (1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)) * g


def _layernorm(x, gamma, beta, eps=1e-5):
    c = x - x.mean(axis=1, keepdims=True)
    return c * (1.0 / np.sqrt((c * c).mean(axis=1, keepdims=True) + eps)) * gamma + beta


def _program(rows, cols, block):
    g = GraphBuilder("nonfinite")
    g.dim("M", rows, block)
    g.dim("K", cols, block)
    g.dim("N", 3)
    x = g.input("X", "M", "K")
    gain, beta, w = g.weight("g", "K"), g.weight("beta", "K"), g.weight("W", "K", "N")
    outs = {"softmax": g.softmax(x), "rmsnorm": g.rms_norm(x, gain, 1e-6),
            "layernorm": g.layer_norm(x, gain, beta, 1e-5), "matmul": g.matmul(x, w)}
    return g.build(*outs.values()), {k: t.name for k, t in outs.items()}


def _want(ins):
    x, gain, beta, w = (ins[k].astype(np.float64) for k in ("X", "g", "beta", "W"))
    with np.errstate(all="ignore"):
        return {"softmax": _softmax(x), "rmsnorm": _rms(x, gain),
                "layernorm": _layernorm(x, gain, beta), "matmul": x @ w}


def _assert_same(got, want, what):
    # assert_allclose: NaNs and infinities (with their sign) must sit at the same places
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=what)


@pytest.mark.parametrize("rows,cols,block", [(7, 5, 2), (6, 4, 4)], ids=["ragged", "whole"])
def test_unfused_programs_follow_numpy_ieee_semantics(backend, rows, cols, block):
    program, names = _program(rows, cols, block)
    rng = np.random.default_rng(1)
    ins = {"X": _x(rows, cols), "g": rng.standard_normal(cols).astype(np.float32),
           "beta": rng.standard_normal(cols).astype(np.float32),
           "W": rng.standard_normal((cols, 3)).astype(np.float32)}
    want = _want(ins)
    got = bb.compile(program, backend)(**ins)
    for op, name in names.items():
        _assert_same(got[name], want[op], f"{backend} {op}")


def test_rmsnorm_of_inf_and_one_is_nan_and_zero(backend):
    program, names = _program(5, 2, 2)
    ins = {"X": np.array([[INF, 1], [1, 2], [-INF, 1], [NAN, 1], [0, 0]], np.float32),
           "g": np.ones(2, np.float32), "beta": np.zeros(2, np.float32),
           "W": np.ones((2, 3), np.float32)}
    rms = bb.compile(program, backend)(**ins)[names["rmsnorm"]]
    np.testing.assert_array_equal(rms[[0, 2, 3, 4]],
                                  [[NAN, 0], [NAN, 0], [NAN, NAN], [0, 0]])


@pytest.mark.parametrize("rows,cols,block", [(7, 5, 2)], ids=["ragged"])
def test_fused_programs_agree_across_backends(rows, cols, block):
    """The same fused program gives the same NaN/inf pattern and numbers everywhere."""
    program, names = _program(rows, cols, block)
    fused = bb.fuse(program).program
    rng = np.random.default_rng(2)
    ins = {"X": _x(rows, cols, seed=9), "g": rng.standard_normal(cols).astype(np.float32),
           "beta": rng.standard_normal(cols).astype(np.float32),
           "W": rng.standard_normal((cols, 3)).astype(np.float32)}
    results = {b: bb.compile(fused, b)(**ins) for b in BACKENDS}
    first = results["reference"]
    for b, got in results.items():
        for name in names.values():
            _assert_same(got[name], first[name], f"{b} vs reference, {name}")
