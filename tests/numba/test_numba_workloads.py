"""The built-in workloads on the Numba backend, fused and unfused, against the float64
NumPy oracles and the reference interpreter: default, ragged, one-block and one-row
sizes, and inputs of large magnitude (attention logits of ±1e4, LayerNorm rows with
mean 1e3 and unit spread)."""

import numpy as np
import pytest

from blockbuster.backends.reference import backend as reference
from blockbuster.frontend.workloads import workload
from blockbuster.oracles import oracle
from blockbuster.rewrite.engine import fuse
from blockbuster.validate import compare, random_inputs

from helpers_numba import assert_close

SIZES = {
    "attention": [
        ({}, {}),                                   # 256, blocks of 64
        ({"N": 200}, {"N": 64, "S": 64}),           # ragged (S follows N)
        ({"N": 48, "D": 16}, {}),                   # one block everywhere: no loops
        ({"N": 1, "S": 70}, {"S": 32}),             # one query row, ragged keys
    ],
    "layernorm_matmul": [
        ({}, {}),
        ({"M": 200, "K": 100, "N": 130}, {}),
        ({"M": 32, "K": 48, "N": 16}, {}),
        ({"M": 1, "K": 70, "N": 9}, {"K": 32}),
    ],
    "rmsnorm_ffn_swiglu": [
        ({}, {}),
        ({"M": 70, "D": 100, "H": 130}, {}),
        ({"M": 16, "D": 32, "H": 48}, {}),
        ({"M": 1, "D": 70, "H": 40}, {"D": 32, "H": 16}),
    ],
}
CASES = [(name, sizes, blocks) for name, cases in SIZES.items() for sizes, blocks in cases]
#: Unfused programs (one kernel per operator, so many kernels to compile) at the ragged
#: and one-row sizes only: they exercise the same operators at every size.
UNFUSED = [c for c in CASES if c[1] in (SIZES[c[0]][1][0], SIZES[c[0]][3][0])]


def _ids(case):
    name, sizes, blocks = case
    text = ",".join(f"{k}={v}" for k, v in sizes.items()) or "default"
    if blocks:
        text += "/" + ",".join(f"b{k}={v}" for k, v in blocks.items())
    return f"{name}-{text}"


@pytest.mark.parametrize("case, fused",
                         [(c, True) for c in CASES] + [(c, False) for c in UNFUSED],
                         ids=[_ids(c) + "-fused" for c in CASES]
                         + [_ids(c) + "-unfused" for c in UNFUSED])
def test_workload_matches_oracle_and_reference(numba_backend, case, fused):
    name, sizes, blocks = case
    program = workload(name, blocks=blocks, **sizes)
    if fused:
        program = fuse(program).program
        assert len(program.kernels) < len(workload(name, blocks=blocks, **sizes).kernels)
    inputs = random_inputs(program, seed=3)
    compiled = numba_backend.compile(program)
    got = compiled(inputs)
    result = compare(got, oracle(name, inputs), tolerance=1e-5)
    assert result.passed, result
    assert_close(got, reference.compile(program)(inputs), rtol=2e-6)


@pytest.mark.parametrize("name", list(SIZES))
def test_fused_workloads_in_parallel_with_ragged_blocks(numba_backend, name):
    sizes = {"attention": {"N": 200}, "layernorm_matmul": {"M": 330, "K": 100, "N": 130},
             "rmsnorm_ffn_swiglu": {"M": 330, "D": 100, "H": 130}}[name]
    program = fuse(workload(name, **sizes)).program
    compiled = numba_backend.compile(program, parallel=True)
    assert "prange(" in compiled.source
    inputs = random_inputs(program, seed=4)
    result = compare(compiled(inputs), oracle(name, inputs), tolerance=1e-5)
    assert result.passed, result


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_attention_logits_of_magnitude_1e4(numba_backend, fused):
    # Q and K scaled by 100: logits Q·Kᵀ/√D have a spread of ~1e4. exp of them
    # overflows float32 unless every exponent is shifted by the running row max.
    program = workload("attention", N=256, blocks={"N": 64, "S": 64})
    if fused:
        program = fuse(program).program
        assert "online_softmax" in str(program)
    inputs = random_inputs(program, seed=5)
    inputs["Q"] *= 100
    inputs["K"] *= 100
    q, k = (inputs[n].astype(np.float64) for n in ("Q", "K"))
    assert np.abs(q @ k.T / 8).max() > 1e4
    got = numba_backend.compile(program)(inputs)
    assert np.isfinite(got["O"]).all()
    want = oracle("attention", inputs)
    result = compare(got, want)
    assert result.passed, result
    # As accurate as float32 allows: the logits themselves carry ~1e-3 of rounding
    # error at this magnitude, and the reference interpreter (float32) is no closer.
    floor = compare(reference.compile(program)(inputs), want).max_rel_error
    assert result.max_rel_error <= 1.5 * floor + 1e-6, (result, floor)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_layernorm_rows_with_large_mean(numba_backend, fused):
    # Rows with mean 1e3 and unit spread: E[x²] - E[x]² would lose every digit in
    # float32; the fused program uses Chan's mean/variance merge instead.
    program = workload("layernorm_matmul", M=128, K=256, N=64)
    if fused:
        program = fuse(program).program
        assert "meanvar" in str(program)
    inputs = random_inputs(program, seed=6)
    inputs["X"] = inputs["X"] + np.float32(1e3)
    got = numba_backend.compile(program)(inputs)
    result = compare(got, oracle("layernorm_matmul", inputs), tolerance=1e-3)
    assert result.passed, result
    # The same inputs without the offset give the same normalised output.
    shifted = dict(inputs, X=inputs["X"] - np.float32(1e3))
    base = numba_backend.compile(program)(shifted)
    np.testing.assert_allclose(got["Y"], base["Y"], atol=2e-3 * np.abs(base["Y"]).max())


def test_llama_block_fused(numba_backend):
    # A whole decoder layer (RoPE, grouped-query causal attention, SwiGLU) fused: no
    # part of the generator is specific to the three small workloads.
    name = "llama_block"
    program = workload(name)
    fused = fuse(program).program
    assert len(fused.kernels) < len(program.kernels)
    inputs = random_inputs(program, seed=7)
    got = numba_backend.compile(fused, parallel=False)(inputs)
    result = compare(got, oracle(name, inputs), tolerance=1e-4)
    assert result.passed, result
