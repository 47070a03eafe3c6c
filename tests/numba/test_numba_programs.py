"""Hand-written block programs on the Numba backend, against the reference interpreter:
ragged and single blocks, point dimensions and index arithmetic (``h // 2``), reduce
ranges that depend on enclosing indices (causal ``[ : i + 1]``) with ``keep_ge``
masks, empty reductions, ``map`` with ``:`` stores, multi-output reductions with
``proj``, shared sub-expressions, chains of kernels through intermediates."""


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


@pytest.mark.parametrize("m, bm, k, bk, n, bn", [
    (13, 4, 9, 2, 7, 3),     # ragged everywhere
    (8, 4, 8, 4, 8, 4),      # exact multiples
    (6, 6, 6, 6, 6, 6),      # one block per dimension: no loops at all
    (5, 16, 3, 8, 2, 64),    # block larger than the dimension
    (1, 1, 1, 1, 1, 1),      # one element
    (1, 4, 7, 3, 5, 2),      # one row
])
def test_matmul_sizes(check, rng, m, bm, k, bk, n, bn):
    a, b = f32(rng.normal(size=(m, k))), f32(rng.normal(size=(k, n)))
    out = check(MATMUL.format(m=m, bm=bm, k=k, bk=bk, n=n, bn=bn), A=a, B=b)["C"]
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_matmul_parallel_flattened_loops(check, rng):
    # Few row blocks: the parallel loop covers (i, j) together.
    a, b = f32(rng.normal(size=(10, 33))), f32(rng.normal(size=(33, 70)))
    out = check(MATMUL.format(m=10, bm=8, k=33, bk=8, n=70, bn=8), parallel=True, A=a, B=b)
    np.testing.assert_allclose(out["C"], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_point_dims_and_grouped_head_index(check, rng):
    # Four heads share two key/value groups: head h reads group h // 2.
    x, z = f32(rng.normal(size=(4, 5, 3))), f32(rng.normal(size=(2, 5, 3)))
    w = f32(rng.normal(size=(5, 4, 3)))
    out = check("""
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


def test_point_dim_position_is_one_element(check):
    out = check("""
        program p
        dim H = 3 point
        dim M = 4 block 3
        input X[H, M]
        output Y[H, M]
        kernel k for h in H, i in M:
          Y[h, i] = add(X[h, i], rowsum(outer(pos(M, i), pos(H, h))))
        """, X=np.ones((3, 4), np.float32))["Y"]
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


@pytest.mark.parametrize("rng_text", ["[ : i + 1]", "[i : ]", "[i - 1 : i + 10]", "[1 : 3]"])
def test_reduce_range_depends_on_enclosing_index(check, rng, rng_text):
    a, b = f32(rng.normal(size=(10, 11))), f32(rng.normal(size=(11, 5)))
    out = check(RANGES.format(rng=rng_text), A=a, B=b)["C"]
    assert not np.allclose(out, a.astype(np.float64) @ b)  # the range restricted the sum


def test_empty_reductions_give_each_combiners_identity(check, rng):
    x, w = f32(rng.normal(size=(5, 7))), f32(rng.normal(size=(7, 9)))
    out = check("""
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
        """, rtol=1e-5, X=x, W=w)
    first = slice(0, 2)
    for name in ("S", "SL", "MN", "MQ", "P"):
        np.testing.assert_array_equal(out[name][first], 0.0, err_msg=name)
    np.testing.assert_array_equal(out["MX"][first], -np.inf)
    np.testing.assert_array_equal(out["SM"][first], -np.inf)
    xs = x[2:4, 0:3].astype(np.float64)
    np.testing.assert_allclose(out["MQ"][2:4], xs.var(axis=1) * 3, rtol=1e-4)


def test_map_with_colon_store_and_sum_over_map_arrays(check, rng):
    x, w = f32(rng.normal(size=(5, 7))), f32(rng.normal(size=(7, 10)))
    out = check("""
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
    np.testing.assert_allclose(out, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)


def test_colon_stores_along_inner_and_several_dims(check, rng):
    x = f32(rng.normal(size=(3, 5, 7)))
    out = check("""
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


def test_map_arrays_in_online_softmax_are_rescaled(check, rng):
    # The passenger is a map array: every element's rows are rescaled with the max.
    x, v = f32(rng.normal(size=(6, 10)) * 4), f32(rng.normal(size=(10, 9)))
    out = check("""
        program osmap
        dim M = 6 block 4
        dim S = 10 block 4
        dim N = 9 block 4
        input X[M, S]
        input V[S, N]
        output L[M]
        output O[M, N]
        kernel k for i in M:
          let t = online_softmax(j in S: X[i, j], rowsum(exp(rowshift(neg(runmax(j)), X[i, j]))), map(n in N: dot(exp(rowshift(neg(runmax(j)), X[i, j])), V[j, n])))
          L[i] = t.1
          O[i, :] = t.2
        """, X=x, V=v)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["O"], e @ v, rtol=1e-5, atol=1e-5)


def test_multi_output_sum_with_proj(check, rng):
    x, w = f32(rng.normal(size=(5, 7))), f32(rng.normal(size=(7, 6)))
    out = check("""
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
    np.testing.assert_allclose(out["S2"], (x.astype(np.float64) ** 2).sum(axis=1), rtol=1e-5)


def test_kernels_chain_through_intermediates(check, rng):
    x = f32(rng.normal(size=(5, 11)) * 3)
    out = check("""
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
    assert set(out) == {"Y"}
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out["Y"], e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_shared_subexpressions_across_stores(check, rng):
    x = f32(rng.normal(size=(5, 7)))
    out = check("""
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
    np.testing.assert_array_equal(out["A"], out["B"])


def test_every_elementwise_operator(check, rng):
    x = f32(rng.uniform(0.5, 2.0, size=(5, 6)))
    y = f32(rng.normal(size=(5, 6)) * 3)
    ops = ["neg", "exp", "log", "recip", "sqrt", "rsqrt", "square", "abs", "silu",
           "sigmoid", "tanh", "ones"]
    bins = ["add", "sub", "mul", "div", "max", "min"]
    lines = [f"  U{k}[i, j] = {op}(X[i, j])" for k, op in enumerate(ops)]
    lines += [f"  B{k}[i, j] = {op}(X[i, j], Y[i, j])" for k, op in enumerate(bins)]
    outs = [f"output U{k}[M, N]" for k in range(len(ops))]
    outs += [f"output B{k}[M, N]" for k in range(len(bins))]
    text = "\n".join(["program ew", "dim M = 5 block 2", "dim N = 6 block 4",
                      "input X[M, N]", "input Y[M, N]", *outs,
                      "kernel k for i in M, j in N:", *lines])
    out = check(text, rtol=2e-6, X=x, Y=y)
    np.testing.assert_allclose(out["U1"], np.exp(x.astype(np.float64)), rtol=1e-6)
    np.testing.assert_allclose(out["U8"], x / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)


def test_broadcasts_reductions_and_layout_ops(check, rng):
    x = f32(rng.normal(size=(7, 6)))
    r, c = f32(rng.normal(size=7)), f32(rng.normal(size=6))
    check("""
        program bc
        dim M = 7 block 3
        dim N = 6 block 4
        input X[M, N]
        input R[M]
        input C[N]
        output A[M, N]
        output B[N, M]
        output S[M]
        output T[N]
        output U[M]
        output V[N]
        output W[M, N]
        kernel k for i in M, j in N:
          A[i, j] = colshift(C[j], rowshift(R[i], colscale(C[j], rowscale(R[i], X[i, j]))))
          B[j, i] = transpose(add(X[i, j], outer(R[i], C[j])))
          W[i, j] = keep_ge(pos(M, i), pos(N, j), X[i, j])
        kernel rows for i in M:
          S[i] = max(j in N: rowmax(X[i, j]))
          U[i] = sum(j in N: rowsum(X[i, j]))
        kernel cols for j in N:
          T[j] = sum(i in M: colsum(X[i, j]))
          V[j] = max(i in M: colmax(X[i, j]))
        """, R=r, C=c, X=x)


def test_rotate_half_and_relabel(check, rng):
    x = f32(rng.normal(size=(5, 8)))
    w = f32(rng.normal(size=(4, 3)))
    out = check("""
        program rot
        dim M = 5 block 3
        dim C = 8 block 4
        dim HD = 4 block 4
        dim N = 3 block 3
        input X[M, C]
        input W[HD, N]
        output Y[M, C]
        output Z[M, N]
        kernel k for i in M, h in C:
          Y[i, h] = rotate_half(X[i, h])
        kernel p for i in M, n in N:
          Z[i, n] = dot(relabel(pos(HD, 0), X[i, 1]), W[0, n])
        """, X=x, W=w)
    want = np.concatenate([-x[:, 2:4], x[:, 0:2], -x[:, 6:8], x[:, 4:6]], axis=1)
    np.testing.assert_array_equal(out["Y"], want)


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


@pytest.mark.parametrize("t, b, parallel", [(21, 4, False), (37, 8, True), (5, 8, None)])
def test_causal_attention_with_masks(check, rng, t, b, parallel):
    q, k, v = (f32(rng.normal(size=(2, t, 8)) * 2) for _ in range(3))
    out = check(CAUSAL.format(t=t, b=b), parallel=parallel, Q=q, K=k, V=v)["O"]
    np.testing.assert_allclose(out, causal_attention(q, k, v, 0.35), rtol=1e-5, atol=1e-5)


def test_causal_attention_unfused_with_masked_rows(check, rng):
    # keep_ge on the full key range: blocks above the diagonal are all -inf, so a row
    # max over them alone is -inf (the reference's semantics, reproduced exactly).
    x = f32(rng.normal(size=(9, 9)))
    out = check("""
        program mask
        dim T = 9 block 4
        input X[T, T]
        output Y[T, T]
        output MX[T]
        kernel m for i in T, j in T:
          Y[i, j] = exp(keep_ge(pos(T, i), pos(T, j), X[i, j]))
        kernel r for i in T:
          MX[i] = max(j in T[i + 1 : ]: rowmax(keep_ge(pos(T, i), pos(T, j), X[i, j])))
        """, X=x)
    np.testing.assert_array_equal(out["Y"][np.triu_indices(9, 1)], 0.0)
    assert np.isneginf(out["MX"][:8]).all()


def test_float64_option(check, rng):
    a, b = rng.normal(size=(13, 9)), rng.normal(size=(9, 7))
    out = check(MATMUL.format(m=13, bm=4, k=9, bk=2, n=7, bn=3), dtype=np.float64,
                rtol=1e-12, A=a, B=b)["C"]
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


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
