"""Exact cancellations stay exact on every backend (issue 15, item 3).

A fused LayerNorm over a one-column dimension has ``x - mean(x) = 0`` exactly; with
fused multiply-adds (fast-math ``contract``) Numba computed ``fma(x, x, -mean) != 0``,
and ``rsqrt(eps) ~ 316`` turned it into outputs 0.947-1.001 instead of 1.0.
"""

import numpy as np
import pytest

import blockbuster as bb
from blockbuster.frontend.builder import GraphBuilder

SIZES = [pytest.param(37, 16, id="ragged"), pytest.param(32, 16, id="whole-blocks")]


def _inputs(rows, seed=11):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, 1)) * 7).astype(np.float32)


@pytest.mark.parametrize("rows,block", SIZES)
def test_layernorm_of_one_column_is_exactly_beta(backend, rows, block):
    g = GraphBuilder("ln1")
    g.dim("M", rows, block)
    g.dim("K", 1)
    x = g.input("X", "M", "K")
    y = g.layer_norm(g.unary("square", x), g.weight("gamma", "K"), g.weight("beta", "K"),
                     1e-5)
    program = g.build(y)
    ins = dict(X=_inputs(rows), gamma=np.full(1, 3.0, np.float32),
               beta=np.ones(1, np.float32))
    for prog in (program, bb.fuse(program).program):
        out = bb.compile(prog, backend)(**ins)[y.name]
        np.testing.assert_array_equal(out, np.ones((rows, 1), np.float32))


@pytest.mark.parametrize("rows,block", SIZES)
def test_a_product_minus_its_own_mean_over_one_column_is_zero(backend, rows, block):
    """``a*b - mean(a*b)`` over one column: no fused multiply-add across the ``-``."""
    g = GraphBuilder("cancel")
    g.dim("M", rows, block)
    g.dim("K", 1)
    a, b = g.input("A", "M", "K"), g.input("B", "M", "K")
    p = g.binary("mul", a, b)
    d = g.binary("sub", p, g.row_reduce("sum", p, mean=True))
    program = g.build(d)
    ins = dict(A=_inputs(rows, 1), B=_inputs(rows, 2) * np.float32(1.37))
    for prog in (program, bb.fuse(program).program):
        out = bb.compile(prog, backend)(**ins)[d.name]
        np.testing.assert_array_equal(out, np.zeros((rows, 1), np.float32))
    if backend == "numba":
        from blockbuster_numba.runtime import FASTMATH
        # contract: fused multiply-adds; arcp/afn: reciprocal and rsqrt estimates
        # (1/sqrt(inf) = nan); nnan/ninf: -inf masks and non-finite inputs.
        assert not FASTMATH & {"contract", "arcp", "afn", "nnan", "ninf"}
