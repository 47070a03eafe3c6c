"""The Triton backend's own tests. They run on the CPU under Triton's interpreter
(the plugin sets ``TRITON_INTERPRET=1`` when no CUDA GPU is found) and compiled on a
GPU when there is one: the same tests, nothing skipped. The interpreter runs each
Triton operation as NumPy on a whole block, so the sizes here are small (a few
blocks, ragged) to keep the suite fast."""

import numpy as np
import pytest

from blockbuster.backends.registry import get_backend


@pytest.fixture(scope="session")
def triton_backend():
    return get_backend("triton")   # a broken plugin fails here, with its reason


@pytest.fixture
def rng():
    return np.random.default_rng(20261201)
