"""The ``backend`` fixture of the fuzz-found regression tests: every installed backend."""

import pytest

from helpers_fuzz import BACKENDS


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param
