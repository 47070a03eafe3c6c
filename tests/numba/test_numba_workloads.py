"""The fused built-in workloads on Numba's parallel path (``prange`` over row blocks,
ragged last blocks), against the float64 NumPy oracles. Serial runs of every workload,
fused and unfused, at ragged sizes and extreme values are in the backend-conformance
suite (tests/conformance), which runs on every backend."""

import pytest

from blockbuster.frontend.workloads import workload
from blockbuster.oracles import oracle
from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.rewrite import engine as _engine
from blockbuster.validate import compare, random_inputs


def fuse(program, *args, **kwargs):
    """The engine, for the default hardware (the reference backend's)."""
    return _engine.fuse(program, *args, hardware=DEFAULT_HARDWARE, **kwargs)


@pytest.mark.parametrize("name", ["attention", "layernorm_matmul", "rmsnorm_ffn_swiglu"])
def test_fused_workloads_in_parallel_with_ragged_blocks(numba_backend, name):
    sizes = {"attention": {"N": 200}, "layernorm_matmul": {"M": 330, "K": 100, "N": 130},
             "rmsnorm_ffn_swiglu": {"M": 330, "D": 100, "H": 130}}[name]
    program = fuse(workload(name, **sizes)).program
    compiled = numba_backend.compile(program, parallel=True)
    assert "prange(" in compiled.source
    inputs = random_inputs(program, seed=4)
    result = compare(compiled(inputs), oracle(name, inputs))
    assert result.passed, result
