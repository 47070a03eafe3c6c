"""The reference interpreter on matmuls of any sizes and block sizes (property-based;
the backend-conformance suite checks fixed ragged cases on every backend)."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from blockbuster.backends.reference import backend as reference
from blockbuster.ir.parser import parse_program

MATMUL = """
program mm
dim M = {m} block {bm}
dim K = {k} block {bk}
dim N = {n} block {bn}
input A[M, K]
input B[K, N]
output C[M, N]
kernel mm for i in M, j in N:
  C[i, j] = sum(k in K: dot(A[i, k], B[k, j]))
"""


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dims=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 6)), min_size=3, max_size=3),
       seed=st.integers(0, 2**31))
def test_matmul_any_sizes_and_blocks(dims, seed):
    (m, bm), (k, bk), (n, bn) = dims
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(m, k)).astype(np.float32).astype(np.float64)
    b = rng.normal(size=(k, n)).astype(np.float32).astype(np.float64)
    program = parse_program(MATMUL.format(m=m, bm=bm, k=k, bk=bk, n=n, bn=bn))
    out = reference.compile(program)(A=a, B=b)["C"]
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)
