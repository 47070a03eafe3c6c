"""The CompiledProgram contract shared by every backend: how it is called, and the
one-line BackendError for each way a caller's arrays can be wrong."""

import numpy as np
import pytest

from blockbuster.backends.base import Backend, CompiledProgram
from blockbuster.backends.reference import backend as reference
from blockbuster.cost import DEFAULT_HARDWARE, Hardware
from blockbuster.errors import BackendError, BlockbusterError, IRError
from blockbuster.ir.parser import parse_program

TEXT = """
program t
dim M = 5 block 2
dim K = 7 block 3
input X[M, K]
input W[K]
output Y[M]
output Z[M, K]
array T[M, K]
kernel scale for i in M, k in K:
  T[i, k] = colscale(W[k], X[i, k])
kernel out for i in M:
  Y[i] = sum(k in K: rowsum(T[i, k]))
kernel copy for i in M, k in K:
  Z[i, k] = T[i, k]
"""


@pytest.fixture
def compiled():
    return reference.compile(parse_program(TEXT))


@pytest.fixture
def arrays(rng):
    return {"X": rng.normal(size=(5, 7)), "W": rng.normal(size=7)}


def one_line_error(call, *args, **kwargs) -> str:
    with pytest.raises(BackendError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_called_with_keywords_or_a_dict(compiled, arrays):
    assert isinstance(compiled, CompiledProgram)
    by_keyword, by_dict = compiled(**arrays), compiled(arrays)
    mixed = compiled({"X": arrays["X"]}, W=arrays["W"])
    expected = (arrays["X"] * arrays["W"]).sum(axis=1)
    for out in (by_keyword, by_dict, mixed):
        assert list(out) == ["Y", "Z"]  # outputs only, in declaration order
        np.testing.assert_allclose(out["Y"], expected, rtol=1e-5)
        assert out["Y"].dtype == np.float32


def test_metadata(compiled):
    assert compiled.backend == "reference"
    assert compiled.inputs == ("X", "W") and compiled.outputs == ("Y", "Z")
    assert isinstance(compiled.compile_seconds, float) and compiled.compile_seconds >= 0


def test_missing_input(compiled, arrays):
    message = one_line_error(compiled, X=arrays["X"])
    assert "missing input 'W'" in message and "(7,)" in message


def test_unexpected_input(compiled, arrays):
    message = one_line_error(compiled, Q=np.zeros(3), **arrays)
    assert "no input 'Q'" in message and "X, W" in message


def test_wrong_shape(compiled, arrays):
    message = one_line_error(compiled, X=arrays["X"].T, W=arrays["W"])
    assert "shape (7, 5)" in message and "X[M, K]" in message and "(5, 7)" in message


def test_input_given_twice(compiled, arrays):
    assert "twice" in one_line_error(compiled, arrays, X=arrays["X"])


def test_non_numeric_input(compiled, arrays):
    bad = np.array([["a"] * 7] * 5)
    assert "dtype" in one_line_error(compiled, X=bad, W=arrays["W"])


def test_backend_error_is_a_user_error():
    assert issubclass(BackendError, BlockbusterError)


def test_ill_formed_program_is_rejected_at_compile():
    bad = parse_program(TEXT.replace("Y[i] = sum(k in K: rowsum(T[i, k]))",
                                     "Y[i] = sum(k in K: T[i, k])"), check=False)
    with pytest.raises(IRError):
        reference.compile(bad)


SHIFTED = """
    program shifted
    dim M = 6 block 2
    input X[M]
    output Y[M]
    kernel k for i in M:
      Y[i] = X[i + 1]
    """


def test_out_of_range_load_is_refused_by_the_verifier():
    with pytest.raises(IRError, match=r"index i \+ 1 reads block 3 of M, which has 3 "
                                      r"blocks \(0\.\.2\), at i=2"):
        parse_program(SHIFTED)


def test_out_of_range_load_unchecked_is_refused_by_the_backend():
    """A program built without the verifier is still refused before it runs."""
    program = parse_program(SHIFTED, check=False)
    with pytest.raises(IRError, match="reads block 3 of M, which has 3 blocks"):
        reference.compile(program)


def test_ragged_extent_mismatch_is_rejected_before_it_runs():
    # Block 0 of M has 2 rows and block 2 only 1: the verifier refuses to store the
    # one as the other (it was a backend error at run time, and Numba read past X).
    with pytest.raises(IRError, match=r"kernel 'k'.*`X\[0\]` picks a block of M by a constant"):
        parse_program("""
            program ragged
            dim M = 5 block 2
            input X[M]
            output Y[M]
            kernel k for i in M:
              Y[i] = X[0]
            """)


def test_integer_dtype_is_refused():
    with pytest.raises(BackendError, match="floating-point"):
        reference.compile(parse_program(TEXT), dtype=np.int32)


def test_a_backend_that_forgets_an_output_is_reported():
    lazy = Backend(name="lazy", description="returns nothing",
                   compile_fn=lambda program: (lambda inputs: {}), hardware=DEFAULT_HARDWARE)
    compiled = lazy.compile(parse_program(TEXT))
    message = one_line_error(compiled, X=np.zeros((5, 7)), W=np.zeros(7))
    assert "'lazy' did not compute output 'Y'" in message


def test_a_backend_owns_a_hardware_description():
    mine = Hardware("mine", 8, 1 << 16, 1e9, 1e10, 1e11)
    b = Backend(name="x", description="d", compile_fn=lambda p: None, hardware=mine)
    assert b.hardware is mine
    # The reference interpreter is priced as the generic CPU: the public default.
    assert reference.hardware is DEFAULT_HARDWARE
    with pytest.raises(TypeError, match="hardware"):
        Backend(name="x", description="d", compile_fn=lambda p: None)
    with pytest.raises(TypeError, match="hardware"):
        Backend(name="x", description="d", compile_fn=lambda p: None, hardware=object())
