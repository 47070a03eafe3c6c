"""The float64 oracles against independent formulations (plain Python loops and the
statistics module) and against properties of the math they implement."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from blockbuster import UsageError
from blockbuster.oracles import ORACLES, oracle

rng = np.random.default_rng(1234)


def _randn(*shape):
    return rng.standard_normal(shape)


# -- attention ---------------------------------------------------------------------

def _attention_by_loops(Q, K, V):
    n, d = Q.shape
    out = np.zeros((n, V.shape[1]))
    for i in range(n):
        logits = [sum(Q[i, c] * K[j, c] for c in range(d)) / math.sqrt(d)
                  for j in range(K.shape[0])]
        top = max(logits)
        weights = [math.exp(x - top) for x in logits]
        total = math.fsum(weights)
        for j, w in enumerate(weights):
            out[i] += w / total * V[j]
    return out


def test_attention_matches_loops():
    Q, K, V = _randn(5, 3), _randn(7, 3), _randn(7, 4)
    np.testing.assert_allclose(oracle("attention", {"Q": Q, "K": K, "V": V})["O"],
                               _attention_by_loops(Q, K, V), rtol=1e-12, atol=1e-12)


def test_attention_rows_are_convex_combinations():
    # V = identity reads the softmax weights out: positive, rows summing to one.
    Q, K = _randn(6, 9), _randn(9, 9)
    weights = oracle("attention", {"Q": Q, "K": K, "V": np.eye(9)})["O"]
    assert np.all(weights > 0)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-12)


def test_attention_with_zero_keys_averages_values():
    V = _randn(8, 3)
    out = oracle("attention", {"Q": _randn(4, 3), "K": np.zeros((8, 3)), "V": V})["O"]
    np.testing.assert_allclose(out, np.tile(V.mean(axis=0), (4, 1)), rtol=1e-12)


def test_attention_is_safe_for_huge_logits():
    Q, K, V = 1e4 * _randn(4, 8), _randn(6, 8), _randn(6, 2)
    out = oracle("attention", {"Q": Q, "K": K, "V": V})["O"]
    assert np.all(np.isfinite(out))
    # Logits that far apart make the softmax a hard argmax.
    best = np.argmax(Q @ K.T, axis=1)
    np.testing.assert_allclose(out, V[best], atol=1e-9)


# -- layernorm_matmul ----------------------------------------------------------------

def test_layernorm_matches_statistics_module():
    X, gamma, beta, W = _randn(4, 6), _randn(6), _randn(6), _randn(6, 3)
    expected = np.zeros((4, 3))
    for i, row in enumerate(X):
        mu, var = statistics.fmean(row), statistics.pvariance(row)
        normed = [(x - mu) / math.sqrt(var + 1e-5) * g + b for x, g, b in zip(row, gamma, beta)]
        expected[i] = np.array(normed) @ W
    got = oracle("layernorm_matmul", {"X": X, "gamma": gamma, "beta": beta, "W": W})["Y"]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_layernorm_output_has_zero_mean_and_unit_variance_before_gamma():
    X = 3.0 + 5.0 * _randn(5, 40)
    Y = oracle("layernorm_matmul", {"X": X, "gamma": np.ones(40), "beta": np.zeros(40),
                                    "W": np.eye(40)})["Y"]
    np.testing.assert_allclose(Y.mean(axis=1), 0.0, atol=1e-12)
    var = X.var(axis=1)
    np.testing.assert_allclose(Y.var(axis=1), var / (var + 1e-5), rtol=1e-12)


def test_layernorm_ignores_a_row_shift():
    X, gamma, beta, W = _randn(3, 8), _randn(8), _randn(8), _randn(8, 2)
    a = oracle("layernorm_matmul", {"X": X, "gamma": gamma, "beta": beta, "W": W})["Y"]
    b = oracle("layernorm_matmul", {"X": X + 100.0, "gamma": gamma, "beta": beta, "W": W})["Y"]
    np.testing.assert_allclose(a, b, atol=1e-9)


# -- rmsnorm_ffn_swiglu ----------------------------------------------------------------

def _swiglu_by_loops(X, g, W1, W3, W2):
    out = np.zeros((X.shape[0], W2.shape[1]))
    for i, row in enumerate(X):
        rms = math.sqrt(math.fsum(x * x for x in row) / len(row) + 1e-6)
        h = [x / rms * gi for x, gi in zip(row, g)]
        for c in range(W1.shape[1]):
            a = sum(hk * W1[k, c] for k, hk in enumerate(h))
            b = sum(hk * W3[k, c] for k, hk in enumerate(h))
            out[i] += a / (1.0 + math.exp(-a)) * b * W2[c]
    return out


def test_swiglu_matches_loops():
    args = {"X": _randn(3, 5), "g": _randn(5), "W1": _randn(5, 7), "W3": _randn(5, 7),
            "W2": _randn(7, 5)}
    np.testing.assert_allclose(oracle("rmsnorm_ffn_swiglu", args)["Y"], _swiglu_by_loops(**args),
                               rtol=1e-12, atol=1e-12)


def test_swiglu_is_invariant_to_row_scaling():
    args = {"X": _randn(3, 16), "g": _randn(16), "W1": _randn(16, 8), "W3": _randn(16, 8),
            "W2": _randn(8, 16)}
    a = oracle("rmsnorm_ffn_swiglu", args)["Y"]
    b = oracle("rmsnorm_ffn_swiglu", {**args, "X": 50.0 * args["X"]})["Y"]
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-8)


def test_swiglu_zero_up_projection_gives_zero():
    args = {"X": _randn(2, 4), "g": _randn(4), "W1": _randn(4, 6), "W3": np.zeros((4, 6)),
            "W2": _randn(6, 4)}
    assert not np.any(oracle("rmsnorm_ffn_swiglu", args)["Y"])


# -- the dispatcher ----------------------------------------------------------------------

def test_oracle_works_in_float64():
    args = {"Q": _randn(3, 2).astype(np.float32), "K": _randn(3, 2).astype(np.float32),
            "V": _randn(3, 2).astype(np.float32)}
    assert oracle("attention", args)["O"].dtype == np.float64


def test_every_workload_has_an_oracle():
    from blockbuster.frontend.workloads import WORKLOADS
    assert set(ORACLES) == set(WORKLOADS)


def test_unknown_oracle_is_a_usage_error():
    with pytest.raises(UsageError, match="no oracle for workload 'nope'"):
        oracle("nope", {})
