"""Numerical safety, beyond the paper: the default rules give an online softmax with a
running max and a Welford/Chan variance; the paper's rule set (paper.bbr) does not.
Float32 execution (reference interpreter) against the float64 oracle."""

import numpy as np
import pytest

from blockbuster.backends.reference import run_program
from blockbuster.dsl.loader import default_rules, load_rules, shipped_rulesets_dir
from blockbuster.frontend.workloads import workload
from blockbuster.oracles import oracle
from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.rewrite import engine as _engine
from blockbuster.validate import compare, random_inputs


def fuse(program, *args, **kwargs):
    """The engine, for the default hardware (the reference backend's)."""
    return _engine.fuse(program, *args, hardware=DEFAULT_HARDWARE, **kwargs)

PAPER = load_rules(shipped_rulesets_dir() / "paper.bbr")


def _run(program, rules, inputs):
    fused = fuse(program, rules).program
    assert len(fused.kernels) == 1
    with np.errstate(all="ignore"):
        return fused, run_program(fused, inputs)


def _huge_logit_inputs(program):
    x = random_inputs(program, seed=1)
    x["Q"] *= 55.0
    x["K"] *= 55.0
    logits = x["Q"].astype(np.float64) @ x["K"].T.astype(np.float64) / np.sqrt(x["Q"].shape[1])
    assert np.abs(logits).max() >= 1e4          # the case the issue names
    return x


def test_default_attention_keeps_a_running_max_and_stays_accurate_at_logits_of_1e4():
    program = workload("attention", N=200, S=150, D=64)
    x = _huge_logit_inputs(program)
    fused, out = _run(program, default_rules(), x)
    assert "online_softmax" in str(fused) and "runmax" in str(fused)
    v = compare(out, oracle("attention", x))
    assert np.all(np.isfinite(out["O"]))
    assert v.passed and v.max_rel_error < 1e-4, v


def test_paper_attention_overflows_at_the_same_logits():
    program = workload("attention", N=200, S=150, D=64)
    x = _huge_logit_inputs(program)
    fused, out = _run(program, PAPER, x)
    assert "runmax" not in str(fused)
    assert not np.all(np.isfinite(out["O"]))


def _shifted_rows(program, mean):
    x = random_inputs(program, seed=2)
    x["X"] += np.float32(mean)
    return x


def test_default_layernorm_uses_chan_and_is_accurate_for_rows_with_mean_1e3():
    program = workload("layernorm_matmul", M=100, K=300, N=70)
    x = _shifted_rows(program, 1e3)
    fused, out = _run(program, default_rules(), x)
    assert "meanvar(" in str(fused)
    # Inputs of 1e3 carry ~6e-5 of float32 rounding each, amplified by 1/sigma ~ 1:
    # the float32 floor here is ~3e-4, far above the ordinary-scale tolerance.
    v = compare(out, oracle("layernorm_matmul", x), tolerance=1e-3)
    assert v.passed, v


def test_paper_layernorm_loses_digits_for_rows_with_mean_1e3():
    program = workload("layernorm_matmul", M=100, K=300, N=70)
    x = _shifted_rows(program, 1e3)
    fused, out = _run(program, PAPER, x)
    assert "meanvar(" not in str(fused)
    v = compare(out, oracle("layernorm_matmul", x))
    assert not v.passed and v.max_rel_error > 1e-2, v


@pytest.mark.parametrize("name,sizes,blocks", [
    ("attention", dict(N=130, S=97, D=48), dict(N=32, S=32, D=16)),
    ("layernorm_matmul", dict(M=45, K=70, N=33), dict(M=16, K=32, N=16)),
    ("rmsnorm_ffn_swiglu", dict(M=21, D=50, H=45), dict(M=16, D=16, H=16)),
])
def test_fused_matches_the_oracle_at_ragged_sizes(name, sizes, blocks):
    program = workload(name, blocks=blocks, **sizes)
    x = random_inputs(program, seed=4)
    fused = fuse(program).program
    assert len(fused.kernels) == 1
    assert fused.intermediates == ()
    v = compare(run_program(fused, x), oracle(name, x))
    assert v.passed, v


