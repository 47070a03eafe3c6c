"""The mechanisms that keep a cold compile short (``benchmarks/bench_compile.py``):
allocations lowered inline (:mod:`blockbuster_numba.kernel_numpy`) and block matmuls
that call the micro-kernel's driver by name, not linked into every kernel
(:mod:`blockbuster_numba.gemm_call`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError

import blockbuster as bb
from blockbuster_numba import backend, gemm_call
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


def _kernel_ir(kernel) -> str:
    return "\n".join(cres.library.get_llvm_str() for cres in kernel.overloads.values())


def test_kernels_call_the_driver_by_name_instead_of_linking_it_in(tmp_path, monkeypatch):
    # Linked in, the driver's IR was optimised again inside every kernel with a block
    # matmul (~0.6 CPU s each). Fused attention multiplies by a transposed block (K.T)
    # and a C-contiguous one (V), the same blocks in every parallel instance: both
    # packed once per call, both calls go to the registered packed entry point.
    monkeypatch.setenv("BLOCKBUSTER_COMPILE_WORKERS", "1")   # compiled here: IR kept
    program = bb.fuse(bb.workload("attention", N=128, D=32)).program
    compiled = backend.compile(program, cache_dir=tmp_path)
    assert compiled.cache_misses == len(compiled.run.kernels) >= 1
    ir = "\n".join(_kernel_ir(k) for k in compiled.run.kernels)
    name = gemm_call.symbol("float32", "packed")
    assert f"declare void @{name}(" in ir
    assert ir.count(f"call void @{name}(") >= 2
    assert "llvm.fma.v" not in ir                  # no micro-kernel tile in the kernels
    assert "ensure_gemm_symbol('float32', 'packed')" in compiled.source
    assert "packed_input_(K, True" in compiled.source and "packed_input_(V, False" in compiled.source
    # and the results are right (the views' strides are read at run time)
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((128, 32)).astype(np.float32) for _ in range(3))
    s = q.astype(np.float64) @ k.T.astype(np.float64) / np.sqrt(32)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)
    got = compiled(Q=q, K=k, V=v)["O"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


LOAD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import blockbuster as bb
    from blockbuster_numba import backend
    program = bb.fuse(bb.workload("attention", N=100, D=24)).program
    compiled = backend.compile(program)
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((100, 24)) * scale for scale in (2, 2, 1e3))
    s = q @ k.T / np.sqrt(24)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = (p / p.sum(axis=1, keepdims=True)) @ v
    got = compiled(Q=q, K=k, V=v)["O"]
    print(json.dumps({"hits": compiled.cache_hits, "misses": compiled.cache_misses,
                      "error": float(np.abs(got - want).max() / np.abs(want).max())}))
""")


def test_a_fresh_process_loads_cached_kernels_that_call_the_driver(tmp_path):
    # The cached machine code names the entry point: the module registers it before
    # its kernels load, or loading them fails on an unresolved symbol.
    env = dict(os.environ, BLOCKBUSTER_CACHE=str(tmp_path), BLOCKBUSTER_COMPILE_WORKERS="1")
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", LOAD], env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0]["misses"] >= 1 and runs[1]["misses"] == 0 and runs[1]["hits"] >= 1
    assert runs[0]["error"] < 1e-5 and runs[1]["error"] < 1e-5


WARM_THEN_COMPILE = textwrap.dedent("""
    import json, sys
    import numpy as np, numba
    import blockbuster as bb
    from blockbuster_numba import backend
    program = bb.fuse(bb.workload("layernorm_matmul", M=70, K=50, N=40)).program
    compiled = backend.compile(program)
    refreshed = "numba.np.npyimpl" in sys.modules      # imported by a context refresh
    rng = np.random.default_rng(2)
    X = rng.standard_normal((70, 50)) * 10 + 1e3          # row means 1e3
    gamma, beta = rng.standard_normal(50), rng.standard_normal(50)
    W = rng.standard_normal((50, 40))
    mean = X.mean(axis=1, keepdims=True)
    normed = (X - mean) / np.sqrt(((X - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    want = (normed * gamma + beta) @ W
    got = compiled(X=X, gamma=gamma, beta=beta, W=W)["Y"]

    @numba.njit                   # compiled after the fast load: needs every registry
    def later(a):
        return np.tanh(a).sum() + np.exp(a).max()
    a = np.linspace(-1, 1, 7)
    print(json.dumps({"hits": compiled.cache_hits, "misses": compiled.cache_misses,
                      "refreshed": refreshed,
                      "error": float(np.abs(got - want).max() / np.abs(want).max()),
                      "digest": got.tobytes().hex(),
                      "later": abs(later(a) - (np.tanh(a).sum() + np.exp(a).max()))}))
""")


def test_a_warm_start_loads_kernels_without_numbas_compiler_setup(tmp_path):
    # The second process only loads: Numba's implementation registries (a context
    # refresh, most of a warm start) are not set up, yet the kernels run right and a
    # function compiled afterwards in the same process finds everything it needs.
    env = dict(os.environ, BLOCKBUSTER_CACHE=str(tmp_path), BLOCKBUSTER_COMPILE_WORKERS="1")
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", WARM_THEN_COMPILE], env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold["misses"] >= 1 and cold["refreshed"]
    assert warm["misses"] == 0 and warm["hits"] >= 1
    assert not warm["refreshed"], "loading cached kernels set Numba's compiler up"
    assert warm["digest"] == cold["digest"]        # the loaded kernels are the compiled ones
    # float32 row sums of values near 1e3 alone leave ~1e-5 of error here (NumPy in
    # float32: 8.7e-6 on an AVX2 machine); the accuracy itself is tests/rewrite's job.
    for run in runs:
        assert run["error"] < 3e-5 and run["later"] < 1e-12
