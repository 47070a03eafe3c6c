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


TWIN_MATMULS = """
program layers
dim M = 70 block 32
dim K = 50 block 64
input X[M, K]
weight W1[K, K]
weight W2[K, K]
output Y[M, K]
array H[M, K]
kernel h for i in M:
  H[i, :] = map(j in K: sum(k in K: dot(X[i, k], W1[k, j])))
kernel y for i in M:
  Y[i, :] = map(j in K: sum(k in K: dot(H[i, k], W2[k, j])))
"""


def test_twins_multiplying_by_packed_weights_each_take_their_own():
    # Two layers, one function: each call passes its own weight's packed copy.
    program = bb.parse_program(TWIN_MATMULS)
    compiled = backend.compile(program)
    src = compiled.source
    assert src.count('@njit("void(') == 1
    assert "W1_packed = packed_input_(W1, False" in src
    assert "W2_packed = packed_input_(W2, False" in src
    assert "kernel_h(H, W2, Y, W2_packed)" in src.replace("parallel_h", "kernel_h")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((70, 50)).astype(np.float32)
    w1, w2 = (rng.standard_normal((50, 50)).astype(np.float32) for _ in range(2))
    want = (x.astype(np.float64) @ w1) @ w2
    got = compiled(X=x, W1=w1, W2=w2)["Y"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
