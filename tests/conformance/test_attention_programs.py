"""Hand-written attention pieces on every backend, against NumPy float64 from the math:
causal online-softmax attention over heads (a point dimension) with ``keep_ge``
masks and a key range ``[ : i + 1]`` that depends on the query block, fully masked
rows of an unfused program, and the rotary building blocks ``rotate_half`` and
``relabel``."""

import numpy as np
import pytest

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
  let x = keep_ge(pos(T, i), pos(T, j), mul(dot(Q[h, i, 0], transpose(K[h, j, 0])), 0.35))
  let s = online_softmax(j in T[ : i + 1]: x, rowsum(exp(rowshift(neg(runmax(j)), x))), dot(exp(rowshift(neg(runmax(j)), x)), V[h, j, d]))
  O[h, i, d] = rowscale(recip(s.1), s.2)
"""


def f32(a):
    return np.asarray(a, np.float32).astype(np.float64)


def causal_attention(q, k, v, scale):
    logits = q @ k.transpose(0, 2, 1) * scale
    t = q.shape[1]
    logits = np.where(np.tril(np.ones((t, t), bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize("t, b", [(21, 4), (5, 8), (16, 8)])
def test_causal_attention_over_heads(run, rng, t, b):
    q, k, v = (f32(rng.normal(size=(2, t, 8)) * 2) for _ in range(3))
    out = run(CAUSAL.format(t=t, b=b), Q=q, K=k, V=v)["O"]
    np.testing.assert_allclose(out, causal_attention(q, k, v, 0.35), rtol=1e-5, atol=1e-5)


def test_causal_logits_of_magnitude_1e4_stay_finite(run, rng):
    q, k = (f32(rng.normal(size=(2, 21, 8)) * 60) for _ in range(2))
    v = f32(rng.normal(size=(2, 21, 8)))
    assert np.abs(q @ k.transpose(0, 2, 1) * 0.35).max() > 1e4
    out = run(CAUSAL.format(t=21, b=4), Q=q, K=k, V=v)["O"]
    assert np.isfinite(out).all()
    # float32 logits of 1e4 carry ~1e-3 of rounding: the error scale of float32 here.
    np.testing.assert_allclose(out, causal_attention(q, k, v, 0.35), rtol=0, atol=2e-2)


def test_fully_masked_rows_give_the_identities(run, rng):
    # keep_ge on the full key range: blocks above the diagonal are all -inf, so a row
    # max over them alone is -inf and exp of a masked entry is exactly 0.
    x = f32(rng.normal(size=(9, 9)))
    out = run("""
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
    np.testing.assert_allclose(out["Y"], np.where(np.tri(9, dtype=bool), np.exp(x), 0.0),
                               rtol=1e-6)
    assert np.isneginf(out["MX"][:8]).all()
    # the last row block (row 8) has no later key block: an empty max
    assert np.isneginf(out["MX"][8])


def test_rotate_half_and_relabel(run, rng):
    x = f32(rng.normal(size=(5, 8)))
    w = f32(rng.normal(size=(4, 3)))
    out = run("""
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
    # rotate_half within each block of 4 columns: (a, b) -> (-b, a)
    want = np.concatenate([-x[:, 2:4], x[:, 0:2], -x[:, 6:8], x[:, 4:6]], axis=1)
    np.testing.assert_array_equal(out["Y"], want)
    # relabel reads column block 1 of X as the (only) block of HD
    np.testing.assert_allclose(out["Z"], x[:, 4:8] @ w, rtol=1e-5, atol=1e-6)
