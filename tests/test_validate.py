"""Validation tolerances follow the float32 error model: real float32 results pass
with a margin, and plausible bugs whose error is far below the old flat 2e-3 fail."""

import numpy as np
import pytest

from blockbuster.backends.reference import run_program
from blockbuster.dsl.loader import default_rules
from blockbuster.frontend.workloads import workload
from blockbuster.oracles import oracle
from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.rewrite import engine as _engine
from blockbuster.validate import (DEFAULT_TOLERANCE, ERROR_GROWTH, FLOAT32_FLOOR, compare,
                                  random_inputs, tolerance_from_baseline)


def fuse(program, *args, **kwargs):
    """The engine, for the default hardware (the reference backend's)."""
    return _engine.fuse(program, *args, hardware=DEFAULT_HARDWARE, **kwargs)


@pytest.fixture(scope="module")
def layernorm():
    program = workload("layernorm_matmul", M=64, K=100, N=30, blocks={"M": 32, "K": 32, "N": 16})
    inputs = random_inputs(program, seed=1)
    return program, inputs, oracle("layernorm_matmul", inputs)


def _buggy_layernorm(inputs, eps=1e-5, ddof=0):
    x = {k: v.astype(np.float64) for k, v in inputs.items()}
    X = x["X"]
    mean = X.mean(axis=1, keepdims=True)
    var = X.var(axis=1, ddof=ddof, keepdims=True)
    return {"Y": ((X - mean) / np.sqrt(var + eps) * x["gamma"] + x["beta"]) @ x["W"]}


def test_float32_results_pass_with_a_margin(layernorm):
    program, inputs, want = layernorm
    for p in (program, fuse(program, default_rules()).program):
        v = compare(run_program(p, inputs), want)
        assert v.passed and v.max_rel_error < DEFAULT_TOLERANCE / 10, v


@pytest.mark.parametrize("bug, kwargs", [
    ("eps 1e-3 instead of 1e-5", {"eps": 1e-3}),        # error ~4e-4
    ("unbiased variance", {"ddof": 1}),                  # error ~4e-3
])
def test_plausible_bugs_fail(layernorm, bug, kwargs):
    _, inputs, want = layernorm
    v = compare(_buggy_layernorm(inputs, **kwargs), want)
    assert not v.passed, (bug, v)
    assert v.max_rel_error < 5e-3     # each bug is subtle: a flat 2e-3 misses the first


def test_the_tolerance_is_the_float32_scale():
    # ~a few hundred float32 ulps: measured errors of the workloads are 2e-7..1.1e-5.
    assert 1e-5 <= DEFAULT_TOLERANCE <= 1e-4
    assert FLOAT32_FLOOR == 2 * float(np.finfo(np.float32).eps)


def test_tolerance_from_baseline_is_a_small_multiple_of_the_unfused_error():
    assert tolerance_from_baseline(1e-3) == pytest.approx(ERROR_GROWTH * 1e-3)
    assert tolerance_from_baseline(0.0) == pytest.approx(ERROR_GROWTH * FLOAT32_FLOOR)
    assert 2 <= ERROR_GROWTH <= 10


def test_non_finite_or_misshaped_outputs_never_pass():
    ref = {"Y": np.ones((3, 2))}
    assert not compare({"Y": np.array([[1, 1], [1, np.nan], [1, 1]])}, ref).passed
    assert not compare({"Y": np.ones((2, 3))}, ref).passed
    assert compare({"Y": np.ones((3, 2), np.float32)}, ref).passed


def test_run_tolerance_follows_the_unfused_float32_baseline_of_a_deep_program():
    """A wide decoder layer carries more float32 rounding than the default tolerance:
    `run` holds the fused program to ERROR_GROWTH × what NumPy in float32 achieves,
    and still fails an error above that."""
    from blockbuster.subjects import load_subject
    from blockbuster.validate import validate_outputs
    subject = load_subject("llama_block", {"T": 96, "E": 256, "F": 300, "NH": 4, "KVH": 2})
    inputs = random_inputs(subject.program, seed=0)
    exact = oracle("llama_block", inputs)
    # The oracle's NumPy math run on float32 arrays (it stays in float32).
    from blockbuster.oracles import ORACLES
    own = ORACLES["llama_block"](**{k: v.astype(np.float32) for k, v in inputs.items()})
    assert own["Y"].dtype == np.float32
    scale = np.abs(exact["Y"]).max()
    baseline = float(np.abs(own["Y"] - exact["Y"]).max() / scale)
    assert baseline > 0
    ok = validate_outputs(subject, {"Y": exact["Y"] + 2 * baseline * scale}, inputs)
    assert ok.baseline_error == pytest.approx(baseline, rel=0.5)
    assert ok.tolerance == max(DEFAULT_TOLERANCE, tolerance_from_baseline(ok.baseline_error))
    assert ok.passed
    bad = validate_outputs(subject, {"Y": exact["Y"] + 1.01 * ok.tolerance * scale}, inputs)
    assert not bad.passed


