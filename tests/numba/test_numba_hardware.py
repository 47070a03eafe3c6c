"""The Numba backend runs on the CPU its Hardware describes: the thread count of the
generated parallel loops and of Numba's pool come from ``hardware.cores``, and the
compiled-module cache tells thread counts apart."""

import numba
import numpy as np

import blockbuster as bb
from blockbuster_numba import make_backend
from blockbuster_numba.compiler import _numba_threads
from blockbuster_numba.hardware import cpu_hardware

# Ragged: M is 2 blocks, N 3 blocks, K 3 blocks, none full.
MATMUL = """
program mm
dim M = 50 block 32
dim K = 40 block 16
dim N = 70 block 32
input A[M, K]
input B[K, N]
output Y[M, N]
kernel mm for i in M, j in N:
  Y[i, j] = sum(k in K: dot(A[i, k], B[k, j]))
"""


def test_the_backend_splits_its_parallel_loops_for_its_own_cores():
    program = bb.parse_program(MATMUL)
    rng = np.random.default_rng(3)
    A = (rng.standard_normal((50, 40)) * 1e3).astype(np.float32)
    B = (rng.standard_normal((40, 70)) * 1e3).astype(np.float32)
    want = A.astype(np.float64) @ B.astype(np.float64)
    loops = {}
    for cores in (2, 4):
        backend = make_backend(cpu_hardware(cores=cores, l2=1 << 20))
        assert backend.hardware.cores == cores
        compiled = backend.compile(program, parallel=True)
        assert compiled.run.threads == cores
        loops[cores] = [line.strip() for line in compiled.source.splitlines()
                        if "prange(" in line]
        got = compiled(A=A, B=B)["Y"]
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    # 2 cores: the 2 row blocks already split evenly; 4 cores: rows x columns (6).
    assert len(loops[2]) == len(loops[4]) == 1
    assert "prange(2)" in loops[2][0] and "prange(6)" in loops[4][0]


def test_a_threads_option_overrides_the_hardware_for_one_compile():
    program = bb.parse_program(MATMUL)
    backend = make_backend(cpu_hardware(cores=2, l2=1 << 20))
    compiled = backend.compile(program, parallel=True, threads=4)
    assert compiled.run.threads == 4 and "prange(6)" in compiled.source


def test_numbas_pool_is_held_to_the_thread_count_while_kernels_run():
    before = numba.get_num_threads()
    with _numba_threads(1):
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before
    with _numba_threads(10_000):             # never more than the pool has
        assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS
    assert numba.get_num_threads() == before
