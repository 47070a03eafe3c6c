"""Numba-specific program checks (the backend-conformance suite, tests/conformance,
runs every program on every backend): the parallel ``prange`` path over flattened
loops and causal ranges, and the conversion and checking of input arrays."""


import numpy as np
import pytest

from helpers_numba import f32, program

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


def test_matmul_parallel_flattened_loops(check, rng):
    # Few row blocks: the parallel loop covers (i, j) together.
    a, b = f32(rng.normal(size=(10, 33))), f32(rng.normal(size=(33, 70)))
    out = check(MATMUL.format(m=10, bm=8, k=33, bk=8, n=70, bn=8), parallel=True, A=a, B=b)
    np.testing.assert_allclose(out["C"], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


CAUSAL = """
program causal
dim H = 2 point
dim T = {t} block {b}
dim D = 8 block 8
input Q[H, T, D]
input K[H, T, D]
input V[H, T, D]
output O[H, T, D]
kernel attn for h in H, i in T, d in D:
  let s = online_softmax(j in T[ : i + 1]: keep_ge(pos(T, i), pos(T, j), mul(dot(Q[h, i, 0], transpose(K[h, j, 0])), 0.35)), rowsum(exp(rowshift(neg(runmax(j)), keep_ge(pos(T, i), pos(T, j), mul(dot(Q[h, i, 0], transpose(K[h, j, 0])), 0.35))))), dot(exp(rowshift(neg(runmax(j)), keep_ge(pos(T, i), pos(T, j), mul(dot(Q[h, i, 0], transpose(K[h, j, 0])), 0.35)))), V[h, j, d]))
  O[h, i, d] = rowscale(recip(s.1), s.2)
"""


def causal_attention(q, k, v, scale):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    logits = q @ k.transpose(0, 2, 1) * scale
    t = q.shape[1]
    logits = np.where(np.tril(np.ones((t, t), bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ v


def test_causal_attention_in_parallel(check, rng):
    t, b, parallel = 37, 8, True
    q, k, v = (f32(rng.normal(size=(2, t, 8)) * 2) for _ in range(3))
    out = check(CAUSAL.format(t=t, b=b), parallel=parallel, Q=q, K=k, V=v)["O"]
    np.testing.assert_allclose(out, causal_attention(q, k, v, 0.35), rtol=1e-5, atol=1e-5)


def test_inputs_are_checked_and_converted(numba_backend, rng):
    from blockbuster.errors import BackendError
    compiled = numba_backend.compile(program(MATMUL.format(m=4, bm=2, k=3, bk=2, n=2, bn=2)))
    a = rng.normal(size=(4, 3))                      # float64, converted
    b = np.asfortranarray(rng.normal(size=(3, 2)))   # not C-contiguous, converted
    out = compiled(A=a, B=b)["C"]
    np.testing.assert_allclose(out, a @ b, rtol=1e-5)
    with pytest.raises(BackendError, match="shape"):
        compiled(A=a[:3], B=b)
    with pytest.raises(BackendError, match="missing input 'B'"):
        compiled(A=a)
