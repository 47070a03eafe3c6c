"""Shared helpers for the backend tests: run program text on the reference backend."""

import textwrap

import numpy as np
import pytest

from blockbuster.backends.reference import backend as reference
from blockbuster.ir.parser import parse_program


def program(text: str):
    return parse_program(textwrap.dedent(text).strip() + "\n")


def run_text(text: str, dtype=np.float32, **inputs):
    """Parse, verify, compile and run; returns {output: array}."""
    return reference.compile(program(text), dtype=dtype)(**inputs)


@pytest.fixture
def run():
    return run_text


@pytest.fixture
def rng():
    return np.random.default_rng(20240607)