VARIANCE_AROUND_ANOTHER_MEAN = """program varz
dim N = 32 block 16
dim K = 70 block 16
input X[N, K]
input Z[N, K]
output Y[N]
output V[N]
array mz[N]
array mx[N]
kernel mz for n in N:
  mz[n] = mul(sum(k in K: rowsum(Z[n, k])), 0.014285714285714285)
kernel mx for n in N:
  mx[n] = mul(sum(k in K: rowsum(X[n, k])), 0.014285714285714285)
kernel Y for n in N:
  Y[n] = sum(k in K: rowsum(square(rowshift(neg(mz[n]), X[n, k]))))
kernel V for n in N:
  V[n] = sum(k in K: rowsum(square(rowshift(neg(mx[n]), X[n, k]))))
"""


def test_chan_applies_around_the_mean_of_the_same_values_only():
    """Squared deviations of X's rows around the row mean of another array Z close
    to them: Chan's identity computes s/n - m, which cancels at the scale of the
    data (2e-2 relative error where the two-pass sum is exact). Around X's own mean
    (V) it applies, as in LayerNorm; around Z's (Y) the two-pass form stays."""
    from blockbuster.ir.parser import parse_program
    program = parse_program(VARIANCE_AROUND_ANOTHER_MEAN)
    rng = np.random.default_rng(0)
    x = {"X": (1000 + 1e-3 * rng.standard_normal((32, 70))).astype(np.float32),
         "Z": np.full((32, 70), 1000.0078125, np.float32)}
    fused = fuse(program).program
    assert "meanvar(" in str(fused)               # V's variance, by Chan
    out = run_program(fused, x)
    X, Z = x["X"].astype(np.float64), x["Z"].astype(np.float64)
    want_y = ((X - Z.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    want_v = ((X - X.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    assert np.max(np.abs(out["Y"] - want_y) / np.abs(want_y).max()) < 1e-4
    assert np.max(np.abs(out["V"] - want_v) / np.abs(want_v).max()) < 1e-2


COLUMN_SHIFT = """program colshift_cancel
dim K = 64 block 16
dim N = 40 block 16
input X[K, N]
input Z[K, N]
output Y[N]
kernel Y for n in N:
  Y[n] = colsum(sum(k in K: colshift(neg(mul(colsum(Z[k, n]), 0.0625)), X[k, n])))
"""


def test_a_sum_of_shifted_blocks_is_not_split_where_the_shift_is_data():
    """Column sums of X minus each row block's column mean of Z, X and Z close: the
    sum of (a + v) split into Σa + Σv subtracted two sums of ~4e3 (6e-3 relative
    error where the unsplit sum is exact). sum_colshift now takes a shift computed
    from the weights alone; LayerNorm·W's beta·W still is (its fused traffic is
    unchanged)."""
    from blockbuster.ir.parser import parse_program
    program = parse_program(COLUMN_SHIFT)
    rng = np.random.default_rng(0)
    x = {"X": (1000 + 1e-2 * rng.standard_normal((64, 40))).astype(np.float32),
         "Z": np.full((64, 40), 1000.0, np.float32)}
    out = run_program(fuse(program).program, x)
    X, Z = x["X"].astype(np.float64), x["Z"].astype(np.float64)
    blocks = [slice(i, i + 16) for i in range(0, 64, 16)]
    want = sum((X[b] - Z[b].mean(axis=0)).sum(axis=0) for b in blocks)
    assert np.max(np.abs(out["Y"] - want)) <= 1e-4 * np.abs(want).max()
    ln = workload("layernorm_matmul", M=100, K=300, N=70)
    fused = fuse(ln).program
    assert any(step.rule == "sum_colshift" for step in fuse(ln).trace)
    assert len(fused.kernels) == 1
