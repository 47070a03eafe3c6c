"""Rewrites that a guard or the pattern itself must stop, fused with the default rules
and run on every backend against NumPy float64 from the math. A rule that fires where
its guard should fail, or where a repeated pattern variable is bound to two different
values, gives a wrong (or ill-formed) program here."""

import numpy as np

from blockbuster.dsl.loader import default_rules
from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.rewrite import engine as _engine

from helpers_conformance import program


def fuse(program, *args, **kwargs):
    """The engine, for the default hardware (the reference backend's)."""
    return _engine.fuse(program, *args, hardware=DEFAULT_HARDWARE, **kwargs)

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


# A common row scale cancels in a ratio (``ratio_cancel`` repeats ``s``); two different
# row scales must not.
RATIO = """
program ratio
dim M = 7 block 3
dim N = 10 block 4
input X[M, N]
input S[M]
input T[M]
input A[M]
output SAME[M, N]
output OTHER[M, N]
kernel k for i in M, j in N:
  SAME[i, j] = rowscale(recip(mul(S[i], A[i])), rowscale(S[i], X[i, j]))
  OTHER[i, j] = rowscale(recip(mul(S[i], A[i])), rowscale(T[i], X[i, j]))
"""


def test_a_ratio_cancels_only_a_common_scale(backend, rng):
    x = rng.normal(size=(7, 10)).astype(np.float32).astype(np.float64)
    s, t, a = (rng.uniform(0.5, 2.0, size=7).astype(np.float32).astype(np.float64)
               for _ in range(3))
    fused = fuse(program(RATIO), default_rules()).program
    out = backend.compile(fused)(X=x, S=s, T=t, A=a)
    np.testing.assert_allclose(out["SAME"], x / a[:, None], rtol=1e-5)
    np.testing.assert_allclose(out["OTHER"], x * (t / (s * a))[:, None], rtol=1e-5)
