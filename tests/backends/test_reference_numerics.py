"""The online softmax of the reference interpreter on attention of any sizes
(property-based; the conformance suite runs fixed cases on every backend)."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from blockbuster.backends.reference import backend as reference
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


def run_attention(s, bs, d, q, k, v, **variant):
    text = ATTENTION.format(s=s, bs=bs, d=d, **variant)
    return reference.compile(parse_program(text))(Q=q, K=k, V=v)



@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=st.integers(1, 12), bs=st.integers(1, 5), d=st.integers(1, 4),
       scale=st.sampled_from([0.1, 1.0, 30.0, 300.0]), causal=st.booleans(),
       seed=st.integers(0, 2**31))
def test_online_softmax_attention_any_sizes(s, bs, d, scale, causal, seed):
    rng = np.random.default_rng(seed)
    q, k = f32(rng.normal(size=(s, d)) * scale), f32(rng.normal(size=(s, d)))
    v = f32(rng.normal(size=(s, d)))
    out = run_attention(s, bs, d, q, k, v, **(CAUSAL if causal else FULL))
    keep = np.tri(s, dtype=bool) if causal else np.ones((s, s), bool)
    expected, _ = attention(q, k, v, keep)
    # float32 logits carry an absolute error ~ |logit| * 1e-7, amplified by exp.
    tol = 1e-5 + 3e-7 * float(np.abs(q @ k.T).max())
    np.testing.assert_allclose(out["O"], expected, rtol=tol, atol=tol)
