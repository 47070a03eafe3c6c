"""A fused reduction's bodies that the serial loops do not change are split off and
computed once per instance (``codegen.hoist``): LayerNorm's row statistics no longer
run for every column block of W. Values are checked against float64 NumPy written
from the math, on ragged sizes with large row means."""

import numpy as np
import pytest

from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.frontend.workloads import workload
from blockbuster.rewrite import engine as _engine
from blockbuster_numba.codegen import ModuleGenerator
from blockbuster_numba.codegen.hoist import hoist_invariant_bodies

from helpers_numba import program

# The fused form of LayerNorm(X)·W (blocks of the default-fused workload): one
# meanvar over K holding the statistics (which use m only) and the sums that use n.
FUSED_LN = """
program ln
dim M = 70 block 32
dim K = 130 block 32
dim N = 50 block 16
input X[M, K]
input gamma[K]
input beta[K]
input W[K, N]
output Y[M, N]
kernel Y for m in M, n in N:
  let t1 = meanvar(k in K: X[m, k], colsum(rowscale(beta[k], W[k, n])), dot(X[m, k], rowscale(gamma[k], W[k, n])), colsum(rowscale(gamma[k], W[k, n])))
  let mu = mul(t1.1, recip(max(t1.0, 1.0)))
  let rstd = rsqrt(add(mul(t1.2, recip(max(t1.0, 1.0))), 1e-05))
  Y[m, n] = colshift(t1.3, rowscale(rstd, add(t1.4, outer(neg(mu), t1.5))))
"""

ATTENTION = """
program att
dim N = 40 block 16
dim S = 40 block 16
dim D = 8 block 8
input Q[N, D]
input K[S, D]
input V[S, D]
output O[N, D]
kernel O for i in N, d in D:
  let x = dot(Q[i, 0], transpose(K[j, 0]))
  let s = online_softmax(j in S: x, rowsum(exp(rowshift(neg(runmax(j)), x))), dot(exp(rowshift(neg(runmax(j)), x)), V[j, d]))
  O[i, d] = rowscale(recip(s.1), s.2)
"""


def _reduces(stores):
    return [n for s in stores for n in s.value.walk() if n.op == "reduce"]


def test_the_statistics_split_off_from_the_sums_that_use_n():
    p = program(FUSED_LN)
    (kernel,) = p.kernels
    split = _reduces(hoist_invariant_bodies(kernel.stores, ("n",)))
    assert sorted(r.attr.combiner for r in split) == ["meanvar", "sum"]
    stats = next(r for r in split if r.attr.combiner == "meanvar")
    sums = next(r for r in split if r.attr.combiner == "sum")
    assert len(stats.args) == 1 and "n" not in stats.free_vars     # X[m, k] alone
    assert len(sums.args) == 3 and "n" in sums.free_vars
    # Both serial, rows inside: the column sums of the weights do not use m.
    assert _reduces(hoist_invariant_bodies(kernel.stores, ("m", "n"))) == split
    by_rows = _reduces(hoist_invariant_bodies(kernel.stores, ("n", "m")))
    w_sums = next(r for r in by_rows if r.attr.combiner == "sum")
    assert len(w_sums.args) == 2 and "m" not in w_sums.free_vars
    # Nothing serial, or no body using it: unchanged.
    assert hoist_invariant_bodies(kernel.stores, ()) == list(kernel.stores)
    assert hoist_invariant_bodies(kernel.stores, ("z",)) == list(kernel.stores)


def test_an_online_softmax_is_never_split():
    # Its passengers are rescaled by the running max of its head: they cannot run
    # apart from it, even where the head would be invariant.
    (kernel,) = program(ATTENTION).kernels
    assert hoist_invariant_bodies(kernel.stores, ("d",)) == list(kernel.stores)


def test_the_generated_kernel_computes_the_statistics_outside_the_column_loop():
    gen = ModuleGenerator(program(FUSED_LN), threads=1, parallel=False)
    source = gen.generate()
    column_loop = source.index("# n in N")
    stats = source.index("# meanvar(k in K)")
    assert stats < column_loop


@pytest.mark.parametrize("threads, parallel", [(1, False), (2, True)])
def test_layernorm_matmul_with_serial_column_blocks_matches_float64(numba_backend, threads,
                                                                     parallel):
    # Ragged M, K and N; several column blocks of N run serially inside each instance.
    p = _engine.fuse(workload("layernorm_matmul", M=70, K=130, N=50,
                              blocks={"M": 32, "K": 32, "N": 16}),
                     hardware=DEFAULT_HARDWARE).program
    rng = np.random.default_rng(7)
    x = (1e3 + 3.0 * rng.standard_normal((70, 130))).astype(np.float32)   # row means 1e3
    gamma = rng.standard_normal(130).astype(np.float32)
    beta = rng.standard_normal(130).astype(np.float32)
    w = rng.standard_normal((130, 50)).astype(np.float32)
    compiled = numba_backend.compile(p, parallel=parallel, threads=threads)
    got = compiled(X=x, gamma=gamma, beta=beta, W=w)["Y"]
    xd = x.astype(np.float64)
    norm = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5)
    want = (norm * gamma + beta) @ w.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4 * np.abs(want).max())
