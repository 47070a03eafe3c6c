"""Helpers for the Numba backend tests: compile with the plugin (found through its
entry point, like any user would) and compare with the reference interpreter.

The generated modules and their machine code are cached on disk (the default cache,
``$BLOCKBUSTER_CACHE/numba`` or ``~/.cache/blockbuster/numba``), so a second run of
this suite compiles nothing. Most test programs are small, so their kernels are
plain loops (the backend only parallelises kernels with enough work); tests that
need the ``prange`` path ask for it with ``parallel=True``.
"""

import numpy as np
import pytest

from blockbuster.backends.reference import backend as reference
from blockbuster.backends.registry import get_backend

from helpers_numba import assert_close, program


@pytest.fixture(scope="session")
def numba_backend():
    return get_backend("numba")


@pytest.fixture
def check(numba_backend):
    """``check(text or program, rtol=..., parallel=..., **inputs)``: run on both
    backends, assert they agree, return the Numba outputs."""

    def run(prog, rtol=2e-5, parallel=None, dtype=np.float32, **inputs):
        p = program(prog) if isinstance(prog, str) else prog
        compiled = numba_backend.compile(p, parallel=parallel, dtype=dtype)
        got = compiled(**inputs)
        want = reference.compile(p, dtype=dtype)(**inputs)
        assert_close(got, want, rtol=rtol)
        for out in got.values():
            assert out.dtype == np.dtype(dtype)
        return got

    return run


@pytest.fixture
def rng():
    return np.random.default_rng(20240607)
