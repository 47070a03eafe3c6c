"""The mechanisms that keep a cold compile short (``benchmarks/bench_compile.py``):
allocations lowered inline (:mod:`blockbuster_numba.kernel_numpy`) and one layout of
array for every block matmul (:func:`blockbuster_numba.runtime.gemm`)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit, types
from numba.core.errors import TypingError

import blockbuster as bb
from blockbuster_numba import backend, microkernel
from blockbuster_numba.kernel_numpy import np as knp


@njit
def _allocations(n, value):
    a = knp.empty((3, n), np.float32)
    a[:] = 7.0
    z = knp.zeros((2, n, 4), np.float32)
    f = knp.full(n, value, np.float64)
    e = knp.empty(n, np.float64)
    e[:] = 1.5
    return a, z, f, e


@pytest.mark.parametrize("n", [0, 1, 5, 257])
def test_allocations_have_numpys_shape_dtype_and_values(n):
    a, z, f, e = _allocations(n, np.float32(-np.inf))
    assert a.shape == (3, n) and a.dtype == np.float32 and a.flags.c_contiguous
    assert z.shape == (2, n, 4) and z.dtype == np.float32 and z.flags.c_contiguous
    assert f.shape == (n,) and f.dtype == np.float64 and e.dtype == np.float64
    np.testing.assert_array_equal(a, np.full((3, n), 7.0, np.float32))
    np.testing.assert_array_equal(z, np.zeros((2, n, 4), np.float32))
    np.testing.assert_array_equal(f, np.full(n, -np.inf))
    np.testing.assert_array_equal(e, np.full(n, 1.5))   # its own memory: not f's


def test_allocations_with_literal_block_shapes_in_a_loop():
    # As generated kernels call them: a tuple of literals, a fresh block per step
    # (zeros must really be zeros again after the previous block was written).
    @njit
    def blocks(steps):
        total = 0.0
        for s in range(steps):
            acc = knp.zeros((4, 64), np.float32)
            m = knp.full((64,), np.float32(-np.inf), np.float32)
            for r in range(4):
                for c in range(64):
                    total += acc[r, c]
                    acc[r, c] = s + 1.0
            total += (m == -np.inf).sum()
        return total

    assert blocks(5) == 5 * 64


def test_allocation_of_a_non_numeric_dtype_is_a_typing_error():
    @njit
    def bad(n):
        return knp.empty(n, "float32")

    with pytest.raises(TypingError):
        bad(3)


def _gemm_calls(kernel):
    """Argument types of every call of the micro-kernel's driver in ``kernel``."""
    found = []
    for cres in kernel.overloads.values():
        ann = cres.type_annotation
        for expr, sig in ann.calltypes.items():
            if getattr(expr, "op", None) != "call":
                continue
            fty = ann.typemap[expr.func.name]
            if isinstance(fty, types.Dispatcher) and fty.dispatcher is microkernel.gemm:
                found.append(sig.args)
    return found


def test_generated_kernels_pass_one_layout_to_gemm(tmp_path, monkeypatch):
    # Fused attention multiplies by a transposed block (K.T) and a C-contiguous one
    # (V): both reach the driver typed 'A', so it is compiled once, not per layout.
    monkeypatch.setenv("BLOCKBUSTER_COMPILE_WORKERS", "1")   # compiled here: typed
    program = bb.fuse(bb.workload("attention", N=128, D=32)).program
    compiled = backend.compile(program, cache_dir=tmp_path)
    assert compiled.cache_misses == len(compiled.run.kernels) >= 1
    calls = [args for k in compiled.run.kernels for args in _gemm_calls(k)]
    assert len(calls) >= 2
    assert {a.layout for args in calls for a in args[:3]} == {"A"}
    # C = A·B and C += A·B (the flag is not a literal) share one overload of the driver
    assert len(set(calls)) == 1
    # and the results are right (the views' strides are read at run time)
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((128, 32)).astype(np.float32) for _ in range(3))
    s = q.astype(np.float64) @ k.T.astype(np.float64) / np.sqrt(32)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)
    got = compiled(Q=q, K=k, V=v)["O"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
