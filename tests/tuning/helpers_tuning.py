"""Shared pieces of the tuning tests: machines, a backend wrapper, the float64 math."""

from __future__ import annotations

import numpy as np

from blockbuster.backends.reference import backend as reference
from blockbuster.cost import Hardware
from blockbuster.tuning.constraints import BlockConstraints


def machine(local_bytes: int = 1 << 20, cores: int = 2, name: str | None = None) -> Hardware:
    return Hardware(name or f"test-{cores}core-{local_bytes >> 10}KiB", cores=cores,
                    local_capacity_bytes=local_bytes, global_bandwidth_bytes_per_s=40e9,
                    local_bandwidth_bytes_per_s=200e9, peak_flops=200e9)


class WrappedBackend:
    """The reference interpreter under another name, hardware and constraints."""

    def __init__(self, hardware: Hardware, constraints: BlockConstraints | None = None,
                 name: str = "tuning-test"):
        self.name = name
        self.hardware = hardware
        if constraints is not None:
            self.block_constraints = constraints
        self.compiled: list = []

    def compile(self, program, **options):
        self.compiled.append(program)
        return reference.compile(program, **options)


def attention_f64(Q, K, V):
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (Q, K, V))
    s = q @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True) @ v


def rmsnorm_ffn_swiglu_f64(X, g, W1, W3, W2):
    x = np.asarray(X, dtype=np.float64)
    h = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * g
    a, b = h @ W1, h @ W3
    return (a / (1 + np.exp(-a)) * b) @ W2


def blocks_of(program, dims=None) -> dict:
    return {d.name: d.block for d in program.dims if dims is None or d.name in dims}
