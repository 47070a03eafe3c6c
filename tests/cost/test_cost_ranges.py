"""Reduction ranges that depend on enclosing indices, and non-trivial subscripts,
checked against explicit Python enumeration of every iteration."""

from hypothesis import given, settings, strategies as st

from blockbuster.cost import cost

from helpers_cost import cdiv, ext, program


def causal_text(s, bs, d, bd):
    return f"""
program causal
dim S = {s} block {bs}
dim D = {d} block {bd}
input Q[S, D]
input K[S, D]
input V[S, D]
output O[S, D]
kernel attn for i in S, e in D:
  O[i, e] = sum(j in S[ : i + 1]: dot(dot(Q[i, e], transpose(K[j, e])), V[j, e]))
"""


def test_causal_range_matches_enumeration():
    s, bs, d, bd = 100, 16, 24, 16
    c = cost(program(causal_text(s, bs, d, bd)))
    loaded = flops = 0
    for i in range(cdiv(s, bs)):
        for e in range(cdiv(d, bd)):
            ei, ee = ext(s, bs, i), ext(d, bd, e)
            loaded += ei * ee                       # Q[i, e]: hoisted out of the j loop
            for j in range(i + 1):                  # j in S[: i + 1]
                ej = ext(s, bs, j)
                loaded += 2 * ej * ee               # K[j, e] and V[j, e]
                flops += 2 * ei * ee * ej           # dot(Q, K^T): (S_i x D_e) . (D_e x S_j)
                flops += 2 * ei * ej * ee           # dot(P, V): accumulated in place
    assert c.loaded_bytes == 4 * loaded
    assert c.flops == flops
    assert c.stored_bytes == 4 * s * d


def tri_text(s, bs, d, bd):
    return f"""
program tri
dim S = {s} block {bs}
dim D = {d} block {bd}
input X[S, D]
output Y[S, D]
kernel t for i in S, e in D:
  Y[i, e] = colshift(sum(j in S[ : i + 1]: mul(colsum(X[j, e]),
                                               sum(l in S[j : i + 1]: colsum(X[l, e])))),
                     X[i, e])
"""


def tri_expected(s, bs, d, bd):
    """Two coupled ranges (l in [j, i]): loaded elements and FLOPs by brute force."""
    loaded = flops = 0
    for i in range(cdiv(s, bs)):
        for e in range(cdiv(d, bd)):
            ei, ee = ext(s, bs, i), ext(d, bd, e)
            loaded += ei * ee                   # X[i, e]
            flops += ei * ee                    # colshift
            for j in range(i + 1):
                ej = ext(s, bs, j)
                loaded += ej * ee               # X[j, e]: hoisted out of the l loop
                flops += ej * ee + ee + ee      # colsum, mul, the outer sum's add
                for l in range(j, i + 1):
                    el = ext(s, bs, l)
                    loaded += el * ee           # X[l, e]
                    flops += el * ee + ee       # colsum, the inner sum's add
    return loaded, flops


@settings(max_examples=40, deadline=None)
@given(s=st.integers(1, 90), bs=st.integers(1, 40), d=st.integers(1, 30),
       bd=st.integers(1, 30))
def test_coupled_ranges_match_enumeration(s, bs, d, bd):
    c = cost(program(tri_text(s, bs, d, bd)))
    loaded, flops = tri_expected(s, bs, d, bd)
    assert c.loaded_bytes == 4 * loaded
    assert c.flops == flops
    assert c.stored_bytes == 4 * s * d


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 120), bm=st.integers(1, 40), k=st.integers(1, 120),
       bk=st.integers(1, 40), n=st.integers(1, 120), bn=st.integers(1, 40))
def test_matmul_formula_for_any_sizes(m, bm, k, bk, n, bn):
    c = cost(program(f"""
program mm
dim M = {m} block {bm}
dim K = {k} block {bk}
dim N = {n} block {bn}
input A[M, K]
input B[K, N]
output C[M, N]
kernel mm for i in M, j in N:
  C[i, j] = sum(k in K: dot(A[i, k], B[k, j]))
"""))
    assert c.loaded_bytes == 4 * (m * k * cdiv(n, bn) + k * n * cdiv(m, bm))
    assert c.stored_bytes == 4 * m * n
    assert c.flops == 2 * m * n * k


def test_floor_division_subscripts_and_point_dims():
    # Grouped-query attention scores: head h reads key group h // 2 (point dims, so
    # no block axis), and a tiled subscript i // 2 reads block i // 2 of M.
    b, h, g, s, bs, d, bd = 2, 6, 3, 50, 16, 20, 8
    c = cost(program(f"""
program gqa
dim B = {b} point
dim H = {h} point
dim G = {g} point
dim S = {s} block {bs}
dim D = {d} block {bd}
input Q[B, H, S, D]
input K[B, G, S, D]
output O[B, H, S, S]
kernel scores for b in B, h in H, i in S, j in S:
  O[b, h, i, j] = sum(e in D: dot(Q[b, h, i, e], transpose(K[b, h // 2, j, e])))
"""))
    ns = cdiv(s, bs)
    # Each (b, h, i, j) instance reads one block-row of Q and one of K along D.
    assert c.loaded_bytes == 4 * (b * h * s * ns * d + b * h * ns * s * d)
    assert c.stored_bytes == 4 * b * h * s * s
    assert c.flops == 2 * b * h * s * s * d
    assert c.compulsory_bytes == 4 * (b * h * s * d + b * g * s * d + b * h * s * s)

    # Whole blocks: a computed index of a ragged dimension must keep its last block
    # last, which i // 2 does not (the verifier says so).
    m, bm = 96, 16                               # 6 blocks of 16
    c = cost(program(f"""
program halves
dim M = {m} block {bm}
dim D = {d} block {bd}
input X[M, D]
input W[M, D]
output Y[M, D]
kernel k for i in M, e in D:
  Y[i, e] = add(X[i, e], W[i // 2, e])
"""))
    w_rows = sum(ext(m, bm, i // 2) for i in range(cdiv(m, bm)))
    assert w_rows == 16 * 6                      # one block of W per block of X
    assert c.loaded_bytes == 4 * (m * d + w_rows * d)
    assert c.flops == m * d


def test_large_programs_are_counted_in_closed_form():
    # 64 blocks along every dimension, three nested loops: counted per loop, not by enumeration, and exactly. (No wall-clock assertion: an
    # enumerating count would make this test slow, which the suite's timing shows.)
    mm = """
program mm
dim M = 4096 block 64
dim K = 4096 block 64
dim N = 4000 block 64
input A[M, K]
input B[K, N]
output C[M, N]
kernel mm for i in M, j in N:
  C[i, j] = sum(k in K: dot(A[i, k], B[k, j]))
"""
    c = cost(program(mm))
    m, k, n, b = 4096, 4096, 4000, 64
    # A read once per column block of C, B once per row block, C written once.
    assert c.loaded_bytes == 4 * (m * k * cdiv(n, b) + k * n * cdiv(m, b))
    assert c.stored_bytes == 4 * m * n
