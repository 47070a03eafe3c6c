"""The built-in workloads on the Triton backend, unfused and fused for the backend's
own GPU description, against the float64 NumPy oracles (``blockbuster/oracles.py``,
written from the math), with the tolerances of the conformance suite: ragged sizes
and one row, attention logits of ±1e4, norm rows with mean 1e3, and a small Llama
decoder layer (RoPE, causal grouped-query attention, SwiGLU)."""

import functools

import numpy as np
import pytest

import blockbuster as bb
from blockbuster.frontend.workloads import workload
from blockbuster.oracles import oracle
from blockbuster.validate import (DEFAULT_TOLERANCE, compare, random_inputs,
                                  tolerance_from_baseline)
from blockbuster_triton import gpu_hardware

# (workload, sizes, blocks[, GPU]): no size is a multiple of its block; one-row cases.
# Fused for the backend's GPU description, or the one named (where fusing pays).
CASES = [
    ("attention", {"N": 40, "D": 20}, {"N": 16, "S": 16, "D": 16}),
    ("attention", {"N": 1, "S": 21, "D": 16}, {"S": 16}),
    ("layernorm_matmul", {"M": 20, "K": 40, "N": 24}, {"M": 16, "K": 16, "N": 16}),
    ("layernorm_matmul", {"M": 1, "K": 20, "N": 9}, {"K": 16}),
    ("rmsnorm_ffn_swiglu", {"M": 20, "D": 24, "H": 40}, {"M": 16, "D": 16, "H": 16}),
    ("paper_figure", {"M": 20, "N": 40}, {"M": 16, "N": 16}, "rtx4090"),
    ("llama_block", {"T": 12, "E": 16, "F": 16, "NH": 2, "KVH": 1},
     {"T": 8, "E": 16, "F": 16}),
]


@functools.lru_cache(maxsize=None)
def programs(index: int, hardware):
    name, sizes, blocks, *gpu = CASES[index]
    unfused = workload(name, blocks=dict(blocks), **sizes)
    hardware = gpu_hardware(gpu[0]) if gpu else hardware
    return unfused, bb.fuse(unfused, hardware=hardware).program


def errors(backend, index, inputs):
    unfused, fused = programs(index, backend.hardware)
    want = oracle(CASES[index][0], inputs)
    return tuple(compare(backend.compile(p)(inputs), want) for p in (unfused, fused))


def _id(case):
    return case[0] + "-" + ",".join(f"{k}={v}" for k, v in case[1].items())


@pytest.mark.parametrize("index", range(len(CASES)), ids=[_id(c) for c in CASES])
def test_workload_unfused_and_fused_match_the_oracle(triton_backend, index):
    unfused, fused = programs(index, triton_backend.hardware)
    assert len(fused.kernels) < len(unfused.kernels)
    base, result = errors(triton_backend, index, random_inputs(unfused, seed=3))
    assert base.passed and base.tolerance == DEFAULT_TOLERANCE, base
    assert result.passed, result
    assert result.max_rel_error <= tolerance_from_baseline(base.max_rel_error), (result, base)


def test_attention_logits_of_magnitude_1e4(triton_backend):
    # exp of these logits overflows float32 unless shifted by the (running) row max.
    unfused, fused = programs(0, triton_backend.hardware)
    assert "online_softmax" in str(fused)
    inputs = random_inputs(unfused, seed=5)
    inputs["Q"] *= 100
    inputs["K"] *= 100
    q, k = (inputs[n].astype(np.float64) for n in ("Q", "K"))
    assert np.abs(q @ k.T / np.sqrt(20)).max() > 1e4
    base, result = errors(triton_backend, 0, inputs)
    assert np.isfinite(result.max_rel_error) and base.max_rel_error < 1e-2, (result, base)
    assert result.max_rel_error <= tolerance_from_baseline(base.max_rel_error), (result, base)


@pytest.mark.parametrize("index", [2, 4], ids=["layernorm_matmul", "rmsnorm_ffn_swiglu"])
def test_norm_rows_with_mean_1e3(triton_backend, index):
    # E[x²] - E[x]² would lose every digit of the variance in float32; the fused
    # LayerNorm merges mean and variance with Chan's update (a loop-carried combiner).
    unfused, fused = programs(index, triton_backend.hardware)
    base, result = errors(triton_backend, index, random_inputs(unfused, seed=6, offset=1e3))
    assert base.max_rel_error < 1e-3, base
    assert result.max_rel_error <= tolerance_from_baseline(base.max_rel_error), (result, base)
