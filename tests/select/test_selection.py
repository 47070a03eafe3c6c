"""Candidate selection on llama_block: correct end to end, and it scales."""

import re

import pytest

import blockbuster as bb
from blockbuster.backends.reference import run_program
from blockbuster.dsl.loader import default_rules
from blockbuster.oracles import oracle
from blockbuster.select.selection import Selector
from blockbuster.validate import compare, random_inputs


def _fused(program):
    return Selector(default_rules(), progress=False).select(program)


@pytest.mark.parametrize("layers,sizes", [
    (1, dict(T=50, E=64, F=96, NH=4, KVH=2)),      # ragged T (blocks of 16), grouped heads
    (2, dict(T=40, E=32, F=64, NH=2, KVH=1)),
])
def test_fused_llama_matches_the_oracle(layers, sizes):
    program = bb.workload("llama_block", layers=layers, **sizes)
    result = _fused(program)
    inputs = random_inputs(program, seed=5)
    v = compare(run_program(result.program, inputs), oracle("llama_block", inputs))
    assert v.passed, v
    assert len(result.program.kernels) < len(program.kernels) / 4


def test_pieces_cover_the_program_in_order_without_overlap():
    program = bb.workload("llama_block")
    result = _fused(program)
    covered = [k for piece in result.pieces for k in piece.kernels]
    assert covered == [k.name for k in program.kernels]
    assert all(piece.rules for piece in result.pieces if len(piece.kernels) > 1)


def test_no_token_by_token_intermediate_and_causal_attention_is_one_online_pass():
    program = bb.workload("llama_block", T=64)
    fused = _fused(program).program
    for name in fused.intermediates:
        dims = fused.array(name).dims
        assert dims.count("T") < 2, f"{name}{list(dims)} is a T×T array in global memory"
    text = str(fused)
    # one online pass over key blocks, skipping those above the diagonal
    assert re.search(r"online_softmax\((\w+) in T\[ : (\w+) \+ 1\]", text)
    assert bb.cost(fused).global_bytes < bb.cost(program).global_bytes / 2


def test_identical_layers_cost_one_fusion():
    one = Selector(default_rules(), progress=False)
    one.select(bb.workload("llama_block", layers=1))
    four = Selector(default_rules(), progress=False)
    four.select(bb.workload("llama_block", layers=4))
    # Only the candidates that straddle a layer boundary are new.
    assert four.fusions < 2 * one.fusions


def test_small_programs_are_fused_whole():
    result = bb.fuse(bb.workload("attention", N=100))
    assert result.pieces == () and len(result.program.kernels) == 1


def test_api_fuse_selects_for_large_programs():
    result = bb.fuse(bb.workload("llama_block"), progress=False)
    assert len(result.pieces) > 1
