"""Oracles: each built-in workload written directly from its math in NumPy (float64).

They share nothing with the frontend, the IR or the backends, so a bug in those
cannot hide in the reference the tests and ``run`` validate against.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from .errors import UsageError


def _f64(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}


def attention(Q, K, V) -> dict:
    logits = Q @ K.T / np.sqrt(Q.shape[1])
    logits = logits - logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=1, keepdims=True)
    return {"O": weights @ V}


def layernorm_matmul(X, gamma, beta, W) -> dict:
    mean = X.mean(axis=1, keepdims=True)
    var = ((X - mean) ** 2).mean(axis=1, keepdims=True)      # biased, two-pass
    normed = (X - mean) / np.sqrt(var + 1e-5) * gamma + beta
    return {"Y": normed @ W}


def _silu(x):
    return x / (1.0 + np.exp(-x))


def rmsnorm_ffn_swiglu(X, g, W1, W3, W2) -> dict:
    h = X / np.sqrt((X ** 2).mean(axis=1, keepdims=True) + 1e-6) * g
    return {"Y": (_silu(h @ W1) * (h @ W3)) @ W2}


ORACLES: dict[str, Callable[..., dict]] = {
    "attention": attention,
    "layernorm_matmul": layernorm_matmul,
    "rmsnorm_ffn_swiglu": rmsnorm_ffn_swiglu,
}


def oracle(workload: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    fn = ORACLES.get(workload)
    if fn is None:
        raise UsageError(f"no oracle for workload '{workload}'")
    return fn(**_f64(inputs))
