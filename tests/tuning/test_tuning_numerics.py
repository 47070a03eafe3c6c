"""A tuned program computes what the untuned one does: outputs of programs compiled
at the chosen blocks match float64 NumPy written from the math, at ragged sizes and
with large-magnitude inputs."""

import numpy as np
import pytest
from helpers_tuning import attention_f64, blocks_of, rmsnorm_ffn_swiglu_f64

import blockbuster as bb


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path / "cache"))


def rel_error(got, want):
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / np.max(np.abs(want)))


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_tuned_attention_matches_float64(backend):
    sizes = {"N": 203, "D": 24}
    program = bb.workload("attention", **sizes)
    fused = bb.fuse(program, hardware=backend).program
    compiled = bb.compile(fused, backend=backend)          # tuned (model, the suite's mode)
    chosen = blocks_of(compiled.program)
    assert chosen != blocks_of(fused)                     # re-derived at other blocks
    assert 203 % chosen["N"]                              # a ragged last row block
    rng = np.random.default_rng(3)
    # Scaled inputs: logits of a few hundred stress the online softmax.
    q, k, v = (rng.standard_normal((203, 24)).astype(np.float32) * s for s in (12, 12, 100))
    got = compiled(Q=q, K=k, V=v)["O"]
    assert rel_error(got, attention_f64(q, k, v)) < 1e-4


def test_tuned_rmsnorm_ffn_matches_float64():
    sizes = {"M": 77, "D": 90, "H": 130}
    fused = bb.fuse(bb.workload("rmsnorm_ffn_swiglu", **sizes)).program
    compiled = bb.compile(fused)
    chosen = blocks_of(compiled.program)
    assert chosen != blocks_of(fused) and 77 % chosen["M"]      # ragged rows
    rng = np.random.default_rng(4)
    a = {"X": rng.standard_normal((77, 90)) * 50 + 1e3,          # row means 1e3
         "g": rng.standard_normal(90), "W1": rng.standard_normal((90, 130)) * 0.1,
         "W3": rng.standard_normal((90, 130)) * 0.1, "W2": rng.standard_normal((130, 90))}
    a = {n: x.astype(np.float32) for n, x in a.items()}
    assert rel_error(compiled(**a)["Y"], rmsnorm_ffn_swiglu_f64(**a)) < 1e-4


def test_compile_keeps_hand_set_blocks_and_foreign_programs():
    p = bb.workload("attention", N=100, D=16, blocks={"N": 24})
    assert bb.compile(p).program is p                      # blocks given: not tuned
    text = bb.format_program(bb.workload("attention", N=100, D=16))
    parsed = bb.parse_program(text)                        # no origin: as it is
    assert bb.compile(parsed).program is parsed
    plain = bb.workload("attention", N=100, D=16)
    assert bb.compile(plain, tune="off").program is plain
