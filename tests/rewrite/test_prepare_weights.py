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


# LayerNorm(X)·W as fusion leaves it before preparation: one meanvar over K whose
# passengers are the column sums of beta·W and gamma·W (weights only) beside the dot.
FUSED_LN = f"""
program ln
dim M = {M} block 16
dim K = {K} block 32
dim N = {N} block 16
input X[M, K]
weight gamma[K]
weight beta[K]
weight W[K, N]
output Y[M, N]
kernel Y for m in M, n in N:
  let t = meanvar(k in K: X[m, k], colsum(rowscale(beta[k], W[k, n])), dot(X[m, k], rowscale(gamma[k], W[k, n])), colsum(rowscale(gamma[k], W[k, n])))
  let mu = mul(t.1, recip(max(t.0, 1.0)))
  let rstd = rsqrt(add(mul(t.2, recip(max(t.0, 1.0))), 1e-05))
  Y[m, n] = colshift(t.3, rowscale(rstd, add(t.4, outer(neg(mu), t.5))))
"""


def _layernorm_matmul_f64(x):
    d = {n: v.astype(np.float64) for n, v in x.items()}
    xm = d["X"]
    norm = (xm - xm.mean(1, keepdims=True)) / np.sqrt(xm.var(1, keepdims=True) + 1e-5)
    return (norm * d["gamma"] + d["beta"]) @ d["W"]


def test_weight_only_passengers_of_a_fused_reduction_are_prepared():
    program = parse_program(FUSED_LN)
    (kernel,) = program.kernels
    (fused,) = [n for n in kernel.stores[0].value.walk() if n.op == "reduce"]
    passengers = [a for a in find_prepare_weights(program) if a.before is fused]
    # The two column sums; not the head (X) nor the dot (it reads X).
    assert len(passengers) == 2
    rng = np.random.default_rng(5)
    x = {"X": (rng.standard_normal((M, K)) * 3 + 1e3).astype(np.float32),   # row means 1e3
         "gamma": rng.standard_normal(K).astype(np.float32),
         "beta": rng.standard_normal(K).astype(np.float32),
         "W": rng.standard_normal((K, N)).astype(np.float32)}
    want = _layernorm_matmul_f64(x)
    for app in passengers:
        prepared = app.build()
        verify(prepared)
        prep, main = prepared.kernels
        assert [d for _, d in prep.loops] == ["N"]          # one column sum per block
        (rest,) = [n for n in main.stores[0].value.walk() if n.op == "reduce"]
        assert rest.attr.combiner == "meanvar" and len(rest.args) == len(fused.args) - 1
        out = compile_program(prepared)(dict(x))["Y"]
        assert np.abs(out - want).max() <= 1e-4 * np.abs(want).max()
    # Both prepared one after the other: the tile keeps the statistics and the dot.
    once = passengers[0].build()
    again = [a for a in find_prepare_weights(once) if a.before is not None
             and a.before.op == "reduce" and a.before.attr.combiner == "meanvar"]
    twice = again[0].build()
    verify(twice)
    main = twice.kernels[-1]
    (rest,) = [n for n in main.stores[0].value.walk() if n.op == "reduce"]
    assert len(rest.args) == 2                              # X, and the dot
    out = compile_program(twice)(dict(x))["Y"]
    assert np.abs(out - want).max() <= 1e-4 * np.abs(want).max()


# gamma·W prepared already (prep1), and a column sum of it still in the per-call
# kernel: what fusion leaves when gamma·W is prepared before its column sums are.
CHAINED = f"""
program chained
dim M = {M} block 16
dim K = {K} block 32
dim N = {N} block 16
input X[M, K]
weight gamma[K]
weight W[K, N]
output Y[M, N]
array prep1[K, N]
kernel prep1 for k in K, n in N:
  prep1[k, n] = rowscale(gamma[k], W[k, n])
kernel Y for m in M, n in N:
  Y[m, n] = add(sum(k in K: dot(X[m, k], prep1[k, n])), outer(sum(k in K: rowsum(X[m, k])), sum(k in K: colsum(prep1[k, n]))))
"""


def test_a_sum_of_a_prepared_array_is_prepared_after_it():
    from blockbuster.cost.hardware import DEFAULT_HARDWARE
    from blockbuster.cost.model import cost
    from blockbuster.ir.prep import split_weight_prep
    program = parse_program(CHAINED)
    (app,) = [a for a in find_prepare_weights(program) if a.kernel == "Y"]
    assert app.before.op == "reduce" and app.before.attr.dim == "K"
    prepared = app.build()
    verify(prepared)
    # It reads prep1, so it runs after prep1's kernel (and before the kernel using it).
    names = [k.name for k in prepared.kernels]
    (new,) = set(names) - {"prep1", "Y"}
    assert names == ["prep1", new, "Y"]
    split = split_weight_prep(prepared)
    assert [k.name for k in split.per_call.kernels] == ["Y"]
    assert not any(n.op == "colsum" for n in split.per_call.kernels[0].stores[0].value.walk())
    # The cost model counts both preparation kernels as done once.
    marks = [k.weight_prep for k in cost(prepared, DEFAULT_HARDWARE).per_kernel]
    assert marks == [True, True, False]
    rng = np.random.default_rng(3)
    x = {"X": (rng.standard_normal((M, K)) * 1e3).astype(np.float32),
         "gamma": rng.standard_normal(K).astype(np.float32),
         "W": rng.standard_normal((K, N)).astype(np.float32)}
    d = {n: v.astype(np.float64) for n, v in x.items()}
    gw = d["gamma"][:, None] * d["W"]
    want = d["X"] @ gw + np.outer(d["X"].sum(1), gw.sum(0))
    out = compile_program(prepared)(dict(x))["Y"]
    assert np.abs(out - want).max() <= 1e-5 * np.abs(want).max()
