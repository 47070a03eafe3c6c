"""The stateful combiners on every backend: online_softmax (running max and rescaling)
and meanvar (Chan's update), accurate where naive formulas fail."""

import numpy as np
from blockbuster.ir.parser import parse_program

# Causal attention in one kernel: logits x, probabilities p relative to the running
# max, and the two passengers of the online softmax (p V and the row sums of p).
ATTENTION = """
program attn
dim S = {s} block {bs}
dim D = {d} block {d}
input Q[S, D]
input K[S, D]
input V[S, D]
output O[S, D]
output M[S]
kernel attn for i in S, e in D:
  let x = {mask}(dot(Q[i, e], transpose(K[j, e]))){close}
  let p = exp(rowshift(neg(runmax(j)), x))
  let r = online_softmax(j in S{range}: x, dot(p, V[j, e]), rowsum(p))
  O[i, e] = rowscale(recip(r.2), r.1)
kernel runmax for i in S:
  let x = {mask}(dot(Q[i, 0], transpose(K[j, 0]))){close}
  M[i] = online_softmax(j in S{range}: x, rowsum(exp(rowshift(neg(runmax(j)), x)))).0
"""
CAUSAL = dict(mask="keep_ge(pos(S, i), pos(S, j), ", close=")", range="[ : i + 1]")
FULL = dict(mask="", close="", range="")


def f32(a):
    return np.asarray(a, np.float32).astype(np.float64)


def attention(q, k, v, keep):
    """float64 softmax(q kᵀ) v, masked where ``keep`` is false; also the row max."""
    logits = np.where(keep, q @ k.T, -np.inf)
    m = logits.max(axis=1, keepdims=True)
    p = np.exp(logits - m)
    return (p / p.sum(axis=1, keepdims=True)) @ v, m[:, 0]


def run_attention(backend, s, bs, d, q, k, v, **variant):
    text = ATTENTION.format(s=s, bs=bs, d=d, **variant)
    return backend.compile(parse_program(text))(Q=q, K=k, V=v)


def test_causal_online_softmax_with_huge_logits_is_finite_and_exact(backend, rng):
    s, d = 23, 5
    q, k = f32(rng.normal(size=(s, d)) * 70), f32(rng.normal(size=(s, d)) * 70)
    v = f32(rng.normal(size=(s, d)))
    out = run_attention(backend, s, 4, d, q, k, v, **CAUSAL)
    expected, m = attention(q, k, v, np.tri(s, dtype=bool))
    assert np.abs(q @ k.T).max() > 1e4  # exp of these overflows any float
    assert np.isfinite(out["O"]).all()
    np.testing.assert_allclose(out["O"], expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["M"], m, rtol=1e-5)


