"""The unfused block programs compute what the oracles compute (run by the reference
interpreter at ragged sizes): the frontend's lowering is right before any fusion."""

from __future__ import annotations

import pytest

import blockbuster
from blockbuster.oracles import oracle
from blockbuster.validate import compare, random_inputs

CASES = [
    ("attention", {"N": 70, "S": 45, "D": 24}, {"N": 32, "S": 16, "D": 16}),
    ("layernorm_matmul", {"M": 37, "K": 50, "N": 20}, {"M": 16, "K": 16, "N": 16}),
    ("rmsnorm_ffn_swiglu", {"M": 19, "D": 40, "H": 70}, {"M": 8, "D": 16, "H": 32}),
]


@pytest.mark.parametrize("name,sizes,blocks", CASES, ids=[c[0] for c in CASES])
def test_unfused_program_matches_oracle(name, sizes, blocks):
    program = blockbuster.workload(name, blocks=blocks, **sizes)
    inputs = random_inputs(program, seed=3)
    outputs = blockbuster.compile(program, backend="reference")(**inputs)
    result = compare(outputs, oracle(name, inputs))
    assert result.passed, result
    assert result.max_rel_error < 1e-5
