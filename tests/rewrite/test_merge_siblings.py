"""merge_siblings: independent kernels that load a common array become one
multi-output kernel, over the loops they share, when the cost model says so."""

import numpy as np

import blockbuster as bb
from blockbuster.dsl.loader import default_rules
from blockbuster.frontend.builder import GraphBuilder


def _qkv(T=64, E=64, heads=4, groups=2):
    """RMSNorm, then q, k (rotary, per head) and v projections: three consumers of
    the normalised input over different loop nests (heads, groups, columns)."""
    hd = E // heads
    g = GraphBuilder("qkv")
    g.dim("T", T, 16)
    g.dim("E", E, 32)
    g.dim("QD", E, hd)
    g.dim("KD", groups * hd, hd)
    g.dim("HD", hd, hd)
    g.point_dim("H", heads)
    g.point_dim("G", groups)
    x, g1 = g.input("X", "T", "E"), g.weight("g1", "E")
    wq, wk, wv = g.weight("Wq", "E", "QD"), g.weight("Wk", "E", "KD"), g.weight("Wv", "E", "KD")
    cos, sin = g.weight("cos", "T", "HD"), g.weight("sin", "T", "HD")
    h = g.rms_norm(x, g1, 1e-6)
    q = g.rope_heads(g.matmul(h, wq), cos, sin, "H")
    k = g.rope_heads(g.matmul(h, wk), cos, sin, "G")
    return g.build(q, k, g.matmul(h, wv))


def test_q_k_v_and_rope_become_one_kernel_that_costs_less():
    program = _qkv()
    result = bb.fuse(program)
    per_call = [k for k in result.program.kernels
                if not (k.reads() and k.reads() <= set(program.weights))]
    assert len(per_call) == 1
    assert sorted(per_call[0].writes()) == sorted(program.outputs)
    assert any(s.rule == "merge_siblings" for s in result.trace)
    assert bb.cost(result.program).objective < bb.cost(
        bb.fuse(program, default_rules().without("merge_siblings")).program).objective


def test_the_merged_kernel_computes_what_the_math_says():
    program = _qkv()
    fused = bb.fuse(program).program
    rng = np.random.default_rng(7)
    shapes = {n: program.shape(n) for n in program.inputs}
    inputs = {n: (rng.normal(size=s) * (1e3 if n == "X" else 1)).astype(np.float32)
              for n, s in shapes.items()}
    got = bb.compile(fused)(**inputs)
    want = bb.compile(program)(**inputs)         # unfused float32, same inputs
    x = inputs["X"].astype(np.float64)
    h = x / np.sqrt((x ** 2).mean(axis=1, keepdims=True) + 1e-6) * inputs["g1"]
    v = h @ inputs["Wv"].astype(np.float64)
    (v_name,) = [n for n in program.outputs if program.array(n).dims == ("T", "KD")]
    np.testing.assert_allclose(got[v_name], v, rtol=1e-4, atol=1e-4 * np.abs(v).max())
    for name in program.outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4,
                                   atol=1e-4 * np.abs(want[name]).max(), err_msg=name)