def test_online_softmax_rescales_across_many_blocks(backend, rng):
    # Moderate logits, so every key block contributes: a missing or wrong rescaling
    # of earlier partial sums would show far above the tolerance.
    s, d = 23, 5
    q, k, v = (f32(rng.normal(size=(s, d))) for _ in range(3))
    out = run_attention(backend, s, 4, d, q, k, v, **FULL)
    expected, m = attention(q, k, v, np.ones((s, s), bool))
    np.testing.assert_allclose(out["O"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["M"], m, rtol=1e-6)


def test_rows_masked_in_early_blocks_do_not_become_nan(backend, rng):
    # Anti-causal mask (keep key c >= query r): rows of later query blocks see only
    # -inf logits in the first key blocks, so their running max starts at -inf.
    s, d = 13, 3
    q, k, v = (f32(rng.normal(size=(s, d))) for _ in range(3))
    anti = dict(mask="keep_ge(neg(pos(S, i)), neg(pos(S, j)), ", close=")", range="")
    out = run_attention(backend, s, 4, d, q, k, v, **anti)
    expected, m = attention(q, k, v, ~np.tri(s, k=-1, dtype=bool))
    assert np.isfinite(out["O"]).all()
    np.testing.assert_allclose(out["O"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["M"], m, rtol=1e-6)


def test_online_softmax_passengers_may_be_map_arrays(backend, rng):
    # The p·V passenger is a map over output column blocks: each item is rescaled.
    q, k = f32(rng.normal(size=(11, 3)) * 4), f32(rng.normal(size=(11, 3)))
    v = f32(rng.normal(size=(11, 10)))
    out = backend.compile(parse_program("""
        program mapped
        dim S = 11 block 4
        dim D = 3 block 3
        dim E = 10 block 4
        input Q[S, D]
        input K[S, D]
        input V[S, E]
        output U[S, E]
        output L[S]
        output M[S]
        kernel attn for i in S:
          let x = dot(Q[i, 0], transpose(K[j, 0]))
          let p = exp(rowshift(neg(runmax(j)), x))
          let r = online_softmax(j in S: x, map(n in E: dot(p, V[j, n])), rowsum(p))
          M[i] = r.0
          U[i, :] = r.1
          L[i] = r.2
        """))(Q=q, K=k, V=v)
    logits = q @ k.T
    m = logits.max(axis=1)
    p = np.exp(logits - m[:, None])
    np.testing.assert_allclose(out["M"], m, rtol=1e-6)
    np.testing.assert_allclose(out["L"], p.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(out["U"], p @ v, rtol=1e-5, atol=1e-6)


MEANVAR = """
program stats
dim M = 6 block 4
dim K = 37 block 8
input X[M, K]
output MU[M]
output VAR[M]
output SQ[M]
output NAIVE[M]
kernel stats for i in M:
  let r = meanvar(k in K: X[i, k], rowsum(square(X[i, k])))
  MU[i] = div(r.1, r.0)
  VAR[i] = div(r.2, r.0)
  SQ[i] = r.3
  NAIVE[i] = sub(div(r.3, r.0), square(div(r.1, r.0)))
"""


def test_meanvar_is_accurate_for_large_means(backend, rng):
    x = f32(1e3 + rng.normal(size=(6, 37)))
    out = backend.compile(parse_program(MEANVAR))(X=x)
    np.testing.assert_allclose(out["MU"], x.mean(axis=1), rtol=1e-6)
    np.testing.assert_allclose(out["VAR"], x.var(axis=1), rtol=1e-3)
    np.testing.assert_allclose(out["SQ"], (x * x).sum(axis=1), rtol=1e-5)
    # The same statistics as E[x²] - E[x]² in float32 are far off: the tolerance
    # above is one the textbook formula cannot meet.
    naive_error = np.abs(out["NAIVE"] / x.var(axis=1) - 1).max()
    assert naive_error > 1e-2


def test_meanvar_single_block_and_one_column(backend, rng):
    x = f32(rng.normal(size=(3, 1)) + 5)
    out = backend.compile(parse_program(MEANVAR.replace("37 block 8", "1 block 8")
                                          .replace("6 block 4", "3 block 2")))(X=x)
    np.testing.assert_allclose(out["MU"], x[:, 0], rtol=1e-7)
    np.testing.assert_array_equal(out["VAR"], 0.0)


def test_runmax_is_not_memoised_across_different_running_maxes(backend, rng):
    # The passenger depends on j only through runmax(j), while the logits also depend
    # on n: the same (node, j) meets a different running max for every n, so a memo
    # keyed on block indices alone would hand back a stale value.
    x, z = f32(rng.normal(size=(5, 9))), f32(rng.normal(size=(5, 9)))
    c = f32([1.0, 3.0, -2.0])
    out = backend.compile(parse_program("""
        program stale
        dim S = 5 block 2
        dim T = 9 block 4
        dim N = 3 point
        input X[S, T]
        input Z[S, T]
        input C[N]
        output P[N, S]
        kernel k for i in S:
          P[:, i] = map(n in N: online_softmax(j in T: mul(X[i, j], C[n]), rowsum(exp(rowshift(neg(runmax(j)), Z[i, j])))).1)
        """))(X=x, Z=z, C=c)
    for n in range(3):  # row-linear in exp(-runmax): exp(-m_n) * sum_j exp(z)
        m = (x * c[n]).max(axis=1)
        np.testing.assert_allclose(out["P"][n], np.exp(-m) * np.exp(z).sum(axis=1), rtol=1e-5)
