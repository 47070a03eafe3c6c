"""``prepare_weights``: an expression of weights only moves into a kernel of its own,
including a sum over a whole dimension (the column sums of a weight matrix)."""

import numpy as np

from blockbuster.backends.reference import compile_program
from blockbuster.ir.parser import parse_program
from blockbuster.ir.verify import verify
from blockbuster.rewrite.actions import find_prepare_weights

M, K, N = 37, 70, 29          # ragged against the blocks 16, 32, 16

SHIFTED_MATMUL = f"""
program shifted
dim M = {M} block 16
dim K = {K} block 32
dim N = {N} block 16
input X[M, K]
weight beta[K]
weight W[K, N]
output Y[M, N]
kernel Y for m in M, n in N:
  Y[m, n] = colshift(sum(k in K{{RANGE}}: colsum(rowscale(beta[k], W[k, n]))), sum(k in K: dot(X[m, k], W[k, n])))
"""


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return {"X": (rng.standard_normal((M, K)) * 1e3).astype(np.float32),
            "beta": (rng.standard_normal(K) * 1e2).astype(np.float32),
            "W": rng.standard_normal((K, N)).astype(np.float32)}


def test_a_whole_dimension_weight_sum_is_prepared_once():
    program = parse_program(SHIFTED_MATMUL.replace("{RANGE}", ""))
    sums = [a for a in find_prepare_weights(program)
            if a.before.op == "reduce" and a.before.attr.dim == "K"]
    assert len(sums) == 1           # beta·W summed over K; the X·W sum reads an input
    prepared = sums[0].build()
    verify(prepared)
    prep = prepared.kernels[0]
    assert [d for _, d in prep.loops] == ["N"]       # one value per column block
    assert prepared.array(prep.name).dims == ("N",)
    assert "beta" not in prepared.kernels[1].reads()

    x = _inputs()
    out = compile_program(prepared)(dict(x))["Y"]
    x64 = {n: v.astype(np.float64) for n, v in x.items()}
    want = x64["X"] @ x64["W"] + x64["beta"] @ x64["W"]     # colsum(beta·W) = betaᵀW
    assert np.abs(out - want).max() <= 1e-5 * np.abs(want).max()


def test_a_partial_sum_is_not_prepared_whole():
    # Over K[ : 1] only (a bound of the range): not one value per column, not prepared
    # as a sum (its body, a function of k and n, still may be).
    program = parse_program(SHIFTED_MATMUL.replace("{RANGE}", "[ : 1]"))
    ops = {a.before.op for a in find_prepare_weights(program)}
    assert "reduce" not in ops and ops