def test_non_finite_outputs_pass_exactly_where_the_reference_has_them():
    """A masked log-softmax is -inf where its logits are: the oracle says so too, and
    the finite part is compared as usual (before, any non-finite value failed, so
    `run` on masked logits always exited 1)."""
    ref = {"Y": np.array([[1.0, -np.inf], [np.nan, 2.0]])}
    assert compare({"Y": np.array([[1.0, -np.inf], [np.nan, 2.0]], np.float32)}, ref).passed
    same = compare({"Y": np.array([[1.0, -np.inf], [np.nan, 2.0 + 1e-7]])}, ref)
    assert same.passed and same.max_rel_error == pytest.approx(5e-8)
    assert not compare({"Y": np.array([[1.0, np.inf], [np.nan, 2.0]])}, ref).passed
    assert not compare({"Y": np.array([[1.0, -np.inf], [0.0, 2.0]])}, ref).passed
    assert not compare({"Y": np.array([[1.0, -np.inf], [np.nan, 2.1]])}, ref).passed
    assert not compare({"Y": np.array([[np.inf, -np.inf], [np.nan, 2.0]])}, ref).passed
    everything = {"Y": np.full((2, 2), np.nan)}
    assert compare({"Y": np.full((2, 2), np.nan)}, everything).passed


def test_non_finite_mismatches_are_counted_and_the_first_one_named():
    """The report said "NaN or inf in the float64 oracle too (matched ...)" when the
    output held numbers there (a rule turning 0/0 into 1): such values are counted
    now, and the first one is named."""
    ref = {"Y": np.array([[1.0, np.nan], [np.nan, 2.0]])}
    got = compare({"Y": np.array([[1.0, 1.0], [5.0, np.inf]])}, ref)
    assert not got.passed and got.mismatched == 3 and got.non_finite == 2
    assert got.first_mismatch == "Y[0, 1] is 1 where the reference is nan"
    fine = compare({"Y": np.array([[1.0, np.nan], [np.nan, 2.0]])}, ref)
    assert fine.passed and fine.mismatched == 0 and fine.first_mismatch is None


def test_run_validates_a_masked_log_softmax(tmp_path):
    """`run PROGRAM.bbp --inputs` with -inf logits (masked positions): -inf outputs in
    the program and the oracle alike, so validation passes (exit 0)."""
    import subprocess
    import sys
    program = tmp_path / "logsm.bbp"
    program.write_text(
        "program log_softmax\ndim M = 40 block 16\ndim S = 37 block 16\n"
        "input L[M, S]\noutput Y[M, S]\narray mx[M]\narray den[M]\n"
        "kernel rmax for m in M:\n  mx[m] = max(s in S: rowmax(L[m, s]))\n"
        "kernel rs for m in M:\n"
        "  den[m] = sum(s in S: rowsum(exp(rowshift(neg(mx[m]), L[m, s]))))\n"
        "kernel y for m in M, s in S:\n"
        "  Y[m, s] = rowshift(neg(add(mx[m], log(den[m]))), L[m, s])\n")
    logits = np.random.default_rng(0).standard_normal((40, 37)).astype(np.float32)
    logits[:, 20:] = -np.inf
    np.savez(tmp_path / "masked.npz", L=logits)
    done = subprocess.run([sys.executable, "-m", "blockbuster", "run", str(program),
                           "--inputs", str(tmp_path / "masked.npz"), "--backend",
                           "reference", "--tune", "off", "--json"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-500:] + done.stderr[-500:]
    import json
    assert json.loads(done.stdout)["validation"]["passed"]


def test_a_program_files_oracle_is_float64_and_its_baseline_float32(tmp_path):
    """`run PROGRAM.bbp` validates against the reference interpreter in float64 (the
    oracle ran the interpreter's default float32 before: a float32 reference with a
    float32 tolerance, so the reference backend always showed an error of 0)."""
    from blockbuster.subjects import load_subject
    path = tmp_path / "gram.bbp"
    path.write_text("program gram\ndim M = 37 block 16\ndim K = 300 block 64\n"
                    "input A[M, K]\noutput G[M, M]\nkernel g for i in M, j in M:\n"
                    "  G[i, j] = sum(k in K: dot(A[i, k], transpose(A[j, k])))\n")
    subject = load_subject(str(path))
    inputs = subject.make_inputs(subject.program, 0)
    a = inputs["A"].astype(np.float64) * 1e3 + 1e3
    want = a @ a.T
    got = subject.oracle({"A": a})["G"]
    assert got.dtype == np.float64
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1e-13
    base = subject.baseline({"A": a})["G"]
    assert 1e-9 < np.max(np.abs(base - want)) / np.max(np.abs(want)) < 1e-5
