"""A softmax over columns (axis 0) fuses into one kernel as a row softmax does: the
kernel holds its outer loop (the column reductions are computed once per column
block, not again for every row block), and computes the same values."""

import numpy as np

import blockbuster as bb
from blockbuster.frontend.builder import GraphBuilder


def test_column_softmax_holds_its_outer_loop():
    g = GraphBuilder("colsoftmax")
    g.dim("M", 45, 16)
    g.dim("N", 37, 16)
    x = g.input("X", "M", "N")
    e = g.exp(g.sub(x, g.col_max(x)))
    program = g.build(g.div(e, g.col_sum(e), name="Y"))
    fused = bb.fuse(program).program
    assert len(fused.kernels) == 1, fused
    X = (np.random.default_rng(0).standard_normal((45, 37)) * 1e3).astype(np.float32)
    x64 = X.astype(np.float64)
    p = np.exp(x64 - x64.max(axis=0))
    want = p / p.sum(axis=0)
    got = bb.compile(fused, backend="reference")(X=X)["Y"]
    assert np.max(np.abs(got - want)) < 1e-6
