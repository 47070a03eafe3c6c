"""Program structure on every backend, against NumPy float64 written from the math:
ragged and single blocks, point dimensions and index arithmetic, reduce ranges that
depend on enclosing indices, empty reductions, ``map`` with ``:`` stores, multi-output
reductions, kernels chained through intermediate global arrays, float64."""

import numpy as np
import pytest

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


def f32(a):
    return np.asarray(a, np.float32).astype(np.float64)


@pytest.mark.parametrize("m, bm, k, bk, n, bn", [
    (13, 4, 9, 2, 7, 3),     # ragged everywhere
    (8, 4, 8, 4, 8, 4),      # exact multiples
    (6, 6, 6, 6, 6, 6),      # one block per dimension
    (5, 16, 3, 8, 2, 64),    # block larger than the dimension: one ragged block
    (1, 1, 1, 1, 1, 1),      # one element
    (1, 4, 7, 3, 5, 2),      # one row
    (9, 2, 1, 4, 1, 3),      # one contraction column, one output column
])
def test_matmul_sizes(run, rng, m, bm, k, bk, n, bn):
    a, b = f32(rng.normal(size=(m, k))), f32(rng.normal(size=(k, n)))
    out = run(MATMUL.format(m=m, bm=bm, k=k, bk=bk, n=n, bn=bn), A=a, B=b)["C"]
    assert out.shape == (m, n)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_point_dims_and_grouped_head_index(run, rng):
    # Four heads share two key/value groups: head h reads group h // 2.
    x, z = f32(rng.normal(size=(4, 5, 3))), f32(rng.normal(size=(2, 5, 3)))
    w = f32(rng.normal(size=(5, 4, 3)))
    out = run("""
        program gqa
        dim H = 4 point
        dim G = 2 point
        dim M = 5 block 2
        dim D = 3 block 2
        input X[H, M, D]
        input Z[G, M, D]
        input W[M, H, D]
        output Y[H, M, D]
        output S[M, D]
        output T[M, D]
        kernel grouped for h in H, i in M, d in D:
          Y[h, i, d] = add(X[h, i, d], Z[h // 2, i, d])
        kernel heads for i in M, d in D:
          S[i, d] = sum(h in H: X[h, i, d])
          T[i, d] = max(h in H: W[i, h, d])
        """, X=x, Z=z, W=w)
    np.testing.assert_allclose(out["Y"], x + np.repeat(z, 2, axis=0), rtol=1e-6)
    np.testing.assert_allclose(out["S"], x.sum(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["T"], w.max(axis=1))


def test_point_dim_position_is_one_element(run):
    # pos of a point dimension is a one-element vector: outer(...) is (rows, 1).
    out = run("""
        program p
        dim H = 3 point
        dim M = 4 block 3
        input X[H, M]
        output Y[H, M]
        kernel k for h in H, i in M:
          Y[h, i] = add(X[h, i], rowsum(outer(pos(M, i), pos(H, h))))
        """, X=np.ones((3, 4)))["Y"]
    np.testing.assert_array_equal(out, 1.0 + np.outer(np.arange(3.0), np.arange(4.0)))


RANGES = """
program tri
dim M = 10 block 3
dim K = 11 block 3
dim N = 5 block 2
input A[M, K]
input B[K, N]
output C[M, N]
kernel k for i in M, j in N:
  C[i, j] = sum(k in K{rng}: dot(A[i, k], B[k, j]))
"""


@pytest.mark.parametrize("rng_text, lo, hi", [
    ("[ : i + 1]", lambda i: 0, lambda i: i + 1),        # causal: blocks 0..i
    ("[i : ]", lambda i: i, lambda i: 4),                # from the diagonal on
    ("[i - 1 : i + 10]", lambda i: i - 1, lambda i: i + 10),  # clamped on both sides
    ("[1 : 3]", lambda i: 1, lambda i: 3),
])
def test_reduce_range_depends_on_enclosing_index(run, rng, rng_text, lo, hi):
    a, b = f32(rng.normal(size=(10, 11))), f32(rng.normal(size=(11, 5)))
    out = run(RANGES.format(rng=rng_text), A=a, B=b)["C"]
    expected = np.zeros((10, 5))
    for i in range(4):  # row blocks of M; K has 4 blocks of 3 (the last ragged)
        rows = slice(3 * i, 3 * i + 3)
        c0, c1 = 3 * min(max(lo(i), 0), 4), min(3 * min(max(hi(i), 0), 4), 11)
        expected[rows] = a[rows, c0:c1] @ b[c0:c1] if c1 > c0 else 0.0
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(out, a @ b)  # the range really restricted the sum


def test_empty_reductions_give_each_combiners_identity(run, rng):
    # K[ : i] is empty for the first row block only; later blocks check the values.
    x, w = f32(rng.normal(size=(5, 7))), f32(rng.normal(size=(7, 9)))
    out = run("""
        program empty
        dim M = 5 block 2
        dim K = 7 block 3
        dim N = 9 block 4
        input X[M, K]
        input W[K, N]
        output S[M]
        output MX[M]
        output SM[M]
        output SL[M]
        output MN[M]
        output MQ[M]
        output P[M, N]
        kernel k for i in M:
          let sm = online_softmax(k in K[ : i]: X[i, k], rowsum(exp(rowshift(neg(runmax(k)), X[i, k]))))
          let mv = meanvar(k in K[ : i]: X[i, k])
          S[i] = sum(k in K[ : i]: rowsum(X[i, k]))
          MX[i] = max(k in K[ : i]: rowmax(X[i, k]))
          SM[i] = sm.0
          SL[i] = sm.1
          MN[i] = add(mv.1, mv.0)
          MQ[i] = mv.2
          P[i, :] = sum(k in K[ : i]: map(n in N: dot(X[i, k], W[k, n])))
        """, X=x, W=w)
    first = slice(0, 2)
    for name in ("S", "SL", "MN", "MQ", "P"):
        np.testing.assert_array_equal(out[name][first], 0.0, err_msg=name)
    np.testing.assert_array_equal(out["MX"][first], -np.inf)
    np.testing.assert_array_equal(out["SM"][first], -np.inf)
    for i in (1, 2):  # row block i sums over the first min(3 i, 7) columns
        rows, cols = slice(2 * i, 2 * i + 2), slice(0, min(3 * i, 7))
        xs = x[rows, cols]
        np.testing.assert_allclose(out["S"][rows], xs.sum(axis=1), rtol=1e-5)
        np.testing.assert_array_equal(out["MX"][rows], xs.max(axis=1))
        np.testing.assert_array_equal(out["SM"][rows], xs.max(axis=1))
        np.testing.assert_allclose(out["SL"][rows],
                                   np.exp(xs - xs.max(axis=1, keepdims=True)).sum(axis=1),
                                   rtol=1e-5)
        np.testing.assert_allclose(out["MN"][rows], xs.sum(axis=1) + xs.shape[1], rtol=1e-5)
        np.testing.assert_allclose(out["MQ"][rows], xs.var(axis=1) * xs.shape[1], rtol=1e-4)
        np.testing.assert_allclose(out["P"][rows], xs @ w[cols], rtol=1e-5, atol=1e-5)


def test_map_with_colon_store_and_sum_over_map_arrays(run, rng):
    x, w = f32(rng.normal(size=(5, 7))), f32(rng.normal(size=(7, 10)))
    out = run("""
        program mp
        dim M = 5 block 2
        dim K = 7 block 3
        dim N = 10 block 4
        input X[M, K]
        input W[K, N]
        output Y[M, N]
        kernel k for i in M:
          Y[i, :] = sum(k in K: map(n in N: dot(X[i, k], W[k, n])))
        """, X=x, W=w)["Y"]
    np.testing.assert_allclose(out, x @ w, rtol=1e-5, atol=1e-5)


def test_colon_stores_along_inner_and_several_dims(run, rng):
    x = f32(rng.normal(size=(3, 5, 7)))
    out = run("""
        program colons
        dim B = 3 point
        dim M = 5 block 2
        dim N = 7 block 3
        input X[B, M, N]
        output Y[B, M, N]
        output Z[M, N]
        kernel both for b in B:
          Y[b, :, :] = map(i in M: map(n in N: mul(X[b, i, n], 2.0)))
        kernel inner for n in N:
          Z[:, n] = map(i in M: sub(X[2, i, n], X[0, i, n]))
        """, X=x)
    np.testing.assert_allclose(out["Y"], 2.0 * x, rtol=1e-7)
    np.testing.assert_allclose(out["Z"], x[2] - x[0], rtol=1e-6, atol=1e-7)


def test_multi_output_sum_with_proj(run, rng):
    x, w = f32(rng.normal(size=(5, 7))), f32(rng.normal(size=(7, 6)))
    out = run("""
        program multi
        dim M = 5 block 2
        dim K = 7 block 3
        dim N = 6 block 4
        input X[M, K]
        input W[K, N]
        output S1[M]
        output S2[M]
        output P[M, N]
        kernel k for i in M:
          let r = sum(k in K: rowsum(X[i, k]), rowsum(square(X[i, k])), map(n in N: dot(X[i, k], W[k, n])))
          S1[i] = r.0
          S2[i] = r.1
          P[i, :] = r.2
        """, X=x, W=w)
    np.testing.assert_allclose(out["S1"], x.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(out["S2"], (x * x).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(out["P"], x @ w, rtol=1e-5, atol=1e-5)


def test_kernels_chain_through_intermediates(run, rng):
    x = f32(rng.normal(size=(5, 11)) * 3)
    out = run("""
        program softmax
        dim M = 5 block 2
        dim N = 11 block 4
        input X[M, N]
        array MX[M]
        array E[M, N]
        array L[M]
        output Y[M, N]
        kernel rmax for i in M:
          MX[i] = max(j in N: rowmax(X[i, j]))
        kernel ex for i in M, j in N:
          E[i, j] = exp(rowshift(neg(MX[i]), X[i, j]))
        kernel lsum for i in M:
          L[i] = sum(j in N: rowsum(E[i, j]))
        kernel norm for i in M, j in N:
          Y[i, j] = rowscale(recip(L[i]), E[i, j])
        """, X=x)
    assert set(out) == {"Y"}  # intermediates stay inside
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["Y"], e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_shared_subexpressions_and_lets_across_stores(run, rng):
    # Two stores of one kernel share a reduction: same values as computing it twice.
    x = f32(rng.normal(size=(5, 7)))
    out = run("""
        program shared
        dim M = 5 block 2
        dim K = 7 block 3
        input X[M, K]
        output A[M]
        output B[M]
        kernel k for i in M:
          let s = sum(k in K: rowsum(X[i, k]))
          A[i] = mul(s, 2.0)
          B[i] = add(s, sum(k in K: rowsum(X[i, k])))
        """, X=x)
    np.testing.assert_allclose(out["A"], 2 * x.sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(out["A"], out["B"])


def test_float64_option(run, rng):
    a, b = rng.normal(size=(13, 9)), rng.normal(size=(9, 7))
    out = run(MATMUL.format(m=13, bm=4, k=9, bk=2, n=7, bn=3), dtype=np.float64, A=a, B=b)["C"]
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


VECTOR_HEADS = """
program vector_heads
dim N1 = 1 block 1
dim E = 20 block 5
dim H = 4 point
dim HD = 5 block 5
input x[N1, E]
output y[H, HD]
output z[N1, E]
kernel y for h in H, hd in HD:
  y[h, hd] = mul(relabel(pos(HD, hd), colsum(x[0, h // 1])), 2.0)
kernel z for n1 in N1, e in E:
  z[n1, e] = colshift(relabel(pos(E, e), y[e // 1, 0]), x[n1, e])
"""


def test_relabel_of_a_vector(run, rng):
    """One row of an input (a single token) split into heads: ``relabel`` renames
    the only axis of a vector as it renames a block's columns (the importer emits
    it for a [1, 1, E] input viewed as heads; the verifier used to reject it)."""
    x = f32(rng.normal(size=(1, 20)))
    out = run(VECTOR_HEADS, x=x)
    np.testing.assert_allclose(out["y"], 2 * x.reshape(4, 5), rtol=1e-6)
    np.testing.assert_allclose(out["z"], 3 * x, rtol=1e-6)
