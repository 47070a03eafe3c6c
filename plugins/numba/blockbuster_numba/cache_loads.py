"""Load cached kernels without Numba's compiler set-up.

Before Numba loads a function from its on-disk cache, it "refreshes" the target
context: it imports and installs every implementation registry it has (NumPy's
ufunc tables, linalg, random, typed containers, third-party extensions), as it does
before compiling. Loading machine code needs none of that: only the runtime's
(NRT's) symbols, which the cached code calls. On a warm start of the default Llama
layer the refresh was 0.25-0.4 of 0.36-0.5 s (the rest: reading six cached kernels).

:func:`fast_cache_loads` skips it while a generated module loads its kernels. A
kernel that is not in the cache still compiles as before: Numba's compile pipeline
refreshes the context itself. Only the loads of this block are affected: it holds
Numba's compiler lock, under which every load and compile runs.

It replaces a private method of Numba's ``Cache`` (``load_overload``, which calls
``_load_overload``); where a Numba version lacks those, loads stay as they are.
"""

from __future__ import annotations

import contextlib

from numba.core import caching
from numba.core.compiler_lock import global_compiler_lock
from numba.core.runtime.nrt import rtsys

_NUMBA_LOAD = caching.Cache.load_overload


def _load_without_refresh(self, sig, target_context):
    rtsys.initialize(target_context)          # NRT's symbols: the cached code calls them
    with self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)


def supported() -> bool:
    """Whether this Numba has the private methods the fast load relies on."""
    return all(hasattr(caching.Cache, name) for name in (
        "load_overload", "_load_overload", "_guard_against_spurious_io_errors"))


@contextlib.contextmanager
def fast_cache_loads():
    """Cached functions (kernels, the micro-kernel's entry) load without a context
    refresh inside this block."""
    if not supported():
        yield
        return
    # The refresh imported numpy.ma, which Numba's typeof of any array touches on a
    # kernel's first call (0.1 s): imported here, a start's cost stays in the compile.
    import numpy.ma  # noqa: F401
    with global_compiler_lock:
        caching.Cache.load_overload = _load_without_refresh
        try:
            yield
        finally:
            caching.Cache.load_overload = _NUMBA_LOAD
