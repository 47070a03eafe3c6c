"""Fusions that a guard must stop, fused with the default rules and run on every
backend against NumPy float64 from the math. A rule that fires where its guard
should have failed gives a wrong (or ill-formed) program here."""

import numpy as np

from blockbuster.dsl.loader import default_rules
from blockbuster.rewrite.engine import fuse

from helpers_conformance import program

# The row scale depends on k: it must not leave the sum over k (``invariant``).
ROWSCALE_IN_SUM = """
program rs
dim M = 7 block 3
dim K = 11 block 4
input Z[M, K]
input X[M, K]
output Y[M]
kernel k for i in M:
  Y[i] = sum(k in K: rowsum(rowscale(rowsum(Z[i, k]), X[i, k])))
"""


def test_a_row_scale_that_depends_on_the_sum_index_stays_inside(backend, rng):
    z = rng.normal(size=(7, 11)).astype(np.float32).astype(np.float64)
    x = rng.normal(size=(7, 11)).astype(np.float32).astype(np.float64)
    fused = fuse(program(ROWSCALE_IN_SUM), default_rules()).program
    out = backend.compile(fused)(Z=z, X=x)["Y"]
    # Y[r] = sum over column blocks b of (sum of Z[r, b]) * (sum of X[r, b])
    blocks = [slice(0, 4), slice(4, 8), slice(8, 11)]
    want = sum(z[:, b].sum(axis=1) * x[:, b].sum(axis=1) for b in blocks)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    # Lifting the scale out would compute (sum Z) * (sum X) instead: far off.
    assert not np.allclose(z.sum(axis=1) * x.sum(axis=1), want, rtol=1e-2)
