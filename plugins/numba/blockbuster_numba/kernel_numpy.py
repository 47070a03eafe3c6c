"""``np`` as the generated kernels see it: NumPy, with the functions they call on
every block (``dot``, ``ascontiguousarray``, ``empty``, ``zeros``, ``full``) as ``@njit(cache=True)``
wrappers of the same NumPy functions.

Why: Numba compiles its implementation of ``np.dot``/``np.empty``/... afresh in
every process, once per signature, and never caches it; for fused attention that was
2.9 of 5.3 CPU seconds of a cold compile (``benchmarks/bench_compile.py``). Through
these wrappers it is compiled once per machine and signature and loaded from Numba's
cache afterwards (beside this file, or under ``NUMBA_CACHE_DIR``); the cached
library keeps its LLVM bitcode, so the kernels still inline it.

Every other name is NumPy's own (``np.float32``, ``np.inf``, ...). The generated
module's Python driver (``run``) calls ``numpy`` itself.
"""

from __future__ import annotations

import types

import numpy
from numba import njit

_OPTIONS = dict(cache=True, nogil=True, error_model="numpy")


@njit(**_OPTIONS)
def dot(a, b):
    return numpy.dot(a, b)


@njit(**_OPTIONS)
def ascontiguousarray(a):
    return numpy.ascontiguousarray(a)


@njit(**_OPTIONS)
def empty(shape, dtype):
    return numpy.empty(shape, dtype)


@njit(**_OPTIONS)
def zeros(shape, dtype):
    return numpy.zeros(shape, dtype)


@njit(**_OPTIONS)
def full(shape, fill_value, dtype):
    return numpy.full(shape, fill_value, dtype)


class _KernelNumpy(types.ModuleType):
    """NumPy's namespace with the wrappers above in place of its functions."""

    def __getattr__(self, name):
        return getattr(numpy, name)


np = _KernelNumpy("blockbuster_numba.kernel_numpy.np",
                  "NumPy as generated kernels call it (cached dot, allocations, copies)")
np.dot, np.empty, np.zeros, np.full = dot, empty, zeros, full
np.ascontiguousarray = ascontiguousarray

#: The wrappers, for the cache key of generated modules and for warming the cache.
WRAPPERS = (dot, ascontiguousarray, empty, zeros, full)
