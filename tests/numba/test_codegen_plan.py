"""The cost model counts what the generated code loads.

The generator records every global load it emits with the loops around it (its load
plan); summed over those loops' iterations with the cost model's own counting
(:mod:`blockbuster.cost.counting`), that must equal the cost model's loaded bytes,
kernel by kernel. Both place nodes with one rule (:mod:`blockbuster.ir.placement`).
Two deliberate differences: the generator also hoists a load no kernel loop needs
out of the kernel's loops (a view made once per call), where the cost model's kernel
instances share nothing; plans are compared per kernel instance, and the loads as
emitted are never more. And it splits a fused reduction's bodies that its serial
loops do not change into a reduction of their own (``codegen.hoist``): the plans are
compared with the cost model's counts of the program as generated.
"""

import attrs
import numpy as np
import pytest

from blockbuster.cost import cost
from blockbuster.cost.counting import LoopSums
from blockbuster.frontend.workloads import workload
from blockbuster import fuse
from blockbuster_numba.codegen import ModuleGenerator

from helpers_numba import program

CAUSAL = """
program causal
dim H = 2 point
dim T = 21 block 4
dim D = 8 block 8
input Q[H, T, D]
input K[H, T, D]
input V[H, T, D]
output O[H, T, D]
kernel attn for h in H, i in T, d in D:
  let x = keep_ge(pos(T, i), pos(T, j), mul(dot(Q[h, i, 0], transpose(K[h, j, 0])), 0.35))
  let s = online_softmax(j in T[ : i + 1]: x, rowsum(exp(rowshift(neg(runmax(j)), x))), dot(exp(rowshift(neg(runmax(j)), x)), V[h, j, d]))
  O[h, i, d] = rowscale(recip(s.1), s.2)
"""

# Two ':' stores of maps over the same variable (one loop), a reduction holding two
# sibling map accumulators (one loop per step), a one-block reduction (no loop).
MAPS = """
program maps
dim M = 7 block 3
dim N = 10 block 4
dim K = 9 block 2
dim P = 3 block 4
input X[M, N]
input W[K, N]
input A[M]
input B[M, P]
output SAME[M, N]
output OTHER[M, N]
output HELD[M, N]
output ONE[M, P]
kernel k for i in M:
  SAME[i, :] = map(j in N: rowscale(recip(A[i]), X[i, j]))
  OTHER[i, :] = map(j in N: rowscale(A[i], exp(X[i, j])))
kernel held for i in M:
  let t = sum(k in K: map(n1 in N: colscale(colsum(W[k, n1]), X[i, n1])), map(n1 in N: colscale(colsum(W[k, n1]), exp(X[i, n1]))))
  HELD[i, :] = map(n in N: add(get(t.0, n), get(t.1, n)))
kernel one for i in M, p in P:
  ONE[i, p] = sum(q in P: mul(B[i, q], B[i, p]))
"""


# Two ':' maps sharing the loop of a reduction that sits inside an expression, and
# a held column (K, one block) that shares nothing.
SIBLINGS = """
program siblings
dim M = 7 block 3
dim N = 10 block 4
dim K = 3 block 4
input A[M, N]
input B[M, N]
input W[M, K]
output C[M, N]
output E[M, N]
output d[M]
output V[M, K]
kernel k for i in M:
  C[i, :] = map(j in N: add(A[i, j], B[i, j]))
  d[i] = mul(sum(j in N: rowsum(mul(B[i, j], A[i, j]))), 0.5)
  E[i, :] = map(j in N: exp(B[i, j]))
  V[i, :] = map(c in K: mul(W[i, c], 2.0))
"""


def fused(name, **sizes):
    return fuse(workload(name, **sizes)).program


PROGRAMS = {
    "attention": lambda: fused("attention", N=200, D=48),
    "layernorm_matmul": lambda: fused("layernorm_matmul", M=200, K=130, N=70),
    "rmsnorm_ffn_swiglu": lambda: fused("rmsnorm_ffn_swiglu", M=100, D=130, H=200),
    "paper_figure": lambda: fused("paper_figure", M=150, N=200),
    "unfused_layernorm_matmul": lambda: workload("layernorm_matmul", M=70, K=130, N=50),
    "causal": lambda: program(CAUSAL),
    "maps": lambda: program(MAPS),
    "siblings": lambda: program(SIBLINGS),
}


def planned(p, **options):
    """The module generator after generating ``p`` (each kernel's load plan)."""
    gen = ModuleGenerator(p, **options)
    gen.generate()
    return gen


@pytest.fixture(scope="module", params=sorted(PROGRAMS))
def case(request):
    return request.param, PROGRAMS[request.param]()


def as_generated(p, gen):
    """``p`` with each kernel's stores as the generator lowered them."""
    return p.evolve(kernels=tuple(attrs.evolve(k, stores=tuple(g.stores))
                                  for k, g in zip(p.kernels, gen.kernels)))


