"""The backend-conformance suite: every test here runs on every backend registered in
the ``blockbuster.backends`` entry-point group, so a new plugin gets the whole suite by
registering. A registered backend that fails to load fails the suite (the fixture
raises); none is skipped."""

import numpy as np
import pytest

from blockbuster.backends.registry import backend_names, get_backend

from helpers_conformance import program

BACKENDS = backend_names()


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request):
    return get_backend(request.param)   # BackendError for a broken plugin: a failure


@pytest.fixture
def run(backend):
    """``run(text, dtype=np.float32, **inputs)``: compile the program text with the
    backend under test and run it; every output has the requested dtype."""

    def go(text, dtype=np.float32, **inputs):
        out = backend.compile(program(text), dtype=dtype)(**inputs)
        for name, value in out.items():
            assert value.dtype == np.dtype(dtype), name
        return out

    return go


@pytest.fixture
def rng():
    return np.random.default_rng(20240607)
