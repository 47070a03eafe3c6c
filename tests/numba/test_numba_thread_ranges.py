"""A parallel kernel is a serial function over a range of its parallel loop, run as one
range per thread (blockbuster_numba.threads) instead of Numba's parfors: every
iteration runs exactly once, errors surface, and the results are the reference's."""

import threading

import numba
import numpy as np
import pytest

import blockbuster as bb
from blockbuster_numba import make_backend
from blockbuster_numba.hardware import cpu_hardware
from blockbuster_numba.threads import parallel_for, ranges, thread_count


@pytest.mark.parametrize("count, threads", [(1, 4), (3, 4), (4, 2), (7, 3), (100, 16)])
def test_ranges_cover_every_iteration_once_in_near_equal_parts(count, threads):
    parts = ranges(count, threads)
    assert len(parts) == min(count, threads)
    assert parts[0][0] == 0 and parts[-1][1] == count
    assert all(hi == lo2 for (_, hi), (lo2, _) in zip(parts, parts[1:]))
    sizes = [hi - lo for lo, hi in parts]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_parallel_for_runs_each_range_once_on_several_threads():
    seen, names = [], set()

    def kernel(out, lo, hi):
        names.add(threading.current_thread().name)
        seen.append((lo, hi))
        out[lo:hi] += 1

    out = np.zeros(10)
    parallel_for(kernel, 10, 3, out)
    used = thread_count(3)                   # 3, or fewer where NUMBA_NUM_THREADS is less
    assert sorted(seen) == ranges(10, used) and len(seen) == min(3, used)
    np.testing.assert_array_equal(out, np.ones(10))
    assert threading.current_thread().name in names      # the caller takes a range


def test_the_thread_count_is_capped_by_numbas_setting():
    assert thread_count(10_000) == numba.config.NUMBA_NUM_THREADS
    assert thread_count(1) == 1 and thread_count(0) == 1


def test_an_error_in_any_range_is_raised_after_all_ranges_finish():
    done = []

    def kernel(lo, hi):
        if lo > 0:
            raise ValueError(f"range {lo}..{hi}")
        done.append(lo)

    with pytest.raises(ValueError, match="range"):
        parallel_for(kernel, 4, 2)
    assert done == [0]


RAGGED = """
program mm
dim M = 50 block 16
dim K = 40 block 16
dim N = 70 block 32
input A[M, K]
input B[K, N]
output Y[M, N]
kernel mm for i in M, j in N:
  Y[i, j] = sum(k in K: dot(A[i, k], B[k, j]))
"""


def test_a_parallel_kernel_runs_on_thread_ranges_without_parfors():
    program = bb.parse_program(RAGGED)
    rng = np.random.default_rng(11)
    A = (rng.standard_normal((50, 40)) * 1e3).astype(np.float32)
    B = (rng.standard_normal((40, 70)) * 1e3).astype(np.float32)
    want = A.astype(np.float64) @ B.astype(np.float64)
    compiled = make_backend(cpu_hardware(cores=3, l2=1 << 20)).compile(program, parallel=True)
    assert "parallel=True" not in compiled.source
    # (B's blocks are read by every row block: packed once per call, passed along)
    assert "def kernel_mm(A, B, Y, B_packed, lo, hi):" in compiled.source
    assert "parallel_for_(kernel_mm, 12, THREADS, A, B, Y, B_packed)" in compiled.source
    assert not compiled.run.uses_numba_pool
    got = compiled(A=A, B=B)["Y"]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_a_forked_child_runs_parallel_loops_on_its_own_threads():
    import multiprocessing

    def kernel(out, lo, hi):
        out[lo:hi] = 1.0

    parallel_for(kernel, 4, 2, np.zeros(4))           # the parent's pool exists
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply_async(_child_sum).get(timeout=120) == 6.0   # no hang


def _child_sum():
    out = np.zeros(6)

    def kernel(lo, hi):
        out[lo:hi] = 1.0

    parallel_for(kernel, 6, 2)
    return float(out.sum())
