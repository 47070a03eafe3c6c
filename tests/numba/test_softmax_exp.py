"""Which exp the generated kernels call. An online softmax's terms exp(x - runmax(x))
take the flushing exp (``exp_ftz32``: one multiply less; the terms are at most 1 and
only summed, so a term under 2^-125 of the row's largest is lost in the sums whether
flushed or not). Every other exp is the exact one: a stored softmax keeps its tiny
(subnormal) probabilities as NumPy's float32 does."""

import numpy as np

import blockbuster as bb
from blockbuster.frontend.builder import GraphBuilder
from blockbuster.frontend.workloads import workload
from blockbuster_numba import backend


def _fused(program):
    return bb.fuse(program, hardware=backend.hardware).program


def test_online_softmax_terms_flush_and_its_rescaling_does_not():
    compiled = bb.compile(_fused(workload("attention", N=70, S=90, D=16,
                                          blocks={"N": 32, "S": 32, "D": 16})),
                          backend=backend, tune="off")
    lines = [line.strip() for line in compiled.run.source.splitlines()]
    terms = [line for line in lines if "exp_ftz_(" in line and "=" in line
             and not line.startswith("from ")]
    assert len(terms) == 1 and "neg_r" in terms[0], terms      # x - runmax, per element
    assert any(line.startswith("alpha") and "exp_(" in line for line in lines)
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((n, 16)).astype(np.float32) for n in (70, 90, 90))
    q *= 40.0                           # logits spread over ±1e3: most terms underflow
    got = compiled(Q=q, K=k, V=v)["O"]
    s = q.astype(np.float64) @ k.T.astype(np.float64) / 4.0
    p = np.exp(s - s.max(1, keepdims=True))
    want = (p / p.sum(1, keepdims=True)) @ v.astype(np.float64)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_a_stored_softmax_keeps_its_subnormal_probabilities():
    g = GraphBuilder("sm")
    g.dim("M", 5, 4), g.dim("N", 37, 16)
    compiled = bb.compile(_fused(g.build(g.softmax(g.input("X", "M", "N"), name="P"))),
                          backend=backend, tune="off")
    x = np.zeros((5, 37), np.float32)
    x[:, 1] = -95.0                     # exp(-95) ~ 5.5e-42: a float32 subnormal
    x[:, 2] = -88.0                     # ~ 6e-39: subnormal too
    x[2, 5] = -1e4                      # underflows to 0 in any exp
    got = compiled(X=x)["P"]
    e = np.exp(x - x.max(1, keepdims=True))           # NumPy float32, as a user has it
    want = e / e.sum(1, keepdims=True)
    assert np.all(got[:, 1] > 0) and np.all(got[:, 2] > 0)
    np.testing.assert_allclose(got[:, 1:3], want[:, 1:3], rtol=0.02)   # subnormal digits
    assert got[2, 5] == 0.0
