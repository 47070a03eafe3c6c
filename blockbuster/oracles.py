"""Oracles: each built-in workload written directly from its math in NumPy (float64).

They share nothing with the frontend, the IR or the backends, so a bug in those
cannot hide in the reference the tests and ``run`` validate against.
"""

from __future__ import annotations

from typing import Callable, Mapping

import math

import numpy as np

from .errors import UsageError


def _f64(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}


def attention(Q, K, V) -> dict:
    logits = Q @ K.T / math.sqrt(Q.shape[1])
    logits = logits - logits.max(axis=1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=1, keepdims=True)
    return {"O": weights @ V}


def layernorm_matmul(X, gamma, beta, W) -> dict:
    mean = X.mean(axis=1, keepdims=True)
    var = ((X - mean) ** 2).mean(axis=1, keepdims=True)      # biased, two-pass
    normed = (X - mean) / np.sqrt(var + 1e-5) * gamma + beta
    return {"Y": normed @ W}


def paper_figure(A, B) -> dict:
    return {"C": A + B, "d": B.sum(axis=1)}


def _silu(x):
    # exp(-x) overflows to inf for x < -88 (float32): x / inf is the right limit, 0.
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-x))


def rmsnorm_ffn_swiglu(X, g, W1, W3, W2) -> dict:
    h = X / np.sqrt((X ** 2).mean(axis=1, keepdims=True) + 1e-6) * g
    return {"Y": (_silu(h @ W1) * (h @ W3)) @ W2}


def _rms_norm(x, g):
    return x / np.sqrt((x ** 2).mean(axis=1, keepdims=True) + 1e-6) * g


def _rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def _llama_layer(X, g1, Wq, Wk, Wv, Wo, g2, W1, W3, W2, cos, sin):
    tokens, head = X.shape[0], cos.shape[1]
    nh, nkv = Wq.shape[1] // head, Wk.shape[1] // head

    def heads(a, n):                       # [T, n·head] -> [n, T, head]
        return a.reshape(tokens, n, head).transpose(1, 0, 2)

    h = _rms_norm(X, g1)
    q, k, v = heads(h @ Wq, nh), heads(h @ Wk, nkv), heads(h @ Wv, nkv)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)  # h -> h // g
    logits = q @ k.transpose(0, 2, 1) / math.sqrt(head)
    logits = np.where(np.tril(np.ones((tokens, tokens), bool)), logits, -np.inf)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    u = X + (weights @ v).transpose(1, 0, 2).reshape(tokens, nh * head) @ Wo
    z = _rms_norm(u, g2)
    return u + (_silu(z @ W1) * (z @ W3)) @ W2


_LLAMA_WEIGHTS = ("g1", "Wq", "Wk", "Wv", "Wo", "g2", "W1", "W3", "W2")


def llama_block(**arrays) -> dict:
    """Decoder layers applied in order; weights ``Wq`` (one layer) or ``Wq_0``,
    ``Wq_1``... (the number of layers is how many there are)."""
    if "Wq" in arrays:
        layers = [{n: arrays[n] for n in _LLAMA_WEIGHTS}]
    else:
        layers = []
        while f"Wq_{len(layers)}" in arrays:
            layers.append({n: arrays[f"{n}_{len(layers)}"] for n in _LLAMA_WEIGHTS})
        if not layers:
            raise UsageError("llama_block: no weights Wq or Wq_0 among the inputs")
    x = arrays["X"]
    for w in layers:
        x = _llama_layer(x, cos=arrays["cos"], sin=arrays["sin"], **w)
    return {"Y": x}


ORACLES: dict[str, Callable[..., dict]] = {
    "attention": attention,
    "layernorm_matmul": layernorm_matmul,
    "rmsnorm_ffn_swiglu": rmsnorm_ffn_swiglu,
    "llama_block": llama_block,
    "paper_figure": paper_figure,
}


def oracle(workload: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    fn = ORACLES.get(workload)
    if fn is None:
        raise UsageError(f"no oracle for workload '{workload}'")
    return fn(**_f64(inputs))


def oracle_float32(workload: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same NumPy code run in float32, unfused: what a user's own NumPy gives. Its
    error against :func:`oracle` is the float32 baseline a fused program is held to."""
    fn = ORACLES.get(workload)
    if fn is None:
        raise UsageError(f"no oracle for workload '{workload}'")
    # (The oracles keep float32 operands in float32: Python scalars, not NumPy
    # float64 ones. Where one did not, the baseline would only be more accurate and
    # the tolerance stay at the default: never looser.)
    return fn(**{k: np.asarray(v, dtype=np.float32) for k, v in inputs.items()})
