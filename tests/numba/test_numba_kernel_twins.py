"""The same kernel on other arrays (identical layers, sibling projections) is one
generated function, compiled once and called with each kernel's arrays."""

import numpy as np

import blockbuster as bb
from blockbuster_numba import backend

TWINS = """
program twins
dim M = 40 block 16
dim K = 50 block 16
dim N = 30 block 16
input A[M, K]
input B[M, K]
input C[M, N]
output P[M]
output Q[M]
output R[M]
kernel p for i in M:
  P[i] = sum(k in K: rowsum(exp(A[i, k])))
kernel q for i in M:
  Q[i] = sum(k in K: rowsum(exp(B[i, k])))
kernel r for i in M:
  R[i] = sum(n in N: rowsum(exp(C[i, n])))
"""


def test_identical_kernels_share_one_function_and_keep_their_arrays():
    program = bb.parse_program(TWINS)
    compiled = backend.compile(program)
    src = compiled.source
    # p and q differ only in their arrays: one function; r has other sizes: its own.
    assert src.count('@njit("void(') == 2
    assert "def kernel_q(" not in src
    assert "    # kernel q: the function of kernel p\n    kernel_p(B, Q)" in src
    assert len(compiled.run.kernels) == 2
    rng = np.random.default_rng(5)
    arrays = {n: rng.uniform(-60.0, 60.0, size=program.shape(n)).astype(np.float32)
              for n in ("A", "B", "C")}
    got = compiled(**arrays)
    for out, src_name in (("P", "A"), ("Q", "B"), ("R", "C")):
        want = np.exp(arrays[src_name].astype(np.float64)).sum(axis=1)
        np.testing.assert_allclose(got[out], want, rtol=2e-5)
