"""The parallel loop of a generated kernel, run on Python threads.

A parallel kernel is generated as one serial ``@njit(nogil=True)`` function over a
range ``lo..hi`` of its parallel loop's iterations; :func:`parallel_for` splits the
iterations into one contiguous range per thread (the static schedule Numba's
``prange`` uses) and runs the ranges at once, the caller's thread taking the first.

Why not ``prange`` itself: Numba's parfor passes and the gufunc they lower to cost
more compile time than the whole serial kernel (fused attention: 7.6 s of CPU time
with ``parallel=True`` against 4.2 s without; ``benchmarks/bench_compile.py``), and a
``prange`` wrapper around a serial kernel would re-optimise the kernel's machine code
when linking it. Released-GIL threads run the same machine code in parallel.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba

_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_POOL_PID = 0
_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """A pool of at least ``workers`` threads, shared by every generated module (a
    forked child, which has none of its parent's threads, makes its own)."""
    global _POOL, _POOL_SIZE, _POOL_PID
    with _LOCK:
        forked = _POOL_PID != os.getpid()
        if _POOL is None or _POOL_SIZE < workers or forked:
            old = None if forked else _POOL
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="blockbuster")
            _POOL_SIZE, _POOL_PID = workers, os.getpid()
            if old is not None:
                old.shutdown(wait=False)     # its queued work still runs
        return _POOL


def thread_count(threads: int) -> int:
    """``threads``, at most ``NUMBA_NUM_THREADS`` (as Numba's pool would be)."""
    return max(1, min(threads, numba.config.NUMBA_NUM_THREADS))


def ranges(count: int, threads: int) -> list[tuple[int, int]]:
    """``count`` iterations as at most ``threads`` contiguous ranges of near-equal size."""
    n = max(1, min(threads, count))
    bounds = [count * i // n for i in range(n + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def parallel_for(kernel, count: int, threads: int, *args) -> None:
    """``kernel(*args, lo, hi)`` for every range of :func:`ranges` (``count``
    iterations over ``threads`` threads, capped by :func:`thread_count`), in parallel;
    returns when all are done. An exception of any range is raised here."""
    parts = ranges(count, thread_count(threads))
    if len(parts) == 1:
        kernel(*args, *parts[0])
        return
    pool = _pool(len(parts) - 1)
    futures = [pool.submit(kernel, *args, lo, hi) for lo, hi in parts[1:]]
    try:
        kernel(*args, *parts[0])
    finally:
        for future in futures:       # wait for every range before the arrays are reused
            future.exception()
    for future in futures:
        future.result()