@pytest.mark.parametrize("threads, parallel", [(2, None), (64, True), (1, False)])
def test_generated_loads_are_the_modeled_loads(case, threads, parallel):
    name, p = case
    gen = planned(p, threads=threads, parallel=parallel)
    model = cost(as_generated(p, gen))
    sums = LoopSums()
    eb = model.hardware.element_bytes
    for k, kc in zip(gen.kernels, model.per_kernel):
        per_instance = sum(load.elements_per_instance(sums) for load in k.loads) * eb
        as_emitted = sum(load.elements(sums) for load in k.loads) * eb
        assert per_instance == kc.loaded_bytes, (name, kc.name)
        assert as_emitted <= per_instance, (name, kc.name)


def test_sibling_maps_share_one_load_per_block():
    # Fused LayerNorm·W holds three accumulators over the columns of W, each a map
    # over W's column blocks: one loop, so W is loaded once per step (it was three).
    gen = planned(PROGRAMS["layernorm_matmul"](), threads=2)
    (kernel,) = gen.kernels
    assert [load.array for load in kernel.loads].count("W") == 1
    maps = planned(program(MAPS), threads=2)
    assert [load.array for load in maps.kernels[0].loads].count("X") == 1
    assert [load.array for load in maps.kernels[1].loads].count("W") == 1


def test_a_stored_map_shares_its_sibling_reductions_loop():
    # The paper's figure fused: C[i, :] = map(j: A + B) beside d[i] = sum(j: rowsum(B))
    # in one kernel; the map's elements are written in the reduction's loop over j,
    # so each block of B is loaded once (as the cost model counts it).
    p = PROGRAMS["paper_figure"]()
    (kernel,) = planned(p, threads=2).kernels
    assert sorted(load.array for load in kernel.loads) == ["A", "B"]
    assert cost(p).global_bytes == cost(p).compulsory_bytes


def test_a_load_no_kernel_loop_needs_is_hoisted_out_of_them():
    # B[0, 0] (one-block K and N) is the same block in every instance of the kernel:
    # the cost model counts it once per instance, the generated code loads it once.
    p = program("""
        program mm
        dim M = 9 block 2
        dim K = 1 block 4
        dim N = 1 block 3
        input A[M, K]
        input B[K, N]
        output C[M, N]
        kernel mm for i in M, j in N:
          C[i, j] = sum(k in K: dot(A[i, k], B[k, j]))
        """)
    (kernel,) = planned(p, threads=2, parallel=True).kernels
    b = next(load for load in kernel.loads if load.array == "B")
    assert b.loops == ()
    assert b.elements() == 1 and b.elements_per_instance() == 5
    assert cost(p).loaded_bytes == (9 + 5) * cost(p).hardware.element_bytes


def test_shared_map_loops_compute_what_the_math_says(numba_backend, rng):
    # The merged loops of MAPS (two ':' stores, two held accumulators, a one-block
    # reduction) against NumPy float64 written from the math; ragged M, N and K.
    f32 = lambda a: np.asarray(a, np.float32)          # noqa: E731
    x = f32(rng.normal(size=(7, 10)) * 3)
    w = f32(rng.normal(size=(9, 10)) * 1e3)
    a = f32(rng.uniform(0.5, 2, size=7) * 1e3)
    b = f32(rng.normal(size=(7, 3)) * 1e2)
    out = numba_backend.compile(program(MAPS))(X=x, W=w, A=a, B=b)
    x64, w64, a64, b64 = (v.astype(np.float64) for v in (x, w, a, b))
    colsums = w64.sum(axis=0)
    want = {"SAME": x64 / a64[:, None], "OTHER": a64[:, None] * np.exp(x64),
            "HELD": x64 * colsums + np.exp(x64) * colsums, "ONE": b64 * b64}
    for name, value in want.items():
        np.testing.assert_allclose(out[name], value, rtol=2e-5,
                                   atol=2e-5 * np.abs(value).max(), err_msg=name)


def test_maps_sharing_a_reductions_loop_compute_what_the_math_says(numba_backend, rng):
    p = program(SIBLINGS)
    (kernel,) = planned(p, threads=2).kernels
    assert sorted(load.array for load in kernel.loads) == ["A", "B", "W"]
    f32 = lambda a: np.asarray(a, np.float32)          # noqa: E731
    a = f32(rng.normal(size=(7, 10)) * 1e3)
    b = f32(rng.normal(size=(7, 10)) * 3)
    w = f32(rng.normal(size=(7, 3)) * 1e4)
    out = numba_backend.compile(p)(A=a, B=b, W=w)
    a64, b64, w64 = (v.astype(np.float64) for v in (a, b, w))
    want = {"C": a64 + b64, "E": np.exp(b64), "d": 0.5 * (a64 * b64).sum(axis=1),
            "V": 2 * w64}
    for name, value in want.items():
        np.testing.assert_allclose(out[name], value, rtol=2e-5,
                                   atol=2e-5 * np.abs(value).max(), err_msg=name)
