"""Shared helpers of the fuzz-found regression tests: every installed backend."""

import pytest

from blockbuster.backends.registry import list_backends

#: Every backend that loads here (the reference one always; numba where installed).
BACKENDS = [b.name for b in list_backends() if b.status == "ok"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param
