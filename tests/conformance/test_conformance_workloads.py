"""The built-in workloads on every backend, unfused and fused, against the float64
NumPy oracles (``blockbuster/oracles.py``, written from the math): ragged and one-row
sizes, large-magnitude inputs (attention logits of ±1e4, norm rows with mean 1e3), and
a small decoder layer (RoPE, grouped-query causal attention, SwiGLU, weights).

Tolerances follow the float32 error model (``blockbuster/validate.py``): at ordinary
scale every result is within ``DEFAULT_TOLERANCE``; and a fused program is never more
than ``ERROR_GROWTH`` times less accurate than the unfused float32 program on the same
inputs, which is what bounds it where the inputs themselves carry large rounding."""

import functools

import numpy as np
import pytest

from blockbuster.dsl.loader import default_rules
from blockbuster.frontend.workloads import workload
from blockbuster.oracles import oracle
from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.rewrite import engine as _engine
from blockbuster.validate import (DEFAULT_TOLERANCE, compare, random_inputs,
                                  tolerance_from_baseline)


def fuse(program, *args, **kwargs):
    """The engine, for the default hardware (the reference backend's)."""
    return _engine.fuse(program, *args, hardware=DEFAULT_HARDWARE, **kwargs)

# (workload, sizes, blocks): sizes that are not multiples of the blocks, and one row.
CASES = [
    ("attention", {"N": 200, "D": 32}, {"N": 64, "S": 64}),
    ("attention", {"N": 1, "S": 70, "D": 16}, {"S": 32}),
    ("layernorm_matmul", {"M": 100, "K": 100, "N": 70}, {"M": 32, "K": 32, "N": 32}),
    ("layernorm_matmul", {"M": 1, "K": 70, "N": 9}, {"K": 32}),
    ("rmsnorm_ffn_swiglu", {"M": 70, "D": 50, "H": 70}, {"M": 32, "D": 32, "H": 32}),
    ("rmsnorm_ffn_swiglu", {"M": 1, "D": 70, "H": 40}, {"D": 32, "H": 16}),
    # two outputs sharing the loads of B in one fused kernel (ragged, one row)
    ("paper_figure", {"M": 100, "N": 70}, {"M": 32, "N": 32}),
    ("paper_figure", {"M": 1, "N": 70}, {"N": 32}),
    # grouped-query (4 heads, 2 key/value groups), ragged T, weight preparation
    ("llama_block", {"T": 20, "E": 32, "F": 24, "NH": 4, "KVH": 2},
     {"T": 8, "E": 8, "F": 16}),
]


def _key(case):
    name, sizes, blocks = case
    return (name, tuple(sorted(sizes.items())), tuple(sorted(blocks.items())))


@functools.lru_cache(maxsize=None)
def programs(key):
    """(unfused, fused) once per case, shared by every backend."""
    name, sizes, blocks = key
    unfused = workload(name, blocks=dict(blocks), **dict(sizes))
    return unfused, fuse(unfused, default_rules()).program


def errors(backend, case, inputs):
    """Relative errors of the unfused and the fused program against the oracle."""
    unfused, fused = programs(_key(case))
    want = oracle(case[0], inputs)
    return tuple(compare(backend.compile(p)(inputs), want) for p in (unfused, fused))


def _id(case):
    name, sizes, _ = case
    return name + "-" + ",".join(f"{k}={v}" for k, v in sizes.items())


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_unfused_and_fused_match_the_oracle(backend, case):
    unfused, fused = programs(_key(case))
    assert len(fused.kernels) < len(unfused.kernels)
    inputs = random_inputs(unfused, seed=3)
    base, result = errors(backend, case, inputs)
    assert base.passed and base.tolerance == DEFAULT_TOLERANCE, base
    assert result.passed, result
    assert result.max_rel_error <= tolerance_from_baseline(base.max_rel_error), (result, base)


@pytest.mark.parametrize("n", [200, 70])
def test_attention_logits_of_magnitude_1e4(backend, n):
    # exp of these logits overflows float32 unless every exponent is shifted by the
    # row max (unfused) or the running max (fused, online softmax).
    case = ("attention", {"N": n, "D": 32}, {"N": 64, "S": 64})
    inputs = random_inputs(programs(_key(case))[0], seed=5)
    inputs["Q"] *= 100
    inputs["K"] *= 100
    q, k = (inputs[n].astype(np.float64) for n in ("Q", "K"))
    assert np.abs(q @ k.T / np.sqrt(32)).max() > 1e4
    assert "online_softmax" in str(programs(_key(case))[1])
    base, result = errors(backend, case, inputs)
    assert np.isfinite(result.max_rel_error) and np.isfinite(base.max_rel_error)
    # The logits carry ~1e-3 of float32 rounding at this scale, before any operator.
    assert base.max_rel_error < 1e-2, base
    assert result.max_rel_error <= tolerance_from_baseline(base.max_rel_error), (result, base)


@pytest.mark.parametrize("name", ["layernorm_matmul", "rmsnorm_ffn_swiglu"])
def test_norm_rows_with_mean_1e3(backend, name):
    # Rows with mean 1e3 and unit spread: E[x²] - E[x]² would lose every digit of the
    # variance in float32; the fused LayerNorm uses Chan's mean/variance merge.
    case = next(c for c in CASES if c[0] == name)
    inputs = random_inputs(programs(_key(case))[0], seed=6, offset=1e3)
    base, result = errors(backend, case, inputs)
    assert base.max_rel_error < 1e-3, base
    assert result.max_rel_error <= tolerance_from_baseline(base.max_rel_error), (result, base)
